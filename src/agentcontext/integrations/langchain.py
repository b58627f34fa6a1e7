"""`ContextMiddleware`: agentcontext in LangChain v1's ``create_agent``, in one line.

Needs the ``langchain`` extra (``pip install 'agentcontext[langchain]'``)::

    from langchain.agents import create_agent
    from agentcontext import ContextEngine
    from agentcontext.integrations.langchain import ContextMiddleware

    agent = create_agent(
        "openai:gpt-4o",
        tools=[search, read_file],
        system_prompt="You are a careful research assistant.",
        middleware=[ContextMiddleware(ContextEngine(model="gpt-4o"))],
    )

Every model call then gets messages that fit the model's window (system prompt
and tool schemas counted with the model's own tokenizer), that a provider
accepts (no tool result without its call, no call without its result), and
that keep the system prompt and the latest user message. Two modes:

- ``mode="request"`` (default): the middleware prepares each model request
  (`wrap_model_call` / `awrap_model_call`). The graph state keeps the full
  history; the engine keeps one `EngineState` per LangGraph ``thread_id``, so a
  step costs O(new messages) and the prompt prefix stays the same between
  compactions (provider prompt caches keep hitting).
- ``mode="state"``: the compaction is written into the graph state
  (`before_model` / `abefore_model`: ``RemoveMessage(REMOVE_ALL_MESSAGES)`` then
  the compacted messages, their ids stable), so a checkpointed thread resumed
  later does not compact again. Summaries and placeholders come back from the
  checkpoint recognised (their id and marker ride in ``response_metadata``).

With ``session=`` every message is also appended to an agentcontext `Session`
(its log keeps every original), the session prepares the requests, and the
model gets a ``recall`` tool to read back what compaction took out.

After each model call the prompt tokens the provider billed for it (the reply's
``usage_metadata["input_tokens"]``) are fed back: to the thread's session
(`Session.record_usage`), or to the engine with the report of the request that was
sent (`ContextEngine.record_usage`), so an engine counting by estimate (Claude,
Gemini) learns its correction. A reply without usage is skipped.

The window is the engine's; ``window="profile"`` takes it from the chat model's
profile (``model.profile["max_input_tokens"]``) instead.

``fill=True`` (or a share, ``fill=0.9``) makes every preparation a one-shot fit:
compact only when over the budget, and then only to fill it (less a small
margin), instead of down to the engine's hysteresis target; each report then
says so in its notes. It suits a graph run once per request (a batch or
evaluation job, a service that receives a whole history at once). A running
agent should keep the default: compacting well below the budget keeps the
prompt prefix the same for many steps, so provider prompt caches keep hitting,
where a filled context compacts again within a step or two.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import threading
import weakref
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeGuard, cast

from .._api import feed_usage
from .._thresholds import check_fill
from ..engine import ContextEngine, Engine, EngineState, Prepared
from ..exceptions import ConfigError, MissingDependencyError
from ..formats._common import canonical_json
from ..formats.langchain import Converted, MessageCache
from ..messages import JSONValue, Message
from ..session import RECALL_TOOL_DESCRIPTION, Session
from ._follow import Follower

try:
    from langchain.agents.middleware.types import (
        AgentMiddleware,
        AgentState,
        ExtendedModelResponse,
        ModelRequest,
        ModelResponse,
    )
    from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, RemoveMessage, SystemMessage
    from langchain_core.runnables import RunnableConfig
    from langchain_core.tools import BaseTool, StructuredTool
    from langchain_core.utils.function_calling import convert_to_openai_tool
    from langgraph.graph.message import REMOVE_ALL_MESSAGES
    from langgraph.runtime import Runtime
except ImportError as exc:  # pragma: no cover - exercised without the extra installed
    raise MissingDependencyError(
        "agentcontext.integrations.langchain needs LangChain v1: pip install 'agentcontext[langchain]'"
    ) from exc

if TYPE_CHECKING:
    from .._report import Report

__all__ = ["ContextMiddleware", "recall_tool"]

_log = logging.getLogger("agentcontext")

Mode = Literal["request", "state"]
SessionSource = Session | Callable[[str | None], Session]
"""A session, or a function giving each LangGraph thread (``thread_id``, None without a checkpointer) its own."""

_DEFAULT_MAX_THREADS = 256


# ----------------------------------------------------------------------------- per-thread state


@dataclass(frozen=True, slots=True)
class _Sent:
    """The preparation of a thread's next model call, kept until that call's usage is read."""

    report: Report
    engine: Engine
    session: Session | None
    given: tuple[int, str | None]
    """How many messages the preparation was given (system excluded), and the last one's id."""
    out: tuple[int, str | None]
    """The same of the messages it returned (what a state-mode compaction wrote into the graph state)."""


