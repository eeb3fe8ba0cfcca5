"""The `a3fast` command: a thin shell over the library, one module per subcommand.

Subcommands are imported only when invoked, so `a3fast verify` does not pay for numpy-heavy
benchmark code and a fresh shell starts quickly.
"""
from __future__ import annotations

import errno
import importlib
import os
import sys
import traceback

import click

from .._version import __version__
from ..engines import ENGINE, ENGINE_PROBLEM, NATIVE_AVAILABLE
from ..files import InputError
from .common import (CLOSED_OUTPUT, EXIT_BAD_INPUT, EXIT_INTERNAL, WRITE_FAILURES, BadInput, closed_output,
                     closed_stream, say, silenced)
from .extras import MissingExtra, extra_for

#: command name -> "module:attribute" under a3fast.cli
COMMANDS = {
    "place": "place_cmd:place",
    "gen-fleet": "workload_cmd:gen_fleet",
    "gen-tasks": "workload_cmd:gen_tasks",
    "demo": "demo_cmd:demo",
    "verify": "verify_cmd:verify",
    "conformance": "conformance_cmd:conformance",
    "bench": "bench_cmd:bench",
    "explain": "explain_cmd:explain",
    "report": "report_cmd:report",
    "replay": "replay_cmd:replay",
    "encode": "compact_cmd:encode",
    "decode": "compact_cmd:decode",
    "resolve": "resolve_cmd:resolve",
    "import": "import_cmd:import_group",
    "serve": "serve_cmd:serve",
    "schema": "serve_cmd:schema",
}


