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
   ``models/``, ``meta-llama/``, Bedrock's ``us.anthropic.``, Pydantic AI's
   ``openai:``...), tags (``:free``,
   ``[1m]``) and version suffixes (``-2024-08-06``, ``-20241022``, ``@20240620``,
   ``-0125``, ``-001``, ``-v2:0``, ``-latest``, ``-preview``, ``-exp``...).

Nothing else resolves. A known name plus anything that is not a version suffix
(``o1-pro``, ``gpt-4o-mini-tts``, ``gpt-5-chat-latest``, ``claude-opus-4-9``)
names a different model, whose window may be smaller than that of the model it
starts with (o1-mini's is 128,000, o1's 200,000; GPT-5 Chat's 128,000, GPT-5's
400,000): it raises `agentcontext.exceptions.UnknownModelError` naming the
closest models, and you give its window yourself
(``ContextEngine(model=..., window=..., counter=...)``) or `register` it. A
snapshot whose window differs from its model's has a row of its own, which the
exact match finds first (``gpt-3.5-turbo-0613``: 4,096, not 16,385).

The family names ``claude-3``, ``claude-3.5``, ``gemini-1.5`` and ``gemini-2``
stand for several models: each resolves to a spec named after the family with its
members' smallest window and largest reply, so what fits it fits every member::

    >>> models.get("claude-3").context_window, models.get("gemini-1.5").context_window
    (200000, 1048576)

Unknown names raise `agentcontext.exceptions.UnknownModelError` with the
closest registered names. Your own models go in with `register`; they live in a
layer above the built-in table, which is never modified (`BUILTIN_MODELS` is a
read-only view other modules may hold).
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Literal, cast

from ._model_spec import ESTIMATE_MARGIN, RESERVE_SHARE, CacheStyle, ModelSpec, Provider
from ._model_table import BUILTIN_FAMILIES, BUILTIN_MODELS
from .exceptions import ConfigError, UnknownModelError

if TYPE_CHECKING:
    from .tokens._base import TokenCounter

__all__ = [
    "BUILTIN_MODELS",
    "ESTIMATE_MARGIN",
    "RESERVE_SHARE",
    "CacheStyle",
    "ModelSpec",
    "Provider",
    "all_models",
    "counter_for",
    "get",
    "register",
    "unregister",
]

# --------------------------------------------------------------------------
# The registry: an immutable snapshot swapped whole under a lock. Readers take
# the current snapshot without locking and always see a consistent table.


@dataclass(frozen=True)
class _Snapshot:
    user: Mapping[str, ModelSpec]
    """User registrations by lower-cased name; they shadow built-ins of the same name."""
    index: Mapping[str, ModelSpec]
    """Every lower-cased name and alias -> its spec, family names included."""
    families: Mapping[str, tuple[str, ...]]
    """Lower-cased family name -> the names of the models it stands for."""


def _build(user: Mapping[str, ModelSpec]) -> _Snapshot:
    specs = {**BUILTIN_MODELS, **user}
    index: dict[str, ModelSpec] = {}
    # Names first, so an alias can never hide another spec's name.
    for key, spec in specs.items():
        index[key] = spec
    for spec in specs.values():
        for alias in spec.aliases:
            index.setdefault(alias.lower(), spec)
    # Families last: a model of that name (yours) shadows the family. Built from the specs in
    # force, so replacing a member with register() changes its family too.
    families: dict[str, tuple[str, ...]] = {}
    for family in BUILTIN_FAMILIES:
        key = family.name.lower()
        if key in index:
            continue
        members = [specs[m.lower()] for m in family.members]
        spec = _family_spec(family.name, members, family.aliases)
        index[key] = spec
        for alias in family.aliases:
            index.setdefault(alias.lower(), spec)
        families[key] = tuple(m.name for m in members)
    return _Snapshot(
        user=MappingProxyType(dict(user)),
        index=MappingProxyType(index),
        families=MappingProxyType(families),
    )


