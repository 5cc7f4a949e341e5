"""Regression tests for the defects hostile testing found (issue 15, first half): hostile
entries where the library expects its own files, foreign names at the edges of the 255-byte
limit, and inputs that made the library hang, crash with a traceback or leave its root.

A test that could hang on the unfixed code runs the step in a child process with a
timeout (a hang is the defect; nothing here waits on a sleep)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dropboxmq import codec
from dropboxmq.making import ensure_dropbox
from dropboxmq.errors import DropboxMQError, InvalidDestinationError
from dropboxmq.selector import InvalidSelectorError
from dropboxmq.message import Queue, TextMessage, Topic
from dropboxmq.recovery import recover
from dropboxmq.ackmode import CLIENT_ACKNOWLEDGE
from dropboxmq.connection import Connection
from dropboxmq.store import Dropbox

from conftest import FAST, counts, ls

#: a step that finishes in well under a second; a hang shows as this many seconds passing
BOUND = 60


def run_bounded(code: str) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter; a hang fails the test instead of the suite."""
    try:
        return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                              text=True, timeout=BOUND)
    except subprocess.TimeoutExpired:
        pytest.fail(f"did not finish within {BOUND} s (hangs):\n{code}")


def send(root: Path, queue: str, body: bytes = b"x", n: int = 1) -> None:
    with Connection(root, settings=FAST, create=True) as conn:
        producer = conn.create_session().create_producer(Queue(queue))
        for _ in range(n):
            producer.send(TextMessage(body=body))


def dead_client(root: Path, client_id: str) -> None:
    """A registration whose lock nobody holds: its owner is dead."""
    d = root / "dropboxmq" / "clients"
    d.mkdir(parents=True, exist_ok=True)
    (d / codec.encode_field(client_id)).write_text("pid=1 host=gone\n")


