"""`ScriptEstimator`: token estimates for models without a public tokenizer.

"Characters divided by four" is right for English prose only: it undercounts
JSON tool output by a quarter and Chinese by more than half, and an undercount
is what overflows a context window. This estimator counts what drives a BPE
tokenizer's output instead (words, letters, case changes inside identifiers,
digit groups, punctuation, line breaks and indentation, and characters of each
script: frequent and other CJK ideographs, kana, Hangul, the other alphabets by
family, symbols, emoji) and weighs each with a coefficient fitted by
non-negative least squares against exact ``o200k_base`` counts on real text.

Character statistics alone cannot tell a word the vocabulary holds whole
(``comprehensive``: one token) from one it spells in pieces (``aiohappyeyeballs``:
five), and on a short text that decides the count. So three features look
things up, in tables derived from the public ``o200k_base`` vocabulary, not
from any corpus: ASCII words that are not one token (split where ``getValue``
changes case, as the tokenizer splits them), with their letters; adjacent
ideographs that appear together in no token (ideographs merge only with their
usual neighbours, so a list of transliterated names costs more than running
text); and characters no token holds whole (most rare ideographs, Ethiopic,
Lao...: two or three byte tokens each). Frequent words and character pairs are
whole tokens in every modern BPE vocabulary, which is what the estimator relies
on for models other than OpenAI's.

One set of ratios cannot serve every kind of text (a letter costs more in JSON
keys than in English prose), so there is one coefficient set per kind (prose,
code, JSON, CJK, other languages) and a small softmax gate, fitted on the same
corpus, that weighs the sets by how the text looks (its feature densities):
mixed text gets a blend, not a switch. Each set is scaled so its median error
is slightly above zero, so the estimator errs high. ``bench/estimator_fit.py``
rebuilds the fit and the tables; its held-out error per kind of text is in
``bench/RESULTS.md`` (median +0.8% to +2.1%, p90 3.6% to 9.4%).

Feature extraction makes C-level passes over the text: byte translations and
counts, one big integer of per-character bit flags for the pairs and runs of
classes, a split into words and set look-ups mapped in C, and a few regular
expressions over the non-ASCII characters alone. No Python loop over characters
or words, no numpy: as fast as the estimator it replaced (about 25 MB/s). The
word table (86,288 words, 218 KB compressed) is read on first use and kept,
about 8 MB in memory.
"""

from __future__ import annotations

import gzip
import math
import re
from array import array
from functools import cache
from importlib import resources
from itertools import compress, filterfalse
from operator import itemgetter, mul

from ..exceptions import ConfigError, TokenizerError
from ._base import DEFAULT_CACHE_SIZE, OPENAI_CHAT, BaseTokenCounter, ChatFormat
from ._byte_chars import BYTE_CHARS, CJK_WHOLE
from ._cjk import COMMON_CJK, COMMON_PAIRS
from ._estimate_params import EXPERTS, GATE, GATE_BIAS, MEAN, STD, Z_CLIP

__all__ = ["FEATURE_NAMES", "WORDS_FILE", "ScriptEstimator", "estimate", "features"]

WORDS_FILE = "estimate_words.txt.gz"
"""The word table under ``agentcontext/tokens/data/``: ``o200k_base``'s ASCII word tokens, one per line."""

