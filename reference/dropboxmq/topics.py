"""Topics and every JMS 2.0 kind of subscription, on 1.2's layout.

    <root>/topic-root/<a>/<b>/...                 topic "a.b" (split on '.', hierarchical)
        .incoming/{working,target,...}            foreign drops, fanned out by a distributor
        .subscriptions/<subId>/{working,target,...}
        .subscriptions/<subId>/.subscription      JSON: kind, name, client id, topic, selector, noLocal
        .subscriptions/<subId>/.consumers/<n>     one per open consumer, held with flock

Subscription ids ([ours] where 1.2 has no form; ``enc`` escapes '.', so the
number of dots is unambiguous):

    kind                   subId
    ---------------------  ------------------------------------------------------
    durable (unshared)     enc(name).enc(clientId)[.no-local]            (1.2's form)
    non-durable            enc(<generated>).enc(clientId).nondurable[.no-local]
    shared durable         enc(name).enc(clientId or '').shared
    shared non-durable     enc(name).enc(clientId or '').shared-nondurable

A publisher writes one copy of each message into every matching subscription
of the topic and of every ancestor topic (selector applied at fan-out, so
unmatched messages never accumulate; noLocal subscriptions skip their own
connection's messages).  Copies go through working/ -> target/ exactly as a
queue send, inside the publisher's transaction when it is transacted.

Which consumers are active is decided by ``flock`` on files under
``.consumers/``, so it is known across processes and a crashed process's
consumers count as gone: its non-durable subscriptions are reclaimed.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from . import codec
from .errors import IllegalStateError, InvalidDestinationError, JMSException, StoreError
from .message import Message, Topic, name_bytes
from .dirs import ensure_dir
from .making import ensure_dropbox
from .layout import TOPIC_ROOT
from .store import Dropbox, NotARegularFile, fsync_dir, is_real_dir, open_regular, read_record

if TYPE_CHECKING:  # pragma: no cover
    from .connection import Connection
    from .consumer import MessageConsumer
    from .session import Session

__all__ = [
    "DURABLE", "NON_DURABLE", "SHARED_DURABLE", "SHARED_NON_DURABLE", "META", "CONSUMERS",
    "SubscriptionInfo", "CorruptSubscriptionError", "Subscription", "Attachment", "subscriptions_of",
    "ancestors", "find_by_name", "subscribe", "subscribed_consumer", "open_subscription", "close_consumer",
    "unsubscribe", "fan_out_targets", "reclaim_orphans", "NEW_PREFIX", "DELETED_PREFIX", "sweep_unfinished",
    "topic_dir", "topic_incoming", "subscriptions_dir",
]

log = logging.getLogger(__name__)

def topic_dir(root: Path, topic: Topic) -> Path:
    return Path(root).joinpath(TOPIC_ROOT, *topic.levels)


def topic_incoming(root: Path, topic: Topic) -> Dropbox:
    return Dropbox(topic_dir(root, topic) / ".incoming", root)


def subscriptions_dir(root: Path, topic: Topic) -> Path:
    return topic_dir(root, topic) / ".subscriptions"

DURABLE, NON_DURABLE, SHARED_DURABLE, SHARED_NON_DURABLE = "durable", "nondurable", "shared", "shared-nondurable"
META = ".subscription"
CONSUMERS = ".consumers"
# A subscription is built under NEW_PREFIX and renamed into place; removed by a rename to
# DELETED_PREFIX, then deleted.  A crash in between leaves them: sweep_unfinished clears them.
NEW_PREFIX = ".new-"
DELETED_PREFIX = ".deleted-"


@dataclass(frozen=True)
class SubscriptionInfo:
    kind: str
    name: str
    client_id: str | None
    topic: str
    selector: str | None
    no_local: bool

    @property
    def durable(self) -> bool:
        return self.kind in (DURABLE, SHARED_DURABLE)

    @property
    def shared(self) -> bool:
        return self.kind in (SHARED_DURABLE, SHARED_NON_DURABLE)

    def sub_id(self) -> str:
        base = f"{codec.encode_field(self.name)}.{codec.encode_field(self.client_id or '')}"
        if self.kind == DURABLE:
            return base + (".no-local" if self.no_local else "")
        if self.kind == NON_DURABLE:
            return base + ".nondurable" + (".no-local" if self.no_local else "")
        return f"{base}.{self.kind}"

    def same_details(self, other: "SubscriptionInfo") -> bool:
        return (self.topic, self.selector or None, self.no_local) == (other.topic, other.selector or None,
                                                                      other.no_local)


class CorruptSubscriptionError(StoreError):
    """A ``.subscription`` file this library did not write."""


_INFO_TYPES = {"kind": (str,), "name": (str,), "client_id": (str, type(None)), "topic": (str,),
               "selector": (str, type(None)), "no_local": (bool,)}


def _parse_info(d: object) -> SubscriptionInfo:
    if not isinstance(d, dict) or set(d) != set(_INFO_TYPES):
        raise ValueError(f"expected an object with the keys {sorted(_INFO_TYPES)}")
    for key, types in _INFO_TYPES.items():
        if not isinstance(d[key], types):
            raise ValueError(f"{key} is a {type(d[key]).__name__}")
    if d["kind"] not in (DURABLE, NON_DURABLE, SHARED_DURABLE, SHARED_NON_DURABLE):
        raise ValueError(f"unknown kind {d['kind']!r}")
    return SubscriptionInfo(**d)


class Subscription:
    """One subscription directory: a dropbox plus metadata and consumer locks."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.box = Dropbox(self.path)

    @property
    def info(self) -> SubscriptionInfo:
        """The metadata; FileNotFoundError while the subscription is being created or
        removed, CorruptSubscriptionError when ``.subscription`` is not ours (a FIFO, a
        symlink, JSON of another shape)."""
        path = self.path / META
        try:
            return _parse_info(json.loads(read_record(path).decode("utf-8")))  # (a huge file: ValueError)
        except (NotARegularFile, ValueError, TypeError, KeyError) as exc:
            raise CorruptSubscriptionError(f"{path} is not a subscription file: {exc}") from None

    def exists(self) -> bool:
        return (self.path / META).exists()

    @classmethod
    def create(cls, path: Path, info: SubscriptionInfo) -> "Subscription":
        """Create atomically: build under a dot-name, then rename into place."""
        path = Path(path)
        tmp = path.parent / f"{NEW_PREFIX}{uuid.uuid4().hex}"
        ensure_dropbox(Dropbox(tmp))  # (ensure_dir: every directory made is durable)
        ensure_dir(tmp / CONSUMERS)
        with open(tmp / META, "w", encoding="utf-8") as f:
            json.dump(asdict(info), f)
            f.flush()
            os.fsync(f.fileno())
        fsync_dir(str(tmp))  # the file's name in it, not only its bytes
        try:
            os.rename(tmp, path)  # fails if a concurrent creator won: use theirs
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
        # the rename is what makes it exist: durable before the caller is told it does (D9)
        fsync_dir(str(path.parent))
        return cls(path)

    def active_consumers(self) -> int:
        n = 0
        try:
            names = os.listdir(self.path / CONSUMERS)
        except FileNotFoundError:
            return 0
        for name in names:
            try:
                fd = open_regular(self.path / CONSUMERS / name)
            except (FileNotFoundError, NotARegularFile):
                continue  # gone, or a FIFO/symlink: no consumer of ours
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                n += 1
            finally:
                os.close(fd)
        return n

    def attach(self, exclusive: bool) -> "Attachment":
        """Register an active consumer; ``exclusive``: fail if any other is active."""
        ensure_dir(self.path / CONSUMERS)
        lock = Attachment(self.path / CONSUMERS / uuid.uuid4().hex)
        if exclusive and self.active_consumers() > 1:
            lock.release()
            raise IllegalStateError(
                f"subscription {self.info.name!r} already has an active consumer (unshared durable "
                "subscriptions allow one)")
        return lock

    def remove(self) -> None:
        """Delete the subscription and its messages: first make it vanish atomically
        (publishers that raced us find no directory and skip it), then delete."""
        trash = self.path.parent / f"{DELETED_PREFIX}{uuid.uuid4().hex}"
        try:
            os.rename(self.path, trash)
        except FileNotFoundError:
            return
        shutil.rmtree(trash, ignore_errors=True)


