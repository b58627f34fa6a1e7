"""What the integrations share: a bounded mapping for what they remember, and saying what the engine did."""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Iterator, MutableMapping, Sequence
from typing import TypeVar, overload

from .._report import Report
from ..cli._reporting import describe_fallback, fallbacks, summary_line
from ..messages import Message

__all__ = ["LRU", "Weight", "log_report"]

_K = TypeVar("_K")
_V = TypeVar("_V")
_T = TypeVar("_T")
_MISSING = object()


class LRU(MutableMapping[_K, _V]):
    """A dict that forgets its least recently used entries past ``size`` entries, or past ``max_weight`` in
    all when weighed (`weigh`); ``evicted`` is told of each."""

    def __init__(
        self, size: int, evicted: Callable[[_V], None] | None = None, *, max_weight: int | None = None
    ) -> None:
        self._data: OrderedDict[_K, _V] = OrderedDict()
        self._size = size
        self._evicted = evicted
        self._max_weight = max_weight
        self._weights: dict[_K, int] = {}
        self.weight = 0
        """The weights of the entries, in all."""

    def __getitem__(self, key: _K) -> _V:
        value = self._data[key]
        self._data.move_to_end(key)
        return value

    @overload
    def get(self, key: _K, default: None = None) -> _V | None: ...
    @overload
    def get(self, key: _K, default: _V | _T) -> _V | _T: ...
    def get(self, key: _K, default: object = None) -> object:
        """The value of ``key`` (now the most recently used), else ``default``."""
        value = self._data.get(key, _MISSING)
        if value is _MISSING:
            return default
        self._data.move_to_end(key)
        return value

    def __setitem__(self, key: _K, value: _V) -> None:
        self._data[key] = value
        self._data.move_to_end(key)
        while len(self._data) > self._size:
            self._evict()

    def __delitem__(self, key: _K) -> None:
        del self._data[key]
        self.weight -= self._weights.pop(key, 0)

    def weigh(self, key: _K, weight: int) -> None:
        """Set ``key``'s weight; the least recently used other entries go while the whole is over the limit."""
        self.weight += weight - self._weights.get(key, 0)
        self._weights[key] = weight
        while (
            self._max_weight is not None and self.weight > self._max_weight and next(iter(self._data)) != key
        ):
            self._evict()

    def _evict(self) -> None:
        key, old = self._data.popitem(last=False)
        self.weight -= self._weights.pop(key, 0)
        if self._evicted is not None:
            self._evicted(old)

    def __iter__(self) -> Iterator[_K]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)


def log_report(logger: logging.Logger, where: str, report: Report) -> None:
    """What the engine did to one request, on ``logger``: a repair of the client's history as a warning
    naming every repair (the provider would have refused the request, and the client's bug is worth
    seeing), a compaction as one info line, a summarizer that gave way as a warning; nothing when the
    request needed nothing. ``where`` opens each line (which request of which conversation)."""
    if not report.actions:
        return
    repairs = [a.reason for a in report.actions if a.kind == "repaired"]
    if repairs:
        logger.warning("%s: its history was repaired before it was sent: %s", where, "; ".join(repairs))
    if report.compacted:
        logger.info(
            "%s: %s -> %s tokens (budget %s, level %s): %s",
            where,
            f"{report.tokens_before:,}",
            f"{report.tokens_after:,}",
            f"{report.budget:,}",
            report.final_level.label,
            summary_line(report),
        )
    for action in fallbacks(report.actions):
        logger.warning("%s: %s", where, describe_fallback(action))


class Weight:
    """About how much memory an integration holds for one conversation, in bytes, kept up to date in O(new).

    The client's items or dicts, their canonical messages and the engine's state come to about four bytes a
    character of history (measured on the LiteLLM hook and the Agents SDK filter). Ids are chained (each
    derived from the ones before), so a history whose last weighed message is still in place only grew.
    """

    def __init__(self) -> None:
        self._n, self._last, self._total = 0, "", 0

    def of(self, messages: Sequence[Message]) -> int:
        """The weight of ``messages`` (what is new since the last call added, or all of it after a rewrite)."""
        n, total = self._n, self._total
        if n > len(messages) or (n and messages[n - 1].id != self._last):
            n, total = 0, 0
        for m in messages[n:]:
            total += 4 * (len(m.text) + sum(len(c.arguments) + len(c.name) for c in m.tool_calls)) + 512
        self._n, self._last, self._total = len(messages), messages[-1].id if messages else "", total
        return total
