"""``agentcontext fit``: prepare a conversation to fit a model's window."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import Consoles
from ._common import add_model_options, engine_from
from ._io import read_conversation, write_conversation

HELP = """Read a conversation in OpenAI Chat Completions format (a JSON array, a {"messages": [...]} object,
or JSON Lines; from a file or - for stdin), prepare it to fit the model's window, and write the
prepared messages in the same layout to stdout or --output. The report (level, tokens before and
after, every action taken) goes to --report as JSON.

Exit codes: 0 fits; 3 invalid input; 4 cannot fit (the system prompt and the latest user message
alone exceed the budget).

Example:
  agentcontext fit examples/django-11133.jsonl --model gpt-4o --window 16000 \\
      --output fitted.jsonl --report report.json"""


def register(sub: Any, formatter: Callable[[str], argparse.HelpFormatter]) -> None:
    """Add the ``fit`` sub-command."""
    p = sub.add_parser(
        "fit",
        help="prepare a conversation to fit a model's window",
        description=HELP,
        formatter_class=formatter,
    )
    p.add_argument("conversation", help="conversation file (.json or .jsonl), or - for stdin")
    add_model_options(p)
    p.add_argument("--output", "-o", help="write the prepared messages here instead of stdout")
    p.add_argument("--report", help="write the report as JSON here")
    p.add_argument(
        "--strict", action="store_true", help="refuse invalid conversations instead of repairing them"
    )
    p.set_defaults(handler=run)


def run(args: argparse.Namespace, io: Consoles) -> int:
    """Prepare the conversation and write it out."""
    conversation = read_conversation(args.conversation)
    engine = engine_from(args, strict=args.strict)
    prepared = engine.prepare(conversation.messages)
    report = prepared.report
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            write_conversation(prepared.messages, conversation.layout, f)
    else:
        write_conversation(prepared.messages, conversation.layout, sys.stdout)
        sys.stdout.flush()
    if args.report:
        Path(args.report).write_text(
            json.dumps(report.to_dict(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
        )
    kinds: dict[str, int] = {}
    for a in report.actions:
        kinds[a.kind] = kinds.get(a.kind, 0) + 1
    summary = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())) or "no changes"
    io.err.print(
        f"{conversation.source}: {report.tokens_before:,} -> {report.tokens_after:,} tokens "
        f"(budget {report.budget:,}, level {report.level.label}): {summary}",
        markup=False,
    )
    return 0
