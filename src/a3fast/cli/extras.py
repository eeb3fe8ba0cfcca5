"""Which optional part of a3fast (an extra of `pip install 'a3fast[EXTRA]'`) a missing module belongs
to, so a command that needs one says which to install and exits 2 instead of failing as a3fast's
own error.

The base install (`pip install .`) places, verifies, explains, reports and imports from files; the
extras add what reaches the network or runs a cluster: `import` (card fetches, live MCP servers,
card signatures), `serve` (the HTTP service) and `ray` (the sharded fleet on Ray).
"""
from __future__ import annotations

__all__ = ["EXTRA_OF_MODULE", "extra_for", "MissingExtra", "require"]

#: top-level module -> the extra that installs it (directly, or as a dependency of what it lists)
EXTRA_OF_MODULE = {
    "httpx": "import", "httpcore": "import", "h11": "import", "anyio": "import", "sniffio": "import",
    "mcp": "import", "joserfc": "import", "pydantic": "import", "pydantic_core": "import",
    "httpx_sse": "import", "sse_starlette": "import",
    "starlette": "serve", "uvicorn": "serve", "httptools": "serve", "uvloop": "serve",
    "prometheus_client": "serve",
    "ray": "ray",
}


def extra_for(module: str | None) -> str | None:
    """The extra that installs `module` (a dotted name is looked up by its top-level package)."""
    if not module:
        return None
    return EXTRA_OF_MODULE.get(module.partition(".")[0])


class MissingExtra(Exception):
    """A feature used without the extra that installs what it needs."""

    def __init__(self, feature: str, extra: str, module: str):
        super().__init__(f"{feature} needs the '{extra}' extra: pip install 'a3fast[{extra}]' "
                         f"({module} is not installed)")
        self.feature, self.extra, self.module = feature, extra, module


def require(feature: str, *modules: str) -> None:
    """MissingExtra naming `feature` when one of `modules` cannot be imported."""
    import importlib

    for module in modules:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            missing = exc.name or module
            raise MissingExtra(feature, extra_for(missing) or extra_for(module) or "import", missing) from None
