"""Real network file systems on loopback: one export, two client mounts playing two hosts.

Each context manager (:func:`moosefs`, :func:`glusterfs`, :func:`sshfs`, :func:`smbnetfs`,
or :func:`start` by name) starts the server daemons and two FUSE client mounts under a
temporary directory, yields a :class:`NetFS` whose ``mounts`` are the two paths of the
*same* directory, and on exit unmounts both and stops every process it started, by pid,
even after a failure.  Every daemon listens on and is reached through 127.0.0.0/8 only.
The measured setups are in ``/work/shared/network-filesystems.md`` and issue 28.

Ports: sshd and MooseFS use free ports chosen at run time.  Two daemons have a fixed
port: glusterd (24007, the CLI and the client's volfile fetch assume it) and smbd (445,
libsmbclient behind smbnetfs dials it).  Runs of those two are serialised across
processes with a file lock (``/run/lock/dropboxmq-netfs-<kind>.lock``), so parallel test
workers wait for one another instead of fighting over the port.

Faults: :meth:`NetFS.kill_server` / :meth:`NetFS.restart_server` (SIGKILL the server
process: MooseFS chunkserver or master, glusterfsd brick, sshd's per-connection child,
smbd) and, for sshfs, :meth:`NetFS.cut` (SIGKILL the ``ssh`` client under one sshfs mount:
a network cut that ``-o reconnect`` heals).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

KINDS = ("moosefs", "glusterfs", "sshfs", "smbnetfs")

# Debian packages and the executables that prove them installed.
PACKAGES = {
    "moosefs": ("moosefs-master moosefs-chunkserver moosefs-client", ("mfsmaster", "mfschunkserver", "mfsmount")),
    "glusterfs": ("glusterfs-server glusterfs-client", ("glusterd", "gluster", "glusterfs")),
    "sshfs": ("sshfs openssh-server openssh-client", ("sshfs", "/usr/sbin/sshd", "ssh", "ssh-keygen")),
    "smbnetfs": ("samba smbnetfs", ("smbd", "smbnetfs")),
}

STARTUP_TIMEOUT = 30.0
LOCK_DIR = Path("/run/lock")


class NetFSError(RuntimeError):
    """A daemon or mount did not come up (the message says which and shows its log tail)."""


def unavailable(kind: str) -> str | None:
    """Why ``kind`` cannot be started here (a skip reason), or None when it can."""
    if kind not in KINDS:
        return f"unknown network file system {kind!r} (one of {', '.join(KINDS)})"
    if os.geteuid() != 0:
        return "not root: mounting FUSE file systems with allow_other and starting daemons needs root"
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse is missing: FUSE is unavailable on this machine"
    pkgs, exes = PACKAGES[kind]
    missing = [e for e in exes if shutil.which(e) is None]
    if missing:
        return f"{', '.join(missing)} not installed (Debian: {pkgs}; `make system-deps`)"
    return None


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the daemon binds it a moment later)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(what: str, cond: Callable[[], bool], timeout: float = STARTUP_TIMEOUT, log: Path | None = None) -> None:
    """Poll ``cond`` until true; a daemon's readiness has no other signal we can wait on."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.05)
    tail = ""
    if log is not None and log.exists():
        tail = " | " + " | ".join(log.read_text(errors="replace").splitlines()[-8:])
    raise NetFSError(f"{what}: not ready after {timeout:.0f} s{tail}")


