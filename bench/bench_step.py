"""Per-step cost of `ContextEngine.prepare` beside the tokenization floor, and the first prepare of a long history.

1. A realistic agent step (an assistant tool call and a tool result of about 300
   tokens) appended to histories of 1,000, 10,000 and 100,000 messages, with
   nothing to compact. Beside each prepare, in the same loop, the floor: encoding
   the new messages' text once with tiktoken (what any exact counter must pay).
   Goal: prepare <= 1.5 x floor + 20 us, flat in the history's size.
2. The first prepare of an uncompacted history of 10,000, 100,000 and
   1,000,000 short messages (a first call, or the first after reopening a long
   session), with the default engine for gpt-4o: time and peak memory beside the
   memory of the messages themselves. Goal: a few seconds, within 2x the memory.

Run:  python bench/bench_step.py                 (about 3 minutes on 2 cores)
      python bench/bench_step.py --quick         (smaller sizes)
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import random
import statistics
import sys
import time
import tracemalloc

import agentcontext as ac
from agentcontext.tokens import TiktokenCounter, load_encoding

COUNTER = TiktokenCounter("o200k_base")
ENC = load_encoding("o200k_base")
WORDS = (
    "the file src module function error test line value result import class return data path config "
    "build run assert expected actual traceback self args kwargs".split()
)


def tool_output(rng: random.Random, tokens: int) -> str:
    """Text shaped like a tool result: lines of identifiers and words, about ``tokens`` tokens."""
    lines = []
    for _ in range(max(tokens // 30, 1)):
        lines.append(" ".join(rng.choice(WORDS) + str(rng.randint(0, 999)) for _ in range(12)))
    return "\n".join(lines)


def step(i: int, rng: random.Random) -> list[ac.Message]:
    call = ac.ToolCall(id=f"call_{i}", name="bash", arguments=json.dumps({"cmd": f"grep -rn sym_{i} src/"}))
    return [
        ac.Message(role="assistant", content=None, tool_calls=(call,)),
        ac.Message(role="tool", tool_call_id=f"call_{i}", content=tool_output(rng, 300)),
    ]


def history(n: int) -> list[ac.Message]:
    msgs = [
        ac.Message(role="system", content="You are a coding agent."),
        ac.Message(role="user", content="Fix it."),
    ]
    rng = random.Random(1)
    i = 0
    while len(msgs) < n:
        msgs += step(10**7 + i, rng)
        i += 1
    return msgs[:n]


def per_step(n: int, steps: int) -> dict[str, float]:
    h = history(n)
    engine = ac.ContextEngine(window=COUNTER.count_messages(h) * 3 + 400_000, reserve=1_000, counter=COUNTER)
    engine.prepare(h)
    rng = random.Random(2)
    floor: list[float] = []
    ours: list[float] = []
    for i in range(steps):
        new = step(i, rng)
        t = time.perf_counter()
        for m in new:
            if m.text:
                ENC.encode_ordinary(m.text)
            for c in m.tool_calls:
                ENC.encode_ordinary(c.name)
                ENC.encode_ordinary(c.arguments)
        floor.append(time.perf_counter() - t)
        h.extend(new)
        t = time.perf_counter()
        p = engine.prepare(h)
        ours.append(time.perf_counter() - t)
        assert not p.report.compacted and p.report.incremental
    f, o = statistics.median(floor) * 1e6, statistics.median(ours) * 1e6
    return {"messages": n, "floor_us": f, "prepare_us": o, "ratio": o / f, "goal_us": 1.5 * f + 20}


def first_prepare(n: int) -> dict[str, float]:
    msgs = [ac.Message(role="system", content="You are a helpful agent.")]
    for i in range(n):
        msgs.append(ac.Message(role="user" if i % 2 == 0 else "assistant", content=f"message {i}: ok, noted"))
    ac.ContextEngine(model="gpt-4o").count(msgs[:1])  # load the encoding outside the timing
    gc.collect()
    t = time.perf_counter()
    p = ac.ContextEngine(model="gpt-4o").prepare(msgs)
    elapsed = time.perf_counter() - t
    # Memory in a second run (tracemalloc slows Python down; its run is not timed). A new engine and a
    # counter cache emptied, so that run counts everything again.
    ac.counter_for("gpt-4o").clear_cache()  # type: ignore[attr-defined]
    gc.collect()
    tracemalloc.start()
    base, _ = tracemalloc.get_traced_memory()
    ac.ContextEngine(model="gpt-4o").prepare(msgs)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    kinds = sorted({a.kind for a in p.report.actions})
    return {
        "messages": n,
        "seconds": elapsed,
        "peak_mb": (peak - base) / 2**20,
        "tokens_before": p.report.tokens_before,
        "tokens_after": p.report.tokens_after,
        "actions": ",".join(kinds),
    }


def view_memory_mb(n: int) -> float:
    gc.collect()
    tracemalloc.start()
    msgs = [
        ac.Message(role="user" if i % 2 == 0 else "assistant", content=f"message {i}: ok, noted")
        for i in range(n)
    ]
    current, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del msgs
    return current / 2**20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    sizes = [1_000, 10_000] if args.quick else [1_000, 10_000, 100_000]
    firsts = [10_000, 100_000] if args.quick else [10_000, 100_000, 1_000_000]
    print(f"python {platform.python_version()}, {platform.machine()}; tiktoken o200k_base")
    print("\nPer-step cost, nothing to compact (median of 400 steps; floor = encoding the new text once)")
    print(f"{'messages':>9} {'floor us':>9} {'prepare us':>11} {'ratio':>6} {'goal us':>8}")
    for n in sizes:
        r = per_step(n, 400)
        print(
            f"{n:>9,} {r['floor_us']:>9.1f} {r['prepare_us']:>11.1f} {r['ratio']:>6.2f} {r['goal_us']:>8.1f}"
        )
    print("\nFirst prepare of an uncompacted history (default engine, gpt-4o)")
    print(
        f"{'messages':>10} {'seconds':>8} {'peak MB':>8} {'view MB':>8} {'tokens before':>14} {'after':>7}  actions"
    )
    for n in firsts:
        r = first_prepare(n)
        view = view_memory_mb(n)
        print(
            f"{n:>10,} {r['seconds']:>8.2f} {r['peak_mb']:>8.1f} {view:>8.1f} {r['tokens_before']:>14,} "
            f"{r['tokens_after']:>7,}  {r['actions']}"
        )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