def _family_spec(name: str, members: list[ModelSpec], aliases: tuple[str, ...]) -> ModelSpec:
    """One spec for several models: what fits it fits each of them.

    The smallest window (and input cap) and the largest reply, so the budget left for the
    prompt is never more than any member's; the tokenizer, provider and prices where the
    members agree (else the estimator, ``"other"`` and ``None``); the highest estimate ratio.
    """
    window = min(m.context_window for m in members)
    cap = min(m.max_input_tokens or m.context_window for m in members)

    def common(values: list[object]) -> object:
        return values[0] if all(v == values[0] for v in values) else None

    tokenizer = common([m.tokenizer for m in members])
    spec = ModelSpec(
        name=name,
        provider=cast("Provider", common([m.provider for m in members]) or "other"),
        context_window=window,
        max_output_tokens=min(window, max(m.max_output_tokens for m in members)),
        tokenizer=tokenizer if isinstance(tokenizer, str) else "estimate",
        input_price=cast("float | None", common([m.input_price for m in members])),
        cached_input_price=cast("float | None", common([m.cached_input_price for m in members])),
        output_price=cast("float | None", common([m.output_price for m in members])),
        cache_write_price=cast("float | None", common([m.cache_write_price for m in members])),
        cache_style=cast("CacheStyle", common([m.cache_style for m in members]) or "none"),
        max_input_tokens=cap if cap < window else None,
        aliases=aliases,
        source=f"the family {name!r}: {', '.join(m.name for m in members)}; the smallest window and the "
        "largest reply of these, prices only where they agree (see each model's source)",
        estimate_ratio=max(m.estimate_ratio for m in members),
    )
    margin = max(m.estimate_margin for m in members)
    return spec if spec.estimate_margin >= margin else dataclasses.replace(spec, estimate_margin=margin)


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
    """Every model (built-ins and yours), sorted by name; family names such as ``claude-3`` are not models."""
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
    return _resolve(name)[0]


def _resolve(name: str) -> tuple[ModelSpec, tuple[str, ...]]:
    """`get`, and the models the name stands for when it is a family name (else ``()``).

    The command line says so when a name is a family's, whose figures are its members' smallest.
    """
    key = _as_key(name)
    snapshot = _snapshot
    forms = _normal_forms(key)
    for form in (key, *forms):
        spec = snapshot.index.get(form)
        if spec is not None:
            return spec, snapshot.families.get(spec.name.lower(), ())
    # A known name plus something that is not a version suffix names another model: say which one
    # it starts with, never take its figures (o1-mini's window is not o1's).
    base: str | None = None
    for form in forms:
        for prefix in _prefixes(form):
            if prefix in snapshot.index and (base is None or len(prefix) > len(base)):
                base = prefix
                break
    suggestions = _suggest(forms or [key], snapshot)
    if base is None:
        raise UnknownModelError(name, suggestions)
    spec = snapshot.index[base]
    siblings = sorted(
        s.name
        for k, s in snapshot.index.items()
        if k == s.name.lower() and k.startswith(spec.name.lower() + "-")
    )
    closest = tuple(dict.fromkeys((spec.name, *suggestions, *siblings)))[:5]
    raise UnknownModelError(name, closest, variant_of=spec.name)


