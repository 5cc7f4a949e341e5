"""Consumer scenarios: basic delivery, contention, a forced lost race, kill -9 and recovery,
a late high-priority arrival; each judges the implementation's ``consume`` command."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Callable

from dropboxmq.lifecycle import STATE_DIRS, State

from dropboxmq_spec import grammar
from dropboxmq_spec.grammar import leaf, locate

from . import checks as C
from .checks import Result
from .harness import (BOX, FALLBACK_RECOVERY, PLANTING, Proc, Scenario, box_dir, excerpt, exit_clean,
                      freeze_when, kill_while_holding, listdir, make_layout, mid_of, parse_output, put, put_raw,
                      wait_event)
from .manifest import Manifest, environ


RACER = "conformance-racer"
DOT_FILE = ".in-progress-by-someone"
DOT_BODY = b"a dot-file: an ordinary entry (1.2 claims it), never to be lost"
#: the actors of the suite's own moves in these scenarios
LATE_ARRIVAL = "suite: late high-priority arrival"
RACING = "suite: racing consumer"



def claims_by_rename(recs: list[dict], since: int, box: str = BOX) -> list[dict]:
    bad = []
    for r in recs[since:]:
        if r.get("kind") == "dir" or r.get("synthetic"):
            continue
        op = r.get("op")
        if op == "delete":
            loc = locate(r["path"])
            if loc is not None and loc.box == box and loc.state is State.NEW:
                bad.append(r)
        elif op == "create":
            loc = locate(r["path"])
            if loc is not None and loc.box == box and loc.state in (State.DELIVERED, State.ACKNOWLEDGED):
                bad.append(r)
        elif op == "rename":
            s, d = locate(r["src"]), locate(r["dst"])
            if s is not None and s.box == box and s.state is State.NEW:
                if d is None or d.box != box or d.state not in (State.DELIVERED, State.EXPIRED):
                    bad.append(r)
    return bad


def _claims_result(recs, since, scenario) -> Result:
    bad = claims_by_rename(recs, since)
    if bad:
        return C.failed("consumer.claims-by-rename",
                        f"{len(bad)} event(s): a message left target/ or reached processing/ other than by a claim rename",
                        trace=excerpt(recs, [b["seq"] for b in bad]), scenario=scenario)
    return C.passed("consumer.claims-by-rename", "every message left target/ by a rename into processing/ or expired/",
                    scenario=scenario)


def _owner_result(recs: list[dict], since: int) -> Result:
    """consumer.claims-name-owner (C-3): every claim's processing/ name starts <clientId>~."""
    claims = [leaf(r["dst"]) for r in recs[since:] if _is_claim(r)]
    bare = [n for n in claims if grammar.split_claimed(n)[0] is None]
    if not claims:
        return C.inconclusive("consumer.claims-name-owner", "the consumer claimed nothing")
    if bare:
        return C.failed("consumer.claims-name-owner", f"{len(bare)} of {len(claims)} claims carry no owner: "
                        "processing/<name> instead of processing/<clientId>~<name>, so no recoverer can tell a dead "
                        "consumer's messages from a live one's", files=bare[:10])
    return C.passed("consumer.claims-name-owner", f"all {len(claims)} claims are named <clientId>~<name>")


def _acked_result(m: Manifest, root: Path, delivered: set[str], scenario: str) -> Result:
    processed = {mid_of(n) for n in listdir(root, "processed")}
    processing = {mid_of(n): n for n in listdir(root, "processing")}
    stuck = sorted(n for i, n in processing.items() if i in delivered)
    if m.ack_removes:
        anywhere = processed | set(processing) | {mid_of(n) for s in ("target", "error") for n in listdir(root, s)}
        missing = sorted(delivered & anywhere)
        ok_text = "every delivered message was removed (ack_removes)"
    else:
        missing = sorted(delivered - processed)
        ok_text = f"all {len(delivered)} delivered messages are in processed/"
    if stuck or missing:
        return C.failed("consumer.acked-processed",
                        f"{len(missing)} delivered message(s) not in processed/, {len(stuck)} stuck in processing/",
                        files=(stuck + missing)[:12], scenario=scenario)
    if not delivered:
        return C.inconclusive("consumer.acked-processed", "nothing was delivered", scenario=scenario)
    return C.passed("consumer.acked-processed", ok_text, scenario=scenario)


