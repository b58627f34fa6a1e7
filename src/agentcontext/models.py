"""Model registry: what each model's window, output limit, tokenizer and prices are.

Every figure in the built-in table carries a ``source`` naming where it was read
and when; prices the providers do not publish are ``None``, never guessed.
Look a model up by the name you send to the provider::

    >>> from agentcontext import models
    >>> spec = models.get("gpt-4o-2024-08-06")
    >>> spec.name, spec.context_window, spec.tokenizer
    ('gpt-4o', 128000, 'o200k_base')

Resolution, in order (case-insensitive throughout):

1. an exact name or alias;
2. the same after dropping routing prefixes (``openai/``, ``openrouter/anthropic/``,
   ``models/``, ``meta-llama/``, Bedrock's ``us.anthropic.``...), tags (``:free``,
   ``[1m]``) and version suffixes (``-2024-08-06``, ``-20241022``, ``@20240620``,
   ``-0125``, ``-001``, ``-v2:0``, ``-latest``, ``-preview``, ``-exp``...);
3. the longest registered family name that prefixes what is left on a ``-``
   boundary: ``gpt-4o-mini-search`` is ``gpt-4o-mini``, never ``gpt-4o``, and
   ``gpt-4o`` never matches ``gpt-4``.

Step 3 is what makes new snapshots work the day they ship, and also its
trade-off: an unknown sibling such as a future ``claude-opus-4-9`` resolves to
``claude-opus-4`` (right window family, possibly wrong price). Register a spec
for any model whose figures you rely on.

Unknown names raise `agentcontext.exceptions.UnknownModelError` with the
closest registered names. Your own models go in with `register`; they live in a
layer above the built-in table, which is never modified (`BUILTIN_MODELS` is a
read-only view other modules may hold).
"""

from __future__ import annotations

import difflib
import math
import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Literal, TypeAlias, get_args

from .exceptions import ConfigError, UnknownModelError

if TYPE_CHECKING:
    from .tokens._base import TokenCounter

__all__ = [
    "BUILTIN_MODELS",
    "CacheStyle",
    "ModelSpec",
    "Provider",
    "all_models",
    "counter_for",
    "get",
    "register",
    "unregister",
]

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
        margin = self.estimate_margin
        if isinstance(margin, float) and math.isnan(margin):
            margin = ESTIMATE_MARGIN if self.tokenizer == "estimate" else 0.0
        if isinstance(margin, bool) or not isinstance(margin, int | float) or not 0.0 <= margin < 0.5:
            raise ConfigError(
                f"{where}: estimate_margin must be a number in [0, 0.5) (the engine's safety_margin range), got {margin!r}"
            )
        object.__setattr__(self, "estimate_margin", float(margin))

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


# --------------------------------------------------------------------------
# The built-in table: one row per model, its figures' provenance in `_SOURCES`.
# Read 2026-11-21. "Mirrored by" means the provider's own page was not in reach
# and the figure comes from the named copies of it, which agreed with each other;
# "not re-checked" marks a figure carried from the provider's docs without a
# fresh reading.

_READ = "read 2026-11-21"
_OAI_PAGE = "OpenAI model page developers.openai.com/api/docs/models/{}, " + _READ
_OAI_MIRROR = "OpenAI model and pricing pages as mirrored by {}, " + _READ
_ANT_PRICING = "Anthropic pricing page platform.claude.com/docs/en/about-claude/pricing"
_ANT_PAGE = (
    "Anthropic model page platform.claude.com/docs/en/models/{}/overview and " + _ANT_PRICING + ", " + _READ
)
_ANT_LEGACY = "Anthropic legacy model, window and max output {}; prices per " + _ANT_PRICING + ", " + _READ
_GEMINI = (
    "Gemini API pricing ai.google.dev/gemini-api/docs/pricing as mirrored by deploybase.ai (2026-03), OpenRouter's "
    "Gemini 2.5 Flash guide and aifreeapi (2026-01), "
    + _READ
    + "; limits (1,048,576 in / {} out) from Google's "
    "Gemini model pages, not re-checked"
)
_GPT5 = "; 400,000 window of which at most 272,000 input (OpenAI gpt-5-nano page)"
_OPEN = "; open weights: no list price (hosts set their own); the reply is bounded only by the window"
_RETIRED_DS = "; the name was retired on 2026-07-24"
_DS_RISE = "; DeepSeek announced an increase on 2026-08-06"

