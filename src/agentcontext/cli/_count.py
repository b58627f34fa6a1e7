"""``agentcontext count``: tokens of a text, a conversation or a whole request, as the model's provider bills them."""

from __future__ import annotations

import argparse
import heapq
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.table import Table

from .. import models
from .._intake import InstructionTokens, ToolTokens
from ..messages import tool_call_index, tool_name_for
from ..tokens import CalibratedCounter, TokenCounter
from ..tokens._calibrate import uncorrected
from . import Consoles
from ._common import add_model_options, model_from, window_from
from ._io import FORMATS, KEEP_UNKNOWN_HELP, InputError, read_request
from ._progress import Activity
from ._text import plain

HELP = """Count the tokens of a conversation or a whole request body (OpenAI Chat Completions, Anthropic
Messages or Responses API; JSON or JSON Lines), or of a plain text file, with the model's tokenizer
(exact for OpenAI models, offline), per role and per tool. A request's system prompt and tool
definitions are counted too: everything it sends.

Examples:
  agentcontext count examples/django-11133.jsonl --model gpt-4o
  agentcontext count request.json --model claude-sonnet-4-5 --json
  agentcontext count notes.txt --model my-local-llama --window 32000 --tokenizer cl100k_base"""


def register(sub: Any, formatter: Callable[[str], argparse.HelpFormatter]) -> None:
    """Add the ``count`` sub-command."""
    p = sub.add_parser(
        "count",
        help="count the tokens of a text, conversation or request",
        description=HELP,
        formatter_class=formatter,
    )
    p.add_argument("file", help="a conversation or request (.json/.jsonl) or a text file, or - for stdin")
    add_model_options(p, thresholds=False, reserve=False)
    p.add_argument("--format", choices=FORMATS, default="auto", help="the input's API (default: recognised)")
    p.add_argument("--json", action="store_true", help="print JSON for scripts")
    p.add_argument("--keep-unknown", action="store_true", help=KEEP_UNKNOWN_HELP)
    p.set_defaults(handler=run)


def _is_conversation(path: str) -> bool:
    if path == "-":
        return True
    suffix = Path(path).suffix.lower()
    if suffix in (".json", ".jsonl"):
        return True
    try:
        with open(path, "rb") as f:
            head = f.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")[:1]
    except OSError:
        return True  # let the reader report the error
    return head in (b"[", b"{")


def _read_text(path: str) -> str:
    try:
        data = Path(path).read_bytes()
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory, expected a file") from None
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except PermissionError:
        raise InputError(f"{path}: permission denied") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if b"\x00" in data[:65536]:
        raise InputError(f"{path}: binary data (NUL bytes), expected text")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 text (byte {exc.start}); save it as UTF-8") from None


def _counters(
    spec: models.ModelSpec, io: Consoles
) -> tuple[TokenCounter, TokenCounter, Callable[[int], int]]:
    """The model's counter as an engine counts with it, the uncorrected one, and the correction.

    Counts are taken uncorrected and corrected once, on the total, as the engine does (`ContextEngine.count`).
    """
    counter = models.counter_for(spec, calibrated=True)
    units, correct = uncorrected(counter)
    if isinstance(counter, CalibratedCounter) and counter.correction != 1.0:
        io.err.print(
            f"note: {spec.name} is counted by estimate, times {counter.correction:g} for what its provider "
            "is known to bill beyond it (the model's estimate_ratio)"
        )
    return counter, units, correct


