"""Replay every conversation in shared/eval at windows of 8k, 32k and 128k (issue 6).

Each conversation is replayed as its agent lived it (`agentcontext.replay`:
prepare before every assistant message, one engine per conversation) on gpt-4o
prices and tokenizer, with the default pipeline and with the plain strategies
(sliding window, token budget, masking only). Reports, per window and
pipeline: budget or validity violations (must be 0), calls where even the
essentials could not fit, compactions, mean context tokens, the prompt-cache
share, input cost with caching, and identifiers retained.

Run:  python bench/bench_replay.py           (about a minute)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from agentcontext.cli._replay import STRATEGIES, plain_pipelines
from agentcontext.engine import ContextEngine
from agentcontext.formats import openai as oai
from agentcontext.replay import ReplayResult, replay

EVAL = Path(__file__).resolve().parents[2] / "shared" / "eval" / "conversations"


def load(path: Path) -> list[object]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--windows", default="8000,32000,128000")
    args = ap.parse_args()
    windows = [int(w) for w in args.windows.split(",")]
    files = sorted(EVAL.glob("*.jsonl"))
    if not files:
        print(f"no conversations under {EVAL}", file=sys.stderr)
        return 1
    conversations = [(f.name, oai.to_messages(load(f))) for f in files]  # type: ignore[arg-type]
    print(
        f"{len(conversations)} conversations, {sum(len(m) for _, m in conversations):,} messages; model gpt-4o\n"
    )
    print(
        "| window | pipeline | violations | calls | could not fit | compactions | mean context tokens | cache share | input cost with caching | identifiers retained | time |"
    )
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    failed = False
    for window in windows:
        for name in STRATEGIES:
            totals = {
                "violations": 0,
                "calls": 0,
                "overflows": 0,
                "compactions": 0,
                "tokens": 0,
                "sent_calls": 0,
                "cached": 0,
                "input": 0,
                "cost": 0.0,
                "kept": 0,
                "evicted": 0,
            }
            start = time.perf_counter()
            for _, msgs in conversations:
                engine = ContextEngine("gpt-4o", window=window, pipelines=plain_pipelines(name))
                r: ReplayResult = replay(msgs, engine)
                totals["violations"] += r.violations + r.over_budget
                totals["calls"] += r.calls
                totals["overflows"] += r.overflows
                totals["compactions"] += sum(r.compactions.values())
                totals["tokens"] += sum(rec.tokens for rec in r.records if not rec.overflow)
                totals["sent_calls"] += r.calls - r.overflows
                totals["cached"] += r.total_cached
                totals["input"] += r.total_input
                totals["cost"] += r.input_cost_cached or 0.0
                totals["kept"] += r.identifiers_kept
                totals["evicted"] += r.identifiers_evicted
            seconds = time.perf_counter() - start
            failed |= totals["violations"] > 0
            mean = totals["tokens"] / totals["sent_calls"] if totals["sent_calls"] else 0
            cache = totals["cached"] / totals["input"] if totals["input"] else 0
            kept = f"{totals['kept'] / totals['evicted']:.1%}" if totals["evicted"] else "n/a"
            print(
                f"| {window:,} | {name} | {totals['violations']} | {totals['calls']:,} | {totals['overflows']:,} | "
                f"{totals['compactions']:,} | {mean:,.0f} | {cache:.1%} | ${totals['cost']:,.2f} | {kept} | {seconds:.1f} s |"
            )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