def consumer_basic(m: Manifest, out: Path) -> tuple[list[Result], Scenario]:
    sc = Scenario("consume-basic", out / "consume-basic", m)
    make_layout(sc.root)
    sc.watcher.start()
    res: list[Result] = []
    try:
        valid: list[tuple[str, str]] = []
        with sc.helper(PLANTING):
            for i, prio in enumerate([4, 4, 7, 0, 9, 4, 2, 7, 4, 9, 4, 1]):
                valid.append(put(sc.root, prio, f"valid {i}".encode()))
            now = int(time.time() * 1000)
            expired = [put(sc.root, 9, b"expired", expiration=now - 60_000)[0] for _ in range(2)]
            put_raw(sc.root, "not-a-dropboxmq-name", b"garbage")
            put_raw(sc.root, "empty-file", b"")
            put_raw(sc.root, "4..T", b"empty message id")
            put_raw(sc.root, DOT_FILE, DOT_BODY)
            put_raw(sc.root, "a-directory", directory=True)
            put_raw(sc.root, "a-symlink", symlink_to="/etc/hostname")
        since = sc.barrier()
        # {count}: every entry planted; a correct consumer may spend claims on expired and junk
        # entries, so it runs until target/ has nothing left to claim, not until {count} deliveries
        proc = sc.run("consume", "consume", client_id="impl-1", count=len(valid) + len(expired) + 6)
        rc = proc.wait(m.timeout)
        sc.barrier()
    finally:
        sc.close()
    recs = sc.records
    got = parse_output(m, proc.stdout())
    valid_ids = [i for i, _ in valid]
    res.append(exited := exit_clean("consumer.exit-clean", proc, rc, m))
    clean = exited.status == C.PASS
    missing = [i for i in valid_ids if i not in got]
    twice = sorted({i for i in got if i in valid_ids and got.count(i) > 1})
    if missing or twice:
        res.append(C.failed("consumer.delivers-all", f"{len(missing)} of {len(valid_ids)} not delivered, "
                            f"{len(twice)} delivered twice", files=missing[:10] + twice[:10],
                            text=proc.stdout()[-800:]))
    else:
        res.append(C.passed("consumer.delivers-all", f"all {len(valid_ids)} messages delivered once"))
    bad_exp = [i for i in expired if i in got]
    res.append(C.failed("consumer.expired-not-delivered", f"{len(bad_exp)} expired message(s) delivered",
                        files=bad_exp) if bad_exp else
               C.passed("consumer.expired-not-delivered", "no expired message was delivered"))
    # (a manifest's ordered = false waives this result: runner.run_impl)
    expect = [mid_of(n) for n in sorted((n for _, n in valid), key=grammar.order_key)]
    seen = [i for i in dict.fromkeys(got) if i in valid_ids]
    if seen == expect:
        res.append(C.passed("consumer.order", "priority descending, FIFO within each priority"))
    elif not seen:
        res.append(C.inconclusive("consumer.order", "nothing was delivered"))
    else:
        k = next((j for j, (a, b) in enumerate(zip(seen, expect, strict=False)) if a != b),
                 min(len(seen), len(expect)))
        priority_of = {mid_of(n): grammar.priority_of(n) for _, n in valid}
        res.append(C.failed("consumer.order", f"delivery #{k + 1} out of order",
                            text="delivered (priority:id): " + ", ".join(f"{priority_of[i]}:{i[-6:]}" for i in seen)
                            + "\nexpected: " + ", ".join(f"{priority_of[i]}:{i[-6:]}" for i in expect)))
    # a dot-file is an ordinary entry (1.2 claims it, ours skips it): it may move, not vanish
    dot_ok = any(p.is_file() and not p.is_symlink() and p.read_bytes() == DOT_BODY
                 for state in STATE_DIRS for p in box_dir(sc.root, state).iterdir())
    if clean and not missing and dot_ok:
        res.append(C.passed("consumer.junk-tolerant", "junk neither crashed nor blocked the consumer; "
                            "the dot-file is still in the dropbox"))
    else:
        why = [w for w, bad in (("did not exit cleanly", not clean), ("valid messages left undelivered", bool(missing)),
                                ("the dot-file vanished", not dot_ok)) if bad]
        res.append(C.failed("consumer.junk-tolerant", "with junk in target/: " + ", ".join(why),
                            text=proc.stderr_tail(), files=listdir(sc.root, "target", dot=True)))
    res.append(_claims_result(recs, since, sc.name))
    res.append(_owner_result(recs, since))
    res.append(_acked_result(m, sc.root, set(got) & set(valid_ids), sc.name))
    for r in res:
        r.evidence.setdefault("scenario", sc.name)
    return res, sc


