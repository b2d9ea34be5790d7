"""What a machine's probe (probe.py) found, judged against the inventory and the run's
needs (needs.py): a list of Checks per machine. Pure: no I/O, so every verdict is
tested on probe outputs (tests/unit/test_preflight.py, against tests/mock_connectx and
tests/mock_sde).

Per host: kernel (release and where its options were read), kernel.kcm, kernel.tls,
kernel.rdma, hugepages, dpdk, nic, roce, icrc, timestamping, clocksource, governor,
isolation. Per switch: kernel, sde, switchd, hugepages. The fixes name the role that
sets a thing (`rainmaker provision --tags ROLE`), the inventory field, or a command.
"""

from __future__ import annotations

from ..inventory import Inventory
from ..inventory.model import Host
from .needs import Needs
from .report import FAIL, NA, OK, WARN, Check

PROVISION_HUGEPAGES = "`rainmaker provision --tags hugepages`"
PROVISION_DPDK = "`rainmaker provision --tags dpdk_host`"
PROVISION_ROCE = "`rainmaker provision --tags roce`"
ROCE_OVERHEAD = 104  # the roce role's netdev MTU above the RDMA MTU (roles/roce/defaults)
RDMA_OPTIONS = ("INFINIBAND", "INFINIBAND_USER_ACCESS", "MLX5_INFINIBAND")


def _emulated_host(h: Host) -> bool:
    return h.netns is not None or h.nic.vdev is not None


def _option(kernel: dict, name: str, offered: str | None) -> tuple[str, str]:
    """(status, what was found) for one build option: the config file's word, else
    what the running kernel answered (offered: 'yes' or an errno name)."""
    opts = kernel.get("options") or {}
    if name in opts:
        v = opts[name]
        return (OK if v in ("y", "m") else FAIL), f"CONFIG_{name}={v} ({kernel.get('source')})"
    if offered == "yes":
        return OK, f"no kernel config to read; the running kernel offers it ({name})"
    if offered in ("EAFNOSUPPORT", "ENOENT", "EPROTONOSUPPORT"):
        return FAIL, f"no kernel config to read; the running kernel refuses it ({offered})"
    return WARN, f"unknown: no /proc/config.gz or /boot/config-<release>, and probing said {offered}"


def kernel_checks(m: str, role: str, out: dict, needs: Needs | None, h: Host | None) -> list[Check]:
    k = out.get("kernel")
    if not k:
        err = out.get("errors", {}).get("kernel", "no answer")
        return [Check(m, role, "kernel", WARN, False, f"not read: {err}")]
    offers = k.get("offers") or {}
    src = k.get("source") or "no /proc/config.gz or /boot/config-<release>: options probed"
    checks = [Check(m, role, "kernel", OK, False, f"Linux {k.get('release')} (options from {src})")]
    if h is None or needs is None:
        return checks
    if h.role != "worker":
        checks.append(Check(m, role, "kernel.kcm", NA, False, "a client: rpc-server (KCM's user) runs on the workers"))
        return checks + _tls_rdma(m, role, k, offers, needs, h)
    kcm_needed = "AF_KCM" in needs.worker_options
    st, found = _option(k, "AF_KCM", offers.get("af_kcm"))
    if st == OK and (k.get("options") or {}).get("BPF_SYSCALL", "y") == "n":
        st, found = FAIL, found + "; but CONFIG_BPF_SYSCALL=n: KCM's message parser cannot load"
    checks.append(
        Check(
            m,
            role,
            "kernel.kcm",
            st,
            kcm_needed,
            found + (f" - {needs.worker_options['AF_KCM']}" if kcm_needed else " - no system of the run uses KCM"),
            None
            if st == OK
            else "a kernel with CONFIG_AF_KCM (=m: `modprobe kcm`) on the worker hosts, or drop kcm from the spec's systems",
        )
    )
    return checks + _tls_rdma(m, role, k, offers, needs, h)


