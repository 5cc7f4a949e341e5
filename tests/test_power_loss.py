"""Power loss on a real loop-mounted xfs (issue 6): every send and every ack that returned survives.

One child process runs a seeded sequence of operations on the reference
implementation -- persistent single sends, ``send_many``, transacted sends,
non-persistent sends, CLIENT receive + acknowledge, CLIENT receive without ack,
AUTO receive, transacted receive + commit -- recording each operation only
after it returned.  Then the power goes: the child is frozen (SIGSTOP, every
thread in state ``T``), ``xfs_io -x -c shutdown`` (no log flush) discards every
metadata change xfs had not forced to its log, the child is SIGKILLed, the
image is unmounted, mounted again and ``recover()``-ed.  Asserted:

* every persistent send that returned is NEW or later (target/, processing/ or
  processed/), exactly once -- never back in working/, never gone;
* every persistent message whose CLIENT ack, AUTO receive or transacted commit
  returned is ACKNOWLEDGED (processed/).

Modes: ``boundary`` -- the child stops itself after operation k (deterministic);
``timed`` -- the parent freezes it after a seeded delay (mid-operation).

``python tests/test_power_loss.py [--seeds 20] [--mode boundary|timed|live|straddle]``
runs many seeds.  ``live`` is the stress harness's old model (shut down while the
child keeps running, kill it afterwards) and ``straddle`` its worst case (the
child shuts the file system down between a rename and the fsync of its
directory, and runs on).  Neither is a power loss: a call that straddles the
shutdown can return success for work the shutdown discarded (fsync of a
directory on a shut-down xfs returns 0).  They reproduce the "lost sends /
undone acks" of issue 6; they are not tests.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import select
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

QUEUE = "pl"
STATES = ("working", "target", "processing", "processed", "expired", "error")


def _why_not_possible(scratch: Path) -> str | None:
    """None when a loop-mounted xfs can be made here, else why not."""
    if os.geteuid() != 0:
        return "not root: cannot loop-mount an xfs image"
    for tool in ("mkfs.xfs", "xfs_io", "mount", "umount"):
        if shutil.which(tool) is None:
            return f"{tool} not installed (Debian xfsprogs / mount): cannot mount an xfs image"
    try:
        with xfs_image(scratch / "probe") as (mnt, _img):
            (mnt / "f").write_bytes(b"x")
    except (subprocess.CalledProcessError, OSError) as exc:
        return f"cannot loop-mount xfs here: {(getattr(exc, 'stderr', '') or str(exc)).strip()}"
    return None


def _run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=check, capture_output=True, text=True)


def _mounted(mnt: Path) -> bool:
    target = os.path.abspath(mnt)
    with open("/proc/self/mounts") as f:
        return any(line.split()[1] == target for line in f)


def _umount(mnt: Path) -> None:
    for _ in range(100):
        if _run("umount", str(mnt), check=False).returncode == 0:
            return
        time.sleep(0.05)
    _run("umount", "-l", str(mnt), check=False)


@contextmanager
def xfs_image(base: Path, size_mb: int = 300):
    base.mkdir(parents=True, exist_ok=True)
    img, mnt = base / "xfs.img", base / "mnt"
    mnt.mkdir(exist_ok=True)
    with open(img, "wb") as f:
        f.truncate(size_mb << 20)
    _run("mkfs.xfs", "-q", "-f", str(img))
    _run("mount", "-o", "loop", str(img), str(mnt))
    try:
        yield mnt, img
    finally:
        if _mounted(mnt):
            _umount(mnt)
        img.unlink(missing_ok=True)


# ---------------------------------------------------------------- the child


#: seconds the workload takes before it starts, beyond its imports (a test stands in for load)
SLOW_START = 0.0


def _child(root: str, results: str, seed: int, n_ops: int, stop_after: int | None,
           shutdown_at_dir_fsync: int | None = None, started: int | None = None) -> None:
    """The seeded workload; one JSON line per operation *after* it returned.  One byte on the
    pipe ``started`` once the workload begins (the parent's seeded delay counts from there)."""
    from dropboxmq.bodies import BytesMessage
    from dropboxmq.message import DeliveryMode, Queue
    from dropboxmq.ackmode import AckMode
    from dropboxmq.connection import Connection, Settings

    time.sleep(SLOW_START)  # a loaded machine (the regression test sets it)
    rng = random.Random(seed)
    out = os.open(results, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def rec(**kw) -> None:
        os.write(out, (json.dumps(kw) + "\n").encode())

    if shutdown_at_dir_fsync is not None:  # "straddle": the file system dies between a rename
        from dropboxmq import dirs, store, transaction  # and the fsync of its directory; we live on

        real, calls = store.fsync_dir, [0]

        def fsync_dir(path: str) -> None:
            calls[0] += 1
            if calls[0] == shutdown_at_dir_fsync:
                _run("xfs_io", "-x", "-c", "shutdown", str(Path(root).parent))
                rec(op="shutdown", dir=path)
            real(path)

        store.fsync_dir = transaction.fsync_dir = dirs.fsync_dir = fsync_dir

    conn = Connection(root, client_id=f"pl{seed}", settings=Settings(poll_interval=0.002, scan_interval=0.0), create=True)
    plain, tx = conn.create_session(), conn.create_session(transacted=True)
    q = Queue(QUEUE)
    p_plain, p_tx = plain.create_producer(q), tx.create_producer(q)
    client = conn.create_session(ack_mode=AckMode.CLIENT_ACKNOWLEDGE)
    noack = conn.create_session(ack_mode=AckMode.CLIENT_ACKNOWLEDGE)
    auto = conn.create_session(ack_mode=AckMode.AUTO_ACKNOWLEDGE)
    txr = conn.create_session(transacted=True)
    c_client, c_noack = client.create_consumer(q), noack.create_consumer(q)
    c_auto, c_txr = auto.create_consumer(q), txr.create_consumer(q)
    seq = 0

    def msg(v: str) -> BytesMessage:
        m = BytesMessage(body=v.encode() * 20)
        m.set_property("sv", v)
        return m

    def values(k: int) -> list[str]:
        nonlocal seq
        vs = [f"v{seed}-{seq + i}" for i in range(k)]
        seq += k
        return vs

    def take(consumer, k: int) -> list[str]:
        got = []
        for _ in range(k):
            m = consumer.receive_no_wait()
            if m is None:
                break
            got.append(m.get_property("sv"))
        return got

    ops = ["single", "many", "tx", "np", "client", "noack", "auto", "txrecv"]
    weights = [3, 2, 2, 1, 3, 1, 2, 2]
    rec(op="start", pid=os.getpid())
    if started is not None:
        os.write(started, b"s")
        os.close(started)
    for i in range(n_ops):
        if stop_after is not None and i == stop_after:
            os.kill(os.getpid(), signal.SIGSTOP)  # the power loss, at an operation boundary
        op = rng.choices(ops, weights)[0]
        try:
            if op == "single":
                vs = values(1)
                p_plain.send(msg(vs[0]), delivery_mode=DeliveryMode.PERSISTENT, priority=rng.randrange(10))
                rec(op="send", mode=op, values=vs, persistent=True)
            elif op == "np":
                vs = values(1)
                p_plain.send(msg(vs[0]), delivery_mode=DeliveryMode.NON_PERSISTENT)
                rec(op="send", mode=op, values=vs, persistent=False)
            elif op == "many":
                vs = values(rng.randint(2, 6))
                p_plain.send_many([msg(v) for v in vs], delivery_mode=DeliveryMode.PERSISTENT)
                rec(op="send", mode=op, values=vs, persistent=True)
            elif op == "tx":
                vs = values(rng.randint(2, 5))
                for v in vs:
                    p_tx.send(msg(v), delivery_mode=DeliveryMode.PERSISTENT)
                tx.commit()
                rec(op="send", mode=op, values=vs, persistent=True)
            elif op == "client":
                got = take(c_client, rng.randint(1, 4))
                rec(op="received", mode=op, values=got)
                if got:
                    client.acknowledge()
                    rec(op="acked", mode=op, values=got)
            elif op == "noack":
                rec(op="received", mode=op, values=take(c_noack, 1))
            elif op == "auto":
                got = take(c_auto, 1)
                rec(op="acked", mode=op, values=got)
            elif op == "txrecv":
                got = take(c_txr, rng.randint(1, 3))
                rec(op="received", mode=op, values=got)
                if got:
                    txr.commit()
                    rec(op="acked", mode=op, values=got)
        except Exception as exc:  # noqa: BLE001 - recorded; only what returned is asserted
            rec(op="error", mode=op, err=f"{type(exc).__name__}: {exc}")
    rec(op="done")
    os.kill(os.getpid(), signal.SIGSTOP)


def _spawn(root: Path, results: Path, seed: int, n_ops: int, stop_after: int | None,
           shutdown_at_dir_fsync: int | None = None) -> tuple[int, int]:
    """Fork the workload; returns its pid and the read end of its "started" pipe."""
    started_r, started_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 0
        os.close(started_r)
        try:
            _child(str(root), str(results), seed, n_ops, stop_after, shutdown_at_dir_fsync, started_w)
        except BaseException:  # noqa: BLE001
            import traceback

            traceback.print_exc()
            code = 1
        finally:
            os._exit(code)
    os.close(started_w)
    return pid, started_r


def _wait_started(started: int, timeout: float = 300.0) -> None:
    """Block until the workload has begun (imports and the connection can take seconds under
    load: a delay counted from the fork froze the child before it wrote anything; CI flake)."""
    ready, _, _ = select.select([started], [], [], timeout)
    assert ready and os.read(started, 1) == b"s", "the workload did not start"


# ---------------------------------------------------------------- one power loss


def where_is_every_value(root: Path) -> dict[str, list[str]]:
    from dropboxmq_stress.final_state import value_of

    out: dict[str, list[str]] = {}
    for state in STATES:
        try:
            names = os.listdir(root / QUEUE / "incoming" / state)
        except FileNotFoundError:
            continue
        for n in names:
            v = value_of(n)
            if v is not None:
                out.setdefault(v, []).append(state)
    return out


def power_loss_trial(scratch: Path, seed: int, mode: str = "boundary", n_ops: int = 60) -> dict:
    """One seeded run ending in a power loss; returns {problems: [...], ...}."""
    from dropboxmq.recovery import recover
    from dropboxmq_stress import nemesis
    from dropboxmq.dirs import ensure_layout

    rng = random.Random(seed * 7919 + 1)
    base = scratch / f"seed{seed}-{mode}"
    shutil.rmtree(base, ignore_errors=True)
    results = scratch / f"seed{seed}-{mode}.jsonl"
    results.unlink(missing_ok=True)
    with xfs_image(base) as (mnt, img):
        root = mnt / "root"
        ensure_layout(root)
        for state in STATES:
            os.makedirs(root / QUEUE / "incoming" / state, exist_ok=True)
        fd = os.open(mnt, os.O_RDONLY)
        os.fsync(fd)  # the layout itself is not under test
        os.close(fd)
        os.sync()
        stop_after = rng.randint(1, n_ops) if mode == "boundary" else None
        if mode == "live":
            n_ops *= 20  # keeps running until killed
        at = rng.randint(1, 30) if mode == "straddle" else None
        pid, started = _spawn(root, results, seed, n_ops, stop_after, at)
        try:
            if mode in ("timed", "live"):
                _wait_started(started)
            if mode == "boundary":
                _, status = os.waitpid(pid, os.WUNTRACED)
                assert os.WIFSTOPPED(status), f"child ended early (status {status})"
                nemesis.shutdown_xfs(mnt)
            elif mode == "timed":
                time.sleep(rng.uniform(0.02, 0.4))
                assert not nemesis.freeze([pid]), "child would not stop"
                nemesis.shutdown_xfs(mnt)
            elif mode == "live":  # the old harness model: NOT a power loss
                time.sleep(rng.uniform(0.1, 0.5))
                nemesis.shutdown_xfs(mnt)
                time.sleep(0.2)
            elif mode == "straddle":  # the child shuts the fs down itself and runs on
                _, status = os.waitpid(pid, os.WUNTRACED)
            else:
                raise ValueError(mode)
        finally:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(started)
        _umount(mnt)
        _run("mount", "-o", "loop", str(img), str(mnt))
        rep = recover(root)
        where = where_is_every_value(root)
    recs = [json.loads(line) for line in results.read_text().splitlines() if line.strip()]
    persistent: set[str] = set()
    sent: set[str] = set()
    acked: set[str] = set()
    for r in recs:
        if r["op"] == "send":
            sent.update(r["values"])
            if r["persistent"]:
                persistent.update(r["values"])
        elif r["op"] == "acked":
            acked.update(r["values"])
    problems = []
    for v in sorted(persistent):
        states = where.get(v, [])
        if len(states) != 1 or states[0] not in ("target", "processing", "processed"):
            problems.append(f"send of {v} returned, after the power loss it is in {states or 'nowhere'}")
    for v in sorted(acked & persistent):
        if where.get(v) != ["processed"]:
            problems.append(f"ack of {v} returned, after the power loss it is in {where.get(v) or 'nowhere'}")
    for v, states in where.items():
        if len(states) > 1:
            problems.append(f"{v} is in {states} at once")
    return {"seed": seed, "mode": mode, "ops": sum(r["op"] not in ("start", "done") for r in recs),
            "finished": any(r["op"] == "done" for r in recs), "sent": len(persistent),
            "acked": len(acked & persistent), "errors": sum(r["op"] == "error" for r in recs),
            "recovery": rep.as_dict(), "problems": problems}


# ---------------------------------------------------------------- pytest


@pytest.fixture(scope="module")
def scratch():
    d = Path(tempfile.mkdtemp(prefix="dmq-power-loss-"))
    why = _why_not_possible(d)
    if why:
        shutil.rmtree(d, ignore_errors=True)
        print(f"test_power_loss skipped: {why}", file=sys.stderr)
        pytest.skip(why)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(8))
def test_power_loss_at_an_operation_boundary_keeps_every_returned_send_and_ack(scratch, seed):
    r = power_loss_trial(scratch, seed, "boundary")
    assert r["sent"] > 0
    assert not r["problems"], r


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(100, 104))
def test_power_loss_mid_operation_keeps_every_returned_send_and_ack(scratch, seed):
    r = power_loss_trial(scratch, seed, "timed")
    assert not r["problems"], r


