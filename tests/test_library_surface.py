"""The Pythonic surface over the JMS shape (issue 17), and redelivery backoff for listeners."""

from __future__ import annotations

import itertools
import os
import threading
import time
from pathlib import Path

import pytest

import dropboxmq
from dropboxmq import (CLIENT_ACKNOWLEDGE, BytesMessage, Connection, IllegalStateError, MessageFormatError, Queue,
                       Settings, TextMessage, Topic)

from conftest import counts


def test_top_level_exports_are_complete_and_listed() -> None:
    assert {"Connection", "Queue", "Topic", "TextMessage", "BytesMessage", "Session", "DropboxMQError"} \
        <= set(dropboxmq.__all__)
    for name in dropboxmq.__all__:
        assert getattr(dropboxmq, name) is not None
    with pytest.raises(AttributeError):
        dropboxmq.NoSuchThing  # noqa: B018
    import dropboxmq_conformance
    import dropboxmq_stress

    for pkg in (dropboxmq, dropboxmq_conformance, dropboxmq_stress):  # typed, and shipped as such
        assert (Path(pkg.__file__).parent / "py.typed").is_file(), pkg.__name__
    pyproject = (Path(dropboxmq.__file__).parents[2] / "pyproject.toml").read_text()
    assert '"*" = ["py.typed",' in pyproject


def test_text_message_takes_str() -> None:
    assert TextMessage("héllo").text == "héllo"
    assert TextMessage("x", priority=7).priority == 7
    assert TextMessage(body=b"raw").text == "raw"
    with pytest.raises(MessageFormatError, match="str or UTF-8 bytes"):
        TextMessage(42)  # type: ignore[arg-type]


def test_send_plain_bodies_and_receive_them_back(tmp_path: Path) -> None:
    q = Queue("q")
    with Connection(tmp_path, create=True) as conn:
        session = conn.create_session()
        producer = session.create_producer()
        producer.send(q, "text")
        producer.send(q, b"\x00bytes")
        producer.send(q, {"n": 1, "name": "x"})
        producer.send(q, [1, "two"])
        producer.send(TextMessage("jms order"), q)  # the JMS argument order still works
        with pytest.raises(TypeError, match="str, bytes, dict or list"):
            producer.send(q, 3.5)  # type: ignore[arg-type]
        with pytest.raises(dropboxmq.InvalidDestinationError):
            producer.send("no", "destination")  # type: ignore[arg-type]
        consumer = session.create_consumer(q)
        got = [consumer.receive_body(0) for _ in range(5)]
        assert got == ["text", b"\x00bytes", {"n": 1, "name": "x"}, [1, "two"], "jms order"]
        assert consumer.receive_body(0) is None


def test_blocking_iteration_with_a_timeout(tmp_path: Path) -> None:
    q = Queue("q")
    with Connection(tmp_path, create=True) as conn:
        session = conn.create_session()
        producer = session.create_producer(q)
        for i in range(3):
            producer.send(q, f"m{i}")
        consumer = session.create_consumer(q)
        late = threading.Timer(0.05, lambda: Connection(tmp_path, create=True).create_session().create_producer().send(q, "late"))
        late.start()
        started = time.monotonic()
        bodies = [m.text for m in consumer.messages(timeout=2)]  # type: ignore[attr-defined]
        late.join()
        assert bodies == ["m0", "m1", "m2", "late"]
        assert time.monotonic() - started >= 2  # it waited the timeout after the last one


def test_connection_from_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DROPBOXMQ_ROOT", str(tmp_path / "env-root"))
    monkeypatch.setenv("DROPBOXMQ_CLIENT_ID", "svc-1")
    with Connection.from_env(create=True) as conn:
        assert conn.root == tmp_path / "env-root" and conn.client_id == "svc-1"
        conn.create_session().create_producer().send(Queue("q"), "x")
    assert counts(tmp_path / "env-root", "q")["target"] == 1


def test_temporary_destinations_delete(tmp_path: Path) -> None:
    with Connection(tmp_path, create=True) as conn:
        session = conn.create_session()
        tq = session.create_temporary_queue()
        assert tq == Queue(tq.name) and Queue(tq.name) == tq and hash(tq) == hash(Queue(tq.name))
        consumer = session.create_consumer(tq)
        with pytest.raises(IllegalStateError, match="open consumer"):
            tq.delete()
        consumer.close()
        tq.delete()
        assert not (tmp_path / tq.name).exists()
        tt = session.create_temporary_topic()
        assert tt == Topic(tt.name) and tt != Queue(tt.name)
        tt.delete()


def test_send_file_streams_a_file(tmp_path: Path) -> None:
    data = os.urandom(3 * 1024 * 1024 + 7)
    (tmp_path / "f").write_bytes(data)
    q = Queue("q")
    with Connection(tmp_path / "r", create=True) as conn, open(tmp_path / "f", "rb") as f:
        session = conn.create_session()
        sent = session.create_producer().send_file(f, BytesMessage(correlation_id="c"), q, priority=8)
        assert sent.body == b"" and sent.priority == 8 and sent.correlation_id == "c"
        msg, body = session.create_consumer(q).receive_streamed(0)  # type: ignore[misc]
        with body:
            assert body.read() == data and msg.message_id == sent.message_id and msg.correlation_id == "c"


# ---------------------------------------------------------------- listeners and redelivery backoff


