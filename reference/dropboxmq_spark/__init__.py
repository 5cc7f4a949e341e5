"""Dropboxes as a PySpark data source and sink (short name ``dropboxmq``).

Install with the ``dropboxmq[spark]`` extra; Spark finds the format by itself (the top-level
module ``pyspark_dropboxmq``; from an editable install call ``register(spark)`` once)::

    # batch read: a browse, one row per message; never moves a file
    df = spark.read.format("dropboxmq").option("root", root).load("invoices")
    # batch write: the whole job is one transaction
    df.write.format("dropboxmq").option("root", root).mode("append").save("invoices")
    # streaming read: claims in the read tasks, acks once the query's checkpoint commits the batch
    s = (spark.readStream.format("dropboxmq").option("root", root)
         .option("checkpointLocation", ckpt).option("maxMessagesPerTrigger", 1000).load("invoices"))
    # streaming write: each micro-batch committed atomically, once per batch id
    s.writeStream.format("dropboxmq").option("root", root).option("checkpointLocation", ckpt).start("out")

Options: ``root`` (or $DROPBOXMQ_ROOT); read: ``include`` (comma list of processing, processed,
expired, error, working, delayed, all; default: the browsable messages of target/), ``selector``,
``numPartitions``; write: ``durable`` (default true: fsync each file), ``timeToLive`` (seconds);
stream read: ``checkpointLocation`` (required; give the query's own: the consumer's identity, the
owner of its claims, and where the reader finds Spark's commit log), ``clientId`` (instead of the derived ``spark-<hash>``),
``maxMessagesPerTrigger`` (100,000; "0": no limit), ``maxDeliveryAttempts`` (10), ``selector``; stream write:
``checkpointLocation`` (or ``sinkId``).  Written rows: ``body`` (binary or string) or ``text`` or
``value``; optional ``priority``, ``message_class``, ``correlation_id``, ``jms_type``, ``reply_to``,
``delivery_mode``, ``time_to_live``, ``properties`` (map of strings), ``typed_properties`` (the
VARIANT a read gives: the types kept); any other column becomes a typed property; the columns a read adds (state, name, message_id, timestamp, ...) are ignored,
so a browse can be written back.

Destinations: ``name`` is a queue; ``topic:a.b`` a topic (write: publish with fan-out to every
matching subscription; read: its ``.incoming``); ``topic:a.b!<subId>`` one subscription (the display
names of ``dropboxmq stat``).

Theory of operation
===================

Spark follows exactly the protocol of every other client: names come from ``codec`` via
``codec.to_wire`` / ``from_wire``, every state change is a ``store.Dropbox.move`` of a
``lifecycle.Move``, and commits go through ``transaction`` logs.

*Batch read* lists the requested state directories on the driver (one listing, never one task per
file), splits the names into a few partitions, and the tasks read the bodies.  Nothing moves.

*Batch write*: each task attempt opens its own transaction log (client ``spark-job-<job>``, session
``p<partition>a<attempt>``) and, exactly as a transacted session does, records each send in the log
*before* creating the file in working/.  So every file is attributable to one task attempt.  The
driver's ``commit`` gathers the logs of the attempts Spark committed (one per partition) into one
log and commits it through the transaction log (fsync, rename into ``committing/`` -- the point of
no return --, SEND every file, fsync target/); the logs of every other attempt (failed, retried,
speculative) are rolled back (DISCARD).  ``abort`` rolls back every attempt.  The driver holds the
job's client registration during the commit, so a driver killed inside it is a dead owner whose
``committing/`` log any recoverer rolls forward.

*Streaming read*: the query is a client whose id is derived from its checkpoint location
(``spark-<hash>``), so a restarted query recognises its own claims.  ``latestOffset`` *plans* a
batch: up to the read limit (``maxMessagesPerTrigger``) names of target/ in the consumer's delivery
order with its verdicts (``claim.Claimer``'s walk and ``decision.decide``: selector, delivery time,
expiry), nothing claimed, and records them with the processing names their claims will get in a
manifest ``<root>/dropboxmq/spark/streams/<client>/<seq>.json`` written atomically; the offset is
``{"seq": n}``.  ``partitions(start, end)`` splits the manifests, and each read task claims its
names with the consumer's own claim step (``Claimer.try_claim``: verdict, delivery count,
dead-lettering, rename into ``processing/<enc(client)>~<name>``) and reads what it claimed, so two
tasks claim and read in parallel; a name gone (a rival's, expired) is skipped, as the consumer
skips it, and a retried task also reads what its dead attempt claimed.  A batch that Spark re-runs
after a restart (planned by another run) is read-only: it reads what the query holds for it
(marked redelivered) and claims nothing -- the sink may already have that batch, and a claim
now would be acknowledged without reaching it (spec/CheckpointOwner.tla); its names never claimed
stay in target/ for a later batch.
``commit(end)`` ACKs the claims of every manifest up to ``end`` and only then deletes it; because Spark commits a
source only when it plans the next batch, every trigger (and the start) also commits what the
checkpoint's ``commits/`` records, so the last batch of a run is acknowledged before the run ends.
``trigger(availableNow=True)``: ``prepareForTriggerAvailableNow`` snapshots the names in target/,
and later plans take only those, so the run drains that backlog and ends.

Ownership: the claims belong to the checkpoint (``liveness.hold_for_checkpoint``), not to the
process: while the checkpoint exists, recoverers treat the query as alive, because a restarted
query may still commit a logged batch.  At start, the query (holding its registration, so no other
run of it is alive) acknowledges what ``commits/`` records, forgets the plans Spark never logged
(no task ran for them) and returns, redelivered, its claims that no remaining manifest names; a
logged batch stays claimed for Spark to replay.
Deleting the checkpoint, or ``dropboxmq recover --release <client>``, makes the query an ordinary
dead owner (spec/CheckpointOwner.tla).

*Streaming write*: like the batch write, per micro-batch, with client ``spark-sink-<hash of the
checkpoint>``.  The driver commit of batch ``b`` commits one log named ``...~b<b>~0`` and, after
applying it, renames it into ``transaction/committed/`` where it stays as the proof that ``b`` was
committed; a replay of ``b`` (after a crash between the sink commit and Spark's commit log) finds
it and discards the replayed files instead of sending them twice.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import errno
import functools
import hashlib
import itertools
import json
import math
import os
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, NamedTuple

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)

try:  # Spark hands these writers Arrow record batches instead of one Row object a row
    from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter
except ImportError:  # an older pyspark 4: Rows (the writers take either)
    DataSourceArrowWriter, DataSourceStreamArrowWriter = DataSourceWriter, DataSourceStreamWriter  # type: ignore[misc,assignment]
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

# what only a write (producer, bodies, groupsync, transaction, log_lifecycle) or the driver (the registration,
# recovery, liveness, the root's layout, topics) needs is imported where it is first used: a read task's Python
# worker, one a query, never loads it (~30-50 ms of CPU each)
from dropboxmq import claims, codec, ids, javanum, layout
from dropboxmq.making import ensure_dropbox
from dropboxmq.errors import InvalidClientIDError, StoreError
from dropboxmq.lifecycle import TERMINAL, Move, State
from dropboxmq.message import CLASS_LETTERS, DeliveryMode, Message, Queue, Topic
from dropboxmq.properties import infer_letter
from dropboxmq.values import Property
from dropboxmq.codec import DELIVERY_COUNT as DELIVERY_COUNT_PROP
from dropboxmq.claim import Claimer
from dropboxmq.codec import from_wire, now_ms
from dropboxmq.decision import ClaimSettings, Verdict, decide
from dropboxmq.making import replace_durably
from dropboxmq.store import Dropbox, NotARegularFile, fsync_dir, sync_many

if TYPE_CHECKING:
    from dropboxmq.clients import Registration
    from dropboxmq.selector import Selector
    from dropboxmq.transaction import LogEntry

__all__ = [
    "SHORT_NAME", "SCHEMA", "COLUMNS", "WRITE_CHUNK_ROWS", "register", "DropboxMQBatchReader", "DropboxMQBatchWriter",
    "DropboxMQStreamWriter", "DropboxMQStreamReader", "DropboxMQDataSource", "DEFAULT_MESSAGES_PER_TRIGGER",
]

SHORT_NAME = "dropboxmq"

SCHEMA = (
    "state string, name string, message_id string, priority int, timestamp timestamp, "
    "message_class string, expiration timestamp, delivery_time timestamp, correlation_id string, "
    "reply_to string, jms_type string, delivery_mode string, delivery_count int, redelivered boolean, "
    "properties map<string,string>, body binary, text string, typed_properties variant"
)

#: SCHEMA's column names, in order.
COLUMNS = [column.split(" ", 1)[0] for column in SCHEMA.split(", ")]
#: Columns of SCHEMA a writer ignores (they are stamped at send or describe a file).
_STAMPED = {"state", "name", "message_id", "timestamp", "delivery_time", "delivery_count", "redelivered",
            "expiration"}
_CLASS_BY_NAME = {v: k for k, v in CLASS_LETTERS.items()}
_STATES_BY_WORD = {s.value: s for s in State if s.value is not None}
#: The state directories a read may ``include`` besides target/ (lifecycle.TRANSITIONS' states:
#: the claimed one, the terminal ones, then the uncommitted), and "delayed" (target/ files not due).
_BROWSABLE = tuple(s.value for s in (State.DELIVERED, *(s for s in State if s in TERMINAL), State.NOT_COMMITTED))
_INCLUDABLE = frozenset(_BROWSABLE) | {"delayed"}


def register(spark: Any) -> None:
    """Register the ``dropboxmq`` format with a SparkSession."""
    spark.dataSource.register(DropboxMQDataSource)


# ---------------------------------------------------------------- destinations


def _root(options: Any) -> Path:
    root = options.get("root") or os.environ.get("DROPBOXMQ_ROOT")
    if not root:
        raise ValueError("dropboxmq: give the root with .option('root', DIR) (or set DROPBOXMQ_ROOT)")
    return Path(root).resolve()


def _destination(options: Any) -> str:
    dest = options.get("path") or options.get("destination") or options.get("queue")
    if not dest:
        raise ValueError("dropboxmq: name the queue, topic:NAME or topic:NAME!SUBID in load()/save()/start()")
    return dest


def _option(options: Any, name: str, default: Any, parse: Callable[[Any], Any], valid: Callable[[Any], bool],
            expected: str) -> Any:
    """Option ``name`` read by ``parse`` and checked by ``valid`` (``default`` when not given or
    empty).  Shared by the readers and writers: bad input is one line naming the option and its value."""
    raw = options.get(name)
    if raw is None or not str(raw).strip():
        return default
    try:
        value = parse(raw)
    except (TypeError, ValueError):
        value = None
    if value is None or not valid(value):
        raise ValueError(f"dropboxmq: option {name}={raw!r}: expected {expected}")
    return value


def _int_option(options: Any, name: str, default: int, minimum: int, note: str = "") -> int:
    """A whole number >= ``minimum``."""
    return _option(options, name, default, int, lambda v: v >= minimum, f"a whole number >= {minimum}{note}")


def _seconds_option(options: Any, name: str, default: float) -> float:
    """A finite number of seconds >= 0 (NaN fails every comparison)."""
    return _option(options, name, default, float, lambda v: 0 <= v < math.inf, "a number of seconds >= 0")


def _read_box(root: Path, dest: str) -> Dropbox:
    """The dropbox a reader looks at."""
    if dest.startswith("topic:"):
        from dropboxmq import topics  # (topics only)

        topic, _, sub = dest[len("topic:"):].partition("!")
        if sub:
            if "/" in sub or sub.startswith("."):
                raise ValueError(f"bad subscription id {sub!r}")
            return topics.Subscription(topics.subscriptions_dir(root, Topic(topic)) / sub).box
        return topics.topic_incoming(root, Topic(topic))
    return layout.queue_box(root, Queue(dest))


def _write_boxes(root: Path, dest: str, header: Message) -> list[Dropbox]:
    """Where a send writes (the same rule as Connection.boxes_for_send)."""
    if dest.startswith("topic:"):
        topic, _, sub = dest[len("topic:"):].partition("!")
        if sub:
            raise ValueError("write to a topic (topic:NAME), not to one of its subscriptions")
        from dropboxmq import topics  # (topics only)

        return topics.fan_out_targets(root, Topic(topic), header, None)
    return [ensure_dropbox(layout.queue_box(root, Queue(dest)))]


# ---------------------------------------------------------------- rows


def _ts(ms: int | None) -> _dt.datetime | None:
    if not ms:
        return None
    try:
        return _dt.datetime.fromtimestamp(ms / 1000.0, tz=_dt.timezone.utc)
    except (OverflowError, OSError, ValueError):
        return None


#: The milliseconds a Python datetime can hold (years 1 to 9999): _ts gives None outside them.
_MIN_MS, _MAX_MS = -62135596800000, 253402300799999


def _micros(ms: int | None) -> int | None:
    """_ts as an Arrow timestamp: microseconds since the epoch, None where _ts gives None."""
    return ms * 1000 if ms and _MIN_MS <= ms <= _MAX_MS else None


def _prop_text(p: Property) -> str:
    v = p.value
    if isinstance(v, bool):
        return "true" if v else "false"
    if p.letter == "F":
        return javanum.java_float_str(v)
    if p.letter == "D":
        return javanum.java_double_str(v)
    return str(v)


def _header(state: State, name: str, now: int, box: Dropbox | None = None) -> Message:
    """The headers a file name describes, as a consumer would see them in ``state``."""
    client, original = codec.split_processing_name(name)
    if state in (State.NEW, State.NOT_COMMITTED) or client is None:
        return from_wire(name, now)  # the delivery count the next claim gives it
    if box is not None and (aliased := claims.original_name(box, name)) is not None:
        original = aliased  # claimed under an alias (claims.py): the register names the message
    return from_wire(original, now, claimed=True)  # the current count (codec reads each tail once)


#: Columns of SCHEMA holding a time: _values gives milliseconds, a row a datetime, Arrow microseconds.
_TIME_COLUMNS = (4, 6, 7)


def _values(state: State, name: str, msg: Message, body: bytes) -> list:
    """One message's columns of SCHEMA, times as milliseconds since the epoch (0: none)."""
    letter = msg.class_letter
    text = None
    if letter == "T":
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            text = None
    reply = msg.reply_to
    props = _props(msg)
    return [
        state.value, name, msg.message_id, msg.priority, msg.timestamp, CLASS_LETTERS.get(letter, letter),
        msg.expiration, msg.delivery_time, msg.correlation_id,
        str(reply) if reply is not None else None, msg.jms_type, msg.delivery_mode.name,
        msg.delivery_count, msg.redelivered, props, body, text, props.variant,
    ]