def _tls_rdma(m: str, role: str, k: dict, offers: dict, needs: Needs, h: Host) -> list[Check]:
    st, found = _option(k, "TLS", offers.get("tls"))
    checks = []
    checks.append(
        Check(
            m,
            role,
            "kernel.tls",
            st,
            False,
            found + " - kernel TLS: no system of rainmaker uses it yet",
            None if st == OK else "a kernel with CONFIG_TLS (=m: `modprobe tls`)",
        )
    )
    checks.append(_rdma_kernel(m, role, k, offers, needs, h))
    return checks


def _rdma_kernel(m: str, role: str, k: dict, offers: dict, needs: Needs, h: Host) -> Check:
    if h.nic.rdma_transport != "ibverbs":
        why = "rdma: emulated: rain-worker applies the switch's WRITEs itself, no RDMA in the kernel"
        return Check(m, role, "kernel.rdma", NA, False, why)
    needed = needs.dpdk and h.role == "worker"
    opts = k.get("options") or {}
    if opts:
        off = [o for o in RDMA_OPTIONS if opts.get(o) not in ("y", "m")]
        st = FAIL if off else OK
        found = ", ".join(f"CONFIG_{o}={opts.get(o)}" for o in RDMA_OPTIONS) + f" ({k.get('source')})"
    else:
        mods = offers.get("modules") or {}
        st = OK if offers.get("rdma_devices") or mods.get("ib_core") else WARN
        found = f"no kernel config; RDMA devices {offers.get('rdma_devices') or 'none'}, ib_core " + (
            "loaded" if mods.get("ib_core") else "not loaded"
        )
    return Check(
        m,
        role,
        "kernel.rdma",
        st,
        needed,
        found,
        None
        if st == OK
        else f"a kernel with RDMA and mlx5_ib (CONFIG_INFINIBAND, CONFIG_MLX5_INFINIBAND); then {PROVISION_DPDK}",
    )


def hugepage_check(m: str, role: str, out: dict, size_kb: int, count: int, needed: bool, na: str | None) -> Check:
    pools = out.get("hugepages")
    if na is not None:
        have = (pools or {}).get(str(size_kb))
        seen = f" (this kernel's pool: {have['nr']} pages, {have['free']} free)" if have else ""
        return Check(m, role, "hugepages", NA, False, na + seen)
    if pools is None:
        return Check(m, role, "hugepages", WARN, needed, "not read: " + out.get("errors", {}).get("hugepages", "?"))
    pool = pools.get(str(size_kb))
    want = f"{count} pages of {size_kb} kB"
    mounts = ((out.get("host") or {}).get("hugetlbfs") or {}).get("mounts")
    mounted = mounts is None or any(x.get("size_kb") == size_kb for x in mounts)
    if pool is None:
        return Check(
            m,
            role,
            "hugepages",
            FAIL,
            needed,
            f"the kernel has no {size_kb} kB pages (asked: {want})",
            PROVISION_HUGEPAGES,
        )
    found = f"{pool['nr']} pages of {size_kb} kB, {pool['free']} free (asked: {count})"
    if pool["nr"] < count or not mounted:
        why = found + ("" if mounted else f"; no hugetlbfs of {size_kb} kB pages mounted")
        return Check(m, role, "hugepages", FAIL, needed, why, f"{PROVISION_HUGEPAGES} (or lower hugepages.count)")
    if pool["free"] < count:
        return Check(
            m,
            role,
            "hugepages",
            WARN,
            needed,
            found + ": others hold some (a leftover rain-worker or rain-client?)",
            "`rainmaker exec -- pgrep -a rain-` finds leftovers; a run stops them itself",
        )
    return Check(m, role, "hugepages", OK, needed, found)


