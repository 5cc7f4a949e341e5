"""After a crash: recover the state as the next process would, and judge it by the promises.

``census`` and ``judge`` are pure (a tree in, findings out); ``recover_state`` is the I/O:
it writes a crash state into a directory, connects as every client the crash killed (which
finishes that client's own transactions) and runs ``recover`` as an operator eventually does
(every owner dead, every orphan old enough), then reads the tree back.
"""

from __future__ import annotations

import os
import shutil
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from .model import Mark
from .operations import Expect, key_of, ref
from .record import snapshot_tree

__all__ = ["PROMISES", "ALLOWED", "STATE_DIRS", "Violation", "Census", "census", "judge", "write_tree", "recover_state"]

#: The promises checked, by rule name (spec/PROTOCOL.md, section Durability, gives their numbers).
PROMISES: dict[str, str] = {
    "acknowledged-send-lost": "a PERSISTENT send, commit or fan-out that returned is never lost (D1, D3)",
    "acknowledged-came-back": "a message whose acknowledgement or commit returned never comes back (D2, D3)",
    "commit-not-atomic": "a transaction is all or nothing; once past its commit point, all (D3)",
    "fanout-not-atomic": "a distributed file reaches every subscription or none, and is acknowledged iff it did (D4)",
    "two-states": "no message is in two states (D5)",
    "torn-deliverable": "no torn or empty file is ever deliverable (target/, processing/, processed/) (D6)",
    "redelivered-unflagged": "a message durably claimed comes back with JMSRedelivered set (D7)",
    "left-behind": "nothing is left that no recovery cleans: working/, processing/, logs, temporaries (D8)",
    "subscription-lost": "a durable subscription whose creation returned survives (D9)",
}

#: What a crash may do that the promises deliberately allow (the weaker promises of D2 and D7):
#: counted and reported, never a violation.
ALLOWED: dict[str, str] = {
    "lazy-ack-undone": "a DUPS_OK acknowledgement (made without a sync) undone: the message is redelivered (D2)",
    "delivered-unflagged": "a message delivered but not acknowledged is back unflagged: its claim was not "
                           "durable (D7)",
    "non-persistent-lost": "a NON_PERSISTENT send that returned is gone (D2, D6)",
    "non-persistent-torn": "a NON_PERSISTENT message is deliverable empty or torn (D6)",
}

STATE_DIRS = ("working", "target", "processing", "processed", "expired", "error")
DELIVERABLE = ("target", "processing", "processed", "expired")
_LOG_DIRS = ("associated", "committing", "rolling-back")


@dataclass(frozen=True)
class Violation:
    rule: str
    detail: str


@dataclass
class Census:
    """Where every message of a tree is: ref -> [(state directory, file name)]."""

    where: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    torn: list[str] = field(default_factory=list)  # unreadable-as-a-message files in deliverable states
    leftovers: list[str] = field(default_factory=list)
    dirs: set[str] = field(default_factory=set)
    files: set[str] = field(default_factory=set)


def census(tree: dict[str, bytes | None]) -> Census:
    out = Census()
    where: dict[str, list[tuple[str, str]]] = defaultdict(list)
    dirs = {p for p, c in tree.items() if c is None}
    out.dirs, out.files = dirs, {p for p, c in tree.items() if c is not None}
    boxes = {os.path.dirname(p) for p in dirs if os.path.basename(p) == "target"}
    boxes = {b for b in boxes if all(f"{b}/{s}" in dirs for s in STATE_DIRS)}
    for path, content in tree.items():
        parent, name = os.path.split(path)
        box, state = os.path.split(parent)
        if content is not None and box in boxes and state in STATE_DIRS:
            key = key_of(content)
            if key is not None:
                where[ref(box, key)].append((state, name))
            elif state in ("target", "processing", "processed"):
                out.torn.append(f"{path} ({len(content)} bytes)")
            if state in ("working", "processing") or name.startswith("."):
                out.leftovers.append(path)
        elif content is not None and os.path.basename(parent) in _LOG_DIRS and "/transaction/" in f"/{parent}":
            out.leftovers.append(path)
        if name.endswith(".tmp") or (name.startswith((".new-", ".deleted-"))):
            out.leftovers.append(path)
    out.where = dict(where)
    return out


def _count(name: str) -> int:
    from dropboxmq.codec import name_delivery_count

    return name_delivery_count(name)