def consumer_contention(m: Manifest, out: Path, n: int = 300) -> tuple[list[Result], Scenario]:
    """Two instances of the consumer under test and two reference consumers on one backlog.
    The reference's start-up is slower, so the implementation is frozen (SIGSTOP) after its
    first claim until a reference consumer has claimed too: then all four really compete."""
    sc = Scenario("consume-contention", out / "consume-contention", m)
    make_layout(sc.root)
    sc.watcher.start()
    impl_active, ref_active = threading.Event(), threading.Event()

    def watch(r: dict) -> None:
        if _is_activity(r):
            impl_active.set()
        elif r.get("op") == "rename" and "/processing/ref-" in r.get("dst", ""):
            ref_active.set()

    sc.watcher.listeners.append(watch)
    try:
        with sc.helper(PLANTING):
            ids = [put(sc.root, 4, f"c{i}".encode())[0] for i in range(n)]
        since = sc.barrier()
        impls = [sc.run("consume", f"impl-{k}", client_id=f"impl-{k}", count=n) for k in (1, 2)]
        frozen = wait_event(impl_active, impls, m.timeout)
        if frozen:
            for p in impls:
                p.signal(signal.SIGSTOP)
        refs = [sc.run_ref_consumer(f"ref-{k}", f"ref-{k}") for k in (1, 2)]
        wait_event(ref_active, refs, 20)
        for p in impls:
            p.signal(signal.SIGCONT)
        for p in impls + refs:
            p.wait(max(m.timeout, 30))
        sc.barrier()
    finally:
        sc.close()
    attribute_clients(sc.records, {f"ref-{k}": f"suite: reference consumer ref-{k}" for k in (1, 2)})
    by: dict[str, list[str]] = {}
    for p in impls:
        for i in parse_output(m, p.stdout()):
            by.setdefault(i, []).append(p.label)
    impl_count = sum(len(v) for v in by.values())
    for p in refs:
        for i in parse_output(None, p.stdout(), fmt="json"):
            by.setdefault(i, []).append(p.label)
    twice = {i: who for i, who in by.items() if len(who) > 1 and i in ids}
    lost = [i for i in ids if i not in by]
    res: list[Result] = []
    if twice or lost:
        res.append(C.failed("consumer.contention-exactly-once",
                            f"{len(twice)} message(s) processed twice, {len(lost)} lost (of {n})",
                            text="\n".join(f"{i}: {', '.join(w)}" for i, w in list(twice.items())[:10]),
                            files=lost[:10]))
    elif impl_count == 0:
        res.append(C.inconclusive("consumer.contention-exactly-once",
                                  "the implementation processed no message while competing"))
    else:
        res.append(C.passed("consumer.contention-exactly-once",
                            f"{n} messages, each processed once ({impl_count} by the implementation's 2 consumers, "
                            f"{n - impl_count} by 2 reference consumers)"))
    res.append(_claims_result(sc.records, since, sc.name))
    for r in res:
        r.evidence.setdefault("scenario", sc.name)
    return res, sc


def attribute_clients(records: list[dict], actors: dict[str, str]) -> None:
    """Tag the moves of the suite's own consumers that run alongside the implementation:
    a claim, ack or redelivery names its client in the processing/ name."""
    for rec in records:
        if rec.get("op") != "rename" or rec.get("actor"):
            continue
        for path in (rec["src"], rec["dst"]):
            loc = locate(path)
            if loc is not None and loc.state is State.DELIVERED:
                client = grammar.split_claimed(loc.name)[0]
                if client in actors:
                    rec["actor"] = actors[client]


