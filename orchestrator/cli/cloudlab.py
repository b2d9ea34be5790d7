"""The CloudLab verbs of the CLI that work on files: `rainmaker cloudlab profile` and
`import`. `start`, `status`, `extend` and `terminate` talk to CloudLab's portal
(cloudlab_portal.py)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import click
from rich.text import Text

from ..cloudlab import profile as profile_mod
from .app import cli, console, err_console


def _interactive() -> bool:
    return sys.stdin.isatty() and sys.stdout.isatty()


@cli.group("cloudlab")
def cloudlab() -> None:
    """Run on CloudLab: write the profile that requests a Rain testbed, then turn the
    running experiment's manifest into an inventory.

    \b
      rainmaker cloudlab profile --clients 1 --workers 2 -o profile.py
        (portal: Experiments > Create Experiment Profile > Edit Code; instantiate it)
      rainmaker cloudlab import manifest.xml --map map.yaml -o cloudlab.yaml
      rainmaker provision --check -i cloudlab.yaml

    Or let rainmaker drive the portal (your portal certificate: --cert):

    \b
      rainmaker cloudlab start rainproj,rain-tofino --project rainproj --name rain-1 \\
          --hours 8 --map map.yaml -o cloudlab.yaml
      rainmaker cloudlab status rainproj,rain-1
      rainmaker cloudlab extend rainproj,rain-1 --keep-alive --inventory cloudlab.yaml --reason "..."
      rainmaker cloudlab terminate rainproj,rain-1

    The Rakaia paper's nodes instead: xl170, Ubuntu 24.04, one plain LAN and no
    Tofino (only server-side systems run there; the import finds the LAN in the
    manifest and writes switch {name: lan, kind: lan}):

    \b
      rainmaker cloudlab profile --preset rakaia -o profile.py   (or --network lan)
      rainmaker cloudlab import manifest.xml --map map.yaml -o rakaia.yaml
    """


@cloudlab.command("profile")
@click.option(
    "--clients",
    type=click.IntRange(1, profile_mod.MAX_HOSTS),
    default=1,
    show_default=True,
    help="client hosts (they send the load)",
)
@click.option(
    "--workers",
    type=click.IntRange(1, profile_mod.MAX_HOSTS),
    default=2,
    show_default=True,
    help="worker hosts (they serve it)",
)
@click.option(
    "--hardware-type",
    default=profile_mod.DEFAULT_HOST_TYPE,
    show_default=True,
    help="CloudLab hardware type of the hosts: raw PCs with a ConnectX NIC",
)
@click.option(
    "--image",
    default=profile_mod.DEFAULT_IMAGE,
    show_default=True,
    help=f"disk image of the hosts: {', '.join(profile_mod.IMAGES)}, or an image URN",
)
@click.option(
    "--switch-hardware-type",
    default=profile_mod.DEFAULT_SWITCH_TYPE,
    show_default=True,
    help="hardware type of the Tofino switch. Only some CloudLab clusters have Tofinos, and each names "
    "its type: check the cluster's hardware list and pass that name (the default is a placeholder; "
    "the portal can also change it at instantiation)",
)
@click.option(
    "--switch-image",
    default=None,
    help="disk image of the switch (default: the image the cluster gives that switch type)",
)
@click.option("--switch-name", default="tofino", show_default=True, help="the switch node's name in the profile")
@click.option(
    "--subnet",
    default="10.10.1.0/24",
    show_default=True,
    help="data network: clients get the first addresses, then workers; the last stays for the switch",
)
@click.option(
    "--bandwidth-gbps",
    type=click.IntRange(1, 400),
    default=100,
    show_default=True,
    help="speed of each host-switch link",
)
@click.option(
    "--network",
    type=click.Choice(list(profile_mod.KINDS)),
    default="tofino",
    show_default=True,
    help="tofino: each host cabled to a Tofino node (Rain's testbed); lan: the hosts on one experiment LAN of "
    "the cluster's switches, no Tofino (only server-side systems run: Rakaia's specs, memcached); shared-vlan: "
    "the hosts on a LAN joined to a shared VLAN (--shared-vlan) that a Tofino outside the experiment is on",
)
@click.option(
    "--shared-vlan",
    "shared_vlan",
    default=None,
    metavar="NAME",
    help="with --network shared-vlan: the shared VLAN the lab's Tofino is on, as its owner named it",
)
@click.option(
    "--preset",
    type=click.Choice(["rakaia"]),
    default=None,
    help="rakaia: the Rakaia paper's nodes: --network lan --hardware-type xl170 --image ubuntu24 "
    "--clients 1 --workers 1 --bandwidth-gbps 25 (options given beside it win)",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, allow_dash=True),
    default="-",
    help="where to write profile.py (default: standard output)",
)
@click.pass_context
def profile_cmd(
    ctx: click.Context,
    clients: int,
    workers: int,
    hardware_type: str,
    image: str,
    switch_hardware_type: str,
    switch_image: str | None,
    switch_name: str,
    subnet: str,
    bandwidth_gbps: int,
    network: str,
    shared_vlan: str | None,
    preset: str | None,
    output: str,
) -> None:
    """Write a CloudLab profile (geni-lib Python) that requests a Rain testbed: CLIENTS
    and WORKERS raw PCs, each with one data interface on a point-to-point link to a
    port of the Tofino switch, which CloudLab allocates as a node too.

    \b
      rainmaker cloudlab profile --workers 4 --hardware-type d6515 -o profile.py
      rainmaker cloudlab profile --switch-hardware-type <your cluster's Tofino type>

    Paste the file into the portal (Experiments > Create Experiment Profile > Edit
    Code). Counts, hardware types and images are profile parameters: the portal
    lets you change them when you instantiate. Data addresses come from --subnet:
    client0 .1, then the other clients, then worker0, ...; the last address stays
    free for the switch's scheduling address. Once the experiment is ready,
    download its manifest and run `rainmaker cloudlab import`.

    \b
      rainmaker cloudlab profile --preset rakaia -o profile.py

    writes the Rakaia paper's topology instead: xl170 nodes with Ubuntu 24.04 on
    one experiment LAN and no Tofino (--network lan is that LAN with any other
    values); `rainmaker cloudlab import` turns its manifest into an inventory
    whose switch is {name: lan, kind: lan}.

    \b
      rainmaker cloudlab profile --network shared-vlan --shared-vlan rain-tofino -o profile.py

    is for a Tofino that is not CloudLab's (a lab's switch on a CloudLab shared VLAN):
    no switch node; the hosts' data interfaces are on one LAN joined to that shared
    VLAN. The import then takes the switch from the map file (switch: {external:
    true, address: ..., user: ...}, and the port each host is cabled to).
    """
    if preset == "rakaia":  # the preset's values, unless the option was given
        given = {n for n in ctx.params if ctx.get_parameter_source(n) is not click.core.ParameterSource.DEFAULT}
        vals = {"network": "lan", **{k: v for k, v in profile_mod.RAKAIA.items() if k != "kind"}}
        clients = clients if "clients" in given else vals["clients"]
        workers = workers if "workers" in given else vals["workers"]
        hardware_type = hardware_type if "hardware_type" in given else vals["hardware_type"]
        image = image if "image" in given else vals["image"]
        bandwidth_gbps = bandwidth_gbps if "bandwidth_gbps" in given else vals["bandwidth_gbps"]
        network = network if "network" in given else vals["network"]
    topo = profile_mod.Topology(
        kind=network,
        clients=clients,
        workers=workers,
        hardware_type=hardware_type,
        image=image,
        switch_name=switch_name,
        switch_hardware_type=switch_hardware_type,
        switch_image=switch_image,
        subnet=subnet,
        bandwidth_gbps=bandwidth_gbps,
        shared_vlan=shared_vlan,
    )
    topo.check()
    cmd = _profile_argv(topo)
    text = profile_mod.render(topo, shlex.join(cmd))
    if output == "-":
        click.echo(text, nl=False)
    else:
        Path(output).write_text(text)
    addrs = topo.addresses()
    err_console.print(
        f"profile: {clients} client(s) and {workers} worker(s) on {hardware_type}, "
        + (
            f"switch {switch_name} ({switch_hardware_type})"
            if network == "tofino"
            else f"one LAN on the shared VLAN {shared_vlan}, the Tofino outside the experiment (map: switch.external)"
            if network == "shared-vlan"
            else "one LAN, no Tofino"
        )
        + f"; data network {topo.network}: "
        + ", ".join(f"{n} {a}" for n, a in addrs.items())
        + (f"; written to {output}" if output != "-" else "")
    )


def _profile_argv(t: profile_mod.Topology) -> list[str]:
    """The command that writes this profile again, recorded in the profile's header."""
    cmd = ["rainmaker", "cloudlab", "profile", "--clients", str(t.clients), "--workers", str(t.workers)]
    cmd += ["--hardware-type", t.hardware_type, "--image", t.image]
    if t.kind == "tofino":
        cmd += ["--switch-hardware-type", t.switch_hardware_type]
        if t.switch_image:
            cmd += ["--switch-image", t.switch_image]
        if t.switch_name != "tofino":
            cmd += ["--switch-name", t.switch_name]
    elif t.kind == "shared-vlan":
        cmd += ["--network", t.kind, "--shared-vlan", t.shared_vlan or ""]
    else:
        cmd += ["--network", t.kind]
    return cmd + ["--subnet", t.subnet, "--bandwidth-gbps", str(t.bandwidth_gbps)]


