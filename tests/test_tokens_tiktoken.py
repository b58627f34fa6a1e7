"""Exact OpenAI encodings: offline, hash-verified, and id-for-id equal to tiktoken's own."""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

import pytest
import tiktoken
from hypothesis import given, settings
from hypothesis import strategies as st

from _sizes import examples
from agentcontext.exceptions import ConfigError, TokenizerError
from agentcontext.tokens import ENCODING_NAMES, TiktokenCounter, _encodings, load_encoding
from realdata import conversation_files

BLOB = "https://openaipublic.blob.core.windows.net/encodings/{}.tiktoken"

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "  leading and trailing spaces   ",
    "def f(x):\n    return x ** 2  # square\n\n\nclass A(B):\n\tpass\n",
    '{"flight_number": "HAT001", "date": "2024-05-16", "prices": {"economy": 163, "business": 421}}',
    "中文文本，包括标点符号。这是一个测试！第二句话？",
    "日本語のテキスト、カタカナとひらがな。한국어 텍스트입니다.",
    "Привет, мир! Ελληνικά. العربية. हिन्दी.",
    "emoji 😀👍🏽👨‍👩‍👧‍👦 flags 🇫🇷🇯🇵 and ✨ sparkles",
    "<|endoftext|> is ordinary text here, as are <|endofprompt|> and <|fim_prefix|>",
    "1234567890 3.14159 -42 1e-10 0xDEADBEEF",
    "\n\n\n\r\n\t\t  \u00a0\u2003\u3000",
    "a" * 5000,
    " ".join(["antidisestablishmentarianism"] * 50),
    "https://example.com/path?query=value&other=1#fragment",
]


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, tiktoken.Encoding]]:
    """tiktoken's own encodings, loaded offline by pre-seeding its cache with the verified files.

    tiktoken looks for ``$TIKTOKEN_CACHE_DIR/<sha1 of the blob URL>`` before downloading
    (``tiktoken/load.py``) and checks the file's SHA-256 itself.
    """
    cache = tmp_path_factory.mktemp("tiktoken-cache")
    for name in ENCODING_NAMES:
        blob = BLOB.format(name)
        data = gzip.decompress(
            resources.files("agentcontext.tokens")
            .joinpath("data")
            .joinpath(f"{name}.tiktoken.gz")
            .read_bytes()
        )
        (cache / hashlib.sha1(blob.encode()).hexdigest()).write_bytes(data)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TIKTOKEN_CACHE_DIR", str(cache))
        yield {name: tiktoken.get_encoding(name) for name in ENCODING_NAMES}


def _eval_texts(limit: int) -> list[str]:
    texts: list[str] = []
    for path in conversation_files():
        for line in path.read_text(encoding="utf-8").splitlines():
            m = json.loads(line)
            if isinstance(m.get("content"), str) and m["content"]:
                texts.append(m["content"])
            texts += [c["function"]["arguments"] for c in m.get("tool_calls") or []]
    return texts[:limit]


@pytest.mark.parametrize("name", ENCODING_NAMES)
def test_ids_equal_tiktoken_on_a_varied_corpus(name: str, reference: dict[str, tiktoken.Encoding]) -> None:
    ours = TiktokenCounter(name)
    ref = reference[name]
    for text in CORPUS:
        assert ours.encode(text) == ref.encode(text, disallowed_special=()) == ref.encode_ordinary(text)
        assert ours.count_text(text) == len(ref.encode_ordinary(text))


@pytest.mark.parametrize("name", ENCODING_NAMES)
def test_ids_equal_tiktoken_on_real_conversations(name: str, reference: dict[str, tiktoken.Encoding]) -> None:
    ours = load_encoding(name)
    texts = _eval_texts(400)
    assert len(texts) > 100
    assert ours.encode_ordinary_batch(texts) == reference[name].encode_ordinary_batch(texts)


@settings(max_examples=examples(150), deadline=None)
@given(text=st.text(max_size=300))
def test_ids_equal_tiktoken_on_arbitrary_text(text: str, reference: dict[str, tiktoken.Encoding]) -> None:
    for name in ENCODING_NAMES:
        assert load_encoding(name).encode_ordinary(text) == reference[name].encode_ordinary(text)


