"""The figures of README's Spark section: the ``dropboxmq`` data source in ``local[2]``, each set
side by side with what it competes with, measured in the same run (load on the shared machine
weighs on both sides of a ratio alike).

Run: ``python -m dropboxmq_stress.spark_bench [--messages N [N ...]] [--parts write browse drain]
[--json PATH]`` (``make bench`` runs it with the default sizes, 20,000 and 100,000).  Progress
lines go to stderr (elapsed time, load).  Before starting it checks that the temporary directory's
file system has the inodes and space the largest size needs at once (the write part keeps its
queues until it ends; the drain part holds three twins).  Sizes above ROUNDS_UP_TO (100,000) run
one write round a side and no durable pair, with a 4g driver (binaryFile lists every file into
its heap); 1,000,000 needs ~2,000,000 files (~8 GiB) at its peak.

For each size N (messages of 100 bytes, one integer property), on fresh queues, timed from the
call to its end with the session already started and warmed up (a small untimed run of each action):

* **write**: a batch write with ``durable=false`` (one transaction, two tasks; the messages
  persistent, no fsync) against the library's own send of the same messages (same count, same
  100-byte text body and ``seq`` property) in one process: ``send_many`` of 1,000,
  non-persistent (no fsync either), its fastest path.  Both sides make the same system calls a
  message: one file created in working/, one rename into target/ (Spark's tasks create, its
  driver's commit renames).  WRITE_ROUNDS rounds, the two sides back to back and in alternating
  order; each side's rate is from its median round; the load average at each start, and the CPU
  seconds of each side (the library's process; Spark's JVM and every Python process it started)
  are recorded beside.  Every round starts from the same state: each side writes a fresh queue,
  nothing is deleted until the write part ends, and before each side the dirty pages are written
  back (``os.sync``) and both garbage collectors run; the write part starts only once the bench's
  own earlier deletions are FREED_INODES_SETTLE_S old (ext4 without a journal makes new creates
  scan past recently freed inodes).  Until now rounds 2 and 3 ran right after the deletion of
  the previous round's 200,000 files, the likeliest cause of the 0.6-2.9x spread of the 100,000
  rounds (one Spark round used 9 CPU seconds, another 51).  The durable batch write is set against the library's persistent
  send_many (both group commit), one round each (no goal).
* **browse**: a batch read of the queue (every body read: ``sum(length(body))``) against Spark's
  own ``binaryFile`` source reading the same files (``sum(length(content))``).
* **drain**: a streaming ``trigger(availableNow=True)`` run into Parquet (claim + read + write +
  ack) with the source's default read limit (``DEFAULT_MESSAGES_PER_TRIGGER``, what a user gets
  without ``maxMessagesPerTrigger``; ``--max-per-trigger`` sets one) against the library's receive
  of an identical twin queue (same count, bodies and properties, sent alike) by one consumer that
  acknowledges as durably and as often as the drain does: CLIENT_ACKNOWLEDGE, one acknowledge()
  (one fsync of processed/) per read limit.  That is the goal's reference.  Beside it, with no
  goal, a third twin received as a default loop does (AUTO_ACKNOWLEDGE: one fsync per message,
  far slower for persistent messages, so a ratio against it would flatter the drain).  The
  drain's breakdown: its micro-batches, the sum of each phase of Spark's
  ``StreamingQueryProgress.durationMs``, the wall time outside the micro-batches (starting the
  query and its source's Python process, stopping it), and the CPU seconds of Spark's whole process
  tree (the JVM, the Python processes it starts, this driver) against the library receive's.

Goals (issue 32): browse >= 1.0x binaryFile, drain >= 0.8x the library's receive, write >= 0.8x
the library's send.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import gc
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

from dropboxmq.extras import require_or_exit

BODY_BYTES = 100
SEND_BATCH = 1000
WRITE_ROUNDS = 3
#: Sizes above it: one write round a side and no durable pair (a round of 1,000,000 takes minutes).
ROUNDS_UP_TO = 100_000
GOALS = {"browse": 1.0, "drain": 0.8, "write": 0.8}
PARTS = ("write", "browse", "drain")
#: Messages between two progress lines (stderr) inside a long library send.
PROGRESS_EVERY = 100_000
#: ext4 without a journal (this machine's /) skips, when it allocates an inode, every free inode
#: freed in the last 60 s (300 s more while its inode table block is dirty), scanning past each
#: (fs/ext4/ialloc.c: recently_deleted): after 100,000 files are deleted, the next creates pay
#: for them (perf: recently_deleted and its buffer lookups were ~40 % of a create's CPU under
#: churn).  So the bench syncs after each bulk delete and lets the write rounds start only when
#: its own deletions are older than this.
FREED_INODES_SETTLE_S = 61.0
#: Bytes a message file takes at most on disk (a block); the pre-flight check counts with it.
FILE_BYTES = 4096


def _session(partitions: int, driver_memory: str | None = None):
    os.environ.update({"PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"})
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    if driver_memory:  # binaryFile lists every file into the driver's heap (1g by default)
        builder = builder.config("spark.driver.memory", driver_memory)
    spark = (builder.master(f"local[{partitions}]").appName("dropboxmq-spark-bench")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             # a Python process Spark starts (a query's source runner) may take longer than the
             # default 15 s to connect back on a machine loaded by other jobs
             .config("spark.python.authenticate.socketTimeout", "180s")
             .config("spark.sql.shuffle.partitions", str(partitions))
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    from dropboxmq_spark import register

    register(spark)  # an editable install is not discovered (see pyspark_dropboxmq)
    return spark


def _text(i: int) -> str:
    return f"m{i}".ljust(BODY_BYTES, ".")


def _library_send(root: Path, queue: str, n: int, persistent: bool) -> float:
    """Seconds for the library to send n messages (send_many of SEND_BATCH) into ``queue``."""
    from dropboxmq.message import DeliveryMode, Message, TextMessage
    from dropboxmq.connection import Connection

    mode = DeliveryMode.PERSISTENT if persistent else DeliveryMode.NON_PERSISTENT
    with Connection(root, "bench-send") as conn:
        producer = conn.create_session().create_producer(conn.create_queue(queue))
        t = time.perf_counter()
        for start in range(0, n, SEND_BATCH):
            batch: list[Message] = []
            for i in range(start, min(n, start + SEND_BATCH)):
                m = TextMessage(_text(i))
                m.set_property("seq", i % 10)
                batch.append(m)
            producer.send_many(batch, delivery_mode=mode)
            if n > PROGRESS_EVERY and (start + SEND_BATCH) % PROGRESS_EVERY == 0:
                progress(f"  library send into {queue}: {start + SEND_BATCH:,} of {n:,}")
        return time.perf_counter() - t


_started = time.monotonic()
_freed_at: float | None = None  # when the bench last deleted files in bulk (monotonic)


def progress(what: str) -> None:
    """One line on stderr: how far a long run is (the results go to stdout)."""
    print(f"[spark_bench +{time.monotonic() - _started:6.0f} s, load {os.getloadavg()[0]:.1f}] {what}",
          file=sys.stderr, flush=True)


def remove(*paths: Path) -> None:
    """Delete the bench's files, then sync, so the freed inodes' table blocks are clean (see
    FREED_INODES_SETTLE_S) and their write-back does not land in a later timed action."""
    global _freed_at
    for path in paths:
        shutil.rmtree(path, ignore_errors=True)
    os.sync()
    _freed_at = time.monotonic()


def settle_freed_inodes() -> float:
    """Wait until the bench's own last bulk delete is FREED_INODES_SETTLE_S old; returns the wait."""
    wait = 0.0 if _freed_at is None else max(0.0, FREED_INODES_SETTLE_S - (time.monotonic() - _freed_at))
    if wait:
        progress(f"waiting {wait:.0f} s: inodes the bench freed are skipped by new creates for "
                 f"{FREED_INODES_SETTLE_S:.0f} s (ext4 without a journal)")
        time.sleep(wait)
    return round(wait, 1)