def _flag_when(sc: Scenario, seen: Callable[[dict], bool]) -> threading.Event:
    """An event the watcher sets at the first trace record ``seen`` accepts."""
    flag = threading.Event()
    sc.watcher.listeners.append(lambda r: flag.set() if seen(r) else None)
    return flag


def _is_claim(rec: dict) -> bool:
    if rec.get("op") != "rename" or rec.get("kind") == "dir":
        return False
    s, d = locate(rec["src"]), locate(rec["dst"])
    return (s is not None and d is not None and s.state is State.NEW and d.state is State.DELIVERED
            and not d.name.startswith(RACER + "~"))


def _is_activity(rec: dict, exclude: tuple[str, ...] = (RACER + "~", "ref-")) -> bool:
    """The consumer under test touched a waiting message: a claim, or (broken ones) a delete
    from target/ or a file created in processing/."""
    if rec.get("kind") == "dir" or rec.get("synthetic"):
        return False
    op = rec.get("op")
    if op == "rename":
        s, d = locate(rec["src"]), locate(rec["dst"])
        return (s is not None and d is not None and s.state is State.NEW and d.state is State.DELIVERED
                and not d.name.startswith(exclude))
    loc = locate(rec.get("path"))
    if loc is None:
        return False
    return (op == "delete" and loc.state is State.NEW) or (
        op == "create" and loc.state is State.DELIVERED and not loc.name.startswith(exclude))


def on_growing_backlog(once: Callable[[Manifest, Path, int], tuple[list[Result], Scenario]], m: Manifest,
                       out: Path, n: int, attempts: int = 3) -> tuple[list[Result], Scenario]:
    """Play a freeze-after-the-first-claim scenario; if the consumer drained (nearly) all of
    the backlog before the freeze landed (a loaded machine delays it), play it again on an 8
    times larger backlog, so the verdict does not depend on the machine's speed."""
    for attempt in range(attempts):
        results, sc = once(m, out, n * 8 ** attempt)
        if not results[0].evidence.get("backlog_drained"):
            break
    return results, sc


def consumer_lost_race(m: Manifest, out: Path, n: int = 40) -> tuple[list[Result], Scenario]:
    """Force a lost race: freeze the consumer right after its first claim (SIGSTOP), take
    every remaining message as a competing consumer, let it continue (SIGCONT)."""
    return on_growing_backlog(_lost_race_once, m, out, n)


def _lost_race_once(m: Manifest, out: Path, n: int) -> tuple[list[Result], Scenario]:
    sc = Scenario("consume-lost-race", out / "consume-lost-race", m)
    make_layout(sc.root)
    sc.watcher.start()
    claimed = _flag_when(sc, _is_activity)
    taken: list[str] = []
    try:
        with sc.helper(PLANTING):
            ids = [put(sc.root, 4, f"r{i}".encode())[0] for i in range(n)]
        proc = sc.run("consume", "consume", client_id="impl-1", count=n)
        fired = freeze_when(sc, proc, claimed, m.timeout)
        if fired:
            with sc.helper(RACING):
                for name in sorted(listdir(sc.root, "target"), key=grammar.order_key):
                    pname = f"{RACER}~{name}"
                    try:
                        os.rename(box_dir(sc.root, "target") / name, box_dir(sc.root, "processing") / pname)
                    except FileNotFoundError:
                        continue
                    os.rename(box_dir(sc.root, "processing") / pname, box_dir(sc.root, "processed") / pname)
                    taken.append(mid_of(name))
            proc.signal(signal.SIGCONT)
        rc = proc.wait(m.timeout)
        sc.barrier()
    finally:
        sc.close()
    got = parse_output(m, proc.stdout())
    both = sorted(set(got) & set(taken))
    lost = [i for i in ids if i not in got and i not in taken]
    if not fired:
        r = C.inconclusive("consumer.lost-race", "the consumer never claimed a message")
    elif not taken:
        r = C.inconclusive("consumer.lost-race", f"the consumer had taken all {n} messages before it could be frozen")
        r.evidence["backlog_drained"] = True
    elif both or lost:
        r = C.failed("consumer.lost-race",
                     f"{len(both)} message(s) the suite had claimed first were reported as processed, {len(lost)} lost",
                     files=both[:10] + lost[:10], text=f"exit status {rc}; the suite claimed {len(taken)} while the "
                     "consumer was stopped")
    else:
        r = C.passed("consumer.lost-race", f"frozen after its first claim, it lost {len(taken)} races and "
                     f"reported none of them ({len(got)} processed)")
    r.evidence.setdefault("scenario", sc.name)
    return [r], sc


