"""Session benchmarks (issue 5): append throughput, restore time, memory of a restored session.

1. Appends per second, one `Session.append` per message, on the JSONL store with
   each fsync policy, on SQLite (``synchronous=FULL`` and ``OFF``) and in memory.
2. Restore time (`Session.open` of an existing log) for 10,000 and 100,000
   messages, JSONL and SQLite: wall and CPU time, best of three.
3. Memory of a restored 100,000-message session (tracemalloc, after a full
   collection) relative to the text it holds (UTF-8 bytes of message content,
   tool names and arguments) and to the size of its file.

Messages are the 3,522 messages of the 63 real conversations in
``/work/shared/eval/conversations`` (OpenAI format) repeated with fresh ids, so
sizes follow real agent logs (tool outputs dominate); without that directory,
`agentcontext.testing.make_conversation` stands in.

Run:  python bench/bench_session.py            (about 2 minutes on 2 cores)
      python bench/bench_session.py --write    (also update the Sessions section of bench/RESULTS.md)
      python bench/bench_session.py --quick    (small sizes, a smoke run)
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Sequence
from pathlib import Path

from agentcontext.messages import Message, iter_text
from agentcontext.session import JSONLStore, MemoryStore, Session, SessionStore, SQLiteStore
from agentcontext.testing import make_conversation

EVAL = Path("/work/shared/eval/conversations")
RESULTS = Path(__file__).with_name("RESULTS.md")
BEGIN, END = "<!-- session-results -->", "<!-- /session-results -->"


def corpus() -> tuple[list[Message], str]:
    """The message pool to cycle through, and where it came from."""
    if EVAL.is_dir():
        from agentcontext.formats import openai as oai

        pool: list[Message] = []
        for path in sorted(EVAL.glob("*.jsonl")):
            dicts = [
                json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()
            ]
            pool.extend(oai.to_messages(dicts))
        return pool, f"the {len(pool):,} messages of the 63 eval conversations"
    pool = make_conversation(seed=1, rounds=400, steps=(1, 4))
    return pool, f"{len(pool):,} generated messages (eval conversations not found)"


def fresh(pool: Sequence[Message], n: int) -> list[Message]:
    """``n`` messages cycled from ``pool``, each with a new random id (as an agent would append them)."""
    out = []
    for i in range(n):
        m = pool[i % len(pool)]
        out.append(
            Message(
                role=m.role,
                content=m.content,
                tool_calls=m.tool_calls,
                tool_call_id=m.tool_call_id,
                name=m.name,
            )
        )
    return out


def text_bytes(msgs: Sequence[Message]) -> int:
    return sum(len(t.encode("utf-8")) for m in msgs for t in iter_text(m))


# ----------------------------------------------------------------------------- appends


def bench_appends(pool: Sequence[Message], directory: Path, quick: bool) -> list[tuple[str, int, float]]:
    rows = []
    cases: list[tuple[str, Callable[[Path], SessionStore], int]] = [
        ("JSONL, fsync always", lambda d: JSONLStore(d / "a.jsonl", fsync="always"), 300 if quick else 1_000),
        (
            "JSONL, fsync interval (1 s)",
            lambda d: JSONLStore(d / "b.jsonl", fsync="interval"),
            2_000 if quick else 20_000,
        ),
        (
            "JSONL, fsync never",
            lambda d: JSONLStore(d / "c.jsonl", fsync="never"),
            2_000 if quick else 20_000,
        ),
        (
            "SQLite, synchronous FULL",
            lambda d: SQLiteStore(d / "d.db", fsync="always"),
            300 if quick else 1_000,
        ),
        (
            "SQLite, synchronous OFF",
            lambda d: SQLiteStore(d / "e.db", fsync="never"),
            2_000 if quick else 20_000,
        ),
        ("memory", lambda _d: MemoryStore(), 2_000 if quick else 20_000),
    ]
    for label, make, n in cases:
        msgs = fresh(pool, n)
        session = Session.from_store(make(directory))
        start = time.perf_counter()
        for m in msgs:
            session.append(m)
        elapsed = time.perf_counter() - start
        session.close()
        rows.append((label, n, n / elapsed))
        print(f"  appends  {label:<30} {n / elapsed:>10,.0f}/s  ({n:,} messages)", file=sys.stderr)
    return rows


# ----------------------------------------------------------------------------- restore


def build(store: SessionStore, msgs: Sequence[Message]) -> None:
    session = Session.from_store(store)
    for i in range(0, len(msgs), 1_000):
        session.extend(msgs[i : i + 1_000])
    session.close()


def timed_restore(make: Callable[[], SessionStore], runs: int) -> tuple[float, float, int]:
    walls, cpus = [], []
    n = 0
    for _ in range(runs):
        gc.collect()
        wall, cpu = time.perf_counter(), time.process_time()
        session = Session.from_store(make(), create=False)
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
        n = len(session.view)
        session.close()
        del session
    return min(walls), min(cpus), n


def bench_restore(
    pool: Sequence[Message], directory: Path, sizes: Sequence[int]
) -> list[tuple[str, int, float, float, int]]:
    rows = []
    for n in sizes:
        msgs = fresh(pool, n)
        jsonl, db = directory / f"r{n}.jsonl", directory / f"r{n}.db"
        build(JSONLStore(jsonl, fsync="never"), msgs)
        build(SQLiteStore(db, fsync="never"), msgs)
        for label, make, path in (
            ("JSONL", lambda p=jsonl: JSONLStore(p, read_only=True), jsonl),
            ("SQLite", lambda p=db: SQLiteStore(p, read_only=True), db),
        ):
            wall, cpu, restored = timed_restore(make, runs=3)
            assert restored == n
            size = path.stat().st_size
            rows.append((label, n, wall, cpu, size))
            print(
                f"  restore  {label:<6} {n:>8,} messages  wall {wall:.2f} s  cpu {cpu:.2f} s  ({size / 1e6:.0f} MB)",
                file=sys.stderr,
            )
        del msgs
    return rows


# ----------------------------------------------------------------------------- memory


def bench_memory(pool: Sequence[Message], directory: Path, n: int) -> dict[str, float]:
    path = directory / f"r{n}.jsonl"
    if not path.exists():
        build(JSONLStore(path, fsync="never"), fresh(pool, n))
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    session = Session.open(path, read_only=True)
    gc.collect()
    used = tracemalloc.get_traced_memory()[0] - base
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    text = text_bytes(session.view)
    result = {
        "messages": float(len(session.view)),
        "text_bytes": float(text),
        "file_bytes": float(path.stat().st_size),
        "memory_bytes": float(used),
        "peak_bytes": float(peak),
    }
    session.close()
    print(
        f"  memory   {n:,} messages: {used / 1e6:.0f} MB for {text / 1e6:.0f} MB of text "
        f"({used / text:.2f}x; file {path.stat().st_size / 1e6:.0f} MB, peak {peak / 1e6:.0f} MB)",
        file=sys.stderr,
    )
    return result


# ----------------------------------------------------------------------------- report


def report(
    source: str,
    appends: list[tuple[str, int, float]],
    restores: list[tuple[str, int, float, float, int]],
    memory: dict[str, float],
) -> str:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    lines = [
        BEGIN,
        f"Messages: {source}, repeated with fresh ids. Python {platform.python_version()}, "
        f"{os.cpu_count()} cores, load average {load:.1f} when the run started (other jobs share the machine: "
        "CPU time is the steadier figure).",
        "",
        "### Appends per second (one `Session.append` per message)",
        "| store | appends/s | messages |",
        "| --- | ---: | ---: |",
    ]
    lines += [f"| {label} | {rate:,.0f} | {n:,} |" for label, n, rate in appends]
    lines += [
        "",
        "### Restore (`Session.open` of an existing log; best of 3)",
        "| store | messages | file | wall | CPU |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    lines += [
        f"| {label} | {n:,} | {size / 1e6:,.0f} MB | {wall:.2f} s | {cpu:.2f} s |"
        for label, n, wall, cpu, size in restores
    ]
    m = memory
    lines += [
        "",
        "### Memory of a restored session (tracemalloc, after a full collection)",
        "| messages | text (UTF-8) | file | memory | memory / text | peak during restore |",
        "| ---: | ---: | ---: | ---: | ---: | ---: |",
        f"| {m['messages']:,.0f} | {m['text_bytes'] / 1e6:,.0f} MB | {m['file_bytes'] / 1e6:,.0f} MB | "
        f"{m['memory_bytes'] / 1e6:,.0f} MB | {m['memory_bytes'] / m['text_bytes']:.2f}x | "
        f"{m['peak_bytes'] / 1e6:,.0f} MB |",
        END,
    ]
    return "\n".join(lines)


SECTION_HEAD = """## Sessions

