"""`Thresholds`: the usage ratios that pick the engine's level, and the target compaction aims at."""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from .compaction import Level
from .exceptions import ConfigError

__all__ = ["Thresholds", "check_fill"]

FILL_MARGIN = 0.04
"""The share of the budget a one-shot fit (``fill=True``) leaves free: counts of estimated
tokenizers and a provider's framing differ by a few percent."""


@dataclass(frozen=True, kw_only=True)
class Thresholds:
    """Usage ratios (of window minus reserve) that pick the level, and the target compaction aims at.

    The engine uses them as they are unless the system prompt and the latest
    request fill more than `pivot` of the budget; then it uses `above`.
    """

    soft: float = 0.70
    warn: float = 0.85
    hard: float = 0.95
    target: float = 0.50
    """Compaction shrinks the prompt to this share of the budget, well under ``soft``,
    so the next few steps do not trigger it again."""

    def __post_init__(self) -> None:
        if not 0.0 < self.target < self.soft <= self.warn <= self.hard <= 1.0:
            raise ConfigError(
                "thresholds must satisfy 0 < target < soft <= warn <= hard <= 1, got "
                f"target={self.target}, soft={self.soft}, warn={self.warn}, hard={self.hard}"
            )

    @property
    def pivot(self) -> float:
        """The floor (share of the budget) above which `above` raises the thresholds.

        It is where the room the target leaves above the floor shrinks to the gap
        between target and soft limit (or to half the target, if that is smaller):
        0.3 with the defaults.
        """
        return self.target - min(self.soft - self.target, self.target / 2)

    def above(self, floor: float) -> Thresholds:
        """These thresholds for a context of which ``floor`` (a share of the budget) cannot be compacted.

        The floor is what every compaction keeps verbatim: the system prompt and
        the latest user request. Up to `pivot` (0.3 with the defaults) the
        thresholds are returned as they are. Past it, the configured target would
        leave too little room above the floor for a summary and the recent
        messages (none at all once the floor passes it, the ``no_room`` fallback),
        and a floor past the soft limit would make every call compact. So the
        limits rise with the floor: with ``free = (1 - floor) / (1 - pivot)``, the
        share of the free space still left, each of soft, warn and hard keeps
        ``free ** 2`` of its distance to the budget, and the target stays where it
        was between the floor and the soft limit (halfway, with the defaults).
        A floor of 60% gives target 75%, soft 90%, warn 95%, hard 98%.

        The trade-off: the room under the target and the headroom before the next
        compaction shrink in proportion to the free space, while the escalation
        band above the soft limit (which only grades how hard the engine works)
        shrinks faster, so that room and headroom get most of what is free. The
        mapping is continuous at the pivot. As the floor nears the budget,
        compactions come more often (each one frees a share of what is free, never
        nothing), and a floor at or over the budget cannot fit at all: the limits
        then sit just under 1 and `HardTruncate` raises `ContextOverflowError`.
        """
        pivot = self.pivot
        if floor <= pivot:
            return self
        floor = min(floor, 0.999)  # keeps the limits strictly ordered; the fit check raises anyway
        keep = ((1.0 - floor) / (1.0 - pivot)) ** 2

        def lift(x: float) -> float:
            return 1.0 - (1.0 - x) * keep

        soft = lift(self.soft)
        # The target keeps its place between the floor and the soft limit (continuous at the pivot).
        target = floor + (soft - floor) * (self.target - pivot) / (self.soft - pivot)
        return Thresholds(soft=soft, warn=lift(self.warn), hard=lift(self.hard), target=target)

    def level(self, ratio: float) -> Level:
        """The level for a usage ratio."""
        if ratio >= self.hard:
            return Level.EMERGENCY
        if ratio >= self.warn:
            return Level.AGGRESSIVE
        if ratio >= self.soft:
            return Level.NORMAL
        return Level.NONE

    def filled(self, target: float | None = None) -> Thresholds:
        """These thresholds for a one-shot fit: compact only when over the budget, and then only to fill it.

        A running agent compacts at the soft limit down to the target, so that the
        next few steps do not compact again (hysteresis). A one-shot fit (``agentcontext
        fit``, ``Session.compact(fill=True)``) has no next step: it should keep as much
        as the budget holds, so the target is the budget less `FILL_MARGIN` (or
        ``target``, a share of the budget). A conversation over the budget gets the
        emergency pipeline, the one that works hardest to fit.

        Raises:
            ConfigError: ``target`` is not within (0, 1).
        """
        if target is None:
            target = 1.0 - FILL_MARGIN
        if isinstance(target, bool) or not isinstance(target, int | float) or not 0.0 < target < 1.0:
            raise ConfigError(f"a fill target is a share of the budget within (0, 1), got {target!r}")
        limit = target + (1.0 - target) / 2
        return Thresholds(
            soft=max(self.soft, limit), warn=max(self.warn, limit), hard=max(self.hard, limit), target=target
        )


def check_fill(fill: object, *, name: str = "fill") -> bool | float:
    """``fill`` as a one-shot fit option: False (the default), True, or a share of the budget such as 0.9.

    One check for every place that takes the option (`ContextEngine.prepare`, the
    integrations' constructors, the LiteLLM hook's per-request signal); the rule for a
    share is `Thresholds.filled`'s.

    Raises:
        ConfigError: anything else, naming ``name``.
    """
    if fill is True or fill is False:
        return fill
    if fill is not None:
        try:
            Thresholds().filled(cast(float, fill))
        except ConfigError:
            pass
        else:
            return float(cast(float, fill))
    raise ConfigError(
        f"{name} must be False (compact to the hysteresis target, for a running agent), True (a one-shot fit: "
        f"fill the budget less a small margin) or a share of the budget within (0, 1) such as 0.9, got {fill!r}"
    )
