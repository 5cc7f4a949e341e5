"""The watcher: every event under a dropbox root, as a JSON-lines trace.

While an implementation runs, one inotify instance watches the root and every
directory below it (watches are added as directories appear).  Raw events are
turned into trace records::

    {"seq": 0, "t": 0.0012, "op": "create",      "path": "Q1/incoming/working/<name>"}
    {"seq": 1, "t": 0.0013, "op": "close_write", "path": "Q1/incoming/working/<name>"}
    {"seq": 2, "t": 0.0015, "op": "rename", "src": "Q1/incoming/working/<name>",
                                            "dst": "Q1/incoming/target/<name>"}
    {"seq": 3, "t": 0.0301, "op": "delete",      "path": "Q1/incoming/processed/<name>"}

``op`` and ``path``/``src``/``dst`` are the format agreed with the spec's trace
validation; the other keys are ours: ``seq`` and ``t`` (seconds since the
watch started), ``"kind": "dir"`` for directories, ``"synthetic"`` for records
the watcher made up from a directory scan rather than from an event (``"scan"``:
contents of a directory found before its watch existed; ``"rescan"``: a
difference found by the final rescan, i.e. a missed event), ``"moved_in"`` /
``"moved_out"`` for renames across the edge of the watched tree, and
``"content"`` on a transaction log's ``close_write`` and on its rename into
``committing/``: the log's text as it was then (the spec's trace validation
checks a commit against the moves its log lists, not the moves it made), and
``wall``: the wall clock (seconds since the epoch) when the watcher handled the
event -- never before the event happened, so an event whose ``wall`` is before
the delivery time (or the expiration) its message's name carries certainly
happened before it (the spec's trace validation rejects such a claim or expiry).
Records the suite adds itself (``note``): ``{"op": "kill", "role": ...,
"clients": [...]}`` when it kills a running process (``dropboxmq_spec.trace``), and
``"recovery": true`` on the moves made while only a recovery process ran.

IN_MOVED_FROM and IN_MOVED_TO are paired by their cookie into one ``rename``.
IN_Q_OVERFLOW (the kernel dropped events) is recorded as ``{"op": "overflow"}``
and sets :attr:`Watcher.overflowed`: a run whose trace overflowed is
inconclusive, never passed.  Periodic rescans add watches that the event
stream could not (a directory created and filled faster than its watch), and
one last rescan after the implementation exited compares the tree with what
the trace says it should be (:attr:`Watcher.gaps`).  :meth:`Watcher.catch_up`
lets the suite have every directory made so far watched before an implementation
fills it (the session scenario's queues, a subscription made while answering).
"""

from __future__ import annotations

import json
import os
import select
import threading
import time
from collections import deque
from pathlib import Path
from typing import Callable, Iterable, TextIO

from inotify_simple import INotify, flags

from dropboxmq_spec.grammar import KILL

WATCH_MASK = (
    flags.CREATE
    | flags.CLOSE_WRITE
    | flags.MOVED_FROM
    | flags.MOVED_TO
    | flags.DELETE
    | flags.DELETE_SELF
    | flags.ONLYDIR
    | flags.DONT_FOLLOW
)

Listener = Callable[[dict], None]


