"""Nemeses: things that go wrong on purpose, and the mounts some of them need.

* ``kill``       SIGKILL a random producer or consumer at a random moment, restart it
                 (a new incarnation with a new client id);
* ``faults``     injected ENOSPC / EIO / EACCES / short writes inside the workers
                 (libfiu + Python boundary, see :mod:`faults`);
* ``full-disk``  the root is a small tmpfs: a genuinely full file system;
* ``power-loss`` the root is a loop-mounted xfs image, shut down without flushing
                 its log (``xfs_io -x -c shutdown``), unmounted, mounted, recovered;
* ``bad-input``  garbage dropped into target/ while consumers run;
* ``fail-at-n``  separate driver (:mod:`failn`): the Nth system call of an operation fails.

Every nemesis event is a history record with ``nemesis: true`` (``history/nemesis.jsonl``).
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Callable, Iterator, Sequence

from .history import History

ESCAPE_SECRET = b"DMQ-ESCAPE-SECRET"


def _run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=check, capture_output=True, text=True)


# ---------------------------------------------------------------- capability probes


def can_mount_tmpfs(scratch: Path) -> tuple[bool, str]:
    if os.geteuid() != 0:
        return False, "not root: cannot mount a tmpfs"
    probe = Path(scratch) / ".tmpfs-probe"
    probe.mkdir(parents=True, exist_ok=True)
    r = _run("mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(probe), check=False)
    if r.returncode != 0:
        probe.rmdir()
        return False, f"mount -t tmpfs failed: {r.stderr.strip()}"
    _run("umount", str(probe), check=False)
    probe.rmdir()
    return True, "ok"


def can_power_loss(scratch: Path) -> tuple[bool, str]:
    if os.geteuid() != 0:
        return False, "not root: cannot loop-mount"
    for tool in ("mkfs.xfs", "xfs_io"):
        if shutil.which(tool) is None:
            return False, f"{tool} not installed (Debian xfsprogs)"
    try:
        with xfs_mount(Path(scratch) / ".xfs-probe", size_mb=300) as mnt:
            (mnt / "f").write_bytes(b"x")
            r = _run("xfs_io", "-x", "-c", "shutdown", str(mnt), check=False)
            if r.returncode != 0:
                return False, f"xfs_io shutdown failed: {r.stderr.strip()}"
    except (subprocess.CalledProcessError, OSError) as exc:
        err = getattr(exc, "stderr", "") or str(exc)
        return False, f"loop-mounted xfs unavailable: {err.strip()}"
    return True, "ok"


# ---------------------------------------------------------------- mounts


@contextlib.contextmanager
def tmpfs_mount(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` at ``path``; always unmounted on exit."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    _run("mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path))
    try:
        yield path
    finally:
        _umount(path)


def _umount(path: Path) -> None:
    for _ in range(50):
        if _run("umount", str(path), check=False).returncode == 0:
            return
        time.sleep(0.1)  # a dying child may still hold a file open
    _run("umount", "-l", str(path), check=False)


@contextlib.contextmanager
def xfs_mount(base: Path, size_mb: int = 300) -> Iterator[Path]:
    """A fresh xfs file system in ``base/xfs.img`` loop-mounted at ``base/mnt``."""
    base = Path(base)
    base.mkdir(parents=True, exist_ok=True)
    img, mnt = base / "xfs.img", base / "mnt"
    mnt.mkdir(exist_ok=True)
    with open(img, "wb") as f:
        f.truncate(size_mb * 1024 * 1024)
    _run("mkfs.xfs", "-q", "-f", str(img))
    _run("mount", "-o", "loop", str(img), str(mnt))
    try:
        yield mnt
    finally:
        if is_mounted(mnt):  # os.path.ismount() says False on a shut-down xfs (EIO)
            _umount(mnt)
        img.unlink(missing_ok=True)


def is_mounted(path: Path) -> bool:
    target = os.path.abspath(path)
    with open("/proc/self/mounts") as f:
        return any(line.split()[1].replace("\\040", " ") == target for line in f)


def _task_states(pid: int) -> list[str]:
    """The scheduler state letter of every thread of ``pid`` ([] when it is gone)."""
    states = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except (FileNotFoundError, ProcessLookupError):
        return []
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                states.append(f.read().rsplit(")", 1)[1].split()[0])
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
    return states


def freeze(pids: list[int], timeout: float = 10.0) -> list[int]:
    """SIGSTOP every pid and wait until each of its threads is stopped (or it is gone).

    This is the instant of the power loss.  A real power loss also stops every process,
    so nothing they do afterwards can be observed.  Shutting xfs down under *running*
    workers is not a power loss: a call that straddles the shutdown can report success
    for work the shutdown discarded -- on Linux 6.x ``fsync()`` of a directory on a
    shut-down xfs returns 0 once the shutdown has unpinned its inode, although the
    rename it was to make durable is gone (tests/test_power_loss.py, issue 6).  Waiting
    for state ``T`` means no system call is in flight either: everything a worker saw
    return happened before the shutdown.  Returns the pids that did not stop in time."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGSTOP)
        except ProcessLookupError:
            pass
    end = time.monotonic() + timeout
    pending = list(pids)
    while pending and time.monotonic() < end:
        pending = [p for p in pending if any(s not in "TtZX" for s in _task_states(p))]
        if pending:
            time.sleep(0.002)
    return pending


