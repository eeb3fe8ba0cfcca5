"""Other programs run in a session of their own, and stopped with every process they started.

A program a3fast runs for a user (a matcher under test, a verifier command) may start processes of
its own; killing the program alone leaves them running, holding its pipes open or writing on. So it
is started with `start_new_session=True` and stopped by killing its process group. The group's id
is the program's pid, which the system may give to another process once the program is reaped: so
the program is never reaped before its group is killed. `exited` and `wait_exited` look for its end
without reaping it (waitid with WNOWAIT: an ended program stays a zombie, its pid still its own),
and `stop` kills the group first and reaps after.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time

__all__ = ["exited", "wait_exited", "stop"]

#: The longest pause between two looks at a program that has not ended yet.
_POLL_S = 0.02


def exited(proc: subprocess.Popen) -> bool:
    """Whether the program has ended (reaped or not); an ended one is left unreaped."""
    if proc.returncode is not None:
        return True
    try:
        return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:       # reaped by someone else: ended, and its pid no longer its own
        proc.poll()                 # (Popen records that as exit 0): `stop` then kills no group
        return True


def wait_exited(proc: subprocess.Popen, timeout: float | None) -> bool:
    """Wait up to `timeout` seconds (None: without end) for the program to end, without reaping
    it; whether it ended."""
    deadline = None if timeout is None else time.monotonic() + timeout
    pause = 0.001
    while not exited(proc):
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            pause = min(pause, left)
        time.sleep(pause)
        pause = min(pause * 2, _POLL_S)
    return True


def stop(proc: subprocess.Popen) -> int:
    """Kill the program's process group (whatever it left running with it), then reap the program;
    its exit status. A program reaped already cannot have its group killed safely (its pid may
    belong to another by now): it is only waited for."""
    if proc.returncode is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass                # the group is gone
    return proc.wait()
