"""The multi-host stress case (issue 28): two hosts on one network file system, counted the Jepsen way.

``python -m dropboxmq_stress.multihost --fs moosefs|sshfs|glusterfs [--messages 300] [--kill]
[--restart-server] [--cut] [--json OUT]``

Two client mounts of one export (:mod:`netfs`) play hosts A and B.  Producer p0 and consumers
c0, c1 run on A; producer p1 and consumers c2, c3 on B; each a separate process using the
public library API (CLIENT_ACKNOWLEDGE consumers acking every ``--ack-every`` messages,
persistent messages carrying their value in property ``sv``).  Nemeses, triggered by the
number of messages acknowledged so far:

* ``--kill``: at a third, c0 (host A) is killed -9 and recovery runs from host B
  (``dropboxmq.recovery.recover`` on B's mount, as ``dropboxmq recover`` would);
* ``--restart-server``: at a half, the server process is killed -9 and started again
  (MooseFS chunkserver, glusterfsd brick, sshd's per-connection children);
* ``--cut``: at two thirds, the ssh client under host A's sshfs is killed (sshfs only;
  ``reconnect`` heals it).

When every sent message is acknowledged (or nothing moved for ``--idle`` seconds) the
consumers stop, recovery runs once more from B and the queue is read back.  Counted: lost
(sent, never acknowledged, not in the queue), duplicated deliveries with and without the
redelivered flag, acknowledged-then-delivered-again, double acknowledgements, failed
acknowledgements, entries left in working/ target/ processing/ error/, values more than
once in processed/; throughput per host and aggregate; recovery time (kill to the last of
the dead consumer's unacknowledged messages delivered elsewhere).  Histories are kept on
the local disk, one write per record (SIGKILL-safe).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterator

from . import netfs
from .final_state import snapshot
from .history import History, read_history

QUEUE = "mh"
VALUE_PROP = "sv"
HOSTS = {"p0": 0, "p1": 1, "c0": 0, "c1": 0, "c2": 1, "c3": 1}


def settings() -> Any:
    from dropboxmq import Settings

    return Settings(poll_interval=0.01, scan_interval=0.05, recovery_interval=1.0, allow_network_fs=True)


@contextlib.contextmanager
def _closing(conn: Any, hist: History) -> Iterator[Any]:
    """Close the connection; a close that fails (sshfs answers EIO for a handle opened before
    the server was restarted) is recorded, not raised: the run's records are already written."""
    try:
        yield conn
    finally:
        try:
            conn.close()
        except OSError as e:
            hist.fail("close", None, error=f"{type(e).__name__}: {e}")


def producer(root: str, name: str, n: int, hist_dir: str, size: int | None = None) -> None:
    """Send ``n`` persistent messages; ``size``: body length in bytes (default: the value and 64 x)."""
    from dropboxmq import Connection, DeliveryMode, Queue

    _log_to(hist_dir, name)
    hist = History(hist_dir, name)
    with _closing(Connection(root, name, settings()), hist) as conn:
        session = conn.create_session()
        prod = session.create_producer(Queue(QUEUE))
        for seq in range(n):
            value = f"{name}-{seq}"
            body = f"{value}|{'x' * 64}" if size is None else f"{value}|".ljust(size, "x")
            msg = session.create_text_message(body)
            msg.set_property(VALUE_PROP, value)
            hist.invoke("send", value)
            for attempt in range(20):   # a server restart or cut fails calls for a moment
                try:
                    prod.send(msg, delivery_mode=DeliveryMode.PERSISTENT)
                    hist.ok("send", value)
                    break
                except Exception as e:  # noqa: BLE001 - recorded, outcome unknown
                    hist.info("send", value, error=f"{type(e).__name__}: {e}", attempt=attempt)
                    time.sleep(0.2)
    hist.record("done", "producer")


def _log_to(hist_dir: str, name: str) -> Any:
    """The library's own log (its warnings, a lease decision) beside the history: a failed run
    kept with ``--keep`` says what each process's recovery decided."""
    import logging

    Path(hist_dir).mkdir(parents=True, exist_ok=True)  # (netfs_bench's phases name theirs first)
    handler = logging.FileHandler(Path(hist_dir) / f"{name}.log")
    handler.setFormatter(logging.Formatter("%(created).6f %(levelname)s %(message)s"))
    logger = logging.getLogger("dropboxmq")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    return handler