# Byte classes of the UTF-8 encoding, continuation bytes deleted, so one byte per
# character: a lower, A upper, 0 digit, p punctuation, q double quote, u
# underscore, s space/tab, n line break; letters of other alphabets by script
# family (L G R M I B, below: each costs differently, a Cyrillic letter less
# than a Greek one); C CJK ideograph, J CJK punctuation, kana and rarer CJK
# (`_cjk` tells them apart), H Hangul, Y other symbol, E beyond the basic plane
# (mostly emoji). A lead byte names a block of 64 (two bytes) or 4,096 (three
# bytes) code points, which is enough to tell the scripts apart.
_CLASS = bytearray(b"p" * 256)
for _lo, _hi, _c in (
    (0x61, 0x7A, "a"),
    (0x41, 0x5A, "A"),
    (0x30, 0x39, "0"),
    (0x22, 0x22, "q"),
    (0x5F, 0x5F, "u"),
    (0xC2, 0xC2, "Y"),  # U+0080-00BF: Latin-1 punctuation and symbols
    (0xC3, 0xCA, "L"),  # U+00C0-02BF: accented Latin, IPA
    (0xCB, 0xCF, "G"),  # U+02C0-03FF: modifiers, combining marks, Greek
    (0xD0, 0xD4, "R"),  # U+0400-052F: Cyrillic
    (0xD5, 0xDF, "M"),  # U+0530-07FF: Armenian, Hebrew, Arabic, Syriac, Thaana
    (0xE0, 0xE0, "I"),  # U+0800-0FFF: Indic, Thai, Lao, Tibetan
    (0xE1, 0xE1, "B"),  # U+1000-1FFF: Myanmar, Georgian, Ethiopic, Khmer, Vietnamese Latin, Greek...
    (0xE2, 0xE2, "Y"),  # U+2000-2FFF: punctuation, arrows, math, box drawing, dingbats
    (0xE3, 0xE3, "J"),  # U+3000-3FFF: CJK punctuation, kana, bopomofo, rare ideographs
    (0xE4, 0xE9, "C"),  # U+4000-9FFF: CJK ideographs
    (0xEA, 0xED, "H"),  # U+A000-DFFF: mostly Hangul syllables
    (0xEE, 0xEF, "Y"),  # U+E000-FFFF: private use, compatibility and fullwidth forms
    (0xF0, 0xF4, "E"),  # beyond the basic plane: emoji, rare ideographs
):
    for _b in range(_lo, _hi + 1):
        _CLASS[_b] = ord(_c)
for _b in b" \t\x0b\x0c":
    _CLASS[_b] = ord("s")
for _b in b"\r\n":
    _CLASS[_b] = ord("n")
_TABLE = bytes(_CLASS)
_CONTINUATION = bytes(range(0x80, 0xC0))
# The "J" block U+3000-3FFF holds CJK punctuation (U+3000-303F), kana (U+3040-30FF)
# and rarer characters (bopomofo, strokes, enclosed forms, the first rare
# ideographs), which cost like rare ideographs. A character's first two UTF-8
# bytes tell which: counted in the non-ASCII bytes, where they can only start one.
_CJK_PUNCT_LEAD = b"\xe3\x80"
_KANA = re.compile("[\u3040-\u30ff]")


def _binary(members: bytes) -> bytes:
    table = bytearray(b" " * 256)
    for b in members:
        table[b] = ord("x")
    return bytes(table)


# Pairs and runs of classes are counted on big integers: each character becomes
# one byte of bit flags (`_FLAGS`), the bytes one integer, and a class the
# integer shifted and masked to bit 0 of every byte. Then "X followed by Y" is
# ``X & (Y << 8)``, and the runs of X are its members less those preceded by
# one (``X & (X >> 8)``), each counted with `int.bit_count`: word-level passes
# in C, two to three times faster than `bytes.count` on two-byte patterns.
_BITS = {"a": 0, "A": 1, "0": 3, "p": 4, "q": 5, "s": 6, "n": 7}
_FLAGS = bytes(
    (1 << _BITS[chr(c)] if chr(c) in _BITS else 0) | (4 if chr(c) in "aALGRMIB" else 0) for c in range(256)
)  # bit 2: any letter
_IDEOGRAPHS = bytes(1 if c == ord("C") else 0 for c in range(256))
_LETTER_CLASSES = (b"L", b"G", b"R", b"M", b"I", b"B")
_NO_LETTERS = (0,) * len(_LETTER_CLASSES)
_NOT_OTHER_LETTERS = bytes(c for c in range(256) if bytes([c]) not in _LETTER_CLASSES)
_DIGITS = _binary(b"0")
# Characters drawn in rulers (``--------``, ``========``, ``........``); a mixed run
# such as ``--:--:--`` is not one and costs a token per two characters.
_RULERS = bytes(ord("x") if chr(b) in "-=*#~." else ord(" ") for b in range(256))
_LONG = b"x" * 8
# Floods of blank lines or tabs cost a token per 16 characters (per 4 CRLF pairs).
_LONG_BLANKS = (b"\n" * 16, b"\t" * 16, b"\r\n" * 4)
# Box-drawing, block and dash rulers (``━━━━`` in every pip progress bar): a run of
# one such character merges into tokens of many characters.
_SYMBOL_RULERS = re.compile("([\u2500-\u259f\u2014\u2015])\\1{3,}")
# ASCII letters kept, every other byte a space: `bytes.split` then yields the words.
_LETTERS = bytes(b if 0x41 <= b <= 0x5A or 0x61 <= b <= 0x7A else 0x20 for b in range(256))
# Every ASCII byte a space: splitting leaves the runs of non-ASCII characters.
_NON_ASCII = bytes(0x20 if b < 0x80 else b for b in range(256))
# o200k_base's pre-tokenizer cuts ``getValue`` into ``get`` and ``Value`` (an
# uppercase run joins the lowercase run after it): look up the pieces.
_PIECES = re.compile(rb"[A-Z]*[a-z]+|[A-Z]+")
_BYTE_CHARS = re.compile(f"[{BYTE_CHARS}]")
# Negated: the characters of U+3000-9FFF that no token holds whole.
_CJK_BYTE_CHARS = re.compile(f"[^{CJK_WHOLE}\\x00-\\u2fff\\ua000-\\U0010ffff]")
# Runs of anything but frequent ideographs: replaced by NUL, they leave those ideographs in order.
_RARE_RUNS = re.compile(f"[^{COMMON_CJK}]+")
# A pair of BMP characters as one 32-bit little-endian UTF-16 word: first | second << 16.
_KNOWN_PAIRS = frozenset(
    ord(COMMON_PAIRS[i]) | ord(COMMON_PAIRS[i + 1]) << 16 for i in range(0, len(COMMON_PAIRS), 2)
)

