"""Error paths of the store: disk full, permission denied, short writes, failing renames."""

from __future__ import annotations

import errno
import os

import pytest

from dropboxmq import collisions, groupsync, layout, netfs, store
from dropboxmq.making import ensure_dropbox
from dropboxmq.errors import StoreError
from dropboxmq.transaction import TransactionInDoubtError
from dropboxmq.lifecycle import Move, State
from dropboxmq.message import Queue, TextMessage
from dropboxmq.ackmode import AUTO_ACKNOWLEDGE, CLIENT_ACKNOWLEDGE
from dropboxmq.connection import Connection
from dropboxmq.store import Dropbox, sync_many
from conftest import FAST, counts, ls

Q = Queue("Q1")
NAME = "4.1140429201295000-9262574723.T"


@pytest.fixture(autouse=True, scope="module")
def every_library_module_loaded():
    """pyfakefs unloads each module first imported while its fake file system is active; the
    library imports some modules where first used, so a later test here ran with a second copy of
    them (a commit's ENOSPC outlived its monkeypatch).  Loaded before any fake: none is unloaded."""
    import importlib
    import pkgutil

    import dropboxmq

    for mod in pkgutil.iter_modules(dropboxmq.__path__):
        if mod.name != "__main__":  # runs the CLI
            importlib.import_module(f"dropboxmq.{mod.name}")


class FakeOs:
    """``os`` for the store module, with some functions replaced (real ``os`` elsewhere)."""

    def __init__(self, **overrides):
        self.__dict__.update(overrides)

    def __getattr__(self, name):
        return getattr(os, name)


def oserror(code: int, path: str = "") -> OSError:
    return OSError(code, os.strerror(code), path)


def failing(code: int):
    def fail(*args, **kwargs):
        raise oserror(code, str(args[0]) if args else "")

    return fail


# ================================================================ disk full during send


def test_disk_full_during_send_pyfakefs(fs, monkeypatch):
    """A real (fake) file system with a tiny disk: the write fails with ENOSPC."""
    monkeypatch.setattr(store, "noreplace_supported", False)  # no renameat2 in pyfakefs
    root = "/data/root"
    box = ensure_dropbox(Dropbox(root + "/Q1/incoming"))
    fs.set_disk_usage(1000, path="/data")
    with pytest.raises(StoreError, match="no space"):
        box.create(NAME, b"x" * 5000, durable=True)
    assert box.list(State.NOT_COMMITTED) == [] and box.list(State.NEW) == []
    box.create(NAME, b"small", durable=True)  # the store still works once data fits
    assert box.move(Move.SEND, State.NOT_COMMITTED, NAME)
    sync_many([(box, State.NEW)])
    assert box.list(State.NEW) == [NAME] and box.read(State.NEW, NAME) == b"small"


def test_disk_full_during_send_pyfakefs_through_the_api(fs, monkeypatch):
    monkeypatch.setattr(store, "noreplace_supported", False)
    root = "/data/root"
    os.makedirs(root, exist_ok=True)
    fs.set_disk_usage(4000, path="/data")
    with Connection(root, "a", FAST, create=True) as c:
        p = c.create_session().create_producer(Q)
        with pytest.raises(StoreError, match="no space"):
            p.send(TextMessage(body=b"x" * 10_000))
        assert ls(root, "Q1", "target") == [] and ls(root, "Q1", "working") == []
        p.send(TextMessage(body=b"fits"))
        assert c.create_session().create_consumer(Q).receive(1).text == "fits"


def test_disk_full_during_send_injected(root, monkeypatch):
    """ENOSPC after a partial write on the real file system: no torn file anywhere."""
    calls = []

    def write(fd, data):
        calls.append(len(data))
        if len(calls) == 1:
            return os.write(fd, bytes(data[:10]))
        raise oserror(errno.ENOSPC)

    with Connection(root, "a", FAST, create=True) as c:
        p = c.create_session().create_producer(Q)
        monkeypatch.setattr(store, "os", FakeOs(write=write))
        with pytest.raises(StoreError, match="no space left on device"):
            p.send(TextMessage(body=b"y" * 100))
        monkeypatch.undo()
        assert len(calls) == 2
        assert ls(root, "Q1", "target") == [] and ls(root, "Q1", "working") == []
        assert c.create_session().create_consumer(Q).receive(0.05) is None


