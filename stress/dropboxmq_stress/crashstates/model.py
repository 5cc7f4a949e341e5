"""The pure core of the crash-state explorer: a recorded operation as a list of file-system
operations on inodes, a persistence model, and every crash state the model allows.

Nothing here touches the disk.  A trace starts from a *baseline* (the tree as it was when
recording began, taken as durable) and lists what the operation did, in issue order:

    Create(parent, name, ino, is_dir)   creat / open(O_CREAT) / mkdir: a new entry
    Link(src_parent, src_name, parent, name, ino)
    Unlink(parent, name, ino)           unlink / rmdir
    Rename(src_parent, src_name, dst_parent, dst_name, ino)   rename / renameat2
    Write(ino, offset, data), Truncate(ino, size)
    Fsync(ino)                          fsync / fdatasync of a file or a directory
    SyncAll()                           sync / syncfs
    Mark(label, keys)                   not a system call: a library call returned to its caller

A crash after the first ``k`` operations leaves a state made of the operations a barrier made
durable, plus any subset of the others that the model lets persist without them (see
``MODELS``).  ``crash_states`` enumerates them, bounded by ``Bounds`` (documented there).
"""

from __future__ import annotations

import hashlib
import itertools
from dataclasses import dataclass, field
from typing import Iterator, Union

__all__ = [
    "Create", "Link", "Unlink", "Rename", "Write", "Truncate", "Fsync", "SyncAll", "Mark", "Op",
    "Baseline", "Trace", "Model", "MODELS", "Bounds", "CrashState", "crash_states", "materialise",
    "tree_digest", "describe", "hard_links",
]


@dataclass(frozen=True)
class Create:
    parent: int
    name: str
    ino: int
    is_dir: bool
    call: str = field(default="", compare=False)


@dataclass(frozen=True)
class Link:
    src_parent: int
    src_name: str
    parent: int
    name: str
    ino: int
    call: str = field(default="", compare=False)


@dataclass(frozen=True)
class Unlink:
    parent: int
    name: str
    ino: int
    call: str = field(default="", compare=False)


@dataclass(frozen=True)
class Rename:
    src_parent: int
    src_name: str
    dst_parent: int
    dst_name: str
    ino: int
    call: str = field(default="", compare=False)


@dataclass(frozen=True)
class Write:
    ino: int
    offset: int
    data: bytes
    call: str = field(default="", compare=False)


@dataclass(frozen=True)
class Truncate:
    ino: int
    size: int
    call: str = field(default="", compare=False)


@dataclass(frozen=True)
class Fsync:
    ino: int
    call: str = field(default="", compare=False)


@dataclass(frozen=True)
class SyncAll:
    call: str = field(default="", compare=False)


@dataclass(frozen=True)
class Mark:
    label: str
    keys: tuple[str, ...] = ()
    call: str = field(default="", compare=False)


Op = Union[Create, Link, Unlink, Rename, Write, Truncate, Fsync, SyncAll, Mark]
EntryOp = (Create, Link, Unlink, Rename)
DataOp = (Write, Truncate)


@dataclass
class Baseline:
    """The durable tree when recording began: directory inode -> {name: inode}, file inode -> bytes."""

    root: int
    dirs: dict[int, dict[str, int]]
    files: dict[int, bytes]


@dataclass
class Trace:
    baseline: Baseline
    ops: list[Op]


# ---------------------------------------------------------------- persistence models


@dataclass(frozen=True)
class Model:
    """What a crash may leave.  ``name``: how reports call it.

    ``ordered_metadata``: every directory operation persists in issue order (a journal), so
    a persisted entry op implies every earlier one; else only ops on a common directory
    entry (name) are ordered.  ``fsync_commits_metadata``: an fsync of anything makes every
    earlier directory operation durable (ext4's journal commit, xfs's log force), else an
    fsync of a directory covers only the entries of that directory."""

    name: str
    ordered_metadata: bool
    fsync_commits_metadata: bool


MODELS: dict[str, Model] = {
    # ALICE's abstract persistence model (Pillai et al., OSDI 2014), weaker than any real
    # file system here: its crash states include those of ext4 and xfs.
    "abstract": Model("abstract", ordered_metadata=False, fsync_commits_metadata=False),
    # ext4 data=ordered and xfs as they behave: one ordered journal/log for metadata, data
    # written back on its own (delayed allocation) unless fsynced.
    "journaled": Model("journaled", ordered_metadata=True, fsync_commits_metadata=True),
}


