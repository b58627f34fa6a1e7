"""`ExtractiveSummarizer`: an offline, deterministic summary in the ``state_snapshot`` sections.

A summary that counts messages tells an agent nothing. This one keeps what an
agent needs to carry on, copied from the messages rather than paraphrased: the user's goal and requests verbatim (shortened when huge), the
files and records changed (from tool-call arguments), the commands run with
their outcome (exit code, error line, a test run's counts), the errors seen,
the identifiers and code names met (a compact index, each once, ranked by
where they were met), and the last state. It fits whatever token budget it is
given, choosing by priority, and integrates a previous summary it wrote (or
another writer's, whose words it keeps) instead of starting over.

The work is split by concept: `_builder` reads the messages into a state,
`_ranking` orders the identifiers, `_render` writes the snapshot within the
budget, `_snapshot` is the format and `_commands` reads what a tool call did.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal

from ..compaction import SummaryRequest, kind_of
from ..exceptions import ConfigError
from ..tokens._base import TokenCounter
from ._builder import collect
from ._render import Quotas, render
from ._snapshot import ZH_TAGS, parse_snapshot
from ._transcript import Language, detect_language

__all__ = ["ExtractiveSummarizer", "parse_snapshot"]


def _estimate(text: str) -> int:
    # Conservative without a tokenizer: about 3 UTF-8 bytes per token overcounts
    # English (~4 characters a token) and Chinese (~0.7 tokens a character) alike,
    # so the summary stays within its budget by any real count.
    return (len(text.encode("utf-8")) + 2) // 3


@dataclass(frozen=True, kw_only=True)
class ExtractiveSummarizer:
    """An offline, deterministic summarizer: no model, no I/O, the same output for the same input.

    The default when no LLM summarizer is configured. Its summary uses the
    ``state_snapshot`` sections (goal, user requirements, key knowledge,
    artifact trail, file-system state, recent actions, task state), with
    headings in the conversation's main language (a Chinese conversation gets
    Chinese headings). What does not fit the budget is chosen by priority: the
    goal, the last step and the latest test run first, then the user's
    requests, an earlier summary another writer (an LLM) wrote (up to half the
    room), the commands that failed with their error, other errors, what the
    agent changed (files; records changed by tools such as ``update_...``), an
    index of the identifiers and code names the task touched, the files read,
    then the rest of the index and the other commands.

    The index lists each identifier once, not repeating what the sections
    show, the longest form of a path standing for its shorter forms; ``ids``
    (paths, URLs, error names, ids, numbers) and ``names`` (code symbols in
    any case style, dotted names, terms a Chinese text marks) are ranked by
    where they were met: what the user wrote, what the agent's tool calls acted
    on, errors, the agent's own words, and last what tool output listed, of
    which noise is left out (durations, percentages, dates, hashes nobody used,
    licence links, the code names of files only read). Identifiers of an
    earlier summary keep their rank, so re-summarizing does not push out what
    the task touched.

    Args:
        counter: counts tokens to fit the budget; None uses a conservative
            estimate (about three UTF-8 bytes a token), which leaves the summary
            smaller than it could be. The engine passes its own counter.
        max_tokens: the budget when the request gives none. Default 2,000.
        goal_tokens: the user's first request is quoted up to this many tokens
            (head and tail kept beyond). Default 400.
        request_tokens: each later request is quoted up to this many. Default 150.
        state_tokens: the last assistant message, up to this many. Default 200.
        language: ``"auto"`` (default) detects it from the user's and assistant's text.
    """

    calls_model: ClassVar[bool] = False
    """No model call: the engine summarizes before masking with it, and uses it for cooldown updates."""

    counter: TokenCounter | None = field(default=None, repr=False, compare=False)
    max_tokens: int = 2000
    goal_tokens: int = 400
    request_tokens: int = 150
    state_tokens: int = 200
    language: Literal["auto", "en", "zh"] = "auto"

    def __post_init__(self) -> None:
        for name in ("max_tokens", "goal_tokens", "request_tokens", "state_tokens"):
            value = getattr(self, name)
            if value < 16:
                raise ConfigError(f"ExtractiveSummarizer.{name} must be at least 16, got {value}")
        if self.language not in ("auto", "en", "zh"):
            raise ConfigError(
                f"ExtractiveSummarizer.language must be 'auto', 'en' or 'zh', got {self.language!r}"
            )

    # ------------------------------------------------------------------ the Summarizer protocol

    def summarize(self, request: SummaryRequest) -> str:
        """The summary of ``request``, within ``request.max_tokens`` (or ``max_tokens``)."""
        lang = self._language(request)
        state = collect(request, lang)
        budget = request.max_tokens if request.max_tokens is not None else self.max_tokens
        quotas = Quotas(goal=self.goal_tokens, request=self.request_tokens, state=self.state_tokens)
        return render(state, lang, max(budget, 1), quotas, self._count)

    async def asummarize(self, request: SummaryRequest) -> str:
        """Same as `summarize` (no I/O to wait for)."""
        return self.summarize(request)

    # ------------------------------------------------------------------ helpers

    def _count(self, text: str) -> int:
        return self.counter.count_text(text) if self.counter is not None else _estimate(text)

    def _language(self, request: SummaryRequest) -> Language:
        if self.language != "auto":
            return self.language
        if any(
            m.role in ("user", "assistant") and kind_of(m) is None and m.text.strip()
            for m in request.messages
        ):
            return detect_language(request.messages)
        # Only tool output and summaries: keep the language of the summaries.
        earlier = (request.previous_summary or "") + "".join(
            m.text for m in request.messages if kind_of(m) == "summary"
        )
        return "zh" if ZH_TAGS.search(earlier) else "en"
