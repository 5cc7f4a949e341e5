"""Session scenarios: the suite's end of the adapter's JSON-lines protocol and the JMS session
checks played through it (acknowledge modes, recover, transactions, subscriptions, selectors)."""

from __future__ import annotations

import json
import os
import select
import subprocess
import time
from pathlib import Path
from typing import Any, Callable

from . import checks as C
from .checks import Result
from .harness import QUEUE, Scenario, kill_group, listdir, make_layout, spawn
from .replay import trace_boxes
from .manifest import Manifest, environ



class AdapterError(RuntimeError):
    pass


#: How long a receive that must return a message may wait. A correct provider answers as soon as the
#: message is there, so the budget costs nothing on a pass; it must cover a loaded machine, where a
#: broker's redelivery after recover() can take seconds (ActiveMQ did, in CI).
DELIVER_MS = 5_000
#: How long a receive that must return nothing waits before the absence is believed.
ABSENT_MS = 300


class Adapter:
    """The suite's end of the JSON-lines session protocol."""

    def __init__(self, sc: Scenario, client_id: str, timeout: float | None = None, label: str | None = None):
        cmd = sc.manifest.command("adapter", root=sc.root, client_id=client_id, queue=QUEUE, out=sc.dir,
                                  server=sc.server)
        sc.dir.joinpath("logs").mkdir(parents=True, exist_ok=True)
        self._err = open(sc.dir / "logs" / f"adapter-{label or client_id}.err", "wb")
        self.p = spawn(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err,
                       env=environ(sc.manifest))
        self.timeout = timeout or max(10.0, sc.manifest.timeout)  # a JVM's first answer may be slow
        self._on_death = lambda: sc.note_death("adapter", f"adapter-{label or client_id}", client_id, [])
        self._catch_up = sc.watcher.catch_up
        self.log: list[tuple[dict, dict]] = []
        self._buf = b""

    def req(self, op: str, **kw) -> dict:
        msg = {"op": op, **kw}
        try:
            self.p.stdin.write((json.dumps(msg) + "\n").encode())  # type: ignore[union-attr]
            self.p.stdin.flush()  # type: ignore[union-attr]
        except BrokenPipeError:
            raise AdapterError(f"adapter exited (status {self.p.poll()}) before {op}") from None
        budget = self.timeout + float(kw.get("timeout_ms", 0)) / 1000  # a receive may wait its own timeout first
        deadline = time.monotonic() + budget
        fd = self.p.stdout.fileno()  # type: ignore[union-attr]
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise AdapterError(f"no answer to {op} within {budget:.0f} s")
            chunk = os.read(fd, 65536)
            if not chunk:
                raise AdapterError(f"adapter exited (status {self.p.poll()}) during {op}")
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        try:
            resp = json.loads(line)
        except ValueError:
            raise AdapterError(f"not JSON in answer to {op}: {line[:200]!r}") from None
        self.log.append((msg, resp))
        # what the implementation made while answering (a subscription's directory) is watched
        # before the suite's next request makes it fill: its messages then arrive as events
        self._catch_up()
        return resp

    def ok(self, op: str, **kw) -> dict:
        resp = self.req(op, **kw)
        if not resp.get("ok"):
            raise AdapterError(f"{op} failed: {resp.get('error')}: {resp.get('message')}")
        return resp

    def close(self) -> None:
        try:
            if self.p.poll() is None:
                self.req("close")
        except AdapterError:
            pass
        try:
            self.p.stdin.close()  # type: ignore[union-attr]
        except OSError:
            pass
        try:
            self.p.wait(3)
        except subprocess.TimeoutExpired:
            pass
        kill_group(self.p.pid, self._on_death)
        self._err.close()


def _qbox(q: str) -> str:
    return f"{q}/incoming"


def _n(root: Path, q: str, state: str) -> int:
    return len(listdir(root, state, _qbox(q)))


def _expect(cond: bool, what: str) -> None:
    if not cond:
        raise AssertionError(what)


