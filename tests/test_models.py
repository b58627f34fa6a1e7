"""The model registry: resolution of real model names, registration, validation, the built-in table."""

from __future__ import annotations

import dataclasses
import datetime
import doctest
import math
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from _sizes import examples
from agentcontext import models
from agentcontext.exceptions import ConfigError, UnknownModelError
from agentcontext.models import ModelSpec
from agentcontext.tokens import CHATML, CalibratedCounter

# --------------------------------------------------------------------------
# Resolution of names as agents really send them.

RESOLVES = [
    # OpenAI: dated snapshots, numbered snapshots, preview aliases, prefixes.
    ("gpt-4o-2024-08-06", "gpt-4o"),
    ("gpt-4o-2024-05-13", "gpt-4o"),
    ("gpt-4o-mini-2024-07-18", "gpt-4o-mini"),
    ("gpt-4o-mini-search-preview-2025-03-11", "gpt-4o-mini"),
    ("gpt-4.1-2025-04-14", "gpt-4.1"),
    ("gpt-4.1-mini-2025-04-14", "gpt-4.1-mini"),
    ("gpt-4.1-nano-2025-04-14", "gpt-4.1-nano"),
    ("gpt-4-0613", "gpt-4"),
    ("gpt-4-turbo-2024-04-09", "gpt-4-turbo"),
    ("gpt-4-1106-preview", "gpt-4-turbo"),
    ("gpt-4-0125-preview", "gpt-4-turbo"),
    ("gpt-3.5-turbo-0125", "gpt-3.5-turbo"),
    ("gpt-3.5-turbo-0613", "gpt-3.5-turbo-0613"),  # 4,096, not gpt-3.5-turbo's 16,385
    ("gpt-3.5-turbo-0301", "gpt-3.5-turbo-0613"),
    ("gpt-4-32k", "gpt-4-32k"),
    ("gpt-4-32k-0613", "gpt-4-32k"),
    ("openai/gpt-4-32k-0314", "gpt-4-32k"),
    ("gpt-5-2025-08-07", "gpt-5"),
    ("gpt-5-mini-2025-08-07", "gpt-5-mini"),
    ("gpt-5-nano-2025-08-07", "gpt-5-nano"),
    ("gpt-5-codex", "gpt-5"),
    ("gpt-5.2-2025-12-11", "gpt-5.2"),
    ("gpt-5.4-mini", "gpt-5.4-mini"),
    ("o1-2024-12-17", "o1"),
    ("o1-mini", "o1-mini"),
    ("o1-mini-2024-09-12", "o1-mini"),
    ("openrouter/openai/o1-mini", "o1-mini"),
    ("o1-preview-2024-09-12", "o1-preview"),
    ("o3-2025-04-16", "o3"),
    ("o3-mini-2025-01-31", "o3-mini"),
    ("o4-mini-2025-04-16", "o4-mini"),
    ("o4-mini-high", "o4-mini"),
    ("openai/gpt-4o", "gpt-4o"),
    ("openrouter/openai/gpt-4.1-mini", "gpt-4.1-mini"),
    ("gpt-4o-search-preview-2025-03-11", "gpt-4o"),
    ("gpt-4o-audio-preview-2024-12-17", "gpt-4o"),
    ("gpt-4o-mini-audio-preview", "gpt-4o-mini"),
    ("gpt-3.5-turbo-16k", "gpt-3.5-turbo"),
    ("o3-pro", "o3-pro"),
    ("o3-pro-2025-06-10", "o3-pro"),
    # Pydantic AI's and LangChain's "provider:model".
    ("openai:gpt-4o", "gpt-4o"),
    ("openai-responses:o1-mini", "o1-mini"),
    ("anthropic:claude-sonnet-4-5", "claude-sonnet-4-5"),
    ("google-gla:gemini-2.5-flash", "gemini-2.5-flash"),
    # Anthropic: API dates, -latest aliases, Vertex @dates, Bedrock ids, OpenRouter dots.
    ("claude-3-opus-20240229", "claude-3-opus"),
    ("claude-3-opus-latest", "claude-3-opus"),
    ("claude-3-sonnet-20240229", "claude-3-sonnet"),
    ("claude-3-haiku-20240307", "claude-3-haiku"),
    ("anthropic.claude-3-haiku-20240307-v1:0", "claude-3-haiku"),
    ("claude-3-opus@20240229", "claude-3-opus"),
    ("anthropic/claude-3-haiku", "claude-3-haiku"),
    ("claude-3-5-sonnet-20241022", "claude-3-5-sonnet"),
    ("claude-3-5-sonnet-20240620", "claude-3-5-sonnet"),
    ("claude-3-5-sonnet-latest", "claude-3-5-sonnet"),
    ("claude-3-5-haiku-20241022", "claude-3-5-haiku"),
    ("claude-3-7-sonnet-20250219", "claude-3-7-sonnet"),
    ("claude-3-7-sonnet-latest", "claude-3-7-sonnet"),
    ("claude-sonnet-4-20250514", "claude-sonnet-4"),
    ("claude-sonnet-4-0", "claude-sonnet-4"),
    ("claude-opus-4-20250514", "claude-opus-4"),
    ("claude-opus-4-1-20250805", "claude-opus-4-1"),
    ("claude-sonnet-4-5-20250929", "claude-sonnet-4-5"),
    ("claude-haiku-4-5-20251001", "claude-haiku-4-5"),
    ("claude-opus-4-5-20251101", "claude-opus-4-5"),
    ("claude-opus-4-6", "claude-opus-4-6"),
    ("claude-sonnet-4-6[1m]", "claude-sonnet-4-6"),
    ("claude-opus-4-8", "claude-opus-4-8"),
    ("claude-3-5-sonnet-v2@20241022", "claude-3-5-sonnet"),
    ("claude-sonnet-4-5@20250929", "claude-sonnet-4-5"),
    ("anthropic.claude-3-5-sonnet-20241022-v2:0", "claude-3-5-sonnet"),
    ("us.anthropic.claude-sonnet-4-5-20250929-v1:0", "claude-sonnet-4-5"),
    ("anthropic/claude-3.5-sonnet", "claude-3-5-sonnet"),
    ("anthropic/claude-3.7-sonnet:thinking", "claude-3-7-sonnet"),
    ("openrouter/anthropic/claude-sonnet-4.5", "claude-sonnet-4-5"),
    ("anthropic/claude-opus-4.1", "claude-opus-4-1"),
    # Google.
    ("gemini-1.5-pro", "gemini-1.5-pro"),
    ("gemini-1.5-pro-002", "gemini-1.5-pro"),
    ("gemini-1.5-flash-latest", "gemini-1.5-flash"),
    ("gemini-1.5-flash-8b-001", "gemini-1.5-flash-8b"),
    ("google/gemini-pro-1.5", "gemini-1.5-pro"),
    ("gemini-2.0-flash-001", "gemini-2.0-flash"),
    ("gemini-2.0-flash-exp", "gemini-2.0-flash"),
    ("gemini-2.0-flash-lite-001", "gemini-2.0-flash-lite"),
    ("gemini-2.5-pro-preview-05-06", "gemini-2.5-pro"),
    ("gemini-2.5-flash-preview-04-17", "gemini-2.5-flash"),
    ("gemini-2.5-flash-lite-preview-06-17", "gemini-2.5-flash-lite"),
    ("models/gemini-2.5-pro", "gemini-2.5-pro"),
    ("google/gemini-2.5-flash", "gemini-2.5-flash"),
    # DeepSeek.
    ("deepseek-chat", "deepseek-chat"),
    ("deepseek/deepseek-reasoner", "deepseek-reasoner"),
    ("deepseek-v4-pro-0813", "deepseek-v4-pro"),
    ("deepseek-v4-flash", "deepseek-v4-flash"),
    # Qwen.
    ("qwen3-max-2025-09-23", "qwen3-max"),
    ("qwen3-max-preview", "qwen3-max"),
    ("qwen-max-latest", "qwen-max"),
    ("qwen-max-2025-01-25", "qwen-max"),
    ("Qwen/Qwen2.5-72B-Instruct", "qwen2.5-72b"),
    ("qwen2.5-72b-instruct", "qwen2.5-72b"),
    # Moonshot.
    ("kimi-k2-0905-preview", "kimi-k2"),
    ("kimi-k2-0711-preview", "kimi-k2-0711"),
    ("kimi-k2-turbo-preview", "kimi-k2-turbo"),
    ("kimi-k2-instruct", "kimi-k2-0711"),  # the first open release, 128K; 0905 raised it to 256K
    ("moonshotai/Kimi-K2-Instruct", "kimi-k2-0711"),
    ("moonshotai/Kimi-K2-Instruct-0905", "kimi-k2"),
    ("moonshotai/kimi-k2:free", "kimi-k2"),
    ("kimi-k2-thinking", "kimi-k2-thinking"),
    ("moonshot-v1-128k", "moonshot-v1-128k"),
    # Meta.
    ("meta-llama/Llama-3.3-70B-Instruct", "llama-3.3-70b"),
    ("meta-llama/Meta-Llama-3.1-8B-Instruct", "llama-3.1-8b"),
    ("meta-llama/llama-3.1-405b-instruct", "llama-3.1-405b"),
    ("llama3.1:8b", "llama-3.1-8b"),
    ("llama3.3:70b", "llama-3.3-70b"),
    ("meta-llama/Llama-4-Scout-17B-16E-Instruct", "llama-4-scout"),
    ("meta-llama/Llama-4-Maverick-17B-128E-Instruct-FP8", "llama-4-maverick"),
]


