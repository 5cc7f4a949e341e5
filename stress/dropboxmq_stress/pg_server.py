"""A throw-away PostgreSQL server for the two-phase-commit tests and the XA benchmark
(dropboxmq_stress.xa_bench), so it ships with the stress package.

``initdb`` + ``pg_ctl start`` in a private temporary directory: TCP on
127.0.0.1 only, on a free port, the unix socket in the same directory,
``max_prepared_transactions`` > 0, trust authentication for the local
superuser ``postgres``.  The server binaries come from ``$PG_BIN``, else
``PATH``, else Debian's ``/usr/lib/postgresql/<newest>/bin`` (``make
system-deps`` installs the ``postgresql`` package).

initdb refuses to run as root (CI runs as root): then the data directory is
created under /tmp (pytest's own temp tree is 0700 root, not traversable by
another user), chowned to an unprivileged account -- ``postgres`` (created by
the Debian package), else ``nobody`` -- and initdb / pg_ctl run as that user
through ``runuser`` (util-linux), falling back to ``setpriv`` or a plain
``preexec_fn`` setuid.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path


class PgUnavailable(RuntimeError):
    pass


def find_bin_dir() -> Path:
    env = os.environ.get("PG_BIN")
    if env and (Path(env) / "initdb").exists():
        return Path(env)
    initdb = shutil.which("initdb")
    if initdb:
        return Path(os.path.realpath(initdb)).parent
    cands = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(Path(p).parent.parent.name) if Path(p).parent.parent.name.isdigit() else 0)
    if cands:
        return Path(cands[-1]).parent
    raise PgUnavailable("PostgreSQL server binaries (initdb, pg_ctl) not found: install the Debian "
                        "package 'postgresql' (make system-deps) or set PG_BIN")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _unprivileged_user() -> pwd.struct_passwd | None:
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    raise PgUnavailable("running as root and no unprivileged 'postgres' or 'nobody' user for initdb")


class PgServer:
    """One server.  ``start()`` / ``stop()``; ``dsn`` for psycopg."""

    def __init__(self, base: Path | None = None, max_prepared: int = 100, fsync: bool = True,
                 max_connections: int = 100):
        self.bin = find_bin_dir()
        self.user = _unprivileged_user()
        if self.user is not None or base is None:
            # /tmp is world-traversable; pytest's tmp tree is not (0700, root).
            self.base = Path(tempfile.mkdtemp(prefix="dmq-pg-"))
        else:
            self.base = Path(base)
            self.base.mkdir(parents=True, exist_ok=True)
        self.data = self.base / "data"
        self.sock = self.base / "sock"
        self.logfile = self.base / "server.log"
        self.max_prepared = max_prepared
        self.max_connections = max_connections
        self.fsync = fsync
        self.port = 0
        self._started = False

    @property
    def dsn(self) -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres connect_timeout=10"

    def _run(self, args: list[str], check: bool = True) -> subprocess.CompletedProcess:
        cmd = [str(self.bin / args[0])] + args[1:]
        env = dict(os.environ, LC_ALL="C", LANG="C")
        kw: dict = dict(capture_output=True, text=True, env=env, cwd=str(self.base), timeout=120)
        if self.user is not None:
            if shutil.which("runuser"):
                cmd = ["runuser", "-u", self.user.pw_name, "--"] + cmd
            elif shutil.which("setpriv"):
                cmd = ["setpriv", f"--reuid={self.user.pw_uid}", f"--regid={self.user.pw_gid}",
                       "--clear-groups"] + cmd
            else:
                uid, gid = self.user.pw_uid, self.user.pw_gid

                def demote() -> None:  # pragma: no cover - only without util-linux
                    os.setgroups([])
                    os.setgid(gid)
                    os.setuid(uid)

                kw["preexec_fn"] = demote
            env["HOME"] = str(self.base)
        res = subprocess.run(cmd, **kw)
        if check and res.returncode != 0:
            log = self.logfile.read_text(errors="replace")[-3000:] if self.logfile.exists() else ""
            raise PgUnavailable(f"{' '.join(cmd)} failed ({res.returncode}):\n{res.stdout}\n{res.stderr}\n{log}")
        return res

    def start(self) -> "PgServer":
        self.sock.mkdir(exist_ok=True)
        if self.user is not None:
            for p in (self.base, self.sock):
                os.chown(p, self.user.pw_uid, self.user.pw_gid)
            os.chmod(self.base, 0o755)
        self._run(["initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
                   "-N"])  # -N: no fsync of the fresh cluster (it is throw-away); much faster
        for _ in range(5):
            self.port = free_port()
            opts = (f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.sock} "
                    f"-c max_prepared_transactions={self.max_prepared} "
                    f"-c max_connections={self.max_connections} -c fsync={'on' if self.fsync else 'off'} "
                    f"-c shared_buffers=32MB -c logging_collector=off")
            res = self._run(["pg_ctl", "-D", str(self.data), "-l", str(self.logfile), "-o", opts,
                             "-w", "-t", "60", "start"], check=False)
            if res.returncode == 0:
                self._started = True
                return self
            # the port may have been taken between free_port() and the bind: try another
            self._run(["pg_ctl", "-D", str(self.data), "-m", "immediate", "stop"], check=False)
        log = self.logfile.read_text(errors="replace")[-3000:] if self.logfile.exists() else ""
        raise PgUnavailable(f"pg_ctl start failed: {res.stdout}\n{res.stderr}\n{log}")

    def stop(self) -> None:
        if self._started:
            self._run(["pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "-t", "60", "stop"], check=False)
            self._started = False
        shutil.rmtree(self.base, ignore_errors=True)

    def __enter__(self) -> "PgServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
