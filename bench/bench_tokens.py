"""Token counting benchmarks: throughput against raw tiktoken, and cached recounts.

Run from the repository root::

    python bench/bench_tokens.py            # about 30 seconds
    python bench/bench_tokens.py --repeat 15

1. **Throughput**: `TiktokenCounter.count_text` against raw tiktoken
   (``enc.encode(text, disallowed_special=())`` and ``enc.encode_ordinary(text)``
   on the very same `tiktoken.Encoding`) on ~1 MB of mixed real text (English
   prose, Python source, JSON tool output, Chinese), best of N interleaved runs
   in one process. Also per-message counting of the same text cut into
   messages, where the wrapper's overhead would show, and the estimator.
2. **Cached recount**: `count_messages` on a 10,000-message conversation whose
   counts are cached (built from the eval conversations, unique ids), best of
   N; the tokenizer-call counter proves no text is tokenized again.

Prints a Markdown section for ``bench/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import sysconfig
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

import tiktoken  # noqa: E402

from agentcontext.messages import Message, Role, ToolCall  # noqa: E402
from agentcontext.tokens import ScriptEstimator, TiktokenCounter, load_encoding  # noqa: E402

EVAL = Path(os.environ.get("AGENTCONTEXT_EVAL", "/work/shared/eval/conversations"))
STDLIB = Path(sysconfig.get_paths()["stdlib"])
SITE = Path(sysconfig.get_paths()["purelib"])
TARGET_CHARS = 1_000_000


def _eval_contents(pattern: str) -> list[str]:
    out: list[str] = []
    for f in sorted(EVAL.glob(pattern)):
        for line in f.read_text(encoding="utf-8").splitlines():
            m = json.loads(line)
            if isinstance(m.get("content"), str) and m["content"]:
                out.append(m["content"])
    return out


def mixed_text() -> tuple[str, list[str]]:
    """About 1 MB: a quarter each of English prose, Python source, JSON tool output and Chinese."""
    quarter = TARGET_CHARS // 4
    prose = "\n\n".join(
        p.read_text(encoding="utf-8", errors="replace") for p in sorted(SITE.glob("*.dist-info/METADATA"))
    )
    code = "\n\n".join(p.read_text(encoding="utf-8") for p in sorted(STDLIB.glob("*.py"))[:120])
    tool_json = "\n".join(
        t for t in _eval_contents("tau-bench__*.jsonl") if t.lstrip().startswith(("{", "["))
    )
    chinese = "\n\n".join(_eval_contents("medicalgpt__sharegpt-zh__*.jsonl"))
    parts = [(prose * 3)[:quarter], (code * 3)[:quarter], (tool_json * 30)[:quarter], (chinese * 5)[:quarter]]
    # The same text cut into message-sized pieces (about 2,000 characters).
    pieces = [p[i : i + 2000] for p in parts for i in range(0, len(p), 2000)]
    return "\n".join(parts), pieces


def best_of(fn: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def interleaved(fns: dict[str, Callable[[], object]], repeat: int) -> dict[str, float]:
    """Best-of-``repeat`` for each function, run in turns so drift hits them all alike."""
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(repeat):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - start)
    return best


def conversation(n: int) -> list[Message]:
    """``n`` messages cycled from the eval conversations, each with its own id."""
    source: list[dict[str, Any]] = []
    for f in sorted(EVAL.glob("*.jsonl")):
        source += [json.loads(line) for line in f.read_text(encoding="utf-8").splitlines()]
    out: list[Message] = []
    for i in range(n):
        d = source[i % len(source)]
        calls = tuple(
            ToolCall(id=str(c["id"]), name=c["function"]["name"], arguments=c["function"]["arguments"])
            for c in d.get("tool_calls") or []
        )
        role = cast(Role, d["role"])
        out.append(
            Message(
                role=role,
                content=d.get("content") if isinstance(d.get("content"), str) else None,
                tool_calls=calls,
                tool_call_id=str(d.get("tool_call_id") or f"call_{i}") if role == "tool" else None,
                id=f"msg_{i:06d}",
            )
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--repeat", type=int, default=9, help="runs per measurement; the best counts (default 9)"
    )
    args = parser.parse_args()

    counter = TiktokenCounter("o200k_base")
    enc: tiktoken.Encoding = load_encoding("o200k_base")
    text, pieces = mixed_text()
    estimator = ScriptEstimator()
    expected = len(enc.encode_ordinary(text))
    assert counter.count_text(text) == expected == len(enc.encode(text, disallowed_special=()))

    whole = interleaved(
        {
            "count_text": lambda: counter.count_text(text),
            "encode": lambda: len(enc.encode(text, disallowed_special=())),
            "encode_ordinary": lambda: len(enc.encode_ordinary(text)),
        },
        args.repeat,
    )
    split = interleaved(
        {
            "count_text": lambda: [counter.count_text(p) for p in pieces],
            "encode": lambda: [len(enc.encode(p, disallowed_special=())) for p in pieces],
            "encode_ordinary": lambda: [len(enc.encode_ordinary(p)) for p in pieces],
        },
        args.repeat,
    )
    est_time = best_of(lambda: estimator.count_text(text), args.repeat)
    est_n = estimator.count_text(text)

    convo = conversation(10_000)
    cold_counter = TiktokenCounter()
    start = time.perf_counter()
    total = cold_counter.count_messages(convo)
    cold = time.perf_counter() - start
    tokenized = cold_counter.stats.texts_tokenized
    warm = best_of(lambda: cold_counter.count_messages(convo), args.repeat)
    assert cold_counter.count_messages(convo) == total
    assert cold_counter.stats.texts_tokenized == tokenized, "a cached recount tokenized text"

    mb = len(text.encode("utf-8")) / 1e6
    chars = len(text)
    print("### Throughput (o200k_base)")
    print()
    print(
        f"{chars:,} characters ({mb:.2f} MB UTF-8) of mixed real text, {expected:,} tokens; "
        f"best of {args.repeat} interleaved runs."
    )
    print()
    print("| call | whole text | vs raw `encode` | as 2,000-char messages | vs raw `encode` |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, label in (
        ("encode", "`len(enc.encode(text, disallowed_special=()))`"),
        ("encode_ordinary", "`len(enc.encode_ordinary(text))`"),
        ("count_text", "`TiktokenCounter().count_text(text)`"),
    ):
        print(
            f"| {label} | {whole[name] * 1000:.1f} ms ({mb / whole[name]:.1f} MB/s) | "
            f"{whole['encode'] / whole[name]:.3f}x | {split[name] * 1000:.1f} ms | {split['encode'] / split[name]:.3f}x |"
        )
    print(
        f"| `ScriptEstimator().count_text(text)` | {est_time * 1000:.1f} ms ({mb / est_time:.1f} MB/s) | "
        f"{whole['encode'] / est_time:.3f}x | | |"
    )
    print()
    print(f"The estimator gave {est_n:,} tokens for this text ({est_n / expected - 1:+.1%} against exact).")
    print()
    print("### Cached recount")
    print()
    print(
        f"`count_messages` on 10,000 messages ({total:,} tokens, cycled from the 63 eval conversations): "
        f"first count {cold * 1000:.0f} ms (tokenizes {tokenized:,} texts); "
        f"recount with every message cached **{warm * 1000:.2f} ms** (best of {args.repeat}), "
        "0 texts tokenized."
    )
    print()
    print(
        f"Machine: {os.cpu_count()} CPUs (`nproc`), Python {platform.python_version()}, "
        f"tiktoken {tiktoken.__version__}, {platform.platform()}."
    )


if __name__ == "__main__":
    main()
