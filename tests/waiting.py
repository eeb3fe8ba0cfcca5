"""Waiting for what tests start on their own: a condition that comes true in time, a server that
writes its port to a file and then accepts connections on 127.0.0.1."""
from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any, Callable

import pytest


def until(what: str, check: Callable[[], Any], timeout: float = 10.0) -> Any:
    """Poll `check` until it returns something truthy; fail naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"not within {timeout} s: {what}")
        time.sleep(0.05)


def port_when_listening(portfile: Path, timeout: float = 20.0) -> int:
    """The port a server wrote to `portfile`, once it accepts connections on 127.0.0.1 (or once
    `timeout` s have passed: the caller's first request then says what is wrong)."""
    deadline = time.monotonic() + timeout
    while not (portfile.exists() and portfile.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    port = int(portfile.read_text())
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            time.sleep(0.05)
    return port
