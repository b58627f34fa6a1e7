"""The OpenAI Agents SDK: a session whose history fits the window, and a per-call input filter.

::

    import agentcontext as ac
    from agentcontext.integrations.openai_agents import AgentContextSession

    engine = ac.ContextEngine(model="gpt-4o")
    session = AgentContextSession(ac.Session.open("runs/chat-42.jsonl", engine=engine))
    result = await Runner.run(agent, "fix the failing test", session=session, run_config=session.run_config())

`AgentContextSession` implements the SDK's ``Session`` protocol on an
agentcontext `agentcontext.Session` (any store: JSON Lines, SQLite...).
``get_items`` returns what the model should see: the session's view prepared by
its engine (it fits, it is valid, its prefix stays stable between compactions
so prompt caches keep hitting), written back as Responses items by
`agentcontext.formats.responses`; the log keeps every original item, and
compacted ones can be recalled (`agentcontext.Session.recall`). ``pop_item``
and ``clear_session`` are recorded (a rewind of the view), never deletions.

The SDK reads a session once, when a run starts; inside the run it sends the
history plus what the run produced, which a long run of large tool outputs
takes past the window. ``session.run_config()`` (or ``RunConfig(
call_model_input_filter=session.call_model_input_filter)``) adds the per-call
filter that keeps every model call inside the window too.

`call_model_input_filter` is the same filter for users who keep the SDK's own
sessions (or none): it prepares ``ModelInputData.input`` before every model
call, counting the instructions and the agent's function tools, with one
`EngineState` per conversation so a step costs O(new items).

`UsageHooks` (``Runner.run(..., hooks=UsageHooks())``) feeds the prompt tokens
the provider billed for each call the filter prepared back to the engine
(`ContextEngine.record_usage`, with that call's report) and, with a session, to
its log (`agentcontext.Session.record_usage`): an engine counting by estimate
(Claude, Gemini) learns how far off its counts are and fits later calls to
what the provider bills.

Both take ``fill=True`` (or a share such as ``fill=0.9``) for a one-shot fit:
compact only when over the budget, and then only to fill it (less a small
margin), instead of down to the engine's hysteresis target; the report's notes
say which. Use it when each run stands alone (a batch or evaluation job, a
history handed over once); an agent that keeps running should keep the default,
whose compactions leave room for many steps with the same prompt prefix, so
provider prompt caches keep hitting.

Both work with any model the SDK drives (``OpenAIResponsesModel``,
``OpenAIChatCompletionsModel``, LiteLLM...): the SDK's items are Responses
items whatever the provider. Requires ``pip install 'agentcontext[openai-agents]'``
(the SDK 0.20: versions from 0.21 need ``openai>=3``, which LiteLLM does not support yet).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import warnings
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from .._api import feed_usage
from .._report import Report
from .._thresholds import check_fill
from ..engine import Engine, EngineState
from ..exceptions import (
    ConfigError,
    ConversionWarning,
    InvalidMessageError,
    MissingDependencyError,
    UsageError,
)
from ..formats import responses
from ..formats._common import canonical_json
from ..messages import JSONValue, Message, safe_split_points
from ..session import Session
from ._common import LRU, Weight, log_report

try:
    from agents import (
        Agent,
        AgentOutputSchema,
        AgentOutputSchemaBase,
        FunctionTool,
        Handoff,
        ModelResponse,
        RunConfig,
        RunContextWrapper,
        RunHooks,
        handoff,
    )
    from agents.memory import SessionSettings
    from agents.run_config import CallModelData, ModelInputData
except ImportError as e:  # pragma: no cover - exercised without the extra installed
    raise MissingDependencyError(
        "agentcontext.integrations.openai_agents needs the OpenAI Agents SDK: "
        "pip install 'agentcontext[openai-agents]'"
    ) from e

if TYPE_CHECKING:
    from agents.items import TResponseInputItem

__all__ = ["AgentContextSession", "ModelInputFilter", "UsageHooks", "call_model_input_filter"]

_log = logging.getLogger("agentcontext")
logger = logging.getLogger("agentcontext.openai_agents")


def _continues_on_server(items: Sequence[object]) -> bool:
    """Whether ``items`` open with the output of a call they do not hold: what the SDK sends after a response
    the server keeps (``previous_response_id``, ``conversation_id``). An output without its call later in
    a history is the client's bug, repaired and reported; first, it answers the server's last response."""
    first = items[0] if items else None
    if not isinstance(first, Mapping) or not str(first.get("type", "")).endswith("_output"):
        return False
    call_id = first.get("call_id")
    return not any(
        isinstance(i, Mapping)
        and i.get("call_id") == call_id
        and not str(i.get("type", "")).endswith("_output")
        for i in items
    )


def _function(name: str, description: str | None, parameters: Mapping[str, Any]) -> dict[str, JSONValue]:
    return cast(
        "dict[str, JSONValue]",
        {"type": "function", "name": name, "description": description or "", "parameters": dict(parameters)},
    )


def _output_schema(output_type: object) -> AgentOutputSchemaBase | None:
    """The schema a structured ``output_type`` sends (None for plain text), as the SDK builds it."""
    if output_type is None or output_type is str:
        return None
    schema = (
        output_type
        if isinstance(output_type, AgentOutputSchemaBase)
        else AgentOutputSchema(cast("type[Any]", output_type))
    )
    return None if schema.is_plain_text() else schema


def _items_of(dicts: list[responses.ResponseItem]) -> list[TResponseInputItem]:
    # Responses items are plain dicts; the SDK's TypedDict union is a static view of the same data.
    return dicts  # type: ignore[return-value]


def _dicts_of(items: Sequence[TResponseInputItem]) -> list[Mapping[str, object]]:
    return cast("list[Mapping[str, object]]", list(items))


# ----------------------------------------------------------------------------- the per-call filter


@dataclass(eq=False)
class _Conversation:
    """What the filter remembers of one conversation: the items it converted and the engine's state."""

    converter: responses.ResponsesConverter
    seen: list[object] = field(default_factory=list)
    """The last input's items (their objects: a growing input shares them)."""
    state: EngineState = field(default_factory=EngineState.new)
    cache: MutableMapping[str, str] = field(default_factory=lambda: LRU(4096))
    weight: Weight = field(default_factory=Weight)
    """About how much memory it holds (``max_conversation_bytes``)."""


