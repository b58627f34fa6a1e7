"""What the OpenAI-compatible and Anthropic summarizers share: settings, bounds, prompt, checks on the reply."""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cache
from types import MappingProxyType
from typing import NamedTuple

from ..compaction import SummaryRequest
from ..exceptions import ConfigError, SummarizerError, SummarizerTimeout, UnusableSummaryError
from ..messages import JSONValue
from ._http import (
    Exchange,
    HttpRequest,
    HttpResponse,
    RetryableReply,
    RetryPolicy,
    exchange,
    run_async,
    run_sync,
)
from ._prompts import PromptName, PromptTemplate, SummaryStructure, build_prompt, get_prompt
from ._snapshot import TAGS

__all__ = ["LLMSummarizerBase", "SummaryProblem", "clean_summary", "structured_summary", "summary_problem"]

_REASONING = re.compile(r"<(think|thinking|scratchpad)>.*?</\1>\s*", re.S | re.I)
_UNCLOSED_REASONING = re.compile(r"^\s*<(think|thinking)>.*", re.S | re.I)

_REASONING_MODEL = re.compile(r"(?:^|/)(?:o\d|gpt-5)", re.I)
"""OpenAI's reasoning models by name (o1, o3-mini, o4-mini, gpt-5, gpt-5-mini, ``azure/o3``...): they reject
``temperature`` and ``max_tokens``, and their hidden reasoning counts against the output limit."""

REASONING_HEADROOM = 8192
"""Output tokens allowed beyond the summary's room for a reasoning model (`LLMSummarizerBase.reasoning_headroom`)."""


def reasoning_model(model: str) -> bool:
    """True for a model name of OpenAI's reasoning models (``o3-mini``, ``gpt-5``, ``openai/o4-mini``...)."""
    return _REASONING_MODEL.search(model) is not None


RESPONSE_BYTES_PER_TOKEN = 32
"""Reply bytes allowed per output token: JSON-escaped CJK (6 bytes a character) or emoji (12) with room
to spare; a summary needs nowhere near this much."""
MIN_RESPONSE_BYTES = 128 * 1024
"""The least reply size cap, whatever the output limit (the JSON envelope, usage, a short summary)."""


def clean_summary(text: str) -> str:
    """Strip reasoning blocks (``<think>``, ``<scratchpad>``) some models put before the answer."""
    text = _REASONING.sub("", text)
    text = _UNCLOSED_REASONING.sub("", text)  # a reasoning block cut off: nothing usable after it
    return text.strip()


# ----------------------------------------------------------------------------- is it a summary?


_PROMPT_ALLOWANCE = 2_048
"""Tokens of a summary request that are not the history: the template's instructions, a previous summary's
frame, the current request's excerpt."""


class SummaryProblem(NamedTuple):
    """Why a model's text is not a usable summary."""

    reason: str
    """One line saying what the text is (a refusal, an HTML page...), with a short quote."""
    retryable: bool
    """True when asking again may help (a gateway's error page); False for a refusal."""


