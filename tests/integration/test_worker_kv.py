"""rain-worker --handler rocksdb against a database it builds in the test's folder.

GET and SCAN answer the items hosts/kv.py says the database holds (count and digest of
the values); a malformed request is counted (kv_bad) and answered failed, and the
worker goes on; a second start on the same folder opens the database as it is. The
peer plays the switch, as in test_worker.py.
"""

from __future__ import annotations

import pytest

from hosts import kv, proto
from tests.integration.test_worker import Switch, Worker, built, pair  # noqa: F401 (fixtures)
from tests.netpeer import parse_udp

TAG = "rmtk"  # its own namespaces (test_worker.py's `pair` reads it): that file may run at the same time

pytestmark = pytest.mark.integration

KEYS, ITEM, SEED = 3000, 100, 5


@pytest.fixture
def switch(pair):  # noqa: F811
    s = Switch(pair)
    yield s
    s.close()


def kv_worker(pair, tmp_path, name: str, *extra: str) -> Worker:  # noqa: F811
    return Worker(
        pair,
        tmp_path,
        name,
        [
            "--mode",
            "push",
            "--handler",
            "rocksdb",
            "--kv-path",
            str(tmp_path / "db"),
            "--kv-keys",
            str(KEYS),
            "--kv-key-bytes",
            "64",
            "--kv-item-bytes",
            str(ITEM),
            "--kv-seed",
            str(SEED),
            *extra,
        ],
    )


def ask(switch: Switch, rid: int, req: kv.Request) -> tuple[proto.Header, bytes]:
    switch.dispatch(0, rid, service_ns=int.from_bytes(req.encode(), "big"))
    switch.wait_responses([(0x0101, rid)], timeout=10)
    _, h, fr = switch.responses[(0x0101, rid)]
    return h, parse_udp(fr)[2][proto.HDR_LEN :]


def test_get_and_scan_answer_the_database_and_bad_requests_fail(pair, switch, tmp_path):  # noqa: F811
    w = kv_worker(pair, tmp_path, "kv")
    try:
        good = [
            kv.Request(kv.Op.GET, 10, 0),
            kv.Request(kv.Op.GET, 10, 2990),  # the last ten
            kv.Request(kv.Op.SCAN, 500, 1234),
            kv.Request(kv.Op.SCAN, 1, 2999),
        ]
        for rid, req in enumerate(good, start=1):
            h, body = ask(switch, rid, req)
            assert not h.flags & proto.Flag.FAILED, req
            r = kv.Result.decode(body)
            assert (r.found, r.digest) == kv.expected(req, KEYS, ITEM, SEED), req
            assert r.service_ns > 0
        bad = [
            kv.Request(7, 1, 0),  # no such op
            kv.Request(kv.Op.SCAN, 0, 0),  # nothing to read
            kv.Request(kv.Op.SCAN, kv.MAX_COUNT + 1, 0),  # beyond the bound
            kv.Request(kv.Op.GET, 20, 2990),  # past the last key
            kv.Request(kv.Op.GET, 1, 0, resv=1),  # reserved byte set
        ]
        for rid, req in enumerate(bad, start=100):
            h, _ = ask(switch, rid, req)
            assert h.flags & proto.Flag.FAILED, req
        h, body = ask(switch, 200, kv.Request(kv.Op.GET, 3, 7))  # still serving
        assert not h.flags & proto.Flag.FAILED
        assert kv.Result.decode(body).found == 3
        st = w.wait_stats(lambda s: s["workers"][0]["kv_bad"] == len(bad))
        assert st["workers"][0]["kv_bad"] == len(bad) and st["workers"][0]["failed"] == len(bad)
    finally:
        w.stop()
    assert "building" in w.stderr and (tmp_path / "db" / "MANIFEST-rain").exists()

    # the same parameters: opened as it is; dilated, the worker holds a request k times
    # its run time and reports that as its service time
    again = kv_worker(pair, tmp_path, "kv2", "--kv-dilation", "500")
    try:
        req = kv.Request(kv.Op.SCAN, 500, 100)
        sent = switch.dispatch(0, 300, service_ns=int.from_bytes(req.encode(), "big"))
        switch.wait_responses([(0x0101, 300)], timeout=10)
        ts, _, fr = switch.responses[(0x0101, 300)]
        r = kv.Result.decode(parse_udp(fr)[2][proto.HDR_LEN :])
        assert (r.found, r.digest) == kv.expected(req, KEYS, ITEM, SEED)
        assert r.service_ns >= 500 * 1_000  # a 500-item scan takes more than a microsecond
        assert ts - sent >= r.service_ns - 1_000_000  # held that long (1 ms of timer slack)
    finally:
        again.stop()
    assert "building" not in again.stderr


def test_a_database_folder_without_a_path_is_refused(pair, tmp_path):  # noqa: F811
    with pytest.raises(AssertionError, match="--kv-path"):
        Worker(pair, tmp_path, "nopath", ["--mode", "push", "--handler", "rocksdb"])