def shutdown_xfs(mnt: Path) -> None:
    """``xfs_io -x -c shutdown`` without ``-f``: the log is NOT flushed first, so every
    metadata change not yet forced to the on-disk log by an fsync/syncfs is discarded."""
    _run("xfs_io", "-x", "-c", "shutdown", str(mnt))


def power_cycle(mnt: Path, img: Path, pids: Sequence[int] = ()) -> list[int]:
    """Power loss: freeze ``pids``, shut the file system down without flushing its log,
    SIGKILL the frozen processes, unmount, mount again.  Returns pids that would not stop."""
    stuck = freeze(list(pids))
    shutdown_xfs(mnt)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    remount(mnt, img)
    return stuck


def remount(mnt: Path, img: Path) -> None:
    """Unmount ``mnt`` (waiting for dying processes to let go of it) and mount ``img`` there again."""
    _umount(mnt)
    _run("mount", "-o", "loop", str(img), str(mnt))


# ---------------------------------------------------------------- kill


class KillNemesis(threading.Thread):
    """Every ``interval`` (jittered), SIGKILL one random live worker; the cluster restarts it."""

    def __init__(self, cluster, hist: History, interval: float, until: float, seed: int):
        super().__init__(daemon=True)
        self.cluster, self.hist, self.interval, self.until = cluster, hist, interval, until
        self.rng = random.Random(seed)
        self.stop = threading.Event()
        self.kills = 0

    def run(self) -> None:
        try:
            while not self.stop.wait(self.rng.uniform(0.3, 1.7) * self.interval):
                if time.time() >= self.until:
                    return
                if self.cluster.kill_random(self.rng, self.hist, restart=True):
                    self.kills += 1
        except Exception as exc:  # noqa: BLE001 - a nemesis crash must show in the report
            self.hist.record("info", "nemesis-error", nemesis=True, detail=f"kill: {exc!r}")


# ---------------------------------------------------------------- full disk janitor


class Janitor(threading.Thread):
    """Housekeeping on a full disk: PURGE processed/ (acknowledged messages) now and then,
    recording which values were purged (the checker reads them back as processed)."""

    def __init__(self, box_dir: Path, hist: History, interval: float = 0.2):
        super().__init__(daemon=True)
        self.processed = Path(box_dir) / "processed"
        self.hist, self.interval = hist, interval
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(self.interval):
            self.sweep()

    def sweep(self) -> None:
        try:
            names = os.listdir(self.processed)
        except FileNotFoundError:
            return
        purged = []
        for n in names:
            try:
                os.unlink(self.processed / n)
                purged.append(n)
            except OSError:
                pass
        if purged:
            self.hist.record("info", "purge", names=purged, nemesis=False)


# ---------------------------------------------------------------- bad input


