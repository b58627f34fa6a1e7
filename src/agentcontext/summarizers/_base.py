"""The `Summarizer` protocol: turns a `SummaryRequest` into summary text, sync or async."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from ..strategies._base import SummaryRequest

__all__ = ["Summarizer", "SummaryRequest"]


@runtime_checkable
class Summarizer(Protocol):
    """Writes a summary of a request's messages.

    Both methods share one implementation in every summarizer agentcontext
    ships (a generator of HTTP requests driven by a sync or an async client).
    """

    def summarize(self, request: SummaryRequest) -> str:
        """Return the summary text (raise on failure; the engine falls back and reports it)."""
        ...

    async def asummarize(self, request: SummaryRequest) -> str:
        """Async twin of `summarize`."""
        ...
