"""Seeding a state that holds no agent yet with the declarations of `serve --fleet` (HTTP and
stdio alike; no HTTP stack needed)."""
from __future__ import annotations

from ..errors import SchemaError
from .config import ServiceConfig
from .state import ServiceState

__all__ = ["seed_fleet"]


def seed_fleet(state: ServiceState, config: ServiceConfig) -> None:
    """Declarations of --fleet, added when the state holds no agent yet (a restart keeps what the
    state holds)."""
    if state.order:
        return
    from ..schema import parse_declaration, loads

    if config.fleet is None:
        return
    data = config.fleet.read_bytes()
    text = data.lstrip()
    docs = loads(data, str(config.fleet)) if text[:1] == b"[" else [
        loads(line, f"{config.fleet} line {n}") for n, line in enumerate(data.splitlines(), 1) if line.strip()]
    problems = []
    decls = []
    for k, doc in enumerate(docs):
        try:
            decls.append(parse_declaration(doc))
        except SchemaError as exc:
            problems.extend(exc.with_source(f"{config.fleet} [{k}]").problems)
    if problems:
        raise SchemaError(problems, str(config.fleet))
    state.put_agents(decls)
    if state.journal is not None:
        state.journal.sync()
