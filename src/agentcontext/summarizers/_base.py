"""The `Summarizer` protocol: turns a `SummaryRequest` into summary text, sync or async."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from ..compaction import SummaryRequest

__all__ = ["Summarizer"]


@runtime_checkable
class Summarizer(Protocol):
    """Writes a summary of a request's messages.

    A `SummaryRequest` carries everything a summary needs: the messages to
    summarize (tool calls with their arguments, tool results), the previous
    summary to integrate (incremental summaries), the user's current request,
    extra instructions from the strategy (such as identifiers an earlier attempt
    left out) and the most tokens the summary may take.

    Implement both methods; agentcontext's summarizers share one implementation
    between them (an HTTP exchange generator driven by a sync or an async
    client; the extractive one does no I/O). Raise on failure, with a
    `agentcontext.exceptions.SummarizerError` when you can: the engine then falls
    back to the next tier and reports why. Never return an error message as if
    it were a summary.
    """

    def summarize(self, request: SummaryRequest) -> str:
        """Return the summary text (raise on failure; the engine falls back and reports it)."""
        ...

    async def asummarize(self, request: SummaryRequest) -> str:
        """Async twin of `summarize`."""
        ...