def test_disk_full_in_transacted_send(root, monkeypatch):
    with Connection(root, "a", FAST, create=True) as c:
        s = c.create_session(transacted=True)
        p = s.create_producer(Q)
        p.send(TextMessage(body=b"ok"))
        monkeypatch.setattr(store, "os", FakeOs(write=failing(errno.ENOSPC)))
        with pytest.raises(StoreError, match="no space"):
            p.send(TextMessage(body=b"fails"))
        monkeypatch.undo()
        s.rollback()
        assert counts(root, "Q1")["working"] == 0 and counts(root, "Q1")["target"] == 0


def test_fsync_failure_fails_the_send(root, monkeypatch):
    with Connection(root, "a", FAST, create=True) as c:
        p = c.create_session().create_producer(Q)
        ensure_dropbox(layout.queue_box(root, Q))  # the queue exists: the fault hits the message, not its creation
        monkeypatch.setattr(store, "os", FakeOs(fsync=failing(errno.EIO)))
        with pytest.raises(StoreError, match="input/output error"):
            p.send(TextMessage(body=b"x"))
        monkeypatch.undo()
        assert ls(root, "Q1", "target") == [] and ls(root, "Q1", "working") == []


# ================================================================ permission denied


def test_permission_denied_on_create(root, monkeypatch):
    with Connection(root, "a", FAST, create=True) as c:
        p = c.create_session().create_producer(Q)
        ensure_dropbox(layout.queue_box(root, Q))  # the queue exists: the fault hits the message, not its creation
        refusing = FakeOs(open=failing(errno.EACCES))
        monkeypatch.setattr(store, "os", refusing)
        monkeypatch.setattr(netfs, "os", refusing)  # (where a refused create is looked at again)
        with pytest.raises(StoreError, match="permission denied") as info:
            p.send(TextMessage(body=b"x"))
        monkeypatch.undo()
        assert "working" in str(info.value)
        assert ls(root, "Q1", "target") == [] and ls(root, "Q1", "working") == []


def test_permission_denied_pyfakefs(fs, monkeypatch):
    """A read-only working/ for a non-root user (pyfakefs emulates the permission check)."""
    monkeypatch.setattr(store, "noreplace_supported", False)
    box = ensure_dropbox(Dropbox("/data/root/Q1/incoming"))
    fs.chmod(box.dir(State.NOT_COMMITTED), 0o555)
    from pyfakefs.helpers import set_uid

    set_uid(1000)
    with pytest.raises(StoreError, match="permission denied"):
        box.create(NAME, b"x", durable=True)
    assert box.list(State.NOT_COMMITTED) == [] and box.list(State.NEW) == []


# ================================================================ short writes