def dpdk_check(m: str, role: str, out: dict, inv: Inventory, needs: Needs) -> Check:
    host = out.get("host")
    if host is None:
        return Check(m, role, "dpdk", WARN, needs.dpdk, "not read: " + out.get("errors", {}).get("host", "?"))
    want = inv.dpdk.version
    if inv.dpdk.source == "prefix":
        pre = host.get("prefix") or {}
        version, where = pre.get("version"), f"libdpdk.pc below {inv.dpdk.prefix}"
    else:
        version, where = host.get("packages", {}).get("dpdk"), "Debian's dpdk package"
        version = None if version == "(none)" else version
    if version is None and out.get("dpdk_pkgconfig"):
        version, where = out["dpdk_pkgconfig"], "pkg-config libdpdk"
    missing = (host.get("packages") or {}).get("missing") or []
    if version is None:
        return Check(m, role, "dpdk", FAIL, needs.dpdk, f"no DPDK found ({where})", PROVISION_DPDK)
    if not version.startswith(want):
        return Check(
            m,
            role,
            "dpdk",
            FAIL,
            needs.dpdk,
            f"DPDK {version} ({where}), but rainmaker's binaries are built for {want} (dpdk.version)",
            f"{PROVISION_DPDK} installs {want}; or set dpdk.source: prefix to a {want} build",
        )
    if missing:
        return Check(
            m,
            role,
            "dpdk",
            FAIL,
            needs.dpdk,
            f"DPDK {version} ({where}); missing: {', '.join(missing)}",
            PROVISION_DPDK,
        )
    return Check(m, role, "dpdk", OK, needs.dpdk, f"DPDK {version} ({where})")


def nic_check(m: str, role: str, out: dict, h: Host, needs: Needs) -> Check:
    if h.nic.vdev is not None:
        v = out.get("vdev")
        if v is None:
            return Check(m, role, "nic", WARN, needs.dpdk, f"virtual device {h.nic.vdev}: its interface was not read")
        if not v["present"]:
            return Check(
                m,
                role,
                "nic",
                FAIL,
                needs.dpdk,
                f"{h.nic.vdev}: no interface {v['iface']} on {m}",
                "`rainmaker testbed up` makes it (emulated); else hosts[].nic.vdev names an interface of the host",
            )
        return Check(m, role, "nic", OK, needs.dpdk, f"virtual device {h.nic.vdev} on {v['iface']} (no PCI NIC)")
    nic = (out.get("host") or {}).get("nic")
    if nic is None:
        return Check(m, role, "nic", WARN, needs.dpdk, "not read: " + out.get("errors", {}).get("host", "?"))
    if not nic.get("present"):
        return Check(
            m,
            role,
            "nic",
            FAIL,
            needs.dpdk,
            f"no PCI device {h.nic.pci}",
            "`lspci -D` on the host; then hosts[].nic.pci",
        )
    mlx = h.nic.driver == "mlx5" or (h.nic.driver == "auto" and nic.get("vendor") == "0x15b3")
    want = "mlx5_core" if mlx else "vfio-pci"
    found = f"{h.nic.pci} ({nic.get('vendor')}:{nic.get('device')}) on {nic.get('driver') or 'no driver'}"
    found += f", NUMA node {nic.get('numa_node')}"
    if nic.get("driver") != want:
        how = "a ConnectX stays on mlx5_core (DPDK's mlx5 PMD shares it)" if mlx else "DPDK takes it through vfio-pci"
        return Check(m, role, "nic", FAIL, needs.dpdk, f"{found}; expected {want}: {how}", PROVISION_DPDK)
    if nic.get("mgmt_netdevs"):
        return Check(
            m,
            role,
            "nic",
            FAIL,
            needs.dpdk,
            f"{found}; it carries the management address ({', '.join(nic['mgmt_netdevs'])})",
            "give hosts[].nic.pci the data NIC, not the one SSH reaches the host through",
        )
    return Check(m, role, "nic", OK, needs.dpdk, found)


def roce_checks(m: str, role: str, out: dict, h: Host, inv: Inventory, needs: Needs) -> list[Check]:
    """RoCE (the roce role's settings, read back by its script) and the iCRC check."""
    ibverbs = h.nic.rdma_transport == "ibverbs"
    needed = ibverbs and h.role == "worker" and needs.dpdk
    if not ibverbs:
        na = "no ConnectX on an emulated host" if _emulated_host(h) else "rdma: emulated"
        checks = [Check(m, role, "roce", NA, False, f"{na}: rain-worker applies the switch's WRITEs itself")]
        if inv.roce.nic_checks_icrc("emulated") and h.role == "worker":
            checks.append(
                Check(
                    m,
                    role,
                    "icrc",
                    WARN,
                    False,
                    "roce.icrc_check: on: rain-worker checks the iCRC and drops every WRITE (the switch sends zeros)",
                    "remove roce.icrc_check from the inventory unless that is the experiment",
                )
            )
        else:
            checks.append(Check(m, role, "icrc", NA, False, "an emulated NIC does not check the iCRC"))
        return checks
    r = out.get("roce")
    if r is None:
        return [Check(m, role, "roce", WARN, needed, "not read: " + out.get("errors", {}).get("roce", "?"))]
    return [_roce(m, role, r, h, inv, needed), _icrc(m, role, r, inv, needed)]


