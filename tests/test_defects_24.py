"""Issue 24: the twelve defects, one regression test (or a few) each.

Every test here failed on the code before its fix; the commit that fixed a defect names its test.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from dropboxmq import clients, codec, inventory, layout, topics, transaction
from dropboxmq.making import ensure_dropbox
from dropboxmq.cli import main
from dropboxmq.errors import StoreError
from dropboxmq.lifecycle import State
from dropboxmq.message import Queue, Topic
from dropboxmq.connection import Connection

from conftest import FAST, ls


def cli(root: Path, *args: str, input: str | None = None):
    argv = ["--root", str(root), *args]
    return CliRunner().invoke(main, argv, input=input, env={"DROPBOXMQ_ROOT": None}, catch_exceptions=False)


def drop(root: Path, queue: str, name: str, body: bytes = b"x") -> None:
    """A foreign program's drop straight into a queue's target/."""
    box = ensure_dropbox(layout.queue_box(root, Queue(queue)))
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


# ---------------------------------------------------------------- 9 and 12: manifests


def _manifest(tmp_path: Path, name: str, extra: str = "") -> Path:
    p = tmp_path / "m.toml"
    p.write_text(f'name = "{name}"\n{extra}[commands]\nproduce = "true"\n')
    return p


@pytest.mark.parametrize("name", ["../victim", "/abs/victim", "a/b", ".", ".."])
def test_9_a_manifest_name_that_is_no_plain_name_is_one_line_error(tmp_path, name):
    from dropboxmq_conformance import manifest as M

    with pytest.raises(M.ManifestError) as exc:
        M.load(_manifest(tmp_path, name))
    assert "name" in str(exc.value) and "\n" not in str(exc.value)


def test_9_conformance_run_never_deletes_outside_its_out_dir(tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("precious")
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["conformance", "run", "--impl", str(_manifest(tmp_path, "../victim")),
                                       "--out", str(out), "--no-tlc"])
    assert result.exit_code != 0
    assert (victim / "keep").read_text() == "precious"
    assert "Traceback" not in result.output


def test_9_the_runner_refuses_a_manifest_made_with_an_escaping_name(tmp_path):
    from dropboxmq_conformance import manifest as M, runner

    victim = tmp_path / "victim"
    victim.mkdir()
    m = M.Manifest("../victim", "", tmp_path / "x.toml", {"produce": "true"})
    with pytest.raises(ValueError, match="no plain name"):
        runner.run_impl(m, tmp_path / "out", tlc=False)
    assert victim.is_dir()


@pytest.mark.parametrize("top, flags, key", [
    ("", "ok_exit = 5", "ok_exit"),
    ("", "ok_exit = ['x']", "ok_exit"),
    ("env = 5", "", "env"),
    ('expect = "fail"\ncaught_by = 5', "", "caught_by"),
    ("", "timeout = 'soon'", "timeout"),
    ("", "ordered = 'yes'", "ordered"),
    ("description = 3", "", "description"),
])
def test_12_a_mistyped_manifest_value_is_one_line_naming_the_key(tmp_path, top, flags, key):
    from dropboxmq_conformance import manifest as M

    p = tmp_path / "m.toml"
    p.write_text(f'name = "m"\n{top}\n[commands]\nproduce = "true"\n[flags]\n{flags}\n')
    with pytest.raises(M.ManifestError) as exc:
        M.load(p)
    message = str(exc.value)
    assert key in message and "\n" not in message, message


def test_12_conformance_run_answers_a_mistyped_manifest_with_one_line(tmp_path):
    p = _manifest(tmp_path, "m", "env = 5\n")
    result = CliRunner().invoke(main, ["conformance", "run", "--impl", str(p), "--out", str(tmp_path / "o"),
                                       "--no-tlc"])
    assert result.exit_code == 1
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "env" in lines[0] and "Traceback" not in result.output, result.output


# ---------------------------------------------------------------- 10: a failed registration


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EFBIG])
def test_10_a_registration_that_cannot_be_written_releases_its_lock(root, monkeypatch, code):
    def full(fd, data):
        raise OSError(code, os.strerror(code))

    opened_before = len(os.listdir("/proc/self/fd"))
    monkeypatch.setattr(clients.os, "write", full)
    with pytest.raises(StoreError, match="cannot register client id 'c'"):
        Connection(root, "c", FAST, create=True)
    monkeypatch.undo()
    assert len(os.listdir("/proc/self/fd")) == opened_before  # no descriptor leaked
    with Connection(root, "c", FAST, create=True) as conn:  # the id is free again
        assert conn.client_id == "c"


# ---------------------------------------------------------------- 11: distribute streams


def test_11_distribute_never_holds_a_dropped_file_in_memory(root):
    import tracemalloc

    from dropboxmq.distributor import distribute

    size = 16 << 20
    with Connection(root, "subscriber", FAST, create=True) as conn:
        conn.create_session().create_durable_consumer(Topic("big"), "s").close()
    incoming = ensure_dropbox(topics.topic_incoming(root, Topic("big")))
    # a small drop first: what distribute imports where first used is loaded outside the trace
    with open(incoming.file(State.NEW, "small.txt"), "wb") as f:
        f.write(b"small")
    assert distribute(root) == 1
    with open(incoming.file(State.NEW, "scan.tiff"), "wb") as f:
        f.write(os.urandom(1 << 20) * 16)
    tracemalloc.start()
    try:
        assert distribute(root) == 1
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < size // 4, f"distribute's peak was {peak} bytes for a {size}-byte drop"
    sub = [b for _, b in inventory.all_dropboxes(root) if b.path.name.startswith("s")]
    assert len(sub) == 1 and sorted(os.path.getsize(sub[0].file(State.NEW, n)) for n in sub[0].list(State.NEW)) == [5, size]


# ---------------------------------------------------------------- 5: a subscription whose selector does not parse


def _break_selector(root: Path, topic: str, sub_dir_prefix: str) -> None:
    """Rewrite a subscription's well-formed .subscription with a selector that does not parse."""
    import json

    subs = topics.subscriptions_dir(root, Topic(topic))
    (d,) = [p for p in subs.iterdir() if p.name.startswith(sub_dir_prefix)]
    info = json.loads((d / ".subscription").read_text())
    info["selector"] = "region = "
    (d / ".subscription").write_text(json.dumps(info))


