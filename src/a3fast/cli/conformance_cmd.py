"""`a3fast conformance`: run the conformance vectors (§9) against a3fast or another verifier."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from ..conformance import (CAPABILITY_SUITE, MATCHING_SUITE, MAX_TIMEOUT_S, CommandNotStarted,
                           check_vector_files, default_vectors_dir, fleet_match, load_matching,
                           load_vectors, run_a3fast, run_command, run_vectors, vector_files,
                           verifier_argv)
from ..harness.client import command_argv
from ..files import require_kind
from .common import EXIT_NEGATIVE, EXIT_OK, BadInput


@click.command()
@click.option("--verifier", "command", default=None, metavar="CMD",
              help="Run another implementation instead of a3fast: CMD reads a trace on standard "
                   "input and prints the `a3fast verify --json` result form.")
@click.option("--vectors", "vectors_dir", default=None, metavar="DIR",
              type=click.Path(file_okay=False, path_type=Path),
              help="The vectors/ directory (default: $A3FAST_VECTORS, else the vectors installed with "
                   "a3fast, else the checkout's vectors/ or ./vectors).")
@click.option("--matcher", "matcher", default=None, metavar="CMD",
              help="With --suite matching: run the matching vectors and random worlds through CMD, "
                   "a matcher speaking the stdio protocol (docs/harness.md).")
@click.option("--seed", type=click.IntRange(0, 2**63 - 1), default=0, show_default=True,
              help="With --matcher: the seed of the random worlds.")
@click.option("--worlds", type=click.IntRange(0), default=100, show_default=True,
              help="With --matcher: how many random worlds (about 10 placements each).")
@click.option("--suite", type=click.Choice([CAPABILITY_SUITE, MATCHING_SUITE]), default=CAPABILITY_SUITE,
              show_default=True, help="Verifier vectors, or matching vectors (run on a3fast's Fleet).")
@click.option("--required-only", is_flag=True,
              help="Skip the optional/ vectors, which depend on a3fast's readings of the spec.")
@click.option("--engine", type=click.Choice(["native", "pure"]), default=None,
              help="Engine for the matching vectors (default: a3fast.ENGINE).")
@click.option("--timeout", type=float, default=30.0, show_default=True,
              help="Seconds allowed per vector for CMD, or per answer of the matcher (more than 0, "
                   "at most 3600).")
@click.option("-v", "--verbose", is_flag=True, help="Also list the vectors that passed.")
def conformance(command, matcher, seed, worlds, vectors_dir, suite, required_only, engine, timeout, verbose):
    """Run the conformance vectors and print `N passed, M failed`, naming each failure.

    Exit 0 all passed, 1 some failed, 2 the vectors cannot be read (or a --verifier/--matcher
    command is malformed or cannot be started).
    """
    if not 0 < timeout <= MAX_TIMEOUT_S:
        raise BadInput(f"--timeout: expected a positive number of seconds up to {MAX_TIMEOUT_S:g}, "
                       f"found {timeout:g}")
    if command is not None:
        try:
            verifier_argv(command)
        except ValueError as exc:
            raise BadInput(f"--verifier: {exc}") from None
    root = vectors_dir or default_vectors_dir()
    if root is None or not (Path(root) / suite).is_dir():
        raise BadInput(f"{root or 'vectors/'}: no {suite}/ vectors here; give --vectors DIR "
                       "or set A3FAST_VECTORS")
    for path in vector_files(Path(root), suite):  # a file of another kind a3fast writes: one line
        require_kind(str(path), "vectors" if suite == CAPABILITY_SUITE else "matching vectors")
    _check_format(Path(root), suite)
    if matcher is not None:
        if suite != MATCHING_SUITE:
            raise BadInput("--matcher runs the matching suite: give --suite matching")
        if command is not None:
            raise BadInput("--matcher and --verifier run different suites: give one of them")
        try:
            command_argv(matcher)
        except ValueError as exc:
            raise BadInput(f"--matcher: {exc}") from None
        sys.exit(_run_matcher(Path(root), matcher, seed, worlds, timeout, verbose))
    if suite == MATCHING_SUITE:
        if command is not None:
            raise BadInput("--verifier runs the verifier vectors; matching vectors run on a3fast's Fleet")
        failures, passed = _run_matching(Path(root), engine, verbose)
    else:
        failures, passed = _run_verifier(Path(root), command, required_only, timeout, verbose)
    for name, why in failures:
        click.echo(f"FAIL {name}: {why}")
    click.echo(f"{passed} passed, {len(failures)} failed")
    sys.exit(EXIT_NEGATIVE if failures else EXIT_OK)


def _check_format(root: Path, suite: str) -> None:
    from importlib.util import find_spec

    if find_spec("jsonschema") is None:  # the format check needs it; running the vectors does not
        return
    problems = _loaded(root, suite, lambda: check_vector_files(root, suite))
    if problems:
        raise BadInput([f"{root / suite}/{p}" for p in problems])


def _loaded(root: Path, suite: str, load):
    """What `load` reads from the vectors; a file it cannot read, or one that is not in the
    vectors' format, is BadInput (the format check names the problem when jsonschema is present)."""
    try:
        return load()
    except OSError as exc:
        raise BadInput(f"{exc.filename or root / suite}: cannot read: {exc.strerror or exc}") from None
    except (ValueError, KeyError, TypeError, AttributeError, IndexError, RecursionError) as exc:
        raise BadInput(f"{root / suite}: not in the vectors' format ({type(exc).__name__}: "
                       f"{' '.join(str(exc).split())[:200]})") from None


