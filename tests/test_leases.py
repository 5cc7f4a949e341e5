"""Issue 28, the library: liveness across hosts (leases), fencing, claims that are claims.

Hosts are simulated: flock made a no-op (sshfs: a lock taken on one mount is not seen from the
other), the file system's missing renameat2 by a renameat2 answering EINVAL, racing movers by a
link()/rename() that lets the other mover run right after it, and time by controllable clocks.
Nothing here sleeps.
"""

from __future__ import annotations

import ctypes
import dataclasses
import errno
import os
import types

import pytest

from dropboxmq import clients, collisions, filesystems, leases, liveness as liveness_mod, netfs, store
from dropboxmq.making import ensure_dropbox
from dropboxmq.clients import Registration
from dropboxmq.liveness import liveness
from dropboxmq.errors import InvalidClientIDError, MessageTakenError
from dropboxmq.leases import LeaseExpiredError
from dropboxmq.lifecycle import Move, State
from dropboxmq.message import Queue, TextMessage
from dropboxmq.recovery import reclaim_dead_owners
from dropboxmq import CLIENT_ACKNOWLEDGE, Connection
from dropboxmq.store import Dropbox
from conftest import FAST, counts, ls

Q = Queue("Q1")
NAME = "4.1140429201295000-9262574723.T"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class FakeOs:
    """``os`` for one module, with some functions replaced (the real ``os`` elsewhere)."""

    def __init__(self, **overrides):
        self.__dict__.update(overrides)

    def __getattr__(self, name):
        return getattr(os, name)


def _use_os(monkeypatch, fake) -> None:
    """``fake`` as the ``os`` of the store and of its paths without renameat2 (netfs.py)."""
    monkeypatch.setattr(store, "os", fake)
    monkeypatch.setattr(netfs, "os", fake)


@pytest.fixture
def no_renameat2(monkeypatch):
    """A file system without RENAME_NOREPLACE (MooseFS, GlusterFS, sshfs, SMB: EINVAL)."""
    def einval(*args):
        ctypes.set_errno(errno.EINVAL)
        return -1

    monkeypatch.setattr(store, "renameat2", einval)
    monkeypatch.setattr(store, "noreplace_supported", True)  # detected at the first move


@pytest.fixture
def other_hosts(monkeypatch):
    """Every registration as if on its own host: flock never conflicts, and a free lock proves
    nothing (sshfs); the observer's clock is the test's."""
    clock = Clock()
    monkeypatch.setattr(clients.fcntl, "flock", lambda fd, op: None)
    monkeypatch.setattr(filesystems, "flock_trusted", lambda root: False)
    monkeypatch.setattr(leases, "OBSERVER", leases.Observer(clock), raising=False)
    return clock


def _sent(box: Dropbox, name: str = NAME, body: bytes = b"x") -> None:
    box.create(name, body, durable=False)
    assert box.move(Move.SEND, State.NOT_COMMITTED, name)


# ================================================================ claims without renameat2


def test_two_claims_of_one_file_leave_one_claim_and_no_second_link(root, monkeypatch, no_renameat2):
    """MooseFS: both claimers' link() succeeded, the loser's unlink found nothing and its link
    stayed in processing/ (same inode, nlink 2), which recovery later delivered again.  A claim
    is one rename now: whoever renames second finds no source."""
    box = ensure_dropbox(Dropbox(root / "Q1" / "incoming"))
    _sent(box)
    other = Dropbox(box.path)
    results: list[bool] = []
    real_link, real_rename = os.link, os.rename

    def then_the_other_claims(call):
        def step(*args, **kwargs):
            out = call(*args, **kwargs)
            if not results:  # right after the first claimer's first step, the second claims
                _use_os(monkeypatch, os)
                results.append(other.move(Move.CLAIM, State.NEW, NAME, "b~" + NAME))
            return out
        return step

    _use_os(monkeypatch, FakeOs(link=then_the_other_claims(real_link),
                                           rename=then_the_other_claims(real_rename)))
    results.insert(0, box.move(Move.CLAIM, State.NEW, NAME, "a~" + NAME))
    assert sorted(results) == [False, True]
    [claim] = ls(root, "Q1", "processing")
    assert os.stat(box.file(State.DELIVERED, claim)).st_nlink == 1
    assert ls(root, "Q1", "target") == []