def consumer_kill9(m: Manifest, out: Path, n: int = 30) -> tuple[list[Result], Scenario]:
    """kill -9 of the consumer while it holds a claim, recovery, a second consumer.  A consumer
    too fast to be caught holding (it drained the backlog first) is judged again on an 8 times
    larger backlog (README: "Fast consumers")."""
    return on_growing_backlog(_kill9_once, m, out, n)


def _kill9_once(m: Manifest, out: Path, n: int) -> tuple[list[Result], Scenario]:
    sc = Scenario("consume-kill9", out / "consume-kill9", m)
    make_layout(sc.root)
    sc.watcher.start()
    claimed = _flag_when(sc, _is_claim)
    inflight: list[str] = []
    notes: list[str] = []
    try:
        with sc.helper(PLANTING):
            ids = [put(sc.root, 4, f"k{i}".encode())[0] for i in range(n)]
        proc = sc.run("consume", "consume-1", client_id="impl-1", count=n)
        inflight = kill_while_holding(sc, proc, claimed)
        first = parse_output(m, proc.stdout())
        sc.barrier()
        if inflight:
            if m.has("recover"):
                with sc.recovering():
                    rp = sc.run("recover", "recover", client_id="impl-1")
                    rp.wait(m.timeout)
            else:
                from .manifest import Manifest as _M

                helper = _M("ref-recover", "", m.path, {"recover": "{dropboxmq} --root {root} recover "
                                                        "--assume-unknown-dead > /dev/null"})
                # the implementation is dead: every move is the helper's recovery
                with sc.helper(FALLBACK_RECOVERY), sc.recovering():
                    rp = Proc(helper.command("recover", root=sc.root), environ(m), sc.dir / "logs", "recover")
                    rp.wait(m.timeout)
                notes.append("recovered by the reference's `dropboxmq recover --assume-unknown-dead` "
                             "(the manifest has no recover command)")
            after = {mid_of(nm): nm for nm in listdir(sc.root, "target")}
            back = []
            for pname in inflight:
                i = mid_of(pname)
                name = after.get(i)
                back.append((i, name, name is not None and grammar.redelivered(name)))
            proc2 = sc.run("consume", "consume-2", client_id="impl-2", count=n)
            proc2.wait(m.timeout)
            second = parse_output(m, proc2.stdout())
            sc.barrier()
    finally:
        sc.close()
    if not inflight:
        why = f"no message was in processing/ whenever the consumer was frozen (backlog of {n})"
        # it delivered messages but was never caught holding one: too fast for this backlog
        return [C.inconclusive("consumer.kill9-recovery", why, scenario=sc.name, backlog_drained=bool(first)),
                C.inconclusive("consumer.kill9-redelivered", why, scenario=sc.name)], sc
    not_back = [i for i, name, _ in back if name is None]
    not_flagged = [name for i, name, red in back if name is not None and not red]
    delivered = set(first) | set(second)
    lost = [i for i in ids if i not in delivered]
    infl_ids = {mid_of(p) for p in inflight}
    low_count = []
    if not m.ack_removes:
        for nm in listdir(sc.root, "processed"):
            if mid_of(nm) in infl_ids and grammar.delivery_count(nm) < 2:
                low_count.append(nm)
    left = listdir(sc.root, "processing") + listdir(sc.root, "target")
    problems, count_problems = [], []
    if not_back:
        problems.append(f"{len(not_back)} in-flight message(s) not back in target/ after recovery")
    if lost:
        problems.append(f"{len(lost)} message(s) never delivered")
    if left:
        problems.append(f"{len(left)} message(s) left in target/ or processing/")
    if not_flagged:
        count_problems.append(f"{len(not_flagged)} came back without a delivery count (JMSXDeliveryCountI=<n> in "
                              "the name): their next delivery is not flagged redelivered")
    if low_count:
        count_problems.append(f"{len(low_count)} redelivered message(s) acknowledged with a delivery count < 2 in "
                              "the name")
    text = "in flight at kill -9: " + ", ".join(inflight[:8]) + ("\n" + "\n".join(notes) if notes else "")
    ev = {"scenario": sc.name, "files": (not_back + lost + left)[:12], "text": text}
    res = [C.failed("consumer.kill9-recovery", "; ".join(problems), **ev) if problems else
           C.passed("consumer.kill9-recovery", f"{len(inflight)} in-flight message(s) came back and were delivered "
                    f"again; none of {n} lost", **ev)]
    if not_back:
        res.append(C.inconclusive("consumer.kill9-redelivered", "the in-flight messages did not come back",
                                  scenario=sc.name))
    elif count_problems:
        res.append(C.failed("consumer.kill9-redelivered", "; ".join(count_problems), scenario=sc.name,
                            files=(not_flagged + low_count)[:12], text=text))
    else:
        res.append(C.passed("consumer.kill9-redelivered", f"all {len(inflight)} came back with their delivery "
                            "count and were acknowledged with it", scenario=sc.name))
    return res, sc