@dataclass(eq=False)
class _Thread:
    """What the middleware remembers of one conversation (one LangGraph thread)."""

    cache: MessageCache = field(default_factory=MessageCache)
    state: EngineState | None = None
    """The engine's state after this conversation's last call (None before the first)."""
    written: tuple[str, ...] = ()
    """Ids of the messages a state-mode compaction wrote into the graph state (system excluded)."""
    synced: int = 0
    """How many leading messages of the cache's conversion the session already has."""
    synced_last: str | None = None
    diverged: bool | None = None
    """The session's view is no longer the thread's history (a compaction happened); None: not checked yet."""
    # What the last model call used (state mode: for the next `before_model` to count).
    system: SystemMessage | None = None
    tools: Sequence[BaseTool | dict[str, Any]] = ()
    model: object = None
    basis: tuple[object, ...] | None = None
    """The system message and tools a state-mode `before_model` counted with."""
    sent: _Sent | None = None
    """The last preparation whose model call's usage was not read yet (state mode and the LangGraph hook)."""
    lock: threading.Lock = field(default_factory=threading.Lock)
    """Held from converting a request to recording its result: two runs of one thread take turns."""


class _Threads:
    """One `_Thread` per key; the least recently used is forgotten beyond ``limit`` (thread-safe)."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._items: OrderedDict[object, _Thread] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: object) -> _Thread:
        with self._lock:
            thread = self._items.get(key)
            if thread is None:
                thread = self._items[key] = _Thread()
            else:
                self._items.move_to_end(key)
            while len(self._items) > self._limit:
                self._items.popitem(last=False)
            return thread

    def peek(self, key: object) -> _Thread | None:
        with self._lock:
            return self._items.get(key)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


def _thread_id(runtime: object) -> str | None:
    """The LangGraph ``thread_id`` of the running graph (None without a checkpointer)."""
    info = getattr(runtime, "execution_info", None)
    tid = getattr(info, "thread_id", None)
    if tid is None:
        try:
            from langgraph.config import get_config

            tid = (get_config().get("configurable") or {}).get("thread_id")
        except RuntimeError:  # outside a runnable context
            tid = None
    return None if tid is None else str(tid)


def _key(kind: str, tid: str | None, messages: Sequence[BaseMessage]) -> tuple[object, ...]:
    """Which remembered conversation a run's ``messages`` are: its thread, or without a ``thread_id`` (no
    checkpointer) its first message's id, which LangGraph's ``add_messages`` gave it: concurrent runs
    without one (``agent.batch``, a threaded server) shared one state and sent each other's messages."""
    if tid is not None:
        return (kind, tid)
    return (kind, None, messages[0].id if messages else None)


@contextlib.asynccontextmanager
async def _aheld(lock: threading.Lock) -> AsyncIterator[None]:
    """``lock`` from async code: waits without blocking the event loop (the holder may be on it)."""
    while not lock.acquire(blocking=False):
        await asyncio.sleep(0.002)
    try:
        yield
    finally:
        lock.release()


# ----------------------------------------------------------------------------- the shared core


@dataclass(frozen=True, kw_only=True)
class _Plan:
    """One preparation in progress: what was converted, and what the engine is given."""

    kind: str
    thread: _Thread
    converted: Converted
    system: BaseMessage | None
    messages: Sequence[BaseMessage]
    tools: list[dict[str, JSONValue]]
    engine: Engine
    state: EngineState
    session: Session | None
    instructions: str | None = None
    """The system prompt's text, given to the engine beside the messages rather than as their first."""


@dataclass(frozen=True, kw_only=True)
class _Result:
    """A prepared request in LangChain's terms."""

    system: BaseMessage | None
    messages: Sequence[BaseMessage]
    """Without the system message; the input list itself when nothing changed."""
    changed: bool
    prepared: Prepared
    sent: _Sent | None = None
    """What the model call's usage is fed against (set by `_Core._finish`)."""


