"""A server-side trace of a network file system's export: every create, rename, delete and write
under a local directory, in the order the server did them, stamped with ``time.time()``.

Two client mounts of one export (netfs.py) each see the other's changes late or not at all;
the export itself is a local directory (sshfs: the sftp server's), so inotify on it records
what the server really did, whichever mount asked.  The multi-host stress case keeps such a
trace beside its histories (``multihost --keep DIR``) to explain a failed run: which rename
of which message happened when, and when each client's lease record was rewritten.

``trace(directory, out)`` runs until terminated (a separate process: ``start``), one JSON line
per event: ``{"t", "ev", "dir", "name", "cookie"}`` (a rename is a MOVED_FROM and a MOVED_TO
with the same cookie).  Linux only (ctypes inotify).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import multiprocessing
import os
import struct
import time
from pathlib import Path
from typing import Any

_IN = {
    0x00000002: "MODIFY", 0x00000008: "CLOSE_WRITE", 0x00000040: "MOVED_FROM", 0x00000080: "MOVED_TO",
    0x00000100: "CREATE", 0x00000200: "DELETE", 0x00004000: "Q_OVERFLOW",
}
_MASK = 0x2 | 0x8 | 0x40 | 0x80 | 0x100 | 0x200
_IN_ISDIR = 0x40000000
_EVENT = struct.Struct("iIII")


def trace(directory: str, out: str) -> None:
    libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    fd = libc.inotify_init1(os.O_CLOEXEC)
    if fd < 0:
        raise OSError(ctypes.get_errno(), "inotify_init1")
    wds: dict[int, str] = {}

    def add(path: str) -> None:
        wd = libc.inotify_add_watch(fd, os.fsencode(path), _MASK)
        if wd >= 0:
            wds[wd] = path

    for dirpath, _, _ in os.walk(directory):
        add(dirpath)
    with open(out, "a", buffering=1) as f:
        f.write(json.dumps({"t": time.time(), "ev": "READY", "dir": ".", "name": "", "cookie": 0}) + "\n")
        while True:
            buf = os.read(fd, 1 << 16)
            now = time.time()
            i = 0
            while i < len(buf):
                wd, mask, cookie, length = _EVENT.unpack_from(buf, i)
                name = buf[i + _EVENT.size:i + _EVENT.size + length].rstrip(b"\0").decode(errors="replace")
                i += _EVENT.size + length
                where = wds.get(wd, "?")
                if mask & _IN_ISDIR and mask & 0x100:
                    add(os.path.join(where, name))  # a new directory (a queue, a state dir): watch it too
                ev = "|".join(v for k, v in _IN.items() if mask & k)
                rel = os.path.relpath(where, directory)
                f.write(json.dumps({"t": now, "ev": ev, "dir": rel, "name": name, "cookie": cookie}) + "\n")


def start(directory: Path, out: Path) -> Any:
    """Trace ``directory`` into ``out`` from a new process (terminate it to stop)."""
    proc = multiprocessing.get_context("fork").Process(target=trace, args=(str(directory), str(out)), daemon=True)
    proc.start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not (out.exists() and out.stat().st_size):
        time.sleep(0.01)  # the watches are set once READY is written: nothing before it is missed
    return proc


def read(out: Path) -> list[dict]:
    with open(out) as f:
        return [json.loads(line) for line in f if line.strip()]
