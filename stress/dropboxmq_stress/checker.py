"""The checker: Jepsen's ``total-queue`` figures over a history directory, and more.

Jepsen (``jepsen.checker/total-queue``), with values = the test's message ids:

* ``attempt-count``      values some producer *invoked* a send for
* ``acknowledged-count`` values whose send returned ``ok``
* ``ok-count``           acknowledged values that were delivered (``receive ok``)
* ``lost-count``         acknowledged values never delivered (after the final drain)
* ``unexpected-count``   delivered values nobody ever tried to send
* ``duplicated-count``   values delivered more than once
* ``recovered-count``    delivered values whose send did not return ok (fail/info)

Ours, on top:

* ``in-doubt``: files left in working/ or processing/ after the final
  recovery (``final-state.json``); ``quarantined``: files in error/.
* every duplicate delivery is *explained* or not: the earlier delivery was
  never acknowledged because its process was **killed between claim and
  ack** (a ``kill`` nemesis record for that process), or its ack/commit
  **failed** (an injected fault), or it was **rolled back**.  A value
  redelivered after an acknowledged delivery is an *unexplained duplicate*.
* ``acked-unobserved``: acknowledged values found in processed/ that no
  history shows delivered: an AUTO_ACKNOWLEDGE ``receive`` acks before it
  returns, so a kill between the ack and the return loses the message to the
  application (JMS's at-most-once window).  Explained, and not counted lost,
  only when that consumer was killed with a ``receive`` in flight.
* ``corrupt``: deliveries whose body failed its length/CRC check (a torn or
  empty file delivered instead of quarantined);  ``redelivered-flag-missing``:
  a repeat delivery without JMSRedelivered.
* non-persistent acknowledged values may vanish in a power loss (they are
  never fsynced, by design): reported as ``lost-non-persistent``, not lost.

Valid when lost = unexpected = corrupt = unexplained duplicates = 0 (and no
quarantined acknowledged message unless the case injected I/O errors).
"""

from __future__ import annotations

import itertools
import json
import math
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from .history import read_history

__all__ = ["TOTAL_QUEUE_KEYS", "Facts", "check", "check_dir", "percentiles", "total_queue"]

#: the total-queue figures a profile sums over its cases (report.json's "figures", the HTML table)
TOTAL_QUEUE_KEYS = ("attempt-count", "acknowledged-count", "ok-count", "lost-count", "duplicated-count",
                    "unexpected-count", "recovered-count", "in-doubt-count", "quarantined-count")


@dataclass(frozen=True)
class Facts:
    """What a history says about one value -- or, with ``values`` > 1, about that many values alike
    (``dropboxmq audit`` groups them, so that tens of millions of values are a dozen rows)."""

    attempted: bool  # some producer invoked a send of it
    acknowledged: bool  # a send of it returned ok
    deliveries: int  # receive ok records (foreign ones excluded)
    value: str | None = None  # required when acknowledged and never delivered: the lost rule names it
    persistent: bool = True  # of its last acknowledged send (the power-loss rule)
    values: int = 1