def test_special_token_text_is_ordinary_text_and_never_raises() -> None:
    counter = TiktokenCounter()
    # As one special token it would be 1; as text it is several ordinary tokens.
    assert counter.count_text("<|endoftext|>") > 1
    assert counter.count_text("before <|endofprompt|> after") > 3


def test_counter_names_and_the_encoding_is_shared() -> None:
    assert TiktokenCounter().name == "tiktoken:o200k_base"
    assert TiktokenCounter("cl100k_base").name == "tiktoken:cl100k_base"
    assert TiktokenCounter().encoding is TiktokenCounter().encoding is load_encoding("o200k_base")


def test_unknown_encoding_is_a_config_error_listing_the_known_ones() -> None:
    with pytest.raises(ConfigError, match="cl100k_base.*o200k_base"):
        TiktokenCounter("p50k_base")
    with pytest.raises(ConfigError):
        load_encoding("gpt2")


def test_a_corrupt_rank_file_fails_its_hash_check(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = _encodings._SPECS["cl100k_base"]
    monkeypatch.setitem(_encodings._SPECS, "cl100k_base", dataclasses.replace(spec, sha256="0" * 64))
    monkeypatch.setattr(_encodings, "_loaded", {})
    with pytest.raises(TokenizerError, match=r"cl100k_base\.tiktoken\.gz fails its hash check.*reinstall"):
        load_encoding("cl100k_base")


def test_a_missing_rank_file_says_which_and_how_to_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = _encodings._SPECS["cl100k_base"]
    monkeypatch.setitem(
        _encodings._SPECS, "cl100k_base", dataclasses.replace(spec, filename="nope.tiktoken.gz")
    )
    monkeypatch.setattr(_encodings, "_loaded", {})
    with pytest.raises(TokenizerError, match=r"missing.*nope\.tiktoken\.gz.*reinstall"):
        load_encoding("cl100k_base")


def test_concurrent_first_loads_build_the_encoding_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_encodings, "_loaded", {})
    reads: list[str] = []
    real = _encodings._read_rank_file

    def counting(spec: _encodings._EncodingSpec) -> bytes:
        reads.append(spec.name)
        return real(spec)

    monkeypatch.setattr(_encodings, "_read_rank_file", counting)
    results: list[tiktoken.Encoding] = []
    barrier = threading.Barrier(8)

    def load() -> None:
        barrier.wait()
        results.append(load_encoding("cl100k_base"))

    threads = [threading.Thread(target=load) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert reads == ["cl100k_base"]
    assert len(results) == 8 and all(r is results[0] for r in results)


def test_works_offline_on_a_fresh_machine(tmp_path: Path) -> None:
    """A new process with an empty tiktoken cache and no network still counts exactly."""
    script = (
        "import socket\n"
        "def deny(*a, **k):\n"
        "    raise OSError('network is disabled in this test')\n"
        "socket.socket.connect = deny\n"
        "socket.create_connection = deny\n"
        "socket.getaddrinfo = deny\n"
        "from agentcontext.tokens import counter_for_tokenizer\n"
        "print(counter_for_tokenizer('o200k_base').count_text('hello world'),"
        " counter_for_tokenizer('cl100k_base').count_text('hello world'))\n"
    )
    env = {**os.environ, "TIKTOKEN_CACHE_DIR": str(tmp_path / "empty-cache"), "DATA_GYM_CACHE_DIR": ""}
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["2", "2"]
    assert not (tmp_path / "empty-cache").exists()


def test_a_million_spaces_are_counted_not_a_crash() -> None:
    """tiktoken panics (a BaseException that no ``except Exception`` stops) on a very long whitespace run;
    such text is counted in pieces, never under its exact count."""
    counter = TiktokenCounter("o200k_base")
    n = counter.count_text(" " * 1_000_000)
    exact_400k = len(load_encoding("o200k_base").encode_ordinary(" " * 400_000))  # still encodable whole
    assert 2.5 * exact_400k <= n <= 2.5 * exact_400k + 20  # one token at most per 64k-character piece
