"""The one switch point between the Cython engine (`_core`) and the pure-Python one (`_pure`).

Both modules define the same hot classes with the same names and signatures; everything else in
a3fast is written once and asks this module for an engine. `ENGINE` is chosen once, at import:
"native" when the extension imports, else "pure"; `A3FAST_ENGINE` forces one.
"""
from __future__ import annotations

import os
from types import ModuleType

from . import _pure

try:
    from . import _core as _native
except ImportError:  # not built: no compiler at install time, or a source checkout
    _native = None

__all__ = ["ENGINE", "NATIVE_AVAILABLE", "ENGINES", "engine_module", "available_engines"]

NATIVE_AVAILABLE = _native is not None
ENGINES = ("native", "pure")


def _default_engine() -> str:
    forced = os.environ.get("A3FAST_ENGINE", "").strip().lower()
    if forced == "pure":
        return "pure"
    if forced == "native":
        if not NATIVE_AVAILABLE:
            raise ImportError("A3FAST_ENGINE=native, but the a3fast._core extension is not built")
        return "native"
    return "native" if NATIVE_AVAILABLE else "pure"


ENGINE = _default_engine()


def available_engines() -> tuple[str, ...]:
    return ENGINES if NATIVE_AVAILABLE else ("pure",)


def engine_module(name: str | None = None) -> ModuleType:
    """The engine module for `name` ("native", "pure", or None for the default `ENGINE`)."""
    name = ENGINE if name is None else name
    if name == "pure":
        return _pure
    if name == "native":
        if _native is None:
            raise ValueError("engine 'native' is not available: the a3fast._core extension is not built")
        return _native
    raise ValueError(f"unknown engine {name!r}: expected 'native' or 'pure'")
