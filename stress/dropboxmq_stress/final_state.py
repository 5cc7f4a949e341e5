"""Where every file of a queue is after a case's final recovery (``final-state.json``): the
checker counts in-doubt (working/ + processing/) and quarantined (error/) files from it."""

from __future__ import annotations

import os
from pathlib import Path

from .workload import VALUE_PROP


def value_of(name: str) -> str | None:
    from dropboxmq import codec

    try:
        _, original = codec.split_processing_name(name)
        prop = codec.from_wire(original).properties.get(VALUE_PROP)
    except Exception:  # noqa: BLE001 - foreign names
        return None
    return prop.value if prop is not None and isinstance(prop.value, str) else None


def snapshot(root: Path, queue: str) -> dict:
    """Where every file of the queue is: {state dir: [{name, value, client, size, kind}]}."""
    from dropboxmq import codec

    box = Path(root) / queue / "incoming"
    out: dict[str, list] = {}
    for state in ("working", "target", "processing", "processed", "expired", "error"):
        entries = []
        try:
            names = os.listdir(box / state)
        except FileNotFoundError:
            names = []
        for n in sorted(names):
            p = box / state / n
            try:
                st = os.lstat(p)
                size = st.st_size
                kind = ("file" if os.path.isfile(p) and not os.path.islink(p) else
                        "symlink" if os.path.islink(p) else "dir" if os.path.isdir(p) else "other")
            except OSError:
                size, kind = None, "gone"
            client = None
            if state in ("processing", "processed", "error"):
                client, _ = codec.split_processing_name(n)
            entries.append({"name": n, "value": value_of(n), "client": client, "size": size, "kind": kind})
        out[state] = entries
    return out