def _files(root: Path | None, q: str, *want: tuple[str, int]) -> None:
    """File-level expectation (skipped for an API-only implementation: root is None)."""
    if root is None:
        return
    got = {state: _n(root, q, state) for state, _ in want}
    _expect(all(got[s] == n for s, n in want), "files: " + ", ".join(f"{s}/={got[s]} (expected {n})" for s, n in want))


def _drained(a: Adapter, queue: str, what: str, timeout_ms: int = ABSENT_MS) -> None:
    """API-level: a fresh AUTO session finds nothing more on ``queue``."""
    s = a.ok("session", ack_mode="auto")["session"]
    extra = a.ok("receive", session=s, queue=queue, timeout_ms=timeout_ms)["message"]
    a.ok("close_session", session=s)
    _expect(extra is None, f"{what}: a new session still received {extra and extra.get('body')!r}")


def _receive_up_to(a: Adapter, n: int, **where) -> list[Any]:
    """Up to ``n`` receives that must each return a message; stops at the first that returns none
    (the check fails on it anyway, and a broken provider should not cost n full waits)."""
    got: list[Any] = []  # message dicts, the last one None if a receive returned none
    while len(got) < n and (not got or got[-1] is not None):
        got.append(a.ok("receive", timeout_ms=DELIVER_MS, **where)["message"])
    return got


FENCE = "conformance-fence"


def _none_unacknowledged(a: Adapter, queue: str, what: str, why: str = "") -> None:
    """After the session that consumed ``queue`` closed: nothing it left unacknowledged comes
    back.  Decided by a fence, not by waiting for an absence (ActiveMQ redelivers after
    recover() only after a 1 s delay, longer than ABSENT_MS): the session's close returned what
    it had not acknowledged, so a message sent now is delivered after those."""
    p = a.ok("session", ack_mode="auto")["session"]
    a.ok("send", session=p, queue=queue, body=FENCE)
    left: list[str] = []
    while True:
        m = a.ok("receive", session=p, queue=queue, timeout_ms=DELIVER_MS)["message"]
        _expect(m is not None, f"a message sent to {queue} (a fence) was not delivered within {DELIVER_MS} ms")
        if m["body"] == FENCE:
            break
        left.append(m["body"])
    if (late := a.ok("receive", session=p, queue=queue, timeout_ms=ABSENT_MS)["message"]) is not None:
        left.append(late["body"])
    a.ok("close_session", session=p)
    _expect(not left, f"{what}, {left} were still unacknowledged (returned once the session closed){why}")


def s_auto(a: Adapter, root: Path | None) -> str:
    s = a.ok("session", ack_mode="auto")["session"]
    for b in ("a1", "a2"):
        a.ok("send", session=s, queue="QAUTO", body=b)
    msg = a.ok("receive", session=s, queue="QAUTO", timeout_ms=DELIVER_MS)["message"]
    _expect(msg is not None and msg["body"] == "a1", f"receive returned {msg}")
    _files(root, "QAUTO", ("processed", 1), ("processing", 0))
    a.ok("close_session", session=s)
    s2 = a.ok("session", ack_mode="auto")["session"]
    rest = a.ok("receive", session=s2, queue="QAUTO", timeout_ms=DELIVER_MS)["message"]
    _expect(rest is not None and rest["body"] == "a2", f"after closing the session, the next receive gave {rest}")
    a.ok("close_session", session=s2)
    _drained(a, "QAUTO", "a1 was acknowledged when receive returned")
    return "acknowledged as receive returned: never delivered again after the session closed"


