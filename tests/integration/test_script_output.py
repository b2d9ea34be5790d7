"""A script task's stdout holds what the script printed and nothing the host wrote to stderr.

The host roles' probes (dpdk_host's inspect_host.py, roce's inspect_roce.py) are
`ansible.builtin.script` tasks whose stdout is parsed as JSON. Ansible's ssh connection
runs scripts with `-tt` unless told not to, and in a pty stderr and stdout are one
stream: whatever the host's login shell or the script's Python wrote to stderr came
back in front of the JSON. On the emulated testbed that was `pyenv rehash`, run by
root's ~/.bashrc for every SSH command, sometimes losing a race for its shims folder
against another rehash ("rm: cannot remove .../shims/tmp.X", then "pyenv: cannot
rehash"), and the probe's `from_json` failed at line 1 column 1.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator import provision as prov
from orchestrator.inventory.ansible import export_yaml

pytestmark = pytest.mark.integration

NOISY = """\
import json, sys
sys.stderr.write("warning: the host said something on stderr\\n")
sys.stderr.flush()
print(json.dumps({"ok": True}))
"""

PLAY = """\
- hosts: worker0
  gather_facts: false
  tasks:
    - ansible.builtin.script:
        cmd: noisy.py
        executable: python3
      register: probe
    - ansible.builtin.copy:
        content: "{{ probe | to_json }}"
        dest: "{{ result_file }}"
      delegate_to: localhost
"""


def test_a_script_task_returns_only_its_stdout(testbed, tmp_path):
    _, inv = testbed
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "noisy.py").write_text(NOISY)
    (tmp_path / "play.yml").write_text(PLAY)
    (tmp_path / "hosts.yml").write_text(export_yaml(inv))
    work = prov.work_dir_for(inv)  # the testbed's own: `testbed down` closes its SSH masters
    prov._prepare(work, check=False)
    result = tmp_path / "result.json"
    r = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "hosts.yml", "play.yml"]
        + ["-e", f"result_file={result}"],
        cwd=tmp_path,
        env=prov.ansible_env(work),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    probe = json.loads(result.read_text())
    assert probe["rc"] == 0
    assert json.loads(probe["stdout"]) == {"ok": True}, probe["stdout"]
    assert "said something on stderr" in probe["stderr"]