@cloudlab.command("import")
@click.argument("manifest", type=click.Path(dir_okay=False))
@click.option(
    "--map",
    "map_path",
    type=click.Path(dir_okay=False),
    help="YAML map of what the manifest cannot say (switch ports and dev_ports, NIC PCI addresses, "
    "cores, the SDE, the SSH key and known_hosts)",
)
@click.option(
    "--switch",
    "switch_node",
    help="the Tofino node's client_id in the manifest (default: tofino; a switch outside the experiment: "
    "switch.external in the map)",
)
@click.option(
    "--network",
    type=click.Choice(["tofino", "lan"]),
    default=None,
    help="tofino: the hosts are cabled to a Tofino; lan: they share a plain LAN and no switch is programmed "
    "(switch.kind in the map says the same). Default: from the manifest: a LAN joining every node and no "
    "switch node is a LAN, as `cloudlab profile --network lan` requests it",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False),
    default="cloudlab.yaml",
    show_default=True,
    help="the inventory to write",
)
@click.option("--force", is_flag=True, help="overwrite the output if it exists")
@click.option(
    "--interactive/--no-interactive",
    default=None,
    help="ask for what is missing (default: when the terminal is interactive)",
)
def import_cmd(
    manifest: str,
    map_path: str | None,
    switch_node: str | None,
    network: str | None,
    output: str,
    force: bool,
    interactive: bool | None,
) -> None:
    """Turn the RSpec manifest of a running CloudLab experiment into a rainmaker
    inventory: nodes, logins, MACs, IPs and links come from MANIFEST; the Tofino
    node becomes `switch:` (BFRuntime at its address, port 50052), every other node
    on a link to it a host, whose role comes from its name (client*, worker*).

    What a manifest cannot say comes from the --map file, keyed by node name:

    \b
      switch:
        sde: /root/bf-sde-9.13.0       # $SDE on the switch
      ports:                           # front-panel port and dev_port (bfshell: pm show)
        client0: {port: "1/0", dev_port: 132}
        worker0: {port: "2/0", dev_port: 140}
      port_defaults: {speed: 100G, fec: rs}
      host_defaults:                   # hosts of one hardware type are alike
        pci: "0000:41:00.0"            # lspci -D | grep -i mellanox
        cores: [2, 3, 4, 5]
      ssh:
        key: ~/.ssh/id_ed25519         # a path: keys are never copied
        known_hosts: known_hosts       # ssh-keyscan the nodes, check the fingerprints

    `hosts.<node>` sets any host's own values (role, name, pci, cores, netdev,
    rdma_device, numa_node, hugepages, skip, interface); `switch:` also takes
    node, bfrt (e.g. an SSH tunnel, 127.0.0.1:50052), sde_version, chip,
    kernel_module, service_ip; `roce:`, `dpdk:` and `deploy:` are copied as they are.

    A switch that is not a node of the experiment (a Tofino of your own, on a
    shared VLAN the hosts' LAN joins) is `external`: the map gives its SSH address
    and user, and the ports as above; the hosts are the nodes on the shared-VLAN
    link (or on `switch.link`):

    \b
      switch: {external: true, name: tofino1, address: 192.0.2.10, user: root,
               sde: /root/bf-sde-9.13.0, link: vlan-tofino}

    Hosts on a plain LAN (`cloudlab profile --preset rakaia`: no switch node, one
    LAN joining every node) become switch {name: lan, kind: lan}, with no ports; the
    map then says only host_defaults, hosts, ssh, dpdk and deploy.

    In a terminal, whatever is still missing is asked for; otherwise the command
    fails listing every missing item, with a map snippet that fills them.

    \b
      rainmaker cloudlab import manifest.xml --map map.yaml -o cloudlab.yaml
      rainmaker inventory check cloudlab.yaml
    """
    _import_manifest(manifest, map_path, switch_node, network, output, force, interactive)


