"""`ScriptEstimator`: token estimates for models without a public tokenizer.

"Characters divided by four" is right for English prose only: it undercounts
JSON tool output by a quarter and Chinese by more than half, and an undercount
is what overflows a context window. This estimator counts what drives a BPE
tokenizer's output instead (words, letters, case changes inside identifiers,
digit groups, punctuation, line breaks and indentation, and characters of each
script: frequent and other CJK ideographs, kana, Hangul, other alphabets,
symbols, emoji) and weighs each with a coefficient fitted by non-negative least
squares against exact ``o200k_base`` counts on real text.

One set of ratios cannot serve every kind of text (a letter costs more in JSON
keys than in English prose), so there is one coefficient set per kind (prose,
code, JSON, CJK, other languages) and a small softmax gate, fitted on the same
corpus, that weighs the sets by how the text looks (its feature densities):
mixed text gets a blend, not a switch. Each set is scaled so its median error
is slightly above zero, so the estimator errs high. ``bench/estimator_fit.py``
rebuilds the fit; its held-out error per kind of text is in ``bench/RESULTS.md``
(median +0.5% to +2.8%, whole conversations within a few percent).

Feature extraction makes a handful of C-level passes over the UTF-8 bytes (one
regex substitution for frequent ideographs, byte translations, pattern counts):
no Python loop over characters, no numpy. About 25 MB/s, faster than tiktoken.
"""

from __future__ import annotations

import math
import re

from ..exceptions import ConfigError
from ._base import DEFAULT_CACHE_SIZE, OPENAI_CHAT, BaseTokenCounter, ChatFormat
from ._cjk import COMMON_CJK
from ._estimate_params import EXPERTS, GATE, GATE_BIAS, MEAN, STD, Z_CLIP

__all__ = ["FEATURE_NAMES", "ScriptEstimator", "estimate", "features"]

_COMMON_CJK = re.compile(f"[{COMMON_CJK}]")

# Byte classes of the UTF-8 encoding, continuation bytes deleted, so one byte per
# character: a lower, A upper, L other-script letter, 0 digit, p punctuation,
# q double quote, u underscore, s space/tab, n line break, c frequent CJK
# ideograph (marked before encoding), C other CJK ideograph, K kana, H Hangul,
# Y other symbol, E beyond the basic plane (mostly emoji). A lead byte names a
# block of 64 (two bytes) or 4,096 (three bytes) code points, which is enough to
# tell the scripts apart; only the 0xE3 block mixes kana with CJK punctuation
# and needs its second byte (see `_KANA_LEADS`).
_CLASS = bytearray(b"p" * 256)
for _lo, _hi, _c in (
    (0x01, 0x01, "c"),  # our marker for frequent CJK ideographs
    (0x61, 0x7A, "a"),
    (0x41, 0x5A, "A"),
    (0x30, 0x39, "0"),
    (0x22, 0x22, "q"),
    (0x5F, 0x5F, "u"),
    (0xC2, 0xC2, "Y"),  # U+0080-00BF: Latin-1 punctuation and symbols
    (0xC3, 0xDF, "L"),  # U+00C0-07FF: accented Latin, Greek, Cyrillic, Hebrew, Arabic...
    (0xE0, 0xE1, "L"),  # U+0800-1FFF: Indic, Thai, Georgian, Vietnamese Latin...
    (0xE2, 0xE2, "Y"),  # U+2000-2FFF: punctuation, arrows, math, box drawing, dingbats
    (0xE3, 0xE9, "C"),  # U+3000-9FFF: CJK ideographs (kana and CJK punctuation split off first)
    (0xEA, 0xED, "H"),  # U+A000-DFFF: mostly Hangul syllables
    (0xEE, 0xEF, "Y"),  # U+E000-FFFF: private use, compatibility and fullwidth forms
    (0xF0, 0xF4, "E"),  # beyond the basic plane: emoji, rare ideographs
    (0xF8, 0xF8, "K"),  # our marker for kana
    (0xF9, 0xF9, "Y"),  # our marker for CJK punctuation (U+3000-303F)
):
    for _b in range(_lo, _hi + 1):
        _CLASS[_b] = ord(_c)
