"""The model-based tester of the public API (issue 24): the project finds its own defects.

Hypothesis's stateful testing generates programs over the library and the CLI.  Each library
client is a real process (``apiclient``, driven over a pipe); the CLI runs as a subprocess; a third
party drops foreign files and hostile entries into the root.  After every step the tester reads the
whole root and checks an abstract model of the guarantees of ``spec/Channel.tla``:

* **no committed message lost, none duplicated**: every message the model knows is in exactly one
  place, and in a state the model allows (a message is identified by its body, a unique token, so
  that foreign names and renamed files are followed too);
* **one holder at a time**: a message in processing/ carries its holder's client id; a delivery of a
  message the model does not know to be waiting is a double delivery;
* **redelivered flag and delivery count**: each delivery carries JMSRedelivered = (deliveries so far >
  0) and JMSXDeliveryCount = deliveries so far + 1, whatever the name; past ``MAX_ATTEMPTS`` the
  message goes to error/;
* **each acknowledgement mode**: AUTO acks as receive returns / the listener returns (a listener that
  raises puts it back); CLIENT acks everything at acknowledge(); DUPS_OK acks lazily; recover(),
  rollback() and close put back what is unacknowledged;
* **transactions all or nothing**: a commit killed in flight ends with all of its sends or none;
* **subscriptions**: a publish reaches every live matching subscription exactly once and no other;
* **liveness**: a receive or listener with a message certainly waiting for it gets one; a killed
  client's messages come back at the next receive on their destination or ``dropboxmq recover``;
* **confinement**: nothing outside the root changes (checksummed) and only documented errors are raised;
* **bounded state**: no live consumer or session holds more than what is on disk for it explains
  (``state_is_bounded``).  Each client process measures, on request, the container elements reachable
  from each of its consumers and sessions (``apiclient.held_state``); less the measure at its
  creation, a consumer's must stay within ``CONSUMER_BOUND`` = (a, b): a * (names in its dropbox's
  target/ and processing/ -- before its last receive or listener, or now, whichever is more: it
  keeps what its last listing saw -- + its session's unsettled deliveries) + b; a session's within
  ``SESSION_BOUND``: a * (deliveries since its last acknowledge/recover/commit/rollback +
  transacted sends + open consumers) + b.  Measured over 55 long-profile programs (27,856
  measures): a consumer grew by at most 3 per name (the listing's keys and order, skip) and 4
  beyond (its dropbox's ``_plain``: the state directories it checked, at most 6); a session by at
  most 4 per delivery (list entry, 2 properties, transaction log entry) and 0 beyond.  So a = 6 (a consumer keeps a name in at most 6
  per-name containers: the listing's keys, order and walk, skip, held back, the claim register) and
  b = 8 (6 state directories + 2) for both.  A consumer that keeps a name per message others took
  passes its bound within about ten such messages (``tests/test_mbt_regressions.py``).  Programs
  reach that situation: queue consumers have selectors (half of the first ones too), and ``miss``
  sends one a message it rejects and lets the CLI take it; ``purge`` deletes what a consumer held back.

Where the model cannot know an outcome (a client killed while a command runs, a lazy DUPS_OK ack),
it allows every outcome and then narrows to what it observes.

Profiles: ``short`` (``tests/test_api_model.py``, part of ``make test``: derandomized, small) and
``long`` (``DROPBOXMQ_API_PROFILE=long``, ``python -m dropboxmq_stress.apitester``, ``make stress``).
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import hashlib
import json
import os
import queue
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Iterable, Iterator, NoReturn

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (Bundle, RuleBasedStateMachine, initialize, invariant, multiple,
                                 precondition, rule)

from dropboxmq import TextMessage, claims, codec, ids
from dropboxmq.lifecycle import State
from dropboxmq.selector import selector_for
from dropboxmq.store import Dropbox

__all__ = ["MAX_ATTEMPTS", "Defect", "Figures", "FIGURES", "APIModel", "run",
           "register_profiles", "main"]

#: set (tests) to record each program's file-system trace there, for ``dropboxmq spec validate-trace``
TRACE_DIR: Path | None = None

MAX_ATTEMPTS = 3  # deliveries before error/: small, so that dead-lettering is reached
CLI_LIMIT = ("--max-deliveries", str(MAX_ATTEMPTS))  # the CLI's receives too (its default is the library's, 10)
def evenly(options: tuple) -> st.SearchStrategy:
    """One of ``options``, each as likely (``sampled_from`` draws its first option far more often,
    and shrinks to it: here the first options are the simplest, the draw itself is even)."""
    return st.integers(0, 2**16 - 1).map(lambda i: options[i % len(options)])


PICK = st.integers(0, 7)
NON_DURABLE_KINDS = ("nondurable", "shared")  # (consumer kinds) subscriptions that end with their consumers
#: what a cycle does after its first receive (see APIModel.cycle)
THEN = ("put_back", "settle", "listen", "receive", "close_session", "kill_client", "close_client")  # which of the live sessions/consumers a step uses
QUEUES = ("q1", "q2")
SELECTOR = "n > 4"  # the consumers' selector: a send's n is drawn from 0..9
#: what session_step does, the common ones more than once (drawn evenly from this list)
SESSION_ACTIONS = ("cycle", "send", "send", "send", "send", "receive", "receive", "receive", "receive", "receive", "listen",
                   "listen", "acknowledge", "acknowledge", "recover", "recover", "recover", "commit", "commit",
                   "rollback", "rollback", "kill_while_sending",
                   "kill_while_committing", "close_consumer", "close_session", "unsubscribe", "kill_client",
                   "close_client", "miss", "miss")
TOPICS = ("t", "t.a")  # t.a's publishes reach t's subscriptions too
SHORT_IDS = ("c1", "c2", "c3")
LONG_ID = "client-" + "x" * 43  # a 50-byte id: a 229-byte name has no room for its prefix
STATES = ("working", "target", "processing", "processed", "expired", "error")
TEMINAL = ("processed", "expired", "error")
LISTEN_TIMEOUT = 10.0
REPLY_TIMEOUT = 60.0
RECEIVE_WAIT = 5.0  # a receive that must find a message waits up to this


#: (a, b): a live consumer's held state grows by at most a * (names in its dropbox's target/ and
#: processing/, at its last claim or now, + its session's unsettled deliveries) + b container elements
#: beyond its state at creation; a session's, by at most a * (its unsettled deliveries + transacted
#: sends + open consumers) + b.  Chosen from measurement with margin: see the module docstring.
CONSUMER_BOUND = (6, 8)
SESSION_BOUND = (6, 8)

#: what the generators draw from (each of issue 24's defects 1-8 is reachable from these)
CLIENT_IDS = SHORT_IDS + (LONG_ID,)
FOREIGN_KINDS = ("v12", "v12", "invoice", "long-v12", "long-foreign", "tilde", "path-id", "collide")
NAME_LENGTHS = (255, 254, 237, 236, 229, 200, 120)


class Defect(AssertionError):
    """The library broke a guarantee of the model."""


@dataclasses.dataclass
class Figures:
    programs: int = 0
    steps: int = 0
    processes_started: int = 0
    processes_killed: int = 0
    kills_in_flight: int = 0
    cli_runs: int = 0
    foreign_drops: int = 0
    deliveries_checked: int = 0
    redeliveries_checked: int = 0
    state_measures: int = 0  # consumers' and sessions' held state measured against its bound
    closest_to_bound: str = ""  # the measure that came closest to its bound, and how close
    closest_margin: int = 1 << 30
    defects: list[str] = dataclasses.field(default_factory=list)


FIGURES = Figures()

# ------------------------------------------------------------------ the model's vocabulary
# A place of a message is (state, n): state is a directory name ("processing:<client id>" for
# processing/), or "absent"; n is the number of deliveries so far (what a name in target/ carries).
Place = tuple[str, int]
Key = tuple[str, str]  # (dropbox relative to the root, body token)


@dataclasses.dataclass
class Entry:
    box: str
    token: str
    allowed: set[Place]
    msg_id: str | None = None  # our sends' ids, to check a redelivery is the same message
    expiration: int = 0  # ms; 0 = never
    delivery_time: int = 0  # ms
    group: int | None = None  # a committed-together group, checked all-or-nothing once settled
    count_in_name: bool = True  # False: a foreign name with no room for the count
    owed_by: str | None = None  # a dead holder's client id: must come back at the next receive here
    owed_incarnation: int = 0  # ... the process that held it (a restart under the same id is another)
    n: int | None = None  # its property n (our sends'), which the consumers' selectors test

    @property
    def key(self) -> Key:
        return self.box, self.token


@dataclasses.dataclass
class SubscriptionModel:
    box: str
    topic: str
    kind: str
    selector: str | None
    no_local: bool
    owner: str  # client id
    certain: bool = True  # False: it may have been removed (a non-durable one whose consumer died)


@dataclasses.dataclass
class SessionModel:
    sid: int
    client: "ClientModel"
    mode: str
    held: list[Key] = dataclasses.field(default_factory=list)  # unacked: CLIENT, DUPS_OK (lazy), TX receives
    tx_sends: list[Key] = dataclasses.field(default_factory=list)
    open: bool = True
    baseline: dict[str, int] = dataclasses.field(default_factory=dict)  # its held state at creation
    unsettled: int = 0  # deliveries to it since its last acknowledge/recover/commit/rollback (not AUTO)


@dataclasses.dataclass
class ConsumerModel:
    cid: int
    session: SessionModel
    kind: str
    dest: str
    box: str
    sub: SubscriptionModel | None
    open: bool = True
    selector: str | None = None
    baseline: dict[str, int] = dataclasses.field(default_factory=dict)  # its held state at creation
    listed: int = 0  # names in its box's target/ and processing/ before its last receive or listener


class ClientProcess:
    """One apiclient child: JSON commands over its stdin, answers read by a thread."""

    def __init__(self, root: Path, client_id: str):
        self.proc = subprocess.Popen([sys.executable, "-m", "dropboxmq_stress.apiclient", str(root), client_id,
                                      str(MAX_ATTEMPTS)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True, bufsize=1)
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        FIGURES.processes_started += 1

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def _next(self, what: str) -> dict:
        try:
            line = self.lines.get(timeout=REPLY_TIMEOUT)
        except queue.Empty:
            raise Defect(f"client process hung ({REPLY_TIMEOUT:.0f} s) in {what}") from None
        if line is None:
            raise Defect(f"client process died in {what} (exit {self.proc.wait()})")
        return json.loads(line)

    def start(self, cmd: dict) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        self._next(cmd["op"])  # {"started": true}

    def call(self, cmd: dict) -> dict:
        self.start(cmd)
        reply = self._next(cmd["op"])
        if "error" in reply and not reply["documented"]:
            raise Defect(f"undocumented error from {cmd}: {reply['error']}\n{reply.get('traceback', '')}")
        return reply

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        FIGURES.processes_killed += 1

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                self.call({"op": "close"})
                self.proc.wait(timeout=REPLY_TIMEOUT)
            finally:
                if self.proc.poll() is None:
                    self.proc.kill()
                    self.proc.wait()


@dataclasses.dataclass
class ClientModel:
    client_id: str
    proc: ClientProcess
    live: bool = True
    incarnation: int = dataclasses.field(default_factory=lambda: FIGURES.processes_started)
    sessions: list[SessionModel] = dataclasses.field(default_factory=list)


def _token_of(data: bytes) -> str | None:
    return data.decode("latin-1") if data.startswith(b"mbt-") and len(data) < 64 else None


def _read_regular(path: bytes) -> bytes | None:
    """A regular file's content, never following a link nor blocking on a FIFO; None otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, 128)
    finally:
        os.close(fd)


