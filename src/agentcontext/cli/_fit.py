"""``agentcontext fit``: fit a conversation or a whole request body into a model's window, once."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any, Literal

from .._thresholds import Thresholds
from ..artifacts import FileArtifactStore
from ..exceptions import ConfigError
from . import EXIT_FALLBACK, Consoles
from ._common import (
    add_model_options,
    add_summarizer_options,
    engine_from,
    model_from,
    named_summarizer,
    ratio,
)
from ._errors import SummarizerFailed
from ._io import FORMATS, KEEP_UNKNOWN_HELP, read_request, write_file, write_request
from ._progress import Activity
from ._reporting import SUMMARIZER_FAILURES, bounded_report, describe_fallback, fallbacks, summary_line
from ._text import plain

HELP = """Fit a conversation into a model's window, once: compact only if it is over the budget, and then keep
as much as the budget holds (less a small margin). Reads, from a file or - for stdin:

  - a conversation: a JSON array of messages or JSON Lines (one message per line), in OpenAI Chat
    Completions, Anthropic Messages or Responses API form;
  - a whole request body: OpenAI Chat Completions {"model", "messages", "tools", ...}, Anthropic
    Messages {"system", "messages", "tools", ...} or Responses API {"input", "instructions", "tools", ...}.

The format is recognised by its shape (--format names it). Everything the request sends is counted:
the messages, the system prompt or instructions, and the tool definitions. The output has the same
layout, with every field fit does not manage (model, tools, system, temperature...) unchanged; when
nothing needed to change, it is the input as it was. A body's max_tokens (or max_completion_tokens,
max_output_tokens) is the default --reserve.

What happened goes to stderr in one line (and every fallback in plain words); --report writes it as
JSON, grouped with counts and ranges (--report-full: every action with every message id).

Exit codes: 0 fits; 2 bad command-line usage; 3 invalid input; 4 cannot fit (the system prompt, the latest user message and
the tools alone exceed the budget); 5 the summarizer you named failed (nothing written; pass
--allow-fallback to fit without it).