@dataclass(frozen=True)
class Bounds:
    """How far the enumeration goes at each crash point.

    ``full_subsets``: up to this many unsynced directory operations, every subset the model
    allows is tried; past it, every subset that keeps at most ``few`` of them (and what they
    depend on) and every subset that drops at most ``few`` (and what depends on them).
    A file's unsynced writes persist as an in-order prefix of them, the last one possibly
    torn (its first half, or its length as zeros); ``full_data`` bounds the product of those
    choices over the files reachable in the state, past which the files vary one at a time.
    ``max_states``: hard cap of distinct states per operation (reported when hit)."""

    full_subsets: int = 8
    few: int = 1
    full_data: int = 64
    max_states: int = 4000


@dataclass(frozen=True)
class CrashState:
    """One state a crash may leave: after ``prefix`` ops, with ``lost`` of them not persisted
    (indices) and ``data`` naming which version of each file's unsynced data persisted."""

    prefix: int
    lost: tuple[int, ...]
    data: tuple[tuple[int, str], ...]  # (inode, version label) where not all its writes persisted
    tree: dict[str, bytes | None]  # path -> content (None: a directory)
    marks: tuple[Mark, ...]
    links: tuple[tuple[str, ...], ...] = ()  # paths that name one file (a link()+unlink() rename cut short)


def _entry_keys(op: Op) -> tuple[tuple[int, str], ...]:
    if isinstance(op, (Create, Unlink)):
        return ((op.parent, op.name),)
    if isinstance(op, Link):
        return ((op.src_parent, op.src_name), (op.parent, op.name))
    if isinstance(op, Rename):
        return ((op.src_parent, op.src_name), (op.dst_parent, op.dst_name))
    return ()


def _entry_dirs(op: Op) -> tuple[int, ...]:
    if isinstance(op, (Create, Unlink)):
        return (op.parent,)
    if isinstance(op, Link):
        return (op.parent,)
    if isinstance(op, Rename):
        return (op.src_parent, op.dst_parent)
    return ()


class _Analysis:
    """Dependencies and barriers of one trace under one model, computed once."""

    def __init__(self, trace: Trace, model: Model):
        self.ops = trace.ops
        self.model = model
        self.dirs = set(trace.baseline.dirs) | {op.ino for op in self.ops if isinstance(op, Create) and op.is_dir}
        n = len(self.ops)
        # deps[i]: earlier entry ops that must persist if op i does (transitively closed)
        self.deps: list[frozenset[int]] = [frozenset()] * n
        last_on_key: dict[tuple[int, str], list[int]] = {}
        entry_ops: list[int] = []
        for i, op in enumerate(self.ops):
            if not isinstance(op, EntryOp):
                continue
            direct: set[int] = set()
            if model.ordered_metadata:
                direct.update(entry_ops)
            for key in _entry_keys(op):
                direct.update(last_on_key.get(key, ()))
            closed = set(direct)
            for j in direct:
                closed |= self.deps[j]
            self.deps[i] = frozenset(closed)
            for key in _entry_keys(op):
                last_on_key.setdefault(key, []).append(i)
            entry_ops.append(i)

    def durable_before(self, k: int) -> set[int]:
        """The ops among the first ``k`` that a later barrier (also before ``k``) made durable."""
        sure: set[int] = set()
        for j in range(k):
            op = self.ops[j]
            if isinstance(op, SyncAll):
                sure.update(range(j))
            elif isinstance(op, Fsync):
                is_dir = op.ino in self.dirs
                for i in range(j):
                    earlier = self.ops[i]
                    if isinstance(earlier, DataOp) and earlier.ino == op.ino:
                        sure.add(i)
                    elif isinstance(earlier, EntryOp) and (
                            self.model.fsync_commits_metadata or (is_dir and op.ino in _entry_dirs(earlier))):
                        sure.add(i)
        for i in list(sure):
            sure |= self.deps[i]
        return sure


def _data_ino(op: Op) -> int | None:
    return op.ino if isinstance(op, (Write, Truncate)) else None


def _closed(keep: set[int], deps: list[frozenset[int]], pending: set[int]) -> frozenset[int]:
    out = set(keep)
    for i in keep:
        out |= deps[i] & pending
    return frozenset(out)