class Attachment:
    """An active consumer's flock on its file under ``.consumers/``."""

    def __init__(self, path: Path):
        self.path = path
        self.fd: int | None = open_regular(path, os.O_RDWR | os.O_CREAT | os.O_EXCL)
        fcntl.flock(self.fd, fcntl.LOCK_EX)

    def release(self) -> None:
        if self.fd is None:
            return
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        os.close(self.fd)
        self.fd = None


# ---------------------------------------------------------------- lookup


def subscriptions_of(root: Path, topic: Topic) -> Iterator[Subscription]:
    d = subscriptions_dir(root, topic)
    try:
        names = sorted(os.listdir(d))
    except FileNotFoundError:
        return
    for name in names:
        if not name.startswith(".") and is_real_dir(d / name):  # a symlink may lead out of the root
            yield Subscription(d / name)


def ancestors(topic: Topic) -> list[Topic]:
    """The topic and every ancestor: a.b.c -> [a.b.c, a.b, a]."""
    levels = topic.levels
    return [Topic(".".join(levels[:i])) for i in range(len(levels), 0, -1)]


def find_by_name(root: Path, name: str, client_id: str | None) -> list[Subscription]:
    """Every durable or shared subscription called ``name`` for ``client_id``, on any topic."""
    prefix = f"{codec.encode_field(name)}.{codec.encode_field(client_id or '')}"
    found = []
    top = Path(root) / TOPIC_ROOT
    for dirpath, dirnames, _ in os.walk(top):
        if os.path.basename(dirpath) == ".subscriptions":
            for sub in dirnames:
                if sub == prefix or sub.startswith(prefix + "."):
                    s = Subscription(Path(dirpath) / sub)
                    if s.exists() and s.info.kind != NON_DURABLE:
                        found.append(s)
            dirnames[:] = []
        else:
            dirnames[:] = [d for d in dirnames if not d.startswith(".") or d == ".subscriptions"]
    return found


