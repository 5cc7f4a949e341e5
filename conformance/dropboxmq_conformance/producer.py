"""The producer scenario: the implementation's ``produce`` command sends into an empty queue,
judged from the trace (enter by rename, no direct write, closed before the rename) and the files."""

from __future__ import annotations

import hashlib
from pathlib import Path

from dropboxmq.lifecycle import State

from dropboxmq_spec import grammar
from dropboxmq_spec.grammar import leaf, locate

from . import checks as C
from .checks import Result
from .harness import BOX, Scenario, box_dir, excerpt, exit_clean, listdir, make_layout, mid_of
from .manifest import Manifest



def producer_scenario(m: Manifest, out: Path, count: int = 6, priority: int = 7) -> tuple[list[Result], Scenario]:
    sc = Scenario("produce", out / "produce", m)
    bodies_dir = sc.dir / "bodies"
    bodies_dir.mkdir()
    bodies: list[bytes] = []
    for i in range(count):
        if i == 2:
            b = bytes(range(256)) * 4096  # 1 MiB: short writes and partial reads show here
        elif i == 4:
            b = b""
        else:
            b = f"message {i} from the conformance suite\n".encode() * (i + 1)
        bodies.append(b)
        (bodies_dir / f"body-{i:03d}").write_bytes(b)
    make_layout(sc.root)
    sc.watcher.start()
    res: list[Result] = []
    try:
        proc = sc.run("produce", "produce", body_dir=bodies_dir, count=count, priority=priority,
                      client_id="impl-producer")
        rc = proc.wait(m.timeout)
        sc.barrier()
    finally:
        sc.close()
    recs = sc.records
    res.append(exited := exit_clean("producer.exit-clean", proc, rc, m))
    clean = exited.status == C.PASS

    # enter-by-rename / no-direct-write / closed-before-rename, from the trace
    bad_enter, bad_write, bad_close = [], [], []
    last_close: dict[str, int] = {}
    renamed_at: dict[str, int] = {}
    for r in recs:
        op = r.get("op")
        if r.get("kind") == "dir":
            continue
        if op == "close_write":
            last_close[r["path"]] = r["seq"]
        if op in ("create", "close_write"):
            loc_dir = r["path"].rsplit("/", 2)
            if len(loc_dir) == 3 and loc_dir[0] == BOX and loc_dir[1] == "target":
                bad_write.append(r)
                if op == "create":
                    bad_enter.append(r)
        if op == "rename":
            d, s = locate(r["dst"]), locate(r["src"])
            if d is not None and d.box == BOX and d.state is State.NEW:
                if s is None or s.box != BOX or s.state is not State.NOT_COMMITTED:
                    bad_enter.append(r)
                else:
                    renamed_at[r["dst"]] = r["seq"]
                    if r["src"] not in last_close:
                        bad_close.append(r)
    for dst, seq in renamed_at.items():
        later = [r for r in recs if r.get("op") == "close_write" and r.get("path") == dst and r["seq"] > seq]
        bad_close.extend(later)
    n_sent = len(renamed_at)
    for cid, bad, ok_text, what in (
        ("producer.enter-by-rename", bad_enter, f"{n_sent} messages entered target/ by rename from working/",
         "entered target/ other than by a rename from working/"),
        ("producer.no-direct-write", bad_write, "no file was created or written in target/",
         "created or written directly in target/"),
        ("producer.closed-before-rename", bad_close, f"all {n_sent} files were closed in working/ before the rename",
         "renamed into target/ before being closed (or written after)"),
    ):
        if bad:
            res.append(C.failed(cid, f"{len(bad)} event(s) {what}", trace=excerpt(recs, [b["seq"] for b in bad]),
                                files=sorted({b.get("path") or b.get("dst") or "" for b in bad})[:10]))
        elif n_sent == 0 and cid != "producer.no-direct-write":
            res.append(C.inconclusive(cid, "the producer sent nothing"))
        else:
            res.append(C.passed(cid, ok_text))

    names = listdir(sc.root, "target", dot=True)
    bad_names = [n for n in names if n.startswith(".") or len(n.encode()) > 255
                 or grammar.parse(n) is None]
    ids = [mid_of(n) for n in names]
    dups = sorted({i for i in ids if ids.count(i) > 1})
    if bad_names or dups:
        res.append(C.failed("producer.names-decode", f"{len(bad_names)} unparseable name(s), {len(dups)} duplicate id(s)",
                            files=bad_names[:10] + dups[:10]))
    elif not names:
        res.append(C.inconclusive("producer.names-decode", "nothing in target/"))
    else:
        res.append(C.passed("producer.names-decode", f"{len(names)} names parse, ids unique"))

    res.extend(_id_order_results(recs))

    want = sorted(hashlib.sha256(b).hexdigest() for b in bodies)
    got = {}
    for n in names:
        p = box_dir(sc.root, "target") / n
        if p.is_file() and not p.is_symlink():
            got[n] = hashlib.sha256(p.read_bytes()).hexdigest()
    missing = sorted(set(want) - set(got.values()))
    extra = sorted(n for n, h in got.items() if h not in want)
    if sorted(got.values()) == want:
        res.append(C.passed("producer.bodies-complete", f"{count} bodies in target/, byte for byte (one of 1 MiB)"))
    else:
        res.append(C.failed("producer.bodies-complete",
                            f"expected {count} bodies, found {len(got)}; {len(missing)} missing, {len(extra)} not asked for",
                            files=extra[:10], text=f"missing body hashes: {missing[:5]}"))

    wrong = [n for n in names if not n.startswith(".") and grammar.priority_of(n) != priority]
    if wrong:
        res.append(C.failed("producer.metadata", f"{len(wrong)} message(s) without JMSPriority {priority}", files=wrong[:10]))
    elif names:
        res.append(C.passed("producer.metadata", f"every message has JMSPriority {priority}"))
    else:
        res.append(C.inconclusive("producer.metadata", "nothing in target/"))

    left = listdir(sc.root, "working", dot=True)
    if not clean:
        res.append(C.inconclusive("producer.working-clean", "the producer did not exit cleanly", files=left[:10]))
    elif left:
        res.append(C.failed("producer.working-clean", f"{len(left)} file(s) left in working/", files=left[:10]))
    else:
        res.append(C.passed("producer.working-clean", "working/ is empty"))
    for result in res:
        result.evidence.setdefault("scenario", sc.name)
    return res, sc


