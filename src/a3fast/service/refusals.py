"""What the service answers for an error: one table from exception type to status and problems,
shared by the HTTP shell and the stdio protocol, so the same error gets the same answer in both.

Anything the table does not name is an internal error: one line to the client (500 over HTTP,
`"status": 500` on stdio), the traceback to the log only.
"""
from __future__ import annotations

from typing import Callable

from ..distributed.sharded import ShardError
from ..errors import SchemaError
from ..fleet.placement import RouteError
from ..durable.journal import JournalFailed
from .k8s import BadArgs, ExtenderError
from .problems import ServiceError, from_library, journal_failed, problem
from .sharded import shard_unavailable

__all__ = ["REFUSALS", "refusal", "INTERNAL"]


def _route(exc: RouteError) -> ServiceError:
    return ServiceError(422, [problem("$.route", "a route that only adds requirements", str(exc))])


def _extender(exc: ExtenderError) -> ServiceError:
    return ServiceError(400, [problem("$.Pod.metadata.annotations", "valid A3 requirements", str(exc))])


#: exception type -> its answer; the first entry the exception is an instance of wins
REFUSALS: tuple[tuple[type[BaseException], Callable], ...] = (
    (ServiceError, lambda exc: exc),
    (RouteError, _route),                          # a route that would change a requirement: 422
    (SchemaError, from_library),                   # bad input: 400 with the library's problems
    (BadArgs, lambda exc: ServiceError(400, exc.problems)),   # not ExtenderArgs as kube-scheduler sends: 400
    (ExtenderError, _extender),                    # a pod's A3 requirements the extender cannot read: 400
    (ShardError, shard_unavailable),               # a shard of a sharded fleet did not answer: 503
    (JournalFailed, lambda exc: journal_failed(str(exc))),   # fail-stop: 503 until restarted
)

#: the answer to an exception the table does not name
INTERNAL = ServiceError(500, [problem("$", "a request the service can answer", "an internal error (logged)")])


def refusal(exc: BaseException) -> ServiceError | None:
    """The table's answer to `exc`, or None when it is not a refusal (an internal error)."""
    for kind, answer in REFUSALS:
        if isinstance(exc, kind):
            return answer(exc)
    return None
