"""The ``--plot`` figure of ``agentcontext replay`` (matplotlib, behind the ``plot`` extra)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from ..exceptions import MissingDependencyError
from ..replay import ReplayResult


def plot_replay(results: Mapping[str, ReplayResult], path: str, *, title: str) -> None:
    """Draw context tokens per call, the window, the thresholds and each compaction, to a PNG."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display needed
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise MissingDependencyError("--plot needs matplotlib: pip install 'agentcontext[plot]'") from exc
    first = next(iter(results.values()))
    fig, ax = plt.subplots(figsize=(10, 5), dpi=110)
    for name, r in results.items():
        xs = list(range(1, r.calls + 1))
        ys = [rec.tokens for rec in r.records]
        (line,) = ax.plot(xs, ys, linewidth=1.4, label=f"{name} (context tokens per call)")
        mx = [x for x, rec in zip(xs, r.records, strict=True) if rec.compacted]
        my = [rec.tokens for rec in r.records if rec.compacted]
        if mx:
            ax.scatter(
                mx,
                my,
                color=line.get_color(),
                marker="v",
                s=28,
                zorder=3,
                label=f"{name}: compaction ({len(mx)})",
            )
    ax.axhline(first.window, color="black", linewidth=1.2, label=f"window {first.window:,}")
    ax.axhline(
        first.budget,
        color="black",
        linestyle="--",
        linewidth=0.9,
        label=f"budget (window - reserve) {first.budget:,}",
    )
    for value, label, style in (
        (first.hard, "hard", ":"),
        (first.warn, "warn", ":"),
        (first.soft, "soft", ":"),
        (first.target, "target", "-."),
    ):
        ax.axhline(value, color="grey", linestyle=style, linewidth=0.8)
        ax.annotate(
            f"{label} {value:,}",
            xy=(1, value),
            xytext=(2, 2),
            textcoords="offset points",
            fontsize=7,
            color="grey",
        )
    ax.set_xlabel("model call")
    ax.set_ylabel("prompt tokens")
    ax.set_ylim(0, first.window * 1.35)  # room for the legend above the window line
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, loc="upper left", ncol=2, framealpha=0.9)
    ax.grid(alpha=0.2)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