def _roce(m: str, role: str, r: dict, h: Host, inv: Inventory, needed: bool) -> Check:
    ro = inv.roce
    if not r.get("rdma_device") or not r.get("netdev"):
        why = "; ".join(r.get("problems") or []) or f"no RDMA device or netdev for {h.nic.pci}"
        return Check(m, role, "roce", FAIL, needed, why, f"{PROVISION_DPDK} loads mlx5_ib; `rdma link` lists devices")
    differ = []
    if r.get("link_layer") not in (None, "", "Ethernet"):
        differ.append(f"link layer {r['link_layer']}")
    if r.get("cm_mode") != "RoCE v2":
        differ.append(f"RDMA CM mode {r.get('cm_mode')}")
    if r.get("cm_tos") != str(ro.dscp * 4):
        differ.append(f"RDMA CM TOS {r.get('cm_tos')} (want {ro.dscp * 4})")
    dscp = r.get("dscp_prio")
    if dscp is None:
        differ.append("DSCP trust unreadable (dcb)")
    elif dscp.get(str(ro.dscp)) != [ro.priority]:
        differ.append(f"DSCP {ro.dscp} -> priority {dscp.get(str(ro.dscp))} (want [{ro.priority}])")
    pfc = r.get("pfc")
    want_pfc = {str(p): (p == ro.priority and ro.pfc) for p in range(8)}
    if pfc is not None and pfc != want_pfc:
        differ.append(f"PFC on {[p for p, v in pfc.items() if v]} (want {[ro.priority] if ro.pfc else []})")
    want_ecn = {"roce_np": "1" if ro.ecn else "0", "roce_rp": "1" if ro.ecn else "0"}
    if r.get("ecn_sysfs") and r.get("ecn") != want_ecn:
        differ.append(f"ECN {r.get('ecn')}")
    if r.get("netdev_mtu") != ro.mtu + ROCE_OVERHEAD:
        differ.append(f"netdev MTU {r.get('netdev_mtu')} (want {ro.mtu + ROCE_OVERHEAD})")
    if r.get("gid_index_found") is None:
        differ.append(f"no RoCE v2 GID for {h.nic.ip}")
    found = f"{r['rdma_device']}/{r['netdev']} port {r.get('port')}"
    if differ:
        return Check(m, role, "roce", FAIL, needed, f"{found}: {'; '.join(differ)}", PROVISION_ROCE)
    gid = r.get("gid_index_found")
    pfc_text = f"PFC on {ro.priority}" if ro.pfc else "PFC off"
    return Check(
        m, role, "roce", OK, needed, f"{found}: RoCE v2, DSCP {ro.dscp} -> {ro.priority}, {pfc_text}, GID {gid}"
    )


def _icrc(m: str, role: str, r: dict, inv: Inventory, needed: bool) -> Check:
    """The switch sends zero iCRCs: the NIC's check must be off (the roce role's verify)."""
    dev = r.get("rdma_device")
    if inv.roce.nic_checks_icrc("ibverbs"):
        return Check(
            m,
            role,
            "icrc",
            FAIL,
            needed,
            f"{dev} checks the RoCEv2 iCRC and the switch's WRITEs carry zeros: every pre-written task is dropped",
            "give roce.icrc_disable_command (or turn it off by hand and set roce.icrc_check: off); " + PROVISION_ROCE,
        )
    stamp = r.get("icrc_stamp")
    if stamp is None:
        return Check(
            m, role, "icrc", FAIL, needed, f"{dev}'s iCRC check was not turned off since the last boot", PROVISION_ROCE
        )
    base, now = stamp.get("rx_icrc_encapsulated"), r.get("icrc_drops")
    if isinstance(base, int) and isinstance(now, int) and now > base:
        return Check(
            m,
            role,
            "icrc",
            FAIL,
            needed,
            f"{dev} dropped {now - base} RoCE packets for a bad iCRC since its check was turned off: it is still on",
            "make roce.icrc_disable_command work on this NIC, remove the stamp in /run, " + PROVISION_ROCE,
        )
    return Check(m, role, "icrc", OK, needed, f"{dev}: check off this boot; {now} iCRC drops since")


