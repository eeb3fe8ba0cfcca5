"""Notebook views of the core types, drawn by whichever package registers them.

The core types (`Fleet`, `Placement`) answer `_repr_html_` through this registry and import no
drawing code: the package that draws them (a3fast.report) registers its views, and the package
root registers a loader that imports it the first time a notebook asks, so that the core never
reaches up into the pictures.
"""
from __future__ import annotations

from typing import Any, Callable

__all__ = ["register_view", "register_loader", "view_html"]

_views: dict[str, Callable[[Any], str]] = {}
_loaders: list[Callable[[], None]] = []


def register_view(kind: str, view: Callable[[Any], str]) -> None:
    """`view(obj)` is the notebook HTML of objects of `kind` ("fleet", "placement")."""
    _views[kind] = view


def register_loader(loader: Callable[[], None]) -> None:
    """`loader()` registers views when first needed (run once, on the first view asked for)."""
    _loaders.append(loader)


def view_html(kind: str, obj: Any) -> str | None:
    """The notebook HTML of `obj`, or None when no view of `kind` is registered (a notebook then
    shows the object's repr)."""
    view = _views.get(kind)
    if view is None:
        while _loaders:
            _loaders.pop(0)()
        view = _views.get(kind)
    return view(obj) if view is not None else None
