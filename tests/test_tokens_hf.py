"""HuggingFaceCounter on a tokenizer.json this test trains itself (no download)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from agentcontext.exceptions import TokenizerError
from agentcontext.messages import Message, ToolCall
from agentcontext.tokens import CHATML, HuggingFaceCounter, MissingDependencyError, counter_for_tokenizer

tokenizers = pytest.importorskip("tokenizers")

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "def count_tokens(text: str) -> int:\n    return len(encode(text))\n",
    '{"flight": "HAT001", "seats": 3, "cabin": "economy"}',
    "你好，世界！今天天气很好。请帮我查一下明天北京的天气。",
    "Tool results can be long; agents read files, run tests and search the web.",
] * 20


@pytest.fixture(scope="module")
def tokenizer_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<unk>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(CORPUS, trainer=trainer)
    path = tmp_path_factory.mktemp("hf") / "tokenizer.json"
    tok.save(str(path))
    return path


def test_counts_equal_the_tokenizers_own_ids(tokenizer_file: Path) -> None:
    from tokenizers import Tokenizer

    reference = Tokenizer.from_file(str(tokenizer_file))
    counter = HuggingFaceCounter.from_file(tokenizer_file)
    texts = [*set(CORPUS), "unseen words: zygomorphic xylophones", "😀 emoji", "  spaces  ", "a" * 3000]
    for text in texts:
        ids = reference.encode(text, add_special_tokens=False).ids
        assert counter.encode(text) == ids
        assert counter.count_text(text) == len(ids)
    assert counter.name == f"hf:{tokenizer_file}"


def test_special_token_text_is_counted_as_ordinary_text(tokenizer_file: Path) -> None:
    from tokenizers import Tokenizer

    counter = HuggingFaceCounter.from_file(tokenizer_file)
    # The tokenizer itself would turn this into one control token.
    assert Tokenizer.from_file(str(tokenizer_file)).encode("<|im_end|>").ids == [2]
    assert counter.count_text("<|im_end|>") > 1


def test_the_callers_tokenizer_is_left_unchanged(tokenizer_file: Path) -> None:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_file))
    HuggingFaceCounter(tok)
    assert tok.encode("<|im_end|>").ids == [2]


def test_messages_use_the_chatml_framing(tokenizer_file: Path) -> None:
    counter = HuggingFaceCounter.from_file(tokenizer_file)
    assert counter.chat_format == CHATML
    m = Message(role="user", content="The quick brown fox")
    assert counter.count_message(m) == CHATML.per_message + counter.count_text("user") + counter.count_text(
        "The quick brown fox"
    )
    call = Message(role="assistant", tool_calls=(ToolCall(id="1", name="search", arguments='{"q": "fox"}'),))
    assert counter.count_message(call) > CHATML.per_tool_call


def test_a_directory_holding_tokenizer_json_is_accepted(tokenizer_file: Path) -> None:
    assert HuggingFaceCounter.from_file(tokenizer_file.parent).count_text(
        "fox"
    ) == HuggingFaceCounter.from_file(tokenizer_file).count_text("fox")


def test_counter_for_tokenizer_shares_one_counter_per_file(tokenizer_file: Path) -> None:
    a = counter_for_tokenizer(f"hf:{tokenizer_file}")
    assert a is counter_for_tokenizer(f"hf:{tokenizer_file}")
    assert isinstance(a, HuggingFaceCounter)


def test_missing_and_corrupt_files_are_tokenizer_errors(tmp_path: Path) -> None:
    with pytest.raises(TokenizerError, match="does not exist"):
        HuggingFaceCounter.from_file(tmp_path / "nope.json")
    bad = tmp_path / "tokenizer.json"
    bad.write_text(json.dumps({"not": "a tokenizer"}))
    with pytest.raises(TokenizerError, match="cannot load"):
        HuggingFaceCounter.from_file(bad)


def test_without_the_extra_the_error_says_what_to_install(
    tokenizer_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    with pytest.raises(MissingDependencyError, match=r"pip install 'agentcontext\[hf\]'") as info:
        HuggingFaceCounter.from_file(tokenizer_file)
    assert isinstance(info.value, ImportError)
