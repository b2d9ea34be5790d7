"""Read the P4 sources as data: header layouts, constants, and the fully qualified
names of every table, action, register and counter, as bf-p4c would name them in
bf-rt.json (pipe.<top control>.<instance>.<object>; actions without `pipe.`).

This lets tests hold the P4, the C wire protocol and the emulator's bf-rt.json to
one contract without a P4 compiler (tests/switch/test_p4_compile.py compiles the
program when a Tofino compiler is at hand).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

P4_DIR = Path(__file__).resolve().parent

_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)


def _text(path: Path) -> str:
    return _COMMENT.sub(" ", path.read_text())


PROGRAM = "rain"  # the default program: switch/p4/rain.p4


def files(program: str = PROGRAM, directory: Path = P4_DIR) -> list[Path]:
    """The program's top file (<program>.p4) and every file it includes, recursively
    (`#include "x.p4"`, from `directory`): the program as the compiler reads it, and
    nothing of the other programs beside it."""
    out: list[Path] = []

    def visit(path: Path) -> None:
        if path in out:
            return
        out.append(path)
        for inc in re.findall(r'^\s*#include\s+"([^"]+)"', path.read_text(), re.M):
            if (directory / inc).exists():
                visit(directory / inc)

    top = directory / f"{program}.p4"
    if not top.exists():
        raise FileNotFoundError(f"no P4 program {program!r}: {top} does not exist")
    visit(top)
    return sorted(out)


def _program_text(program: str, directory: Path) -> str:
    return "\n".join(_text(p) for p in files(program, directory))


@dataclass
class ControlDecl:
    name: str
    tables: list[str] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    registers: list[str] = field(default_factory=list)
    counters: list[str] = field(default_factory=list)
    table_actions: dict[str, list[str]] = field(default_factory=dict)  # table -> its actions
    instances: dict[str, str] = field(default_factory=dict)  # instance name -> control type


def _balanced(text: str, start: int) -> int:
    """Index just past the brace block that opens at or after `start`."""
    i = text.index("{", start)
    depth = 0
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return j + 1
    raise ValueError("unbalanced braces")


def _split_args(args: str) -> list[str]:
    """A macro call's arguments, split at top-level commas."""
    out, depth, cur = [], 0, ""
    for ch in args:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    out.append(cur.strip())
    return out


def _expand_macros(text: str) -> str:
    """Expand the one kind of macro the sources use: #define NAME(A, B) body with ##A and
    plain B (the arguments are words or simple expressions)."""
    macros = {}
    for m in re.finditer(r"#define\s+(\w+)\(([\w\s,]+)\)((?:[^\n]*\\\n)*[^\n]*)", text):
        params = [p.strip() for p in m.group(2).split(",")]
        macros[m.group(1)] = (params, m.group(3).replace("\\\n", "\n"))
    text = re.sub(r"#define\s+\w+\([\w\s,]+\)(?:[^\n]*\\\n)*[^\n]*", " ", text)

    def expand(m: re.Match, params: list[str], body: str) -> str:
        args = _split_args(m.group(1))
        for p, a in zip(params, args):
            body = body.replace(f"##{p}", a)
            body = re.sub(rf"\b{p}\b", a, body)
        return body

    for name, (params, body) in macros.items():
        text = re.sub(rf"\b{name}\(((?:[^()]|\([^()]*\))*)\)", lambda m, p=params, b=body: expand(m, p, b), text)
    return text


def controls(directory: Path = P4_DIR, program: str = PROGRAM) -> dict[str, ControlDecl]:
    out: dict[str, ControlDecl] = {}
    for path in files(program, directory):
        text = _expand_macros(_text(path))
        for m in re.finditer(r"\bcontrol\s+(\w+)\s*\(", text):
            end = _balanced(text, m.end())
            body = text[m.end() : end]
            c = ControlDecl(m.group(1))
            c.tables = re.findall(r"\btable\s+(\w+)\s*\{", body)
            for t in c.tables:
                tb = body[body.index(f"table {t}") :]
                tb = tb[: _balanced(tb, 0)]
                am = re.search(r"\bactions\s*=\s*\{([^}]*)\}", tb)
                c.table_actions[t] = re.findall(r"(\w+)\s*;", am.group(1)) if am else []
            c.actions = re.findall(r"\baction\s+(\w+)\s*\(", body)
            c.registers = re.findall(r"\bRegister\s*<[^;(]*>\s*\([^;]*?\)\s*(\w+)\s*;", body)
            c.counters = re.findall(r"\bCounter\s*<[^;(]*>\s*\([^;]*?\)\s*(\w+)\s*;", body)
            c.instances = {inst: typ for typ, inst in re.findall(r"\b([A-Z]\w*)\s*\(\s*\)\s*(\w+)\s*;", body)}
            out[c.name] = c
    return out


