"""Which file system holds a root, and whether the library may use it there.

Asked once when a connection opens (``doctor.admit``) and when a registration decides whether a
free flock proves its owner dead (``doctor.flock_trusted``); never on a send, a receive or an
acknowledge, so it lives apart from the dropbox store.
"""

from __future__ import annotations

import os
from pathlib import Path

from .errors import StoreError

__all__ = ["NETWORK_FILE_SYSTEMS", "FLOCK_ACROSS_MOUNTS", "flock_crosses_mounts", "file_system_type", "check_file_system",
           "UnsupportedFileSystemError"]


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


def flock_crosses_mounts(fs_type: str) -> bool:
    """Does a free flock on this file system prove that no process on any host holds it (else
    a client's liveness needs its lease: leases.py)?"""
    return fs_type in FLOCK_ACROSS_MOUNTS


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


def check_file_system(path: Path, allow_network: bool) -> None:
    """Refuse a network file system unless allowed (``doctor.admit`` first asks for the verdict
    ``dropboxmq doctor`` recorded: it overrides this check both ways)."""
    fs_type = file_system_type(path)
    if fs_type in NETWORK_FILE_SYSTEMS and not allow_network:
        raise UnsupportedFileSystemError(
            f"{path} is on a network file system ({fs_type}): rename and listing guarantees are "
            "weaker there (stale listings, retried renames); qualify it with `dropboxmq doctor`, "
            "or pass allow_network_fs=True (--allow-network-fs) to use it anyway"
        )