def tree_digest(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


# ---------------------------------------------------------------- 1: reads past 2 GiB


def test_1_a_short_read_before_the_size_is_not_the_end(root, monkeypatch):
    """Linux returns at most 0x7ffff000 bytes per read(): a message over 2,147,479,552 bytes
    came back truncated.  Scaled down: read() returns at most 4 KiB here."""
    body = os.urandom(300_000)
    send(root, "q", body)
    real_read = os.read
    monkeypatch.setattr(os, "read", lambda fd, n: real_read(fd, min(n, 4096)))
    with Connection(root, settings=FAST, create=True) as conn:
        got = conn.create_session().create_consumer(Queue("q")).receive(timeout=5)
    assert got is not None and got.body == body


# ---------------------------------------------------------------- 2: FIFOs where files belong


def test_2_fifo_as_a_dead_owners_transaction_log_does_not_hang_recover(root):
    send(root, "q")
    dead_client(root, "ghost")
    os.mkfifo(root / "dropboxmq" / "transaction" / "committing" / "ghost~s1~1")
    done = run_bounded(f"""
        from dropboxmq.recovery import recover
        r = recover({str(root)!r})
        print(len(r.errors))
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "1"  # reported, not followed


def test_2_fifo_as_a_live_owners_transaction_log_does_not_hang_recover(root):
    with Connection(root, client_id="alive", settings=FAST, create=True):
        os.mkfifo(root / "dropboxmq" / "transaction" / "associated" / "alive~s1~1")
        done = run_bounded(f"""
            from dropboxmq.recovery import recover
            print(len(recover({str(root)!r}).errors))
        """)
    assert done.returncode == 0, done.stderr


def test_2_fifo_as_a_registration_does_not_hang_receive(root):
    send(root, "q")
    os.makedirs(root / "dropboxmq" / "clients", exist_ok=True)
    os.mkfifo(root / "dropboxmq" / "clients" / "ghost")
    (root / "q" / "incoming" / "processing" / "ghost~4.ID%3Ax.x").write_bytes(b"held")
    done = run_bounded(f"""
        from dropboxmq.message import Queue
        from dropboxmq.connection import Connection
        with Connection({str(root)!r}, create=True) as conn:
            print(conn.create_session().create_consumer(Queue("q")).receive(timeout=1).body)
    """)
    assert done.returncode == 0, done.stderr
    assert "b'x'" in done.stdout
    assert ls(root, "q", "processing") == ["ghost~4.ID%3Ax.x"]  # a FIFO is no registration: unknown owner


def test_2_fifo_as_a_subscription_file_does_not_hang_publish(root):
    with Connection(root, client_id="c", settings=FAST, create=True) as conn:
        session = conn.create_session()
        good = session.create_durable_consumer(Topic("t"), "good")
        session.create_durable_consumer(Topic("t"), "bad").close()
    subs = root / "topic-root" / "t" / ".subscriptions"
    meta = subs / "bad.c" / ".subscription"
    meta.unlink()
    os.mkfifo(meta)
    done = run_bounded(f"""
        from dropboxmq.message import Topic, TextMessage
        from dropboxmq.connection import Connection
        with Connection({str(root)!r}, create=True) as conn:
            conn.create_session().create_producer(Topic("t")).send(TextMessage(body=b"news"))
    """)
    assert done.returncode == 0, done.stderr
    assert len(os.listdir(subs / "good.c" / "target")) == 1
    del good


# ---------------------------------------------------------------- 3: .subscription of another shape


@pytest.mark.parametrize("content", ["[1, 2]", '{"kind": 5}', '"durable"', "{", ""])
def test_3_malformed_subscription_file_breaks_neither_publish_nor_recover(root, content):
    send(root, "q")
    with Connection(root, client_id="c", settings=FAST, create=True) as conn:
        session = conn.create_session()
        session.create_durable_consumer(Topic("t"), "good").close()
        session.create_durable_consumer(Topic("t"), "bad").close()
    subs = root / "topic-root" / "t" / ".subscriptions"
    (subs / "bad.c" / ".subscription").write_text(content)
    dead_client(root, "ghost")
    (root / "q" / "incoming" / "processing" / "ghost~4.ID%3Ay.y").write_bytes(b"y")
    with Connection(root, settings=FAST, create=True) as conn:
        conn.create_session().create_producer(Topic("t")).send(TextMessage(body=b"news"))
    assert len(os.listdir(subs / "good.c" / "target")) == 1
    report = recover(root)
    assert report.redelivered == 1  # recovery went on past the bad subscription
    assert ls(root, "q", "target") and not ls(root, "q", "processing")


# ---------------------------------------------------------------- 4: paths outside the root


@pytest.mark.parametrize("where, kind", [("committing", "send"), ("associated", "send"),
                                         ("committing", "receive"), ("associated", "receive")])
def test_4_recovery_never_follows_a_log_out_of_the_root(tmp_path, where, kind):
    root = tmp_path / "root"
    send(root, "q")
    outside = tmp_path / "outside" / "incoming"
    ensure_dropbox(Dropbox(outside))
    state = "working" if kind == "send" else "processing"
    (outside / state / "victim").write_bytes(b"precious")
    (outside / state / "c~victim").write_bytes(b"precious too")
    os.symlink(tmp_path / "outside", root / "link")  # a symlink inside the root that leads out
    before = tree_digest(tmp_path / "outside")
    dead_client(root, "ghost")
    entries = [{"kind": kind, "box": "../outside/incoming", "name": "victim"},
               {"kind": kind, "box": "link/incoming", "name": "victim"},
               {"kind": kind, "box": str(outside), "name": "victim"},
               {"kind": kind, "box": "q/incoming", "name": "../../../outside/incoming/" + state + "/victim"}]
    for i, e in enumerate(entries):
        log = root / "dropboxmq" / "transaction" / where / f"ghost~s{i}~1"
        log.write_text(json.dumps(e) + "\n")
    report = recover(root)
    assert tree_digest(tmp_path / "outside") == before
    assert len(report.errors) == len(entries)


# ---------------------------------------------------------------- 5: "~" in a bare claim


def test_5_a_bare_claim_with_a_tilde_is_not_another_owners(root):
    """A name too long for the consumer's prefix was claimed bare; a '~' in it made recovery
    take it for the entry of the client named before the '~'.  Now it is claimed under an
    alias that names its owner (claims.py, issue 24)."""
    dead_client(root, "ghost")
    name = "ghost~" + "x" * 249  # 255 bytes
    ensure_dropbox(Dropbox(root / "q" / "incoming"))
    (root / "q" / "incoming" / "target" / name).write_bytes(b"foreign")
    with Connection(root, client_id="live", settings=FAST, create=True) as conn:
        session = conn.create_session(ack_mode=CLIENT_ACKNOWLEDGE)
        got = session.create_consumer(Queue("q")).receive(timeout=5)
        assert got is not None and got.body == b"foreign"
        (held,) = ls(root, "q", "processing")  # "live~" + name is over 255 bytes: an alias
        assert codec.split_processing_name(held)[0] == "live"
        recover(root)
        assert ls(root, "q", "processing") == [held]  # still the live consumer's
        session.acknowledge()
    assert counts(root, "q") == {"working": 0, "target": 0, "processing": 0, "processed": 1,
                                 "expired": 0, "error": 0}


def test_5_a_recovered_bare_claim_keeps_its_name(root):
    ensure_dropbox(Dropbox(root / "q" / "incoming"))
    name = "ghost~" + "x" * 249  # 255 bytes
    (root / "q" / "incoming" / "target" / name).write_bytes(b"foreign")
    with Connection(root, client_id="live", settings=FAST, create=True) as conn:
        session = conn.create_session(ack_mode=CLIENT_ACKNOWLEDGE)
        assert session.create_consumer(Queue("q")).receive(timeout=5) is not None
        session.recover()
    assert ls(root, "q", "target") == [name]  # not "x"*249: the message keeps its id


def test_5_foreign_heads_that_no_encoder_writes_are_no_client(root):
    assert codec.split_processing_name("4.ID:abc~def") == (None, "4.ID:abc~def")
    assert codec.split_processing_name("c%2Ex~4.1-2.T") == ("c.x", "4.1-2.T")
    assert codec.split_processing_name("a.b~4.1-2.T") == ("a.b", "4.1-2.T")  # 1.2 kept '.'


# ---------------------------------------------------------------- 6: LIKE without backtracking


def test_6_like_on_a_long_value_finishes(root):
    done = run_bounded("""
        from dropboxmq.selector import parse
        sel = parse("p LIKE '%a%a%a%a%a%a%a%a%b'")
        print(sel.matches_values({"p": "a" * 200}))
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


# ---------------------------------------------------------------- 8: 254-byte multibyte names


def test_8_a_254_byte_multibyte_name_dropped_twice_is_acked_twice(root):
    name = "4." + "é" * 126  # 254 bytes, 128 characters
    assert len(name.encode()) == 254
    box = ensure_dropbox(Dropbox(root / "q" / "incoming"))
    with Connection(root, settings=FAST, create=True) as conn:
        consumer = conn.create_session().create_consumer(Queue("q"))
        for body in (b"one", b"two"):
            (box.path / "target" / name).write_bytes(body)
            got = consumer.receive(timeout=5)
            assert got is not None and got.body == body
    processed = ls(root, "q", "processed")
    assert len(processed) == 2 and all(len(n.encode()) <= 255 for n in processed)
    assert not ls(root, "q", "processing")


def test_8_cut_to_bytes_never_splits_a_character():
    from dropboxmq.collisions import cut_to_bytes

    assert cut_to_bytes("1~" + "é" * 127, 255) == "1~" + "é" * 126
    assert cut_to_bytes("ab", 255) == "ab"
    cut = cut_to_bytes("€" * 100, 10)
    assert cut == "€" * 3


# ---------------------------------------------------------------- 11: non-UTF-8 foreign names


def test_11_non_utf8_name_in_a_transacted_receive(root):
    box = ensure_dropbox(Dropbox(root / "q" / "incoming"))
    raw = b"4.ID%3Aforeign.caf\xe9"
    with open(os.path.join(os.fsencode(box.path / "target"), raw), "wb") as f:
        f.write(b"bytes")
    with Connection(root, settings=FAST, create=True) as conn:
        tx = conn.create_session(transacted=True)
        got = tx.create_consumer(Queue("q")).receive(timeout=5)
        assert got is not None and got.body == b"bytes"
        tx.rollback()
        assert tx.create_consumer(Queue("q")).receive(timeout=5).body == b"bytes"
        tx.commit()
    assert counts(root, "q")["processed"] == 1


def test_11_distribute_fans_out_a_non_utf8_name(root):
    from dropboxmq.distributor import distribute

    with Connection(root, client_id="c", settings=FAST, create=True) as conn:
        conn.create_session().create_durable_consumer(Topic("t"), "s").close()
    incoming = ensure_dropbox(Dropbox(root / "topic-root" / "t" / ".incoming"))
    with open(os.path.join(os.fsencode(incoming.path / "target"), b"4.ID%3Af.\xff"), "wb") as f:
        f.write(b"z")
    assert distribute(root, settings=FAST) == 1
    assert len(os.listdir(root / "topic-root" / "t" / ".subscriptions" / "s.c" / "target")) == 1


# ---------------------------------------------------------------- also: clear errors for bad input


@pytest.mark.parametrize("make", [
    lambda: Queue("caf\ud800"),
    lambda: Topic("a.\ud800"),
    lambda: Queue("é" * 101),
])
def test_also_bad_destination_names_raise_a_documented_error(make):
    with pytest.raises(InvalidDestinationError):
        make()


def test_also_undecodable_bytes_are_a_valid_name(root):
    send(root, "caf\udce9", b"raw")
    assert os.path.isdir(os.path.join(os.fsencode(root), b"caf\xe9", b"incoming"))
    with Connection(root, settings=FAST, create=True) as conn:
        assert conn.create_session().create_consumer(Queue("caf\udce9")).receive(timeout=5).body == b"raw"


def test_also_an_over_long_subscription_name_raises_a_documented_error(root):
    with Connection(root, client_id="c", settings=FAST, create=True) as conn:
        with pytest.raises(DropboxMQError, match="over the 255-byte limit"):
            conn.create_session().create_shared_durable_consumer(Topic("t"), "x" * 250)


def test_also_a_5000_digit_integer_is_an_invalid_selector():
    from dropboxmq.selector import parse

    with pytest.raises(InvalidSelectorError, match="out of the range of long"):
        parse("a = " + "9" * 5000)
    with pytest.raises(InvalidSelectorError, match="out of the range of long"):
        parse("a = 0x" + "f" * 5000)
    assert parse("a = 0000000000000000000000000000007").matches_values({"a": 7})


def test_5_a_dead_owners_long_message_name_is_still_reclaimed(root):
    """The bare-claim doubt is only for names that are no message name after the '~'."""
    name = "4.1795380000000000-1." + "x" * 200
    ensure_dropbox(Dropbox(root / "q" / "incoming"))
    dead_client(root, "ghost")
    pname = codec.processing_name("ghost", codec.with_delivery_count(name, 1))
    assert pname.startswith("ghost~")
    (root / "q" / "incoming" / "processing" / pname).write_bytes(b"held by the dead")
    with Connection(root, client_id="a-live-client-with-a-long-id-" + "z" * 30, settings=FAST, create=True):
        recover(root)
    assert ls(root, "q", "target") == [codec.with_delivery_count(name, 1)]


# ---------------------------------------------------------------- found by the fuzzer


def test_fuzz_a_symlinked_log_directory_is_never_followed(tmp_path):
    """rolling-back/ as a symlink out of the root: recover took the files there for dead
    owners' logs and deleted them."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    send(root, "q")
    outside.mkdir()
    (outside / "secret").write_bytes(b"do not touch")
    rolling_back = root / "dropboxmq" / "transaction" / "rolling-back"
    rolling_back.rmdir()
    os.symlink(outside, rolling_back)
    recover(root, assume_unknown_dead=True)
    assert (outside / "secret").read_bytes() == b"do not touch"
    with pytest.raises(DropboxMQError, match="symlink"):
        Connection(root, create=True)


def test_fuzz_a_hard_linked_registration_never_changes_the_other_file(tmp_path):
    root, outside = tmp_path / "root", tmp_path / "outside"
    send(root, "q")
    outside.mkdir()
    (outside / "secret").write_bytes(b"do not touch")
    os.link(outside / "secret", root / "dropboxmq" / "clients" / "c")
    with Connection(root, client_id="c", settings=FAST, create=True):
        pass
    assert (outside / "secret").read_bytes() == b"do not touch"


def test_fuzz_a_file_where_an_internal_directory_belongs_is_one_clear_error(root):
    send(root, "q")
    clients = root / "dropboxmq" / "clients"
    for entry in clients.iterdir():
        entry.unlink()
    clients.rmdir()
    clients.write_bytes(b"not a directory")
    with pytest.raises(DropboxMQError, match="not a directory"):
        Connection(root, create=True)
    (root / "dropboxmq" / "transaction" / "committing").rmdir()
    (root / "dropboxmq" / "transaction" / "committing").write_bytes(b"")
    recover(root)  # finishes: a file where a log directory belongs holds no log


def test_fuzz_a_log_named_after_no_possible_client_is_left_alone(root):
    send(root, "q")
    name = "4." + "é" * 126 + "x"  # its "owner" encodes to over 255 bytes
    (root / "dropboxmq" / "transaction" / "associated" / name).write_bytes(b"junk")
    recover(root)
    with Connection(root, settings=FAST, create=True) as conn:
        assert conn.create_session().create_consumer(Queue("q")).receive(timeout=5) is not None


def test_prune_passes_over_a_state_directory_that_is_a_file(tmp_path):
    """Found by the hostile fuzzer's long profile: retention.prune raised NotADirectoryError (no
    documented error) when a dropbox's processed/ was a file; the other states are still pruned."""
    from dropboxmq.retention import prune

    root = tmp_path / "root"
    with Connection(root, create=True) as conn:
        conn.create_session().create_producer(Queue("q")).send(TextMessage(body=b"x"))
    box = Dropbox(root / "q" / "incoming")
    (box.path / "processed").rmdir()
    (box.path / "processed").write_bytes(b"not a directory")
    (name,) = os.listdir(box.path / "target")
    os.rename(box.path / "target" / name, box.path / "error" / name)
    result = prune(box, ["processed", "error"], 0, now=2**40)
    assert (result.removed, os.listdir(box.path / "error")) == (1, [])
    assert (box.path / "processed").read_bytes() == b"not a directory"
