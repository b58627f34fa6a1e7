"""The ``agentcontext`` command.

Errors are one line on stderr and a non-zero exit code (a traceback only with
``--debug``, which, like ``--no-color``, may stand anywhere on the command
line); output a person reads is a rich table; ``--json`` gives scripts JSON.
Colour is off when stdout is not a terminal (and with ``NO_COLOR``). Text from
the user's files is printed as it is: never read as rich markup, and with
control characters shown as ``\\x1b``-style escapes, so a message cannot
restyle, clear or take over the terminal.

Exit codes: 0 success; 1 unexpected failure; 2 bad command-line usage; 3 bad
input (unreadable file, not JSON, nested too deeply, not a conversation,
unknown model, invalid conversation in ``--strict`` mode, a missing or locked
session file, a file that is not a session, a bad database URL); 4 the conversation cannot fit; 5 a
summarizer named with ``--summarizer`` failed and ``--allow-fallback`` was not
given (nothing is written).
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rich.console import Console

from .. import __version__
from ..exceptions import (
    AgentContextError,
    ContextOverflowError,
    NotASessionError,
    SessionLockedError,
    SessionNotFoundError,
    StoreError,
    StorePathError,
    StorePermissionError,
    UsageError,
)
from ._errors import cli_words
from ._text import one_line, plain

__all__ = ["EXIT_FALLBACK", "EXIT_INVALID", "EXIT_UNFIT", "Consoles", "explain", "main", "plain", "say_error"]

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INVALID = 3
EXIT_UNFIT = 4
EXIT_FALLBACK = 5


@dataclass(frozen=True)
class Consoles:
    """Where a command writes: ``out`` for results, ``err`` for progress and messages."""

    out: Console
    err: Console


Handler = Callable[[argparse.Namespace, Consoles], int]


class _Parser(argparse.ArgumentParser):
    """argparse with our one-line error format and exit code."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"agentcontext: error: {plain(message)} (see `{self.prog} --help`)\n")


def _formatter(prog: str) -> argparse.HelpFormatter:
    return argparse.RawDescriptionHelpFormatter(prog, max_help_position=32)


def _add_global_options(parser: argparse.ArgumentParser, *, top: bool) -> None:
    """``--debug`` and ``--no-color``, on the top parser and (recursively) on every sub-command.

    On sub-commands their default is "absent", so a sub-command never resets a
    value the top parser already read: ``agentcontext --debug fit ...`` and
    ``agentcontext fit ... --debug`` mean the same.
    """
    default = False if top else argparse.SUPPRESS
    parser.add_argument("--debug", action="store_true", default=default, help="show tracebacks for errors")
    parser.add_argument(
        "--no-color", action="store_true", default=default, help="no colour in output (also: NO_COLOR=1)"
    )
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):  # aliases share one parser
                _add_global_options(child, top=False)


def build_parser() -> argparse.ArgumentParser:
    """The full command-line parser (one sub-command per module)."""
    from . import _count, _db, _fit, _models, _replay, _sessions

    parser = _Parser(
        prog="agentcontext",
        description="Keep an LLM agent's conversation inside its model's context window.",
        epilog="Example:\n  agentcontext fit conversation.jsonl --model gpt-4o --window 16000 > fitted.jsonl\n\n"
        "--debug and --no-color may stand anywhere on the command line.",
        formatter_class=_formatter,
    )
    parser.add_argument("--version", action="version", version=f"agentcontext {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for module in (_fit, _replay, _sessions, _count, _models, _db):
        module.register(sub, _formatter)
    _add_global_options(parser, top=True)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version and usage errors exit from argparse
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    no_color = args.no_color or bool(os.environ.get("NO_COLOR"))
    # Off a terminal rich assumes 80 columns and truncates table cells; logs and pipes get room.
    width = None if sys.stdout.isatty() else 200
    # No markup, no emoji codes, no highlighting: user text ("[/INST]", ":smile:") prints as it is.
    options = {"no_color": no_color, "highlight": False, "markup": False, "emoji": False, "soft_wrap": True}
    out = Console(width=width, **options)  # type: ignore[arg-type]
    err = Console(stderr=True, width=width, **options)  # type: ignore[arg-type]
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return EXIT_USAGE
    try:
        return handler(args, Consoles(out=out, err=err))
    except KeyboardInterrupt:
        _fail(err, args, "interrupted")
        return 130
    except BrokenPipeError:
        _quiet_stdout()
        return EXIT_OK  # e.g. `agentcontext fit ... | head`
    except Exception as exc:
        code, message = explain(exc)
        _fail(err, args, message)
        return code


def explain(exc: Exception) -> tuple[int, str]:
    """The exit code and the one-line message for an error a command did not handle itself."""
    if isinstance(exc, ContextOverflowError):
        return EXIT_UNFIT, f"does not fit: {exc}"
    if isinstance(exc, UsageError):
        return EXIT_INVALID, str(exc)
    if isinstance(exc, StoreError):
        # A missing, misplaced or unreadable session file is bad input; other store failures are not.
        bad_input = (
            SessionNotFoundError,
            NotASessionError,
            StorePathError,
            StorePermissionError,
            SessionLockedError,
        )
        return EXIT_INVALID if isinstance(exc, bad_input) else EXIT_FAILURE, str(exc)
    if isinstance(exc, AgentContextError):
        return EXIT_FAILURE, str(exc)
    if isinstance(exc, RecursionError):
        # Data nested deeper than Python's stack (a crafted file): bad input, not a crash.
        return (
            EXIT_INVALID,
            "the input is nested too deeply to process (thousands of levels of arrays or objects)",
        )
    if isinstance(exc, MemoryError):
        return EXIT_FAILURE, "out of memory"
    # The last line of defence: one line, no traceback unless --debug.
    return EXIT_FAILURE, f"unexpected {type(exc).__name__}: {exc} (rerun with --debug for a traceback)"


def _quiet_stdout() -> None:
    """After a closed pipe, point stdout at /dev/null so the interpreter's final flush does not complain."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def _fail(err: Console, args: argparse.Namespace, message: str) -> None:
    if getattr(args, "debug", False):
        traceback.print_exc()
    say_error(err, message)


def say_error(err: Console, message: str) -> None:
    """Print an error as the command line does: one line, in command-line words (`cli_words`)."""
    err.print(f"agentcontext: error: {one_line(cli_words(message)) or 'failed'}")


def run() -> None:
    """Console-script entry point."""
    sys.exit(main())