_SOURCES: Mapping[str, str] = MappingProxyType(
    {
        "gpt-3.5-turbo": _OAI_PAGE.format("gpt-3.5-turbo"),
        "gpt-4": _OAI_PAGE.format("gpt-4"),
        "gpt-4-turbo": _OAI_PAGE.format("gpt-4-turbo") + " (and gpt-4-turbo-preview)",
        "gpt-4o": _OAI_MIRROR.format(
            "Vercel AI Gateway (limits), CommitBrief wiki 2026-05 and chatgptpricing (prices)"
        ),
        "gpt-4.1": _OAI_MIRROR.format("Vercel AI Gateway (limits, cache price) and Helicone (prices)"),
        "gpt-4.1-small": _OAI_MIRROR.format(
            "Vercel AI Gateway (limits), tokenmath 2026-06 and deploybase 2026-03"
        )
        + "; cached input at 25% of input (GPT-4.1 family, per adk-model)",
        "gpt-5": _OAI_MIRROR.format("models.dev and chatgptpricing") + _GPT5,
        "gpt-5-page": _OAI_PAGE.format("gpt-5-mini and gpt-5-nano") + _GPT5,
        "gpt-5-pro": _OAI_MIRROR.format("deploybase 2026-03") + "; no cached-input price listed" + _GPT5,
        "gpt-5.1": _OAI_MIRROR.format("deploybase 2026-03 and Expensify's cost estimator") + _GPT5,
        "gpt-5.2": _OAI_MIRROR.format(
            "Vercel AI Gateway (limits), SciCode's pricing script and adk-model (cache 10%)"
        )
        + _GPT5,
        "gpt-5.4": _OAI_MIRROR.format(
            "morphllm 2026-06, adk-model, OpenRouter and WaveSpeed (922K in + 128K out)"
        )
        + "; prompts over 272K input are billed at $5 in / $22.50 out",
        "gpt-5.4-mini": _OAI_MIRROR.format(
            "Vercel AI Gateway and OpenRouter (limits), morphllm 2026-06 (prices)"
        ),
        "gpt-5.5": _OAI_MIRROR.format("morphllm 2026-06 (prices, '1M' window) and Venice (128K output)")
        + "; the exact window was not in reach, 1,000,000 is the conservative reading of '1M'",
        "o1": _OAI_MIRROR.format("the openai-models crate (prices) and aimodelcalc 2026-05 (window)")
        + "; 100,000 max output not re-checked",
        "o3": _OAI_MIRROR.format("models.dev and deploybase 2026-03"),
        "o3-mini": _OAI_MIRROR.format("deploybase 2026-03 and aimodelcalc 2026-05")
        + "; cache 50% off per adk-model",
        "claude-3": _ANT_LEGACY.format("as in Anthropic's models overview, not re-checked"),
        "claude-3-5-haiku": _ANT_LEGACY.format("confirmed by Claude Code's model catalog (claudetto wiki)"),
        "claude-4": _ANT_LEGACY.format("confirmed by FastGPT's provider table (PR #242)"),
        "claude-sonnet-4-5": _ANT_PAGE.format("sonnet-4-5")
        + "; 1M was a beta header, billed higher over 200K",
        "claude-haiku-4-5": "Anthropic models overview platform.claude.com/docs/en/about-claude/models/overview "
        "and " + _ANT_PRICING + ", " + _READ,
        "claude-opus-4-5": _ANT_PAGE.format("opus-4-5"),
        "claude-opus-4-6": _ANT_PAGE.format("opus-4-6"),
        "claude-sonnet-4-6": _ANT_PAGE.format("sonnet-4-6"),
        "claude-opus-4-7": "AWS Bedrock model card for Claude Opus 4.7 (limits) and "
        + _ANT_PRICING
        + ", "
        + _READ,
        "claude-opus-4-8": _ANT_PAGE.format("opus-4-8"),
        "gemini-2.0": _GEMINI.format("8,192") + "; explicit context caching only, no implicit cache",
        "gemini-2.0-lite": _GEMINI.format("8,192") + "; no context caching",
        "gemini-2.5-pro": _GEMINI.format("65,536")
        + "; implicit caching; prompts over 200K billed at $2.50 in / $15 out",
        "gemini-2.5": _GEMINI.format("65,536") + "; implicit caching, cache reads 90% off",
        "deepseek-v4-flash": "DeepSeek pricing (api-docs.deepseek.com/quick_start/pricing) as recorded by API "
        "Evangelist (2026-05) and deepseek-mcp-server v2.0.0 (2026-06), " + _READ + _DS_RISE,
        "deepseek-v4-pro": "DeepSeek pricing at V4 Pro GA (2026-08-12, apidog) and per API Evangelist, "
        + _READ
        + _DS_RISE,
        "deepseek-chat": "DeepSeek V3.2 non-thinking, per Roo Code's provider table (2025-12-09), "
        + _READ
        + _RETIRED_DS,
        "deepseek-reasoner": "DeepSeek V3.2 thinking mode: prices per Roo Code's provider table (2025-12-09), 64K max "
        "output per DeepSeek's V3.2 docs (not re-checked), " + _READ + _RETIRED_DS,
        "qwen3-max": "Vercel AI Gateway (limits) and Model Studio international pricing as recorded by API Evangelist "
        "(2026-05), " + _READ + "; 0-32K input tier (128-252K: $3 in); cached price not found",
        "qwen-max": "promptfoo's Alibaba provider docs (32K: 30,720 in, 8,192 out), "
        + _READ
        + "; prices not found",
        "qwen2.5-72b": "Qwen2.5-72B-Instruct model card (131,072 context, 8,192 generation), not re-read when "
        "compiling this table on 2026-11-21; open weights: no list price",
        "kimi-k2": "lava.so's Moonshot docs (prices) and chatbase's Kimi K2 guide (262,144 window), "
        + _READ
        + "; retired 2026-05-25; max output bounded by the window",
        "kimi-k2-0711": "OpenRouter's Kimi K2 listing (131K window), "
        + _READ
        + "; Moonshot's price not found",
        "kimi-k2-late": "lava.so's Moonshot docs, "
        + _READ
        + "; retired in 2026; max output bounded by the window",
        "kimi-k2.x": "chatbase's Kimi K2 guide and promptfoo's Moonshot docs (256K), "
        + _READ
        + "; prices not found",
        "moonshot-v1": "promptfoo's Moonshot docs, " + _READ + "; prices not found",
        "llama-3": "Meta Llama model cards (128K context), not re-read when compiling this table on 2026-11-21"
        + _OPEN,
        "llama-4": "Meta's Llama 4 release as summarised on Hugging Face (Scout 10M, Maverick 1M), "
        + _READ
        + _OPEN,
    }
)

