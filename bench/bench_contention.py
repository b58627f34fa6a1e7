"""Eight writers on one session: throughput, the wait for a turn, and whether compactions land.

Each writer is a process that takes ``--turns`` turns on one session: append a
user message of about 120 words and prepare (the window is small, so prepares
compact every few turns). How the writers share the session depends on the store:

- **JSON Lines**: one writer at a time holds the file. A turn opens the session
  with ``lock_timeout`` (a blocking wait, with backoff, for the writer before it
  to close), appends, prepares and closes.
- **SQLite**: every writer keeps the session open. An append that loses a race
  reloads what it missed and retries; a prepare holds the session's lease, so no
  two writers summarize the same span, and a compaction computed on a view that
  moved meanwhile is rebased on the new tail.

Reported per store: turns per second over all writers; the p50 / p99 / max turn
time (waiting for the other writers included); the compaction records that
landed; and whether the log holds every message once and restores to a valid view.

Run:  python bench/bench_contention.py                (8 writers x 40 turns per store; about a minute)
      python bench/bench_contention.py --turns 200
"""

from __future__ import annotations

import argparse
import multiprocessing
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import agentcontext as ac
from agentcontext.invariants import check_messages
from agentcontext.session import MessageRecord
from agentcontext.testing import WordCounter

WINDOW = 2_000


def engine() -> ac.ContextEngine:
    return ac.ContextEngine(window=WINDOW, reserve=200, counter=WordCounter(), truncator=None)


def message(worker: int, turn: int) -> ac.Message:
    words = " ".join(f"w{worker}t{turn}x{k}" for k in range(120))
    return ac.Message(role="user", content=words, id=f"msg_{worker}_{turn}")


def jsonl_worker(location: str, worker: int, turns: int, out: str) -> None:
    times: list[float] = []
    waits: list[float] = []
    for turn in range(turns):
        t0 = time.perf_counter()
        session = ac.Session.open(location, engine=engine(), lock_timeout=120, fsync="never")
        t1 = time.perf_counter()
        session.append(message(worker, turn))
        session.prepare()
        session.close()
        waits.append(t1 - t0)
        times.append(time.perf_counter() - t0)
    Path(out).write_text(" ".join(f"{a:.6f},{b:.6f}" for a, b in zip(times, waits, strict=True)))


def sqlite_worker(location: str, worker: int, turns: int, out: str) -> None:
    times: list[float] = []
    with ac.Session.open(location, engine=engine(), fsync="never") as session:
        for turn in range(turns):
            t0 = time.perf_counter()
            session.append(message(worker, turn))
            session.prepare()
            times.append(time.perf_counter() - t0)
    Path(out).write_text(" ".join(f"{a:.6f},0" for a in times))


def run(kind: str, writers: int, turns: int, root: Path) -> dict[str, object]:
    location = (
        str(root / "shared.jsonl") if kind == "jsonl" else f"sqlite:///{root / 'runs.db'}?session=shared"
    )
    ac.Session.open(location).close()
    target = jsonl_worker if kind == "jsonl" else sqlite_worker
    ctx = multiprocessing.get_context("spawn")
    outs = [root / f"{kind}-{w}.txt" for w in range(writers)]
    procs = [ctx.Process(target=target, args=(location, w, turns, str(outs[w]))) for w in range(writers)]
    t0 = time.perf_counter()
    for p in procs:
        p.start()
    for p in procs:
        p.join()
        if p.exitcode != 0:
            raise SystemExit(f"a {kind} writer failed (exit {p.exitcode})")
    elapsed = time.perf_counter() - t0
    samples = [tuple(map(float, pair.split(","))) for out in outs for pair in out.read_text().split()]
    turn_times = sorted(s[0] for s in samples)
    with ac.Session.open(location, engine=engine(), read_only=True) as session:
        compactions = len(session.compactions)
        ids = [r.message.id for r in session.records() if isinstance(r, MessageRecord)]
        view = list(session.view)
        valid = not check_messages(view) and not check_messages(engine().prepare(view).messages)
    expected = {f"msg_{w}_{t}" for w in range(writers) for t in range(turns)}
    return {
        "store": kind,
        "turns/s": writers * turns / elapsed,
        "p50": statistics.median(turn_times),
        "p99": turn_times[min(len(turn_times) - 1, int(0.99 * len(turn_times)))],
        "max": turn_times[-1],
        "compactions": compactions,
        "every message once": sorted(ids) == sorted(expected),
        "valid view": valid,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--turns", type=int, default=40)
    args = parser.parse_args()
    print(
        f"Python {platform.python_version()}, {multiprocessing.cpu_count()} cores; {args.writers} writers x "
        f"{args.turns} turns; window {WINDOW:,} words",
        file=sys.stderr,
    )
    print(
        "| store | turns/s | turn p50 (ms) | turn p99 (ms) | max (ms) | compactions landed | every message once | valid view |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- | --- |")
    for kind in ("jsonl", "sqlite"):
        with tempfile.TemporaryDirectory() as tmp:
            r = run(kind, args.writers, args.turns, Path(tmp))
        print(
            f"| {r['store']} | {r['turns/s']:,.1f} | {1e3 * float(r['p50']):,.1f} | {1e3 * float(r['p99']):,.1f} | "
            f"{1e3 * float(r['max']):,.1f} | {r['compactions']} | {r['every message once']} | {r['valid view']} |"
        )


if __name__ == "__main__":
    main()
