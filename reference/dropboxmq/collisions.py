"""Where a message goes when its name is already taken where it goes: a foreign program dropped
the same file name twice into target/, or reused a name that is already in a terminal directory.
Nothing is overwritten and nothing is lost: the message takes a name of its own.  The store
(``Dropbox.move``) calls :func:`taken` only when a rename found its destination taken.
"""

from __future__ import annotations

import itertools
import os
from typing import TYPE_CHECKING, Callable, Iterable

from . import codec
from .codec import MAX_NAME_BYTES
from .errors import StoreError, store_error
from .lifecycle import Move, State
from .message import name_bytes

if TYPE_CHECKING:
    from .store import Dropbox

__all__ = ["taken", "send_aside", "move_aside", "disambiguated", "cut_to_bytes"]


def taken(box: Dropbox, move: Move, src: str, destination: State, name: str,
          rename: Callable[[str, str], None]) -> bool:
    """``move`` of the file ``src`` found ``destination/<name>`` taken: where the message goes
    instead (False: ``src`` is gone, another process moved it)."""
    if destination in (State.ACKNOWLEDGED, State.EXPIRED, State.DEAD_LETTER):
        return move_aside(box, src, destination, name, rename)  # a foreign producer reused a name: keep both
    if destination is State.NEW:
        # target/ already holds a message of that name (a foreign file dropped twice): this one
        # goes under a name of its own -- never a failed send, never lost
        return send_aside(box, src, name, rename)
    raise StoreError(f"cannot {move.name.lower()} {src}: {box.file(destination, name)} already exists")


def disambiguated(name: str, n: int) -> str | None:
    """Another name for the message ``name`` when a file of that name is already where it
    goes (a foreign program dropped ``latest.csv`` twice): ``_<n>`` appended to its message
    id -- the id field of a message name, the first field of any other -- so every header
    reads the same and the id is new.  ``_`` never turns a field into a number, so a name
    stays as parseable as it was.  The id is cut to keep 255 bytes; None if it cannot be."""
    fields = name.split(".")
    at = 1 if codec.split_name(name) is not None else 0
    suffix = f"_{n}"
    field = fields[at]
    while True:
        fields[at] = field + suffix
        candidate = ".".join(fields)
        size = name_bytes(candidate)
        if size is not None and size <= MAX_NAME_BYTES:
            return candidate
        if len(field) <= 1:
            return None
        field = field[:-1]


def send_aside(box: Dropbox, src: str, name: str, rename: Callable[[str, str], None]) -> bool:
    """Rename ``src`` into target/ under the first free :func:`disambiguated` name."""
    names = (disambiguated(name, n) for n in range(2, 1000))
    return _rename_to_free_name(box, src, State.NEW, itertools.takewhile(lambda n: n is not None, names),
                                "send aside", rename)


def move_aside(box: Dropbox, src: str, destination: State, name: str, rename: Callable[[str, str], None]) -> bool:
    """Rename ``src`` into a terminal ``destination`` as ``<n>~<name>``, the first such name free there."""
    names = (cut_to_bytes(f"{n}~{name}", MAX_NAME_BYTES) for n in range(1, 1000))
    return _rename_to_free_name(box, src, destination, names, "move aside", rename)


def _rename_to_free_name(box: Dropbox, src: str, destination: State, names: Iterable[str | None], what: str,
                         rename: Callable[[str, str], None]) -> bool:
    """Rename ``src`` into ``destination`` under the first of ``names`` not taken there
    (False: ``src`` is gone, another process moved it)."""
    for other in names:
        assert other is not None
        try:
            rename(src, box.file(destination, other))
            return True
        except FileExistsError:
            continue
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise store_error(what, src, exc) from exc
    raise StoreError(f"cannot find a free name for {src} in {destination.value}/")


def cut_to_bytes(name: str, limit: int) -> str:
    """``name`` cut to at most ``limit`` bytes on disk, never inside a character (names are
    bytes-safe text: undecodable bytes travel as surrogateescape)."""
    raw = os.fsencode(name)
    if len(raw) <= limit:
        return name
    return os.fsdecode(_whole_chars(raw[:limit]))


def _whole_chars(raw: bytes) -> bytes:
    """``raw`` without a multi-byte UTF-8 character cut at its end."""
    for back in range(1, 4):
        if len(raw) < back:
            break
        b = raw[-back]
        if b < 0x80:
            break  # ASCII: nothing cut
        if b >= 0xC0:  # a lead byte: does its character fit in the bytes left?
            need = 2 if b < 0xE0 else 3 if b < 0xF0 else 4
            return raw if need <= back else raw[:-back]
    return raw