def test_a_lost_move_out_of_processing_leaves_no_second_name(root, monkeypatch, no_renameat2):
    """An ACK racing a recovery's REDELIVER of the same claim: exactly one of them happens, and the
    message ends in exactly one place (the link fallback left it in processed/ *and* target/)."""
    box = ensure_dropbox(Dropbox(root / "Q1" / "incoming"))
    _sent(box)
    assert box.move(Move.CLAIM, State.NEW, NAME, "a~" + NAME)
    done: list[bool] = []
    real_link, real_rename = os.link, os.rename

    def then_recovery(call):
        def step(*args, **kwargs):
            out = call(*args, **kwargs)
            if not done:
                _use_os(monkeypatch, os)
                done.append(Dropbox(box.path).move(Move.REDELIVER, State.DELIVERED, "a~" + NAME, NAME))
            return out
        return step

    _use_os(monkeypatch, FakeOs(link=then_recovery(real_link), rename=then_recovery(real_rename)))
    acked = box.move(Move.ACK, State.DELIVERED, "a~" + NAME)
    assert [acked, *done].count(True) == 1
    c = counts(root, "Q1")
    assert c["processed"] + c["target"] == 1 and c["processing"] == 0


def test_send_on_a_file_system_whose_link_answers_eperm(root, monkeypatch, no_renameat2):
    """sshfs: a losing link() answers EPERM; SMB: every link() does.  The first is the name being
    taken (the message goes under a name of its own), the second no reason to fail a send."""
    box = ensure_dropbox(Dropbox(root / "Q1" / "incoming"))
    real_link = os.link

    def eperm_when_taken(src, dst, **kw):
        if os.path.lexists(os.path.join(box.dir(State.NEW), os.path.basename(dst))):
            raise PermissionError(errno.EPERM, "Operation not permitted", dst)
        return real_link(src, dst, **kw)

    _use_os(monkeypatch, FakeOs(link=eperm_when_taken))
    _sent(box, body=b"first")
    _sent(box, body=b"second")
    assert box.read(State.NEW, NAME) == b"first"
    assert box.read(State.NEW, collisions.disambiguated(NAME, 2)) == b"second"

    def always_eperm(src, dst, **kw):
        raise PermissionError(errno.EPERM, "Operation not permitted", dst)

    _use_os(monkeypatch, FakeOs(link=always_eperm))
    _sent(box, "5.1140429201295000-9262574723.T", b"third")
    assert box.read(State.NEW, "5.1140429201295000-9262574723.T") == b"third"
    assert ls(root, "Q1", "working") == []


def test_an_eexist_that_proves_nothing_is_tried_again(root, monkeypatch, no_renameat2):
    """GlusterFS answered EEXIST to two racing creates and left no file: an EEXIST with nothing
    there is no reason to fail a create, nor to send a message under another name."""
    box = ensure_dropbox(Dropbox(root / "Q1" / "incoming"))
    real_open, real_link = os.open, os.link
    phantoms = {"open": 1, "link": 1}

    def phantom(kind, call):
        def step(*args, **kwargs):
            if phantoms[kind]:
                phantoms[kind] -= 1
                raise FileExistsError(errno.EEXIST, "File exists", args[0])
            return call(*args, **kwargs)
        return step

    _use_os(monkeypatch, FakeOs(open=phantom("open", real_open), link=phantom("link", real_link)))
    _sent(box, body=b"one")
    assert phantoms == {"open": 0, "link": 0}
    assert ls(root, "Q1", "target") == [NAME] and box.read(State.NEW, NAME) == b"one"


def test_a_link_whose_source_vanished_is_undone(tmp_path, monkeypatch, no_renameat2):
    """link() done, then another mover took the source before our unlink: our name is a second
    name of a file that lives elsewhere now, and must not stay."""
    (tmp_path / "a").write_bytes(b"m")
    real_link = os.link

    def link_then_taken(src, dst, **kw):
        real_link(src, dst, **kw)
        os.rename(src, tmp_path / "elsewhere")

    _use_os(monkeypatch, FakeOs(link=link_then_taken))
    with pytest.raises(FileNotFoundError):
        store.rename_noreplace(str(tmp_path / "a"), str(tmp_path / "b"))
    assert sorted(os.listdir(tmp_path)) == ["elsewhere"]


