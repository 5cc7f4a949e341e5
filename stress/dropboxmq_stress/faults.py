"""Fault injection into the reference implementation's own system calls.

How faults reach the library (what works in this sandbox, measured):

* **libfiu** (Debian ``fiu-utils`` + ``libfiu-dev``): ``/usr/lib/fiu/fiu_posix_preload.so``
  wraps libc ``open``/``open64``, ``write``, ``fsync``, ``rename``, ``unlink``
  (fault points ``posix/io/oc/open``, ``posix/io/rw/write``,
  ``posix/io/sync/fsync``, ``posix/io/dir/rename``, ``posix/io/dir/unlink``).
  The process must be started with ``LD_PRELOAD`` set to it (``fiu-run -x``
  does the same); :func:`ensure_preloaded` re-executes the CLI that way.
  CPython's ``os.open/write/fsync/rename/unlink`` (without ``dir_fd``) call
  exactly those libc functions, so a libfiu fault makes the real call fail
  with the errno we choose.
* We drive libfiu through **ctypes on libfiu.so.0** (``fiu_enable(name, 1,
  (void*)errno, FIU_ONETIME)``), not through ``python3-fiu``: that module
  passes ``failinfo`` as a Python object pointer, so the injected errno is
  garbage (``[Errno -1265309400]``), and its ``fiu_ll`` is built for the
  system python only.  libfiu's ``posix/io/rw/write/reduce`` point had no
  effect here, so **short writes** are made at the Python boundary (the
  real ``write`` gets a prefix of the buffer).
* libfiu does **not** wrap ``renameat2`` (called through ctypes by
  ``store.rename_noreplace``) nor ``linkat`` (CPython's ``os.link`` with
  ``follow_symlinks=False``).  Faults on those are raised at the Python/ctypes
  boundary: ``store.renameat2`` is replaced by a wrapper that sets errno and
  returns -1, ``os.link`` by a wrapper that raises.  With
  ``rename_path="link"`` the child sets ``store.noreplace_supported = False``
  so every rename goes through the link()+unlink() fallback (the unlink is a
  libfiu point).

Only calls made *by the library* are counted and faulted: the wrapper is
installed as the ``os`` attribute of ``dropboxmq.store``, ``dropboxmq.netfs`` (its paths
without renameat2) and ``dropboxmq.transaction`` (the only modules that touch message files); the
test's own history writes use the real ``os`` and are never faulted.
"""

from __future__ import annotations

import ctypes
import errno as E
import os
import random
import signal
from dataclasses import dataclass, field
from typing import Any, Callable

PRELOAD = "/usr/lib/fiu/fiu_posix_preload.so"

FIU_POINTS = {
    "open": "posix/io/oc/open",
    "write": "posix/io/rw/write",
    "fsync": "posix/io/sync/fsync",
    "rename": "posix/io/dir/rename",  # os.rename: the transaction log's moves
    "unlink": "posix/io/dir/unlink",
}
#: kinds counted by the wrapper; renameat2 and link are faulted at the Python boundary
KINDS = ("open", "write", "fsync", "rename", "renameat2", "link", "unlink")

ERRNOS = {"ENOSPC": E.ENOSPC, "EIO": E.EIO, "EACCES": E.EACCES, "EDQUOT": E.EDQUOT, "EROFS": E.EROFS}

_FIU_ONETIME = 1
_lib: Any = None


def fiu_available() -> bool:
    """Is libfiu's POSIX preload active in this process (so libfiu points really fail)?"""
    return _libfiu() is not None


def _libfiu():
    global _lib
    if _lib is None:
        if PRELOAD not in os.environ.get("LD_PRELOAD", ""):
            _lib = False
        else:
            try:
                lib = ctypes.CDLL("libfiu.so.0", use_errno=True)
                lib.fiu_init.argtypes = [ctypes.c_uint]
                lib.fiu_enable.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_uint]
                lib.fiu_disable.argtypes = [ctypes.c_char_p]
                lib.fiu_init(0)
                _lib = lib
            except OSError:
                _lib = False
    return _lib or None


def ensure_preloaded(argv: list[str] | None = None) -> bool:
    """Re-exec the current command with libfiu's POSIX preload, if it exists and is not active.
    Returns False (no re-exec) when libfiu is not installed."""
    if PRELOAD in os.environ.get("LD_PRELOAD", ""):
        return True
    if not os.path.exists(PRELOAD):
        return False
    import sys

    env = dict(os.environ)
    env["LD_PRELOAD"] = (PRELOAD + " " + env.get("LD_PRELOAD", "")).strip()
    args = argv if argv is not None else [sys.executable] + sys.argv
    os.execve(args[0], args, env)
    return True  # not reached


def preload_env() -> dict:
    env = dict(os.environ)
    if os.path.exists(PRELOAD) and PRELOAD not in env.get("LD_PRELOAD", ""):
        env["LD_PRELOAD"] = (PRELOAD + " " + env.get("LD_PRELOAD", "")).strip()
    return env


# ---------------------------------------------------------------- plans


@dataclass
class Fired:
    n: int
    kind: str
    action: str
    via: str  # "libfiu" | "python"


