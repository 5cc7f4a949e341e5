"""The ``dropboxmq`` PySpark data source: batch read, batch write, streaming read, streaming write.

Marked ``spark`` (one ``local[2,4]`` session for the whole run).  ``make test`` runs them; skip them
locally with ``pytest -m "not spark"``.
"""

from __future__ import annotations

import collections
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from pyspark.errors import PySparkException  # noqa: E402
from spark_fixtures import spark_env  # noqa: E402

from dropboxmq.bodies import BytesMessage  # noqa: E402
from dropboxmq.message import Queue, TextMessage  # noqa: E402
from dropboxmq.ackmode import CLIENT_ACKNOWLEDGE  # noqa: E402
from dropboxmq.connection import Connection, Settings  # noqa: E402

pytestmark = pytest.mark.spark

STATES = ("working", "target", "processing", "processed", "expired", "error")


def ls(root: Path, queue: str, state: str) -> list[str]:
    try:
        return sorted(n for n in os.listdir(Path(root) / queue / "incoming" / state) if not n.startswith("."))
    except FileNotFoundError:
        return []


def snapshot(root: Path, queue: str) -> dict[str, list[str]]:
    return {s: ls(root, queue, s) for s in STATES}


def bodies(root: Path, queue: str, state: str = "target") -> collections.Counter:
    d = Path(root) / queue / "incoming" / state
    return collections.Counter((d / n).read_bytes() for n in ls(root, queue, state))


def open_logs(root: Path) -> list[str]:
    d = Path(root) / "dropboxmq" / "transaction"
    return [f"{w}/{n}" for w in ("associated", "committing", "rolling-back") if (d / w).is_dir()
            for n in os.listdir(d / w)]


def send(root: Path, queue: str, n: int, prefix: str = "m") -> list[bytes]:
    out = []
    with Connection(root, create=True) as conn:
        p = conn.create_session().create_producer(Queue(queue))
        msgs = []
        for i in range(n):
            m = TextMessage(body=f"{prefix}{i}".encode())
            m.set_property("seq", i)
            msgs.append(m)
            out.append(m.body)
        p.send_many(msgs)
    return out


# ---------------------------------------------------------------- batch read


def test_batch_read_is_a_typed_browse_that_moves_nothing(spark, tmp_path):
    root = tmp_path / "root"
    with Connection(root, client_id="app", create=True) as conn:
        s = conn.create_session()
        p = s.create_producer(Queue("q"))
        m = TextMessage(body="héllo".encode())
        m.correlation_id, m.jms_type, m.reply_to = "corr-1", "order", Queue("replies")
        m.set_property("region", "eu")
        m.set_property("n", 7, "long")
        m.set_property("ok", True)
        p.send(m, priority=7)
        p.send(BytesMessage(body=b"\x00\x01"), priority=2)
        p.send(TextMessage(body=b"short-lived"), time_to_live=0.001)
        p.send(TextMessage(body=b"to-process"), priority=9)
        c = conn.create_session(ack_mode=CLIENT_ACKNOWLEDGE).create_consumer(Queue("q"))
        got = c.receive(timeout=5)
        assert got.body == b"to-process"
        got.acknowledge()
        time.sleep(0.01)
        before = snapshot(root, "q")
        df = spark.read.format("dropboxmq").option("root", str(root)).load("q")
        rows = df.orderBy("priority", ascending=False).collect()
        assert snapshot(root, "q") == before  # a browse never moves a file
        assert [r.priority for r in rows] == [7, 2]  # the expired one is not browsed, the acked one gone
        r = rows[0]
        assert (r.state, r.text, r.body, r.message_class) == ("target", "héllo", "héllo".encode(), "TextMessage")
        assert (r.correlation_id, r.jms_type, r.reply_to) == ("corr-1", "order", "queue://replies")
        assert r.properties == {"region": "eu", "n": "7", "ok": "true"}
        assert r.message_id.startswith("ID:") and r.timestamp is not None and r.expiration is None
        assert (r.delivery_count, r.redelivered, r.delivery_mode) == (1, False, "PERSISTENT")
        assert (rows[1].message_class, rows[1].text, rows[1].body) == ("BytesMessage", None, b"\x00\x01")
        typed = dict(df.dtypes)
        assert (typed["priority"], typed["timestamp"], typed["body"], typed["redelivered"]) == (
            "int", "timestamp", "binary", "boolean")

        every = spark.read.format("dropboxmq").option("root", str(root)).option(
            "include", "expired,processed,error").load("q").collect()
        assert snapshot(root, "q") == before
        by_body = {r.body: r for r in every}
        assert by_body[b"to-process"].state == "processed"
        assert by_body[b"to-process"].delivery_count == 1
        assert by_body[b"short-lived"].state == "target" and by_body[b"short-lived"].expiration is not None
        assert len(every) == 4
        sel = spark.read.format("dropboxmq").option("root", str(root)).option("selector", "region = 'eu'").load("q")
        assert [r.text for r in sel.collect()] == ["héllo"]