def timestamping_check(m: str, role: str, out: dict, h: Host) -> Check:
    ts = out.get("timestamping")
    if ts is None:
        why = out.get("errors", {}).get("timestamping") or "no netdev for the data NIC (hosts[].nic.netdev)"
        return Check(m, role, "timestamping", WARN, False, f"not read: {why}")
    caps = ts.get("capabilities")
    if caps is None:
        return Check(m, role, "timestamping", WARN, False, f"{ts['netdev']}: not read ({ts.get('error')})")
    hw = [c for c in caps if c.startswith("hardware")]
    found = f"{ts['netdev']}: {', '.join(caps) or 'none'}; PTP clock {ts.get('phc') or 'none'} ({ts.get('via')})"
    if _emulated_host(h):
        return Check(m, role, "timestamping", NA, False, f"no ConnectX on an emulated host ({found})")
    if {"hardware-transmit", "hardware-receive"} - set(hw):
        return Check(
            m,
            role,
            "timestamping",
            WARN,
            False,
            found + ": no hardware timestamps (rainmaker's latencies are the hosts' TSC; only packet "
            "captures need them)",
            "a ConnectX's mlx5_core offers them; `ethtool -T NETDEV` shows what the driver does",
        )
    return Check(m, role, "timestamping", OK, False, found)


def clocksource_check(m: str, role: str, out: dict) -> Check:
    c = out.get("clocksource") or {}
    cur = c.get("current")
    if cur is None:
        return Check(m, role, "clocksource", WARN, False, "not read (/sys/devices/system/clocksource)")
    if cur != "tsc":
        return Check(
            m,
            role,
            "clocksource",
            WARN,
            False,
            f"{cur} (available: {', '.join(c.get('available') or [])}): clock_gettime is slower than on tsc, "
            "which kernel-TCP points time with",
            "boot with `clocksource=tsc tsc=reliable` (a TSC the kernel distrusts stays off)",
        )
    return Check(m, role, "clocksource", OK, False, "tsc")


def cpu_checks(m: str, role: str, out: dict, h: Host) -> list[Check]:
    """The frequency governor of the pinned cores (every CPU when none is pinned) and
    whether the pinned cores are isolated, as dpdk_host's script reads them."""
    iso = (out.get("host") or {}).get("isolation")
    if iso is None:
        why = out.get("errors", {}).get("host") or "not read"
        return [Check(m, role, n, WARN, False, why) for n in ("governor", "isolation")]
    which = f"cores {iso.get('cores_range')}" if h.cores else "every CPU"
    if not iso.get("cpufreq"):
        gov = Check(m, role, "governor", NA, False, "no cpufreq on this machine (a VM, or the firmware sets the clock)")
    elif iso.get("not_performance"):
        bad = iso["not_performance"]
        seen = sorted({iso["governors"][str(c)] for c in bad})
        gov = Check(
            m,
            role,
            "governor",
            WARN,
            False,
            f"{which}: {', '.join(seen)} on CPUs {bad} (performance expected: service times drift with the clock)",
            "`cpupower frequency-set -g performance` on the host (each boot)",
        )
    else:
        gov = Check(m, role, "governor", OK, False, f"{which}: performance")
    if _emulated_host(h) or h.netns is not None:
        isol = Check(m, role, "isolation", NA, False, "an emulated host: its cores are every machine's of the testbed")
    elif not h.cores:
        isol = Check(m, role, "isolation", NA, False, "the inventory pins no cores (hosts[].cores)")
    elif iso.get("not_isolated"):
        isol = Check(
            m,
            role,
            "isolation",
            WARN,
            False,
            f"pinned cores {iso['cores_range']}, isolated {iso.get('isolated') or 'none'}: "
            f"{iso['not_isolated']} share the scheduler with everything else",
            f"boot with isolcpus={iso['cores_range']} nohz_full={iso['cores_range']} (kernel command line)",
        )
    else:
        isol = Check(m, role, "isolation", OK, False, f"pinned cores {iso['cores_range']} are isolated")
    return [gov, isol]


