"""Topic scenarios: the ``publish`` and ``subscribe`` roles, judged through the file system.

Layout (PROTOCOL.md L-2, L-3): topic ``a.b`` lives in ``<root>/topic-root/a/b/``; each
subscription is a dropbox ``.subscriptions/<subId>/`` with the six state
directories, and the topic's ``.incoming/`` takes files for a distributor.  The
suite creates durable subscriptions by writing what PROTOCOL.md L-3 and L-4 document
(``subId = enc(name).enc(clientId)``, its ``.subscription`` description, built under a
dot-name and renamed into place), so any implementation that lists ``.subscriptions/``
finds them.

* **publish** -- the publisher sends ``{body_dir}`` on ``{topic}``.  With
  ``publish_mode = "fan-out"`` (1.2's way) it writes one copy per subscription of
  the topic and of every ancestor topic, each in that subscription's ``working/``
  and renamed into its ``target/``; with ``"distribute"`` it drops each message
  into the topic's ``.incoming/`` (working -> target) and the suite runs the
  reference's ``dropboxmq distribute`` (a helper, like the queue suite's racer).
* **subscribe** -- consume the durable subscription ``{subscription}`` of
  ``{topic}`` as client ``{client_id}`` exactly as ``consume`` does a queue.

The traces go through the fast replay like the queue scenarios' (every
subscription is a dropbox) and every subscription dropbox with message events
goes to TLC's trace validation of ``Dropbox.tla`` (a subscription is one
dropbox; the fan-out itself -- Topics.tla's part -- is judged by the checks here).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import uuid
from collections import Counter
from pathlib import Path

from dropboxmq.lifecycle import STATE_DIRS, State

from . import checks as C
from dropboxmq_spec import grammar
from .checks import Result
from .consumer import claims_by_rename
from dropboxmq_spec.grammar import locate
from .harness import (FALLBACK_RECOVERY, PLANTING, Proc, Scenario, excerpt, exit_clean, kill_while_holding, listdir,
                      make_layout, mid_of, parse_output, put)
from .manifest import Manifest, environ

#: the actor of the reference distributor's moves in distribute mode (never the implementation's)
DISTRIBUTING = "suite: distributor (dropboxmq distribute)"

TOPIC, ANCESTOR, SIBLING, CHILD = "news.sport", "news", "news.weather", "news.sport.results"
HELPER_CLIENT = "conformance-distributor"


def topic_box(topic: str) -> str:
    return "topic-root/" + topic.replace(".", "/")


def incoming_box(topic: str) -> str:
    return topic_box(topic) + "/.incoming"


def create_subscription(root: Path, topic: str, name: str, client_id: str) -> str:
    """A durable subscription as PROTOCOL.md L-3/L-4 document it; returns its dropbox (relative
    to root)."""
    subs = Path(root) / topic_box(topic) / ".subscriptions"
    box = f"{topic_box(topic)}/.subscriptions/{grammar.encode_field(name)}.{grammar.encode_field(client_id)}"
    building = subs / f".new-{uuid.uuid4().hex}"  # a dot-name: no message place until renamed (L-6)
    for state in STATE_DIRS:
        os.makedirs(building / state)
    os.makedirs(building / ".consumers")
    with open(building / ".subscription", "w", encoding="utf-8") as f:
        json.dump({"kind": "durable", "name": name, "client_id": client_id, "topic": topic, "selector": None,
                   "no_local": False}, f)
    os.rename(building, Path(root) / box)
    return box


def bodies_in(root: Path, box: str) -> Counter:
    """sha256 of every message body waiting in ``box``'s target/ (a multiset)."""
    out: Counter = Counter()
    for n in listdir(root, "target", box):
        p = Path(root) / box / "target" / n
        if p.is_file() and not p.is_symlink():
            out[hashlib.sha256(p.read_bytes()).hexdigest()] += 1
    return out