def test_short_writes_still_produce_full_files(root, monkeypatch):
    sizes = []

    def write(fd, data):
        chunk = bytes(data[:7])  # the kernel may write less than asked
        sizes.append(len(data))
        return os.write(fd, chunk)

    body = bytes(range(256)) * 4
    with Connection(root, "a", FAST, create=True) as c:
        p = c.create_session().create_producer(Q)
        monkeypatch.setattr(store, "os", FakeOs(write=write))
        p.send(TextMessage(body=body))
        monkeypatch.undo()
        assert len(sizes) == -(-len(body) // 7)
        assert c.create_session().create_consumer(Q).receive(1).body == body


# ================================================================ failing renames


def test_failing_rename_during_send_discards_the_working_file(root, monkeypatch):
    with Connection(root, "a", FAST, create=True) as c:
        p = c.create_session().create_producer(Q)
        monkeypatch.setattr(store, "rename_noreplace", failing(errno.EIO))
        with pytest.raises(StoreError, match="input/output error"):
            p.send(TextMessage(body=b"x"))
        monkeypatch.undo()
        assert ls(root, "Q1", "target") == [] and ls(root, "Q1", "working") == []


def test_send_never_replaces_an_existing_target_name(root):
    box = ensure_dropbox(Dropbox(root / "Q1" / "incoming"))
    (root / "Q1" / "incoming" / "target" / NAME).write_bytes(b"first")
    box.create(NAME, b"second", durable=False)
    assert box.move(Move.SEND, State.NOT_COMMITTED, NAME)  # under a name of its own (issue 24 #1)
    assert box.read(State.NEW, NAME) == b"first"
    assert box.read(State.NEW, collisions.disambiguated(NAME, 2)) == b"second"
    assert box.list(State.NOT_COMMITTED) == []


def test_rename_fallback_without_renameat2(root, monkeypatch):
    monkeypatch.setattr(store, "noreplace_supported", False)
    box = ensure_dropbox(Dropbox(root / "Q1" / "incoming"))
    box.create(NAME, b"x", durable=True)
    assert box.move(Move.SEND, State.NOT_COMMITTED, NAME)
    sync_many([(box, State.NEW)])
    assert box.list(State.NOT_COMMITTED) == [] and box.list(State.NEW) == [NAME]
    box.create(NAME, b"dup", durable=False)
    assert box.move(Move.SEND, State.NOT_COMMITTED, NAME)
    assert box.read(State.NEW, NAME) == b"x" and box.read(State.NEW, collisions.disambiguated(NAME, 2)) == b"dup"


def _path(name: str, dir_fd: int) -> str:
    return name if dir_fd < 0 else os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), name)


def _enospc_for(move_name: str, real):
    """rename_noreplace that fails with ENOSPC when the destination is ``move_name``/."""

    def rename(src, dst, src_dir_fd=-100, dst_dir_fd=-100, shared=False):  # (a held dropbox: names in dir fds)
        if f"/{move_name}/" in _path(dst, dst_dir_fd):
            raise oserror(errno.ENOSPC, dst)
        return real(src, dst, src_dir_fd, dst_dir_fd, shared)

    return rename


def test_enospc_on_claim_surfaces_and_loses_nothing(root, monkeypatch):
    with Connection(root, "a", FAST, create=True) as c:
        s = c.create_session()
        s.create_producer(Q).send(TextMessage(body=b"x"))
        box = Dropbox(root / "Q1" / "incoming")
        [name] = box.list(State.NEW)
        monkeypatch.setattr(store, "rename_noreplace", _enospc_for("processing", store.rename_noreplace))
        with pytest.raises(StoreError, match="no space"):
            box.move(Move.CLAIM, State.NEW, name, "a~" + name)
        cons = s.create_consumer(Q)
        with pytest.raises(StoreError, match="no space"):
            cons.receive(0.05)
        assert ls(root, "Q1", "target") == [name] and ls(root, "Q1", "processing") == []
        monkeypatch.undo()  # space is back: the same consumer gets the message
        assert cons.receive(1).text == "x"
    assert len(ls(root, "Q1", "processed")) == 1


def test_enospc_on_client_ack_surfaces_and_loses_nothing(root, monkeypatch):
    with Connection(root, "a", FAST, create=True) as c:
        s = c.create_session(ack_mode=CLIENT_ACKNOWLEDGE)
        p = s.create_producer(Q)
        p.send(TextMessage(body=b"1"))
        p.send(TextMessage(body=b"2"))
        cons = s.create_consumer(Q)
        m = cons.receive(1)
        assert cons.receive(1) is not None
        monkeypatch.setattr(store, "rename_noreplace", _enospc_for("processed", store.rename_noreplace))
        with pytest.raises(StoreError, match="no space"):
            m.acknowledge()
        assert len(ls(root, "Q1", "processing")) == 2 and ls(root, "Q1", "processed") == []
        monkeypatch.undo()
        m.acknowledge()  # retried: every consumed message is acked
        assert len(ls(root, "Q1", "processed")) == 2 and ls(root, "Q1", "processing") == []


