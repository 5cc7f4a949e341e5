"""Message listeners: one dispatcher thread per session (JMS sessions are single-threaded) that
claims for every consumer with a listener and runs it, the session's ack mode deciding what a
returning or raising listener means (``ackmode.POLICY``: *done* and *failure*).  Made when a
session's first listener is set (``MessageConsumer.set_message_listener``, :func:`listen`); a
session whose consumers only ``receive()`` never imports this module.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any, Callable, Protocol

from .errors import MessageTakenError, StoreError
from .leases import LeaseExpiredError
from .redelivery import redeliver

if TYPE_CHECKING:
    from .claim import Delivery
    from .consumer import MessageConsumer
    from .message import Message
    from .session import Session

__all__ = ["MessageListener", "listen", "Dispatcher"]

log = logging.getLogger("dropboxmq")


class MessageListener(Protocol):
    def on_message(self, message: Message) -> Any: ...


def listen(consumer: MessageConsumer, listener: Callable[[Message], Any] | MessageListener | None) -> None:
    """``consumer.set_message_listener(listener)``: the session's dispatcher delivers to it."""
    consumer.session.check_open()
    if listener is None or callable(listener):
        consumer.listener = listener
    elif callable(getattr(listener, "on_message", None)):
        consumer.listener = listener.on_message
    else:
        raise TypeError(f"a message listener is a callable or has an on_message(message) method; "
                        f"{type(listener).__name__} is neither")
    if listener is not None:
        session = consumer.session
        if session.dispatcher is None:
            session.dispatcher = Dispatcher(session)
        session.dispatcher.wake.set()


class Dispatcher:
    """The thread that delivers a session's messages to its consumers' listeners."""

    def __init__(self, session: Session):
        self.session = session
        self.wake = threading.Event()  # a listener was set, or close() began
        self.stopping = False  # close() began: the dispatcher takes no new message
        self.running: Delivery | None = None  # the message a listener is handling now
        self.thread = threading.Thread(target=self._loop, name=f"dropboxmq-{session.tag}", daemon=True)
        self.thread.start()

    def stop(self, grace: float | None) -> bool:
        """The session closes: let a running listener finish within ``grace`` seconds (None: however
        long it takes); past it, its message is returned to the queue.  True if it overran."""
        self.stopping = True
        self.wake.set()
        if self.thread is threading.current_thread():
            return False  # close() from inside a listener
        self.thread.join(grace)
        overran = self.thread.is_alive()
        running = self.running
        if overran and running is not None:
            log.warning("message listener still running %s s after close: %s returned to the queue",
                        grace, running.message.message_id)
            redeliver(self.session, [running])
        return overran

    def _loop(self) -> None:
        session = self.session
        wait = 0.001
        while not (session.closed or self.stopping):
            if not session.connection.started.is_set():
                session.connection.started.wait(session.settings.poll_interval)
                continue
            delivered = False
            for consumer in list(session.consumers):
                if consumer.listener is None or consumer.closed:
                    continue
                with session.lock:
                    if session.closed or self.stopping:
                        return
                    try:
                        d = consumer.claim_next()
                        if d is None:
                            continue
                        delivered = True
                        self._run(consumer, d)
                    except (StoreError, MessageTakenError, LeaseExpiredError) as exc:  # keep the dispatcher alive
                        log.warning("listener delivery failed: %s", exc)
                        delivered = False
            if delivered:
                wait = 0.001
            else:
                with session.lock:
                    session.flush_lazy_acks()
                self.wake.wait(wait)
                self.wake.clear()
                wait = min(wait * 2, session.settings.poll_interval)

    def _run(self, consumer: MessageConsumer, d: Delivery) -> None:
        session = self.session
        session.delivered(d, done=False)
        self.running = d
        try:
            consumer.listener(d.message)  # type: ignore[misc]  # set: the loop checked
        except Exception:
            log.exception("message listener raised; the message will be redelivered")
            if session.policy.failure == "redeliver":
                redeliver(session, [d], back_off=True)
            return
        finally:
            self.running = None
        session.delivered(d, take=False)