def _import_manifest(
    manifest: str,
    map_path: str | None,
    switch_node: str | None,
    network: str | None,
    output: str,
    force: bool,
    interactive: bool | None,
) -> None:
    """The import: `cloudlab import` runs it on the file given, `cloudlab start` on the
    manifest the portal returned."""
    from ..cloudlab import importer, mapping
    from ..cloudlab import manifest as manifest_mod
    from ..errors import CloudlabError, UsageError

    out = Path(output)
    if out.exists() and not force:
        raise UsageError(f"{out} exists", fix="pass --force to overwrite it, or -o another file")
    man = manifest_mod.load(manifest)
    mf = mapping.load(map_path) if map_path else mapping.empty()
    ask = _interactive() if interactive is None else interactive

    answers: dict[tuple[str, ...], object] = {}
    for _round in range(3):  # an answer (a role) can change what else is needed: ask again
        plan = importer.plan(man, mf, switch_node, network)
        left = importer.needs(plan)
        if not left:
            break
        if not ask:
            n = len(left)
            items = importer.listing(left)
            snippet = importer.snippet(left).replace("\n", "\n    ")
            raise CloudlabError(
                f"{manifest}: {n} thing{'s' if n != 1 else ''} the manifest cannot say "
                f"{'are' if n != 1 else 'is'} missing "
                + (f"from {map_path}" if map_path else "(no --map given)")
                + f":\n{items}",
                fix=f"add them to the map file (--map), e.g. (replace the examples):\n    {snippet}\n"
                "  or run in a terminal to be asked",
            )
        err_console.print(f"{len(left)} thing(s) the manifest cannot say (Ctrl-C to stop):")
        new = {tuple(n.path): _prompt(n) for n in left}
        answers.update(new)
        mf = mapping.with_answers(mf, new)
    else:
        raise CloudlabError("the answers still leave things missing", fix="write them in the map file instead")

    inv_data = importer.build(plan, out.parent)
    given = (("--map", map_path), ("--switch", switch_node), ("--network", network), ("-o", output))
    argv = shlex.join(["rainmaker", "cloudlab", "import", manifest] + [w for o, v in given if v for w in (o, v)])
    inv = importer.write(inv_data, out, importer.header(plan, out, argv))

    _print_imported(inv, plan, out, len(man.nodes), answers)