def test_enospc_on_auto_ack_surfaces_and_loses_nothing(root, monkeypatch):
    with Connection(root, "a", FAST, create=True) as c:
        s = c.create_session(ack_mode=AUTO_ACKNOWLEDGE)
        s.create_producer(Q).send(TextMessage(body=b"x"))
        cons = s.create_consumer(Q)
        monkeypatch.setattr(store, "rename_noreplace", _enospc_for("processed", store.rename_noreplace))
        with pytest.raises(StoreError, match="no space"):
            cons.receive(1)
        monkeypatch.undo()
        assert ls(root, "Q1", "processed") == []
        assert len(ls(root, "Q1", "target")) + len(ls(root, "Q1", "processing")) == 1
        m = cons.receive(1)  # not lost: the application never got it, so it comes again
        assert m is not None and m.text == "x"
    assert len(ls(root, "Q1", "processed")) == 1 and ls(root, "Q1", "processing") == []


def test_enospc_on_transacted_commit_keeps_messages(root, monkeypatch):
    with Connection(root, "a", FAST, create=True) as c:
        c.create_session().create_producer(Q).send(TextMessage(body=b"x"))
        s = c.create_session(transacted=True)
        assert s.create_consumer(Q).receive(1) is not None
        monkeypatch.setattr(store, "rename_noreplace", _enospc_for("processed", store.rename_noreplace))
        with pytest.raises(TransactionInDoubtError, match="no space"):  # past the point of no return
            s.commit()
        monkeypatch.undo()
        assert len(ls(root, "Q1", "processing")) + len(ls(root, "Q1", "processed")) == 1


def test_commit_failing_past_the_point_of_no_return_is_finished_by_recovery(root, monkeypatch):
    """ENOSPC while applying a commit: the log stays in committing/ (the commit reports it in
    doubt); once the owner's connection is gone (even closed cleanly, its own last try failing
    too), recovery rolls it forward."""
    from dropboxmq import recovery

    with Connection(root, "a", FAST, create=True) as c:
        c.create_session().create_producer(Q).send(TextMessage(body=b"received"))
        s = c.create_session(transacted=True)
        assert s.create_consumer(Q).receive(1) is not None
        s.create_producer(Q).send(TextMessage(body=b"sent"))
        monkeypatch.setattr(store, "rename_noreplace", _enospc_for("processed", store.rename_noreplace))
        with pytest.raises(TransactionInDoubtError, match="no space"):
            s.commit()
        assert len(os.listdir(layout.transaction_dir(root) / "committing")) == 1
    monkeypatch.undo()
    report = recovery.recover(root)
    assert report.transactions == {"rolled forward": 1}
    assert len(ls(root, "Q1", "processed")) == 1 and ls(root, "Q1", "processing") == []
    assert len(ls(root, "Q1", "target")) == 1 and ls(root, "Q1", "working") == []


# ================================================================ held directories (dir fds)


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("how", ["removed", "moved aside"])
def test_a_consumer_follows_its_queue_removed_and_made_again(root, how):
    """A consumer claims and reads by name in directories it holds open; when the queue is
    removed (or moved aside) and made again under it, the old fds name another directory:
    it must notice (not take every name for a lost race, and spin) and go on in the new one."""
    import shutil

    with Connection(root, "a", FAST, create=True) as a:
        cons = a.create_session().create_consumer(Q)
        with Connection(root, "b", FAST, create=True) as b:
            b.create_session().create_producer(Q).send(TextMessage(body=b"1"))
        assert cons.receive(1).text == "1"
        if how == "removed":
            shutil.rmtree(root / "Q1")
        else:
            os.rename(root / "Q1", root / "Q1-old")
        with Connection(root, "b", FAST, create=True) as b:
            b.create_session().create_producer(Q).send(TextMessage(body=b"2"))
        assert cons.receive(1).text == "2"
    assert counts(root, "Q1")["processed"] == 1 and counts(root, "Q1")["target"] == 0


def test_held_directories_are_closed_with_the_consumer_and_the_connection(root):
    before = _open_fds()
    with Connection(root, "a", FAST, create=True) as c:
        s = c.create_session()
        s.create_producer(Q).send(TextMessage(body=b"x"))
        cons = s.create_consumer(Q)
        assert cons.receive(1).text == "x"
        during = _open_fds()
        cons.close()
        assert _open_fds() == during - 6  # the consumer's six state directories
    assert _open_fds() == before