# A refusal or apology opens the reply. Summaries do not start this way: they describe the
# conversation ("The user asked...", "## Goal", "<state_snapshot>"), not the model's own stance.
# Strong openers (an apology, "As an AI") reject a short reply outright; weak ones ("I cannot")
# only with what they decline in the same sentence ("I cannot help with that").
_APOLOGY = re.compile(
    r"""^[\W_]*(?:
        (?:i'm|im|i\s+am)\s+(?:so\s+|very\s+|really\s+|truly\s+|terribly\s+)?sorry\b
      | sorry\b(?!-)
      | (?:my\s+)?apologies\b
      | i\s+(?:sincerely\s+|do\s+)?apologi[sz]e\b
      | unfortunately,?\s+(?:i|as\s+an?)\b
      | as\s+an?\s+(?:ai|artificial\s+intelligence|(?:large\s+)?language\s+model|llm)\b
      | (?:很|非常|十分)?(?:抱歉|对不起|對不起)
      | 作为(?:一个|一名)?(?:AI|人工智能|语言模型)
      | 申し訳|すみません
    )""",
    re.I | re.X,
)
_DECLINE = re.compile(
    r"""^[\W_]*(?:
        i\s+(?:cannot|can't|can\s+not|won't|will\s+not|must\s+decline|have\s+to\s+decline|am\s+unable
            |am\s+not\s+able|do\s+not\s+feel\s+comfortable|don't\s+feel\s+comfortable|refuse)\b
      | i'm\s+(?:unable|not\s+able|afraid|not\s+comfortable)\b
      | 我(?:无法|不能|無法)
    )""",
    re.I | re.X,
)
# What a refusal declines.
_REFUSAL_OBJECT = re.compile(
    r"(?:\b(?:help|assist|comply|fulfil+|provide|produce|summari[sz]e|complete|continue|create|generate|do)\b"
    r".{0,60}\b(?:that|this|it|request|task|summary|conversation|content|with)\b)|帮助|协助|提供|总结|完成",
    re.I | re.S,
)
_SHORT = 600
"""Characters under which a reply that opens with an apology is taken for a refusal."""
_HTML = re.compile(r"^\s*<(?:!doctype\s+html|html|head|body)\b", re.I)
_TRACEBACK = re.compile(r"^\s*Traceback \(most recent call last\):")
# A gateway's or server's error text in place of a completion (checked on short one-line replies only).
_ERROR_TEXT = re.compile(
    r"""^[\W_]*(?:
        (?:error|exception|fatal)\s*(?:[:\[(\#-]|\d{3}\b)
      | an\s+(?:internal\s+)?error\s+(?:has\s+)?occurred | something\s+went\s+wrong
      | internal\s+server\s+error | bad\s+gateway | service\s+(?:temporarily\s+)?unavailable
      | gateway\s+time-?out | upstream\s+(?:connect\s+)?(?:error|timed\s+out|request\s+timeout)
      | too\s+many\s+requests | rate\s+limit(?:ed|\s+exceeded|\s+reached)\b | request\s+timed\s+out
      | (?:http/\d(?:\.\d)?\s+)?[45]\d\d\s+(?:bad|not|internal|service|gateway|too|forbidden|unauthori[sz]ed
            |request|payload|unprocessable|method|conflict)\b
      | (?:null|none|undefined|nan)\s*$
    )""",
    re.I | re.X,
)
_ERROR_TEXT_MAX = 300
_ERROR_KEYS = frozenset({"error", "message", "detail", "code", "status", "type", "statusCode", "title"})


def _quote(text: str, limit: int = 80) -> str:
    flat = " ".join(text.split())
    return repr(flat if len(flat) <= limit else flat[:limit] + "…")


def _json_error(text: str) -> bool:
    """A JSON object shaped like an API error (``{"error": ...}``, ``{"detail": "..."}``, ``{"message", "code"}``)."""
    if not text.startswith("{"):
        return False
    try:
        value = json.loads(text)
    except ValueError:
        return False
    if not isinstance(value, dict) or not value or not set(value) <= _ERROR_KEYS:
        return False
    return "error" in value or "detail" in value or ("message" in value and len(value) > 1)


