"""JMS temporary destinations: a queue or topic that lives as long as the connection that made
it (its directory is removed when that connection closes).  Imported when a session first makes
one; whose a destination name is (``codec.temporary_owner``) is asked on every send."""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from . import codec, layout
from .errors import InvalidDestinationError
from .message import (
    Destination,
    Queue,
    Topic,
)

if TYPE_CHECKING:
    from .connection import Connection

__all__ = ["TemporaryQueue", "TemporaryTopic", "temporary_gone", "delete_temporary", "temporary_name"]

log = logging.getLogger("dropboxmq")


class _Temporary:
    """delete() for temporary destinations; equal to the plain destination of the same name."""

    name: str
    connection: Connection

    def delete(self) -> None:
        self.connection._delete_temporary(self)  # type: ignore[arg-type]  # a Queue or Topic too

    def __eq__(self, other: object) -> bool:
        kind = Queue if isinstance(self, Queue) else Topic
        return isinstance(other, kind) and other.name == self.name

    def __hash__(self) -> int:
        return hash((self.name,))


@dataclass(frozen=True, eq=False)
class TemporaryQueue(_Temporary, Queue):
    connection: Connection = field(default=None, compare=False, repr=False)  # type: ignore[assignment]


@dataclass(frozen=True, eq=False)
class TemporaryTopic(_Temporary, Topic):
    connection: Connection = field(default=None, compare=False, repr=False)  # type: ignore[assignment]


def temporary_gone(dest: Destination | None) -> InvalidDestinationError:
    return InvalidDestinationError(f"{dest} does not exist: the connection that created it has closed")


def delete_temporary(root: Path, dest: Destination) -> None:
    import shutil

    path = Path(root) / dest.name if isinstance(dest, Queue) else layout.topic_dir(root, dest)
    shutil.rmtree(path, ignore_errors=True)


def temporary_name(client_id: str) -> str:
    """A new temporary destination's name (``codec.temporary_owner`` reads the owner back)."""
    return f"{codec.TEMP_PREFIX}{codec.encode_field(client_id)}~{uuid.uuid4().hex[:12]}"