@dataclass(frozen=True)
class Names:
    tables: frozenset[str]
    actions: frozenset[str]  # every action declared (bf-rt.json lists only those of tables)
    table_actions: dict[str, tuple[str, ...]]  # table -> its actions, as bf-rt.json names them
    registers: frozenset[str]
    counters: frozenset[str]


def qualified_names(
    top_controls: tuple[str, ...] = ("SwitchIngress", "SwitchEgress"),
    directory: Path = P4_DIR,
    program: str = PROGRAM,
) -> Names:
    ctl = controls(directory, program)
    tables, actions, registers, counters = set(), set(), set(), set()
    table_actions: dict[str, tuple[str, ...]] = {}

    def walk(ctype: str, prefix: str) -> None:
        c = ctl[ctype]
        tables.update(f"pipe.{prefix}.{t}" for t in c.tables)
        for t, acts in c.table_actions.items():
            table_actions[f"pipe.{prefix}.{t}"] = tuple(a if a == "NoAction" else f"{prefix}.{a}" for a in acts)
        actions.update(f"{prefix}.{a}" for a in c.actions)
        registers.update(f"pipe.{prefix}.{r}" for r in c.registers)
        counters.update(f"pipe.{prefix}.{k}" for k in c.counters)
        for inst, typ in c.instances.items():
            if typ in ctl:
                walk(typ, f"{prefix}.{inst}")

    for top in top_controls:
        walk(top, top)
    return Names(frozenset(tables), frozenset(actions), table_actions, frozenset(registers), frozenset(counters))


def header_fields(name: str, directory: Path = P4_DIR, program: str = PROGRAM) -> list[tuple[str, int]]:
    """(field, width in bits) of `header NAME { ... }`, typedefs resolved."""
    text = _program_text(program, directory)
    typedefs = {n: int(w) for w, n in re.findall(r"typedef\s+bit<(\d+)>\s+(\w+)\s*;", text)}
    m = re.search(rf"\bheader\s+{name}\s*\{{(.*?)\}}", text, re.S)
    if not m:
        raise KeyError(name)
    out = []
    for typ, fname in re.findall(r"(bit<\d+>|\w+)\s+(\w+)\s*;", m.group(1)):
        width = int(typ[4:-1]) if typ.startswith("bit<") else typedefs[typ]
        out.append((fname, width))
    return out


def constants(directory: Path = P4_DIR, program: str = PROGRAM) -> dict[str, int]:
    text = _program_text(program, directory)
    out = {
        n: int(v, 0)
        for n, v in re.findall(r"\bconst\s+\w+(?:<\d+>)?\s+(\w+)\s*=\s*(-?(?:0x[0-9a-fA-F]+|\d+))\s*;", text)
    }
    out.update({n: int(v, 0) for n, v in re.findall(r"#define\s+(\w+)\s+(0x[0-9a-fA-F]+|\d+)\b", text)})
    return out


# -- keys and action parameters (for checking the emulator's schema) -----------------

TNA_TYPES = {"PortId_t": 9, "MulticastGroupId_t": 16, "bool": 1}


def _type_widths(text: str) -> dict[str, int]:
    widths = dict(TNA_TYPES)
    widths.update({n: int(w) for w, n in re.findall(r"typedef\s+bit<(\d+)>\s+(\w+)\s*;", text)})
    return widths


def _width(typ: str, widths: dict[str, int]) -> int:
    m = re.fullmatch(r"(?:bit|int)<(\d+)>", typ)
    return int(m.group(1)) if m else widths[typ]


def _struct_fields(text: str, widths: dict[str, int]) -> dict[str, dict[str, int]]:
    out = {}
    for kind_name, body in re.findall(r"\b(?:header|struct)\s+(\w+)\s*\{(.*?)\}", text, re.S):
        fields = {}
        for typ, fname in re.findall(r"((?:bit|int)<\d+>|\w+)\s+(\w+)\s*;", body):
            try:
                fields[fname] = _width(typ, widths)
            except KeyError:
                pass
        out[kind_name] = fields
    return out