def stop_flag(ctx: Any) -> Any:
    """The driver's "stop" to its consumers: shared memory with no lock (``.value``).  A
    multiprocessing Event has one, and a consumer killed -9 inside ``is_set()`` left it held:
    the driver's ``set()`` then waited forever (a CI run hung in ``test_leases``)."""
    return ctx.RawValue("b", 0)


def consumer(root: str, name: str, ack_every: int, hist_dir: str, stop: Any) -> None:
    from dropboxmq import CLIENT_ACKNOWLEDGE, Connection, Queue

    _log_to(hist_dir, name)
    hist = History(hist_dir, name)
    pending: list[str] = []

    def ack(session: Any) -> None:
        try:
            session.acknowledge()
            hist.ok("ack", list(pending))
        except Exception as e:  # noqa: BLE001 - a late ack of a taken message must fail: counted
            hist.fail("ack", list(pending), error=f"{type(e).__name__}: {e}")
        pending.clear()

    with _closing(Connection(root, name, settings()), hist) as conn:
        session = conn.create_session(ack_mode=CLIENT_ACKNOWLEDGE)
        cons = session.create_consumer(Queue(QUEUE))
        while not stop.value:
            try:
                msg = cons.receive(timeout=0.2)
            except Exception as e:  # noqa: BLE001 - transient under a server fault: recorded, retried
                hist.fail("receive", None, error=f"{type(e).__name__}: {e}")
                time.sleep(0.1)
                continue
            if msg is None:
                if pending:
                    ack(session)
                continue
            value = str(msg.get_property(VALUE_PROP))
            hist.ok("receive", value, redelivered=bool(msg.redelivered), count=msg.delivery_count)
            pending.append(value)
            if len(pending) >= ack_every:
                ack(session)
        if pending:
            ack(session)
    hist.record("done", "consumer")


# ---------------------------------------------------------------- the count (pure, over histories)


def count(history: list[dict], final: dict[str, list[dict]], killed: str | None, t_kill: float | None) -> dict:
    sent_ok: set[str] = set()
    send_indeterminate: set[str] = set()
    receives: dict[str, list[dict]] = defaultdict(list)
    acks: dict[str, list[float]] = defaultdict(list)
    ack_fail: list[dict] = []
    for r in history:
        f, v = r.get("f"), r.get("value", "")
        if f == "send" and r["type"] == "ok":
            sent_ok.add(v)
        elif f == "send" and r["type"] == "info":
            send_indeterminate.add(v)
        elif f == "receive" and r["type"] == "ok" and v is not None:
            receives[v].append(r)
        elif f == "ack" and r["type"] == "ok":
            for x in v:
                acks[x].append(r["t"])
        elif f == "ack" and r["type"] == "fail":
            ack_fail.append({"p": r["p"], "values": v, "error": r.get("error")})
    processed: dict[str, int] = defaultdict(int)
    for e in final.get("processed", []):
        if e["value"] is not None:
            processed[e["value"]] += 1
    left = {s: len(final.get(s, [])) for s in ("working", "target", "processing", "expired", "error")}
    queued = {e["value"] for s in ("target", "working", "processing") for e in final.get(s, [])}
    dup_flagged = dup_unflagged = 0
    for rs in receives.values():
        if len(rs) > 1:
            later = sorted(rs, key=lambda r: r["t"])[1:]
            if all(r["redelivered"] for r in later):
                dup_flagged += 1
            else:
                dup_unflagged += 1
    delivered_after_ack = sorted(v for v, ts in acks.items() if any(r["t"] > min(ts) for r in receives[v]))
    recovery_time, in_flight = None, set()
    if killed and t_kill:
        last_ack = max((r["t"] for r in history if r["p"] == killed and r.get("f") == "ack"), default=0.0)
        in_flight = {r["value"] for r in history if r["p"] == killed and r.get("f") == "receive"
                     and r["type"] == "ok" and r["t"] > last_ack}
        # not the kill's to recover: a value another consumer also held before the kill (a double
        # claim), and one the dead consumer's own acknowledgement moved to processed/ before it died
        in_flight = {v for v in in_flight if not any(r["p"] != killed and r["t"] <= t_kill for r in receives[v])
                     and not (v in processed and all(r["p"] == killed for r in receives[v]))}
        again = [min((r["t"] for r in receives[v] if r["p"] != killed and r["t"] > t_kill), default=None)
                 for v in in_flight]
        if in_flight and all(t is not None for t in again):
            recovery_time = max(t for t in again if t is not None) - t_kill
    return {
        "sent": len(sent_ok), "send_indeterminate": len(send_indeterminate - sent_ok),
        # lost: sent, never acknowledged, and nowhere in the queue; an acknowledgement that moved a
        # message to processed/ but died before its record is "acknowledged, unrecorded" (in doubt)
        "acknowledged": len(acks), "lost": sorted(sent_ok - set(acks) - queued - set(processed))[:20],
        "lost_count": len(sent_ok - set(acks) - queued - set(processed)),
        "acknowledged_unrecorded": len((sent_ok - set(acks)) & set(processed)),
        "duplicated_redelivered": dup_flagged, "duplicated_not_flagged": dup_unflagged,
        "max_deliveries": max((len(rs) for rs in receives.values()), default=0),
        "acknowledged_then_delivered_again": len(delivered_after_ack),
        "double_acknowledgements": sum(1 for ts in acks.values() if len(ts) > 1),
        "acknowledge_errors": len(ack_fail), "acknowledge_error_samples": ack_fail[:3],
        "left": left, "processed_files": sum(processed.values()),
        "processed_more_than_once": sum(1 for n in processed.values() if n > 1),
        "sent_missing_from_processed": len(sent_ok - set(processed)),
        "recovery_time_s": recovery_time, "in_flight_at_kill": len(in_flight) if killed and t_kill else None,
        "unknown_values_delivered": len(set(receives) - sent_ok - send_indeterminate),
    }


