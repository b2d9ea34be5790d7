"""Running the `rainmaker` command line in-process, as a person types it."""

from __future__ import annotations

import sys

from orchestrator import cli


def rainmaker(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of `rainmaker ARGS...` through cli.main()."""
    monkeypatch.setattr(sys, "argv", ["rainmaker", *args])
    code = 0
    try:
        cli.main()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err
