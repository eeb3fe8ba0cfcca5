"""A client for a matcher that speaks the stdio protocol (docs/protocol.md), in any language.

The matcher is a command; it reads one JSON request per line and answers one JSON object per line,
in order. Every wait for an answer is bounded: a matcher that exits, hangs past the timeout, or
answers something that is not a JSON object is reported as a `MatcherFailure` naming what happened
(and the tail of its standard error), never waited on forever.
"""
from __future__ import annotations

import os
import selectors
import shlex
import subprocess
import threading
import time
from typing import Any

import orjson

from .. import process_groups

__all__ = ["MatcherFailure", "MatcherProcess", "command_argv", "echoes"]

#: Bytes of the matcher's standard error quoted when it fails.
STDERR_TAIL = 600
#: Bytes of the matcher's standard error kept (its end), however much it writes.
STDERR_KEPT = 64 << 10
#: The longest answer line read: a record of a placement over a million agents is tens of MB; an
#: answer past this is malformed, not read into memory without end.
MAX_ANSWER_BYTES = 256 << 20
#: The longest single wait on the matcher's output (a day), below what the system's wait takes.
_LONGEST_WAIT_S = 86_400.0
#: Requests a pipelining client sends before reading their answers (small enough that the window
#: fits in a pipe's buffer).
PIPELINE_WINDOW = 32


def echoes(found: Any, rid: int) -> bool:
    """Whether an answer's id is the request's: the same number, as JSON reads numbers (`6.0` is
    6), and never `true` for 1, which Python's `==` would take it for."""
    return found == rid and not isinstance(found, bool)