@pytest.mark.parametrize(("name", "expected"), RESOLVES)
def test_real_model_names_resolve_to_their_family(name: str, expected: str) -> None:
    assert models.get(name).name == expected


@pytest.mark.parametrize(
    "name", ["GPT-4o", "gpt-4O-2024-08-06", "Claude-3-5-Sonnet-20241022", "  gemini-2.5-PRO  "]
)
def test_lookup_ignores_case_and_surrounding_spaces(name: str) -> None:
    assert models.get(name) is models.get(name.strip().lower())


def test_longest_family_wins_and_families_match_only_on_a_dash_boundary() -> None:
    # gpt-4o-mini, not gpt-4o; claude-opus-4-1, not claude-opus-4.
    assert models.get("gpt-4o-mini-2024-07-18").context_window == 128_000
    assert models.get("gpt-4o-mini-2024-07-18").input_price == 0.15
    assert models.get("claude-opus-4-1-20250805").name == "claude-opus-4-1"
    assert models.get("claude-opus-4-5-20251101").input_price == 5.0  # not Opus 4's $15
    # "gpt-4o" starts with "gpt-4" but not on a boundary: it must never fall back to GPT-4's 8K window.
    assert models.get("gpt-4o").context_window == 128_000
    for name in ("gpt-4x", "gpt-40", "o10", "claude-opus-40"):
        with pytest.raises(UnknownModelError):
            models.get(name)


