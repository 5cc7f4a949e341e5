"""The Spark data source on the library's fast paths: the consumer's claim step, Arrow record
batches both ways, bulk logging.  No Spark session: the reader and writer objects are driven
as Spark drives them, so each test runs in a fraction of a second."""

from __future__ import annotations

import datetime as dt
import json
import math
import os

import pytest

pytest.importorskip("pyspark")
pa = pytest.importorskip("pyarrow")

from dropboxmq import layout  # noqa: E402
from dropboxmq.making import ensure_dropbox  # noqa: E402
from dropboxmq.lifecycle import State  # noqa: E402
from dropboxmq.bodies import BytesMessage  # noqa: E402
from dropboxmq.message import DeliveryMode, Queue, TextMessage  # noqa: E402
from dropboxmq.connection import Connection  # noqa: E402
from dropboxmq.store import Dropbox  # noqa: E402
from dropboxmq.dirs import ensure_layout  # noqa: E402
from dropboxmq.transaction import LogEntry, TransactionLog, read_log  # noqa: E402

pytestmark = pytest.mark.spark


def _schema():
    """SCHEMA as the StructType Spark hands a reader (DDL parsing needs a session: built here)."""
    from pyspark.sql import types as T

    from dropboxmq_spark import SCHEMA

    kinds = {"string": T.StringType(), "int": T.IntegerType(), "timestamp": T.TimestampType(),
             "boolean": T.BooleanType(), "binary": T.BinaryType(), "variant": T.VariantType(),
             "map<string,string>": T.MapType(T.StringType(), T.StringType())}
    return T.StructType([T.StructField(c.split(" ")[0], kinds[c.split(" ")[1]]) for c in SCHEMA.split(", ")])


def _send_varied(root, queue: str) -> None:
    with Connection(root, "p", create=True) as conn:
        p = conn.create_session().create_producer(Queue(queue))
        for i in range(7):
            m = TextMessage(f"text {i} é") if i % 2 else BytesMessage(bytes([i, 255, 0]))
            m.set_property("n", i)
            m.set_property("price", i + 0.25)
            m.set_property("ok", i % 3 == 0)
            m.set_property("region", "eu")
            if i == 3:
                m.set_property("bad", math.nan)  # no JSON for it: text only
                m.correlation_id, m.jms_type, m.reply_to = "c3", "order", Queue("replies")
            p.send(m, priority=i % 10, time_to_live=3600 if i == 5 else 0,
                   delivery_mode=DeliveryMode.NON_PERSISTENT if i == 6 else DeliveryMode.PERSISTENT)


def _as_arrow_values(row: tuple) -> dict:
    """A row of the row path, as the Arrow path's to_pylist() gives it."""
    from dropboxmq_spark import COLUMNS

    d = dict(zip(COLUMNS, row, strict=True))
    d["properties"] = sorted(d["properties"].items())
    d["typed_properties"] = {"value": d["typed_properties"].value, "metadata": d["typed_properties"].metadata}
    return d


def test_browse_arrow_batches_hold_exactly_the_values_of_the_row_path(tmp_path):
    from dropboxmq_spark import DropboxMQBatchReader

    root = tmp_path / "root"
    _send_varied(root, "q")
    options = {"root": str(root), "path": "q"}
    arrow_reader, row_reader = DropboxMQBatchReader(options, _schema()), DropboxMQBatchReader(options)
    (part,) = arrow_reader.partitions()
    batches = list(arrow_reader.read(part))
    assert all(isinstance(b, pa.RecordBatch) for b in batches)
    got = [r for b in batches for r in b.to_pylist()]
    for r in got:
        r["properties"] = sorted(r["properties"])
    rows = list(row_reader.read(part))
    assert len(rows) == 7 and all(isinstance(r, tuple) for r in rows)
    assert got == [_as_arrow_values(r) for r in rows]
    expiring = [r for r in got if r["expiration"] is not None]
    assert len(expiring) == 1 and expiring[0]["expiration"] > expiring[0]["timestamp"]
    assert isinstance(expiring[0]["timestamp"], dt.datetime)


def _writer_rows(n: int):
    from pyspark.sql import Row

    return [Row(text=f"w{i}", priority=i % 10, properties={"k": str(i)}, seq=i) for i in range(n)]


