"""The ``agentcontext`` command.

Errors are one line on stderr and a non-zero exit code (a traceback only with
``--debug``); output a person reads is a rich table; ``--json`` gives scripts
JSON. Colour is off when stdout is not a terminal (and with ``NO_COLOR``).

Exit codes: 0 success; 1 unexpected failure; 2 bad command-line usage; 3 bad
input (unreadable file, not JSON, not a conversation, unknown model, invalid
conversation in ``--strict`` mode, a missing or locked session file); 4 the
conversation cannot fit.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rich.console import Console

from ..exceptions import (
    AgentContextError,
    ContextOverflowError,
    SessionLockedError,
    SessionNotFoundError,
    StoreError,
    StorePathError,
    StorePermissionError,
    UsageError,
)

__all__ = ["EXIT_INVALID", "EXIT_UNFIT", "Consoles", "main"]

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INVALID = 3
EXIT_UNFIT = 4


@dataclass(frozen=True)
class Consoles:
    """Where a command writes: ``out`` for results, ``err`` for progress and messages."""

    out: Console
    err: Console


Handler = Callable[[argparse.Namespace, Consoles], int]


class _Parser(argparse.ArgumentParser):
    """argparse with our one-line error format and exit code."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"agentcontext: error: {message} (see `{self.prog} --help`)\n")


def _formatter(prog: str) -> argparse.HelpFormatter:
    return argparse.RawDescriptionHelpFormatter(prog, max_help_position=32)


def build_parser() -> argparse.ArgumentParser:
    """The full command-line parser (one sub-command per module)."""
    from . import _count, _fit, _models, _replay, _sessions

    parser = _Parser(
        prog="agentcontext",
        description="Keep an LLM agent's conversation inside its model's context window.",
        epilog="Example:\n  agentcontext fit conversation.jsonl --model gpt-4o --window 16000 > fitted.jsonl",
        formatter_class=_formatter,
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    parser.add_argument("--no-color", action="store_true", help="no colour in output (also: NO_COLOR=1)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for module in (_fit, _replay, _sessions, _count, _models):
        module.register(sub, _formatter)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    no_color = args.no_color or bool(os.environ.get("NO_COLOR"))
    # Off a terminal rich assumes 80 columns and truncates table cells; logs and pipes get room.
    width = None if sys.stdout.isatty() else 200
    out = Console(no_color=no_color, highlight=False, soft_wrap=True, width=width)
    err = Console(stderr=True, no_color=no_color, highlight=False, soft_wrap=True, width=width)
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return EXIT_USAGE
    try:
        return handler(args, Consoles(out=out, err=err))
    except ContextOverflowError as exc:
        _fail(err, args, f"does not fit: {exc}")
        return EXIT_UNFIT
    except UsageError as exc:
        _fail(err, args, str(exc))
        return EXIT_INVALID
    except StoreError as exc:
        # A missing, misplaced or unreadable session file is bad input; other store failures are not.
        _fail(err, args, str(exc))
        bad_input = (SessionNotFoundError, StorePathError, StorePermissionError, SessionLockedError)
        return EXIT_INVALID if isinstance(exc, bad_input) else EXIT_FAILURE
    except AgentContextError as exc:
        _fail(err, args, str(exc))
        return EXIT_FAILURE
    except KeyboardInterrupt:
        _fail(err, args, "interrupted")
        return 130
    except BrokenPipeError:
        return EXIT_OK  # e.g. `agentcontext fit ... | head`
    except Exception as exc:  # the last line of defence: one line, no traceback unless --debug
        _fail(err, args, f"unexpected {type(exc).__name__}: {exc} (rerun with --debug for a traceback)")
        return EXIT_FAILURE


def _fail(err: Console, args: argparse.Namespace, message: str) -> None:
    if getattr(args, "debug", False):
        traceback.print_exc()
    first = message.strip().splitlines()[0] if message.strip() else "failed"
    err.print(f"agentcontext: error: {first}", markup=False)


def run() -> None:
    """Console-script entry point."""
    sys.exit(main())