def test_versions_only_strip_from_the_end() -> None:
    # A date inside a name is not a version suffix: what follows it makes another model.
    with pytest.raises(UnknownModelError) as info:
        models.get("gpt-4o-2024-08-06-ft-custom")
    assert info.value.variant_of == "gpt-4o"


# --------------------------------------------------------------------------
# A known name plus a variant is another model, never the one it starts with.


def test_o1_mini_has_its_own_window_not_o1s() -> None:
    # o1-mini resolved to o1 by prefix: a 200K window and a 150,000 budget for a 128K model.
    from agentcontext import ContextEngine

    mini = models.get("o1-mini")
    assert (mini.name, mini.context_window, mini.max_output_tokens) == ("o1-mini", 128_000, 65_536)
    assert models.get("o1-mini-2024-09-12") is mini
    engine = ContextEngine(model="o1-mini")
    assert engine.window == 128_000 and engine.budget + engine.reserve <= 128_000
    assert models.get("gpt-4-32k").context_window == 32_768  # not gpt-4's 8,192


@pytest.mark.parametrize(
    ("name", "base"),
    [
        ("o1-foo", "o1"),
        ("o1-foo-2024-12-17", "o1"),
        ("gpt-4o-mini-bigvariant", "gpt-4o-mini"),
        ("openai/gpt-4o-mini-tts", "gpt-4o-mini"),
        ("gpt-4-1-mini", "gpt-4"),
        ("gpt-4-vision-preview", "gpt-4"),  # 128K, not 8K
        ("gpt-3.5-turbo-instruct", "gpt-3.5-turbo"),  # 4K, not 16K
        ("gpt-5-chat-latest", "gpt-5"),  # 128K, not 400K
        ("gpt-5.1-chat-latest", "gpt-5.1"),
        ("o3-mini-lite", "o3-mini"),
        ("claude-opus-4-9", "claude-opus-4"),
        ("claude-3-haiku-turbo", "claude-3-haiku"),
        ("gemini-2.0-flash-thinking-exp-01-21", "gemini-2.0-flash"),
        ("gemini-1.5-pro-vision", "gemini-1.5-pro"),
        ("gemini-2-flash", "gemini-2"),
        ("llama-3.1-8b-nano", "llama-3.1-8b"),
    ],
)
def test_a_known_name_plus_a_variant_is_refused_with_the_closest_models(name: str, base: str) -> None:
    with pytest.raises(UnknownModelError) as info:
        models.get(name)
    err = info.value
    assert (err.name, err.variant_of, err.suggestions[0]) == (name, base, base)
    text = str(err)
    assert f"It starts with {base!r}" in text and "not a date or version tag" in text
    assert "window= and counter=" in text and f"counter_for({base!r})" in text


def test_a_refused_variant_names_its_siblings_and_works_with_a_window() -> None:
    from agentcontext import ContextEngine

    with pytest.raises(UnknownModelError) as info:
        models.get("o1-foo")
    assert {"o1", "o1-mini", "o1-preview"} <= set(info.value.suggestions)
    with pytest.raises(UnknownModelError, match="window= and counter="):
        ContextEngine(model="o1-foo")
    engine = ContextEngine(model="o1-foo", window=100_000, counter=models.counter_for("o1"))
    assert engine.window == 100_000 and engine.model is None