def _quiesce(spark: Any) -> None:
    """Before each timed write side: the same starting state for both -- dirty pages written back
    (os.sync: another side's write-back does not land in this one's time), both collectors run."""
    os.sync()
    gc.collect()
    spark.sparkContext._jvm.java.lang.System.gc()


def preflight(where: str, sizes: list[int], parts: tuple[str, ...]) -> dict[str, Any]:
    """Check that the file system of ``where`` has the inodes and space the largest size needs at
    its peak (the write rounds' queues, kept until the write part ends; the drain's three twins
    and its queue); exits with one line if not.  Returns what it counted."""
    need = 0
    for n in sizes:
        rounds = WRITE_ROUNDS if n <= ROUNDS_UP_TO else 1
        write = n * (2 * rounds + (2 if n <= ROUNDS_UP_TO else 0)) if {"write", "browse"} & set(parts) else 0
        need = max(need, write, 3 * n if "drain" in parts else 0)
    st = os.statvfs(where)
    have_inodes, have_bytes = st.f_favail, st.f_bavail * st.f_frsize
    checked = {"dir": where, "files_needed": need, "inodes_free": have_inodes,
               "gib_needed": round(need * FILE_BYTES / 2**30, 1), "gib_free": round(have_bytes / 2**30, 1)}
    if need * 1.1 > have_inodes or need * FILE_BYTES * 1.1 > have_bytes:
        sys.exit(f"spark_bench: {where} has {have_inodes:,} free inodes and {checked['gib_free']} GiB; "
                 f"the largest size needs {need:,} files (~{checked['gib_needed']} GiB) at once")
    return checked