def s_client(a: Adapter, root: Path | None) -> str:
    s = a.ok("session", ack_mode="client")["session"]
    for i in range(3):
        a.ok("send", session=s, queue="QCLI", body=f"c{i}")
    got = _receive_up_to(a, 3, session=s, queue="QCLI")
    _expect(all(got), f"received {got}")
    _files(root, "QCLI", ("processing", 3))
    a.ok("acknowledge", session=s)
    _files(root, "QCLI", ("processed", 3), ("processing", 0))
    a.ok("recover", session=s)
    again = a.ok("receive", session=s, queue="QCLI", timeout_ms=ABSENT_MS)["message"]
    _expect(again is None, f"recover() after acknowledge() redelivered {again and again.get('body')!r}")
    a.ok("close_session", session=s)
    _none_unacknowledged(a, "QCLI", "after acknowledge() and recover()")
    return "one acknowledge() acknowledged all 3 consumed messages (recover() redelivered none)"


def s_client_earlier(a: Adapter, root: Path | None) -> str:
    s = a.ok("session", ack_mode="client")["session"]
    for i in range(3):
        a.ok("send", session=s, queue="QCLE", body=f"e{i}")
    got = _receive_up_to(a, 3, session=s, queue="QCLE")
    _expect(all(got), f"received {got}")
    a.ok("acknowledge", session=s, message=got[0]["id"])
    _files(root, "QCLE", ("processed", 3), ("processing", 0))
    a.ok("recover", session=s)
    again = a.ok("receive", session=s, queue="QCLE", timeout_ms=ABSENT_MS)["message"]
    _expect(again is None, f"after acknowledge() on the first message, recover() redelivered "
            f"{again and again.get('body')!r}: it acknowledged only up to the message it was called on")
    a.ok("close_session", session=s)
    _none_unacknowledged(a, "QCLE", "after acknowledge() on the first message and recover()",
                         ": it acknowledged only up to the message it was called on")
    return "acknowledge() on the first of 3 messages acknowledged all 3"


class NotPlayed(Exception):
    """The adapter cannot play the check (an operation it does not implement): inconclusive."""


class ShouldBroken(AssertionError):
    """A finding that breaks a SHOULD rule (named) while the check's MUST holds."""

    def __init__(self, rule: str, what: str):
        super().__init__(what)
        self.rule = rule


def s_listener(a: Adapter, root: Path | None) -> str:
    """A listener that throws on its first message, in each acknowledge mode (J-10, J-11)."""
    late = []
    for mode in ("auto", "dups_ok", "client", "transacted"):
        q = f"QLIS{mode.upper().replace('_', '')}"
        s = a.ok("session", ack_mode=mode)["session"]
        p = a.ok("session", ack_mode="auto")["session"]
        for i in range(3):
            a.ok("send", session=p, queue=q, body=f"{mode}-{i}")
        again = mode in ("auto", "dups_ok")
        finish = {"client": "acknowledge", "transacted": "commit"}.get(mode)
        resp = a.req("listen", session=s, queue=q, throw_on_first=True, count=4 if again else 3,
                     timeout_ms=DELIVER_MS, finish=finish)
        if resp.get("error") == "unknown_op":
            raise NotPlayed("the adapter has no listen operation (README: the adapter protocol)")
        _expect(bool(resp.get("ok")), f"listen failed: {resp.get('error')}: {resp.get('message')}")
        got = resp["deliveries"]
        bodies = [m["body"] for m in got]
        _expect(sorted(set(bodies)) == [f"{mode}-{i}" for i in range(3)],
                f"{mode}: after the listener threw on {bodies[:1]}, it got {bodies}: the session stopped delivering")
        if again:
            first = got[0]
            back = [m for m in got[1:] if m["id"] == first["id"]]
            _expect(bool(back), f"{mode}: the message the listener threw on was not delivered again ({bodies})")
            _expect(back[0]["redelivered"], f"{mode}: its redelivery is not flagged JMSRedelivered")
            if got[1]["id"] != first["id"]:
                late.append(f"{mode}: redelivered after {got.index(back[0]) - 1} other message(s), not at once")
        a.ok("close_session", session=s)
        a.ok("close_session", session=p)
        if not again:  # acknowledge() / commit() covered what the listener was given
            _drained(a, q, f"{mode}: after the listener ran and the session acknowledged")
        # (AUTO, DUPS_OK: a delivery may still be acknowledging when the listener stops: not judged)
    if late:
        raise ShouldBroken("J-11", "; ".join(late))
    return ("in every acknowledge mode the session kept delivering after the listener threw; AUTO and DUPS_OK "
            "redelivered the message at once, flagged")


