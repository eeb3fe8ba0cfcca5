"""Reaching Ray: the optional dependency imported on first use, and a cluster joined or started."""
from __future__ import annotations

from types import ModuleType

__all__ = ["ray_module", "connect"]


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
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    return ray
