"""The command line on a huge conversation: fit, count, inspect and replay, beside reading the JSON itself.

Builds one long agent conversation (default 200 MB of JSON Lines, in a temporary
directory, deleted afterwards) by chaining the licensed conversations of
``tests/data`` and ``examples`` (tool call ids renamed per copy, one system
prompt at the top), plus the same conversation as one JSON array, and a session
log holding it. Then each command runs in a fresh process, and the table gives
its wall time and peak memory (the process's maximum resident set) beside the
baselines: ``json.load`` of the JSON array, and ``json.loads`` of every line of
the JSON Lines file, each in a fresh process too.

Run:  python bench/bench_cli_scale.py                 (200 MB; about 40 minutes on 2 busy cores)
      python bench/bench_cli_scale.py --size-mb 20    (a quick look)
      python bench/bench_cli_scale.py --only fit,count --keep /tmp/scale
      python bench/bench_cli_scale.py --replay-series 3000,6000,12000   (replay's cost per message)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted((ROOT / "tests" / "data" / "conversations").glob("*.jsonl")) + sorted(
    (ROOT / "examples").glob("*.jsonl")
)

# Each measured step runs this in a fresh interpreter and prints "seconds max_rss_kb" as its last line.
_RUNNER = r"""
import json, resource, sys, time
kind, args = sys.argv[1], sys.argv[2:]
start = time.perf_counter()
if kind == "json.load":
    with open(args[0], encoding="utf-8") as f:
        data = json.load(f)
elif kind == "json.loads per line":
    with open(args[0], encoding="utf-8") as f:
        data = [json.loads(line) for line in f if line.strip()]
else:
    from agentcontext.cli import main
    code = main(args)
    if code != 0:
        sys.exit(code)
elapsed = time.perf_counter() - start
print(f"{elapsed:.3f} {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}")
"""


def build(directory: Path, size_mb: float) -> tuple[Path, Path, int]:
    """Write the conversation as JSON Lines and as a JSON array; return both paths and the message count."""
    lines = directory / "conversation.jsonl"
    array = directory / "conversation.json"
    target = int(size_mb * 1_000_000)
    conversations = []
    for path in SOURCES:
        msgs = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        conversations.append([m for m in msgs if m.get("role") != "system"])
    written = count = copy = 0
    with open(lines, "w", encoding="utf-8") as out, open(array, "w", encoding="utf-8") as arr:
        arr.write("[")

        def emit(message: dict[str, object]) -> None:
            nonlocal written, count
            text = json.dumps(message, ensure_ascii=False)
            out.write(text + "\n")
            arr.write(("," if count else "") + "\n" + text)
            written += len(text.encode("utf-8")) + 1
            count += 1

        emit({"role": "system", "content": "You are a careful agent. Use the tools; keep answers short."})
        while written < target:
            for msgs in conversations:
                copy += 1
                for m in msgs:
                    m = json.loads(json.dumps(m))
                    for call in m.get("tool_calls") or []:
                        call["id"] = f"{call['id']}-{copy}"
                    if m.get("tool_call_id"):
                        m["tool_call_id"] = f"{m['tool_call_id']}-{copy}"
                    emit(m)
                if written >= target:
                    break
        arr.write("\n]\n")
    return lines, array, count


def repeat_example(path: Path, lines: int) -> None:
    """The django example's agent loop repeated (call ids renamed per copy) to ``lines`` messages."""
    src = [json.loads(line) for line in (ROOT / "examples" / "django-11133.jsonl").read_text().splitlines()]
    head, body = src[:2], src[2:]
    with open(path, "w", encoding="utf-8") as f:
        for m in head:
            f.write(json.dumps(m) + "\n")
        n, copy = len(head), 0
        while n < lines:
            copy += 1
            for m in body:
                m = json.loads(json.dumps(m))
                for call in m.get("tool_calls") or []:
                    call["id"] = f"{call['id']}-{copy}"
                if m.get("tool_call_id"):
                    m["tool_call_id"] = f"{m['tool_call_id']}-{copy}"
                f.write(json.dumps(m) + "\n")
                n += 1
                if n >= lines and m["role"] == "tool":
                    break


def replay_series(directory: Path, sizes: list[int]) -> None:
    """Replay the repeated example at each size (window 16,000): time and memory per size and per message."""
    print("\n| replay, window 16,000 | time | per 1,000 messages | peak memory |")
    print("| --- | ---: | ---: | ---: |")
    for lines in sizes:
        path = directory / f"django-{lines}.jsonl"
        repeat_example(path, lines)
        seconds, rss = measure("cli", "replay", str(path), "--model", "gpt-4o", "--window", "16000", "--json")
        print(
            f"| {lines:,} messages | {seconds:,.1f} s | {seconds / lines * 1000:,.2f} s | {rss / 1024:,.0f} MB |"
        )


