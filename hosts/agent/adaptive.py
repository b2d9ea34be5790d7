"""Adaptive scheduling, Algorithm 1 of the Rain paper (section 3.3). Pure logic, in two
halves:

- `decide` (lines 7-31), run by each worker agent over its own workers once per control
  interval: from each worker's samples and idleness, new token quotas, and each slice's
  overload count O_s, idleness I_s and members, which it reports;
- `rebalance` (lines 32-37), run by the coordinator over every agent's report of the
  same interval: slices labelled from the summed O_s and I_s, then greedy moves of the
  least-provisioned worker of the idlest underloaded slice into the most overloaded
  one (quota 1). The orchestrator carries a move out on the switch and the worker
  (orchestrator/experiment/coordinator.py); the simulated testbed applies it at once.

Per sample (one finished task): slowdown (L_w + L_sw + T_w) / T_w, the worker-side
share of queuing L_w / (L_w + L_sw), and the switch queue length Q_sw seen at dispatch.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Params:
    s_th: float = 10.0  # slowdown threshold S_th
    r_th: float = 0.5  # HoL-blocking threshold R_th
    n_max: int = 8  # quota cap


@dataclass
class WorkerState:
    wid: int  # index in the control block
    quota: int  # n_w
    slice: int
    samples: list[tuple[int, int, int, int]] = field(default_factory=list)  # (L_w, T_w, L_sw, Q_sw) ns/ns/ns/tasks
    idleness: float = 0.0  # I_w over the interval, 0..1


@dataclass
class Decision:
    wid: int
    quota: int
    slice: int
    why: str


def _p99(values: list[float]) -> float:
    if not values:
        return 0.0
    s = sorted(values)
    return s[min(len(s) - 1, int(0.99 * len(s)))]


def decide(workers: list[WorkerState], p: Params) -> tuple[list[Decision], dict]:
    """One agent's control interval of Algorithm 1 (lines 7-31). Returns the decisions
    for the workers whose quota changed, and the agent's report: per-slice labels (from
    its own workers), overload counts, idleness sums and members {wid: quota}."""
    by_slice: dict[int, list[WorkerState]] = {}
    for w in workers:
        by_slice.setdefault(w.slice, []).append(w)
    quota = {w.wid: w.quota for w in workers}
    slice_of = {w.wid: w.slice for w in workers}
    why: dict[int, str] = {}
    over: dict[int, int] = {}
    idle: dict[int, float] = {}
    labels: dict[int, str] = {}
    inputs: dict[int, dict] = {}  # per worker, what the rules saw: the log's "inputs"
    for s, members in by_slice.items():
        o_s, i_s = 0, 0.0
        for w in members:
            slow = [(lw + lsw + tw) / tw for lw, tw, lsw, _ in w.samples if tw > 0]
            ratios = [lw / (lw + lsw) for lw, _, lsw, _ in w.samples if lw + lsw > 0]
            s_p99 = _p99(slow)
            r_q = sum(ratios) / len(ratios) if ratios else 0.0
            q_p99 = _p99([q for *_, q in w.samples])
            inputs[w.wid] = {
                "s99": round(s_p99, 2),
                "r": round(r_q, 3),
                "qsw99": q_p99,
                "idle": round(w.idleness, 3),
                "n": len(w.samples),
            }
            if s_p99 > p.s_th:
                if quota[w.wid] > 1 and r_q > p.r_th and q_p99 == 0:
                    quota[w.wid] -= 1
                    why[w.wid] = f"HoL blocking: S99={s_p99:.1f} R={r_q:.2f} Qsw99=0 -> quota {quota[w.wid]}"
                elif quota[w.wid] < p.n_max and r_q < p.r_th:
                    quota[w.wid] += 1
                    why[w.wid] = f"switch queue dominates: S99={s_p99:.1f} R={r_q:.2f} -> quota {quota[w.wid]}"
                else:
                    o_s += 1
            else:
                i_s += w.idleness
        if o_s > 0 and i_s > 1:
            n_bar = max(1, round(sum(quota[w.wid] for w in members) / len(members)))
            for w in members:
                if quota[w.wid] != n_bar:
                    quota[w.wid] = n_bar
                    why[w.wid] = f"slice {s} overloaded and idle at once: equalise quota to {n_bar}"
        elif o_s > 0:
            labels[s] = "overloaded"
        elif i_s > 1:
            labels[s] = "underloaded"
        over[s], idle[s] = o_s, i_s
    out = [
        Decision(w.wid, quota[w.wid], slice_of[w.wid], why[w.wid])
        for w in workers
        if quota[w.wid] != w.quota or slice_of[w.wid] != w.slice
    ]
    members = {s: {w.wid: quota[w.wid] for w in ms} for s, ms in by_slice.items()}
    return out, {"labels": labels, "overload": over, "idleness": idle, "members": members, "inputs": inputs}


def label(overload: int, idleness: float) -> str | None:
    """A slice's state from its overload count and total idleness (lines 24-31): both
    signals at once is intra-slice imbalance (the agents equalise), not a label."""
    if overload > 0 and idleness <= 1:
        return "overloaded"
    if overload == 0 and idleness > 1:
        return "underloaded"
    return None


@dataclass
class Move:
    worker: int  # global worker id
    src: int
    dst: int
    why: str


def rebalance(reports: list[dict]) -> tuple[list[Move], dict]:
    """Lines 32-37 over every agent's report of one control interval (`decide`'s second
    value, with members keyed by global worker id): O_s and I_s summed over the agents,
    slices labelled, then greedily the most overloaded slice takes the least-provisioned
    worker of the idlest underloaded one, which never gives its last worker. Returns
    the moves and the summed view for the log."""
    over: dict[int, int] = {}
    idle: dict[int, float] = {}
    members: dict[int, dict[int, int]] = {}
    for r in reports:
        for s, v in r.get("overload", {}).items():
            over[int(s)] = over.get(int(s), 0) + int(v)
        for s, v in r.get("idleness", {}).items():
            idle[int(s)] = idle.get(int(s), 0.0) + float(v)
        for s, ms in r.get("members", {}).items():
            members.setdefault(int(s), {}).update({int(w): int(q) for w, q in ms.items()})
    labels = {s: lab for s in members if (lab := label(over.get(s, 0), idle.get(s, 0.0)))}
    s_o = {s for s, lab in labels.items() if lab == "overloaded"}
    s_u = {s for s, lab in labels.items() if lab == "underloaded"}
    moves: list[Move] = []
    while s_o and s_u:
        so = max(sorted(s_o), key=lambda s: over.get(s, 0))
        su = max(sorted(s_u), key=lambda s: idle.get(s, 0.0))
        donors = members[su]
        if len(donors) > 1:  # never empty a slice
            w_star = min(sorted(donors), key=lambda w: donors[w])
            moves.append(
                Move(
                    w_star,
                    su,
                    so,
                    f"slice {so} overloaded (O={over.get(so, 0)}), slice {su} idle (I={idle.get(su, 0.0):.2f}): "
                    f"worker {w_star} (quota {donors[w_star]}) moves, quota 1",
                )
            )
        s_o.discard(so)
        s_u.discard(su)
    view = {"labels": labels, "overload": over, "idleness": {s: round(v, 4) for s, v in idle.items()}}
    return moves, view


class Controller:
    """One worker agent's Algorithm 1 loop over its workers: gathers the samples of each
    worker between decisions and decides once per control interval. The worker agent
    (hosts/agent/worker.py) and the simulated testbed (orchestrator/simulate) both drive
    this class, so a simulation makes the decisions a testbed would for the same samples."""

    def __init__(self, params: Params, n_workers: int, busy_ns: list[int], base: int = 0):
        if len(busy_ns) != n_workers:
            raise ValueError(f"busy_ns has {len(busy_ns)} entries for {n_workers} workers")
        self.params = params
        self.n = n_workers
        self.base = base  # global id of this agent's worker 0: its report names global ids
        self._busy = list(busy_ns)
        self._pending: list[list[tuple[int, int, int, int]]] = [[] for _ in range(n_workers)]
        self.lost = 0  # samples overwritten before they were read, since the start

    def add_samples(self, i: int, samples: list[tuple[int, int, int, int]], lost: int = 0) -> None:
        self._pending[i] += samples
        self.lost += lost

    def step(
        self, t_s: float, elapsed_ns: float, quotas: list[int], slices: list[int], busy_ns: list[int]
    ) -> tuple[list[Decision], dict]:
        """Decide over the samples gathered since the last step. `elapsed_ns` is the
        interval's length, `busy_ns` each worker's busy-time counter now (idleness is the
        share of the interval it was not busy). Returns the decisions and the record
        decisions.jsonl keeps, which is also this agent's report to the coordinator
        (`rebalance`; the caller adds the quotas once it has applied them)."""
        states = []
        for i in range(self.n):
            idleness = max(0.0, 1.0 - (busy_ns[i] - self._busy[i]) / elapsed_ns) if elapsed_ns > 0 else 0.0
            self._busy[i] = busy_ns[i]
            states.append(WorkerState(i, quotas[i], slices[i], self._pending[i], idleness))
        changes, info = decide(states, self.params)
        info["members"] = {s: {self.base + w: q for w, q in ms.items()} for s, ms in info["members"].items()}
        info["inputs"] = {self.base + w: v for w, v in info["inputs"].items()}
        record = {
            "t": round(t_s, 4),
            "changes": [d.__dict__ for d in changes],
            "samples": [len(p) for p in self._pending],
            "lost_samples": self.lost,
            **info,
        }
        self._pending = [[] for _ in range(self.n)]
        return changes, record
