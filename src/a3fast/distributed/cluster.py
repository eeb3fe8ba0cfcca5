"""Reaching Ray: the optional dependency imported on first use, and a cluster joined or started."""
from __future__ import annotations

import socket
from types import ModuleType

__all__ = ["ray_module", "connect", "check_reachable", "PROBE_TIMEOUT"]

#: Seconds a cluster's address has to accept a connection before Ray is asked to join it.
PROBE_TIMEOUT = 5.0


def ray_module() -> ModuleType:
    """The `ray` module, or ImportError telling how to install it."""
    try:
        import ray
    except ImportError:
        raise ImportError("a3fast.distributed needs Ray: pip install 'a3fast[ray]'") from None
    return ray


def connect(address: str | None = None) -> ModuleType:
    """Ray, initialised: the running one, else the cluster at `address` (None: a new local Ray)."""
    ray = ray_module()
    if not ray.is_initialized():
        check_reachable(address)
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    return ray


def check_reachable(address: str | None) -> None:
    """ConnectionError when `address` names a host and port (HOST:PORT, ray://HOST:PORT) where
    nothing accepts a connection within PROBE_TIMEOUT: `ray.init` retries such an address for
    many minutes, saying nothing the caller sees. Other addresses (None, auto, local) are Ray's."""
    if address is None:
        return
    host, colon, port = address.removeprefix("ray://").rpartition(":")
    if not colon or not host or not port.isdigit():
        return
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=PROBE_TIMEOUT):
            pass
    except (OSError, OverflowError) as exc:     # refused, no route, unknown host; a port past 65535
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc) or type(exc).__name__
        raise ConnectionError(f"nothing accepts a connection at {address} ({why})") from None