#: consumer.late-priority: the backlog, how long the consumer is held after the late arrival
#: (a listing at least this old is stale), and within how many claims it must take the message
LATE_BACKLOG, LATE_HOLD_S, LATE_BOUND = 40, 1.0, 3


def consumer_late_priority(m: Manifest, out: Path, n: int = LATE_BACKLOG) -> tuple[list[Result], Scenario]:
    """A backlog of priority-1 messages; after the consumer's first claim the suite freezes it
    (SIGSTOP), drops one priority-9 message, holds it LATE_HOLD_S seconds and resumes it.  The
    late message must be among its next LATE_BOUND claims (1.2's 30-second listing cache fails)."""
    return on_growing_backlog(_late_priority_once, m, out, n)


def _late_priority_once(m: Manifest, out: Path, n: int) -> tuple[list[Result], Scenario]:
    sc = Scenario("consume-late-priority", out / "consume-late-priority", m)
    sc.replay_only = "its moves are consume-basic's; a large backlog only makes TLC slow"
    make_layout(sc.root)
    sc.watcher.start()
    claimed = _flag_when(sc, _is_claim)
    late, arrived, waiting = None, 0, 0
    try:
        with sc.helper(PLANTING):
            for i in range(n):
                put(sc.root, 1, f"backlog {i}".encode())
        proc = sc.run("consume", "consume", client_id="impl-1", count=n + 1)
        if freeze_when(sc, proc, claimed, m.timeout):
            with sc.helper(LATE_ARRIVAL):
                late = put(sc.root, 9, b"late, high priority")[0]
            arrived = len(sc.records)
            waiting = len(listdir(sc.root, "target")) - 1
            time.sleep(LATE_HOLD_S)  # the scenario's bound: a listing this old is stale
            proc.signal(signal.SIGCONT)
        proc.wait(m.timeout)
        sc.barrier()
    finally:
        sc.close()
    after = [mid_of(leaf(r["dst"])) for r in sc.records[arrived:] if _is_claim(r) and not r.get("actor")]
    if late is None:
        r = C.inconclusive("consumer.late-priority", "the consumer never claimed a message")
    elif waiting < LATE_BOUND:
        r = C.inconclusive("consumer.late-priority", f"only {waiting} backlog message(s) were left at the late "
                           "arrival: too few to tell")
        r.evidence["backlog_drained"] = True
    elif late not in after:
        r = C.failed("consumer.late-priority", f"the late priority-9 message was never claimed ({len(after)} claims "
                     "after its arrival)")
    elif after.index(late) >= LATE_BOUND:
        r = C.failed("consumer.late-priority", f"the late priority-9 message was claimed only after "
                     f"{after.index(late)} priority-1 message(s) (bound: {LATE_BOUND - 1}, listing at most "
                     f"{LATE_HOLD_S:g} s old)")
    else:
        r = C.passed("consumer.late-priority", f"the late priority-9 message overtook a backlog of {waiting} "
                     f"(claim #{after.index(late) + 1} after it arrived; bound {LATE_BOUND})")
    r.evidence.setdefault("scenario", sc.name)
    return [r], sc