def test_5_a_subscription_with_a_bad_selector_blocks_only_itself(root):
    from dropboxmq.distributor import distribute

    with Connection(root, "c", FAST, create=True) as conn:
        session = conn.create_session()
        session.create_durable_consumer(Topic("news"), "bad", selector="region = 'eu'").close()
        good = session.create_durable_consumer(Topic("news"), "good")
        _break_selector(root, "news", "bad")
        session.create_producer().send(Topic("news"), "published")
        assert good.receive_body(timeout=5) == "published"
        incoming = ensure_dropbox(topics.topic_incoming(root, Topic("news")))
        Path(incoming.file(State.NEW, "dropped.csv")).write_bytes(b"dropped")
        assert distribute(root) == 1
        assert good.receive(timeout=5).body == b"dropped"
        assert incoming.list(State.DEAD_LETTER) == [] and incoming.list(State.NEW) == []


# ---------------------------------------------------------------- 1: one name dropped twice


def _drop_into_topic(root: Path, topic: str, name: str, body: bytes) -> None:
    incoming = ensure_dropbox(topics.topic_incoming(root, Topic(topic)))
    Path(incoming.file(State.NOT_COMMITTED, name)).write_bytes(body)
    os.rename(incoming.file(State.NOT_COMMITTED, name), incoming.file(State.NEW, name))


def test_1_a_name_dropped_twice_is_delivered_twice_and_stops_nothing(root):
    from dropboxmq.distributor import distribute
    from dropboxmq.recovery import recover

    with Connection(root, "subscriber", FAST, create=True) as conn:
        conn.create_session().create_durable_consumer(Topic("feeds"), "s").close()
    _drop_into_topic(root, "feeds", "latest.csv", b"monday")
    assert distribute(root) == 1
    _drop_into_topic(root, "feeds", "latest.csv", b"tuesday")
    assert distribute(root) == 1  # not in doubt
    assert os.listdir(root / "dropboxmq" / "transaction" / "committing") == []
    with Connection(root, "worker", FAST, create=True) as conn:  # a consumer of an unrelated queue works
        session = conn.create_session()
        session.create_producer().send(Queue("other"), "unrelated")
        assert session.create_consumer(Queue("other")).receive_body(timeout=5) == "unrelated"
    assert recover(root).errors == []
    with Connection(root, "subscriber", FAST, create=True) as conn:
        sub = conn.create_session().create_durable_consumer(Topic("feeds"), "s")
        got = sorted((m.body, m.message_id) for m in sub)
    assert [body for body, _ in got] == [b"monday", b"tuesday"]
    assert len({mid for _, mid in got}) == 2  # two messages, two ids