# ---------------------------------------------------------------- batch write


def test_batch_write_is_one_transaction_readable_by_every_client(spark, tmp_path):
    root = tmp_path / "root"
    n = 300
    df = spark.range(n).selectExpr("concat('w', cast(id as string)) as text", "cast(id % 10 as int) as priority",
                                   "map('src', 'spark') as properties", "cast(id as int) as seq").repartition(2)
    df.write.format("dropboxmq").option("root", str(root)).mode("append").save("q")
    assert bodies(root, "q") == collections.Counter(f"w{i}".encode() for i in range(n))
    assert ls(root, "q", "working") == [] and open_logs(root) == []
    with Connection(root, create=True) as conn:
        c = conn.create_session().create_consumer(Queue("q"))
        first = c.receive(timeout=5)
        assert first.priority == 9 and first.get_property("src") == "spark"
        assert first.get_property("seq") % 10 == 9 and isinstance(first, TextMessage)
    # empty partitions write nothing and commit nothing
    spark.createDataFrame([("lone",)], "text string").repartition(3).write.format("dropboxmq").option(
        "root", str(root)).mode("append").save("q2")
    assert bodies(root, "q2") == collections.Counter([b"lone"]) and open_logs(root) == []


def test_batch_write_retried_tasks_never_duplicate(spark, tmp_path):
    """Each partition's first attempt dies after creating 40 files; only the retries are published."""
    root = tmp_path / "root"
    n = 200
    df = spark.range(n).selectExpr("concat('r', cast(id as string)) as text").repartition(2)
    (df.write.format("dropboxmq").option("root", str(root)).option("failFirstAttemptAfter", 40)
     .mode("append").save("q"))
    got = bodies(root, "q")
    assert got == collections.Counter(f"r{i}".encode() for i in range(n))  # each exactly once
    assert ls(root, "q", "working") == [] and open_logs(root) == []


def test_batch_writer_abort_removes_everything(tmp_path):
    from pyspark.sql import Row

    from dropboxmq_spark import DropboxMQBatchWriter

    root = tmp_path / "root"
    w = DropboxMQBatchWriter({"root": str(root), "path": "q"})
    msg = w.write(iter([Row(text=f"a{i}") for i in range(5)]))
    assert len(ls(root, "q", "working")) == 5 and ls(root, "q", "target") == []
    w.abort([msg])
    assert snapshot(root, "q") == {s: [] for s in STATES} and open_logs(root) == []


# ---------------------------------------------------------------- streaming write