#: what a producer's ids look like when they keep order (N-5), for the report's "what to change"
EXPECTED_ID = ("<epochMillis><3-digit counter>-<digits>, e.g. 1700000000123000-0123456789 then "
               "1700000000123001-... for a second send in the same millisecond")


def _id_order_results(recs: list[dict]) -> list[Result]:
    """producer.ids-in-send-order (N-6) and producer.id-form (N-5), from the order of the
    producer's renames into target/ (its send order)."""
    sent = [leaf(r["dst"]) for r in recs if r.get("op") == "rename" and r.get("kind") != "dir"
            and (d := locate(r["dst"])) is not None and d.box == BOX and d.state is State.NEW
            and (s := locate(r["src"])) is not None and s.state is State.NOT_COMMITTED]
    if len(sent) < 2:
        why = "fewer than two sends: no order to judge"
        return [C.inconclusive("producer.ids-in-send-order", why), C.inconclusive("producer.id-form", why)]
    res = []
    inverted = [(a, b) for a, b in zip(sent, sent[1:], strict=False)
                if grammar.priority_of(a) == grammar.priority_of(b) and grammar.order_key(b) <= grammar.order_key(a)]
    if inverted:
        a, b = inverted[0]
        res.append(C.failed("producer.ids-in-send-order",
                            f"{len(inverted)} of {len(sent) - 1} consecutive sends sort before the message sent "
                            f"before them: a consumer delivers them out of send order. Expected ids: {EXPECTED_ID}",
                            files=[a, b], text="send order: " + ", ".join(sent)))
    else:
        res.append(C.passed("producer.ids-in-send-order", f"the {len(sent)} names sort in send order"))
    foreign = [n for n in sent if not grammar.has_ordered_id(n)]
    if foreign:
        res.append(C.failed("producer.id-form", f"{len(foreign)} of {len(sent)} ids are not of the form {EXPECTED_ID}",
                            files=foreign[:10]))
    else:
        res.append(C.passed("producer.id-form", f"all {len(sent)} ids have the <epochMillis><counter>-<digits> form"))
    return res