def test_1_a_log_that_cannot_be_finished_does_not_stop_the_other_consumers(root, monkeypatch):
    """Whatever keeps one dead publisher's commit from finishing, consumers elsewhere go on."""

    with Connection(root, "worker", FAST, create=True) as conn:
        session = conn.create_session()
        session.create_producer().send(Queue("other"), "unrelated")

        def broken(*args, **kwargs):
            raise StoreError("cannot send x: y already exists")

        monkeypatch.setattr(transaction, "recover_log", broken)  # what finish_dead_commits calls
        committing = root / "dropboxmq" / "transaction" / "committing"
        (committing / "ghost~tag~1").write_text("")
        (root / "dropboxmq" / "clients" / "ghost").write_text("")  # registered, lock free: dead
        assert session.create_consumer(Queue("other")).receive_body(timeout=5) == "unrelated"


# ---------------------------------------------------------------- 2: restarted with the same client id


def _receive_and_die(root: str, queue: str, client_id: str) -> None:
    """A CLIENT_ACKNOWLEDGE consumer that takes one message and dies like kill -9 (no cleanup)."""
    from dropboxmq.ackmode import CLIENT_ACKNOWLEDGE

    conn = Connection(root, client_id, FAST, create=True)
    consumer = conn.create_session(ack_mode=CLIENT_ACKNOWLEDGE).create_consumer(Queue(queue))
    assert consumer.receive(timeout=5) is not None
    os._exit(0)


def test_2_a_consumer_restarted_with_its_client_id_gets_its_predecessors_messages(root):
    import multiprocessing

    with Connection(root, "sender", FAST, create=True) as conn:
        conn.create_session().create_producer().send(Queue("jobs"), "job 1")
    child = multiprocessing.get_context("fork").Process(target=_receive_and_die, args=(str(root), "jobs", "worker"))
    child.start()
    child.join()
    assert ls(root, "jobs", "processing") and ls(root, "jobs", "processing")[0].startswith("worker~")
    with Connection(root, "worker", FAST, create=True) as conn:  # the restart, same id
        msg = conn.create_session().create_consumer(Queue("jobs")).receive(timeout=5)
        assert msg is not None and msg.text == "job 1"
        assert msg.redelivered and msg.delivery_count == 2
    assert ls(root, "jobs", "processing") == []


# ---------------------------------------------------------------- 3, 4, 6: names with no room


LONG_FOREIGN = "4.1795380000000000-1." + "x" * 234  # 255 bytes: no room for the count
assert len(LONG_FOREIGN) == 255


@pytest.mark.parametrize("name", ["invoice-42.xml", LONG_FOREIGN, "4.1795380000000000-1." + "y" * 220])
def test_3_recover_redelivers_a_name_with_no_room_as_redelivered(root, name):
    from dropboxmq.ackmode import CLIENT_ACKNOWLEDGE

    drop(root, "q", name, b"body")
    with Connection(root, "c", FAST, create=True) as conn:
        session = conn.create_session(ack_mode=CLIENT_ACKNOWLEDGE)
        consumer = session.create_consumer(Queue("q"))
        for delivery in (1, 2, 3):
            msg = consumer.receive(timeout=5)
            assert msg is not None and msg.body == b"body"
            assert (msg.redelivered, msg.delivery_count) == (delivery > 1, delivery)
            session.recover()
        msg = consumer.receive(timeout=5)
        assert msg.delivery_count == 4
        session.acknowledge()
    assert ls(root, "q", "processed") == [name] and ls(root, "q", "target") == []
    assert not os.listdir(layout.queue_box(root, Queue("q")).path / ".claims")  # forgotten once acked


