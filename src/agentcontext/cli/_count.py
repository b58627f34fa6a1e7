"""``agentcontext count``: tokens of a text or a conversation, as the model's provider bills them."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.table import Table

from .. import models
from ..messages import tool_call_index, tool_name_for
from . import Consoles
from ._io import InputError, read_conversation

HELP = """Count the tokens of a conversation (OpenAI format, JSON or JSON Lines) or of a plain text file,
with the model's tokenizer (exact for OpenAI models, offline), per role and per tool.

Example:
  agentcontext count examples/django-11133.jsonl --model gpt-4o
  agentcontext count notes.txt --model claude-sonnet-4-5 --json"""


def register(sub: Any, formatter: Callable[[str], argparse.HelpFormatter]) -> None:
    """Add the ``count`` sub-command."""
    p = sub.add_parser(
        "count",
        help="count the tokens of a text or conversation",
        description=HELP,
        formatter_class=formatter,
    )
    p.add_argument("file", help="a conversation (.json/.jsonl) or a text file, or - for stdin")
    p.add_argument("--model", "-m", required=True, help="model name from `agentcontext models`")
    p.add_argument("--json", action="store_true", help="print JSON for scripts")
    p.set_defaults(handler=run)


def _is_conversation(path: str) -> bool:
    if path == "-":
        return True
    suffix = Path(path).suffix.lower()
    if suffix in (".json", ".jsonl"):
        return True
    try:
        head = Path(path).read_text(encoding="utf-8", errors="replace")[:1].lstrip()
    except OSError:
        return True  # let the reader report the error
    return head in ("[", "{")


def run(args: argparse.Namespace, io: Consoles) -> int:
    """Count and print."""
    spec = models.get(args.model)
    counter = models.counter_for(spec)
    if not _is_conversation(args.file):
        try:
            text = Path(args.file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(f"{args.file}: cannot be read as UTF-8 text ({exc})") from None
        tokens = counter.count_text(text)
        result = {
            "file": args.file,
            "model": spec.name,
            "counter": counter.name,
            "kind": "text",
            "tokens": tokens,
        }
        if args.json:
            io.out.print(json.dumps(result), markup=False)
        else:
            io.out.print(f"{args.file}: {tokens:,} tokens ({spec.name}, {counter.name})", markup=False)
        return 0
    conv = read_conversation(args.file)
    msgs = conv.messages
    total = counter.count_messages(msgs)
    by_role: dict[str, list[int]] = {}
    by_tool: dict[str, list[int]] = {}
    calls = tool_call_index(msgs)
    for m in msgs:
        n = counter.count_message(m)
        by_role.setdefault(m.role, [0, 0])
        by_role[m.role][0] += 1
        by_role[m.role][1] += n
        if m.role == "tool":
            tool = tool_name_for(m, calls)
            by_tool.setdefault(tool, [0, 0])
            by_tool[tool][0] += 1
            by_tool[tool][1] += n
    largest = sorted(msgs, key=lambda m: -counter.count_message(m))[:5]
    result = {
        "file": conv.source,
        "model": spec.name,
        "counter": counter.name,
        "kind": "conversation",
        "messages": len(msgs),
        "tokens": total,
        "context_window": spec.context_window,
        "share_of_window": round(total / spec.context_window, 4),
        "by_role": {r: {"messages": v[0], "tokens": v[1]} for r, v in by_role.items()},
        "by_tool": {t: {"results": v[0], "tokens": v[1]} for t, v in by_tool.items()},
        "largest": [
            {"index": msgs.index(m), "role": m.role, "tokens": counter.count_message(m)} for m in largest
        ],
    }
    if args.json:
        io.out.print(json.dumps(result, ensure_ascii=False), markup=False)
        return 0
    table = Table(title=f"{conv.source}: {total:,} tokens for {spec.name} ({counter.name})")
    table.add_column("role / tool")
    table.add_column("messages", justify="right")
    table.add_column("tokens", justify="right")
    table.add_column("share", justify="right")
    for role, (count, tokens) in sorted(by_role.items(), key=lambda kv: -kv[1][1]):
        table.add_row(role, f"{count:,}", f"{tokens:,}", f"{tokens / total:.0%}")
    for tool, (count, tokens) in sorted(by_tool.items(), key=lambda kv: -kv[1][1]):
        table.add_row(f"  tool: {tool}", f"{count:,}", f"{tokens:,}", f"{tokens / total:.0%}")
    io.out.print(table)
    io.out.print(
        f"{len(msgs):,} messages, {total:,} tokens: {total / spec.context_window:.1%} of {spec.name}'s "
        f"{spec.context_window:,}-token window.",
        markup=False,
    )
    return 0