def s_listener_serial(a: Adapter, root: Path | None) -> str:
    """Two consumers of one session, each listener call held 100 ms (3 per consumer: a 300 ms window for a second
    thread to show): never two at once (J-12)."""
    queues = ["QSER1", "QSER2"]
    p = a.ok("session", ack_mode="auto")["session"]
    for q in queues:
        for i in range(3):
            a.ok("send", session=p, queue=q, body=f"{q}-{i}")
    a.ok("close_session", session=p)
    s = a.ok("session", ack_mode="auto")["session"]
    resp = a.req("listen", session=s, queues=queues, count=6, hold_ms=100, timeout_ms=DELIVER_MS)
    if resp.get("error") == "unknown_op" or (resp.get("ok") and "max_concurrent" not in resp):
        raise NotPlayed("the adapter's listen operation has no 'queues' / 'max_concurrent' (README: the adapter "
                        "protocol)")
    _expect(bool(resp.get("ok")), f"listen failed: {resp.get('error')}: {resp.get('message')}")
    bodies = sorted(m["body"] for m in resp["deliveries"])
    a.ok("close_session", session=s)
    most = resp["max_concurrent"]
    _expect(most <= 1, f"the session ran {most} onMessage calls at once (its two consumers' listeners overlapped)")
    _expect(bodies == sorted(f"{q}-{i}" for q in queues for i in range(3)),
            f"the session's two listeners got {bodies}, not the 6 messages of their queues")
    return "6 messages to the listeners of two consumers of one session, one onMessage at a time"


def s_recover(a: Adapter, root: Path | None) -> str:
    s = a.ok("session", ack_mode="client")["session"]
    for b in ("x1", "x2"):
        a.ok("send", session=s, queue="QREC", body=b)
    first = _receive_up_to(a, 2, session=s, queue="QREC")
    _expect(all(first) and not any(m["redelivered"] for m in first), f"first delivery: {first}")
    a.ok("recover", session=s)
    again = _receive_up_to(a, 2, session=s, queue="QREC")
    _expect(all(again), f"after recover: {again}")
    _expect([m["body"] for m in again] == ["x1", "x2"], f"redelivery order {[m['body'] for m in again]}")
    _expect(all(m["redelivered"] and m["delivery_count"] >= 2 for m in again),
            f"redelivered/delivery_count: {[(m['redelivered'], m['delivery_count']) for m in again]}")
    a.ok("acknowledge", session=s)
    return "redelivered oldest first with JMSRedelivered and JMSXDeliveryCount >= 2"


def s_tx_send(a: Adapter, root: Path | None) -> str:
    s = a.ok("session", ack_mode="transacted")["session"]
    r = a.ok("session", ack_mode="auto")["session"]
    a.ok("send", session=s, queue="QTXS", body="t1")
    a.ok("send", session=s, queue="QTXS", body="t2")
    _files(root, "QTXS", ("target", 0))
    early = a.ok("receive", session=r, queue="QTXS", timeout_ms=ABSENT_MS)["message"]
    _expect(early is None, f"before commit another session received {early and early.get('body')!r}")
    a.ok("commit", session=s)
    _files(root, "QTXS", ("target", 2))
    a.ok("send", session=s, queue="QTXS", body="t3")
    a.ok("rollback", session=s)
    _files(root, "QTXS", ("target", 2), ("working", 0))
    got: list[str] = []
    while (m := a.ok("receive", session=r, queue="QTXS",
                     timeout_ms=DELIVER_MS if len(got) < 2 else ABSENT_MS)["message"]):
        got.append(m["body"])
    _expect(sorted(got) == ["t1", "t2"], f"after commit and a rolled-back send, another session received {got}")
    return "sends invisible until commit; a rolled-back send is gone"