def summary_problem(text: str) -> SummaryProblem | None:
    """Why ``text`` is not a usable summary (empty, a refusal, an apology, an error message), or None.

    Checked on what the model wrote after `clean_summary`: an empty text, a
    refusal or apology (``"I'm sorry, I cannot help with that."``, ``"As an
    AI..."``), an HTML page, a JSON error object, a traceback, or a gateway's
    error line (``"502 Bad Gateway"``) are rejected. An apology ("I'm sorry",
    "As an AI") rejects a short reply (under 600 characters) outright, a longer
    one when its first sentence says what it declines; "I cannot..." rejects a
    reply only with what it declines ("I cannot help with that"), so a real
    summary that starts "I cannot reproduce the failure yet" is kept.

    >>> summary_problem("I'm sorry, but I can't help with that.").reason.startswith("a refusal")
    True
    >>> summary_problem("<state_snapshot><overall_goal>Fix the parser</overall_goal></state_snapshot>") is None
    True
    """
    text = text.strip()
    if not text:
        return SummaryProblem("the reply was empty", True)
    flat = text.replace("\u2019", "'").replace("\u2018", "'")
    apology, decline = _APOLOGY.match(flat), _DECLINE.match(flat)
    if apology or decline:
        first = re.split(r"(?<=[.!?。！？；;])\s*|\n", flat, maxsplit=1)[0][:300]
        if (apology and len(flat) < _SHORT) or _REFUSAL_OBJECT.search(first):
            return SummaryProblem(f"a refusal, not a summary: {_quote(text)}", False)
    if _HTML.match(text):
        return SummaryProblem(f"an HTML page, not a summary: {_quote(text)}", True)
    if _TRACEBACK.match(text):
        return SummaryProblem(f"a traceback, not a summary: {_quote(text)}", True)
    if _json_error(text):
        return SummaryProblem(f"a JSON error object, not a summary: {_quote(text)}", True)
    if len(text) <= _ERROR_TEXT_MAX and "\n" not in text and _ERROR_TEXT.match(text):
        return SummaryProblem(f"an error message, not a summary: {_quote(text)}", True)
    return None


# ----------------------------------------------------------------------------- does it have the structure?


# Other names a tag may take: the Chinese tags of the snapshot format (`_snapshot.TAGS`), which the
# offline summary writes for a Chinese conversation and a model asked to write Chinese may use too,
# and Gemini CLI's name for the plan (a model that knows its prompt may write it).
_ALIASES: dict[str, tuple[str, ...]] = {
    tag: tuple(lang[tag] for lang in TAGS.values() if lang[tag] != tag) for tag in TAGS["en"]
}
_ALIASES["task_state"] += ("current_plan",)


@cache
def _tags(name: str) -> re.Pattern[str]:
    """Opening (group 1 empty), closing (group 1 ``/``) and self-closing (group 2 ``/``) tags of ``name``."""
    names = "|".join(re.escape(n) for n in (name, *_ALIASES.get(name, ())))
    return re.compile(rf"<(/?)\s*(?:{names})(?:\s+[^<>]*?)?\s*(/?)>", re.I)


def structured_summary(text: str, structure: SummaryStructure) -> str | SummaryProblem:
    """``text`` cut to the XML ``structure`` asks for, or why it does not have it.

    What the reply must hold: when ``structure.root`` is set, one element of that
    name, opened and closed (a mention of its opening tag in a preamble aside);
    inside it (or in the whole reply, without a root) each section present opened
    and closed in turn, never overlapping another, and every required section
    with some text. Sections left out are fine; text inside a section is not
    parsed (a summary may quote ``a < b && c`` or ``List<String>``). Returned: the
    root element (or the span of the sections), without what surrounds it (a
    preamble such as "Here is the snapshot:", a code fence, a closing remark).

    >>> from agentcontext.summarizers import get_prompt
    >>> snapshot = get_prompt("state_snapshot").structure
    >>> structured_summary("```xml\\n<state_snapshot><overall_goal>Fix the parser</overall_goal>"
    ...                    "<task_state>[TODO] rerun</task_state></state_snapshot>\\n```", snapshot)
    '<state_snapshot><overall_goal>Fix the parser</overall_goal><task_state>[TODO] rerun</task_state></state_snapshot>'
    >>> structured_summary("Sure! The user wants a parser fix.", snapshot).reason
    "no <state_snapshot> element: 'Sure! The user wants a parser fix.'"
    """
    start, end = 0, len(text)
    element: tuple[int, int] | None = None
    if structure.root is not None:
        found = _root(text, structure.root)
        if isinstance(found, SummaryProblem):
            return found
        element, (start, end) = found
    spans: list[tuple[int, int, str]] = []
    filled: set[str] = set()
    for section in structure.sections:
        parts = _section(text, section, start, end)
        if isinstance(parts, SummaryProblem):
            return parts
        spans.extend((a, b, section) for a, b, _ in parts)
        if any(text_ for _, _, text_ in parts):
            filled.add(section)
    spans.sort()
    for (_, end_a, a), (start_b, _, b) in zip(spans, spans[1:], strict=False):
        if start_b < end_a:
            return SummaryProblem(f"<{b}> starts inside <{a}>: sections must not overlap", False)
    missing = [f"<{s}>" for s in structure.required if s not in filled]
    if missing:
        return SummaryProblem(f"{' and '.join(missing)} missing or empty: {_quote(text[start:end])}", False)
    first, last = element or (spans[0][0], spans[-1][1])
    return text[first:last]


