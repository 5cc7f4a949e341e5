"""The hostile-root fuzzer (issue 15): roots holding random hostile entries in every directory
-- FIFOs, sockets, symlinks into and out of the root, directories where files belong, junk and
wrong-shaped JSON, logs naming ``../`` paths, non-UTF-8 and 255-byte names, hard links --
then every verb and API entry point runs against them (tests/hostile_worker.py, in a child
process with a time bound).  Each must finish, raise only documented errors, leave every file
outside the root as it was (checksummed, and nothing added), lose no valid message, and stay
within a bound of what it reads and holds (a growth defect: a record read whole, however big).

Growth.  Entry kind "huge" is a sparse file of ``HUGE`` (64 MiB) bytes, a JSON shape and then
zeros, costing no disk.  Where it goes: not in a dropbox's state directories (hostile.MESSAGE_DIRS),
where a regular file is a message and PROTOCOL.md bounds no body -- a receive, browse, redrive or
distribution reads it whole, rightly.  Everywhere else a file is a record or a stray: the doctor's
record, registrations and their leases, transaction and XA logs, subscription records, claim
register entries, checkpoint holds, removal tallies (and Spark manifests, which no step here
reads).  The library reads a record through store.read_record (at most RECORD_LIMIT, 1 MiB, + 1
bytes), a log or a tally through transaction.read_lines (to the first line past LINE_LIMIT,
64 KiB), a lease through leases.read_from (4 KiB).  So, per step (each verb and entry point:
tests/hostile_worker.py measures), the bytes the process reads
(/proc/self/io rchar) stay within ``READ_BOUND`` (8 MiB: a verb's first-use imports and listings
read a few hundred KiB, and a step reads a few capped records, 1 MiB + 1 each: the doctor's record
at each of its connects, a hold) plus twice what the step delivers (bodies received or
browsed, CLI output, files written: each read once, and a step may look at a body twice), and its
resident memory's peak within ``PEAK_BOUND`` (16 MiB: first-use imports grow it ~4 MiB) plus four
times that (a body, its decoded and its printed copies).  A huge record read whole breaks both by
64 MiB.

Profiles: ``short`` (default, part of ``make test``: a few dozen derandomized examples) and
``long`` (``DROPBOXMQ_FUZZ_PROFILE=long``, run by ``make stress``: many random examples)."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dropboxmq import codec
from dropboxmq.making import ensure_dropbox
from dropboxmq.message import Queue, TextMessage, Topic
from dropboxmq.connection import Connection, Settings
from dropboxmq.lifecycle import STATE_DIRS
from dropboxmq.store import Dropbox
from dropboxmq_stress import hostile
from dropboxmq_stress.hostile import HUGE, INTERNAL_DIRS, JSONS, KINDS, MESSAGE_DIRS, NAMES, PLACES, REPLACEABLE

FAST = Settings(poll_interval=0.005, scan_interval=0.01, recovery_interval=0.05)
WORKER = Path(__file__).with_name("hostile_worker.py")
#: every verb and entry point together finish in a few seconds; more than this is a hang
BOUND = 120
#: per step: bytes read and resident memory's peak growth, beyond what it delivers (docstring)
READ_BOUND = 8 << 20
PEAK_BOUND = 16 << 20

settings.register_profile("hostile-short", max_examples=12, deadline=None, derandomize=True, database=None,
                          suppress_health_check=list(HealthCheck))
settings.register_profile("hostile-long", max_examples=400, deadline=None, database=None,
                          suppress_health_check=list(HealthCheck))
PROFILE = "hostile-" + os.environ.get("DROPBOXMQ_FUZZ_PROFILE", "short")

STATES = STATE_DIRS
names = st.one_of(st.sampled_from(NAMES),
                  st.binary(min_size=1, max_size=255).filter(lambda b: b"/" not in b and b"\0" not in b
                                                             and b not in (b".", b"..")))
plants = st.lists(st.tuples(st.sampled_from(PLACES), names, st.sampled_from(KINDS), st.sampled_from(JSONS),
                            st.binary(max_size=64)), min_size=1, max_size=10)
replacements = st.lists(st.tuples(st.sampled_from(REPLACEABLE), st.sampled_from(("symlink-out", "file", "fifo"))),
                        max_size=2, unique_by=lambda t: t[0])


def build(base: Path) -> tuple[Path, Path, set[str]]:
    """A root with valid messages (their ids returned) and, beside it, files it must not touch."""
    root, outside = base / "root", base / "outside"
    ensure_dropbox(Dropbox(outside / "incoming"))
    for s in STATES:
        (outside / "incoming" / s / "victim").write_bytes(b"outside " + s.encode())
        (outside / "incoming" / s / "c~victim").write_bytes(b"outside " + s.encode())
    (outside / "secret").write_bytes(b"do not touch")
    valid: set[str] = set()
    with Connection(root, client_id="c", settings=FAST, create=True) as conn:
        session = conn.create_session()
        session.create_durable_consumer(Topic("t"), "s").close()
        for dest in (Queue("q"), Queue("q"), Queue("q"), Topic("t"), Topic("t")):
            msg = TextMessage(body=b"valid")
            session.create_producer(dest).send(msg)
            valid.add(msg.message_id)
    ensure_dropbox(Dropbox(root / "h" / "incoming"))
    ensure_dropbox(Dropbox(root / "topic-root" / "t" / ".incoming"))
    (root / "h" / "incoming" / "target" / "4.ID%3Aforeign.x").write_bytes(b"foreign")
    for d in INTERNAL_DIRS:
        os.makedirs(root / d, exist_ok=True)
    os.makedirs(root / "topic-root" / "t" / ".subscriptions" / "s.c" / ".consumers", exist_ok=True)
    return root, outside, valid


def plant(root: Path, outside: Path, place: str, name: bytes, kind: str, json_text: bytes, junk: bytes) -> None:
    d = os.path.join(os.fsencode(root), os.fsencode(place)) if place else os.fsencode(root)
    if not os.path.isdir(d):
        return
    path = os.path.join(d, name)
    if os.path.lexists(path):
        return  # never replace a valid file: that would be our loss, not the library's
    some_message = next(iter(sorted((root / "q" / "incoming" / "target").iterdir())), None)
    json_text = json_text.replace(b"OUTSIDE", os.fsencode(outside / "incoming"))
    try:
        if kind == "fifo":
            os.mkfifo(path)
        elif kind == "socket":
            with tempfile.TemporaryDirectory() as tmp:  # sun_path is short: bind nearby, then move
                s = socket.socket(socket.AF_UNIX)
                s.bind(os.path.join(tmp, "s"))
                s.close()
                os.rename(os.path.join(tmp, "s"), path)
        elif kind == "symlink-in":
            os.symlink(some_message or root, path)
        elif kind == "symlink-out":
            os.symlink(outside / "secret", path)
        elif kind == "symlink-out-dir":
            os.symlink(outside / "incoming", path)
        elif kind == "dir":
            os.mkdir(path)
            with open(os.path.join(path, b"inner"), "wb") as f:
                f.write(junk)
        elif kind == "file":
            with open(path, "wb") as f:
                f.write(junk)
        elif kind == "junk-json":
            with open(path, "wb") as f:
                f.write(json_text)
        elif kind == "hardlink-in" and some_message is not None:
            os.link(some_message, path)
        elif kind == "hardlink-out":
            os.link(outside / "incoming" / "working" / "victim", path)
        elif kind == "huge" and place not in MESSAGE_DIRS:  # (there a file is a message: no bound)
            plant_huge(path, json_text)
    except OSError:
        pass  # e.g. a name the file system refuses: no entry planted


def plant_huge(path: bytes | Path, head: bytes = b"") -> None:
    """A sparse file of HUGE bytes: ``head`` (a record's shape) and then zeros, no disk used."""
    with open(path, "wb") as f:
        f.write(head)
        os.truncate(f.fileno(), HUGE)


def replace(root: Path, outside: Path, rel: str, kind: str) -> None:
    path = root / rel
    if path.is_dir() and not path.is_symlink():
        for child in sorted(path.rglob("*"), reverse=True):
            child.rmdir() if child.is_dir() and not child.is_symlink() else child.unlink()
        path.rmdir()
    elif path.exists() or path.is_symlink():
        path.unlink()
    if kind == "symlink-out":
        os.symlink(outside / "incoming" / "target" if "incoming" in rel else outside, path)
    elif kind == "file":
        path.write_bytes(b"not a directory")
    else:
        os.mkfifo(path)


def digest(path: Path) -> dict[str, str]:
    """Every entry under ``path`` (not following links) with its content's checksum."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(path):
        for n in dirnames + filenames:
            p = os.path.join(dirpath, n)
            st_ = os.lstat(p)
            key = os.path.relpath(p, path)
            if os.path.isfile(p) and not os.path.islink(p):
                with open(p, "rb") as f:
                    out[key] = hashlib.sha256(f.read()).hexdigest()
            else:
                out[key] = oct(st_.st_mode)
    return out


def run_worker(base: Path, what: str) -> dict:
    """Every verb and entry point against ``base``/root (tests/hostile_worker.py): its report."""
    try:
        # receive --output-dir writes two levels down: an id holding ../../ would show beside "out"
        done = subprocess.run([sys.executable, str(WORKER), str(base / "root"), str(base / "spool" / "in" / "out")],
                              capture_output=True, timeout=BOUND)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"a verb hung (over {BOUND} s) {what}") from None
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]
    return json.loads(done.stdout)


def overgrown(report: dict) -> list[str]:
    """The steps past the growth bound (module docstring), one line each: step, bytes read, peak."""
    return [f"{s['step']!r} read {s['read']:,} bytes (bound {READ_BOUND:,} + 2 x {s['delivered']:,} delivered), "
            f"memory peak +{s['peak']:,} bytes (bound {PEAK_BOUND:,} + 4 x delivered)"
            for s in report["steps"]
            if s["read"] > READ_BOUND + 2 * s["delivered"] or s["peak"] > PEAK_BOUND + 4 * s["delivered"]]


def names_under(root: Path) -> list[str]:
    return [n for _, dirs, files in os.walk(root) for n in dirs + files]


@settings(settings.get_profile(PROFILE))
@given(plants=plants, replacements=replacements)
def test_hostile_root(plants, replacements):
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        root, outside, valid = build(base)
        os.symlink(outside, root / "link")
        os.makedirs(base / "spool" / "in" / "out")
        for p in plants:
            plant(root, outside, *p)
        for rel, kind in replacements:
            replace(root, outside, rel, kind)
        before = digest(outside)
        report = run_worker(base, f"with plants {plants} {replacements}")
        undocumented = [e for e in report["errors"] if not e["documented"]]
        assert not undocumented, json.dumps(undocumented, indent=1)[:6000]
        assert not overgrown(report), "\n".join(overgrown(report))
        assert digest(outside) == before, "a file outside the root changed"
        assert sorted(os.listdir(base)) == ["outside", "root", "spool"], f"files beside the root: {os.listdir(base)}"
        assert os.listdir(base / "spool") == ["in"] and os.listdir(base / "spool" / "in") == ["out"], \
            "receive --output-dir wrote outside its directory"
        received = set(report["received"])
        left = "\n".join(names_under(root))
        lost = [i for i in valid if i not in received and codec.encode_field(i.removeprefix("ID:")) not in left]
        assert not lost, f"valid messages lost: {lost}"


def test_the_fuzzer_plants_into_every_directory_the_library_makes(tmp_path):
    """The places come from the layout's definitions: a root the library has made every kind of
    directory in (queues, topics, .incoming/, subscriptions and their consumers, registrations,
    checkpoint holds, every transaction-log state, XA's) has none the fuzzer leaves out."""
    from dropboxmq.liveness import hold_for_checkpoint
    from dropboxmq_xa import create_xa_session

    root, _, _ = build(tmp_path)
    with Connection(root, client_id="c", settings=FAST, create=True) as conn:
        consumer = conn.create_session().create_durable_consumer(Topic("t"), "s")  # .consumers/ in use
        create_xa_session(conn)
        hold_for_checkpoint(root, "spark-x", str(tmp_path / "checkpoint"))
        made = {os.path.relpath(d, root) for d, _, _ in os.walk(root)} - {"."}
        consumer.close()
    assert made - set(PLACES) == set()
    assert {"dropboxmq/transaction/xa-rolling-back", "dropboxmq/holds", "dropboxmq/transaction/committed",
            "topic-root/t/.subscriptions/s.c/.consumers"} <= set(PLACES)


def test_the_coverage_table_in_stress_readme_is_the_computed_one():
    from dropboxmq_stress.hostile import markdown

    readme = Path(__file__).resolve().parent.parent / "stress" / "README.md"
    assert markdown() in readme.read_text(encoding="utf-8"), \
        "regenerate it: python -m dropboxmq_stress.hostile --markdown"


#: each record the library reads by name, as a huge file headed by a valid record of its shape
#: (the reader must stop, not parse its way through): place -> head.  "INODE": the inode of a
#: message in q/incoming/target/, which the claim register names its entries by.
HUGE_RECORDS = {
    ".dropboxmq-doctor.json": b'{"fs_type": "ext4", "level": "supported", "reasons": [], "notes": []}',
    "topic-root/t/.subscriptions/s.c/.subscription":
        b'{"kind": "durable", "name": "s", "client_id": "c", "topic": "t", "selector": null, "no_local": false}',
    "q/incoming/.claims/INODE": b'{"name": "x", "size": 5, "count": 1}',
    "dropboxmq/holds/ghost": b"/nonexistent/checkpoint",
    "dropboxmq/clients/ghost": b"pid=1 host=elsewhere lease=30 beat=0\n",
    "dropboxmq/transaction/committing/ghost~s~1": b'{"kind": "send", "box": "q/incoming", "name": "x"}\n',
    "dropboxmq/transaction/prepared/xa-0-00-0":
        b'{"xid": {"format_id": 0, "gtrid": "00", "bqual": "00"}, "owner": "ghost", "pid": 1, "host": "h"}\n',
    "dropboxmq/removed/q": b"error 1\n",
}


def test_no_step_reads_a_huge_record_whole(tmp_path):
    """Regression (a derandomized example of kind "huge"): with every record the library reads by
    name planted huge, no verb reads or holds more than the growth bound.  Failed, naming steps and
    bytes, while the doctor's record (filesystems.verdict_for: every connect), a subscription
    record (publish, subscribe, recover), a claim register entry (receive), a checkpoint hold
    (connect), a transaction log (audit, recover), an XA log (xa list, recover) and a removal
    tally (stat --format prometheus) were read whole."""
    root, _, _ = build(tmp_path)
    os.makedirs(tmp_path / "spool" / "in" / "out")
    inode = str(sorted((root / "q" / "incoming" / "target").iterdir())[0].stat().st_ino)
    for rel, head in HUGE_RECORDS.items():
        path = root / rel.replace("INODE", inode)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        plant_huge(path, head)
    report = run_worker(tmp_path, "with every record huge")
    assert not overgrown(report), "steps read or held a huge record whole:\n" + "\n".join(overgrown(report))
    assert not [e for e in report["errors"] if not e["documented"]]
    assert len(report["steps"]) == len(hostile.VERBS) + 1  # (stat runs first and last)
