"""`HuggingFaceCounter`: exact counts for open models from their ``tokenizer.json``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from ..exceptions import MissingDependencyError, TokenizerError
from ._base import CHATML, DEFAULT_CACHE_SIZE, BaseTokenCounter, ChatFormat

if TYPE_CHECKING:
    from tokenizers import Tokenizer

__all__ = ["HuggingFaceCounter"]


def _import_tokenizers() -> type[Tokenizer]:
    try:
        from tokenizers import Tokenizer
    except ImportError as exc:
        raise MissingDependencyError(
            "HuggingFaceCounter needs the `tokenizers` package: pip install 'agentcontext[hf]'"
        ) from exc
    return Tokenizer


class HuggingFaceCounter(BaseTokenCounter):
    """Exact token counts for open models (Qwen, Llama, DeepSeek, Mistral...) from a Hugging Face tokenizer.

    Build it with `from_file` on the model's ``tokenizer.json``; nothing is
    downloaded. Needs the ``hf`` extra (``pip install 'agentcontext[hf]'``).

    Text is counted without the tokenizer's BOS/EOS additions and with special
    tokens matched as ordinary text (``encode_special_tokens``), so a user
    writing ``<|im_end|>`` is billed for the characters, not for a control token.
    The default `ChatFormat` is `CHATML` (4 framing tokens per message plus the
    role); templates differ between model families, so pass your own when you
    know it, or wrap the counter in `CalibratedCounter`.
    """

    def __init__(
        self,
        tokenizer: Tokenizer,
        *,
        name: str = "hf",
        chat_format: ChatFormat = CHATML,
        cache_size: int = DEFAULT_CACHE_SIZE,
    ) -> None:
        """Wrap an already loaded `tokenizers.Tokenizer` (see `from_file` to load one).

        Args:
            tokenizer: the tokenizer. It is not modified; a copy is configured.
            name: the counter's name in reports (default ``"hf"``).
            chat_format: message framing (default `CHATML`).
            cache_size: most per-message counts kept (default 65,536); 0 disables the cache.
        """
        super().__init__(chat_format=chat_format, cache_size=cache_size)
        tokenizer_cls = _import_tokenizers()
        if not isinstance(tokenizer, tokenizer_cls):
            raise TokenizerError(f"expected a tokenizers.Tokenizer, got {type(tokenizer).__name__}")
        # Configure a copy so the caller's tokenizer keeps its settings.
        tok = tokenizer_cls.from_str(tokenizer.to_str())
        tok.no_truncation()
        tok.no_padding()
        if hasattr(tok, "encode_special_tokens"):  # tokenizers >= 0.15
            tok.encode_special_tokens = True
        self._tok = tok
        self._name = name

    @classmethod
    def from_file(
        cls,
        path: str | os.PathLike[str],
        *,
        chat_format: ChatFormat = CHATML,
        cache_size: int = DEFAULT_CACHE_SIZE,
    ) -> HuggingFaceCounter:
        """Load a counter from a local ``tokenizer.json``.

        Args:
            path: the file (the one in a model's Hugging Face repository), or a
                directory holding a ``tokenizer.json``.
            chat_format: message framing (default `CHATML`).
            cache_size: most per-message counts kept (default 65,536).

        Raises:
            MissingDependencyError: ``tokenizers`` is not installed (an ``ImportError``).
            TokenizerError: the file is missing or is not a valid ``tokenizer.json``.
        """
        tokenizer_cls = _import_tokenizers()
        p = Path(path).expanduser()
        if p.is_dir():
            p = p / "tokenizer.json"
        if not p.is_file():
            raise TokenizerError(
                f"tokenizer file {str(p)!r} does not exist; download the model's tokenizer.json "
                "(e.g. `huggingface-cli download Qwen/Qwen2.5-7B-Instruct tokenizer.json`) and pass its path"
            )
        try:
            tok = tokenizer_cls.from_file(str(p))
        except Exception as exc:  # tokenizers raises plain Exception on bad JSON or unknown models
            raise TokenizerError(f"cannot load {str(p)!r} as a Hugging Face tokenizer.json: {exc}") from exc
        return cls(tok, name=f"hf:{p}", chat_format=chat_format, cache_size=cache_size)

    @property
    def name(self) -> str:
        """``"hf:<path>"`` for counters loaded with `from_file`."""
        return self._name

    def encode(self, text: str) -> list[int]:
        """The token ids of ``text`` (no special tokens added)."""
        ids: list[int] = self._tok.encode(text, add_special_tokens=False).ids
        return ids

    def _count(self, text: str) -> int:
        return len(self._tok.encode(text, add_special_tokens=False).ids)
