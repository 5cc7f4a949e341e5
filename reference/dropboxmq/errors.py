"""Exceptions, named after their JMS counterparts where one exists; those of an off-path feature
(selectors, leases, transactions, file-system checks) live in its module."""

import errno

__all__ = [
    "DropboxMQError", "JMSException", "InvalidDestinationError", "InvalidClientIDError", "IllegalStateError",
    "RootNotFoundError", "QueueNotFoundError", "MessageFormatError", "NameTooLongError", "StoreError", "store_error",
    "MessageTakenError",
]


class DropboxMQError(Exception):
    """Base of every error this package raises on purpose (the CLI prints these in one line)."""


class JMSException(DropboxMQError):
    pass


class InvalidDestinationError(JMSException):
    pass


class InvalidClientIDError(JMSException):
    pass


class RootNotFoundError(JMSException):
    """The dropbox root does not exist (or is not a directory).  Nothing is created unless
    asked: ``Connection(root, create=True)`` or ``dropboxmq init``."""


class QueueNotFoundError(InvalidDestinationError):
    """A queue that does not exist under the root (a typo creates nothing): create it with
    ``connection.create_queue(name)``, ``dropboxmq init NAME`` or ``Connection(root, create=True)``."""


class IllegalStateError(JMSException):
    pass


class MessageTakenError(IllegalStateError):
    """An acknowledgement (or commit) found its message gone from this client's claim: recovery
    took it back because the client was presumed dead, and it is, or will be, delivered again.
    The acknowledgement did not happen.  ``messages``: the message ids concerned."""

    def __init__(self, text: str, messages: tuple[str, ...] = ()):
        super().__init__(text)
        self.messages = messages


class MessageFormatError(JMSException):
    pass


class NameTooLongError(MessageFormatError):
    """The encoded file name would exceed 255 bytes."""


class StoreError(DropboxMQError):
    """A file-system operation failed (disk full, permission denied, ...)."""


def store_error(action: str, path: str, exc: OSError) -> StoreError:
    reason = {
        errno.ENOSPC: "no space left on device",
        errno.EDQUOT: "disk quota exceeded",
        errno.EACCES: "permission denied",
        errno.EPERM: "operation not permitted",
        errno.EROFS: "read-only file system",
        errno.EIO: "input/output error",
        errno.ENAMETOOLONG: "file name too long",
    }.get(exc.errno or 0, exc.strerror or str(exc))
    err = StoreError(f"cannot {action} {path}: {reason}")
    err.errno = exc.errno  # type: ignore[attr-defined]
    return err
