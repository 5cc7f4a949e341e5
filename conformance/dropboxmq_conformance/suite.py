"""Scenarios: drive an implementation through its manifest, watch, and judge.

Each scenario gets a fresh root (``<out>/<impl>/<scenario>/root``), a watcher
writing ``trace.jsonl`` next to it, and the implementation's commands run
through ``/bin/sh -c`` in their own process group (so kill -9 and SIGSTOP reach
every process of a shell pipeline).  The suite plays the other side itself,
as a correct DropboxMQ client: it fills queues (working/ -> rename -> target/)
and, in the lost-race scenario, competes for messages.  It never imports the
implementation under test: the reference is judged through its CLI and its
adapter exactly like a shell script.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import select
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from dropboxmq import codec
from dropboxmq.lifecycle import STATE_DIRS, State
from dropboxmq.message import Property, TextMessage
from dropboxmq.trace import KILL, leaf, locate, owner_of

from . import checks as C
from .checks import Result
from .manifest import Manifest, environ
from .replay import TLC_MAX_EVENTS, TlcJob, TlcOutcome, replay, tlc_job
from .watcher import Watcher

QUEUE = "Q1"
BOX = f"{QUEUE}/incoming"
RACER = "conformance-racer"
DOT_FILE = ".in-progress-by-someone"
DOT_BODY = b"a dot-file: an ordinary entry (1.2 claims it), never to be lost"
#: the actors of the suite's own moves, as trace records and reports name them
PLANTING = "suite: planting"
LATE_ARRIVAL = "suite: late high-priority arrival"
RACING = "suite: racing consumer"
FALLBACK_RECOVERY = "suite: fallback recovery (dropboxmq recover --assume-unknown-dead)"
KILLER = "suite: kill -9"


# ====================================================================== helpers


def mid_of(name: str) -> str:
    """The message id (without 'ID:') a file name stands for (client prefix removed)."""
    return (codec.decode_name(codec.split_processing_name(name)[1]).message_id or "").removeprefix("ID:")


def box_dir(root: Path, state: str, box: str = BOX) -> Path:
    return Path(root) / box / state


def listdir(root: Path, state: str, box: str = BOX, dot: bool = False) -> list[str]:
    try:
        return sorted(n for n in os.listdir(box_dir(root, state, box)) if dot or not n.startswith("."))
    except FileNotFoundError:
        return []


def make_layout(root: Path, box: str = BOX) -> None:
    for d in STATE_DIRS:
        os.makedirs(box_dir(root, d, box), exist_ok=True)


#: Held while the suite has a message file open for writing and while it forks: a child
#: forked mid-write (by another implementation's thread) would hold the file open until
#: its exec, and the inotify close_write would then come *after* the rename into target/
#: (the trace of a producer that renames before closing).
_FORK_LOCK = threading.Lock()


def spawn(cmd: str, **kw) -> subprocess.Popen:
    """A manifest command under /bin/sh, in its own process group."""
    with _FORK_LOCK:
        return subprocess.Popen(["/bin/sh", "-c", cmd], start_new_session=True, **kw)


def group_running(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs (a zombie has died already)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()  # state ppid pgrp ...
        except (OSError, IndexError):
            continue
        if fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
            return True
    return False


def kill_group(pgid: int, on_death: Callable[[], None] | None = None) -> None:
    """SIGKILL process group ``pgid``.  If a process of it still runs, it is a death the suite
    causes: frozen first (SIGSTOP), so that ``on_death`` records it after the group's last move
    and before anybody could see it dead."""
    if on_death is not None and group_running(pgid):
        _killpg(pgid, signal.SIGSTOP)
        on_death()
    _killpg(pgid, signal.SIGKILL)


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def put(root: Path, priority: int = 4, body: bytes = b"", expiration: int = 0,
        props: dict | None = None, box: str = BOX) -> tuple[str, str]:
    """Send one message the protocol's way (create in working/, close, rename into target/)."""
    msg = TextMessage(body=body)
    msg.message_id = codec.new_message_id()
    msg.priority, msg.expiration = priority, expiration
    for k, v in (props or {}).items():
        msg.properties[k] = Property("S", str(v))
    name = codec.encode_name(msg)
    work = box_dir(root, "working", box) / name
    with _FORK_LOCK, open(work, "xb") as f:
        f.write(body)
    os.rename(work, box_dir(root, "target", box) / name)
    return msg.message_id.removeprefix("ID:"), name


def put_raw(root: Path, name: str, body: bytes | None = None, *, symlink_to: str | None = None,
            directory: bool = False, box: str = BOX) -> None:
    """A foreign (junk) entry, also dropped through working/ by a rename."""
    work = box_dir(root, "working", box) / name
    if directory:
        os.mkdir(work)
    elif symlink_to is not None:
        os.symlink(symlink_to, work)
    else:
        with _FORK_LOCK, open(work, "xb") as f:
            f.write(body or b"")
    os.rename(work, box_dir(root, "target", box) / name)