def test_stream_writer_commits_each_batch_id_once(tmp_path, monkeypatch):
    from pyspark.sql import Row

    import dropboxmq_spark as ds
    from dropboxmq_spark import DropboxMQStreamWriter

    batch = {"id": "0"}
    monkeypatch.setattr(ds, "_current_batch", lambda: batch["id"])  # what Spark tells a task

    root = tmp_path / "root"
    opts = {"root": str(root), "path": "out", "checkpointLocation": str(tmp_path / "ck")}
    w = DropboxMQStreamWriter(opts)
    first = w.write(iter([Row(text=f"b{i}") for i in range(4)]))
    w.commit([first], 0)
    assert bodies(root, "out") == collections.Counter(f"b{i}".encode() for i in range(4))
    # a replay of batch 0 (crash after the sink commit, before Spark's commit log): no effect
    w2 = DropboxMQStreamWriter(opts)
    again = w2.write(iter([Row(text=f"b{i}") for i in range(4)]))
    w2.commit([again], 0)
    assert bodies(root, "out") == collections.Counter(f"b{i}".encode() for i in range(4))
    batch["id"] = "1"
    nxt = w2.write(iter([Row(text="b4")]))
    w2.commit([nxt], 1)
    assert sum(bodies(root, "out").values()) == 5
    assert ls(root, "out", "working") == [] and open_logs(root) == []


# ---------------------------------------------------------------- streaming read (+ write)


def test_stream_read_claims_caps_batches_and_acks_in_commit(spark, tmp_path):
    root = tmp_path / "root"
    expected = send(root, "in", 60)
    ck = str(tmp_path / "ck")
    seen: list[tuple[int, int, int, int]] = []

    def sink(batch, batch_id):
        rows = batch.select("state", "text", "delivery_count").collect()
        # while the batch is being processed its messages are claimed (processing/), not acked
        seen.append((batch_id, len(rows), len(ls(root, "in", "processing")), len(ls(root, "in", "processed"))))
        assert all(r.state == "processing" and r.delivery_count == 1 for r in rows)
        got.extend(r.text.encode() for r in rows)

    got: list[bytes] = []
    q = (spark.readStream.format("dropboxmq").option("root", str(root)).option("checkpointLocation", ck)
         .option("maxMessagesPerTrigger", 25).load("in")
         .writeStream.foreachBatch(sink).option("checkpointLocation", ck).start())
    try:
        q.processAllAvailable()
    finally:
        q.stop()
    assert sorted(got) == sorted(expected)  # every message exactly once
    assert [s[1] for s in seen] == [25, 25, 10]  # capped by maxMessagesPerTrigger
    assert all(s[2] >= s[1] for s in seen)  # claimed while in flight
    assert seen[1][3] == 25 and seen[2][3] == 50  # acked only once the batch is committed
    assert snapshot(root, "in")["processed"] and len(ls(root, "in", "processed")) == 60
    assert ls(root, "in", "target") == ls(root, "in", "processing") == []


# ---------------------------------------------------------------- exactly-once as people run it (issue 16)


class Competitor(threading.Thread):
    """A plain library consumer on the same queue (auto-acknowledge, periodic dead-owner reclaim).
    ``finish()`` lets it drain what is left and stop."""

    def __init__(self, root: Path, queue: str):
        super().__init__(daemon=True)
        self.root, self.queue = root, queue
        self.got: list[bytes] = []
        self.started_receiving = threading.Event()
        self._finish = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            every_receive = Settings(recovery_interval=0.0)  # reclaim dead owners at every receive
            with Connection(self.root, client_id="plain-competitor", settings=every_receive, create=True) as conn:
                c = conn.create_session().create_consumer(Queue(self.queue))
                self.started_receiving.set()
                while True:
                    m = c.receive(timeout=0.2)
                    if m is not None:
                        self.got.append(m.body)
                    elif self._finish.is_set():
                        return
        except BaseException as exc:  # noqa: BLE001 -- reported by finish()
            self.error = exc
            self.started_receiving.set()

    def finish(self) -> list[bytes]:
        self._finish.set()
        self.join(120)
        assert not self.is_alive() and self.error is None, self.error
        return self.got


