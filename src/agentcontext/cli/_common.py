"""Options shared by several commands: the model, window and reserve, and building an engine."""

from __future__ import annotations

import argparse

from ..engine import ContextEngine, Thresholds
from ..exceptions import ConfigError


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


def engine_from(args: argparse.Namespace, *, strict: bool = False) -> ContextEngine:
    """An engine configured from the shared options."""
    if args.window is not None and args.window <= 0:
        raise ConfigError(f"--window must be positive, got {args.window}")
    if args.reserve is not None and args.reserve < 0:
        raise ConfigError(f"--reserve must be zero or more, got {args.reserve}")
    thresholds = Thresholds(soft=args.soft, warn=args.warn, hard=args.hard, target=args.target)
    return ContextEngine(
        args.model, window=args.window, reserve=args.reserve, thresholds=thresholds, strict=strict
    )