for _b in b" \t\x0b\x0c":
    _CLASS[_b] = ord("s")
for _b in b"\r\n":
    _CLASS[_b] = ord("n")
_TABLE = bytes(_CLASS)
_CONTINUATION = bytes(range(0x80, 0xC0))
# 0xF8 and 0xF9 never occur in UTF-8, so they can stand for kana and CJK punctuation.
_KANA_LEADS = ((b"\xe3\x80", b"\xf9"), (b"\xe3\x81", b"\xf8"), (b"\xe3\x82", b"\xf8"), (b"\xe3\x83", b"\xf8"))


def _binary(members: bytes) -> bytes:
    table = bytearray(b" " * 256)
    for b in members:
        table[b] = ord("x")
    return bytes(table)


# Runs of a class are counted as " x" pairs after mapping the class to "x" and
# everything else to " " (plus one when the text starts with the class): a
# C-level count instead of a regex building a list.
_RUN_WORDS = _binary(b"aAL")
_RUN_DIGITS = _binary(b"0")
_RUN_PUNCT = _binary(b"pq")
_RUN_NEWLINES = _binary(b"n")
_SPACES = _binary(b"s")
_PUNCT = _binary(b"p")
_LONG = b"x" * 8
_LONG_NEWLINES = b"x" * 16

FEATURE_NAMES: tuple[str, ...] = (
    "words",
    "lower",
    "upper",
    "case_changes",
    "other_letters",
    "digits",
    "digit_runs",
    "punct",
    "punct_runs",
    "long_punct",
    "underscores",
    "quote_punct",
    "space_punct",
    "punct_space",
    "letter_digit",
    "newline_runs",
    "indent_runs",
    "long_newlines",
    "space_digit",
    "cjk_common",
    "cjk_other",
    "kana",
    "hangul",
    "symbols",
    "astral",
)
"""What `features` counts, in order."""


def _runs(m: bytes, table: bytes) -> int:
    b = m.translate(table)
    return b.count(b" x") + (b[:1] == b"x")


def features(text: str) -> tuple[int, ...]:
    """Count the features the estimator weighs, in `FEATURE_NAMES` order.

    ``words`` are runs of letters of alphabetic scripts (Latin, Cyrillic,
    Greek...); ``case_changes`` are lower-to-upper transitions (``getValue``);
    ``punct`` counts ASCII punctuation other than ``"`` and ``_`` outside runs of
    eight or more, and ``long_punct`` those runs' 8-character blocks (rulers
    like ``--------`` are one token per dozens of characters); ``quote_punct``,
    ``space_punct``, ``punct_space`` and ``letter_digit`` count adjacent pairs
    (``":``, `` (``, ``, ``, ``a1``); ``indent_runs`` are runs of two or more
    spaces or tabs; ``long_newlines`` are 16-character blocks of line-break runs
    (a flood of blank lines still costs a little); ``space_digit`` is a space
    before a digit (a token of its own); ``cjk_common`` are ideographs in `COMMON_CJK`, ``cjk_other`` the rest;
    ``symbols`` are other non-ASCII characters in the basic plane (CJK and
    fullwidth punctuation, arrows, box drawing); ``astral`` are characters beyond
    it (mostly emoji).
    """
    raw = text.encode("utf-8", "surrogatepass")
    if len(raw) != len(text):
        text, common = _COMMON_CJK.subn("\x01", text)
        if common:
            raw = text.encode("utf-8", "surrogatepass")
        if b"\xe3" in raw:
            for lead, marker in _KANA_LEADS:
                raw = raw.replace(lead, marker)
    m = raw.translate(_TABLE, _CONTINUATION)
    punct = m.translate(_PUNCT)
    spaces = m.translate(_SPACES)
    newlines = m.translate(_RUN_NEWLINES)
    long_blocks = punct.count(_LONG)
    return (
        _runs(m, _RUN_WORDS),
        m.count(b"a"),
        m.count(b"A"),
        m.count(b"aA"),
        m.count(b"L"),
        m.count(b"0"),
        _runs(m, _RUN_DIGITS),
        m.count(b"p") - 8 * long_blocks,
        _runs(m, _RUN_PUNCT),
        long_blocks,
        m.count(b"u"),
        m.count(b"qp"),
        m.count(b"sp") + m.count(b"sq"),
        m.count(b"ps") + m.count(b"qs"),
        m.count(b"a0") + m.count(b"0a"),
        newlines.count(b" x") + (newlines[:1] == b"x"),
        spaces.count(b" xx") + (spaces[:2] == b"xx"),
        newlines.count(_LONG_NEWLINES),
        m.count(b"s0"),
        m.count(b"c"),
        m.count(b"C"),
        m.count(b"K"),
        m.count(b"H"),
        m.count(b"Y"),
        m.count(b"E"),
    )