def test_writer_takes_arrow_batches_and_rows_alike(tmp_path):
    """What Spark gives an Arrow writer (record batches, a map as key/value pairs, a VARIANT as a
    struct) makes the same messages as Rows do."""
    from pyspark.sql.types import VariantVal

    from dropboxmq_spark import DropboxMQBatchWriter

    root = tmp_path / "root"
    rows = _writer_rows(5)
    typed = VariantVal.parseJson('{"amount": 2.5, "vip": true}')
    variant_type = pa.struct([pa.field("value", pa.binary(), nullable=False),
                              pa.field("metadata", pa.binary(), nullable=False, metadata={b"variant": b"true"})])
    batch = pa.RecordBatch.from_arrays(
        [pa.array([r.text for r in rows]), pa.array([r.priority for r in rows], pa.int32()),
         pa.array([list(r.properties.items()) for r in rows], pa.map_(pa.string(), pa.string())),
         pa.array([r.seq for r in rows], pa.int64()),
         pa.array([{"value": typed.value, "metadata": typed.metadata}] * 5, variant_type)],
        names=["text", "priority", "properties", "seq", "typed_properties"])
    for queue, items in (("from-arrow", [batch]), ("from-rows", [r.asDict() | {"typed_properties": typed}
                                                                  for r in rows])):
        w = DropboxMQBatchWriter({"root": str(root), "path": queue})
        w.commit([w.write(iter(items))])
    got = {}
    for queue in ("from-arrow", "from-rows"):
        with Connection(root, "c") as conn:
            consumer = conn.create_session().create_consumer(Queue(queue))
            got[queue] = sorted((m.text, m.priority, m.get_property("k"), m.get_property("seq"),
                                 m.get_property("amount"), m.get_property("vip")) for m in consumer)
    assert got["from-arrow"] == got["from-rows"] == sorted(
        (f"w{i}", i % 10, str(i), i, 2.5, True) for i in range(5))


def test_a_write_task_logs_each_chunk_before_creating_its_files(tmp_path, monkeypatch):
    """Every file a task creates is named by its log when it appears (bulk logging keeps the
    order a transacted send has: log, then file)."""
    import dropboxmq_spark as ds
    from dropboxmq_spark import DropboxMQBatchWriter

    monkeypatch.setattr(ds, "WRITE_CHUNK_ROWS", 4)
    root = tmp_path / "root"
    w = DropboxMQBatchWriter({"root": str(root), "path": "q", "durable": "true"})
    seen_unlogged = []
    real_create = Dropbox.create

    def create(box, name, body, durable):
        logs = (root / "dropboxmq" / "transaction" / "associated").iterdir()
        logged = {e.name for p in logs for e in read_log(p)}
        if name not in logged:
            seen_unlogged.append(name)
        return real_create(box, name, body, durable)

    monkeypatch.setattr(Dropbox, "create", create)
    attempt = w.write(iter(_writer_rows(10)))
    assert attempt.count == 10 and seen_unlogged == []
    assert len(os.listdir(layout.queue_box(root, Queue("q")).dir(State.NOT_COMMITTED))) == 10
    w.commit([attempt])
    assert len(os.listdir(layout.queue_box(root, Queue("q")).dir(State.NEW))) == 10


def test_record_many_and_record_entries_write_the_lines_record_writes(tmp_path):
    box = ensure_dropbox(layout.queue_box(tmp_path, Queue("q")))
    ensure_layout(tmp_path)
    one, many, gathered = (TransactionLog(tmp_path, "c", tag, 0) for tag in ("one", "many", "gathered"))
    names = [f"n{i}" for i in range(3)]
    for n in names:
        one.record("send", box, n)
    many.record_many("send", [(box, n) for n in names])
    gathered.record_entries(list(one.entries))
    for log in (one, many, gathered):
        log.close(False)
    texts = {log.name: log.path.read_text() for log in (one, many, gathered)}
    assert len(set(texts.values())) == 1
    assert read_log(many.path) == [LogEntry("send", "q/incoming", n) for n in names]