def _available_now(spark, root: Path, ck: str, sink: str):
    """The query of the acceptance test: drain the backlog, 500 a batch, exactly once into Parquet."""
    q = (spark.readStream.format("dropboxmq").option("root", str(root)).option("checkpointLocation", ck)
         .option("maxMessagesPerTrigger", 500).load("in")
         .select("text", "message_id", "redelivered")
         .writeStream.format("parquet").option("path", sink).option("checkpointLocation", ck)
         .trigger(availableNow=True).start())
    q.awaitTermination(600)
    assert not q.isActive and q.exception() is None, q.exception()
    return q


def _sink_texts(spark, sink: str) -> list[bytes]:
    return [r.text.encode() for r in spark.read.parquet(sink).select("text").collect()]


def _recover_cli(root: Path, release: str | None = None) -> dict:
    """``dropboxmq recover`` (``--release CLIENT``: the operator says that query is gone for good)."""
    out = subprocess.run([str(Path(sys.executable).parent / "dropboxmq"), "recover", "--json",
                          *(("--release", release) if release else ())], check=True,
                         capture_output=True, text=True, env={**os.environ, "DROPBOXMQ_ROOT": str(root)})
    return json.loads(out.stdout)


_GATED_JOB = textwrap.dedent("""
    import os, sys, time
    from pyspark.sql import SparkSession, functions as F
    root, ck, sink, gate, marker = sys.argv[1:6]
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")

    @F.udf("string")
    def gated(text):
        if text == gate:  # the batch holding the gate message is in progress: say so, stay in it
            open(marker, "w").close()
            parent = os.getppid()
            while os.getppid() == parent:  # until the kill takes our parent (then exit too)
                time.sleep(0.05)
        return text

    q = (spark.readStream.format("dropboxmq").option("root", root).option("checkpointLocation", ck)
         .option("maxMessagesPerTrigger", 500).load("in")
         .select(gated("text").alias("text"), "message_id", "redelivered")
         .writeStream.format("parquet").option("path", sink).option("checkpointLocation", ck)
         .trigger(availableNow=True).start())
    q.awaitTermination()
""")