def _root(text: str, root: str) -> tuple[tuple[int, int], tuple[int, int]] | SummaryProblem:
    """The span of the one ``root`` element in ``text`` and the span of its content, or what is wrong."""
    tags = list(_tags(root).finditer(text))
    closes = [m for m in tags if m.group(1)]
    opens = [m for m in tags if not m.group(1) and not m.group(2)]
    if not opens and not closes:
        return SummaryProblem(f"no <{root}> element: {_quote(text)}", False)
    if not closes:
        return SummaryProblem(f"<{root}> is not closed: {_quote(text[opens[-1].start() :])}", False)
    if len(closes) > 1:
        return SummaryProblem(f"{len(closes)} <{root}> elements where one was asked for", False)
    close = closes[0]
    before = [m for m in opens if m.end() <= close.start()]
    if not before:
        return SummaryProblem(f"</{root}> without <{root}>: {_quote(text)}", False)
    if len(before) < len(opens):
        return SummaryProblem(
            f"a second <{root}> is not closed: {_quote(text[opens[len(before)].start() :])}", False
        )
    # An earlier opening tag is a mention in a preamble ("Here is the <state_snapshot>:"), not the element.
    return (before[-1].start(), close.end()), (before[-1].end(), close.start())


def _section(text: str, section: str, start: int, end: int) -> list[tuple[int, int, bool]] | SummaryProblem:
    """Each occurrence of ``section`` in ``text[start:end]`` (its span, and whether it holds text), or what is wrong."""
    parts: list[tuple[int, int, bool]] = []
    opened: re.Match[str] | None = None
    for m in _tags(section).finditer(text, start, end):
        closing, empty = bool(m.group(1)), bool(m.group(2))
        if opened is None and empty:  # <section/>: there, and empty
            parts.append((m.start(), m.end(), False))
        elif opened is None and not closing:
            opened = m
        elif opened is not None and closing:
            parts.append((opened.start(), m.end(), bool(text[opened.end() : m.start()].strip())))
            opened = None
        else:
            what = "opened again before it was closed" if opened is not None else "closed but never opened"
            return SummaryProblem(f"<{section}> is {what}: {_quote(text[m.start() :])}", False)
    if opened is not None:
        return SummaryProblem(f"<{section}> is not closed: {_quote(text[opened.start() : end])}", False)
    return parts


def _correction(structure: SummaryStructure, problem: SummaryProblem) -> str:
    """The instruction added when the model is asked again for a reply that lacked ``structure``."""
    within = f"one <{structure.root}> element" if structure.root else "the sections"
    required = " and ".join(f"<{s}>" for s in structure.required)
    return (
        f"Your previous answer was not in the required format ({problem.reason}). Answer with {within} "
        f"exactly as described above, with {required} filled in, and nothing before or after it."
    )


class _NoStructure(SummarizerError):
    """A reply without its prompt's structure (raised by `LLMSummarizerBase.accept`, handled in `flow`)."""

    def __init__(self, endpoint: str, problem: SummaryProblem) -> None:
        super().__init__(f"{endpoint}: {problem.reason}")
        self.problem = problem


