"""memcached as the RPC experiments' server (hosts/agent/rpc.py, experiments/memcached.yaml):
- the spec's memcached workload goes with systems: [memcached], absolute loads and k = 1,
  and anything else is refused naming the field;
- the agents are told Debian's memcached for the server (room for every connection) and
  memcached's protocol for the client, with no service time;
- the agent's memcached command line starts a real memcached that accepts on the point's
  address, and what its `stats` counted is what server.json says the clients' requests
  cost it, less the agent's own connections;
- the simulated testbed refuses it, saying why.
"""

from __future__ import annotations

import shutil
import socket
import sys
from pathlib import Path, PurePosixPath

import pytest
import yaml

from hosts.agent import rpc
from hosts.agent.common import AgentError, Child
from orchestrator.errors import RainmakerError, UsageError
from orchestrator.experiment import agent_config
from orchestrator.experiment.machines import shape_of
from orchestrator.experiment.plan import plan
from orchestrator.experiment.spec import load as load_spec
from orchestrator.inventory import load
from orchestrator.systems import get as get_system

REPO = Path(__file__).resolve().parents[2]
SPEC = REPO / "experiments" / "memcached.yaml"


def _spec(tmp_path, **over):
    d = yaml.safe_load(SPEC.read_text()) | over
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(d))
    return load_spec(tmp_path / "spec.yaml")


def _refused(tmp_path, **over) -> str:
    with pytest.raises(RainmakerError) as e:
        _spec(tmp_path, **over)
    return e.value.render()


def test_the_spec_is_memcached_with_absolute_loads_in_real_time(tmp_path):
    spec = _spec(tmp_path)
    assert spec.systems == ["memcached"] and spec.needs() == {"rpc"}
    text = _refused(tmp_path, systems=["ms"])
    assert "served by a real memcached" in text and "systems: [memcached]" in text
    text = _refused(tmp_path, load={"capacity_fraction": [0.5]})
    assert "load.krps" in text
    text = _refused(tmp_path, dilation={"emulated": 200, "hardware": 1})
    assert "real time" in text and "dilation: {emulated: 1, hardware: 1}" in text
    bimodal = {"classes": [{"name": "rpc", "service": {"dist": "exponential", "mean_us": 10}}]}
    assert "one workload class, of service {dist: memcached}" in _refused(tmp_path, workload=bimodal)


def test_the_agents_are_told_memcached_and_its_protocol(tmp_path):
    inv_data = yaml.safe_load((REPO / "orchestrator/inventory/examples/rack1.yaml").read_text())
    (tmp_path / "inv.yaml").write_text(yaml.safe_dump(inv_data))
    inv = load(tmp_path / "inv.yaml")
    spec = _spec(tmp_path)
    p = next(p for p in plan(spec, shape_of(inv)) if p.params.get("connections") == 5000)
    w, c = inv.workers[0], inv.clients[0]
    s = agent_config.rpc_server(inv, spec, p, get_system("memcached"), w.name, PurePosixPath("/tmp/o"))
    assert s["binary"] == agent_config.MEMCACHED_BINARY
    assert s["server"] == {
        "listen": f"{w.nic.ip}:{agent_config.RPC_PORT}",
        "mode": "memcached",
        "threads": p.worker_threads,
        "max_connections": 5000,
    }
    argv = rpc.server_argv(s)
    assert argv[:7] == [agent_config.MEMCACHED_BINARY, "-l", w.nic.ip, "-p", str(agent_config.RPC_PORT), "-U", "0"]
    assert int(argv[argv.index("-c") + 1]) > 5000 and argv[argv.index("-t") + 1] == str(p.worker_threads)
    cl = agent_config.rpc_client(inv, spec, p, c.name, w.name, PurePosixPath("/tmp/o"))["client"]
    assert "service" not in cl
    assert (cl["protocol"], cl["get_fraction"], cl["keys"], cl["payload"]) == ("memcached", 0.9, 10000, 64)
    argv = rpc.client_argv({"binary": "rpc-client", "client": cl}, Path("/tmp/o"))
    assert "--service" not in argv and argv[argv.index("--protocol") + 1] == "memcached"
    assert argv[argv.index("--get-fraction") + 1] == "0.9" and argv[argv.index("--keys") + 1] == "10000"


def test_a_bad_listen_address_is_refused():
    with pytest.raises(AgentError, match="expected IP:PORT"):
        rpc.server_argv({"binary": "memcached", "server": {"listen": "10.0.0.1", "mode": "memcached", "threads": 2}})
    with pytest.raises(AgentError, match="memcached"):  # the modes it names include the application
        rpc.server_argv({"binary": "x", "server": {"listen": "10.0.0.1:1", "mode": "redis", "threads": 2}})


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _text(port: int, request: bytes, until: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(request)
        buf = b""
        while not buf.endswith(until):
            chunk = s.recv(65536)
            assert chunk, buf
            buf += chunk
    return buf


def test_the_agents_memcached_serves_and_its_stats_are_what_the_clients_cost_it(tmp_path):
    exe = shutil.which("memcached")
    if not exe:
        pytest.skip("no memcached: `make setup` installs Debian's")
    port = _free_port()
    cfg = {"binary": exe, "server": {"listen": f"127.0.0.1:{port}", "mode": "memcached", "threads": 2}}
    child = Child(rpc.server_argv(cfg), tmp_path / "server.log")
    try:
        rpc.wait_accepting(("127.0.0.1", port), child, timeout=20)  # the agent's own first connection
        assert _text(port, b"set k 0 0 3\r\nabc\r\n", b"STORED\r\n") == b"STORED\r\n"
        assert _text(port, b"get k\r\n", b"END\r\n").startswith(b"VALUE k 0 3\r\nabc")
        _text(port, b"get nothing\r\n", b"END\r\n")
        counts = rpc.memcached_counts(rpc.memcached_stats(("127.0.0.1", port)), agent_connections=2)
    finally:
        status = child.stop()
    assert status == 0, child.tail()  # SIGTERM: memcached ends cleanly
    st = counts["stats"]
    assert (st["cmd_get"], st["cmd_set"], st["get_hits"], st["get_misses"]) == (2, 1, 1, 1)
    assert counts["served"] == 3
    assert counts["connections"] == 3  # the three above: not the agent's probe and stats, nor its listener
    assert st["threads"] == 2


def test_a_server_that_dies_before_it_accepts_is_reported(tmp_path):
    child = Child([sys.executable, "-c", "import sys; print('no port'); sys.exit(3)"], tmp_path / "s.log")
    with pytest.raises(AgentError, match="exited with status 3"):
        rpc.wait_accepting(("127.0.0.1", _free_port()), child, timeout=20)
    child.stop()


def test_memcacheds_stats_answer_is_read_as_numbers():
    text = (
        "STAT pid 12\r\nSTAT cmd_get 10\r\nSTAT cmd_set 4\r\nSTAT version 1.6.18\r\nSTAT total_connections 9\r\nEND\r\n"
    )
    assert rpc.parse_stats(text) == {"cmd_get": 10, "cmd_set": 4, "total_connections": 9}
    assert rpc.memcached_counts(rpc.parse_stats(text), agent_connections=2)["connections"] == 6  # and its listener
    assert rpc.memcached_counts({}, agent_connections=2) == {"served": 0, "connections": 0, "stats": {}}


def test_the_simulated_testbed_refuses_memcached_saying_why(tmp_path):
    from orchestrator.simulate.model import service_of

    spec = _spec(tmp_path)
    with pytest.raises(UsageError) as e:
        service_of(spec.workload.classes[0].service)
    assert "cannot predict it" in e.value.message
