"""The I/O shell: the only module that creates, renames, reads or deletes message files.  A move
is named by its ``Move``, the lifecycle table decides its directories: callers think in moves, not
paths.  Durability: PROTOCOL.md §6."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import stat
import sys
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterable, TypeVar

from .errors import StoreError, store_error
from .lifecycle import IllegalMove, Move, State, next_state

__all__ = ["REGISTER", "renameat2", "noreplace_supported", "rename_noreplace", "fsync_dir", "Dropbox",
           "NotARegularFile", "open_regular", "read_regular_file", "RECORD_LIMIT", "read_record", "write_all",
           "is_real_dir", "sync_many"]

_T = TypeVar("_T")

#: the claim register's directory (claims.py), beside the six state directories of a dropbox
REGISTER = ".claims"

_O_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_O_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_AT_FDCWD = -100
_CREATED = next_state(State.ABSENT, Move.CREATE)  # where Dropbox.create() puts a file: the table's, read once
# the process's own symbols, libc's among them (find_library would run ldconfig in a subprocess)
_libc = ctypes.CDLL(None, use_errno=True)
# renameat2(int, const char *, int, const char *, unsigned int): ctypes passes ints and bytes as
# such without argtypes (declaring them costs a conversion a call, two calls a message)
renameat2: Any = getattr(_libc, "renameat2", None)
noreplace_supported = renameat2 is not None
_FS_ENCODING, _FS_ERRORS = sys.getfilesystemencoding(), sys.getfilesystemencodeerrors()


def rename_noreplace(src: str, dst: str, src_dir_fd: int = _AT_FDCWD, dst_dir_fd: int = _AT_FDCWD,
                     shared: bool = False) -> None:
    """Atomically rename ``src`` to ``dst`` (names in the directory fds); FileExistsError if ``dst``
    exists.  ``shared``: others may move the same source at once (one succeeds, the others get
    FileNotFoundError).  Without renameat2: netfs.py (``shared``: never link()+unlink())."""
    global noreplace_supported
    if noreplace_supported:  # (str.encode: os.fsencode without its Python-level checks)
        if renameat2(src_dir_fd, src.encode(_FS_ENCODING, _FS_ERRORS), dst_dir_fd,
                     dst.encode(_FS_ENCODING, _FS_ERRORS), 1) == 0:  # 1: RENAME_NOREPLACE
            return
        err = ctypes.get_errno()
        if err not in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):
            raise OSError(err, os.strerror(err), src, None, dst)
        noreplace_supported = False  # every network file system measured answers EINVAL (issue 28)
    from . import netfs  # (no renameat2 here: a network file system)

    rename = netfs.checked_rename if shared else netfs.link_rename
    rename(src, dst, src_dir_fd, dst_dir_fd)


def fsync_dir(path: str) -> None:
    """Make the renames into (and unlinks from) directory ``path`` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Dropbox:
    """One directory holding the six state directories (a queue's ``incoming/``, a topic's
    ``.incoming/`` or one subscription)."""

    def __init__(self, path: Path | str, root: Path | str | None = None):
        self.path = Path(path)
        self.root = None if root is None else Path(root)  # known: making.ensure_dropbox makes nothing through a symlink
        self._dirs = {s: os.path.join(self.path, s.value) for s in State if s.value is not None}
        self._plain: set[State] = set()  # state directories seen to be no symlink
        self._fds: dict[State, int] | None = None  # hold_dirs(): state -> fd ({}: not open yet)

    def _check_plain(self, state: State) -> None:
        """Before the first write into a state directory: a symlink there (or for the dropbox
        itself) could lead out of the root, so nothing is written through it."""
        for path in (self.path, self._dirs[state]):
            try:
                if not stat.S_ISDIR(os.lstat(path).st_mode):
                    raise StoreError(f"{path} is a symlink or no directory: the library neither reads "
                                     "nor writes through it")
            except FileNotFoundError:
                return  # not there (yet): the move itself says so
        self._plain.add(state)

    def __repr__(self) -> str:
        return f"Dropbox({str(self.path)!r})"

    # --- held directories (a long-lived consumer's dropbox)
    def hold_dirs(self) -> "Dropbox":
        """Open the state directories until :meth:`close`: files are then named in them (no path
        walk); now, so fail-at-N counts the same calls from the first claim on."""
        self._fds = {}
        self._held()
        return self

    def close(self) -> None:
        """Close the held directories; later calls walk the path again."""
        fds, self._fds = self._fds, None
        for fd in (fds or {}).values():
            with contextlib.suppress(OSError):
                os.close(fd)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_fds": None if self._fds is None else {}}  # fds stay in this process

    def _held(self) -> dict[State, int] | None:
        """Open the held directories (``_fds`` is {} till then); None when one cannot be opened (a
        missing directory: the path-based call says what is wrong), tried again at the next use."""
        fds: dict[State, int] = {}
        try:
            for state, path in self._dirs.items():
                fds[state] = os.open(path, _O_DIR)
        except OSError:
            for fd in fds.values():
                os.close(fd)
            return None
        self._fds = fds
        return fds

    def _went_away(self, *states: State) -> bool:
        """Is one of these held directories no longer the one at its path (removed, or moved aside
        and made again)?  Then all are opened again at the next use.  Asked when a name was not found."""
        fds = self._fds
        if not fds:
            return False
        for state in states:
            try:
                gone = not os.path.samestat(os.fstat(fds[state]), os.lstat(self._dirs[state]))
            except OSError:
                gone = True
            if gone:
                self.close()
                self._fds = {}
                return True
        return False

    # --- layout (made by making.ensure_dropbox)
    def exists(self) -> bool:
        """All six state directories are real directories (a symlink could lead out of the root)."""
        return is_real_dir(self.path) and all(is_real_dir(d) for d in self._dirs.values())

    def dir(self, state: State) -> str:
        return self._dirs[state]

    def file(self, state: State, name: str) -> str:
        return f"{self._dirs[state]}/{name}"  # a name never holds "/": no os.path.join needed

    def lock_working(self) -> int:
        """A shared flock on working/, held by a producer from CREATE to SEND: the orphan sweep
        (recovery.py) takes it exclusive without waiting, so it never takes a live producer's file
        for an orphan.  The fd to close; -1 without working/ (the CREATE fails on its own)."""
        try:
            fd = os.open(self._dirs[State.NOT_COMMITTED], os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            return -1
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
        except BaseException:
            os.close(fd)
            raise
        return fd

    # --- listing
    def list(self, state: State) -> list[str]:
        """One directory listing; dot-files are foreign work in progress and never listed.  A
        symlinked state directory lists as empty: nothing outside the root is claimed through it."""
        path = self._dirs[state]
        try:  # (lstat, not an open(O_NOFOLLOW): the fault-injection runs count opens per operation)
            if not stat.S_ISDIR(os.lstat(path).st_mode):
                return []
            return [n for n in os.listdir(path) if not n.startswith(".")]
        except (FileNotFoundError, NotADirectoryError):
            return []

    def register_inodes(self) -> frozenset[int]:
        """The inodes the claim register (claims.py) has an entry for: read only when not empty."""
        try:
            return frozenset(int(n) for n in os.listdir(self.path / REGISTER) if n.isdigit())
        except (FileNotFoundError, NotADirectoryError):
            return frozenset()

    # --- CREATE: ABSENT -> NOT_COMMITTED
    def create(self, name: str, body: bytes | BinaryIO, durable: bool) -> None:
        """Create ``working/<name>`` exclusively, write it fully (``body`` may be an open regular file,
        copied in chunks), fsync it when durable; on any failure the partial file is removed."""
        if _CREATED not in self._plain:  # (codec.to_wire made the name: 255 bytes at most)
            self._check_plain(_CREATED)
        try:
            fd = self._at(_CREATED, name, _open_exclusive)
        except OSError as exc:
            raise store_error("create", self.file(_CREATED, name), exc) from exc
        try:
            if isinstance(body, (bytes, bytearray, memoryview)):
                write_all(fd, body)
            else:
                offset = 0  # pread: the source's own offset is untouched
                while chunk := os.pread(body.fileno(), _COPY_CHUNK, offset):
                    write_all(fd, chunk)
                    offset += len(chunk)
            if durable:
                os.fsync(fd)
        except OSError as exc:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(path := self.file(_CREATED, name))
            raise store_error("write", path, exc) from exc
        os.close(fd)

    # --- every rename of the table
    def move(self, move: Move, source: State, name: str, new_name: str | None = None) -> bool:
        """Execute ``move`` on ``source/<name>`` (to ``<dest>/<new_name or name>``); False when the
        source is gone (a lost race).  A name taken at the destination: ``collisions.py``."""
        destination = next_state(source, move)
        if source is State.ABSENT:
            raise IllegalMove(f"{move.name} from ABSENT is Dropbox.create(), not a rename")
        plain = self._plain
        if source not in plain:
            self._check_plain(source)
        if destination is State.ABSENT:
            src = self.file(source, name)
            try:
                os.unlink(src)
            except FileNotFoundError:
                return False
            except OSError as exc:
                raise store_error("delete", src, exc) from exc
            return True
        if destination not in plain:
            self._check_plain(destination)
        dst_name = new_name or name
        # without renameat2 the fallback goes by path (as the fault harness counts it)
        fds = (self._fds or self._held()) if noreplace_supported and self._fds is not None else None
        # out of target/ and processing/ others may move the same file: the rename must be exclusive
        shared = source is not State.NOT_COMMITTED
        try:
            if fds is None:
                rename_noreplace(self.file(source, name), self.file(destination, dst_name), shared=shared)
            else:
                rename_noreplace(name, dst_name, fds[source], fds[destination], shared)
        except FileNotFoundError:
            if self._went_away(source, destination):
                return self.move(move, source, name, new_name)
            return False
        except FileExistsError:
            from . import collisions  # (a name taken where the message goes: rare)

            return collisions.taken(self, move, self.file(source, name), destination, dst_name,
                                    lambda src, dst: rename_noreplace(src, dst, shared=shared))
        except OSError as exc:
            raise store_error(move.name.lower(), self.file(source, name), exc) from exc
        return True

    # --- reading
    def open_body(self, state: State, name: str) -> BinaryIO:
        """A message body as an open binary file (it stays readable after the message moves on)."""
        return os.fdopen(self._at(state, name, lambda where, dir_fd: open_regular(where, dir_fd=dir_fd)), "rb")

    def read(self, state: State, name: str) -> bytes:
        """A message body; NotARegularFile for anything else (quarantined, never delivered)."""
        return self._at(state, name, read_regular_file)

    def _at(self, state: State, name: str, call: Callable[[str, int], _T]) -> _T:
        """``call(name, fd of state/)`` when held, else (or when it went away) ``call(path, AT_FDCWD)``."""
        if self._fds is not None and (fds := self._fds or self._held()) is not None:
            try:
                return call(name, fds[state])
            except FileNotFoundError:
                if not self._went_away(state):
                    raise
        return call(self.file(state, name), _AT_FDCWD)


_COPY_CHUNK = 1 << 20


def write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    view = memoryview(data)
    while view:  # short writes happen (signals, nearly full disks)
        view = view[os.write(fd, view):]


def _open_exclusive(path: str, dir_fd: int) -> int:
    """open(O_CREAT|O_EXCL); a refusal is judged by ``netfs.open_refused`` (a network file
    system's EEXIST may be a phantom, its EPERM the EEXIST it means)."""
    try:
        return os.open(path, _O_CREATE, 0o644, dir_fd=dir_fd)
    except (FileExistsError, PermissionError) as exc:
        from . import netfs

        return netfs.open_refused(path, dir_fd, _O_CREATE, exc)


class NotARegularFile(OSError):
    """A symlink, FIFO, device or directory where a message file should be."""


def open_regular(path: str | Path, flags: int = os.O_RDONLY, mode: int = 0o644, dir_fd: int = _AT_FDCWD) -> int:
    """Open a file the library expects to be its own regular file (``dir_fd``: ``path`` is a name
    in it): never following a symlink, never blocking (a FIFO opens at once instead of waiting
    for a writer), checked with fstat.  NotARegularFile for anything else."""
    return _open_regular_stat(path, flags, mode, dir_fd)[0]


def _open_regular_stat(path: str | Path, flags: int, mode: int, dir_fd: int) -> tuple[int, os.stat_result]:
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO, errno.ENOTDIR):
            raise NotARegularFile(errno.EINVAL, "not a regular file", str(path)) from exc
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotARegularFile(errno.EINVAL, "not a regular file", str(path))
        if flags:  # opened to write (O_NONBLOCK means nothing to a regular file's reads)
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def read_regular_file(path: str | Path, dir_fd: int = _AT_FDCWD) -> bytes:
    """The whole content of a regular file (see :func:`open_regular`): one read() of the size
    fstat reported and a byte more, which comes back short (the end) unless the file is over
    1 GiB or grew since (then on to the end)."""
    fd, st = _open_regular_stat(path, os.O_RDONLY, 0, dir_fd)
    try:
        data = os.read(fd, min(st.st_size + 1, 1 << 30))
        if len(data) == st.st_size:  # the usual case
            return data
        chunks = [data]
        while chunks[-1]:
            chunks.append(os.read(fd, _COPY_CHUNK))
        return b"".join(chunks)
    finally:
        os.close(fd)


#: the most of a record (doctor's verdict, subscription, claim register entry, hold) read: ours
#: are a few hundred bytes; a hostile root's huge file must not be read whole at each look
RECORD_LIMIT = 1 << 20


def read_record(path: str | Path) -> bytes:
    """A small regular file's content (see :func:`open_regular`); ValueError past RECORD_LIMIT."""
    with os.fdopen(open_regular(path), "rb") as f:
        if len(data := f.read(RECORD_LIMIT + 1)) > RECORD_LIMIT:
            raise ValueError(f"{path}: longer than {RECORD_LIMIT} bytes: no record of ours")
    return data


def is_real_dir(path: str | Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def sync_many(boxes: Iterable[tuple[Dropbox, State]]) -> None:
    """Make renames into the given state directories durable: fsync each distinct directory once;
    past two (a fan-out, a transaction over many dropboxes), ``groupsync.sync_by_method``."""
    dirs = list({box.dir(state): None for box, state in boxes})  # (not fromkeys(generator): a call a message)
    if len(dirs) > 2:
        from .groupsync import sync_by_method

        sync_by_method(dirs[0], dirs)
        return
    for d in dirs:
        try:
            fsync_dir(d)
        except FileNotFoundError:  # gone meanwhile, with its subscription
            pass