def test_a_send_whose_link_answers_enoent_after_a_consumer_took_it_is_sent_once(root, monkeypatch, no_renameat2):
    """sshfs (libfuse's high-level API) makes a link(), then looks its new name up to answer:
    a consumer on the other host that claimed the message in between made the link answer
    ENOENT.  send() raised StoreError ("it left working/ before it was sent") after discarding
    working/, though the message had been delivered, and the producer's retry delivered it a
    second time, unflagged (CI: test_on_real_mounts_...[sshfs], 2 of 11 runs under load)."""
    with Connection(root, "p", FAST, create=True) as c, Connection(root, "b", FAST) as other_host:
        c.create_queue("Q1")
        their_session = other_host.create_session(ack_mode=CLIENT_ACKNOWLEDGE)
        theirs = their_session.create_consumer(Q)
        taken: list = []
        real_link = os.link

        def link_then_claimed_before_the_lookup(src, dst, **kw):
            real_link(src, dst, **kw)
            if not taken:
                _use_os(monkeypatch, os)  # (the other host's own calls are plain)
                taken.append(theirs.receive(0))
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", dst)

        _use_os(monkeypatch, FakeOs(link=link_then_claimed_before_the_lookup))
        c.create_session().create_producer(Q).send(TextMessage(body=b"once"))
        assert [m.body for m in taken] == [b"once"] and not taken[0].redelivered
        their_session.acknowledge()
    assert counts(root, "Q1") == {"working": 0, "target": 0, "processing": 0, "processed": 1,
                                  "expired": 0, "error": 0}


def test_a_link_answering_enoent_whose_source_is_gone_is_not_taken_for_made(tmp_path, monkeypatch, no_renameat2):
    """The other ENOENT of link(): the source (or the destination's directory) is not there --
    the move did not happen and must say so."""
    (tmp_path / "d").mkdir()
    with pytest.raises(FileNotFoundError):
        store.rename_noreplace(str(tmp_path / "missing"), str(tmp_path / "d" / "b"))
    (tmp_path / "a").write_bytes(b"m")
    with pytest.raises(FileNotFoundError):
        store.rename_noreplace(str(tmp_path / "a"), str(tmp_path / "nodir" / "b"))
    assert sorted(os.listdir(tmp_path)) == ["a", "d"] and os.listdir(tmp_path / "d") == []


# ================================================================ late acknowledgements


def test_a_late_acknowledge_of_a_message_recovery_took_is_an_error(root):
    """acknowledge() of a claim that recovery renamed away (its owner presumed dead) used to
    succeed silently -- the message was delivered and acknowledged again elsewhere (38-66 double
    acknowledgements per run).  It fails now; the message is redelivered, flagged."""
    with Connection(root, "a", FAST, create=True) as c:
        s = c.create_session(ack_mode=CLIENT_ACKNOWLEDGE)
        s.create_producer(Q).send(TextMessage(body=b"taken"))
        s.create_producer(Q).send(TextMessage(body=b"kept"))
        cons = s.create_consumer(Q)
        first, second = cons.receive(1), cons.receive(1)
        box = Dropbox(root / "Q1" / "incoming")
        [pname] = [p for p in box.list(State.DELIVERED) if b"taken" == box.read(State.DELIVERED, p)]
        assert box.move(Move.REDELIVER, State.DELIVERED, pname, pname.split("~", 1)[1])  # what recovery does
        with pytest.raises(MessageTakenError, match="recovery took them back") as info:
            s.acknowledge()
        assert info.value.messages == ((first if first.body == b"taken" else second).message_id,)
        assert [box.read(State.ACKNOWLEDGED, n) for n in box.list(State.ACKNOWLEDGED)] == [b"kept"]
        with Connection(root, "b", FAST) as other:
            again = other.create_session().create_consumer(Q).receive(1)
            assert again.body == b"taken" and again.redelivered
        s.acknowledge()  # nothing is held any more: the error is not repeated
    assert counts(root, "Q1") == {"working": 0, "target": 0, "processing": 0, "processed": 2,
                                  "expired": 0, "error": 0}