def run(args: argparse.Namespace, io: Consoles) -> int:
    """Count and print."""
    spec, note = model_from(args)
    counter, units, scale = _counters(spec, io)
    if note:
        io.err.print(f"note: {plain(note)}")
    if not _is_conversation(args.file):
        text = _read_text(args.file)
        n = counter.count_text(text)
        result = {"file": args.file, "model": spec.name, "counter": counter.name, "kind": "text", "tokens": n}
        if args.json:
            io.out.print(json.dumps(result, ensure_ascii=False))
        else:
            io.out.print(f"{plain(args.file)}: {n:,} tokens ({spec.name}, {counter.name})")
        return 0
    with Activity(io) as activity:
        request = read_request(
            args.file,
            fmt=args.format,
            progress=activity.reading(args.file),
            unknown="keep" if args.keep_unknown else "raise",
        )
        msgs = request.messages
        per: list[int] = []
        with activity.step(f"counting {len(msgs):,} messages", total=len(msgs)) as done:
            for i, m in enumerate(msgs):
                per.append(units.count_message(m))
                if i % 4096 == 0:
                    done(i)
    for text in request.notes:
        io.err.print(f"note: {plain(text)}")
    tool_tokens = ToolTokens().count(request.counted_tools, units)
    instruction_tokens = InstructionTokens().count(request.instructions, units)
    total = scale(sum(per) + units.count_messages(()) + tool_tokens + instruction_tokens)
    per, tool_tokens, instruction_tokens = (
        [scale(n) for n in per],
        scale(tool_tokens),
        scale(instruction_tokens),
    )
    by_role: dict[str, list[int]] = {}
    by_tool: dict[str, list[int]] = {}
    calls = tool_call_index(msgs)
    for m, n in zip(msgs, per, strict=True):
        row = by_role.setdefault(m.role, [0, 0])
        row[0] += 1
        row[1] += n
        if m.role == "tool":
            row = by_tool.setdefault(tool_name_for(m, calls), [0, 0])
            row[0] += 1
            row[1] += n
    largest = heapq.nlargest(5, range(len(msgs)), key=per.__getitem__)
    window = window_from(args, spec)
    result = {
        "file": request.source,
        "format": request.format,
        "layout": request.layout,
        "model": spec.name,
        "counter": counter.name,
        "kind": "request" if request.layout == "body" else "conversation",
        "messages": len(msgs),
        "tokens": total,
        "instructions": {"tokens": instruction_tokens},
        "tool_definitions": {"tools": len(request.counted_tools or ()), "tokens": tool_tokens},
        "context_window": window,
        "share_of_window": round(total / window, 4),
        "by_role": {r: {"messages": v[0], "tokens": v[1]} for r, v in by_role.items()},
        "by_tool": {t: {"results": v[0], "tokens": v[1]} for t, v in by_tool.items()},
        "largest": [{"index": i, "role": msgs[i].role, "tokens": per[i]} for i in largest],
    }
    if args.json:
        io.out.print(json.dumps(result, ensure_ascii=False))
        return 0
    table = Table(title=f"{plain(request.source)}: {total:,} tokens for {spec.name} ({counter.name})")
    table.add_column("role / tool")
    table.add_column("messages", justify="right")
    table.add_column("tokens", justify="right")
    table.add_column("share", justify="right")

    def share(tokens: int) -> str:
        return f"{tokens / total:.0%}" if total else "-"

    if instruction_tokens:
        field = "system" if request.format == "anthropic" else "instructions"
        table.add_row(
            f"{field} (sent outside the messages)", "", f"{instruction_tokens:,}", share(instruction_tokens)
        )
    for role, (n, t) in sorted(by_role.items(), key=lambda kv: -kv[1][1]):
        table.add_row(role, f"{n:,}", f"{t:,}", share(t))
    for tool, (n, t) in sorted(by_tool.items(), key=lambda kv: -kv[1][1]):
        table.add_row(f"  tool: {plain(tool)}", f"{n:,}", f"{t:,}", share(t))
    if tool_tokens:
        table.add_row(
            "tool definitions",
            f"{len(request.counted_tools or ()):,}",
            f"{tool_tokens:,}",
            share(tool_tokens),
        )
    io.out.print(table)
    whose = f"{spec.name}'s" if window == spec.context_window else "the --window"
    io.out.print(
        f"{len(msgs):,} messages, {total:,} tokens: {total / window:.1%} of {whose} {window:,}-token window."
    )
    return 0