class _Props(NamedTuple):
    """A message's properties as the two columns hold them (shared by every row of one property set)."""

    text: dict[str, str]  # ``properties``: each value as text
    items: list[tuple[str, str]]  # the same as Arrow builds a map
    variant: Any  # ``typed_properties``: a VariantVal
    struct: dict[str, bytes]  # the same as Arrow builds a VARIANT


def _props(msg: Message) -> _Props:
    """The property columns of ``msg``, computed once per distinct property set (a queue's
    messages mostly repeat a few): a float's repr is part of the key (-0.0 == 0.0)."""
    key = tuple((k, p.letter, p.value, repr(p.value) if isinstance(p.value, float) else None)
                for k, p in msg.properties.items() if k != DELIVERY_COUNT_PROP)
    try:
        return _props_of(key)
    except TypeError:  # an unhashable value: computed for this row alone
        return _props_of.__wrapped__(key)


@functools.lru_cache(maxsize=4096)
def _props_of(key: tuple) -> _Props:
    text = {k: _prop_text(Property(letter, value)) for k, letter, value, _ in key}
    variant = _typed({k: value for k, _, value, _ in key})
    return _Props(text, list(text.items()), variant, {"value": variant.value, "metadata": variant.metadata})


def _row(state: State, name: str, msg: Message, body: bytes) -> tuple:
    values = _values(state, name, msg, body)
    for i in _TIME_COLUMNS:
        values[i] = _ts(values[i])
    values[14] = dict(values[14].text)  # a row's own map
    return tuple(values)