# ---------------------------------------------------------------- group commit: syncfs or the files' fsyncs


def test_group_sync_method_weighs_the_unwritten_data_of_others():
    files, own = 100, 100 * 100
    assert groupsync.group_sync_method(None, own, files) == "syncfs"  # no /proc/meminfo: as before
    assert groupsync.group_sync_method(0, own, files) == "syncfs"
    mine = own + 4096 * files  # what the batch itself left unwritten does not count against syncfs
    assert groupsync.group_sync_method(mine, own, files) == "syncfs"
    budget = groupsync.SYNCFS_OTHERS_BYTES_PER_FILE * files
    assert groupsync.group_sync_method(mine + budget, own, files) == "syncfs"
    assert groupsync.group_sync_method(mine + budget + 1, own, files) == "fsync"
    assert groupsync.group_sync_method(1 << 30, own, files) == "fsync"


def _record_syncs(monkeypatch, unwritten: int):
    """Pretend ``unwritten`` bytes await writing; record syncfs calls and the path of every
    file fsynced (at the moment of its fsync)."""
    calls: dict[str, list] = {"syncfs": [], "fsync": []}
    real_fsync = os.fsync

    def fsync(fd):
        calls["fsync"].append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(groupsync, "unwritten_bytes", lambda: unwritten)
    monkeypatch.setattr(groupsync, "sync_file_system", lambda path: calls["syncfs"].append(str(path)))
    monkeypatch.setattr(os, "fsync", fsync)
    return calls


def test_send_many_next_to_a_writer_with_unwritten_data_fsyncs_its_own_files_not_the_file_system(root, monkeypatch):
    """syncfs writes every dirty page of the file system: another program's unwritten gigabyte
    would be the batch's wait.  Then each file is fsynced instead, in working/, before any rename."""
    with Connection(root, "a", FAST, create=True) as c:
        p = c.create_session().create_producer(Q)
        calls = _record_syncs(monkeypatch, 1 << 30)
        sent = p.send_many([TextMessage(body=f"m{i}") for i in range(40)])
        monkeypatch.undo()
    assert calls["syncfs"] == []
    working = str(root / "Q1" / "incoming" / "working")
    fsynced_in_working = {os.path.basename(f) for f in calls["fsync"] if os.path.dirname(f) == working}
    assert fsynced_in_working == set(ls(root, "Q1", "target")) and len(fsynced_in_working) == len(sent) == 40


def test_send_many_on_a_quiet_file_system_makes_one_syncfs(root, monkeypatch):
    with Connection(root, "a", FAST, create=True) as c:
        p = c.create_session().create_producer(Q)
        calls = _record_syncs(monkeypatch, 0)
        p.send_many([TextMessage(body=f"m{i}") for i in range(40)])
        monkeypatch.undo()
    assert len(calls["syncfs"]) == 1
    assert not [f for f in calls["fsync"] if "/working/" in f]  # the syncfs did it: no file fsync
    assert len(ls(root, "Q1", "target")) == 40


def test_a_failed_fsync_of_one_file_of_a_batch_fails_the_batch_and_sends_none(root, monkeypatch):
    with Connection(root, "a", FAST, create=True) as c:
        p = c.create_session().create_producer(Q)
        ensure_dropbox(layout.queue_box(root, Q))  # the queue exists: the fault hits the message, not its creation
        real_fsync = os.fsync

        def fsync(fd):
            if not failed:  # the first file's fsync fails, the others succeed
                failed.append(fd)
                raise oserror(errno.EIO)
            real_fsync(fd)

        failed: list[int] = []
        monkeypatch.setattr(groupsync, "unwritten_bytes", lambda: 1 << 30)
        monkeypatch.setattr(os, "fsync", fsync)
        with pytest.raises(StoreError, match=r"cannot fsync .*/working/.*: input/output error"):
            p.send_many([TextMessage(body=f"m{i}") for i in range(20)])
        monkeypatch.undo()
    assert failed and counts(root, "Q1")["target"] == 0 and counts(root, "Q1")["working"] == 0


