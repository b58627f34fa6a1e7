"""Engine benchmarks (issue 3), side by side with the peers, in one run.

1. Per-step overhead of `ContextEngine.prepare` on growing conversations of 100,
   1,000, 10,000 and 100,000 messages, when nothing needs compacting, against
   LangChain's `trim_messages` (strategy "last", include_system, start_on "human")
   with the same exact tiktoken counter (and with its approximate counter).
2. Compaction amortized over a replay (prepare before every assistant message).
3. Failure rates over random agent histories at budgets of 10%, 25% and 50% of
   their size: over budget, invalid for the provider, system prompt or latest
   user message missing, for agentcontext, trim_messages and LlamaIndex's
   ChatMemoryBuffer.

Run:  python bench/bench_engine.py            (about 5 minutes on 2 cores)
      python bench/bench_engine.py --quick    (smaller sizes, for a smoke run)
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence

from agentcontext.engine import ContextEngine
from agentcontext.exceptions import ContextOverflowError
from agentcontext.invariants import check_messages
from agentcontext.messages import Message, ToolCall
from agentcontext.testing import make_conversation
from agentcontext.tokens import TiktokenCounter

COUNTER = TiktokenCounter("o200k_base")


# ----------------------------------------------------------------------------- peers' message types


def to_langchain(msgs: Sequence[Message]) -> list[object]:
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

    out: list[object] = []
    for m in msgs:
        if m.role == "system":
            out.append(SystemMessage(content=m.text, id=m.id))
        elif m.role == "user":
            out.append(HumanMessage(content=m.text, id=m.id))
        elif m.role == "assistant":
            calls = [
                {"name": c.name, "args": _args(c), "id": c.id, "type": "tool_call"} for c in m.tool_calls
            ]
            out.append(AIMessage(content=m.text, tool_calls=calls, id=m.id))
        else:
            out.append(ToolMessage(content=m.text, tool_call_id=m.tool_call_id or "", id=m.id))
    return out


def _args(c: ToolCall) -> dict[str, object]:
    try:
        v = json.loads(c.arguments)
    except ValueError:
        return {"raw": c.arguments}
    return v if isinstance(v, dict) else {"value": v}


def to_llamaindex(msgs: Sequence[Message]) -> list[object]:
    from llama_index.core.llms import ChatMessage, MessageRole

    roles = {
        "system": MessageRole.SYSTEM,
        "user": MessageRole.USER,
        "assistant": MessageRole.ASSISTANT,
        "tool": MessageRole.TOOL,
    }
    out: list[object] = []
    for m in msgs:
        kwargs: dict[str, object] = {"ac_id": m.id}
        if m.tool_calls:
            kwargs["tool_calls"] = [
                {"id": c.id, "function": {"name": c.name, "arguments": c.arguments}} for c in m.tool_calls
            ]
        if m.tool_call_id:
            kwargs["tool_call_id"] = m.tool_call_id
        out.append(ChatMessage(role=roles[m.role], content=m.text, additional_kwargs=kwargs))
    return out


# ----------------------------------------------------------------------------- 1. per-step overhead


def history_of(n: int, seed: int = 11) -> list[Message]:
    msgs: list[Message] = []
    s = seed
    while len(msgs) < n:
        msgs.extend(
            make_conversation(
                s, rounds=50, steps=(1, 3), parallel=2, huge_share=0.0, output_tokens=(5, 60), system=not msgs
            )
        )
        s += 1
    return msgs[:n]


def new_step(i: int) -> list[Message]:
    return [
        Message(
            role="assistant",
            content=None,
            tool_calls=(ToolCall(id=f"step_{i}", name="bash", arguments='{"cmd": "ls"}'),),
        ),
        Message(role="tool", tool_call_id=f"step_{i}", content=f"file_{i}.py\nREADME.md"),
    ]


def time_agentcontext(n: int, steps: int) -> tuple[float, float]:
    history = history_of(n)
    total = COUNTER.count_messages(history)
    engine = ContextEngine(window=total * 3 + 10_000, reserve=1_000, counter=COUNTER)
    t0 = time.perf_counter()
    engine.prepare(history)
    first = time.perf_counter() - t0
    times = []
    for i in range(steps):
        history.extend(new_step(i))
        t = time.perf_counter()
        p = engine.prepare(history)
        times.append(time.perf_counter() - t)
        assert not p.report.compacted
    return first, statistics.median(times)


BY_ID: dict[str, Message] = {}


def lc_counter_same(messages: Sequence[object]) -> int:
    """Exactly agentcontext's counting (via message ids), so both decide with the same numbers."""
    return COUNTER.count_messages([BY_ID[m.id] for m in messages])  # type: ignore[attr-defined]