def cpu_seconds(pids: set[int] | None = None) -> float:
    """CPU seconds (user + system, with the children waited for) of the processes ``pids``
    and all their descendants; None: this process alone."""
    if pids is None:
        t = os.times()
        return t.user + t.system + t.children_user + t.children_system
    stats: dict[int, tuple[int, float]] = {}  # pid -> (parent, seconds)
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:  # exited meanwhile
                continue
            stats[int(entry)] = (int(fields[1]), sum(int(f) for f in fields[11:15]) / tick)
    tree, grew = set(pids), True
    while grew:
        more = {pid for pid, (parent, _) in stats.items() if parent in tree} - tree
        tree |= more
        grew = bool(more)
    return sum(stats[pid][1] for pid in tree if pid in stats)


def _spark_pids(spark: Any) -> set[int]:
    """The JVM behind the session (spark-submit execs java in place)."""
    return {spark.sparkContext._gateway.proc.pid}


def library_receive(root: Path, queue: str, n: int, ack_every: int | None = None) -> tuple[float, float]:
    """(seconds, CPU seconds) for one library consumer to receive n messages, ``receive(0)`` until
    nothing is left: in the default session (AUTO_ACKNOWLEDGE) as a user's loop does, or with
    ``ack_every`` in CLIENT_ACKNOWLEDGE, one (durable) acknowledge() per ``ack_every`` messages.
    Timed end to end as a user's program sees it, as the drain is (its query's start and stop
    included): from opening the connection to closing it."""
    from dropboxmq.ackmode import AUTO_ACKNOWLEDGE, CLIENT_ACKNOWLEDGE
    from dropboxmq.connection import Connection
    from dropboxmq.message import Queue

    t, cpu = time.perf_counter(), time.process_time()
    with Connection(root, "bench-receive") as conn:
        session = conn.create_session(ack_mode=AUTO_ACKNOWLEDGE if ack_every is None else CLIENT_ACKNOWLEDGE)
        consumer = session.create_consumer(Queue(queue))
        got = 0
        while consumer.receive(0) is not None:
            got += 1
            if ack_every is not None and got % ack_every == 0:
                session.acknowledge()
        if ack_every is not None:
            session.acknowledge()
        consumer.close()
    seconds, cpu = time.perf_counter() - t, time.process_time() - cpu
    assert got == n, (got, n)
    return seconds, cpu


def drain_breakdown(query: Any, wall: float, cpu: float) -> dict[str, Any]:
    """Where a finished availableNow query's time went: its micro-batches, the sum of each phase
    of their ``durationMs`` (seconds), the wall time outside them, and the CPU of Spark's side."""
    progress = [p for p in query.recentProgress if p.numInputRows]
    phases: dict[str, float] = {}
    for p in query.recentProgress:
        for k, ms in p.durationMs.items():
            phases[k] = phases.get(k, 0.0) + ms / 1000
    inside = phases.get("triggerExecution", 0.0)
    return {"batches": len(progress), "rows_per_batch": [p.numInputRows for p in progress],
            "phases_s": {k: round(v, 2) for k, v in sorted(phases.items())},
            "outside_batches_s": round(wall - inside, 2), "spark_cpu_s": round(cpu, 2)}