def throughput(history: list[dict]) -> dict:
    per: dict[str, Any] = {}
    for host, label in ((0, "host_a"), (1, "host_b"), (None, "aggregate")):
        ts = [r["t"] for r in history if r.get("f") == "ack" and r["type"] == "ok"
              and (host is None or HOSTS.get(r["p"]) == host) for _ in r["value"]]
        rs = [r["t"] for r in history if r.get("f") == "receive" and (host is None or HOSTS.get(r["p"]) == host)]
        sends = [r["t"] for r in history if r.get("f") == "send" and r["type"] == "ok"
                 and (host is None or HOSTS.get(r["p"]) == host)]
        span = (max(ts) - min(rs)) if ts and rs else 0.0
        sspan = (max(sends) - min(sends)) if len(sends) > 1 else 0.0
        per[label] = {"acked_per_s": round(len(ts) / span, 1) if span else None,
                      "sent_per_s": round(len(sends) / sspan, 1) if sspan else None}
    return per


# ---------------------------------------------------------------- the driver


def run(kind: str, messages: int = 300, kill: bool = False, restart_server: bool = False, cut: bool = False,
        ack_every: int = 3, idle: float = 60.0, deadline: float = 600.0, keep: Path | None = None) -> dict:
    """One run; ``keep``: a directory to copy the histories, the library's logs, the final
    listing and (where the export is local: sshfs) the server-side trace of every rename into."""
    from dropboxmq import Connection
    from dropboxmq.recovery import recover

    if cut and kind != "sshfs":
        raise SystemExit("--cut is the sshfs network cut (the ssh client under one mount killed)")
    why = netfs.unavailable(kind)
    if why:
        raise SystemExit(f"{kind}: {why}")
    out: dict[str, Any] = {"fs": kind, "messages_per_producer": messages, "kill": kill,
                           "restart_server": restart_server, "cut": cut, "ack_every": ack_every, "events": []}
    ctx = multiprocessing.get_context("fork")
    with tempfile.TemporaryDirectory(prefix="dmq-multihost-") as local, netfs.start(kind) as fs:
        hist_dir = str(Path(local) / "history")
        os.makedirs(hist_dir)
        mounts = [str(m) for m in fs.mounts]
        with Connection(mounts[0], "init", settings(), create=True) as c:
            c.create_queue(QUEUE)
        tracer = None
        if keep is not None and fs.export is not None:
            from . import fstrace

            tracer = fstrace.start(fs.export, Path(local) / "server-trace.jsonl")  # (not a history)
        stop = stop_flag(ctx)
        procs = {name: ctx.Process(target=consumer, args=(mounts[HOSTS[name]], name, ack_every, hist_dir, stop))
                 for name in ("c0", "c1", "c2", "c3")}
        procs.update({name: ctx.Process(target=producer, args=(mounts[HOSTS[name]], name, messages, hist_dir))
                      for name in ("p0", "p1")})
        t0 = time.time()
        for p in procs.values():
            p.start()
        driver_log = _log_to(hist_dir, "driver")  # (after the forks: the workers log to their own)
        total = 2 * messages
        killed, t_kill = None, None
        faults: list[tuple[str, float]] = []
        done_kill, done_restart, done_cut = not kill, not restart_server, not cut
        last_progress, last_acked = time.time(), -1

        def event(what: str, **extra: Any) -> None:
            out["events"].append({"t": round(time.time() - t0, 3), "what": what, **extra})

        while time.time() - t0 < deadline:
            hist = read_history(hist_dir)
            acked = len({x for r in hist if r.get("f") == "ack" and r["type"] == "ok" for x in r["value"]})
            producers_done = all(not procs[p].is_alive() for p in ("p0", "p1"))
            if acked != last_acked:
                last_acked, last_progress = acked, time.time()
            if not done_kill and acked >= total / 3:
                t_kill, killed = time.time(), "c0"
                procs["c0"].kill()
                procs["c0"].join()
                event("kill -9 c0 (host A)", acked=acked)
                t = time.time()
                report = recover(mounts[1])
                event("recover from host B", seconds=round(time.time() - t, 3),
                      report={k: v for k, v in report.as_dict().items() if v})
                done_kill = True
            if not done_restart and acked >= total / 2:
                t_fault = time.time()
                fs.kill_server()
                fs.restart_server()
                event("server killed -9 and restarted", seconds=round(time.time() - t_fault, 3), acked=acked)
                faults.append(("server", t_fault))
                done_restart = True
            if not done_cut and acked >= 2 * total / 3:
                faults.append(("cut", time.time()))
                event("network cut: ssh under host A's sshfs killed", pid=fs.cut(0), acked=acked)
                done_cut = True
            nemeses_done = done_kill and done_restart and done_cut
            if producers_done and nemeses_done and acked >= total:
                break
            if producers_done and nemeses_done and time.time() - last_progress > 5 and _drained(mounts[1]):
                event("queue drained (some acknowledgements unrecorded: their consumer died mid-ack)", acked=acked)
                break
            if time.time() - last_progress > idle:
                event("no progress", seconds=idle, acked=acked)
                break
            time.sleep(0.2)   # the driver polls the histories; nothing here synchronises workers
        out["wall_s"] = round(time.time() - t0, 2)
        stop.value = 1
        for name, p in procs.items():
            p.join(30)
            if p.is_alive():
                event(f"{name} did not stop: killed")
                p.kill()
                p.join()
        t = time.time()
        report = recover(mounts[1])
        event("final recover from host B", seconds=round(time.time() - t, 3),
              report={k: v for k, v in report.as_dict().items() if v})
        final = snapshot(Path(mounts[0]), QUEUE)
        history = read_history(hist_dir)
        out["counts"] = count(history, final, killed, t_kill)
        out["throughput"] = throughput(history)
        # the stall a fault causes: the longest pause in acknowledgements after it (a MooseFS
        # chunkserver kill leaves renames, which only the master serves, going while reads hang)
        ack_times = sorted(r["t"] for r in history if r.get("f") == "ack" and r["type"] == "ok")
        out["stall_s"] = {what: round(_longest_gap([at] + [t for t in ack_times if t > at]), 3) for what, at in faults}
        out["errors_logged"] = {f: sum(1 for r in history if r["type"] == "fail" and r.get("f") == f)
                                for f in ("receive", "close")}
        import logging

        logging.getLogger("dropboxmq").removeHandler(driver_log)
        driver_log.close()
        if tracer is not None:
            tracer.terminate()
            tracer.join()
        if keep is not None:
            import shutil

            keep.mkdir(parents=True, exist_ok=True)
            shutil.copytree(hist_dir, keep / "history", dirs_exist_ok=True)
            if tracer is not None:
                shutil.copy(Path(local) / "server-trace.jsonl", keep)
            (keep / "final.json").write_text(json.dumps(final, indent=1) + "\n")
            (keep / "result.json").write_text(json.dumps(out, indent=1) + "\n")
    return out


