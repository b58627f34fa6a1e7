"""``agentcontext replay``: replay a recorded agent conversation through the engine."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from typing import Any

from rich.table import Table

from ..compaction import Level
from ..replay import ReplayResult, replay
from ..strategies import MaskObservations, SlidingWindow, Strategy, TokenBudget
from . import EXIT_FALLBACK, EXIT_UNFIT, Consoles
from ._common import add_model_options, add_summarizer_options, engine_from, model_from
from ._errors import SummarizerFailed
from ._io import FORMATS, KEEP_UNKNOWN_HELP, read_request
from ._progress import Activity
from ._text import plain

HELP = """Replay a recorded agent conversation (or request body, in any format `fit` reads) as the agent lived it:
before each assistant message, the engine prepares the context from everything that came before, as an
agent loop calls it. Prints model calls, compactions by level, peak and mean context tokens, input tokens
sent, the share a provider's prompt cache would serve, the cost with and without caching, and the share
of identifiers from evicted messages still in the context. No API key needed: the default summarizer is
offline.

Exit codes: 0 every call fit; 3 invalid input; 4 some calls could not fit the budget (the figures are
still printed, without them); 5 the summarizer you named failed.

Examples:
  agentcontext replay examples/django-11133.jsonl --model gpt-4o --window 16000
  agentcontext replay run.jsonl --model gpt-4o --window 32000 --compare --plot tokens.png
  agentcontext replay run.jsonl --model gpt-4o --summarizer openai:gpt-4o-mini --json"""

STRATEGIES = ("default", "sliding_window", "token_budget", "masking")


def register(sub: Any, formatter: Callable[[str], argparse.HelpFormatter]) -> None:
    """Add the ``replay`` sub-command."""
    p = sub.add_parser(
        "replay",
        help="replay a recorded conversation through the engine",
        description=HELP,
        formatter_class=formatter,
    )
    p.add_argument("conversation", help="conversation or request body (.json or .jsonl), or - for stdin")
    add_model_options(p)
    p.add_argument("--format", choices=FORMATS, default="auto", help="the input's API (default: recognised)")
    add_summarizer_options(p)
    p.add_argument(
        "--strategy",
        choices=STRATEGIES,
        default="default",
        help="the compaction strategy (default: the tiered pipeline)",
    )
    p.add_argument(
        "--compare",
        action="store_true",
        help="also replay with the plain strategies and print them side by side",
    )
    p.add_argument("--plot", metavar="FILE.png", help="draw context tokens per call (needs the plot extra)")
    p.add_argument("--json", action="store_true", help="print the figures as JSON for scripts")
    p.add_argument("--keep-unknown", action="store_true", help=KEEP_UNKNOWN_HELP)
    p.set_defaults(handler=run)


def plain_pipelines(name: str) -> dict[Level, Strategy] | None:
    """The pipeline for a ``--strategy`` name (None: the engine's default tiers)."""
    if name == "default":
        return None
    strategy: Strategy
    if name == "sliding_window":
        strategy = SlidingWindow(keep_last_messages=40)
    elif name == "token_budget":
        strategy = TokenBudget()
    else:
        strategy = MaskObservations(keep_recent=3, clear_at_least=0)
    # The engine still guarantees the fit: hard truncation follows when a plain strategy falls short.
    return {Level.NORMAL: strategy, Level.AGGRESSIVE: strategy, Level.EMERGENCY: strategy}


def _money(v: float | None) -> str:
    return "-" if v is None else f"${v:,.4f}"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.1%}"


def rows(r: ReplayResult) -> list[tuple[str, str]]:
    """The table rows for one replay."""
    comp = r.compactions
    return [
        ("model calls", f"{r.calls:,}"),
        (
            "compactions (normal / aggressive / emergency)",
            f"{comp.get('normal', 0)} / {comp.get('aggressive', 0)} / {comp.get('emergency', 0)}",
        ),
        ("calls that could not fit", f"{r.overflows:,}"),
        ("invalid or over-budget prompts", f"{r.violations + r.over_budget:,}"),
        ("peak context tokens", f"{r.peak_tokens:,}"),
        ("mean context tokens", f"{r.mean_tokens:,.0f}"),
        ("input tokens sent", f"{r.total_input:,}"),
        ("served by the prompt cache", _pct(r.cache_share)),
        ("input cost without caching", _money(r.input_cost)),
        ("input cost with caching", _money(r.input_cost_cached)),
        ("output cost", _money(r.output_cost)),
        ("identifiers retained", _pct(r.identifiers_retained)),
    ]


def run(args: argparse.Namespace, io: Consoles) -> int:
    """Replay and report."""
    spec, note = model_from(args)
    if note:
        io.err.print(f"note: {plain(note)}")
    names = list(STRATEGIES) if args.compare else [args.strategy]
    results: dict[str, ReplayResult] = {}
    with Activity(io) as activity:
        request = read_request(
            args.conversation,
            fmt=args.format,
            progress=activity.reading(args.conversation),
            unknown="keep" if args.keep_unknown else "raise",
        )
        messages = request.messages
        calls = sum(1 for i, m in enumerate(messages) if m.role == "assistant" and i > 0)
        for name in names:
            engine = engine_from(args, pipelines=plain_pipelines(name), spec=spec)
            with activity.step(f"replay ({name})", total=calls) as done:
                try:
                    results[name] = replay(
                        messages,
                        engine,
                        spec=spec,
                        tools=request.counted_tools,
                        instructions=request.instructions,
                        progress=done,
                    )
                except SummarizerFailed as exc:
                    io.err.print(
                        f"agentcontext: error: {plain(str(exc))}; replay stopped. Fix the summarizer, or pass "
                        "--allow-fallback to replay without it"
                    )
                    return EXIT_FALLBACK
    if args.plot:
        from ._plot import plot_replay

        plot_replay(results, args.plot, title=f"{request.source} on {spec.name}")
    if args.json:
        payload = {name: r.to_dict() for name, r in results.items()}
        io.out.print(json.dumps(payload if args.compare else payload[names[0]], ensure_ascii=False))
        return _unfit(results, io)
    first = results[names[0]]
    table = Table(
        title=(
            f"{plain(request.source)}: {len(request.messages):,} messages replayed on {spec.name}, "
            f"window {first.window:,}, reserve {first.reserve:,}"
        )
    )
    table.add_column("")
    for name in names:
        table.add_column(name, justify="right")
    per = {name: rows(r) for name, r in results.items()}
    for i, (label, _) in enumerate(per[names[0]]):
        table.add_row(label, *(per[name][i][1] for name in names))
    io.out.print(table)
    if args.plot:
        io.err.print(f"plot written to {plain(os.fspath(args.plot))}")
    return _unfit(results, io)


def _unfit(results: dict[str, ReplayResult], io: Consoles) -> int:
    """Exit code 4, said on stderr, when some calls could not fit (as `fit` stops); else 0."""
    worst = max(results.values(), key=lambda r: r.overflows)
    if not worst.overflows:
        return 0
    io.err.print(
        f"agentcontext: error: does not fit: {worst.overflows:,} of {worst.calls:,} model calls could not fit "
        f"the budget of {worst.budget:,} tokens (the system prompt, the latest user message and the tools "
        "alone exceed it); they are left out of the figures. Give a larger --window, or a smaller --reserve"
    )
    return EXIT_UNFIT
