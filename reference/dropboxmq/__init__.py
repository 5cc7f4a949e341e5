"""dropboxmq: guaranteed, JMS-style messaging whose only broker is a directory tree.

    from dropboxmq import Connection, Queue

    with Connection.from_env() as conn:    # $DROPBOXMQ_ROOT: a root made by `dropboxmq init orders`
        session = conn.create_session()
        session.create_producer().send(Queue("orders"), "hello")
        print(session.create_consumer(Queue("orders")).receive_body(timeout=5))

The names below are imported on first use, so ``import dropboxmq`` (and the CLI) stays quick.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = [
    "__version__",
    # from .connection, .session, .producer, .consumer, .listeners, .browser, .temporary, .ackmode
    "Connection", "Session", "MessageProducer", "MessageConsumer", "QueueBrowser", "MessageListener", "Settings",
    "AckMode", "AUTO_ACKNOWLEDGE", "CLIENT_ACKNOWLEDGE", "DUPS_OK_ACKNOWLEDGE", "SESSION_TRANSACTED",
    "TemporaryQueue", "TemporaryTopic",
    # from .message, .bodies
    "Queue", "Topic", "Destination", "DeliveryMode", "Message", "TextMessage", "BytesMessage",
    "MapMessage", "StreamMessage", "ObjectMessage",
    # from .values
    "Property",
    # from .errors, .selector, .transaction, .leases
    "DropboxMQError", "JMSException", "InvalidDestinationError", "InvalidClientIDError", "InvalidSelectorError",
    "IllegalStateError", "MessageFormatError", "TransactionRolledBackError", "StoreError",
    "RootNotFoundError", "QueueNotFoundError", "LeaseExpiredError", "MessageTakenError", "PropertyValue", "Body",
]

#: the modules the names above come from, each listing its own in its ``__all__``
#: searched in this order: the send -> receive path's modules first, so that a name of the path
#: (``from dropboxmq import Connection, Queue``) never loads a module off it (bodies.py and what it
#: imports, when a non-text body is used)
_SOURCES = ("errors", "message", "ackmode", "values", "connection", "session", "producer", "consumer", "bodies",
            "listeners", "browser", "temporary", "selector", "transaction", "leases")

if TYPE_CHECKING:
    from .errors import (DropboxMQError, IllegalStateError, InvalidClientIDError, InvalidDestinationError,
                         JMSException, MessageFormatError, MessageTakenError, QueueNotFoundError, RootNotFoundError,
                         StoreError)
    from .leases import LeaseExpiredError
    from .selector import InvalidSelectorError
    from .transaction import TransactionRolledBackError
    from .bodies import BytesMessage, MapMessage, ObjectMessage, StreamMessage
    from .message import DeliveryMode, Destination, Message, Queue, TextMessage, Topic
    from .ackmode import AUTO_ACKNOWLEDGE, CLIENT_ACKNOWLEDGE, DUPS_OK_ACKNOWLEDGE, SESSION_TRANSACTED, AckMode
    from .browser import QueueBrowser
    from .connection import Connection, Settings
    from .consumer import MessageConsumer
    from .listeners import MessageListener
    from .producer import Body, MessageProducer
    from .session import Session
    from .temporary import TemporaryQueue, TemporaryTopic
    from .values import Property, PropertyValue


def __getattr__(name: str) -> Any:
    if name in __all__:
        for source in _SOURCES:
            module = importlib.import_module(f".{source}", __name__)
            if name in module.__all__:
                value = getattr(module, name)
                globals()[name] = value
                return value
    raise AttributeError(f"module 'dropboxmq' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