@dataclass
class Plan:
    """What to do at each counted call.

    * ``fail_at``: the ``fail_at``-th counted call (1-based) gets ``action``;
    * ``probability``: every counted call gets a random action with this probability.

    ``action``: ``"errno:ENOSPC"`` (any name of :data:`ERRNOS`), ``"short"``
    (a short write; other kinds: no-op), ``"kill-before"`` / ``"kill-after"``
    (SIGKILL this process just before / just after the real call).
    """

    fail_at: int | None = None
    action: str = "errno:EIO"
    probability: float = 0.0
    actions: tuple[str, ...] = ("errno:ENOSPC", "errno:EIO", "errno:EACCES", "short")
    kinds: tuple[str, ...] = KINDS
    seed: int | None = None
    counting: bool = False  # only count while an operation under test runs
    on_fire: Callable[[Fired], object] | None = None  # its result is ignored
    count: int = 0
    trace: list[str] = field(default_factory=list)
    fired: list[Fired] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    def decide(self, kind: str) -> str | None:
        if not self.counting or kind not in self.kinds:
            return None
        self.count += 1
        self.trace.append(kind)
        if self.fail_at is not None:
            return self.action if self.count == self.fail_at else None
        if self.probability and self._rng.random() < self.probability:
            return self._rng.choice(self.actions)
        return None


class FaultyOs:
    """An ``os`` stand-in for the library's modules: counts and faults the calls of :data:`KINDS`."""

    def __init__(self, real, plan: Plan):
        self._real = real
        self._plan = plan

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def _fire(self, kind: str, action: str, call: Callable[[], Any], path: Any = None,
              short: Callable[[], Any] | None = None, at: bool = False) -> Any:
        plan = self._plan
        # libfiu wraps open/rename/unlink, not their *at forms (a call relative to a held
        # directory, at=True): those are faulted at the Python boundary
        via = "libfiu" if (action.startswith("errno:") and kind in FIU_POINTS and fiu_available()
                           and not at) else "python"
        fired = Fired(plan.count, kind, action, via)
        plan.fired.append(fired)
        if plan.on_fire is not None:
            plan.on_fire(fired)
        if action == "kill-before":
            os.kill(os.getpid(), signal.SIGKILL)
        if action == "kill-after":
            result = call()
            os.kill(os.getpid(), signal.SIGKILL)
            return result
        if action == "short":
            return short() if short is not None else call()
        if action.startswith("errno:"):
            code = ERRNOS[action.split(":", 1)[1]]
            if via == "libfiu":
                lib = _libfiu()
                lib.fiu_enable(FIU_POINTS[kind].encode(), 1, code, _FIU_ONETIME)
                try:
                    result = call()
                finally:
                    lib.fiu_disable(FIU_POINTS[kind].encode())
                fired.via = "libfiu (did not fail!)"
                return result
            raise OSError(code, os.strerror(code), path)
        return call()

    def open(self, path, flags, mode=0o777, *, dir_fd=None):
        call = lambda: self._real.open(path, flags, mode, dir_fd=dir_fd)  # noqa: E731
        action = self._plan.decide("open")
        # dir_fd -100 (AT_FDCWD, as the store passes it) is CPython's plain open(), which libfiu wraps
        return call() if action is None else self._fire("open", action, call, path, at=dir_fd not in (None, -100))

    def write(self, fd, data):
        call = lambda: self._real.write(fd, data)  # noqa: E731
        action = self._plan.decide("write")
        if action is None:
            return call()
        short = lambda: self._real.write(fd, bytes(data)[: max(1, len(data) // 2)])  # noqa: E731
        return self._fire("write", action, call, None, short)

    def fsync(self, fd):
        call = lambda: self._real.fsync(fd)  # noqa: E731
        action = self._plan.decide("fsync")
        return call() if action is None else self._fire("fsync", action, call)

    def rename(self, src, dst, *, src_dir_fd=None, dst_dir_fd=None):
        call = lambda: self._real.rename(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)  # noqa: E731
        action = self._plan.decide("rename")
        return call() if action is None else self._fire("rename", action, call, src,
                                                        at=src_dir_fd is not None or dst_dir_fd is not None)

    def unlink(self, path, *, dir_fd=None):
        call = lambda: self._real.unlink(path, dir_fd=dir_fd)  # noqa: E731
        action = self._plan.decide("unlink")
        return call() if action is None else self._fire("unlink", action, call, path, at=dir_fd is not None)

    def link(self, src, dst, *, src_dir_fd=None, dst_dir_fd=None, follow_symlinks=True):
        call = lambda: self._real.link(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd,  # noqa: E731
                                       follow_symlinks=follow_symlinks)
        action = self._plan.decide("link")
        return call() if action is None else self._fire("link", action, call, src)


def install(plan: Plan, rename_path: str = "renameat2") -> None:
    """Route the library's file calls through ``plan`` (call in the child process only)."""
    from dropboxmq import dirs, netfs, store, transaction

    faulty = FaultyOs(os, plan)
    store.os = faulty  # type: ignore[assignment]
    dirs.os = faulty  # type: ignore[assignment]  # (directories made at connect, durably)
    netfs.os = faulty  # type: ignore[assignment]  # (the link()+unlink() path without renameat2)
    transaction.os = faulty  # type: ignore[assignment]
    if rename_path == "link" or store.renameat2 is None:
        store.noreplace_supported = False
        return
    real = store.renameat2

    def renameat2(olddirfd, old, newdirfd, new, flags):
        action = plan.decide("renameat2")
        if action is None:
            return real(olddirfd, old, newdirfd, new, flags)
        fired = Fired(plan.count, "renameat2", action, "python")
        plan.fired.append(fired)
        if plan.on_fire is not None:
            plan.on_fire(fired)
        if action == "kill-before":
            os.kill(os.getpid(), signal.SIGKILL)
        if action.startswith("errno:"):
            ctypes.set_errno(ERRNOS[action.split(":", 1)[1]])
            return -1
        rc = real(olddirfd, old, newdirfd, new, flags)
        if action == "kill-after":
            os.kill(os.getpid(), signal.SIGKILL)
        return rc

    store.renameat2 = renameat2  # type: ignore[attr-defined]