def _typed(values: dict[str, Any]) -> Any:
    """The properties with their JMS types kept, as a VARIANT: numbers stay numbers and booleans
    booleans (``variant_get(typed_properties, '$.price', 'double')``).  Values JSON cannot hold
    (NaN, infinities) are absent here and present, as text, in ``properties``.  (VariantVal.parseJson
    is pure Python, ~0.1-0.4 ms: _props_of calls it once per property set; a VariantVal is
    immutable, so rows share one.)"""
    from pyspark.sql.types import VariantVal

    finite = {k: v for k, v in values.items() if not (isinstance(v, float) and not math.isfinite(v))}
    return VariantVal.parseJson(json.dumps(finite, allow_nan=False))


class _Names(InputPartition):
    """A slice of a driver-side listing: (state directory, file name) pairs of one dropbox."""

    def __init__(self, box: str, items: list[tuple[str, str]]):
        self.box = box
        self.items = items


class _Planned(InputPartition):
    """A slice of a micro-batch's manifest: the target/ names a stream read task claims, each with
    the processing/ name the plan expects its claim to get ("": an alias, found in the register),
    and the query's claim settings.  ``replay``: the batch was planned by an earlier run of the
    query (a restart): the task reads what the query holds for it and claims nothing."""

    def __init__(self, box: str, client_id: str, selector: str | None, max_attempts: int,
                 items: list[tuple[str, str]], replay: bool):
        self.box, self.client_id, self.selector, self.max_attempts = box, client_id, selector, max_attempts
        self.items = items
        self.replay = replay


def _chunks(items: list, n: int) -> list[list]:
    if not items:
        return []
    n = max(1, min(n, len(items)))
    size = math.ceil(len(items) / n)
    return [items[i:i + size] for i in range(0, len(items), size)]


#: Messages a read task takes by default.  Each task costs Spark a scheduling round and a Python
#: worker's turn, about 0.4 s beyond its reading on local[2] (load 8-10): a stream batch of
#: 100,000 in 16 tasks of 6,250 ran in eight waves, each task 1.0-1.5 s for 0.4-1.0 s of reading.
#: (Earlier: 10,000 messages in six tasks of 2,000, three waves, 13.1 s against 5.4 s in two.)
_TASK_MESSAGES = 25_000
#: ... but a listing of twice this many is read by two tasks at least (two cores read at once).
_MIN_TASK_MESSAGES = 2_500


def _partitions_option(options: Any) -> int:
    """``numPartitions`` (0: not given); the readers check it when made, before any claim."""
    return _int_option(options, "numPartitions", 0, 1)


def _default_partitions(options: Any, count: int) -> int:
    given = _partitions_option(options)
    if given:
        return given
    tasks = math.ceil(count / _TASK_MESSAGES)
    if count >= 2 * _MIN_TASK_MESSAGES:
        tasks = max(tasks, 2)
    return max(1, min(16, tasks))


def _read_messages(part: _Names) -> Iterator[tuple[State, str, Message, bytes]]:
    """(state, name, headers, body) of each message of ``part`` still there to read (a browse)."""
    box = Dropbox(part.box).hold_dirs()  # each body read by name in its held state directory
    now = now_ms()
    try:
        for word, name in part.items:
            state = _STATES_BY_WORD[word]
            try:
                body = box.read(state, name)
            except (NotARegularFile, OSError):
                continue  # moved since the listing, or no file to read
            yield state, name, _header(state, name, now, box), body
    finally:
        box.close()


def _base_name(name: str) -> str:
    """A message's name without its delivery count: the same for each of its deliveries."""
    return codec.with_delivery_count(name, None)


def _held_claims(box: Dropbox, client_id: str) -> dict[str, str]:
    """The query's claims in processing/ (one listing), by the name each stands for: an alias
    by its message's name (the claim register), any other by its name without the count."""
    prefix = codec.encode_field(client_id) + "~"
    held: dict[str, str] = {}
    for pname in box.list(State.DELIVERED):
        if pname.startswith(prefix) and codec.split_processing_name(pname)[0] == client_id:
            original = claims.original_name(box, pname)
            held[original if original is not None else _base_name(pname[len(prefix):])] = pname
    return held


def _held_for(held: dict[str, str], name: str) -> str | None:
    """The claim of ``held`` (_held_claims) of the message planned as target/``name``."""
    return held.get(name) or held.get(_base_name(name))


def _claim_messages(part: _Planned) -> Iterator[tuple[State, str, Message, bytes]]:
    """A stream read task: claim each planned name with the consumer's claim step
    (``Claimer.try_claim``: its verdict, delivery count, dead-lettering) and read what it
    claimed; a name gone (a rival holds it, expired, dead-lettered, selector false) is skipped as
    the consumer skips it.  What the query already holds for a name -- an earlier attempt of this
    task, or the crashed run a replay re-reads (which claims nothing) -- is read too."""
    box = Dropbox(part.box).hold_dirs()  # claims and reads by name in the held state directories
    now = now_ms()
    claimer = None
    if not part.replay:
        selector = None
        if part.selector is not None:  # the parser is imported only for a selector
            from dropboxmq.selector import selector_for

            selector = selector_for(part.selector)
        claimer = Claimer(box, part.client_id, ClaimSettings(selector, part.max_attempts), 0.0)
        claimer.registered = box.register_inodes()  # as its listing would: counts kept in the register
    # a claim under another name than the plan's (an alias, a count from the register) is found by
    # one listing, taken at the first name not found where the plan expects it; a batch names each
    # message once (the plan sees to it), so what is found is this name's claim
    held: dict[str, str] | None = None
    try:
        for name, expected in part.items:
            claim = claimer.try_claim(name) if claimer is not None else None
            pname = claim.processing_name if claim is not None else expected
            body = _claimed_body(box, pname) if pname else None
            if body is None and claim is None:  # ours already, under another name?
                if held is None:
                    held = _held_claims(box, part.client_id)
                pname = _held_for(held, name) or ""
                body = _claimed_body(box, pname) if pname else None
            if body is None:
                continue  # not ours: gone, as for the consumer
            # the claim's headers are those its processing/ name carries (_header would parse it again)
            msg = claim.message if claim is not None else _header(State.DELIVERED, pname, now, box)
            if part.replay:  # delivered before, by the run that planned this batch
                msg.redelivered, msg.delivery_count = True, msg.delivery_count + 1
            yield State.DELIVERED, pname, msg, body
    finally:
        box.close()


def _claimed_body(box: Dropbox, pname: str) -> bytes | None:
    """The body of processing/``pname``; None when there is no such claim, or it cannot be read
    (then it is dead-lettered: no later delivery could read it either)."""
    try:
        return box.read(State.DELIVERED, pname)
    except FileNotFoundError:
        return None
    except (NotARegularFile, OSError):
        claims.finish(box, Move.DEAD_LETTER, pname)
        return None


def _rows(messages: Iterator[tuple[State, str, Message, bytes]]) -> Iterator[tuple]:
    for state, name, msg, body in messages:
        yield _row(state, name, msg, body)


#: Rows per Arrow record batch a read yields.
_BATCH_ROWS = 10000


def _batches(messages: Iterator[tuple[State, str, Message, bytes]], arrow_schema: Any) -> Iterator[Any]:
    """_rows as Arrow record batches of ``arrow_schema`` (SCHEMA's): each column built as
    one list and converted at once, instead of Spark converting every value of every row."""
    import pyarrow as pa

    while chunk := list(itertools.islice(messages, _BATCH_ROWS)):
        columns: list[list] = [list(c) for c in zip(*(_values(*m) for m in chunk), strict=True)]
        for i in _TIME_COLUMNS:
            columns[i] = [_micros(ms) for ms in columns[i]]
        props, typed = 14, 17
        columns[typed] = [p.struct for p in columns[props]]
        columns[props] = [p.items for p in columns[props]]
        arrays = [pa.array(values, type=field.type) for values, field in zip(columns, arrow_schema, strict=True)]
        yield pa.RecordBatch.from_arrays(arrays, schema=arrow_schema)


def _arrow_schema(schema: StructType) -> Any:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")


# ---------------------------------------------------------------- batch read