def estimate(text: str) -> float:
    """The estimator's raw (unrounded, unscaled) token estimate for ``text``.

    Each kind of text (prose, code, JSON, CJK, other languages) has its own
    coefficient set; a softmax gate on the feature densities (counts per
    character) weighs the kinds, so mixed text gets a blend rather than a
    switch. Parameters are in ``agentcontext/tokens/_estimate_params.py``.
    """
    if not text:
        return 0.0
    f = features(text)
    inv = 1.0 / len(text)
    z = [max(-Z_CLIP, min(Z_CLIP, (x * inv - m) / s)) for x, m, s in zip(f, MEAN, STD, strict=True)]
    logits = [
        b + sum(w * v for w, v in zip(row, z, strict=True)) for row, b in zip(GATE, GATE_BIAS, strict=True)
    ]
    top = max(logits)
    weights = [math.exp(v - top) for v in logits]
    per_kind = [sum(c * x for c, x in zip(row, f, strict=True) if x) for row in EXPERTS]
    return sum(w * e for w, e in zip(weights, per_kind, strict=True)) / sum(weights)


class ScriptEstimator(BaseTokenCounter):
    """Estimates tokens from script-aware character statistics, for models without a public tokenizer.

    Fitted against OpenAI's ``o200k_base``; other modern BPE tokenizers
    (Claude's, Gemini's, Llama 3's) land in the same range, and
    `CalibratedCounter` corrects the remaining per-model bias from the usage
    the provider reports. The fit errs on the high side: an undercount
    overflows the window, an overcount only compacts a little early.

    >>> ScriptEstimator().count_text("hello world") > 0
    True
    """

    def __init__(
        self,
        *,
        scale: float = 1.0,
        chat_format: ChatFormat = OPENAI_CHAT,
        cache_size: int = DEFAULT_CACHE_SIZE,
    ) -> None:
        """Create an estimator.

        Args:
            scale: multiplies every estimate (default 1.0); e.g. 1.1 for a
                tokenizer known to produce 10% more tokens than ``o200k_base``.
            chat_format: message framing and image rules (default: OpenAI Chat Completions).
            cache_size: most per-message counts kept (default 65,536); 0 disables the cache.

        Raises:
            ConfigError: ``scale`` is not a positive finite number.
        """
        super().__init__(chat_format=chat_format, cache_size=cache_size)
        if (
            isinstance(scale, bool)
            or not isinstance(scale, int | float)
            or not math.isfinite(scale)
            or scale <= 0
        ):
            raise ConfigError(f"scale must be a positive number, got {scale!r}")
        self._scale = float(scale)

    @property
    def name(self) -> str:
        """``"estimate"`` (or ``"estimate*<scale>"`` when scaled)."""
        return "estimate" if self._scale == 1.0 else f"estimate*{self._scale:g}"

    def _count(self, text: str) -> int:
        return max(1, math.ceil(estimate(text) * self._scale))
