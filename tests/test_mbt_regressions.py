"""Regression tests for the defects the model-based API tester (``dropboxmq_stress.apitester``,
issue 24) and the extended hostile-root fuzzer found in the reference.  Each test is named after
what the tester's minimal program did, and failed before its fix."""

from __future__ import annotations

import os
from pathlib import Path

from click.testing import CliRunner

from dropboxmq.cli import main as cli
from dropboxmq.making import ensure_dropbox
from dropboxmq.distributor import distribute
from dropboxmq.message import Queue, TextMessage, Topic
from dropboxmq.retention import prune
from dropboxmq.connection import Connection
from dropboxmq.store import Dropbox

from conftest import FAST


def test_prune_skips_a_directory_quarantined_to_error_and_deletes_the_rest(root: Path) -> None:
    """Minimal program: a third party drops a directory into a topic's .incoming/target/;
    distribute quarantines it to error/ (it is no message); ``prune --state error`` then
    stopped at it with exit 1 ("Is a directory") and deleted nothing after it, every run."""
    with Connection(root, client_id="c", settings=FAST, create=True) as conn:
        conn.create_session().create_durable_consumer(Topic("t"), "s").close()
    incoming = ensure_dropbox(Dropbox(root / "topic-root" / "t" / ".incoming"))
    (incoming.path / "target" / "junk").mkdir()
    (incoming.path / "target" / "4.1700000000000000-1.T").write_bytes(b"a real drop")
    distribute(root, settings=FAST)
    quarantined = os.listdir(incoming.path / "error")
    assert len(quarantined) == 1 and (incoming.path / "error" / quarantined[0]).is_dir()
    ensure_dropbox(Dropbox(root / "q" / "incoming"))
    (root / "q" / "incoming" / "error" / "4.1700000000000001-1.T").write_bytes(b"dead")

    result = CliRunner().invoke(cli, ["--root", str(root), "prune", "--older-than", "0s",
                                      "--state", "processed,expired,error"])
    assert result.exit_code == 0, result.output
    assert os.listdir(root / "q" / "incoming" / "error") == []  # the messages are pruned
    assert os.listdir(incoming.path / "processed") == []
    assert (incoming.path / "error" / quarantined[0]).is_dir()  # what is no message is left alone
    assert prune(incoming, ["error"], 0).matched == 0



def test_purge_leaves_a_directory_in_target_alone_and_deletes_the_messages(root: Path) -> None:
    """Minimal program: a third party drops a directory into q1's target/ beside a message;
    ``purge q1 --yes`` stopped at it with exit 1 ("cannot delete ...: Is a directory") and deleted
    nothing listed after it.  Like prune, purge leaves what is no message alone."""
    with Connection(root, client_id="c", settings=FAST, create=True) as conn:
        conn.create_session().create_producer(Queue("q1")).send(TextMessage("waiting"))
    target = root / "q1" / "incoming" / "target"
    (target / "0-junk").mkdir()  # listed first
    os.mkfifo(target / "1-fifo")

    result = CliRunner().invoke(cli, ["--root", str(root), "purge", "q1", "--yes"])
    assert result.exit_code == 0, result.output
    assert "purged 1 messages" in result.output
    assert sorted(os.listdir(target)) == ["0-junk", "1-fifo"]

def selective_consumer_and_a_taker(rounds: int) -> None:
    """The tester's program: c1 consumes q1 with the selector ``n > 4`` and, in the same session,
    without one; each round sends a message with n=0, the selective consumer's receive rejects it
    and the other one takes it.  Every step is checked, held state included."""
    from dropboxmq_stress.apitester import APIModel

    m = APIModel()
    try:
        client = m.start_client("c1")
        m.open_session(client, "client")
        m.open_consumer(0, "queue", "q1", "t", "s1", "n > 4", False)  # consumer 0: the selective one
        m.open_consumer(0, "queue", "q1", "t", "s1", None, False)  # consumer 1: the taker
        for _ in range(rounds):
            m.send(0, True, "q1", "t", 4, True, 0.0, 0.0, 0)
            m.guarantees_hold()
            for consumer in (0, 1):
                m.receive(consumer)
                m.guarantees_hold()
            m.acknowledge(0)
            m.guarantees_hold()
    finally:
        m.teardown()


def test_a_selective_consumer_does_not_keep_the_misses_others_took() -> None:
    """Minimal program of the held-state invariant (the defect fixed in 425ffd5): with
    ``skip &= keys.keys()`` in ``Claimer.relist`` the selective consumer's ``claimer.skip`` kept
    every name it had rejected, one more per round, and passed its bound at round 9: "consumer 2
    (queue of q1/incoming, selector 'n > 4', client c1) holds 15 container elements more than at
    its creation, past its bound 6 * 1 + 8 = 14 (...); grown most: claimer.skip +9, box._plain +4,
    claimer.keys +1"."""
    selective_consumer_and_a_taker(rounds=20)


def test_a_consumer_does_not_keep_the_delayed_messages_purged_from_target() -> None:
    """Minimal program of the held-state invariant: each round sends q1 a message delayed by an
    hour, a receive holds it back (too early) and ``dropboxmq purge q1`` deletes it.  The consumer's
    ``claimer.deferred`` kept every purged name till its delivery time (its relisting forgot them in
    ``skip`` only) and passed its bound at round 10: "consumer 2 (queue of q1/incoming, selector
    None, client c1) holds 15 container elements more than at its creation, past its bound 6 * 1 +
    8 = 14 (...); grown most: claimer.deferred +10, box._plain +2, claimer.skip +1"."""
    from dropboxmq_stress.apitester import APIModel

    m = APIModel()
    try:
        client = m.start_client("c1")
        m.open_session(client, "auto")
        m.open_consumer(0, "queue", "q1", "t", "s1", None, False)
        for _ in range(20):
            m.send(0, True, "q1", "t", 4, True, 0.0, 3600.0, 5)
            m.guarantees_hold()
            m.receive(0)
            m.guarantees_hold()
            m.cli_purge("q1")
            m.guarantees_hold()
    finally:
        m.teardown()