class _Core:
    """What the middleware and the LangGraph hook share: threads, tools, conversion and engine calls."""

    def __init__(
        self,
        engine: Engine | Callable[[int], Engine] | None,
        *,
        session: SessionSource | None,
        window: Literal["engine", "profile"],
        max_threads: int,
        fill: bool | float = False,
    ) -> None:
        _check_setup(engine, session, window, max_threads)
        self.fill = check_fill(fill)
        self._engine = engine
        self._session = session
        self._window = window
        self._engines: dict[int, Engine] = {}
        self.threads = _Threads(max_threads)
        self._tools_src: tuple[object, ...] = ()
        self._tools_defs: list[dict[str, JSONValue]] = []
        self._format: tuple[object, list[dict[str, Any]]] = (None, [])
        self._lock = threading.Lock()
        self.last: Prepared | None = None
        self.reports: OrderedDict[str | None, Report] = OrderedDict()
        self._sessions: OrderedDict[object, Session] = OrderedDict()
        """The factory's sessions, one per thread (closed when forgotten, beyond ``max_threads``)."""
        self._session_locks: weakref.WeakKeyDictionary[Session, threading.Lock] = weakref.WeakKeyDictionary()
        """Held from syncing a session to recording its prepare: runs of threads sharing one take turns."""
        self._max_threads = max_threads

    def close(self) -> None:
        """Close the sessions the factory opened, and forget every thread."""
        with self._lock:
            sessions = list(self._sessions.values())
            self._sessions.clear()
        self.threads.clear()
        for session in sessions:
            session.close()

    # ------------------------------------------------------------------ what to prepare with

    def engine_for(self, model: object) -> Engine:
        """The engine for a request to ``model``: the configured one, or one sized by the model's profile."""
        if self._window == "engine":
            if isinstance(self._session, Session):
                return cast(Engine, self._session.engine)
            if self._engine is None:  # a session factory: its sessions bring their engines
                raise ConfigError("no engine: the session factory's sessions prepare the requests")
            return cast(Engine, self._engine)
        window = _profile_window(model)
        with self._lock:
            engine = self._engines.get(window)
            if engine is None:
                engine = self._engines[window] = _engine_with_window(self._engine, window)
        return engine

    def session_for(self, tid: str | None, key: object = None) -> Session | None:
        """Thread ``tid``'s session: the configured one, or the factory's for this thread (one per thread id,
        or without one per conversation, ``key``: the factory is then called with None)."""
        source = self._session
        if source is None or isinstance(source, Session):
            return source
        evicted: list[Session] = []
        slot = tid if tid is not None else key
        with self._lock:
            session = self._sessions.get(slot)
            if session is None:
                session = source(tid)
                if not isinstance(session, Session) or session.engine is None:
                    raise ConfigError(
                        "the session factory must return a Session opened with an engine "
                        f"(Session.open(..., engine=...)), got {type(session).__name__}"
                    )
                self._sessions[slot] = session
            else:
                self._sessions.move_to_end(slot)
            while len(self._sessions) > self._max_threads:
                evicted.append(self._sessions.popitem(last=False)[1])
        for old in evicted:
            old.close()
        return session

    def recall_session(self, tid: str | None) -> Session:
        """The session a recall tool call of thread ``tid`` reads (the one the thread writes to)."""
        session = self.session_for(tid)
        if session is None:  # pragma: no cover - the tool exists only with a session
            raise ConfigError("recall needs a session")
        return session

    def format_tools(self, response_format: object) -> list[dict[str, Any]]:
        """What a structured output format sends (`_format_tools`); the same dicts while it is the same object."""
        if response_format is None:
            return []
        with self._lock:
            if self._format[0] is response_format:
                return self._format[1]
        defs = _format_tools(response_format)
        with self._lock:
            self._format = (response_format, defs)
        return defs

    def tool_definitions(self, tools: Sequence[BaseTool | dict[str, Any]]) -> list[dict[str, JSONValue]]:
        """The request's tools as dicts the engine counts; the same dicts while the tools are the same objects."""
        with self._lock:
            cached = self._tools_src
            if len(cached) == len(tools) and all(a is b for a, b in zip(cached, tools, strict=True)):
                return self._tools_defs
            defs = [_tool_definition(t) for t in tools]
            self._tools_src, self._tools_defs = tuple(tools), defs  # holding the tools keeps their ids unique
            return defs

    # ------------------------------------------------------------------ prepare

    def run(
        self,
        kind: str,
        tid: str | None,
        messages: Sequence[BaseMessage],
        system: BaseMessage | None,
        tools: Sequence[BaseTool | dict[str, Any]],
        model: object,
        *,
        history: bool = False,
    ) -> _Result:
        """Prepare one model call of a thread; ``history``: first feed the last call's usage from the history."""
        thread, session, lock = self._turn(kind, tid, messages)
        with lock:
            if history:
                self.feed_from_history(kind, tid, messages)
            plan = self._plan(kind, thread, session, messages, system, tools, model)
            if plan.session is not None:
                prepared = plan.session.prepare(tools=plan.tools, fill=self.fill)
            else:
                prepared = plan.engine.prepare(
                    plan.converted.messages,
                    tools=plan.tools,
                    instructions=plan.instructions,
                    state=plan.state,
                    fill=self.fill,
                )
            return self._finish(plan, prepared, tid)

    async def arun(
        self,
        kind: str,
        tid: str | None,
        messages: Sequence[BaseMessage],
        system: BaseMessage | None,
        tools: Sequence[BaseTool | dict[str, Any]],
        model: object,
        *,
        history: bool = False,
    ) -> _Result:
        """`run` for async agents (the wait for another run of the thread does not block the loop)."""
        thread, session, lock = self._turn(kind, tid, messages)
        async with _aheld(lock):
            if history:
                self.feed_from_history(kind, tid, messages)
            plan = self._plan(kind, thread, session, messages, system, tools, model)
            if plan.session is not None:
                prepared = await plan.session.aprepare(tools=plan.tools, fill=self.fill)
            else:
                prepared = await plan.engine.aprepare(
                    plan.converted.messages,
                    tools=plan.tools,
                    instructions=plan.instructions,
                    state=plan.state,
                    fill=self.fill,
                )
            return self._finish(plan, prepared, tid)

    def thread(self, kind: str, tid: str | None, messages: Sequence[BaseMessage]) -> _Thread:
        """What the middleware remembers of the conversation ``messages`` are (`_key`)."""
        return self.threads.get(_key(kind, tid, messages))

    def _turn(
        self, kind: str, tid: str | None, messages: Sequence[BaseMessage]
    ) -> tuple[_Thread, Session | None, threading.Lock]:
        """The thread, its session, and the lock its preparations take turns on (the session's, when one)."""
        key = _key(kind, tid, messages)
        thread = self.threads.get(key)
        session = self.session_for(tid, key)
        if session is None:
            return thread, None, thread.lock
        with self._lock:
            lock = self._session_locks.get(session)
            if lock is None:
                lock = self._session_locks[session] = threading.Lock()
        return thread, session, lock

    def _plan(
        self,
        kind: str,
        thread: _Thread,
        session: Session | None,
        messages: Sequence[BaseMessage],
        system: BaseMessage | None,
        tools: Sequence[BaseTool | dict[str, Any]],
        model: object,
    ) -> _Plan:
        """Convert what is new and decide what the engine is given (O(new messages) on a growing history).

        Without a session, a system prompt of text goes to the engine as ``instructions``, outside the
        messages: a prompt that changes at every call (``@dynamic_prompt``: a clock, a to-do count) made
        every call a full pass and a new compaction. A session logs it as the history's first message.
        """
        thread.system = cast("SystemMessage | None", system)
        instructions = _text_of_system(system) if session is None else None
        if instructions is not None:
            system = None
        converted = thread.cache.convert(messages, system=system)
        engine = cast(Engine, session.engine) if session is not None else self.engine_for(model)
        if session is not None:
            _sync_session(thread, session, converted, system is not None)
        skip = 1 if system is not None else 0
        state = thread.state
        if state is None or not (
            converted.appended or _starts_with(converted.messages, thread.written, skip)
        ):
            state = EngineState.new()  # a rewritten history: the engine must look at all of it
        return _Plan(
            kind=kind,
            thread=thread,
            converted=converted,
            system=thread.system,
            messages=messages,
            tools=self.tool_definitions(tools),
            engine=engine,
            state=state,
            session=session,
            instructions=instructions,
        )

    def _finish(self, plan: _Plan, prepared: Prepared, tid: str | None) -> _Result:
        """The prepared messages in LangChain's terms: O(1) when unchanged, else O(messages after the kept prefix)."""
        thread = plan.thread
        thread.state = prepared.state
        self.last = prepared
        with self._lock:
            self.reports[tid] = prepared.report
            self.reports.move_to_end(tid)
            while len(self.reports) > self._max_threads:
                self.reports.popitem(last=False)
        result = (
            self._finish_session(plan, prepared)
            if plan.session is not None
            else self._convert(plan, prepared)
        )
        sent = _Sent(
            report=prepared.report,
            engine=plan.engine,
            session=plan.session,
            given=_tip(plan.messages),
            out=_tip(result.messages),
        )
        thread.sent = sent
        if plan.kind == "state" and result.changed:
            # What goes into the graph state: the next call's history starts with it.
            out = prepared.messages
            skip = 1 if plan.system is not None and len(out) and out[0].role == "system" else 0
            thread.written = tuple(m.id for m in out[skip:])
        return dataclasses.replace(result, sent=sent)

    def _convert(self, plan: _Plan, prepared: Prepared) -> _Result:
        thread = plan.thread
        ours, out = plan.converted.messages, prepared.messages
        compaction = prepared.compaction
        keep = compaction.keep if compaction is not None else len(ours)
        if keep == len(ours) == len(out):
            return _Result(system=plan.system, messages=plan.messages, changed=False, prepared=prepared)
        tail = out[keep:]
        cache = thread.cache
        converted = [cache.back(m) for m in tail]
        cache.keep_made(m.id for m in tail)
        if plan.system is None or plan.instructions is not None:  # no system message among the converted
            return _Result(
                system=plan.system,
                messages=[*plan.messages[:keep], *converted],
                changed=True,
                prepared=prepared,
            )
        if keep == 0:  # the engine changed the system message itself (only when nothing else could fit)
            system = converted[0] if converted and isinstance(converted[0], SystemMessage) else plan.system
            return _Result(system=system, messages=converted[1:], changed=True, prepared=prepared)
        return _Result(
            system=plan.system,
            messages=[*plan.messages[: keep - 1], *converted],
            changed=True,
            prepared=prepared,
        )

    def _finish_session(self, plan: _Plan, prepared: Prepared) -> _Result:
        """The session's prepared view in LangChain's terms; the input itself while the view is the history."""
        thread, ours, out = plan.thread, plan.converted.messages, prepared.messages
        if prepared.compaction is not None:
            thread.diverged = True
        skip = 1 if plan.system is not None else 0
        body = out[1:] if skip and len(out) and out[0].role == "system" else out
        if len(body) == len(ours) - skip and (
            not thread.diverged or all(a.id == b.id for a, b in zip(body, ours[skip:], strict=True))
        ):  # the view is the history (O(1) until the first compaction; then O(view), which is bounded)
            return _Result(system=plan.system, messages=plan.messages, changed=False, prepared=prepared)
        converted = [thread.cache.back(m) for m in body]
        thread.cache.keep_made(m.id for m in body)
        # The session keeps the system prompt it began with; the request sends today's.
        return _Result(system=plan.system, messages=converted, changed=True, prepared=prepared)

    # ------------------------------------------------------------------ usage

    def take_sent(self, kind: str, tid: str | None, messages: Sequence[BaseMessage]) -> _Sent | None:
        """The thread's preparation whose model call's usage was not read yet (it is read once)."""
        thread = self.threads.peek(_key(kind, tid, messages))
        if thread is None:
            return None
        sent, thread.sent = thread.sent, None
        return sent

    def feed_from_history(self, kind: str, tid: str | None, messages: Sequence[BaseMessage]) -> None:
        """Feed the usage of the thread's last model call, read from the history that now holds its reply.

        For preparations that never see the response (the LangGraph hook): the reply is
        the message right after the ones the preparation was given, and only then.
        """
        sent = self.take_sent(kind, tid, messages)
        if sent is None:
            return
        n, last = sent.given
        if len(messages) > n and (n == 0 or messages[n - 1].id == last):
            self.feed(sent, messages[n])

    @staticmethod
    def feed(sent: _Sent, reply: object) -> None:
        """Give the usage ``reply`` reports to the session or engine that prepared its request.

        A reply without usage (the provider sent none, a stream without ``stream_usage``)
        has nothing to teach: it is skipped.
        """
        usage = _usage(reply)
        if usage is None:
            return
        if sent.session is None:
            feed_usage(sent.engine, sent.report, usage.prompt)
            return
        try:
            # Before the reply is appended (at the next step's sync), as `Session.record_usage` asks.
            sent.session.record_usage(
                prompt_tokens=usage.prompt,
                completion_tokens=usage.completion,
                total_tokens=usage.total,
                cached_tokens=usage.cached,
                model=usage.model,
            )
        except Exception as e:  # the call was made and paid for: logging its usage must not fail it
            _log.warning("agentcontext: a model call's usage was not logged: %s: %s", type(e).__name__, e)

    def sync(self, kind: str, tid: str | None, messages: Sequence[BaseMessage]) -> None:
        """Append to the thread's session what the run added since its last model call (its final answer)."""
        if self._session is None:
            return
        if self.threads.peek(_key(kind, tid, messages)) is None:
            return  # no model call of this run was seen: nothing of it to log
        thread, session, lock = self._turn(kind, tid, messages)
        if session is None:
            return
        with lock:
            converted = thread.cache.convert(messages, system=thread.system)
            _sync_session(thread, session, converted, thread.system is not None)


