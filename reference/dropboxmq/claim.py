"""The claim step of every consumer: which name of ``target/`` to try next, and the one lifecycle
move that executes ``decision.decide``'s verdict on it.  ``MessageConsumer`` (receive, listeners,
the distributor) and the Spark source both claim through :class:`Claimer`, so they try names in
the same delivery order and treat every verdict alike; what the caller does with a claim (read
the body now, or hand the name to a Spark task) is its own.  The claim register (claims.py) is
imported only when a name needs it: one with no room for its delivery count, or a register that
is not empty.
"""

from __future__ import annotations

import bisect
import errno
import logging
import random
import time
from typing import Callable, NamedTuple

from . import codec
from .codec import now_ms
from .decision import ClaimSettings, Verdict, decide
from .errors import StoreError
from .lifecycle import Move, State
from .message import Message
from .store import Dropbox

__all__ = ["Scanner", "Claim", "Claimer", "finish"]

log = logging.getLogger("dropboxmq")


class Scanner:
    """Which name to try next: the names of the last listing of ``target/``, in delivery order.

    A fresh listing is taken when the walk reaches its end or ``scan_interval`` passed (scaled by
    how long a listing takes: at most a tenth of the time goes to listing), so newly arrived
    higher-priority messages overtake the backlog within one scan interval and a listing's cost
    is shared by every message it found.
    """

    def __init__(self, box: Dropbox, scan_interval: float, monotonic: Callable[[], float] = time.monotonic):
        self.box = box
        self.scan_interval = scan_interval
        self.monotonic = monotonic
        self.walk: list[str] = []  # the last listing in delivery order, less the skipped names
        self._pos = 0  # the next name of the walk to try
        self._fresh_until = -1e9  # monotonic time after which the listing is taken again
        # codec.sort_key of every listed name, so that a relisting keys only the new names (one
        # int a name, not a tuple: a 1M backlog's keys cost ~50 MB instead of ~120 MB)
        self.keys: dict[str, int] = {}
        self._order: list[str] = []  # every name of the last listing, in delivery order
        self.skip: set[str] = set()  # names this consumer must not try again (selector, poison)
        # when set, the names outside it are never tried (a Spark availableNow run drains the
        # backlog present at its start)
        self.only: set[str] | None = None
        self.registered: frozenset[int] = frozenset()  # inodes of the claim register (Dropbox.register_inodes)

    def invalidate(self) -> None:
        self.walk, self._pos = [], 0

    def lost_race(self) -> None:
        """A competing consumer claimed the name just tried: it walks the same listing in the same
        order, so following it name by name would lose every race.  Jump to a random place among
        the remaining names of the same priority instead (a lone consumer never loses a race, so
        its order is untouched)."""
        walk, lo = self.walk, self._pos
        if lo >= len(walk):
            return
        keys, priority_of = self.keys, codec.key_priority
        hi = bisect.bisect_right(walk, priority_of(keys[walk[lo]]), lo=lo, key=lambda n: priority_of(keys[n]))
        if hi - lo > 1:
            self._pos = random.randrange(lo, hi)

    def relist(self) -> None:
        """List target/ and walk it from the head.  Only names new since the last listing are
        keyed and sorted, then merged into the kept order (timsort merges two sorted runs in
        linear time): a relisting of a large backlog costs O(listing), not O(n log n) key
        computations.  Equal keys (foreign names of one priority) keep the order they were first
        listed in."""
        started = self.monotonic()
        self.registered = self.box.register_inodes()  # (before the listing: no entry is missed)
        names = self.box.list(State.NEW)
        keys = self.keys
        listed = set(names)
        del names
        gone = keys.keys() - listed
        for n in gone:
            del keys[n]
        fresh = sorted(listed.difference(keys))  # by name first: equal keys in name order
        del listed
        key = codec.sort_key
        for n in fresh:
            keys[n] = key(n)
        fresh.sort(key=keys.__getitem__)
        order = [n for n in self._order if n in keys] if gone else self._order
        if fresh:
            order = order + fresh if order else fresh
            if len(order) > len(fresh):
                order.sort(key=keys.__getitem__)
        self._order = order
        if self.skip:
            self.skip &= keys.keys()
            order = [n for n in order if n not in self.skip]
        if self.only is not None:
            only = self.only
            order = [n for n in order if n in only]
        self.walk, self._pos = order, 0
        listed_at = self.monotonic()
        # a tenth of the time at most goes to listing; a new high priority waits one scan interval
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


class Claim(NamedTuple):
    """One message this claimer now holds in ``processing/``."""

    processing_name: str  # its name in processing/ (client prefix + claimed_name)
    claimed_name: str  # its target/ name with this delivery's count: what a redelivery puts back
    header: Message  # the headers its name carries (delivery count and JMSRedelivered set)


