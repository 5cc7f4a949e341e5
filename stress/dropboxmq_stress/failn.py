"""Fail-at-N, like SQLite's: step N over every system call an operation makes.

For each operation (``send``, ``send_np``, ``send_many``, ``tx_send``, ``claim``,
``client_ack``, ``tx_commit``), each action (``errno:EIO``, ``errno:ENOSPC``,
``short``, ``kill-before``, ``kill-after``) and each rename path
(``renameat2``, or ``link`` = the link()+unlink() fallback), and N = 1, 2, ...:

1. a fresh root; setup messages sent normally (for the consumer-side operations);
2. a forked child installs a :class:`faults.Plan` whose Nth counted call (open,
   write, fsync, rename, renameat2, link, unlink made by the library during
   the operation only) gets the action, runs the operation, records
   invoke/ok/info in its history, and (unless killed) closes its connection;
3. the parent recovers the root, snapshots it, drains it, and runs the
   total-queue checker on that trial.

The sweep over N stops when the operation completes without reaching the Nth
call.  Every trial must be valid (lost = unexpected = corrupt = unexplained
duplicates = 0); quarantined messages are allowed only where the injected
error hit the consumer's read (unreadable -> error/, by design).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from . import checker, faults, final_state
from .history import History
from .workload import VALUE_PROP, make_body

OPS = ("send", "send_np", "send_many", "tx_send", "claim", "client_ack", "tx_commit")
QUEUE = "failn"


def _setup(root: Path, n: int) -> list[str]:
    from dropboxmq.message import Queue
    from dropboxmq.connection import Connection

    values = [f"setup-{i}" for i in range(n)]
    with Connection(root, client_id="setup", create=True) as conn:
        s = conn.create_session()
        p = s.create_producer(Queue(QUEUE))
        for v in values:
            m = s.create_bytes_message(make_body(v, 200))
            m.set_property(VALUE_PROP, v)
            p.send(m)
    return values


def _child(op: str, action: str, n: int, rename_path: str, root: str, hist_dir: str, result: str) -> None:
    from dropboxmq.message import DeliveryMode, Queue
    from dropboxmq.ackmode import AckMode
    from dropboxmq.connection import Connection, Settings

    from .workload import parse_body

    hist = History(hist_dir, "t1.1")
    plan = faults.Plan(fail_at=n, action=action,
                       on_fire=lambda fr: hist.info("fault", None, n=fr.n, kind=fr.kind, action=fr.action,
                                                    via=fr.via, nemesis=True, detail=f"{fr.action}@{fr.kind}#{fr.n}"))
    faults.install(plan, rename_path)
    settings = Settings(poll_interval=0.001, scan_interval=0.0, recovery_interval=1e9)
    conn = Connection(root, client_id="t1.1", settings=settings, create=True)
    q = Queue(QUEUE)
    outcome = "ok"

    def msg(session, v):
        m = session.create_bytes_message(make_body(v, 300))
        m.set_property(VALUE_PROP, v)
        return m

    def delivered(m, mode):
        value, intact = parse_body(m.body or b"")
        extra = {} if intact else {"corrupt": True, "size": len(m.body or b"")}
        hist.ok("receive", value, redelivered=bool(m.redelivered), mode=mode, **extra)
        return value

    try:
        if op in ("send", "send_np", "send_many"):
            s = conn.create_session()
            p = s.create_producer(q)
            values = ["v-0"] if op != "send_many" else ["v-0", "v-1", "v-2"]
            persistent = op != "send_np"
            dm = DeliveryMode.PERSISTENT if persistent else DeliveryMode.NON_PERSISTENT
            msgs = [msg(s, v) for v in values]
            hist.invoke("send", values, persistent=persistent)
            plan.counting = True
            try:
                if op == "send_many":
                    p.send_many(msgs, delivery_mode=dm)
                else:
                    p.send(msgs[0], delivery_mode=dm)
                plan.counting = False
                hist.ok("send", values, persistent=persistent)
            except Exception as exc:  # noqa: BLE001
                plan.counting = False
                outcome = f"raised {type(exc).__name__}"
                hist.info("send", values, err=str(exc))
        elif op == "tx_send":
            s = conn.create_session(transacted=True)
            p = s.create_producer(q)
            values = ["v-0", "v-1", "v-2"]
            hist.invoke("send", values, persistent=True)
            plan.counting = True
            try:
                for v in values:
                    p.send(msg(s, v))
                s.commit()
                plan.counting = False
                hist.ok("send", values, persistent=True)
            except Exception as exc:  # noqa: BLE001
                plan.counting = False
                outcome = f"raised {type(exc).__name__}"
                hist.info("send", values, err=str(exc))
        elif op == "claim":  # AUTO_ACKNOWLEDGE receive = claim + read + ack
            s = conn.create_session(ack_mode=AckMode.AUTO_ACKNOWLEDGE)
            c = s.create_consumer(q)
            hist.invoke("receive")
            plan.counting = True
            try:
                m = c.receive(timeout=0)
                plan.counting = False
                if m is None:
                    hist.fail("receive", None, err="empty")
                    outcome = "empty"
                else:
                    delivered(m, "auto")
            except Exception as exc:  # noqa: BLE001
                plan.counting = False
                outcome = f"raised {type(exc).__name__}"
                hist.info("receive", None, err=str(exc))
        elif op in ("client_ack", "tx_commit"):
            tx = op == "tx_commit"
            s = conn.create_session(transacted=tx, ack_mode=AckMode.CLIENT_ACKNOWLEDGE)
            c = s.create_consumer(q)
            got = []
            if tx:
                plan.counting = True  # transacted receives write the transaction log
            for _ in range(2):
                hist.invoke("receive")
                try:
                    m = c.receive(timeout=0)
                except Exception as exc:  # noqa: BLE001
                    hist.info("receive", None, err=str(exc))
                    outcome = f"receive raised {type(exc).__name__}"
                    continue
                if m is None:
                    hist.fail("receive", None, err="empty")
                else:
                    got.append(delivered(m, "transacted" if tx else "client"))
            f = "commit" if tx else "ack"
            if tx:  # the transacted session also sends one message in the same transaction
                hist.invoke("send", ["v-0"], persistent=True)
            hist.invoke(f, got)
            plan.counting = True
            try:
                if tx:
                    s.create_producer(q).send(msg(s, "v-0"))
                s.commit() if tx else s.acknowledge()
                plan.counting = False
                hist.ok(f, got)
                if tx:
                    hist.ok("send", ["v-0"], persistent=True)
            except Exception as exc:  # noqa: BLE001
                plan.counting = False
                outcome = f"raised {type(exc).__name__}"
                hist.info(f, got, err=str(exc))
                if tx:
                    hist.info("send", ["v-0"], err=str(exc))
        else:
            raise ValueError(op)
    except Exception as exc:  # noqa: BLE001 - setup trouble in the child
        outcome = f"child error {type(exc).__name__}: {exc}"
    plan.counting = False
    fired = plan.fired[0] if plan.fired else None
    with open(result, "w") as out:
        json.dump({"count": plan.count, "trace": plan.trace, "outcome": outcome,
                   "kind": fired.kind if fired else None, "via": fired.via if fired else None}, out)
    try:
        conn.close()
    except Exception as exc:  # noqa: BLE001
        hist.info("close", None, err=str(exc))
    hist.close()
    os._exit(0)


def trial(op: str, action: str, n: int, rename_path: str, work: Path) -> dict:
    import multiprocess

    from dropboxmq.recovery import recover

    from .workload import drain

    if work.exists():
        shutil.rmtree(work)
    root, hist_dir = work / "root", work / "history"
    hist_dir.mkdir(parents=True)
    if op in ("claim", "client_ack", "tx_commit"):
        setup = _setup(root, 3)
        h = History(hist_dir, "setup")
        h.invoke("send", setup, persistent=True)
        h.ok("send", setup, persistent=True)
        h.close()
    else:
        os.makedirs(root, exist_ok=True)
    result = work / "result.json"
    ctx = multiprocess.get_context("fork")
    proc = ctx.Process(target=_child, args=(op, action, n, rename_path, str(root), str(hist_dir), str(result)))
    proc.start()
    proc.join()
    nem = History(hist_dir, "nemesis")
    if proc.exitcode and proc.exitcode < 0:
        nem.record("info", "kill", victim="t1.1", nemesis=True, detail=f"{action} at call {n}")
    res: dict[str, Any] = json.loads(result.read_text()) if result.exists() else {"count": n, "outcome": "killed", "kind": None}
    if res.get("kind") is None:
        for r in (json.loads(line) for line in (hist_dir / "t1.1.jsonl").read_text().splitlines() if line):
            if r.get("f") == "fault":
                res["kind"] = r.get("kind")
    rep = recover(root)
    state = final_state.snapshot(root, QUEUE)
    (work / "final-state.json").write_text(json.dumps(state))
    drain(root, QUEUE, hist_dir)
    nem.close()
    allow_q = action.startswith("errno:") or action == "short"
    fig = checker.check_dir(work, allow_quarantined=allow_q)
    out = {"op": op, "action": action, "n": n, "rename_path": rename_path, "reached": res.get("count", 0) >= n,
           "kind": res.get("kind"), "via": res.get("via"), "outcome": res.get("outcome"),
           "valid": fig["valid"], "lost": fig["lost-count"], "unexpected": fig["unexpected-count"],
           "duplicated": fig["duplicated-count"], "corrupt": fig["corrupt-count"],
           "unexplained": fig["duplicates-unexplained"], "in_doubt": fig["in-doubt-count"],
           "quarantined": fig["quarantined-count"], "quarantined_acked": fig["quarantined-acknowledged-count"],
           "recovered": fig["recovered-count"], "acknowledged": fig["acknowledged-count"],
           "recovery_errors": rep.errors}
    notes = []
    if fig["lost"]:
        notes.append(f"lost {fig['lost']}")
    if fig["duplicates"]["unexplained"]:
        notes.append(f"unexplained dup {fig['duplicates']['unexplained'][:2]}")
    if fig["quarantined-acknowledged"]:
        notes.append(f"quarantined acked {fig['quarantined-acknowledged']}")
    if fig["corrupt"]:
        notes.append(f"corrupt {fig['corrupt']}")
    left = {k: len(v) for k, v in state.items() if v and k in ("working", "processing", "target")}
    if left:
        notes.append(f"after recovery: {left}")
    out["note"] = "; ".join(notes)
    return out


def run(case, out: Path, scratch: Path) -> dict:
    opts = case.failn or {}
    ops = opts.get("ops", list(OPS))
    actions = opts.get("actions", ["errno:EIO", "kill-after"])
    paths = opts.get("rename_paths", ["renameat2"])
    max_n = opts.get("max_n", 60)
    trials = []
    started = time.time()
    work = Path(scratch) / case.name / "trial"
    for op in ops:
        for path in paths:
            for action in actions:
                for n in range(1, max_n + 1):
                    t = trial(op, action, n, path, work)
                    if not t["reached"]:
                        break  # the operation makes fewer than n counted calls: sweep done
                    trials.append(t)
                    if not t["valid"]:
                        keep = Path(out) / "failing" / f"{op}-{path}-{action.replace(':', '_')}-{n}"
                        if not keep.exists():
                            shutil.copytree(work, keep, ignore=shutil.ignore_patterns("root"))
    calls: dict[str, set] = {}
    for t in trials:
        calls.setdefault(f"{t['op']}/{t['rename_path']}", set()).add(f"{t['n']}:{t['kind']}")
    invalid = [t for t in trials if not t["valid"]]
    return {
        "case": case.name,
        "nemeses": list(case.nemeses),
        "valid": not invalid,
        "libfiu": faults.fiu_available(),
        "skipped": {} if faults.fiu_available() else {
            "libfiu": "LD_PRELOAD of fiu_posix_preload.so not active: every fault raised at the Python boundary"},
        "trials-run": len(trials),
        "trials-invalid": len(invalid),
        "call-sites": {k: sorted(v, key=lambda s: int(s.split(":")[0])) for k, v in calls.items()},
        "lost-count": sum(t["lost"] for t in trials),
        "unexpected-count": sum(t["unexpected"] for t in trials),
        "duplicated-count": sum(t["duplicated"] for t in trials),
        "recovered-count": sum(t["recovered"] for t in trials),
        "acknowledged-count": sum(t["acknowledged"] for t in trials),
        "in-doubt-count": sum(t["in_doubt"] for t in trials),
        "quarantined-count": sum(t["quarantined"] for t in trials),
        "secs": time.time() - started,
        "invalid": invalid[:100],
        "trials": trials,
    }