class Recorder:
    def __init__(self, fail: bool, stop_after: int) -> None:
        self.times: list[float] = []
        self.fail, self.stop_after = fail, stop_after
        self.done = threading.Event()

    def on_message(self, message) -> None:
        self.times.append(time.monotonic())
        if len(self.times) >= self.stop_after:
            self.done.set()
        if self.fail:
            raise RuntimeError("handler failed")


def _listen(conn: Connection, rec: Recorder) -> None:
    """One message on q, and ``rec`` listening to q until it has seen ``stop_after`` deliveries."""
    session = conn.create_session()
    session.create_producer().send(Queue("q"), "poison" if rec.fail else "x")
    session.create_consumer(Queue("q")).set_message_listener(rec)
    assert rec.done.wait(10)


# clocks: deliveries are due by a millisecond clock, so a gap may be up to ~1 ms short
SLACK = 0.002


def test_listener_object_with_on_message_is_accepted(tmp_path: Path) -> None:
    with Connection(tmp_path, create=True) as conn:
        _listen(conn, Recorder(fail=False, stop_after=1))
    assert counts(tmp_path, "q")["processed"] == 1


@pytest.mark.parametrize("bad", [object(), 42, "on_message"])
def test_anything_else_is_refused_as_a_listener(tmp_path: Path, bad) -> None:
    with Connection(tmp_path, create=True) as conn:
        consumer = conn.create_session().create_consumer(Queue("q"))
        with pytest.raises(TypeError, match="on_message"):
            consumer.set_message_listener(bad)


def test_failing_listener_is_retried_with_exponential_backoff_then_dead_lettered(tmp_path: Path) -> None:
    # The old behaviour: ten failures within ~2 ms, then error/.  Now each retry waits
    # redelivery_delay * 2**(attempt-1).
    settings = Settings(max_delivery_attempts=5, redelivery_delay=0.02, redelivery_backoff=2.0,
                        max_redelivery_delay=0.05)
    rec = Recorder(fail=True, stop_after=5)
    with Connection(tmp_path, settings=settings, create=True) as conn:
        _listen(conn, rec)
        deadline = time.monotonic() + 10
        while counts(tmp_path, "q")["error"] == 0 and time.monotonic() < deadline:
            time.sleep(0.01)  # polling the outcome, not synchronising: the 6th claim dead-letters
    gaps = [b - a for a, b in itertools.pairwise(rec.times)]
    assert [g >= want - SLACK for g, want in zip(gaps, (0.02, 0.04, 0.05, 0.05), strict=True)] == [True] * 4, gaps
    assert counts(tmp_path, "q")["error"] == 1 and len(rec.times) == 5


def test_default_settings_do_not_burn_every_attempt_at_once(tmp_path: Path) -> None:
    rec = Recorder(fail=True, stop_after=3)
    with Connection(tmp_path, create=True) as conn:
        _listen(conn, rec)
    gaps = [b - a for a, b in itertools.pairwise(rec.times)]
    assert gaps[0] >= 0.1 - SLACK and gaps[1] >= 0.2 - SLACK, gaps
    assert counts(tmp_path, "q")["error"] == 0


def test_recover_in_client_mode_backs_off_too(tmp_path: Path) -> None:
    with Connection(tmp_path, create=True) as conn:
        session = conn.create_session(ack_mode=CLIENT_ACKNOWLEDGE)
        session.create_producer().send(Queue("q"), "x")
        consumer = session.create_consumer(Queue("q"))
        consumer.redelivery_delay = 0.2
        assert consumer.receive(0) is not None
        session.recover()  # JMS recover(): redelivered at once
        assert consumer.receive(0) is not None
        session.recover(back_off=True)  # processing failed: hold it back
        assert consumer.receive(0) is None  # held back by this consumer ...
        assert 0.2 < consumer.next_retry_in() <= 0.4  # type: ignore[operator]  # 2nd delivery: 0.2 * 2
        again = consumer.receive(5)  # ... until its delay is over
        assert again is not None and again.redelivered and again.delivery_count == 3


# ---------------------------------------------------------------- typed


USER_PROGRAM = '''
from dropboxmq import Connection, Queue, TextMessage, Message

def handle(message: Message) -> None: ...

with Connection.from_env() as conn:
    session = conn.create_session()
    producer = session.create_producer()
    sent: Message = producer.send(Queue("q"), "text")
    producer.send(TextMessage("x"), Queue("q"))
    consumer = session.create_consumer(Queue("q"))
    consumer.set_message_listener(handle)
    for m in consumer.messages(timeout=1.0):
        text: str = m.message_id or ""
    wrong: int = consumer.receive(1.0)  # the one error mypy must report
'''


@pytest.mark.slow
def test_public_api_is_typed(tmp_path: Path) -> None:
    import subprocess
    import sys

    pytest.importorskip("mypy", reason="mypy comes with the dev extra")
    package = Path(dropboxmq.__file__).parent
    (tmp_path / "user.py").write_text(USER_PROGRAM)
    modules = [str(package / m) for m in ("__init__.py", "session.py", "message.py", "errors.py", "retention.py")]
    done = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache"),
                           "--ignore-missing-imports",
                           "--follow-imports=silent", "--disallow-untyped-defs", "--disallow-incomplete-defs",
                           *modules], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout
    user = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache"),
                           "--follow-imports=silent", str(tmp_path / "user.py")],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={**os.environ, "MYPYPATH": str(package.parent)})  # editable installs hide it
    errors = [line for line in user.stdout.splitlines() if ": error:" in line]
    assert len(errors) == 1 and "user.py:15:" in errors[0] and "Message | None" in errors[0], user.stdout
