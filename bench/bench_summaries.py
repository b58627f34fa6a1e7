"""How many identifiers from evicted messages survive compaction, per pipeline, on real agent conversations.

For every conversation in the evaluation set, the window is a quarter of the
conversation's own tokens (o200k_base), and the conversation is replayed the
way an agent loop runs: ``prepare`` before each assistant message, with the
history so far, one engine per conversation. At each step, the messages of the
history that are not in the prepared context verbatim are the *evicted* ones
(dropped, masked, summarized, cut at ingest). Their identifiers (file paths,
URLs, ids and hashes, numbers with units, error names, dates: see
`agentcontext.summarizers.extract_identifiers`) are collected, and an
identifier counts as kept when the exact string appears anywhere in the
prepared context (message text or tool-call arguments).

A step is *feasible* when the system prompt plus the first and latest user
messages leave at least 64 tokens under the configured target (50% of the
budget), the condition for any summary to fit before the engine raised its
target above large system prompts; the definition is kept so figures compare
across versions. The table also counts compactions (calls that changed the
context) and the steps whose target the engine raised (`Thresholds.above`).

Pipelines compared at the same window, all with the engine's ingest truncation:

- ``default``: the engine's default pipeline, with the offline `ExtractiveSummarizer`;
- ``default-mask-first``: the same tiers in the order used with an LLM summarizer
  (mask old tool results, then summarize);
- ``mask+budget``: masking then token budget (the engine before summarization);
- ``token_budget``: token budget only (hard truncation in emergencies).

Run from the repository root::

    python bench/bench_summaries.py                    # all conversations, the table for RESULTS.md
    python bench/bench_summaries.py --limit 10 --json out.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from agentcontext import ContextEngine, Level
from agentcontext.exceptions import ContextOverflowError
from agentcontext.formats.openai import to_messages
from agentcontext.messages import Message
from agentcontext.strategies import HardTruncate, MaskObservations, Strategy, Tiered, TokenBudget
from agentcontext.strategies.summarize import Summarize
from agentcontext.summarizers import ExtractiveSummarizer, SummaryRequest, extract_identifiers
from agentcontext.tokens import TiktokenCounter

EVAL = Path(__file__).resolve().parents[2] / "shared" / "eval"


def mask_first_pipelines() -> dict[Level, Strategy]:
    """The default tiers in the order used with an LLM summarizer: mask, summarize, drop."""
    return {
        Level.NORMAL: Tiered(tiers=(MaskObservations(keep_recent=3), Summarize(), TokenBudget())),
        Level.AGGRESSIVE: Tiered(
            tiers=(
                MaskObservations(keep_recent=1, clear_at_least=0, shorten_arguments_over=400),
                Summarize(keep_recent=0.2),
                TokenBudget(),
            )
        ),
        Level.EMERGENCY: Tiered(
            tiers=(
                MaskObservations(keep_recent=1, clear_at_least=0, shorten_arguments_over=200),
                Summarize(keep_recent=0.1),
                HardTruncate(),
            )
        ),
    }


def mask_budget_pipelines() -> dict[Level, Strategy]:
    """Masking, then dropping the oldest rounds: the engine's pipeline before summarization."""
    return {
        Level.NORMAL: Tiered(tiers=(MaskObservations(keep_recent=3), TokenBudget())),
        Level.AGGRESSIVE: Tiered(
            tiers=(
                MaskObservations(keep_recent=1, clear_at_least=0, shorten_arguments_over=400),
                TokenBudget(),
            )
        ),
        Level.EMERGENCY: Tiered(
            tiers=(
                MaskObservations(keep_recent=1, clear_at_least=0, shorten_arguments_over=200),
                HardTruncate(),
            )
        ),
    }


def token_budget_pipelines() -> dict[Level, Strategy]:
    """Dropping the oldest rounds only."""
    return {
        Level.NORMAL: Tiered(tiers=(TokenBudget(),)),
        Level.AGGRESSIVE: Tiered(tiers=(TokenBudget(),)),
        Level.EMERGENCY: Tiered(tiers=(HardTruncate(),)),
    }


PIPELINES: dict[str, Callable[[], dict[Level, Strategy] | None]] = {
    "default": lambda: None,
    "default-mask-first": mask_first_pipelines,
    "mask+budget": mask_budget_pipelines,
    "token_budget": token_budget_pipelines,
}