def excerpt(records: list[dict], seqs: list[int], around: int = 2, limit: int = 24) -> list[dict]:
    """Trace records near the given seq numbers (evidence)."""
    want: set[int] = set()
    for s in seqs:
        want.update(range(s - around, s + around + 1))
    return [r for r in records if r.get("seq") in want][:limit]


class Proc:
    """One command of the manifest, in its own process group.  ``on_death(proc, holds)``
    records its death when the suite kills it while it runs (``holds``: the processing/
    names the suite saw it hold)."""

    def __init__(self, cmd: str, env: dict, log_dir: Path, label: str, role: str = "", client_id: str = "",
                 on_death: Callable[["Proc", list[str]], None] | None = None):
        self.cmd, self.label, self.role, self.client_id, self.on_death = cmd, label, role, client_id, on_death
        log_dir.mkdir(parents=True, exist_ok=True)
        self.out_path, self.err_path = log_dir / f"{label}.out", log_dir / f"{label}.err"
        self._out, self._err = open(self.out_path, "wb"), open(self.err_path, "wb")
        self.p = spawn(cmd, stdin=subprocess.DEVNULL, stdout=self._out, stderr=self._err, env=env)
        self.timed_out = False

    def signal(self, sig: int) -> None:
        _killpg(self.p.pid, sig)

    def kill(self, holds: list[str] | None = None) -> None:
        """kill -9 of the whole group, recorded in the trace when it was still running."""
        on_death = self.on_death
        kill_group(self.p.pid, None if on_death is None else lambda: on_death(self, holds or []))

    def wait(self, timeout: float) -> int | None:
        try:
            rc = self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.timed_out = True
            self.kill()
            self.p.wait()
            rc = None
        self.kill()  # stragglers of the group
        self._out.close()
        self._err.close()
        return rc

    def stdout(self) -> str:
        return self.out_path.read_text(encoding="utf-8", errors="replace")

    def stderr_tail(self, n: int = 600) -> str:
        return self.err_path.read_text(encoding="utf-8", errors="replace")[-n:]


def exit_clean(check: str, proc: Proc, rc: int | None, m: Manifest) -> Result:
    """``check`` (a role's exit-clean): the role exited with a status the manifest counts as clean."""
    clean = rc is not None and rc in m.ok_exit
    return (C.passed if clean else C.failed)(
        check, f"exit status {rc}" + (" (timed out)" if proc.timed_out else ""), text=proc.stderr_tail())


def parse_output(m: Manifest | None, text: str, bodies: dict[bytes, str] | None = None,
                 fmt: str | None = None) -> list[str]:
    """Message ids (no 'ID:') a consumer reported, in its order."""
    fmt = fmt or (m.consume_output if m else "names")
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        if fmt == "names":
            out.append(mid_of(line))
        elif fmt == "ids":
            out.append(line.removeprefix("ID:"))
        elif fmt == "json":
            try:
                out.append(str(json.loads(line).get("id", "")).removeprefix("ID:"))
            except (ValueError, AttributeError):
                continue
        elif fmt == "bodies":
            mid = (bodies or {}).get(line.encode())
            out.append(mid if mid is not None else "?" + line[:40])
    return out


# ====================================================================== scenario