def _run(*cmd: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise NetFSError(f"{' '.join(cmd)}: exit {r.returncode}: {(r.stderr or r.stdout).strip()}")
    return r


def _stop(proc: subprocess.Popen[bytes] | None, grace: float = 5.0) -> None:
    """SIGTERM, then SIGKILL after ``grace`` seconds; then SIGKILL what is left of its process
    group (smbd's and smbnetfs's workers): each daemon was started in a session of its own,
    so the group id is its pid and holds only what it forked."""
    if proc is None:
        return
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait(5)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def _kill9(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _unmount(path: Path) -> None:
    """Unmount ``path``; lazily when busy or when its FUSE daemon is gone (ENOTCONN)."""
    if not os.path.ismount(path) and not _in_mountinfo(path):
        return
    r = _run("umount", str(path), check=False)
    if r.returncode != 0:
        _run("umount", "-l", str(path), check=False)


def _in_mountinfo(path: Path) -> bool:
    target = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == target for line in f)


def _is_fuse_mount(path: Path) -> bool:
    target = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        for line in f:
            parts = line.split()
            if parts[4] == target:
                return parts[parts.index("-") + 1].startswith("fuse")
    return False


def _children(pid: int) -> list[int]:
    """Children of every thread of ``pid`` (sshfs forks its ssh from a worker thread)."""
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            out.extend(int(x) for x in (task / "children").read_text().split())
    return out


def _descendants(pid: int) -> list[int]:
    out: list[int] = []
    todo = _children(pid)
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(_children(p))
    return out


def _group(pgid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                # field 5 of stat is the pgid; the comm field (2) may hold spaces: split after ")"
                if int((d / "stat").read_text().rsplit(")", 1)[1].split()[2]) == pgid:
                    out.append(int(d.name))
    return out


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except FileNotFoundError:
        return ""


@contextlib.contextmanager
def _port_lock(kind: str) -> Iterator[None]:
    """Serialise the file systems whose daemon has a fixed port, across processes."""
    LOCK_DIR.mkdir(parents=True, exist_ok=True)
    with open(LOCK_DIR / f"dropboxmq-netfs-{kind}.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@dataclass
class NetFS:
    """Two mounts of one export, the processes behind them, and the faults we can inject."""

    kind: str
    work: Path
    mounts: tuple[Path, Path] = (Path(), Path())
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    logs: Path = Path()
    # server name -> (SIGKILL it, start it again and wait until it serves); the first is the default
    servers: dict[str, tuple[Callable[[], None], Callable[[], None]]] = field(default_factory=dict)
    _mount: Callable[[int], None] | None = None
    mount_points: tuple[Path, Path] = (Path(), Path())
    #: the exported directory on the server's local disk, where the test can see it (sshfs)
    export: Path | None = None

    def kill_server(self, name: str | None = None) -> None:
        """SIGKILL a server process (default: the first of :attr:`servers`; MooseFS: chunkserver, master)."""
        self.servers[name or next(iter(self.servers))][0]()

    def restart_server(self, name: str | None = None) -> None:
        """Start the server process again after :meth:`kill_server` and wait until it serves."""
        self.servers[name or next(iter(self.servers))][1]()

    def cut(self, i: int) -> int:
        """Network cut of mount ``i`` (sshfs): SIGKILL its ``ssh`` client; ``reconnect`` heals it.

        Returns the pid killed."""
        if self.kind != "sshfs":
            raise NetFSError(f"cut is only meaningful for sshfs (not {self.kind})")
        proc = self.procs[f"client{i}"]
        # sshfs double-forks its ssh (parent: init) but it stays in sshfs's process group
        ssh = [p for p in _group(proc.pid) if _comm(p) == "ssh"]
        if not ssh:
            raise NetFSError(f"no ssh client under sshfs pid {proc.pid}")
        _kill9(ssh[0])
        return ssh[0]

    def kill_client(self, i: int) -> None:
        """SIGKILL the FUSE client daemon of mount ``i``: that host's mount is gone (ENOTCONN)."""
        _kill9(self.procs[f"client{i}"].pid)
        self.procs[f"client{i}"].wait(10)

    def remount(self, i: int) -> None:
        """Unmount (lazily if needed) and mount client ``i`` again."""
        _stop(self.procs.get(f"client{i}"))
        _unmount(self.mount_points[i])
        assert self._mount is not None
        self._mount(i)

    def close(self) -> None:
        for mp in self.mount_points:
            if str(mp) not in ("", "."):
                _unmount(mp)
        for name in sorted(self.procs, key=lambda n: not n.startswith("client")):
            _stop(self.procs[name])


def _popen(cmd: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    out = open(log, "ab")
    try:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, start_new_session=True)
    finally:
        out.close()


def _mount_client(fs: NetFS, i: int, cmd: list[str], env: dict[str, str] | None = None) -> None:
    mp = fs.mount_points[i]
    mp.mkdir(parents=True, exist_ok=True)
    log = fs.logs / f"client{i}.log"
    proc = _popen(cmd, log, env)
    fs.procs[f"client{i}"] = proc

    def up() -> bool:
        if proc.poll() is not None:
            raise NetFSError(f"{cmd[0]} for {mp} exited {proc.returncode}: "
                             + " | ".join(log.read_text(errors="replace").splitlines()[-6:]))
        return _is_fuse_mount(mp)

    _wait(f"{fs.kind} mount {mp}", up, log=log)


@contextlib.contextmanager
def _netfs(kind: str, base: Path | None) -> Iterator[NetFS]:
    reason = unavailable(kind)
    if reason:
        raise NetFSError(f"{kind}: {reason}")
    work = Path(tempfile.mkdtemp(prefix=f"dmq-{kind}-", dir=base))
    fs = NetFS(kind=kind, work=work, logs=work / "logs")
    fs.logs.mkdir()
    fs.mount_points = (work / "host-a", work / "host-b")
    try:
        yield fs
    finally:
        fs.close()
        shutil.rmtree(work, ignore_errors=True)


# ---------------------------------------------------------------- MooseFS


@contextlib.contextmanager
def moosefs(base: Path | None = None) -> Iterator[NetFS]:
    """MooseFS master + one chunkserver + two mfsmount clients, on free loopback ports.

    The chunkserver refuses a master on 127.x and the master refuses a chunkserver seen
    from 127.x: the chunkserver dials 0.0.0.0 (Linux: loopback) and the master remaps
    127.0.0.1 to 0.0.0.0, so clients dial 0.0.0.0 too; still loopback only."""
    with _netfs("moosefs", base) as fs:
        d = fs.work / "mfs"
        for sub in ("master", "cs", "chunks"):
            (d / sub).mkdir(parents=True)
        shutil.copy("/var/lib/mfs/metadata.mfs.empty", d / "master" / "metadata.mfs")
        (d / "mfsexports.cfg").write_text("127.0.0.1 / rw,alldirs,maproot=0:0\n")
        (d / "mfstopology.cfg").write_text("")
        (d / "mfshdd.cfg").write_text(f"{d / 'chunks'}\n")
        ml, mcs, mcl, csp = free_port(), free_port(), free_port(), free_port()
        (d / "mfsmaster.cfg").write_text("\n".join([
            "WORKING_USER = root", "WORKING_GROUP = root", f"DATA_PATH = {d / 'master'}",
            f"EXPORTS_FILENAME = {d / 'mfsexports.cfg'}", f"TOPOLOGY_FILENAME = {d / 'mfstopology.cfg'}",
            "NICE_LEVEL = 0", "LOCK_MEMORY = 0",
            "MATOML_LISTEN_HOST = 127.0.0.1", f"MATOML_LISTEN_PORT = {ml}",
            "MATOCS_LISTEN_HOST = 127.0.0.1", f"MATOCS_LISTEN_PORT = {mcs}",
            "MATOCL_LISTEN_HOST = 127.0.0.1", f"MATOCL_LISTEN_PORT = {mcl}",
            "REMAP_BITS = 32", "REMAP_SOURCE_IP_CLASS = 127.0.0.1", "REMAP_DESTINATION_IP_CLASS = 0.0.0.0",
        ]) + "\n")
        (d / "mfschunkserver.cfg").write_text("\n".join([
            "WORKING_USER = root", "WORKING_GROUP = root", f"DATA_PATH = {d / 'cs'}",
            f"HDD_CONF_FILENAME = {d / 'mfshdd.cfg'}", "HDD_LEAVE_SPACE_DEFAULT = 64MiB", "NICE_LEVEL = 0",
            "LOCK_MEMORY = 0", "BIND_HOST = 127.0.0.1", "CSSERV_LISTEN_HOST = 127.0.0.1",
            f"CSSERV_LISTEN_PORT = {csp}", "MASTER_HOST = 0.0.0.0", f"MASTER_PORT = {mcs}",
        ]) + "\n")
        master_log, cs_log = fs.logs / "master.log", fs.logs / "chunkserver.log"

        def start_master(auto_recover: bool = False) -> None:
            cmd = ["mfsmaster", "-f", "-c", str(d / "mfsmaster.cfg")] + (["-a"] if auto_recover else []) + ["start"]
            fs.procs["master"] = _popen(cmd, master_log)
            _wait("mfsmaster listening", lambda: _listening(mcl), log=master_log)

        def start_chunkserver() -> None:
            before = _count(master_log, "register end")
            fs.procs["chunkserver"] = _popen(["mfschunkserver", "-f", "-c", str(d / "mfschunkserver.cfg"), "start"],
                                             cs_log)
            _wait("chunkserver registered with the master",
                  lambda: _count(master_log, "register end") > before, log=master_log)

        start_master()
        start_chunkserver()
        for i in (0, 1):
            fs_mount(fs, i, d, mcl)
        fs._mount = lambda i: fs_mount(fs, i, d, mcl)
        _run("mfssetgoal", "-r", "1", str(fs.mount_points[0]))
        fs.mounts = fs.mount_points

        def killer(name: str) -> Callable[[], None]:
            def kill() -> None:
                _kill9(fs.procs[name].pid)
                fs.procs[name].wait(10)
            return kill

        # after a SIGKILL the master must be started with -a (rebuild metadata from its changelogs)
        fs.servers = {"chunkserver": (killer("chunkserver"), start_chunkserver),
                      "master": (killer("master"), lambda: start_master(auto_recover=True))}
        yield fs


def fs_mount(fs: NetFS, i: int, d: Path, port: int) -> None:
    _mount_client(fs, i, ["mfsmount", "-f", str(fs.mount_points[i]), "-H", "127.0.0.1", "-P", str(port),
                          "-o", "mfsioretries=30"])


def _count(log: Path, needle: str) -> int:
    try:
        return log.read_text(errors="replace").count(needle)
    except FileNotFoundError:
        return 0


def _listening(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


# ---------------------------------------------------------------- GlusterFS


@contextlib.contextmanager
def glusterfs(base: Path | None = None) -> Iterator[NetFS]:
    """glusterd + one brick on 127.0.0.2 + two glusterfs clients with zero caching timeouts.

    glusterd's port 24007 is fixed: runs are serialised with a file lock; the volume has a
    unique name and is stopped and deleted on exit (glusterd keeps definitions in
    /var/lib/glusterd)."""
    with _port_lock("glusterfs"), _netfs("glusterfs", base) as fs:
        g = fs.work / "gl"
        (g / "brick").mkdir(parents=True)
        vol = f"dmq{os.getpid()}x{int(time.time() * 1000) % 10**8}"
        glog = fs.logs / "glusterd.log"
        fs.procs["glusterd"] = _popen(["glusterd", "-N", "-l", str(glog)], fs.logs / "glusterd.out")
        _wait("glusterd", lambda: _run("gluster", "volume", "list", check=False).returncode == 0, log=glog)
        created = False
        try:
            _run("gluster", "--mode=script", "volume", "create", vol, f"127.0.0.2:{g / 'brick'}", "force")
            created = True
            _run("gluster", "--mode=script", "volume", "set", vol, "performance.stat-prefetch", "off")
            _run("gluster", "--mode=script", "volume", "start", vol)

            def mount(i: int) -> None:
                _mount_client(fs, i, ["glusterfs", "-N", "--volfile-server=127.0.0.2", f"--volfile-id={vol}",
                                      "--attribute-timeout=0", "--entry-timeout=0", "--negative-timeout=0",
                                      f"--log-file={fs.logs / f'gclient{i}.log'}", str(fs.mount_points[i])])

            for i in (0, 1):
                mount(i)
            fs._mount = mount
            fs.mounts = fs.mount_points

            def brick_pid() -> int:
                out = _run("gluster", "volume", "status", vol, "--xml").stdout
                pids = [int(p) for p in re.findall(r"<pid>(\d+)</pid>", out) if int(p) > 0]
                if not pids:
                    raise NetFSError(f"no brick pid for volume {vol}")
                return pids[0]

            brick_cmd: list[str] = []

            def kill() -> None:
                pid = brick_pid()
                brick_cmd[:] = [a.decode() for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]
                _kill9(pid)

            def restart() -> None:
                # glusterd -N does not restart a killed brick on `volume start force` (measured):
                # run the brick's own command line again (glusterfsd daemonises itself)
                _run(*brick_cmd)
                _wait("brick back", lambda: _brick_online(vol))

            fs.servers = {"brick": (kill, restart)}
            yield fs
        finally:
            for mp in fs.mount_points:
                _unmount(mp)
            if created:
                _run("gluster", "--mode=script", "volume", "stop", vol, "force", check=False)
                _run("gluster", "--mode=script", "volume", "delete", vol, check=False)
            # bricks are glusterd's children in a new session of their own: stop them by pid
            for pid in _brick_pids_of(g / "brick"):
                _kill9(pid)


def _brick_online(vol: str) -> bool:
    out = _run("gluster", "volume", "status", vol, "--xml", check=False).stdout
    return bool(re.search(r"<status>1</status>", out))


def _brick_pids_of(brick: Path) -> list[int]:
    """glusterfsd processes serving ``brick`` (ours: the path is in our temp dir)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if cmd and cmd[0].endswith(b"glusterfsd") and any(str(brick).encode() in a for a in cmd):
            out.append(int(d.name))
    return out


# ---------------------------------------------------------------- sshfs


SSHFS_CACHE_OPTS = "dir_cache=no,attr_timeout=0,entry_timeout=0,negative_timeout=0"


@contextlib.contextmanager
def sshfs(base: Path | None = None) -> Iterator[NetFS]:
    """sshd on a free 127.0.0.1 port + two sshfs clients with ``reconnect`` and no caching."""
    with _netfs("sshfs", base) as fs:
        s = fs.work / "ssh"
        (s / "export").mkdir(parents=True)
        Path("/run/sshd").mkdir(exist_ok=True)
        for key in ("hostkey", "clientkey"):
            _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(s / key))
        shutil.copy(s / "clientkey.pub", s / "authorized_keys")
        port = free_port()
        (s / "sshd_config").write_text("\n".join([
            f"Port {port}", "ListenAddress 127.0.0.1", f"HostKey {s / 'hostkey'}", f"PidFile {s / 'sshd.pid'}",
            f"AuthorizedKeysFile {s / 'authorized_keys'}", "PermitRootLogin prohibit-password",
            "PasswordAuthentication no", "KbdInteractiveAuthentication no", "UsePAM no", "StrictModes no",
            "Subsystem sftp internal-sftp",
        ]) + "\n")
        slog = fs.logs / "sshd.log"

        def start_sshd() -> None:
            fs.procs["sshd"] = _popen(["/usr/sbin/sshd", "-D", "-e", "-f", str(s / "sshd_config")], slog)
            _wait("sshd listening", lambda: _listening(port), log=slog)

        def mount(i: int) -> None:
            _mount_client(fs, i, [
                "sshfs", "-f", f"root@127.0.0.1:{s / 'export'}", str(fs.mount_points[i]), "-p", str(port),
                "-o", f"IdentityFile={s / 'clientkey'},StrictHostKeyChecking=no,"
                      "UserKnownHostsFile=/dev/null,LogLevel=ERROR",
                "-o", "reconnect,ServerAliveInterval=2,ServerAliveCountMax=2",
                "-o", SSHFS_CACHE_OPTS])

        start_sshd()
        for i in (0, 1):
            mount(i)
        fs._mount = mount
        fs.mounts = fs.mount_points
        fs.export = s / "export"

        def kill() -> None:
            # the server process of this file system is sshd's per-connection child (sftp runs
            # in it); the listener keeps accepting, so reconnect finds a fresh one
            for pid in _descendants(fs.procs["sshd"].pid):
                _kill9(pid)

        fs.servers = {"sshd-child": (kill, lambda: _wait("sshd listening", lambda: _listening(port), log=slog))}
        yield fs


# ---------------------------------------------------------------- SMB through smbnetfs


@contextlib.contextmanager
def smbnetfs(base: Path | None = None) -> Iterator[NetFS]:
    """smbd on 127.0.0.1:445 (fixed: serialised with a file lock) + two smbnetfs clients.

    The export appears inside each mount as ``127.0.0.1/mq``: that is what ``mounts`` yields."""
    with _port_lock("smbnetfs"), _netfs("smbnetfs", base) as fs:
        m = fs.work / "smb"
        for sub in ("export", "private", "lock", "state", "cache", "run", "home"):
            (m / sub).mkdir(parents=True)
        (m / "smb.conf").write_text("\n".join([
            "[global]", "interfaces = lo", "bind interfaces only = yes", "disable netbios = yes",
            "smb ports = 445", "server role = standalone server", "map to guest = Bad User",
            f"private dir = {m / 'private'}", f"lock directory = {m / 'lock'}", f"state directory = {m / 'state'}",
            f"cache directory = {m / 'cache'}", f"pid directory = {m / 'run'}", f"ncalrpc dir = {m / 'run/ncalrpc'}",
            f"log file = {fs.logs / 'smbd.log'}", "load printers = no", "printing = bsd",
            "printcap name = /dev/null", "disable spoolss = yes",
            "[mq]", f"path = {m / 'export'}", "read only = no", "guest ok = yes", "force user = root",
        ]) + "\n")
        slog = fs.logs / "smbd.out"

        def start_smbd() -> None:
            fs.procs["smbd"] = _popen(["smbd", "--foreground", "--no-process-group", "--debug-stdout",
                                       "-s", str(m / "smb.conf")], slog)
            _wait("smbd listening", lambda: _listening(445), log=slog)

        def mount(i: int) -> None:
            conf = m / f"smbnetfs-{i}.conf"
            conf.write_text('auth "guest" ""\nhost 127.0.0.1 visible=true\n')
            conf.chmod(0o600)
            env = dict(os.environ, HOME=str(m / "home"))
            _mount_client(fs, i, ["smbnetfs", "-f", str(fs.mount_points[i]), "-o", f"config={conf}"], env)
            share = fs.mount_points[i] / "127.0.0.1" / "mq"
            _wait(f"share visible in {fs.mount_points[i]}", lambda: _isdir(share), log=fs.logs / f"client{i}.log")

        start_smbd()
        for i in (0, 1):
            mount(i)
        fs._mount = mount
        fs.mounts = (fs.mount_points[0] / "127.0.0.1" / "mq", fs.mount_points[1] / "127.0.0.1" / "mq")

        def kill() -> None:
            for pid in _descendants(fs.procs["smbd"].pid) + [fs.procs["smbd"].pid]:
                _kill9(pid)
            fs.procs["smbd"].wait(10)

        fs.servers = {"smbd": (kill, start_smbd)}
        yield fs


def _isdir(p: Path) -> bool:
    try:
        return p.is_dir()
    except OSError:
        return False


STARTERS: dict[str, Callable[[Path | None], contextlib.AbstractContextManager[NetFS]]] = {
    "moosefs": moosefs, "glusterfs": glusterfs, "sshfs": sshfs, "smbnetfs": smbnetfs,
}


def start(kind: str, base: Path | None = None) -> contextlib.AbstractContextManager[NetFS]:
    """The context manager for ``kind`` (one of :data:`KINDS`)."""
    if kind not in STARTERS:
        raise NetFSError(f"unknown network file system {kind!r} (one of {', '.join(KINDS)})")
    return STARTERS[kind](base)


if __name__ == "__main__":  # smoke: python -m dropboxmq_stress.netfs KIND — start, show, write across, stop
    import sys

    for k in sys.argv[1:] or list(KINDS):
        why = unavailable(k)
        if why:
            print(f"{k}: skipped: {why}")
            continue
        t0 = time.monotonic()
        with start(k) as fs:
            up = time.monotonic() - t0
            (fs.mounts[0] / "probe").write_text("hello")
            seen = (fs.mounts[1] / "probe").read_text()
            print(f"{k}: up in {up:.1f} s, mounts {fs.mounts[0]} {fs.mounts[1]}, cross-read {seen!r}")