@dataclass
class Tally:
    """Identifier counts for one pipeline on one conversation."""

    kept: int = 0
    evicted: int = 0
    feasible_kept: int = 0
    feasible_evicted: int = 0
    final_kept: int = 0
    final_evicted: int = 0
    steps: int = 0
    overflow_steps: int = 0
    summaries: int = 0
    summarizer_calls: int = 0
    compactions: int = 0
    raised_steps: int = 0
    fallbacks: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def share(self) -> float | None:
        return self.kept / self.evicted if self.evicted else None


@dataclass(frozen=True, kw_only=True)
class CountingSummarizer(ExtractiveSummarizer):
    """The extractive summarizer, counting its calls: with the masking-first tiers it stands in for an
    LLM summarizer, whose calls are what a cooldown saves (summaries written offline in a cooldown
    do not call it)."""

    calls: list[int] = field(default_factory=lambda: [0], compare=False, repr=False)

    def summarize(self, request: SummaryRequest) -> str:
        self.calls[0] += 1
        return super().summarize(request)


_IDS: dict[str, tuple[str, ...]] = {}


def ids_of(m: Message) -> tuple[str, ...]:
    """The identifiers in a message's text and tool-call arguments (cached by id)."""
    hit = _IDS.get(m.id)
    if hit is None:
        text = "\n".join([m.text, *(c.arguments for c in m.tool_calls)])
        hit = _IDS[m.id] = tuple(extract_identifiers(text))
    return hit


def context_text(messages: Sequence[Message]) -> str:
    return "\n".join(part for m in messages for part in (m.text, *(c.arguments for c in m.tool_calls)))


def replay(
    msgs: list[Message],
    make: Callable[[], dict[Level, Strategy] | None],
    counter: TiktokenCounter,
    *,
    window_share: float = 0.25,
) -> Tally:
    total = counter.count_messages(msgs)
    window = max(int(total * window_share), 16)
    pipelines = make()
    summarizer = CountingSummarizer(counter=counter)
    engine = ContextEngine(window=window, counter=counter, pipelines=pipelines, summarizer=summarizer)
    tally = Tally()
    start = time.perf_counter()
    stops = [i for i, m in enumerate(msgs) if m.role == "assistant" and i > 0] + [len(msgs)]
    target = int(engine.thresholds.target * engine.budget)
    system = sum(counter.count_message(m) for m in msgs if m.role == "system")
    users = [i for i, m in enumerate(msgs) if m.role == "user"]
    for stop in stops:
        history = msgs[:stop]
        # A step is feasible when what every strategy keeps (system prompt, first and latest user
        # message) leaves room under the target; otherwise no summary can be kept at the target.
        mine = [i for i in users if i < stop]
        floor = system + sum(counter.count_message(msgs[i]) for i in {*mine[:1], *mine[-1:]})
        feasible = floor + 64 <= target
        try:
            prepared = engine.prepare(history)
        except ContextOverflowError:
            tally.overflow_steps += 1
            engine.reset()
            continue
        tally.steps += 1
        # A system prompt and latest request past 30% of the budget raise the target (Thresholds.above).
        tally.raised_steps += prepared.report.target > target
        out = list(prepared.messages)
        out_ids = {m.id for m in out}
        evicted: dict[str, None] = {}
        for m in history:
            if m.id not in out_ids:
                for ident in ids_of(m):
                    evicted.setdefault(ident, None)
        if not evicted:
            continue
        haystack = context_text(out)
        kept = sum(1 for ident in evicted if ident in haystack)
        tally.kept += kept
        tally.evicted += len(evicted)
        if feasible:
            tally.feasible_kept += kept
            tally.feasible_evicted += len(evicted)
        if stop == len(msgs):
            tally.final_kept, tally.final_evicted = kept, len(evicted)
    tally.seconds = time.perf_counter() - start
    tally.summaries = engine.stats.summaries
    tally.summarizer_calls = summarizer.calls[0]
    tally.compactions = engine.stats.total_compactions
    tally.fallbacks = dict(engine.stats.fallbacks)
    return tally