def _entry_subsets(pending: list[int], deps: list[frozenset[int]], bounds: Bounds) -> list[frozenset[int]]:
    """The subsets of the pending entry ops that may persist (closed under dependencies)."""
    pset = set(pending)
    subsets: set[frozenset[int]] = set()
    if len(pending) <= bounds.full_subsets:
        for r in range(len(pending) + 1):
            for combo in itertools.combinations(pending, r):
                keep = set(combo)
                if all(deps[i] & pset <= keep for i in keep):
                    subsets.add(frozenset(keep))
        return sorted(subsets, key=lambda s: (len(s), sorted(s)))
    dependants = {i: {j for j in pending if i in deps[j]} for i in pending}
    for r in range(bounds.few + 1):
        for combo in itertools.combinations(pending, r):
            subsets.add(_closed(set(combo), deps, pset))
            dropped = set(combo)
            for i in combo:
                dropped |= dependants[i]
            subsets.add(frozenset(pset - dropped))
    return sorted(subsets, key=lambda s: (len(s), sorted(s)))


def _apply_data(content: bytearray, op: Op) -> None:
    if isinstance(op, Write):
        end = op.offset + len(op.data)
        if len(content) < op.offset:
            content.extend(b"\0" * (op.offset - len(content)))
        content[op.offset:end] = op.data
    elif isinstance(op, Truncate):
        del content[op.size:]
        if len(content) < op.size:
            content.extend(b"\0" * (op.size - len(content)))


