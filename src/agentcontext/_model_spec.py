"""`ModelSpec`: one model's window, output limit, tokenizer and prices, validated when built."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, TypeAlias, get_args

from .exceptions import ConfigError

__all__ = ["ESTIMATE_MARGIN", "RESERVE_SHARE", "CacheStyle", "ModelSpec", "Provider"]

Provider: TypeAlias = Literal[
    "openai", "anthropic", "google", "deepseek", "qwen", "moonshot", "meta", "other"
]
CacheStyle: TypeAlias = Literal["automatic_prefix", "explicit_breakpoints", "none"]

_PROVIDERS: frozenset[str] = frozenset(get_args(Provider))
_CACHE_STYLES: frozenset[str] = frozenset(get_args(CacheStyle))
_EXACT_TOKENIZERS = frozenset({"o200k_base", "cl100k_base"})

ESTIMATE_MARGIN = 0.10
"""Default safety margin for specs whose tokenizer is ``"estimate"``."""

RESERVE_SHARE = 0.25
"""Largest share of the window `ModelSpec.default_reserve` sets aside for the reply."""

# NaN is the "not given" marker for estimate_margin: it keeps the field a plain
# float for type checkers while letting __post_init__ derive the default from
# the tokenizer (a real margin can never be NaN, validation rejects it).
_AUTO_MARGIN = math.nan


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """What agentcontext needs to know about one model (or one family of snapshots).

    Prices are USD per million tokens and ``None`` when the provider does not
    publish them (open-weight models, retired snapshots); where a provider bills
    long prompts at a higher tier, the figure is the lowest tier's and ``source``
    says so.

    Example:
        >>> from agentcontext.models import ModelSpec
        >>> spec = ModelSpec(name="my-llama", provider="meta", context_window=32_768,
        ...                  max_output_tokens=4_096, tokenizer="estimate")
        >>> spec.estimate_margin, spec.default_reserve
        (0.1, 4096)
    """

    name: str
    """Canonical name, e.g. ``"gpt-4o"``; matched case-insensitively."""
    provider: Provider
    """Who serves or publishes the model; ``"other"`` for anything else."""
    context_window: int
    """Tokens of prompt plus reply the model accepts in one request."""
    max_output_tokens: int
    """Longest reply the provider allows. Equal to ``context_window`` where the
    reply is only bounded by the window (open-weight models, GPT-4's 8K)."""
    tokenizer: str
    """``"o200k_base"`` or ``"cl100k_base"`` (exact, offline), ``"estimate"`` (the
    script-aware estimator) or ``"hf:<path to tokenizer.json>"`` (a local Hugging Face
    tokenizer file, for open-weight models; nothing is downloaded)."""
    input_price: float | None = None
    """USD per million uncached input tokens."""
    cached_input_price: float | None = None
    """USD per million input tokens served from the provider's prompt cache."""
    output_price: float | None = None
    """USD per million output tokens (reasoning tokens included, where billed as output)."""
    cache_write_price: float | None = None
    """USD per million tokens written to a 5-minute Anthropic cache (1.25x input); ``None`` elsewhere."""
    cache_style: CacheStyle = "none"
    """``"automatic_prefix"`` (OpenAI, DeepSeek, Moonshot, Gemini 2.5: the longest
    shared prefix is cached without asking), ``"explicit_breakpoints"`` (Anthropic:
    up to 4 ``cache_control`` breakpoints) or ``"none"``."""
    max_input_tokens: int | None = None
    """A separate cap on prompt tokens, where the provider has one below the window
    (GPT-5: 272,000 of 400,000). ``None`` means the window is the only limit."""
    aliases: tuple[str, ...] = ()
    """Other exact names for this spec (provider aliases, renamed ids)."""
    source: str = ""
    """Where the figures come from, with the date they were read."""
    estimate_margin: float = _AUTO_MARGIN
    """Safety margin the engine adds when counting with this spec's tokenizer.
    Defaults to `ESTIMATE_MARGIN` (0.10) for ``"estimate"`` and 0.0 for exact tokenizers."""
    estimate_ratio: float = 1.0
    """How many tokens the provider bills per token counted, as far as is known before it reports
    any usage: where the engine counts by estimate, its calibrated counter starts from this and
    then learns the real ratio from usage (`ContextEngine.record_usage`). 1.0 for most models; above
    it for a provider whose tokenizer splits text finer than ``o200k_base``, which the estimator
    approximates (Anthropic's)."""

    def __post_init__(self) -> None:
        where = f"ModelSpec {self.name!r}" if isinstance(self.name, str) else "ModelSpec"
        if not isinstance(self.name, str) or not self.name.strip() or self.name != self.name.strip():
            raise ConfigError(
                f"ModelSpec.name must be a non-empty string without surrounding spaces, got {self.name!r}"
            )
        if self.provider not in _PROVIDERS:
            raise ConfigError(
                f"{where}: provider {self.provider!r} is not one of {sorted(_PROVIDERS)}; use 'other'"
            )
        window = _positive_int(self.context_window, where=where, field="context_window")
        out = _positive_int(self.max_output_tokens, where=where, field="max_output_tokens")
        if out > window:
            raise ConfigError(
                f"{where}: max_output_tokens ({out:,}) exceeds context_window ({window:,}); "
                "the reply has to fit in the window"
            )
        if self.max_input_tokens is not None:
            cap = _positive_int(self.max_input_tokens, where=where, field="max_input_tokens")
            if cap > window:
                raise ConfigError(f"{where}: max_input_tokens ({cap:,}) exceeds context_window ({window:,})")
        _check_tokenizer(self.tokenizer, where=where)
        for field in ("input_price", "cached_input_price", "output_price", "cache_write_price"):
            _check_price(getattr(self, field), where=where, field=field)
        if (
            self.cached_input_price is not None
            and self.input_price is not None
            and self.cached_input_price > self.input_price
        ):
            raise ConfigError(
                f"{where}: cached_input_price ({self.cached_input_price}) is above input_price "
                f"({self.input_price}); a cache hit never costs more than a miss"
            )
        if self.cache_style not in _CACHE_STYLES:
            raise ConfigError(
                f"{where}: cache_style {self.cache_style!r} is not one of {sorted(_CACHE_STYLES)}"
            )
        raw: object = self.aliases  # typed as a tuple, but a list or a bare str may come in
        if isinstance(raw, str) or not isinstance(raw, Iterable):
            raise ConfigError(f"{where}: aliases must be a tuple of strings, got {raw!r}")
        aliases = tuple(raw)
        for alias in aliases:
            if not isinstance(alias, str) or not alias.strip() or alias != alias.strip():
                raise ConfigError(
                    f"{where}: every alias must be a non-empty string without surrounding spaces, got {alias!r}"
                )
        object.__setattr__(self, "aliases", aliases)
        if not isinstance(self.source, str):
            raise ConfigError(f"{where}: source must be a string, got {type(self.source).__name__}")
        self._check_estimates(where)

    def _check_estimates(self, where: str) -> None:
        """Validate (and settle) ``estimate_margin`` and ``estimate_ratio``."""
        margin = self.estimate_margin
        if isinstance(margin, float) and math.isnan(margin):
            margin = ESTIMATE_MARGIN if self.tokenizer == "estimate" else 0.0
        if isinstance(margin, bool) or not isinstance(margin, int | float) or not 0.0 <= margin < 0.5:
            raise ConfigError(
                f"{where}: estimate_margin must be a number in [0, 0.5) (the engine's safety_margin range), got {margin!r}"
            )
        object.__setattr__(self, "estimate_margin", float(margin))
        ratio = self.estimate_ratio
        if isinstance(ratio, bool) or not isinstance(ratio, int | float) or not 1.0 <= ratio <= 2.0:
            raise ConfigError(
                f"{where}: estimate_ratio must be a number in [1, 2] (provider tokens per counted token), "
                f"got {ratio!r}"
            )
        object.__setattr__(self, "estimate_ratio", float(ratio))

    @property
    def default_reserve(self) -> int:
        """Output tokens an engine reserves when the caller gives no ``reserve``.

        The smaller of ``max_output_tokens`` and `RESERVE_SHARE` (25%) of the
        window, so a 128K-output model on a 200K window still leaves 150K for the
        prompt; raised to ``context_window - max_input_tokens`` where the provider
        caps input separately (GPT-5: 128,000), so a prompt that fits the budget
        is never rejected. Agents that expect long replies should pass their own
        reserve: a reply longer than the reserve can overflow the window.
        """
        reserve = min(self.max_output_tokens, int(self.context_window * RESERVE_SHARE))
        if self.max_input_tokens is not None:
            reserve = max(reserve, self.context_window - self.max_input_tokens)
        return reserve


def _positive_int(value: object, *, where: str, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"{where}: {field} must be a positive int, got {value!r}")
    return value


def _check_price(value: object, *, where: str, field: str) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise ConfigError(
            f"{where}: {field} must be a finite number >= 0 (USD per million tokens) or None when unknown, got {value!r}"
        )


def _check_tokenizer(value: object, *, where: str) -> None:
    if isinstance(value, str) and (
        value in _EXACT_TOKENIZERS or value == "estimate" or (value.startswith("hf:") and len(value) > 3)
    ):
        return
    raise ConfigError(
        f"{where}: tokenizer {value!r} is not one of 'o200k_base', 'cl100k_base', 'estimate' "
        "or 'hf:<path to tokenizer.json>'"
    )