_Prices: TypeAlias = "tuple[float | None, float | None, float | None]"
_NO_PRICE: tuple[None, None, None] = (None, None, None)
_GPT4_TURBO_ALIASES = (
    "gpt-4-turbo-preview",
    "gpt-4-0125-preview",
    "gpt-4-1106-preview",
    "gpt-4-1106-vision-preview",
)


def _openai(
    name: str, window: int, out: int, prices: _Prices, src: str, *, max_input_tokens: int | None = None
) -> ModelSpec:
    return _row(
        name, "openai", window, out, prices, src, tokenizer="o200k_base", max_input_tokens=max_input_tokens
    )


def _gpt4(name: str, window: int, out: int, prices: _Prices, *, aliases: tuple[str, ...] = ()) -> ModelSpec:
    return _row(name, "openai", window, out, prices, name, tokenizer="cl100k_base", aliases=aliases)


def _claude(
    name: str, window: int, out: int, inp: float, outp: float, src: str, *, aliases: tuple[str, ...] = ()
) -> ModelSpec:
    # Anthropic's multipliers are uniform across models: 5-minute cache writes
    # cost 1.25x input, cache hits 0.1x (pricing page, "Prompt caching").
    prices = (inp, round(inp * 0.1, 6), outp)
    return _row(
        name, "anthropic", window, out, prices, src, cache_write_price=round(inp * 1.25, 6), aliases=aliases
    )