def test_the_stream_source_claims_in_the_consumers_order_with_its_verdicts(tmp_path):
    """The source (latestOffset's plan, its read tasks' claims) and a MessageConsumer take the same
    claim step: twin queues give the same delivery order; a selector's misses stay, an expired
    message goes to expired/, a delayed one waits."""
    import time

    import dropboxmq.codec as codec
    from dropboxmq_spark import DropboxMQStreamReader

    root = tmp_path / "root"
    with Connection(root, "p", create=True) as conn:
        p = conn.create_session().create_producer()
        for queue in ("src", "twin"):
            for i in range(12):
                m = TextMessage(f"m{i}")
                m.set_property("keep", i != 4)
                p.send(m, Queue(queue), priority=(i * 7) % 10, time_to_live=0.001 if i == 7 else 0,
                       delivery_delay=3600 if i == 9 else 0)
    time.sleep(0.01)  # m7 expires
    with Connection(root, "c") as conn:
        consumer = conn.create_session().create_consumer(Queue("twin"), "keep = TRUE")
        expected = [m.text for m in consumer]
    assert sorted(expected) == sorted(f"m{i}" for i in range(12) if i not in (4, 7, 9))
    reader = DropboxMQStreamReader({"root": str(root), "path": "src", "checkpointLocation": str(tmp_path / "ck"),
                                    "maxMessagesPerTrigger": "3", "selector": "keep = TRUE"})
    offsets = [reader.initialOffset()]
    texts: list[str] = []
    while (end := reader.latestOffset(offsets[-1], None)) != offsets[-1]:
        texts += [r[16] for part in reader.partitions(offsets[-1], end) for r in reader.read(part)]
        offsets.append(end)
    reader.stop()
    box = layout.queue_box(root, Queue("src"))
    assert sorted(codec.split_processing_name(n)[0] for n in box.list(State.DELIVERED)) == [reader.client_id] * 9
    assert texts == expected
    assert len(offsets) - 1 == math.ceil(len(expected) / 3)
    assert len(box.list(State.EXPIRED)) == 1 and len(box.list(State.NEW)) == 2  # m4 (selector), m9 (delayed)


def test_the_stream_source_yields_arrow_batches_with_the_values_of_the_row_path(tmp_path):
    """Given SCHEMA (as Spark gives it), a streaming task builds Arrow record batches column-wise
    instead of handing Spark one tuple a row; replayed batches are marked redelivered alike."""
    from dropboxmq_spark import DropboxMQStreamReader

    root = tmp_path / "root"
    _send_varied(root, "q")
    options = {"root": str(root), "path": "q", "checkpointLocation": str(tmp_path / "ck")}
    reader = DropboxMQStreamReader(options, _schema())
    start = reader.initialOffset()
    end = reader.latestOffset(start, None)
    for replay in (False, True):
        if replay:
            reader._planned.clear()  # as a restarted query sees a batch an earlier run planned
        (part,) = reader.partitions(start, end)
        batches = list(reader.read(part))
        assert batches and all(isinstance(b, pa.RecordBatch) for b in batches)
        got = [r for b in batches for r in b.to_pylist()]
        for r in got:
            r["properties"] = sorted(r["properties"])
        rows = list(DropboxMQStreamReader(options).read(part))
        assert len(rows) == 7 and got == [_as_arrow_values(r) for r in rows]
        assert {r["redelivered"] for r in got} == {replay} and {r["state"] for r in got} == {"processing"}
    reader.commit(end)
    reader.stop()
    assert len(layout.queue_box(root, Queue("q")).list(State.ACKNOWLEDGED)) == 7


def test_log_entries_are_written_as_json_dumps_writes_them_and_read_back_in_one_parse(tmp_path):
    names = ["plain", 'q"uote\\back', "é☃", "bad\udcffbyte"]
    for n in names:
        e = LogEntry("receive", "a b/incoming", n)
        assert e.to_json() == json.dumps({"kind": e.kind, "box": e.box, "name": e.name})
    path = tmp_path / "log"
    lines = [LogEntry("send", "q/incoming", n).to_json() for n in names]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8", errors="surrogateescape")
    assert [e.name for e in read_log(path)] == names
    path.write_text("\n".join(lines) + '\n{"kind": "send", "bo', encoding="utf-8", errors="surrogateescape")
    assert [e.name for e in read_log(path)] == names  # a torn last line: never happened
    from dropboxmq.transaction import CorruptLogError

    for bad in ('{"kind": "send", "box": "../x", "name": "n"}', '{"kind": "send", "box": "q/incoming", "name": "a/b"}',
                "[1]", '{"kind": "move", "box": "q/incoming", "name": "n"}'):
        path.write_text(lines[0] + "\n" + bad + "\n", encoding="utf-8", errors="surrogateescape")
        with pytest.raises(CorruptLogError):
            read_log(path)