_VERSION_WORDS = {"latest", "preview", "exp", "experimental", "beta"}


@settings(max_examples=examples(60), deadline=None)
@given(
    spec=st.sampled_from(sorted(models.BUILTIN_MODELS.values(), key=lambda s: s.name)),
    word=st.from_regex(r"[a-z]{2,9}", fullmatch=True),
)
def test_any_builtin_plus_a_word_is_its_own_registered_model_or_refused(spec: ModelSpec, word: str) -> None:
    name = f"{spec.name}-{word}"
    known = {k.lower() for s in models.all_models() for k in (s.name, *s.aliases)}
    if word in _VERSION_WORDS:
        assert models.get(name) is spec
    elif name in known:
        assert name in {k.lower() for k in (models.get(name).name, *models.get(name).aliases)}
    else:
        with pytest.raises(UnknownModelError) as info:
            models.get(name)
        assert info.value.variant_of is not None and name.startswith(info.value.variant_of.lower() + "-")


# --------------------------------------------------------------------------
# Family names stand for several models, at their smallest window.


@pytest.mark.parametrize(
    ("name", "family", "window", "out"),
    [
        ("claude-3", "claude-3", 200_000, 4_096),
        ("claude-3.5", "claude-3.5", 200_000, 8_192),
        ("claude-3-5", "claude-3.5", 200_000, 8_192),
        ("anthropic/claude-3.5", "claude-3.5", 200_000, 8_192),
        ("gemini-1.5", "gemini-1.5", 1_048_576, 8_192),  # Flash's, not Pro's 2,097,152
        ("gemini-2", "gemini-2", 1_048_576, 65_536),  # 2.5's longest reply is reserved
    ],
)
def test_family_names_resolve_to_their_members_smallest_window(
    name: str, family: str, window: int, out: int
) -> None:
    spec = models.get(name)
    assert (spec.name, spec.context_window, spec.max_output_tokens) == (family, window, out)
    _, members = models._resolve(name)
    assert members and all(models.get(m).context_window >= spec.context_window for m in members)
    assert spec.tokenizer == "estimate" and spec.source.startswith(f"the family {family!r}")
    assert family not in {s.name for s in models.all_models()}  # a family is not a model


def test_a_family_follows_its_members_and_yields_to_a_model_of_its_name(
    registered: Callable[..., None],
) -> None:
    claude3 = models.get("claude-3")
    assert (claude3.provider, claude3.input_price, claude3.estimate_ratio) == ("anthropic", None, 1.2)
    flash = models.get("gemini-1.5-flash")
    registered(dataclasses.replace(flash, context_window=500_000, source="test"), replace=True)
    assert models.get("gemini-1.5").context_window == 500_000
    mine = _spec("claude-3", context_window=100_000)
    with pytest.raises(ConfigError, match="replace=True"):
        models.register(mine)
    registered(mine, replace=True)
    assert models.get("claude-3") is mine and models._resolve("claude-3")[1] == ()


# --------------------------------------------------------------------------
# Unknown names.


def test_unknown_name_error_names_the_model_and_suggests_close_matches() -> None:
    with pytest.raises(UnknownModelError) as info:
        models.get("claude-sonet-4-5")
    err = info.value
    assert err.name == "claude-sonet-4-5"
    assert "claude-sonnet-4-5" in err.suggestions
    text = str(err)
    assert "'claude-sonet-4-5'" in text
    assert "'claude-sonnet-4-5'" in text
    assert "register" in text
    # Usable with the builtin exception types a caller would reach for.
    assert isinstance(err, LookupError)
    assert isinstance(err, ValueError)


def test_unknown_versioned_name_suggests_from_its_family_not_its_date() -> None:
    with pytest.raises(UnknownModelError) as info:
        models.get("openai/gtp-4o-mini-2024-07-18")
    assert info.value.suggestions[0] == "gpt-4o-mini"


def test_nothing_close_gives_no_suggestions() -> None:
    with pytest.raises(UnknownModelError) as info:
        models.get("zzzzzzzzzzzz")
    assert info.value.suggestions == ()
    assert "Did you mean" not in str(info.value)


def test_an_engine_for_a_model_of_your_own_takes_its_name_with_its_window_and_counter() -> None:
    # The error told the user to "pass window= (and a counter)", and refused them when they did.
    from agentcontext import ContextEngine, ScriptEstimator

    engine = ContextEngine(model="my-llama", window=8_000, reserve=1_000, counter=ScriptEstimator())
    assert engine.budget == 7_000 and engine.model is None
    with pytest.raises(UnknownModelError, match="window= and counter="):
        ContextEngine(model="my-llama")
    with pytest.raises(ConfigError, match="'my-llama' is not in the registry: give its counter="):
        ContextEngine(model="my-llama", window=8_000)


