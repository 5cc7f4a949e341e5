"""The suite's harness: a scenario's fresh root, watcher and barrier, the manifest's commands in
their own process groups (spawn, kill, the trace's kill records), and planting messages the
protocol's way.

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
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from dropboxmq.lifecycle import STATE_DIRS

from dropboxmq_spec import grammar
from dropboxmq_spec.grammar import KILL, locate, owner_of

from . import checks as C
from .checks import Result
from .manifest import Manifest, environ
from .watcher import Watcher


QUEUE = "Q1"
BOX = f"{QUEUE}/incoming"
#: the actors of the suite's own moves, as trace records and reports name them
PLANTING = "suite: planting"
FALLBACK_RECOVERY = "suite: fallback recovery (dropboxmq recover --assume-unknown-dead)"
KILLER = "suite: kill -9"


# ====================================================================== helpers


def mid_of(name: str) -> str:
    """The message id (without 'ID:') a file name stands for (client prefix removed)."""
    return grammar.bare_id(name)


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


def group_stopped(pgid: int) -> bool:
    """Whether every process of group ``pgid`` is stopped (or dead): a SIGSTOP is only queued
    when kill() returns; a process finishes the system call it is in (a rename) first."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[2] == str(pgid) and fields[0] not in ("T", "t", "Z", "X"):
            return False
    return True


def wait_stopped(pgid: int, timeout: float = 2.0) -> bool:
    """Wait until group ``pgid`` has stopped (SIGSTOP sent): the kernel gives no event for
    another process's stop, so its state in /proc is polled."""
    deadline = time.monotonic() + timeout
    while not group_stopped(pgid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.0005)
    return True


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
    mid = grammar.new_message_id()
    name = grammar.format_name(priority, mid, "T", expiration, {k: ("S", str(v)) for k, v in (props or {}).items()})
    work = box_dir(root, "working", box) / name
    with _FORK_LOCK, open(work, "xb") as f:
        f.write(body)
    os.rename(work, box_dir(root, "target", box) / name)
    return mid, name


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
        self.death_recorded = False

    def signal(self, sig: int) -> None:
        _killpg(self.p.pid, sig)

    def kill(self, holds: list[str] | None = None) -> None:
        """kill -9 of the whole group, recorded in the trace when it was still running -- once:
        a group killed a moment ago may still be listed as running (death is not instant on a
        loaded machine), and a second record would kill a process the trace has dead already."""
        on_death = self.on_death

        def record() -> None:
            self.death_recorded = True
            if on_death is not None:
                on_death(self, holds or [])

        kill_group(self.p.pid, None if on_death is None or self.death_recorded else record)

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


# ====================================================================== kill while holding


def wait_event(ev: threading.Event, procs: list[Proc], timeout: float) -> bool:
    """Wait for ``ev`` while any of ``procs`` still runs (a consumer that exited will not act)."""
    deadline = time.monotonic() + timeout
    while not ev.wait(0.02):
        if time.monotonic() > deadline or all(p.p.poll() is not None for p in procs):
            return ev.is_set()
    return True


def freeze_when(sc: Scenario, proc: Proc, flag: threading.Event, timeout: float) -> bool:
    """Freeze ``proc`` (SIGSTOP, waited for) once ``flag`` (set by a watcher listener) is set; the
    SIGSTOP is sent by the watcher's own thread at that record, so a consumer that works in
    microseconds is caught near that moment.  False if ``flag`` was never set (after a barrier
    that lets the watcher catch up with a process that already exited)."""
    frozen = threading.Event()

    def freeze(rec: dict) -> None:
        if flag.is_set() and not frozen.is_set():
            proc.signal(signal.SIGSTOP)
            frozen.set()

    sc.watcher.listeners.append(freeze)
    try:
        if not wait_event(frozen, [proc], timeout) and flag.is_set():
            freeze({})
        if not frozen.is_set():
            sc.barrier()  # the watcher may lag behind a consumer that is done already
    finally:
        sc.watcher.listeners.remove(freeze)
    if not flag.is_set():
        return False
    proc.signal(signal.SIGSTOP)
    wait_stopped(proc.p.pid)
    return True


def kill_while_holding(sc: Scenario, proc: Proc, claimed: threading.Event, box: str = BOX) -> list[str]:
    """Let ``proc`` run until it holds a claimed message of ``box`` (``claimed`` is set by a
    watcher listener on each claim), then kill it (SIGSTOP first, so the listing is exact)
    and return the processing/ names it held ([] if it never held one before its timeout).

    The SIGSTOP is sent by the watcher's own thread at the claim event (a listener after the
    one that sets ``claimed``), not by this thread once it wakes: a consumer that claims,
    reads and acknowledges in microseconds is then still often holding its claim."""
    m, inflight = sc.manifest, []
    armed, frozen = threading.Event(), threading.Event()

    def freeze(rec: dict) -> None:
        if armed.is_set() and claimed.is_set():
            armed.clear()
            proc.signal(signal.SIGSTOP)
            frozen.set()

    armed.set()
    sc.watcher.listeners.append(freeze)
    deadline = time.monotonic() + m.timeout
    try:
        while time.monotonic() < deadline and proc.p.poll() is None:
            if not wait_event(frozen, [proc], max(0.0, deadline - time.monotonic())):
                break
            wait_stopped(proc.p.pid)  # its last rename (an ack, perhaps) lands before the listing
            inflight = listdir(sc.root, "processing", box)
            if inflight:
                break
            claimed.clear()
            frozen.clear()
            armed.set()
            proc.signal(signal.SIGCONT)
    finally:
        armed.clear()
        sc.watcher.listeners.remove(freeze)
    proc.kill(inflight)
    proc.wait(5)
    return inflight