def _digest(path: Path) -> dict[str, str]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(path):
        for n in dirnames + filenames:
            p = os.path.join(dirpath, n)
            key = os.path.relpath(p, path)
            if os.path.isfile(p) and not os.path.islink(p):
                with open(p, "rb") as f:
                    out[key] = hashlib.sha256(f.read()).hexdigest()
            else:
                out[key] = oct(os.lstat(p).st_mode)
    return out


def _now_ms() -> int:
    return int(time.time() * 1000)


def selects(selector: str | None, n: int | None) -> bool:
    """Does ``selector`` select a message whose property n is ``n`` (None: a message without it)?"""
    if selector is None:
        return True
    msg = TextMessage("")
    if n is not None:
        msg.set_property("n", n)
    matcher = selector_for(selector)
    return matcher is None or matcher.matches(msg)


def _disk_names(box: Path) -> int:
    """Entries in ``box``'s target/ and processing/ (all of them: junk is listed too)."""
    total = 0
    for state in ("target", "processing"):
        try:
            total += len(os.listdir(box / state))
        except OSError:
            pass
    return total


def _name_bytes(name: str) -> int:
    return len(os.fsencode(name))


class APIModel(RuleBasedStateMachine):
    """Programs over the API, the CLI and a third party, checked against the model after each step."""

    clients = Bundle("clients")

    def __init__(self) -> None:
        super().__init__()
        self.base = Path(tempfile.mkdtemp(prefix="dropboxmq-apimodel-"))
        self.root, self.outside, self.scratch = self.base / "root", self.base / "outside", self.base / "scratch"
        for d in (self.root, self.scratch, self.base / "out", self.outside / "qdir"):
            d.mkdir(parents=True)
        (self.outside / "secret").write_bytes(b"outside the root")
        self.outside_digest = _digest(self.outside)
        self.entries: dict[Key, Entry] = {}
        self.subs: dict[str, SubscriptionModel] = {}
        self.all_clients: list[ClientModel] = []
        self.failed_processes: list[ClientProcess] = []  # connect failed: kept alive (a leaked lock shows)
        self.torn_boxes: set[str] = set()  # boxes where a killed send may have left a torn file
        self.clients_junk: set[str] = set()  # client ids with a third party's entry in dropboxmq/clients/
        self.evil_topics: set[str] = set()
        self.symlinked_queues: set[str] = set()
        self.consumer_list: list[ConsumerModel] = []  # bundles hold only what rules returned
        self.cli_proc: ClientProcess | None = None  # runs the CLI verbs (click's runner, in a process)
        self.next_token = 0
        self.next_sid = 0
        self.next_group = 0
        FIGURES.programs += 1
        # The trace of a program that fits the spec's models (no foreign files) is kept for TLC.
        self.fits_spec = True
        self.watcher: Any = None
        if TRACE_DIR is not None:
            from dropboxmq_conformance.watcher import Watcher

            self.trace_path = TRACE_DIR / f"program-{FIGURES.programs}.jsonl"
            self.watcher = Watcher(self.root, self.trace_path).start()

    def note_kill(self, client: "ClientModel") -> None:
        """Record a kill in the trace, after every event before it (a marker file shows when the
        watcher has caught up: its records come in order)."""
        if self.watcher is None:
            return
        marker = self.root / f".caught-up-{FIGURES.processes_killed}"
        marker.write_bytes(b"")
        rel = marker.name
        if not self.watcher.wait_for(lambda recs: any(r.get("path") == rel for r in recs), REPLY_TIMEOUT):
            self.fits_spec = False
        marker.unlink()
        self.watcher.note({"op": "kill", "role": "consume", "clients": [client.client_id]})

    def teardown(self) -> None:
        for c in self.all_clients:
            if c.live:
                try:
                    c.proc.stop()
                except Defect:
                    pass
        if self.cli_proc is not None:
            self.cli_proc.proc.kill()
            self.cli_proc.proc.wait()
        for p in self.failed_processes:
            p.proc.kill()
            p.proc.wait()
        if self.watcher is not None:
            self.watcher.stop()
            if not self.fits_spec or self.watcher.overflowed:
                self.trace_path.unlink()
        shutil.rmtree(self.base, ignore_errors=True)

    # ------------------------------------------------------------------ helpers
    def token(self) -> str:
        self.next_token += 1
        return f"mbt-{self.next_token}"

    def fail(self, what: str) -> NoReturn:
        FIGURES.defects.append(what.splitlines()[0][:200])
        raise Defect(what)

    def live_clients(self) -> list[ClientModel]:
        return [c for c in self.all_clients if c.live]

    def open_sessions(self, *modes: str) -> list[SessionModel]:
        return [s for c in self.live_clients() for s in c.sessions if s.open and (not modes or s.mode in modes)]

    def open_consumers(self) -> list[ConsumerModel]:
        return [c for c in self.consumer_list if c.open and c.session.open]

    @staticmethod
    def pick(items: list, i: int) -> Any:
        return items[i % len(items)] if items else None

    def in_box(self, box: str) -> list[Entry]:
        return [e for e in self.entries.values() if e.box == box]

    def available(self, box: str, selector: str | None = None) -> list[Entry]:
        """Messages certainly waiting for a consumer of ``box`` (with ``selector``) now."""
        now = _now_ms()
        return [e for e in self.in_box(box)
                if len(e.allowed) == 1 and next(iter(e.allowed))[0] == "target"
                and next(iter(e.allowed))[1] < MAX_ATTEMPTS and e.expiration == 0 and e.delivery_time <= now
                and selects(selector, e.n)]

    def cli(self, *args: str, ok: Iterable[int] = (0,)) -> dict:
        """Run a CLI verb in the program's CLI process; its exit status must be one of ``ok``
        and it must not crash (a traceback)."""
        FIGURES.cli_runs += 1
        if self.cli_proc is None:
            self.cli_proc = ClientProcess(self.root, "cli")
        done = self.cli_proc.call({"op": "cli", "args": list(args)})
        if done["status"] not in ok or done["traceback"] or "Traceback" in done["stderr"]:
            self.fail(f"dropboxmq {' '.join(args)} exited {done['status']}: {done['stderr'][-2000:]}"
                      f"{done['traceback'][-3000:]}")
        return done

    def queue_box(self, name: str) -> str:
        return f"{name}/incoming"

    def incoming_box(self, topic: str) -> str:
        return "topic-root/" + topic.replace(".", "/") + "/.incoming"

    # ------------------------------------------------------------------ model transitions
    def put_back(self, key: Key) -> None:
        """recover/rollback/a throwing listener: back to target/, deliveries so far unchanged."""
        e = self.entries.get(key)
        if e is not None:
            e.allowed = {("target", n) for s, n in e.allowed if s.startswith("processing:")} or e.allowed

    def acked(self, key: Key, lazy: bool = False) -> None:
        e = self.entries.get(key)
        if e is not None:
            done = {("processed", n) for s, n in e.allowed if s.startswith("processing:")}
            e.allowed = (e.allowed | done) if lazy else (done or e.allowed)

    def delivered(self, box: str, msg: dict, holder: str, started_ms: int, selector: str | None = None) -> Entry:
        """Check one delivery against the model and return its entry (now held by ``holder``)."""
        FIGURES.deliveries_checked += 1
        e = self.entries.get((box, msg["body"]))
        if e is None:
            self.fail(f"{holder} received a message the model never put in {box}: {msg}")
        if not selects(selector, e.n):
            self.fail(f"{holder}'s consumer with selector {selector!r} received {e.token} (n={e.n})")
        waiting = sorted(n for s, n in e.allowed if s == "target")
        if not waiting:
            self.fail(f"{holder} received {e.token} of {box} while it was {sorted(e.allowed)}: a second holder "
                      "or a message that was not waiting")
        if e.msg_id is not None and msg["id"] != e.msg_id:
            self.fail(f"{e.token} came back as {msg['id']}, sent as {e.msg_id}")
        if e.expiration and e.expiration < started_ms:
            self.fail(f"{e.token} delivered after it expired ({e.expiration} < {started_ms})")
        if e.delivery_time > _now_ms():
            self.fail(f"{e.token} delivered before its delivery time")
        n = msg["count"] - 1
        if n not in waiting or msg["redelivered"] != (n > 0):
            self.fail(f"{e.token} delivered with JMSRedelivered={msg['redelivered']} JMSXDeliveryCount="
                      f"{msg['count']}; the model expects a delivery count of {[k + 1 for k in waiting]}")
        if n >= MAX_ATTEMPTS:
            self.fail(f"{e.token} delivered a {n + 1}th time: past max_delivery_attempts={MAX_ATTEMPTS}")
        e.allowed = {(f"processing:{holder}", n + 1)}
        e.owed_by = None
        FIGURES.redeliveries_checked += n > 0
        return e

    def after_receive_on(self, box: str, receiver: "ClientModel | None" = None) -> None:
        """A consumer of ``box`` claimed: dead holders' messages there are back (also to a client
        restarted under the dead one's id: the claims are its dead predecessor's), and a walk may
        have dead-lettered those past the attempts or expired those past their expiration."""
        now = _now_ms()
        live_ids = {c.client_id for c in self.live_clients()}
        for e in self.in_box(box):
            restarted = receiver is not None and receiver.client_id == e.owed_by and \
                receiver.incarnation != e.owed_incarnation
            if e.owed_by is not None and (e.owed_by not in live_ids or restarted):
                e.allowed = self.returned(e.allowed)
                e.owed_by = None
            for s, n in list(e.allowed):
                if s == "target" and n >= MAX_ATTEMPTS:
                    e.allowed.add(("error", n))
                if s == "target" and e.expiration and e.expiration <= now:
                    e.allowed.add(("expired", n))

    @staticmethod
    def returned(allowed: set[Place]) -> set[Place]:
        """A dead holder's message after recovery: back in target/ (its deliveries so far kept),
        whatever else it may be (a lazy DUPS_OK ack, an expiry)."""
        return {("target", n) if s.startswith("processing:") else (s, n) for s, n in allowed}

    def lose_client(self, client: ClientModel, in_flight: dict | None = None) -> None:
        """``client`` was killed: what it held may come back, its open transactions roll back."""
        client.live = False
        for s in client.sessions:
            if not s.open:
                continue
            s.open = False
            for key in s.tx_sends:
                e = self.entries.get(key)
                if e is not None:
                    e.allowed = {("working", 0), ("absent", 0)}
            for key in s.held:
                e = self.entries.get(key)
                if e is None:
                    continue
                held = [p for p in e.allowed if p[0].startswith("processing:")]
                e.allowed |= {("target", n) for _, n in held}
                if held:
                    e.owed_by, e.owed_incarnation = client.client_id, client.incarnation
        for sub in self.subs.values():
            if sub.owner == client.client_id and sub.kind in NON_DURABLE_KINDS:
                sub.certain = False
                for e in self.in_box(sub.box):
                    e.allowed.add(("absent", 0))

    # ------------------------------------------------------------------ observation
    def observe(self) -> dict[Key, list[tuple[str, int, str]]]:
        """Every message file under the root: (box, token) -> [(state, n, name)].  ``n`` is the
        delivery count where the library keeps it: in the name, or, for a name with no room for
        the count or for the owner prefix behind it, in the dropbox's claim register (claims.py;
        the claim is an alias ``<owner>~#<inode>``, its name carries no count, N-7)."""
        found: dict[Key, list[tuple[str, int, str]]] = {}
        stray: list[str] = []
        for dirpath, dirnames, _ in os.walk(self.root):
            dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]
            state = os.path.basename(dirpath)
            if state not in STATES:
                continue
            box = os.path.relpath(os.path.dirname(dirpath), self.root)
            if box.startswith("dropboxmq"):
                continue
            dirnames[:] = []
            dropbox = Dropbox(os.path.dirname(dirpath))
            registered = dropbox.register_inodes() if state in ("target", "processing") else frozenset()
            for name in os.listdir(dirpath):
                data = _read_regular(os.path.join(os.fsencode(dirpath), os.fsencode(name)))
                if data is None:
                    continue
                token = _token_of(data)
                if token is None:
                    if not (box in self.torn_boxes and state in ("working", "error")):
                        stray.append(f"{box}/{state}/{name[:60]}")
                    continue
                label = state
                if state == "processing":
                    owner, _ = codec.split_processing_name(name)
                    label = f"processing:{owner}" if owner is not None else "processing:?"
                entry = claims.lookup(dropbox, State(state), name, registered)
                n = codec.name_delivery_count(name) if entry is None else entry.count
                found.setdefault((box, token), []).append((label, n, name))
        if stray:
            self.fail(f"files no message of the model explains: {stray}")
        return found

    def check(self) -> None:
        for session in self.open_sessions("dups"):  # DUPS_OK acks lazily: at any of its calls
            for key in session.held:
                if key in self.entries:
                    self.acked(key, lazy=True)
        found = self.observe()
        now = _now_ms()
        for key, places in found.items():
            if key not in self.entries:
                self.fail(f"{key[1]} appeared in {key[0]} ({[p[:2] for p in places]}), where the model never "
                          "sent it: a duplicate or a copy to a subscription that does not match")
        for key, e in list(self.entries.items()):
            if e.expiration and e.expiration <= now:
                e.allowed |= {("expired", n) for s, n in e.allowed if s == "target"}
            places = found.get(key, [])
            if len(places) > 1:
                self.fail(f"{e.token} of {e.box} is in {len(places)} places at once: {[p[:2] for p in places]}")
            state, n = places[0][:2] if places else ("absent", 0)
            match = [p for p in e.allowed if p[0] == state or (state == "processing:?"
                                                               and p[0].startswith("processing:"))]
            if not match:
                self.fail(f"{e.token} of {e.box} is in {state}; the model allows only {sorted(e.allowed)}"
                          + (" (a committed message lost)" if state == "absent" else ""))
            if state in ("target",) or state.startswith("processing:"):
                if e.count_in_name and all(m[1] != n for m in match):
                    self.fail(f"{e.token} of {e.box} is in {state} with delivery count {n} in its name (or its "
                              f"claim register entry); the model expects {sorted(m[1] for m in match)}")
                e.allowed = {m for m in match if m[1] == n} or set(match)
            else:
                e.allowed = set(match)
            if state == "absent" and all(p[0] == "absent" for p in e.allowed) and e.group is None:
                del self.entries[key]
        self.check_groups()
        if _digest(self.outside) != self.outside_digest:
            self.fail("a file outside the root changed")
        extra = sorted(set(os.listdir(self.base)) - {"root", "outside", "scratch", "out"})
        if extra:
            self.fail(f"files appeared beside the root: {extra}")

    def check_groups(self) -> None:
        """A commit killed in flight: once every one of its sends has settled (none in working/),
        all of them are committed or none."""
        groups: dict[int, list[Entry]] = {}
        for e in self.entries.values():
            if e.group is not None:
                groups.setdefault(e.group, []).append(e)
        for members in groups.values():
            states = [next(iter(e.allowed))[0] for e in members if len(e.allowed) == 1]
            if len(states) < len(members) or "working" in states:
                continue
            committed = sum(s != "absent" for s in states)
            if committed not in (0, len(members)):
                self.fail(f"a transaction killed in its commit ended with {committed} of its {len(members)} sends")
            for e in members:
                e.group = None

    # ------------------------------------------------------------------ clients
    @initialize(target=clients, mode=evenly(("auto", "client", "dups", "tx")),
                selector=evenly((None, SELECTOR)))
    def a_first_client_with_a_consumer(self, mode: str, selector: str | None = None, queue_name: str = "q1"):
        """Every program starts with one client consuming a queue (half of them with a selector):
        the steps that follow then mostly act on messages rather than on setting up."""
        client = self.start_client("c1")
        self.open_session(client, mode)
        self.open_consumer(0, "queue", queue_name, "t", "s1", selector, False)
        return client

    @precondition(lambda self: len(self.live_clients()) < 3)
    @rule(target=clients, client_id=st.sampled_from(CLIENT_IDS))
    def start_client(self, client_id: str):
        held = any(c.client_id == client_id for c in self.live_clients())
        proc = ClientProcess(self.root, client_id)
        reply = proc.call({"op": "connect"})
        if "error" in reply:
            self.failed_processes.append(proc)
            if not held and client_id not in self.clients_junk:
                self.fail(f"connecting as {client_id}, an id nobody holds, failed: {reply['error']}")
            return multiple()
        if held:
            self.failed_processes.append(proc)
            self.fail(f"two live connections hold client id {client_id}")
        client = ClientModel(client_id, proc)
        self.all_clients.append(client)
        for e in self.entries.values():  # a restart under a dead client's id may take its claims back at once
            if e.owed_by == client_id:
                e.allowed |= self.returned(e.allowed)
        return client

    def close_client(self, client: ClientModel):
        if not client.live:
            return  # killed in the middle of a command since
        for s in client.sessions:
            self.session_closed(s)
        client.proc.stop()
        client.live = False

    def kill_client(self, client: ClientModel):
        if not client.live:
            return
        client.proc.kill()
        self.note_kill(client)
        self.lose_client(client)

    @rule(client=clients, mode=evenly(("auto", "client", "dups", "tx")))
    def open_session(self, client: ClientModel, mode: str):
        if not client.live:
            return
        self.next_sid += 1
        reply = client.proc.call({"op": "session", "sid": self.next_sid, "mode": mode})
        s = SessionModel(self.next_sid, client, mode, baseline=reply.get("held", {}))
        client.sessions.append(s)

    def open_consumer(self, pick: int, kind: str, queue_name: str, topic: str, sub: str,
                      selector: str | None, no_local: bool):
        session = self.pick(self.open_sessions(), pick)
        if session is None:
            return
        self.next_sid += 1
        dest = queue_name if kind == "queue" else topic
        no_local = no_local and kind in ("durable", "nondurable")
        reply = session.client.proc.call({"op": "consumer", "sid": session.sid, "cid": self.next_sid, "kind": kind,
                                          "dest": dest, "sub": sub, "selector": selector, "no_local": no_local})
        if "error" in reply:
            if kind in ("queue", "nondurable"):
                self.fail(f"a {kind} consumer of {dest} was refused: {reply['error']}")
            return
        box = reply["box"]
        model = None
        if kind != "queue":
            old = self.subs.get(box)
            details = (topic, selector or None, no_local)
            if old is not None and (old.topic, old.selector, old.no_local) != details:
                for e in self.in_box(box):  # re-created with other details: its messages are gone
                    e.allowed.add(("absent", 0))
            if old is None or (old.topic, old.selector, old.no_local) != details or not old.certain:
                model = self.subs[box] = SubscriptionModel(box, topic, kind, selector, no_local,
                                                           session.client.client_id)
            else:
                model = old
        consumer = ConsumerModel(self.next_sid, session, kind, dest, box, model, selector=selector or None,
                                 baseline=reply["held"])
        self.consumer_list.append(consumer)

    # ------------------------------------------------------------------ sending
    def send(self, pick: int, to_queue: bool, queue_name: str, topic: str, priority: int,
             persistent: bool, ttl: float, delay: float, n: int):
        session = self.pick(self.open_sessions(), pick)
        if session is None:
            return
        token = self.token()
        dest = queue_name if to_queue else topic
        reply = session.client.proc.call({"op": "send", "sid": session.sid, "dest_kind": "queue" if to_queue else
                                          "topic", "dest": dest, "body": token, "priority": priority,
                                          "persistent": persistent, "ttl": ttl, "delay": delay, "n": n})
        if "error" in reply:
            self.fail(f"a send to {dest} failed: {reply['error']}")
        state = "working" if session.mode == "tx" else "target"
        if to_queue:
            copies = [Entry(self.queue_box(dest), token, {(state, 0)})]
            self.entries[copies[0].key] = copies[0]
        else:
            copies = list(self.fan_out(topic, {"n": n}, session.client.client_id, token, state))
        for e in copies:
            e.msg_id, e.expiration, e.delivery_time = reply["id"], reply["expiration"], reply["delivery_time"]
            e.n = n
            if session.mode == "tx":
                session.tx_sends.append(e.key)

    def fan_out(self, topic: str, properties: dict[str, Any], publisher: str | None, token: str,
                state: str) -> Iterator[Entry]:
        """Enter the copies a publish made: every certain, matching subscription must have its copy;
        uncertain ones (a dead owner's non-durable subscription, another program's) may or may not."""
        found = self.observe_token(token)
        levels = topic.split(".")
        ancestors = {".".join(levels[:i]) for i in range(1, len(levels) + 1)}
        msg = TextMessage("")
        for k, v in properties.items():
            msg.set_property(k, v)
        matching = set()
        for sub in self.subs.values():
            if sub.topic not in ancestors or not ((sel := selector_for(sub.selector)) is None or sel.matches(msg)):
                continue
            if sub.no_local and sub.owner == publisher:
                continue
            matching.add(sub.box)
            if sub.box not in found and sub.certain and os.path.isdir(self.root / sub.box):
                self.fail(f"a publish to {topic} ({properties}) missed the subscription {sub.box}")
        uncertain = {s.box for s in self.subs.values() if not s.certain}
        for box in found:
            foreign_sub = box.split("/.subscriptions/")[0].removeprefix("topic-root/") in self.evil_topics \
                and box not in self.subs
            if box not in matching and box not in uncertain and not foreign_sub:
                self.fail(f"a publish to {topic} ({properties}) reached {box}, which does not match")
            allowed = {(state, 0)} if box in matching else {(state, 0), ("absent", 0)}
            e = Entry(box, token, allowed, n=properties.get("n"))
            self.entries[e.key] = e
            yield e

    def observe_token(self, token: str) -> set[str]:
        return {box for (box, t) in self.observe_quiet() if t == token}

    def observe_quiet(self) -> set[Key]:
        out = set()
        top = self.root / "topic-root"
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]
            if os.path.basename(dirpath) not in ("working", "target"):
                continue
            box = os.path.relpath(os.path.dirname(dirpath), self.root)
            for name in filenames:
                data = _read_regular(os.path.join(os.fsencode(dirpath), os.fsencode(name)))
                token = None if data is None else _token_of(data)
                if token is not None:
                    out.add((box, token))
        return out

    def kill_while_sending(self, pick: int, to_queue: bool, queue_name: str, topic: str):
        """kill -9 while a send runs: the message is sent or not, never half (a torn file in
        working/ is the orphan sweep's)."""
        session = self.pick(self.open_sessions("auto", "client", "dups"), pick)
        if session is None:
            return
        token = self.token()
        dest = queue_name if to_queue else topic
        session.client.proc.start({"op": "send", "sid": session.sid, "dest_kind": "queue" if to_queue else "topic",
                                   "dest": dest, "body": token, "priority": 4, "persistent": True, "ttl": 0.0,
                                   "delay": 0.0, "n": 5})
        session.client.proc.kill()
        FIGURES.kills_in_flight += 1
        self.note_kill(session.client)
        self.lose_client(session.client)
        boxes = [self.queue_box(dest)] if to_queue else [s.box for s in self.subs.values() if s.topic in
                                                         {topic, topic.split(".")[0]}]
        for box in boxes:
            self.torn_boxes.add(box)
            e = Entry(box, token, {("working", 0), ("target", 0), ("absent", 0), ("error", 0)}, n=5)
            self.entries[e.key] = e

    # ------------------------------------------------------------------ receiving
    def receive(self, pick: int):
        consumer = self.pick(self.open_consumers(), pick)
        if consumer is None:
            return
        s = consumer.session
        wait = RECEIVE_WAIT if self.available(consumer.box, consumer.selector) else 0.0
        started = _now_ms()
        consumer.listed = _disk_names(self.root / consumer.box)
        reply = s.client.proc.call({"op": "receive", "cid": consumer.cid, "timeout": wait})
        if "error" in reply:
            self.fail(f"receive on {consumer.box} failed: {reply['error']}")
        self.after_receive_on(consumer.box, s.client)
        msg = reply["msg"]
        if msg is None:
            if wait:
                self.fail(f"receive on {consumer.box} found nothing while "
                          f"{[e.token for e in self.available(consumer.box, consumer.selector)]} waited")
            return
        e = self.delivered(consumer.box, msg, s.client.client_id, started, consumer.selector)
        self.consumed(s, e)

    # ------------------------------------------------------------------ the rules hypothesis draws
    # Hypothesis orders rules by their number of arguments (then name) and draws the first ones more
    # often; and its swarm testing switches whole rules off per program.  So every rule takes one
    # argument, a dictionary of what it does, and each acts on a family of operations: a program
    # that may send can receive, acknowledge, recover, commit or be killed in the middle of them.

    @precondition(lambda self: self.open_sessions())
    @rule(call=st.fixed_dictionaries({
        "action": evenly(SESSION_ACTIONS), "pick": PICK, "to_queue": evenly((True, True, False)),
        "queue_name": evenly(("q1", "q1", "q2")), "topic": st.sampled_from(TOPICS), "priority": st.integers(0, 9),
        "persistent": st.booleans(), "ttl": st.sampled_from((0.0, 0.0, 3600.0, 0.3)),
        "delay": st.sampled_from((0.0, 0.0, 0.0, 3600.0)), "n": st.integers(0, 9), "failures": st.integers(0, 2),
        "sub": st.sampled_from(("s1", "s2")), "then": evenly(THEN)}))
    def call_on_session(self, call: dict[str, Any]):
        """One call on an open session, one of its consumers or its client; or a whole cycle."""
        c = dict(call)
        action, pick, then = c.pop("action"), c.pop("pick"), c.pop("then")
        if action == "cycle":
            self.cycle(pick, c["priority"], c["persistent"], then)
        elif action == "send":
            del c["failures"], c["sub"]
            self.send(pick, **c)
        elif action == "kill_while_sending":
            self.kill_while_sending(pick, c["to_queue"], c["queue_name"], c["topic"])
        elif action == "listen":
            self.listen(pick, c["failures"])
        elif action == "unsubscribe":
            self.unsubscribe(pick, c["sub"])
        elif action in ("close_client", "kill_client"):
            getattr(self, action)(self.pick(self.open_sessions(), pick).client)
        else:
            getattr(self, action)(pick)

    @precondition(lambda self: self.open_sessions())
    @rule(spec=st.fixed_dictionaries({
        "pick": PICK, "kind": evenly(("queue", "queue", "durable", "shared-durable", "nondurable", "shared")),
        "queue_name": st.sampled_from(QUEUES), "topic": st.sampled_from(TOPICS), "sub": st.sampled_from(("s1", "s2")),
        "selector": evenly((None, SELECTOR)), "no_local": st.booleans()}))
    def create_consumer(self, spec: dict[str, Any]):
        """A queue consumer or a subscriber of any kind, on an open session."""
        self.open_consumer(**spec)

    @rule(verb=evenly((
        st.fixed_dictionaries({"verb": st.just("send"), "queue_name": st.sampled_from(QUEUES),
                               "priority": st.integers(0, 9)}),
        st.fixed_dictionaries({"verb": st.just("receive"), "queue_name": st.sampled_from(QUEUES),
                               "ack_mode": st.sampled_from(("auto", "client", "transacted", "dups-ok"))}),
        st.fixed_dictionaries({"verb": st.just("receive_to_directory"), "queue_name": st.sampled_from(QUEUES)}),
        st.fixed_dictionaries({"verb": st.just("recover")}),
        st.fixed_dictionaries({"verb": st.just("prune"),
                               "states": st.sampled_from(("processed,expired", "processed,expired,error"))}),
        st.fixed_dictionaries({"verb": st.just("distribute")}),
        st.fixed_dictionaries({"verb": st.just("purge"), "queue_name": st.sampled_from(QUEUES)}))).flatmap(
            lambda verb: verb))
    def cli_verb(self, verb: dict[str, Any]):
        """An operator or a script runs a verb of the CLI."""
        args = dict(verb)
        getattr(self, "cli_" + args.pop("verb"))(**args)

    @rule(drop=evenly((
        st.fixed_dictionaries({"what": st.just("message"), "to_topic": st.booleans(),
                               "queue_name": st.sampled_from(QUEUES), "topic": st.sampled_from(TOPICS),
                               "kind": evenly(FOREIGN_KINDS), "length": st.sampled_from(NAME_LENGTHS)}),
        st.fixed_dictionaries({"what": st.just("junk"), "to_topic": st.booleans(),
                               "queue_name": st.sampled_from(QUEUES), "topic": st.sampled_from(TOPICS),
                               "kind": st.sampled_from(("dir", "fifo", "symlink-in", "symlink-out")),
                               "name": st.sampled_from(("4.1700000000000000-1.T", "junk", "x" * 255,
                                                        "invoice-1.xml"))}))).flatmap(lambda drop: drop))
    def third_party_drop(self, drop: dict[str, Any]):
        """A foreign program drops a message file, or something that is no message, into a
        queue's target/ or a topic's .incoming/target/."""
        args = dict(drop)
        if args.pop("what") == "message":
            self.drop_foreign(**args)
        else:
            self.drop_junk(**args)

    def cycle(self, pick: int, priority: int, persistent: bool, then: str) -> None:
        """Send to a consumer's destination (committing a transacted send), receive, then ``then``
        (put back, acknowledge, commit, listen, close or die), then receive again: the receive side
        of JMS in one step, so that every program reaches redeliveries."""
        consumer = self.pick(self.open_consumers(), pick)
        if consumer is None:
            return
        s = consumer.session
        sessions = self.open_sessions()
        self.send(sessions.index(s), consumer.kind == "queue", consumer.dest, consumer.dest, priority,
                  persistent, 0.0, 0.0, priority)
        if s.mode == "tx":
            self.commit(self.open_sessions("tx").index(s))
        self.check()
        index = self.open_consumers().index(consumer)
        self.receive(index)
        self.check()
        if then == "put_back":
            then = "rollback" if s.mode == "tx" else "recover"
        elif then == "settle":
            then = {"tx": "commit", "auto": "receive"}.get(s.mode, "acknowledge")
        if then in ("recover", "acknowledge", "commit", "rollback", "close_session"):
            getattr(self, then)(self.open_sessions().index(s) if then in ("recover", "close_session") else
                                self.open_sessions(*{"acknowledge": ("client", "dups"), "commit": ("tx",),
                                                     "rollback": ("tx",)}[then]).index(s))
        elif then in ("kill_client", "close_client"):
            getattr(self, then)(s.client)
        elif then == "listen":
            self.listen(index, 0)
        else:
            self.receive(index)
        self.check()
        if consumer in self.open_consumers():
            self.receive(self.open_consumers().index(consumer))

    def miss(self, pick: int) -> None:
        """A queue consumer's selector rejects a message (n=0) that the CLI's receive then takes (the
        CLI takes the first waiting one: the miss, or another): a consumer must not keep the names
        it rejected once they left target/ (state_is_bounded)."""
        consumer = self.pick([c for c in self.open_consumers() if c.kind == "queue" and c.selector], pick)
        if consumer is None:
            return
        self.send(self.open_sessions().index(consumer.session), True, consumer.dest, consumer.dest, 4, True,
                  0.0, 0.0, 0)
        if consumer.session.mode == "tx":
            self.commit(self.open_sessions("tx").index(consumer.session))
        self.check()
        self.receive(self.open_consumers().index(consumer))
        self.check()
        self.cli_receive(consumer.dest, "auto")

    def consumed(self, s: SessionModel, e: Entry) -> None:
        if s.mode == "auto":
            self.acked(e.key)
        else:
            s.held.append(e.key)
            s.unsettled += 1
            if s.mode == "dups":
                self.acked(e.key, lazy=True)

    def listen(self, pick: int, failures: int):
        """A listener that raises ``failures`` times, then returns: AUTO and DUPS_OK put a failed
        message back (it may come again, one delivery more); CLIENT and transacted keep it."""
        fed = [c for c in self.open_consumers() if len(self.available(c.box, c.selector)) > failures]
        if not fed:
            return  # a listener with nothing certain to come would have to be stopped racily
        consumer = self.pick(fed, pick)
        if consumer is None:
            return
        s = consumer.session
        started = _now_ms()
        consumer.listed = _disk_names(self.root / consumer.box)
        reply = s.client.proc.call({"op": "listen", "cid": consumer.cid, "failures": failures,
                                    "timeout": LISTEN_TIMEOUT})
        if "error" in reply:
            self.fail(f"set_message_listener on {consumer.box} failed: {reply['error']}")
        for i, msg in enumerate(reply["calls"]):
            self.after_receive_on(consumer.box, s.client)
            e = self.delivered(consumer.box, msg, s.client.client_id, started, consumer.selector)
            if i < failures and s.mode in ("auto", "dups"):
                self.put_back(e.key)
            else:
                self.consumed(s, e)
        if not reply["finished"]:
            self.fail(f"a listener on {consumer.box} got {len(reply['calls'])} of {failures + 1} messages in "
                      f"{LISTEN_TIMEOUT:.0f} s while enough waited")

    def acknowledge(self, pick: int):
        session = self.pick(self.open_sessions("client", "dups"), pick)
        if session is None:
            return
        reply = session.client.proc.call({"op": "acknowledge", "sid": session.sid})
        if "error" in reply:
            self.fail(f"acknowledge() failed: {reply['error']}")
        for key in session.held:
            self.acked(key)
        session.held, session.unsettled = [], 0

    def recover(self, pick: int):
        session = self.pick(self.open_sessions("client", "dups", "auto"), pick)
        if session is None:
            return
        reply = session.client.proc.call({"op": "recover", "sid": session.sid})
        if "error" in reply:
            self.fail(f"recover() failed: {reply['error']}")
        for key in session.held:
            e = self.entries.get(key)
            if e is None:
                continue
            if session.mode == "dups":  # what the lazy batch acked stays acked
                e.allowed |= {("target", n) for s, n in e.allowed if s.startswith("processing:")}
            else:
                self.put_back(key)
        session.held, session.unsettled = [], 0

    def commit(self, pick: int):
        session = self.pick(self.open_sessions("tx"), pick)
        if session is None:
            return
        reply = session.client.proc.call({"op": "commit", "sid": session.sid})
        if "error" in reply:
            self.fail(f"commit() failed: {reply['error']}")
        for key in session.tx_sends:
            if key in self.entries:
                self.entries[key].allowed = {("target", 0)}
        for key in session.held:
            self.acked(key)
        session.tx_sends, session.held, session.unsettled = [], [], 0

    def kill_while_committing(self, pick: int):
        """kill -9 during commit(): all of its sends are committed or none (the log decides)."""
        session = self.pick([s for s in self.open_sessions("tx") if s.tx_sends], pick)
        if session is None:
            return
        session.client.proc.start({"op": "commit", "sid": session.sid})
        session.client.proc.kill()
        FIGURES.kills_in_flight += 1
        self.note_kill(session.client)
        self.next_group += 1
        members = [self.entries[k] for k in session.tx_sends if k in self.entries]
        for e in members:
            e.allowed = {("working", 0), ("target", 0), ("absent", 0)}
            e.group = self.next_group
        received = list(session.held)
        session.tx_sends, session.held = [], []
        self.lose_client(session.client)
        for key in received:  # acknowledged by the commit, or back
            got = self.entries.get(key)
            if got is not None:
                got.allowed |= {("processed", n) for s, n in got.allowed if s == "target"} | \
                               {("processed", n) for s, n in got.allowed if s.startswith("processing:")}

    def rollback(self, pick: int):
        session = self.pick(self.open_sessions("tx"), pick)
        if session is None:
            return
        reply = session.client.proc.call({"op": "rollback", "sid": session.sid})
        if "error" in reply:
            self.fail(f"rollback() failed: {reply['error']}")
        self.rolled_back(session)

    def rolled_back(self, session: SessionModel) -> None:
        for key in session.tx_sends:
            if key in self.entries:
                self.entries[key].allowed = {("absent", 0)}
        for key in session.held:
            self.put_back(key)
        session.tx_sends, session.held, session.unsettled = [], [], 0

    def session_closed(self, session: SessionModel) -> None:
        if not session.open:
            return
        session.open = False
        if session.mode == "tx":
            self.rolled_back(session)
        elif session.mode == "dups":
            for key in session.held:
                self.acked(key)
        else:
            for key in session.held:
                self.put_back(key)
        session.held = []
        for c in self.consumers_of(session):
            self.consumer_closed(c)

    def consumers_of(self, session: SessionModel) -> list[ConsumerModel]:
        return [c for c in self.consumer_list if c.session is session and c.open]

    def consumer_closed(self, c: ConsumerModel) -> None:
        c.open = False
        if c.sub is not None and c.sub.kind in NON_DURABLE_KINDS:
            others = [o for o in self.consumer_list if o.open and o.box == c.box]
            if not others:
                c.sub.certain = False
                for e in self.in_box(c.box):
                    e.allowed.add(("absent", 0))
                c.session.held = [k for k in c.session.held if k[0] != c.box]

    def close_session(self, pick: int):
        session = self.pick(self.open_sessions(), pick)
        if session is None:
            return
        reply = session.client.proc.call({"op": "close_session", "sid": session.sid})
        if "error" in reply:
            self.fail(f"Session.close() failed: {reply['error']}")
        self.session_closed(session)

    def close_consumer(self, pick: int):
        consumer = self.pick(self.open_consumers(), pick)
        if consumer is None:
            return
        reply = consumer.session.client.proc.call({"op": "close_consumer", "cid": consumer.cid})
        if "error" in reply:
            self.fail(f"MessageConsumer.close() failed: {reply['error']}")
        self.consumer_closed(consumer)

    def unsubscribe(self, pick: int, sub: str):
        session = self.pick(self.open_sessions(), pick)
        if session is None:
            return
        reply = session.client.proc.call({"op": "unsubscribe", "sid": session.sid, "sub": sub})
        if "error" in reply:
            return  # active, pending work, no such subscription: documented refusals
        for box, model in list(self.subs.items()):
            if model.kind in ("durable", "shared-durable") and box.rsplit("/", 1)[-1].split(".")[0] == sub and \
                    not os.path.isdir(self.root / box):
                del self.subs[box]
                for e in self.in_box(box):
                    e.allowed = {("absent", 0)}

    # ------------------------------------------------------------------ the CLI
    def cli_send(self, queue_name: str, priority: int):
        token = self.token()
        self.cli("send", queue_name, token, "--create", "--priority", str(priority))
        e = Entry(self.queue_box(queue_name), token, {("target", 0)})
        self.entries[e.key] = e

    def cli_receive_to_directory(self, queue_name: str):
        """``receive --output-dir``: each body becomes a file of the directory, named after its
        message id, and nowhere else (the directory is two levels down: an id holding ../../
        would show beside the root)."""
        box = self.queue_box(queue_name)
        if not (self.root / box).is_dir():
            return
        out = self.base / "out" / "spool" / "in"
        done = self.cli("receive", queue_name, "-n", "0", "--output-dir", str(out), *CLI_LIMIT, ok=(0, 1))
        self.after_receive_on(box)
        for path in done["stdout"].splitlines():
            data = _read_regular(os.fsencode(path.strip()))
            token = None if data is None else _token_of(data)
            if token is None or (box, token) not in self.entries:
                self.fail(f"receive --output-dir wrote {path!r}, which holds no message of {box}")
            e = self.entries[(box, token)]
            if not any(s == "target" for s, _ in e.allowed):
                self.fail(f"receive --output-dir delivered {token}, which was {sorted(e.allowed)}")
            e.allowed = {("processed", n + 1) for s, n in e.allowed if s == "target"}
            os.unlink(path.strip())
        # -n 0 drains: what was certainly waiting is consumed now
        for e in self.available(box):
            self.fail(f"receive --output-dir -n 0 left {e.token} waiting")
        outside_out = sorted(os.listdir(self.base / "out"))
        if outside_out != ["spool"] or os.listdir(self.base / "out" / "spool") != ["in"]:
            self.fail(f"receive --output-dir wrote outside its directory: {outside_out}")

    def cli_receive(self, queue_name: str, ack_mode: str):
        box = self.queue_box(queue_name)
        if not (self.root / box).is_dir():
            self.cli("receive", queue_name, ok=(1,))  # no such queue: one line, exit 1
            return
        wait = RECEIVE_WAIT if self.available(box) else 0.0
        started = _now_ms()
        done = self.cli("receive", queue_name, "--json", "--ack-mode", ack_mode, "--timeout", str(wait), *CLI_LIMIT,
                        ok=(0, 3))
        self.after_receive_on(box)
        lines = [json.loads(line) for line in done["stdout"].splitlines() if line.startswith("{")]
        if not lines:
            if wait:
                self.fail(f"dropboxmq receive {queue_name} found nothing while {len(self.available(box))} waited")
            return
        msg = lines[0]
        body = msg.get("text")
        if body is None:  # a bytes body (a foreign file): base64 in --json's output
            body = base64.b64decode(msg.get("body_base64", "")).decode("latin-1")
        got = {"body": body, "id": msg["id"], "redelivered": msg["redelivered"],
               "count": msg["properties"].get("JMSXDeliveryCount", 1)}
        e = self.delivered(box, got, "cli", started)
        e.allowed = {("processed", next(iter(e.allowed))[1])}

    def cli_recover(self):
        self.cli("recover", ok=(0, 1))
        live_ids = {c.client_id for c in self.live_clients()}
        for e in self.entries.values():
            if e.owed_by is not None and e.owed_by not in live_ids:
                e.allowed = self.returned(e.allowed)
                e.owed_by = None
            if ("working", 0) in e.allowed and ("absent", 0) in e.allowed:
                e.allowed.discard(("working", 0))  # a dead owner's transaction is rolled back now

    def cli_prune(self, states: str):
        self.cli("prune", "--older-than", "0s", "--state", states)
        pruned = tuple(states.split(","))
        for e in self.entries.values():
            e.allowed |= {("absent", 0) for s, _ in e.allowed if s in pruned}

    def cli_purge(self, queue_name: str):
        """``purge QUEUE --yes``: what waits in target/ (delayed messages too) is deleted; what is
        being processed stays.  (A consumer that held a delayed message back must forget it.)"""
        box = self.queue_box(queue_name)
        if not (self.root / box).is_dir():
            self.cli("purge", queue_name, "--yes", ok=(1,))
            return
        self.cli("purge", queue_name, "--yes")
        for e in self.in_box(box):
            if all(s == "target" for s, _ in e.allowed):
                e.allowed = {("absent", 0)}
            elif any(s == "target" for s, _ in e.allowed):
                e.allowed.add(("absent", 0))

    def cli_distribute(self):
        waiting = [e for e in self.entries.values() if e.box.endswith("/.incoming")
                   and any(s == "target" for s, _ in e.allowed)]
        self.cli("distribute")
        for e in waiting:
            topic = e.box.removeprefix("topic-root/").removesuffix("/.incoming").replace("/", ".")
            e.allowed = {("processed", n + 1) for s, n in e.allowed if s == "target"}
            list(self.fan_out(topic, {}, None, e.token, "target"))

    # ------------------------------------------------------------------ a third party
    def foreign_name(self, kind: str, length: int) -> str:
        if kind == "invoice":
            name = f"invoice-{self.next_token}.xml"
        elif kind == "long-foreign":
            name = f"report-{self.next_token}-" + "r" * 255
        elif kind == "tilde":
            name = f"ghost~{self.next_token}-" + "g" * 255
        elif kind == "path-id":
            name = f"4.{codec.encode_field(f'../../outside/{self.next_token}')}.T"
        else:
            name = f"4.{ids.new_message_id()[3:]}.T"
            if kind == "long-v12":
                name += "....." + "pad" + "S=" + "p" * 255
        return os.fsdecode(os.fsencode(name)[:length])

    def drop_foreign(self, to_topic: bool, queue_name: str, topic: str, kind: str, length: int):
        """A foreign program drops a file: written beside the root, then linked in (never replacing)."""
        self.fits_spec = False  # foreign files: no move of the spec
        box = self.incoming_box(topic) if to_topic else self.queue_box(queue_name)
        if kind == "collide":
            names = [p for e in self.in_box(box) for p in self.names_of(e)]
            if not names:
                return
            name = names[0]
        else:
            name = self.foreign_name(kind, length)
        token = self.token()
        (self.root / box / "target").mkdir(parents=True, exist_ok=True)
        for d in STATES:
            (self.root / box / d).mkdir(exist_ok=True)
        tmp = self.scratch / "drop"
        tmp.write_bytes(token.encode())
        try:
            os.link(tmp, os.path.join(os.fsencode(self.root / box / "target"), os.fsencode(name)))
        except FileExistsError:
            return
        finally:
            tmp.unlink()
        FIGURES.foreign_drops += 1
        with_count = codec.with_delivery_count(name, 1) != name
        e = Entry(box, token, {("target", 0)}, count_in_name=with_count)
        self.entries[e.key] = e

    def names_of(self, e: Entry) -> list[str]:
        """The names (without a holder's prefix) the files of ``e`` have now."""
        out = []
        for state in STATES:
            d = self.root / e.box / state
            if not d.is_dir():
                continue
            for name in os.listdir(d):
                if _read_regular(os.path.join(os.fsencode(d), os.fsencode(name))) == e.token.encode():
                    aliased = claims.original_name(Dropbox(d.parent), name) if state == "processing" else None
                    plain = aliased or codec.split_processing_name(name)[1]
                    out.append(codec.with_delivery_count(plain, None))
        return out

    def drop_junk(self, to_topic: bool, queue_name: str, topic: str, kind: str, name: str):
        """Entries that are no message: they must be skipped, never delivered, never block."""
        self.fits_spec = False  # foreign files: no move of the spec
        box = self.incoming_box(topic) if to_topic else self.queue_box(queue_name)
        target = self.root / box / "target"
        for d in STATES:
            (self.root / box / d).mkdir(parents=True, exist_ok=True)
        path = target / name
        if os.path.lexists(path):
            return
        if kind == "fifo":
            os.mkfifo(path)
        elif kind == "symlink-out":
            os.symlink(self.outside / "secret", path)
        elif kind == "symlink-in":
            os.symlink(self.root, path)
        else:
            path.mkdir()

    @rule(topic=st.sampled_from(TOPICS))
    def plant_unparsable_subscription(self, topic: str):
        """Another program's subscription whose selector does not parse: publishes to the other
        subscriptions of the topic go on."""
        self.fits_spec = False  # foreign files: no move of the spec
        box = self.root / "topic-root" / topic.replace(".", "/") / ".subscriptions" / "evil.other"
        for d in STATES:
            (box / d).mkdir(parents=True, exist_ok=True)
        (box / ".subscription").write_text(json.dumps({"kind": "durable", "name": "evil", "client_id": "other",
                                                       "topic": topic, "selector": "(((", "no_local": False}))
        self.evil_topics.add(topic.replace(".", "/"))

    @rule(queue_name=st.sampled_from(("q7", "q8")))
    def symlinked_queue_then_cli_send(self, queue_name: str):
        """A queue directory that is a symlink out of the root: a send must not write outside."""
        self.fits_spec = False  # foreign files: no move of the spec
        if queue_name not in self.symlinked_queues:
            os.symlink(self.outside / "qdir", self.root / queue_name)
            self.symlinked_queues.add(queue_name)
        self.cli("send", queue_name, self.token(), "--create", ok=(0, 1, 2))

    @rule(client_id=st.sampled_from(SHORT_IDS))
    def plant_registration_junk(self, client_id: str):
        """A directory where a client id's registration belongs: connecting as that id fails
        (documented), and once the entry is gone the id is free again."""
        self.fits_spec = False  # foreign files: no move of the spec
        if any(c.client_id == client_id for c in self.live_clients()):
            return
        path = self.root / "dropboxmq" / "clients" / codec.encode_field(client_id)
        if client_id in self.clients_junk:
            shutil.rmtree(path, ignore_errors=True)
            self.clients_junk.discard(client_id)
        elif not os.path.lexists(path):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.mkdir()
            (path / "inner").write_bytes(b"junk")
            self.clients_junk.add(client_id)

    # ------------------------------------------------------------------ the invariant
    @invariant()
    def guarantees_hold(self):
        FIGURES.steps += 1
        self.check()
        self.state_is_bounded()

    def state_is_bounded(self) -> None:
        """No live consumer or session holds more state than what is on disk for it explains
        (``apiclient.held_state``: container elements reachable from it, less those at its creation)."""
        for client in self.live_clients():
            held = client.proc.call({"op": "measure"})
            if "error" in held:
                continue  # (documented: its connection is gone)
            for c in self.consumer_list:
                now = held["consumers"].get(str(c.cid))
                if not (c.open and c.session.open and c.session.client is client) or now is None:
                    continue
                names = max(c.listed, _disk_names(self.root / c.box))
                self.within(f"consumer {c.cid} ({c.kind} of {c.box}, selector {c.selector!r}, client "
                            f"{client.client_id})", now, c.baseline, CONSUMER_BOUND,
                            {"names in target/ and processing/": names,
                             "its session's unsettled deliveries": c.session.unsettled})
            for s in client.sessions:
                now = held["sessions"].get(str(s.sid))
                if not s.open or now is None:
                    continue
                self.within(f"session {s.sid} ({s.mode}, client {client.client_id})", now, s.baseline,
                            SESSION_BOUND, {"unsettled deliveries": s.unsettled,
                                            "transacted sends": len(s.tx_sends),
                                            "open consumers": len(self.consumers_of(s))})

    def within(self, who: str, now: dict[str, int], baseline: dict[str, int], bound: tuple[int, int],
               on_disk: dict[str, int]) -> None:
        FIGURES.state_measures += 1
        a, b = bound
        growth = sum(now.values()) - sum(baseline.values())
        limit = a * sum(on_disk.values()) + b
        if limit - growth < FIGURES.closest_margin:
            FIGURES.closest_margin = limit - growth
            FIGURES.closest_to_bound = f"{who}: {growth} of {limit} ({on_disk})"
        if growth > limit:
            grown = sorted(((v - baseline.get(k, 0), k) for k, v in now.items()), reverse=True)
            self.fail(f"{who} holds {growth} container elements more than at its creation, past its bound "
                      f"{a} * {sum(on_disk.values())} + {b} = {limit} ({on_disk}); grown most: "
                      + ", ".join(f"{k} +{d}" for d, k in grown[:3] if d > 0))