_INV_STD = tuple(1.0 / s for s in STD)
_POSITIONS = range(len(MEAN))
# The gate input of a feature that is absent (zero), and the logits of a text without any feature.
_Z_ABSENT = tuple(max(-Z_CLIP, min(Z_CLIP, -m * r)) for m, r in zip(MEAN, _INV_STD, strict=True))
_GATE_BASE = tuple(b + sum(map(mul, row, _Z_ABSENT)) for row, b in zip(GATE, GATE_BIAS, strict=True))

FEATURE_NAMES: tuple[str, ...] = (
    "words",
    "lower",
    "upper",
    "case_changes",
    "latin_letters",
    "greek_letters",
    "cyrillic_letters",
    "semitic_letters",
    "indic_letters",
    "asian_letters",
    "digits",
    "digit_runs",
    "digit_triples",
    "punct",
    "punct_runs",
    "long_punct",
    "underscores",
    "quote_punct",
    "space_punct",
    "punct_space",
    "newline_runs",
    "indent_runs",
    "long_blanks",
    "space_digit",
    "cjk_common",
    "cjk_other",
    "kana",
    "hangul",
    "symbols",
    "astral",
    "rare_words",
    "rare_word_letters",
    "cjk_runs",
    "cjk_rare_pairs",
    "byte_chars",
    "symbol_rulers",
)
"""What `features` counts, in order."""


@cache
def _vocabulary() -> frozenset[bytes]:
    """The ASCII words that are one ``o200k_base`` token (after a space or not), read once from `WORDS_FILE`."""
    resource = resources.files("agentcontext.tokens").joinpath("data").joinpath(WORDS_FILE)
    try:
        return frozenset(gzip.decompress(resource.read_bytes()).split())
    except (OSError, EOFError) as exc:
        raise TokenizerError(
            f"the estimator's word table agentcontext/tokens/data/{WORDS_FILE} is missing or not valid "
            f"gzip ({exc}); reinstall agentcontext (`pip install --force-reinstall agentcontext`)"
        ) from exc


def _runs(mask: int, members: int = -1) -> int:
    """Runs of a class in a `features` mask: its members less those that follow another member."""
    return (mask.bit_count() if members < 0 else members) - (mask & mask >> 8).bit_count()


def _rare_words(raw: bytes) -> tuple[int, int]:
    """ASCII words that are not one token, and their letters."""
    vocabulary = _vocabulary()
    rare = list(filterfalse(vocabulary.__contains__, raw.translate(_LETTERS).split()))
    count, letters = len(rare), sum(map(len, rare))
    # Only a word in mixed case can hold a lower-to-upper change (`bytes` methods, mapped in C).
    camel = list(filterfalse(bytes.istitle, filterfalse(bytes.isupper, filterfalse(bytes.islower, rare))))
    if camel:
        # Replace each camelCase word by its pieces that are not tokens either.
        pieces = list(filterfalse(vocabulary.__contains__, _PIECES.findall(b" ".join(camel))))
        count += len(pieces) - len(camel)
        letters += sum(map(len, pieces)) - sum(map(len, camel))
    return count, letters