def _row(
    name: str,
    provider: Provider,
    window: int,
    out: int,
    prices: _Prices,
    src: str,
    *,
    tokenizer: str = "estimate",
    cache_style: CacheStyle | None = None,
    cache_write_price: float | None = None,
    max_input_tokens: int | None = None,
    aliases: tuple[str, ...] = (),
) -> ModelSpec:
    inp, cached, outp = prices
    if cache_style is None:
        # The providers' own behaviour: Anthropic caches at explicit breakpoints;
        # OpenAI caches prefixes automatically wherever it publishes a cached
        # price, DeepSeek and Moonshot always do.
        if provider == "anthropic":
            cache_style = "explicit_breakpoints"
        elif cached is not None or provider in ("deepseek", "moonshot"):
            cache_style = "automatic_prefix"
        else:
            cache_style = "none"
    return ModelSpec(
        name=name,
        provider=provider,
        context_window=window,
        max_output_tokens=out,
        tokenizer=tokenizer,
        input_price=inp,
        cached_input_price=cached,
        output_price=outp,
        cache_write_price=cache_write_price,
        cache_style=cache_style,
        max_input_tokens=max_input_tokens,
        aliases=aliases,
        source=_SOURCES[src],
    )


_BUILTIN_SPECS: tuple[ModelSpec, ...] = (
    # OpenAI, cl100k_base generation.
    _gpt4("gpt-3.5-turbo", 16_385, 4_096, (0.50, None, 1.50)),
    _gpt4("gpt-4", 8_192, 8_192, (30.0, None, 60.0)),
    _gpt4("gpt-4-turbo", 128_000, 4_096, (10.0, None, 30.0), aliases=_GPT4_TURBO_ALIASES),
    # OpenAI, o200k_base generation.
    _openai("gpt-4o", 128_000, 16_384, (2.50, 1.25, 10.0), "gpt-4o"),
    _openai("gpt-4o-mini", 128_000, 16_384, (0.15, 0.075, 0.60), "gpt-4o"),
    _openai("gpt-4.1", 1_047_576, 32_768, (2.00, 0.50, 8.00), "gpt-4.1"),
    _openai("gpt-4.1-mini", 1_047_576, 32_768, (0.40, 0.10, 1.60), "gpt-4.1-small"),
    _openai("gpt-4.1-nano", 1_047_576, 32_768, (0.10, 0.025, 0.40), "gpt-4.1-small"),
    _openai("gpt-5", 400_000, 128_000, (1.25, 0.125, 10.0), "gpt-5", max_input_tokens=272_000),
    _openai("gpt-5-mini", 400_000, 128_000, (0.25, 0.025, 2.00), "gpt-5-page", max_input_tokens=272_000),
    _openai("gpt-5-nano", 400_000, 128_000, (0.05, 0.005, 0.40), "gpt-5-page", max_input_tokens=272_000),
    _openai("gpt-5-pro", 400_000, 128_000, (15.0, None, 120.0), "gpt-5-pro", max_input_tokens=272_000),
    _openai("gpt-5.1", 400_000, 128_000, (1.25, 0.125, 10.0), "gpt-5.1", max_input_tokens=272_000),
    _openai("gpt-5.2", 400_000, 128_000, (1.75, 0.175, 14.0), "gpt-5.2", max_input_tokens=272_000),
    _openai("gpt-5.4", 1_050_000, 128_000, (2.50, 0.25, 15.0), "gpt-5.4", max_input_tokens=922_000),
    _openai("gpt-5.4-mini", 400_000, 128_000, (0.75, 0.075, 4.50), "gpt-5.4-mini"),
    _openai("gpt-5.5", 1_000_000, 128_000, (5.00, 0.50, 30.0), "gpt-5.5"),
    _openai("o1", 200_000, 100_000, (15.0, 7.50, 60.0), "o1"),
    _openai("o3", 200_000, 100_000, (2.00, 0.50, 8.00), "o3"),
    _openai("o3-mini", 200_000, 100_000, (1.10, 0.55, 4.40), "o3-mini"),
    _openai("o4-mini", 200_000, 100_000, (1.10, 0.275, 4.40), "o3"),
    # Anthropic.
    _claude(
        "claude-3-5-sonnet", 200_000, 8_192, 3.0, 15.0, "claude-3", aliases=("claude-3-5-sonnet-latest",)
    ),
    _claude(
        "claude-3-5-haiku",
        200_000,
        8_192,
        0.80,
        4.0,
        "claude-3-5-haiku",
        aliases=("claude-3-5-haiku-latest",),
    ),
    _claude(
        "claude-3-7-sonnet", 200_000, 64_000, 3.0, 15.0, "claude-3", aliases=("claude-3-7-sonnet-latest",)
    ),
    _claude(
        "claude-sonnet-4",
        200_000,
        64_000,
        3.0,
        15.0,
        "claude-4",
        aliases=("claude-sonnet-4-0", "claude-4-sonnet"),
    ),
    _claude(
        "claude-opus-4", 200_000, 32_000, 15.0, 75.0, "claude-4", aliases=("claude-opus-4-0", "claude-4-opus")
    ),
    _claude("claude-opus-4-1", 200_000, 32_000, 15.0, 75.0, "claude-4"),
    _claude("claude-sonnet-4-5", 200_000, 64_000, 3.0, 15.0, "claude-sonnet-4-5"),
    _claude("claude-haiku-4-5", 200_000, 64_000, 1.0, 5.0, "claude-haiku-4-5"),
    _claude("claude-opus-4-5", 200_000, 64_000, 5.0, 25.0, "claude-opus-4-5"),
    _claude("claude-opus-4-6", 1_000_000, 128_000, 5.0, 25.0, "claude-opus-4-6"),
    _claude("claude-sonnet-4-6", 1_000_000, 128_000, 3.0, 15.0, "claude-sonnet-4-6"),
    _claude("claude-opus-4-7", 1_000_000, 128_000, 5.0, 25.0, "claude-opus-4-7"),
    _claude("claude-opus-4-8", 1_000_000, 128_000, 5.0, 25.0, "claude-opus-4-8"),
    # Google Gemini 2.x. Input and output limits are separate; the window is the
    # input limit, so the reserve comes out of it (conservative by 65K at most).
    _row(
        "gemini-2.0-flash", "google", 1_048_576, 8_192, (0.10, 0.025, 0.40), "gemini-2.0", cache_style="none"
    ),
    _row("gemini-2.0-flash-lite", "google", 1_048_576, 8_192, (0.075, None, 0.30), "gemini-2.0-lite"),
    _row("gemini-2.5-pro", "google", 1_048_576, 65_536, (1.25, 0.125, 10.0), "gemini-2.5-pro"),
    _row("gemini-2.5-flash", "google", 1_048_576, 65_536, (0.30, 0.03, 2.50), "gemini-2.5"),
    _row("gemini-2.5-flash-lite", "google", 1_048_576, 65_536, (0.10, 0.01, 0.40), "gemini-2.5"),
    # DeepSeek.
    _row("deepseek-v4-flash", "deepseek", 1_000_000, 384_000, (0.14, 0.0028, 0.28), "deepseek-v4-flash"),
    _row("deepseek-v4-pro", "deepseek", 1_000_000, 384_000, (0.435, 0.003625, 0.87), "deepseek-v4-pro"),
    _row("deepseek-chat", "deepseek", 128_000, 8_192, (0.28, 0.028, 0.42), "deepseek-chat"),
    _row("deepseek-reasoner", "deepseek", 128_000, 64_000, (0.28, 0.028, 0.42), "deepseek-reasoner"),
    # Qwen (Alibaba Cloud Model Studio, international).
    _row(
        "qwen3-max", "qwen", 262_144, 65_536, (1.20, None, 6.00), "qwen3-max", cache_style="automatic_prefix"
    ),
    _row("qwen-max", "qwen", 32_768, 8_192, _NO_PRICE, "qwen-max", max_input_tokens=30_720),
    _row("qwen2.5-72b", "qwen", 131_072, 8_192, _NO_PRICE, "qwen2.5-72b"),
    # Moonshot Kimi.
    _row(
        "kimi-k2",
        "moonshot",
        262_144,
        262_144,
        (0.60, 0.15, 2.50),
        "kimi-k2",
        aliases=("kimi-k2-0905-preview", "kimi-k2-0905"),
    ),
    _row(
        "kimi-k2-0711",
        "moonshot",
        131_072,
        131_072,
        _NO_PRICE,
        "kimi-k2-0711",
        aliases=("kimi-k2-0711-preview",),
    ),
    _row(
        "kimi-k2-turbo",
        "moonshot",
        262_144,
        262_144,
        (1.15, 0.15, 8.00),
        "kimi-k2-late",
        aliases=("kimi-k2-turbo-preview",),
    ),
    _row("kimi-k2-thinking", "moonshot", 262_144, 262_144, (0.60, 0.15, 2.50), "kimi-k2-late"),
    _row("kimi-k2.5", "moonshot", 262_144, 262_144, _NO_PRICE, "kimi-k2.x"),
    _row("kimi-k2.6", "moonshot", 262_144, 262_144, _NO_PRICE, "kimi-k2.x"),
    _row("moonshot-v1-8k", "moonshot", 8_192, 8_192, _NO_PRICE, "moonshot-v1"),
    _row("moonshot-v1-32k", "moonshot", 32_768, 32_768, _NO_PRICE, "moonshot-v1"),
    _row("moonshot-v1-128k", "moonshot", 131_072, 131_072, _NO_PRICE, "moonshot-v1"),
    # Meta Llama (open weights). Windows are the models' native maxima; hosts
    # often serve less, so register your host's figures when they differ.
    *(
        _row(name, "meta", 131_072, 131_072, _NO_PRICE, "llama-3")
        for name in (
            "llama-3.1-8b",
            "llama-3.1-70b",
            "llama-3.1-405b",
            "llama-3.2-1b",
            "llama-3.2-3b",
            "llama-3.3-70b",
        )
    ),
    _row(
        "llama-4-scout",
        "meta",
        10_000_000,
        10_000_000,
        _NO_PRICE,
        "llama-4",
        aliases=("llama-4-scout-17b-16e",),
    ),
    _row(
        "llama-4-maverick",
        "meta",
        1_000_000,
        1_000_000,
        _NO_PRICE,
        "llama-4",
        aliases=("llama-4-maverick-17b-128e",),
    ),
)