def _longest_gap(times: list[float]) -> float:
    return max((b - a for a, b in zip(times, times[1:], strict=False)), default=0.0)


def _drained(root: str) -> bool:
    """Nothing left to deliver: target/ is empty (a send cut short by EIO may leave its working/
    file behind, an orphan until recovery's orphan age: counted in "left", not waited for)."""
    box = Path(root) / QUEUE / "incoming"
    try:
        return not any(n for n in os.listdir(box / "target") if not n.startswith("."))
    except OSError:
        return False


def summary(r: dict) -> str:
    c, tp = r["counts"], r["throughput"]
    rec = f"{c['recovery_time_s']:.2f} s" if c["recovery_time_s"] is not None else "n/a"
    return (f"{r['fs']}: sent {c['sent']}, acked {c['acknowledged']}, lost {c['lost_count']}, "
            f"dup+flag {c['duplicated_redelivered']}, dup-noflag {c['duplicated_not_flagged']}, "
            f"acked-then-again {c['acknowledged_then_delivered_again']}, double-acks {c['double_acknowledgements']}, "
            f"ack-errors {c['acknowledge_errors']}, acked-unrecorded {c['acknowledged_unrecorded']}, "
            f"left {sum(c['left'].values())} {c['left']}, "
            f"processed>1 {c['processed_more_than_once']}; acked/s A {tp['host_a']['acked_per_s']} "
            f"B {tp['host_b']['acked_per_s']} all {tp['aggregate']['acked_per_s']}; recovery {rec}; "
            f"stall {r.get('stall_s') or 'n/a'}; "
            f"wall {r['wall_s']} s")