Examples:
  agentcontext fit examples/django-11133.jsonl --model gpt-4o --window 16000 \\
      --output fitted.jsonl --report report.json
  agentcontext fit request.json --model claude-sonnet-4-5 -o request.fitted.json
  agentcontext fit run.jsonl --model my-local-llama --window 32000 --tokenizer estimate"""


def register(sub: Any, formatter: Callable[[str], argparse.HelpFormatter]) -> None:
    """Add the ``fit`` sub-command."""
    p = sub.add_parser(
        "fit",
        help="fit a conversation or request body into a model's window",
        description=HELP,
        formatter_class=formatter,
    )
    p.add_argument("conversation", help="conversation or request body (.json or .jsonl), or - for stdin")
    add_model_options(p, thresholds=False)
    p.add_argument(
        "--target",
        type=ratio,
        help="when compacting, fill the budget to this share instead of the default 0.96 (e.g. 0.9)",
    )
    p.add_argument("--format", choices=FORMATS, default="auto", help="the input's API (default: recognised)")
    add_summarizer_options(p)
    p.add_argument("--output", "-o", help="write the result here instead of stdout")
    p.add_argument("--report", help="write the report as JSON here (bounded: counts and ranges)")
    p.add_argument(
        "--report-full", action="store_true", help="the --report lists every action and message id"
    )
    p.add_argument(
        "--strict", action="store_true", help="refuse invalid conversations instead of repairing them"
    )
    p.add_argument(
        "--keep-unknown",
        action="store_true",
        help=KEEP_UNKNOWN_HELP,
    )
    p.add_argument(
        "--artifacts",
        metavar="DIR",
        help="keep the full text of tool outputs cut at ingest in DIR, under the artifact:sha256:... "
        "references the cut outputs name (read one back with agentcontext.artifacts.FileArtifactStore(DIR)"
        ".get(ref)); without it the full text is not kept, and the cut outputs say so",
    )
    p.set_defaults(handler=run)


def run(args: argparse.Namespace, io: Consoles) -> int:
    """Fit the input and write it out."""
    spec, note = model_from(args)
    notes = [note] if note else []
    with Activity(io) as activity:
        request = read_request(
            args.conversation,
            fmt=args.format,
            progress=activity.reading(args.conversation),
            unknown="keep" if args.keep_unknown else "raise",
        )
        notes.extend(request.notes)
        if request.reply_limit is not None:
            name, limit = request.reply_limit
            if args.reserve is None:
                args.reserve = limit
                notes.append(f"reserve {limit:,} tokens for the reply, from the body's {name}")
            elif args.reserve < limit:
                notes.append(
                    f"the body's {name} is {limit:,} but --reserve is {args.reserve:,}: a prompt filling the "
                    "budget plus that reply may exceed the window, and the provider may refuse it"
                )
        fill: bool | float = True if args.target is None else args.target
        if args.target is not None:
            if not 0.0 < args.target < 1.0:
                raise ConfigError(
                    f"--target must be below 1 (a share of the budget to fill), got {args.target}"
                )
            notes.append(f"one-shot fit: compaction fills {args.target:.0%} of the budget (--target)")
        engine = engine_from(args, strict=args.strict, thresholds=Thresholds(), spec=spec)
        # Not the engine's in-memory store: it ends with this process.
        artifacts: FileArtifactStore | Literal[False] = (
            FileArtifactStore(args.artifacts) if args.artifacts else False
        )
        with activity.step(f"fitting {len(request.messages):,} messages into {engine.budget:,} tokens"):
            try:
                prepared = engine.prepare(
                    request.messages,
                    tools=request.counted_tools,
                    instructions=request.instructions,
                    fill=fill,
                    artifacts=artifacts,
                )
            except SummarizerFailed as exc:
                io.err.print(
                    f"agentcontext: error: {plain(str(exc))}; nothing written. Fix the summarizer, or pass "
                    "--allow-fallback to fit without it"
                )
                return EXIT_FALLBACK
    report = prepared.report
    failed = [a for a in fallbacks(report.actions) if a.fallback in SUMMARIZER_FAILURES]
    named = named_summarizer(args)
    if named is not None and failed and not args.allow_fallback:
        io.err.print(
            f"agentcontext: error: the summarizer {named} did not deliver: {describe_fallback(failed[0])}; "
            "nothing written. Fix the summarizer, or pass --allow-fallback to fit without it"
        )
        return EXIT_FALLBACK

    def write(out: Any) -> None:
        write_request(request, prepared.messages, out, unchanged=prepared.compaction is None)

    if args.output:
        write_file(args.output, write)
    else:
        write(sys.stdout)
        sys.stdout.flush()
    if args.report:
        data = bounded_report(report, request.messages, full=args.report_full)
        data["fill_target"] = round(engine.thresholds.filled(None if fill is True else fill).target, 4)
        write_file(args.report, lambda f: f.write(json.dumps(data, indent=1, ensure_ascii=False) + "\n"))
    beside = [
        f"tools {report.tool_tokens:,}" if report.tool_tokens else "",
        f"system prompt {report.instruction_tokens:,}" if report.instruction_tokens else "",
    ]
    tools = "".join(f", {b}" for b in beside if b)
    # The report counts the input after ingest cuts; the line starts from the input as given.
    given = report.tokens_before + sum(a.tokens_saved for a in report.actions if a.strategy == "ingest")
    io.err.print(
        f"{plain(request.source)} ({request.describe()}): {given:,} -> {report.tokens_after:,} "
        f"tokens for {spec.name} (budget {report.budget:,}{tools}, level {report.level.label}): {summary_line(report)}"
    )
    for text in [*notes, *report.notes]:
        io.err.print(f"note: {plain(text)}")
    seen: dict[str, int] = {}
    for action in fallbacks(report.actions):
        text = describe_fallback(action)
        seen[text] = seen.get(text, 0) + 1
    for text, n in seen.items():
        io.err.print(f"fallback: {plain(text)}" + (f" ({n} times)" if n > 1 else ""))
    return 0