# ---------------------------------------------------------------- subscribing (seed 004)


def subscribe(conn: "Connection", topic: Topic, name: str | None, selector: str | None, no_local: bool,
              durable: bool, shared: bool) -> tuple[Subscription, Attachment]:
    """A session's topic consumer: its topic and selector checked before anything is created,
    then the subscription opened."""
    if not isinstance(topic, Topic):
        raise InvalidDestinationError(f"{topic} is not a topic")
    owner = codec.temporary_owner(topic.name)
    if owner is not None and owner != conn.client_id:
        raise InvalidDestinationError(f"{topic} is a temporary topic of another connection")
    if selector:
        from .selector import selector_for

        selector_for(selector)  # (applied at fan-out: unmatched messages never reach the subscription)
    kind = (SHARED_DURABLE if shared else DURABLE) if durable else (SHARED_NON_DURABLE if shared else NON_DURABLE)
    return open_subscription(conn, topic, kind, name, selector, no_local)


def open_subscription(conn: "Connection", topic: Topic, kind: str, name: str | None,
                      selector: str | None, no_local: bool) -> tuple[Subscription, Attachment]:
    """Create or re-attach to a subscription following seed 004's pseudocode."""
    root = conn.root
    selector = selector if selector and selector.strip() else None
    if kind == DURABLE and conn.client_id_generated:
        raise IllegalStateError("an unshared durable subscription needs a client id set on the connection")
    if kind == NON_DURABLE:
        name = f"nd-{uuid.uuid4().hex[:12]}"
    if not name:
        raise JMSException("a subscription name is required")
    client = None if kind in (SHARED_DURABLE, SHARED_NON_DURABLE) and conn.client_id_generated else conn.client_id
    info = SubscriptionInfo(kind, name, client, topic.name, selector, no_local)
    sub_id = info.sub_id()
    size = name_bytes(sub_id)
    if size is None or size > codec.MAX_NAME_BYTES:  # sub_id() escapes all but undecodable bytes: never None
        raise InvalidDestinationError(
            f"subscription name {name!r} is too long: its directory name would be {size} bytes, "
            f"over the {codec.MAX_NAME_BYTES}-byte limit")
    subs_dir = subscriptions_dir(root, topic)
    ensure_dir(subs_dir)
    path = subs_dir / sub_id

    if kind in (DURABLE, SHARED_DURABLE):
        for other in find_by_name(root, name, client):
            other_info = other.info
            if other_info.shared != info.shared:
                raise JMSException(
                    f"a {'shared' if other_info.shared else 'non-shared'} durable subscription named "
                    f"{name!r} already exists for this client id")
            if other.path != path or not other_info.same_details(info):
                # The same name with another topic, selector or noLocal.
                if other.active_consumers():
                    raise JMSException(
                        f"subscription {name!r} has active consumers with a different topic or selector")
                _refuse_pending_work(conn, other, name)
                other.remove()  # re-creating with other details = unsubscribe + new subscription
    elif kind == SHARED_NON_DURABLE:
        existing = Subscription(path)
        if existing.exists() and not existing.info.same_details(info):
            raise JMSException(
                f"shared subscription {name!r} is active with a different topic or selector")
        for other in find_by_name(root, name, client):
            if other.path != path and other.info.kind == SHARED_NON_DURABLE and other.active_consumers():
                raise JMSException(
                    f"shared subscription {name!r} is active with a different topic or selector")

    sub = Subscription(path)
    if not sub.exists():
        sub = Subscription.create(path, info)
    attachment = sub.attach(exclusive=kind == DURABLE)
    return sub, attachment


