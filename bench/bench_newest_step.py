"""Does an agent keep the step it has just taken? The newest tool result after each compaction.

An agent replays random conversations with large tool outputs (`agentcontext.testing.make_conversation`,
40 seeds, outputs of 200-2,500 words, a tenth of them huge) through the default engine, preparing before
every assistant message, in windows of 3,000 and 6,000 tokens (a word counter). For each call whose
history ends on a tool result, it records whether that result is in the prompt, by the size of the
newest step against the budget, and counts the user requests dropped without a summary.

Without ingest truncation by default, so that steps of every size reach compaction; with
``--truncate``, the engine's default truncator cuts each output at ingest, and a step counts as kept
when every result of it is in the prompt, cut or not (its size is the uncut one's).

usage: python bench/bench_newest_step.py [--seeds 40] [--truncate]
"""

from __future__ import annotations

import argparse
import collections
import time

from agentcontext import ContextEngine
from agentcontext.compaction import is_user_request, kind_of
from agentcontext.testing import WordCounter, make_conversation

BUCKETS = ((0.0, 0.3), (0.3, 0.5), (0.5, 0.7), (0.7, 99.0))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=40)
    ap.add_argument("--truncate", action="store_true", help="the engine's default ingest truncation")
    args = ap.parse_args()
    truncate: dict[str, object] = {} if args.truncate else {"truncator": None}
    counter = WordCounter()
    kept: collections.Counter[tuple[float, float]] = collections.Counter()
    seen: collections.Counter[tuple[float, float]] = collections.Counter()
    calls = compacting = dropped_requests = 0
    started = time.perf_counter()
    for seed in range(args.seeds):
        msgs = make_conversation(seed, rounds=6, steps=(2, 6), output_tokens=(200, 2500), huge_share=0.1)
        for window in (3_000, 6_000):
            engine = ContextEngine(counter=counter, window=window, reserve=500, **truncate)  # type: ignore[arg-type]
            for stop in [i for i, m in enumerate(msgs) if m.role == "assistant" and i > 0]:
                history = msgs[:stop]
                prepared = engine.prepare(history)
                calls += 1
                compacting += prepared.report.compacted
                for a in prepared.report.actions:
                    if a.kind == "dropped" and a.strategy != "summarize":
                        ids = set(a.message_ids)
                        dropped_requests += sum(1 for m in history if m.id in ids and is_user_request(m))
                if history[-1].role != "tool" or not prepared.report.compacted:
                    continue
                step = max(i for i, m in enumerate(history) if m.role == "assistant")
                share = counter.count_messages(history[step:]) / prepared.report.budget
                bucket = next(b for b in BUCKETS if b[0] <= share < b[1])
                seen[bucket] += 1
                answered = {m.tool_call_id for m in history[step + 1 :]}
                read = {m.tool_call_id for m in prepared.messages if m.role == "tool" and kind_of(m) is None}
                kept[bucket] += answered <= read if args.truncate else history[-1] in prepared.messages
    print(f"{calls:,} calls, {compacting:,} compacting; {time.perf_counter() - started:.1f} s")
    print("| newest step / budget | compacting calls | newest tool result kept |")
    print("| --- | ---: | ---: |")
    for b in BUCKETS:
        label = f"{b[0]:.0%}-{b[1]:.0%}" if b[1] < 99 else f"{b[0]:.0%} or more"
        n = seen[b]
        print(f"| {label} | {n:,} | {kept[b]:,} ({kept[b] / n:.0%}) |" if n else f"| {label} | 0 | - |")
    print(f"user requests dropped without a summary: {dropped_requests}")


if __name__ == "__main__":
    main()