def _cjk(chars: str) -> tuple[int, int]:
    """Frequent ideographs in ``chars``, and adjacent pairs of them that are part of some token.

    One substitution leaves the runs of frequent ideographs (a pair that can
    merge has two of them). Re-encoded as UTF-16, a character is one 16-bit
    unit and a pair one 32-bit word, so the pair look-ups run over an `array`
    in C, twice (pairs starting at even and at odd positions).
    """
    runs = _RARE_RUNS.sub("\0", chars)
    common = len(runs) - runs.count("\0")
    known = 0
    if common > 1:
        utf16 = runs.encode("utf-16-le", "surrogatepass")
        for start in (0, 2):
            words = array("I", utf16[start : start + (len(utf16) - start) // 4 * 4])
            known += sum(map(_KNOWN_PAIRS.__contains__, words))
    return common, known


def features(text: str) -> tuple[int, ...]:
    """Count the features the estimator weighs, in `FEATURE_NAMES` order.

    ``words`` are runs of letters of alphabetic scripts (Latin, Cyrillic,
    Greek, Indic...), and the ``*_letters`` count non-ASCII letters by script
    family (`_CLASS`); ``case_changes`` are lower-to-upper transitions
    (``getValue``); ``digit_triples`` are whole groups of three in runs of
    digits (``o200k_base`` puts at most three digits in a token); ``punct``
    counts ASCII punctuation other than ``"`` and ``_`` outside rulers, and
    ``long_punct`` the 8-character blocks of rulers (``--------``, ``====``:
    one token per dozens of characters); ``quote_punct``, ``space_punct``,
    ``punct_space`` and ``space_digit`` count adjacent pairs (``":``, `` (``,
    ``, ``, `` 1``); ``indent_runs`` are runs of two or more spaces or tabs;
    ``long_blanks`` are 16-character blocks of line breaks or tabs (a flood
    of blank lines still costs a little); ``cjk_common`` are ideographs in
    `COMMON_CJK`, ``cjk_other`` the rest; ``symbols`` are other non-ASCII
    characters in the basic plane (CJK and fullwidth punctuation, arrows, box
    drawing) but for ``symbol_rulers``, the characters in runs of four or more
    of one box-drawing or dash symbol (``━━━━``); ``astral`` are characters
    beyond the basic plane (mostly emoji). ``rare_words`` are ASCII words
    (camelCase split as the tokenizer splits it) that are not one
    ``o200k_base`` token, and ``rare_word_letters`` their letters; ``cjk_runs``
    are runs of ideographs; ``cjk_rare_pairs`` are adjacent ideographs that
    appear together in no ``o200k_base`` token (they cannot merge);
    ``byte_chars`` are characters no token holds whole.

    Raises:
        TokenizerError: the word table shipped with the package is missing or corrupt.
    """
    raw = text.encode("utf-8", "surrogatepass")
    m = raw.translate(_TABLE, _CONTINUATION)
    flags = int.from_bytes(m.translate(_FLAGS), "big")
    ones = int.from_bytes(b"\x01" * len(m), "big")
    lower = flags & ones
    upper = flags >> 1 & ones
    letters = flags >> 2 & ones
    digits = flags >> 3 & ones
    punct = flags >> 4 & ones
    quotes = flags >> 5 & ones
    punct_or_quote = punct | quotes
    spaces = flags >> 6 & ones
    newlines = flags >> 7 & ones
    n_lower = lower.bit_count()
    n_upper = upper.bit_count()
    long_blocks = raw.translate(_RULERS).count(_LONG)
    cjk = m.count(b"C")
    cjk_marks = m.count(b"J")
    kana = cjk_punct = common = cjk_runs = known_pairs = byte_chars = rulers = 0
    letter_counts = _NO_LETTERS
    if len(raw) != len(text):
        if letters.bit_count() > n_lower + n_upper:
            # Counted among the other alphabets' letters alone, a much shorter string.
            others = m.translate(None, _NOT_OTHER_LETTERS)
            letter_counts = tuple(map(others.count, _LETTER_CLASSES))
        # The non-ASCII characters alone, runs joined by NUL (no pair or class holds it).
        non_ascii = b"\0".join(raw.translate(_NON_ASCII).split())
        chars = non_ascii.decode("utf-8", "surrogatepass")
        if cjk_marks:
            cjk_punct = non_ascii.count(_CJK_PUNCT_LEAD)
            if cjk_punct < cjk_marks:
                kana = _KANA.subn("", chars)[1]
        byte_chars = _BYTE_CHARS.subn("", chars)[1]
        rulers = len(chars) - len(_SYMBOL_RULERS.sub("", chars))
        if cjk or cjk_marks:
            byte_chars += _CJK_BYTE_CHARS.subn("", chars)[1]
        if cjk:
            common, known_pairs = _cjk(chars)
            ideographs = int.from_bytes(m.translate(_IDEOGRAPHS), "big")
            cjk_runs = _runs(ideographs, cjk)
    rare_words, rare_letters = _rare_words(raw)
    n_digits = digits.bit_count()
    return (
        _runs(letters),
        n_lower,
        n_upper,
        (lower & upper << 8).bit_count(),
        *letter_counts,
        n_digits,
        _runs(digits, n_digits),
        # o200k_base cuts a run of n digits into ceil(n / 3) tokens: runs + triples is within one.
        m.translate(_DIGITS).count(b"xxx"),
        punct.bit_count() - 8 * long_blocks,
        _runs(punct_or_quote),
        long_blocks,
        m.count(b"u"),
        (quotes & punct << 8).bit_count(),
        (spaces & punct_or_quote << 8).bit_count(),
        (punct_or_quote & spaces << 8).bit_count(),
        _runs(newlines),
        (spaces & ~(spaces >> 8) & spaces << 8).bit_count(),
        sum(map(raw.count, _LONG_BLANKS)),
        (spaces & digits << 8).bit_count(),
        common,
        # Bopomofo, CJK strokes and the rare ideographs of U+3400-3FFF cost like rare ideographs.
        cjk - common + cjk_marks - kana - cjk_punct,
        kana,
        m.count(b"H"),
        m.count(b"Y") + cjk_punct - rulers,
        m.count(b"E"),
        rare_words,
        rare_letters,
        cjk_runs,
        cjk - cjk_runs - known_pairs,
        byte_chars,
        rulers,
    )


def estimate(text: str) -> float:
    """The estimator's raw (unrounded, unscaled) token estimate for ``text``.

    Each kind of text (prose, code, JSON, CJK, other languages) has its own
    coefficient set; a softmax gate on the feature densities (counts per
    character) weighs the kinds, so mixed text gets a blend rather than a
    switch. Parameters are in ``agentcontext/tokens/_estimate_params.py``.

    Raises:
        TokenizerError: the word table shipped with the package is missing or corrupt.
    """
    if not text:
        return 0.0
    f = features(text)
    # Only the features present take part: an absent one adds nothing to an
    # expert, and its (constant) share of each gate logit is in `_GATE_BASE`.
    present = list(compress(_POSITIONS, f))
    if not present:  # spaces alone: the caller's floor of one token is right
        return 0.0
    values = list(compress(f, f))
    inv = 1.0 / len(text)
    z = []
    for x, i in zip(values, present, strict=True):
        v = (x * inv - MEAN[i]) * _INV_STD[i]
        z.append((Z_CLIP if v > Z_CLIP else -Z_CLIP if v < -Z_CLIP else v) - _Z_ABSENT[i])
    pick = itemgetter(*present, present[0])  # two at least, so it always returns a tuple
    logits = [b + sum(map(mul, pick(row), z)) for row, b in zip(GATE, _GATE_BASE, strict=True)]
    top = max(logits)
    weights = [math.exp(v - top) for v in logits]
    per_kind = [sum(map(mul, pick(row), values)) for row in EXPERTS]
    blend: float = sum(map(mul, weights, per_kind))
    return blend / sum(weights)


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
        # Rounded to nearest (half down), not up: rounding up would add half a token to
        # every text, +1% on a short message, on top of the fit's deliberate margin.
        return max(1, math.ceil(estimate(text) * self._scale - 0.5))