@pytest.mark.parametrize("bad", ["", "   ", None, 42, b"gpt-4o"])
def test_get_rejects_non_names_with_a_config_error(bad: object) -> None:
    with pytest.raises(ConfigError, match="model name"):
        models.get(bad)  # type: ignore[arg-type]


# --------------------------------------------------------------------------
# register / replace / unregister.


def _spec(name: str = "acme-chat", **overrides: object) -> ModelSpec:
    fields: dict[str, object] = {
        "name": name,
        "provider": "other",
        "context_window": 32_000,
        "max_output_tokens": 4_000,
        "tokenizer": "estimate",
        "source": "test fixture, 2026-11-21",
    }
    fields.update(overrides)
    return ModelSpec(**fields)  # type: ignore[arg-type]


@pytest.fixture
def registered() -> Iterator[Callable[..., None]]:
    """``registered(spec, replace=...)`` registers and unregisters at teardown, so tests never leak."""
    names: list[str] = []

    def do(spec: ModelSpec, *, replace: bool = False) -> None:
        models.register(spec, replace=replace)
        names.append(spec.name)

    yield do
    for name in reversed(names):
        try:
            models.unregister(name)
        except (UnknownModelError, ConfigError):
            pass  # already unregistered by the test itself


def test_register_makes_a_model_and_its_aliases_resolvable(registered: Callable[..., None]) -> None:
    spec = _spec(aliases=("acme-chat-v2", "Acme-Latest"))
    registered(spec)
    assert models.get("acme-chat") is spec
    assert models.get("ACME-CHAT") is spec
    assert models.get("acme-latest") is spec
    assert models.get("acme/acme-chat-2026-01-01") is spec  # versioned and prefixed names too
    assert spec in models.all_models()


def test_register_refuses_a_taken_name_unless_replace(registered: Callable[..., None]) -> None:
    registered(_spec())
    with pytest.raises(ConfigError, match="replace=True"):
        models.register(_spec(context_window=64_000))
    registered(_spec(context_window=64_000), replace=True)
    assert models.get("acme-chat").context_window == 64_000


def test_replacing_a_builtin_shadows_it_and_unregister_restores_it(registered: Callable[..., None]) -> None:
    builtin = models.get("gpt-4o")
    with pytest.raises(ConfigError, match="already registered"):
        models.register(_spec("gpt-4o"))
    mine = _spec("gpt-4o", provider="openai", tokenizer="o200k_base", context_window=64_000)
    registered(mine, replace=True)
    assert models.get("gpt-4o-2024-08-06") is mine
    # The built-in table other modules hold is untouched.
    assert models.BUILTIN_MODELS["gpt-4o"] is builtin
    assert models.all_models().count(mine) == 1
    assert builtin not in models.all_models()
    models.unregister("gpt-4o")
    assert models.get("gpt-4o") is builtin


def test_an_alias_cannot_take_another_models_name(registered: Callable[..., None]) -> None:
    with pytest.raises(ConfigError, match="already names model 'gpt-4o'"):
        models.register(_spec(aliases=("gpt-4o",)))
    with pytest.raises(ConfigError, match="already names model 'gpt-4-turbo'"):
        models.register(_spec(aliases=("GPT-4-1106-preview",)))
    registered(_spec("acme-a", aliases=("acme",)))
    with pytest.raises(ConfigError, match="already names model 'acme-a'"):
        models.register(_spec("acme", aliases=()), replace=True)
    # Nothing was half-registered: "acme" still names acme-a, and no "acme-chat" exists.
    assert models.get("acme").name == "acme-a"
    assert "acme-chat" not in {s.name for s in models.all_models()}


def test_unregister_by_alias_and_its_errors(registered: Callable[..., None]) -> None:
    registered(_spec(aliases=("acme-alias",)))
    models.unregister("ACME-ALIAS")
    with pytest.raises(UnknownModelError):
        models.get("acme-chat")
    with pytest.raises(UnknownModelError):
        models.unregister("acme-chat")
    with pytest.raises(ConfigError, match="built-in"):
        models.unregister("claude-opus-4-8")
    assert models.get("claude-opus-4-8").name == "claude-opus-4-8"


def test_register_rejects_what_is_not_a_spec() -> None:
    with pytest.raises(ConfigError, match="ModelSpec"):
        models.register({"name": "x"})  # type: ignore[arg-type]


def test_all_models_is_sorted_and_includes_every_builtin() -> None:
    names = [s.name for s in models.all_models()]
    assert names == sorted(names, key=str.lower)
    assert set(models.BUILTIN_MODELS) <= {n.lower() for n in names}


def test_the_builtin_table_is_read_only() -> None:
    with pytest.raises(TypeError):
        models.BUILTIN_MODELS["x"] = _spec("x")  # type: ignore[index]