@dataclass(frozen=True, slots=True)
class _Usage:
    prompt: int
    completion: int | None
    total: int | None
    cached: int | None
    model: str | None


def _reply_message(response: object) -> AIMessage | None:
    """The model's message in what a model-call handler returned (a `ModelResponse`, an `AIMessage`...)."""
    if isinstance(response, ExtendedModelResponse):
        response = response.model_response
    if isinstance(response, ModelResponse):
        # Its result is the AIMessage, followed by a ToolMessage when structured output used a tool.
        return next((m for m in reversed(response.result) if isinstance(m, AIMessage)), None)
    return response if isinstance(response, AIMessage) else None


def _usage(reply: object) -> _Usage | None:
    """What the provider billed for the call ``reply`` answers; None when it reported nothing (or 0)."""
    message = _reply_message(reply)
    usage = message.usage_metadata if message is not None else None
    if not usage:
        return None
    # `usage_metadata["input_tokens"]` is this one call's prompt as billed: "the sum of all input
    # token types" (langchain_core.messages.ai.UsageMetadata), cached ones included, which is what
    # `record_usage` wants. langchain-openai copies OpenAI's `usage.prompt_tokens` (which counts the
    # cached prefix; `input_token_details["cache_read"]` is its `prompt_tokens_details.cached_tokens`,
    # "priority_cache_read" or "flex_cache_read" on those service tiers); langchain-anthropic adds
    # `cache_read_input_tokens` and `cache_creation_input_tokens` to Anthropic's `input_tokens`.
    # A streamed ChatOpenAI call has usage only with `stream_usage=True` (the default only for
    # OpenAI's own base URL); without it there is none, and nothing is fed.
    prompt = usage.get("input_tokens")
    if not _count(prompt) or prompt == 0:
        return None
    details: Mapping[str, object] = usage.get("input_token_details") or {}
    cached = next((v for k, v in details.items() if k == "cache_read" or k.endswith("_cache_read")), None)
    completion, total = usage.get("output_tokens"), usage.get("total_tokens")
    model = message.response_metadata.get("model_name") if message is not None else None
    return _Usage(
        prompt=prompt,
        completion=completion if _count(completion) else None,
        total=total if _count(total) else None,
        cached=cached if _count(cached) else None,
        model=model if isinstance(model, str) and model else None,
    )


