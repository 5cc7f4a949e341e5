"""What a consumer does with one name it found in ``target/``: the claim policy, pure (the time is
given, never read).  ``claim.Claimer`` executes its :class:`Verdict` with one ``store.Dropbox.move``."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from . import codec
from .message import Message
from .values import Property

if TYPE_CHECKING:
    from .selector import Selector

__all__ = ["Verdict", "Decision", "ClaimSettings", "decide"]


class Verdict(enum.Enum):
    SKIP = "skip"  # the selector rejects it: never try it again (a name never changes)
    DEFER = "defer"  # its delivery time has not come: try it again at ``until``
    EXPIRE = "expire"  # its expiration passed: Move.EXPIRE to expired/
    CLAIM = "claim"  # Move.CLAIM; past the last attempt (``dead_letter``) then Move.DEAD_LETTER


@dataclass(frozen=True)
class ClaimSettings:
    """What a consumer's policy depends on besides the name and the time."""

    selector: "Selector | None" = None
    max_delivery_attempts: int = 10


class Decision(NamedTuple):  # a tuple, not a dataclass: one is made per name tried
    verdict: Verdict
    header: Message  # the decoded name
    delivery_count: int = 1  # CLAIM: the delivery this claim makes
    claimed_name: str = ""  # CLAIM: the name with ``delivery_count`` stamped (what processing/ holds after the prefix)
    until: int = 0  # DEFER: ms since the epoch
    dead_letter: bool = False  # CLAIM: past max_delivery_attempts


#: Decision(...) runs NamedTuple's generated __new__, a Python call: a claim's hot return builds the tuple
_make_decision = tuple.__new__


def decide(name: str, now: int, settings: ClaimSettings, attempted: int = 0) -> Decision:
    """The verdict on ``name`` in ``target/`` at ``now`` (ms since the epoch).  ``attempted``:
    the deliveries made before, when the name cannot carry them (the claim register's count,
    ``claims.py``); the name's own count counts when it is higher."""
    header, claimed = codec.claim_reading(name, now)
    if attempted and attempted >= header.delivery_count:
        header.delivery_count, header.redelivered = attempted + 1, True
        header.properties[codec.DELIVERY_COUNT] = Property("I", attempted + 1)
        claimed = codec.with_delivery_count(name, attempted + 1)
    if settings.selector is not None and not settings.selector.matches(header):
        return Decision(Verdict.SKIP, header)
    if header.delivery_time > now:
        # retrying it at once would spin on it when it is the only name left
        return Decision(Verdict.DEFER, header, until=header.delivery_time)
    if 0 != header.expiration <= now:  # header.is_expired(now), inline: a call a message
        return Decision(Verdict.EXPIRE, header)
    count = header.delivery_count
    return _make_decision(Decision, (Verdict.CLAIM, header, count, claimed, 0, count > settings.max_delivery_attempts))
