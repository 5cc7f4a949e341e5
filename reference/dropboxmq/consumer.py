"""MessageConsumer: each delivery is one claim step (``claim.Claimer``), then its body is read
and the session applies its ack mode."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, BinaryIO, Callable, Iterator

from .claim import Claimer, Delivery
from .decision import ClaimSettings
from .errors import IllegalStateError
from .lifecycle import State
from .message import Destination, Message, TextMessage
from .store import Dropbox, NotARegularFile

if TYPE_CHECKING:
    from .listeners import MessageListener
    from .producer import Body
    from .session import Session

__all__ = ["MessageConsumer"]


class MessageConsumer:
    def __init__(self, session: Session, box: Dropbox, destination: Destination, selector: str | None):
        self.session = session
        self.box = box.hold_dirs()  # claim, read and ack by name in held directories (closed with the consumer)
        self.destination = destination
        self.message_selector = selector or None
        matcher = None
        if selector:
            from .selector import selector_for  # (the parser: imported only when there is one to parse)

            matcher = selector_for(selector)
        self.claimer = Claimer(self.box, session.connection.client_id,
                               ClaimSettings(matcher, session.settings.max_delivery_attempts),
                               session.settings.scan_interval)
        self.housekeeping_due = -1e9  # time.monotonic() after which the ops layer runs again
        self.on_close: Callable[[], None] | None = None  # a topic consumer's: leave its subscription
        self.listener: Callable[[Message], Any] | None = None
        self.closed = False
        settings = session.settings
        self.redelivery_delay = settings.redelivery_delay  # s; 0 = retry at once
        self.redelivery_backoff = settings.redelivery_backoff
        self.max_redelivery_delay = settings.max_redelivery_delay

    # --- JMS surface
    def receive(self, timeout: float | None = None) -> Message | None:
        """Wait up to ``timeout`` seconds (None: forever, 0: don't wait) for a message."""
        d = self._receive(timeout, read_body=True)
        return None if d is None else d.message

    def receive_body(self, timeout: float | None = None) -> "Body | None":
        """receive(), returning just the body as Python data (str, bytes, dict or list)."""
        msg = self.receive(timeout)
        if msg is None or isinstance(msg, TextMessage):
            return None if msg is None else msg.text
        from .bodies import body_of  # (non-text bodies)

        return body_of(msg)

    def receive_streamed(self, timeout: float | None = None) -> tuple[Message, BinaryIO] | None:
        """receive() for large bodies: the message, and its body as an open binary file to
        read in chunks (close it when done)."""
        d = self._receive(timeout, read_body=False)
        return None if d is None or d.body_file is None else (d.message, d.body_file)

    def receive_no_wait(self) -> Message | None:
        return self.receive(0)

    def messages(self, timeout: float | None = None) -> Iterator[Message]:
        """Iterate over messages as they arrive; stop when none arrives within ``timeout``
        seconds (None: never stop).  ``for m in consumer`` does not wait at all."""
        while (m := self.receive(timeout)) is not None:
            yield m

    def __iter__(self) -> Iterator[Message]:
        return self.messages(0)

    def next_retry_in(self) -> float | None:
        """Seconds until a message held back (redelivery backoff, delivery delay) is due."""
        return self.claimer.next_retry_in()

    def _receive(self, timeout: float | None, read_body: bool) -> Delivery | None:
        session = self.session
        deadline = None if timeout is None else time.monotonic() + timeout
        wait = 0.001
        while True:
            if self.closed or session.closed or self.listener is not None:
                session.check_open()
                raise IllegalStateError("consumer is closed" if self.closed else
                                        "receive() is not allowed while a message listener is set")
            if session.connection.started.is_set():
                with session.lock:
                    d = self.claim_next(read_body)
                    if d is not None:
                        try:
                            session.delivered(d)
                        except BaseException:
                            if d.body_file is not None:
                                d.body_file.close()
                            raise
                        return d
                    session.flush_lazy_acks()
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return None
            time.sleep(wait if remaining is None else min(wait, remaining))
            wait = min(wait * 2, session.settings.poll_interval)

    def set_message_listener(self, listener: "Callable[[Message], Any] | MessageListener | None") -> None:
        """Deliver messages to ``listener`` (a callable, or JMS style an object with
        ``on_message``); None stops delivery."""
        from .listeners import listen  # (listeners: imported when the first is set)

        listen(self, listener)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.box.close()
        if self in self.session.consumers:
            self.session.consumers.remove(self)
        if self.on_close is not None:
            self.on_close()

    def __enter__(self) -> "MessageConsumer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def claim_next(self, read_body: bool = True) -> Delivery | None:
        """Claim names in the claimer's order until one's body reads (or opens); an unreadable one
        is quarantined.  None when target/ has nothing for us."""
        connection = self.session.connection
        if connection.registration.leased:
            connection.registration.check("receive")
        if time.monotonic() > self.housekeeping_due:  # the ops layer, every recovery_interval
            self.housekeeping_due = connection.housekeeping(self.box)
        box, claimer = self.box, self.claimer
        if claimer.deferred:
            claimer.release_due()
        while (name := claimer.next()) is not None:
            if (d := claimer.try_claim(name)) is None:
                continue
            header = d.message
            try:
                if read_body:
                    header.body = box.read(State.DELIVERED, d.processing_name)
                else:
                    d.body_file = box.open_body(State.DELIVERED, d.processing_name)
            except (NotARegularFile, OSError) as exc:
                from .redelivery import quarantine

                quarantine(box, d.processing_name, d.original_name, exc)
                continue
            header.destination = self.destination  # (from_wire set JMSXDeliveryCount = count)
            header._session = self.session  # type: ignore[attr-defined]
            return d
        return None
