"""rain-worker's RDMA device lookup from sysfs (hosts/dpdk/worker/rdma_sysfs.c), on a
fake sysfs tree laid out as Linux lays out a two-port ConnectX: each PCI function has
its RDMA device (class/infiniband/mlx5_N -> .../<pci>/infiniband/mlx5_N, whose `device`
links back to the function) and its netdev (<pci>/net/<if>). Called through ctypes."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "hosts/dpdk/worker/rdma_sysfs.c"


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed to build the C under test")
    so = tmp_path_factory.mktemp("sysfs") / "rdma_sysfs.so"
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-O1", "-Wall", "-Wextra", "-Werror", "-o", str(so), str(SRC)],
        check=True,
        capture_output=True,
        text=True,
    )
    lib = ctypes.CDLL(str(so), use_errno=True)
    lib.rw_sysfs_rdma_pci.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.rw_sysfs_match_pci.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_char_p), ctypes.c_int, ctypes.c_char_p]
    lib.rw_sysfs_netdev.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.rw_sysfs_hw_counter.argtypes = [
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_uint,
        ctypes.c_char_p,
        ctypes.POINTER(ctypes.c_uint64),
    ]
    return lib


def connectx(root: Path, pci: str, ibdev: str, netdevs: list[str]) -> None:
    fn = root / "devices/pci0000:3a/0000:3a:00.0" / pci
    (fn / "infiniband" / ibdev).mkdir(parents=True)
    os.symlink("../../../" + pci, fn / "infiniband" / ibdev / "device")
    for n in netdevs:
        (fn / "net" / n).mkdir(parents=True)
    (root / "class/infiniband").mkdir(parents=True, exist_ok=True)
    os.symlink(os.path.relpath(fn / "infiniband" / ibdev, root / "class/infiniband"), root / "class/infiniband" / ibdev)


@pytest.fixture
def sysfs(tmp_path) -> Path:
    connectx(tmp_path, "0000:3b:00.0", "mlx5_0", ["ens1f0np0"])
    connectx(tmp_path, "0000:3b:00.1", "mlx5_1", ["ens1f1np1", "ens1f1v0"])
    connectx(tmp_path, "0000:af:00.0", "mlx5_2", [])
    return tmp_path


def pci_of(lib, root: Path, ibdev: str) -> tuple[int, str, int]:
    buf = ctypes.create_string_buffer(64)
    rc = lib.rw_sysfs_rdma_pci(str(root).encode(), ibdev.encode(), buf, 64)
    return rc, buf.value.decode(), ctypes.get_errno()


def match(lib, root: Path, names: list[str], pci: str) -> int:
    arr = (ctypes.c_char_p * len(names))(*[n.encode() for n in names])
    return lib.rw_sysfs_match_pci(str(root).encode(), arr, len(names), pci.encode())


def netdev(lib, root: Path, ibdev: str, n: int = 64) -> tuple[int, str]:
    buf = ctypes.create_string_buffer(max(n, 1))
    rc = lib.rw_sysfs_netdev(str(root).encode(), ibdev.encode(), buf, n)
    return rc, buf.value.decode()


def test_the_pci_function_of_each_rdma_device(lib, sysfs):
    assert pci_of(lib, sysfs, "mlx5_0")[:2] == (0, "0000:3b:00.0")
    assert pci_of(lib, sysfs, "mlx5_1")[:2] == (0, "0000:3b:00.1")
    rc, _, err = pci_of(lib, sysfs, "mlx5_7")
    assert rc == -1 and err == 2  # ENOENT
    rc, _, err = pci_of(lib, sysfs, "../../etc")
    assert rc == -1 and err == 22  # EINVAL: a device name is one path component


def test_the_port_finds_its_own_function(lib, sysfs):
    names = ["mlx5_2", "mlx5_0", "mlx5_1"]  # the order ibv_get_device_list happens to give
    assert match(lib, sysfs, names, "0000:3b:00.1") == 2
    assert match(lib, sysfs, names, "0000:3B:00.0") == 1  # DPDK and sysfs agree on case, but need not
    assert match(lib, sysfs, names, "0000:3b:00.2") == -1  # e.g. a VF without mlx5_ib
    assert match(lib, sysfs, ["mlx5_9"], "0000:3b:00.0") == -1


def test_the_netdev_named_in_messages(lib, sysfs):
    assert netdev(lib, sysfs, "mlx5_0") == (0, "ens1f0np0")
    assert netdev(lib, sysfs, "mlx5_1") == (0, "ens1f1np1")  # several: the smallest name, stable
    assert netdev(lib, sysfs, "mlx5_2")[0] == -1  # a function without a netdev
    assert netdev(lib, sysfs, "mlx5_0", n=4)[0] == -1  # does not fit: refused, not truncated


def counter(lib, root: Path, ibdev: str, name: str = "rx_icrc_encapsulated", port: int = 1) -> tuple[int, int, int]:
    out = ctypes.c_uint64(12345)
    rc = lib.rw_sysfs_hw_counter(str(root).encode(), ibdev.encode(), port, name.encode(), ctypes.byref(out))
    return rc, out.value, ctypes.get_errno()


def test_the_nics_count_of_icrc_drops(lib, sysfs):
    # mlx5 exposes RoCE packets dropped for a bad iCRC as hw_counters/rx_icrc_encapsulated
    # (kernel 4.19, when the firmware has the counter); rain-worker reports its growth.
    hw = sysfs / "class/infiniband/mlx5_0/ports/1/hw_counters"
    hw.mkdir(parents=True)
    (hw / "rx_icrc_encapsulated").write_text("18446744073709551000\n")
    (hw / "garbled").write_text("n/a\n")
    assert counter(lib, sysfs, "mlx5_0")[:2] == (0, 18446744073709551000)
    rc, value, err = counter(lib, sysfs, "mlx5_1")
    assert (rc, value, err) == (-1, 12345, 2)  # not exposed (ENOENT): nothing written
    assert counter(lib, sysfs, "mlx5_0", port=2)[::2] == (-1, 2)
    assert counter(lib, sysfs, "mlx5_0", "garbled")[::2] == (-1, 22)  # EINVAL
    assert counter(lib, sysfs, "mlx5_0", "../../../../../etc/passwd")[::2] == (-1, 22)
    assert counter(lib, sysfs, "..")[::2] == (-1, 22)
