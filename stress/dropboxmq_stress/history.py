"""Per-process JSON-lines histories (Jepsen style: invoke / ok / fail / info).

Every worker process appends to its own ``history/<process>.jsonl``.  Each
record is written with one ``os.write`` on an ``O_APPEND`` descriptor, so a
SIGKILL loses at most the record that was never written, never half a line
(and a torn last line, should one ever appear, is skipped by the reader).

Record fields:

``t``        wall-clock seconds (``time.time()``), comparable across processes
``p``        the process incarnation (``c1.3``: consumer 1, third start)
``type``     ``invoke`` | ``ok`` | ``fail`` | ``info``
``f``        ``send`` | ``receive`` | ``ack`` | ``commit`` | ``rollback`` | ``kill`` | ...
``value``    the values (message ids chosen by the test) the operation is about
``...``      anything else (``lat`` latency in seconds, ``err``, ``redelivered`` ...)

``fail`` means the operation certainly did not take effect; ``info`` means we
do not know (an exception whose effect is uncertain, or a process killed).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Iterator


class History:
    def __init__(self, directory: str | Path, process: str):
        self.process = process
        os.makedirs(directory, exist_ok=True)
        self.path = os.path.join(directory, f"{process}.jsonl")
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)

    def record(self, type_: str, f: str, value: Any = None, **extra: Any) -> dict:
        rec = {"t": time.time(), "p": self.process, "type": type_, "f": f}
        if value is not None:
            rec["value"] = value
        rec.update(extra)
        line = (json.dumps(rec, ensure_ascii=True, default=str) + "\n").encode()
        if self._fd is None:
            raise ValueError(f"history {self.path} is closed")
        os.write(self._fd, line)  # one write per record: atomic w.r.t. SIGKILL
        return rec

    def invoke(self, f: str, value: Any = None, **extra: Any) -> dict:
        return self.record("invoke", f, value, **extra)

    def ok(self, f: str, value: Any = None, **extra: Any) -> dict:
        return self.record("ok", f, value, **extra)

    def fail(self, f: str, value: Any = None, **extra: Any) -> dict:
        return self.record("fail", f, value, **extra)

    def info(self, f: str, value: Any = None, **extra: Any) -> dict:
        return self.record("info", f, value, **extra)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def read_history(directory: str | Path) -> list[dict]:
    """Every record of every ``*.jsonl`` in ``directory`` (recursively), sorted by time."""
    records: list[dict] = []
    for path in sorted(Path(directory).rglob("*.jsonl")):
        records.extend(read_file(path))
    records.sort(key=lambda r: r.get("t", 0.0))
    return records


def read_file(path: str | Path) -> Iterator[dict]:
    with open(path, "rb") as f:
        for line in f:
            try:
                rec = json.loads(line)
            except ValueError:
                continue  # torn last line of a killed process
            if isinstance(rec, dict):
                yield rec