def _warm_up(spark: Any, root: Path, tmp: str) -> dict[str, float]:
    """One small run (100 messages) of every action before the timed ones, so that Spark's
    Python workers are started and every module imported before the clocks run (on both
    sides).  Returns the seconds of the Spark actions: near their fixed cost (planning, the
    Python processes Spark starts for each action), which a small N cannot amortize, and
    PySpark's floor under any Python streaming source (``spark_floor``)."""
    seconds: dict[str, float] = {}
    rows = spark.range(100).selectExpr("cast(id as string) AS text", "cast(id % 10 as int) AS seq")
    for durable in ("false", "true"):
        t = time.perf_counter()
        rows.write.format("dropboxmq").option("root", str(root)).option("durable", durable).mode("append").save("warm")
        seconds[f"write_durable_{durable}"] = time.perf_counter() - t
    t = time.perf_counter()
    spark.read.format("dropboxmq").option("root", str(root)).load("warm").count()
    seconds["browse"] = time.perf_counter() - t
    spark.read.format("binaryFile").load(str(root / "warm" / "incoming" / "target")).count()
    # the drain twice: the second on a warm session is the floor of every drain (query start, the
    # source's Python process, one micro-batch, stop), which a small N cannot amortize
    for key, queue in (("drain", "warm-drain"), ("drain_again", "warm-drain-again")):
        ckpt = str(Path(tmp) / f"{queue}-ck")
        _library_send(root, queue, 100, persistent=True)
        t = time.perf_counter()
        (spark.readStream.format("dropboxmq").option("root", str(root)).option("checkpointLocation", ckpt)
         .load(queue).select("message_id", "text").writeStream.format("parquet")
         .option("path", str(Path(tmp) / f"{queue}-sink")).option("checkpointLocation", ckpt)
         .trigger(availableNow=True).start().awaitTermination())
        seconds[key] = time.perf_counter() - t
    # PySpark's own floor under it: the same query over a Python source that reads no file (the
    # second of two runs, as drain_again)
    from .spark_floor import floor_seconds  # (imports pyspark, as _session does)

    seconds["python_source_floor"] = floor_seconds(spark, tmp, rows=100, repeat=2)[-1]
    _library_send(root, "warm-library", 100, persistent=True)
    seconds["library_receive"] = library_receive(root, "warm-library", 100, 100)[0]
    return {k: round(v, 2) for k, v in seconds.items()}


@contextlib.contextmanager
def _ticking(what: str, n: int, count: Any = None) -> Iterator[None]:
    """Around a long Spark action (above PROGRESS_EVERY messages): a progress line a minute, with
    ``count()`` (e.g. the files written so far) if given; smaller sizes are not disturbed."""
    if n <= PROGRESS_EVERY:
        yield
        return
    stop = threading.Event()

    def tick() -> None:
        while not stop.wait(60):
            progress(f"  {what}: still running" + (f", {count():,} of {n:,}" if count else ""))

    ticker = threading.Thread(target=tick, daemon=True)
    ticker.start()
    try:
        yield
    finally:
        stop.set()
        ticker.join()


def _files(*dirs: Path) -> int:
    total = 0
    for d in dirs:
        try:
            with os.scandir(d) as entries:
                total += sum(1 for _ in entries)
        except FileNotFoundError:
            pass
    return total


def _spark_write(spark: Any, rows: Any, root: Path, queue: str, durable: bool, n: int = 0) -> None:
    group = f"bench-write-{queue}-{uuid.uuid4().hex[:8]}"  # queue names repeat from one size to the next
    spark.sparkContext.setJobGroup(group, group)
    box = root / queue / "incoming"
    with _ticking(f"Spark write into {queue} (files in working/ + target/)", n,
                  lambda: _files(box / "working", box / "target")):
        (rows.write.format("dropboxmq").option("root", str(root)).option("durable", str(durable).lower())
         .mode("append").save(queue))
    jobs = spark.sparkContext.statusTracker().getJobIdsForGroup(group)
    assert len(jobs) == 1, f"a batch write ran {len(jobs)} Spark jobs"  # no count, cache or collect of its own


