"""The walls between the layers (docs/architecture.md, "The walls"), read from the
imports of the sources. The emulator's own wall is tested with its pipeline
(tests/unit/test_emulator_pipeline.py)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OURS = ("orchestrator", "switch", "hosts", "tests")


def imports(path: Path) -> list[str]:
    """Absolute module names a file imports; relative imports resolved against its package."""
    package = list(path.relative_to(REPO).with_suffix("").parts[:-1])
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                out.append(".".join(base + ([node.module] if node.module else [])))
            elif node.module:
                out.append(node.module)
    return out


def sources(*folders: str) -> list[Path]:
    return [p for f in folders for p in (REPO / f).rglob("*.py") if "_gen" not in p.parts]


def test_the_agents_use_only_the_standard_library_and_each_other():
    # They are copied alone to the hosts (orchestrator/deploy.py, AGENT_FILES) and run by
    # the host's python3, where nothing else of rainmaker, and no third-party package, is.
    deployed = [REPO / "hosts" / "proto.py", REPO / "hosts" / "ctl.py", *sources("hosts/agent")]
    bad = []
    for path in deployed:
        for name in imports(path):
            top = name.split(".")[0]
            if top == "hosts" or top in sys.stdlib_module_names or top == "__future__":
                continue
            bad.append(f"{path.relative_to(REPO)} imports {name}")
    assert not bad, "\n".join(bad)


def test_switch_never_imports_the_orchestrator():
    bad = [
        f"{p.relative_to(REPO)} imports {n}"
        for p in sources("switch")
        for n in imports(p)
        if n.split(".")[0] in ("orchestrator", "tests")
    ]
    assert not bad, "\n".join(bad)


def test_the_controller_reaches_the_switch_only_through_bfrt():
    allowed = ("switch.bfrt", "switch.errors", "switch.p4", "switch.control")
    bad = [
        f"{p.relative_to(REPO)} imports {n}"
        for p in sources("switch/control")
        for n in imports(p)
        if n.split(".")[0] in OURS and not n.startswith(allowed)
    ]
    assert not bad, "\n".join(bad)


# One exception: the simulated testbed and the run's coordinator run Algorithm 1 by
# calling the worker agent's own decision code (one code path, so a simulation decides
# as a testbed would, and the coordinator sums the agents' reports as they are made).
# That module is pure logic: it imports nothing of the hosts' runtime (checked below).
SHARED_WITH_SIMULATOR = ("hosts.agent.adaptive",)


def test_the_orchestrator_reaches_hosts_only_over_ssh():
    bad = [
        f"{p.relative_to(REPO)} imports {n}"
        for p in sources("orchestrator")
        for n in imports(p)
        if n.split(".")[0] in ("hosts", "tests") and n not in SHARED_WITH_SIMULATOR
    ]
    assert not bad, "\n".join(bad)
    for name in SHARED_WITH_SIMULATOR:
        f = REPO / (name.replace(".", "/") + ".py")
        assert [n for n in imports(f) if n.split(".")[0] in OURS] == [], f"{name} must stay pure logic"


def test_the_import_reader_sees_a_forbidden_import(tmp_path, monkeypatch):
    # The walls above are only as good as imports(): it must resolve relative imports.
    pkg = tmp_path / "hosts" / "agent"
    pkg.mkdir(parents=True)
    f = pkg / "x.py"
    f.write_text("from ...orchestrator import cli\nfrom .. import ctl\nimport grpc\n")
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    assert imports(f) == ["orchestrator", "hosts", "grpc"]


def _module_graph(folder: str) -> dict[str, set[str]]:
    """Module -> the modules of `folder` it imports, anywhere in it (in a function too, or
    for type checking only): `from . import x` names the module x where there is one."""
    mods = {}
    for p in sources(folder):
        parts = list(p.relative_to(REPO).with_suffix("").parts)
        mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for m, p in mods.items():
        package = m if p.name == "__init__.py" else m.rpartition(".")[0]
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Import):
                named = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
                mod = ".".join(base + ([node.module] if node.module else []))
                named = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in mods else mod for a in node.names]
            else:
                continue
            graph[m] |= {n for n in named if n in mods and n != m}
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while (w := stack.pop()) != v:
                comp.append(w)
            if comp:
                out.append(sorted([v, *comp]))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_circle_in_the_orchestrator():
    # Results are read (points), modelled (model_beside, using the simulator), judged
    # (validity), analysed, drawn and reported, each depending one way; the simulator
    # never imports what reads its own output back.
    circles = _circles(_module_graph("orchestrator"))
    assert not circles, "\n".join(" <-> ".join(c) for c in circles)


def test_the_circle_finder_finds_one():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []


MODULE_LINES, FUNCTION_LINES = 650, 100  # "about 600" and "about 80", with the slack "about" gives


def _oversized(root: Path) -> list[str]:
    """Modules and functions over the bounds that do not say why: a module's docstring
    names its size ("... lines"); a function's docstring, or its module's naming it,
    does the same."""
    out = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text()
        tree = ast.parse(text)
        mod_doc = ast.get_docstring(tree) or ""
        if len(text.splitlines()) > MODULE_LINES and "lines" not in mod_doc:
            out.append(f"{path.relative_to(root.parent)}: {len(text.splitlines())} lines")
        for f in ast.walk(tree):
            if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.end_lineno - f.lineno + 1 > FUNCTION_LINES:
                own = ast.get_docstring(f) or ""
                if "lines" not in own and not (f"{f.name}()" in mod_doc and "lines" in mod_doc):
                    out.append(f"{path.relative_to(root.parent)}: {f.name}, {f.end_lineno - f.lineno + 1} lines")
    return out


def test_no_module_or_function_of_the_orchestrator_is_oversized_without_saying_why():
    assert _oversized(REPO / "orchestrator") == []


def test_the_size_check_sees_an_unexplained_giant(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    body = "".join(f"    x{i} = {i}\n" for i in range(FUNCTION_LINES + 1))
    (pkg / "big.py").write_text('"""A module."""\n\n\ndef giant():\n' + body)
    (pkg / "said.py").write_text('"""A module."""\n\n\ndef giant():\n    """A flat list (about 100 lines)."""\n' + body)
    assert _oversized(pkg) == [f"pkg/big.py: giant, {FUNCTION_LINES + 2} lines"]