def test_transacted_commit_next_to_unwritten_data_fsyncs_the_log_and_every_sent_file(root, monkeypatch):

    with Connection(root, "a", FAST, create=True) as c:
        s = c.create_session(transacted=True)
        p = s.create_producer(Q)
        for i in range(30):
            p.send(TextMessage(body=f"m{i}"))
        names = set(ls(root, "Q1", "working"))
        calls = _record_syncs(monkeypatch, 1 << 30)
        s.commit()
        monkeypatch.undo()
    assert calls["syncfs"] == []
    associated = str(layout.transaction_dir(root) / "associated")
    assert [f for f in calls["fsync"] if os.path.dirname(f) == associated]  # the log itself
    working = str(root / "Q1" / "incoming" / "working")
    assert {os.path.basename(f) for f in calls["fsync"] if os.path.dirname(f) == working} == names
    assert set(ls(root, "Q1", "target")) == names and len(names) == 30


# ---------------------------------------------------------------- reading a body whole


def _reads_counted(monkeypatch, most: int | None = None) -> list[int]:
    """Count os.read calls; with ``most``, each returns at most that many bytes (short reads)."""
    calls: list[int] = []
    real_read = os.read

    def read(fd, n):
        calls.append(n)
        return real_read(fd, n if most is None else min(n, most))

    monkeypatch.setattr(os, "read", read)
    return calls


@pytest.mark.parametrize("size", [0, 1, 100, 65536, 200_000])
def test_a_body_is_read_whole_in_one_read(tmp_path, monkeypatch, size):
    data = os.urandom(size)
    (tmp_path / "m").write_bytes(data)
    calls = _reads_counted(monkeypatch)
    assert store.read_regular_file(tmp_path / "m") == data
    assert calls == [size + 1]  # its size and one byte more: the short read is the end


def test_a_body_read_in_short_pieces_is_read_to_its_end(tmp_path, monkeypatch):
    data = os.urandom(1000)
    (tmp_path / "m").write_bytes(data)
    calls = _reads_counted(monkeypatch, most=7)
    assert store.read_regular_file(tmp_path / "m") == data
    assert len(calls) > 100


def test_a_body_that_grew_after_its_size_was_taken_is_read_to_its_end(tmp_path, monkeypatch):
    data = os.urandom(300_000)
    (tmp_path / "m").write_bytes(data)
    real_fstat = os.fstat

    class Smaller:  # fstat taken before a writer appended 299,900 bytes
        def __init__(self, st):
            self.st_mode, self.st_size = st.st_mode, 100

    monkeypatch.setattr(os, "fstat", lambda fd: Smaller(real_fstat(fd)))
    assert store.read_regular_file(tmp_path / "m") == data


def test_a_body_that_shrank_after_its_size_was_taken_is_what_is_left(tmp_path, monkeypatch):
    data = os.urandom(50)
    (tmp_path / "m").write_bytes(data)
    real_fstat = os.fstat

    class Bigger:
        def __init__(self, st):
            self.st_mode, self.st_size = st.st_mode, 5000

    monkeypatch.setattr(os, "fstat", lambda fd: Bigger(real_fstat(fd)))
    assert store.read_regular_file(tmp_path / "m") == data


def test_a_forked_child_fsyncs_its_batch_with_its_own_threads(root, monkeypatch):
    """The fsync threads do not survive a fork: a child that sends a batch next to unwritten
    data must start its own instead of waiting on the parent's forever."""
    from conftest import fork_context

    monkeypatch.setattr(groupsync, "unwritten_bytes", lambda: 1 << 30)
    with Connection(root, "parent", FAST, create=True) as c:
        c.create_session().create_producer(Q).send_many([TextMessage(body=f"p{i}") for i in range(10)])
    assert groupsync.sync_files(root, [], 0) == "fsync"  # the parent's pool exists and is in use

    def child() -> None:
        with Connection(root, "child", FAST, create=True) as c:
            c.create_session().create_producer(Q).send_many([TextMessage(body=f"c{i}") for i in range(10)])

    proc = fork_context().Process(target=child)
    proc.start()
    proc.join(60)
    alive = proc.is_alive()
    if alive:
        proc.kill()
    assert not alive and proc.exitcode == 0
    assert len(ls(root, "Q1", "target")) == 20


