"""`TiktokenCounter`: exact counts for OpenAI models, offline."""

from __future__ import annotations

import re
from collections.abc import Sequence

import tiktoken

from ._base import DEFAULT_CACHE_SIZE, OPENAI_CHAT, BaseTokenCounter, ChatFormat
from ._encodings import ENCODING_NAMES, load_encoding

__all__ = ["TiktokenCounter"]


class TiktokenCounter(BaseTokenCounter):
    """Exact token counts with OpenAI's ``o200k_base`` or ``cl100k_base`` encoding.

    The encodings load from rank files shipped inside agentcontext and verified
    against OpenAI's published SHA-256, so this works on a machine with no
    network; the ids are exactly tiktoken's. The encoding is built on first use
    (about 0.3 s) and shared by every counter in the process.

    Text is counted like `tiktoken.Encoding.encode_ordinary`: special-token
    text such as ``<|endoftext|>`` inside a message is ordinary text, as the
    providers treat user content, and never raises.

    >>> counter = TiktokenCounter()
    >>> counter.count_text("hello world")
    2
    """

    def __init__(
        self,
        encoding: str = "o200k_base",
        *,
        chat_format: ChatFormat = OPENAI_CHAT,
        cache_size: int = DEFAULT_CACHE_SIZE,
    ) -> None:
        """Create a counter; the encoding itself loads lazily, on the first count.

        Args:
            encoding: ``"o200k_base"`` (default: GPT-4o, GPT-4.1, GPT-5, o-series)
                or ``"cl100k_base"`` (GPT-4, GPT-3.5-turbo).
            chat_format: message framing and image rules (default: OpenAI Chat Completions).
            cache_size: most per-message counts kept (default 65,536); 0 disables the cache.

        Raises:
            ConfigError: an unknown encoding or a bad option.
        """
        super().__init__(chat_format=chat_format, cache_size=cache_size)
        if encoding not in ENCODING_NAMES:
            load_encoding(encoding)  # raises ConfigError listing the known names
        self._encoding_name = encoding
        self._enc: tiktoken.Encoding | None = None

    @property
    def name(self) -> str:
        """``"tiktoken:<encoding>"``."""
        return f"tiktoken:{self._encoding_name}"

    @property
    def encoding(self) -> tiktoken.Encoding:
        """The `tiktoken.Encoding` (loaded on first access)."""
        enc = self._enc
        if enc is None:
            enc = self._enc = load_encoding(self._encoding_name)
        return enc

    def encode(self, text: str) -> list[int]:
        """The token ids of ``text``, as `tiktoken.Encoding.encode_ordinary` gives them."""
        return self.encoding.encode_ordinary(text)

    def _count(self, text: str) -> int:
        enc = self._enc
        if enc is None:
            enc = self.encoding
        if len(text) > _PIECE and _LONG_SPACE.search(text):
            return _count_in_pieces(enc, text)
        try:
            return len(enc.encode_ordinary(text))
        except BaseException as exc:  # tiktoken's Rust side panics (a BaseException) on some inputs
            if type(exc).__name__ != "PanicException":
                raise
            return _count_in_pieces(enc, text)

    def _count_texts(self, texts: Sequence[str]) -> list[int]:
        # A long history's first count: one call into tiktoken's Rust core per text, without the
        # Python wrapper around it; anything unusual (long texts, lone surrogates, a panic) takes `_count`.
        if type(self)._count is not TiktokenCounter._count:  # a subclass counts its own way
            return super()._count_texts(texts)
        enc = self.encoding
        encode = getattr(enc, "_core_bpe", enc).encode_ordinary
        if not texts or max(map(len, texts)) <= _PIECE:
            try:
                return [len(encode(t)) for t in texts]
            except BaseException as exc:
                if not isinstance(exc, UnicodeEncodeError) and type(exc).__name__ != "PanicException":
                    raise
        count = self._count
        out: list[int] = []
        for t in texts:
            if not t:
                out.append(0)
            elif len(t) > _PIECE:
                out.append(count(t))
            else:
                try:
                    out.append(len(encode(t)))
                except BaseException as exc:
                    if not isinstance(exc, UnicodeEncodeError) and type(exc).__name__ != "PanicException":
                        raise
                    out.append(count(t))
        return out


_PIECE = 65_536
_LONG_SPACE = re.compile(rf"\s{{{_PIECE}}}")
"""A whitespace run this long is counted in pieces: tiktoken panics (and prints a Rust backtrace) on runs
of several hundred thousand."""


def _count_in_pieces(enc: tiktoken.Encoding, text: str) -> int:
    """Count text tiktoken cannot encode whole (its regex overflows its stack on a run of about a million
    spaces): in pieces of 64k characters, plus one token per cut, so the count never falls short."""
    pieces = [text[i : i + _PIECE] for i in range(0, len(text), _PIECE)]
    return sum(len(enc.encode_ordinary(p)) for p in pieces) + len(pieces) - 1