def test_concurrent_registration_loses_nothing() -> None:
    threads, per_thread = 8, 25
    barrier = threading.Barrier(threads)
    errors: list[BaseException] = []

    def work(t: int) -> None:
        barrier.wait()
        try:
            for i in range(per_thread):
                models.register(_spec(f"race-{t}-{i}", aliases=(f"race-alias-{t}-{i}",)))
                # Readers running alongside always see a consistent table.
                assert models.get("gpt-4o").name == "gpt-4o"
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    try:
        assert errors == []
        for t in range(threads):
            for i in range(per_thread):
                assert models.get(f"race-alias-{t}-{i}").name == f"race-{t}-{i}"
    finally:
        for t in range(threads):
            for i in range(per_thread):
                models.unregister(f"race-{t}-{i}")
    assert not [s for s in models.all_models() if s.name.startswith("race-")]


# --------------------------------------------------------------------------
# ModelSpec validation.


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"name": ""}, "name"),
        ({"name": " padded "}, "name"),
        ({"provider": "openia"}, "provider 'openia'"),
        ({"context_window": 0}, "context_window must be a positive int"),
        ({"context_window": -5}, "context_window"),
        ({"context_window": 1.5}, "context_window"),
        ({"context_window": True}, "context_window"),
        ({"max_output_tokens": 0}, "max_output_tokens"),
        ({"max_output_tokens": 64_000}, "exceeds context_window"),
        ({"max_input_tokens": 40_000}, "max_input_tokens"),
        ({"tokenizer": "gpt2"}, "tokenizer 'gpt2'"),
        ({"tokenizer": "hf:"}, "tokenizer"),
        ({"input_price": -1.0}, "input_price"),
        ({"output_price": math.inf}, "output_price"),
        ({"cached_input_price": math.nan}, "cached_input_price"),
        ({"cache_write_price": "1.0"}, "cache_write_price"),
        ({"input_price": 1.0, "cached_input_price": 2.0}, "a cache hit never costs more"),
        ({"cache_style": "sometimes"}, "cache_style"),
        ({"aliases": "acme"}, "aliases"),
        ({"aliases": ("ok", "")}, "alias"),
        ({"source": None}, "source"),
        ({"estimate_margin": 0.5}, "estimate_margin"),
        ({"estimate_margin": -0.1}, "estimate_margin"),
    ],
)
def test_invalid_specs_raise_config_errors_naming_the_field(
    overrides: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        _spec(**overrides)


def test_spec_errors_name_the_model() -> None:
    with pytest.raises(ConfigError, match="ModelSpec 'acme-chat'"):
        _spec(context_window=0)


def test_spec_defaults_and_coercions() -> None:
    spec = _spec(aliases=["a", "b"])
    assert spec.aliases == ("a", "b")
    assert spec.estimate_margin == models.ESTIMATE_MARGIN
    assert _spec(tokenizer="o200k_base").estimate_margin == 0.0
    assert _spec(tokenizer="hf:Qwen/Qwen2.5-72B-Instruct").estimate_margin == 0.0
    assert _spec(estimate_margin=0.2).estimate_margin == 0.2
    assert _spec(estimate_margin=0).estimate_margin == 0.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.context_window = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    ("kwargs", "reserve"),
    [
        ({"context_window": 32_000, "max_output_tokens": 4_000}, 4_000),  # the output cap
        ({"context_window": 200_000, "max_output_tokens": 128_000}, 50_000),  # 25% of the window
        ({"context_window": 8_192, "max_output_tokens": 8_192}, 2_048),
        # A separate input cap raises the reserve so a prompt within budget is never refused.
        ({"context_window": 400_000, "max_output_tokens": 128_000, "max_input_tokens": 272_000}, 128_000),
    ],
)
def test_default_reserve(kwargs: dict[str, object], reserve: int) -> None:
    assert _spec(**kwargs).default_reserve == reserve


def test_default_reserve_of_real_models() -> None:
    assert models.get("gpt-4o").default_reserve == 16_384
    assert models.get("gpt-5").default_reserve == 128_000  # 400K window, 272K input cap
    assert models.get("gpt-5.4").default_reserve == 128_000
    assert models.get("claude-sonnet-4-5").default_reserve == 50_000
    assert models.get("gemini-2.5-pro").default_reserve == 65_536


# --------------------------------------------------------------------------
# The built-in table.

BUILTINS = sorted(models.BUILTIN_MODELS.values(), key=lambda s: s.name)