def write_bodies(d: Path, tag: str, n: int, empty: bool = False) -> list[bytes]:
    """n distinct bodies tagged ``tag`` (the third one 100+ KiB; with ``empty``, the second one empty)."""
    d.mkdir(parents=True)
    bodies = []
    for i in range(n):
        b = b"" if empty and i == 1 else (b"%s %d of the conformance suite\n" % (tag.encode(), i)) * (4096 if i == 2 else i + 1)
        bodies.append(b)
        (d / f"body-{i:03d}").write_bytes(b)
    return bodies


def reference_helper(sc: Scenario, label: str, args: str) -> Proc:
    """The reference CLI as the suite's helper (distributor, fallback recovery)."""
    helper = Manifest("reference-helper", "", sc.manifest.path, {"recover": "{dropboxmq} --root {root} " + args})
    proc = Proc(helper.command("recover", root=sc.root), environ(sc.manifest), sc.dir / "logs", label)
    sc.procs.append(proc)
    return proc


def _finish(res: list[Result], sc: Scenario) -> tuple[list[Result], Scenario]:
    for r in res:
        r.evidence.setdefault("scenario", sc.name)
    return res, sc


# ====================================================================== publish


def _publish(sc: Scenario, label: str, bodies_dir: Path, count: int) -> Proc:
    """One publisher run; in distribute mode followed by the reference's distributor."""
    m = sc.manifest
    proc = sc.run("publish", label, topic=TOPIC, body_dir=bodies_dir, count=count, priority=6,
                  client_id="impl-publisher")
    proc.wait(m.timeout)
    if m.publish_mode == "distribute":
        with sc.helper(DISTRIBUTING):  # the publisher has exited: every move is the distributor's
            reference_helper(sc, f"distribute-{label}", "distribute --client-id " + HELPER_CLIENT).wait(m.timeout)
    sc.barrier()
    return proc


def _entered_other_than_by_rename(recs: list[dict], boxes: set[str]) -> list[dict]:
    """Events by which a file reached a target/ of ``boxes`` other than a rename from the
    same dropbox's working/ (a create or write in target/, a rename from elsewhere)."""
    bad = []
    for r in recs:
        if r.get("kind") == "dir" or r.get("synthetic"):
            continue
        op = r.get("op")
        if op in ("create", "close_write"):
            loc = locate(r["path"])
            if loc is not None and loc.box in boxes and loc.state is State.NEW:
                bad.append(r)
        elif op == "rename":
            s, d = locate(r["src"]), locate(r["dst"])
            if d is not None and d.box in boxes and d.state is State.NEW:
                if s is None or s.box != d.box or s.state not in (State.NOT_COMMITTED, State.DELIVERED):
                    bad.append(r)  # DELIVERED -> NEW is a redelivery (rollback/recover), not a publish
    return bad