def _run_verifier(root: Path, command, required_only, timeout, verbose):
    vectors = _loaded(root, CAPABILITY_SUITE, lambda: load_vectors(root, CAPABILITY_SUITE, optional=not required_only))
    runner = run_a3fast if command is None else run_command(command, timeout)

    def report(outcome):
        if verbose and outcome.passed:
            click.echo(f"ok   {outcome.vector.id}")

    try:
        outcomes = run_vectors(vectors, runner, report)
    except CommandNotStarted as exc:
        raise BadInput(f"--verifier: {exc}") from None
    failures = [(o.vector.id, o.explain()) for o in outcomes if not o.passed]
    return failures, len(outcomes) - len(failures)


def _run_matcher(root: Path, matcher: str, seed: int, worlds: int, timeout: float, verbose: bool):
    from ..harness.client import MatcherFailure
    from ..harness.suite import GIVE_UP_AFTER, describe_failures, run_matching_suite

    cases = _loaded(root, MATCHING_SUITE, lambda: load_matching(root))
    try:
        result = run_matching_suite(matcher, cases, worlds, seed, timeout,
                                    report=click.echo if verbose else (lambda line: None))
    except MatcherFailure as exc:
        raise BadInput(f"--matcher: {exc.message}") from None
    for line in describe_failures(result.failures):
        click.echo(line)
    if result.not_run:
        click.echo(f"{result.not_run} not run (vectors: {result.not_run - result.not_run_random}, random worlds: "
                   f"{result.not_run_random}): the matcher crashed or hung {GIVE_UP_AFTER} times")
    click.echo(f"{result.placements} placements checked in {result.seconds:.1f} s "
               f"({len(cases)} vectors, {worlds} random worlds, seed {seed})")
    click.echo(f"{result.passed} passed, {len(result.failures) + result.not_run} failed")
    return EXIT_NEGATIVE if result.failures else EXIT_OK


def _run_matching(root: Path, engine, verbose):
    failures, passed = [], 0
    for case in _loaded(root, MATCHING_SUITE, lambda: load_matching(root)):
        try:
            differences = fleet_match(case, engine).differences(case.expected)
        except Exception as exc:  # a case the matcher refuses is a failure to report, not a crash
            differences = [f"{type(exc).__name__}: {exc}"]
        if differences:
            failures.append((case.id, "; ".join(differences)))
        else:
            passed += 1
            if verbose:
                click.echo(f"ok   {case.id}")
    return failures, passed