BUILTIN_MODELS: Mapping[str, ModelSpec] = MappingProxyType({s.name.lower(): s for s in _BUILTIN_SPECS})
"""The built-in table, keyed by lower-cased name. Read-only: `register` never changes it."""


# --------------------------------------------------------------------------
# The registry: an immutable snapshot swapped whole under a lock. Readers take
# the current snapshot without locking and always see a consistent table.


@dataclass(frozen=True)
class _Snapshot:
    user: Mapping[str, ModelSpec]
    """User registrations by lower-cased name; they shadow built-ins of the same name."""
    index: Mapping[str, ModelSpec]
    """Every lower-cased name and alias -> its spec."""


def _build(user: Mapping[str, ModelSpec]) -> _Snapshot:
    specs = {**BUILTIN_MODELS, **user}
    index: dict[str, ModelSpec] = {}
    # Names first, so an alias can never hide another spec's name.
    for key, spec in specs.items():
        index[key] = spec
    for spec in specs.values():
        for alias in spec.aliases:
            index.setdefault(alias.lower(), spec)
    return _Snapshot(user=MappingProxyType(dict(user)), index=MappingProxyType(index))


_lock = threading.Lock()
_snapshot = _build({})


def register(spec: ModelSpec, *, replace: bool = False) -> None:
    """Add a model (or override a built-in one) for every later `get` in this process.

    Args:
        spec: the model's figures.
        replace: allow replacing a spec with the same name (built-in or yours).
            Defaults to ``False``, so a typo cannot silently change a known model.

    Raises:
        ConfigError: ``spec`` is not a `ModelSpec`; its name is taken and
            ``replace`` is false; or one of its names or aliases already names a
            different model.
    """
    global _snapshot
    if not isinstance(spec, ModelSpec):
        raise ConfigError(f"register() takes a ModelSpec, got {type(spec).__name__}")
    key = spec.name.lower()
    with _lock:
        current = _snapshot
        taken = current.index.get(key)
        if taken is not None and not replace:
            raise ConfigError(
                f"a model named {spec.name!r} is already registered (as {taken.name!r}); "
                "pass replace=True to override it"
            )
        for alias in (spec.name, *spec.aliases):
            owner = current.index.get(alias.lower())
            if owner is not None and owner.name.lower() != key:
                raise ConfigError(
                    f"{alias!r} already names model {owner.name!r}; choose another alias for {spec.name!r} "
                    "or unregister the other model first"
                )
        user = dict(current.user)
        user[key] = spec
        _snapshot = _build(user)