def _write_figures(spark: Any, root: Path, rows: Any, n: int) -> dict[str, Any]:
    """The batch write against the library's send (see the module docstring): per side, the
    seconds and CPU seconds of each round, the load average at each start, the rate of the
    median round.  Every side of every round writes a fresh queue and nothing is deleted until
    the part ends, each side starting after the same quiescing (_quiesce), the bench's earlier
    deletions settled first: the rounds start from the same state.  Queue ``w`` keeps the first
    round's Spark write (the browse reads it; the caller deletes it)."""
    pids = _spark_pids(spark)
    sides: dict[str, dict[str, list[float]]] = {}
    rounds = WRITE_ROUNDS if n <= ROUNDS_UP_TO else 1
    settled = settle_freed_inodes()

    def timed(key: str, action: Any, cpu_of: set[int] | None) -> None:
        side = sides.setdefault(key, {"seconds": [], "cpu_seconds": [], "load": []})
        _quiesce(spark)
        progress(f"{n:,}: {key} (round {len(side['seconds']) + 1})")
        side["load"].append(round(os.getloadavg()[0], 1))
        c, t = cpu_seconds(cpu_of), time.perf_counter()
        seconds = action()  # the library's send times its loop alone (not its connection's set-up)
        side["seconds"].append(round(time.perf_counter() - t if seconds is None else seconds, 3))
        side["cpu_seconds"].append(round(cpu_seconds(cpu_of) - c, 2))

    written: list[str] = []
    for r in range(rounds):
        spark_q, library_q = ("w", "w-library") if r == 0 else (f"w{r}", f"w-library{r}")
        both = [("spark_write", lambda q=spark_q: _spark_write(spark, rows, root, q, durable=False, n=n), pids),
                ("library_send", lambda q=library_q: _library_send(root, q, n, persistent=False), None)]
        for key, action, cpu_of in (both if r % 2 == 0 else both[::-1]):
            timed(key, action, cpu_of)
        written += [spark_q, library_q]
    if n <= ROUNDS_UP_TO:  # (a durable round of 1,000,000 takes many minutes a side)
        timed("spark_write_durable", lambda: _spark_write(spark, rows, root, "wd", durable=True, n=n), pids)
        timed("library_send_durable", lambda: _library_send(root, "wd-library", n, persistent=True), None)
        written += ["wd", "wd-library"]
    for q in written:
        assert len(os.listdir(root / q / "incoming" / "target")) == n, q
    remove(*(root / q for q in written if q != "w"))
    out: dict[str, Any] = {"rounds": rounds, "settle_wait_s": settled}
    for key, side in sides.items():
        median = statistics.median(side["seconds"])
        out[key] = {**side, "rate": n / median, "cpu_per_message_us": round(
            statistics.median(side["cpu_seconds"]) / n * 1e6, 1)}
    out["round_ratios"] = [round(lib / sp, 2) for sp, lib in zip(sides["spark_write"]["seconds"],
                                                                   sides["library_send"]["seconds"], strict=True)]
    out["cpu_ratio"] = round(out["library_send"]["cpu_per_message_us"] / out["spark_write"]["cpu_per_message_us"], 2)
    return out