def _count(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _tip(messages: Sequence[BaseMessage]) -> tuple[int, str | None]:
    """How many messages, and the last one's id: enough to know a list still starts with them."""
    return len(messages), messages[-1].id if messages else None


def _sent_for(sent: _Sent | None, request: ModelRequest[Any]) -> _Sent | None:
    """``sent`` (a state-mode `before_model`'s preparation) when ``request`` carries what it wrote, else None."""
    if sent is None or sent.out != _tip(request.messages):
        return None  # another middleware changed the messages since: the usage is not for that preparation
    return sent


def _check_setup(engine: object, session: SessionSource | None, window: str, max_threads: object) -> None:
    if window not in ("engine", "profile"):
        raise ConfigError(f"window must be 'engine' or 'profile', got {window!r}")
    if isinstance(max_threads, bool) or not isinstance(max_threads, int) or max_threads < 1:
        raise ConfigError(f"max_threads must be an int >= 1, got {max_threads!r}")
    if session is not None:
        if not (isinstance(session, Session) or callable(session)):
            raise ConfigError(
                f"session must be a Session or a function thread_id -> Session, got {type(session).__name__}"
            )
        if window == "profile":
            raise ConfigError("window='profile' needs an engine per window, and a session has one engine")
        if isinstance(session, Session):
            if session.engine is None:
                raise ConfigError(
                    "the session has no engine: open it with engine=... so it can prepare requests"
                )
            if engine is not None and engine is not session.engine:
                raise ConfigError(
                    "the session prepares with its own engine: pass the engine to the session only"
                )
        return
    if engine is None:
        raise ConfigError("pass an engine (e.g. ContextEngine(model='gpt-4o')) or a session")
    if window == "engine" and not _is_engine(engine):
        raise ConfigError(
            f"engine must implement agentcontext.Engine (a ContextEngine), got {type(engine).__name__}"
        )
    if window == "profile" and not (isinstance(engine, ContextEngine) or callable(engine)):
        raise ConfigError(
            "window='profile' needs a ContextEngine to copy for the profile's window, or a function window -> Engine"
        )


def _is_engine(engine: object) -> bool:
    return all(hasattr(engine, name) for name in ("prepare", "aprepare", "counter", "budget"))


def _profile_window(model: object) -> int:
    profile = getattr(model, "profile", None)
    window = profile.get("max_input_tokens") if isinstance(profile, Mapping) else None
    if isinstance(window, bool) or not isinstance(window, int) or window < 16:
        raise ConfigError(
            f"window='profile' needs the chat model's profile['max_input_tokens'], but the {type(model).__name__} "
            f"has {window!r}; give the model profile={{'max_input_tokens': ...}}, or use the engine's window"
        )
    return window


def _engine_with_window(template: object, window: int) -> Engine:
    if isinstance(template, ContextEngine):
        return template.with_window(window)
    engine = cast("Callable[[int], Engine]", template)(window)
    if not _is_engine(engine):
        raise ConfigError(f"the engine factory returned a {type(engine).__name__}, not an Engine")
    return engine


def _tool_definition(tool: object) -> dict[str, JSONValue]:
    if isinstance(tool, dict):
        fn = tool.get("function")
        if isinstance(tool.get("name"), str) or (isinstance(fn, Mapping) and isinstance(fn.get("name"), str)):
            return tool
        # A provider's built-in tool ({"type": "web_search"...}): counted as its JSON, which errs high.
        return {"name": str(tool.get("type", "tool")), "description": canonical_json(tool)}
    return cast("dict[str, JSONValue]", convert_to_openai_tool(cast(BaseTool, tool)))


def _text_of_system(system: BaseMessage | None) -> str | None:
    """The text of a system message of text only (cache breakpoints on its blocks aside); None otherwise."""
    if system is None:
        return None
    content = system.content
    if isinstance(content, str):
        return content
    if all(isinstance(b, str) or (isinstance(b, dict) and b.get("type") == "text") for b in content):
        return system.text
    return None


def _format_tools(response_format: object) -> list[dict[str, Any]]:
    """The tool definitions a structured output format costs: a `ToolStrategy`'s tools, or the JSON schema a
    `ProviderStrategy` (or an `AutoStrategy`, or a bare schema, which may become either) sends beside them."""
    from langchain.agents.structured_output import AutoStrategy, ProviderStrategy, ToolStrategy

    if isinstance(response_format, ToolStrategy):
        specs = list(response_format.schema_specs)
    elif isinstance(response_format, ProviderStrategy):
        specs = [response_format.schema_spec]
    else:
        schema = response_format.schema if isinstance(response_format, AutoStrategy) else response_format
        try:
            specs = list(ToolStrategy(schema).schema_specs)  # type: ignore[arg-type]
        except (TypeError, ValueError):  # not a schema LangChain reads: it would refuse it itself
            return []
    return [
        {
            "type": "function",
            "function": {"name": spec.name, "description": spec.description, "parameters": spec.json_schema},
        }
        for spec in specs
    ]


def _starts_with(messages: Sequence[Message], ids: tuple[str, ...], skip: int) -> bool:
    """True when ``messages[skip:]`` begins with the messages of ``ids`` (O(len(ids)))."""
    if not ids or len(messages) < len(ids) + skip:
        return False
    return all(messages[skip + i].id == mid for i, mid in enumerate(ids))


def _sync_session(thread: _Thread, session: Session, converted: Converted, has_system: bool) -> None:
    """Make ``session``'s view end with the thread's history: O(new) while it grows (what is new is appended).

    A history the thread rewrote (messages removed with ``RemoveMessage``, a run from an earlier
    checkpoint, a restart) is followed by `Follower`: the view is rewound to where both agree, any
    compaction whose summary stands for what the thread no longer holds undone first (both recorded),
    so the model is never sent a message the thread took back.
    """
    msgs = converted.messages
    skip = 1 if has_system else 0
    if (
        converted.appended
        and 0 < thread.synced <= len(msgs)
        and msgs[thread.synced - 1].id == thread.synced_last
    ):
        new = msgs[thread.synced :]
        if new:
            session.extend(new)
    elif _starts_with(msgs, thread.written, skip):
        new = msgs[skip + len(thread.written) :]
        if new:
            session.extend(new)
    else:
        Follower(session, chained=False).follow(msgs)
        thread.diverged = None  # rewound or undone: compare the view with the history again
    if thread.diverged is None:
        thread.diverged = bool(session.compactions)
    thread.synced, thread.synced_last = len(msgs), msgs[-1].id if msgs else None


# ----------------------------------------------------------------------------- the recall tool


def recall_tool(session: SessionSource, *, name: str = "recall") -> BaseTool:
    """A LangChain tool the model calls to read back what compaction took out (`Session.handle_recall`).

    `ContextMiddleware` adds it by itself when it has a session; use this for agents
    built otherwise.

    Args:
        session: the session, or a function giving the session of a thread
            (``thread_id``, taken from the run's config).
        name: the tool's name.
    """
    if not (isinstance(session, Session) or callable(session)):
        raise ConfigError(
            f"session must be a Session or a function thread_id -> Session, got {type(session).__name__}"
        )

    # Annotated exactly RunnableConfig: LangChain then injects the run's config and hides the parameter
    # from the model (it matches the annotation by identity; `RunnableConfig | None` got neither).
    def recall(ref: str, config: RunnableConfig, offset: int | None = None) -> str:
        if isinstance(session, Session):
            target = session
        else:
            tid = (config.get("configurable") or {}).get("thread_id")
            target = session(None if tid is None else str(tid))
        return target.handle_recall({"ref": ref, "offset": offset})

    return StructuredTool.from_function(recall, name=name, description=RECALL_TOOL_DESCRIPTION)


# ----------------------------------------------------------------------------- the middleware


class ContextMiddleware(AgentMiddleware[AgentState[Any], Any, Any]):
    """A LangChain v1 agent middleware that keeps every model call inside the context window.

    Args:
        engine: the engine that prepares requests (e.g. ``ContextEngine(model="gpt-4o")``);
            optional when ``session`` brings one. With ``window="profile"``: a
            `ContextEngine` to copy for the profile's window, or a function
            ``window -> Engine``.
        mode: ``"request"`` (default) prepares each model request and leaves the graph
            state alone; ``"state"`` writes each compaction into the graph state, so a
            checkpointed thread keeps it (see the module docstring).
        session: a `Session` (one conversation) or a function ``thread_id -> Session``
            (one per thread, closed when the thread is forgotten); every message is
            appended to it, it prepares the requests, and the agent gets a ``recall`` tool.
        window: ``"engine"`` (default): the engine's window; ``"profile"``: the chat
            model's ``profile["max_input_tokens"]``.
        max_threads: how many threads to remember (the least recently used is
            forgotten; its next step costs one pass over its history).
        recall: give the agent the ``recall`` tool when there is a session (default True).
        fill: ``False`` (default): compact down to the engine's target, which keeps the prompt
            prefix stable for many steps (a running agent). ``True``, or a share of the budget
            such as ``0.9``: a one-shot fit that compacts only when over the budget and then
            fills it (a graph run once per request: a batch job, a whole history sent once).

    Raises:
        ConfigError: a bad option (named), ``fill`` included.
    """

    def __init__(
        self,
        engine: Engine | Callable[[int], Engine] | None = None,
        *,
        mode: Mode = "request",
        session: SessionSource | None = None,
        window: Literal["engine", "profile"] = "engine",
        max_threads: int = _DEFAULT_MAX_THREADS,
        recall: bool = True,
        fill: bool | float = False,
    ) -> None:
        super().__init__()
        if mode not in ("request", "state"):
            raise ConfigError(f"mode must be 'request' or 'state', got {mode!r}")
        self.mode: Mode = mode
        self._core = _Core(engine, session=session, window=window, max_threads=max_threads, fill=fill)
        self.tools = [recall_tool(self._core.recall_session)] if session is not None and recall else []

    @property
    def last(self) -> Prepared | None:
        """The engine's `Prepared` for the latest model call, any thread (``.report`` says what it did)."""
        return self._core.last

    def close(self) -> None:
        """Close the sessions this middleware opened with its session factory (a given `Session` stays open)."""
        self._core.close()

    def report(self, thread_id: str | None = None) -> Report | None:
        """What the engine did for the latest model call of ``thread_id`` (None: no call seen)."""
        with self._core._lock:
            return self._core.reports.get(thread_id)

    # ------------------------------------------------------------------ request mode (and the state-mode guard)

    def _guarded(self, request: ModelRequest[Any]) -> tuple[bool, str | None]:
        """Whether this call must be prepared here (always in request mode), and its thread id."""
        tid = _thread_id(request.runtime)
        if self.mode == "state":
            thread = self._core.thread("state", tid, request.messages)
            tools = self._tools(request)
            thread.system, thread.tools, thread.model = request.system_message, tools, request.model
            if thread.basis is not None and thread.basis == (request.system_message, tools):
                return False, tid  # before_model counted exactly this request's system prompt and tools
        return True, tid

    def _run_args(self, request: ModelRequest[Any], tid: str | None) -> tuple[Any, ...]:
        return ("request", tid, request.messages, request.system_message, self._tools(request), request.model)

    def _tools(self, request: ModelRequest[Any]) -> list[BaseTool | dict[str, Any]]:
        """The request's tools and what its structured output adds, which create_agent binds after the
        middleware ran: a 4,000-token schema went uncounted and the provider refused the request."""
        return [*request.tools, *self._core.format_tools(request.response_format)]

    @staticmethod
    def _apply(request: ModelRequest[Any], result: _Result) -> ModelRequest[Any]:
        if not result.changed:
            return request
        return request.override(
            system_message=cast("SystemMessage | None", result.system),
            messages=cast("list[AnyMessage]", list(result.messages)),
        )

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]:
        """Prepare the request with the engine, then call the model.

        In state mode this is a guard: it only prepares when `before_model` could not
        count this request's system prompt and tools (a thread's first call).
        """
        prepare, tid = self._guarded(request)
        before = self._core.take_sent("state", tid, request.messages) if self.mode == "state" else None
        if not prepare:
            response = handler(request)
            sent = _sent_for(before, request)
        else:
            result = self._core.run(*self._run_args(request, tid))
            response = handler(self._apply(request, result))
            sent = result.sent  # this call's own preparation: no other thread's can be taken for it
        if sent is not None:
            self._core.feed(sent, response)
        return response

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]:
        """`wrap_model_call` for async agents (an async summarizer runs without blocking the loop)."""
        prepare, tid = self._guarded(request)
        before = self._core.take_sent("state", tid, request.messages) if self.mode == "state" else None
        if not prepare:
            response = await handler(request)
            sent = _sent_for(before, request)
        else:
            result = await self._core.arun(*self._run_args(request, tid))
            response = await handler(self._apply(request, result))
            sent = result.sent  # this call's own preparation: no other thread's can be taken for it
        if sent is not None:
            self._core.feed(sent, response)
        return response

    # ------------------------------------------------------------------ state mode

    def _state_args(self, state: AgentState[Any], runtime: Runtime[Any]) -> tuple[Any, ...] | None:
        """What `_Core.run` is given for a state-mode `before_model`; None when not in state mode."""
        if self.mode != "state":
            return None
        tid = _thread_id(runtime)
        messages = state["messages"]
        thread = self._core.thread("state", tid, messages)
        if thread.model is None:
            # No model call of this thread seen yet (its first, or the first since a restart): its system
            # prompt, tools and model (window="profile") are unknown, so `wrap_model_call` prepares it.
            return None
        thread.basis = (thread.system, thread.tools)
        return ("state", tid, messages, thread.system, thread.tools, thread.model)

    @staticmethod
    def _persist(result: _Result) -> dict[str, Any] | None:
        if not result.changed:
            return None
        return {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), *result.messages]}

    def before_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        """State mode: compact the graph state's messages when needed and write the result back."""
        args = self._state_args(state, runtime)
        return None if args is None else self._persist(self._core.run(*args))

    async def abefore_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        """`before_model` for async agents."""
        args = self._state_args(state, runtime)
        return None if args is None else self._persist(await self._core.arun(*args))

    # ------------------------------------------------------------------ the end of a run

    def after_agent(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        """With a session: log what the run added after its last model call (the final answer)."""
        self._core.sync(self.mode, _thread_id(runtime), state["messages"])
        return None

    async def aafter_agent(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        """`after_agent` for async agents."""
        self._core.sync(self.mode, _thread_id(runtime), state["messages"])
        return None