def switch_checks(inv: Inventory, out: dict, liveness: tuple[str, str] | None) -> list[Check]:
    sw = inv.switch
    m, role = sw.name, "switch"
    checks = kernel_checks(m, role, out, None, None)
    tofino = sw.kind == "tofino"
    if not tofino:
        checks.append(Check(m, role, "sde", NA, False, "the emulated switch is the emulator (switch/emulator): no SDE"))
    else:
        checks.append(_sde(m, out.get("sde"), out.get("errors", {}).get("sde"), sw))
    if liveness is not None:
        state, why = liveness
        what = "bf_switchd" if tofino else "the emulator"
        running = (out.get("sde") or {}).get("switchd_running")
        extra = f"; a bf_switchd process {'runs' if running else 'does not run'}" if tofino and out.get("sde") else ""
        st = OK if state == "up" else WARN
        fix = None if st == OK else "`rainmaker switch start` (a run starts it itself); `rainmaker switch status`"
        checks.append(Check(m, role, "switchd", st, False, f"{what}: {state}: {why}{extra}", fix))
    if tofino and sw.target == "asic":
        checks.append(hugepage_check(m, role, out, sw.hugepages.size_kb, sw.hugepages.count, True, None))
    else:
        checks.append(hugepage_check(m, role, out, 0, 0, False, "bf_switchd's DMA pages: a Tofino ASIC's only"))
    return checks


def _sde(m: str, s: dict | None, err: str | None, sw) -> Check:
    fix = "`rainmaker provision --limit SWITCH` (the tofino_sde role); switch.sde and switch.sde_install name it"
    if s is None:
        return Check(m, "switch", "sde", WARN, True, f"not read: {err or '?'}")
    if not s["sde"] or not s["install"] or not s["switchd"]:
        missing = [w for w, ok in ((str(sw.sde), s["sde"]), (str(sw.sde_install_path), s["install"])) if not ok]
        if s["install"] and not s["switchd"]:
            missing.append(f"{sw.sde_install_path}/bin/bf_switchd")
        return Check(m, "switch", "sde", FAIL, True, f"no SDE: {', '.join(missing)} missing", fix)
    found = f"SDE {s['version'] or 'of unknown version'} ({s['version_from']})"
    if sw.sde_version and s["version"] != sw.sde_version:
        return Check(m, "switch", "sde", FAIL, True, f"{found}, but switch.sde_version is {sw.sde_version}", fix)
    return Check(m, "switch", "sde", OK, True, found)


def host_checks(inv: Inventory, h: Host, out: dict, needs: Needs) -> list[Check]:
    m, role = h.name, h.role
    checks = kernel_checks(m, role, out, needs, h)
    na = "a namespace host: DPDK runs without huge pages (--no-huge)" if h.netns is not None else None
    if not needs.dpdk and na is None:
        na = f"{needs.source} runs no DPDK program"
    checks.append(hugepage_check(m, role, out, h.hugepages.size_kb, h.hugepages.count, needs.dpdk, na))
    checks.append(dpdk_check(m, role, out, inv, needs))
    checks.append(nic_check(m, role, out, h, needs))
    checks += roce_checks(m, role, out, h, inv, needs)
    checks.append(timestamping_check(m, role, out, h))
    checks.append(clocksource_check(m, role, out))
    checks += cpu_checks(m, role, out, h)
    return checks


def unreachable(m: str, role: str, error: str) -> Check:
    return Check(
        m,
        role,
        "reach",
        FAIL,
        True,
        f"the probe did not run: {error}",
        "`rainmaker exec -- true` shows each machine's SSH; the inventory's mgmt block names it "
        "(emulated: `rainmaker testbed up`)",
    )