def total_queue(facts: Iterable[Facts], final_state: dict, killed: Mapping[str, str], power_loss: bool) -> dict:
    """Jepsen's total-queue figures and our lost rule (the module docstring), the one computation
    of them: the checker and both engines of ``dropboxmq audit`` call it.  ``final_state``: after
    recovery, before the drain; ``killed``: process -> why, for every process a kill hit."""
    n = dict.fromkeys(("attempt-count", "acknowledged-count", "ok-count", "duplicated-count", "unexpected-count",
                       "recovered-count"), 0)
    unexpected: list[str] = []
    candidates: list[Facts] = []  # acknowledged, never delivered
    for f in facts:
        delivered = f.deliveries > 0
        n["attempt-count"] += f.values * f.attempted
        n["acknowledged-count"] += f.values * f.acknowledged
        n["ok-count"] += f.values * (delivered and f.acknowledged)
        n["duplicated-count"] += f.values * (f.deliveries >= 2)
        n["unexpected-count"] += f.values * (delivered and not f.attempted)
        n["recovered-count"] += f.values * (delivered and f.attempted and not f.acknowledged)
        if delivered and not f.attempted and f.value is not None:
            unexpected.append(f.value)
        if f.acknowledged and not delivered:
            if f.value is None or f.values != 1:
                raise ValueError("an acknowledged value never delivered is judged one by one: name it")
            candidates.append(f)

    processed_by: dict[str, str | None] = {}
    for entry in final_state.get("processed", []):
        if entry.get("value"):
            processed_by[entry["value"]] = entry.get("client")
    in_error = {e["value"] for e in final_state.get("error", []) if e.get("value")}
    acked_unobserved: dict[str, str] = {}
    lost_np: list[str] = []
    quarantined_acked: list[str] = []
    lost: list[str] = []
    for f in sorted(candidates, key=lambda f: f.value or ""):
        v = f.value or ""
        client = processed_by.get(v)
        if v in processed_by and client in killed:  # acked, then killed before it could record the delivery
            acked_unobserved[v] = killed[client or ""]
        elif v in in_error:
            quarantined_acked.append(v)
        elif power_loss and not f.persistent:
            lost_np.append(v)
        else:
            lost.append(v)
    return {
        **n,
        "lost-count": len(lost),
        "in-doubt-count": len(final_state.get("working", [])) + len(final_state.get("processing", [])),
        "quarantined-count": len(final_state.get("error", [])),
        "quarantined-acknowledged-count": len(quarantined_acked),
        "acked-unobserved-count": len(acked_unobserved),
        "lost-non-persistent-count": len(lost_np),
        "lost": lost[:50],
        "unexpected": sorted(unexpected)[:50],
        "quarantined-acknowledged": quarantined_acked[:50],
        "acked-unobserved": dict(list(acked_unobserved.items())[:50]),
    }


def percentiles(xs: list[float], ps=(50, 90, 99, 99.9)) -> dict[str, float | None]:
    if not xs:
        return {**{f"p{p:g}": None for p in ps}, "max": None, "mean": None, "n": 0}
    s = sorted(xs)
    out: dict[str, Any] = {}
    for p in ps:
        k = min(len(s) - 1, max(0, math.ceil(p / 100 * len(s)) - 1))
        out[f"p{p:g}"] = s[k]
    out["max"] = s[-1]
    out["mean"] = sum(s) / len(s)
    out["n"] = len(s)
    return out


def _values(rec: dict) -> list:
    v = rec.get("value")
    if v is None:
        return []
    return v if isinstance(v, list) else [v]


