"""The LiteLLM proxy: a pre-call hook that fits every request to the model's window.

Put it in front of any provider and any client, Claude Code (``ANTHROPIC_BASE_URL``, the
``/v1/messages`` route), Codex (``/v1/responses``) or any OpenAI client
(``/v1/chat/completions``), agents in TypeScript or Go included::

    # agentcontext_hook.py, next to the proxy's config.yaml
    from agentcontext.integrations.litellm import ContextHook

    hook = ContextHook()

    # config.yaml
    litellm_settings:
      callbacks: agentcontext_hook.hook

`ContextHook` is a LiteLLM ``CustomLogger`` whose ``async_pre_call_hook`` converts
the request's conversation to canonical messages (`agentcontext.formats.openai` or
`agentcontext.formats.anthropic` with ``unknown="keep"``, or
`agentcontext.formats.responses`), lets an engine prepare them with the request's
tool definitions and instructions counted, and writes the result back into the
request: it fits, every tool result follows its call, the system prompt (or
``instructions``) and the latest request are kept, and a message the engine did
not change goes out exactly as it came (``cache_control`` breakpoints, Anthropic
``thinking`` blocks, Chat Completions file and audio parts included). When nothing needs compacting the request is
forwarded untouched. Responses, streamed or not, pass through unchanged: the hook
only reads their usage.

**Usage.** After each call the hook feeds the prompt tokens the response reports
(``async_post_call_success_hook`` for a reply, the success log event for a stream)
to the engine, against the `Report` of the request it prepared (tied by LiteLLM's
call id, per request: conversations in flight at once never mix), or, with
``sessions``, through `Session.record_usage` when it answers the session's latest
prepare. An engine counting by estimate learns its provider's correction from it
(`ContextEngine.record_usage`). A response without usage (or with 0), a Chat
Completions stream that did not ask the provider for usage, and a request the hook
did not prepare teach nothing.

**Window and reserve.** Per model group (the ``model`` a client asks for), the
window is, in this order: ``window=`` given to the hook, the group's
``model_info.max_input_tokens`` in the proxy's ``model_list`` (the smallest, when
the group has several deployments), the window `agentcontext.models` knows for the
group's name or its deployment's ``litellm_params.model``, then LiteLLM's own model
map. Tokens are counted with the tokenizer `agentcontext.models` knows for that
name (``model=`` overrides it), else with the script-aware estimator. The reserve
is ``reserve=`` (default: the model's) and at least the request's own
``max_tokens`` / ``max_completion_tokens`` / ``max_output_tokens``, which the
provider keeps free for the reply.

**Conversations.** A proxy sees one request at a time, each carrying the whole
history. The hook keeps one `EngineState` per conversation (the least recently
used of ``max_conversations`` are forgotten), so a request costs O(new messages)
and the prompt prefix stays stable between compactions (provider prompt caches
keep hitting). A conversation is named by the ``x-agentcontext-session`` request
header, else by a hash of its system prompt and first user message. The fitting
runs in a worker thread, one request of a conversation at a time: a first request
of a long history, or a compaction, does not hold the proxy's event loop.

**One-shot fits.** By default a compaction goes down to the engine's hysteresis
target, well below the budget, so that the next requests of a conversation extend
one prompt prefix and provider prompt caches keep hitting: right for agents that
keep sending their growing history. A client whose requests each stand alone (a
batch or evaluation job, a client that sends a whole history once) wants the whole
budget used: ``fill=True`` (or a share, ``fill=0.9``) makes the hook compact only
when a request is over the budget, and then only to fill it (less a small margin).
``ContextHook(fill=...)`` sets it for every request; a client asks for it per
request with the ``x-agentcontext-fill`` header (``1``, ``0`` or a share such as
``0.9``) or ``"agentcontext_fill"`` in the request's LiteLLM metadata (``metadata``
on ``/chat/completions``, ``litellm_metadata`` on ``/v1/messages`` and
``/v1/responses``, where ``metadata`` is the provider's own field); the header
wins. A value it cannot read is logged (one warning line naming it) and the
request is fitted with the hook's default.

**Sessions.** With ``sessions=`` (a database URL, ``postgresql://...``,
``redis://...`` or ``sqlite:///...``, or a directory for JSON Lines files; else
the ``AGENTCONTEXT_SESSIONS`` environment variable, which config.yaml can set
under ``environment_variables:``), each conversation is an agentcontext
`agentcontext.session.Session` on that store, named by the conversation's key.
Every client message is logged once, in order (a request appends only what the
session has not logged; ids are the formats' deterministic chain ids, so every
proxy derives the same ones); a client that rewrote its history (Claude Code and
Codex compact their own) has the differing tail taken back with a recorded
`Session.rewind`, never deleted. The request is prepared through the session, so
a compaction is a record in the store: compacted originals stay recallable
(``Session.open(URL).recall(...)``), and several proxies in front of one
PostgreSQL or Redis serve one conversation with one compaction history and one
prompt prefix (the session catches up on the records it missed, and holds the
session's lease while it prepares). The ``max_sessions`` most recently used
sessions stay open. When the store fails (a server down, a database never
initialised), the request is fitted in memory as without ``sessions``, with one
warning line; the messages it carried are logged by the next request that
reaches the store (a client always sends its whole history).

**Full tool outputs.** A tool output over the engine's ingest limit reaches the
provider as a head and a tail with a marker naming its reference. Without
sessions, the full text is kept in ``hook.artifacts``, one `MemoryArtifactStore`
shared by every engine of the hook and bounded like any by default (64 MiB,
least recently used evicted first), so a proxy that runs for weeks keeps only
the latest outputs; the marker says the output is kept outside the conversation,
and never points the model to a recall tool it does not have.
``ContextHook(artifacts=...)`` takes another store (a `FileArtifactStore`, a
`MemoryArtifactStore` with another ``max_bytes``) or False to keep none. With
sessions, the session's own store keeps them.

**What it leaves alone.** A request it cannot read (a malformed message, a
content part agentcontext does not model in a Chat Completions request, a model
whose window nobody knows) or cannot fit (the system prompt, tools and latest
request alone overflow) is forwarded unchanged, with one warning line on the
``agentcontext.litellm`` logger naming the route and the reason; the provider
then answers as it would have. The hook never fails a request. Responses
requests that continue a stored response (``previous_response_id``,
``conversation``) are forwarded unchanged too: their history is on the server.
A history the provider would refuse (a tool result without its call, a call
answered twice) is repaired, and a warning names every repair; a compaction is
logged as one info line, a summarizer that gave way as a warning.

Requires ``pip install 'agentcontext[litellm]'``.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import re
import sys
import time
import warnings
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast
from urllib.parse import urlencode

from .._api import feed_usage
from .._report import Report
from .._thresholds import check_fill
from ..artifacts import ArtifactStore, MemoryArtifactStore
from ..engine import ContextEngine, Engine, EngineState, Prepared
from ..exceptions import (
    AgentContextError,
    ConfigError,
    ConversionWarning,
    MissingDependencyError,
    StoreError,
    StoreNotInitializedError,
    StoreUnavailableError,
)
from ..formats import anthropic, responses
from ..formats import openai as oai
from ..formats._common import canonical_json
from ..messages import JSONValue, Message
from ..models import ESTIMATE_MARGIN, ModelSpec, get
from ..tokens import CalibratedCounter, counter_for_tokenizer
from ._common import LRU, Weight, log_report
from ._follow import Follower

if TYPE_CHECKING:
    from ..session import Session

try:
    from litellm.integrations.custom_logger import CustomLogger
except ImportError as e:  # pragma: no cover - exercised without the extra installed
    raise MissingDependencyError(
        "agentcontext.integrations.litellm needs LiteLLM: pip install 'agentcontext[litellm]'"
    ) from e

__all__ = ["FILL_HEADER", "FILL_METADATA", "SESSIONS_ENV", "SESSION_HEADER", "ContextHook"]

SESSION_HEADER = "x-agentcontext-session"
"""The request header that names a conversation (else: a hash of its system prompt and first user message)."""

FILL_HEADER = "x-agentcontext-fill"
"""The request header asking for a one-shot fit of this request: ``1``, ``0``, or a share of the budget (``0.9``)."""

FILL_METADATA = "agentcontext_fill"
"""The key in a request's LiteLLM metadata asking for a one-shot fit (the same values; `FILL_HEADER` wins)."""