def lc_counter_exact(messages: Sequence[object]) -> int:
    # What a LangChain user writes: exact tiktoken counts of each message's text, no cache.
    total = 3
    for m in messages:
        text = m.content if isinstance(m.content, str) else str(m.content)  # type: ignore[attr-defined]
        total += 3 + len(COUNTER.encoding.encode_ordinary(text))
        for c in getattr(m, "tool_calls", []) or []:
            total += 3 + len(COUNTER.encoding.encode_ordinary(c["name"] + json.dumps(c["args"])))
    return total


def time_trim(n: int, steps: int, counter: Callable[..., int] | str, limit_s: float) -> float | None:
    from langchain_core.messages import trim_messages

    history = to_langchain(history_of(n))
    budget = 10**12
    times = []
    for i in range(steps):
        history.extend(to_langchain(new_step(i)))
        t = time.perf_counter()
        trim_messages(
            history,
            max_tokens=budget,
            strategy="last",
            token_counter=counter,
            include_system=True,
            start_on="human",
        )
        times.append(time.perf_counter() - t)
        if sum(times) > limit_s:
            break
    return statistics.median(times)


# ----------------------------------------------------------------------------- 2. amortized compaction


def replay_amortized(n: int, window: int) -> dict[str, float]:
    conv = history_of(n, seed=99)
    engine = ContextEngine(window=window, reserve=window // 8, counter=COUNTER)
    t0 = time.perf_counter()
    calls = 0
    for i, m in enumerate(conv):
        if m.role == "assistant":
            engine.prepare(conv[:i])
            calls += 1
    elapsed = time.perf_counter() - t0
    return {
        "messages": n,
        "calls": calls,
        "compactions": engine.stats.total_compactions,
        "ms_per_step": 1000 * elapsed / calls,
    }


# ----------------------------------------------------------------------------- 3. failure rates


def essentials_fit(msgs: Sequence[Message], budget: int) -> bool:
    system = [m for m in msgs[:1] if m.role == "system"]
    users = [m for m in msgs if m.role == "user"]
    return COUNTER.count_messages(system + users[-1:]) + 60 <= budget


def classify(original: Sequence[Message], out: Sequence[Message], budget: int) -> str:
    if COUNTER.count_messages(out) > budget:
        return "over budget"
    if check_messages(list(out)):
        return "invalid"
    if original[0].role == "system" and original[0] not in out:
        return "system lost"
    users = [m for m in original if m.role == "user"]
    if users and users[-1] not in out:
        return "latest user lost"
    return "ok"


def failure_rates(cases: int) -> dict[str, dict[str, dict[str, int]]]:
    from langchain_core.messages import trim_messages
    from llama_index.core.memory import ChatMemoryBuffer

    results: dict[str, dict[str, dict[str, int]]] = {}
    for share in (0.10, 0.25, 0.50):
        per: dict[str, dict[str, int]] = {"agentcontext": {}, "trim_messages": {}, "ChatMemoryBuffer": {}}
        for seed in range(cases):
            msgs = make_conversation(
                seed, rounds=1 + seed % 7, steps=(0, 5), parallel=1 + seed % 3, huge_share=0.05, cjk_share=0.2
            )
            budget = max(50, int(COUNTER.count_messages(msgs) * share))
            by_id = {m.id: m for m in msgs}
            BY_ID.update(by_id)

            # agentcontext
            engine = ContextEngine(window=budget, reserve=0, counter=COUNTER)
            try:
                out = list(engine.prepare(msgs).messages)
                verdict = classify(msgs, out, budget)
            except ContextOverflowError:
                verdict = (
                    "clear overflow error" if not essentials_fit(msgs, budget) else "overflow error (wrong)"
                )
            per["agentcontext"][verdict] = per["agentcontext"].get(verdict, 0) + 1

            # LangChain trim_messages with the same exact counting
            lc = to_langchain(msgs)
            trimmed = trim_messages(
                lc,
                max_tokens=budget,
                strategy="last",
                token_counter=lc_counter_same,
                include_system=True,
                start_on="human",
            )
            lc_out = [by_id[m.id] for m in trimmed]  # type: ignore[attr-defined]
            verdict = classify(msgs, lc_out, budget) if lc_out else "empty result"
            per["trim_messages"][verdict] = per["trim_messages"].get(verdict, 0) + 1

            # LlamaIndex ChatMemoryBuffer with the o200k tokenizer
            mem = ChatMemoryBuffer.from_defaults(
                token_limit=budget, tokenizer_fn=COUNTER.encoding.encode_ordinary
            )
            for cm in to_llamaindex(msgs):
                mem.put(cm)
            li_out = [by_id[cm.additional_kwargs["ac_id"]] for cm in mem.get()]  # type: ignore[attr-defined]
            verdict = classify(msgs, li_out, budget) if li_out else "empty result"
            per["ChatMemoryBuffer"][verdict] = per["ChatMemoryBuffer"].get(verdict, 0) + 1
        results[f"{share:.0%}"] = per
    return results


def fmt(s: float | None) -> str:
    if s is None:
        return "not run (>20 s per call)"
    return f"{s * 1e3:,.1f} ms" if s >= 1e-3 else f"{s * 1e6:,.0f} µs"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    sizes = [100, 1_000, 10_000] if args.quick else [100, 1_000, 10_000, 100_000]
    print(
        f"# python {platform.python_version()} on {platform.machine()}, {sys.platform}; counter {COUNTER.name}"
    )
    print("\n### Per-step overhead when nothing needs compacting (median per call)")
    print(
        "| messages | agentcontext first call | agentcontext per step | trim_messages exact tiktoken | trim_messages approximate |"
    )
    print("| ---: | ---: | ---: | ---: | ---: |")
    for n in sizes:
        first, step = time_agentcontext(n, steps=200)
        exact = time_trim(n, steps=5, counter=lc_counter_exact, limit_s=20.0) if n <= 10_000 else None
        approx = time_trim(n, steps=5, counter="approximate", limit_s=20.0)
        print(f"| {n:,} | {fmt(first)} | {fmt(step)} | {fmt(exact)} | {fmt(approx)} |")
    print("\n### Compaction amortized over a replay (prepare before every assistant message)")
    print("| messages | window | model calls | compactions | ms per step |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for n, window in ((2_000, 32_000), (10_000, 32_000), (10_000, 128_000)):
        if args.quick and n > 2_000:
            continue
        r = replay_amortized(n, window)
        print(
            f"| {n:,} | {window:,} | {r['calls']:,.0f} | {r['compactions']:,.0f} | {r['ms_per_step']:.3f} |"
        )
    cases = 60 if args.quick else 300
    print(f"\n### Failure rates over {cases} random agent histories per budget")
    rates = failure_rates(cases)
    print("| budget | tool | ok | failures (kind: count) |")
    print("| --- | --- | ---: | --- |")
    for share, per in rates.items():
        for tool, verdicts in per.items():
            ok = verdicts.get("ok", 0) + verdicts.get("clear overflow error", 0)
            bad = {k: v for k, v in verdicts.items() if k not in ("ok", "clear overflow error")}
            bad_s = ", ".join(f"{k}: {v}" for k, v in sorted(bad.items())) or "none"
            clear = verdicts.get("clear overflow error", 0)
            note = f" (incl. {clear} clear overflow errors)" if clear else ""
            print(
                f"| {share} | {tool} | {ok}/{cases}{note} | {bad_s} ({sum(bad.values()) / cases:.0%} failed) |"
            )


if __name__ == "__main__":
    main()