def test_an_available_now_run_plans_only_what_target_held_when_it_started(tmp_path):
    """prepareForTriggerAvailableNow: the run drains the backlog it found; a message sent after it
    started waits for the next run (else a steady producer keeps the run from ending)."""
    from dropboxmq_spark import DropboxMQStreamReader

    root = tmp_path / "root"
    with Connection(root, "p", create=True) as conn:
        p = conn.create_session().create_producer(conn.create_queue("q"))
        for i in range(3):
            p.send(TextMessage(f"old{i}"))
        reader = DropboxMQStreamReader({"root": str(root), "path": "q", "checkpointLocation": str(tmp_path / "ck"),
                                        "maxMessagesPerTrigger": "2"})
        try:
            offsets = [reader.initialOffset()]
            reader.prepareForTriggerAvailableNow()
            p.send(TextMessage("late"), priority=9)  # first in delivery order, but after the start
            texts: list[str] = []
            while (end := reader.latestOffset(offsets[-1], None)) != offsets[-1]:
                texts += [r[16] for part in reader.partitions(offsets[-1], end) for r in reader.read(part)]
                offsets.append(end)
        finally:
            reader.stop()
    assert sorted(texts) == ["old0", "old1", "old2"]
    assert len(layout.queue_box(root, Queue("q")).list(State.NEW)) == 1  # "late": the next run's


