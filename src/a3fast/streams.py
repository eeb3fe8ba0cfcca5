"""Lines a3fast writes to the process's standard output and error when their reader may be gone.

A command's answer written to a closed pipe ends the command (exit 141, `a3fast.cli`). The
service's status lines and logs are another matter: a supervisor that read the serving line and
closed its end, or a log pipe that broke, must not stop a service that is serving, nor keep one
running that could not start. So such a line is written when it can be and lost when it cannot,
and the stream is pointed at /dev/null, so that nothing written to it later (the interpreter's
flush at exit too) fails again.
"""
from __future__ import annotations

import os
from typing import Any

__all__ = ["silenced", "status_line"]


def silenced(stream: Any) -> None:
    """`stream` (standard output or error) was closed by its reader: what is still written to it
    (the interpreter's flush at exit too) goes to /dev/null, so nothing more fails there."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):     # no descriptor to replace: nothing flushes to it
        pass


def status_line(text: str, stream: Any) -> None:
    """`text` and a newline written and flushed to `stream` (None, as for a process started without
    it: nothing is written). A stream whose reader is gone loses the line and is silenced; one on a
    full or failing disk, or closed, loses the line only (the next may be written). The caller goes
    on either way, and its exit status still tells how it ended."""
    if stream is None:
        return
    try:
        stream.write(text + "\n")
        stream.flush()
    except BrokenPipeError:
        silenced(stream)
    except (OSError, ValueError):
        pass
