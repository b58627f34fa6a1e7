"""Usage fed back keeps a model counted by estimate inside its window (a provider that bills more than the estimate).

A model without a public tokenizer (Claude, Gemini) is counted with the script-aware
estimator, which approximates o200k_base, plus a 10% safety margin. A provider whose
tokenizer splits the same text into more tokens (Claude's is reported at 20-30% more
than GPT-4o's) bills more than that. Each conversation of the evaluation set is replayed
as its agent lived it: before every assistant message the engine prepares the history
(one engine per conversation, its state kept), the "provider" bills ``ratio`` times the
exact o200k_base count of the request, and a request whose bill exceeds the window less
the reply reserve is one the provider rejects. With ``--feed`` the bill goes back to the
engine (`ContextEngine.record_usage`, what sessions and the integrations do).

Run:  python bench/bench_calibration.py [--eval-dir DIR] [--ratios 1.0,1.15,1.3,1.6] [--share 0.25]   (about a minute)

Each setting runs twice: a running agent (compacts at the soft limit, down to the hysteresis target)
and a one-shot fit every step (``fill=True``: fills the budget, as a proxy asked to keep the most does).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

from agentcontext import ContextEngine
from agentcontext.formats import openai as oai
from agentcontext.tokens import TiktokenCounter

HERE = Path(__file__).resolve().parent
DEFAULT_EVAL = HERE.parents[1] / "shared" / "eval"


def load(path: Path) -> list[object]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def run(
    messages: list, window: int, ratio: float, feed: bool, fill: bool, exact: TiktokenCounter
) -> dict[str, float]:
    engine = ContextEngine(model="claude-sonnet-4-5", window=window, reserve=window // 8)
    limit = engine.window - engine.reserve  # what the provider accepts
    state = None
    calls = rejected = 0
    fills: list[float] = []
    for end in range(1, len(messages) + 1):
        if end < len(messages) and messages[end].role != "assistant":
            continue  # prepare before each assistant message, as the agent called its model
        prepared = engine.prepare(messages[:end], fill=fill, **({} if state is None else {"state": state}))
        state = prepared.state
        bill = math.ceil(ratio * exact.count_messages(prepared.messages))
        calls += 1
        if bill > limit:
            rejected += 1
        fills.append(bill / limit)
        if feed:
            engine.record_usage(prepared.report, bill)
    correction = getattr(engine.counter, "correction", 1.0)
    return {"calls": calls, "rejected": rejected, "peak": max(fills), "correction": correction}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--eval-dir", type=Path, default=DEFAULT_EVAL)
    ap.add_argument("--ratios", default="1.0,1.15,1.3,1.6")
    ap.add_argument(
        "--share", type=float, default=0.25, help="window as a share of each conversation's tokens"
    )
    args = ap.parse_args()
    files = sorted((args.eval_dir / "conversations").glob("*.jsonl"))
    if not files:
        print(f"no conversations under {args.eval_dir / 'conversations'}", file=sys.stderr)
        return 1
    exact = TiktokenCounter("o200k_base")
    conversations = []
    for f in files:
        messages = oai.to_messages(load(f))  # type: ignore[arg-type]
        tokens = exact.count_messages(messages)
        if tokens >= 8_000:
            conversations.append((f.name, messages, max(8_000, int(tokens * args.share))))
    print(
        f"{len(conversations)} conversations of 8k tokens or more; window {args.share:g} of each (at least 8k)\n"
    )
    print(
        "| mode | provider bills | usage fed back | requests | rejected (over the window) "
        "| conversations with a rejection | peak fill | correction learned (median) | time |"
    )
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    runs = [
        (fill, float(r), feed)
        for fill in (False, True)
        for r in args.ratios.split(",")
        for feed in (False, True)
    ]
    for fill, ratio, feed in runs:
        t0 = time.perf_counter()
        results = [run(m, w, ratio, feed, fill, exact) for _, m, w in conversations]
        calls = sum(r["calls"] for r in results)
        rejected = sum(r["rejected"] for r in results)
        convs = sum(1 for r in results if r["rejected"])
        peak = max(r["peak"] for r in results)
        corrections = sorted(r["correction"] for r in results)
        print(
            f"| {'one-shot fit' if fill else 'running agent'} | {ratio:.2f}x o200k | {'yes' if feed else 'no'} "
            f"| {calls:,} | {rejected:,} ({rejected / calls:.1%}) | {convs} of {len(results)} | {peak:.1%} "
            f"| {corrections[len(corrections) // 2]:.3f} | {time.perf_counter() - t0:.1f} s |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