def s_tx_receive(a: Adapter, root: Path | None) -> str:
    s = a.ok("session", ack_mode="transacted")["session"]
    p = a.ok("session", ack_mode="auto")["session"]
    for b in ("r1", "r2"):
        a.ok("send", session=p, queue="QTXR", body=b)
    m1 = a.ok("receive", session=s, queue="QTXR", timeout_ms=DELIVER_MS)["message"]
    _expect(m1 is not None, "the transacted receive got nothing")
    _files(root, "QTXR", ("processing", 1))
    a.ok("rollback", session=s)
    _files(root, "QTXR", ("target", 2))
    m2 = a.ok("receive", session=s, queue="QTXR", timeout_ms=DELIVER_MS)["message"]
    _expect(m2 is not None and m2["id"] == m1["id"] and m2["redelivered"], f"after rollback got {m2}")
    a.ok("receive", session=s, queue="QTXR", timeout_ms=DELIVER_MS)
    a.ok("commit", session=s)
    _files(root, "QTXR", ("processed", 2))
    a.ok("close_session", session=s)
    _drained(a, "QTXR", "after commit")
    return "rollback redelivered the receive (redelivered); commit acknowledged both"


def s_close(a: Adapter, root: Path | None) -> str:
    s = a.ok("session", ack_mode="transacted")["session"]
    a.ok("send", session=s, queue="QCLS", body="never")
    a.ok("close_session", session=s)
    _files(root, "QCLS", ("target", 0), ("working", 0))
    _drained(a, "QCLS", "the uncommitted send of a closed session")
    return "the uncommitted send vanished with the session"


def s_durable(a: Adapter, b: Adapter, root: Path | None) -> str:
    s = a.ok("session", ack_mode="auto")["session"]
    c1 = a.ok("subscribe", session=s, topic="T1", name="dur", durable=True)["consumer"]
    again = a.req("subscribe", session=s, topic="T1", name="dur", durable=True)
    _expect(not again.get("ok"), "a second active consumer on an unshared durable subscription was allowed")
    active = a.req("unsubscribe", session=s, name="dur")
    _expect(not active.get("ok"), "unsubscribe succeeded while the subscription had an active consumer")
    a.ok("close_consumer", consumer=c1)
    ps = b.ok("session", ack_mode="auto")["session"]
    for i in range(2):
        b.ok("send", session=ps, topic="T1", body=f"d{i}")
    c2 = a.ok("subscribe", session=s, topic="T1", name="dur", durable=True)["consumer"]
    got = _receive_up_to(a, 2, consumer=c2)
    _expect(all(got) and sorted(m["body"] for m in got) == ["d0", "d1"], f"kept while inactive: {got}")
    a.ok("close_consumer", consumer=c2)
    a.ok("unsubscribe", session=s, name="dur")
    unknown = a.req("unsubscribe", session=s, name="dur")
    _expect(not unknown.get("ok"), "unsubscribe of an unknown name succeeded")
    return "kept 2 messages while inactive; one active consumer; unsubscribe rules hold"