def table_schema(directory: Path = P4_DIR, program: str = PROGRAM) -> dict[str, dict]:
    """Per qualified table: {"keys": [(name, match, width)], "size": int} and per
    qualified action: {"params": [(name, width)]} under the key "actions"."""
    text = _expand_macros(_program_text(program, directory))
    widths = _type_widths(text)
    structs = _struct_fields(text, widths)
    consts = constants(directory, program)
    var_struct = {"hdr": "headers_t", "ig_md": "ingress_md_t", "eg_md": "egress_md_t"}
    header_of = {
        f: t
        for t, f in re.findall(
            r"(\w+_h)\s+(\w+)\s*;", re.search(r"struct\s+headers_t\s*\{(.*?)\}", text, re.S).group(1)
        )
    }
    intrinsic = {"eg_intr_md.egress_rid": 16, "ig_intr_md.ingress_port": 9}

    def key_width(expr: str) -> int:
        m = re.fullmatch(r"(.*)\[(\d+):(\d+)\]", expr)
        if m:
            return int(m.group(2)) - int(m.group(3)) + 1
        if expr in intrinsic:
            return intrinsic[expr]
        parts = expr.split(".")
        if parts[0] == "hdr":
            return structs[header_of[parts[1]]][parts[2]]
        return structs[var_struct[parts[0]]][parts[1]]

    ctl = controls(directory, program)
    out: dict[str, dict] = {"actions": {}}
    names = qualified_names(directory=directory, program=program)
    for table, acts in names.table_actions.items():
        prefix, tname = table[len("pipe.") :].rsplit(".", 1)
        ctype = _control_at(prefix, ctl)
        body = _control_body(text, ctype)
        tb = body[body.index(f"table {tname}") :]
        tb = tb[: _balanced(tb, 0)]
        keys = []
        km = re.search(r"\bkey\s*=\s*\{([^}]*)\}", tb)
        for expr, match, ann in re.findall(
            r"([\w.\[\]:]+)\s*:\s*(\w+)\s*(@name\(\"[^\"]+\"\))?\s*;", km.group(1) if km else ""
        ):
            name = re.search(r'"([^"]+)"', ann).group(1) if ann else expr
            keys.append(
                (name, {"exact": "Exact", "ternary": "Ternary", "lpm": "LPM", "range": "Range"}[match], key_width(expr))
            )
        sm = re.search(r"\bsize\s*=\s*(\w+)\s*;", tb)
        size = (int(sm.group(1)) if sm.group(1).isdigit() else consts[sm.group(1)]) if sm else None
        out[table] = {"keys": keys, "size": size, "actions": list(acts)}
        for a in acts:
            if a == "NoAction":
                out["actions"][a] = {"params": []}
                continue
            aname = a.rsplit(".", 1)[1]
            am = re.search(rf"\baction\s+{aname}\s*\(([^)]*)\)", body)
            params = []
            for p in filter(None, (x.strip() for x in am.group(1).split(","))):
                typ, pname = p.rsplit(None, 1)
                params.append((pname, _width(typ, widths)))
            out["actions"][a] = {"params": params}
    return out


def _control_at(prefix: str, ctl: dict[str, ControlDecl]) -> str:
    parts = prefix.split(".")
    ctype = parts[0]
    for inst in parts[1:]:
        ctype = ctl[ctype].instances[inst]
    return ctype


def _control_body(text: str, ctype: str) -> str:
    m = re.search(rf"\bcontrol\s+{ctype}\s*\(", text)
    return text[m.end() : _balanced(text, m.end())]


def register_schema(directory: Path = P4_DIR, program: str = PROGRAM) -> dict[str, dict]:
    """Per qualified register or counter: {"width": bits, "signed": bool, "size": cells}."""
    text = _expand_macros(_program_text(program, directory))
    consts = constants(directory, program)
    ctl = controls(directory, program)
    names = qualified_names(directory=directory, program=program)
    out = {}
    for fq in sorted(names.registers | names.counters):
        prefix, rname = fq[len("pipe.") :].rsplit(".", 1)
        body = _control_body(text, _control_at(prefix, ctl))
        m = re.search(
            rf"\b(Register|Counter)\s*<\s*((?:bit|int)<(\d+)>)[^;(]*>\s*\(\s*(\w+)[^;]*?\)\s*{rname}\s*;", body
        )
        size = int(m.group(4)) if m.group(4).isdigit() else consts[m.group(4)]
        out[fq] = {"kind": m.group(1), "width": int(m.group(3)), "signed": m.group(2).startswith("int"), "size": size}
    return out
