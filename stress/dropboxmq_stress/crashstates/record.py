"""The I/O shell that records: the file-system calls one library operation makes under a root.

Recorded at the ``os`` level, not in the store: while a :class:`Recorder` is installed, the
``os`` functions the library calls (open, write, fsync, fdatasync, ftruncate, rename, replace,
link, unlink, remove, mkdir, rmdir, sync), the libc entry points it binds through ctypes
(``renameat2``, ``syncfs``: found by symbol name among the library modules' globals) and
``builtins.open`` (files written through Python file objects) are wrapped.  Each call under
the root is turned into a :mod:`model` operation on inodes (fd and dir-fd arguments resolved
through ``/proc/self/fd``), after the real call succeeded.

Two checks keep the recording honest: at the end, a model of the tree with every recorded
operation applied must equal the real tree, file contents included (a call the library made
through a path not wrapped here shows up as a difference: ``RecordingGap``); and data written
through a file object, which no ``os.write`` shows, is read back before each barrier that
covers it.

``Environment`` pins what the library reads from the machine to choose how to sync: the
dirty bytes of ``/proc/meminfo`` (few: one syncfs for a batch; many: each file's fsync), and
whether ``renameat2`` exists (else the link()+unlink() fallback).
"""

from __future__ import annotations

import builtins
import ctypes
import errno
import fcntl
import io
import os
import stat
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from .model import Baseline, Create, Fsync, Link, Mark, Op, Rename, SyncAll, Trace, Truncate, Unlink, Write

__all__ = ["Environment", "ENVIRONMENTS", "RecordingGap", "Recorder", "snapshot_tree"]

AT_FDCWD = -100
_WRAPPED_OS = ("open", "write", "fsync", "fdatasync", "ftruncate", "rename", "replace", "link", "unlink",
               "remove", "mkdir", "rmdir", "sync")
_CTYPES_SYMBOLS = ("renameat2", "syncfs")


@dataclass(frozen=True)
class Environment:
    name: str
    dirty_bytes: int  # what /proc/meminfo says awaits writing (the library's syncfs-or-fsync choice)
    renameat2: bool = True  # False: the kernel "lacks" renameat2 (EINVAL), the link()+unlink() fallback runs


ENVIRONMENTS: dict[str, Environment] = {
    "quiet": Environment("quiet", dirty_bytes=0),  # little unwritten: batches use one syncfs
    "busy": Environment("busy", dirty_bytes=8 << 30),  # another writer's gigabytes: each file's fsync
    "no-renameat2": Environment("no-renameat2", dirty_bytes=8 << 30, renameat2=False),
}


class RecordingGap(RuntimeError):
    """The recorded operations do not explain the tree the operation left: a call went unrecorded."""


def snapshot_tree(root: str) -> dict[str, bytes | None]:
    """path (relative to ``root``) -> content, None for a directory; symlinks and other files are skipped."""
    out: dict[str, bytes | None] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        for d in dirnames:
            if stat.S_ISDIR(os.lstat(os.path.join(dirpath, d)).st_mode):
                out[os.path.normpath(os.path.join(rel, d))] = None
        for f in filenames:
            path = os.path.join(dirpath, f)
            if stat.S_ISREG(os.lstat(path).st_mode):
                with open(path, "rb") as fh:
                    out[os.path.normpath(os.path.join(rel, f))] = fh.read()
    return out


