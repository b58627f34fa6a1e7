"""Ingest truncation of huge tool outputs: time, peak memory and characters tokenized, before and after.

Run from the repository root::

    python bench/bench_bounded.py                 # this checkout against `main`, about 1 minute
    python bench/bench_bounded.py --ref HEAD~3    # against another git revision's truncation.py
    python bench/bench_bounded.py --big           # adds 50 MB of one repeated character
    python bench/bench_bounded.py --repeat 3      # best time of 3 fresh processes per case

Each case cuts one tool output of about 1,000,000 ``o200k_base`` tokens with
the truncator a `ContextEngine` for ``gpt-4o`` builds by default (a quarter of
its input budget in tokens, 8 bytes a token, a line limit), through
`truncate_message`, as the engine's ingest step does. Four kinds of output:
English-like prose, base64, Chinese, and one character repeated (tiktoken's
worst case: a single pre-token of megabytes). "before" loads
``src/agentcontext/truncation.py`` from ``--ref`` (default ``main``) into this
checkout's package; "after" is this checkout's. Every case runs in a fresh
process: the peak memory column is the growth of the process's peak resident
set (``VmHWM``, reset once the input is built) over its size then; tiktoken
allocates outside Python, where tracemalloc would not see it. "chars
tokenized" is the counter's own tally.

Prints a Markdown table for ``bench/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import base64
import importlib.util
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

TOKENS = 1_000_000
KINDS = ["english", "base64", "cjk", "repeated"]
_WORDS = (
    "the of and to in is that it for on with as was at by an be this are from or have not but which "
    "error file line test value return build config module function parser request response server"
).split()


def output_of(kind: str, nbytes: int, seed: int = 0) -> str:
    """About ``nbytes`` of one kind of tool output."""
    rng = random.Random(seed)
    if kind == "english":
        words = rng.choices(_WORDS, k=nbytes // 5)
        return "".join(w + (".\n" if i % 14 == 13 else " ") for i, w in enumerate(words))
    if kind == "base64":
        raw = base64.b64encode(rng.randbytes(nbytes * 3 // 4)).decode()
        return "\n".join(raw[i : i + 76] for i in range(0, len(raw), 76))
    if kind == "cjk":
        chars = rng.choices([chr(c) for c in range(0x4E00, 0x4E00 + 3000)], k=nbytes // 3)
        return "".join(c + ("。\n" if i % 40 == 39 else "") for i, c in enumerate(chars))
    return "a" * nbytes


def sized(kind: str, tokens: int) -> str:
    """An output of about ``tokens`` o200k tokens (scaled from a counted sample)."""
    from agentcontext.tokens import TiktokenCounter

    sample = output_of(kind, 200_000)
    per_token = len(sample.encode("utf-8")) / TiktokenCounter().count_text(sample)
    return output_of(kind, int(tokens * per_token))


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _reset_peak() -> None:
    """Reset the process's peak resident set (``VmHWM``) to its current size (Linux >= 4.0)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def _peak() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _load_truncation(ref: str) -> ModuleType:
    """``src/agentcontext/truncation.py`` as of git revision ``ref``, loaded into this checkout's package."""
    source = subprocess.run(
        ["git", "show", f"{ref}:src/agentcontext/truncation.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    path = Path(tempfile.mkdtemp()) / "truncation.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("agentcontext._truncation_ref", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def child(kind: str, impl: str, ref: str, nbytes: int | None) -> dict[str, object]:
    """One case, in this (fresh) process."""
    import agentcontext.truncation as after
    from agentcontext import ContextEngine
    from agentcontext.messages import Message
    from agentcontext.tokens import TiktokenCounter

    module = after if impl == "after" else _load_truncation(ref)
    counter = TiktokenCounter("o200k_base", cache_size=0)
    default = ContextEngine("gpt-4o").truncator
    assert default is not None
    truncator = module.ObservationTruncator(
        max_tokens=default.max_tokens,
        max_bytes=default.max_bytes,
        max_lines=default.max_lines,
        counter=counter,
        store=default.store,
    )
    text = output_of(kind, nbytes) if nbytes is not None else sized(kind, TOKENS)
    counter.count_text("warm up: load the encoding")
    message = Message(role="tool", tool_call_id="c1", name="cat", content=text)
    _reset_peak()  # building the input had its own peak
    base, chars_before = _rss(), counter.stats.chars_tokenized
    started = time.perf_counter()
    short, result = module.truncate_message(message, truncator)
    seconds = time.perf_counter() - started
    peak = _peak()
    return {
        "kind": kind,
        "impl": impl,
        "mb": len(text.encode("utf-8")) / 1e6,
        "seconds": seconds,
        "peak_mb": max(peak - base, 0) / 1e6,
        "chars_tokenized": counter.stats.chars_tokenized - chars_before,
        "kept_tokens": result.kept_tokens,
        "limit": truncator.max_tokens,
        "preview_chars": len(short.text),
    }


def run(kind: str, impl: str, ref: str, nbytes: int | None) -> dict[str, object]:
    args = [sys.executable, __file__, "--child", kind, impl, "--ref", ref]
    if nbytes is not None:
        args += ["--bytes", str(nbytes)]
    proc = subprocess.run(args, capture_output=True, text=True, check=True)
    result: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--ref", default="main", help="the git revision whose truncation.py is 'before'")
    parser.add_argument("--big", action="store_true", help="add 50 MB of one repeated character")
    parser.add_argument(
        "--repeat", type=int, default=1, help="fresh processes per case; the fastest is shown"
    )
    parser.add_argument("--child", nargs=2, metavar=("KIND", "IMPL"), help=argparse.SUPPRESS)
    parser.add_argument("--bytes", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], args.child[1], args.ref, args.bytes)))
        return
    cases: list[tuple[str, int | None]] = [(k, None) for k in KINDS]
    if args.big:
        cases.append(("repeated", 50_000_000))
    rows = []
    for kind, nbytes in cases:
        for impl in ("before", "after"):
            runs = [run(kind, impl, args.ref, nbytes) for _ in range(args.repeat)]
            r = min(runs, key=lambda x: float(x["seconds"]))  # type: ignore[arg-type]
            r["peak_mb"] = max(float(x["peak_mb"]) for x in runs)  # type: ignore[arg-type]
            rows.append(r)
            print(f"  {kind:9s} {impl:6s} {r['seconds']:8.3f} s  {r['peak_mb']:8.1f} MB", file=sys.stderr)
    load = os.getloadavg()[0]
    print(
        f"\nIngest truncation of one tool output (`{default_config()}`), `before` = `{args.ref}`, "
        f"best of {args.repeat} (load average {load:.1f} on {os.cpu_count()} cores):\n"
    )
    print(
        "| output | MB | before: time | after: time | before: peak memory | after: peak memory "
        "| before: chars tokenized | after: chars tokenized | after: preview tokens |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for i in range(0, len(rows), 2):
        b, a = rows[i], rows[i + 1]
        print(
            f"| {a['kind']} | {a['mb']:.1f} | {b['seconds']:.2f} s | {a['seconds']:.3f} s | {b['peak_mb']:.0f} MB "
            f"| {a['peak_mb']:.0f} MB | {b['chars_tokenized']:,} | {a['chars_tokenized']:,} "
            f"| {a['kept_tokens']:,} / {a['limit']:,} |"
        )


def default_config() -> str:
    from agentcontext import ContextEngine

    t = ContextEngine("gpt-4o").truncator
    assert t is not None
    return f"max_tokens={t.max_tokens:,}, max_bytes={t.max_bytes:,}, max_lines={t.max_lines:,}"


if __name__ == "__main__":
    main()
