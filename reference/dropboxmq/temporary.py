"""JMS temporary destinations: a queue or topic that lives as long as the connection that made
it (its directory is removed when that connection closes)."""

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

__all__ = [
    "TemporaryQueue", "TemporaryTopic", "temporary_gone", "delete_temporary", "TEMP_PREFIX", "temporary_name",
    "temporary_owner",
]

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


#: a temporary destination's name: the prefix, its connection's client id, a random part
TEMP_PREFIX = "dropboxmq-temp~"


def temporary_name(client_id: str) -> str:
    return f"{TEMP_PREFIX}{codec.encode_field(client_id)}~{uuid.uuid4().hex[:12]}"


def temporary_owner(name: str) -> str | None:
    if not name.startswith(TEMP_PREFIX):
        return None
    return codec.decode_field(name[len(TEMP_PREFIX):].split("~", 1)[0])