class DropboxMQBatchReader(DataSourceReader):
    """A browse: lists on the driver, reads bodies in tasks, moves nothing.  Tasks yield Arrow
    record batches when the schema is the data source's own (Spark's default)."""

    def __init__(self, options: Any, schema: StructType | None = None):
        self.root = _root(options)
        self.schema = schema if schema is not None and schema.fieldNames() == COLUMNS else None
        self.box = _read_box(self.root, _destination(options))
        include = {w.strip().lower() for w in (options.get("include") or "").split(",") if w.strip()}
        if "all" in include:
            include |= _INCLUDABLE
        unknown = include - _INCLUDABLE - {"all"}
        if unknown:
            raise ValueError(f"dropboxmq: unknown include {sorted(unknown)} "
                             "(processing, processed, expired, error, working, delayed, all)")
        self.include = include
        self.selector: Selector | None = None
        if (options.get("selector") or "").strip():  # the parser is imported only for a selector
            from dropboxmq.selector import selector_for

            self.selector = selector_for(options.get("selector"))
        _partitions_option(options)
        self.options = options

    def partitions(self) -> list[InputPartition]:
        from dropboxmq.browser import in_delivery_order

        now = now_ms()
        items: list[tuple[str, str]] = []
        for name in in_delivery_order(self.box.list(State.NEW)):
            msg = from_wire(name, now)
            if msg.is_expired(now) and "expired" not in self.include:
                continue
            if msg.delivery_time > now and "delayed" not in self.include:
                continue
            if self.selector is not None and not self.selector.matches(msg):
                continue
            items.append((State.NEW.value, name))
        for word in _BROWSABLE:
            if word in self.include:
                state = _STATES_BY_WORD[word]
                for name in sorted(self.box.list(state)):
                    if self.selector is None or self.selector.matches(_header(state, name, now)):
                        items.append((word, name))
        parts = _chunks(items, _default_partitions(self.options, len(items)))
        return [_Names(str(self.box.path), c) for c in parts] or [_Names(str(self.box.path), [])]

    # Spark hands read() back the partitions partitions() made: narrower than the base class can say
    def read(self, partition: _Names) -> Iterator[Any]:  # type: ignore[override]
        if self.schema is None:
            return _rows(_read_messages(partition))
        return _batches(_read_messages(partition), _arrow_schema(self.schema))


# ---------------------------------------------------------------- writing (shared by batch and stream)


def _current_batch() -> str | None:
    """The micro-batch id of the running task (Spark sets it as a local property)."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return ctx.getLocalProperty("streaming.sql.batchId") if ctx is not None else None


def _task_identity() -> tuple[int, int, int]:
    """(stage, partition, attempt) of the running task."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        return 0, 0, 0
    return ctx.stageId(), ctx.partitionId(), ctx.attemptNumber()


def _rows_of(items: Iterator[Any]) -> Iterator[dict[str, Any]]:
    """The written rows as dicts (column -> value): from Arrow record batches (what Spark gives
    an Arrow writer; each column converted at once) or from Rows (an older Spark, tests)."""
    for item in items:
        if hasattr(item, "schema") and hasattr(item, "num_rows"):  # a pyarrow.RecordBatch
            yield from _batch_rows(item)
        else:
            yield item.asDict(recursive=False) if hasattr(item, "asDict") else dict(item)


def _batch_rows(batch: Any) -> Iterator[dict[str, Any]]:
    """One record batch's rows, with the values a Row would hold: a map as a dict, a VARIANT
    (a struct of value and metadata in Arrow) as a VariantVal."""
    import pyarrow as pa
    from pyspark.sql.types import VariantVal

    columns = []
    for field, column in zip(batch.schema, batch.columns, strict=True):
        values = column.to_pylist()
        if pa.types.is_map(field.type):
            values = [None if v is None else dict(v) for v in values]
        elif _is_variant(field.type):
            values = [None if v is None else VariantVal(v["value"], v["metadata"]) for v in values]
        columns.append(values)
    names = batch.schema.names
    for values in zip(*columns, strict=True):
        yield dict(zip(names, values, strict=True))


def _is_variant(arrow_type: Any) -> bool:
    """Spark's Arrow form of a VARIANT: a struct of value and metadata, marked variant."""
    import pyarrow as pa

    return pa.types.is_struct(arrow_type) and {f.name for f in arrow_type} == {"value", "metadata"} and any(
        (f.metadata or {}).get(b"variant") == b"true" for f in arrow_type)


def _message_from_row(d: dict[str, Any], ttl_default: float) -> tuple[Message, float]:
    """The message a written row (a fresh dict of _rows_of: consumed here) describes."""
    from dropboxmq.bodies import message_for_letter  # (writing only)

    body = d.pop("body", None)
    text = d.pop("text", None)
    value = d.pop("value", None)  # Spark's text/kafka convention
    letter = d.pop("message_class", None)
    if body is None:
        body = text if text is not None else value
    if isinstance(body, str):
        body_bytes = body.encode("utf-8")
        letter = letter or "T"
    elif body is None:
        body_bytes = b""
        letter = letter or "M"
    else:
        body_bytes = bytes(body)
        letter = letter or "B"
    letter = _CLASS_BY_NAME.get(letter, letter)
    if letter not in CLASS_LETTERS:
        raise ValueError(f"unknown message_class {letter!r}")
    msg = message_for_letter(letter)(body=body_bytes)
    prio = d.pop("priority", None)
    msg.priority = 4 if prio is None else int(prio)
    if not 0 <= msg.priority <= 9:
        raise ValueError(f"priority must be 0..9, got {msg.priority}")
    msg.correlation_id = d.pop("correlation_id", None) or None
    msg.jms_type = d.pop("jms_type", None) or None
    reply = d.pop("reply_to", None)
    if reply:
        if reply.startswith("topic://"):
            msg.reply_to = Topic(reply[8:])
        elif reply.startswith("queue://"):
            msg.reply_to = Queue(reply[8:])
        elif reply[0] in "QT":
            msg.reply_to = Queue(reply[1:]) if reply[0] == "Q" else Topic(reply[1:])
        else:
            msg.reply_to = Queue(reply)
    mode = d.pop("delivery_mode", None)
    if mode:
        msg.delivery_mode = DeliveryMode[str(mode).upper()]
    ttl = d.pop("time_to_live", None)
    ttl = ttl_default if ttl is None else float(ttl)
    props = d.pop("properties", None) or {}
    typed = d.pop("typed_properties", None)
    typed = typed.toPython() if typed is not None else {}
    for k, v in props.items():
        if v is not None and k not in typed:  # a browse written back: the typed value wins
            msg.set_property(k, str(v), "S")
    for k, v in typed.items():
        if v is not None:
            msg.properties[k] = _property_of(float(v) if isinstance(v, decimal.Decimal) else v)
    for k, v in d.items():  # any other column: a typed property
        if k in _STAMPED or v is None:
            continue
        msg.properties[k] = _property_of(v)
    return msg, ttl


def _property_of(value: Any) -> Property:
    """A column's (or typed property's) value as a JMS property: floats are doubles."""
    return Property("D", value) if isinstance(value, float) else Property(infer_letter(value), value)


def _stamp(msg: Message, ttl: float) -> str:
    """Headers stamped at send: the library's own rule (MessageProducer's), no delivery delay."""
    from dropboxmq.producer import stamp_send  # (writing only)

    return stamp_send(msg, ttl)


class _Attempt(WriterCommitMessage):
    """What a task attempt tells the driver: the name of its transaction log and its count."""

    def __init__(self, log_name: str, count: int):
        self.log_name = log_name
        self.count = count


#: Rows a task takes at a time: their sends are logged in one write, then their files created.
WRITE_CHUNK_ROWS = 1000

#: The columns a written row's body comes from, the first one not null.
_BODY_COLUMNS = ("body", "text", "value")
#: Distinct header sets a task keeps the name template of (beyond it the cache starts over).
_TEMPLATES_KEPT = 4096


class _Template(NamedTuple):
    """The file name of a row's headers, but for the send's message id and expiration: ``head +
    id + tail`` (no time to live) or ``head + id + tail + str(expiration) + rest``."""

    head: str
    tail: str
    rest: str | None  # None: no time to live (no expiration field)
    ttl_ms: int
    persistent: bool


#: A message id and its time the template check stamps with (any other would do).
_CHECK_ID, _CHECK_MS = "ID:1700000000000123-0123456789", 1700000000000


