"""Options shared by several commands: the model, window and reserve, the summarizer, and building an engine."""

from __future__ import annotations

import argparse
from typing import Any

from ..engine import ContextEngine, Level, Thresholds
from ..exceptions import ConfigError
from ..strategies import Strategy
from ..summarizers import AnthropicSummarizer, ExtractiveSummarizer, OpenAISummarizer, Summarizer
from ..tokens import TokenCounter


def add_model_options(p: argparse.ArgumentParser, *, required: bool = True) -> None:
    """``--model``, ``--window``, ``--reserve`` and the level thresholds."""
    p.add_argument(
        "--model", "-m", required=required, help="model name from `agentcontext models` (e.g. gpt-4o)"
    )
    p.add_argument("--window", type=int, help="context window in tokens (default: the model's)")
    p.add_argument(
        "--reserve", type=int, help="tokens kept free for the reply (default: the model's default)"
    )
    p.add_argument("--soft", type=float, default=0.70, help="usage that starts compaction (default 0.70)")
    p.add_argument("--warn", type=float, default=0.85, help="usage for aggressive compaction (default 0.85)")
    p.add_argument("--hard", type=float, default=0.95, help="usage for emergency truncation (default 0.95)")
    p.add_argument("--target", type=float, default=0.50, help="usage compaction aims at (default 0.50)")


def add_summarizer_options(p: argparse.ArgumentParser) -> None:
    """``--summarizer`` and ``--base-url``."""
    p.add_argument(
        "--summarizer",
        default="extractive",
        help="extractive (offline, default), openai:MODEL or anthropic:MODEL (reads OPENAI_API_KEY / ANTHROPIC_API_KEY)",
    )
    p.add_argument(
        "--base-url", help="API root for an openai: or anthropic: summarizer (e.g. a local vLLM or Ollama)"
    )


def make_summarizer(spec: str, base_url: str | None, counter: TokenCounter) -> Summarizer:
    """The summarizer named by ``--summarizer``."""
    kind, _, model = spec.partition(":")
    if kind == "extractive" and not model:
        return ExtractiveSummarizer(counter=counter)
    if kind in ("openai", "anthropic") and model:
        kwargs: dict[str, Any] = {"model": model}
        if base_url:
            kwargs["base_url"] = base_url
        return OpenAISummarizer(**kwargs) if kind == "openai" else AnthropicSummarizer(**kwargs)
    raise ConfigError(f"--summarizer must be 'extractive', 'openai:MODEL' or 'anthropic:MODEL', got {spec!r}")


def engine_from(
    args: argparse.Namespace, *, strict: bool = False, pipelines: dict[Level, Strategy] | None = None
) -> ContextEngine:
    """An engine from the shared options (and the summarizer options, for commands that have them)."""
    if args.window is not None and args.window <= 0:
        raise ConfigError(f"--window must be positive, got {args.window}")
    if args.reserve is not None and args.reserve < 0:
        raise ConfigError(f"--reserve must be zero or more, got {args.reserve}")
    thresholds = Thresholds(soft=args.soft, warn=args.warn, hard=args.hard, target=args.target)
    engine = ContextEngine(
        args.model,
        window=args.window,
        reserve=args.reserve,
        thresholds=thresholds,
        strict=strict,
        pipelines=pipelines,
    )
    spec = getattr(args, "summarizer", "extractive")
    if spec == "extractive":
        return engine  # the default engine already summarizes offline
    summarizer = make_summarizer(spec, getattr(args, "base_url", None), engine.counter)
    return ContextEngine(
        args.model,
        window=args.window,
        reserve=args.reserve,
        thresholds=thresholds,
        strict=strict,
        summarizer=summarizer,
        pipelines=pipelines,
    )
