"""``dropboxmq doctor``: qualify a root's file system before anyone trusts it (issue 28).

The probes (the I/O shell, :func:`probe`) exercise, in a scratch directory inside the root
and from two mounts of it when a second one is given (each mount playing a host), what the
protocol rests on: renames of one source racing to two targets (exactly one may win),
``renameat2(RENAME_NOREPLACE)``, ``link()`` and ``O_CREAT|O_EXCL`` as no-replace (one
winner; how the loser is told), flock and fcntl locks across the mounts, how soon a new
file shows in the other mount's listing, the mtime clock and its resolution, fsync.  The
racers are separate processes (fcntl locks are per process; two processes race for real).

:func:`judge` is a pure function from the probe results to a :class:`Verdict`:

* **supported**: every property holds;
* **supported with leases**: claims are safe, but locks do not exclude across mounts (or
  that was not checked), so a client's liveness must come from leases in the root;
* **unsafe**: a claim or a create is not exclusive, a new file never shows on the other
  mount, fsync fails, or there is no no-replace primitive at all.

``doctor`` records its verdict in the root (``filesystems.RECORD``, a dot file: layouts skip dot
names); ``filesystems.verdict_for`` reads it back, and a connection (``filesystems.admit``)
refuses an unsafe root with the verdict's first reason and accepts a qualified one on a network
file system without ``--allow-network-fs``.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import json
import multiprocessing
import os
import shutil
import socket
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from .filesystems import RECORD, SUPPORTED, SUPPORTED_WITH_LEASES, UNSAFE, Verdict

__all__ = ["Probes", "probe", "judge", "record", "LOCAL_FILE_SYSTEMS", "EXIT_CODES"]

#: ``dropboxmq doctor``'s exit status per verdict (1: the probes could not run; 2: usage).
EXIT_CODES = {SUPPORTED: 0, SUPPORTED_WITH_LEASES: 3, UNSAFE: 4}

#: File systems that live on this host only: locks are the kernel's, one mount is the whole story.
LOCAL_FILE_SYSTEMS = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "zfs", "f2fs", "jfs",
                                "reiserfs", "bcachefs", "overlay"})

# Bounds the verdict applies (seconds).
VISIBILITY_UNSAFE_S = 10.0   # listings staler than this outlast any sensible lease
VISIBILITY_NOTE_S = 1.0
MTIME_OFFSET_NOTE_S = 2.0


@dataclass
class Probes:
    """What the probes saw.  Counts are over ``*_trials`` races; errno names as strings."""

    fs_type: str = "unknown"
    other_fs_type: str | None = None
    two_mounts: bool = False
    rename_trials: int = 0
    rename_both: int = 0            # both renames of one source succeeded
    rename_lost: int = 0            # source gone and neither target present
    rename_loser: dict[str, int] = field(default_factory=dict)
    noreplace: str = "unchecked"    # "works", "replaced", an errno name, "no renameat2 in libc"
    link_trials: int = 0
    link_both: int = 0
    link_none: int = 0              # neither link() succeeded
    link_loser: dict[str, int] = field(default_factory=dict)
    excl_trials: int = 0
    excl_both: int = 0
    excl_phantom: int = 0           # both failed EEXIST and no file exists
    excl_loser: dict[str, int] = field(default_factory=dict)
    flock_across: bool | None = None
    fcntl_across: bool | None = None
    visibility_max_s: float | None = None   # None: never visible within visibility_timeout_s
    visibility_timeout_s: float = 0.0
    mtime_offset_s: float = 0.0     # worst |mtime - local clock| at creation
    mtime_subsecond: bool = True
    fsync_file: str = "ok"
    fsync_dir: str = "ok"


# ---------------------------------------------------------------- the verdict (pure)


def _errs(d: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(d.items()))


def judge(p: Probes) -> Verdict:
    """The verdict over the probe results: no I/O."""
    unsafe: list[str] = []
    leases: list[str] = []
    notes: list[str] = []
    if p.rename_both:
        unsafe.append(f"rename is not exclusive: both renames of one file succeeded in {p.rename_both}/"
                      f"{p.rename_trials} trials (one message claimed by two consumers)")
    if p.rename_lost:
        unsafe.append(f"rename lost files: the source vanished and neither target exists in {p.rename_lost}/"
                      f"{p.rename_trials} trials")
    if p.excl_both:
        unsafe.append(f"O_CREAT|O_EXCL is not exclusive: both creates succeeded in {p.excl_both}/{p.excl_trials} trials")
    if p.link_both:
        unsafe.append(f"link() is not exclusive: both links to one name succeeded in {p.link_both}/{p.link_trials} "
                      "trials")
    if p.noreplace == "replaced":
        unsafe.append("renameat2(RENAME_NOREPLACE) replaced an existing file")
    elif p.noreplace != "works" and p.link_trials and p.link_none == p.link_trials:
        unsafe.append(f"no no-replace primitive: renameat2(RENAME_NOREPLACE) gives {p.noreplace} and link() never "
                      f"succeeds ({_errs(p.link_loser)})")
    if p.visibility_max_s is None:
        unsafe.append(f"a new file made through one mount did not appear in the other's listing within "
                      f"{p.visibility_timeout_s:g} s (not the same root, or listings cached: mount without "
                      "attribute/entry/directory caching)")
    elif p.visibility_max_s > VISIBILITY_UNSAFE_S:
        unsafe.append(f"a new file took {p.visibility_max_s:.1f} s to appear on the other mount (listings cached: "
                      "mount without attribute/entry/directory caching)")
    if p.fsync_file != "ok":
        unsafe.append(f"fsync of a file fails ({p.fsync_file}): nothing is durable")

    if not p.two_mounts and p.fs_type not in LOCAL_FILE_SYSTEMS:
        leases.append(f"{p.fs_type} may be shared by other hosts and only one mount was probed: locks across hosts "
                      "not checked (give --other MOUNT), liveness needs leases")
    if p.flock_across is False:
        leases.append("flock does not exclude across mounts: a client's liveness needs leases in the root")
    if p.fcntl_across is False:
        leases.append("fcntl locks do not exclude across mounts")

    if p.noreplace not in ("works", "replaced", "unchecked"):
        notes.append(f"renameat2(RENAME_NOREPLACE) unsupported ({p.noreplace}): no-replace by link()")
    if p.link_loser and set(p.link_loser) != {"EEXIST"}:
        notes.append(f"a losing link() reports {_errs(p.link_loser)} (not only EEXIST)")
    if p.excl_loser and set(p.excl_loser) != {"EEXIST"}:
        notes.append(f"a losing O_EXCL create reports {_errs(p.excl_loser)} (not only EEXIST)")
    if p.excl_phantom:
        notes.append(f"O_EXCL: both creates failed EEXIST and no file exists in {p.excl_phantom}/{p.excl_trials} "
                     "trials (an EEXIST that does not prove the file exists)")
    if p.visibility_max_s is not None and VISIBILITY_NOTE_S < p.visibility_max_s <= VISIBILITY_UNSAFE_S:
        notes.append(f"a new file takes up to {p.visibility_max_s:.1f} s to appear on the other mount")
    if p.mtime_offset_s > MTIME_OFFSET_NOTE_S:
        notes.append(f"mtime comes from a clock {p.mtime_offset_s:.1f} s away from this host's: ages derived from "
                     "mtime (orphans, retention) are off by as much")
    if not p.mtime_subsecond:
        notes.append("mtime has whole-second resolution")
    if p.fsync_dir != "ok":
        notes.append(f"fsync of a directory fails ({p.fsync_dir})")
    if p.other_fs_type is not None and p.other_fs_type != p.fs_type:
        notes.append(f"the two mounts are of different types ({p.fs_type}, {p.other_fs_type})")

    level = UNSAFE if unsafe else SUPPORTED_WITH_LEASES if leases else SUPPORTED
    return Verdict(level, tuple(unsafe + leases), tuple(notes))


# ---------------------------------------------------------------- the probes (I/O)


def _ename(e: OSError) -> str:
    return errno.errorcode.get(e.errno or 0, str(e.errno))


def _attempt(op: Callable[[], Any]) -> str:
    try:
        op()
        return "ok"
    except OSError as e:
        return _ename(e)


def _racer(kind: str, base: str, tag: str, n: int, barrier: Any, out: Any) -> None:
    """One side of ``n`` races in ``base`` (this side's mount of the scratch directory)."""
    results = []
    for i in range(n):
        if kind == "rename":
            def op(i: int = i) -> None:
                os.rename(f"{base}/s{i}", f"{base}/{tag}{i}")
        elif kind == "link":
            def op(i: int = i) -> None:
                os.link(f"{base}/{tag}l{i}", f"{base}/t{i}")
        else:
            def op(i: int = i) -> None:
                fd = os.open(f"{base}/x{i}", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
                os.write(fd, tag.encode())
                os.close(fd)
        barrier.wait(60)
        results.append(_attempt(op))
    out.put((tag, results))


def _wait_visible(directory: Path, names: set[str], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if names <= set(os.listdir(directory)):
            return True
        time.sleep(0.01)
    return False


def _race(kind: str, a: Path, b: Path, n: int, timeout: float) -> tuple[list[str], list[str]]:
    """Prepare ``n`` trials through ``a``, make sure ``b`` sees them, race one process per mount."""
    if kind == "rename":
        names = {f"s{i}" for i in range(n)}
    elif kind == "link":
        names = {f"{t}l{i}" for t in "ab" for i in range(n)}
    else:
        names = set()
    for name in names:
        (a / name).write_bytes(name.encode())
    if names and not _wait_visible(b, names, timeout):
        raise OSError(errno.ETIMEDOUT, f"prepared files not visible through {b} after {timeout:g} s")
    ctx = multiprocessing.get_context("fork")
    barrier, out = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_racer, args=(kind, str(m), t, n, barrier, out)) for m, t in ((a, "a"), (b, "b"))]
    for p in procs:
        p.start()
    got = dict(out.get(timeout=600) for _ in procs)
    for p in procs:
        p.join(60)
    return got["a"], got["b"]


def _tally(p: Probes, kind: str, a: Path, ra: list[str], rb: list[str]) -> None:
    listing = set(os.listdir(a))
    loser: Counter[str] = Counter()
    for i, (x, y) in enumerate(zip(ra, rb, strict=True)):
        both, none = x == y == "ok", x != "ok" and y != "ok"
        if not both and not none:
            loser[y if x == "ok" else x] += 1
        if kind == "rename":
            p.rename_trials += 1
            p.rename_both += both
            if f"s{i}" not in listing and f"a{i}" not in listing and f"b{i}" not in listing:
                p.rename_lost += 1
            for k, v in loser.items():
                p.rename_loser[k] = p.rename_loser.get(k, 0) + v
        elif kind == "link":
            p.link_trials += 1
            p.link_both += both
            p.link_none += none
            if none:
                loser[x] += 1
            for k, v in loser.items():
                p.link_loser[k] = p.link_loser.get(k, 0) + v
        else:
            p.excl_trials += 1
            p.excl_both += both
            if none and f"x{i}" not in listing:
                p.excl_phantom += 1
            for k, v in loser.items():
                p.excl_loser[k] = p.excl_loser.get(k, 0) + v
        loser.clear()


def _lock_probe(a: Path, b: Path) -> tuple[bool, bool]:
    """Hold flock / fcntl locks through ``a``; may another process take them through ``b``?"""
    path_a, path_b = a / "lock", b / "lock"
    path_a.write_bytes(b"")
    _wait_visible(b, {"lock"}, 10)
    results = []
    for locker in (fcntl.flock, fcntl.lockf):
        fd = os.open(path_a, os.O_RDWR)
        try:
            locker(fd, fcntl.LOCK_EX)
            ctx = multiprocessing.get_context("fork")
            out = ctx.Queue()
            proc = ctx.Process(target=_try_lock, args=(str(path_b), locker is fcntl.flock, out))
            proc.start()
            excluded = out.get(timeout=60)
            proc.join(60)
            results.append(excluded)
        finally:
            os.close(fd)
    return results[0], results[1]


def _try_lock(path: str, use_flock: bool, out: Any) -> None:
    fd = os.open(path, os.O_RDWR)
    try:
        (fcntl.flock if use_flock else fcntl.lockf)(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        out.put(False)   # acquired while the other mount holds it: no exclusion
    except OSError as e:
        out.put(e.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK))
    finally:
        os.close(fd)


def _noreplace_probe(d: Path) -> str:
    from .store import renameat2   # the library's own ctypes binding

    if renameat2 is None:
        return "no renameat2 in libc"
    # to a free name first: the VFS answers EEXIST for an existing target before the file
    # system is asked, so only a free target shows whether the file system supports the flag
    (d / "nr-src").write_bytes(b"src")
    if renameat2(-100, os.fsencode(d / "nr-src"), -100, os.fsencode(d / "nr-free"), 1) != 0:
        err = ctypes.get_errno()
        return errno.errorcode.get(err, str(err))
    (d / "nr-dst").write_bytes(b"dst")
    if renameat2(-100, os.fsencode(d / "nr-free"), -100, os.fsencode(d / "nr-dst"), 1) == 0:
        return "replaced" if (d / "nr-dst").read_bytes() == b"src" else "works"
    err = ctypes.get_errno()
    return "works" if err == errno.EEXIST else errno.errorcode.get(err, str(err))


def _visibility_probe(a: Path, b: Path, samples: int, timeout: float) -> float | None:
    worst = 0.0
    for i in range(samples):
        name = f"v{i}"
        (a / name).write_bytes(b"v")
        t0 = time.monotonic()   # from the moment the file is complete on this side
        if not _wait_visible(b, {name}, timeout):
            return None
        worst = max(worst, time.monotonic() - t0)
    return worst


def _mtime_probe(d: Path, samples: int = 5) -> tuple[float, bool]:
    worst, subsecond = 0.0, False
    for i in range(samples):
        before = time.time()
        (d / f"m{i}").write_bytes(b"m")
        after = time.time()
        st = os.stat(d / f"m{i}")
        m = st.st_mtime_ns / 1e9
        # whole-second mtimes truncate: allow one second below the bracket
        off = 0.0 if before - 1.0 <= m <= after else min(abs(m - before), abs(m - after))
        worst = max(worst, off)
        subsecond = subsecond or st.st_mtime_ns % 1_000_000_000 != 0
        time.sleep(0.013)   # land on different sub-second offsets
    return worst, subsecond


def _fsync_probe(d: Path) -> tuple[str, str]:
    def file_sync() -> None:
        fd = os.open(d / "f", os.O_CREAT | os.O_WRONLY, 0o644)
        try:
            os.write(fd, b"f")
            os.fsync(fd)
        finally:
            os.close(fd)

    def dir_sync() -> None:
        fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    return _attempt(file_sync), _attempt(dir_sync)


def mount_type(path: Path) -> str:
    """The mount type of ``path`` (MooseFS, plain ``fuse`` to the kernel, is ``fuse.mfs``)."""
    from .filesystems import file_system_type

    return file_system_type(path)


def probe(root: Path, other: Path | None = None, trials: int = 300, visibility_timeout: float = 30.0,
          progress: Callable[[str], None] | None = None) -> Probes:
    """Run every probe in a scratch directory inside ``root`` (through ``other`` too, when given)."""
    say = progress or (lambda _msg: None)
    root = Path(root)
    p = Probes(fs_type=mount_type(root), two_mounts=other is not None, visibility_timeout_s=visibility_timeout)
    if other is not None:
        p.other_fs_type = mount_type(Path(other))
    scratch = f".doctor-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    a = root / scratch
    a.mkdir()
    b = Path(other) / scratch if other is not None else a
    try:
        say("visibility")
        p.visibility_max_s = _visibility_probe(a, b, 5, visibility_timeout)
        if p.visibility_max_s is None:
            return p   # the rest would race on a directory the other side cannot see
        say("fsync, mtime, renameat2")
        p.fsync_file, p.fsync_dir = _fsync_probe(a)
        p.mtime_offset_s, p.mtime_subsecond = _mtime_probe(a)
        p.noreplace = _noreplace_probe(a)
        say("locks")
        p.flock_across, p.fcntl_across = _lock_probe(a, b)
        # races in rounds, stopping early once a round shows the property broken
        for kind, broken in (("rename", lambda: p.rename_both or p.rename_lost), ("link", lambda: p.link_both),
                             ("excl", lambda: p.excl_both)):
            done = 0
            while done < trials and not broken():
                n = min(100, trials - done)
                say(f"{kind} races {done}/{trials}")
                d = a / f"{kind}{done}"
                d.mkdir()
                db = b / d.name
                if not _wait_visible(b, {d.name}, visibility_timeout):
                    raise OSError(errno.ETIMEDOUT, f"{db} not visible after {visibility_timeout:g} s")
                ra, rb = _race(kind, d, db, n, visibility_timeout)
                _tally(p, kind, d, ra, rb)
                done += n
        return p
    finally:
        shutil.rmtree(a, ignore_errors=True)


# ---------------------------------------------------------------- the record in the root


def record(root: Path, probes: Probes, verdict: Verdict) -> None:
    """Keep the verdict in the root (atomically), for :func:`verdict_for`."""
    data = {"fs_type": probes.fs_type, "level": verdict.level, "reasons": list(verdict.reasons),
            "notes": list(verdict.notes), "probes": asdict(probes), "host": socket.gethostname(),
            "time": time.time()}
    tmp = Path(root) / f"{RECORD}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, Path(root) / RECORD)