def publisher_scenario(m: Manifest, out: Path) -> tuple[list[Result], Scenario]:
    sc = Scenario("publish", out / "publish", m)
    root = sc.root
    make_layout(root, incoming_box(TOPIC))
    subs = {key: create_subscription(root, topic, key, f"conf-{key}")
            for key, topic in (("s1", TOPIC), ("s2", TOPIC), ("ancestor", ANCESTOR), ("sibling", SIBLING),
                               ("child", CHILD))}
    first = write_bodies(sc.dir / "bodies-1", "first", 3, empty=True)
    second = write_bodies(sc.dir / "bodies-2", "second", 1)
    sc.watcher.start()
    try:
        p1 = _publish(sc, "publish-1", sc.dir / "bodies-1", len(first))
        subs["late"] = create_subscription(root, TOPIC, "late", "conf-late")
        sc.barrier()
        p2 = _publish(sc, "publish-2", sc.dir / "bodies-2", len(second))
    finally:
        sc.close()
    recs = sc.records
    res: list[Result] = []
    rcs = [p.p.returncode for p in (p1, p2)]
    clean = all(rc is not None and rc in m.ok_exit and not p.timed_out for rc, p in zip(rcs, (p1, p2), strict=True))
    res.append((C.passed if clean else C.failed)("publisher.exit-clean", f"exit statuses {rcs}",
                                                 text=p1.stderr_tail() + p2.stderr_tail()))

    h = lambda bs: Counter(hashlib.sha256(b).hexdigest() for b in bs)  # noqa: E731
    both, late_want = h(first) + h(second), h(second)
    got = {k: bodies_in(root, box) for k, box in subs.items()}

    def diff(key: str, want: Counter) -> str | None:
        have = got[key]
        if have == want:
            return None
        missing, extra = want - have, have - want
        twice = sum(n for d, n in extra.items() if d in want)
        return (f"{key}: {sum(have.values())} copies for {sum(want.values())} messages ({sum(missing.values())} "
                f"missing, {twice} extra copies, {sum(extra.values()) - twice} not published by this run)")

    # every existing subscription of the topic, each message exactly once
    problems = [d for d in (diff("s1", both), diff("s2", both), diff("late", late_want)) if d]
    res.append(C.failed("publisher.every-subscription-once", "; ".join(problems), files=sorted(subs.values()))
               if problems else
               C.passed("publisher.every-subscription-once", f"each of the 2 subscriptions of {TOPIC} got all "
                        f"{len(first) + len(second)} messages once, byte for byte (the late one the {len(second)} sent after it)"))
    # ancestors receive; siblings and descendants do not
    problems = [d for d in (diff("ancestor", both), diff("sibling", Counter()), diff("child", Counter())) if d]
    res.append(C.failed("publisher.ancestors", "; ".join(problems), files=[subs[k] for k in ("ancestor", "sibling", "child")])
               if problems else
               C.passed("publisher.ancestors", f"the subscription of ancestor {ANCESTOR!r} got every message; "
                        f"those of {SIBLING!r} and {CHILD!r} none"))
    # a subscription created after a publish gets nothing from before
    old = h(first) & got["late"]
    res.append(C.failed("publisher.late-subscription", f"the subscription created after the first publish got "
                        f"{sum(old.values())} of its messages", files=[subs["late"]])
               if old else
               C.passed("publisher.late-subscription", "the subscription created after the first publish got none "
                        "of its messages"))
    # every copy enters its subscription's target/ by a rename from the same subscription's working/
    boxes = set(subs.values()) | {incoming_box(TOPIC)}
    bad = _entered_other_than_by_rename(recs, boxes)
    copies = sum(1 for r in recs if r.get("op") == "rename" and (d := locate(r.get("dst"))) is not None
                 and d.box in boxes and d.state is State.NEW)
    if bad:
        res.append(C.failed("publisher.copies-by-rename", f"{len(bad)} event(s): a copy reached target/ other than "
                            "by a rename from its own dropbox's working/", trace=excerpt(recs, [b["seq"] for b in bad]),
                            files=sorted({f for b in bad if (f := b.get("path") or b.get("dst"))})[:10]))
    elif not copies:
        res.append(C.inconclusive("publisher.copies-by-rename", "nothing entered any target/"))
    else:
        res.append(C.passed("publisher.copies-by-rename", f"{copies} files entered target/ directories, each by a "
                            "rename from the same dropbox's working/"))
    # TLC: one subscription of the topic and the ancestor's (the others' traces have the same
    # shape: the replay judges them), and .incoming when a distributor ran
    sc.tlc_boxes = [subs["s1"], subs["ancestor"]] + (
        [incoming_box(TOPIC)] if m.publish_mode == "distribute" else [])
    return _finish(res, sc)


# ====================================================================== subscribe


SUB_NAME, SUB_CLIENT, OTHER = "board", "impl-sub", "archive"


def _run_subscriber(sc: Scenario, label: str, count: int) -> Proc:
    return sc.run("subscribe", label, topic=TOPIC, subscription=SUB_NAME, client_id=SUB_CLIENT, count=count)


