"""Agents that act in text: the same runs, rewritten the way a text-acting agent sends them, fitted once.

mini-swe-agent's text mode (and classic SWE-agent, ReAct loops) writes each command in a fenced
block of the reply and gets its output back as a user message (``<returncode>...``). This bench
takes the tool-calling mini-swe-agent runs of the evaluation set, rewrites each the way its text
mode sends it (every call a fenced ``bash`` block at the end of the reply, every result a user
message, consecutive results joined), fits the context before its last reply into a share of its
tokens (at least 4,000) plus a 2,000-token reply reserve with ``fill=True`` (what ``agentcontext
fit`` does), and measures the output against the events of the original run (``probes.py``, so
what counts as a command, its result and the user's words does not depend on the package):

- probes: files modified, the last failing command and its error, the latest test result, and
  each of the user's own messages (the rewritten outputs are not instructions);
- identifiers: the external check's key identifiers of the original, read as written;
- failures: calls the engine refused (``ContextOverflowError``: the "latest user message" it must
  keep verbatim did not fit);
- quoted outputs: command outputs the summary quoted among the user's requests.

Beside it, the baseline of the external check: the system prompt and the newest messages that fit.

Run from the repository root; to measure another checkout, put its ``src`` first on PYTHONPATH::

    python bench/bench_text_agents.py
    PYTHONPATH=/path/to/old/src python bench/bench_text_agents.py
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from agentcontext import counter_for
from agentcontext.engine import ContextEngine
from agentcontext.exceptions import ContextOverflowError
from agentcontext.formats.openai import from_messages, to_messages
from probes import Msg, answered, build_probes, context_text, key_identifiers, retention

EVAL = Path(__file__).resolve().parents[2] / "shared" / "eval"
RESERVE = 2000
COUNTER = counter_for("gpt-4o")


def as_text_agent(msgs: list[Msg]) -> list[Msg]:
    """``msgs`` as a text-acting agent sends them: commands in fenced blocks, outputs as user messages."""
    out: list[Msg] = []
    for m in msgs:
        role = m.get("role")
        if role == "assistant" and m.get("tool_calls"):
            blocks = ""
            for tc in m["tool_calls"]:
                raw = (tc.get("function") or {}).get("arguments") or ""
                try:
                    args: Any = json.loads(raw)
                except ValueError:
                    args = raw
                command = args.get("command", raw) if isinstance(args, dict) else raw
                blocks += f"\n\n```bash\n{command}\n```"
            out.append({"role": "assistant", "content": (m.get("content") or "") + blocks})
        elif role == "tool":
            text = m.get("content") or ""
            if out and out[-1]["role"] == "user" and out[-1].get("observation"):
                out[-1]["content"] += "\n\n" + text  # parallel calls: one message back
            else:
                out.append({"role": "user", "content": text, "observation": True})
        else:
            out.append({"role": role, "content": m.get("content") or ""})
    for m in out:
        m.pop("observation", None)
    return out


def tokens_of(msgs: list[Msg]) -> int:
    return sum(COUNTER.count_message(m) for m in to_messages(msgs))


def suffix(msgs: list[Msg], budget: int) -> list[Msg]:
    """The baseline: the system prompt and the newest messages that fit."""
    head = msgs[:1] if msgs and msgs[0].get("role") == "system" else []
    used, keep = tokens_of(head) + 3, len(msgs)
    for i in range(len(msgs) - 1, len(head) - 1, -1):
        used += tokens_of([msgs[i]])
        if used > budget:
            break
        keep = i
    return head + msgs[keep:]


def quoted_outputs(fitted: list[Msg]) -> int:
    """Command outputs the summary quotes among the user's requests (``<active_constraints>``)."""
    n = 0
    for m in fitted:
        text = m.get("content") if isinstance(m.get("content"), str) else ""
        if text and "<active_constraints>" in text:
            requests = text.split("<active_constraints>", 1)[1].split("</active_constraints>", 1)[0]
            n += requests.count("<returncode>")
    return n


def share_of(kinds: dict[str, list[bool]], kind: str) -> str:
    v = kinds.get(kind, [])
    return f"{sum(v)}/{len(v)}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--eval-dir", type=Path, default=EVAL)
    parser.add_argument("--shares", default="0.125,0.25,0.5")
    parser.add_argument("--min-tokens", type=int, default=8000)
    args = parser.parse_args(argv)
    files = sorted((args.eval_dir / "conversations").glob("mini-swe-agent__*.jsonl"))
    print(f"{len(files)} mini-swe-agent runs from {args.eval_dir}")
    print(
        "| window | method | runs | failures | probes | modified | failed command | error | test | instructions "
        "| identifiers (as written) | outputs quoted as requests |"
    )
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for share, method in ((float(s), m) for s in args.shares.split(",") for m in ("fit", "suffix")):
        runs = failures = quoted = 0
        kinds: dict[str, list[bool]] = {}
        kept: list[float] = []
        for path in files:
            msgs = [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]
            last = max(i for i, m in enumerate(msgs) if m.get("role") == "assistant")
            prefix = msgs[:last]
            text = as_text_agent(prefix)
            tokens = tokens_of(text)
            if tokens < args.min_tokens:
                continue
            runs += 1
            budget = max(4000, int(tokens * share))
            engine = ContextEngine(model="gpt-4o", window=budget + RESERVE, reserve=RESERVE)
            probes = build_probes(prefix)
            try:
                if method == "suffix":
                    fitted = suffix(text, budget)
                else:
                    fitted = from_messages(list(engine.prepare(to_messages(text), fill=True).messages))
            except ContextOverflowError:
                failures += 1
                for p in probes:
                    kinds.setdefault(p.kind, []).append(False)
                kept.append(0.0)
                continue
            context = context_text(fitted)
            for p in probes:
                kinds.setdefault(p.kind, []).append(answered(p, context))
            kept.append(retention(key_identifiers(prefix, written=True), fitted, written=True))
            quoted += quoted_outputs(fitted)
        every = [a for v in kinds.values() for a in v]

        print(
            f"| 1/{round(1 / share)} | {method} | {runs} | {failures} | {sum(every) / len(every):.3f} | {share_of(kinds, 'modified')} "
            f"| {share_of(kinds, 'failed_command')} | {share_of(kinds, 'failed_error')} | {share_of(kinds, 'test_result')} "
            f"| {share_of(kinds, 'instruction')} | {sum(kept) / len(kept):.3f} | {quoted} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
