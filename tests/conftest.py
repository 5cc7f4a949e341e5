"""Shared fixtures and helpers for the dropboxmq test suite."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dropboxmq import store
from dropboxmq.connection import Settings

# the session-wide SparkSession fixture (``spark``); pyspark is imported only when a test asks for it
pytest_plugins = ["spark_fixtures"]

#: Fast polling for tests: nothing here waits on a fixed sleep, but receive(timeout)
#: and listeners poll, so short intervals keep the suite quick.
FAST = Settings(poll_interval=0.005, scan_interval=0.01, recovery_interval=0.05)


@pytest.fixture(autouse=True)
def renameat2_as_found():
    """Each test starts on the store's path this process started with: the first rename on a
    file system without renameat2 (an in-process run on sshfs or MooseFS) turns it off for the
    whole process, and the next test in that worker ran on netfs.py unknowingly."""
    found = store.noreplace_supported
    yield
    store.noreplace_supported = found


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A fresh, existing dropbox root per test (the library no longer creates a missing root)."""
    path = tmp_path / "root"
    path.mkdir()
    return path


@pytest.fixture
def fast() -> Settings:
    return FAST


def state_dir(root: Path, queue: str, state: str) -> Path:
    return Path(root) / queue / "incoming" / state


def ls(root: Path, queue: str, state: str, *, dot: bool = False) -> list[str]:
    """Names in one state directory of a queue (sorted; [] if it does not exist)."""
    try:
        names = os.listdir(state_dir(root, queue, state))
    except FileNotFoundError:
        return []
    return sorted(n for n in names if dot or not n.startswith("."))


def counts(root: Path, queue: str) -> dict[str, int]:
    return {s: len(ls(root, queue, s)) for s in
            ("working", "target", "processing", "processed", "expired", "error")}


def fork_context():
    """A ``multiprocess`` fork context (children inherit closures, no pickling)."""
    import multiprocess

    return multiprocess.get_context("fork")