class Recorder:
    """``with Recorder(root, env) as rec:`` run the operation; ``rec.trace`` is what it did."""

    def __init__(self, root: str | Path, env: Environment = ENVIRONMENTS["quiet"]):
        self.root = os.path.realpath(root)
        self.env = env
        self.ops: list[Op] = []
        self.calls = 0  # system calls under the root, recorded or not (opens of directories, closes...)
        self._ids: dict[tuple[int, int], int] = {}  # (st_dev, st_ino) -> model inode
        self._next = 1
        self._lock = threading.RLock()
        self._real: dict[str, Callable[..., Any]] = {}
        self._patched_globals: list[tuple[dict[str, Any], str, Any]] = []
        self._file_objects: dict[int, int] = {}  # model inode -> fd of a Python file object writing it
        self.baseline: Baseline | None = None
        # the live tree: every recorded op applied (the gap check, and where a file object's inode is)
        self._dirs: dict[int, dict[str, int]] = {}
        self._contents: dict[int, bytearray] = {}
        self._dev = os.lstat(self.root).st_dev

    # ------------------------------------------------------------ baseline
    def _id(self, st: os.stat_result, fresh: bool = False) -> int:
        key = (st.st_dev, st.st_ino)
        if fresh or key not in self._ids:
            self._ids[key] = self._next
            self._next += 1
        return self._ids[key]

    def _take_baseline(self) -> None:
        root_id = self._id(os.lstat(self.root))
        self._dirs[root_id] = {}
        stack = [(self.root, root_id)]
        while stack:
            path, d = stack.pop()
            for name in sorted(os.listdir(path)):
                child = os.path.join(path, name)
                st = os.lstat(child)
                if stat.S_ISDIR(st.st_mode):
                    cid = self._id(st)
                    self._dirs[d][name] = cid
                    self._dirs[cid] = {}
                    stack.append((child, cid))
                elif stat.S_ISREG(st.st_mode):
                    cid = self._id(st)
                    self._dirs[d][name] = cid
                    with open(child, "rb") as fh:
                        self._contents[cid] = bytearray(fh.read())
        self.baseline = Baseline(root_id, {d: dict(e) for d, e in self._dirs.items()},
                                 {f: bytes(c) for f, c in self._contents.items()})

    @property
    def trace(self) -> Trace:
        assert self.baseline is not None
        return Trace(self.baseline, list(self.ops))

    def mark(self, label: str, *keys: str) -> None:
        """A library call returned to its caller (what the promises are about)."""
        with self._lock:
            self.ops.append(Mark(label, tuple(keys), call=f"{label} returned"))

    # ------------------------------------------------------------ paths
    def _abs(self, path: Any, dir_fd: int | None) -> str:
        p = os.fsdecode(path)
        if os.path.isabs(p):
            return os.path.normpath(p)
        base = os.readlink(f"/proc/self/fd/{dir_fd}") if dir_fd not in (None, AT_FDCWD) else os.getcwd()
        return os.path.normpath(os.path.join(base, p))

    def _inside(self, path: str) -> bool:
        return path.startswith(self.root + "/")

    def _rel(self, path: str) -> str:
        return os.path.relpath(path, self.root)

    def _parent(self, path: str) -> int:
        return self._id(os.lstat(os.path.dirname(path)))

    def _record(self, op: Op) -> None:
        with self._lock:
            self.ops.append(op)
            self._apply_live(op)

    def _apply_live(self, op: Op) -> None:
        if isinstance(op, Create):
            self._dirs.setdefault(op.parent, {})[op.name] = op.ino
            if op.is_dir:
                self._dirs[op.ino] = {}
            else:
                self._contents[op.ino] = bytearray()
        elif isinstance(op, Link):
            self._dirs.setdefault(op.parent, {})[op.name] = op.ino
        elif isinstance(op, Unlink):
            self._dirs.get(op.parent, {}).pop(op.name, None)
        elif isinstance(op, Rename):
            self._dirs.get(op.src_parent, {}).pop(op.src_name, None)
            self._dirs.setdefault(op.dst_parent, {})[op.dst_name] = op.ino
        elif isinstance(op, Write):
            c = self._contents.setdefault(op.ino, bytearray())
            if len(c) < op.offset:
                c.extend(b"\0" * (op.offset - len(c)))
            c[op.offset:op.offset + len(op.data)] = op.data
        elif isinstance(op, Truncate):
            c = self._contents.setdefault(op.ino, bytearray())
            del c[op.size:]
            c.extend(b"\0" * (op.size - len(c)))

    def _live_path(self, ino: int) -> str | None:
        assert self.baseline is not None
        stack = [("", self.baseline.root)]
        while stack:
            prefix, d = stack.pop()
            for name, child in self._dirs.get(d, {}).items():
                if child == ino:
                    return prefix + name
                if child in self._dirs:
                    stack.append((prefix + name + "/", child))
        return None

    def _before_entry_op(self) -> None:
        """What file objects wrote so far happened before this call: record it first."""
        if self._file_objects:
            with self._lock:
                self._reconcile()

    def _reconcile(self, ino: int | None = None) -> None:
        """Data written through Python file objects (no os.write shows it): read the file
        back and record the difference as a write, before the barrier that covers it."""
        for fino in list(self._file_objects) if ino is None else [ino]:
            if fino not in self._file_objects:
                continue
            rel = self._live_path(fino)
            if rel is None:
                continue
            try:
                fd = self._real["open"](os.path.join(self.root, rel), os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                chunks = []
                while chunk := os.read(fd, 1 << 20):
                    chunks.append(chunk)
            finally:
                os.close(fd)
            real = b"".join(chunks)
            known = bytes(self._contents.get(fino, b""))
            if real != known:
                if len(real) < len(known):
                    self._record(Truncate(fino, len(real), call=f"(file object) truncate {rel}"))
                self._record(Write(fino, 0, real, call=f"(file object) write {rel} [{len(real)} B]"))

    # ------------------------------------------------------------ wrappers
    def _wrap_os(self) -> dict[str, Callable[..., Any]]:
        real = self._real

        def open_(path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
            absp = self._abs(path, dir_fd)
            if not self._inside(absp):
                return real["open"](path, flags, mode, dir_fd=dir_fd)
            self._before_entry_op()
            try:
                before: os.stat_result | None = os.lstat(absp)
            except OSError:
                before = None
            fd = real["open"](path, flags, mode, dir_fd=dir_fd)
            with self._lock:
                self.calls += 1
                st = os.fstat(fd)
                if before is None and flags & os.O_CREAT:
                    ino = self._id(st, fresh=True)
                    self._record(Create(self._parent(absp), os.path.basename(absp), ino, False,
                                        call=f"open({self._rel(absp)}, O_CREAT) = new file"))
                elif flags & os.O_TRUNC and stat.S_ISREG(st.st_mode) and st.st_size == 0 and before is not None \
                        and before.st_size > 0:
                    self._record(Truncate(self._id(st), 0, call=f"open({self._rel(absp)}, O_TRUNC)"))
            return fd

        def tracked(fd: int) -> tuple[int, str] | None:
            """The model inode and path of ``fd`` when it is one of ours."""
            try:
                st = os.fstat(fd)
            except OSError:
                return None
            ino = self._ids.get((st.st_dev, st.st_ino))
            if ino is None or st.st_dev != self._dev:
                return None
            try:
                where = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                where = "?"
            return ino, self._rel(where) if self._inside(where) or where == self.root else where

        def write(fd: int, data: Any) -> int:
            t = tracked(fd)
            if t is None:
                return real["write"](fd, data)
            with self._lock:
                offset = os.fstat(fd).st_size if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_APPEND \
                    else os.lseek(fd, 0, os.SEEK_CUR)
                n = real["write"](fd, data)
                self.calls += 1
                self._record(Write(t[0], offset, bytes(memoryview(data)[:n]),
                                   call=f"write({t[1]}, {n} B at {offset})"))
                return n

        def make_sync(name: str) -> Callable[[int], None]:
            def sync_(fd: int) -> None:
                t = tracked(fd)
                if t is None:
                    return real[name](fd)
                with self._lock:
                    self._reconcile(t[0])
                real[name](fd)
                with self._lock:
                    self.calls += 1
                    self._record(Fsync(t[0], call=f"{name}({t[1]})"))
            return sync_

        def ftruncate(fd: int, length: int) -> None:
            t = tracked(fd)
            real["ftruncate"](fd, length)
            if t is not None:
                with self._lock:
                    self.calls += 1
                    self._record(Truncate(t[0], length, call=f"ftruncate({t[1]}, {length})"))

        def make_rename(name: str) -> Callable[..., None]:
            def rename_(src: Any, dst: Any, *, src_dir_fd: int | None = None, dst_dir_fd: int | None = None) -> None:
                s, d = self._abs(src, src_dir_fd), self._abs(dst, dst_dir_fd)
                if not (self._inside(s) or self._inside(d)):
                    return real[name](src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)
                self._before_entry_op()
                st = os.lstat(s)
                real[name](src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)
                with self._lock:
                    self.calls += 1
                    self._record(Rename(self._parent(s), os.path.basename(s), self._parent(d), os.path.basename(d),
                                        self._id(st), call=f"{name}({self._rel(s)} -> {self._rel(d)})"))
            return rename_

        def link(src: Any, dst: Any, *, src_dir_fd: int | None = None, dst_dir_fd: int | None = None,
                 follow_symlinks: bool = True) -> None:
            s, d = self._abs(src, src_dir_fd), self._abs(dst, dst_dir_fd)
            if self._inside(d):
                self._before_entry_op()
            real["link"](src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd, follow_symlinks=follow_symlinks)
            if self._inside(d):
                with self._lock:
                    self.calls += 1
                    self._record(Link(self._parent(s), os.path.basename(s), self._parent(d), os.path.basename(d),
                                      self._id(os.lstat(d)), call=f"link({self._rel(s)} -> {self._rel(d)})"))

        def make_unlink(name: str) -> Callable[..., None]:
            def unlink_(path: Any, *, dir_fd: int | None = None) -> None:
                p = self._abs(path, dir_fd)
                if not self._inside(p):
                    return real[name](path, dir_fd=dir_fd)
                self._before_entry_op()
                st = os.lstat(p)
                parent = self._parent(p)
                real[name](path, dir_fd=dir_fd)
                with self._lock:
                    self.calls += 1
                    self._record(Unlink(parent, os.path.basename(p), self._id(st), call=f"{name}({self._rel(p)})"))
            return unlink_

        def mkdir(path: Any, mode: int = 0o777, *, dir_fd: int | None = None) -> None:
            p = self._abs(path, dir_fd)
            if self._inside(p):
                self._before_entry_op()
            real["mkdir"](path, mode, dir_fd=dir_fd)
            if self._inside(p):
                with self._lock:
                    self.calls += 1
                    ino = self._id(os.lstat(p), fresh=True)
                    self._record(Create(self._parent(p), os.path.basename(p), ino, True, call=f"mkdir({self._rel(p)})"))

        def sync() -> None:
            with self._lock:
                self._reconcile()
            real["sync"]()
            with self._lock:
                self.calls += 1
                self._record(SyncAll(call="sync()"))

        return {"open": open_, "write": write, "fsync": make_sync("fsync"), "fdatasync": make_sync("fdatasync"),
                "ftruncate": ftruncate, "rename": make_rename("rename"), "replace": make_rename("replace"),
                "link": link, "unlink": make_unlink("unlink"), "remove": make_unlink("remove"),
                "rmdir": make_unlink("rmdir"), "mkdir": mkdir, "sync": sync}

    def _wrap_ctypes(self, symbol: str, fn: Any) -> Callable[..., int]:
        if symbol == "renameat2":
            def renameat2(olddirfd: int, old: bytes, newdirfd: int, new: bytes, flags: int) -> int:
                s, d = self._abs(old, olddirfd), self._abs(new, newdirfd)
                if not self.env.renameat2:
                    ctypes.set_errno(errno.EINVAL)  # as a kernel or file system without it answers
                    return -1
                if not (self._inside(s) or self._inside(d)):
                    return int(fn(olddirfd, old, newdirfd, new, flags))
                self._before_entry_op()
                try:
                    st: os.stat_result | None = os.lstat(s)
                except OSError:
                    st = None
                rc = int(fn(olddirfd, old, newdirfd, new, flags))
                if rc == 0 and st is not None:
                    with self._lock:
                        self.calls += 1
                        self._record(Rename(self._parent(s), os.path.basename(s), self._parent(d),
                                            os.path.basename(d), self._id(st),
                                            call=f"renameat2({self._rel(s)} -> {self._rel(d)}, NOREPLACE)"))
                return rc
            return renameat2

        def syncfs(fd: int) -> int:
            with self._lock:
                self._reconcile()
            rc = int(fn(fd))
            if rc == 0 and os.fstat(fd).st_dev == self._dev:
                with self._lock:
                    self.calls += 1
                    self._record(SyncAll(call="syncfs()"))
            return rc
        return syncfs

    def _open_builtin(self) -> Callable[..., Any]:
        real_open = self._real["builtins.open"]

        def open_(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
            if file == "/proc/meminfo":  # the library's syncfs-or-fsync choice reads it: pinned
                kb = self.env.dirty_bytes // 1024
                text = f"MemTotal: 16000000 kB\nDirty: {kb} kB\nWriteback: 0 kB\n"
                return io.BytesIO(text.encode()) if "b" in mode else io.StringIO(text)
            if isinstance(file, int) or not any(c in mode for c in "wax+"):
                return real_open(file, mode, *args, **kwargs)
            p = self._abs(file, None)
            if not self._inside(p):
                return real_open(file, mode, *args, **kwargs)
            try:
                before: os.stat_result | None = os.lstat(p)
            except OSError:
                before = None
            f = real_open(file, mode, *args, **kwargs)
            with self._lock:
                self.calls += 1
                st = os.fstat(f.fileno())
                if before is None:
                    ino = self._id(st, fresh=True)
                    self._record(Create(self._parent(p), os.path.basename(p), ino, False,
                                        call=f"open({self._rel(p)}, {mode!r}) = new file"))
                else:
                    ino = self._id(st)
                    if "w" in mode and before.st_size > 0:
                        self._record(Truncate(ino, 0, call=f"open({self._rel(p)}, {mode!r})"))
                self._file_objects[ino] = f.fileno()
            return f
        return open_

    # ------------------------------------------------------------ install / uninstall
    def __enter__(self) -> "Recorder":
        self._take_baseline()
        for name in _WRAPPED_OS:
            self._real[name] = getattr(os, name)
        wrappers = self._wrap_os()
        for name, fn in wrappers.items():
            setattr(os, name, fn)
        self._real["builtins.open"] = builtins.open
        builtins.open = self._open_builtin()
        for module_name, module in list(sys.modules.items()):
            if module is None or not (module_name == "dropboxmq" or module_name.startswith("dropboxmq.")):
                continue
            namespace = vars(module)
            for attr, value in list(namespace.items()):
                symbol = getattr(value, "__name__", None)
                if symbol in _CTYPES_SYMBOLS and hasattr(value, "argtypes"):
                    self._patched_globals.append((namespace, attr, value))
                    namespace[attr] = self._wrap_ctypes(symbol, value)
        return self

    def __exit__(self, *exc: object) -> None:
        for name in _WRAPPED_OS:
            setattr(os, name, self._real[name])
        builtins.open = self._real["builtins.open"]
        for namespace, attr, value in self._patched_globals:
            namespace[attr] = value
        if exc[0] is None:
            self._reconcile()
            self.check_complete()

    def check_complete(self) -> None:
        """The live model must be the real tree: else some call was not recorded."""
        assert self.baseline is not None
        model: dict[str, bytes | None] = {}
        stack = [("", self.baseline.root)]
        while stack:
            prefix, d = stack.pop()
            for name, child in self._dirs.get(d, {}).items():
                if child in self._dirs:
                    model[prefix + name] = None
                    stack.append((prefix + name + "/", child))
                else:
                    model[prefix + name] = bytes(self._contents.get(child, b""))
        real = snapshot_tree(self.root)
        if model != real:
            missing = sorted(set(real) - set(model))[:5]
            extra = sorted(set(model) - set(real))[:5]
            differ = sorted(p for p in set(real) & set(model) if real[p] != model[p])[:5]
            raise RecordingGap(f"calls went unrecorded: on disk but not recorded {missing}; recorded but not "
                               f"on disk {extra}; contents differ {differ}")