def test_a_micro_batch_holds_at_most_the_default_read_limit_unless_told(tmp_path):
    """Without maxMessagesPerTrigger a micro-batch claims at most DEFAULT_MESSAGES_PER_TRIGGER
    (the claims in flight and the manifest stay bounded); "0" lifts the limit, a number sets it."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

    from dropboxmq_spark import DEFAULT_MESSAGES_PER_TRIGGER, DropboxMQStreamReader

    def limit(**extra: str):
        options = {"root": str(tmp_path / "root"), "path": "q", "checkpointLocation": str(tmp_path / "ck"), **extra}
        reader = DropboxMQStreamReader(options)
        try:
            return reader.getDefaultReadLimit()
        finally:
            reader.stop()

    Connection(tmp_path / "root", create=True).close()
    assert DEFAULT_MESSAGES_PER_TRIGGER == 100_000
    assert limit() == ReadMaxRows(DEFAULT_MESSAGES_PER_TRIGGER)
    assert limit(maxMessagesPerTrigger="0") == ReadAllAvailable()
    assert limit(maxMessagesPerTrigger="7") == ReadMaxRows(7)


@pytest.mark.parametrize("count, tasks", [(0, 0), (1, 1), (4_999, 1), (5_000, 2), (20_000, 2), (50_000, 2),
                                          (50_001, 3), (100_000, 4), (400_001, 16)])
def test_reads_are_split_into_few_large_tasks(tmp_path, count, tasks):
    """Each read task costs Spark a scheduling round and a Python worker's turn: a read takes
    ~25,000 messages a task (at most 16 tasks), two tasks at least from 5,000 on, so that two
    cores read at once; numPartitions overrides."""
    from dropboxmq_spark import DropboxMQStreamReader

    Connection(tmp_path / "root", create=True).close()
    options = {"root": str(tmp_path / "root"), "path": "q", "checkpointLocation": str(tmp_path / "ck")}
    reader = DropboxMQStreamReader(options)
    manifests = reader.dir
    try:
        manifests.mkdir(parents=True, exist_ok=True)
        (manifests / "1.json").write_text(json.dumps({"box": "q", "names": [f"n{i}" for i in range(count)]}))
        parts = reader.partitions({"seq": 0}, {"seq": 1})
        assert len(parts) == tasks
        assert sum(len(p.items) for p in parts) == count
        reader.options = {**options, "numPartitions": "3"}
        assert len(reader.partitions({"seq": 0}, {"seq": 1})) == (min(3, count) if count else 0)
    finally:
        reader.stop()


def _varied_write_batch(n: int = 24):
    """Record batches of every header column a written row may carry, repeating and varying."""
    from pyspark.sql.types import VariantVal

    typed = [VariantVal.parseJson('{"amount": 2.5, "vip": true}'), VariantVal.parseJson('{"n": 7}'), None]
    variant_type = pa.struct([pa.field("value", pa.binary(), nullable=False),
                              pa.field("metadata", pa.binary(), nullable=False, metadata={b"variant": b"true"})])
    cols = {
        "text": pa.array([None if i % 7 == 3 else f"t{i} é" for i in range(n)]),
        "body": pa.array([bytes([i, 0, 255]) if i % 5 == 1 else None for i in range(n)], pa.binary()),
        "priority": pa.array([None if i % 4 == 0 else i % 10 for i in range(n)], pa.int32()),
        "message_class": pa.array([("MapMessage" if i == 9 else None) for i in range(n)]),
        "correlation_id": pa.array([("c.1~x" if i % 6 == 2 else None) for i in range(n)]),
        "reply_to": pa.array([("topic://t.r" if i % 8 == 5 else "Qreplies" if i % 8 == 6 else None) for i in range(n)]),
        "jms_type": pa.array([("order" if i % 3 == 1 else None) for i in range(n)]),
        "delivery_mode": pa.array([("non_persistent" if i % 5 == 4 else None) for i in range(n)]),
        "time_to_live": pa.array([(3600.5 if i % 6 == 5 else None) for i in range(n)]),
        "properties": pa.array([[("k", str(i % 3)), ("region", "eu")] if i % 2 else None for i in range(n)],
                               pa.map_(pa.string(), pa.string())),
        "typed_properties": pa.array([None if (v := typed[i % 3]) is None else {"value": v.value, "metadata": v.metadata}
                                      for i in range(n)], variant_type),
        "price": pa.array([(-0.0 if i % 3 == 0 else 0.0 if i % 3 == 1 else float("nan")) for i in range(n)]),
        "ok": pa.array([i % 2 == 0 for i in range(n)]),
        "seq": pa.array([i % 4 for i in range(n)], pa.int64()),
        "name": pa.array([f"ignored-{i}" for i in range(n)]),  # a browse's column: not a header
    }
    return pa.RecordBatch.from_arrays(list(cols.values()), names=list(cols))


@pytest.mark.parametrize("ttl", [0.0, 60.0])
def test_a_write_task_names_arrow_rows_exactly_as_the_row_path_does(monkeypatch, ttl):
    """The cached per-header templates of the Arrow path give, for the same message ids, the
    names and bodies the row path (a Message built and encoded a row) gives: every header
    column, nulls, -0.0 against 0.0, NaN, a time to live, a column the row path ignores."""
    import itertools

    import dropboxmq_spark as ds
    from dropboxmq import ids

    batch = _varied_write_batch()
    clock = itertools.count(1_700_000_000_000)

    def fixed_ids():
        ms = next(clock)
        return f"ID:{ms}000-{ms % 10**10:010d}", ms

    # and rows alike but for one float's sign: their templates must not be shared
    alike = pa.RecordBatch.from_arrays([pa.array(["a", "b", "c", "d"]), pa.array([0.0, -0.0, -0.0, 0.0])],
                                       names=["text", "price"])
    monkeypatch.setattr(ids, "new_message_id_and_time", fixed_ids)
    namer = ds._Namer(ttl)  # one task's: templates cached across its batches
    fast = [send for b in (batch, alike, batch) for send in namer.names(b)]
    clock = itertools.count(1_700_000_000_000)
    slow = []
    for row in (row for b in (batch, alike, batch) for row in ds._batch_rows(b)):
        msg, msg_ttl = ds._message_from_row(row, ttl)
        slow.append((ds._stamp(msg, msg_ttl), msg.body, msg.delivery_mode == DeliveryMode.PERSISTENT))
    assert fast == slow
    assert len({name for name, _, _ in fast}) == len(fast)


_WHOLE, _SECONDS = "a whole number >= {}", "a number of seconds >= 0"


@pytest.mark.parametrize("option, value, expected", [
    ("maxMessagesPerTrigger", "abc", _WHOLE.format(0) + " (0: no limit)"),
    ("maxMessagesPerTrigger", "-5", _WHOLE.format(0) + " (0: no limit)"),  # was: no limit at all
    ("maxMessagesPerTrigger", "2.5", _WHOLE.format(0) + " (0: no limit)"),
    ("maxDeliveryAttempts", "ten", _WHOLE.format(1)),
    ("maxDeliveryAttempts", "0", _WHOLE.format(1)),  # would dead-letter every message unread
    ("recoveryInterval", "soon", _SECONDS),
    ("recoveryInterval", "-1", _SECONDS),
    ("scanInterval", "nan", _SECONDS),
    ("scanInterval", "inf", _SECONDS),
    ("registrationTimeout", "1m", _SECONDS),
    ("numPartitions", "0", _WHOLE.format(1)),
    ("numPartitions", "two", _WHOLE.format(1)),
])
def test_a_bad_numeric_option_of_a_read_is_one_line_naming_it_and_its_value(tmp_path, option, value, expected):
    """Each numeric option of a streaming (and a batch) read is checked when the reader is made,
    before anything is claimed: one line naming the option and the value given, not Python's
    ``invalid literal for int()``; a negative read limit is refused, not taken as no limit."""
    from dropboxmq_spark import DropboxMQBatchReader, DropboxMQStreamReader

    Connection(tmp_path / "root", create=True).close()
    options = {"root": str(tmp_path / "root"), "path": "q", "checkpointLocation": str(tmp_path / "ck"), option: value}
    readers = [DropboxMQStreamReader] + ([DropboxMQBatchReader] if option == "numPartitions" else [])
    for reader in readers:
        with pytest.raises(ValueError) as e:
            reader(options)
        assert str(e.value) == f"dropboxmq: option {option}={value!r}: expected {expected}"
    assert not (tmp_path / "root" / "q").exists()  # refused before the queue was made


def test_the_numeric_options_of_a_read_take_what_they_say(tmp_path):
    from dropboxmq_spark import DropboxMQStreamReader

    Connection(tmp_path / "root", create=True).close()
    options = {"root": str(tmp_path / "root"), "path": "q", "checkpointLocation": str(tmp_path / "ck")}
    given = DropboxMQStreamReader({**options, "maxMessagesPerTrigger": " 7 ", "maxDeliveryAttempts": "3",
                                   "recoveryInterval": "0.5", "scanInterval": "0", "registrationTimeout": "5"})
    assert (given.max_per_trigger, given.max_attempts, given.recovery_interval, given.scan_interval,
            given.registration_timeout) == (7, 3, 0.5, 0.0, 5.0)
    default = DropboxMQStreamReader({**options, "maxDeliveryAttempts": ""})  # empty: not given
    assert (default.max_attempts, default.recovery_interval, default.scan_interval) == (10, 2.0, 0.25)
    given.stop()
    default.stop()


@pytest.mark.parametrize("rule", ["the library's", "a delivery time a ms on", "twice the time to live"])
def test_the_spark_writer_stamps_by_the_producers_one_rule(tmp_path, monkeypatch, rule):
    """The Spark writer names a message as MessageProducer.send_many names the same message at
    the same instant (id and time), on its Arrow path and its row path, because both stamp with
    the producer's own rule (producer.stamp_send): a different rule there reaches the writer."""
    import itertools

    import dropboxmq_spark as ds
    from dropboxmq import ids, producer

    original = producer.stamp_send

    def changed(msg, time_to_live=0.0, delivery_delay=0.0, id_and_time=None):
        if rule.startswith("twice"):
            return original(msg, 2 * time_to_live, delivery_delay, id_and_time)
        return original(msg, time_to_live, delivery_delay + 0.001, id_and_time)

    texts, seqs = [f"m{i}" for i in range(6)], [i % 2 for i in range(6)]
    batch = pa.RecordBatch.from_arrays([pa.array(texts), pa.array(seqs, pa.int64())], names=["text", "seq"])

    def fixed_ids() -> None:  # from here on, the same ids at the same times
        clock = itertools.count(1_700_000_000_000)
        monkeypatch.setattr(ids, "new_message_id_and_time",
                            lambda: (f"ID:{(ms := next(clock))}000-{ms % 10**10:010d}", ms))

    def names_by(path: str) -> list[str]:
        if path == "arrow":
            fixed_ids()
            return [name for name, _, _ in ds._Namer(60.0).names(batch)]
        if path == "rows":
            fixed_ids()
            return [ds._stamp(*ds._message_from_row(row, 60.0)) for row in ds._batch_rows(batch)]
        root = tmp_path / path
        with Connection(root, create=True) as conn:
            prod = conn.create_session().create_producer(conn.create_queue("q"))
            fixed_ids()
            msgs = [TextMessage(text) for text in texts]
            for m, seq in zip(msgs, seqs, strict=True):
                m.set_property("seq", seq)
            prod.send_many(msgs, time_to_live=60.0)
        return sorted(layout.queue_box(root, Queue("q")).list(State.NEW))

    library = names_by("library")
    if rule != "the library's":
        monkeypatch.setattr(producer, "stamp_send", changed)
        assert names_by("changed") != library  # the changed rule names otherwise
        library = names_by("changed-library")
    assert sorted(names_by("arrow")) == sorted(names_by("rows")) == library