def test_an_acknowledge_whose_rename_outcome_was_unknown_finds_its_own_name(root, monkeypatch):
    """NFS retransmits a RENAME whose reply was lost and answers the retry ENOENT although the
    first one moved the file: the consumer finds its own name in processed/ and succeeds."""
    with Connection(root, "a", FAST, create=True) as c:
        s = c.create_session(ack_mode=CLIENT_ACKNOWLEDGE)
        s.create_producer(Q).send(TextMessage(body=b"x"))
        assert s.create_consumer(Q).receive(1).body == b"x"
        real = store.rename_noreplace

        def done_but_enoent(src, dst, *args, **kw):
            real(src, dst, *args, **kw)
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", src)

        monkeypatch.setattr(store, "rename_noreplace", done_but_enoent)
        s.acknowledge()
        monkeypatch.undo()
    assert counts(root, "Q1")["processed"] == 1 and counts(root, "Q1")["target"] == 0


# ================================================================ leases


def test_a_renewing_owner_on_another_host_is_never_dead(root, other_hosts):
    """sshfs: flock does not cross mounts, so every host took the other hosts' live consumers
    for dead (22 of 47 bodies duplicated before anything was killed).  The lease decides now."""
    owner_clock = Clock()
    reg = Registration(root, "a", lease=10.0, clock=owner_clock, renew_in_background=False)
    try:
        for _ in range(40):  # 120 s of renewals every 3 s
            assert liveness(root, "a") == "alive"
            other_hosts.advance(3.0)
            owner_clock.advance(3.0)
            assert reg.renew()
        reg.check("acknowledge")
    finally:
        reg.release()
    assert liveness(root, "a") == "unknown"  # a clean close removes the lease


def test_an_owner_that_stopped_renewing_is_dead_only_past_the_bound(root, other_hosts):
    reg = Registration(root, "a", lease=10.0, clock=Clock(), renew_in_background=False)
    try:
        assert liveness(root, "a") == "alive"  # first sight: the observer's timer starts
        other_hosts.advance(leases.DEAD_AFTER * 10.0)
        assert liveness(root, "a") == "alive"  # exactly the bound: not past it
        other_hosts.advance(0.001)
        assert liveness(root, "a") == "dead"
    finally:
        reg.release()


def test_an_owner_fences_itself_before_anyone_may_declare_it_dead(root, other_hosts):
    owner_clock = Clock()
    reg = Registration(root, "a", lease=10.0, clock=owner_clock, renew_in_background=False)
    try:
        owner_clock.advance(leases.FENCE_AFTER * 10.0)
        reg.check("acknowledge")  # exactly 0.8 lease: still valid
        owner_clock.advance(0.001)
        with pytest.raises(LeaseExpiredError, match="cannot acknowledge"):
            reg.check("acknowledge")
        assert not reg.renew()  # for good: a renewal after a possible recovery would be a lie
        with pytest.raises(LeaseExpiredError):
            reg.check("send")
    finally:
        reg.release()
    assert leases.FENCE_AFTER < leases.DEAD_AFTER  # the owner stops before any observer decides


def test_a_renewal_that_took_longer_than_a_third_of_the_lease_does_not_count(root, other_hosts):
    owner_clock = Clock()
    reg = Registration(root, "a", lease=9.0, clock=owner_clock, renew_in_background=False)
    try:
        real_write = reg._renewer._write

        def slow_write(data):
            owner_clock.advance(3.5)  # a server stall: durable only after 3.5 s > 9 / 3
            real_write(data)

        reg._renewer._write = slow_write
        owner_clock.advance(4.0)
        assert not reg.renew()
        with pytest.raises(LeaseExpiredError):
            reg.check("commit")  # 7.5 s since the last renewal that counted > 0.8 x 9
    finally:
        reg.release()


def test_a_second_registration_of_a_live_id_on_another_host_is_refused(root, other_hosts, monkeypatch):
    owner_clock = Clock()
    first = Registration(root, "a", lease=10.0, clock=owner_clock, renew_in_background=False)

    def wait(seconds):  # while the second host waits, the first renews its lease
        other_hosts.advance(seconds)
        owner_clock.advance(seconds)
        first.renew()

    monkeypatch.setattr(leases, "sleep", wait)
    try:
        with pytest.raises(InvalidClientIDError, match="another host"):
            Registration(root, "a", lease=10.0, clock=Clock(), renew_in_background=False)
    finally:
        first.release()