def _print_imported(inv, plan, out: Path, nodes: int, answers: dict) -> None:
    """What the import made of each node, its notes and warnings, and the answers to
    keep in the map file."""
    from ..cloudlab import importer
    from ..inventory import warnings

    sw = inv.switch
    console.print(f"{out}: inventory [bold]{inv.name}[/] from {nodes} nodes")

    def node(name: str, cid: str) -> str:
        return name if name == cid else f"{name} (node {cid})"

    if plan.lan:  # nothing to log into: say which LAN, and that nothing is programmed on it
        console.print(
            f"  network {sw.name}: the experiment's LAN {plan.lan_link.client_id}, a plain LAN (kind: lan): "
            "no switch to log into or program",
            markup=False,
        )
    else:
        console.print(
            f"  switch {node(sw.name, plan.switch.client_id)}: ssh {sw.mgmt.user}@{sw.mgmt.address}:"
            f"{sw.mgmt.port}, BFRuntime {sw.bfrt}, scheduling address {sw.service_ip}",
            markup=False,
        )
    for h, hp in zip(inv.hosts, plan.hosts):
        sp = sw.port(h.nic.switch_port) if h.nic.switch_port else None
        where = f"on port {sp.port} (dev_port {sp.dev_port})" if sp else f"on the LAN {hp.link}"
        console.print(
            f"  {h.role} {node(h.name, hp.node.client_id)}: ssh {h.mgmt.user}@{h.mgmt.address}:"
            f"{h.mgmt.port}, nic {h.nic.pci} {h.nic.mac} {h.nic.ip} {where}",
            markup=False,
        )
    for note in importer.notes(plan):
        err_console.print(Text("note: ", style="yellow") + Text(note))
    for w in warnings(inv, out.parent):
        err_console.print(Text("warning: ", style="yellow") + Text(w.render(str(out))))
        if w.path == "ssh.known_hosts":
            err_console.print(Text(f"  collect the host keys: {importer.keyscan_command(plan)}"))
    if answers:
        err_console.print("To skip these questions next time, put in the map file:")
        err_console.print(Text(importer.answers_yaml(answers)))


def _prompt(need) -> object:
    from pydantic_core import PydanticCustomError

    def proc(text: str):
        try:
            return need.parse(text)
        except (ValueError, PydanticCustomError) as e:
            raise click.BadParameter(str(e)) from None

    kind = click.Choice(list(need.choices)) if need.choices else None
    return click.prompt(need.question, default=need.default, type=kind, value_proc=None if kind else proc, err=True)