def pct(a: int, b: int) -> str:
    return f"{100 * a / b:.1f}%" if b else "n/a"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--eval-dir", type=Path, default=EVAL)
    parser.add_argument("--limit", type=int, default=None, help="only the first N conversations")
    parser.add_argument("--pipelines", default=",".join(PIPELINES), help="comma-separated names")
    parser.add_argument("--json", type=Path, default=None, help="write per-conversation results here")
    parser.add_argument(
        "--window-share",
        type=float,
        default=0.25,
        help="the window as a share of each conversation's tokens (default 0.25, the issue's target)",
    )
    args = parser.parse_args(argv)

    manifest = json.loads((args.eval_dir / "manifest.json").read_text("utf-8"))["conversations"]
    if args.limit is not None:
        manifest = manifest[: args.limit]
    names = [n.strip() for n in args.pipelines.split(",") if n.strip()]
    counter = TiktokenCounter("o200k_base")
    results: dict[str, dict[str, Tally]] = defaultdict(dict)
    sources: dict[str, str] = {}
    for entry in manifest:
        path = args.eval_dir / "conversations" / entry["file"]
        msgs = to_messages(json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip())
        sources[entry["id"]] = entry["source"]
        for name in names:
            results[name][entry["id"]] = replay(
                msgs, PIPELINES[name], counter, window_share=args.window_share
            )
        print(".", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)

    print(
        f"{len(manifest)} conversations, window = {args.window_share:g} of each conversation's o200k tokens, "
        "prepare before every assistant message\n"
    )
    print(
        "| pipeline | identifiers kept, all steps | feasible steps | mean per conversation | at the last step "
        "| summaries | summarizer calls | compactions | fallbacks | overflow steps | raised-target steps | time |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: |")
    for name in names:
        tallies = list(results[name].values())
        kept = sum(t.kept for t in tallies)
        ev = sum(t.evicted for t in tallies)
        shares = [t.share for t in tallies if t.share is not None]
        mean = f"{100 * sum(shares) / len(shares):.1f}%" if shares else "n/a"
        fk = sum(t.final_kept for t in tallies)
        fe = sum(t.final_evicted for t in tallies)
        fb: dict[str, int] = defaultdict(int)
        for t in tallies:
            for k, v in t.fallbacks.items():
                fb[k] += v
        fbs = ", ".join(f"{k} {v}" for k, v in sorted(fb.items())) or "none"
        fek = sum(t.feasible_kept for t in tallies)
        fee = sum(t.feasible_evicted for t in tallies)
        print(
            f"| {name} | {pct(kept, ev)} ({kept:,}/{ev:,}) | {pct(fek, fee)} ({fek:,}/{fee:,}) | {mean} | {pct(fk, fe)} | "
            f"{sum(t.summaries for t in tallies)} | {sum(t.summarizer_calls for t in tallies)} | "
            f"{sum(t.compactions for t in tallies)} | {fbs} | "
            f"{sum(t.overflow_steps for t in tallies)} | {sum(t.raised_steps for t in tallies)} | "
            f"{sum(t.seconds for t in tallies):.1f} s |"
        )
    print("\nBy source (identifiers kept over all steps):\n")
    groups = sorted(set(sources.values()))
    print("| pipeline | " + " | ".join(groups) + " |")
    print("| --- | " + " | ".join("---:" for _ in groups) + " |")
    for name in names:
        cells = []
        for g in groups:
            ts = [t for cid, t in results[name].items() if sources[cid] == g]
            cells.append(pct(sum(t.kept for t in ts), sum(t.evicted for t in ts)))
        print(f"| {name} | " + " | ".join(cells) + " |")
    if args.json is not None:
        payload = {
            name: {
                cid: {
                    "kept": t.kept,
                    "evicted": t.evicted,
                    "feasible_kept": t.feasible_kept,
                    "feasible_evicted": t.feasible_evicted,
                    "final_kept": t.final_kept,
                    "final_evicted": t.final_evicted,
                    "steps": t.steps,
                    "overflow_steps": t.overflow_steps,
                    "summaries": t.summaries,
                    "summarizer_calls": t.summarizer_calls,
                    "compactions": t.compactions,
                    "raised_steps": t.raised_steps,
                    "fallbacks": t.fallbacks,
                    "source": sources[cid],
                }
                for cid, t in results[name].items()
            }
            for name in names
        }
        args.json.write_text(json.dumps(payload, indent=1), "utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