def _touched(recs: list[dict], since: int, box: str) -> list[dict]:
    """Events in ``box`` after ``since`` (the suite itself does nothing there meanwhile)."""
    out = []
    for r in recs[since:]:
        locs = [locate(r.get(k)) for k in ("path", "src", "dst")]
        if any(loc is not None and loc.box == box for loc in locs):
            out.append(r)
    return out


def subscriber_scenario(m: Manifest, out: Path, n: int = 8) -> tuple[list[Result], Scenario]:
    """A durable subscription that received n messages while no subscriber ran; a second
    subscription of the same topic holds copies the subscriber must leave alone."""
    sc = Scenario("subscribe", out / "subscribe", m)
    root = sc.root
    own = create_subscription(root, TOPIC, SUB_NAME, SUB_CLIENT)
    other = create_subscription(root, TOPIC, OTHER, "conf-archive")
    sc.watcher.start()
    try:
        ids = []
        with sc.helper(PLANTING):
            for i, prio in enumerate(([4, 7, 4, 0, 9, 4, 2, 1] * n)[:n]):
                ids.append(put(root, prio, f"topic message {i}".encode(), box=own)[0])
                put(root, prio, f"topic message {i}".encode(), box=other)
        since = sc.barrier()
        proc = _run_subscriber(sc, "subscribe", n)
        rc = proc.wait(m.timeout)
        sc.barrier()
    finally:
        sc.close()
    recs = sc.records
    res: list[Result] = []
    res.append(exit_clean("subscriber.exit-clean", proc, rc, m))
    got = parse_output(m, proc.stdout())
    missing = [i for i in ids if i not in got]
    twice = sorted({i for i in got if got.count(i) > 1})
    foreign = sorted(set(got) - set(ids))
    if missing or twice or foreign:
        res.append(C.failed("subscriber.durable-keeps", f"{len(missing)} of {n} kept messages not delivered, "
                            f"{len(twice)} twice, {len(foreign)} not of this subscription",
                            files=(missing + twice + foreign)[:12], text=proc.stdout()[-800:]))
    else:
        res.append(C.passed("subscriber.durable-keeps", f"all {n} messages published while no subscriber ran "
                            "were kept and delivered once"))
    touched = _touched(recs, since, other)
    left = len(listdir(root, "target", other))
    if touched or left != n:
        res.append(C.failed("subscriber.own-subscription", f"{len(touched)} event(s) in another subscription's "
                            f"dropbox ({other}); {left} of its {n} copies still waiting",
                            trace=excerpt(recs, [r["seq"] for r in touched[:5]])))
    else:
        res.append(C.passed("subscriber.own-subscription", f"the other subscription's {n} copies were left alone"))
    bad = claims_by_rename(recs, since, own)
    res.append(C.failed("subscriber.claims-by-rename", f"{len(bad)} event(s): a message left target/ or reached "
                        "processing/ other than by a claim rename", trace=excerpt(recs, [b["seq"] for b in bad]))
               if bad else
               C.passed("subscriber.claims-by-rename", "every message left the subscription's target/ by a rename "
                        "into processing/ or expired/"))
    delivered = set(got) & set(ids)
    processed = {mid_of(nm) for nm in listdir(root, "processed", own)}
    stuck = listdir(root, "processing", own)
    not_acked = sorted(delivered - processed) if not m.ack_removes else []
    if stuck or not_acked:
        res.append(C.failed("subscriber.acked-processed", f"{len(not_acked)} delivered message(s) not in processed/, "
                            f"{len(stuck)} stuck in processing/", files=(stuck + not_acked)[:12]))
    elif not delivered:
        res.append(C.inconclusive("subscriber.acked-processed", "nothing was delivered"))
    else:
        res.append(C.passed("subscriber.acked-processed", f"all {len(delivered)} delivered messages acknowledged"))
    sc.tlc_boxes = [own]
    return _finish(res, sc)


