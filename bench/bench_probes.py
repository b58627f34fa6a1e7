"""Context quality after a one-shot fit, measured independently: key identifiers and probe questions.

For each conversation of the evaluation set over ``--min-tokens`` (8,000 by default), the context
before its last assistant message is fitted into a budget of a share of its tokens (at least 4,000)
plus a 2,000-token reply reserve, the way the project's external retention check runs ``agentcontext
fit``. Two measures of the output, both from the conversation alone (see ``probes.py``): the share of
its key identifiers kept (the external check's definition, not the package's extractor) and the share
of its probe questions answered (files modified, the last failing command and its error, the latest
test result, every user instruction). Each method is compared on the same budgets:

- ``suffix``: the system prompt and the newest messages that fit (the external check's baseline);
- ``fit``: the engine's default pipeline as ``agentcontext fit`` runs it (compacting to the 50% target);
- ``fit-fill``: the same with ``fill=True`` (a one-shot fit fills the budget less a small margin);
- ``fit-fill-whole``: and the summarizer reads the whole span in one request instead of
  summarizing chunks and then their summaries (a prototype of a strategy setting: the extractive
  summarizer has no input limit);
- ``budget-fill``, ``mask-fill``: the plain strategies (drop the oldest rounds; mask old tool results,
  then drop), filling the budget;
- ``llm-fill``: the default pipeline of a one-shot fit (summarize, then mask) with `OpenAISummarizer`
  against a loopback server whose "model" writes an extractive summary of the prompt it gets
  (``standin_model.py``), so the pipeline around an LLM summary is measured (the prompt, the merge,
  the verification); ``llm-sumfirst-fill``: the same, built from the default tiers;
  ``llm-maskfirst-fill``: the tiers in a running agent's order with an LLM (mask, then summarize);
  ``llm-reprompt-fill``: that order with ``reprompt_missing=True`` (the identifier re-prompt), so the
  re-prompt is what differs from ``llm-maskfirst-fill``.

Run from the repository root (about a minute per share for all methods)::

    python bench/bench_probes.py                          # shares 1/8, 1/4, 1/2
    python bench/bench_probes.py --shares 0.25 --methods fit-fill,suffix --json out.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentcontext import counter_for
from agentcontext.engine import ContextEngine, Level
from agentcontext.exceptions import ContextOverflowError
from agentcontext.formats.openai import from_messages, to_messages
from agentcontext.strategies import Strategy, Tiered
from agentcontext.strategies.summarize import Summarize
from agentcontext.summarizers import OpenAISummarizer, Summarizer
from bench_summaries import mask_budget_pipelines, token_budget_pipelines
from probes import Msg, answered, build_probes, context_text, key_identifiers, retention, text_of
from standin_model import StandInModel

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from llm_servers import LLMServer, openai_ok

EVAL = Path(__file__).resolve().parents[2] / "shared" / "eval"
RESERVE = 2000
COUNTER = counter_for("gpt-4o")


def count(msgs: Sequence[Msg]) -> int:
    """Tokens of OpenAI-format messages, framed as the external check frames them."""
    n = 3
    for m in msgs:
        n += 3 + COUNTER.count_text(m.get("role") or "") + COUNTER.count_text(text_of(m.get("content")))
        for tc in m.get("tool_calls") or []:
            f = tc.get("function") or {}
            n += COUNTER.count_text(f.get("name") or "") + COUNTER.count_text(f.get("arguments") or "")
        if m.get("role") == "tool":
            n += 3
    return n


def suffix_baseline(msgs: Sequence[Msg], budget: int) -> list[Msg]:
    """System prompt + the newest messages that fit, cut where no tool result loses its call."""
    system = [m for m in msgs[:1] if m.get("role") == "system"]
    rest = list(msgs[len(system) :])
    used = count(system)
    keep = len(rest)
    for i in range(len(rest) - 1, -1, -1):
        used += count([rest[i]]) - 3
        if used > budget:
            break
        keep = i
    while keep < len(rest) and rest[keep].get("role") == "tool":
        keep += 1
    return system + rest[keep:]


def tiers(
    *, summarize_first: bool, max_input_tokens: int | None = None, reprompt: bool = False
) -> Callable[[], dict[Level, Strategy]]:
    """The engine's default pipelines (`default_pipelines`), in the offline order (summarize, then mask)
    or the LLM order (mask, then summarize), with the summarizer's input limit and re-prompt set: the
    same tiers in every other respect, so that a method measures the one setting it names."""
    from agentcontext.strategies.pipeline import default_pipelines

    llm_order = OpenAISummarizer(model="stand-in", base_url="http://127.0.0.1:9", api_key="x")

    def make() -> dict[Level, Strategy]:
        base = default_pipelines(summarizer=None if summarize_first else llm_order)
        out: dict[Level, Strategy] = {}
        for level, pipeline in base.items():
            assert isinstance(pipeline, Tiered)
            steps = tuple(
                dataclasses.replace(t, max_input_tokens=max_input_tokens, reprompt_missing=reprompt)
                if isinstance(t, Summarize)
                else t
                for t in pipeline.tiers
            )
            out[level] = Tiered(tiers=steps, name=pipeline.name)
        return out

    return make


# The strategy's default input limit assumes an LLM's context; the extractive summarizer has none,
# so one request can replace chunked summaries of summaries (a prototype of a strategy change).
WHOLE = 10**9


@dataclass
class Method:
    """How to fit a conversation: a pipeline (None: the engine's default), a summarizer, fill or not."""

    pipelines: Callable[[], dict[Level, Strategy] | None] | None = None
    fill: bool = True
    llm: bool = False
    suffix: bool = False


METHODS: dict[str, Method] = {
    "suffix": Method(suffix=True),
    "fit": Method(fill=False),
    "fit-fill": Method(),
    "fit-fill-whole": Method(pipelines=tiers(summarize_first=True, max_input_tokens=WHOLE)),
    "budget-fill": Method(pipelines=token_budget_pipelines),
    "mask-fill": Method(pipelines=mask_budget_pipelines),
    "llm-fill": Method(llm=True),
    "llm-maskfirst-fill": Method(llm=True, pipelines=tiers(summarize_first=False)),
    "llm-reprompt-fill": Method(llm=True, pipelines=tiers(summarize_first=False, reprompt=True)),
    "llm-sumfirst-fill": Method(llm=True, pipelines=tiers(summarize_first=True)),
}


@dataclass
class Score:
    """One method on one conversation at one share."""

    source: str
    retention: float
    written: float = 0.0
    """Retention with tool-call arguments read as written (JSON-unescaped), in the conversation and the output."""
    probes: dict[str, list[bool]] = field(default_factory=dict)
    failed: bool = False
    tokens: int = 0

    @property
    def probe_share(self) -> float:
        flat = [x for v in self.probes.values() for x in v]
        return sum(flat) / len(flat) if flat else 1.0


class Runner:
    """Fits conversations with the methods; one loopback server for the LLM methods."""

    def __init__(self, server: LLMServer) -> None:
        self.server = server
        self.model = StandInModel(COUNTER)
        server.respond(lambda body: openai_ok(self.model(body)))

    def fit(self, method: Method, prefix: list[Msg], budget: int) -> list[Msg]:
        if method.suffix:
            return suffix_baseline(prefix, budget)
        summarizer: Summarizer | None = None
        if method.llm:
            summarizer = OpenAISummarizer(model="stand-in", base_url=self.server.url, api_key="x")
        engine = ContextEngine(
            "gpt-4o",
            window=budget + RESERVE,
            reserve=RESERVE,
            summarizer=summarizer,
            pipelines=method.pipelines() if method.pipelines is not None else None,
        )
        prepared = engine.prepare(to_messages(prefix), fill=method.fill)
        return [dict(m) for m in from_messages(list(prepared.messages))]


def evaluate(
    runner: Runner,
    names: list[str],
    files: list[Path],
    share: float,
    sources: dict[str, str],
    min_tokens: int,
) -> dict[str, dict[str, Score]]:
    out: dict[str, dict[str, Score]] = defaultdict(dict)
    for path in files:
        msgs = [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]
        last = max((i for i, m in enumerate(msgs) if m.get("role") == "assistant"), default=len(msgs))
        prefix = msgs[:last]
        tokens = count(prefix)
        if tokens < min_tokens:
            continue
        ids = key_identifiers(prefix)
        if not ids:
            continue
        written = key_identifiers(prefix, written=True)
        probes = build_probes(prefix)
        budget = max(4000, int(tokens * share))
        source = sources.get(path.stem, path.name.split("__")[0])
        for name in names:
            try:
                fitted = runner.fit(METHODS[name], prefix, budget)
            except ContextOverflowError:
                out[name][path.stem] = Score(source, 0.0, failed=True)
                continue
            context = context_text(fitted)
            score = Score(
                source, retention(ids, fitted), retention(written, fitted, written=True), tokens=count(fitted)
            )
            for p in probes:
                score.probes.setdefault(p.kind, []).append(answered(p, context))
            out[name][path.stem] = score
        print(".", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    return out


def mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def report(results: dict[str, dict[str, Score]], share: float) -> None:
    names = list(results)
    groups = sorted({s.source for r in results.values() for s in r.values()})
    n = len(next(iter(results.values()))) if results else 0
    print(f"\n### Window {share:g} of each conversation ({n} conversations)\n")
    print(
        "Key identifiers kept (mean per conversation; as written: arguments JSON-unescaped), then probes "
        "answered (mean per conversation):\n"
    )
    head = " | ".join(
        f"{g} (n={sum(1 for s in results[names[0]].values() if s.source == g)})" for g in groups
    )
    print(f"| method | all | {head} | as written | probes, all | " + " | ".join(groups) + " | failures |")
    print(
        "| --- | ---: | "
        + " | ".join("---:" for _ in groups)
        + " | ---: | ---: | "
        + " | ".join("---:" for _ in groups)
        + " | ---: |"
    )
    for name in names:
        scores = list(results[name].values())
        ret = [f"{mean([s.retention for s in scores if s.source == g]):.3f}" for g in groups]
        prb = [f"{mean([s.probe_share for s in scores if s.source == g]):.3f}" for g in groups]
        failures = sum(s.failed for s in scores)
        print(
            f"| {name} | **{mean([s.retention for s in scores]):.3f}** | "
            + " | ".join(ret)
            + f" | {mean([s.written for s in scores]):.3f}"
            + f" | **{mean([s.probe_share for s in scores]):.3f}** | "
            + " | ".join(prb)
            + f" | {failures} |"
        )
    kinds = sorted({k for r in results.values() for s in r.values() for k in s.probes})
    print("\nProbes answered by kind (pooled over conversations):\n")
    print("| method | " + " | ".join(kinds) + " |")
    print("| --- | " + " | ".join("---:" for _ in kinds) + " |")
    for name in names:
        cells = []
        for k in kinds:
            flat = [x for s in results[name].values() for x in s.probes.get(k, [])]
            cells.append(f"{sum(flat)}/{len(flat)}" if flat else "n/a")
        print(f"| {name} | " + " | ".join(cells) + " |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--eval-dir", type=Path, default=EVAL)
    parser.add_argument("--shares", default="0.125,0.25,0.5", help="window shares, comma-separated")
    parser.add_argument("--methods", default=",".join(METHODS), help="comma-separated names")
    parser.add_argument("--min-tokens", type=int, default=8000)
    parser.add_argument("--only", default="", help="only conversations whose file name contains this")
    parser.add_argument("--json", type=Path, default=None, help="write per-conversation scores here")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.methods.split(",") if n.strip()]
    manifest = json.loads((args.eval_dir / "manifest.json").read_text("utf-8"))["conversations"]
    sources = {c["id"]: c["source"] for c in manifest}
    files = sorted(p for p in (args.eval_dir / "conversations").glob("*.jsonl") if args.only in p.name)
    dump: dict[str, Any] = {}
    with LLMServer("openai") as server:
        runner = Runner(server)
        for share in (float(s) for s in args.shares.split(",")):
            start = time.perf_counter()
            results = evaluate(runner, names, files, share, sources, args.min_tokens)
            report(results, share)
            print(
                f"\n({time.perf_counter() - start:.0f} s; stand-in model calls so far: {runner.model.calls}, "
                f"re-prompts: {runner.model.reprompts})"
            )
            dump[f"{share:g}"] = {
                name: {
                    cid: {
                        "source": s.source,
                        "retention": s.retention,
                        "written": s.written,
                        "probes": s.probes,
                        "failed": s.failed,
                        "tokens": s.tokens,
                    }
                    for cid, s in r.items()
                }
                for name, r in results.items()
            }
    if args.json is not None:
        args.json.write_text(json.dumps(dump, indent=1), "utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