class BadInput(threading.Thread):
    """Drop hostile entries into target/ while consumers run.

    Kinds: garbage names and bodies, invalid UTF-8 names, 255-byte names, dot
    names, empty and torn files with valid-looking names, symlinks (to a secret
    file outside the root, to /etc/passwd, to a directory, dangling, to itself),
    FIFOs, directories, and immutable (``chattr +i``) files.
    """

    KINDS = ("garbage", "bad-utf8", "overlong", "dot", "empty", "torn", "symlink-out", "symlink-etc",
             "symlink-dir", "symlink-dangling", "symlink-loop", "fifo", "directory", "immutable")

    def __init__(self, target: Path, outside: Path, hist: History, interval: float, until: float, seed: int):
        super().__init__(daemon=True)
        self.target, self.outside = Path(target), Path(outside)
        self.hist, self.interval, self.until = hist, interval, until
        self.rng = random.Random(seed)
        self.stop = threading.Event()
        self.immutable: list[Path] = []
        self.n = 0
        self.skipped: dict[str, str] = {}
        self.outside.mkdir(parents=True, exist_ok=True)
        self.secret = self.outside / "secret.txt"
        self.secret.write_bytes(ESCAPE_SECRET + b" must never be delivered\n")
        (self.outside / "secret-dir").mkdir(exist_ok=True)
        (self.outside / "secret-dir" / "inner").write_bytes(ESCAPE_SECRET)

    def run(self) -> None:
        kinds = list(self.KINDS)
        try:
            while not self.stop.wait(self.rng.uniform(0.5, 1.5) * self.interval):
                if time.time() >= self.until:
                    return
                self.drop(kinds[self.n % len(kinds)])
        except Exception as exc:  # noqa: BLE001
            self.hist.record("info", "nemesis-error", nemesis=True, detail=f"bad-input: {exc!r}")

    def _new_name(self) -> str:
        self.n += 1
        return f"4.{int(time.time() * 1000)}{self.n % 1000:03d}-{self.rng.randrange(10**10):010d}.B"

    def drop(self, kind: str) -> None:
        t = self.target
        name = self._new_name()
        try:
            if kind == "garbage":
                name = "".join(self.rng.choice("abcXYZ%~&=+-_.,;!") for _ in range(self.rng.randint(1, 60)))
                name = name.lstrip(".") or "g"
                (t / name).write_bytes(os.urandom(self.rng.randint(0, 4096)))
            elif kind == "bad-utf8":
                raw = b"4.bad\xff\xfe\xc3(" + str(self.n).encode() + b".B"
                fd = os.open(os.fsencode(t) + b"/" + raw, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                os.write(fd, b"\xff\xfe invalid utf-8 body \xc3(")
                os.close(fd)
                name = raw.decode("utf-8", "surrogateescape")
            elif kind == "overlong":
                name = ("4.%d-%010d.B." % (int(time.time() * 1000), self.n)).ljust(255, "x")
                (t / name).write_bytes(b"overlong name")
            elif kind == "dot":
                name = f".dot-{self.n}"
                (t / name).write_bytes(b"dot file: never listed")
            elif kind == "empty":
                (t / name).write_bytes(b"")
            elif kind == "torn":
                (t / name).write_bytes(b"torn-message|4096|" + b"\0" * self.rng.randint(0, 100))
            elif kind == "symlink-out":
                os.symlink(self.secret, t / name)
            elif kind == "symlink-etc":
                os.symlink("/etc/passwd", t / name)
            elif kind == "symlink-dir":
                os.symlink(self.outside / "secret-dir", t / name)
            elif kind == "symlink-dangling":
                os.symlink(self.outside / "does-not-exist", t / name)
            elif kind == "symlink-loop":
                os.symlink(name, t / name)
            elif kind == "fifo":
                os.mkfifo(t / name)
            elif kind == "directory":
                (t / name).mkdir()
                (t / name / "inner").write_bytes(b"inside a directory")
            elif kind == "immutable":
                (t / name).write_bytes(b"immutable foreign message")
                r = _run("chattr", "+i", str(t / name), check=False)
                if r.returncode != 0 and not (t / name).exists():
                    kind = "immutable-raced"  # a consumer took it before chattr: harmless
                elif r.returncode != 0:
                    self.skipped["immutable"] = r.stderr.strip() or "chattr failed"
                    kind = "immutable-unsupported"
                else:
                    self.immutable.append(t / name)
        except OSError as exc:
            self.hist.record("info", "inject", kind=kind, name=name, err=str(exc), nemesis=True)
            return
        self.hist.record("info", "inject", kind=kind, name=name, nemesis=True, detail=kind)

    def check_outside(self) -> list[str]:
        """Escapes: anything outside the root changed or moved?"""
        problems = []
        if self.secret.read_bytes()[: len(ESCAPE_SECRET)] != ESCAPE_SECRET:
            problems.append("secret file outside the root was modified")
        if not (self.outside / "secret-dir" / "inner").exists():
            problems.append("file inside an out-of-root directory disappeared")
        return problems

    def release_immutable(self, root: Path) -> None:
        """``chattr -i`` everything immutable under ``root`` (they may have moved)."""
        for dirpath, dirnames, filenames in os.walk(root):
            for n in filenames + dirnames:
                p = os.path.join(dirpath, n)
                if not os.path.islink(p) and os.path.isfile(p):
                    _run("chattr", "-i", p, check=False)


def kill_all(procs: list, hist: History | None, reason: str) -> None:
    for spec, proc in procs:
        if proc.is_alive():
            try:
                os.kill(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.join()
            if hist is not None:
                hist.record("info", "kill", victim=spec.name, nemesis=True, detail=reason)


def call_quietly(fn: Callable[[], object]) -> None:
    try:
        fn()
    except Exception:  # noqa: BLE001
        pass
