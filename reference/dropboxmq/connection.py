"""A connection to one root: its settings, the checks that the root and each queue exist, the
client id's registration, the sessions it makes; it schedules the housekeeping (recovery.py)."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import codec, ids, layout
from .dirs import ensure_layout
from .filesystems import admit
from .ackmode import AckMode
from .clients import Registration
from .errors import IllegalStateError, RootNotFoundError
from .message import Destination, Message, Queue
from .session import Session
from .store import Dropbox

__all__ = ["Settings", "Connection"]


@dataclass(frozen=True)
class Settings:
    """The README explains redelivery backoff and retention ("Using the library") and the lease
    ("Durability", "Several hosts: leases and fencing")."""

    max_delivery_attempts: int = 10  # deliveries before a message is dead-lettered to error/
    scan_interval: float = 0.25  # s: a new higher-priority message overtakes within this
    poll_interval: float = 0.05  # s: longest wait between two looks at an empty target/
    recovery_interval: float = 2.0  # s: how often a consumer reclaims dead owners' messages
    dups_ok_batch: int = 64  # DUPS_OK acks are flushed in groups of this size
    allow_network_fs: bool = False
    lease: float = 10.0  # s: the client's lease (leases.py), where flock does not cross mounts
    redelivery_delay: float = 0.1  # s: a failed message's first hold-back, x backoff each time
    redelivery_backoff: float = 2.0
    max_redelivery_delay: float = 30.0
    retention: float | None = None  # s to keep acknowledged and expired messages; None: all


class Connection:
    """A connection to one root, registering ``client_id`` (None: a 1.2-style one is made).  The
    root and every queue used must exist (a typo creates nothing); ``create=True`` makes them."""

    def __init__(self, root: str | Path, client_id: str | None = None, settings: Settings | None = None, *,
                 create: bool = False, allow_network_fs: bool = False):
        self.root = Path(root)
        self.create = create
        self.settings = settings or Settings(allow_network_fs=allow_network_fs)
        if create:
            try:
                os.makedirs(self.root, exist_ok=True)
            except (FileExistsError, NotADirectoryError):
                pass  # hints.root_not_found says what stands in the way
        if not self.root.is_dir():
            from .hints import root_not_found  # (the error's did-you-mean)

            raise root_not_found(self.root)
        admit(self.root, self.settings.allow_network_fs or allow_network_fs)
        ensure_layout(self.root)  # the transaction logs' directories
        self.client_id_generated = client_id is None
        self.client_id = client_id or ids.new_message_id()[3:]
        self.registration = Registration(self.root, self.client_id, self.settings.lease)
        if client_id is not None:
            # holding the lock proves a predecessor's logs and claims are ours: a killed
            # consumer's restart gets its messages back
            self._finish_own(leftovers=True)
        self.sessions: list[Session] = []
        self.closed = False
        self.started = threading.Event()  # cleared by stop()
        self.started.set()
        self.temporary: list[Destination] = []  # temporary destinations made (temporary.py)
        self._queue_boxes: dict[str, Dropbox] = {}
        self._housekept: dict[Path, float] = {}  # dropbox -> time.monotonic() of its last housekeeping

    @classmethod
    def from_env(cls, settings: Settings | None = None, *, client_id: str | None = None,
                 create: bool = False) -> "Connection":
        """A connection configured like the CLI: $DROPBOXMQ_ROOT, $DROPBOXMQ_CLIENT_ID."""
        root = os.environ.get("DROPBOXMQ_ROOT")
        if not root:
            raise RootNotFoundError("DROPBOXMQ_ROOT is not set: export DROPBOXMQ_ROOT=/path/to/root (made by "
                                    "'dropboxmq --root /path/to/root init QUEUE'), or use Connection(root)")
        return cls(root, client_id or os.environ.get("DROPBOXMQ_CLIENT_ID") or None, settings, create=create)

    def create_queue(self, queue: "str | Queue") -> Queue:
        """Create ``queue`` (a name or a Queue) as ``dropboxmq init`` does; safe to repeat."""
        self.check_open()
        dest = Queue(queue) if isinstance(queue, str) else queue
        self.queue_box(dest, create=True)
        return dest

    def queue_box(self, queue: Queue, create: bool = False) -> Dropbox:
        """The dropbox of an existing queue (made first with ``create``, or ``self.create``)."""
        box = self._queue_boxes.get(queue.name)
        if box is None or create:  # look (or make the directories) once per connection, not once per send
            box = layout.queue_box(self.root, queue)
            if create or self.create:
                from .making import ensure_dropbox  # (making a queue is off the message path)

                ensure_dropbox(box)
            elif not box.exists():
                from .hints import missing_queue  # (the error's did-you-mean)

                raise missing_queue(self.root, queue)
            self._queue_boxes[queue.name] = box
        return box

    def __enter__(self) -> "Connection":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def create_session(self, transacted: bool = False, ack_mode: AckMode = AckMode.AUTO_ACKNOWLEDGE) -> "Session":
        self.check_open()
        session = Session(self, AckMode.SESSION_TRANSACTED if transacted else AckMode(ack_mode))
        self.sessions.append(session)
        return session

    def start(self) -> None:
        self.started.set()

    def stop(self) -> None:
        """Pause delivery to listeners and receives until ``start()``."""
        self.started.clear()

    def close(self, grace: float | None = None) -> None:
        """Close every session; a running listener may finish within ``grace`` seconds (None: no
        limit), past it its message is redelivered."""
        if self.closed:
            return
        deadline = None if grace is None else time.monotonic() + grace
        for s in list(self.sessions):
            s.close(grace=None if deadline is None else max(0.0, deadline - time.monotonic()))
        if self.temporary:
            from .temporary import delete_temporary  # (only a connection that made one)

            for dest in self.temporary:
                delete_temporary(self.root, dest)
        self._finish_own()  # a commit left in doubt (e.g. the disk was full): try again
        self.registration.release()
        self.closed = True

    def _finish_own(self, leftovers: bool = False) -> None:
        from .recovery import finish_own  # (this client id's leftovers: at connect and close)

        finish_own(self.root, self.client_id, leftovers)

    def check_open(self) -> None:
        if self.closed:
            raise IllegalStateError("connection is closed")

    def housekeeping(self, box: Dropbox) -> float:
        """``recovery.housekeeping`` of a consumed dropbox, at most every ``recovery_interval``;
        the time.monotonic() after which it is due again."""
        now = time.monotonic()
        last = self._housekept.get(box.path, -1e9)
        if now - last > self.settings.recovery_interval:
            self._housekept[box.path] = last = now
            from .recovery import housekeeping

            housekeeping(self.root, box, self.settings.retention)
        return last + self.settings.recovery_interval

    def boxes_for_send(self, dest: Destination, header: Message) -> list[Dropbox]:
        """Where a send writes: the queue's dropbox, or one copy per matching subscription."""
        if codec.temporary_owner(dest.name) is not None:
            from .temporary import boxes_for_send  # (temporary destinations only)

            return boxes_for_send(self, dest, header)
        if isinstance(dest, Queue):
            return [self.queue_box(dest)]
        from .topics import fan_out_targets  # (publish: imported when first used)

        return fan_out_targets(self.root, dest, header, self.client_id)
