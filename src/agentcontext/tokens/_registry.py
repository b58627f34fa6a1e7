"""`counter_for_tokenizer`: one shared counter per tokenizer name."""

from __future__ import annotations

import os
import threading
from collections import OrderedDict

from ..exceptions import ConfigError
from ._base import BaseTokenCounter, ChatFormat
from ._encodings import ENCODING_NAMES

__all__ = ["TOKENIZER_NAMES", "counter_for_tokenizer"]

TOKENIZER_NAMES: tuple[str, ...] = (*ENCODING_NAMES, "estimate", "hf:<path to tokenizer.json>")
"""The tokenizer names `counter_for_tokenizer` accepts."""

_MAX_HF = 16
_lock = threading.Lock()
_shared: OrderedDict[tuple[str, ChatFormat | None], BaseTokenCounter] = OrderedDict()


def counter_for_tokenizer(tokenizer: str, *, chat_format: ChatFormat | None = None) -> BaseTokenCounter:
    """Return the process-wide counter for a tokenizer name, creating it on first use.

    Engines for the same model share one counter, so the encoding loads once and
    the per-message cache serves them all. Hugging Face counters are kept for
    the 16 most recently used files.

    Args:
        tokenizer: ``"o200k_base"``, ``"cl100k_base"`` (exact, offline),
            ``"estimate"`` (`ScriptEstimator`) or ``"hf:<path to tokenizer.json>"``
            (`HuggingFaceCounter`; a local file, nothing is downloaded). A
            counter's own `name` (``"tiktoken:o200k_base"``) is accepted too.
        chat_format: the provider's framing and image rules; None (default) keeps
            each counter's own default (OpenAI's, or `CHATML` for ``hf:``). Pass
            e.g. ``ChatFormat(image_provider="anthropic", tools_preamble=346)``
            for Claude. Counters are shared per tokenizer *and* format.

    Raises:
        ConfigError: an unknown name (the message lists the known ones).
        TokenizerError: the tokenizer's data is missing or corrupt.
        MissingDependencyError: ``hf:`` without the ``hf`` extra installed.
    """
    if not isinstance(tokenizer, str):
        raise ConfigError(f"tokenizer must be a str, got {type(tokenizer).__name__}")
    key = tokenizer.removeprefix("tiktoken:")
    if key.startswith("hf:"):
        path = key[3:]
        if not path:
            raise ConfigError("'hf:' needs a path: 'hf:/path/to/tokenizer.json'")
        key = "hf:" + os.path.abspath(os.path.expanduser(path))
    elif key not in ENCODING_NAMES and key != "estimate":
        raise ConfigError(
            f"unknown tokenizer {tokenizer!r}; known: {', '.join(map(repr, TOKENIZER_NAMES))}. "
            "Register the model with tokenizer='estimate' if it has no public tokenizer."
        )
    if chat_format is not None and not isinstance(chat_format, ChatFormat):
        raise ConfigError(f"chat_format must be a ChatFormat or None, got {type(chat_format).__name__}")
    slot = (key, chat_format)
    with _lock:
        counter = _shared.get(slot)
        if counter is not None:
            _shared.move_to_end(slot)
            return counter
    counter = _create(key, chat_format)
    with _lock:
        # Another thread may have created it meanwhile: keep the first, so all share one.
        existing = _shared.setdefault(slot, counter)
        _shared.move_to_end(slot)
        hf_slots = [k for k in _shared if k[0].startswith("hf:")]
        for old in hf_slots[: max(0, len(hf_slots) - _MAX_HF)]:
            del _shared[old]
    return existing


def _create(key: str, chat_format: ChatFormat | None) -> BaseTokenCounter:
    if key == "estimate":
        from ._estimate import ScriptEstimator

        return ScriptEstimator() if chat_format is None else ScriptEstimator(chat_format=chat_format)
    if key.startswith("hf:"):
        from ._hf import HuggingFaceCounter

        if chat_format is None:
            return HuggingFaceCounter.from_file(key[3:])
        return HuggingFaceCounter.from_file(key[3:], chat_format=chat_format)
    from ._tiktoken import TiktokenCounter

    return TiktokenCounter(key) if chat_format is None else TiktokenCounter(key, chat_format=chat_format)
