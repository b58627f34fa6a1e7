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
import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING

from ._model_spec import ESTIMATE_MARGIN, RESERVE_SHARE, CacheStyle, ModelSpec, Provider
from ._model_table import BUILTIN_MODELS
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
    return _resolve(name)[0]


def _resolve(name: str) -> tuple[ModelSpec, bool]:
    """`get`, and whether the name matched only by its family prefix (step 3 of the module docstring).

    The command line names such a match, which may carry the wrong figures (``gpt-4-1-mini`` is ``gpt-4``).
    """
    key = _as_key(name)
    snapshot = _snapshot
    spec = snapshot.index.get(key)
    if spec is not None:
        return spec, False
    forms = _normal_forms(key)
    for form in forms:
        spec = snapshot.index.get(form)
        if spec is not None:
            return spec, False
    best: str | None = None
    for form in forms:
        for family in _prefixes(form):
            if family in snapshot.index and (best is None or len(family) > len(best)):
                best = family
                break
    if best is not None:
        return snapshot.index[best], True
    raise UnknownModelError(name, _suggest(forms or [key], snapshot))


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
    that starts from the spec's ``estimate_ratio`` and learns upward only, at most to
    twice the count, from the usage it is given: what a `ContextEngine` counts with by
    default. The estimate errs high by design, and a ratio learned on prose need not hold
    for the code or Chinese that comes next, so it never packs more than the estimate
    allows (LangChain clamps its usage scaling to [1, 1.25] for the same reason).

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

    counter = counter_for_tokenizer(spec.tokenizer)
    if not calibrated or spec.tokenizer in ENCODING_NAMES:
        return counter
    return CalibratedCounter(counter, min_correction=1.0, max_correction=2.0, initial=spec.estimate_ratio)


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
