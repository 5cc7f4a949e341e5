"""Consume-and-insert: two-phase commit vs the idempotent consumer, measured.

    python -m dropboxmq_stress.xa_bench [--messages 500] [--dsn DSN] [--dir DIR] [--json]

Each transaction receives one message from a dropbox queue and inserts one row
into PostgreSQL.  Two ways to make that "exactly once":

* ``2pc``: an XA dropbox session and a psycopg connection driven by
  ``coordinator.Coordinator`` -- tpc_begin both, receive, INSERT, prepare both
  (dropbox: prepared log + parked files fsynced; PostgreSQL: PREPARE
  TRANSACTION), the decision file fsynced, commit both, forget.
* ``idempotent``: a CLIENT_ACKNOWLEDGE session -- receive, ``INSERT ... ON
  CONFLICT (msg_id) DO NOTHING`` with the message id as the primary key,
  COMMIT the database, then ``acknowledge()``.  A crash between the commit and
  the ack redelivers the message and the insert is a no-op.

Without ``--dsn`` a private PostgreSQL server is started for the run (the
helper the test suite uses too, ``dropboxmq_stress.pg_server``: needs the Debian
postgresql package) with fsync on, so both variants pay real
durability.  The dropbox root lives in ``--dir`` (default: a temporary
directory under the current directory, i.e. the same disk as the project).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import dropboxmq_xa as xa
from dropboxmq_xa.coordinator import Coordinator
from dropboxmq.extras import require_or_exit
from dropboxmq.message import Queue, TextMessage
from dropboxmq.ackmode import CLIENT_ACKNOWLEDGE
from dropboxmq.connection import Connection, Settings

from .pg_server import PgServer

Q = Queue("bench")
SETTINGS = Settings(poll_interval=0.005, scan_interval=0.05, recovery_interval=5.0)


def _fill(root: Path, n: int) -> None:
    with Connection(root, settings=SETTINGS, create=True) as c:
        p = c.create_session().create_producer(Q)
        p.send_many([p.session.create_text_message(f"body {i}") for i in range(n)])


def run_2pc(root: Path, dsn: str, n: int, table: str, tm_dir: Path) -> list[float]:
    import psycopg

    lat = []
    with Connection(root, settings=SETTINGS, create=True) as conn, psycopg.connect(dsn) as pg, \
            Coordinator(tm_dir, "bench") as coord:
        session = xa.create_xa_session(conn)
        consumer = session.create_consumer(Q)
        resources = {"mq": session, "db": pg}
        for _ in range(n):
            t0 = time.perf_counter()
            tx = coord.begin(resources)
            msg = consumer.receive(1)
            assert msg is not None
            pg.execute(f"INSERT INTO {table} (msg_id, body) VALUES (%s, %s)", (msg.message_id, msg.text))
            coord.commit(tx)
            lat.append(time.perf_counter() - t0)
    return lat


def run_idempotent(root: Path, dsn: str, n: int, table: str) -> list[float]:
    import psycopg

    lat = []
    with Connection(root, settings=SETTINGS, create=True) as conn, psycopg.connect(dsn) as pg:
        session = conn.create_session(ack_mode=CLIENT_ACKNOWLEDGE)
        consumer = session.create_consumer(Q)
        for _ in range(n):
            t0 = time.perf_counter()
            msg = consumer.receive(1)
            assert isinstance(msg, TextMessage)
            pg.execute(f"INSERT INTO {table} (msg_id, body) VALUES (%s, %s) ON CONFLICT (msg_id) DO NOTHING",
                       (msg.message_id, msg.text))
            pg.commit()
            session.acknowledge()
            lat.append(time.perf_counter() - t0)
    return lat


def _summary(name: str, lat: list[float]) -> dict:
    total = sum(lat)
    s = sorted(lat)
    return {"variant": name, "transactions": len(lat), "tx_per_s": round(len(lat) / total, 1),
            "ms_per_tx_mean": round(1000 * statistics.fmean(lat), 2),
            "ms_p50": round(1000 * s[len(s) // 2], 2), "ms_p99": round(1000 * s[int(len(s) * 0.99) - 1], 2)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=2, help="alternate the variants this many times")
    ap.add_argument("--dsn", help="PostgreSQL to use (default: start a private server)")
    ap.add_argument("--dir", type=Path, default=None, help="where the dropbox roots go")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    require_or_exit("python -m dropboxmq_stress.xa_bench", "bench", "psycopg")
    import psycopg

    server = None
    dsn = args.dsn
    if dsn is None:
        server = PgServer(max_prepared=20).start()
        dsn = server.dsn
    base = Path(tempfile.mkdtemp(prefix="xa-bench-", dir=args.dir or Path.cwd()))
    results: dict[str, list[float]] = {"2pc": [], "idempotent": []}
    try:
        for r in range(args.rounds):
            for variant in ("2pc", "idempotent"):
                table = f"xa_bench_{variant}_{uuid.uuid4().hex[:8]}"
                with psycopg.connect(dsn, autocommit=True) as c:
                    pk = "PRIMARY KEY" if variant == "idempotent" else ""
                    c.execute(f"CREATE TABLE {table} (msg_id text NOT NULL {pk}, body text)")
                root = base / f"{variant}-{r}"
                _fill(root, args.messages)
                if variant == "2pc":
                    lat = run_2pc(root, dsn, args.messages, table, base / f"tm-{r}")
                else:
                    lat = run_idempotent(root, dsn, args.messages, table)
                results[variant].extend(lat)
                with psycopg.connect(dsn, autocommit=True) as c:
                    row = c.execute(f"SELECT count(*) FROM {table}").fetchone()
                    got = row[0] if row else 0
                    c.execute(f"DROP TABLE {table}")
                assert got == args.messages, (variant, got)
    finally:
        shutil.rmtree(base, ignore_errors=True)
        if server is not None:
            server.stop()
    out = [_summary(k, v) for k, v in results.items()]
    ratio = out[0]["ms_per_tx_mean"] / out[1]["ms_per_tx_mean"]
    if args.json:
        print(json.dumps({"results": out, "2pc_cost_ratio": round(ratio, 2)}))
    else:
        print(f"consume-and-insert, {args.messages} messages x {args.rounds} rounds, one worker, "
              f"fsync on ({os.uname().sysname}, {os.cpu_count()} cpus)")
        for o in out:
            print(f"  {o['variant']:<11} {o['tx_per_s']:>8.1f} tx/s  {o['ms_per_tx_mean']:>7.2f} ms/tx "
                  f"(p50 {o['ms_p50']} ms, p99 {o['ms_p99']} ms)")
        print(f"  two-phase commit costs {ratio:.1f}x the idempotent consumer per transaction")
    return 0


if __name__ == "__main__":
    sys.exit(main())