SESSIONS_ENV = "AGENTCONTEXT_SESSIONS"
"""The environment variable giving ``sessions=`` when the hook is built without it (config.yaml can set it)."""

STORE_RETRY = 10.0
"""Seconds the hook fits requests in memory after its store was found unavailable, before trying it again."""

logger = logging.getLogger("agentcontext.litellm")

Api = Literal["chat", "anthropic", "responses"]
_APIS: Mapping[str, Api] = {
    "completion": "chat",
    "acompletion": "chat",
    "anthropic_messages": "anthropic",
    "responses": "responses",
    "aresponses": "responses",
}
_REPLY_LIMITS: Mapping[Api, tuple[str, ...]] = {
    "chat": ("max_completion_tokens", "max_tokens"),
    "anthropic": ("max_tokens",),
    "responses": ("max_output_tokens",),
}


class _Skip(Exception):
    """The request is forwarded unchanged; the message says why (logged as one line)."""


@dataclass(eq=False)
class _Conversation:
    """What the hook remembers of one conversation: the wire list it converted last, and the engine's state."""

    head: object = None
    """What precedes the list and changes every id when it changes (the Anthropic ``system``)."""
    wire: list[object] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)
    """How many canonical messages the wire list's first ``i + 1`` entries made."""
    messages: list[Message] = field(default_factory=list)
    converter: responses.ResponsesConverter | None = None
    state: EngineState = field(default_factory=EngineState.new)
    cache: MutableMapping[str, str] = field(default_factory=lambda: LRU(4096))
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    """Held by the request being fitted."""
    weight: Weight = field(default_factory=Weight)
    """About how much memory it holds (`max_conversation_bytes`)."""


@dataclass(eq=False)
class _Sent:
    """A request the hook prepared, awaiting its response's usage."""

    engine: Engine
    report: Report
    """The report of the request as prepared: what its usage is fed against."""
    opened: _Open | None = None
    """The session it was prepared through."""
    turn: int = 0
    """The session's prepare count with this request's prepare."""
    api: Api = "chat"
    stream_usage: bool = True
    """Whether a stream of this request reports the provider's usage."""


@dataclass(frozen=True)
class _Usage:
    """What a response's usage says of the request: the prompt tokens billed, and the rest when given."""

    prompt: int
    completion: int | None
    cached: int | None
    model: str | None


def _call_id(data: object) -> str | None:
    """The LiteLLM call id of a request (the proxy sets it before the pre-call hook)."""
    if not isinstance(data, Mapping):
        return None
    value = data.get("litellm_call_id") or getattr(data.get("litellm_logging_obj"), "litellm_call_id", None)
    return value if isinstance(value, str) and value else None


def _get(obj: object, name: str) -> object:
    """A field of a response part, whether LiteLLM hands it over as an object or a dict."""
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