# ------------------------------------------------------------------ profiles and the long run

def register_profiles() -> None:
    """``api-short``: derandomized, a few short programs (make test); ``api-long``: random programs,
    as many as the time allows (make stress)."""
    quiet = list(HealthCheck)
    settings.register_profile("api-short", max_examples=10, stateful_step_count=20, deadline=None,
                              derandomize=True, database=None, suppress_health_check=quiet)
    settings.register_profile("api-long", max_examples=40, stateful_step_count=60, deadline=None,
                              database=None, suppress_health_check=quiet)


def run(profile: str = "long", seconds: float = 600.0, out=sys.stdout) -> Figures:
    """Run programs of ``profile`` until ``seconds`` passed; each failure is shrunk to its minimal
    program, which is printed.  Returns the figures."""
    from hypothesis.reporting import with_reporter
    from hypothesis.stateful import run_state_machine_as_test

    register_profiles()
    deadline = time.monotonic() + seconds
    rounds = 0
    while time.monotonic() < deadline:
        rounds += 1
        lines: list[str] = []

        def report(text: object, lines: list[str] = lines) -> None:
            lines.append(str(text))

        try:
            with with_reporter(report):
                run_state_machine_as_test(APIModel, settings=settings.get_profile(f"api-{profile}"))
        except Exception as exc:
            # a failure that did not repeat on replay (timing) comes as a group: show each one
            for inner in getattr(exc, "exceptions", ()):
                print(f"  (not repeated on replay) {type(inner).__name__}: {str(inner)[:600]}", file=out)
            print(f"DEFECT (round {rounds}): {str(exc).splitlines()[0][:300]}", file=out)
            print("minimal program:\n" + "\n".join(lines + list(getattr(exc, "__notes__", []))), file=out)
            FIGURES.defects.append(str(exc).splitlines()[0][:300])
        if profile == "short":
            break
    return FIGURES


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dropboxmq_stress.apitester", description=__doc__.split("\n")[0])
    parser.add_argument("--profile", default=os.environ.get("DROPBOXMQ_API_PROFILE", "long"),
                        choices=("short", "long"))
    parser.add_argument("--seconds", type=float, default=600.0, help="how long the long profile runs")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    started = time.monotonic()
    figures = run(args.profile, args.seconds)
    elapsed = time.monotonic() - started
    distinct = sorted(set(figures.defects))
    print(f"programs {figures.programs}, steps {figures.steps}, client processes {figures.processes_started} "
          f"(killed -9: {figures.processes_killed}, {figures.kills_in_flight} of them mid-command), "
          f"CLI runs {figures.cli_runs}, foreign drops {figures.foreign_drops}, deliveries checked "
          f"{figures.deliveries_checked} ({figures.redeliveries_checked} redeliveries), defects found {len(distinct)}, {elapsed:.0f} s")
    print(f"held state measured {figures.state_measures} times; closest to its bound: {figures.closest_to_bound}")
    for d in distinct:
        print("  defect:", d)
    if args.json:
        args.json.write_text(json.dumps(dict(dataclasses.asdict(figures), seconds=round(elapsed), distinct=distinct),
                                        indent=1))
    return 1 if distinct else 0


if __name__ == "__main__":
    sys.exit(main())