def s_shared(c: Adapter, a: Adapter, b: Adapter, root: Path | None) -> str:
    # a and b run without a client id: a shared subscription is named by (name, client id),
    # and one client id belongs to one connection at a time (JMS 2.0 §6.1.2)
    sa = a.ok("session", ack_mode="auto")["session"]
    sb = b.ok("session", ack_mode="auto")["session"]
    ca = a.ok("subscribe", session=sa, topic="T2", name="sh", durable=True, shared=True)["consumer"]
    cb = b.ok("subscribe", session=sb, topic="T2", name="sh", durable=True, shared=True)["consumer"]
    sp = c.ok("session", ack_mode="auto")["session"]
    for i in range(10):
        c.ok("send", session=sp, topic="T2", body=f"s{i}")
    got_a: list[str] = []
    got_b: list[str] = []
    pollers = ((a, ca, got_a), (b, cb, got_b))
    # poll both in turn until all 10 came or none came for DELIVER_MS (a slow machine is not a failure)
    last_progress = time.monotonic()
    while len(got_a) + len(got_b) < 10 and time.monotonic() - last_progress < DELIVER_MS / 1000:
        for ad, cons, got in pollers:
            m = ad.ok("receive", consumer=cons, timeout_ms=100)["message"]
            if m is not None:
                got.append(m["body"])
                last_progress = time.monotonic()
    for ad, cons, got in pollers:  # a quiet last round: a message delivered twice shows up here
        if (m := ad.ok("receive", consumer=cons, timeout_ms=ABSENT_MS)["message"]) is not None:
            got.append(m["body"])
    both = sorted(set(got_a) & set(got_b))
    allb = sorted(got_a + got_b)
    _expect(not both, f"delivered to both consumers: {both}")
    _expect(allb == sorted(f"s{i}" for i in range(10)), f"delivered {allb}")
    _expect(bool(got_a) and bool(got_b), f"one consumer got everything ({len(got_a)}/{len(got_b)})")
    return f"10 messages split {len(got_a)}/{len(got_b)} between two consumers, none twice"


def s_selector(a: Adapter, root: Path | None) -> str:
    s = a.ok("session", ack_mode="auto")["session"]
    for i in range(4):
        a.ok("send", session=s, queue="QSEL", body=f"{i}", properties={"color": "red" if i % 2 == 0 else "blue"})
    got: list[dict] = []
    while (m := a.ok("receive", session=s, queue="QSEL", selector="color = 'red'",
                     timeout_ms=DELIVER_MS if len(got) < 2 else ABSENT_MS)["message"]):
        got.append(m)
    _expect(sorted(m["body"] for m in got) == ["0", "2"], f"selector color = 'red' delivered {[m['body'] for m in got]}")
    _files(root, "QSEL", ("target", 2))
    bad = a.req("receive", session=s, queue="QSEL", selector="color = = 'x", timeout_ms=10)
    _expect(not bad.get("ok"), "a bad selector was accepted")
    a.ok("close_session", session=s)
    s2 = a.ok("session", ack_mode="auto")["session"]
    rest: list[str] = []
    while (m := a.ok("receive", session=s2, queue="QSEL",
                     timeout_ms=DELIVER_MS if len(rest) < 2 else ABSENT_MS)["message"]):
        rest.append(m["body"])
    _expect(sorted(rest) == ["1", "3"], f"the unmatched messages did not stay waiting: a receiver without selector got {rest}")
    return "only matching messages delivered; a bad selector rejected"


#: check id, function, client ids of the extra connections it needs ("" = none set), the JMS
#: version that introduced the feature (a manifest with flags.jms = "1.1" skips 2.0 checks)
SESSION_CHECKS: list[tuple[str, Callable, tuple[str, ...], str]] = [
    ("session.auto-ack", s_auto, (), "1.1"),
    ("session.client-ack-all", s_client, (), "1.1"),
    ("session.client-ack-earlier", s_client_earlier, (), "1.1"),
    ("session.listener-throws", s_listener, (), "1.1"),
    ("session.listener-serial", s_listener_serial, (), "1.1"),
    ("session.recover", s_recover, (), "1.1"),
    ("session.transacted-send", s_tx_send, (), "1.1"),
    ("session.transacted-receive", s_tx_receive, (), "1.1"),
    ("session.close-rolls-back", s_close, (), "1.1"),
    ("session.durable-subscription", s_durable, ("conf-publisher",), "1.1"),
    ("session.shared-subscription", s_shared, ("", ""), "2.0"),
    ("session.selector", s_selector, (), "1.1"),
]

API_ONLY_NOTE = "API-only (no dropbox: judged through the JMS API alone): "


