"""Server processes a benchmark starts and measures: started on 127.0.0.1 with a free port, their URL
read from the line they print, their CPU time read from the kernel's counters, stopped by their own
pid."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

__all__ = ["cpu_of", "ServedProcess", "serve_process"]


def cpu_of(pid: int) -> float:
    """User + system CPU seconds of a live process (Linux /proc), counted in clock ticks (10 ms)."""
    with open(f"/proc/{pid}/stat", "rb") as fh:
        fields = fh.read().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class ServedProcess:
    """`python -m MODULE ARGS...`, which prints `banner ... URL` on its first line once it listens."""

    def __init__(self, module: str, *args: str, banner: str, start_timeout: float = 60.0):
        # a file rather than a pipe: a server that writes much to stderr never blocks on it
        self.stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([sys.executable, "-m", module, *args], stdout=subprocess.PIPE,
                                     stderr=self.stderr)
        try:
            line = _first_line(self.proc, start_timeout)
        except BaseException:       # an interruption while it starts: the server is not left running
            self.proc.kill()
            self.proc.wait()
            self.stderr.close()
            raise
        if not line.startswith(banner):
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait(timeout=30)
            why = self.stderr_tail()
            self.stop()
            raise RuntimeError(f"python -m {module} did not start: {line!r} {why!r}")
        try:
            self.url = line.split()[-1]
            self.port = int(self.url.rsplit(":", 1)[1])
        except (IndexError, ValueError):
            self.stop()
            raise RuntimeError(f"python -m {module} printed no URL with a port: {line!r}") from None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def cpu_s(self) -> float:
        return cpu_of(self.proc.pid)

    def stderr_tail(self, size: int = 500) -> str:
        """The last `size` bytes the process wrote to stderr."""
        self.stderr.seek(0, os.SEEK_END)
        self.stderr.seek(max(0, self.stderr.tell() - size))
        return self.stderr.read().decode(errors="replace")

    def wait_ready(self, path: str = "/readyz", timeout: float = 60.0) -> None:
        """Until GET `path` answers 200 (TimeoutError after `timeout` s; RuntimeError if the process ends)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server process ended with exit code {self.proc.returncode}: "
                                   f"{self.stderr_tail()}")
            try:
                with urllib.request.urlopen(self.url + path, timeout=5) as answer:
                    if answer.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.05)
        raise TimeoutError(f"{self.url}{path} not 200 within {timeout:g} s")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self.stderr.close()

    def __enter__(self) -> "ServedProcess":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def serve_process(*args: str) -> ServedProcess:
    """`a3fast serve --port 0 ARGS...` (the CLI as a user runs it)."""
    return ServedProcess("a3fast", "serve", "--port", "0", *args, banner="a3fast: loading; listening on ")


def _first_line(proc: subprocess.Popen, timeout: float) -> str:
    """The process's first line of output, or "" if it ends or stays silent for `timeout` s."""
    import selectors

    assert proc.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        if not selector.select(timeout):
            return ""
    return proc.stdout.readline().decode(errors="replace")