def check(records: Iterable[dict], final_state: dict | None = None, *, allow_quarantined: bool = False,
          power_loss: bool = False, bucket: float = 1.0) -> dict:
    records = sorted(records, key=lambda r: r.get("t", 0.0))
    final_state = final_state or {}
    attempts: dict[str, dict] = {}
    acked: dict[str, dict] = {}
    failed_sends: set[str] = set()
    deliveries: dict[str, list[dict]] = defaultdict(list)
    foreign: list[dict] = []
    corrupt: list[dict] = []
    ack_ok: dict[tuple[str, str], float] = {}  # (process, value) -> first time acked
    ack_trouble: dict[tuple[str, str], str] = {}  # (process, value) -> "ack failed: ..." / "rollback"
    killed: dict[str, float] = {}  # process -> kill time
    kill_events: list[dict] = []
    nemesis_events: list[dict] = []
    open_op: dict[str, dict | None] = {}  # process -> last invoke without completion
    send_lat: list[float] = []
    e2e_lat: list[float] = []
    t0 = records[0]["t"] if records else 0.0
    t_end = records[-1]["t"] if records else 0.0
    send_times: list[float] = []
    recv_times: list[float] = []
    power_loss_at: float | None = None
    faults = 0

    for r in records:
        p, typ, f = r.get("p", "?"), r.get("type"), r.get("f")
        if typ == "invoke":
            open_op[p] = r
        elif typ in ("ok", "fail", "info") and f in ("send", "receive", "ack", "commit", "rollback"):
            open_op[p] = None
        if f == "send":
            if typ == "invoke":
                for v in _values(r):
                    attempts[v] = r
            elif typ == "ok":
                for v in _values(r):
                    acked[v] = r
                    send_times.append(r["t"])
                if "lat" in r:
                    send_lat.append(r["lat"])
            elif typ == "fail":
                failed_sends.update(_values(r))
        elif f == "receive" and typ == "ok":
            if r.get("foreign") is not None:
                foreign.append(r)
                continue
            v = r.get("value")
            if v is None:
                continue
            deliveries[v].append(r)
            recv_times.append(r["t"])
            if r.get("corrupt"):
                corrupt.append(r)
            if "lat" in r and r.get("mode") != "drain":
                e2e_lat.append(r["lat"])
            if r.get("mode") == "auto":
                ack_ok.setdefault((p, v), r["t"])  # AUTO: acked before receive returned
        elif f in ("ack", "commit"):
            for v in _values(r):
                if typ == "ok":
                    ack_ok.setdefault((p, v), r["t"])
                elif typ in ("fail", "info"):
                    ack_trouble[(p, v)] = f"{f} failed ({r.get('err', '?')})"
        elif f == "rollback":
            for v in _values(r):
                ack_trouble[(p, v)] = "rolled back"
        elif f == "kill" and typ == "info":
            victim = r.get("victim")
            if victim:
                killed[victim] = r["t"]
                kill_events.append(r)
        elif f == "fault":
            faults += 1
        if r.get("nemesis"):
            nemesis_events.append(r)
            if r.get("f") == "power-loss":
                power_loss_at = r["t"]

    # JMS: DUPS_OK acks are lazy; a delivery counts as acked unless its process died first
    for v, ds in deliveries.items():
        for d in ds:
            if d.get("mode") == "dups_ok" and d["p"] not in killed:
                ack_ok.setdefault((d["p"], v), d["t"])

    figures = total_queue(
        (Facts(v in attempts, v in acked, len(deliveries.get(v, ())), v, acked[v].get("persistent", True)
               if v in acked else True) for v in attempts.keys() | acked.keys() | deliveries.keys()),
        final_state,
        {p: (f"{p} killed inside receive (AUTO ack done, return not reached)"
             if (open_op.get(p) or {}).get("f") == "receive" else f"{p} killed after acking, before recording")
         for p in killed},
        power_loss)

    # duplicates and their explanations
    explained: list[dict] = []
    unexplained: list[dict] = []
    flag_missing: list[dict] = []
    for v, ds in deliveries.items():
        if len(ds) < 2:
            continue
        for prev, nxt in itertools.pairwise(ds):
            p = prev["p"]
            why = None
            acked_at = ack_ok.get((p, v))
            if acked_at is not None and acked_at <= nxt["t"]:
                if power_loss and power_loss_at and prev["t"] < power_loss_at and prev.get("mode") == "dups_ok":
                    why = "power loss before a lazy (DUPS_OK, unsynced) ack was durable"
                elif (power_loss and power_loss_at and prev["t"] < power_loss_at
                      and not acked.get(v, {}).get("persistent", True)):
                    why = "power loss: a NON_PERSISTENT message's ack is not fsynced (by design)"
            elif (p, v) in ack_trouble:
                why = ack_trouble[(p, v)]
            elif (power_loss and power_loss_at and prev["t"] < power_loss_at
                  and not acked.get(v, {}).get("persistent", True)):
                why = "power loss: a NON_PERSISTENT message's claim/ack is not fsynced (by design)"
            elif p in killed and killed[p] >= prev["t"]:
                why = f"kill between claim and ack ({p} killed at +{killed[p] - t0:.3f}s)"
            elif power_loss and power_loss_at and prev["t"] < power_loss_at:
                why = "power loss between claim and ack"
            item = {"value": v, "first": p, "first_t": round(prev["t"] - t0, 4), "again": nxt["p"],
                    "again_t": round(nxt["t"] - t0, 4)}
            if why:
                explained.append(item | {"why": why})
            else:
                unexplained.append(item | {"why": "acknowledged, then delivered again" if acked_at
                                           else "never acknowledged, no kill/fault/rollback explains it"})
            if not nxt.get("redelivered") and not (power_loss and power_loss_at and prev["t"] < power_loss_at):
                flag_missing.append({"value": v, "process": nxt["p"]})

    duration = max(1e-9, t_end - t0)

    def series(times: list[float]) -> list[int]:
        n = int(duration / bucket) + 1
        out = [0] * n
        for t in times:
            out[min(n - 1, int((t - t0) / bucket))] += 1
        return out

    escaped = [r for r in records if r.get("f") == "escape"]
    nemesis_errors = [r for r in records if r.get("f") == "nemesis-error"]
    valid = (not figures["lost-count"] and not figures["unexpected-count"] and not corrupt and not unexplained
             and not escaped and not nemesis_errors
             and (allow_quarantined or not figures["quarantined-acknowledged-count"]))
    return {
        "valid": valid,
        **{k: v for k, v in figures.items() if k.endswith("-count")},
        "corrupt-count": len(corrupt),
        "redelivered-flag-missing-count": len(flag_missing),
        "duplicates-explained": len(explained),
        "duplicates-unexplained": len(unexplained),
        "failed-but-delivered-count": len(failed_sends & deliveries.keys()),
        "foreign-delivered-count": len(foreign),
        "escape-count": len(escaped),
        "nemesis-errors": [r.get("detail") for r in nemesis_errors[:10]],
        "kills": len(kill_events),
        "faults-injected": faults,
        "nemesis-events": len(nemesis_events),
        "duration": duration,
        "throughput": {
            "send_per_s": len(send_times) / duration,
            "deliver_per_s": len(recv_times) / duration,
            "send_series": series(send_times),
            "deliver_series": series(recv_times),
            "bucket": bucket,
        },
        "latency": {"send": percentiles(send_lat), "end_to_end": percentiles(e2e_lat)},
        "lost": figures["lost"],
        "unexpected": figures["unexpected"],
        "corrupt": [{"value": c.get("value"), "p": c["p"], "size": c.get("size")} for c in corrupt[:50]],
        "quarantined-acknowledged": figures["quarantined-acknowledged"],
        "acked-unobserved": figures["acked-unobserved"],
        "duplicates": {"explained": explained[:200], "unexplained": unexplained[:200]},
        "redelivered-flag-missing": flag_missing[:50],
        "escapes": escaped[:20],
        "timeline": [{"t": round(r["t"] - t0, 4), "f": r.get("f"), "victim": r.get("victim"),
                      "detail": r.get("detail")} for r in nemesis_events[:2000]],
        "e2e_latency_samples": sorted(e2e_lat)[:: max(1, len(e2e_lat) // 2000)] if e2e_lat else [],
    }


def check_dir(history_dir: str | Path, **kw: Any) -> dict:
    """Check one case directory: ``history/*.jsonl`` plus ``final-state.json`` and ``case.json`` if present."""
    d = Path(history_dir)
    hist = d / "history" if (d / "history").is_dir() else d
    final = {}
    for candidate in (d / "final-state.json", hist / "final-state.json"):
        if candidate.exists():
            final = json.loads(candidate.read_text())
            break
    case = {}
    for candidate in (d / "case.json", hist / "case.json"):
        if candidate.exists():
            case = json.loads(candidate.read_text())
            break
    kw.setdefault("allow_quarantined", bool(case.get("allow_quarantined")))
    kw.setdefault("power_loss", "power-loss" in case.get("nemeses", []))
    return check(read_history(hist), final, **kw)
