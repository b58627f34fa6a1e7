"""`CalibratedCounter`: learn a per-model correction from the prompt tokens a provider reports."""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ..exceptions import ConfigError, UsageError
from ..messages import JSONValue, Message
from ._base import BaseTokenCounter, TokenCounter

__all__ = ["Calibration", "CalibratedCounter", "uncorrected"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Calibration:
    """A snapshot of what a `CalibratedCounter` has learned."""

    correction: float
    """The factor applied to the inner counter's counts (``initial``, 1.0 by default, before any observation)."""
    observations: int
    """Usage reports taken into account (skipped ones excluded)."""
    error_band: tuple[float, float] | None
    """Lowest and highest relative error ``(predicted - reported) / reported`` of the
    corrected prediction over the recent observations, measured *before* each
    one updated the correction; None before the second observation."""


class CalibratedCounter:
    """Wraps a counter and corrects its counts with the prompt tokens the provider reports.

    Counters that estimate (`ScriptEstimator` for Claude or Gemini) or that do
    not know a model's exact chat template are off by a steady factor. Feed
    each response's usage to `observe` and every count afterwards is multiplied
    by the learned `correction`.

    The correction is the ratio ``reported / predicted``, learned in both
    directions (a counter that over-counts is corrected down too), and:

    * **bounded** to ``[min_correction, max_correction]`` (default 0.8 to 1.5),
      so one odd report (a provider-side system prompt, a cached-prefix quirk)
      cannot wreck every later decision;
    * **smoothed** with an exponential moving average (``smoothing`` 0.3 = the
      newest report weighs 30%), except that the first report is taken as is,
      since there is nothing to smooth it with;
    * **skipped** for prompts under ``min_tokens`` (default 64), where a few
      tokens of unmodelled framing make the ratio meaningless.

    `error_band` reports how far the corrected prediction still was from the
    reports, over the last ``window`` observations: an engine can keep that
    much headroom. Counts are rounded up after correction.

    Per-message counts come from the inner counter (and its cache), so a
    calibrated recount costs the same as an uncalibrated one. The learned
    state is guarded by a lock; share one instance per model.

    A `ContextEngine` given one (the default for models counted by estimate)
    counts with the inner counter and divides each call's budget by the
    correction instead: the counts it keeps between calls stay valid when the
    correction moves, where corrected counts taken before and after a report
    would mix (`ContextEngine.record_usage` feeds it).

    >>> from agentcontext.tokens import ScriptEstimator
    >>> counter = CalibratedCounter(ScriptEstimator())
    >>> counter.correction
    1.0
    """

    def __init__(
        self,
        inner: TokenCounter,
        *,
        smoothing: float = 0.3,
        min_correction: float = 0.8,
        max_correction: float = 1.5,
        min_tokens: int = 64,
        window: int = 32,
        initial: float = 1.0,
    ) -> None:
        """Wrap ``inner``.

        Args:
            inner: the counter to correct (any `TokenCounter`).
            smoothing: weight of the newest report in the moving average, in (0, 1] (default 0.3).
            min_correction: lowest correction allowed (default 0.8); above 1 for a counter known to count
                below what its provider bills (`models.counter_for`).
            max_correction: highest correction allowed (default 1.5).
            min_tokens: reports for prompts under this many predicted tokens are skipped (default 64).
            window: observations `error_band` looks back on (default 32).
            initial: the correction before the first usable report, which replaces it (default 1.0):
                what is known of the provider's ratio beforehand (`ModelSpec.estimate_ratio`).

        Raises:
            ConfigError: an option out of range, or ``inner`` is not a `TokenCounter`.
        """
        if not isinstance(inner, TokenCounter):
            raise ConfigError(f"inner must be a TokenCounter, got {type(inner).__name__}")
        if not (isinstance(smoothing, int | float) and 0 < smoothing <= 1):
            raise ConfigError(f"smoothing must be in (0, 1], got {smoothing!r}")
        if not (
            isinstance(min_correction, int | float)
            and isinstance(max_correction, int | float)
            and 0 < min_correction <= max_correction
            and math.isfinite(max_correction)
        ):
            raise ConfigError(
                f"need 0 < min_correction <= max_correction < inf, got {min_correction!r} and {max_correction!r}"
            )
        if not isinstance(min_tokens, int) or min_tokens < 0:
            raise ConfigError(f"min_tokens must be an int >= 0, got {min_tokens!r}")
        if not isinstance(window, int) or window < 1:
            raise ConfigError(f"window must be an int >= 1, got {window!r}")
        if not (isinstance(initial, int | float) and min_correction <= initial <= max_correction):
            raise ConfigError(f"initial must be within [min_correction, max_correction], got {initial!r}")
        self._inner = inner
        self._smoothing = float(smoothing)
        self._lo = float(min_correction)
        self._hi = float(max_correction)
        self._min_tokens = min_tokens
        self._lock = threading.Lock()
        self._initial = float(initial)
        self._correction = self._initial
        self._observations = 0
        self._errors: deque[float] = deque(maxlen=window)

    # ------------------------------------------------------------------ TokenCounter

    @property
    def name(self) -> str:
        """``"calibrated(<inner name>)"``."""
        return f"calibrated({self._inner.name})"

    @property
    def inner(self) -> TokenCounter:
        """The wrapped counter."""
        return self._inner

    def count_text(self, text: str) -> int:
        """The inner count of ``text``, corrected and rounded up."""
        return self._apply(self._inner.count_text(text))

    def count_message(self, message: Message) -> int:
        """The inner count of ``message``, corrected and rounded up."""
        return self._apply(self._inner.count_message(message))

    def count_messages(self, messages: Sequence[Message]) -> int:
        """The inner count of the prompt, corrected and rounded up (once, on the total)."""
        return self._apply(self._inner.count_messages(messages))

    def count_tools(self, tools: Sequence[Mapping[str, JSONValue]]) -> int:
        """The inner counter's `BaseTokenCounter.count_tools`, corrected.

        Raises:
            UsageError: the inner counter cannot count tools (it is not a `BaseTokenCounter`).
        """
        inner = self._inner
        if not isinstance(inner, BaseTokenCounter):
            raise UsageError(f"{type(inner).__name__} cannot count tool definitions; wrap a BaseTokenCounter")
        return self._apply(inner.count_tools(tools))

    # ------------------------------------------------------------------ calibration

    def observe(
        self, messages: Sequence[Message], reported_prompt_tokens: int, *, extra_tokens: int = 0
    ) -> bool:
        """Learn from one response: the prompt was ``messages`` and the provider billed ``reported_prompt_tokens``.

        Args:
            messages: exactly the messages sent.
            reported_prompt_tokens: the response's ``usage.prompt_tokens``
                (OpenAI) or ``input_tokens + cache_read_input_tokens +
                cache_creation_input_tokens`` (Anthropic).
            extra_tokens: tokens of the request your count of ``messages`` does not
                include but the report does, by the *inner* counter, e.g.
                ``inner.count_tools(tools)`` (default 0).

        Returns:
            True when the report was used, False when it was skipped (prompt under ``min_tokens``).

        Raises:
            UsageError: ``reported_prompt_tokens`` or ``extra_tokens`` is not a non-negative int.
        """
        if isinstance(reported_prompt_tokens, bool) or not isinstance(reported_prompt_tokens, int):
            raise UsageError(
                f"reported_prompt_tokens must be an int, got {type(reported_prompt_tokens).__name__}"
            )
        if (
            reported_prompt_tokens < 0
            or isinstance(extra_tokens, bool)
            or not isinstance(extra_tokens, int)
            or extra_tokens < 0
        ):
            raise UsageError(
                f"reported_prompt_tokens and extra_tokens must be ints >= 0, got {reported_prompt_tokens!r} and {extra_tokens!r}"
            )
        return self.observe_counted(
            self._inner.count_messages(messages) + extra_tokens, reported_prompt_tokens
        )

    def observe_counted(self, predicted: int, reported_prompt_tokens: int) -> bool:
        """`observe` for a request already counted: ``predicted`` is the *inner* counter's count of
        everything the provider billed as prompt (messages, tools, instructions, reply priming),
        such as a `Report`'s ``tokens_after`` from an engine that counts with this counter.

        Returns:
            True when the report was used, False when it was skipped (prompt under ``min_tokens``).

        Raises:
            UsageError: either count is not an int >= 0.
        """
        for name, value in (("predicted", predicted), ("reported_prompt_tokens", reported_prompt_tokens)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise UsageError(f"{name} must be an int >= 0, got {value!r}")
        if predicted < max(self._min_tokens, 1) or reported_prompt_tokens == 0:
            return False
        ratio = min(self._hi, max(self._lo, reported_prompt_tokens / predicted))
        with self._lock:
            if self._observations:
                self._errors.append(predicted * self._correction / reported_prompt_tokens - 1)
                self._correction += self._smoothing * (ratio - self._correction)
            else:
                self._correction = ratio
            self._observations += 1
        return True

    @property
    def correction(self) -> float:
        """The current factor (``initial``, 1.0 by default, until the first usable report)."""
        return self._correction

    @property
    def error_band(self) -> tuple[float, float] | None:
        """``(lowest, highest)`` relative error of the corrected prediction over recent reports; None before two.

        A band of ``(-0.04, 0.02)`` means the corrected count was at worst 4%
        under and 2% over what the provider billed.
        """
        with self._lock:
            if not self._errors:
                return None
            return min(self._errors), max(self._errors)

    @property
    def calibration(self) -> Calibration:
        """A consistent snapshot of the correction, the number of observations and the error band."""
        with self._lock:
            band = (min(self._errors), max(self._errors)) if self._errors else None
            return Calibration(correction=self._correction, observations=self._observations, error_band=band)

    def reset(self) -> None:
        """Forget everything learned (the correction returns to ``initial``)."""
        with self._lock:
            self._correction = self._initial
            self._observations = 0
            self._errors.clear()

    def correct(self, tokens: int) -> int:
        """``tokens`` counted by the inner counter, corrected and rounded up (as every count here is)."""
        return self._apply(tokens)

    def _apply(self, n: int) -> int:
        c = self._correction
        # 1e-9 keeps an exact correction of 1.0 (or a product that lands on an
        # integer) from being pushed up by float noise.
        return n if c == 1.0 else math.ceil(n * c - 1e-9)

    def __repr__(self) -> str:
        return f"CalibratedCounter({self._inner!r}, correction={self._correction:.4f})"


def uncorrected(counter: TokenCounter) -> tuple[TokenCounter, Callable[[int], int]]:
    """Counts of ``counter`` that never move, and how to correct a total of them into ``counter``'s.

    For a `CalibratedCounter`: its inner counter and `CalibratedCounter.correct` (applied once, on the
    total, when read), so that counts kept between reads stay valid when the correction moves. For any
    other counter: itself, and nothing to correct.
    """
    if isinstance(counter, CalibratedCounter):
        return counter.inner, counter.correct
    return counter, _same


def _same(tokens: int) -> int:
    return tokens
