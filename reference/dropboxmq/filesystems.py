"""Which file system holds a root, and whether the library may use it there: asked at connect
(:func:`admit`) and by a registration (:func:`flock_trusted`), never per message.  Both first read
the verdict ``dropboxmq doctor`` recorded; its probes are ``doctor.py``'s, which no connection loads.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from .errors import StoreError
from .store import read_record

__all__ = ["NETWORK_FILE_SYSTEMS", "FLOCK_ACROSS_MOUNTS", "file_system_type", "UnsupportedFileSystemError",
           "SUPPORTED", "SUPPORTED_WITH_LEASES", "UNSAFE", "RECORD", "Verdict", "verdict_for",
           "flock_trusted", "admit"]


class UnsupportedFileSystemError(StoreError):
    pass


NETWORK_FILE_SYSTEMS = frozenset(
    {"nfs", "nfs4", "cifs", "smb3", "smbfs", "fuse.sshfs", "9p", "afs", "ceph", "glusterfs",
     "fuse.glusterfs", "lustre", "gpfs", "davfs", "fuse.s3fs", "fuse.rclone", "virtiofs", "fuse.mfs",
     "fuse.smbnetfs"}
)

#: file system types (/proc/self/mountinfo) whose flock one mount's process sees from another's:
#: local file systems, and the network ones measured to pass locks between mounts (issue 28)
FLOCK_ACROSS_MOUNTS = frozenset({
    "ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "ramfs", "zfs", "f2fs", "jfs", "reiserfs",
    "overlay", "bcachefs", "nilfs2", "hfsplus", "vfat", "exfat", "ntfs3",
    "glusterfs", "fuse.glusterfs", "fuse.mfs", "fuse.mfsmount", "fuse.moosefs", "moosefs",
})


def file_system_type(path: Path) -> str:
    """The type of the mounted file system holding ``path`` (from /proc/self/mountinfo)."""
    target = os.path.realpath(path)
    best, best_type = "", "unknown"
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                mount_point = left.split()[4].replace("\\040", " ")
                fields = right.split()
                fs_type = fields[0] if fields else "unknown"
                if fs_type == "fuse" and len(fields) > 1 and fields[1].startswith(("mfs#", "mfs\\043")):
                    fs_type = "fuse.mfs"  # mfsmount says plain "fuse": MooseFS is known by its source
                inside = target == mount_point or target.startswith(mount_point.rstrip("/") + "/")
                if inside and len(mount_point) >= len(best):
                    best, best_type = mount_point, fs_type
    except OSError:
        pass
    return best_type


# ---------------------------------------------------------------- the verdict doctor recorded

SUPPORTED = "supported"
SUPPORTED_WITH_LEASES = "supported with leases"
UNSAFE = "unsafe"

RECORD = ".dropboxmq-doctor.json"


@dataclass(frozen=True)
class Verdict:
    level: str
    reasons: tuple[str, ...]   # why not better (unsafe first, then lease needs)
    notes: tuple[str, ...]     # what holds but differs from a local disk


def verdict_for(root: Path) -> Verdict | None:
    """The verdict ``dropboxmq doctor`` recorded for ``root``, or None (never probed, unreadable,
    or recorded for another file system type than the one mounted there now)."""
    try:
        data = json.loads(read_record(Path(root) / RECORD))  # (a root may be hostile: no FIFO, no symlink)
        if data["fs_type"] != file_system_type(Path(root)) or \
                data["level"] not in (SUPPORTED, SUPPORTED_WITH_LEASES, UNSAFE):
            return None
        return Verdict(data["level"], tuple(data["reasons"]), tuple(data["notes"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


_trusted: dict[str, bool] = {}


def flock_trusted(root: Path) -> bool:
    """Does a free flock under ``root`` prove its owner dead on every host (else a registration needs
    its lease: leases.py)?  The verdict recorded for the root ("supported": locks cross mounts;
    "supported with leases": they do not), else the file system's type.  Asked once per root."""
    key = str(root)
    trusted = _trusted.get(key)
    if trusted is None:
        verdict = verdict_for(Path(root))
        trusted = verdict.level == SUPPORTED if verdict is not None else \
            file_system_type(Path(root)) in FLOCK_ACROSS_MOUNTS
        _trusted[key] = trusted
    return trusted


def admit(root: Path, allow_network: bool) -> None:
    """Open ``root`` only on a file system fit for it: refuse a root ``dropboxmq doctor`` judged
    unsafe (even when forced: its races are not exclusive), accept one it qualified; without a
    verdict an unqualified network file system needs the flag."""
    verdict = verdict_for(root)
    if verdict is not None and verdict.level == UNSAFE:
        raise UnsupportedFileSystemError(f"{root}: judged unsafe by dropboxmq doctor: {verdict.reasons[0]}")
    if verdict is None and (fs_type := file_system_type(root)) in NETWORK_FILE_SYSTEMS and not allow_network:
        raise UnsupportedFileSystemError(
            f"{root} is on a network file system ({fs_type}): rename and listing guarantees are "
            "weaker there (stale listings, retried renames); qualify it with `dropboxmq doctor`, "
            "or pass allow_network_fs=True (--allow-network-fs) to use it anyway"
        )