def unregister(name: str) -> None:
    """Remove a model you registered (a built-in it replaced comes back).

    Args:
        name: the model's name or one of its aliases (exact, case-insensitive).

    Raises:
        UnknownModelError: nothing is registered under ``name``.
        ConfigError: ``name`` is a built-in model you have not replaced; built-ins
            cannot be removed, only replaced with `register` (``replace=True``).
    """
    global _snapshot
    key = _as_key(name)
    with _lock:
        current = _snapshot
        spec = current.index.get(key)
        if spec is None:
            raise UnknownModelError(name, _suggest([key], current))
        user_key = spec.name.lower()
        if user_key not in current.user:
            raise ConfigError(
                f"{spec.name!r} is a built-in model and cannot be unregistered; "
                "override it with register(ModelSpec(...), replace=True) instead"
            )
        user = dict(current.user)
        del user[user_key]
        _snapshot = _build(user)


def all_models() -> list[ModelSpec]:
    """Every model `get` can return (built-ins and yours), sorted by name."""
    snapshot = _snapshot
    specs = {**BUILTIN_MODELS, **snapshot.user}
    return sorted(specs.values(), key=lambda s: s.name.lower())


def get(name: str) -> ModelSpec:
    """Return the spec for a model name as you would send it to the provider.

    See the module docstring for how versioned, prefixed and dated names resolve.

    Raises:
        UnknownModelError: no registered model matches; ``suggestions`` lists the
            closest names.
        ConfigError: ``name`` is not a non-empty string.
    """
    key = _as_key(name)
    snapshot = _snapshot
    spec = snapshot.index.get(key)
    if spec is not None:
        return spec
    forms = _normal_forms(key)
    for form in forms:
        spec = snapshot.index.get(form)
        if spec is not None:
            return spec
    best: str | None = None
    for form in forms:
        for family in _prefixes(form):
            if family in snapshot.index and (best is None or len(family) > len(best)):
                best = family
                break
    if best is not None:
        return snapshot.index[best]
    raise UnknownModelError(name, _suggest(forms or [key], snapshot))