@pytest.mark.parametrize("ttl", [0.0, 60.0])
@pytest.mark.parametrize("row", [{"body": ""}, {"body": b""}, {"body": "", "seq": 1}, {"body": "", "priority": 7}])
def test_plain_rows_are_named_from_a_template_not_one_by_one(row, ttl):
    """A write of plain rows (a text or binary column, maybe a property, no headers) takes the fast
    path: its header set has a name template (None would send every row down the row path)."""
    import dropboxmq_spark as ds

    assert ds._template(dict(row), ttl) is not None



#: what a read task's Python worker must not load: writing (producer, group commit, the transaction
#: log) and the driver's work (registration, liveness, recovery, topics' fan-out, the selector parser)
_NOT_READING = ("producer", "groupsync", "transaction", "log_lifecycle", "clients", "liveness", "recovery", "topics",
                "selector")


@pytest.mark.parametrize("kind", ["batch", "stream"])
def test_a_read_task_loads_none_of_the_modules_only_writes_or_the_driver_need(tmp_path, kind):
    """Spark plans on the driver and pickles the reader and a partition to a Python worker that
    imports the source afresh for each query: what it loads there beyond reading cost ~30-50 ms
    of CPU each time for nothing.  The worker is played by a fresh process."""
    import pickle
    import subprocess
    import sys

    from dropboxmq_spark import DropboxMQBatchReader, DropboxMQStreamReader

    _send_varied(tmp_path / "root", "q")
    options = {"root": str(tmp_path / "root"), "path": "q", "checkpointLocation": str(tmp_path / "ck")}
    if kind == "batch":
        reader = DropboxMQBatchReader(options)
        (part,) = reader.partitions()
    else:
        planner = DropboxMQStreamReader(options)
        start = planner.initialOffset()
        (part,) = planner.partitions(start, planner.latestOffset(start, None))
        reader = DropboxMQStreamReader(options)  # as Spark hands it to a task: not registered
    (tmp_path / "task").write_bytes(pickle.dumps((reader, part)))
    script = f"""
import pickle, sys
with open({str(tmp_path / "task")!r}, "rb") as f:
    reader, part = pickle.load(f)
assert sum(1 for _ in reader.read(part)) == 7
print(sorted(m for m in sys.modules if m.split(".")[-1] in {_NOT_READING!r}))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    if kind == "stream":
        planner.stop()
    assert out.strip() == "[]", out


def test_planning_a_batch_read_without_a_selector_never_loads_the_selector_parser(tmp_path):
    """The selector parser (1,500 lines) is for reads with a selector: the batch reader made it
    from an absent one, and the delivery order it plans by came with the queue browser's imports."""
    import subprocess
    import sys

    _send_varied(tmp_path / "root", "q")
    script = f"""
import sys
from dropboxmq_spark import DropboxMQBatchReader
(part,) = DropboxMQBatchReader({{"root": {str(tmp_path / "root")!r}, "path": "q"}}).partitions()
print("dropboxmq.selector" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False", out