@dataclass
class Scenario:
    name: str
    dir: Path
    manifest: Manifest
    watcher: Watcher = field(init=False)
    procs: list[Proc] = field(default_factory=list)
    replay_only: str = ""  # why TLC does not validate this scenario's trace ("": it does)
    _barriers: int = 0
    server: str = ""  # the first line the manifest's server printed (placeholder {server})
    tlc_boxes: list[str] = field(default_factory=lambda: [BOX])  # the dropboxes whose excerpts go to TLC

    def __post_init__(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
        self.root.mkdir(parents=True)
        self.watcher = Watcher(self.root, self.dir / "trace.jsonl")

    @property
    def root(self) -> Path:
        return self.dir / "root"

    @property
    def records(self) -> list[dict]:
        return self.watcher.records

    def barrier(self, timeout: float = 5.0) -> int:
        """Wait until the watcher has seen everything done so far; returns the next seq."""
        self._barriers += 1
        start = len(self.records)
        p = self.root / f".conformance-barrier-{self._barriers}"
        p.write_bytes(b"")
        p.unlink()
        rel = p.name
        self.watcher.wait_for(lambda recs: any(r.get("op") == "delete" and r.get("path") == rel
                                               for r in recs[start:]), timeout)
        return len(self.records)

    def record_death(self, proc: Proc, holds: list[str]) -> None:
        """The trace's record of a process the suite kills (``Proc.kill``, the group frozen):
        its role and the client ids it ran under -- the one it was given and those of the
        processing/ names it held (an implementation may choose its own)."""
        self.note_death(proc.role, proc.label, proc.client_id, holds)

    def note_death(self, role: str, label: str, client_id: str, holds: list[str]) -> None:
        if not self.watcher.running:
            return
        self.barrier()
        held = {owner_of(locate(f"{BOX}/processing/{name}")) for name in holds}
        clients = sorted(c for c in held | {client_id} if c)
        self.watcher.note({"op": KILL, "role": role, "clients": clients, "label": label, "actor": KILLER})

    def recovering(self) -> contextlib.AbstractContextManager[None]:
        """Every move seen inside is a recovery process's (``"recovery": true``), never the
        holder's own: use it only while nothing but a recovery runs."""
        return self._moves_by(recovery=True)

    def helper(self, actor: str) -> contextlib.AbstractContextManager[None]:
        """Every move seen inside is the suite's helper's (``actor``), never the implementation's:
        use it only while the implementation is not started, stopped (SIGSTOP) or dead."""
        return self._moves_by(actor=actor)

    @contextlib.contextmanager
    def _moves_by(self, **tags: object) -> Iterator[None]:
        """The watcher tags every move seen inside (its attributes ``actor``, ``recovery``)."""
        self.barrier()
        saved = {k: getattr(self.watcher, k) for k in tags}
        for k, v in tags.items():
            setattr(self.watcher, k, v)
        try:
            yield
        finally:
            self.barrier()
            for k, v in saved.items():
                setattr(self.watcher, k, v)

    def run(self, role: str, label: str, **values) -> Proc:
        cmd = self.manifest.command(role, root=self.root, queue=QUEUE, out=self.dir, **values)
        proc = Proc(cmd, environ(self.manifest), self.dir / "logs", label, role, values.get("client_id", ""),
                    self.record_death)
        self.procs.append(proc)
        return proc

    def run_ref_consumer(self, label: str, client_id: str) -> Proc:
        from .manifest import Manifest as _M

        ref = _M("ref-helper", "", self.manifest.path, {"consume": "{dropboxmq} --root {root} receive {queue} "
                 "-n 0 --timeout 0.3 --json --client-id {client_id}"})
        cmd = ref.command("consume", root=self.root, queue=QUEUE, client_id=client_id)
        proc = Proc(cmd, environ(self.manifest), self.dir / "logs", label, "consume", client_id, self.record_death)
        self.procs.append(proc)
        return proc

    def close(self) -> None:
        for p in self.procs:
            p.kill()
        self.watcher.stop()


# ====================================================================== producer


def _trace_paths_in(records: list[dict], state: str, since: int = 0, box: str = BOX):
    prefix = f"{box}/{state}/"
    for r in records[since:]:
        for key in ("path", "dst"):
            p = r.get(key)
            if p and p.startswith(prefix) and r.get("kind") != "dir":
                yield r, key


def producer_scenario(m: Manifest, out: Path, count: int = 6, priority: int = 7) -> tuple[list[Result], Scenario]:
    sc = Scenario("produce", out / "produce", m)
    bodies_dir = sc.dir / "bodies"
    bodies_dir.mkdir()
    bodies: list[bytes] = []
    for i in range(count):
        if i == 2:
            b = bytes(range(256)) * 4096  # 1 MiB: short writes and partial reads show here
        elif i == 4:
            b = b""
        else:
            b = f"message {i} from the conformance suite\n".encode() * (i + 1)
        bodies.append(b)
        (bodies_dir / f"body-{i:03d}").write_bytes(b)
    make_layout(sc.root)
    sc.watcher.start()
    res: list[Result] = []
    try:
        proc = sc.run("produce", "produce", body_dir=bodies_dir, count=count, priority=priority,
                      client_id="impl-producer")
        rc = proc.wait(m.timeout)
        sc.barrier()
    finally:
        sc.close()
    recs = sc.records
    res.append(exited := exit_clean("producer.exit-clean", proc, rc, m))
    clean = exited.status == C.PASS

    # enter-by-rename / no-direct-write / closed-before-rename, from the trace
    bad_enter, bad_write, bad_close = [], [], []
    last_close: dict[str, int] = {}
    renamed_at: dict[str, int] = {}
    for r in recs:
        op = r.get("op")
        if r.get("kind") == "dir":
            continue
        if op == "close_write":
            last_close[r["path"]] = r["seq"]
        if op in ("create", "close_write"):
            loc_dir = r["path"].rsplit("/", 2)
            if len(loc_dir) == 3 and loc_dir[0] == BOX and loc_dir[1] == "target":
                bad_write.append(r)
                if op == "create":
                    bad_enter.append(r)
        if op == "rename":
            d, s = locate(r["dst"]), locate(r["src"])
            if d is not None and d.box == BOX and d.state is State.NEW:
                if s is None or s.box != BOX or s.state is not State.NOT_COMMITTED:
                    bad_enter.append(r)
                else:
                    renamed_at[r["dst"]] = r["seq"]
                    if r["src"] not in last_close:
                        bad_close.append(r)
    for dst, seq in renamed_at.items():
        later = [r for r in recs if r.get("op") == "close_write" and r.get("path") == dst and r["seq"] > seq]
        bad_close.extend(later)
    n_sent = len(renamed_at)
    for cid, bad, ok_text, what in (
        ("producer.enter-by-rename", bad_enter, f"{n_sent} messages entered target/ by rename from working/",
         "entered target/ other than by a rename from working/"),
        ("producer.no-direct-write", bad_write, "no file was created or written in target/",
         "created or written directly in target/"),
        ("producer.closed-before-rename", bad_close, f"all {n_sent} files were closed in working/ before the rename",
         "renamed into target/ before being closed (or written after)"),
    ):
        if bad:
            res.append(C.failed(cid, f"{len(bad)} event(s) {what}", trace=excerpt(recs, [b["seq"] for b in bad]),
                                files=sorted({b.get("path") or b.get("dst") or "" for b in bad})[:10]))
        elif n_sent == 0 and cid != "producer.no-direct-write":
            res.append(C.inconclusive(cid, "the producer sent nothing"))
        else:
            res.append(C.passed(cid, ok_text))

    names = listdir(sc.root, "target", dot=True)
    bad_names = [n for n in names if n.startswith(".") or len(n.encode()) > 255
                 or codec.decode_name(n).message_id == "ID:" + n]
    ids = [mid_of(n) for n in names]
    dups = sorted({i for i in ids if ids.count(i) > 1})
    if bad_names or dups:
        res.append(C.failed("producer.names-decode", f"{len(bad_names)} unparseable name(s), {len(dups)} duplicate id(s)",
                            files=bad_names[:10] + dups[:10]))
    elif not names:
        res.append(C.inconclusive("producer.names-decode", "nothing in target/"))
    else:
        res.append(C.passed("producer.names-decode", f"{len(names)} names parse, ids unique"))

    want = sorted(hashlib.sha256(b).hexdigest() for b in bodies)
    got = {}
    for n in names:
        p = box_dir(sc.root, "target") / n
        if p.is_file() and not p.is_symlink():
            got[n] = hashlib.sha256(p.read_bytes()).hexdigest()
    missing = sorted(set(want) - set(got.values()))
    extra = sorted(n for n, h in got.items() if h not in want)
    if sorted(got.values()) == want:
        res.append(C.passed("producer.bodies-complete", f"{count} bodies in target/, byte for byte (one of 1 MiB)"))
    else:
        res.append(C.failed("producer.bodies-complete",
                            f"expected {count} bodies, found {len(got)}; {len(missing)} missing, {len(extra)} not asked for",
                            files=extra[:10], text=f"missing body hashes: {missing[:5]}"))

    wrong = [n for n in names if not n.startswith(".") and codec.decode_name(n).priority != priority]
    if wrong:
        res.append(C.failed("producer.metadata", f"{len(wrong)} message(s) without JMSPriority {priority}", files=wrong[:10]))
    elif names:
        res.append(C.passed("producer.metadata", f"every message has JMSPriority {priority}"))
    else:
        res.append(C.inconclusive("producer.metadata", "nothing in target/"))

    left = listdir(sc.root, "working", dot=True)
    if not clean:
        res.append(C.inconclusive("producer.working-clean", "the producer did not exit cleanly", files=left[:10]))
    elif left:
        res.append(C.failed("producer.working-clean", f"{len(left)} file(s) left in working/", files=left[:10]))
    else:
        res.append(C.passed("producer.working-clean", "working/ is empty"))
    for result in res:
        result.evidence.setdefault("scenario", sc.name)
    return res, sc


# ====================================================================== consumer


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
    expect = [mid_of(n) for n in sorted((n for _, n in valid), key=codec.sort_key)]
    seen = [i for i in dict.fromkeys(got) if i in valid_ids]
    if seen == expect:
        res.append(C.passed("consumer.order", "priority descending, FIFO within each priority"))
    elif not seen:
        res.append(C.inconclusive("consumer.order", "nothing was delivered"))
    else:
        k = next((j for j, (a, b) in enumerate(zip(seen, expect, strict=False)) if a != b),
                 min(len(seen), len(expect)))
        priority_of = {mid_of(n): codec.decode_name(n).priority for _, n in valid}
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
        frozen = _wait_event(impl_active, impls, m.timeout)
        if frozen:
            for p in impls:
                p.signal(signal.SIGSTOP)
        refs = [sc.run_ref_consumer(f"ref-{k}", f"ref-{k}") for k in (1, 2)]
        _wait_event(ref_active, refs, 20)
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
                client = codec.split_processing_name(loc.name)[0]
                if client in actors:
                    rec["actor"] = actors[client]


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


def _wait_event(ev: threading.Event, procs: list[Proc], timeout: float) -> bool:
    """Wait for ``ev`` while any of ``procs`` still runs (a consumer that exited will not act)."""
    deadline = time.monotonic() + timeout
    while not ev.wait(0.02):
        if time.monotonic() > deadline or all(p.p.poll() is not None for p in procs):
            return ev.is_set()
    return True


def kill_while_holding(sc: Scenario, proc: Proc, claimed: threading.Event, box: str = BOX) -> list[str]:
    """Let ``proc`` run until it holds a claimed message of ``box`` (``claimed`` is set by a
    watcher listener on each claim), then kill it (SIGSTOP first, so the listing is exact)
    and return the processing/ names it held ([] if it never held one before its timeout)."""
    m, inflight = sc.manifest, []
    deadline = time.monotonic() + m.timeout
    while time.monotonic() < deadline and proc.p.poll() is None:
        if not _wait_event(claimed, [proc], max(0.0, deadline - time.monotonic())):
            break
        proc.signal(signal.SIGSTOP)
        inflight = listdir(sc.root, "processing", box)
        if inflight:
            break
        claimed.clear()
        proc.signal(signal.SIGCONT)
    proc.kill(inflight)
    proc.wait(5)
    return inflight


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
    claimed = threading.Event()
    sc.watcher.listeners.append(lambda r: claimed.set() if _is_activity(r) else None)
    taken: list[str] = []
    try:
        with sc.helper(PLANTING):
            ids = [put(sc.root, 4, f"r{i}".encode())[0] for i in range(n)]
        proc = sc.run("consume", "consume", client_id="impl-1", count=n)
        fired = _wait_event(claimed, [proc], m.timeout)
        if fired:
            proc.signal(signal.SIGSTOP)
            with sc.helper(RACING):
                for name in sorted(listdir(sc.root, "target"), key=codec.sort_key):
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
    sc = Scenario("consume-kill9", out / "consume-kill9", m)
    make_layout(sc.root)
    sc.watcher.start()
    claimed = threading.Event()
    sc.watcher.listeners.append(lambda r: claimed.set() if _is_claim(r) else None)
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
                back.append((i, name, name is not None and codec.decode_name(name).redelivered))
            proc2 = sc.run("consume", "consume-2", client_id="impl-2", count=n)
            proc2.wait(m.timeout)
            second = parse_output(m, proc2.stdout())
            sc.barrier()
    finally:
        sc.close()
    if not inflight:
        r = C.inconclusive("consumer.kill9-recovery", "no message was in processing/ when the consumer was frozen")
        r.evidence["scenario"] = sc.name
        return [r], sc
    not_back = [i for i, name, _ in back if name is None]
    not_flagged = [name for i, name, red in back if name is not None and not red]
    delivered = set(first) | set(second)
    lost = [i for i in ids if i not in delivered]
    infl_ids = {mid_of(p) for p in inflight}
    low_count = []
    if not m.ack_removes:
        for nm in listdir(sc.root, "processed"):
            if mid_of(nm) in infl_ids and codec.decode_name(codec.split_processing_name(nm)[1], claimed=True).delivery_count < 2:
                low_count.append(nm)
    left = listdir(sc.root, "processing") + listdir(sc.root, "target")
    problems = []
    if not_back:
        problems.append(f"{len(not_back)} in-flight message(s) not back in target/ after recovery")
    if not_flagged:
        problems.append(f"{len(not_flagged)} came back without the redelivered flag (JMSXDeliveryCount in the name)")
    if lost:
        problems.append(f"{len(lost)} message(s) never delivered")
    if low_count:
        problems.append(f"{len(low_count)} redelivered message(s) acknowledged with JMSXDeliveryCount < 2")
    if left:
        problems.append(f"{len(left)} message(s) left in target/ or processing/")
    ev = {"scenario": sc.name, "files": (not_back + not_flagged + lost + low_count + left)[:12],
          "text": "in flight at kill -9: " + ", ".join(inflight[:8]) + ("\n" + "\n".join(notes) if notes else "")}
    if problems:
        return [C.failed("consumer.kill9-recovery", "; ".join(problems), **ev)], sc
    return [C.passed("consumer.kill9-recovery", f"{len(inflight)} in-flight message(s) came back redelivered "
                     f"and were delivered again; none of {n} lost", **ev)], sc


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
    claimed = threading.Event()
    sc.watcher.listeners.append(lambda r: claimed.set() if _is_claim(r) else None)
    late, arrived, waiting = None, 0, 0
    try:
        with sc.helper(PLANTING):
            for i in range(n):
                put(sc.root, 1, f"backlog {i}".encode())
        proc = sc.run("consume", "consume", client_id="impl-1", count=n + 1)
        if _wait_event(claimed, [proc], m.timeout):
            proc.signal(signal.SIGSTOP)
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


# ====================================================================== sessions (adapter)


class AdapterError(RuntimeError):
    pass


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
        self.log: list[tuple[dict, dict]] = []
        self._buf = b""

    def req(self, op: str, **kw) -> dict:
        msg = {"op": op, **kw}
        try:
            self.p.stdin.write((json.dumps(msg) + "\n").encode())  # type: ignore[union-attr]
            self.p.stdin.flush()  # type: ignore[union-attr]
        except BrokenPipeError:
            raise AdapterError(f"adapter exited (status {self.p.poll()}) before {op}") from None
        deadline = time.monotonic() + self.timeout
        fd = self.p.stdout.fileno()  # type: ignore[union-attr]
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise AdapterError(f"no answer to {op} within {self.timeout} s")
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


def _drained(a: Adapter, queue: str, what: str, timeout_ms: int = 300) -> None:
    """API-level: a fresh AUTO session finds nothing more on ``queue``."""
    s = a.ok("session", ack_mode="auto")["session"]
    extra = a.ok("receive", session=s, queue=queue, timeout_ms=timeout_ms)["message"]
    a.ok("close_session", session=s)
    _expect(extra is None, f"{what}: a new session still received {extra and extra.get('body')!r}")


def s_auto(a: Adapter, root: Path | None) -> str:
    s = a.ok("session", ack_mode="auto")["session"]
    for b in ("a1", "a2"):
        a.ok("send", session=s, queue="QAUTO", body=b)
    msg = a.ok("receive", session=s, queue="QAUTO", timeout_ms=2000)["message"]
    _expect(msg is not None and msg["body"] == "a1", f"receive returned {msg}")
    _files(root, "QAUTO", ("processed", 1), ("processing", 0))
    a.ok("close_session", session=s)
    s2 = a.ok("session", ack_mode="auto")["session"]
    rest = a.ok("receive", session=s2, queue="QAUTO", timeout_ms=2000)["message"]
    _expect(rest is not None and rest["body"] == "a2", f"after closing the session, the next receive gave {rest}")
    a.ok("close_session", session=s2)
    _drained(a, "QAUTO", "a1 was acknowledged when receive returned")
    return "acknowledged as receive returned: never delivered again after the session closed"


def s_client(a: Adapter, root: Path | None) -> str:
    s = a.ok("session", ack_mode="client")["session"]
    for i in range(3):
        a.ok("send", session=s, queue="QCLI", body=f"c{i}")
    got = [a.ok("receive", session=s, queue="QCLI", timeout_ms=2000)["message"] for _ in range(3)]
    _expect(all(got), f"received {got}")
    _files(root, "QCLI", ("processing", 3))
    a.ok("acknowledge", session=s)
    _files(root, "QCLI", ("processed", 3), ("processing", 0))
    a.ok("recover", session=s)
    again = a.ok("receive", session=s, queue="QCLI", timeout_ms=300)["message"]
    _expect(again is None, f"recover() after acknowledge() redelivered {again and again.get('body')!r}")
    a.ok("close_session", session=s)
    return "one acknowledge() acknowledged all 3 consumed messages (recover() redelivered none)"


def s_recover(a: Adapter, root: Path | None) -> str:
    s = a.ok("session", ack_mode="client")["session"]
    for b in ("x1", "x2"):
        a.ok("send", session=s, queue="QREC", body=b)
    first = [a.ok("receive", session=s, queue="QREC", timeout_ms=2000)["message"] for _ in range(2)]
    _expect(all(first) and not any(m["redelivered"] for m in first), f"first delivery: {first}")
    a.ok("recover", session=s)
    again = [a.ok("receive", session=s, queue="QREC", timeout_ms=1000)["message"] for _ in range(2)]
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
    early = a.ok("receive", session=r, queue="QTXS", timeout_ms=300)["message"]
    _expect(early is None, f"before commit another session received {early and early.get('body')!r}")
    a.ok("commit", session=s)
    _files(root, "QTXS", ("target", 2))
    a.ok("send", session=s, queue="QTXS", body="t3")
    a.ok("rollback", session=s)
    _files(root, "QTXS", ("target", 2), ("working", 0))
    got: list[str] = []
    while (m := a.ok("receive", session=r, queue="QTXS", timeout_ms=1000 if len(got) < 2 else 300)["message"]):
        got.append(m["body"])
    _expect(sorted(got) == ["t1", "t2"], f"after commit and a rolled-back send, another session received {got}")
    return "sends invisible until commit; a rolled-back send is gone"


def s_tx_receive(a: Adapter, root: Path | None) -> str:
    s = a.ok("session", ack_mode="transacted")["session"]
    p = a.ok("session", ack_mode="auto")["session"]
    for b in ("r1", "r2"):
        a.ok("send", session=p, queue="QTXR", body=b)
    m1 = a.ok("receive", session=s, queue="QTXR", timeout_ms=2000)["message"]
    _expect(m1 is not None, "the transacted receive got nothing")
    _files(root, "QTXR", ("processing", 1))
    a.ok("rollback", session=s)
    _files(root, "QTXR", ("target", 2))
    m2 = a.ok("receive", session=s, queue="QTXR", timeout_ms=2000)["message"]
    _expect(m2 is not None and m2["id"] == m1["id"] and m2["redelivered"], f"after rollback got {m2}")
    a.ok("receive", session=s, queue="QTXR", timeout_ms=2000)
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
    got = [a.ok("receive", consumer=c2, timeout_ms=2000)["message"] for _ in range(2)]
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
    idle = 0
    while idle < 2:
        idle += 1
        for ad, cons, got in ((a, ca, got_a), (b, cb, got_b)):
            m = ad.ok("receive", consumer=cons, timeout_ms=100)["message"]
            if m is not None:
                got.append(m["body"])
                idle = 0
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
    got = []
    while (m := a.ok("receive", session=s, queue="QSEL", selector="color = 'red'", timeout_ms=300)["message"]):
        got.append(m)
    _expect(sorted(m["body"] for m in got) == ["0", "2"], f"selector color = 'red' delivered {[m['body'] for m in got]}")
    _files(root, "QSEL", ("target", 2))
    bad = a.req("receive", session=s, queue="QSEL", selector="color = = 'x", timeout_ms=10)
    _expect(not bad.get("ok"), "a bad selector was accepted")
    a.ok("close_session", session=s)
    s2 = a.ok("session", ack_mode="auto")["session"]
    rest: list[str] = []
    while (m := a.ok("receive", session=s2, queue="QSEL", timeout_ms=1000 if len(rest) < 2 else 300)["message"]):
        rest.append(m["body"])
    _expect(sorted(rest) == ["1", "3"], f"the unmatched messages did not stay waiting: a receiver without selector got {rest}")
    return "only matching messages delivered; a bad selector rejected"


#: check id, function, client ids of the extra connections it needs ("" = none set), the JMS
#: version that introduced the feature (a manifest with flags.jms = "1.1" skips 2.0 checks)
SESSION_CHECKS: list[tuple[str, Callable, tuple[str, ...], str]] = [
    ("session.auto-ack", s_auto, (), "1.1"),
    ("session.client-ack-all", s_client, (), "1.1"),
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


def session_scenario(m: Manifest, out: Path, only: set[str] | None = None) -> tuple[list[Result], Scenario]:
    sc = Scenario("sessions", out / "sessions", m)
    sc.watcher.start()
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
            except (AssertionError, AdapterError) as exc:
                tail = [{"request": q, "response": r} for q, r in (main.log + [x for e in extra for x in e.log])[-6:]]
                res.append(C.failed(cid, (API_ONLY_NOTE if root is None else "") + str(exc)[:300],
                                    text=json.dumps(tail, indent=1)[:3000], api_only=root is None))
            finally:
                for ad in extra:
                    ad.close()
    except AdapterError as exc:
        res.append(C.failed("session.auto-ack", f"the adapter does not start: {exc}"))
    finally:
        for ad in adapters:
            ad.close()
        sc.close()
    for r in res:
        r.evidence.setdefault("scenario", sc.name)
    return res, sc


# ====================================================================== model


def model_results(m: Manifest, scenarios: list[Scenario]) -> list[Result]:
    """model.trace-complete and model.replay (model.tlc: tlc_jobs / tlc_result)."""
    res: list[Result] = []
    over = [s.name for s in scenarios if s.watcher.overflowed]
    gaps = {s.name: s.watcher.gaps for s in scenarios if s.watcher.gaps}
    if over:
        res.append(C.inconclusive("model.trace-complete", f"inotify queue overflowed in {', '.join(over)}: events "
                                  "were lost, the run cannot pass"))
    elif gaps:
        first = next(iter(gaps.items()))
        res.append(C.inconclusive("model.trace-complete", f"the final rescan found {sum(map(len, gaps.values()))} "
                                  f"change(s) the event stream missed", trace=first[1][:10], scenario=first[0]))
    else:
        res.append(C.passed("model.trace-complete", f"{sum(len(s.records) for s in scenarios)} events in "
                            f"{len(scenarios)} traces, no overflow, final rescans agree"))
    rep = []
    for s in scenarios:
        r = replay(s.records, ack_removes=m.ack_removes, purge=False)
        if r.violation is not None:
            v = r.violation
            verdict = C.inconclusive if v.by_helper else C.failed
            who = f" (made by {v.actor}, the suite's own helper: not charged to the implementation)" \
                if v.by_helper else ""
            rep.append(verdict("model.replay", f"{s.name}: event #{v.seq} rejected{who}: {v.reason}",
                               scenario=s.name, trace=excerpt(s.records, [v.seq], around=3),
                               timeline=v.timeline, record=v.record))
        else:
            rep.append(C.passed("model.replay", f"{r.events} message events replayed" +
                                (f" ({r.partial} partly observed)" if r.partial else ""), scenario=s.name))
    total = sum(int(r.summary.split()[0]) for r in rep if r.status == C.PASS and r.summary[0].isdigit())
    comb = C.combine("model.replay", rep)
    if comb.status == C.PASS:
        comb = C.passed("model.replay", f"{len(rep)} traces, {total} message events, all legal moves of "
                        "lifecycle.TRANSITIONS")
    res.append(comb)
    return res


def tlc_jobs(m: Manifest, scenarios: list[Scenario],
             max_events: int = TLC_MAX_EVENTS) -> tuple[list[TlcJob], list[tuple[str, TlcOutcome]]]:
    """TLC jobs for every scenario's trace, and the outcomes known without TLC."""
    jobs: list[TlcJob] = []
    known: list[tuple[str, TlcOutcome]] = []
    for s in scenarios:
        if s.replay_only:
            known.append((s.name, TlcOutcome("too-large", s.replay_only)))
            continue
        for box in s.tlc_boxes:
            name = s.name if box == BOX else f"{s.name}:{box.rsplit('/', 1)[-1]}"
            j = tlc_job((m.name, name), s.records, s.dir, box=box, max_events=max_events)
            if isinstance(j, TlcJob):
                jobs.append(j)
            else:
                known.append((name, j))
    return jobs, known


def tlc_result(outcomes: list[tuple[str, TlcOutcome]]) -> Result:
    """model.tlc from the outcome of each scenario's trace: it fails if TLC rejected one,
    passes if it accepted at least one and rejected none (traces over the size limit are
    named but left to the replay), and is inconclusive otherwise."""
    judged = [(n, o) for n, o in outcomes if o.status in (C.PASS, C.FAIL, C.INCONCLUSIVE)]
    large = [n for n, o in outcomes if o.status == "too-large"]
    rest = f"; judged by the replay only (size): {', '.join(large)}" if large else ""
    fails = [(n, o) for n, o in judged if o.status == C.FAIL]
    if fails:
        n, o = fails[0]
        ev: dict = {"scenario": n, "rejections": [
            {"scenario": fn, "detail": fo.detail, "record": fo.first_bad, "trace": fo.context, "timeline": fo.timeline}
            for fn, fo in fails]}
        summary = f"TLC rejected {len(fails)} trace(s): " + "; ".join(f"{fn}: {fo.detail}" for fn, fo in fails)
        return C.Result("model.tlc", C.FAIL, summary, ev)
    passed = [n for n, o in judged if o.status == C.PASS]
    unsure = [(n, o) for n, o in judged if o.status == C.INCONCLUSIVE]
    if passed and not unsure:
        return C.passed("model.tlc", f"TLC accepted {len(passed)} trace(s): {', '.join(passed)}{rest}",
                        scenarios=[n for n, _ in outcomes])
    if unsure:
        n, o = unsure[0]
        return C.inconclusive("model.tlc", f"{n}: {o.detail}{rest}", scenario=n,
                              tlc_unavailable=any(u.unavailable for _, u in unsure))
    return C.inconclusive("model.tlc", "no trace small enough for TLC" + rest)


def overflowed(scenarios: list[Scenario]) -> set[str]:
    """The scenarios whose watcher lost events."""
    return {s.name for s in scenarios if s.watcher.overflowed}


def downgrade_overflowed(results: list[Result], over: set[str]) -> None:
    """A result that rests on a trace that overflowed is inconclusive, never passed."""
    for r in results:
        if r.status == C.PASS and over & set(r.evidence.get("scenarios") or [r.evidence.get("scenario")]):
            r.status = C.INCONCLUSIVE
            r.summary = "trace overflowed (events lost): " + r.summary