def test_available_now_recover_competitor_and_kill_9_deliver_every_message_exactly_once(spark, tmp_path):
    root = tmp_path / "root"
    ck, sink = str(tmp_path / "ck"), str(tmp_path / "sink")

    # 1. one availableNow run drains a 3,000 backlog in batches of 500 and leaves nothing claimed
    first = send(root, "in", 3000, "a")
    q = _available_now(spark, root, ck, sink)
    sizes = [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]
    assert sizes == [500] * 6, sizes
    assert collections.Counter(_sink_texts(spark, sink)) == collections.Counter(first)
    assert ls(root, "in", "processing") == ls(root, "in", "target") == []
    assert len(ls(root, "in", "processed")) == 3000

    # 2. a routine recover, then 1,000 more while a plain consumer competes; the query runs again
    assert _recover_cli(root)["redelivered"] == 0
    rival = Competitor(root, "in")
    rival.start()
    rival.started_receiving.wait(60)
    second = send(root, "in", 1000, "b")
    _available_now(spark, root, ck, sink)
    rival_got = rival.finish()
    together = collections.Counter(_sink_texts(spark, sink)) + collections.Counter(rival_got)
    assert together == collections.Counter(first + second), (
        f"twice: {[b for b, c in together.items() if c > 1][:5]}, missing: {len(set(first + second) - set(together))}")
    assert ls(root, "in", "processing") == ls(root, "in", "target") == []

    # 3. kill -9 of the driver while a batch is in progress, recover, a competitor, a restart
    third = send(root, "in", 1000, "c")
    marker = tmp_path / "batch-in-progress"
    script = tmp_path / "job.py"
    script.write_text(_GATED_JOB)
    job = subprocess.Popen([sys.executable, str(script), str(root), ck, sink, "c700", str(marker)],
                           env={**os.environ, **spark_env()}, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        while not marker.exists():  # the event: the gated batch is being processed
            assert job.poll() is None, "the streaming job ended by itself"
            time.sleep(0.05)
    finally:
        os.killpg(job.pid, signal.SIGKILL)  # the driver, its JVM and its Python workers
        job.wait()
    held = ls(root, "in", "processing")
    assert held and all(p.startswith("spark-") for p in held)
    assert _recover_cli(root)["redelivered"] == 0  # the checkpoint still owns the batch
    rival = Competitor(root, "in")
    rival.start()
    rival.started_receiving.wait(60)
    fourth = send(root, "in", 500, "d")
    assert set(ls(root, "in", "processing")) >= set(held)  # the competitor's reclaim left them too
    _available_now(spark, root, ck, sink)
    rival_got += rival.finish()
    rows = spark.read.parquet(sink).select("text", "redelivered").collect()
    together = collections.Counter(r.text.encode() for r in rows) + collections.Counter(rival_got)
    everything = first + second + third + fourth
    assert together == collections.Counter(everything), (
        f"twice: {[b for b, c in together.items() if c > 1][:5]}, missing: {len(set(everything) - set(together))}")
    assert ls(root, "in", "processing") == ls(root, "in", "target") == []
    replayed = {r.text for r in rows if r.redelivered}
    assert "c700" in replayed  # the killed batch came back marked redelivered
    assert len(ls(root, "in", "processed")) == len(everything)


def test_claims_belong_to_the_checkpoint_until_it_is_deleted_or_released(tmp_path):
    """A dead query's claims survive recover and every consumer's reclaim while its checkpoint
    exists; deleting the checkpoint, or ``recover --release CLIENT``, gives them back."""
    from dropboxmq.liveness import hold_for_checkpoint
    from dropboxmq.recovery import reclaim_dead_owners
    from dropboxmq_spark import DropboxMQStreamReader

    root = tmp_path / "root"
    send(root, "in", 10)
    def delete(ck: Path, client: str) -> dict:
        shutil.rmtree(ck)
        return _recover_cli(root)

    for run, gone in (("deleted", delete), ("released", lambda ck, client: _recover_cli(root, client))):
        ck = tmp_path / f"ck-{run}"
        ck.mkdir()
        reader = DropboxMQStreamReader({"root": str(root), "path": "in", "checkpointLocation": str(ck),
                                        "maxMessagesPerTrigger": "4"})
        start = reader.initialOffset()
        end = reader.latestOffset(start, None)
        for part in reader.partitions(start, end):  # the batch's read tasks claim
            list(reader.read(part))
        reader.stop()  # the process is gone (its registration released): only the hold remains
        claimed = ls(root, "in", "processing")
        assert len(claimed) == 4
        from dropboxmq import layout
        assert reclaim_dead_owners(root, layout.queue_box(root, Queue("in"))) == 0
        assert _recover_cli(root)["redelivered"] == 0 and ls(root, "in", "processing") == claimed
        assert gone(ck, reader.client_id)["redelivered"] == 4 and ls(root, "in", "processing") == []
        assert len(ls(root, "in", "target")) == 10
    hold_for_checkpoint(root, "nobody", str(tmp_path))
    with pytest.raises(subprocess.CalledProcessError):
        _recover_cli(root, "somebody-else")


def _readme_spark_snippets() -> list[str]:
    text = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## Spark\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


def test_every_readme_spark_snippet_runs_as_written(spark, tmp_path):
    """The snippets of README's Spark section, executed verbatim in a session that never called
    ``register`` (the data source is found as an installed package)."""
    snippets = _readme_spark_snippets()
    assert len(snippets) >= 2 and not any("register(" in s for s in snippets)
    root = tmp_path / "root"
    with Connection(root, create=True) as conn:
        p = conn.create_session().create_producer(Queue("orders"))
        for i in range(12):
            m = TextMessage(body=f"order {i}".encode())
            m.set_property("amount", i + 0.5)
            m.set_property("region", "eu" if i % 2 else "us")
            p.send(m)
    scope = {"spark": spark, "root": str(root), "checkpoint": str(tmp_path / "ck"), "out": str(tmp_path / "out")}
    for snippet in snippets:
        exec(compile(snippet, "README.md", "exec"), scope)  # noqa: S102 -- the README's own code
    assert sorted(bodies(root, "orders-copy").elements()) == sorted(f"order {i}".encode() for i in range(12))
    got = spark.read.parquet(str(tmp_path / "out")).collect()
    assert sorted((r.text, r.amount) for r in got) == sorted((f"order {i}", i + 0.5) for i in range(12))
    assert ls(root, "orders", "processing") == ls(root, "orders", "target") == []


def test_missing_root_or_checkpoint_is_one_line_naming_the_option(spark, tmp_path, monkeypatch):
    monkeypatch.delenv("DROPBOXMQ_ROOT", raising=False)
    with pytest.raises(PySparkException) as e:  # Spark's, not a TypeError of this test
        spark.read.format("dropboxmq").load("q").collect()
    # Spark puts the worker's traceback (pyspark frames removed: simplified tracebacks are on by
    # default) in its message; the cause is one line naming the option
    assert "ValueError: dropboxmq: give the root with .option('root', DIR) (or set DROPBOXMQ_ROOT)" in (
        str(e.value).splitlines()), str(e.value)
    q = (spark.readStream.format("dropboxmq").option("root", str(tmp_path)).load("q")
         .writeStream.format("noop").option("checkpointLocation", str(tmp_path / "ck")).start())
    with pytest.raises(PySparkException) as e:  # Spark's, not a TypeError of this test
        q.awaitTermination(120)
    assert ("ValueError: dropboxmq: a streaming read needs .option('checkpointLocation', DIR) on readStream too "
            "(the same DIR as the query's)") in str(e.value).splitlines(), str(e.value)


def test_a_bad_read_limit_stops_the_query_with_one_line_naming_the_option(spark, tmp_path):
    send(tmp_path / "root", "q", 3)
    for value in ("abc", "-5"):  # "-5" was taken as no limit at all
        ck = str(tmp_path / f"ck{value}")
        q = (spark.readStream.format("dropboxmq").option("root", str(tmp_path / "root"))
             .option("checkpointLocation", ck).option("maxMessagesPerTrigger", value).load("q")
             .writeStream.format("noop").option("checkpointLocation", ck).start())
        with pytest.raises(PySparkException) as e:  # Spark's, not a TypeError of this test
            q.awaitTermination(120)
        assert (f"ValueError: dropboxmq: option maxMessagesPerTrigger='{value}': expected a whole number >= 0 "
                "(0: no limit)") in str(e.value).splitlines(), str(e.value)
    assert len(ls(tmp_path / "root", "q", "target")) == 3  # nothing claimed


def test_a_restart_settles_every_claim_from_the_checkpoint(tmp_path):
    """Claims left by a stopped run: a batch the checkpoint shows committed is acknowledged, a
    logged batch not committed stays claimed and is replayed marked redelivered, a claim no
    logged batch names goes back redelivered."""
    from dropboxmq.codec import from_wire
    from dropboxmq_spark import DropboxMQStreamReader

    root, ck = tmp_path / "root", tmp_path / "ck"
    send(root, "in", 9)
    opts = {"root": str(root), "path": "in", "checkpointLocation": str(ck), "maxMessagesPerTrigger": "3"}
    first = DropboxMQStreamReader(opts)
    offsets = [first.initialOffset()]
    for _ in range(3):
        offsets.append(first.latestOffset(offsets[-1], None))
        for part in first.partitions(offsets[-2], offsets[-1]):  # the read tasks claim
            list(first.read(part))
    first.stop()
    assert len(ls(root, "in", "processing")) == 9
    # what Spark wrote before the stop: batches 0 and 1 planned, batch 0 committed by the sink
    for d in ("offsets", "commits"):
        (ck / d).mkdir(parents=True)
    for batch in (0, 1):
        (ck / "offsets" / str(batch)).write_text(f"v1\n{{}}\n{json.dumps(offsets[batch + 1])}")
    (ck / "commits" / "0").write_text("v1\n{}")

    again = DropboxMQStreamReader(opts)
    assert again.initialOffset()["seq"] == 1
    assert len(ls(root, "in", "processed")) == 3  # batch 0: the sink has it
    back = ls(root, "in", "target")
    assert len(back) == 3 and all(from_wire(n).redelivered for n in back)  # never logged
    assert len(ls(root, "in", "processing")) == 3  # batch 1: Spark replays it
    rows = [r for p in again.partitions(offsets[1], offsets[2]) for r in again.read(p)]
    assert len(rows) == 3 and all(r[13] for r in rows)  # redelivered
    again.commit(offsets[2])
    again.stop()
    assert len(ls(root, "in", "processed")) == 6 and ls(root, "in", "processing") == []


def _drive(reader, start: dict, limit_batches: int = 10) -> list[tuple]:
    """Spark's calls, batch after batch until no new data: plan, the read tasks, commit."""
    rows: list[tuple] = []
    for _ in range(limit_batches):
        end = reader.latestOffset(start, None)
        if end == start:
            return rows
        rows += [r for part in reader.partitions(start, end) for r in reader.read(part)]
        reader.commit(end)
        start = end
    raise AssertionError("no end of data")


def test_a_retried_read_task_reads_what_its_dead_attempt_claimed_and_claims_the_rest(tmp_path):
    """latestOffset plans a batch and claims nothing; its read task claims.  A task attempt
    that dies after claiming part of its names leaves those claimed by the query; the retry
    reads them (an alias claim too) and claims the rest: each message once, none lost."""
    from dropboxmq_spark import DropboxMQStreamReader

    root, ck = tmp_path / "root", tmp_path / "ck"
    expected = send(root, "in", 6)
    long_name = "9." + "x" * 240 + ".B"  # no room for the count: claimed under an alias (claims.py)
    (root / "in" / "incoming" / "target" / long_name).write_bytes(b"aliased")
    expected.append(b"aliased")
    reader = DropboxMQStreamReader({"root": str(root), "path": "in", "checkpointLocation": str(ck),
                                    "numPartitions": "1"})
    start = reader.initialOffset()
    end = reader.latestOffset(start, None)
    assert ls(root, "in", "processing") == [] and len(ls(root, "in", "target")) == 7  # planned only
    (part,) = reader.partitions(start, end)
    attempt = reader.read(part)
    died = [next(attempt) for _ in range(3)]  # the aliased message first (priority 9), then two
    attempt.close()
    assert died[0][15] == b"aliased" and len(ls(root, "in", "processing")) == 3
    assert any("~#" in n for n in ls(root, "in", "processing"))
    rows = list(reader.read(part))  # the retry
    assert sorted(r[15] for r in rows) == sorted(expected)
    assert not any(r[13] for r in rows) and {r[12] for r in rows} == {1}  # first deliveries
    assert ls(root, "in", "target") == [] and len(ls(root, "in", "processing")) == 7
    reader.commit(end)
    reader.stop()
    assert len(ls(root, "in", "processed")) == 7 and ls(root, "in", "processing") == []


def test_a_replayed_batch_claims_nothing_and_its_unclaimed_names_are_delivered_later_once(tmp_path):
    """A run's read task claims two names of its batch of five (a plain consumer holds one) and
    the process dies before the sink commits; the consumer then gives its message back.  The
    restart replays the batch read-only -- the two it holds, marked redelivered -- and claims
    nothing (spec/CheckpointOwner.tla, mutant replay_claims: a replay that claims may ack a
    message the sink never wrote); the names never claimed stay in target/ and later batches
    deliver them: every message exactly once."""
    from dropboxmq_spark import DropboxMQStreamReader

    root, ck = tmp_path / "root", tmp_path / "ck"
    expected = send(root, "in", 6)
    opts = {"root": str(root), "path": "in", "checkpointLocation": str(ck), "maxMessagesPerTrigger": "5"}
    first = DropboxMQStreamReader(opts)
    start = first.initialOffset()
    end = first.latestOffset(start, None)  # plans m0..m4
    with Connection(root, client_id="rival") as conn:
        session = conn.create_session(ack_mode=CLIENT_ACKNOWLEDGE)
        held = session.create_consumer(Queue("in")).receive(timeout=10)
        assert held is not None and held.body == b"m0"  # planned, but not claimed yet
        (part,) = first.partitions(start, end)
        attempt = first.read(part)
        claimed = [next(attempt)[15] for _ in range(2)]
        attempt.close()  # the process dies in the task, before the sink commits
        first.stop()
        assert claimed == [b"m1", b"m2"]
        session.recover()  # the rival gives m0 back, redelivered
    (ck / "offsets").mkdir(parents=True)
    (ck / "offsets" / "0").write_text(f"v1\n{{}}\n{json.dumps(end)}")  # Spark logged the batch

    again = DropboxMQStreamReader(opts)
    assert again.initialOffset()["seq"] == 0
    replay = [r for p in again.partitions(start, end) for r in again.read(p)]
    assert sorted(r[15] for r in replay) == [b"m1", b"m2"] and all(r[13] for r in replay)
    assert len(ls(root, "in", "processing")) == 2 and len(ls(root, "in", "target")) == 4  # m0, m3, m4, m5
    (ck / "commits").mkdir()
    (ck / "commits" / "0").write_text("v1\n{}")  # the sink has the replayed batch
    later = _drive(again, end)
    again.stop()
    sink = [r[15] for r in replay + later]
    assert sorted(sink) == sorted(expected)  # exactly once
    assert {r[15]: r[13] for r in later}[b"m0"] is True  # the rival's delivery counted
    assert len(ls(root, "in", "processed")) == 6 and ls(root, "in", "processing") == ls(root, "in", "target") == []


def test_the_bench_floor_query_is_a_real_drain_of_its_rows(spark, tmp_path):
    """spark_bench reports PySpark's floor under any streaming drain (spark_floor: an availableNow
    query over a Python source that reads no file, into Parquet); it is only a floor if the
    query really runs its micro-batch and writes every row."""
    from dropboxmq_stress.spark_floor import floor_seconds

    seconds = floor_seconds(spark, str(tmp_path), rows=250, repeat=2)
    assert len(seconds) == 2 and all(s > 0 for s in seconds)
    for k in range(2):
        rows = spark.read.parquet(str(tmp_path / f"floor-{k}-sink")).collect()
        assert sorted(r.id for r in rows) == list(range(250))


def test_the_floor_breakdown_times_real_drains_and_the_source_runner(spark, tmp_path):
    """spark_floor's breakdown (issue 32) says where a floor query's seconds go: each kind is a
    real availableNow drain of its 100 rows, and for the Python sources the runner process Spark
    starts for the query exists before the first trigger (its start up is outside every batch)."""
    from dropboxmq_stress.spark_floor import breakdown

    for kind in ("python", "text", "dropboxmq"):
        row = breakdown(spark, str(tmp_path), kind, 0)
        sink = spark.read.parquet(str(tmp_path / f"{kind}-0-sink"))
        assert sink.count() == 100 and row["batches"] == 1, kind
        assert 0 < row["start_returned"] < row["total"] and 0 < row["first_trigger_at"] < row["total"], kind
        assert row["trigger_ms"]["triggerExecution"] > 0, kind
        if kind != "text":
            assert row["runner_age_at_reader"] > 0 and row["runner_cpu_at_reader"] > 0, kind
            assert row["runner_started_at"] + row["runner_age_at_reader"] <= row["first_trigger_at"] + 0.05, kind
    processed = tmp_path / "root" / "q0" / "incoming" / "processed"
    assert len(list(processed.iterdir())) == 100  # the drain acknowledged every message
