"""Graceful stop for the consuming verbs (``receive``, ``subscribe``) and handler processes
that never outlive them.

* ``StopSignals``: SIGTERM and SIGINT (Ctrl-C) ask the loop to stop taking messages; the
  handler that is running gets ``grace`` seconds to finish, a second signal ends the grace.
* ``HandlerRunner``: runs each ``--exec`` command in its own process group (so a terminal's
  Ctrl-C reaches the consumer, not the handler) with PR_SET_PDEATHSIG, and registers the
  group with a watchdog process.  The watchdog holds the read end of a pipe whose only
  write end is the consumer's: when the consumer dies in any way (kill -9 included), the
  pipe closes and the watchdog kills every group still registered, grandchildren included,
  before the message can be redelivered to someone else.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from types import FrameType
from typing import IO, Any, Mapping

__all__ = ["StopSignals", "HandlerRunner", "WATCHDOG_SOURCE"]

_PR_SET_PDEATHSIG = 1

#: The watchdog: "+PGID" / "-PGID" lines register and forget a handler's process group; at
#: end of input (its consumer exited or died) every group still registered is killed.
WATCHDOG_SOURCE = r"""
import os, signal, sys
groups = set()
for line in sys.stdin:
    if line[:1] == "+":
        groups.add(int(line[1:]))
    elif line[:1] == "-":
        groups.discard(int(line[1:]))
for group in groups:
    try:
        os.killpg(group, signal.SIGKILL)
    except OSError:
        pass
"""


class StopSignals:
    """While entered, SIGTERM and SIGINT request a stop instead of ending the process."""

    def __init__(self, grace: float) -> None:
        self.grace = grace
        self.requested_at: float | None = None
        self.signals_seen = 0
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> "StopSignals":
        for signum in (signal.SIGTERM, signal.SIGINT):
            try:
                self._previous[signum] = signal.signal(signum, self._on_signal)
            except ValueError:  # not the main thread (an embedding program): its own handling stays
                pass
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.signals_seen += 1
        if self.requested_at is None:
            self.requested_at = time.monotonic()

    @property
    def requested(self) -> bool:
        return self.requested_at is not None

    def seconds_left(self) -> float | None:
        """Seconds of grace left for a running handler; None while no stop was asked."""
        if self.requested_at is None:
            return None
        if self.signals_seen > 1:
            return 0.0  # asked twice: no more grace
        return max(0.0, self.requested_at + self.grace - time.monotonic())


def _libc_prctl() -> Any:
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux: the watchdog alone covers it
        return None


class HandlerRunner:
    """Runs handler commands so that none outlives this process (see the module docstring)."""

    def __init__(self, stop: StopSignals) -> None:
        self.stop = stop
        self._prctl = _libc_prctl()
        self._watchdog: subprocess.Popen[bytes] | None = None

    def _watchdog_stdin(self) -> IO[bytes]:
        if self._watchdog is None:
            # its own session: a terminal's Ctrl-C must not end it; no inherited output pipes to hold open
            self._watchdog = subprocess.Popen([sys.executable, "-c", WATCHDOG_SOURCE], stdin=subprocess.PIPE,
                                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                              start_new_session=True)
        assert self._watchdog.stdin is not None
        return self._watchdog.stdin

    def _watch(self, line: str) -> None:
        stdin = self._watchdog_stdin()
        stdin.write(line.encode() + b"\n")
        stdin.flush()

    def _in_child(self, parent: int, watchdog: int) -> None:
        """After fork and setsid, before exec: register this new group with the watchdog (so a
        consumer killed the instant the handler starts still takes the handler's children with
        it: registering after Popen returned left that window, CI flake) and die with the
        consumer."""
        os.write(watchdog, f"+{os.getpid()}\n".encode())  # (one short write to a pipe: atomic)
        if self._prctl is not None:
            self._prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the consumer died before the line above took effect
            os._exit(1)

    def run(self, command: str, stdin: IO[bytes], env: Mapping[str, str]) -> int | None:
        """Run ``command`` in a shell; its exit status, or None when it was killed because it
        outlasted the grace of a requested stop."""
        parent, watchdog = os.getpid(), self._watchdog_stdin().fileno()
        proc = subprocess.Popen(command, shell=True, stdin=stdin, env=env, start_new_session=True,
                                preexec_fn=lambda: self._in_child(parent, watchdog))
        try:
            while True:
                left = self.stop.seconds_left()
                try:
                    return proc.wait(timeout=0.1 if left is None else min(0.1, left) or 0.001)
                except subprocess.TimeoutExpired:
                    if left is not None and left <= 0:
                        break
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # the whole group: the handler's own children too
            except ProcessLookupError:
                pass
            proc.wait()
            return None
        finally:
            self._watch(f"-{proc.pid}")

    def close(self) -> None:
        if self._watchdog is not None and self._watchdog.stdin is not None:
            self._watchdog.stdin.close()  # end of input: the watchdog finds nothing left and exits
            self._watchdog.wait()
            self._watchdog = None