def subscribed_consumer(session: Session, topic: Topic, name: str | None, selector: str | None, no_local: bool,
                        durable: bool, shared: bool) -> MessageConsumer:
    """A session's topic consumer on its subscription (``subscribe``); it leaves it as it closes."""
    from .consumer import MessageConsumer  # (the session's module has it loaded)

    sub, attachment = subscribe(session.connection, topic, name, selector, no_local, durable, shared)
    consumer = MessageConsumer(session, sub.box, topic, None)  # the subscription is filtered at fan-out
    consumer.message_selector = selector or None
    consumer.on_close = lambda: close_consumer(session, sub, attachment)
    session.consumers.append(consumer)
    return consumer


def close_consumer(session: Session, sub: Subscription, attachment: Attachment) -> None:
    """A consumer closes: non-durable subscriptions end with their last consumer, and the
    session's unacked messages of one die with it."""
    if sub.info.durable is False:
        session.unacked = [d for d in session.unacked if d.box.path != sub.box.path]
    attachment.release()
    try:
        kind = sub.info.kind
    except (FileNotFoundError, CorruptSubscriptionError):
        return
    if kind in (NON_DURABLE, SHARED_NON_DURABLE) and sub.active_consumers() == 0:
        sub.remove()


def unsubscribe(conn: "Connection", name: str) -> None:
    """Remove a durable (shared or not) subscription and its messages (JMS Session.unsubscribe)."""
    client = conn.client_id
    subs = find_by_name(conn.root, name, client)
    if conn.client_id_generated:
        subs += find_by_name(conn.root, name, None)
    subs = [s for s in subs if s.info.durable]
    if not subs:
        raise InvalidDestinationError(f"no durable subscription named {name!r} for client id {client!r}")
    for sub in subs:
        if sub.active_consumers():
            raise IllegalStateError(f"subscription {name!r} has an active consumer")
        _refuse_pending_work(conn, sub, name)
    for sub in subs:
        sub.remove()