def _template(row: dict[str, Any], ttl_default: float) -> _Template | None:
    """The name template of ``row``'s headers (its body only gives the class: a placeholder of
    its type is enough), built by the row path itself (_message_from_row, then the send's own
    rule, stamp_send), so the two cannot disagree: the template is read off a name stamped at
    time 0 and must give the name stamp_send gives at another time, else None (as for a header
    the template cannot hold): the row path names the row."""
    from dropboxmq.producer import stamp_send  # (writing only)

    msg, ttl = _message_from_row(row, ttl_default)
    ttl_ms = int(ttl * 1000) if ttl > 0 else 0
    if ttl_ms > 1 << 53:  # near the long's end: the row path range-checks the expiration
        return None
    head = f"{msg.priority}."
    name = stamp_send(msg, ttl, id_and_time=("ID:0-0", 0))
    tail = name[len(head) + 3:]
    persistent = msg.delivery_mode == DeliveryMode.PERSISTENT
    exp_at, exp = f".{msg.class_letter}.", str(ttl_ms)
    if not name.startswith(f"{head}0-0.{msg.class_letter}"):
        t = None
    elif not ttl_ms:
        t = _Template(head, tail, None, 0, persistent)
    elif tail.startswith(exp_at + exp) and tail[len(exp_at) + len(exp):][:1] in ("", "."):
        t = _Template(head, exp_at, tail[len(exp_at) + len(exp):], ttl_ms, persistent)
    else:
        t = None
    checked = stamp_send(msg, ttl, id_and_time=(_CHECK_ID, _CHECK_MS))
    return t if t is not None and _named(t, _CHECK_ID, _CHECK_MS) == checked else None


def _named(t: _Template, mid: str, ms: int) -> str:
    """The name of a message stamped with id ``mid`` at ``ms`` from its header set's template."""
    return f"{t.head}{mid[3:]}{t.tail}" if t.rest is None else f"{t.head}{mid[3:]}{t.tail}{ms + t.ttl_ms}{t.rest}"


def _key_column(field: Any, column: Any) -> tuple[list, Any] | None:
    """A header column as hashable values (equal only where the names are equal) and the function
    giving a row's value back; None: a type whose values the row path must see one by one."""
    import pyarrow as pa
    from pyspark.sql.types import VariantVal

    t = field.type
    if pa.types.is_map(t):
        return [None if v is None else tuple(v) for v in column.to_pylist()], lambda v: None if v is None else dict(v)
    if _is_variant(t):
        return ([None if v is None else (v["value"], v["metadata"]) for v in column.to_pylist()],
                lambda v: None if v is None else VariantVal(*v))
    if pa.types.is_floating(t):  # -0.0 == 0.0 but its text differs
        return [None if v is None else (v, repr(v)) for v in column.to_pylist()], lambda v: None if v is None else v[0]
    if any(check(t) for check in (pa.types.is_integer, pa.types.is_boolean, pa.types.is_string,
                                  pa.types.is_large_string, pa.types.is_null, pa.types.is_binary,
                                  pa.types.is_large_binary)):
        return column.to_pylist(), lambda v: v
    return None


def _body_column(field: Any, column: Any) -> tuple[list, Any] | None:
    """A body column's values as bytes, and the placeholder of its type a row would hold."""
    import pyarrow as pa

    t = field.type
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return column.cast(pa.large_binary()).to_pylist(), ""  # UTF-8, as str.encode gives it
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return column.to_pylist(), b""
    if pa.types.is_null(t):
        return [None] * len(column), None
    return None


class _Namer:
    """Names the rows of Arrow record batches from cached templates: the per-row work is one
    message id and a string join, where the row path builds a Message and encodes every header.
    (A task's rows mostly repeat a few header sets: the same properties, default priority.)"""

    def __init__(self, ttl_default: float):
        self.ttl_default = ttl_default
        self.templates: dict[tuple, _Template | None] = {}

    def names(self, batch: Any) -> list[tuple[str, bytes, bool]] | None:
        """(name, body, persistent) of each row, stamped in order; None: a column type only the
        row path takes (the batch goes that way)."""
        bodies = []
        key_columns, converters, key_names = [], [], []
        for field, column in zip(batch.schema, batch.columns, strict=True):
            if field.name in _BODY_COLUMNS:
                got = _body_column(field, column)
                if got is None:
                    return None
                bodies.append((_BODY_COLUMNS.index(field.name), got))
            elif field.name not in _STAMPED:
                keyed = _key_column(field, column)
                if keyed is None:
                    return None
                key_columns.append(keyed[0])
                converters.append(keyed[1])
                key_names.append(field.name)
        bodies.sort(key=lambda b: b[0])
        placeholders = [placeholder for _, (_, placeholder) in bodies]
        n = batch.num_rows
        kinds: Any
        if len(bodies) == 1 and None not in bodies[0][1][0]:
            kinds = itertools.repeat(0, n)
            contents: Any = bodies[0][1][0]
        else:  # the first body column not null, as _message_from_row takes it
            kinds, contents = [], []
            for values in zip(*(values for _, (values, _) in bodies), strict=True) if bodies else ((),) * n:
                k = next((i for i, v in enumerate(values) if v is not None), -1)
                kinds.append(k)
                contents.append(values[k] if k >= 0 else b"")
        keys = zip(kinds, *key_columns, strict=True) if key_columns else ((k,) for k in kinds)
        out: list[tuple[str, bytes, bool]] = []
        templates = self.templates
        new_id = ids.new_message_id_and_time
        for i, (key, body) in enumerate(zip(keys, contents, strict=True)):
            try:
                t = templates[key]
            except KeyError:
                if len(templates) >= _TEMPLATES_KEPT:
                    templates.clear()
                row = {name: conv(v) for name, conv, v in zip(key_names, converters, key[1:], strict=True)}
                row["body"] = placeholders[key[0]] if key[0] >= 0 else None
                t = templates[key] = _template(row, self.ttl_default)
            except TypeError:  # an unhashable value
                t = None
            if t is not None:
                name = _named(t, *new_id())
                if len(name) <= codec.MAX_NAME_BYTES:  # (every encoded name is ASCII)
                    out.append((name, body, t.persistent))
                    continue
            msg, ttl = _message_from_row(next(_batch_rows(batch.slice(i, 1))), self.ttl_default)
            out.append((_stamp(msg, ttl), msg.body, msg.delivery_mode == DeliveryMode.PERSISTENT))
        return out


def _task_chunks(items: Iterator[Any], ttl: float, root: Path, dest: str,
                 queue_box: Dropbox | None) -> Iterator[list[tuple[Dropbox, str, bytes, bool]]]:
    """The sends of a task's rows, at most WRITE_CHUNK_ROWS at a time, stamped in row order:
    (dropbox, name, body, persistent).  Record batches to a queue are named by _Namer; Rows,
    and rows to a topic (whose subscriptions' selectors see each message), by the row path."""
    namer = _Namer(ttl)
    rows: list[Any] = []

    def row_sends() -> list[tuple[Dropbox, str, bytes, bool]]:
        sends: list[tuple[Dropbox, str, bytes, bool]] = []
        for row in _rows_of(iter(rows)):
            msg, msg_ttl = _message_from_row(row, ttl)
            name = _stamp(msg, msg_ttl)
            persistent = msg.delivery_mode == DeliveryMode.PERSISTENT
            sends.extend((box, name, msg.body, persistent) for box in ([queue_box] if queue_box else
                                                                       _write_boxes(root, dest, msg)))
        rows.clear()
        return sends

    for item in items:
        if hasattr(item, "schema") and hasattr(item, "num_rows"):  # a pyarrow.RecordBatch
            if rows:
                yield row_sends()
            for start in range(0, item.num_rows, WRITE_CHUNK_ROWS):
                part = item.slice(start, WRITE_CHUNK_ROWS)
                named = None if queue_box is None else namer.names(part)
                if named is None or queue_box is None:
                    rows.append(part)
                    yield row_sends()
                else:
                    yield [(queue_box, name, body, persistent) for name, body, persistent in named]
        else:
            rows.append(item)
            if len(rows) >= WRITE_CHUNK_ROWS:
                yield row_sends()
    if rows:
        yield row_sends()