class Claimer:
    """Claims messages of one dropbox for one client, in delivery order: :meth:`claim_next` takes
    the next name of the :class:`Scanner`'s walk, the verdict of ``decision.decide`` on it, one
    move.  A name held back (a future delivery time, a redelivery backoff) is tried again once its
    time has come."""

    def __init__(self, box: Dropbox, client_id: str, policy: ClaimSettings, scan_interval: float,
                 clock: Callable[[], int] = now_ms, monotonic: Callable[[], float] = time.monotonic):
        self.box = box
        self.client_id = client_id
        self.policy = policy
        self.clock = clock  # ms since the epoch: delivery times, expiry, holding back
        self.scanner = Scanner(box, scan_interval, monotonic)  # monotonic: when to list again
        self.deferred: dict[str, int] = {}  # names held back -> ms since the epoch when due

    def hold_back(self, name: str, until: int) -> None:
        """Do not try ``name`` before ``until`` (ms since the epoch)."""
        self.deferred[name] = until
        self.scanner.skip.add(name)

    def next_retry_in(self) -> float | None:
        """Seconds until a name held back is due again; None when none is held back."""
        if not self.deferred:
            return None
        return max(0.0, (min(self.deferred.values()) - self.clock()) / 1000)

    def claim_next(self) -> Claim | None:
        """Try names in order until one claim succeeds; None when target/ has nothing for us."""
        scanner = self.scanner
        if self.deferred:  # names held back whose time has come are eligible again
            now = self.clock()
            due = [n for n, t in self.deferred.items() if t <= now]
            for n in due:
                del self.deferred[n]
                scanner.skip.discard(n)
            if due:
                scanner.invalidate()
        while (name := scanner.next()) is not None:
            claim = self.try_claim(name)
            if claim is not None:
                return claim
        return None

    def try_claim(self, name: str) -> Claim | None:
        """Execute decision.decide's verdict on ``name``: one lifecycle move each.  None when
        it is not ours to deliver now (skipped, held back, expired, dead-lettered, or claimed
        by a competitor first).  A full or read-only store raises StoreError (nothing moved);
        any other StoreError skips the name."""
        box, scanner = self.box, self.scanner
        entry = None
        if scanner.registered:  # a name that cannot carry its delivery count has it in the claim register
            from . import claims

            entry = claims.lookup(box, State.NEW, name, scanner.registered)
        verdict, header, count, claimed, until, dead_letter = decide(
            name, self.clock(), self.policy, 0 if entry is None else entry.count)
        if verdict is not Verdict.CLAIM:
            if verdict is Verdict.EXPIRE:
                box.move(Move.EXPIRE, State.NEW, name)
            elif verdict is Verdict.DEFER:
                self.hold_back(name, until)
            else:  # SKIP: a name never changes, it will never match
                scanner.skip.add(name)
            return None
        try:
            if entry is None and not codec.needs_alias(self.client_id, name, claimed):
                pname: str | None = codec.processing_name(self.client_id, claimed)
            else:
                from . import claims  # no room for the count in the name, or a count in the register

                pname = claims.claim_name(box, self.client_id, name, claimed, count, entry is not None)
            if pname is None:
                scanner.invalidate()  # the next walk lists the register again and reads the count
                return None
            if not pname or not box.move(Move.CLAIM, State.NEW, name, pname):
                scanner.lost_race()
                return None  # lost the race: normal, silent
        except StoreError as exc:
            if getattr(exc, "errno", None) in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
                raise  # the whole store is affected (nothing moved): tell the caller
            log.warning("cannot claim %s, skipping it: %s", name, exc)
            scanner.skip.add(name)
            return None
        if entry is not None and codec.alias_inode(pname) is None:
            claims.forget(box, box.stat(State.DELIVERED, pname).st_ino)  # the count is in the name now
        if dead_letter:
            log.warning("%s delivered %d times: dead-lettered to error/",
                        header.message_id if header is not None else name, count - 1)
            finish(box, Move.DEAD_LETTER, pname)
            return None
        assert header is not None  # decide() decodes every name it claims
        return Claim(pname, claimed, header)


def finish(box: Dropbox, move: Move, pname: str) -> bool:
    """ACK, DEAD_LETTER or EXPIRE the claim ``processing/<pname>`` (claims.finish: an alias ends
    under its message's own name); an ordinary claim needs no register."""
    if codec.alias_inode(pname) is None:
        return box.move(move, State.DELIVERED, pname)
    from . import claims

    return claims.finish(box, move, pname)
