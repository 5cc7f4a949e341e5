"""``python -m dropboxmq_stress.receive_layers``: every layer drains its whole backlog (a
layer that consumed fewer messages than it was given would time the wrong thing and
fail the run), and the table shows each one.  No timing assertions."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from dropboxmq_stress import receive_layers


def test_every_layer_drains_its_backlog_and_is_shown(tmp_path: Path) -> None:
    result = CliRunner().invoke(receive_layers.main, ["-n", "40", "-r", "1", "--dir", str(tmp_path)],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    for layer in receive_layers.LAYERS:
        assert f"│ {layer} " in result.output
    assert list(tmp_path.iterdir()) == []  # the temporary dropboxes are gone


def test_a_layer_that_loses_messages_fails_the_run(tmp_path: Path) -> None:
    from dropboxmq.message import Queue

    # a message sent to the queue after the count is fixed is drained too: the count no
    # longer matches, and the run says so instead of reporting a per-message time
    def one_more(box_path: str, session) -> int:
        session.create_producer(Queue("q")).send(b"late")
        return receive_layers.LAYER_DRAINS["receive"](box_path, session)

    drains = dict(receive_layers.LAYER_DRAINS, receive=one_more)
    with pytest.raises(RuntimeError, match="layer receive drained 6 of 5 messages"):
        receive_layers.run_layer("receive", tmp_path / "r", 5, 10, drains=drains)


def test_a_missing_work_directory_is_a_one_line_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(receive_layers.main, ["-n", "5", "-r", "1", "--dir", str(tmp_path / "gone")])
    assert result.exit_code == 2
    assert "Directory" in result.output and "does not exist" in result.output
    assert "Traceback" not in result.output