def counter_for(model: str | ModelSpec) -> TokenCounter:
    """Return the best token counter for a model: exact where a tokenizer ships, else the estimator.

    OpenAI models get their exact tiktoken encoding (offline); models without a
    public tokenizer get the script-aware estimator, which errs high (the engine
    adds the spec's ``estimate_margin`` on top). For an open-weight model, register
    a spec with ``tokenizer="hf:/path/to/tokenizer.json"`` to count exactly. The
    counter is shared process-wide per tokenizer (see
    `agentcontext.tokens.counter_for_tokenizer`), so its cache serves every engine.

    Args:
        model: a model name (resolved with `get`) or a `ModelSpec`.

    Raises:
        UnknownModelError: ``model`` is a name no registered model matches.
        TokenizerError: the spec's tokenizer data is missing or corrupt.
        MissingDependencyError: an ``hf:`` tokenizer without ``agentcontext[hf]`` installed.
    """
    spec = model if isinstance(model, ModelSpec) else get(model)
    # Imported here so this module (and `get`) works without loading tiktoken.
    from .tokens import counter_for_tokenizer

    return counter_for_tokenizer(spec.tokenizer)


# --------------------------------------------------------------------------
# Name normalisation.

# Routing prefixes that survive the "/" split: Bedrock ("us.anthropic.", "meta."),
# Hugging Face's older "Meta-Llama-3.1-..." repo names.
_VENDOR_PREFIX = re.compile(r"^(?:(?:us|eu|apac|global)\.)?(?:anthropic|meta|openai)\.|^meta-(?=llama)")
# One version marker at the end of a name; applied repeatedly, longest forms first.
_VERSION_SUFFIX = re.compile(
    r"(?:-\d{4}-\d{2}-\d{2}"  # OpenAI dates: -2024-08-06
    r"|[-@]\d{8}"  # Anthropic dates: -20241022, Vertex @20240620
    r"|-v\d+(?:-\d+)?"  # Bedrock / Vertex versions: -v2:0 (":" already turned into "-"), -v1
    r"|-\d{2}-\d{2}"  # Gemini previews: -05-06
    r"|-\d{3,4}"  # snapshots: -0613, -0125, -2507, Gemini -001
    r"|-(?:latest|preview|exp|experimental|beta))$"
)
_LLAMA_COMPACT = re.compile(r"^llama(?=\d)")  # Ollama's "llama3.1" -> "llama-3.1"
_CLAUDE_DOTS = re.compile(r"(?<=\d)\.(?=\d)")  # OpenRouter's "claude-3.5-sonnet"