Persistent sessions (issue 5): how fast records are appended under each durability policy, how long a
restore takes, and what a restored session costs in memory. Targets: a 100,000-message restore under 2 s,
memory under 2x the text.

```
python bench/bench_session.py --write   # about 2 minutes on 2 cores
```

"""


def write(section: str) -> None:
    text = RESULTS.read_text(encoding="utf-8") if RESULTS.exists() else "# Benchmark results\n"
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        tail = rest.split(END, 1)[1]
        text = head + section + tail
    else:
        text = text.rstrip("\n") + "\n\n" + SECTION_HEAD + section + "\n"
    RESULTS.write_text(text, encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument(
        "--write", action="store_true", help="update the Sessions section of bench/RESULTS.md"
    )
    args = parser.parse_args()
    pool, source = corpus()
    sizes = (1_000, 10_000) if args.quick else (10_000, 100_000)
    with tempfile.TemporaryDirectory(prefix="bench-session-") as tmp:
        directory = Path(tmp)
        appends = bench_appends(pool, directory, args.quick)
        restores = bench_restore(pool, directory, sizes)
        memory = bench_memory(pool, directory, sizes[-1])
    section = report(source, appends, restores, memory)
    print(section)
    if args.write:
        write(section)
        print(f"updated {RESULTS}", file=sys.stderr)


if __name__ == "__main__":
    main()