def make_session(conversation: Path, session: Path) -> float:
    """Append every message to a new session log (no engine: the log only); return the seconds it took."""
    for stale in (session, session.with_name(session.name + ".lock")):
        stale.unlink(missing_ok=True)
    code = (
        "import json, sys, time\n"
        "from agentcontext.formats import openai as oai\n"
        "from agentcontext.session import Session\n"
        "t = time.perf_counter()\n"
        "s = Session.open(sys.argv[2], engine=None)\n"
        "prev = None\n"
        "batch = []\n"
        "with open(sys.argv[1], encoding='utf-8') as f:\n"
        "    for i, line in enumerate(f):\n"
        "        m = oai.to_message(json.loads(line), index=i, previous_id=prev)\n"
        "        prev = m.id\n"
        "        batch.append(m)\n"
        "        if len(batch) == 2000:\n"
        "            s.extend(batch); batch = []\n"
        "s.extend(batch)\n"
        "s.close()\n"
        "print(time.perf_counter() - t)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(conversation), str(session)],
        capture_output=True,
        text=True,
        check=True,
    )
    return float(proc.stdout.strip().splitlines()[-1])


def measure(kind: str, *args: str) -> tuple[float, int]:
    proc = subprocess.run(
        [sys.executable, "-c", _RUNNER, kind, *args], capture_output=True, text=True, stdin=subprocess.DEVNULL
    )
    if proc.returncode != 0:
        raise SystemExit(f"{kind} {' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    seconds, rss = proc.stdout.strip().splitlines()[-1].split()
    return float(seconds), int(rss)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=float, default=200.0, help="size of the JSON Lines file (default 200)")
    ap.add_argument("--model", default="gpt-4o")
    ap.add_argument("--window", default="128000", help="the window fit and replay use (default 128000)")
    ap.add_argument("--only", default="fit,count,inspect,replay", help="commands to run, comma-separated")
    ap.add_argument("--keep", help="build in this directory and keep it (default: a temporary one, deleted)")
    ap.add_argument(
        "--replay-series",
        metavar="N,N,...",
        help="instead: replay the django example repeated to these lengths (e.g. 3000,6000,12000)",
    )
    args = ap.parse_args()
    only = set(args.only.split(","))
    directory = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="agentcontext-scale-"))
    directory.mkdir(parents=True, exist_ok=True)
    if args.replay_series:
        try:
            replay_series(directory, [int(n) for n in args.replay_series.split(",")])
        finally:
            if not args.keep:
                shutil.rmtree(directory, ignore_errors=True)
        return 0
    try:
        t = time.perf_counter()
        lines, array, count = build(directory, args.size_mb)
        print(
            f"conversation: {count:,} messages, {lines.stat().st_size / 1e6:,.1f} MB JSON Lines "
            f"({array.stat().st_size / 1e6:,.1f} MB as a JSON array), built in {time.perf_counter() - t:.1f} s",
            flush=True,
        )
        model = ["--model", args.model, "--window", args.window]
        steps: list[tuple[str, str, list[str]]] = [
            ("json.load (JSON array)", "json.load", [str(array)]),
            ("json.loads per line (JSON Lines)", "json.loads per line", [str(lines)]),
        ]
        if "count" in only:
            steps.append(
                ("count (JSON Lines)", "cli", ["count", str(lines), "--model", args.model, "--json"])
            )
            steps.append(
                ("count (JSON array)", "cli", ["count", str(array), "--model", args.model, "--json"])
            )
        if "fit" in only:
            steps.append(("fit (JSON Lines)", "cli", ["fit", str(lines), *model, "-o", os.devnull,
                          "--report", str(directory / "report.json")]))  # fmt: skip
        if "inspect" in only:
            session = directory / "session.jsonl"
            seconds = make_session(lines, session)
            print(
                f"session log: {session.stat().st_size / 1e6:,.1f} MB, written in {seconds:.1f} s", flush=True
            )
            steps.append(
                ("inspect (session log)", "cli", ["inspect", str(session), "--model", args.model, "--json"])
            )
        if "replay" in only:
            steps.append(("replay (JSON Lines)", "cli", ["replay", str(lines), *model, "--json"]))
        rows = []
        base_time = base_rss = 0.0
        for label, kind, argv in steps:
            seconds, rss = measure(kind, *argv)
            if kind == "json.load":
                base_time, base_rss = seconds, rss
            rows.append((label, seconds, rss))
            print(f"  {label}: {seconds:,.1f} s, {rss / 1024:,.0f} MB", flush=True)
        print()
        print("| step | time | vs json.load | peak memory | vs json.load |")
        print("| --- | ---: | ---: | ---: | ---: |")
        for label, seconds, rss in rows:
            print(
                f"| {label} | {seconds:,.1f} s | {seconds / base_time:,.1f}x | {rss / 1024:,.0f} MB | "
                f"{rss / base_rss:,.2f}x |"
            )
        report = directory / "report.json"
        if report.exists():
            print(f"\nfit --report: {report.stat().st_size / 1e3:,.1f} kB")
    finally:
        if not args.keep:
            shutil.rmtree(directory, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
