"""The claim step of every consumer (``MessageConsumer`` and the Spark source): which name of
``target/`` to try next, and the one move that executes ``decision.decide``'s verdict on it.
"""

from __future__ import annotations

import bisect
import errno
import logging
import os
import random
import time
from dataclasses import dataclass
from typing import BinaryIO, Callable

from . import codec
from .codec import now_ms
from .decision import ClaimSettings, Decision, Verdict, decide
from .errors import StoreError
from .lifecycle import Move, State
from .message import Message
from .store import Dropbox

__all__ = ["Claimer", "Delivery", "finish"]

log = logging.getLogger("dropboxmq")


@dataclass(slots=True)
class Delivery:
    """A message this claimer now holds in ``processing/``."""

    box: Dropbox
    processing_name: str  # its name in processing/ (client prefix + original_name)
    original_name: str  # its target/ name with this delivery's count: what a redelivery puts back
    message: Message  # the headers its name carries (delivery count and JMSRedelivered set)
    body_file: BinaryIO | None = None  # receive_streamed(): the body, unread
    acked: bool = False  # its ACK rename is done (an acknowledge() whose sync failed is retried)


class Claimer:
    """Claims messages of one dropbox for one client, walking the last listing of ``target/`` in
    delivery order.  It lists again when the walk ends or ``scan_interval`` passed (at most a tenth
    of the time goes to listing), so a new higher priority overtakes the backlog."""

    def __init__(self, box: Dropbox, client_id: str, policy: ClaimSettings, scan_interval: float,
                 clock: Callable[[], int] = now_ms, monotonic: Callable[[], float] = time.monotonic):
        self.box = box
        self.client_id = client_id
        self.policy = policy
        self.clock = clock  # ms since the epoch: delivery times, expiry, holding back
        self.scan_interval = scan_interval
        self.monotonic = monotonic  # when to list again
        self.deferred: dict[str, int] = {}  # names held back -> ms since the epoch when due
        self.walk: list[str] = []  # the last listing in delivery order, less the skipped names
        self._pos = 0  # the next name of the walk to try
        self._fresh_until = -1e9  # monotonic time after which the listing is taken again
        self.keys: dict[str, int] = {}  # codec.sort_key of every listed name: a relisting keys the new ones
        self._order: list[str] = []  # every name of the last listing, in delivery order
        self.skip: set[str] = set()  # names this consumer must not try again (selector, poison)
        self.registered: frozenset[int] = frozenset()  # inodes of the claim register (Dropbox.register_inodes)

    def hold_back(self, name: str, until: int) -> None:
        """Do not try ``name`` before ``until`` (ms since the epoch)."""
        self.deferred[name] = until
        self.skip.add(name)

    def next_retry_in(self) -> float | None:
        """Seconds until a name held back is due again; None when none is held back."""
        return max(0.0, (min(self.deferred.values()) - self.clock()) / 1000) if self.deferred else None

    def release_due(self) -> None:
        """Names held back whose time has come are eligible again."""
        now = self.clock()
        due = [n for n, t in self.deferred.items() if t <= now]
        for n in due:
            del self.deferred[n]
            self.skip.discard(n)
        if due:
            self.invalidate()

    def invalidate(self) -> None:
        self.walk, self._pos = [], 0

    def lost_race(self) -> None:
        """A competitor walking the same order took the name: jump to a random place among the
        rest of its priority rather than lose every race after it."""
        walk, lo = self.walk, self._pos
        if lo >= len(walk):
            return
        keys, priority_of = self.keys, codec.key_priority
        hi = bisect.bisect_right(walk, priority_of(keys[walk[lo]]), lo=lo, key=lambda n: priority_of(keys[n]))
        if hi - lo > 1:
            self._pos = random.randrange(lo, hi)

    def relist(self) -> None:
        """List target/ and walk it from the head.  Only new names are keyed, then merged into the
        kept order (timsort merges sorted runs in linear time)."""
        started = self.monotonic()
        self.registered = self.box.register_inodes()  # (before the listing: no entry is missed)
        listed, keys = set(self.box.list(State.NEW)), self.keys
        gone = keys.keys() - listed
        for n in gone:
            del keys[n]
        fresh = sorted(listed.difference(keys))  # by name first: equal keys in name order
        del listed
        keys.update(zip(fresh, map(codec.sort_key, fresh), strict=True))
        order = [n for n in self._order if n in keys] if gone else self._order
        if fresh:
            order = order + fresh if order else fresh
            order.sort(key=keys.__getitem__)
        self._order = order
        deferred = self.deferred
        if deferred:  # held back, then purged or taken by another session: no memory of it, no wake-up
            for n in [n for n in deferred if n not in keys]:
                del deferred[n]
        skip = self.skip
        if skip:
            skip.intersection_update(keys.keys())  # (``&=`` would bind a new set: self.skip kept growing)
        if skip:
            order = [n for n in order if n not in skip]
        self.walk, self._pos = order, 0
        listed_at = self.monotonic()
        self._fresh_until = listed_at + max(self.scan_interval, 10 * (listed_at - started))

    def next(self) -> str | None:
        walk = self.walk
        if self._pos >= len(walk) or self.monotonic() > self._fresh_until:
            self.relist()
            walk = self.walk
        skip = self.skip
        while self._pos < len(walk):
            name = walk[self._pos]
            self._pos += 1
            if name not in skip:
                return name
        return None

    def set_aside(self, name: str, decision: Decision) -> None:
        """Execute a verdict other than CLAIM on ``name``: expire it, hold it back, or skip it."""
        if decision.verdict is Verdict.EXPIRE:
            self.box.move(Move.EXPIRE, State.NEW, name)
        elif decision.verdict is Verdict.DEFER:
            self.hold_back(name, decision.until)
        else:  # SKIP: a name never changes, it will never match
            self.skip.add(name)

    def try_claim(self, name: str) -> Delivery | None:
        """Execute decide's verdict on ``name``: the claim, or None.  StoreError for a full or
        read-only store (nothing moved); any other error skips the name."""
        box = self.box
        entry = None
        if self.registered:  # a name that cannot carry its delivery count has it in the claim register
            from . import claims

            entry = claims.lookup(box, State.NEW, name, self.registered)
        decision = decide(name, self.clock(), self.policy, 0 if entry is None else entry.count)
        if decision.verdict is not Verdict.CLAIM:
            self.set_aside(name, decision)
            return None
        _, header, count, claimed, _, dead_letter = decision
        try:
            pname = codec.claim_as(self.client_id, name, claimed) if entry is None else None
            if pname is None:
                from . import claims  # no room for the count in the name, or a count in the register

                pname = claims.claim_name(box, self.client_id, name, claimed, count, entry is not None)
                if pname is None:
                    self.invalidate()  # the next walk lists the register again and reads the count
                    return None
            if not pname or not box.move(Move.CLAIM, State.NEW, name, pname):
                self.lost_race()
                return None  # lost the race: normal, silent
        except StoreError as exc:
            if getattr(exc, "errno", None) in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
                raise  # the whole store is affected (nothing moved): tell the caller
            log.warning("cannot claim %s, skipping it: %s", name, exc)
            self.skip.add(name)
            return None
        if entry is not None and claims.alias_inode(pname) is None:  # the count is in the name now
            claims.forget(box, os.lstat(box.file(State.DELIVERED, pname)).st_ino)
        if dead_letter:
            log.warning("%s delivered %d times: dead-lettered to error/", header.message_id, count - 1)
            finish(box, Move.DEAD_LETTER, pname)
            return None
        return Delivery(box, pname, claimed, header)


def finish(box: Dropbox, move: Move, pname: str) -> bool:
    """ACK, DEAD_LETTER or EXPIRE the claim ``processing/<pname>`` (an alias: claims.finish)."""
    if codec.ALIAS_MARK not in pname:  # (no alias: no split of the name)
        return box.move(move, State.DELIVERED, pname)
    from . import claims

    return claims.finish(box, move, pname)