def counter_for(model: str | ModelSpec, *, calibrated: bool = False) -> TokenCounter:
    """Return the best token counter for a model: exact where a tokenizer ships, else the estimator.

    OpenAI models get their exact tiktoken encoding (offline); models without a
    public tokenizer get the script-aware estimator, which errs high (the engine
    adds the spec's ``estimate_margin`` on top). For an open-weight model, register
    a spec with ``tokenizer="hf:/path/to/tokenizer.json"`` to count exactly. The
    counter is shared process-wide per tokenizer (see
    `agentcontext.tokens.counter_for_tokenizer`), so its cache serves every engine.

    With ``calibrated=True`` a counter that is not exact (the estimator, or a tokenizer
    file without the provider's chat template) comes wrapped in a new `CalibratedCounter`
    that starts from the spec's ``estimate_ratio`` and learns from the usage it is given,
    up to twice the count, down by at most the spec's ``estimate_margin`` (never below the
    count itself): what a `ContextEngine` counts with by default. The estimate errs high by
    design, and a ratio learned on prose need not hold for the code or Chinese that comes
    next, so it never packs more than the estimate allows (LangChain clamps its usage
    scaling to [1, 1.25] for the same reason); and images and files, billed by a rule in
    the provider's own tokens, are counted divided by the ratio, so they come out at their
    rule, and no more than the margin below it.

    Args:
        model: a model name (resolved with `get`) or a `ModelSpec`.
        calibrated: wrap an inexact counter in its own `CalibratedCounter` (default False: the shared counter).

    Raises:
        UnknownModelError: ``model`` is a name no registered model matches.
        TokenizerError: the spec's tokenizer data is missing or corrupt.
        MissingDependencyError: an ``hf:`` tokenizer without ``agentcontext[hf]`` installed.
    """
    spec = model if isinstance(model, ModelSpec) else get(model)
    # Imported here so this module (and `get`) works without loading tiktoken.
    from .tokens import ENCODING_NAMES, CalibratedCounter, counter_for_tokenizer

    # Images and files are billed by the provider's own rule (a Claude image by its pixels, a PDF page
    # on Gemini at a fifth of its price on Claude); the framing stays the tokenizer's own.
    # A calibrated counter multiplies every count by its correction, which starts at the spec's
    # estimate_ratio: what those rules bill is counted divided by that ratio, so it comes out as billed.
    counter = counter_for_tokenizer(spec.tokenizer)
    calibrate = calibrated and spec.tokenizer not in ENCODING_NAMES
    fmt = counter.chat_format  # the tokenizer's own framing (ChatML for a tokenizer.json)
    billing = _BILLING.get(spec.provider)
    if billing is not None:
        fmt = dataclasses.replace(fmt, image_provider=billing)
    ratio = spec.estimate_ratio
    if calibrate and ratio != 1.0:
        fmt = dataclasses.replace(fmt, media_ratio=ratio)
    if fmt != counter.chat_format:
        counter = counter_for_tokenizer(spec.tokenizer, chat_format=fmt)
    if not calibrate:
        return counter
    # Learned down at most by the safety margin: a rule's tokens, divided by the ratio, then never count
    # more than the margin below the rule (at 1.0 they counted 17% below at 1.2, 37% at 1.6).
    floor = max(1.0, ratio * (1 - spec.estimate_margin))
    return CalibratedCounter(counter, min_correction=floor, max_correction=max(2.0, ratio), initial=ratio)


_BILLING: dict[str, Literal["anthropic", "gemini"]] = {"anthropic": "anthropic", "google": "gemini"}
"""Providers whose images and files are billed by a rule of their own (`tokens.image_tokens`, `tokens.file_tokens`)."""


# --------------------------------------------------------------------------
# Name normalisation.

# Routing prefixes that survive the "/" split: Bedrock ("us.anthropic.", "meta."),
# Hugging Face's older "Meta-Llama-3.1-..." repo names.
_VENDOR_PREFIX = re.compile(r"^(?:(?:us|eu|apac|global)\.)?(?:anthropic|meta|openai)\.|^meta-(?=llama)")
# Provider prefixes written with a colon: Pydantic AI's and LangChain's "openai:gpt-4o". A fixed list, as a
# colon also starts tags ("kimi-k2:free", Ollama's "llama3.1:8b"), which come after the name.
_PROVIDER_COLON = re.compile(
    r"^(?:openai(?:-chat|-responses)?|anthropic|google-gla|google-vertex|google|gemini|vertex_ai|bedrock|azure"
    r"|groq|mistral|deepseek|openrouter|ollama|together|fireworks|moonshotai|huggingface|litellm):(?=.)"
)
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
    base = _PROVIDER_COLON.sub("", key.rsplit("/", 1)[-1])
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
    """Each ``-``-bounded prefix of ``form`` (not ``form`` itself), longest first."""
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