def clean(r: dict) -> bool:
    """The issue's acceptance: nothing lost, duplicates only flagged, no acknowledged message
    delivered again, no double acknowledgement, nothing left outside processed/."""
    c = r["counts"]
    return (c["lost_count"] == 0 and c["duplicated_not_flagged"] == 0 and c["acknowledged_then_delivered_again"] == 0
            and c["double_acknowledgements"] == 0 and sum(c["left"].values()) == 0
            and c["processed_more_than_once"] == 0 and c["sent_missing_from_processed"] == 0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dropboxmq_stress.multihost", description=__doc__.split("\n\n")[0])
    ap.add_argument("--fs", required=True, choices=("moosefs", "sshfs", "glusterfs"))
    ap.add_argument("--messages", type=int, default=300, help="persistent messages per producer (default 300)")
    ap.add_argument("--kill", action="store_true", help="kill -9 consumer c0 on host A at a third; recover from B")
    ap.add_argument("--restart-server", action="store_true", help="kill -9 and restart the server process at a half")
    ap.add_argument("--cut", action="store_true", help="sshfs: kill host A's ssh client at two thirds")
    ap.add_argument("--ack-every", type=int, default=3)
    ap.add_argument("--idle", type=float, default=60.0, help="give up after this many seconds without progress")
    ap.add_argument("--json", type=Path, help="write the full result here")
    ap.add_argument("--keep", type=Path, help="copy histories, logs, final listing and server trace here")
    a = ap.parse_args(argv)
    r = run(a.fs, a.messages, a.kill, a.restart_server, a.cut, a.ack_every, a.idle, keep=a.keep)
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(r, indent=1) + "\n")
    else:
        print(json.dumps(r, indent=1))
    print(summary(r), file=sys.stderr)
    return 0 if clean(r) else 1


if __name__ == "__main__":
    sys.exit(main())