class MatcherFailure(Exception):
    """The matcher could not answer: `kind` is one of "start", "crashed", "timeout", "malformed",
    "refused" (an answer with ok: false)."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind
        self.message = message


def command_argv(command: str) -> list[str]:
    """The argv of a matcher command line (shell words); ValueError for an empty or unbalanced one."""
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise ValueError(f"cannot split {command!r} into words: {exc}") from None
    if not argv:
        raise ValueError("an empty command")
    return argv


class MatcherProcess:
    """One running matcher. `request(op, **fields)` sends a request and returns the answer object
    (raising MatcherFailure for an ok: false answer unless `check=False`). `timeout` bounds each
    wait for an answer, and each write of requests: any positive number of seconds (ValueError
    otherwise).

    The matcher runs in a session of its own: when it is stopped (a timeout, `close`), every
    process it started goes with it (one left behind would run on, and write on into what was its
    standard error). Of its standard error only the end is kept (STDERR_KEPT), and an answer line
    past MAX_ANSWER_BYTES is malformed."""

    def __init__(self, command: str, timeout: float = 30.0, env: dict[str, str] | None = None):
        if not timeout > 0:
            raise ValueError(f"timeout: expected a positive number of seconds, found {timeout!r}")
        self.command = command
        self.timeout = timeout
        argv = command_argv(command)
        try:
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, env=env, bufsize=0, start_new_session=True)
        except OSError as exc:
            raise MatcherFailure("start", f"cannot start {command!r}: {exc.strerror or exc}") from None
        assert self.proc.stdin is not None and self.proc.stdout is not None  # both are pipes
        self._stderr = bytearray()
        self._stderr_reader = threading.Thread(target=self._keep_stderr, name="a3fast-matcher-stderr", daemon=True)
        self._stderr_reader.start()
        self._out = self.proc.stdout.fileno()
        self._in = self.proc.stdin.fileno()
        os.set_blocking(self._out, False)
        os.set_blocking(self._in, False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._out, selectors.EVENT_READ)
        self._pending = bytearray()
        self._start = 0        # where the unread part of `_pending` begins
        self._scanned = 0      # `_pending` holds no newline before this
        self._next_id = 0

    def _keep_stderr(self) -> None:
        err = self.proc.stderr
        assert err is not None  # a pipe
        while chunk := err.read(1 << 16):       # one read of the pipe (unbuffered)
            self._stderr += chunk
            del self._stderr[:-STDERR_KEPT]

    @property
    def pid(self) -> int:
        return self.proc.pid

    def request(self, op: str, check: bool = True, **fields: Any) -> dict[str, Any]:
        self._next_id += 1
        rid = self._next_id
        self.send({"op": op, "id": rid, **fields})
        answer = self.receive(op)
        if not echoes(answer.get("id"), rid):
            raise MatcherFailure("malformed", f"the answer to {op} request {rid} carries id "
                                 f"{answer.get('id')!r}: answers must echo the request's id, in order")
        if check and answer.get("ok") is not True:
            raise MatcherFailure("refused", f"{op} was refused: {_short(orjson.dumps(answer))}")
        return answer

    def request_line(self, op: str, **fields: Any) -> tuple[int, bytes]:
        """Send a request; (its id, the answer line undecoded) — for a caller that reads only part
        of the answer. The caller checks the id."""
        self._next_id += 1
        self.send({"op": op, "id": self._next_id, **fields})
        return self._next_id, self.read_line(op)

    def request_lines_pipelined(self, op: str, requests: list[dict[str, Any]],
                                window: int = PIPELINE_WINDOW) -> list[tuple[int, bytes]]:
        """Send `requests` (the fields of each `op` request) with at most `window` unanswered at a
        time, written together; (id, the answer line undecoded) of each, in order. The protocol
        answers in order, so a matcher sees the same requests as one at a time, only sooner. The
        window's requests fit in a pipe's buffer, so writing never waits on a matcher that is
        itself waiting for its answers to be read. The caller checks the ids."""
        out: list[tuple[int, bytes]] = []
        for start in range(0, len(requests), window):
            chunk = requests[start:start + window]
            first = self._next_id + 1
            self._next_id += len(chunk)
            self.write_raw(b"".join(orjson.dumps({"op": op, "id": first + k, **fields}) + b"\n"
                                 for k, fields in enumerate(chunk)), op)
            out.extend((first + k, self.read_line(op)) for k in range(len(chunk)))
        return out

    def write_raw(self, data: bytes, op: str) -> None:
        """Write request lines already encoded (each ending in a newline), within the timeout: the
        answers that arrive meanwhile are read and kept, so a matcher that answers while it reads
        never waits on us, and one that does not read is stopped at the timeout."""
        view = memoryview(data)
        try:       # the usual request fits in the pipe at once: no wait set up for it
            view = view[os.write(self._in, view):]
        except BlockingIOError:
            pass
        except (BrokenPipeError, ConnectionResetError):
            raise self.exited(f"while sending a {op} request") from None
        if not view:
            return
        deadline = time.monotonic() + self.timeout
        self._selector.register(self._in, selectors.EVENT_WRITE)
        try:
            while view:
                ready = self._ready(deadline, f"while sending a {op} request",
                                    f"could not send a {op} request within {self.timeout:g} s: the matcher "
                                    f"did not read it (the matcher was stopped)")
                for key, _ in ready:
                    if key.fd == self._out:
                        self._read_some(op)
                        continue
                    try:
                        view = view[os.write(self._in, view[:1 << 16]):]
                    except BlockingIOError:
                        pass
                    except (BrokenPipeError, ConnectionResetError):
                        raise self.exited(f"while sending a {op} request") from None
        finally:
            self._selector.unregister(self._in)

    def send(self, request: dict[str, Any]) -> None:
        self.write_raw(orjson.dumps(request) + b"\n", str(request.get("op")))

    def receive(self, op: str = "request") -> dict[str, Any]:
        """The next answer line, parsed; MatcherFailure if it does not come in time or is not JSON."""
        line = self.read_line(op)
        try:
            answer = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise MatcherFailure("malformed", f"the answer to a {op} request is not JSON ({exc}): "
                                 f"{_short(line)}") from None
        if not isinstance(answer, dict):
            raise MatcherFailure("malformed", f"the answer to a {op} request is not a JSON object: "
                                 f"{_short(line)}")
        return answer

    def read_line(self, op: str) -> bytes:
        """The next answer line, undecoded; MatcherFailure if it does not come in time."""
        deadline = time.monotonic() + self.timeout
        while True:
            end = self._pending.find(b"\n", max(self._start, self._scanned))
            if end >= 0:
                # lines are taken from an offset: deleting each from the front would move every
                # answer after it (a window of answers is read in one chunk)
                line = bytes(self._pending[self._start:end])
                self._start = self._scanned = end + 1
                if self._start == len(self._pending):
                    self._pending.clear()
                    self._start = self._scanned = 0
                return line
            self._scanned = len(self._pending)      # each byte searched for a newline once
            if len(self._pending) - self._start > MAX_ANSWER_BYTES:
                self.stop()
                raise MatcherFailure("malformed", f"the answer to a {op} request is longer than "
                                     f"{MAX_ANSWER_BYTES} bytes (the matcher was stopped)")
            self._ready(deadline, f"before answering a {op} request",
                        f"no answer to a {op} request within {self.timeout:g} s (the matcher was stopped)")
            self._read_some(op)

    def _ready(self, deadline: float, when: str, late: str) -> list[Any]:
        """The selector's ready keys, waited for until `deadline`; past it, the matcher's end
        (`exited(when)`) when it ended, else MatcherFailure("timeout", late) once it is stopped."""
        while True:
            left = deadline - time.monotonic()
            # waited for in slices: the system's wait overflows past about 24 days, and a caller's
            # timeout may be longer than that
            ready = self._selector.select(min(left, _LONGEST_WAIT_S)) if left > 0 else []
            if ready:
                return ready
            if left > _LONGEST_WAIT_S:
                continue
            if process_groups.exited(self.proc):
                raise self.exited(when)
            self.stop()
            raise MatcherFailure("timeout", late)

    def _read_some(self, op: str) -> None:
        """What the matcher has written, onto `_pending`; MatcherFailure when its output ended."""
        try:
            chunk = os.read(self._out, 1 << 20)
        except BlockingIOError:
            return
        if not chunk:
            raise self.exited(f"before answering a {op} request")
        if self._start:
            del self._pending[:self._start]
            self._scanned = max(0, self._scanned - self._start)
            self._start = 0
        self._pending += chunk

    def exited(self, when: str) -> MatcherFailure:
        """The failure of a matcher whose output ended: it is stopped, with what it left running."""
        if not process_groups.wait_exited(self.proc, self.timeout):
            self.stop()
            return MatcherFailure("crashed", f"the matcher closed its output {when} but did not exit "
                                  f"(the matcher was stopped)")
        code = self.stop()
        tail = self.stderr_tail()
        ended = f"was ended by signal {-code}" if code < 0 else f"exited with code {code}"
        return MatcherFailure("crashed", f"the matcher {ended} {when}"
                              + (f"; its last error output: {tail}" if tail else ""))

    def stderr_tail(self) -> str:
        if self.proc.returncode is not None:
            self._stderr_reader.join(timeout=1.0)  # what it wrote before it ended, once read
        return " | ".join(bytes(self._stderr[-STDERR_TAIL:]).decode("utf-8", "replace").strip().splitlines())

    def stop(self) -> int:
        """The matcher and every process it started, killed (a3fast.process_groups); its exit status."""
        return process_groups.stop(self.proc)

    def close(self) -> int | None:
        """End of input, then wait briefly; a matcher that does not exit is killed, and so is
        whatever it left running."""
        try:
            self.proc.stdin.close()  # type: ignore[union-attr]  # a pipe (start)
        except OSError:
            pass
        try:
            process_groups.wait_exited(self.proc, min(self.timeout, 5.0))
        finally:            # an interruption of the wait stops it too
            self.stop()
        self._stderr_reader.join(timeout=5.0)
        self._selector.close()
        self.proc.stdout.close()  # type: ignore[union-attr]  # a pipe (start)
        if not self._stderr_reader.is_alive():
            # else a process that left the matcher's session still holds it: the reader ends with it
            self.proc.stderr.close()  # type: ignore[union-attr]  # a pipe (start)
        return self.proc.returncode

    def __enter__(self) -> "MatcherProcess":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _short(data: bytes, limit: int = 200) -> str:
    text = data.decode("utf-8", "replace")
    return text if len(text) <= limit else text[:limit] + "…"
