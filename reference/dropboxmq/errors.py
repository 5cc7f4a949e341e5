"""Exceptions, named after their JMS counterparts where one exists."""

import errno

__all__ = [
    "DropboxMQError", "JMSException", "InvalidDestinationError", "InvalidClientIDError",
    "InvalidSelectorError", "IllegalStateError", "RootNotFoundError", "QueueNotFoundError", "MessageFormatError", "TransactionRolledBackError",
    "TransactionInDoubtError", "NameTooLongError", "StoreError", "UnsupportedFileSystemError",
    "store_error", "LeaseExpiredError", "MessageTakenError",
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


class InvalidSelectorError(JMSException):
    """A message selector that does not parse; ``position`` is the 0-based offset of the problem."""

    def __init__(self, message: str, position: int | None = None, selector: str | None = None):
        self.position = position
        self.selector = selector
        where = f" at position {position}" if position is not None else ""
        super().__init__(f"invalid selector{where}: {message}")


class IllegalStateError(JMSException):
    pass


class LeaseExpiredError(IllegalStateError):
    """This connection could not renew its lease in time (leases.py): another host may already
    have declared it dead and given its messages to other consumers, so it is fenced: every
    acknowledge, commit, send and receive fails.  Close the connection and connect again."""


class MessageTakenError(IllegalStateError):
    """An acknowledgement (or commit) found its message gone from this client's claim: recovery
    took it back because the client was presumed dead, and it is, or will be, delivered again.
    The acknowledgement did not happen.  ``messages``: the message ids concerned."""

    def __init__(self, text: str, messages: tuple[str, ...] = ()):
        super().__init__(text)
        self.messages = messages


class MessageFormatError(JMSException):
    pass


class TransactionRolledBackError(JMSException):
    pass


class TransactionInDoubtError(JMSException):
    """A commit passed its point of no return (its log reached ``committing/``) but could not
    apply every move (disk full, I/O error, a dropbox removed underneath).  The transaction is
    committed, not failed: recovery rolls it forward (the same client id reconnecting, any
    consumer of an affected dropbox once this connection is gone, or ``dropboxmq recover``).
    Do not send again: that would duplicate it."""


class NameTooLongError(MessageFormatError):
    """The encoded file name would exceed 255 bytes."""


class StoreError(DropboxMQError):
    """A file-system operation failed (disk full, permission denied, ...)."""


class UnsupportedFileSystemError(StoreError):
    pass


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