@pytest.mark.parametrize("spec", BUILTINS, ids=lambda s: s.name)
def test_builtin_spec_is_consistent(spec: ModelSpec) -> None:
    assert spec.max_output_tokens <= spec.context_window
    assert 0 < spec.default_reserve < spec.context_window
    if spec.max_input_tokens is not None:
        assert spec.context_window - spec.default_reserve <= spec.max_input_tokens
    if spec.cached_input_price is not None and spec.input_price is not None:
        assert spec.cached_input_price <= spec.input_price
    if spec.cached_input_price is not None:
        assert spec.input_price is not None
    assert spec.tokenizer in {"o200k_base", "cl100k_base", "estimate"}
    assert (spec.estimate_margin > 0) == (spec.tokenizer == "estimate")
    assert "20" in spec.source and len(spec.source) > 20  # says where and when
    assert spec.name == spec.name.lower()
    # Every name and alias resolves back to this very spec.
    for key in (spec.name, *spec.aliases):
        assert models.get(key) is spec


@pytest.mark.parametrize("spec", BUILTINS, ids=lambda s: s.name)
def test_builtin_provider_conventions(spec: ModelSpec) -> None:
    if spec.provider == "openai":
        cl100k = {"gpt-3.5-turbo", "gpt-3.5-turbo-0613", "gpt-4", "gpt-4-32k", "gpt-4-turbo"}
        assert spec.tokenizer == ("cl100k_base" if spec.name in cl100k else "o200k_base")
        assert spec.cache_style == ("automatic_prefix" if spec.cached_input_price is not None else "none")
        assert spec.cache_write_price is None
    elif spec.provider == "anthropic":
        assert spec.cache_style == "explicit_breakpoints"
        assert spec.input_price is not None and spec.cache_write_price is not None
        assert spec.cache_write_price == pytest.approx(spec.input_price * 1.25)
        assert spec.cached_input_price == pytest.approx(spec.input_price * 0.1)
    else:
        assert spec.tokenizer == "estimate"
        assert spec.cache_write_price is None
    if spec.provider == "meta":
        assert (spec.input_price, spec.cached_input_price, spec.output_price) == (None, None, None)


def test_builtins_cover_every_family_the_issue_names() -> None:
    names = set(models.BUILTIN_MODELS)
    for family in (
        "o1-mini",
        "gpt-4-32k",
        "claude-3-opus",
        "claude-3-sonnet",
        "claude-3-haiku",
        "claude-3-5-haiku",
        "gemini-1.5-pro",
        "gemini-1.5-flash",
        "gpt-4o",
        "gpt-4.1",
        "gpt-5",
        "gpt-5-mini",
        "o3",
        "o4-mini",
        "claude-3-5-sonnet",
        "claude-3-7-sonnet",
        "claude-sonnet-4",
        "claude-opus-4-1",
        "claude-sonnet-4-5",
        "gemini-2.0-flash",
        "gemini-2.5-pro",
        "deepseek-chat",
        "qwen3-max",
        "kimi-k2",
        "llama-3.1-8b",
    ):
        assert family in names
    assert {s.provider for s in BUILTINS} >= {
        "openai",
        "anthropic",
        "google",
        "deepseek",
        "qwen",
        "moonshot",
        "meta",
    }


def test_no_two_builtins_share_a_name_or_alias() -> None:
    keys = [k.lower() for s in BUILTINS for k in (s.name, *s.aliases)]
    assert len(keys) == len(set(keys))


def test_known_figures() -> None:
    # Spot checks against the providers' pages (see each spec's source).
    gpt4o = models.get("gpt-4o")
    assert (gpt4o.context_window, gpt4o.max_output_tokens) == (128_000, 16_384)
    assert (gpt4o.input_price, gpt4o.cached_input_price, gpt4o.output_price) == (2.50, 1.25, 10.0)
    assert models.get("gpt-4.1").context_window == 1_047_576
    nano = models.get("gpt-5-nano")
    assert (nano.context_window, nano.max_input_tokens, nano.cached_input_price) == (400_000, 272_000, 0.005)
    sonnet = models.get("claude-sonnet-4-5")
    assert (sonnet.context_window, sonnet.max_output_tokens, sonnet.cache_write_price) == (
        200_000,
        64_000,
        3.75,
    )
    assert models.get("gpt-3.5-turbo").context_window == 16_385
    for name, window, out in (
        ("o1-mini", 128_000, 65_536),
        ("o1-preview", 128_000, 32_768),
        ("gpt-4-32k", 32_768, 32_768),
        ("claude-3-opus", 200_000, 4_096),
        ("claude-3-sonnet", 200_000, 4_096),
        ("claude-3-haiku", 200_000, 4_096),
        ("claude-3-5-sonnet", 200_000, 8_192),
        ("claude-3-5-haiku", 200_000, 8_192),
        ("gemini-1.5-pro", 2_097_152, 8_192),
        ("gemini-1.5-flash", 1_048_576, 8_192),
    ):
        spec = models.get(name)
        assert (spec.context_window, spec.max_output_tokens) == (window, out), name
    assert models.get("claude-3-haiku").input_price == 0.25


# --------------------------------------------------------------------------
# Property: any registered family name plus any version suffix resolves to it.