def _write_task(root: Path, dest: str, client_id: str, tag: str, rows: Iterator[Any], durable: bool,
                ttl: float, fail_after: int = -1) -> _Attempt:
    """Create every message in working/, each recorded in this attempt's log before its file
    exists: a chunk of rows at a time, its sends logged in one write, then its files created.
    ``durable``: one group commit for the task (store.sync_files: the log and every persistent
    file together), not an fsync a file."""
    from dropboxmq.dirs import ensure_layout  # (writing only)
    from dropboxmq.groupsync import sync_files
    from dropboxmq.transaction import TransactionLog

    ensure_layout(root)
    stage, part, attempt = _task_identity()
    # unique per attempt even across driver restarts and zombie attempts
    log = TransactionLog(root, client_id, f"{tag}.s{stage}p{part}a{attempt}.{uuid.uuid4().hex[:6]}", 0)
    topic = dest.startswith("topic:")
    # a queue's dropbox is the same for every row: its directories held, files created by name
    queue_box = None if topic else ensure_dropbox(layout.queue_box(root, Queue(dest))).hold_dirs()
    n = 0
    to_sync: list[str] = []
    sync_bytes = 0
    try:
        for sends in _task_chunks(rows, ttl, root, dest, queue_box):
            if attempt == 0 and 0 <= fail_after - n < len(sends):  # fault injection (tests): the first attempt dies
                raise RuntimeError(f"dropboxmq: injected failure of task attempt {stage}.{part}.{attempt}")
            log.record_many("send", [(box, name) for box, name, _, _ in sends])
            for box, name, body, persistent in sends:
                try:
                    box.create(name, body, False)
                except StoreError as exc:
                    if topic and getattr(exc, "errno", None) == errno.ENOENT:
                        continue  # subscription removed while we publish
                    raise
                n += 1
                if durable and persistent:
                    to_sync.append(box.file(State.NOT_COMMITTED, name))
                    sync_bytes += len(body)
    except BaseException:
        log.close(durable)  # the log names every file of this attempt, durably: a rollback finds them
        raise
    finally:
        if queue_box is not None:
            queue_box.close()
    log.close(False)
    if durable and log.entries:  # group commit: the log and every persistent file, durable together
        sync_files(root, [str(log.path), *to_sync], sync_bytes)
    return _Attempt(log.name, n)


def _attempt_logs(root: Path, client_id: str, tag_prefix: str) -> list[Path]:
    """Every attempt log of one job (or micro-batch) still in associated/: their session tags
    start with ``tag_prefix``."""
    from dropboxmq.log_lifecycle import LogState  # (writing only)
    from dropboxmq.transaction import LogStore

    prefix = f"{codec.encode_field(client_id)}~{tag_prefix}"
    store = LogStore(root)
    return [store.path(LogState.ASSOCIATED, n) for n in store.names(LogState.ASSOCIATED) if n.startswith(prefix)]


def _discard_logs(root: Path, logs: list[Path]) -> None:
    """Roll back (DISCARD) the sends of attempt logs Spark did not commit, and delete the logs."""
    from dropboxmq.log_lifecycle import LogState  # (writing only)
    from dropboxmq.transaction import recover_log

    for path in logs:
        recover_log(root, LogState.ASSOCIATED, path)


def _hand_over(root: Path, logs: list[Path], names: set[str]) -> None:
    """Drop the attempt logs in ``names``: the job's (or batch's) committed log carries their entries."""
    from dropboxmq.log_lifecycle import LogMove, LogState  # (writing only)
    from dropboxmq.transaction import LogStore

    store = LogStore(root)
    for path in logs:
        if path.name in names:
            store.move(LogState.ASSOCIATED, LogMove.HAND_OVER, path.name)


def _entries_of(root: Path, messages: list[Any]) -> tuple[list[LogEntry], set[str]]:
    from dropboxmq.log_lifecycle import LogState  # (writing only)
    from dropboxmq.transaction import LogStore, read_log

    entries: list[LogEntry] = []
    names: set[str] = set()
    store = LogStore(root)
    for m in messages:
        if isinstance(m, _Attempt):
            names.add(m.log_name)
            try:
                entries.extend(read_log(store.path(LogState.ASSOCIATED, m.log_name)))
            except FileNotFoundError:  # an empty partition never opened its log
                pass
    return entries, names


class DropboxMQBatchWriter(DataSourceArrowWriter):
    """The whole write job is one transaction (see the module docstring)."""

    def __init__(self, options: Any):
        self.root = _root(options)
        self.dest = _destination(options)
        if not self.dest.startswith("topic:"):
            ensure_dropbox(layout.queue_box(self.root, Queue(self.dest)))
        self.job = uuid.uuid4().hex[:16]
        self.client_id = f"spark-job-{self.job}"
        self.durable = (options.get("durable") or "true").lower() != "false"
        self.ttl = float(options.get("timeToLive") or 0)
        self.fail_after = int(options.get("failFirstAttemptAfter") or -1)  # tests: fault injection
        from dropboxmq.dirs import ensure_layout  # (the driver only)

        ensure_layout(self.root)

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return _write_task(self.root, self.dest, self.client_id, "job", iterator, self.durable, self.ttl,
                           self.fail_after)

    def commit(self, messages: list[Any]) -> None:
        from dropboxmq.clients import Registration  # (the driver only)
        from dropboxmq.transaction import TransactionLog

        reg = Registration(self.root, self.client_id)  # a driver dying inside commit = a dead owner
        try:
            entries, committed = _entries_of(self.root, messages)
            log = TransactionLog(self.root, self.client_id, "commit", 0)
            log.record_entries(entries)
            # point of no return inside; SEND all (by name in held directories); fsync target/s
            log.commit(durable=self.durable, held=True)
            # every other attempt (failed, retried, speculative) is rolled back; the committed
            # ones' logs are just dropped (their files were SENT: DISCARD would be a no-op)
            _hand_over(self.root, _attempt_logs(self.root, self.client_id, "job.s"), committed)
            _discard_logs(self.root, _attempt_logs(self.root, self.client_id, "job.s"))
        finally:
            reg.release()

    def abort(self, messages: list[Any]) -> None:
        _discard_logs(self.root, _attempt_logs(self.root, self.client_id, "job.s"))


# ---------------------------------------------------------------- streaming write


def _checkpoint_hash(options: Any, what: str) -> str:
    key = options.get("consumerId") if what == "source" else options.get("sinkId")
    if not key:
        ckpt = options.get("checkpointLocation")
        if not ckpt:
            raise ValueError(f"dropboxmq: a streaming {what} needs .option('checkpointLocation', DIR) "
                             f"(the same as the query's) or .option('{'consumerId' if what == 'source' else 'sinkId'}', ID)")
        key = os.path.realpath(ckpt.removeprefix("file:"))
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:20]


class DropboxMQStreamWriter(DataSourceStreamArrowWriter):
    """Each micro-batch is one transaction, committed at most once per batch id."""

    def __init__(self, options: Any):
        self.root = _root(options)
        self.dest = _destination(options)
        if not self.dest.startswith("topic:"):
            ensure_dropbox(layout.queue_box(self.root, Queue(self.dest)))
        self.client_id = f"spark-sink-{_checkpoint_hash(options, 'sink')}"
        self.durable = (options.get("durable") or "true").lower() != "false"
        self.ttl = float(options.get("timeToLive") or 0)
        self.run = uuid.uuid4().hex[:8]  # this query run: attempt logs of a crashed run are told apart
        from dropboxmq.dirs import ensure_layout  # (the driver only)

        ensure_layout(self.root)

    def _tag(self, batch_id: int | str) -> str:
        return f"b{batch_id}"

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        batch = _current_batch()
        tag = f"{self._tag(batch if batch is not None else 'x')}.{self.run}"
        return _write_task(self.root, self.dest, self.client_id, tag, iterator, self.durable, self.ttl)

    def _batch_log(self, batch_id: int) -> str:
        return f"{codec.encode_field(self.client_id)}~b{batch_id}~0"

    def _stale_attempts(self, batch_id: int) -> list[Path]:
        """Attempt logs of micro-batch ``batch_id`` (of any run of this query) still open."""
        return _attempt_logs(self.root, self.client_id, f"b{batch_id}.")

    def commit(self, messages: list[Any], batchId: int) -> None:
        from dropboxmq.log_lifecycle import LogMove, LogState  # (writing only)
        from dropboxmq.transaction import LogStore, TransactionLog, read_log, roll_forward

        store = LogStore(self.root)
        os.makedirs(store.base / LogState.COMMITTED.value, exist_ok=True)
        name = self._batch_log(batchId)
        if store.path(LogState.COMMITTING, name).exists():  # a crash inside an earlier commit of this batch
            roll_forward(self.root, read_log(store.path(LogState.COMMITTING, name)), durable=True)
            store.move(LogState.COMMITTING, LogMove.KEEP, name, durable=False)
        if not store.path(LogState.COMMITTED, name).exists():
            started = store.path(LogState.ASSOCIATED, name)
            if started.exists():  # an earlier commit died before its point of no return
                _discard_logs(self.root, [started])
            entries, _ = _entries_of(self.root, messages)
            log = TransactionLog(self.root, self.client_id, f"b{batchId}", 0)
            log.open()  # even empty: the proof that this batch id is committed
            log.record_entries(entries)
            log.close(True)
            store.move(LogState.ASSOCIATED, LogMove.COMMIT, name)
            # ---- point of no return ----
            roll_forward(self.root, entries, durable=self.durable, held=True)
            store.move(LogState.COMMITTING, LogMove.KEEP, name)  # kept in committed/: the proof
            _hand_over(self.root, self._stale_attempts(batchId),
                       {m.log_name for m in messages if isinstance(m, _Attempt)})
        # a replay of a committed batch, failed attempts: their files are never sent
        _discard_logs(self.root, self._stale_attempts(batchId))
        self._prune(batchId)

    def abort(self, messages: list[Any], batchId: int) -> None:
        _discard_logs(self.root, self._stale_attempts(batchId))

    def _prune(self, batch_id: int, keep: int = 1000) -> None:
        """Keep the proofs of the last ``keep`` batches (Spark retains far fewer)."""
        if batch_id % 100:
            return
        from dropboxmq.log_lifecycle import LogMove, LogState  # (writing only)
        from dropboxmq.transaction import LogStore

        store = LogStore(self.root)
        prefix = f"{codec.encode_field(self.client_id)}~b"
        for n in store.names(LogState.COMMITTED):
            if n.startswith(prefix):
                try:
                    b = int(n[len(prefix):].split("~")[0])
                except ValueError:
                    continue
                if b < batch_id - keep:
                    store.move(LogState.COMMITTED, LogMove.PRUNE, n)