def _refuse_pending_work(conn: "Connection", sub: Subscription, name: str) -> None:
    """Removing a subscription deletes its messages: not while this connection still holds some
    of them unacknowledged or in an open transaction (JMS: unsubscribe is then an error)."""
    if _has_pending_work(conn, sub.box):
        raise IllegalStateError(
            f"subscription {name!r} has messages this connection has not acknowledged or committed")


def _has_pending_work(conn: "Connection", box: Dropbox) -> bool:
    """Does a session of ``conn`` hold messages of ``box`` in an open transaction or delivered
    and not yet acknowledged?  (DUPS_OK's lazy acks are flushed first.)"""
    rel = os.path.relpath(box.path, conn.root)
    for s in list(conn.sessions):
        with s.lock:
            s.flush_lazy_acks()
            if s.tx is not None and any(e.box == rel for e in s.tx.entries):
                return True
            if any(d.box.path == box.path for d in s.unacked):
                return True
    return False


# ---------------------------------------------------------------- publishing


def fan_out_targets(root: Path, topic: Topic, header: Message, publisher_client: str | None) -> list[Dropbox]:
    """The subscriptions that get a copy of ``header`` published on ``topic``."""
    from .selector import InvalidSelectorError, selector_for

    boxes = []
    for t in ancestors(topic):
        for sub in subscriptions_of(root, t):
            try:
                info = sub.info
            except FileNotFoundError:
                continue  # being created or removed right now
            except CorruptSubscriptionError as exc:
                log.warning("publish skips %s", exc)  # one bad subscription must not stop the rest
                continue
            if info.no_local and publisher_client is not None and info.client_id == publisher_client:
                continue
            if not info.durable and sub.active_consumers() == 0:
                sub.remove()  # a crashed process's non-durable leftovers
                continue
            if info.selector:
                try:
                    sel = selector_for(info.selector)
                    selected = sel is None or sel.matches(header)
                except InvalidSelectorError as exc:  # a well-formed file with a bad selector: its own problem
                    log.warning("publish skips %s: its selector %r does not parse: %s", sub.path, info.selector, exc)
                    continue
                if not selected:
                    continue
            boxes.append(sub.box)
    return boxes


def reclaim_orphans(root: Path) -> int:
    """Remove non-durable subscriptions whose consumers are all gone (crashed processes)."""
    removed = 0
    top = Path(root) / TOPIC_ROOT
    for dirpath, dirnames, _ in os.walk(top):
        if os.path.basename(dirpath) == ".subscriptions":
            for name in dirnames:
                sub = Subscription(Path(dirpath) / name)
                if name.startswith(".") or not sub.exists():
                    continue
                try:
                    durable = sub.info.durable
                except (FileNotFoundError, CorruptSubscriptionError) as exc:
                    log.warning("recovery skips %s", exc)
                    continue
                if not durable and sub.active_consumers() == 0:
                    sub.remove()
                    removed += 1
            dirnames[:] = []
        else:
            dirnames[:] = [d for d in dirnames if not d.startswith(".") or d == ".subscriptions"]
    return removed


def sweep_unfinished(root: Path, cutoff: float) -> int:
    """Delete what a crash left of a subscription's creation (a ``.new-*`` directory last
    changed before ``cutoff``: older than any creation still running) or removal (every
    ``.deleted-*`` directory: already gone for everyone).  Returns how many."""
    removed = 0
    top = Path(root) / TOPIC_ROOT
    for dirpath, dirnames, _ in os.walk(top):
        if os.path.basename(dirpath) == ".subscriptions":
            for name in dirnames:
                path = Path(dirpath) / name
                try:
                    unfinished = name.startswith(DELETED_PREFIX) or (
                        name.startswith(NEW_PREFIX) and os.lstat(path).st_mtime < cutoff)
                except FileNotFoundError:
                    continue
                if unfinished and is_real_dir(path):
                    shutil.rmtree(path, ignore_errors=True)
                    removed += 1
            dirnames[:] = []
        else:
            dirnames[:] = [d for d in dirnames if not d.startswith(".") or d == ".subscriptions"]
    return removed


# ---------------------------------------------------------------- temporary destinations
