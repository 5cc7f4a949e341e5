"""dropboxmq: guaranteed, JMS-style messaging whose only broker is a directory tree.

    from dropboxmq import Connection, Queue

    with Connection.from_env() as conn:
        session = conn.create_session()
        session.create_producer().send(Queue("orders"), "hello")
        print(session.create_consumer(Queue("orders")).receive_body(timeout=5))

The names below are imported on first use, so ``import dropboxmq`` (and the CLI) stays quick.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: public name -> the module that defines it
_EXPORTS = {
    **dict.fromkeys(["Connection", "Session", "MessageProducer", "MessageConsumer", "QueueBrowser",
                     "MessageListener", "Settings", "AckMode", "AUTO_ACKNOWLEDGE", "CLIENT_ACKNOWLEDGE",
                     "DUPS_OK_ACKNOWLEDGE", "SESSION_TRANSACTED", "TemporaryQueue", "TemporaryTopic"],
                    "session"),
    "Property": "values",
    **dict.fromkeys(["Queue", "Topic", "Destination", "DeliveryMode", "Message", "TextMessage",
                     "BytesMessage", "MapMessage", "StreamMessage", "ObjectMessage"], "message"),
    **dict.fromkeys(["DropboxMQError", "JMSException", "InvalidDestinationError", "InvalidClientIDError",
                     "InvalidSelectorError", "IllegalStateError", "MessageFormatError",
                     "TransactionRolledBackError", "StoreError"], "errors"),
}

__all__ = ["__version__", *_EXPORTS]

if TYPE_CHECKING:
    from .errors import (DropboxMQError, IllegalStateError, InvalidClientIDError, InvalidDestinationError,
                         InvalidSelectorError, JMSException, MessageFormatError, StoreError,
                         TransactionRolledBackError)
    from .message import (BytesMessage, DeliveryMode, Destination, MapMessage, Message, ObjectMessage,
                          Queue, StreamMessage, TextMessage, Topic)
    from .session import (AUTO_ACKNOWLEDGE, CLIENT_ACKNOWLEDGE, DUPS_OK_ACKNOWLEDGE, SESSION_TRANSACTED, AckMode,
                          Connection, MessageConsumer, MessageListener, MessageProducer, QueueBrowser, Session,
                          Settings, TemporaryQueue, TemporaryTopic)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'dropboxmq' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