def run(spark: Any, n: int, per_trigger: int | None, parts: tuple[str, ...] = PARTS) -> dict[str, Any]:
    """One size's figures: the parts asked for (the browse reads the write's queue: it implies it)."""
    from pyspark.sql import functions as F
    from dropboxmq_spark import DEFAULT_MESSAGES_PER_TRIGGER

    figures: dict[str, float] = {}
    loads: dict[str, float] = {}  # the 1-minute load average as each figure's clock started

    def load(key: str) -> None:
        loads[key] = round(os.getloadavg()[0], 1)

    with tempfile.TemporaryDirectory(prefix="dropboxmq-spark-bench-") as tmp:
        root = Path(tmp) / "root"
        progress(f"{n:,}: warm-up (each action on 100 messages)")
        small = _warm_up(spark, root, tmp)
        rows = spark.range(n).selectExpr(f"rpad(concat('m', cast(id as string)), {BODY_BYTES}, '.') AS text",
                                         "cast(id % 10 as int) AS seq").cache()
        rows.count()

        write: dict[str, Any] | None = None
        drain: dict[str, Any] | None = None
        if "write" in parts or "browse" in parts:
            write = _write_figures(spark, root, rows, n)
            for key in ("spark_write", "library_send", "spark_write_durable", "library_send_durable"):
                if key in write:
                    figures[key] = write[key]["rate"]
                    loads[key] = write[key]["load"][0]

        if "browse" in parts:  # every body of the queue, against binaryFile on the same files
            target = str(root / "w" / "incoming" / "target")
            progress(f"{n:,}: browse")
            load("spark_browse")
            t = time.perf_counter()
            with _ticking("browse", n):
                got = (spark.read.format("dropboxmq").option("root", str(root)).load("w")
                       .agg(F.count("*"), F.sum(F.length("body"))).first())
            figures["spark_browse"] = n / (time.perf_counter() - t)
            assert tuple(got) == (n, n * BODY_BYTES), got
            progress(f"{n:,}: binaryFile")
            load("binary_file")
            t = time.perf_counter()
            with _ticking("binaryFile", n):
                got = spark.read.format("binaryFile").load(target).agg(F.count("*"), F.sum(F.length("content"))).first()
            figures["binary_file"] = n / (time.perf_counter() - t)
            assert tuple(got) == (n, n * BODY_BYTES), got
        remove(root / "w")  # the drain's twins need the room (1,000,000 files: ~4 GiB)

        if "drain" not in parts:
            rows.unpersist()
            return _result(n, per_trigger or DEFAULT_MESSAGES_PER_TRIGGER, figures, loads, drain, write, small)
        # drain: twin queues of persistent messages, sent alike
        progress(f"{n:,}: drain: sending its queue and the two twins")
        _library_send(root, "drain", n, persistent=True)
        _library_send(root, "drain-twin", n, persistent=True)
        _library_send(root, "drain-twin-batched", n, persistent=True)
        ckpt, sink = str(Path(tmp) / "ck"), str(Path(tmp) / "sink")
        progress(f"{n:,}: drain (availableNow into Parquet)")
        load("spark_drain")
        pids = _spark_pids(spark)
        cpu = cpu_seconds(pids) + time.process_time()
        t = time.perf_counter()
        source = spark.readStream.format("dropboxmq").option("root", str(root)).option("checkpointLocation", ckpt)
        if per_trigger:
            source = source.option("maxMessagesPerTrigger", per_trigger)
        q = (source.load("drain").select("message_id", "text").writeStream.format("parquet").option("path", sink)
             .option("checkpointLocation", ckpt).trigger(availableNow=True).start())
        q.awaitTermination()
        wall = time.perf_counter() - t
        drain = drain_breakdown(q, wall, cpu_seconds(pids) + time.process_time() - cpu)
        figures["spark_drain"] = n / wall
        progress(f"{n:,}: library receive of the twins")
        load("library_receive")
        receive_wall, receive_cpu = library_receive(root, "drain-twin-batched", n,
                                                    per_trigger or DEFAULT_MESSAGES_PER_TRIGGER)
        figures["library_receive"] = n / receive_wall
        drain["library_cpu_s"] = round(receive_cpu, 2)
        drain["cpu_ratio"] = round(receive_cpu / drain["spark_cpu_s"], 2)
        load("library_receive_auto")
        auto_wall, auto_cpu = library_receive(root, "drain-twin", n)
        figures["library_receive_auto"] = n / auto_wall
        drain["library_auto_cpu_s"] = round(auto_cpu, 2)
        assert spark.read.parquet(sink).select("message_id").distinct().count() == n
        for queue in ("drain", "drain-twin", "drain-twin-batched"):
            box = root / queue / "incoming"
            assert not os.listdir(box / "target") and not os.listdir(box / "processing"), queue
            assert len(os.listdir(box / "processed")) == n, queue
        rows.unpersist()
        drain["drain_vs_auto_ack"] = round(figures["spark_drain"] / figures["library_receive_auto"], 2)
        return _result(n, per_trigger or DEFAULT_MESSAGES_PER_TRIGGER, figures, loads, drain, write, small)


def _result(n: int, per_trigger: int, figures: dict[str, float], loads: dict[str, float],
            drain: dict[str, Any] | None, write: dict[str, Any] | None, small: dict[str, float]) -> dict[str, Any]:
    """One size's result: the ratios of the parts that ran."""
    pairs = {"browse": ("spark_browse", "binary_file"), "drain": ("spark_drain", "library_receive"),
             "write": ("spark_write", "library_send")}
    ratios = {k: figures[a] / figures[b] for k, (a, b) in pairs.items() if a in figures}
    return {"messages": n, "max_messages_per_trigger": per_trigger,
            "rates": {k: round(v) for k, v in figures.items()},
            "ratios": {k: round(v, 2) for k, v in ratios.items()},
            "goals_met": {k: ratios[k] >= GOALS[k] for k in ratios},
            "load_average_at_start": loads, "drain_breakdown": drain,
            "write": write,
            "seconds_for_100_messages": small}