# ---------------------------------------------------------------- streaming read


#: The read limit of a micro-batch when ``maxMessagesPerTrigger`` is not given ("0": no limit).
#: A batch's messages are claimed by its tasks and stay claimed until the sink commits it, and
#: its manifest names each of them (~200 bytes a name): the limit bounds both.  Each
#: micro-batch costs Spark a fixed 1.5-3 s (planning, task launch, the sink's and the checkpoint's
#: logs, one more source round trip; measured at load 5-10 on 2 cores), so batches of 10,000
#: spent more in that than in the data source's claims, reads and ACKs (about 1.5 s of CPU per
#: 10,000); at 100,000 it is a few percent of a batch.
DEFAULT_MESSAGES_PER_TRIGGER = 100_000


def _source_checkpoint(options: Any) -> str:
    """The query's checkpoint, which the source must be given too: Spark keeps it from sources,
    and the source's claims belong to it (acknowledged from its commits/, held while it exists)."""
    ckpt = options.get("checkpointLocation")
    if not ckpt:
        raise ValueError("dropboxmq: a streaming read needs .option('checkpointLocation', DIR) on readStream "
                         "too (the same DIR as the query's)")
    if "://" in ckpt and not ckpt.startswith("file:"):
        raise ValueError(f"dropboxmq: checkpointLocation {ckpt!r}: the source reads the query's commit log, "
                         "so it must be on a local or mounted file system")
    return os.path.realpath(ckpt.removeprefix("file:"))


def _streams_dir(root: Path, client_id: str) -> Path:
    return Path(root) / layout.INTERNAL / "spark" / "streams" / codec.encode_field(client_id)


class DropboxMQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """A competing consumer that plans a batch in latestOffset, claims in its read tasks and
    acknowledges once the query's checkpoint records the batch committed.  Its claims belong to the checkpoint (a hold, see
    ``liveness.hold_for_checkpoint``), not to the process that made them."""

    def __init__(self, options: Any, schema: StructType | None = None):
        self.root = _root(options)
        self.dest = _destination(options)
        self.checkpoint = _source_checkpoint(options)
        # the numeric options, checked before anything is created or claimed
        self.max_per_trigger = _int_option(options, "maxMessagesPerTrigger", DEFAULT_MESSAGES_PER_TRIGGER, 0,
                                           " (0: no limit)")
        self.max_attempts = _int_option(options, "maxDeliveryAttempts", 10, 1)
        self.recovery_interval = _seconds_option(options, "recoveryInterval", 2.0)
        self.scan_interval = _seconds_option(options, "scanInterval", 0.25)  # as Settings.scan_interval
        self.registration_timeout = _seconds_option(options, "registrationTimeout", 60.0)
        _partitions_option(options)
        # SCHEMA (Spark's default): tasks yield Arrow record batches built column-wise
        self.schema = schema if schema is not None and schema.fieldNames() == COLUMNS else None
        self.box = _read_box(self.root, self.dest)
        if not self.dest.startswith("topic:"):
            ensure_dropbox(self.box)
        # the query's client id: given (clientId), else derived from its checkpoint
        self.client_id = options.get("clientId") or f"spark-{_checkpoint_hash(options, 'source')}"
        sel = options.get("selector")
        self.selector_text = sel if sel and sel.strip() else None
        self.options = options
        self.dir = _streams_dir(self.root, self.client_id)
        self._registration: Registration | None = None
        self._last_recovery = -1e9
        self._claimer: Claimer | None = None  # the claim step, the consumer's (made with the registration)
        self._only: set[str] | None = None  # availableNow: the names in target/ when the run started
        self._spark_committed: int | None = None  # the last batch of commits/ already acknowledged
        self._planned: set[int] = set()  # manifests this run wrote (others are replays: redelivered)

    # --- the query's client identity, taken on first use (the driver's long-lived reader)
    def _ensure_registered(self) -> None:
        if self._registration is not None:
            return
        from dropboxmq.clients import Registration  # (the driver only)
        from dropboxmq.dirs import ensure_layout
        from dropboxmq.liveness import hold_for_checkpoint

        ensure_layout(self.root)
        os.makedirs(self.dir, exist_ok=True)
        hold_for_checkpoint(self.root, self.client_id, self.checkpoint)  # before the first claim
        deadline = time.monotonic() + self.registration_timeout
        while True:
            try:
                self._registration = Registration(self.root, self.client_id)
                break
            except InvalidClientIDError:
                if time.monotonic() > deadline:
                    raise  # the same checkpoint is in use by a live query
                time.sleep(0.2)  # a killed predecessor's process may still be exiting
        # claims, acks and redeliveries name files relative to the held state directories
        selector = None
        if self.selector_text is not None:  # the parser is imported only for a selector
            from dropboxmq.selector import selector_for

            selector = selector_for(self.selector_text)
        self._claimer = Claimer(self.box.hold_dirs(), self.client_id, ClaimSettings(selector, self.max_attempts),
                                self.scan_interval)
        self._commit_what_spark_committed()  # the sink has them: acknowledge
        self._return_unplanned()  # claimed, but never part of a batch Spark logged: redeliver

    def _seqs(self) -> list[int]:
        try:
            return sorted(int(n[:-5]) for n in os.listdir(self.dir) if n.endswith(".json") and n[:-5].isdigit())
        except FileNotFoundError:
            return []

    def _manifest_path(self, seq: int) -> Path:
        return self.dir / f"{seq}.json"

    def _manifest(self, seq: int) -> list[tuple[str, str]]:
        """The planned (target/ name, expected processing/ name) pairs of batch ``seq``."""
        try:
            with open(self._manifest_path(seq), encoding="utf-8") as f:
                manifest = json.load(f)
        except FileNotFoundError:
            return []
        names = manifest["names"]
        # (a manifest of an earlier version names the claims its latestOffset made)
        return list(zip(names, manifest.get("claims", names), strict=True))

    def _write_manifest(self, seq: int, names: list[str], claimed: list[str]) -> None:
        manifest = {"box": os.path.relpath(self.box.path, self.root), "names": names, "claims": claimed}
        replace_durably(self._manifest_path(seq), json.dumps(manifest).encode("utf-8"),
                        self.dir / f".{seq}.{uuid.uuid4().hex[:8]}.tmp")
        fsync_dir(str(self.dir))
        self._planned.add(seq)

    # --- Spark's calls
    def initialOffset(self) -> dict:
        self._ensure_registered()
        seqs = self._seqs()  # a new query over an old consumer id redelivers its leftovers first
        return self._offset(seqs[0] - 1 if seqs else 0)

    def _offset(self, seq: int) -> dict:
        return {"seq": seq, "consumer": self.client_id}

    def getDefaultReadLimit(self) -> Any:
        return ReadMaxRows(self.max_per_trigger) if self.max_per_trigger > 0 else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """availableNow: drain what is in the dropbox now (in batches of the read limit), then
        report no new data, so that the run ends; later arrivals wait for the next run."""
        self._ensure_registered()
        assert self._claimer is not None
        self._only = set(self.box.list(State.NEW))

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        self._ensure_registered()
        if start is None:
            seqs = self._seqs()
            start = {"seq": seqs[-1] if seqs else 0}
        seq = int(start["seq"])
        self._commit_what_spark_committed()  # the last batch is acked without waiting for another
        if self._manifest_path(seq + 1).exists():  # planned earlier in this run, not yet logged
            return self._offset(seq + 1)
        cap = getattr(limit, "max_rows", None) or self.max_per_trigger or 0
        names, claimed = self._plan(cap if cap > 0 else 1 << 62)
        if not names:
            return self._offset(seq)
        self._write_manifest(seq + 1, names, claimed)
        return self._offset(seq + 1)

    def _plan(self, cap: int) -> tuple[list[str], list[str]]:
        """Up to ``cap`` names of target/ to claim, in the consumer's delivery order with its
        verdicts (``claim.Claimer``'s walk, ``decision.decide``), and the processing/ name each
        claim will get ("": an alias).  Nothing is claimed: the read tasks claim."""
        assert self._claimer is not None  # made by _ensure_registered
        mono = time.monotonic()
        if mono - self._last_recovery > self.recovery_interval:
            self._last_recovery = mono
            from dropboxmq.recovery import reclaim_dead_owners  # (the driver only)

            reclaim_dead_owners(self.root, self.box)
        claimer, client = self._claimer, self.client_id
        claimer.release_due()
        names: list[str] = []
        claimed: list[str] = []
        planned_ids: set[str] = set()  # a listing taken during the plan may show a message again, renamed
        while len(names) < cap and (name := claimer.next()) is not None:
            if self._only is not None and name not in self._only:
                claimer.skip.add(name)  # arrived after an availableNow run started: the next run's
                continue
            decision = decide(name, claimer.clock(), claimer.policy)  # the claim step's verdict
            if decision.verdict is not Verdict.CLAIM:
                claimer.set_aside(name, decision)  # a move, or the name held back or skipped
                continue
            header, stamped = decision.header, decision.claimed_name
            mid = header.message_id
            if mid is not None:
                if mid in planned_ids:
                    continue  # (offered again at the next listing)
                planned_ids.add(mid)
            # planned: not offered again while it stays in target/ (a name a task leaves there is
            # mostly one the claim step set aside; a rival's claim renames it)
            claimer.skip.add(name)
            names.append(name)
            claimed.append(codec.claim_as(client, name, stamped) or "")
        return names, claimed

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        items: list[tuple[str, str]] = []
        replay = False
        for seq in range(int(start["seq"]) + 1, int(end["seq"]) + 1):
            items.extend(self._manifest(seq))
            replay |= seq not in self._planned  # planned by an earlier run: claim nothing
        parts = _chunks(items, _default_partitions(self.options, len(items)))
        return [_Planned(str(self.box.path), self.client_id, self.selector_text, self.max_attempts, c, replay)
                for c in parts]

    # Spark hands read() back the partitions partitions() made: narrower than the base class can say
    def read(self, partition: _Planned) -> Iterator[Any]:  # type: ignore[override]
        if self.schema is None:
            return _rows(_claim_messages(partition))
        return _batches(_claim_messages(partition), _arrow_schema(self.schema))

    def commit(self, end: dict) -> None:
        """ACK the claims of every batch up to ``end``, then forget those manifests.  Each is
        where the plan expects it; one listing finds those claimed under another name (an
        alias, a count from the register).  (While a manifest up to ``end`` exists no task of a
        later batch has run -- latestOffset commits a batch before planning the next, and a replay
        claims nothing -- so every claim of ours there is of a batch up to ``end``.)"""
        self._ensure_registered()
        upto = int(end["seq"])
        done = [s for s in self._seqs() if s <= upto]
        touched = False
        elsewhere: list[str] = []
        for seq in done:
            for name, pname in self._manifest(seq):
                if pname and claims.finish(self.box, Move.ACK, pname):
                    touched = True
                else:
                    elsewhere.append(name)  # never claimed (a rival's, ...), or under another name
        if elsewhere:
            held = _held_claims(self.box, self.client_id)
            for name in elsewhere:
                if (found := _held_for(held, name)) is not None:
                    touched |= claims.finish(self.box, Move.ACK, found)
        if touched:
            sync_many([(self.box, State.ACKNOWLEDGED)])
        for seq in done:
            try:
                os.unlink(self._manifest_path(seq))
            except FileNotFoundError:
                pass

    def _logged_offsets(self, where: str) -> tuple[int, int] | None:
        """(batch id, our seq) of the newest batch in the checkpoint's ``offsets/`` or
        ``commits/`` (commits/ files hold no offsets: read them from offsets/<id>)."""
        ckpt = Path(self.checkpoint.removeprefix("file:"))
        try:
            ids = sorted((int(n) for n in os.listdir(ckpt / where) if n.isdigit()), reverse=True)
        except FileNotFoundError:
            return None
        for batch in ids:
            try:
                lines = (ckpt / "offsets" / str(batch)).read_text(encoding="utf-8").splitlines()
            except FileNotFoundError:
                continue
            for line in lines[2:]:
                try:
                    off = json.loads(line)
                except ValueError:
                    continue
                if isinstance(off, dict) and off.get("consumer") == self.client_id:
                    return batch, int(off["seq"])
        return None

    def _commit_what_spark_committed(self) -> None:
        """Spark calls ``commit`` on a source only when it plans the *next* batch, so the last
        batch would stay unacknowledged until more data arrives (or forever, for a query that
        stops).  When the query's checkpoint records a batch in ``commits/`` -- the proof that
        the sink has it --, call ``commit`` with its end offset, as Spark itself does on the next
        batch.  Checked at start, at every trigger and at stop."""
        done = self._logged_offsets("commits")
        if done is None or done[0] == self._spark_committed:
            return
        self._spark_committed = done[0]
        self.commit(self._offset(done[1]))

    def _return_unplanned(self) -> None:
        """At start (no run of this query is alive: we hold its registration): a plan that Spark
        never logged in ``offsets/`` is forgotten (no task ran for it: nothing claimed), and our
        claims that no remaining manifest names (a stale one, or an earlier version's) go back to
        the dropbox, redelivered.  A batch in ``offsets/`` keeps its claims: Spark replays it."""
        logged = self._logged_offsets("offsets")
        last = logged[1] if logged else 0
        for seq in self._seqs():
            if seq > last:
                os.unlink(self._manifest_path(seq))
        held = _held_claims(self.box, self.client_id)
        mine = set(held.values())
        named: set[str] = set()
        for seq in self._seqs():
            for name, expected in self._manifest(seq):
                found = expected if expected in mine else _held_for(held, name)
                if found is not None:
                    named.add(found)
        for pname in mine - named:
            self._redeliver(pname)

    def _redeliver(self, pname: str) -> None:
        _, original = codec.split_processing_name(pname)
        original = claims.original_name(self.box, pname) or original  # an alias goes back under its name
        try:
            self.box.move(Move.REDELIVER, State.DELIVERED, pname, original)
        except FileNotFoundError:
            pass

    def stop(self) -> None:
        try:
            if self._registration is not None:
                self._commit_what_spark_committed()
        except (OSError, ValueError, StoreError):
            pass
        if self._registration is not None:
            self._registration.release()
            self._registration = None
        self._claimer = None
        self.box.close()


# ---------------------------------------------------------------- the data source


class DropboxMQDataSource(DataSource):
    """``spark.read/readStream/write/writeStream.format("dropboxmq")``."""

    @classmethod
    def name(cls) -> str:
        return SHORT_NAME

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return DropboxMQBatchReader(self.options, schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:
            raise ValueError("dropboxmq: a dropbox is appended to (mode 'append'); overwrite is not supported")
        return DropboxMQBatchWriter(self.options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return DropboxMQStreamReader(self.options, schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return DropboxMQStreamWriter(self.options)