def start_server(sc: Scenario) -> str:
    """Run the manifest's ``server`` (e.g. a broker) for the whole scenario; its first stdout
    line is what adapters get as ``{server}``."""
    proc = sc.run("server", "server")
    deadline = time.monotonic() + sc.manifest.timeout
    while time.monotonic() < deadline:
        text = proc.stdout()
        if "\n" in text:
            return text.split("\n", 1)[0].strip()
        if proc.p.poll() is not None:
            break
        time.sleep(0.05)  # polling a log file: no event to wait on
    raise AdapterError(f"the server printed no first line within {sc.manifest.timeout:g} s "
                       f"(status {proc.p.poll()}): {proc.stderr_tail(300)}")


#: the queues the session checks use: the suite makes them before the checks act (see prepare_queues)
SESSION_QUEUES = ("QAUTO", "QCLI", "QCLE", "QCLS", "QREC", "QSEL", "QTXR", "QTXS", "QSER1", "QSER2",
                  *(f"QLIS{mode}" for mode in ("AUTO", "CLIENT", "DUPSOK", "TRANSACTED")))


def prepare_queues(sc: Scenario, queues: tuple[str, ...] = SESSION_QUEUES) -> None:
    """Make each queue as PROTOCOL.md L-1 documents it (``Q/incoming/`` and its six state
    directories, nothing else) and have the watcher watch them before the checks act.  inotify is
    not recursive: a queue an implementation makes and fills within a few milliseconds (before the
    watcher's watch on the new directory exists) leaves only a late scan of it in the trace, and
    its first moves unjudged (model.tlc inconclusive).  Judges nothing less: L-1 lets any program
    make a missing queue, so making its own is no duty of an implementation (the other scenarios
    make theirs too: L-1 is NOT CHECKED)."""
    for q in queues:
        make_layout(sc.root, _qbox(q))
    sc.watcher.catch_up()


def session_scenario(m: Manifest, out: Path, only: set[str] | None = None) -> tuple[list[Result], Scenario]:
    sc = Scenario("sessions", out / "sessions", m)
    sc.watcher.start()
    if not m.api_only:
        prepare_queues(sc)
    res: list[Result] = []
    adapters: list[Adapter] = []
    try:
        if m.has("server"):
            sc.server = start_server(sc)
        main = Adapter(sc, "conf-a")
        adapters.append(main)
        root = None if m.api_only else sc.root
        for cid, fn, extra_ids, since in SESSION_CHECKS:
            if only is not None and cid not in only:
                continue
            if since > m.jms:
                res.append(C.skipped(cid, f"a JMS {since} feature; the manifest says the implementation speaks "
                                          f"JMS {m.jms} (flags.jms)"))
                continue
            extra = []
            try:
                for k, client_id in enumerate(extra_ids):
                    ad = Adapter(sc, client_id, label=f"{cid.split('.')[1]}-{k}")
                    adapters.append(ad)
                    extra.append(ad)
                text = fn(main, *extra, root)
                res.append(C.passed(cid, (API_ONLY_NOTE if root is None else "") + text, api_only=root is None))
            except NotPlayed as exc:
                res.append(C.inconclusive(cid, str(exc)))
            except (AssertionError, AdapterError) as exc:
                tail = [{"request": q, "response": r} for q, r in (main.log + [x for e in extra for x in e.log])[-6:]]
                res.append(C.failed(cid, (API_ONLY_NOTE if root is None else "") + str(exc)[:300],
                                    text=json.dumps(tail, indent=1)[:3000], api_only=root is None))
                if isinstance(exc, ShouldBroken):  # graded at that SHOULD's level, not the check's MUST
                    res[-1].evidence["rule"] = exc.rule
            finally:
                for ad in extra:
                    ad.close()
    except AdapterError as exc:
        res.append(C.failed("session.auto-ack", f"the adapter does not start: {exc}"))
    finally:
        for ad in adapters:
            ad.close()
        sc.close()
    # TLC validates every dropbox the checks used (queues and subscriptions), each with the
    # transaction logs about it: the transacted sends and receives are checked against the spec
    sc.tlc_boxes = trace_boxes(sc.records)
    for r in res:
        r.evidence.setdefault("scenario", sc.name)
    return res, sc