class ModelInputFilter:
    """``RunConfig.call_model_input_filter`` that fits every model call's input (see `call_model_input_filter`)."""

    def __init__(
        self,
        engine: Engine,
        *,
        key: Callable[[CallModelData[Any]], str] | None = None,
        max_conversations: int = 1024,
        max_conversation_bytes: int = 512 * 1024 * 1024,
        fill: bool | float = False,
    ) -> None:
        for name, value in (
            ("max_conversations", max_conversations),
            ("max_conversation_bytes", max_conversation_bytes),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(f"{name} must be a positive int, got {value!r}")
        self.fill = check_fill(fill)
        self.engine = engine
        self._key = key
        # Bounded by memory too: finished conversations were kept at about 7 times their size, 1,024 of them.
        self._conversations: LRU[str, _Conversation] = LRU(
            max_conversations, max_weight=max_conversation_bytes
        )
        self._tools: tuple[tuple[object, ...], list[dict[str, JSONValue]]] = ((), [])
        self._session: AgentContextSession | None = None
        """The session whose conversation this filter fits (set by `AgentContextSession`): usage goes to its log."""
        self.last: Report | None = None
        """The report of the latest call this filter prepared (any conversation); each is also logged on the
        ``agentcontext.openai_agents`` logger: repairs as warnings, compactions as one info line."""

    async def __call__(self, data: CallModelData[Any]) -> ModelInputData:
        """Prepare ``data.model_data.input`` (the instructions counted, never changed)."""
        items = list(data.model_data.input)
        instructions = data.model_data.instructions
        if _continues_on_server(items):
            # The history is the server's (previous_response_id, conversation_id): these items follow it,
            # and fitting them as a whole conversation rewrote the call's output as text (a 400 at every
            # tool step). They go as they are; the server holds what came before.
            _log.debug("agentcontext: the input continues a conversation the server holds: sent unchanged")
            return ModelInputData(input=items, instructions=instructions)
        key, conversation = self._conversation(data, items)
        messages = self._convert(conversation, items)
        self._conversations.weigh(key, conversation.weight.of(messages))
        tools = await self._tool_definitions(data)
        prepared = await self.engine.aprepare(
            messages,
            tools=tools,
            instructions=instructions or None,
            state=conversation.state,
            fill=self.fill,
        )
        conversation.state = prepared.state
        self.last = prepared.report
        log_report(logger, "agentcontext: a model call's input", prepared.report)
        if self._session is not None:  # what the session's get_items counts beside the history next time
            self._session._beside = (tools, instructions or None)
        fitted = _items_of(
            responses.from_messages(list(prepared.messages), validate=False, cache=conversation.cache)
        )
        # What this task is about to send, for `UsageHooks` (the SDK calls the filter, the model and
        # the hooks in the run's own task, so concurrent runs never see each other's requests).
        _SENT.set(_Sent(owner=self, report=prepared.report, items=list(fitted)))
        return ModelInputData(input=fitted, instructions=instructions)

    def _conversation(
        self, data: CallModelData[Any], items: list[TResponseInputItem]
    ) -> tuple[str, _Conversation]:
        key = self._key(data) if self._key is not None else (canonical_json(items[0]) if items else "")
        conversation: _Conversation | None = self._conversations.get(key)
        if conversation is None:
            conversation = _Conversation(converter=responses.ResponsesConverter(unknown="keep"))
            self._conversations[key] = conversation
        return key, conversation

    @staticmethod
    def _convert(conversation: _Conversation, items: list[TResponseInputItem]) -> list[Message]:
        """The canonical messages of ``items``, converting only what follows the part seen last time."""
        fed = conversation.converter.items_fed
        seen = conversation.seen
        # Identity first, then equality: an agent's input grows by appending, so this is O(new) in practice.
        if len(items) < fed or items[:fed] != seen[:fed]:
            conversation.converter = responses.ResponsesConverter(unknown="keep")
            conversation.state = EngineState.new()
            fed = 0
        try:
            conversation.converter.feed(_dicts_of(items[fed:]))
        except InvalidMessageError:
            conversation.converter = responses.ResponsesConverter(unknown="keep")  # start afresh next call
            conversation.seen = []
            raise
        conversation.seen = list(items)
        return conversation.converter.messages()

    async def _tool_definitions(self, data: CallModelData[Any]) -> list[dict[str, JSONValue]]:
        """What the SDK sends beside the input, as the engine counts it: the agent's function tools and its
        MCP servers' tools (as the SDK lists them for the call: ``is_enabled`` applied), its handoffs (each a
        ``transfer_to_...`` tool) and its structured output's schema; the same dicts while they say the
        same. A run with ten handoffs went over the window: they were not counted; so were MCP tools."""
        agent = data.agent
        static = [t for t in getattr(agent, "tools", ()) if getattr(t, "is_enabled", True) is not False]
        listed: list[Any] = static
        if getattr(agent, "mcp_servers", None) or any(
            callable(getattr(t, "is_enabled", None)) for t in static
        ):
            # Listed as the SDK lists them for this call (a second listing: an MCP server without
            # cache_tools_list=True is asked again). The filter is given the run's context, not its wrapper:
            # a wrapper of it is what the SDK's tool filters and is_enabled callables read.
            try:
                listed = await agent.get_all_tools(RunContextWrapper(context=data.context))
            except Exception as exc:  # the SDK listed them a moment ago for this call; count what is known
                _log.warning("agentcontext: could not list the agent's tools (%s); counting its own", exc)
        tools = tuple(t for t in listed if isinstance(t, FunctionTool))
        handoffs = tuple(getattr(agent, "handoffs", ()))
        output = getattr(agent, "output_type", None)
        # MCP tools are new objects at every listing: they are compared by what they say.
        sources = (*((t.name, t.description, t.params_json_schema) for t in tools), *handoffs, output)
        cached, definitions = self._tools
        same = len(cached) == len(sources) and all(
            a is b or (isinstance(a, tuple) and a == b) for a, b in zip(cached, sources, strict=True)
        )  # agents by identity: their equality walks their handoffs, which may lead back to them
        if not same:
            definitions = [_function(t.name, t.description, t.params_json_schema) for t in tools]
            for item in handoffs:
                h = item if isinstance(item, Handoff) else handoff(item) if isinstance(item, Agent) else None
                if h is not None and h.is_enabled is not False:
                    definitions.append(_function(h.tool_name, h.tool_description, h.input_json_schema))
            schema = _output_schema(output)
            if schema is not None:
                definitions.append(
                    _function(schema.name(), "the run's structured output", schema.json_schema())
                )
            self._tools = (sources, definitions)
        return definitions

    async def _record_usage(self, report: Report, response: ModelResponse, model: str | None) -> None:
        """Feed what the provider billed for the request ``report`` describes (see `UsageHooks`)."""
        # ModelResponse.usage is this one call's `agents.Usage` (retries included: its input_tokens
        # are the successful attempt's). input_tokens is what the provider billed for the whole
        # prompt (instructions, tools and input): the Responses API's usage.input_tokens, Chat
        # Completions' usage.prompt_tokens (the SDK's OpenAIChatCompletionsModel and LitellmModel
        # copy it there), and cached tokens are a part of it (input_tokens_details.cached_tokens),
        # not an addition. A provider that sent no usage leaves it 0: nothing to learn.
        usage = response.usage
        prompt = usage.input_tokens
        if isinstance(prompt, bool) or not isinstance(prompt, int) or prompt <= 0:
            return
        session = self._session
        if session is None:
            feed_usage(self.engine, report, prompt)
            return
        cached = getattr(usage.input_tokens_details, "cached_tokens", None)
        try:
            await session._record_usage(
                prompt,
                completion_tokens=usage.output_tokens or None,
                total_tokens=usage.total_tokens or None,
                cached_tokens=cached if isinstance(cached, int) and not isinstance(cached, bool) else None,
                model=model,
                report=report,
            )
        except Exception as e:  # the call was made and paid for: logging its usage must not fail it
            _log.warning("agentcontext: a model call's usage was not logged: %s: %s", type(e).__name__, e)


def call_model_input_filter(
    engine: Engine,
    *,
    key: Callable[[CallModelData[Any]], str] | None = None,
    max_conversations: int = 1024,
    max_conversation_bytes: int = 512 * 1024 * 1024,
    fill: bool | float = False,
) -> ModelInputFilter:
    """A ``RunConfig.call_model_input_filter`` that keeps every model call inside ``engine``'s window.

    Before each model call it converts the input items to canonical messages
    (`agentcontext.formats.responses`), puts the instructions in front as a
    system message (counted, kept, and handed back unchanged), counts the
    agent's function tools, handoffs and output schema, prepares with the engine and
    writes the result back as items. The SDK keeps its own full history; only what
    is sent is fitted.

    Args:
        engine: the engine (a `ContextEngine`, or anything implementing `Engine`).
        key: the conversation a call belongs to (default: its first input item), so
            that each conversation keeps its own `EngineState` and a step costs O(new items).
        max_conversations: how many conversations' states to keep (least recently used dropped).
        max_conversation_bytes: about how much memory they may hold in all (default 512 MiB,
            estimated from their length; least recently used dropped first).
        fill: ``False`` (default): compact down to the engine's target, so that the prompt prefix
            stays the same for many calls (a running agent). ``True``, or a share of the budget such
            as ``0.9``: a one-shot fit that compacts only when over the budget and then fills it.

    Raises:
        ConfigError: a bad option (named), ``fill`` included.

    >>> from agents import RunConfig                                                     # doctest: +SKIP
    >>> run_config = RunConfig(call_model_input_filter=call_model_input_filter(engine))  # doctest: +SKIP
    """
    return ModelInputFilter(
        engine,
        key=key,
        max_conversations=max_conversations,
        max_conversation_bytes=max_conversation_bytes,
        fill=fill,
    )


# ----------------------------------------------------------------------------- usage


@dataclass(eq=False)
class _Sent:
    """A request the filter prepared, waiting for the usage of the model call that sends it."""

    owner: ModelInputFilter
    report: Report
    items: list[TResponseInputItem]
    """The input the filter returned (its objects: `UsageHooks` recognises the request by them)."""
    armed: bool = False
    """``on_llm_start`` saw this input go out, and its ``on_llm_end`` has not come yet."""


_SENT: ContextVar[_Sent | None] = ContextVar("agentcontext_openai_agents_sent", default=None)


def _same_items(a: Sequence[object], b: Sequence[object]) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


class UsageHooks(RunHooks[Any]):
    """``RunHooks`` that feed each model call's usage back to the filter's engine (and session).

    Pass it to ``Runner.run(..., hooks=UsageHooks())`` (or ``run_streamed``) with
    `AgentContextSession.run_config` or a `call_model_input_filter`. After every
    model call whose input the filter prepared, the prompt tokens the provider
    billed go to ``engine.record_usage`` with the report of that very request,
    and, with an `AgentContextSession`, to the session's log
    (`agentcontext.Session.record_usage`: ``usage_totals``, ``last_usage``). An
    engine counting by estimate (the default for Claude and Gemini models) learns
    the ratio and scales its budget by it (`Report.correction`), so later calls
    fit what the provider bills rather than the estimate. A call the filter did
    not prepare, or a response without usage, is skipped. With hooks of your own,
    subclass this class and call ``super()`` in ``on_llm_start`` and ``on_llm_end``.
    """

    # Why run hooks: in SDK 0.20 the filter gets ``context_wrapper.context`` (the user's
    # context), not the RunContextWrapper whose usage.request_usage_entries grow per call, and
    # a Session is only told of items, after the turn; on_llm_start/on_llm_end are the only
    # callbacks around each model call, streamed or not, and on_llm_end gets that call's usage.
    # The filter, the model call and the hooks run in the run's own task, so the request the
    # filter sent is found in a context variable: never another run's or another conversation's.

    async def on_llm_start(
        self,
        context: RunContextWrapper[Any],  # noqa: ARG002
        agent: Agent[Any],  # noqa: ARG002
        system_prompt: str | None,  # noqa: ARG002
        input_items: list[TResponseInputItem],
    ) -> None:
        """Arm the request the filter prepared when it is the one going out (the same item objects)."""
        sent = _SENT.get()
        if sent is not None:
            sent.armed = _same_items(sent.items, input_items)

    async def on_llm_end(
        self,
        context: RunContextWrapper[Any],  # noqa: ARG002
        agent: Agent[Any],
        response: ModelResponse,
    ) -> None:
        """Feed the call's usage back, once, when the filter prepared its input."""
        sent = _SENT.get()
        if sent is None or not sent.armed:
            return
        sent.armed = False
        model = agent.model if isinstance(agent.model, str) else getattr(agent.model, "model", None)
        await sent.owner._record_usage(sent.report, response, model if isinstance(model, str) else None)


# ----------------------------------------------------------------------------- the session


class AgentContextSession:
    """The Agents SDK's ``Session`` on an agentcontext `Session`: the model sees the history the engine prepared.

    Args:
        session: the agentcontext session (any store); it needs an engine.
        session_id: the SDK's session id (default: the session's own id).
        session_settings: the SDK's session settings (``limit``: see `get_items`).
        fill: a one-shot fit for `get_items` and the per-call filter (see `call_model_input_filter`);
            default ``False``, right for an agent that keeps running.

    Raises:
        ConfigError: ``session`` has no engine, or ``fill`` is not False, True or a share within (0, 1).
    """

    def __init__(
        self,
        session: Session,
        *,
        session_id: str | None = None,
        session_settings: SessionSettings | None = None,
        fill: bool | float = False,
    ) -> None:
        if not isinstance(session, Session):
            raise ConfigError(f"session must be an agentcontext Session, got {type(session).__name__}")
        engine = session.engine
        if engine is None:
            raise ConfigError(
                "the session has no engine: open it with Session.open(path, engine=ContextEngine(...))"
            )
        self.session = session
        self.session_id = session_id if session_id is not None else session.id
        self.session_settings = session_settings
        # One state per run (the task the SDK runs it in): two runs at once on this session, or an agent
        # used as a tool (it inherits the run config), reset each other's state at every call.
        self._filter = ModelInputFilter(
            engine,
            key=lambda _data: f"{self.session_id}:{id(asyncio.current_task())}",
            max_conversations=8,
            fill=fill,
        )
        self._filter._session = self
        self._beside: tuple[list[dict[str, JSONValue]] | None, str | None] = (None, None)
        """The tools and instructions the last model call sent beside the history (counted by `get_items`)."""
        self.fill = self._filter.fill
        self._cache: MutableMapping[str, str] = LRU(4096)
        self._locks: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None

    # ------------------------------------------------------------------ the SDK's Session protocol

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The history the model should see: the view, prepared by the engine, as Responses items.

        A compaction the engine makes here is recorded in the session's log.
        Stub results for calls still waiting for their output are left out (the
        SDK drops such calls itself). With ``limit``, the newest items, at most
        ``limit`` of them, cut where no call is parted from its output and no
        reasoning item from the items it belongs to (possibly fewer, never more).
        """
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
            raise UsageError(f"limit must be an int >= 0 or None, got {limit!r}")
        async with self._lock():
            # What the last call sent beside the history counts too (the SDK gives get_items no agent):
            # without it, a session used without its run_config() fitted the history alone, and went over.
            tools, instructions = self._beside
            prepared = await self.session.aprepare(tools=tools, instructions=instructions, fill=self.fill)
            messages = list(prepared.messages)[: prepared.state.length]
            if limit is None:
                return _items_of(responses.from_messages(messages, validate=False, cache=self._cache))
            return _items_of(self._newest(messages, limit))

    def _newest(self, messages: list[Message], limit: int) -> list[responses.ResponseItem]:
        groups = responses.items_by_message(messages, validate=False, cache=self._cache)
        taken, start = 0, len(messages)
        for point in reversed(safe_split_points(messages)):
            size = sum(len(g) for g in groups[point:start])
            if taken + size > limit:
                break
            taken, start = taken + size, point
        return [item for group in groups[start:] for item in group]

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append the items to the session's log (one batch: one write)."""
        if not items:
            return
        async with self._lock():
            view = self.session.view
            previous = view[len(view) - 1].id if len(view) else None
            messages = responses.to_messages(_dicts_of(items), previous_id=previous, unknown="keep")
            await asyncio.to_thread(self.session.extend, messages)  # a database write: not on the loop

    async def pop_item(self) -> TResponseInputItem | None:
        """Take back the most recent item: the view returns to before it, and the log keeps it.

        Recorded as a rewind of the view's last message (`Session.rewind`); when
        that message held more than the popped item (a model turn's reasoning,
        text and calls), the rest is appended again, except reasoning left alone:
        it cannot be sent without the items it led to, so it goes with the last
        of them. Nothing is deleted.
        """
        async with self._lock():
            view = self.session.view
            n = len(view)
            if not n:
                return None
            items = responses.from_messages([view[n - 1]], validate=False)
            popped, rest = items[-1], items[:-1]
            if all(item.get("type") == "reasoning" for item in rest):
                # Reasoning is nothing without the items it led to: kept alone, it became a made-up
                # "empty" assistant turn sent at every later call (and the next pop returned it).
                rest = []
            await asyncio.to_thread(self.session.rewind, n - 1)
            if rest:
                previous = view[n - 2].id if n > 1 else None
                with warnings.catch_warnings():
                    # Popping item by item can leave a reasoning item alone for a moment.
                    warnings.simplefilter("ignore", ConversionWarning)
                    again = responses.to_messages(rest, previous_id=previous, unknown="keep")
                await asyncio.to_thread(self.session.extend, again)
            return _items_of([popped])[0]

    async def clear_session(self) -> None:
        """Empty the view (`Session.clear`: recorded, the log keeps everything)."""
        async with self._lock():
            await asyncio.to_thread(self.session.clear)

    # ------------------------------------------------------------------ per-call fitting

    @property
    def call_model_input_filter(self) -> ModelInputFilter:
        """The per-call filter for this session's conversation (its engine, one state)."""
        return self._filter

    def run_config(self, **options: Any) -> RunConfig:
        """A ``RunConfig`` with this session's `call_model_input_filter` (``options`` go to ``RunConfig``)."""
        if "call_model_input_filter" in options:
            raise UsageError(
                "run_config() sets call_model_input_filter itself; build RunConfig yourself to replace it"
            )
        return RunConfig(call_model_input_filter=self._filter, **options)

    async def _record_usage(
        self,
        prompt_tokens: int,
        *,
        completion_tokens: int | None,
        total_tokens: int | None,
        cached_tokens: int | None,
        model: str | None,
        report: Report,
    ) -> None:
        """Log a model call's usage, and feed the engine with the report of the request the filter sent."""
        async with self._lock():
            # The session's last prepare is get_items' at the start of the run, not this request
            # (the filter prepared that: the view plus the run's new items, the instructions and
            # the tools): `report=` says which request it was, and the prompt was the whole view,
            # as it is now (the SDK saves the input before the first call and a turn's items after it).
            await asyncio.to_thread(
                functools.partial(
                    self.session.record_usage,
                    report=report,
                    prompt_tokens=prompt_tokens,
                    completion_tokens=completion_tokens,
                    total_tokens=total_tokens,
                    cached_tokens=cached_tokens,
                    model=model,
                )
            )

    # ------------------------------------------------------------------ bookkeeping

    def _lock(self) -> asyncio.Lock:
        """One lock per event loop (an asyncio lock belongs to the loop it first waited in)."""
        loop = asyncio.get_running_loop()
        if self._locks is None or self._locks[0] is not loop:
            self._locks = (loop, asyncio.Lock())
        return self._locks[1]

    def __repr__(self) -> str:
        return f"AgentContextSession(session_id={self.session_id!r}, session={self.session!r})"