def test_receive_output_dir_writes_a_message_whose_id_fills_255_bytes(root: Path, tmp_path: Path) -> None:
    """A foreign name of 255 bytes that is no 1.2 name is a legal message whose id is the whole
    name (N-3, N-8).  ``receive -n 0 --output-dir`` wrote it first to ``.<id>.part`` -- 261 bytes --
    and stopped with exit 1 ("File name too long"), the message back in target/, every run."""
    Connection(root, client_id="c", settings=FAST, create=True).close()
    box = ensure_dropbox(Dropbox(root / "q2" / "incoming"))
    names = [("ghost~1-" + "g" * 255)[:255], ("report-2-" + "r" * 255)[:250], "invoice-3.xml"]
    for i, name in enumerate(names):
        (box.path / "target" / name).write_bytes(b"body %d" % i)
    out = tmp_path / "out"

    result = CliRunner().invoke(cli, ["--root", str(root), "receive", "q2", "-n", "0", "--output-dir", str(out)])
    assert result.exit_code == 0, result.output
    assert sorted(result.output.split()) == sorted(str(out / name) for name in names)
    assert sorted(os.listdir(out)) == sorted(names)  # no .part left behind
    assert [(out / name).read_bytes() for name in names] == [b"body 0", b"body 1", b"body 2"]
    assert os.listdir(box.path / "target") == [] and os.listdir(box.path / "processing") == []


def test_the_tester_drains_a_255_byte_tilde_name_to_a_directory() -> None:
    """The tester's minimal program (it stopped most long-profile runs): a third party drops
    ``ghost~N-ggg...`` (255 bytes) into q2's target/, then ``dropboxmq receive q2 -n 0
    --output-dir D``: "receive --output-dir -n 0 left mbt-1 waiting".  The ``~`` is not the cause
    (the library claims it under an alias and reads the whole name as its id); the 261-byte
    ``.part`` file was."""
    from dropboxmq_stress.apitester import APIModel

    m = APIModel()
    try:
        m.drop_foreign(False, "q2", "t", "tilde", 255)
        m.guarantees_hold()
        m.cli_receive_to_directory("q2")
        m.guarantees_hold()
    finally:
        m.teardown()


def test_the_tester_reads_the_count_of_a_topic_copy_claimed_under_an_alias() -> None:
    """Seen once in a long run: "mbt-2 of topic-root/t/.subscriptions/s2.c1 is in processing:c1 with
    delivery count 0 in its name; the model expects [1]".  Minimal program: c1's durable
    subscription s2 to t; a third party drops a foreign name with no room for a count into t's
    .incoming/; ``dropboxmq distribute`` copies it (same name) to s2.c1; c1 receives it.  The
    library claims it as ``c1~#<inode>`` and keeps the count in the claim register (claims.py;
    N-7: a processing/ name MAY carry the count); the model read the count from the name only, and
    took the copy for a name with room.  Now it reads the register too: the count is still checked,
    here 1, then 2 after a recover (target/<name> again, the count in the register)."""
    from dropboxmq_stress.apitester import APIModel

    for kind, length in (("invoice", 255), ("long-foreign", 240), ("long-v12", 255)):
        m = APIModel()
        try:
            client = m.start_client("c1")
            m.open_session(client, "client")
            m.open_consumer(0, "durable", "q1", "t", "s2", None, False)
            m.drop_foreign(True, "q1", "t", kind, length)
            m.cli_distribute()
            m.guarantees_hold()
            third_delivery_is_counted(m, "topic-root/t/.subscriptions/s2.c1", kind)
        finally:
            m.teardown()


def test_the_tester_reads_the_count_of_a_name_with_no_room_for_the_owner_prefix() -> None:
    """The same mistake on a queue: a 233-byte 1.2 name has room for ``JMSXDeliveryCountI=1`` but
    not for the ``c1~`` before it, so it is claimed under an alias too; the model failed at the
    first receive ("mbt-1 of q1/incoming is in processing:c1 with delivery count 0 in its name")."""
    from dropboxmq_stress.apitester import APIModel

    m = APIModel()
    try:
        client = m.start_client("c1")
        m.open_session(client, "client")
        m.open_consumer(0, "queue", "q1", "t", "s1", None, False)
        m.drop_foreign(False, "q1", "t", "long-v12", 233)
        third_delivery_is_counted(m, "q1/incoming", "long-v12")
    finally:
        m.teardown()


def third_delivery_is_counted(m, box: str, kind: str) -> None:
    """Receive and recover twice, receive again, every step checked: the model must read the third
    delivery's count (from the claim register, for an alias claim) as the library wrote it."""
    for _ in range(2):
        m.receive(0)
        m.guarantees_hold()
        m.recover(0)
        m.guarantees_hold()
    m.receive(0)
    m.guarantees_hold()
    assert m.entries[(box, "mbt-1")].allowed == {("processing:c1", 3)}, (kind, m.entries[(box, "mbt-1")].allowed)