def _as_key(name: object) -> str:
    if not isinstance(name, str):
        raise ConfigError(f"a model name must be a string, got {type(name).__name__}")
    key = name.strip().lower()
    if not key:
        raise ConfigError("a model name must not be empty")
    return key


def _normal_forms(key: str) -> list[str]:
    """Every spelling worth looking up for ``key``, most literal first."""
    base = key.rsplit("/", 1)[-1]
    base = re.sub(r"\[[^\]]*\]$", "", base)  # Claude Code's "[1m]"
    base = _VENDOR_PREFIX.sub("", base)
    starts = [base.replace(":", "-")]  # "llama3.1:8b" -> "llama3.1-8b"; "-v2:0" -> "-v2-0"
    if ":" in base:
        starts.append(base.split(":", 1)[0])  # "kimi-k2:free" -> "kimi-k2"
    forms: list[str] = []
    for start in starts:
        variants = [start, _LLAMA_COMPACT.sub("llama-", start)]
        if start.startswith("claude"):
            variants.append(_CLAUDE_DOTS.sub("-", start))
        for form in variants:
            while form and form not in forms:
                forms.append(form)
                stripped = _VERSION_SUFFIX.sub("", form)
                if stripped == form:
                    break
                form = stripped
    return forms


def _prefixes(form: str) -> Iterable[str]:
    """``form`` and each of its ``-``-bounded prefixes, longest first."""
    yield form
    end = form.rfind("-")
    while end > 0:
        yield form[:end]
        end = form.rfind("-", 0, end)


def _suggest(forms: list[str], snapshot: _Snapshot) -> tuple[str, ...]:
    """Up to 5 registered names or aliases closest to any of ``forms``, best first."""
    # Report names as registered (their original case); aliases as stored.
    names = {k: (spec.name if k == spec.name.lower() else k) for k, spec in snapshot.index.items()}
    scored: dict[str, float] = {}
    for form in forms:
        matcher = difflib.SequenceMatcher(b=form)
        for key in names:
            matcher.set_seq1(key)
            if matcher.real_quick_ratio() >= 0.6 and matcher.quick_ratio() >= 0.6:
                ratio = matcher.ratio()
                if ratio >= 0.6 and ratio > scored.get(key, 0.0):
                    scored[key] = ratio
    best = sorted(scored, key=lambda k: (-scored[k], k))[:5]
    return tuple(dict.fromkeys(names[k] for k in best))
