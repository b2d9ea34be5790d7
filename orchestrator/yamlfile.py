"""Load a YAML input file and remember where every field came from.

Validation errors name the field path (``hosts[1].nic.mac``); this module maps such a
path back to the line it was written on, and refuses duplicate keys, which plain
YAML loaders silently resolve to the last one (a classic way to lose a setting).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from .errors import Problem


class Located:
    """Parsed YAML data plus a map from field path to line number (1-based)."""

    def __init__(self, data: Any, lines: dict[str, int]):
        self.data = data
        self.lines = lines

    def line_of(self, path: str) -> int | None:
        # Walk up the path until something is known: a missing field is reported on
        # the line of the object that should have held it.
        while True:
            if path in self.lines:
                return self.lines[path]
            if not path:
                return None
            cut = max(path.rfind("."), path.rfind("["))
            path = path[:cut] if cut > 0 else ""


def join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else str(key)


MAX_FIELDS = 200_000  # an inventory of a rack has a few hundred


class _TooMany(Exception):
    pass


def _walk(node: yaml.Node, path: str, lines: dict[str, int], problems: list[Problem]) -> None:
    if len(lines) > MAX_FIELDS:  # aliases of aliases expand exponentially ("billion laughs")
        raise _TooMany
    lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else str(key_node)
            line = key_node.start_mark.line + 1
            if key in seen:
                problems.append(
                    Problem(
                        join(path, key),
                        f"key '{key}' appears twice (first on line {seen[key]})",
                        "keep one of them: YAML would silently use the last",
                        line,
                    )
                )
            seen[key] = line
            child = join(path, key)
            lines[child] = line
            _walk(value_node, child, lines, problems)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _walk(item, join(path, i), lines, problems)


def load(path: Path, problems: list[Problem]) -> Located | None:
    """Parse ``path``; syntax errors, duplicate keys and files that are not YAML text
    (a folder, a binary, another encoding) go to ``problems``."""
    text = read_text(path, problems)
    if text is None:
        return None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except RecursionError:  # PyYAML composes recursively
        problems.append(Problem("", "nested too deeply to be read", "check the file: it is not an input file"))
        return None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = mark.line + 1 if mark else None
        what = getattr(e, "problem", None) or str(e)
        problems.append(
            Problem(
                "", f"not valid YAML: {what}", "fix the syntax at that line (indentation, a missing ':' or quote)", line
            )
        )
        return None
    lines: dict[str, int] = {}
    try:
        if node is not None:
            _walk(node, "", lines, problems)
    except RecursionError:
        problems.append(Problem("", "nested too deeply to be read", "check the file: it is not an input file"))
        return None
    except _TooMany:
        problems.append(
            Problem("", f"more than {MAX_FIELDS:,} fields once its aliases are expanded", "write the fields out")
        )
        return None
    return Located(data, lines)


MAX_BYTES = 16 << 20  # a spec or an inventory is a few KiB


def read_text(path: Path, problems: list[Problem]) -> str | None:
    """The file's text (UTF-8, as YAML 1.2 and every editor's default), or None with
    the reason in ``problems``: each command is given such files by a person, who may
    give a folder, a program or a file saved in another encoding by mistake."""
    if path.is_dir():
        problems.append(Problem("", "this is a folder, not a file", "give the path of the YAML file in it"))
        return None
    try:
        with open(path, "rb") as f:  # at most MAX_BYTES: /dev/zero is a path too
            data = f.read(MAX_BYTES + 1)
    except OSError as e:
        problems.append(Problem("", f"cannot read the file: {e.strerror}", "check the path and its permissions"))
        return None
    if len(data) > MAX_BYTES:
        problems.append(
            Problem("", f"larger than {MAX_BYTES >> 20} MiB: not an input file", "give the YAML file (check the path)")
        )
        return None
    if b"\0" in data:
        problems.append(Problem("", "a binary file, not YAML text", "give the YAML file (check the path)"))
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        problems.append(
            Problem(
                "",
                f"not UTF-8 text: byte 0x{data[e.start]:02x} cannot be decoded",
                "save the file as UTF-8 (e.g. `iconv -f latin1 -t utf-8`), or check the path",
                line,
            )
        )
        return None


def pydantic_problems(exc: Any, located: Located, root_model: type | None = None) -> list[Problem]:
    """Turn a pydantic ValidationError into Problems with paths, lines and fixes."""
    out: list[Problem] = []
    for err in exc.errors():
        loc = [p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-"))]
        path = ""
        for part in loc:
            path = join(path, part)
        kind = err["type"]
        ctx = err.get("ctx") or {}
        fix = ctx.get("fix") if isinstance(ctx, dict) else None
        msg = err["msg"]
        if kind == "extra_forbidden":
            key = str(loc[-1])
            msg = f"unknown field '{key}'"
            fix = _typo_fix(key, _fields_at(root_model, loc[:-1]))
        elif kind == "missing":
            msg = "this field is required"
            fix = fix or "add it"
        elif msg.startswith("Value error, "):
            msg = msg[len("Value error, ") :]
        if kind != "rainmaker" and kind not in ("missing", "extra_forbidden"):
            if "input" in err and not isinstance(err["input"], (dict, list)):
                msg += f" (got {err['input']!r})"
            fix = fix or _DEFAULT_FIXES.get(kind.split("_")[0], "correct the value")
        out.append(Problem(path, msg, fix, located.line_of(path)))
    return out


_DEFAULT_FIXES = {
    "literal": "use one of the values listed",
    "greater": "use a value in the range given",
    "less": "use a value in the range given",
    "int": "write a whole number",
    "string": "write a string (quote it)",
    "list": "write a list, e.g. [1, 2]",
    "model": "write a mapping with the fields of this section",
    "dict": "write a mapping with the fields of this section",
    "too": "add or remove items to fit the size given",
    "bool": "write true or false",
    "float": "write a number",
    "path": "write a file path",
}


def _fields_at(model: Any, loc: list) -> list[str]:
    """Names of the fields allowed at ``loc`` in the pydantic model tree (for typo hints)."""
    import typing

    from pydantic import BaseModel

    current: Any = model
    for part in loc:
        current = _unwrap(current, typing)
        if isinstance(part, int):
            args = typing.get_args(current)
            current = args[0] if args else None
        elif isinstance(current, type) and issubclass(current, BaseModel):
            f = current.model_fields.get(str(part))
            current = f.annotation if f else None
        else:
            return []
    current = _unwrap(current, typing)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return [f.alias or n for n, f in current.model_fields.items()]
    return []


def _unwrap(tp: Any, typing: Any) -> Any:
    from pydantic import BaseModel

    # Optional[X] / X | None / Annotated[X, ...] -> X
    for _ in range(4):
        origin = typing.get_origin(tp)
        if origin is typing.Annotated:
            tp = typing.get_args(tp)[0]
            continue
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if origin is not None and origin not in (list, dict, tuple) and args:
            models = [a for a in args if isinstance(a, type) and issubclass(a, BaseModel)]
            tp = models[0] if models else args[0]
            continue
        break
    return tp


def _typo_fix(key: str, allowed: list[str]) -> str:
    import difflib

    close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
    if close:
        return f"did you mean '{close[0]}'?"
    if allowed:
        return "remove it; the fields allowed here are " + ", ".join(allowed)
    return "remove it"