def _report(result: dict[str, Any]) -> str:
    r, q = result["rates"], result["ratios"]
    lines = [f"{result['messages']:,} messages ({BODY_BYTES} B), local[2]:"]
    for key, spark_key, other_key, other in (("browse", "spark_browse", "binary_file", "binaryFile"),
                                             ("drain", "spark_drain", "library_receive", "library receive (ack per batch)"),
                                             ("write", "spark_write", "library_send", "library send")):
        if key not in q:
            continue
        verdict = "hit " if result["goals_met"][key] else "MISS"
        la = result["load_average_at_start"]
        lines.append(f"  {key:<6} {r[spark_key]:>8,} msg/s  vs {other} {r[other_key]:>8,} msg/s  "
                     f"= {q[key]:.2f}x  (goal {GOALS[key]:.1f}x: {verdict})  load {la[spark_key]}/{la[other_key]}")
    d = result["drain_breakdown"] or {}
    if d:
        lines.append(f"  drain: {d['batches']} micro-batch(es) of {result['max_messages_per_trigger']:,} at most; "
                     f"phases (s) " + ", ".join(f"{k} {v}" for k, v in d["phases_s"].items() if k != "triggerExecution")
                     + f"; outside the batches {d['outside_batches_s']} s; CPU Spark {d['spark_cpu_s']} s "
                     f"vs library {d['library_cpu_s']} s = {d['cpu_ratio']:.2f}x")
        lines.append(f"  drain vs a default receive loop (AUTO_ACKNOWLEDGE: an fsync a message) "
                     f"{r['library_receive_auto']:,} msg/s = {d['drain_vs_auto_ack']:.2f}x "
                     f"(no goal; CPU {d['library_auto_cpu_s']} s)  load {result['load_average_at_start']['library_receive_auto']}")
    w = result["write"]
    if w:
        lines.append(f"  write rounds (library s / Spark s, alternating order): {w['round_ratios']}; CPU a message "
                     f"{w['spark_write']['cpu_per_message_us']} us Spark (JVM + Python) vs "
                     f"{w['library_send']['cpu_per_message_us']} us library = {w['cpu_ratio']:.2f}x")
    if "spark_write_durable" in r:
        lines.append(f"  durable batch write {r['spark_write_durable']:,} msg/s vs library persistent send_many "
                     f"{r['library_send_durable']:,} msg/s = {r['spark_write_durable'] / r['library_send_durable']:.2f}x")
    lines.append("  the same Spark actions on 100 messages (~their fixed cost), seconds: " +
                 ", ".join(f"{k} {v}" for k, v in result["seconds_for_100_messages"].items()))
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, nargs="+", default=[20000, 100000],
                    help="messages per figure, one run per size (default 20000 100000)")
    ap.add_argument("--max-per-trigger", type=int, default=None,
                    help="the drain's maxMessagesPerTrigger (default: none given, the source's default)")
    ap.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS),
                    help="which figures (default all; browse reads the write's queue, so it runs the write)")
    ap.add_argument("--json", help="also write the results to this JSON file")
    args = ap.parse_args()
    require_or_exit("python -m dropboxmq_stress.spark_bench", "spark", "pyspark")
    parts = tuple(p for p in PARTS if p in args.parts)
    room = preflight(tempfile.gettempdir(), args.messages, parts)
    # beyond 100,000 files binaryFile's listing outgrows the driver's default 1g heap
    memory = "4g" if max(args.messages) > ROUNDS_UP_TO else None
    progress(f"sizes {args.messages}, parts {list(parts)}; {room}")
    spark = _session(2, memory)
    results = []
    try:
        for n in args.messages:
            result = run(spark, n, args.max_per_trigger, parts)
            remove()  # (the run's directory is gone: sync, and note when its inodes were freed)
            print(_report(result), flush=True)
            results.append(result)
    finally:
        spark.stop()
    if args.json:
        doc = {"tool": "dropboxmq_stress.spark_bench",
               "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               "host": platform.node(), "cpus": os.cpu_count(), "load_average": os.getloadavg(),
               "master": "local[2]", "driver_memory": memory or "default", "parts": list(parts),
               "space": room, "body_bytes": BODY_BYTES, "goals": GOALS, "runs": results}
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
