"""Regression mode: compare a run's report.json with a baseline, as ratios.

Correctness figures must not get worse at all (lost, unexpected, corrupt,
unexplained duplicates: any increase over the baseline fails).  Speed figures
(``*.deliver_per_s``, ``*.send_per_s``: higher is better; ``*.send_p50``,
``*.send_p99``: lower is better) fail when the ratio run/baseline is worse than
the tolerance (default 0.5: half the baseline's throughput, or twice its latency).
"""

from __future__ import annotations

import json
from pathlib import Path

STRICT = ("lost-count", "unexpected-count")


def _figures(report: dict) -> dict:
    return report.get("figures", report)


def compare(baseline: dict, run: dict, tolerance: float = 0.5) -> tuple[bool, list[dict]]:
    b, r = _figures(baseline), _figures(run)
    rows = []
    ok = True
    if run.get("valid") is False:
        ok = False
        rows.append({"figure": "valid", "baseline": baseline.get("valid"), "run": False, "verdict": "FAIL"})
    for k in STRICT:
        if k in b or k in r:
            bad = (r.get(k) or 0) > (b.get(k) or 0)
            ok &= not bad
            rows.append({"figure": k, "baseline": b.get(k), "run": r.get(k), "verdict": "FAIL" if bad else "ok"})
    for k in sorted(set(b) & set(r)):
        bv, rv = b[k], r[k]
        if not isinstance(bv, (int, float)) or not isinstance(rv, (int, float)) or not bv:
            continue
        if k.endswith("_per_s"):
            ratio = rv / bv
        elif k.endswith(("_p50", "_p99")):
            ratio = bv / rv if rv else float("inf")
        else:
            continue
        bad = ratio < tolerance
        ok &= not bad
        rows.append({"figure": k, "baseline": bv, "run": rv, "ratio": round(ratio, 3),
                     "verdict": "FAIL" if bad else "ok"})
    return ok, rows


def compare_files(baseline: str | Path, run: str | Path, tolerance: float = 0.5) -> tuple[bool, list[dict]]:
    return compare(json.loads(Path(baseline).read_text()), json.loads(Path(run).read_text()), tolerance)