@pytest.mark.slow
def test_a_timed_power_loss_counts_its_delay_from_the_workloads_start(scratch, monkeypatch):
    """CI flake under load: the seeded delay (at most 0.4 s) ran out before the forked workload
    had even opened its results file, so the trial found nothing to judge."""
    monkeypatch.setattr(sys.modules[__name__], "SLOW_START", 0.6)
    r = power_loss_trial(scratch, 101, "timed")
    assert r["ops"] > 0 and not r["problems"], r


def test_client_ack_whose_fsync_fails_does_not_return(tmp_path, monkeypatch):
    """No root needed: acknowledge() surfaces a failed fsync of processed/ instead of
    returning (a power loss would undo the ack), and a retry syncs again."""
    import errno as _errno

    from dropboxmq import store
    from dropboxmq.errors import StoreError
    from dropboxmq.bodies import BytesMessage
    from dropboxmq.message import Queue
    from dropboxmq.ackmode import AckMode
    from dropboxmq.connection import Connection, Settings

    q = Queue(QUEUE)
    with Connection(tmp_path / "root", "a", Settings(poll_interval=0.002), create=True) as c:
        c.create_session().create_producer(q).send(BytesMessage(body=b"x"))
        s = c.create_session(ack_mode=AckMode.CLIENT_ACKNOWLEDGE)
        assert s.create_consumer(q).receive(1) is not None
        real, synced = store.fsync_dir, []

        def eio_for_processed(path):
            if path.endswith("processed"):
                raise OSError(_errno.EIO, "Input/output error", path)
            real(path)

        monkeypatch.setattr(store, "fsync_dir", eio_for_processed)
        with pytest.raises(StoreError, match="not durable"):
            s.acknowledge()
        monkeypatch.setattr(store, "fsync_dir", lambda p: (synced.append(p), real(p)))
        s.acknowledge()  # the retry: the rename is done already, the sync is not
        assert any(p.endswith("processed") for p in synced)


# ---------------------------------------------------------------- many seeds by hand


def main(argv: list[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--first", type=int, default=0)
    ap.add_argument("--mode", choices=("boundary", "timed", "live", "straddle"), default="boundary")
    a = ap.parse_args(argv)
    d = Path(tempfile.mkdtemp(prefix="dmq-power-loss-"))
    why = _why_not_possible(d)
    if why:
        print(f"skipped: {why}")
        return 0
    failures = 0
    try:
        for seed in range(a.first, a.first + a.seeds):
            r = power_loss_trial(d, seed, a.mode)
            failures += bool(r["problems"])
            print(json.dumps({k: r[k] for k in ("seed", "mode", "ops", "finished", "sent", "acked", "errors")}
                             | {"problems": r["problems"][:4], "n_problems": len(r["problems"])}), flush=True)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    print(f"{a.mode}: {a.seeds} runs, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))