class Watcher:
    """Watch ``root`` recursively and write the trace to ``trace_path``.

    Use as a context manager, or ``start()`` / ``stop()``.  ``records`` holds
    the trace in memory as well.  ``inject(events)`` feeds raw
    ``inotify_simple.Event`` tuples through the same code path (tests).
    """

    def __init__(self, root: str | Path, trace_path: str | Path | None = None,
                 rescan_interval: float = 0.5, *, start_thread: bool = True):
        self.root = os.path.abspath(root)
        self.trace_path = Path(trace_path) if trace_path else None
        self.rescan_interval = rescan_interval
        self.records: list[dict] = []
        self.overflowed = False
        self.gaps: list[dict] = []
        self.listeners: list[Listener] = []
        # who makes the moves seen now, when the suite knows (its own helper acting while
        # the implementation is stopped, dead or not yet started); None: the implementation
        self.actor: str | None = None
        # the moves seen now are a recovery process's, not their holder's (the suite knows)
        self.recovery = False
        self._start_thread = start_thread
        self._ino: INotify | None = None
        self._wd_path: dict[int, str] = {}
        self._path_wd: dict[str, int] = {}
        self._known_files: set[str] = set()
        self._pending_from: dict[int, tuple[str, bool]] = {}  # cookie -> (abs path, is_dir)
        self._queue: deque = deque()  # events read, not handled yet: a batch, then what a walk read ahead
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = time.monotonic()
        self._out: TextIO | None = None

    # ------------------------------------------------------------ lifecycle
    def __enter__(self) -> "Watcher":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> "Watcher":
        os.makedirs(self.root, exist_ok=True)
        self._ino = INotify()
        if self.trace_path is not None:
            self.trace_path.parent.mkdir(parents=True, exist_ok=True)
            self._out = open(self.trace_path, "w", encoding="utf-8")
        self._t0 = time.monotonic()
        with self._lock:
            self._watch_tree(self.root, synthesize=False)
            # What exists before the watch started is the initial state, not an event.
            for dirpath, _dirs, files in os.walk(self.root):
                for f in files:
                    self._known_files.add(self._rel(os.path.join(dirpath, f)))
        if self._start_thread:
            self._thread = threading.Thread(target=self._loop, name="conformance-watcher", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Drain every queued event, flush unpaired moves, do the final rescan."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        with self._lock:
            if self._ino is None:
                return
            self._drain()
            self._flush_pending()
            self._final_rescan()
            self._ino.close()
            self._ino = None
            if self._out is not None:
                self._out.close()
                self._out = None

    # ------------------------------------------------------------ main loop
    def _loop(self) -> None:
        last_scan = time.monotonic()
        poller = select.poll()
        poller.register(self._ino.fileno(), select.POLLIN)  # type: ignore[union-attr]
        while not self._stop.is_set():
            ready = poller.poll(20)
            with self._lock:
                # read under the lock, as catch_up() does: no event is ever read and not yet handled
                events = self._ino.read(timeout=0) if ready else []  # type: ignore[union-attr]
                if events:
                    self._handle(events)
                elif not ready and self._pending_from:  # 20 ms without the IN_MOVED_TO: moved out
                    self._flush_pending()
                if time.monotonic() - last_scan > self.rescan_interval:
                    last_scan = time.monotonic()
                    self.rescan()

    def wait_for(self, predicate: Callable[[list[dict]], bool], timeout: float) -> bool:
        """Block until ``predicate(records)`` holds (checked at every new record) or ``timeout``."""
        with self._cond:
            return self._cond.wait_for(lambda: predicate(self.records), timeout)

    def catch_up(self) -> None:
        """Handle, in this thread, every event queued so far: each directory made before the call
        is watched when it returns, so what happens in it afterwards arrives as events, never as a
        late scan.  (The thread reads and handles under one lock: no event read before the call is
        still waiting to be handled.)"""
        with self._lock:
            self._drain()

    @property
    def running(self) -> bool:
        return self._ino is not None

    def note(self, rec: dict) -> dict:
        """Add a record the suite knows and inotify cannot see (a process death), in order."""
        with self._lock:
            return self._emit(dict(rec))

    def inject(self, events: Iterable) -> None:
        """Feed raw events (``inotify_simple.Event``) as if the kernel had sent them."""
        with self._lock:
            self._handle(list(events))

    # ------------------------------------------------------------ records
    def _rel(self, path: str) -> str:
        return os.path.relpath(path, self.root)

    def _emit(self, rec: dict) -> dict:
        rec = {"seq": len(self.records), "t": round(time.monotonic() - self._t0, 6),
               "wall": round(time.time(), 6), **rec}
        if self.actor is not None:
            rec.setdefault("actor", self.actor)
        if self.recovery and rec.get("op") != KILL:
            rec["recovery"] = True
        self.records.append(rec)
        if self._out is not None:
            self._out.write(json.dumps(rec, ensure_ascii=False) + "\n")
            self._out.flush()
        self._cond.notify_all()
        for listener in list(self.listeners):
            try:
                listener(rec)
            except Exception:  # a listener must never kill the watcher
                pass
        return rec

    # ------------------------------------------------------------ watches
    def _add_watch(self, path: str) -> bool:
        if path in self._path_wd or self._ino is None:
            return False
        try:
            wd = self._ino.add_watch(path, WATCH_MASK)
        except OSError:
            return False  # gone already, or not a directory
        old = self._wd_path.get(wd)
        if old is not None and old != path:
            self._path_wd.pop(old, None)
        self._wd_path[wd] = path
        self._path_wd[path] = wd
        return True

    def _watch_tree(self, top: str, synthesize: bool, how: str = "scan") -> None:
        """Watch ``top`` and every directory below; with ``synthesize``, report what is
        already inside as created (it appeared before its directory's watch existed;
        files: see :meth:`_report_unexplained`)."""
        listed: list[tuple[int | None, str, str]] = []  # files: (wd of the directory, name, rel)
        stack = [top]
        while stack:
            d = stack.pop()
            self._add_watch(d)
            try:
                entries = sorted(os.scandir(d), key=lambda e: e.name)
            except OSError:
                continue
            for e in entries:
                try:
                    is_dir = e.is_dir(follow_symlinks=False)
                except OSError:
                    continue
                if is_dir:
                    if synthesize and e.path not in self._path_wd:
                        self._emit({"op": "create", "path": self._rel(e.path), "kind": "dir", "synthetic": how})
                    stack.append(e.path)
                elif synthesize:
                    rel = self._rel(e.path)
                    if rel not in self._known_files:
                        listed.append((self._path_wd.get(d), e.name, rel))
        if listed:
            self._report_unexplained(listed, how)

    def _report_unexplained(self, listed: list[tuple[int | None, str, str]], how: str) -> None:
        """Report the listed files that no queued event will report.

        The walk races with the implementation: a directory's watch is added before it is
        listed, so a listed file may have come after the watch (its IN_CREATE or IN_MOVED_TO
        is queued: that event reports it) or before (nothing queued, or an event that needs it
        to exist).  A listing cannot show a file before the event that made it is queued (the
        kernel queues it under the directory's lock), so reading the queue now is enough to
        tell.  The events read are handled after the rest of the batch in hand, in their
        order.  (Reporting every listed file made a file moved from working/ to target/
        mid-walk exist twice, and the queued rename then landed on a taken name.)"""
        self._read_ahead()
        first: dict[tuple[int, str], int] = {}  # (wd, name) -> mask of the first event queued for it
        for ev in self._queue:
            if ev.name:
                first.setdefault((ev.wd, ev.name), ev.mask)
        for wd, name, rel in listed:
            if wd is not None and first.get((wd, name), 0) & (flags.CREATE | flags.MOVED_TO):
                continue
            self._known_files.add(rel)
            self._emit({"op": "create", "path": rel, "synthetic": how})

    def _read_ahead(self) -> None:
        while self._ino is not None:
            events = self._ino.read(timeout=0)
            if not events:
                return
            self._queue.extend(events)

    def rescan(self) -> None:
        """Watch the directories the event stream could not announce (created and filled
        faster than their parent's watch).  A directory the walk finds unwatched may only be
        one whose move is still queued: the queue is drained after the walk, so only
        what no event explains is reported (as ``"synthetic": "scan"``)."""
        with self._lock:
            dirs = (os.path.join(dirpath, d) for dirpath, dirnames, _ in os.walk(self.root) for d in dirnames)
            # a symlink is an entry, never watched: leaving it out keeps the drain for real candidates
            unwatched = [p for p in dirs if p not in self._path_wd and not os.path.islink(p)]
            if not unwatched:
                return
            self._drain()
            for p in unwatched:
                if p not in self._path_wd and os.path.isdir(p) and not os.path.islink(p):
                    self._emit({"op": "create", "path": self._rel(p), "kind": "dir", "synthetic": "scan"})
                    self._watch_tree(p, synthesize=True)
            if self._queue:  # what the walks read ahead
                self._handle([])

    def _drain(self) -> None:
        while self._ino is not None:
            self._read_ahead()
            if not self._queue:
                return
            self._handle([])

    def _final_rescan(self) -> None:
        present: set[str] = set()
        for dirpath, dirnames, files in os.walk(self.root):
            for f in files + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
                present.add(self._rel(os.path.join(dirpath, f)))
        for rel in sorted(present - self._known_files):
            self._known_files.add(rel)
            self.gaps.append(self._emit({"op": "create", "path": rel, "synthetic": "rescan"}))
        for rel in sorted(self._known_files - present):
            self._known_files.discard(rel)
            self.gaps.append(self._emit({"op": "delete", "path": rel, "synthetic": "rescan"}))

    # ------------------------------------------------------------ events
    def _flush_pending(self) -> None:
        for _cookie, (path, is_dir) in sorted(self._pending_from.items()):
            self._moved_away(path, is_dir)
        self._pending_from.clear()

    def _moved_away(self, path: str, is_dir: bool) -> None:
        self._deleted(path, is_dir, moved_out=True)

    def _deleted(self, path: str, is_dir: bool, **extra) -> None:
        rel = self._rel(path)
        rec = {"op": "delete", "path": rel, **extra}
        if is_dir:
            rec["kind"] = "dir"
            self._forget_dir(path)
        else:
            self._known_files.discard(rel)
        self._emit(rec)

    def _forget_dir(self, path: str) -> None:
        prefix = path + os.sep
        for p in [p for p in self._path_wd if p == path or p.startswith(prefix)]:
            wd = self._path_wd.pop(p)
            self._wd_path.pop(wd, None)
        rprefix = self._rel(path) + os.sep
        self._known_files = {f for f in self._known_files if not f.startswith(rprefix)}

    def _rename_dir(self, src: str, dst: str) -> None:
        prefix = src + os.sep
        for p in [p for p in self._path_wd if p == src or p.startswith(prefix)]:
            wd = self._path_wd.pop(p)
            np = dst + p[len(src):]
            self._path_wd[np] = wd
            self._wd_path[wd] = np
        rs, rd = self._rel(src) + os.sep, self._rel(dst) + os.sep
        self._known_files = {rd + f[len(rs):] if f.startswith(rs) else f for f in self._known_files}

    def _handle(self, events: list) -> None:
        self._queue.extend(events)
        # Unpaired IN_MOVED_FROMs from an earlier read whose IN_MOVED_TO is not here: moved out.
        cookies_here = {e.cookie for e in self._queue if e.mask & flags.MOVED_TO}
        for cookie in [c for c in self._pending_from if c not in cookies_here]:
            path, is_dir = self._pending_from.pop(cookie)
            self._moved_away(path, is_dir)
        while self._queue:
            ev = self._queue.popleft()
            mask = ev.mask
            if mask & flags.Q_OVERFLOW:
                self.overflowed = True
                self._emit({"op": "overflow"})
                continue
            if mask & flags.IGNORED:
                old = self._wd_path.pop(ev.wd, None)
                if old is not None and self._path_wd.get(old) == ev.wd:
                    del self._path_wd[old]
                continue
            parent = self._wd_path.get(ev.wd)
            if parent is None:
                continue
            if mask & flags.DELETE_SELF:
                continue  # the parent's IN_DELETE reports it
            path = os.path.join(parent, ev.name) if ev.name else parent
            rel = self._rel(path)
            is_dir = bool(mask & flags.ISDIR)
            if mask & flags.CREATE:
                if is_dir:
                    self._emit({"op": "create", "path": rel, "kind": "dir"})
                    self._watch_tree(path, synthesize=True)
                elif rel not in self._known_files:
                    self._known_files.add(rel)
                    self._emit({"op": "create", "path": rel})
            elif mask & flags.CLOSE_WRITE:
                if rel not in self._known_files:
                    if not os.path.lexists(path):  # unlinked while open, closed afterwards
                        self._emit({"op": "close_write", "path": rel, "unlinked": True})
                        continue
                    self._known_files.add(rel)  # created before its directory was watched
                    self._emit({"op": "create", "path": rel, "synthetic": "scan"})
                self._emit({"op": "close_write", "path": rel, **_log_content(path, rel)})
            elif mask & flags.MOVED_FROM:
                self._pending_from[ev.cookie] = (path, is_dir)
            elif mask & flags.MOVED_TO:
                src = self._pending_from.pop(ev.cookie, None)
                if src is None:
                    rec = {"op": "create", "path": rel, "moved_in": True}
                    if is_dir:
                        rec["kind"] = "dir"
                        self._emit(rec)
                        self._watch_tree(path, synthesize=True)
                    else:
                        self._known_files.add(rel)
                        self._emit(rec)
                    continue
                src_path, _ = src
                rec = {"op": "rename", "src": self._rel(src_path), "dst": rel}
                if os.path.basename(os.path.dirname(path)) == "committing":
                    rec.update(_log_content(path, rel))
                if is_dir:
                    rec["kind"] = "dir"
                    self._rename_dir(src_path, path)
                else:
                    self._known_files.discard(rec["src"])
                    self._known_files.add(rel)
                self._emit(rec)
                if is_dir:
                    # made, filled and renamed before its IN_CREATE was read (a subscription built
                    # in .new-X): its watch could not be added, so what it holds is reported now
                    self._watch_tree(path, synthesize=True)
            elif mask & flags.DELETE:
                self._deleted(path, is_dir)


#: a transaction log longer than this is not copied into the trace
LOG_CONTENT_LIMIT = 1 << 16


def _log_content(path: str, rel: str) -> dict:
    """``{"content": text}`` for a transaction log file that can still be read, else {}."""
    if "transaction" not in Path(rel).parts[:-1]:
        return {}
    try:
        with open(path, "rb") as f:
            data = f.read(LOG_CONTENT_LIMIT + 1)
    except OSError:  # already renamed on or deleted: its earlier record has the content
        return {}
    if len(data) > LOG_CONTENT_LIMIT:
        return {}
    return {"content": data.decode("utf-8", errors="replace")}


def read_trace(path: str | Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]
