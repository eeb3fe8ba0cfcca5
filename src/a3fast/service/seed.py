"""Seeding a state that holds no agent yet with the declarations of `serve --fleet` (HTTP and
stdio alike; no HTTP stack needed)."""
from __future__ import annotations

from ..errors import SchemaError
from .config import ServiceConfig
from .state import ServiceState

__all__ = ["seed_fleet"]


def seed_fleet(state: ServiceState, config: ServiceConfig) -> None:
    """Declarations of --fleet, added when the state holds no agent yet (a restart keeps what the
    state holds). A fleet that reads in bulk (one Fleet) is read by the fleet's bulk reader in one
    pass and handed to the state whole; a sharded one takes the declarations through `put_agents`. SchemaError names
    every problem by line (or index) and JSON path; nothing is added then."""
    if not state.fresh or config.fleet is None:
        return
    from ..document_reader import load_fleet, read_declarations

    name = str(config.fleet)
    if state.fleets.reads_in_bulk:
        state.seed(load_fleet(config.fleet, state.engine, name=name))
        return
    parsed, problems = read_declarations(config.fleet)
    if problems:
        raise SchemaError(problems, name)
    state.put_agents([decl for _, decl in parsed])
    if state.journal is not None:
        state.journal.sync()