def test_a_dead_owners_id_is_taken_over_once_its_lease_ran_out(root, other_hosts, monkeypatch):
    Registration(root, "a", lease=10.0, clock=Clock(), renew_in_background=False)  # then killed: never renews
    waited: list[float] = []

    def wait(seconds):
        waited.append(seconds)
        other_hosts.advance(seconds)

    monkeypatch.setattr(leases, "sleep", wait)
    second = Registration(root, "a", lease=10.0, clock=Clock(), renew_in_background=False)
    second.release()
    assert sum(waited) > leases.DEAD_AFTER * 10.0


def test_recovery_on_another_host_spares_a_live_consumer_and_fences_a_suspected_one(root, other_hosts):
    """Host B's consumers reclaim dead owners' messages.  A live owner on host A is left alone
    while its lease is younger than the bound; once B has seen it unchanged past the bound (A
    stalled, or its renewals could not reach the server) B takes its message, and A's late
    acknowledge fails instead of acknowledging a message now delivered elsewhere."""
    settings = dataclasses.replace(FAST, lease=600.0)  # no real renewal during the test
    with Connection(root, "a", settings, create=True) as a:
        s = a.create_session(ack_mode=CLIENT_ACKNOWLEDGE)
        s.create_producer(Q).send(TextMessage(body=b"m"))
        assert s.create_consumer(Q).receive(1).body == b"m"
        box = Dropbox(root / "Q1" / "incoming")
        assert reclaim_dead_owners(root, box) == 0  # B's first look
        other_hosts.advance(5.0)
        assert reclaim_dead_owners(root, box) == 0 and ls(root, "Q1", "target") == []
        other_hosts.advance(leases.DEAD_AFTER * settings.lease)
        assert reclaim_dead_owners(root, box) == 1  # A's record unchanged past the bound
        with pytest.raises(MessageTakenError):
            s.acknowledge()
    assert counts(root, "Q1")["target"] == 1 and counts(root, "Q1")["processed"] == 0


def test_a_fenced_connection_refuses_to_acknowledge_send_commit_and_receive(root, other_hosts, monkeypatch):
    clock = Clock()
    monkeypatch.setattr(clients, "time", types.SimpleNamespace(monotonic=clock))
    with Connection(root, "a", FAST, create=True) as c:
        s = c.create_session(ack_mode=CLIENT_ACKNOWLEDGE)
        producer, cons = s.create_producer(Q), s.create_consumer(Q)
        producer.send(TextMessage(body=b"m"))
        assert cons.receive(1).body == b"m"
        clock.advance(leases.FENCE_AFTER * FAST.lease + 0.001)  # no renewal got through meanwhile
        with pytest.raises(LeaseExpiredError, match="cannot acknowledge"):
            s.acknowledge()
        with pytest.raises(LeaseExpiredError, match="cannot send"):
            producer.send(TextMessage(body=b"n"))
        with pytest.raises(LeaseExpiredError, match="cannot receive"):
            cons.receive(0)
        t = c.create_session(transacted=True)
        with pytest.raises(LeaseExpiredError, match="cannot commit"):
            t.commit()
    assert counts(root, "Q1")["target"] == 1  # close gave the unacknowledged message back


def test_recover_waits_for_leases_then_takes_only_the_dead_hosts_claims(root, monkeypatch):
    """`dropboxmq recover` is one look: on a root whose locks do not cross mounts it first watches
    the leases until each is decided -- a client locked by this host is alive at once, one whose
    record stays unchanged is dead past the bound -- and only then redelivers."""
    from dropboxmq import recovery

    clock = Clock()
    monkeypatch.setattr(filesystems, "flock_trusted", lambda root: False)
    monkeypatch.setattr(leases, "OBSERVER", leases.Observer(clock))
    naps: list[float] = []

    def nap(seconds):
        naps.append(seconds)
        assert len(naps) < 1000, "settle_leases never decided"
        clock.advance(seconds)

    monkeypatch.setattr(liveness_mod, "sleep", nap)
    with Connection(root, "live", dataclasses.replace(FAST, lease=600.0), create=True) as c:
        s = c.create_session(ack_mode=CLIENT_ACKNOWLEDGE)
        s.create_producer(Q).send(TextMessage(body=b"held by the live client"))
        assert s.create_consumer(Q).receive(1) is not None
        box = Dropbox(root / "Q1" / "incoming")
        _sent(box)
        assert box.move(Move.CLAIM, State.NEW, NAME, "dead~" + NAME)
        clients.registration_path(root, "dead").write_text("pid=1 host=gone lease=10 beat=7\n")  # killed
        report = recovery.recover(root)
        [back] = ls(root, "Q1", "target")
        assert report.redelivered == 1 and back.startswith(NAME)  # (with its delivery count)
        assert sum(naps) > leases.DEAD_AFTER * 10.0
        s.acknowledge()