_DATES = st.dates(min_value=datetime.date(2000, 1, 1), max_value=datetime.date(2099, 12, 31))
_SUFFIXES = st.one_of(
    _DATES.map(lambda d: f"-{d.isoformat()}"),
    _DATES.map(lambda d: f"-{d:%Y%m%d}"),
    _DATES.map(lambda d: f"@{d:%Y%m%d}"),
    st.sampled_from(["-latest", "-preview", "-exp", "-v1:0", "-001", "-0613"]),
)


@settings(max_examples=examples(150), deadline=None)
@given(
    spec=st.sampled_from(BUILTINS),
    suffix=_SUFFIXES,
    prefix=st.sampled_from(["", "openrouter/", "some-provider/"]),
    upper=st.booleans(),
)
def test_versioned_and_prefixed_builtin_names_resolve_to_their_spec(
    spec: ModelSpec, suffix: str, prefix: str, upper: bool
) -> None:
    # A dated name that is a model of its own (gpt-3.5-turbo-0613: 4,096 tokens, not 16,385) is that model.
    other = {n.lower() for s in BUILTINS if s is not spec for n in (s.name, *s.aliases)}
    assume((spec.name + suffix).lower() not in other)
    name = prefix + spec.name + suffix
    assert models.get(name.upper() if upper else name) is spec


# --------------------------------------------------------------------------
# Docstring examples and counter_for.


def test_docstring_examples_run() -> None:
    assert doctest.testmod(models, raise_on_error=False).failed == 0


def test_counter_for_picks_the_exact_encoding_for_openai_models() -> None:
    counter = models.counter_for("gpt-4o-2024-08-06")
    assert "o200k" in counter.name
    assert counter.count_text("hello world") == 2
    assert "cl100k" in models.counter_for("gpt-4-0613").name
    assert models.counter_for(models.get("gpt-4o")).name == counter.name


def test_counter_for_estimates_models_without_a_public_tokenizer() -> None:
    counter = models.counter_for("claude-sonnet-4-5")
    assert "estimate" in counter.name
    assert counter.count_text("hello world, this is a sentence") > 0


def test_counter_for_unknown_model_raises() -> None:
    with pytest.raises(UnknownModelError):
        models.counter_for("no-such-model-anywhere")


def test_counter_for_a_registered_open_model_uses_its_tokenizer_file(
    registered: Callable[..., None], tmp_path: Path
) -> None:
    tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<unk>"],
        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(["an open model reads its own tokenizer file"] * 20, trainer=trainer)
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    spec = _spec("acme-open", provider="meta", tokenizer=f"hf:{path}")
    assert spec.estimate_margin == 0.0  # exact counts need no margin
    registered(spec)
    counter = models.counter_for("acme-open-2026-01-01")
    text = "an open model reads files"
    assert counter.count_text(text) == len(tok.encode(text).ids)
    # The same tokenizer served by Google (a Gemma): Gemini's rules for images and files, the tokenizer's
    # own chat framing kept (ChatML; OpenAI's replaced it).
    gemma = _spec("acme-gemma", provider="google", tokenizer=f"hf:{path}")
    assert models.counter_for(gemma).chat_format == dataclasses.replace(CHATML, image_provider="gemini")


def test_estimate_ratio_is_where_a_models_calibration_starts_and_is_validated() -> None:
    # Anthropic's tokenizer splits text finer than o200k_base, which the estimator approximates, and Opus
    # 4.7's finer still: an engine for them starts from that, before the provider reports any usage.
    assert models.get("claude-sonnet-4-5").estimate_ratio == 1.2
    assert models.get("claude-opus-4-7").estimate_ratio == 1.6
    assert models.get("gpt-4o").estimate_ratio == 1.0 and models.get("gemini-2.5-pro").estimate_ratio == 1.0
    counter = models.counter_for("claude-opus-4-7", calibrated=True)
    assert isinstance(counter, CalibratedCounter) and counter.correction == 1.6
    # The shared counter, uncorrected, but counting what a rule bills (images, PDF pages) divided by the
    # ratio the correction multiplies back: those rules are in Claude's tokens already.
    plain = models.counter_for("claude-opus-4-7")
    assert counter.inner.chat_format == dataclasses.replace(plain.chat_format, media_ratio=1.6)
    assert counter.inner is models.counter_for("claude-opus-4-7", calibrated=True).inner
    assert models.counter_for("gpt-4o", calibrated=True) is models.counter_for(
        "gpt-4o"
    )  # exact: nothing to learn
    for bad in (0.9, 2.5, True, "1.2"):
        with pytest.raises(ConfigError, match="estimate_ratio must be a number in \\[1, 2\\]"):
            ModelSpec(name="m", provider="other", context_window=8_000, max_output_tokens=1_000,
                      tokenizer="estimate", estimate_ratio=bad)  # type: ignore[arg-type]  # fmt: skip
