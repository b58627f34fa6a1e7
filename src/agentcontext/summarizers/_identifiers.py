"""Identifiers a summary must not lose: file paths, URLs, ids and hashes, numbers with units, error names.

A summary that says "fixed the bug in the parser" is useless to an agent that
next needs ``src/parser/lexer.py``, ``ValueError`` or reservation ``8JX2WO``.
`extract_identifiers` finds such strings so the summarize strategy can check
that a summary kept them (and re-prompt listing the ones it lost), and so the
extractive summarizer can carry them over. Matching is literal: an identifier
counts as kept when the exact string appears in the summary.

>>> extract_identifiers("ValueError in src/app/main.py line 3, see https://x.io/a; took 250 ms")
['https://x.io/a', 'src/app/main.py', 'ValueError', '250 ms']
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

__all__ = ["IdentifierKind", "classify_identifier", "extract_identifiers", "missing_identifiers"]

IdentifierKind = str
"""One of ``"url"``, ``"path"``, ``"error"``, ``"id"``, ``"quantity"``, ``"date"``."""

_URL = re.compile(r"\bhttps?://[^\s<>\"'`()\[\]{}]+")
_EXT = (
    "py|pyi|ipynb|js|mjs|cjs|jsx|ts|tsx|json|jsonl|md|rst|txt|yaml|yml|toml|cfg|ini|conf|lock|rs|go|java|kt|"
    "c|cc|cpp|h|hpp|cs|rb|php|swift|scala|sh|bash|zsh|ps1|bat|html|htm|css|scss|sql|xml|csv|tsv|log|"
    "env|dockerfile|gradle|proto|graphql|vue|svelte|lua|r|pl|ex|exs|dart|zig|tf|pem|patch|diff|pdf|png|jpg|jpeg|"
    "gif|svg|zip|tar|gz|whl|so|dll|exe|db|sqlite|parquet"
)
# A path has a slash between name characters (a/b, ./a, /etc/x, ~/x) or is a bare
# file name with a known extension (setup.py). Dates (1/2) and fractions are not
# paths: at least one letter must appear.
_PATH = re.compile(
    r"(?<![\w/.:@-])"
    r"(?:~|\.{1,2})?/?(?:[A-Za-z0-9_.@+-]+/)+[A-Za-z0-9_.@+-]*[A-Za-z0-9_+-]"
    r"|(?<![\w/.@-])[A-Za-z0-9_@+-][A-Za-z0-9_.@+-]*\.(?:" + _EXT + r")(?![\w/])",
    re.IGNORECASE,
)
_HAS_EXT = re.compile(r"\.(?:" + _EXT + r")$", re.IGNORECASE)
_ERROR = re.compile(r"\b[A-Z][A-Za-z0-9]*(?:Error|Exception|Warning|Exit|Interrupt|Fault)\b")
_CODE = re.compile(r"\b[A-Z]{1,4}-?\d{3,6}\b")  # E1234, TS2304, PGH003, CVE-style codes
_UUID = re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b")
_HEX = re.compile(r"\b[0-9a-f]{7,64}\b")
# Upper-case ids mixing letters and digits: booking codes (8JX2WO), flight numbers
# (HAT170), ticket keys. Five characters at least, so UTF8 or H2O do not count.
_UPPER_ID = re.compile(r"(?<![\w:-])(?=[A-Z0-9]*[0-9])(?=[A-Z0-9]*[A-Z])[A-Z0-9]{5,20}\b")
_ISSUE = re.compile(r"(?<![\w#])#\d{2,7}\b")
_DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2})?)?\b")
_UNIT = (
    r"%|ms|µs|us|ns|s|sec|secs|seconds?|min|mins|minutes?|h|hrs?|hours?|days?|weeks?|months?|years?|"
    r"[kKMGT]i?B|bytes?|[kKMG]b(?:ps)?|tokens?|lines?|chars?|characters?|px|pt|em|rem|dpi|fps|Hz|kHz|MHz|GHz|"
    r"mm|cm|km|kg|g|mg|lbs?|°C|°F|USD|EUR|GBP|CNY|RMB|JPY|元|美元|人民币|块|个|次|秒|分钟|小时|天|年|月|周|公里|千克|岁"
)
_QUANTITY = re.compile(
    r"(?<![\w.])(?:[$€£¥]\s?\d[\d,]*(?:\.\d+)?"
    r"|\d[\d,]*(?:\.\d+)?\s?(?:" + _UNIT + r"))(?![A-Za-z0-9])"
)

_TRAILING = ".,;:!?)]}'\"`>"


def _clean(token: str) -> str:
    return token.rstrip(_TRAILING)


def extract_identifiers(text: str) -> list[str]:
    """The identifiers in ``text``, each once, in a stable order (URLs, paths, errors, ids, quantities).

    Overlaps are resolved in that order: a path inside a URL is not reported
    again, nor a hash inside a path. Results are cached (bounded, by text), since
    every compaction looks at the same messages again.
    """
    return list(_extract_cached(text))


@functools.lru_cache(maxsize=8192)
def _extract_cached(text: str) -> tuple[str, ...]:
    return tuple(_extract(text))


def _extract(text: str) -> list[str]:
    found: dict[str, None] = {}
    taken: list[tuple[int, int]] = []

    def covered(start: int, end: int) -> bool:
        return any(a <= start and end <= b for a, b in taken)

    def add(pattern: re.Pattern[str], *, span_only: bool = False, check: bool = True) -> None:
        for m in pattern.finditer(text):
            value = _clean(m.group(0))
            start, end = m.start(), m.start() + len(value)
            if len(value) < 3 or (check and covered(start, end)):
                continue
            taken.append((start, end))
            if not span_only:
                found.setdefault(value, None)

    add(_URL, check=False)
    add(_PATH)
    add(_ERROR)
    add(_UUID)
    add(_DATE)
    add(_CODE)
    add(_UPPER_ID)
    add(_ISSUE)
    for m in _HEX.finditer(text):
        value = m.group(0)
        if covered(m.start(), m.end()) or value.isdigit() or value.isalpha():
            continue
        taken.append((m.start(), m.end()))
        found.setdefault(value, None)
    add(_QUANTITY)
    return [v for v in found if not _is_noise(v)]


def _is_noise(value: str) -> bool:
    if "/" in value and "://" not in value:
        if not any(c.isalpha() for c in value):
            return True
        # A relative path without a file extension and with only two parts is
        # usually prose or a formula ("and/or", "HB/0", "beta/2"), not a path.
        rooted = value.startswith(("/", "./", "../", "~/"))
        parts = [p for p in value.split("/") if p]
        if not rooted and len(parts) < 3 and not value.endswith("/") and not _HAS_EXT.search(value):
            return True
    return False


def classify_identifier(value: str) -> IdentifierKind:
    """The kind of an identifier found by `extract_identifiers` (for reports and ordering)."""
    if _URL.fullmatch(value):
        return "url"
    if _ERROR.fullmatch(value):
        return "error"
    if _DATE.fullmatch(value):
        return "date"
    if _QUANTITY.fullmatch(value):
        return "quantity"
    if "/" in value or _PATH.fullmatch(value):
        return "path"
    return "id"


def missing_identifiers(identifiers: Iterable[str], texts: Iterable[str]) -> list[str]:
    """The identifiers that appear in none of ``texts`` (literal, case-sensitive match), in input order."""
    haystack = "\n".join(texts)
    return [i for i in identifiers if i not in haystack]
