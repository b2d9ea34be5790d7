"""What RocksDB requests cost, as measured: the costs.json a handler run writes
(`rainmaker run experiments/fig2.yaml`) and the specs read (database.costs).

A costs file holds one row per (op, key count, item size): the operation's mean run
time on a worker, alone (no queue, no network, no dilation). A keys class of a spec
takes its mean service time from the rows of its op at the database's item size,
interpolated linearly in the key count (extrapolated from the two nearest counts
outside the measured range); its us_per_key is that mean over its key count.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

FORMAT = "rainmaker-kv-costs/1"


class CostsError(ValueError):
    """A costs file that cannot answer: the message names the file, `fix` says what to do."""

    def __init__(self, message: str, fix: str):
        super().__init__(message)
        self.fix = fix


def write(path: Path, rows: list[dict], *, database: dict, source: dict) -> None:
    """rows: {op, count, item_bytes, requests, mean_us, p50_us, p99_us}."""
    doc = {"format": FORMAT, "database": database, "source": source, "rows": rows}
    path.write_text(json.dumps(doc, indent=1) + "\n")


def read(path: Path) -> list[dict]:
    try:
        doc = json.loads(path.read_text())
    except OSError as e:
        raise CostsError(
            f"{path}: cannot read it ({e.strerror})",
            "run experiments/fig2.yaml, or give the path of its results' costs.json",
        ) from None
    except json.JSONDecodeError as e:
        raise CostsError(
            f"{path}: not JSON ({e.msg}, line {e.lineno})", "use a costs.json a handler run wrote"
        ) from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(doc.get("rows"), list):
        raise CostsError(f"{path}: not a costs file (format {FORMAT})", "use a costs.json a handler run wrote")
    rows = []
    for i, r in enumerate(doc["rows"]):
        try:
            row = {
                "op": str(r["op"]),
                "count": int(r["count"]),
                "item_bytes": int(r["item_bytes"]),
                "mean_us": float(r["mean_us"]),
            }
        except (KeyError, TypeError, ValueError):
            raise CostsError(f"{path}: row {i} lacks op, count, item_bytes or mean_us", "measure again") from None
        if row["count"] < 1 or not (math.isfinite(row["mean_us"]) and row["mean_us"] > 0):
            raise CostsError(f"{path}: row {i} has count {row['count']} and mean {row['mean_us']} us", "measure again")
        rows.append(row)
    return rows


def mean_us(rows: list[dict], op: str, item_bytes: int, keys: float, *, path: Path) -> float:
    """The mean service time of an `op` request of `keys` keys over items of `item_bytes`."""
    by_count: dict[int, list[float]] = {}
    for r in rows:
        if r["op"] == op and r["item_bytes"] == item_bytes:
            by_count.setdefault(r["count"], []).append(r["mean_us"])
    pts = sorted((c, sum(v) / len(v)) for c, v in by_count.items())
    if not pts:
        have = sorted({(r["op"], r["item_bytes"]) for r in rows})
        listed = ", ".join(f"{o} at {b} B" for o, b in have) or "nothing"
        raise CostsError(
            f"{path} has no {op} rows for {item_bytes}-byte items (it has {listed})",
            f"add {item_bytes} to the handler run's item_bytes and {op} to its ops, or set database.item_bytes to "
            "a measured size",
        )
    if len(pts) == 1:
        ((c, m),) = pts
        return m * keys / c  # one count: proportional to the keys
    # the segment that holds `keys`, or the nearest one at either end
    i = next((j for j in range(1, len(pts)) if keys <= pts[j][0]), len(pts) - 1)
    (c0, m0), (c1, m1) = pts[i - 1], pts[i]
    m = m0 + (m1 - m0) * (keys - c0) / (c1 - c0)
    return max(m, min(m0, m1) * 0.01)  # extrapolated below the data: never zero or negative
