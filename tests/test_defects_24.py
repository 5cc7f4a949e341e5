"""Issue 24: the twelve defects, one regression test (or a few) each.

Every test here failed on the code before its fix; the commit that fixed a defect names its test.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from dropboxmq import codec, layout
from dropboxmq.cli import main
from dropboxmq.lifecycle import State
from dropboxmq.message import Queue
from dropboxmq.session import Connection

from conftest import FAST, ls


def cli(root: Path, *args: str, input: str | None = None):
    argv = ["--root", str(root), *args]
    return CliRunner().invoke(main, argv, input=input, env={"DROPBOXMQ_ROOT": None}, catch_exceptions=False)


def drop(root: Path, queue: str, name: str, body: bytes = b"x") -> None:
    """A foreign program's drop straight into a queue's target/."""
    box = layout.queue_box(root, Queue(queue)).ensure()
    Path(box.file(State.NEW, name)).write_bytes(body)


# ---------------------------------------------------------------- 7: --output-dir escapes DIR


def test_7_output_dir_never_writes_outside_dir(tmp_path):
    root, out = tmp_path / "root", tmp_path / "inbox" / "deep"
    drop(root, "q", "4.%2E%2F%2E%2E%2Fescaped.T", b"payload")
    result = cli(root, "receive", "q", "--output-dir", str(out))
    assert result.exit_code == 0, result.output
    assert not (tmp_path / "inbox" / "escaped").exists()
    written = os.listdir(out)
    assert len(written) == 1 and "/" not in written[0] and not written[0].startswith(".")
    assert (out / written[0]).read_bytes() == b"payload"
    assert written[0] == "%2E%2F%2E%2E%2Fescaped"  # the id, escaped as a name field is


# ---------------------------------------------------------------- 8: a symlinked queue directory


def test_8_send_create_never_creates_through_a_symlinked_queue(tmp_path):
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "q").symlink_to(outside)
    result = cli(root, "send", "q", "hello", "--create")
    assert result.exit_code != 0
    assert "symlink" in result.stderr and "Traceback" not in result.output
    assert os.listdir(outside) == []  # nothing made, nothing written out there
