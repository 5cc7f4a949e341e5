"""What the hostile-root fuzzer (tests/test_hostile_fuzz.py, tests/hostile_worker.py) generates:
the directories it plants into, the kinds of entries it plants, the names and JSON it uses, the
directories it replaces whole, and the verbs and API entry points it runs.  The places are derived
from the layout's own definitions (lifecycle.STATE_DIRS, log_lifecycle.LogState, the internal
directories the library makes), so a directory the layout gains is fuzzed without an edit here.

``python -m dropboxmq_stress.hostile`` prints the coverage table directory x entry kind x verb
computed from these definitions (``--markdown`` for stress/README.md).
"""

from __future__ import annotations

import argparse
import sys

from dropboxmq.lifecycle import STATE_DIRS
from dropboxmq.layout import LOG_DIRS
from dropboxmq.log_lifecycle import LogState


__all__ = ["QUEUE_BOXES", "TOPIC_BOXES", "INTERNAL_DIRS", "MESSAGE_DIRS", "PLACES", "KINDS", "HUGE", "NAMES", "JSONS", "REPLACEABLE",
           "CLI_VERBS", "API_STEPS", "VERBS", "coverage", "markdown", "main"]

#: the dropboxes of the fuzzed root: a queue with messages, a queue of foreign drops, a topic's
#: .incoming/ and a durable subscription
QUEUE_BOXES = ("q/incoming", "h/incoming")
TOPIC_BOXES = ("topic-root/t/.incoming", "topic-root/t/.subscriptions/s.c")

#: everything under dropboxmq/: registrations, checkpoint holds, Spark's stream manifests, and
#: one directory per transaction-log state (XA ones included, and 1.2's rolled-back/)
INTERNAL_DIRS = ("dropboxmq", "dropboxmq/clients", "dropboxmq/holds", "dropboxmq/removed", "dropboxmq/spark",
                 "dropboxmq/spark/streams", "dropboxmq/transaction") + tuple(
    f"dropboxmq/transaction/{d}" for d in sorted({*LOG_DIRS, *(s.value for s in LogState if s.value)}))

#: the directories where a regular file is a message: its body has no bound, and a receive, a
#: browse, a redrive or a distribution may read it whole
MESSAGE_DIRS = tuple(f"{box}/{state}" for box in QUEUE_BOXES + TOPIC_BOXES for state in STATE_DIRS)

#: every directory a hostile entry may be planted in ("" = the root itself)
PLACES: tuple[str, ...] = (
    MESSAGE_DIRS
    + ("", "q", "q/incoming", "h", "h/incoming", "topic-root", "topic-root/t", "topic-root/t/.incoming",
       "topic-root/t/.subscriptions", "topic-root/t/.subscriptions/s.c",
       "topic-root/t/.subscriptions/s.c/.consumers")
    + tuple(f"{box}/.claims" for box in QUEUE_BOXES + TOPIC_BOXES)  # each dropbox's claim register
    + INTERNAL_DIRS)

#: the kinds of entry planted (tests/test_hostile_fuzz.py: plant).  "huge": a sparse regular file
#: of HUGE bytes (a JSON shape, then zeros), planted only outside MESSAGE_DIRS: there a file is a
#: record (registration, lease, log, subscription record, claim register entry, hold, tally, Spark
#: manifest, the doctor's record) or a stray, and no verb may read more than a record's bound of it
KINDS = ("file", "junk-json", "dir", "fifo", "socket", "symlink-in", "symlink-out", "symlink-out-dir",
         "hardlink-in", "hardlink-out", "huge")

#: the size of a "huge" entry: far past any record the library reads (the doctor's: 1 MiB)
HUGE = 64 << 20

#: names chosen to hit edges: client ids in use, owner prefixes, '~', 255 bytes, undecodable bytes
NAMES: tuple[bytes, ...] = (
    b"c", b"fuzz", b"ghost", b"ghost~" + b"x" * 249, b"ghost~s~1", b"fuzz~s~1", b"c~s~1",
    b"4.ID%3Ahostile.x", b"ghost~4.ID%3Ahostile.x", b"c~4.ID%3Ahostile.x", b"\xff\xfe~" + b"y" * 200,
    b"caf\xe9", b"4." + "é".encode() * 126, b"4." + "é".encode() * 126 + b"x", b".subscription",
    b"recovery.lock", b"xa-0-00-0", b"target", b"s.c", b"q", b"~", b"%", b"+", b"invoice-42.xml",
    b"4.1700000000000000-0000000001.T", b"c~" + b"z" * 253,
    b"4.%2E%2E%2F%2E%2E%2Fvictim.T",  # an id that is a path
    b".dropboxmq-doctor.json", b"0.json",  # the doctor's record in the root, a Spark manifest
)

