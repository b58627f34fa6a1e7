"""OpenAI Agents SDK sessions: what one agent step costs in ``get_items``, ours against the SDK's ``SQLiteSession``.

The SDK calls ``get_items`` when a run starts and ``add_items`` after every
turn. A step here is one ``add_items`` of a turn's items (a reasoning item, a
function call and its output, or a user message and the model's answer)
followed by one ``get_items``, at a history of about 10,000 items.

- ``SQLiteSession.get_items`` reads and decodes every item: O(history).
- ``AgentContextSession.get_items`` prepares the view with the engine (O(new
  items) between compactions, a compaction now and then) and writes it back as
  items from a cache of the unchanged messages: O(view), and the view is what
  fits the window. Its result is what the model can take; SQLite's is the
  whole history, which at 10,000 items no model window holds.

Items are the 63 real conversations of ``/work/shared/eval/conversations``
(OpenAI Chat Completions messages, tool outputs as recorded) written as
Responses items, with a reasoning item (1 KB of encrypted content) before each
model turn, repeated with fresh call ids; without that directory, generated
messages stand in. Both sessions live in SQLite files on a temporary
directory (ours with ``fsync="never"``, as SQLite's default journal does not
sync either).

Run:  python bench/bench_openai_agents.py              (about a minute on 2 cores)
      python bench/bench_openai_agents.py --items 2000 --steps 20   (a smoke run)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agents import SQLiteSession

import agentcontext as ac
from agentcontext.integrations.openai_agents import AgentContextSession
from agentcontext.session import SQLiteStore

EVAL = Path("/work/shared/eval/conversations")


def chat_turns() -> list[list[dict[str, Any]]]:
    """The eval conversations as lists of OpenAI Chat Completions messages."""
    if EVAL.is_dir():
        return [
            [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
            for path in sorted(EVAL.glob("*.jsonl"))
        ]
    from agentcontext.formats import openai as oai
    from agentcontext.testing import make_conversation

    return [oai.from_messages(make_conversation(seed=s, rounds=20, steps=(1, 4))) for s in range(20)]


def batches() -> Iterator[list[dict[str, Any]]]:
    """Endless ``add_items`` batches: a user message, then each model turn with its outputs."""
    n = 0
    while True:
        for conversation in chat_turns():
            batch: list[dict[str, Any]] = []
            for m in conversation:
                role = m.get("role")
                if role == "user":
                    if batch:
                        yield batch
                    batch = [{"role": "user", "content": m.get("content") or "(empty)"}]
                elif role == "assistant":
                    if batch:
                        yield batch
                    n += 1
                    batch = [
                        {"type": "reasoning", "id": f"rs_{n}", "summary": [], "encrypted_content": "g" * 1024}
                    ]
                    if m.get("content"):
                        batch.append(
                            {
                                "type": "message",
                                "id": f"msg_{n}",
                                "role": "assistant",
                                "status": "completed",
                                "content": [{"type": "output_text", "text": m["content"], "annotations": []}],
                            }
                        )
                    for call in m.get("tool_calls") or []:
                        batch.append(
                            {
                                "type": "function_call",
                                "call_id": f"{call['id']}_{n}",
                                "name": call["function"]["name"],
                                "arguments": call["function"]["arguments"],
                            }
                        )
                    if len(batch) == 1:
                        batch.append({"type": "message", "role": "assistant", "content": "(no text)"})
                elif role == "tool":
                    batch.append(
                        {
                            "type": "function_call_output",
                            "call_id": f"{m['tool_call_id']}_{n}",
                            "output": m.get("content") or "",
                        }
                    )
            if batch:
                yield batch


async def measure(items: int, steps: int, window: int) -> list[dict[str, Any]]:
    source = batches()
    with tempfile.TemporaryDirectory() as tmp:
        theirs = SQLiteSession("bench", db_path=str(Path(tmp) / "sdk.db"))
        engine = ac.ContextEngine(model="gpt-4o", window=window)
        inner = ac.Session.from_store(SQLiteStore(Path(tmp) / "ours.db", fsync="never"), engine=engine)
        ours = AgentContextSession(inner)
        added = 0
        while added < items:  # build the history the way an agent does, ours prepared as it goes
            batch = next(source)
            for session in (theirs, ours):
                await session.add_items(batch)  # type: ignore[arg-type]
            added += len(batch)
            if added % 50 < len(batch):
                await ours.get_items()
        timed = [next(source) for _ in range(steps)]
        rows = []
        for name, session in (("SQLiteSession (SDK)", theirs), ("AgentContextSession", ours)):
            await session.get_items()  # both start the timed steps from a prepared state
            quiet: list[tuple[float, float]] = []  # (wall, cpu) seconds of the steps that did not compact
            compacting: list[tuple[float, float]] = []
            got: list[Any] = []
            for batch in timed:
                await session.add_items(batch)  # type: ignore[arg-type]
                before = len(inner.compactions)
                w0, c0 = time.perf_counter(), time.process_time()
                got = await session.get_items()
                step = (time.perf_counter() - w0, time.process_time() - c0)
                (compacting if len(inner.compactions) > before else quiet).append(step)
            every = quiet + compacting
            rows.append(
                {
                    "session": name,
                    "history": added + sum(len(b) for b in timed),
                    "returned": len(got),
                    "quiet_wall": statistics.median(w for w, _ in quiet) * 1e3,
                    "quiet_cpu": statistics.median(c for _, c in quiet) * 1e3,
                    "compacting": f"{len(compacting)}, {max(c for _, c in compacting) * 1e3:.0f} ms CPU max"
                    if compacting
                    else "0",
                    "mean_cpu": statistics.fmean(c for _, c in every) * 1e3,
                }
            )
        inner.close()
        theirs.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=10_000, help="history size before the timed steps")
    parser.add_argument("--steps", type=int, default=200, help="timed steps")
    parser.add_argument("--window", type=int, default=128_000, help="the engine's context window")
    args = parser.parse_args()
    rows = asyncio.run(measure(args.items, args.steps, args.window))
    print(f"# {platform.python_implementation()} {platform.python_version()}, {platform.machine()}")
    print(
        f"# history ~{args.items:,} items, {args.steps} timed steps, engine window {args.window:,} (gpt-4o)"
    )
    print(
        "| session | items in history | items returned | quiet step p50 wall (ms) | quiet step p50 CPU (ms) "
        "| compacting steps | mean CPU, all steps (ms) |"
    )
    print("| --- | ---: | ---: | ---: | ---: | --- | ---: |")
    for r in rows:
        print(
            f"| {r['session']} | {r['history']:,} | {r['returned']:,} | {r['quiet_wall']:.2f} | {r['quiet_cpu']:.2f} "
            f"| {r['compacting']} | {r['mean_cpu']:.2f} |"
        )


if __name__ == "__main__":
    main()