def _tokens(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _usage_of(api: Api, response: object) -> _Usage | None:
    """The usage a response reports for its prompt; None when it reports none (or zero).

    The prompt tokens billed, per route (LiteLLM 1.106):

    * Chat Completions: ``usage.prompt_tokens`` of LiteLLM's ``Usage``. It already holds
      cached tokens: OpenAI counts them in it (``prompt_tokens_details.cached_tokens`` is a
      part of it), and LiteLLM's Anthropic transformation adds ``cache_read_input_tokens``
      and ``cache_creation_input_tokens`` to Anthropic's ``input_tokens`` to make it.
    * Messages (``/v1/messages``): Anthropic's ``usage.input_tokens`` counts only what
      follows the last cache breakpoint, so the prompt is it plus ``cache_read_input_tokens``
      and ``cache_creation_input_tokens``.
    * Responses: ``usage.input_tokens``, cached tokens included
      (``input_tokens_details.cached_tokens`` is a part of it).

    A stream's assembled response can come in LiteLLM's Chat Completions shape on any
    route: ``prompt_tokens`` is read when the route's own field is missing.
    """
    usage = _get(response, "usage")
    if usage is None:
        return None
    model = _get(response, "model")
    shown = model if isinstance(model, str) and model else None
    inputs = _tokens(_get(usage, "input_tokens")) if api != "chat" else None
    if inputs is not None:
        if api == "anthropic":
            reads = _tokens(_get(usage, "cache_read_input_tokens"))
            writes = _tokens(_get(usage, "cache_creation_input_tokens")) or 0
            prompt, cached = inputs + (reads or 0) + writes, reads
        else:
            prompt, cached = inputs, _tokens(_get(_get(usage, "input_tokens_details"), "cached_tokens"))
        completion = _tokens(_get(usage, "output_tokens"))
    else:
        billed = _tokens(_get(usage, "prompt_tokens"))
        if billed is None:
            return None
        prompt, completion = billed, _tokens(_get(usage, "completion_tokens"))
        cached = _tokens(_get(_get(usage, "prompt_tokens_details"), "cached_tokens"))
    if prompt == 0:
        return None
    return _Usage(prompt=prompt, completion=completion, cached=cached, model=shown)


@dataclass(frozen=True)
class _Model:
    """What the hook knows of a model group: its window, and how to count its tokens."""

    window: int
    spec: ModelSpec | None
    reply: int = 0
    """The largest reply limit its deployments set in ``litellm_params`` (0: none)."""


class ContextHook(CustomLogger):
    """A LiteLLM proxy callback that fits each request's conversation to its model's window.

    Args:
        window: the context window for every model group (default: from the proxy's
            model list, see the module docstring).
        reserve: tokens kept free for the reply (default: the model's; never less than
            the request's own ``max_tokens``).
        model: the agentcontext model name whose tokenizer counts every request
            (default: the one the group's name or deployment resolves to, else an estimator).
        max_conversations: how many conversations' states to keep (least recently used forgotten).
        max_conversation_bytes: about how much memory they may hold in all (default 512 MiB),
            estimated from their histories' length; the least recently used are forgotten first
            (the next request of one costs a full pass). Without it, 1,024 conversations of
            Claude Code's size held about 4 GB.
        header: the request header naming a conversation.
        engine: builds the engine for a ``(model group, window, reserve)``, for engine options
            (a summarizer, thresholds...); default ``ContextEngine(spec, window=, reserve=)``.
        sessions: where each conversation is kept as a `Session` (see the module docstring): a
            ``postgresql://``, ``redis://`` or ``sqlite:///`` URL without ``session=`` (the hook
            names one session per conversation), or a directory for JSON Lines files (one proxy
            process only: a file has one writer). Default: the ``AGENTCONTEXT_SESSIONS``
            environment variable, else none (each proxy keeps its conversations in memory).
        max_sessions: how many sessions to keep open (least recently used closed).
        fill: ``False`` (default): compact down to the engine's target, so that a conversation's
            next requests keep one prompt prefix (agents that keep sending their history).
            ``True``, or a share of the budget such as ``0.9``: a one-shot fit that compacts only
            when over the budget and then fills it. A request overrides it with `FILL_HEADER` or
            `FILL_METADATA` (see the module docstring).
        artifacts: where the full text of tool outputs cut at ingest is kept for the requests
            fitted without a session, whatever engine ``engine`` builds (a session keeps its own).
            Default: one `MemoryArtifactStore` for the whole hook, at most 64 MiB (least recently
            used evicted first), except for engines built with a truncator of your own, which keep
            its store. An `ArtifactStore` of yours, or False to keep none (the markers then say the
            full output was not kept). The store is ``hook.artifacts`` (None for False).

    Raises:
        ConfigError: a bad option (named).
    """

    def __init__(
        self,
        *,
        window: int | None = None,
        reserve: int | None = None,
        model: str | None = None,
        max_conversations: int = 1024,
        max_conversation_bytes: int = 512 * 1024 * 1024,
        header: str = SESSION_HEADER,
        engine: Callable[[ModelSpec | None, int, int], Engine] | None = None,
        sessions: str | os.PathLike[str] | None = None,
        max_sessions: int = 64,
        fill: bool | float = False,
        artifacts: ArtifactStore | Literal[False] | None = None,
    ) -> None:
        super().__init__()
        self.fill = check_fill(fill)
        if artifacts is not None and artifacts is not False and not isinstance(artifacts, ArtifactStore):
            raise ConfigError(
                f"artifacts must be an ArtifactStore, False (keep none) or None (a bounded memory store), "
                f"got {type(artifacts).__name__}"
            )
        # One store for every engine: 64 engines with a default store each could hold 64 times the cap.
        self.artifacts: ArtifactStore | None = (
            MemoryArtifactStore() if artifacts is None else artifacts if artifacts is not False else None
        )
        self._artifacts_given = artifacts is not None
        for name, value in (("window", window), ("reserve", reserve)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise ConfigError(f"{name} must be a non-negative int (tokens) or None, got {value!r}")
        for name, value in (
            ("max_conversations", max_conversations),
            ("max_conversation_bytes", max_conversation_bytes),
            ("max_sessions", max_sessions),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(f"{name} must be a positive int, got {value!r}")
        if sessions is None:
            sessions = os.environ.get(SESSIONS_ENV) or None
        self.sessions = _SessionPlace.of(sessions) if sessions is not None else None
        self._sessions: LRU[str, _Open] = LRU(max_sessions, evicted=_close)
        self._store_retry_at = 0.0
        self._opening = asyncio.Lock()
        self.window = window
        self.reserve = reserve
        self.model = get(model) if model is not None else None
        self.header = header.lower()
        self._make_engine = engine or _default_engine
        self._models: dict[str, _Model] = {}
        self._engines: LRU[tuple[str, int, int], Engine] = LRU(64)
        self._conversations: LRU[tuple[tuple[str, int], str], _Conversation] = LRU(
            max_conversations, max_weight=max_conversation_bytes
        )
        self._tools: LRU[str, list[Mapping[str, JSONValue]]] = LRU(64)
        # The requests prepared and not yet answered, by LiteLLM call id: what their usage is fed against.
        self._sent: LRU[str, _Sent | None] = LRU(4096)

    async def async_pre_call_hook(  # LiteLLM calls it with these keywords
        self,
        user_api_key_dict: Any,
        cache: Any,  # noqa: ARG002
        data: dict[str, Any],
        call_type: str,
    ) -> dict[str, Any]:
        """Prepare ``data`` in place (LiteLLM's pre-call hook); returns it, changed or not. Never raises."""
        api = _APIS.get(str(call_type))
        if api is None or not isinstance(data, dict):
            return data
        try:
            with warnings.catch_warnings():
                # What "keep" carries unmodelled (thinking, cache_control...) is expected here, at every request.
                warnings.simplefilter("ignore", ConversionWarning)
                await self._prepare(api, data, _scope(user_api_key_dict, data))
        except Exception as e:
            detail = str(e) if isinstance(e, _Skip) else f"{type(e).__name__}: {e}"
            logger.warning("agentcontext: %s request forwarded unchanged: %s", _ROUTES[api], detail)
            # Its usage is the unchanged request's, not the prepared one's: it teaches nothing.
            call_id = _call_id(data)
            if call_id is not None:
                self._sent.pop(call_id, None)
        return data

    async def async_post_call_success_hook(  # LiteLLM calls it with these keywords
        self,
        data: dict[str, Any],
        user_api_key_dict: Any,  # noqa: ARG002
        response: Any,
    ) -> None:
        """Learn from the usage of a response to a request the hook prepared (LiteLLM's post-call hook).

        The proxy awaits it before it answers a request that is not streamed; the response
        passes through unchanged. Never raises.
        """
        await self._answered(_call_id(data), response, final=False)

    async def async_log_success_event(
        self,
        kwargs: Any,
        response_obj: Any,
        start_time: Any,  # noqa: ARG002
        end_time: Any,  # noqa: ARG002
    ) -> None:
        """The same, from LiteLLM's success logging: the only event that sees a stream's usage. Never raises."""
        call_id = kwargs.get("litellm_call_id") if isinstance(kwargs, Mapping) else None
        stream = isinstance(kwargs, Mapping) and kwargs.get("stream") is True
        await self._answered(
            call_id if isinstance(call_id, str) else None, response_obj, final=True, stream=stream
        )

    async def async_post_call_failure_hook(  # LiteLLM calls it with these keywords
        self,
        request_data: dict[str, Any],
        original_exception: Exception,  # noqa: ARG002
        user_api_key_dict: Any,  # noqa: ARG002
        traceback_str: str | None = None,  # noqa: ARG002
    ) -> None:
        """Forget a failed request: no usage comes for it."""
        call_id = _call_id(request_data)
        if call_id is not None:
            self._sent.pop(call_id, None)

    def close(self) -> None:
        """Close the sessions the hook holds open (a later request opens its session again)."""
        while self._sessions:
            _, opened = self._sessions.popitem()
            _close(opened)

    # ------------------------------------------------------------------ one request

    async def _prepare(self, api: Api, data: dict[str, Any], scope: str | None = None) -> None:
        if api == "responses" and (data.get("previous_response_id") or data.get("conversation")):
            return  # the history lives on the server; only the new items are here
        group = data.get("model")
        if not isinstance(group, str) or not group:
            raise _Skip(f"no model name (got {group!r})")
        engine = self._engine(group, api, data)
        fill = self._fill(api, data)
        name = self._name(api, data, scope)
        # Keyed by the model's group and window, not by the engine: a request asking for another reply
        # length gets another engine (another reserve), and must continue the same conversation.
        held = ((group, self._models[group].window), name)
        conversation = self._conversation(*held)
        # One request of a conversation at a time: the fitting runs in a worker thread (below), and the
        # conversation's converted messages and engine state are the previous request's until it is done.
        async with conversation.lock:
            messages, instructions = self._convert(api, data, conversation)
            self._conversations.weigh(held, conversation.weight.of(messages))
            tools = self._tool_definitions(data.get("tools"))
            out: Sequence[Message] | None = None
            if self.sessions is not None:
                through = await self._session_prepare(api, name, engine, messages, tools, instructions, fill)
                if through is not None:
                    prepared, opened = through
                    _log_report(api, name, prepared.report)
                    out = prepared.messages
                    self._expect(api, data, _Sent(engine, prepared.report, opened, opened.prepares))
            if out is None:
                state = conversation.state
                try:
                    # Off the proxy's event loop: a first request of a long conversation, or a compaction,
                    # takes up to a second of CPU, which would hold every other request the proxy serves.
                    prepared = await asyncio.to_thread(
                        engine.prepare,
                        messages,
                        tools=tools,
                        instructions=instructions,
                        state=state,
                        artifacts=self._artifacts_for(engine),
                        fill=fill,
                    )
                except AgentContextError as e:
                    raise _Skip(f"{type(e).__name__}: {e}") from None
                conversation.state = prepared.state
                _log_report(api, name, prepared.report)
                out = prepared.messages
                self._expect(api, data, _Sent(engine, prepared.report))
                if prepared.compaction is None and len(out) == len(messages):
                    return  # the input, unchanged: send the request as it came
            elif len(out) == len(messages) and all(a.id == b.id for a, b in zip(out, messages, strict=True)):
                return
        fitted = list(out)
        if api == "chat":
            data["messages"] = _with_breakpoints(
                oai.from_messages(fitted, validate=False), data["messages"], flat=True
            )
        elif api == "anthropic":
            system, wire = anthropic.from_messages(fitted, validate=False, late_system="inline")
            data["messages"] = _with_breakpoints(wire, data["messages"])
            if system is None:
                data.pop("system", None)
            else:
                data["system"] = system
        else:
            data["input"] = responses.from_messages(fitted, validate=False, cache=conversation.cache)

    # ------------------------------------------------------------------ usage

    def _artifacts_for(self, engine: Engine) -> ArtifactStore | Literal[False] | None:
        """The store for ``engine``'s requests: the hook's, unless the engine has a truncator of its own
        configuration (one with its own store) and no store was given to the hook."""
        if self.artifacts is None:
            return False
        if self._artifacts_given or getattr(engine, "_sized_truncator", True):
            return self.artifacts
        return None  # the engine's truncator keeps its own store

    def _expect(self, api: Api, data: Mapping[str, Any], sent: _Sent) -> None:
        """Remember the request ``data`` as prepared, by its LiteLLM call id, for its response's usage."""
        call_id = _call_id(data)
        if call_id is None:
            return
        sent.api = api
        options = data.get("stream_options")
        # A Chat Completions stream reports usage only when asked (the proxy asks for it itself when the
        # deployment supports stream_options); unasked, LiteLLM counts the prompt with its own tokenizer,
        # which is no provider's bill. The Messages and Responses protocols report usage in every stream.
        sent.stream_usage = api != "chat" or (
            isinstance(options, Mapping) and options.get("include_usage") is True
        )
        # A client that sends one call id twice gets no usage fed for it: the two cannot be told apart.
        self._sent[call_id] = sent if call_id not in self._sent else None

    async def _answered(
        self, call_id: str | None, response: object, *, final: bool, stream: bool = False
    ) -> None:
        """Feed ``response``'s usage against the request the hook prepared under ``call_id``, once."""
        if call_id is None or call_id not in self._sent:
            return
        sent = self._sent[call_id]
        usage = _usage_of(sent.api, response) if sent is not None else None
        if usage is None and not final:
            return  # a stream's response: its usage comes with the logging event
        del self._sent[call_id]
        if sent is None or usage is None or (stream and not sent.stream_usage):
            return  # nothing the provider billed for this request (none reported, or zero)
        try:
            if sent.opened is not None and await self._session_usage(sent, usage):
                return
            feed_usage(sent.engine, sent.report, usage.prompt)
        except Exception as e:  # learning must not fail a response
            logger.warning("agentcontext: usage of %s not recorded: %s: %s", call_id, type(e).__name__, e)

    async def _session_usage(self, sent: _Sent, usage: _Usage) -> bool:
        """Log ``usage`` on the session of the request, when it answers the session's latest prepare.

        The session gives its engine its last prepare's report (`Session.record_usage`): after a
        later request of the conversation was prepared, the usage is the engine's alone (False).
        """
        opened = sent.opened
        assert opened is not None
        async with opened.lock:
            if opened.prepares != sent.turn or opened.session.engine is not sent.engine:
                return False
            try:
                await asyncio.to_thread(
                    opened.session.record_usage,
                    prompt_tokens=usage.prompt,
                    completion_tokens=usage.completion,
                    cached_tokens=usage.cached,
                    model=usage.model,
                )
            except AgentContextError as e:  # a store that failed: the engine still learns (below)
                logger.warning(
                    "agentcontext: usage not logged on session %s: %s: %s",
                    opened.session.location,
                    type(e).__name__,
                    e,
                )
                return False
            opened.prepares += 1  # logged: a second usage for this prepare would be the engine's alone
        return True

    # ------------------------------------------------------------------ the session

    async def _session_prepare(
        self,
        api: Api,
        name: str,
        engine: Engine,
        messages: list[Message],
        tools: list[Mapping[str, JSONValue]] | None,
        instructions: str | None,
        fill: bool | float,
    ) -> tuple[Prepared, _Open] | None:
        """The request prepared through the conversation's session, and the session; None: fit in memory instead.

        Store failures are logged (one line) and answered with None; the engine's own
        errors (the request cannot fit) are `_Skip`, as without sessions.
        """
        place = self.sessions
        assert place is not None
        if time.monotonic() < self._store_retry_at:
            return None  # the store was down moments ago (logged then): fit in memory until the retry time
        opened: _Open | None = None
        try:
            opened = await self._open(place, name, engine)
            async with opened.lock:
                if opened.session.engine is not engine:
                    # A request with another max_tokens (another reserve): the same session, not reopened
                    # (which replayed its log at every change).
                    opened.session.engine = engine
                prepared = await asyncio.to_thread(
                    _sync_and_prepare, opened, messages, tools, instructions, fill
                )
                opened.prepares += 1
        except AgentContextError as e:
            if not isinstance(e, StoreError):
                raise _Skip(f"{type(e).__name__}: {e}") from None
            if isinstance(e, StoreUnavailableError | StoreNotInitializedError):
                self._store_retry_at = time.monotonic() + STORE_RETRY
                then = f"for the next {STORE_RETRY:g} s"
            else:
                then = "for this request"
            if opened is not None and self._sessions.get(name) is opened:
                del self._sessions[name]  # reopened (restored) by the next request
                _close(opened)
            logger.warning(
                "agentcontext: %s request: session store %s failed (%s: %s); conversations are fitted in "
                "memory %s, and their messages logged once the store answers",
                _ROUTES[api],
                place.shown,
                type(e).__name__,
                e,
                then,
            )
            return None
        return prepared, opened

    async def _open(self, place: _SessionPlace, name: str, engine: Engine) -> _Open:
        """The conversation's open session (opened once; its requests set the engine they need, under its lock)."""
        opened = self._sessions.get(name)
        if opened is not None:
            return opened
        async with self._opening:  # one open at a time: two requests of a new conversation open it once
            opened = self._sessions.get(name)
            if opened is None:
                session = await asyncio.to_thread(place.open, name, engine)
                opened = self._sessions[name] = _Open(session)
            return opened

    # ------------------------------------------------------------------ the conversation

    def _fill(self, api: Api, data: Mapping[str, Any]) -> bool | float:
        """The request's one-shot fit option: its header, else its metadata, else the hook's ``fill``.

        A value that cannot be read is logged (one line) and the hook's default used: never raises.
        """
        holder = data.get(_METADATA_FIELD[api])
        asked = (
            (f"{FILL_HEADER} header", _header(data, FILL_HEADER)),
            (
                f"{_METADATA_FIELD[api]}[{FILL_METADATA!r}]",
                holder.get(FILL_METADATA) if isinstance(holder, Mapping) else None,
            ),
        )
        for where, raw in asked:
            if raw is None:
                continue
            try:
                return _fill_value(raw, where)
            except ConfigError:
                logger.warning(
                    "agentcontext: %s request: ignored %s %r (expected 1, 0 or a share of the budget within "
                    "(0, 1) such as 0.9); fitted with the hook's default fill=%r",
                    _ROUTES[api],
                    where,
                    raw,
                    self.fill,
                )
                return self.fill
        return self.fill

    def _name(self, api: Api, data: Mapping[str, Any], scope: str | None = None) -> str:
        """The conversation's key: the header's value, else a hash of its system prompt and first message;
        within the caller's ``scope`` (`_scope`), so that two keys or end users never share one."""
        name = _header(data, self.header)
        if name is None:
            name = "hash:" + hashlib.sha256(canonical_json(_identity(api, data)).encode()).hexdigest()
        return f"{api}:{scope}:{name}" if scope else f"{api}:{name}"

    def _conversation(self, model: tuple[str, int], name: str) -> _Conversation:
        key = (model, name)
        conversation = self._conversations.get(key)
        if conversation is None:
            conversation = _Conversation()
            self._conversations[key] = conversation
        return conversation

    def _convert(
        self, api: Api, data: Mapping[str, Any], conversation: _Conversation
    ) -> tuple[list[Message], str | None]:
        """The request's canonical messages, converting only what follows the part seen last time."""
        if api == "responses":
            items = data.get("input")
            if isinstance(items, str):
                items = [{"role": "user", "content": items}]
            if not isinstance(items, list):
                raise _Skip(f"'input' must be a string or a list of items, got {type(items).__name__}")
            instructions = data.get("instructions")
            if instructions is not None and not isinstance(instructions, str):
                raise _Skip(f"'instructions' must be a string, got {type(instructions).__name__}")
            return _responses_in(conversation, items), instructions or None
        wire = data.get("messages")
        if not isinstance(wire, list):
            raise _Skip(f"'messages' must be a list, got {type(wire).__name__}")
        head = data.get("system") if api == "anthropic" else None
        if head != conversation.head:
            conversation.head, conversation.wire, conversation.ends, conversation.messages = head, [], [], []
        old = conversation.wire
        keep = _common_prefix(old, wire)
        # Claude Code (and Cline, Roo Code... on the Chat Completions route, for Anthropic models) move their
        # cache breakpoints to the newest messages at every request: a message that only lost or gained
        # cache_control is the same message (same id, the engine's O(new) path).
        flat = api == "chat"
        while keep < min(len(old), len(wire)) and _sans_breakpoints(
            old[keep], flat=flat
        ) == _sans_breakpoints(wire[keep], flat=flat):
            keep += 1
        start = conversation.ends[keep - 1] if keep else 0
        messages = conversation.messages[:start]
        ends = conversation.ends[:keep]
        if api == "anthropic" and not keep and head is not None:
            messages = anthropic.to_messages([], system=head, unknown="keep")
        previous = messages[-1].id if messages else None
        for index in range(keep, len(wire)):
            d = wire[index]
            # A non-dict is refused by name, by the converter.
            sans = cast(Mapping[str, object], _sans_breakpoints(d, flat=flat))
            if api == "chat":
                # What agentcontext does not model (file or audio parts, provider fields on tool calls)
                # travels whole and comes back exactly for the messages the engine leaves unchanged.
                new = [oai.to_message(sans, index=index, previous_id=previous, unknown="keep")]
            else:
                try:
                    new = anthropic.to_messages([sans], unknown="keep", previous_id=previous)
                except AgentContextError:
                    anthropic.to_messages(wire, system=head, unknown="keep")  # raises, naming the index
                    raise
            messages += new
            previous = messages[-1].id if messages else previous
            ends.append(len(messages))
        conversation.wire, conversation.ends, conversation.messages = list(wire), ends, messages
        return list(messages), None

    def _tool_definitions(self, tools: object) -> list[Mapping[str, JSONValue]] | None:
        """The request's tools as the engine counts them: the same list object while they are the same."""
        if not tools:
            return None
        if not isinstance(tools, list):
            raise _Skip(f"'tools' must be a list, got {type(tools).__name__}")
        key = canonical_json(tools)
        definitions = self._tools.get(key)
        if definitions is None:
            definitions = [_definition(t, i) for i, t in enumerate(tools)]
            self._tools[key] = definitions
        return definitions

    # ------------------------------------------------------------------ the model

    def _engine(self, group: str, api: Api, data: Mapping[str, Any]) -> Engine:
        model = self._models.get(group)
        if model is None:
            model = self._models[group] = self._resolve(group)
        reserve = self.reserve
        if reserve is None:
            spec = model.spec
            reserve = (
                spec.default_reserve
                if spec is not None and spec.context_window == model.window
                else min(model.window // 4, 16_384)
            )
        asked = next(
            (
                v
                for name in _REPLY_LIMITS[api]
                if isinstance(v := data.get(name), int) and not isinstance(v, bool)
            ),
            None,
        )
        # What the request asks for; else what the deployment's config sets, which LiteLLM adds after the hook.
        reserve = max(reserve, asked if asked is not None else model.reply)
        if reserve >= model.window:
            raise _Skip(
                f"model {group!r}: the reply's {reserve:,} tokens leave nothing of its {model.window:,}-token "
                "window (lower max_tokens, or set the hook's window=/reserve=)"
            )
        key = (group, model.window, reserve)
        engine = self._engines.get(key)
        if engine is None:
            engine = self._engines[key] = self._make_engine(model.spec, model.window, reserve)
        return engine

    def _resolve(self, group: str) -> _Model:
        """The window and tokenizer of a model group (see the module docstring for the order)."""
        deployments = _deployments(group)
        names = [group] + [n for n in (_deployment_model(d) for d in deployments) if n]
        spec = self.model
        if spec is None:
            for name in names:
                spec = _spec(name)
                if spec is not None:
                    break
        window = self.window
        if window is None:
            limits = [_max_input(d) for d in deployments]
            known = [w for w in limits if w is not None]
            window = min(known) if known else None
        if window is None:
            window = next((s.context_window for s in map(_spec, names) if s is not None), None)
        if window is None:
            window = next((w for w in map(_litellm_window, names) if w is not None), None)
        if window is None:
            raise _Skip(
                f"model {group!r}: no context window known; set model_info.max_input_tokens for it in the "
                "proxy's model_list, or the hook's window="
            )
        replies = [
            v
            for d in deployments
            if isinstance(params := d.get("litellm_params"), Mapping)
            for key in ("max_tokens", "max_completion_tokens", "max_output_tokens")
            if isinstance(v := params.get(key), int) and not isinstance(v, bool) and v > 0
        ]
        return _Model(window=window, spec=spec, reply=max(replies, default=0))


# ----------------------------------------------------------------------------- sessions

_SAFE_NAME = re.compile(r"[A-Za-z0-9._:-]{1,120}")


@dataclass(frozen=True)
class _SessionPlace:
    """Where the conversations' sessions live: a database URL, or a directory of JSON Lines files."""

    base: str
    kind: str
    shown: str
    """``base`` without a password, for log lines."""

    @classmethod
    def of(cls, value: str | os.PathLike[str]) -> _SessionPlace:
        from ..session.stores._url import _shown, parse_location

        if not isinstance(value, str | os.PathLike) or not os.fspath(value):
            raise ConfigError(
                f"sessions must be a database URL (postgresql://, redis://, sqlite:///) or a directory, "
                f"got {value!r}"
            )
        location = parse_location(value)
        if location.kind == "jsonl":
            path = Path(location.target)
            if path.exists() and not path.is_dir():
                raise ConfigError(
                    f"sessions={str(path)!r} is a file; give a directory (one file per conversation)"
                )
            return cls(base=str(path), kind="jsonl", shown=str(path))
        if location.session is not None:
            raise ConfigError(
                f"sessions={_shown(os.fspath(value))!r} names one session; give the database URL without "
                "session=: the hook names one session per conversation"
            )
        return cls(base=os.fspath(value), kind=location.kind, shown=_shown(os.fspath(value)))

    def location(self, name: str) -> str:
        """The session location of conversation ``name``."""
        if self.kind == "jsonl":
            safe = (
                name if _SAFE_NAME.fullmatch(name) else "sha256-" + hashlib.sha256(name.encode()).hexdigest()
            )
            return os.path.join(self.base, safe.replace(":", "-") + ".jsonl")
        return self.base + ("&" if "?" in self.base else "?") + urlencode({"session": name})

    def open(self, name: str, engine: Engine) -> Session:
        """Open (or create) conversation ``name``'s session; blocking (run in a thread)."""
        from ..session import Session
        from ..session.stores import open_store

        options: dict[str, object] = {}
        if self.kind == "jsonl":
            Path(self.base).mkdir(parents=True, exist_ok=True)
        elif self.kind in ("postgres", "redis"):
            # A server that is down answers within seconds (the request is then fitted in memory), not after
            # the stores' default 30 s of retries.
            options = {"connect_timeout": 2.0, "retry_timeout": 2.0}
        return Session.from_store(open_store(self.location(name), **options), engine=engine)


@dataclass(eq=False)
class _Open:
    """An open session of the hook, with the lock its requests take turns on."""

    session: Session
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    follower: Follower = field(init=False)
    """Keeps the view on the client's history (ids chained: derived from the messages before)."""
    prepares: int = 0
    """Requests prepared through the session: a usage is the session's own only for its latest."""

    def __post_init__(self) -> None:
        self.follower = Follower(self.session, chained=True)


def _close(opened: _Open) -> None:
    try:
        opened.session.close()
    except Exception as e:  # closing must not fail a request
        logger.warning(
            "agentcontext: closing session %s: %s: %s", opened.session.location, type(e).__name__, e
        )


def _sync_and_prepare(
    opened: _Open,
    messages: list[Message],
    tools: list[Mapping[str, JSONValue]] | None,
    instructions: str | None,
    fill: bool | float,
) -> Prepared:
    """`_sync`, then the session's prepare: blocking, in one worker thread (off the proxy's event loop)."""
    _sync(opened, messages)
    return opened.session.prepare(tools=tools, instructions=instructions, fill=fill)


def _sync(opened: _Open, messages: list[Message]) -> None:
    """Make the session's view end with the client's ``messages`` (`Follower.follow`); blocking (run in a thread).

    What other proxies logged is read first. When the client rewrote its history, the
    view is rewound to the last message both share (a recorded rewind; the messages
    taken back stay in the log), compactions undone first (also recorded) so that no
    summary of what the client took back is sent, and no client message logged twice.
    """
    opened.session.reload()
    opened.follower.follow(messages)


_ROUTES: Mapping[Api, str] = {
    "chat": "/chat/completions",
    "anthropic": "/v1/messages",
    "responses": "/v1/responses",
}


_METADATA_FIELD: Mapping[Api, str] = {
    "chat": "metadata",
    "anthropic": "litellm_metadata",
    "responses": "litellm_metadata",
}
"""Where the proxy keeps a request's LiteLLM metadata (on /v1/messages and /v1/responses ``metadata`` is the
provider's own field)."""

_FILL_WORDS: Mapping[str, bool] = {
    "true": True,
    "yes": True,
    "on": True,
    "false": False,
    "no": False,
    "off": False,
}


def _fill_value(raw: object, where: str) -> bool | float:
    """A request's fill signal (``"1"``, ``"0"``, ``"0.9"``, ``true``, ``0.9``...) as `check_fill` takes it.

    Raises:
        ConfigError: not a fill option.
    """
    value = raw
    if isinstance(raw, str):
        text = raw.strip().lower()
        value = _FILL_WORDS.get(text, text)
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                pass  # refused by check_fill, by name
    if isinstance(value, int | float) and not isinstance(value, bool) and value in (0, 1):
        value = bool(value)  # the wire's 1 and 0 (a header has no booleans)
    return check_fill(value, name=where)


def _default_engine(spec: ModelSpec | None, window: int, reserve: int) -> Engine:
    if spec is not None:
        return ContextEngine(spec, window=window, reserve=reserve)
    # Counted by estimate, as a registered model without a tokenizer is: the safety margin, and a
    # correction learned upward only from the usage the hook feeds (`ContextEngine`'s default).
    return ContextEngine(
        window=window,
        reserve=reserve,
        counter=CalibratedCounter(counter_for_tokenizer("estimate"), min_correction=1.0),
        safety_margin=ESTIMATE_MARGIN,
    )


def _header(data: Mapping[str, Any], name: str) -> str | None:
    """The value of request header ``name``, as the proxy hands the request to the hook."""
    for holder in (data.get("proxy_server_request"), data.get("metadata"), data.get("litellm_metadata")):
        headers = holder.get("headers") if isinstance(holder, Mapping) else None
        if isinstance(headers, Mapping):
            for key, value in headers.items():
                if isinstance(key, str) and key.lower() == name and isinstance(value, str) and value:
                    return value
    return None


def _log_report(api: Api, name: str, report: Report) -> None:
    """What the engine did to a request, on the ``agentcontext.litellm`` logger (`log_report`)."""
    log_report(logger, f"agentcontext: {_ROUTES[api]} request of conversation {name}", report)


def _scope(auth: object, data: Mapping[str, Any]) -> str | None:
    """Whose conversation it is: a digest of the proxy key that sent it (LiteLLM's hashed ``token``) and of
    the end user the request names (OpenAI's ``user``), None when neither is known.

    Two callers whose conversations open alike (the app's system prompt, "hi") or who pick the same
    header value were one conversation: without sessions each request re-prepared the other's from
    scratch, and with them one user's summary was sent with the other's request.
    """
    key = getattr(auth, "token", None) or getattr(auth, "api_key", None)
    user = data.get("user") or getattr(auth, "end_user_id", None)
    parts = [p for p in (key, user) if isinstance(p, str) and p]
    if not parts:
        return None
    return "u" + hashlib.sha256("\0".join(parts).encode()).hexdigest()[:20]


def _identity(api: Api, data: Mapping[str, Any]) -> list[object]:
    """What names a conversation without a header: its system prompt and its first user message."""
    if api == "responses":
        items = data.get("input")
        first = items if isinstance(items, str) else _first_user(items)
        return [data.get("instructions"), first]
    wire = data.get("messages")
    if api == "anthropic":
        # Without the breakpoint Claude Code puts on the newest message, the first one when it is alone.
        first = (
            next((m for m in wire if isinstance(m, Mapping) and m.get("role") == "user"), None)
            if isinstance(wire, list)
            else None
        )
        system = data.get("system")
        return [_sans_breakpoints({"content": system}), _sans_breakpoints(first)]
    # Without the breakpoints clients put on their newest messages (Cline, Roo Code): a first message
    # that only lost its breakpoint is the same conversation.
    system = (
        [
            _sans_breakpoints(m, flat=True)
            for m in wire
            if isinstance(m, Mapping) and m.get("role") in ("system", "developer")
        ][:1]
        if isinstance(wire, list)
        else []
    )
    first = _sans_breakpoints(
        next((m for m in wire if isinstance(m, Mapping) and m.get("role") == "user"), None)
        if isinstance(wire, list)
        else None,
        flat=True,
    )
    return [system, first.get("content") if isinstance(first, Mapping) else None]


def _first_user(wire: object) -> object:
    if isinstance(wire, list):
        for m in wire:
            if isinstance(m, Mapping) and m.get("role") == "user":
                return m.get("content")
    return None


def _common_prefix(old: list[object], new: list[object]) -> int:
    """How many leading entries ``old`` and ``new`` share (equal dicts); C-speed when ``new`` only grew."""
    n = len(old)
    if n <= len(new) and new[:n] == old:
        return n
    for i, (a, b) in enumerate(zip(old, new, strict=False)):
        if a != b:
            return i
    return min(n, len(new))


def _sans_breakpoints(message: object, *, flat: bool = False) -> object:
    """A wire message without the ``cache_control`` breakpoints on its content blocks or parts (itself when it has none).

    Anthropic's blocks and, through LiteLLM, Chat Completions text parts carry them the same way.
    With ``flat`` (the Chat Completions route), a content of one plain text part is its text:
    clients that put a breakpoint on the newest messages turn their string content into a text
    part for it (Cline, Roo Code) and back in the next request, and each must stay the same message.
    """
    if not isinstance(message, Mapping):
        return message
    content = message.get("content")
    if not isinstance(content, list):
        return message
    blocks = [_block_sans_breakpoints(b) for b in content]
    if (
        flat
        and len(blocks) == 1
        and isinstance(only := blocks[0], Mapping)
        and only.keys() == {"type", "text"}
    ):
        if only["type"] == "text" and isinstance(only["text"], str):
            return {**message, "content": only["text"]}
    if all(a is b for a, b in zip(blocks, content, strict=True)):
        return message
    return {**message, "content": blocks}


def _block_sans_breakpoints(block: object) -> object:
    if not isinstance(block, Mapping):
        return block
    inner = block.get("content")
    if "cache_control" not in block and not isinstance(inner, list):
        return block
    out = {k: v for k, v in block.items() if k != "cache_control"}
    if isinstance(inner, list):
        out["content"] = [_block_sans_breakpoints(b) for b in inner]
    return out


def _with_breakpoints(fitted: list[Any], sent: list[Any], *, flat: bool = False) -> list[Any]:
    """``fitted`` with the client's own messages (and their breakpoints) for its unchanged first and newest ones.

    Messages are converted without ``cache_control``, so the breakpoints a client puts on its newest
    messages (Claude Code's) and on its system prompt (a Chat Completions client's) come back here:
    the head and the tail the engine kept verbatim are the client's.
    """
    i, j = len(fitted) - 1, len(sent) - 1
    while i >= 0 and j >= 0 and fitted[i] == _sans_breakpoints(sent[j], flat=flat):
        fitted[i] = sent[j]
        i, j = i - 1, j - 1
    for k in range(min(i + 1, j + 1)):
        if fitted[k] != _sans_breakpoints(sent[k], flat=flat):
            break
        fitted[k] = sent[k]
    return fitted


def _responses_in(conversation: _Conversation, items: list[Any]) -> list[Message]:
    converter = conversation.converter
    fed = converter.items_fed if converter is not None else 0
    if converter is None or len(items) < fed or items[:fed] != conversation.wire[:fed]:
        converter = responses.ResponsesConverter(unknown="keep")
        fed = 0
    try:
        converter.feed(items[fed:])
    except AgentContextError:
        conversation.converter, conversation.wire = None, []
        raise
    conversation.converter, conversation.wire = converter, list(items)
    return converter.messages()


def _definition(tool: object, index: int) -> Mapping[str, JSONValue]:
    """A tool definition the engine can count: function tools as they are, hosted tools as their JSON."""
    if not isinstance(tool, Mapping):
        raise _Skip(f"tools[{index}] must be an object, got {type(tool).__name__}")
    fn = tool.get("function")
    if isinstance(tool.get("name"), str) or (isinstance(fn, Mapping) and isinstance(fn.get("name"), str)):
        return cast(Mapping[str, JSONValue], tool)
    # A hosted tool ({"type": "web_search"}...): counted as its JSON, which errs high.
    return {"name": str(tool.get("type", "tool")), "description": canonical_json(tool)}


def _spec(name: str) -> ModelSpec | None:
    try:
        return get(name)
    except AgentContextError:
        return None


def _deployments(group: str) -> list[Mapping[str, Any]]:
    """The proxy's ``model_list`` entries of a model group (none when no proxy router is loaded)."""
    # Only inside a running proxy: importing the proxy's server module elsewhere would load all of it.
    proxy_server = sys.modules.get("litellm.proxy.proxy_server")
    router = getattr(proxy_server, "llm_router", None)
    model_list = getattr(router, "model_list", None) or []
    return [d for d in model_list if isinstance(d, Mapping) and d.get("model_name") == group]


def _deployment_model(deployment: Mapping[str, Any]) -> str | None:
    params = deployment.get("litellm_params")
    model = params.get("model") if isinstance(params, Mapping) else None
    return model if isinstance(model, str) and model else None


def _max_input(deployment: Mapping[str, Any]) -> int | None:
    info = deployment.get("model_info")
    value = info.get("max_input_tokens") if isinstance(info, Mapping) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _litellm_window(name: str) -> int | None:
    try:
        import litellm

        info = litellm.get_model_info(name)
    except Exception:
        return None
    value = info.get("max_input_tokens")
    return value if isinstance(value, int) and value > 0 else None