JSONS: tuple[bytes, ...] = (
    b"[1, 2]", b'{"kind": 5}', b'"durable"', b"{", b"", b"null", b"\xff\xfe",
    b'{"kind": "send", "box": "../outside/incoming", "name": "victim"}\n',
    b'{"kind": "receive", "box": "../outside/incoming", "name": "victim"}\n',
    b'{"kind": "send", "box": "q/incoming", "name": "../../../outside/incoming/working/victim"}\n',
    b'{"kind": "send", "box": "OUTSIDE", "name": "victim"}\n',
    b'{"kind": "receive", "box": "link/incoming", "name": "victim"}\n',
    b'{"kind": "send", "box": "q/inc',
    b'{"kind": "durable", "name": 1, "client_id": null, "topic": "t", "selector": null, "no_local": false}',
    b'{"kind": "durable", "name": "s", "client_id": "c", "topic": "t", "selector": "a LIKE \'%a%a%a%a%a%a%a%b\'",'
    b' "no_local": false}',
    b'{"kind": "durable", "name": "x", "client_id": "c", "topic": "t", "selector": "(((", "no_local": false}',
    b'{"xid": {"format_id": 1}}\n{"kind": "send", "box": "../outside/incoming", "name": "victim", '
    b'"parked": "victim", "final": "victim"}\n',
    b'{"xid": {"format_id": 0, "gtrid": "00", "bqual": "00"}, "owner": "ghost"}\n{"kind": "send", '
    b'"box": "../outside/incoming", "name": "victim", "parked": "victim", "final": "victim"}\n',
    b'{"checkpoint": "/nonexistent", "batches": [1, "x"]}',
)

#: whole-directory replacements: a state or internal directory that is a symlink out, or a file
REPLACEABLE = (
    "h/incoming/target", "h/incoming/working", "h/incoming/processing", "q/incoming/processed",
    "q/incoming/error", "q/incoming/expired", "topic-root/t/.subscriptions/s.c/processed",
    "topic-root/t/.incoming/target", "topic-root/t/.subscriptions/s.c/.subscription",
    "topic-root/t/.subscriptions/s.c/.consumers", "dropboxmq/clients", "dropboxmq/holds",
) + tuple(f"dropboxmq/transaction/{d}" for d in ("committing", "rolling-back", "unassociated", "prepared",
                                                 "associated"))

#: the CLI verbs tests/hostile_worker.py runs, by name -> arguments after --root
CLI_VERBS: dict[str, tuple[str, ...]] = {
    "stat": ("stat",), "stat --json": ("stat", "--json"), "stat --format prometheus": ("stat", "--format", "prometheus"), "browse": ("browse", "q"),
    "browse --json": ("browse", "h", "--json"), "browse --state error": ("browse", "h", "--state", "error"),
    "redrive": ("redrive", "h", "--limit", "3"), "xa list": ("xa", "list"), "audit": ("audit", "--json"),
    "recover": ("recover",), "recover --assume-unknown-dead": ("recover", "--assume-unknown-dead",
                                                               "--orphan-age", "0"),
    "distribute": ("distribute",), "publish": ("publish", "t", "from the CLI"),
    "init": ("init", "q", "h", "fresh"), "send --create": ("send", "h", "from the CLI", "--create"),
    "receive": ("receive", "h", "--count", "5", "--timeout", "0"),
    "receive --json": ("receive", "q", "-n", "0", "--json"),
    "receive --output-dir": ("receive", "h", "-n", "0", "--output-dir", "OUT"),
    "subscribe": ("subscribe", "t", "--durable", "s", "--client-id", "c", "-n", "0"),
    "unsubscribe": ("unsubscribe", "gone", "--client-id", "c"),
    "prune": ("prune", "--older-than", "0s", "--state", "processed,expired,error"),
    "purge": ("purge", "h", "--yes", "--state", "target", "--state", "error"),
}

#: the API entry points and background tasks it runs
API_STEPS = ("browse (API)", "recover (API)", "recover --assume-unknown-dead (API)", "distribute (API)",
             "publish (API)", "receive q (API)", "receive subscription (API)",
             "consumer background: recovery and retention (API)", "retention prune (API)",
             "connect as a planted client id (API)")

VERBS = tuple(CLI_VERBS) + API_STEPS


def coverage() -> dict[str, dict[str, int]]:
    """directory -> entry kind -> how many verbs run against a root holding that entry there.
    (The fuzzer plants any kind anywhere, but "huge" nowhere in MESSAGE_DIRS, and runs every verb
    on every root.)"""
    return {place or "(root)": {kind: 0 if kind == "huge" and place in MESSAGE_DIRS else len(VERBS) for kind in KINDS}
            for place in PLACES}


def markdown() -> str:
    table = coverage()
    total = sum(n for kinds in table.values() for n in kinds.values())
    lines = [f"{len(PLACES)} directories x {len(KINDS)} entry kinds x {len(VERBS)} verbs = "
             f"{total} combinations (each cell: verbs run; a huge file in a state directory is a message, "
             f"not planted), plus "
             f"{len(REPLACEABLE)} directories replaced whole (symlink out, file, FIFO), "
             f"{len(NAMES)} edge names (and random ones) and {len(JSONS)} JSON shapes.", "",
             "| directory | " + " | ".join(KINDS) + " |", "|---|" + "---:|" * len(KINDS)]
    for place, kinds in table.items():
        lines.append(f"| `{place}` | " + " | ".join(str(kinds[k]) for k in KINDS) + " |")
    lines += ["", "Verbs: " + ", ".join(f"`{v}`" for v in VERBS) + "."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dropboxmq_stress.hostile", description=__doc__.split("\n")[0])
    parser.add_argument("--markdown", action="store_true", help="the table for stress/README.md")
    args = parser.parse_args(argv)
    if args.markdown:
        print(markdown())
    else:
        print(f"{len(PLACES)} directories x {len(KINDS)} kinds x {len(VERBS)} verbs = "
              f"{sum(n for kinds in coverage().values() for n in kinds.values())}")
        for place in PLACES:
            print(place or "(root)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
