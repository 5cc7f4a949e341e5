"""The ``dropboxmq`` PySpark data source: batch read, batch write, streaming read, streaming write.

Marked ``spark`` (one ``local[2,4]`` session for the whole run).  ``make test`` runs them; skip them
locally with ``pytest -m "not spark"``.
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from spark_fixtures import spark, spark_env  # noqa: E402,F401  (the session fixture)

from dropboxmq.message import BytesMessage, Queue, TextMessage  # noqa: E402
from dropboxmq.session import CLIENT_ACKNOWLEDGE, Connection  # noqa: E402

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
    with Connection(root) as conn:
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
    with Connection(root, client_id="app") as conn:
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
    with Connection(root) as conn:
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

    from dropboxmq.spark import DropboxMQBatchWriter

    root = tmp_path / "root"
    w = DropboxMQBatchWriter({"root": str(root), "path": "q"})
    msg = w.write(iter([Row(text=f"a{i}") for i in range(5)]))
    assert len(ls(root, "q", "working")) == 5 and ls(root, "q", "target") == []
    w.abort([msg])
    assert snapshot(root, "q") == {s: [] for s in STATES} and open_logs(root) == []


# ---------------------------------------------------------------- streaming write


def test_stream_writer_commits_each_batch_id_once(tmp_path, monkeypatch):
    from pyspark.sql import Row

    import dropboxmq.spark as ds
    from dropboxmq.spark import DropboxMQStreamWriter

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


_KILLED_JOB = textwrap.dedent("""
    import os, sys, time
    from pyspark.sql import SparkSession, functions as F
    root, ck = sys.argv[1], sys.argv[2]
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    from dropboxmq.spark import register
    register(spark)

    @F.udf("string")
    def slow(text):
        time.sleep(0.03)   # a slow pipeline: the kill lands mid-stream
        return text

    src = (spark.readStream.format("dropboxmq").option("root", root).option("checkpointLocation", ck)
           .option("maxMessagesPerTrigger", 20).load("in"))
    q = (src.select(slow("text").alias("text")).writeStream.format("dropboxmq").option("root", root)
         .option("checkpointLocation", ck).start("out"))
    q.awaitTermination()
""")


def _restartable_query(spark, root: Path, ck: str):
    from pyspark.sql import functions as F

    src = (spark.readStream.format("dropboxmq").option("root", str(root)).option("checkpointLocation", ck)
           .option("maxMessagesPerTrigger", 50).load("in"))
    return (src.select(F.col("text")).writeStream.format("dropboxmq").option("root", str(root))
            .option("checkpointLocation", ck).start("out"))


def test_kill_9_of_the_driver_then_restart_delivers_every_message_exactly_once(spark, tmp_path):
    root = tmp_path / "root"
    n = 200
    expected = send(root, "in", n)
    ck = str(tmp_path / "ck")
    script = tmp_path / "job.py"
    script.write_text(_KILLED_JOB)
    job = subprocess.Popen([sys.executable, str(script), str(root), ck], env={**os.environ, **spark_env()},
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 240
    try:
        while True:  # mid-stream: some batches in out/, a batch claimed and not yet acknowledged
            delivered = len(ls(root, "out", "target"))
            if delivered >= 40 and ls(root, "in", "processing") and ls(root, "in", "target"):
                break
            assert job.poll() is None, "the streaming job died by itself"
            assert time.monotonic() < deadline, f"the streaming job made no progress ({delivered} delivered)"
            time.sleep(0.02)
    finally:
        os.killpg(job.pid, signal.SIGKILL)  # the driver, its JVM and its Python workers: kill -9
        job.wait()
    in_flight = ls(root, "in", "processing")
    assert in_flight and all(p.startswith("spark-") for p in in_flight)
    assert 0 < len(ls(root, "out", "target")) < n

    q = _restartable_query(spark, root, ck)  # the same checkpoint: the same consumer and sink
    try:
        q.processAllAvailable()
    finally:
        q.stop()
    got = bodies(root, "out")
    assert got == collections.Counter(expected), (
        f"duplicates: {[b for b, c in got.items() if c > 1][:5]}, missing: {set(expected) - set(got)}")
    assert len(ls(root, "in", "processed")) == n
    assert ls(root, "in", "target") == ls(root, "in", "processing") == []
    assert ls(root, "out", "working") == []