class LazyGroup(click.Group):
    """A click group whose subcommands live in their own modules and load on first use."""

    def main(self, *args, **kwargs):
        """click's `main`; a message it cannot show because standard error was closed by its reader
        (`2>&1 | head`: a bad option's usage), or could not write (a full disk), leaves the command its
        exit code, 2, not an uncaught error's 1, which would read as an answer (a bad input's own lines
        see to that themselves: `BadInput.show`)."""
        try:
            return super().main(*args, **kwargs)
        except OSError:
            silenced(sys.stderr)
            sys.exit(EXIT_BAD_INPUT)

    def make_context(self, *args, **kwargs):
        """click's `make_context`, where `--help` and `--version` print: a standard output closed by
        its reader ends them with 141, as it ends a command (click would exit 1)."""
        try:
            return super().make_context(*args, **kwargs)
        except BrokenPipeError:
            closed_output()
        except OSError:     # a standard output that cannot be written (a full disk): bad input, not 1
            silenced(sys.stdout)
            sys.exit(EXIT_BAD_INPUT)

    def invoke(self, ctx):
        """Run the subcommand; an exception no command turned into an answer or a bad-input message
        is a3fast's own fault, reported on one line with exit code 3 so that it cannot pass for an
        answer (A3FAST_DEBUG=1 prints its traceback instead, with the same exit code). Standard
        output closed by its reader ends the command with exit code 141, and one that cannot be
        written (a full disk) is reported as an output that cannot be written, exit code 2, as a
        file's would be."""
        try:
            try:
                return super().invoke(ctx)
            finally:
                # what is still buffered is written while a failure to write it is reported here,
                # not by the interpreter at exit (however the command ended, its exit code too);
                # a process started without a standard output has none to flush
                if sys.stdout is not None:
                    sys.stdout.flush()
        except BrokenPipeError:
            closed_output()
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort,
                SystemExit, KeyboardInterrupt):
            raise
        except InputError as exc:  # a file given to the command that it cannot read as it must
            raise BadInput(exc.lines) from None
        except OSError as exc:
            if exc.errno == errno.EBADF and exc.strerror == CLOSED_OUTPUT:
                sys.stdout = None      # nothing more to write where nothing can be, at exit either
                raise BadInput(f"output: cannot write: {CLOSED_OUTPUT}") from None
            if exc.errno not in WRITE_FAILURES or exc.filename is not None:
                return self._internal(ctx, exc)
            raise BadInput(f"output: cannot write: {exc.strerror or exc}") from None
        except MemoryError:      # an endless input (/dev/zero) or work past this machine's memory
            raise BadInput("out of memory: the input or the work asked for is larger than this process can "
                           "hold (a device such as /dev/zero never ends)") from None
        except MissingExtra as exc:
            say(f"a3fast: {exc}")
            ctx.exit(EXIT_BAD_INPUT)
        except Exception as exc:
            return self._internal(ctx, exc)

    def resolve_command(self, ctx, args):
        """The subcommand, with the standard streams it may use: a process started with
        descriptor 0 or 1 closed has None there, and each becomes a stream that says so when a
        command reads or writes it (exit 2). The HTTP service, which prints only its status, keeps
        None, and a command writing to -o only never meets it."""
        name, command, rest = super().resolve_command(ctx, args)
        if sys.stdin is None:
            sys.stdin = closed_stream("input")
        if sys.stdout is None and name != "serve":
            sys.stdout = closed_stream("output")
        return name, command, rest

    @staticmethod
    def _internal(ctx, exc: Exception):
        """An exception no command answered for: a missing extra's module, named as such, or
        a3fast's own fault."""
        missing = exc.name if isinstance(exc, ModuleNotFoundError) else None
        extra = extra_for(missing)
        if extra is not None:
            # A module of an optional extra that no command checked for first: still the
            # caller's install to complete, named as such, not a3fast's fault.
            command = f"a3fast {ctx.invoked_subcommand}" if ctx.invoked_subcommand else "this command"
            say(f"a3fast: {command} needs the '{extra}' extra: pip install 'a3fast[{extra}]' "
                f"({missing} is not installed)")
            ctx.exit(EXIT_BAD_INPUT)
        if os.environ.get("A3FAST_DEBUG") == "1":
            # the traceback instead of the one line, and still exit 3: a caller reading the exit
            # code must not take an internal error for an answer (1 is "unschedulable")
            if sys.stderr is not None:      # closed: nothing is said, not even on standard output
                try:
                    traceback.print_exception(exc, file=sys.stderr)
                except BrokenPipeError:
                    silenced(sys.stderr)
            ctx.exit(EXIT_INTERNAL)
        message = " ".join(str(exc).split())
        say(f"a3fast: internal error: {type(exc).__name__}: {message} (please report)")
        ctx.exit(EXIT_INTERNAL)

    def list_commands(self, ctx):
        return sorted(name for name in COMMANDS if self._load(name) is not None)

    def get_command(self, ctx, name):
        return self._load(name)

    @staticmethod
    def _load(name):
        target = COMMANDS.get(name)
        if target is None:
            return None
        module_name, attr = target.split(":")
        try:
            module = importlib.import_module(f"{__name__}.{module_name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"{__name__}.{module_name}":
                return None  # a command this build does not ship
            raise
        return getattr(module, attr)


def _version_message() -> str:
    if ENGINE_PROBLEM is not None:
        return f"a3fast {__version__}, engine: none ({ENGINE_PROBLEM})"
    native = "native (Cython core)" if ENGINE == "native" else (
        "pure (the Cython core is not built)" if not NATIVE_AVAILABLE else "pure (forced by A3FAST_ENGINE)")
    return f"a3fast {__version__}, engine: {native}"


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(message=_version_message(), version=__version__)
def main() -> None:
    """a3fast: match tasks to AI agents by the A3 Capability Schema 1.0, and explain every decision.

    Exit codes: 0 success, 1 a negative answer (unschedulable, invalid trace, unresolved skill),
    2 bad input (unreadable file, invalid JSON, schema errors, a bad option, no command (the help
    is printed), an output that cannot be written, a feature whose optional extra is not
    installed: the message names it), 3 an internal error (a3fast's fault, never an answer: please
    report it; A3FAST_DEBUG=1 shows the traceback), 141 standard output closed by its reader
    before everything was written.

    Outputs: -o/--output FILE writes a file (atomically); --json prints machine-readable results
    on standard output. Long work draws a progress bar on standard error when it is a terminal.
    """
    if ENGINE_PROBLEM is not None:      # an engine chosen by mistake is bad input, before any command
        raise BadInput(ENGINE_PROBLEM)