# ----------------------------------------------------------------------------- the base class


@dataclass(frozen=True, kw_only=True)
class LLMSummarizerBase:
    """Settings every LLM summarizer has; subclasses say how to build the request and read the reply."""

    model: str
    """The model name the endpoint expects."""
    base_url: str = ""
    api_key: str | None = field(default=None, repr=False)
    """The API key; None reads the environment variable named by ``api_key_env``."""
    api_key_env: str = ""
    timeout: float = 30.0
    """Seconds one summary may take in all: connecting, sending, waiting, reading, every retry
    and every wait between retries. The engine's deadline for the `prepare` call applies
    when it is earlier (`SummaryRequest.deadline`). Past it, `SummarizerTimeout`."""
    max_output_tokens: int = 4096
    """The most tokens the summary may take; the strategy's own limit applies when smaller."""
    max_response_bytes: int | None = None
    """The largest reply body read; past it the reply is abandoned and the summary fails.
    None (default): 32 bytes per output token, at least 128 KiB."""
    prompt: PromptName | PromptTemplate = "state_snapshot"
    """Which template to use (see `agentcontext.summarizers.PromptTemplate`)."""
    temperature: float | None = 0.0
    """Sampling temperature; None leaves it out. Never sent to OpenAI's reasoning models (o1, o3, o4-mini,
    gpt-5... by name), which reject it (``'temperature' does not support 0``)."""
    reasoning_headroom: int | None = None
    """Output tokens allowed beyond the summary's room, for a model whose hidden reasoning counts against
    its output limit (the prompt still asks for a summary of the room's size). None: `REASONING_HEADROOM`
    for OpenAI's reasoning models by name, 0 for any other. Without it, a reasoning model spent the room
    on reasoning and every summary was cut at the limit."""
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    headers: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    """Extra HTTP headers (a gateway's routing header, an organization id...)."""
    extra_body: Mapping[str, JSONValue] = field(default_factory=lambda: MappingProxyType({}))
    """Extra fields merged into the request body (e.g. vLLM's ``chat_template_kwargs``)."""

    _extra: str = field(default="openai", init=False, repr=False)

    def __post_init__(self) -> None:
        from ._http import require_httpx

        require_httpx(self._extra)
        name = type(self).__name__
        if not self.model:
            raise ConfigError(f"{name} needs a model name")
        if not self.base_url.startswith(("http://", "https://")):
            raise ConfigError(f"{name}.base_url must start with http:// or https://, got {self.base_url!r}")
        if (
            isinstance(self.timeout, bool)
            or not isinstance(self.timeout, int | float)
            or not self.timeout > 0
        ):
            raise ConfigError(f"{name}.timeout must be a positive number of seconds, got {self.timeout!r}")
        headroom = self.reasoning_headroom
        if headroom is not None and (
            isinstance(headroom, bool) or not isinstance(headroom, int) or headroom < 0
        ):
            raise ConfigError(f"{name}.reasoning_headroom must be an int >= 0 or None, got {headroom!r}")
        if self.max_output_tokens < 16:
            raise ConfigError(f"{name}.max_output_tokens must be at least 16, got {self.max_output_tokens}")
        cap = self.max_response_bytes
        if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1024):
            raise ConfigError(f"{name}.max_response_bytes must be an int >= 1024 or None, got {cap!r}")
        get_prompt(self.prompt)  # fail early on an unknown name
        object.__setattr__(self, "headers", MappingProxyType(dict(self.headers)))
        object.__setattr__(self, "extra_body", MappingProxyType(dict(self.extra_body)))

    # ------------------------------------------------------------------ the Summarizer protocol

    def summarize(self, request: SummaryRequest) -> str:
        """Return the summary of ``request`` by its deadline.

        Raises:
            SummarizerTimeout: no summary by the deadline (``timeout``, or the request's when earlier).
            SummarizerError: any other failure (after the last retry, or one no retry can fix).
        """
        return run_sync(self.flow(request))

    async def asummarize(self, request: SummaryRequest) -> str:
        """Async twin of `summarize` (same exchange, driven by ``httpx.AsyncClient``)."""
        return await run_async(self.flow(request))

    # ------------------------------------------------------------------ shared logic

    def flow(self, request: SummaryRequest) -> Exchange:
        """The HTTP exchange for ``request``, for the sync and async drivers alike.

        A reply without the structure the prompt asks for (`structured_summary`) is
        asked for once more, with a correction added to the request's instructions.

        Raises:
            SummarizerTimeout: the request's deadline passed.
            UnusableSummaryError: the reply lacked the prompt's structure, and so did the next.
        """
        now = time.monotonic()
        deadline, note = self.deadline(request, now)
        if deadline <= now:
            raise SummarizerTimeout(f"{self.endpoint}: {note} passed before the summary was asked for")
        template = get_prompt(self.prompt)
        try:
            return (yield from self._exchange(request, template, deadline, note))
        except _NoStructure as exc:
            first = exc.problem
        # The model answered, but not in the structure the prompt asks for: ask once more with a short
        # correction, through the strategy's channel for extra instructions (as its identifier re-prompt
        # does), within the same deadline. A second miss is an unusable summary.
        assert template.structure is not None
        fix = _correction(template.structure, first)
        again = replace(
            request, instructions=f"{request.instructions}\n{fix}" if request.instructions else fix
        )
        try:
            return (yield from self._exchange(again, template, deadline, note))
        except _NoStructure as exc:
            raise UnusableSummaryError(
                f"{self.endpoint}: the reply was not the structure the prompt asks for ({first.reason}), "
                f"nor was the reply to a correction ({exc.problem.reason})"
            ) from None

    def _exchange(
        self, request: SummaryRequest, template: PromptTemplate, deadline: float, note: str
    ) -> Exchange:
        """One exchange (its retries included) for ``request`` with ``template``."""
        output = self.output_tokens(request)
        system, user = build_prompt(request, template, max_tokens=output)
        output += self.headroom()  # sent as the limit, not asked for: a reasoning model's hidden reasoning
        http = self.http_request(system=system, user=user, max_tokens=output)
        # An uncompressed reply: the byte cap then bounds what is held in memory, not a compressed stream.
        headers = {"accept-encoding": "identity", **http.headers}
        return (
            yield from exchange(
                replace(http, headers=headers, deadline=deadline, max_bytes=self.response_limit(output)),
                endpoint=self.endpoint,
                parse=self.parse,
                policy=self.retry,
                deadline_note=note,
            )
        )

    def deadline(self, request: SummaryRequest, now: float) -> tuple[float, str]:
        """The `time.monotonic` value the summary must be back by, and what sets it (for messages)."""
        own = now + self.timeout
        if request.deadline is not None and request.deadline < own:
            left = max(request.deadline - now, 0.0)
            return request.deadline, f"the caller's deadline ({left:.3g} s after the summary was asked for)"
        return own, f"the {self.timeout:g} s timeout of {type(self).__name__}"

    def output_tokens(self, request: SummaryRequest) -> int:
        """The output limit: the strategy's ``max_tokens`` when set and smaller than ``max_output_tokens``."""
        if request.max_tokens is not None and request.max_tokens > 0:
            return max(16, min(self.max_output_tokens, request.max_tokens))
        return self.max_output_tokens

    @property
    def input_limit(self) -> int | None:
        """The most one request may carry for this model, when the model registry knows its window (None
        otherwise): the window less the summary's output, a reasoning model's headroom, the prompt's own
        instructions and a tenth for a tokenizer other than the agent's, in the units an estimate counts
        (divided by the model's ``estimate_ratio``: a Claude model reads fewer). The engine chunks what it asks
        this summarizer for within it: an agent with a 1M-token window paired with a 128k-token summarizer
        sent requests its provider refused, and every summary fell back to the offline one.
        """
        from .. import models
        from ..exceptions import UnknownModelError

        try:
            spec = models.get(self.model)
        except UnknownModelError:
            return None
        window = spec.max_input_tokens or spec.context_window
        room = (window - self.max_output_tokens - self.headroom() - _PROMPT_ALLOWANCE) * 9 // 10
        # In the units an engine counts text in: a model counted by estimate bills estimate_ratio per unit.
        return max(int(room / spec.estimate_ratio), 256)

    def headroom(self) -> int:
        """`reasoning_headroom`, or its default for the model."""
        if self.reasoning_headroom is not None:
            return self.reasoning_headroom
        return REASONING_HEADROOM if reasoning_model(self.model) else 0

    def send_temperature(self) -> bool:
        """Whether the request carries ``temperature`` (set, and not for a reasoning model, which rejects it)."""
        return self.temperature is not None and not reasoning_model(self.model)

    def response_limit(self, output_tokens: int) -> int:
        """The reply size cap in bytes for ``output_tokens``: ``max_response_bytes``, else derived from it."""
        if self.max_response_bytes is not None:
            return self.max_response_bytes
        return max(MIN_RESPONSE_BYTES, output_tokens * RESPONSE_BYTES_PER_TOKEN)

    def payload(self, response: HttpResponse) -> JSONValue:
        """A 2xx reply's JSON body (raises `SummarizerError` naming the endpoint when it is not JSON)."""
        return response.json(
            where=self.endpoint,
            hint=f"not retried: is base_url the API root of a {type(self).__name__} endpoint?",
        )

    def accept(self, text: str, *, reasoned: bool = False) -> str:
        """``text`` without reasoning blocks, if it is a usable summary, else raise.

        ``reasoned``: the reply carried reasoning apart from its text (``reasoning_content``, a
        ``thinking`` block). With no answer after reasoning, asking again would pay for the same
        reasoning and get the same nothing: it is not retried.

        Usable: not a refusal or an error (`summary_problem`), and in the structure the
        prompt asks for when it asks for one (`structured_summary`, which also drops a
        preamble or code fence around it).

        Raises:
            RetryableReply: empty or error-shaped text (asking again may help).
            SummarizerError: a refusal or apology; or text without the prompt's structure
                (`flow` then asks again once, with a correction).
        """
        cut_reasoning = _UNCLOSED_REASONING.match(_REASONING.sub("", text)) is not None
        text = clean_summary(text)
        if not text and (reasoned or cut_reasoning):
            raise SummarizerError(
                f"{self.endpoint}: the model answered only with reasoning"
                + (" (cut inside its <think> block)" if cut_reasoning else "")
                + f", no summary: its output limit ({self.headroom():,} tokens of it for reasoning) went to "
                "reasoning; raise reasoning_headroom (not retried)"
            )
        problem = summary_problem(text)
        if problem is None:
            structure = get_prompt(self.prompt).structure
            if structure is None:
                return text
            found = structured_summary(text, structure)
            if isinstance(found, str):
                return found
            raise _NoStructure(self.endpoint, found)
        if problem.retryable:
            raise RetryableReply(f"{self.endpoint}: {problem.reason}")
        raise SummarizerError(f"{self.endpoint}: {problem.reason} (not retried)")

    def key(self) -> str | None:
        """The API key: ``api_key``, else the environment variable, else None (local endpoints need none)."""
        if self.api_key:
            return self.api_key
        if not self.api_key_env:
            return None
        return os.environ.get(self.api_key_env) or None

    @property
    def endpoint(self) -> str:
        """The URL requests go to (named in errors; never includes the key)."""
        raise NotImplementedError

    def http_request(self, *, system: str, user: str, max_tokens: int) -> HttpRequest:
        """The provider-specific request (the deadline and byte cap are added by `flow`)."""
        raise NotImplementedError

    def parse(self, response: HttpResponse) -> str:
        """The summary text from a 2xx reply, or raise."""
        raise NotImplementedError