def _data_versions(base: bytes, durable: list[Op], pending: list[Op]) -> list[tuple[str, bytes]]:
    """The contents a file may have: its durable writes, then an in-order prefix of the
    pending ones, the last possibly torn (half its bytes, or its length as zeros).
    The first version is "all persisted"."""
    content = bytearray(base)
    for op in durable:
        _apply_data(content, op)
    versions = [("none", bytes(content))]
    for t, op in enumerate(pending, 1):
        before = bytes(content)
        _apply_data(content, op)
        if isinstance(op, Write) and len(op.data) > 1:
            half = bytearray(before)
            _apply_data(half, Write(op.ino, op.offset, op.data[: len(op.data) // 2]))
            versions.append((f"{t - 1}+half", bytes(half)))
            if op.offset + len(op.data) > len(before):  # an append: its size may persist before its data
                zeros = bytearray(before)
                _apply_data(zeros, Write(op.ino, op.offset, b"\0" * len(op.data)))
                versions.append((f"{t - 1}+zeros", bytes(zeros)))
        versions.append((str(t), bytes(content)))
    seen: dict[bytes, str] = {}
    for label, data in versions:
        seen.setdefault(data, label)
    ordered = [(label, data) for data, label in seen.items()]
    ordered.sort(key=lambda v: v[1] != bytes(content))  # all persisted first
    return ordered


def _walk(root: int, dirs: dict[int, dict[str, int]], files: dict[int, bytes]) -> tuple[dict[str, int], set[int]]:
    """path -> inode of everything reachable from ``root``; and the reachable file inodes."""
    paths: dict[str, int] = {}
    reachable: set[int] = set()
    stack = [("", root)]
    seen = {root}
    while stack:
        prefix, d = stack.pop()
        for name, ino in dirs.get(d, {}).items():
            path = f"{prefix}{name}"
            paths[path] = ino
            if ino in dirs:
                if ino not in seen:
                    seen.add(ino)
                    stack.append((path + "/", ino))
            else:
                reachable.add(ino)
    return paths, reachable


def _apply_entries(baseline: Baseline, ops: list[Op], chosen: list[int]) -> dict[int, dict[str, int]]:
    dirs = {d: dict(entries) for d, entries in baseline.dirs.items()}
    for i in chosen:
        op = ops[i]
        if isinstance(op, Create):
            dirs.setdefault(op.parent, {})[op.name] = op.ino
            if op.is_dir:
                dirs.setdefault(op.ino, {})
        elif isinstance(op, Link):
            dirs.setdefault(op.parent, {})[op.name] = op.ino
        elif isinstance(op, Unlink):
            if dirs.get(op.parent, {}).get(op.name) == op.ino:
                del dirs[op.parent][op.name]
        elif isinstance(op, Rename):
            src = dirs.get(op.src_parent, {})
            if src.get(op.src_name) == op.ino:
                del src[op.src_name]
            dirs.setdefault(op.dst_parent, {})[op.dst_name] = op.ino
    return dirs


def materialise(root: int, dirs: dict[int, dict[str, int]], contents: dict[int, bytes]) -> dict[str, bytes | None]:
    paths, _ = _walk(root, dirs, contents)
    return {p: (None if ino in dirs else contents.get(ino, b"")) for p, ino in paths.items()}


def hard_links(root: int, dirs: dict[int, dict[str, int]]) -> tuple[tuple[str, ...], ...]:
    """The groups of paths that name one file (more than one name each)."""
    paths, _ = _walk(root, dirs, {})
    by_inode: dict[int, list[str]] = {}
    for p, ino in paths.items():
        if ino not in dirs:
            by_inode.setdefault(ino, []).append(p)
    return tuple(sorted(tuple(sorted(group)) for group in by_inode.values() if len(group) > 1))


def tree_digest(tree: dict[str, bytes | None]) -> str:
    h = hashlib.sha256()
    for path in sorted(tree):
        content = tree[path]
        h.update(path.encode("utf-8", "surrogateescape") + b"\0")
        h.update(b"D" if content is None else b"F" + hashlib.sha256(content).digest())
    return h.hexdigest()


def crash_states(trace: Trace, model: Model = MODELS["abstract"], bounds: Bounds = Bounds()
                 ) -> Iterator[CrashState]:
    """Every distinct crash state of ``trace`` under ``model`` within ``bounds`` (distinct:
    the same tree with the same calls returned is yielded once)."""
    analysis = _Analysis(trace, model)
    ops = trace.ops
    base = trace.baseline
    seen: set[tuple[str, tuple[Mark, ...]]] = set()
    count = 0
    for k in range(len(ops) + 1):
        marks = tuple(op for op in ops[:k] if isinstance(op, Mark))
        sure = analysis.durable_before(k)
        pending_entries = [i for i in range(k) if isinstance(ops[i], EntryOp) and i not in sure]
        data_versions: dict[int, list[tuple[str, bytes]]] = {}  # per file, for this crash point
        for keep in _entry_subsets(pending_entries, analysis.deps, bounds):
            chosen = sorted((sure & {i for i in range(k) if isinstance(ops[i], EntryOp)}) | keep)
            dirs = _apply_entries(base, ops, chosen)
            _, reachable = _walk(base.root, dirs, {})
            per_file: list[tuple[int, list[tuple[str, bytes]]]] = []
            fixed: dict[int, bytes] = {}
            for ino in sorted(reachable):
                versions = data_versions.get(ino)
                if versions is None:
                    data_ops = [i for i in range(k) if _data_ino(ops[i]) == ino]
                    versions = data_versions[ino] = _data_versions(
                        base.files.get(ino, b""), [ops[i] for i in data_ops if i in sure],
                        [ops[i] for i in data_ops if i not in sure])
                if len(versions) == 1:
                    fixed[ino] = versions[0][1]
                else:
                    per_file.append((ino, versions))
            for choice in _data_choices(per_file, bounds):
                contents = dict(fixed)
                labels = []
                for (ino, versions), idx in zip(per_file, choice, strict=True):
                    contents[ino] = versions[idx][1]
                    if idx:
                        labels.append((ino, versions[idx][0]))
                tree = materialise(base.root, dirs, contents)
                links = hard_links(base.root, dirs)
                key = (tree_digest(tree) + repr(links), marks)
                if key in seen:
                    continue
                seen.add(key)
                count += 1
                lost = tuple(i for i in pending_entries if i not in keep)
                yield CrashState(k, lost, tuple(labels), tree, marks, links)
                if count >= bounds.max_states:
                    return


def _data_choices(per_file: list[tuple[int, list[tuple[str, bytes]]]], bounds: Bounds) -> Iterator[tuple[int, ...]]:
    sizes = [len(v) for _, v in per_file]
    total = 1
    for s in sizes:
        total *= s
    if total <= bounds.full_data:
        yield from itertools.product(*(range(s) for s in sizes))
        return
    yield tuple(0 for _ in sizes)
    for f, s in enumerate(sizes):
        for idx in range(1, s):
            yield tuple(idx if g == f else 0 for g in range(len(sizes)))
    yield tuple(s - 1 for s in sizes)


def describe(trace: Trace, state: CrashState) -> list[str]:
    """The syscall prefix of a state, each call marked with whether it persisted."""
    lines = []
    lost = set(state.lost)
    data = dict(state.data)
    for i, op in enumerate(trace.ops[: state.prefix]):
        if isinstance(op, Mark):
            lines.append(f"  {i:3d}   -- {op.label} returned {' '.join(op.keys)}")
            continue
        flag = "LOST" if i in lost else "    "
        extra = ""
        if isinstance(op, DataOp) and op.ino in data:
            extra = f"   [file data persisted: version {data[op.ino]}]"
        lines.append(f"  {i:3d} {flag} {op.call or op}{extra}")
    return lines