def subscriber_kill9(m: Manifest, out: Path, n: int = 12) -> tuple[list[Result], Scenario]:
    """kill -9 of the subscriber while it holds a message, recovery, a second run: as for queues."""
    sc = Scenario("subscribe-kill9", out / "subscribe-kill9", m)
    root = sc.root
    own = create_subscription(root, TOPIC, SUB_NAME, SUB_CLIENT)
    claimed = threading.Event()

    def on_claim(r: dict) -> None:
        if r.get("op") == "rename" and r.get("kind") != "dir":
            s, d = locate(r["src"]), locate(r["dst"])
            if s is not None and d is not None and d.box == own and d.state is State.DELIVERED:
                claimed.set()

    sc.watcher.listeners.append(on_claim)
    sc.watcher.start()
    inflight: list[str] = []
    back: list[tuple[str, str | None]] = []
    second: list[str] = []
    try:
        with sc.helper(PLANTING):
            ids = [put(root, 4, f"k{i}".encode(), box=own)[0] for i in range(n)]
        sc.barrier()
        proc = _run_subscriber(sc, "subscribe-1", n)
        inflight = kill_while_holding(sc, proc, claimed, own)
        first = parse_output(m, proc.stdout())
        sc.barrier()
        if inflight:
            if m.has("recover"):
                with sc.recovering():
                    rp = sc.run("recover", "recover", client_id=SUB_CLIENT, topic=TOPIC, subscription=SUB_NAME)
                    rp.wait(m.timeout)
            else:
                # the subscriber is dead: every move is the helper's recovery
                with sc.helper(FALLBACK_RECOVERY), sc.recovering():
                    reference_helper(sc, "recover", "recover --assume-unknown-dead > /dev/null").wait(m.timeout)
            sc.barrier()
            after = {mid_of(nm): nm for nm in listdir(root, "target", own)}
            back = [(mid_of(p), after.get(mid_of(p))) for p in inflight]
            proc2 = _run_subscriber(sc, "subscribe-2", n)
            proc2.wait(m.timeout)
            second = parse_output(m, proc2.stdout())
            sc.barrier()
    finally:
        sc.close()
    sc.tlc_boxes = [own]
    if not inflight:
        why = "no message was in processing/ when the subscriber was frozen"
        return _finish([C.inconclusive("subscriber.kill9-recovery", why),
                        C.inconclusive("subscriber.kill9-redelivered", why)], sc)
    problems = []
    not_back = [i for i, name in back if name is None]
    unflagged = [name for _, name in back if name is not None and not grammar.redelivered(name)]
    lost = [i for i in ids if i not in set(first) | set(second)]
    left = listdir(root, "processing", own) + listdir(root, "target", own)
    for what, items in (("in-flight message(s) not back in target/ after recovery", not_back),
                        ("message(s) never delivered", lost), ("message(s) left in target/ or processing/", left)):
        if items:
            problems.append(f"{len(items)} {what}")
    ev = {"files": (not_back + lost + left)[:12], "text": "in flight at kill -9: " + ", ".join(inflight[:8])}
    res = [C.failed("subscriber.kill9-recovery", "; ".join(problems), **ev) if problems else
           C.passed("subscriber.kill9-recovery", f"{len(inflight)} in-flight message(s) came back and were "
                    f"delivered again; none of {n} lost", **ev)]
    if not_back:
        res.append(C.inconclusive("subscriber.kill9-redelivered", "the in-flight messages did not come back"))
    elif unflagged:
        res.append(C.failed("subscriber.kill9-redelivered", f"{len(unflagged)} came back without a delivery count "
                            "(JMSXDeliveryCountI=<n> in the name): their next delivery is not flagged redelivered",
                            files=unflagged[:12]))
    else:
        res.append(C.passed("subscriber.kill9-redelivered", f"all {len(back)} came back with their delivery count"))
    return _finish(res, sc)
