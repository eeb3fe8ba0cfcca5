"""The one switch point between the Cython engine (`_core`) and the pure-Python one (`_pure`).

Both modules define the same hot classes with the same names and signatures; everything else in
a3fast is written once and asks this module for an engine. `ENGINE` is chosen once, at import:
"native" when the extension imports, else "pure"; `A3FAST_ENGINE` forces one. A value that cannot
be honoured (one that names no engine, or "native" where the extension is not built) is not read
as the default, which would let a misspelt choice pass unnoticed: `ENGINE_PROBLEM` says why, every
Fleet on the default engine is refused with it (ImportError), and every command of the command
line exits with it as bad input. `ENGINE` is then the engine a3fast would choose unforced.

When the default engine is pure only because the extension is missing, its first use warns once
with `A3FastPerformanceWarning`, so a failed build does not pass unnoticed; forcing
`A3FAST_ENGINE=pure` or asking for `engine="pure"` does not warn.
"""
from __future__ import annotations

import os
import warnings
from types import ModuleType

from . import _ingest_pure, _pure

_native: ModuleType | None
_native_ingest: ModuleType | None
try:
    from . import _core as _native
    from . import _ingest as _native_ingest
except ImportError:  # not built: no compiler at install time, or a source checkout
    _native = _native_ingest = None

__all__ = ["ENGINE", "ENGINE_PROBLEM", "default_engine", "NATIVE_AVAILABLE", "ENGINES", "engine_module", "ingest_module",
           "available_engines", "A3FastPerformanceWarning"]

NATIVE_AVAILABLE = _native is not None
ENGINES = ("native", "pure")


_FORCED = os.environ.get("A3FAST_ENGINE", "").strip().lower()


def _engine_problem() -> str | None:
    """Why A3FAST_ENGINE cannot be honoured, or None."""
    if _FORCED and _FORCED not in ENGINES:
        return (f"A3FAST_ENGINE={os.environ['A3FAST_ENGINE']!r} names no engine: set it to native or pure, "
                "or unset it for the native engine where it is built")
    if _FORCED == "native" and not NATIVE_AVAILABLE:
        return "A3FAST_ENGINE=native, but the a3fast._core extension is not built"
    return None


#: why A3FAST_ENGINE cannot be honoured (None: it can, or it is unset)
ENGINE_PROBLEM = _engine_problem()
ENGINE = "pure" if _FORCED == "pure" or not NATIVE_AVAILABLE else "native"
#: The default is pure only because the extension is missing, not because A3FAST_ENGINE chose it.
_PURE_BY_FALLBACK = ENGINE == "pure" and _FORCED != "pure"


class A3FastPerformanceWarning(RuntimeWarning):
    """The pure engine stands in for the native one, which is not built (filter it to silence)."""


_fallback_warned = False


def _warn_fallback_once() -> None:
    global _fallback_warned
    if _fallback_warned or not _PURE_BY_FALLBACK:
        return
    _fallback_warned = True
    # stacklevel 4: the line that made the Fleet (Fleet.__init__ -> engine_module -> here).
    warnings.warn("a3fast runs on its pure-Python engine, far slower, because the a3fast._core "
                  "extension is not built; reinstall with a C compiler, or set A3FAST_ENGINE=pure "
                  "to choose the pure engine knowingly", A3FastPerformanceWarning, stacklevel=4)


def available_engines() -> tuple[str, ...]:
    return ENGINES if NATIVE_AVAILABLE else ("pure",)


def default_engine() -> str:
    """`ENGINE`, for code that names the default engine to run on it; ImportError with
    `ENGINE_PROBLEM` when A3FAST_ENGINE cannot be honoured, as `engine_module()` raises."""
    if ENGINE_PROBLEM is not None:
        raise ImportError(ENGINE_PROBLEM)
    return ENGINE


def engine_module(name: str | None = None) -> ModuleType:
    """The engine module for `name` ("native", "pure", or None for the default `ENGINE`, which
    warns once when it is pure only because the extension is missing; ImportError with
    `ENGINE_PROBLEM` when A3FAST_ENGINE cannot be honoured)."""
    if name is None:
        if ENGINE_PROBLEM is not None:
            raise ImportError(ENGINE_PROBLEM)
        _warn_fallback_once()
        name = ENGINE
    if name == "pure":
        return _pure
    if name == "native":
        if _native is None:
            raise ValueError("engine 'native' is not available: the a3fast._core extension is not built")
        return _native
    raise ValueError(f"unknown engine {name!r}: expected 'native' or 'pure'")


def ingest_module(name: str) -> ModuleType:
    """The JSON Lines reader for a fleet on engine `name`: the compiled one (`_ingest`) for native,
    `_ingest_pure` (which leaves every line to orjson and the schema's parser) for pure."""
    return _native_ingest if name == "native" and _native_ingest is not None else _ingest_pure