def test_where_locks_cross_mounts_a_stalled_owner_is_not_fenced(root, monkeypatch):
    """On a local disk (or MooseFS, GlusterFS) a free lock is the proof of death and nobody reads
    the lease: a process stopped past its lease (a debugger, a laptop asleep) keeps its messages
    and acknowledges them as before."""
    clock = Clock()
    monkeypatch.setattr(clients, "time", types.SimpleNamespace(monotonic=clock))
    with Connection(root, "a", FAST, create=True) as c:
        s = c.create_session(ack_mode=CLIENT_ACKNOWLEDGE)
        s.create_producer(Q).send(TextMessage(body=b"m"))
        assert s.create_consumer(Q).receive(1).body == b"m"
        clock.advance(3600.0)
        assert reclaim_dead_owners(root, Dropbox(root / "Q1" / "incoming")) == 0
        s.acknowledge()
    assert counts(root, "Q1")["processed"] == 1


# ================================================================ on real mounts (marker multihost)


@pytest.mark.multihost
@pytest.mark.parametrize("kind", ["moosefs", "sshfs"])
def test_on_real_mounts_no_acknowledged_message_comes_back_after_a_kill(kind):
    """The stress case, short: c0 killed -9 on host A holding up to 10 messages, recovery from host
    B.  Before: 38 acknowledged messages delivered again on MooseFS, 64 on sshfs (README)."""
    from dropboxmq_stress import netfs
    from dropboxmq_stress.multihost import run

    if netfs.unavailable(kind):
        pytest.skip(f"{kind}: {netfs.unavailable(kind)}")
    c = run(kind, messages=60, kill=True, ack_every=10, idle=40)["counts"]
    assert c["sent"] == 120 and c["lost_count"] == 0, c
    assert c["duplicated_not_flagged"] == 0 and c["acknowledged_then_delivered_again"] == 0, c
    assert c["double_acknowledgements"] == 0 and c["processed_more_than_once"] == 0, c
    assert not any(c["left"].values()), c


@pytest.mark.multihost
def test_on_sshfs_a_late_acknowledge_of_a_taken_message_fails():
    from dropboxmq_stress import late_ack, netfs

    if netfs.unavailable("sshfs"):
        pytest.skip(f"sshfs: {netfs.unavailable('sshfs')}")
    # the run is in this process: its first rename on sshfs turns renameat2 off for the process
    # (conftest.renameat2_as_found turns it back on after the test)
    r = late_ack.run("sshfs", lease=2.0)
    assert r["recover_redelivered"] == 1 and r["b_received"] == {"redelivered": True, "count": 2}, r
    assert r["a_acknowledge"].startswith("LeaseExpiredError"), r
    assert r["final"] == {"target": 0, "processing": 0, "processed": 1, "error": 0}, r


def test_a_late_commit_of_a_transaction_recovery_rolled_back_is_an_error(root):
    """A transacted consumer presumed dead: recovery rolls its log back (its receive goes back to
    target/, flagged).  Its late commit said FileNotFoundError about a log path; it raises
    TransactionRolledBackError now, and nothing of the transaction is committed."""
    from dropboxmq.transaction import TransactionRolledBackError
    from dropboxmq.recovery import recover_owner

    with Connection(root, "a", FAST, create=True) as c:
        c.create_session().create_producer(Q).send(TextMessage(body=b"x"))
        t = c.create_session(transacted=True)
        assert t.create_consumer(Q).receive(1).body == b"x"
        t.create_producer(Q).send(TextMessage(body=b"sent in the transaction"))
        recover_owner(root, "a")  # what recovery does to a dead owner's transactions
        with pytest.raises(TransactionRolledBackError, match="rolled back by recovery"):
            t.commit()
    [back] = ls(root, "Q1", "target")
    assert ".....JMSXDeliveryCountI=1" in back and counts(root, "Q1")["processed"] == 0