def test_3_exec_failing_dead_letters_a_foreign_name(tmp_path):
    import subprocess
    import sys

    root = tmp_path / "root"
    drop(root, "q", "invoice-42.xml", b"<invoice/>")
    # a subprocess: before the fix this drain never ended (the count never grew); the timeout
    # only keeps such a failure from hanging the suite
    result = subprocess.run([sys.executable, "-m", "dropboxmq.cli", "--root", str(root), "receive", "q", "-n", "0",
                             "--exec", "exit 1", "--redelivery-delay", "0"], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 1
    assert ls(root, "q", "error") == ["invoice-42.xml"] and ls(root, "q", "target") == []
    assert result.stderr.count("exited with status 1") == 10  # max_delivery_attempts, then error/


def test_4_a_long_name_our_producer_accepts_is_claimed_with_its_owner_and_recovered(root):
    import multiprocessing

    from dropboxmq.message import TextMessage
    from dropboxmq.recovery import recover

    with Connection(root, "sender", FAST, create=True) as conn:
        msg = TextMessage("long")
        msg.set_property("p", "v" * 190)
        conn.create_session().create_producer().send(Queue("q"), msg)
    (name,) = ls(root, "q", "target")
    assert 225 <= len(name) <= 236, len(name)
    child = multiprocessing.get_context("fork").Process(target=_receive_and_die, args=(str(root), "q", "victim-1"))
    child.start()
    child.join()
    (pname,) = ls(root, "q", "processing")
    assert codec.split_processing_name(pname)[0] == "victim-1"  # the claim names its owner
    assert recover(root).redelivered == 1
    with Connection(root, "other", FAST, create=True) as conn:
        got = conn.create_session().create_consumer(Queue("q")).receive(timeout=5)
        assert got.text == "long" and got.redelivered and got.delivery_count == 2
        assert got.get_property("p") == "v" * 190


def test_6_a_live_consumers_ghost_named_message_is_not_taken_back(root):
    from dropboxmq.recovery import recover
    from dropboxmq.ackmode import CLIENT_ACKNOWLEDGE

    with Connection(root, "ghost", FAST, create=True):
        pass
    (root / "dropboxmq" / "clients" / "ghost").write_text("")  # registered, lock free: dead
    name = "ghost~4.1795380000000000-1.T...." + "z" * 223
    assert len(name) == 255
    drop(root, "q", name, b"held")
    with Connection(root, "live", FAST, create=True) as conn:
        session = conn.create_session(ack_mode=CLIENT_ACKNOWLEDGE)
        consumer = session.create_consumer(Queue("q"))
        assert consumer.receive(timeout=5).body == b"held"
        assert recover(root).redelivered == 0
        assert consumer.receive(timeout=0) is None  # not delivered again while held
        session.acknowledge()
    assert ls(root, "q", "processed") == [name]


def test_3_a_count_registered_after_the_consumers_listing_still_counts(root, monkeypatch):
    """A consumer whose listing of the claim register predates another consumer's entry (the
    register is listed once per walk) must not deliver the message as a first delivery."""
    from dropboxmq.ackmode import CLIENT_ACKNOWLEDGE
    from dropboxmq.store import Dropbox

    drop(root, "q", "invoice-42.xml", b"body")
    with Connection(root, "first", FAST) as conn:
        session = conn.create_session(ack_mode=CLIENT_ACKNOWLEDGE)
        assert session.create_consumer(Queue("q")).receive(timeout=5).delivery_count == 1
        session.recover()
    real_registered = Dropbox.register_inodes
    listings = []

    def stale_then_real(box):  # the first listing misses the entry, as if made just before it
        listings.append(box)
        return frozenset() if len(listings) == 1 else real_registered(box)

    monkeypatch.setattr(Dropbox, "register_inodes", stale_then_real)
    with Connection(root, "second", FAST) as conn:
        msg = conn.create_session().create_consumer(Queue("q")).receive(timeout=5)
        assert msg is not None and msg.redelivered and msg.delivery_count == 2


def test_3_recovery_clears_what_a_crash_left_in_the_claim_register(root):
    """Found by the crash-state explorer once the claim register existed: a crash between the
    register's temporary file and its rename, or a claim that lost its race, left files in
    ``.claims/`` that no recovery ever removed."""
    from dropboxmq.recovery import recover

    with Connection(root, "c", FAST, create=True) as conn:
        conn.create_queue("q")
    box = layout.queue_box(root, Queue("q"))
    register = box.path / ".claims"
    register.mkdir()
    (register / ".12345.999.tmp").write_text("{")  # a half-written entry
    (register / "12345").write_text('{"name": "gone.xml", "size": 1, "count": 1}')  # no such file any more
    report = recover(root, orphan_age=0)
    assert report.claim_entries_removed == 2
    assert os.listdir(register) == []


def test_3_a_rollback_dead_letters_an_alias_whose_register_entry_is_lost(root):
    """N-11: an alias claim (``c~#<inode>``) whose register entry is gone has no name to go back
    under.  A rollback redelivered it as ``target/#<inode>``: a new message id, and a name that
    every later claim reads as an alias.  Recovery dead-letters such a claim; so does a rollback."""
    drop(root, "q", LONG_FOREIGN, b"body")
    with Connection(root, "c", FAST, create=True) as conn:
        session = conn.create_session(transacted=True)
        assert session.create_consumer(Queue("q")).receive(timeout=5).body == b"body"
        register = layout.queue_box(root, Queue("q")).path / ".claims"
        (entry,) = os.listdir(register)
        (register / entry).unlink()  # lost (an operator's clean-up, a disk error)
        session.rollback()
    assert ls(root, "q", "target") == []
    assert ls(root, "q", "error") == [f"c~#{entry}"]