def test_a_fan_out_next_to_unwritten_data_fsyncs_each_copy_and_each_subscription(root, monkeypatch):
    from dropboxmq.message import Topic

    with Connection(root, "a", FAST, create=True) as c:
        s = c.create_session()
        for i in range(4):
            s.create_durable_consumer(Topic("t"), f"sub{i}").close()
        calls = _record_syncs(monkeypatch, 1 << 30)
        s.create_producer(Topic("t")).send(TextMessage(body="news"))
        monkeypatch.undo()
        assert calls["syncfs"] == []
        copies = [f for f in calls["fsync"] if os.path.basename(os.path.dirname(f)) == "working"]
        targets = [f for f in calls["fsync"] if os.path.basename(f) == "target"]
        assert len(copies) == 4 and len(set(targets)) == 4  # every copy, then every target/ once
        for i in range(4):
            assert s.create_durable_consumer(Topic("t"), f"sub{i}").receive(1).text == "news"


@pytest.mark.parametrize("unwritten", [0, 1 << 30], ids=["syncfs", "parallel-fsyncs"])
def test_a_commit_whose_subscription_went_away_commits(root, monkeypatch, unwritten):
    """A transacted publish logs one copy per subscription; one subscription is removed before
    the commit, taking its working/ copy and its target/ with it.  Neither has anything to make
    durable: the commit goes on and the other subscriber gets the message (it raised
    TransactionInDoubtError on the gone target/, and on the gone copy when fsyncing files)."""
    import shutil

    from dropboxmq.topics import subscriptions_dir
    from dropboxmq.message import Topic

    with Connection(root, "a", FAST, create=True) as c:
        s = c.create_session()
        for name in ("kept", "removed"):
            s.create_durable_consumer(Topic("t"), name).close()
        tx = c.create_session(transacted=True)
        tx.create_producer(Topic("t")).send(TextMessage(body="news"))
        removed = [d for d in subscriptions_dir(root, Topic("t")).iterdir() if d.name.startswith("removed")]
        assert len(removed) == 1
        shutil.rmtree(removed[0])
        calls = _record_syncs(monkeypatch, unwritten)
        tx.commit()
        monkeypatch.undo()
        assert len(calls["syncfs"]) == (0 if unwritten else 1)
        assert s.create_durable_consumer(Topic("t"), "kept").receive(1).text == "news"


@pytest.mark.parametrize("unwritten", [0, 1 << 30])
def test_the_group_commit_and_the_plain_fsyncs_make_the_same_files_durable(tmp_path, monkeypatch, unwritten):
    """groupsync.sync_files (a syncfs of the file system, or parallel fsyncs) and its plain
    version fsync_each agree: every file of the batch is durable, a file gone meanwhile is
    skipped.  A syncfs covers the file system the batch is on."""
    paths = []
    for i in range(5):
        (tmp_path / f"m{i}").write_bytes(b"x" * i)
        paths.append(str(tmp_path / f"m{i}"))
    gone = str(tmp_path / "gone")  # removed between its write and the sync
    synced: dict[str, set[str]] = {}
    real_fsync = os.fsync
    for version in ("group", "plain"):
        fsynced: set[str] = set()

        def fsync(fd, fsynced=fsynced):
            fsynced.add(os.readlink(f"/proc/self/fd/{fd}"))
            real_fsync(fd)

        monkeypatch.setattr(os, "fsync", fsync)
        monkeypatch.setattr(groupsync, "unwritten_bytes", lambda: unwritten)
        monkeypatch.setattr(groupsync, "sync_file_system",
                            lambda root, fsynced=fsynced: fsynced.update(str(p) for p in tmp_path.iterdir()))
        if version == "group":
            method = groupsync.sync_files(tmp_path, paths + [gone], 10)
            assert method == ("syncfs" if unwritten == 0 else "fsync")
        else:
            groupsync.fsync_each(paths + [gone])
        monkeypatch.undo()
        synced[version] = fsynced
    assert synced["group"] == synced["plain"] == set(paths)