def judge(initial: Census, final: Census, marks: tuple[Mark, ...], expect: Expect) -> list[Violation]:
    """The promises broken by ``final`` (recovered), given what the caller had been told (``marks``)."""
    found: list[Violation] = []
    returned: dict[str, set[str]] = defaultdict(set)
    for m in marks:
        returned[m.label].update(m.keys)

    def places(r: str) -> list[tuple[str, str]]:
        return final.where.get(r, [])

    def deliverable(r: str) -> bool:
        return any(s in DELIVERABLE for s, _ in places(r))

    def acked(r: str) -> bool:
        return any(s == "processed" for s, _ in places(r))

    must_exist = set(returned["sent"])
    must_be_acked = set(returned["acked"])
    committed = set(returned["committed"]) | expect.committed_before
    for label in committed:
        sends, receives = expect.transactions[label]
        must_exist |= set(sends)
        must_be_acked |= set(receives)
    for incoming in returned["distributed"]:
        must_exist |= set(expect.fanouts[incoming])
        must_be_acked.add(incoming)
    for r, locs in initial.where.items():
        if any(s in DELIVERABLE for s, _ in locs):
            must_exist.add(r)
        if any(s == "processed" for s, _ in locs):
            must_be_acked.add(r)

    for r, locs in sorted(final.where.items()):
        if len(locs) > 1:
            found.append(Violation("two-states", f"{r} is in {', '.join(f'{s}/{n}' for s, n in locs)}"))
    for r in sorted(must_exist - expect.purgeable):
        if not deliverable(r):
            found.append(Violation("acknowledged-send-lost", f"{r} is {_where(places(r))}"))
    for r in sorted(must_be_acked - expect.purgeable):
        if not acked(r) and deliverable(r):
            found.append(Violation("acknowledged-came-back", f"{r} is {_where(places(r))}"))
    for label, (sends, receives) in sorted(expect.transactions.items()):
        visible = [s for s in sends if deliverable(s)]
        done = [r for r in receives if acked(r)]
        everything = len(visible) == len(sends) and len(done) == len(receives)
        nothing = not visible and not done
        if label in committed and not everything:
            found.append(Violation("commit-not-atomic", f"transaction {label} committed but only sends {visible} "
                                   f"of {list(sends)} visible, receives {done} of {list(receives)} acknowledged"))
        elif not (everything or nothing):
            found.append(Violation("commit-not-atomic", f"transaction {label} half done: sends {visible} of "
                                   f"{list(sends)} visible, receives {done} of {list(receives)} acknowledged"))
    for incoming, copies in sorted(expect.fanouts.items()):
        have = [c for c in copies if deliverable(c)]
        done_in = acked(incoming)
        if not ((len(have) == len(copies) and done_in) or (not have and not done_in)):
            found.append(Violation("fanout-not-atomic", f"{incoming} {'acknowledged' if done_in else 'not acknowledged'}"
                                   f" with copies in {len(have)} of {len(copies)} subscriptions"))
    for r, locs in sorted(initial.where.items()):
        if any(s == "processing" for s, _ in locs):
            for s, n in places(r):
                if s == "target" and _count(n) == 0:
                    found.append(Violation("redelivered-unflagged", f"{r} was claimed (durably) and is back as "
                                           f"target/{n}, delivery count 0"))
    for r in sorted(returned["delivered"] | returned["acked-lazily"]):
        for s, n in places(r):
            if r in returned["acked-lazily"] and s != "processed":
                found.append(Violation("lazy-ack-undone", f"{r} is back as {s}/{n}"))
            elif s == "target" and _count(n) == 0 and r not in must_be_acked:
                found.append(Violation("delivered-unflagged", f"{r} is back as target/{n}, delivery count 0"))
    for r in sorted(returned["sent-non-persistent"]):
        if not deliverable(r):
            found.append(Violation("non-persistent-lost", f"{r} is {_where(places(r))}"))
    for path in final.torn:
        found.append(Violation("non-persistent-torn" if expect.non_persistent else "torn-deliverable", path))
    for path in sorted(set(final.leftovers)):
        found.append(Violation("left-behind", path))
    for name in sorted(returned["subscribed"]):
        path = expect.subscriptions[name]
        complete = f"{path}/.subscription" in final.files and all(f"{path}/{s}" in final.dirs for s in STATE_DIRS)
        if not complete:
            found.append(Violation("subscription-lost", f"subscription {name} ({path}) is gone or incomplete"))
    return found


def _where(locs: list[tuple[str, str]]) -> str:
    return "nowhere" if not locs else ", ".join(f"{s}/{n}" for s, n in locs)


def write_tree(tree: dict[str, bytes | None], root: Path, links: tuple[tuple[str, ...], ...] = ()) -> None:
    """The crash state on disk, ``links`` as hard links; everything an hour old (what a dead
    process left is old)."""
    linked = {p: group[0] for group in links for p in group[1:]}
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    old = os.path.getmtime(root) - 3600
    for path in sorted(p for p, c in tree.items() if c is None):
        (root / path).mkdir(parents=True, exist_ok=True)
    for path, content in tree.items():
        if content is not None and path not in linked:
            target = root / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
            os.utime(target, (old, old))
    for path, first in linked.items():
        os.link(root / first, root / path)
    for path in sorted((p for p, c in tree.items() if c is None), reverse=True):  # children first
        os.utime(root / path, (old, old))


def recover_state(tree: dict[str, bytes | None], root: Path, expect: Expect,
                  links: tuple[tuple[str, ...], ...] = ()) -> dict[str, bytes | None]:
    """Write ``tree`` to ``root``, recover it as the next processes would, and read it back."""
    from dropboxmq.recovery import recover
    from dropboxmq.connection import Connection

    from dropboxmq.codec import encode_field

    write_tree(tree, root, links)
    logs = [os.path.basename(p) for p in tree if p.startswith("dropboxmq/transaction/") and tree[p] is not None]
    for client_id in expect.clients:
        # the crashed process starts again: its connection finishes the logs it left (where it
        # left none, a connection changes nothing recover() would look at: skipped, for speed)
        if any(name.startswith(encode_field(client_id) + "~") for name in logs):
            Connection(root, client_id=client_id).close()
    recover(root, orphan_age=0, assume_unknown_dead=True)
    return snapshot_tree(str(root))
