"""Pydantic AI: keep every model request of an agent inside its context window, with one capability.

Needs the ``pydantic-ai`` extra (``pip install 'agentcontext[pydantic-ai]'``)::

    import agentcontext as ac
    from pydantic_ai import Agent
    from agentcontext.integrations.pydantic_ai import ContextCapability

    engine = ac.ContextEngine(model="gpt-4o", window=128_000)
    agent = Agent("openai:gpt-4o", capabilities=[ContextCapability(engine)])

Before each model request, `ContextCapability` converts the request's messages
(`agentcontext.formats.pydantic_ai`), asks the engine to fit them with the
request's tool definitions and instructions counted, and sends what the engine
returns. A tool call and its return are never parted, the system prompt and
the latest user prompt are always kept, and nothing compacted is lost from the
history: by default (``persist=False``) only the request changes and
``result.all_messages()`` keeps every message; with ``persist=True`` the
compaction is written into the run's history (``ctx.messages``), so it is not
redone at the next step or in the next run that continues this history.

Converting costs O(new messages) a step: the capability remembers each
conversation's converted messages (by object identity) and the engine's state,
keyed by the run's ``conversation_id`` (which a run continuing a history
inherits). Once the engine has compacted, a request is assembled from the
compacted part at each step, reusing the Pydantic AI objects of every message
it keeps and what the previous step built (with ``persist=True`` the history
itself is compacted, and that assembly happens only when the engine compacts).
`history_processor` gives the same for ``ProcessHistory``, which always
writes its result back into the history and cannot see tools or instructions.

Both feed each response's usage back to the engine (``ContextEngine.record_usage``,
against the report of the request that response answers, in its own
conversation): an engine that counts a model by estimate (Claude, Gemini, a
``ModelSpec`` with ``tokenizer="estimate"``) learns how far its counts are from
what the provider bills, and scales its budget by that. The capability reads the
usage as the model returns it (the run's last response included); a history
processor, which runs only before a request, reads it from the history at the
next request, so a run's last response is learned from only when a later run
continues its conversation.

Both take ``fill=True`` (or a share such as ``fill=0.9``) for a one-shot fit:
compact only when over the budget, and then only to fill it (less a small
margin), instead of down to the engine's hysteresis target; the report's notes
say which. It suits a run that stands alone (a batch or evaluation job, a long
history handed to one run); an agent that keeps running should keep the
default, whose compactions leave room for many steps with the same prompt
prefix, so provider prompt caches keep hitting.
"""

from __future__ import annotations

import bisect
import dataclasses
import operator
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._api import feed_usage
from .._thresholds import check_fill
from ..compaction import original_id
from ..engine import Engine, EngineState, Prepared
from ..exceptions import ConfigError, MissingDependencyError
from ..formats.pydantic_ai import (
    Piece,
    Rebuilder,
    Template,
    part_spans,
    pieces_of,
)
from ..messages import JSONValue, Message

try:
    from pydantic_ai.capabilities import AbstractCapability
    from pydantic_ai.messages import ModelMessage, ModelResponse
    from pydantic_ai.profiles import DEFAULT_PROMPTED_OUTPUT_TEMPLATE
    from pydantic_ai.tools import (
        RunContext,
    )  # resolved at run time: Pydantic AI reads the processor's signature
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise MissingDependencyError(
        "agentcontext.integrations.pydantic_ai needs Pydantic AI: pip install 'agentcontext[pydantic-ai]'"
    ) from exc

from collections.abc import Awaitable, Callable

if TYPE_CHECKING:
    from pydantic_ai.models import ModelRequestContext, ModelRequestParameters

__all__ = ["ContextCapability", "history_processor"]


# ----------------------------------------------------------------------------- one conversation


@dataclass(frozen=True, slots=True)
class _Result:
    """What one step sends, and what it writes back into the history (None: nothing)."""

    request: list[Any] | None
    persisted: list[Any] | None
    prepared: Prepared


@dataclass(frozen=True, slots=True)
class _Sent:
    """A request prepared for one model call, kept until the usage of that call is fed back."""

    run: tuple[str | None, int]
    """The run and step it was prepared for (``RunContext.run_id``, ``run_step``)."""
    prepared: Prepared
    last: Any
    """The history's last message as sent, and where (``at``): the model's response follows it."""
    at: int


def _prompt_tokens(response: ModelResponse) -> int:
    """The prompt tokens the provider billed for the request ``response`` answers (0: not reported).

    ``ModelResponse.usage`` is that one request's `RequestUsage`, and its
    ``input_tokens`` is the whole prompt: Pydantic AI's usage convention (2.31,
    ``UsageBase.input_tokens``) is that it includes ``cache_read_tokens`` and
    ``cache_write_tokens``, and each model class normalizes to it. For OpenAI's Chat
    Completions (``OpenAIChatModel._map_usage``, through genai-prices) it is
    ``usage.prompt_tokens``, which already includes ``prompt_tokens_details.cached_tokens``;
    for Anthropic it is ``input_tokens`` plus the cache reads and writes. A provider that
    sent no usage, or one genai-prices cannot read, leaves it 0.
    """
    tokens = response.usage.input_tokens
    return tokens if isinstance(tokens, int) and not isinstance(tokens, bool) and tokens > 0 else 0


class _Conversation:
    """The canonical messages of one conversation's history, kept in step with it, and the engine's state.

    ``objs`` are the Pydantic AI messages converted so far (the history may end
    with messages no part of which the model reads; they wait for the next one).
    They form units: the messages a canonical message carries, then the message
    it comes from. ``canon[c]`` comes from ``objs[obj_of[c]]``.
    """

    def __init__(self) -> None:
        self.objs: list[Any] = []
        self.canon: list[Message] = []
        self.obj_of: list[int] = []
        self.unit_obj: list[int] = []
        self.unit_canon: list[int] = []
        self.by_id: dict[str, int] = {}
        self.built: dict[str, Any] = {}
        """What the previous step built for each message it rebuilt (the same message builds the same parts)."""
        self.replaced: dict[str, str] = {}
        """The id of a message the engine rewrote without saying so in its metadata (an ingest cut, a repair)
        -> the id of the message it replaced."""
        self.state = EngineState.new()
        self.sent: _Sent | None = None
        """The latest request prepared here whose usage has not been fed to the engine yet."""

    # -- keeping in step with the history

    def sync(
        self, history: Sequence[Any], assigned: Sequence[Message] | None = None, *, same: int | None = None
    ) -> None:
        """Convert what ``history`` added since the last call (or since where it stopped matching).

        With ``assigned``, the canonical messages for the messages appended here
        are taken from it, in order, while they say the same (they are what the
        engine returned, so its state keeps matching); a mismatch ends that.
        ``same``: how many leading messages are known to be the ones converted.
        """
        n = len(self.objs)
        if same is not None:
            self._truncate(same)
        elif n and not (len(history) >= n and all(map(operator.is_, history[:n], self.objs))):
            # Every message checked (pointer compares): a message the user replaced between runs (a secret
            # redacted in a tool return) was taken for the one converted before, and the old one was sent.
            k, limit = 0, min(n, len(history))
            while k < limit and history[k] is self.objs[k]:
                k += 1
            self._truncate(k)
        pending: list[Any] = []
        given = iter(assigned) if assigned is not None else None
        for j in range(len(self.objs), len(history)):
            message = history[j]
            pieces = pieces_of(message, index=j)
            if not pieces:
                pending.append(message)
                continue
            pieces[0].before = pending
            self.unit_obj.append(len(self.objs))
            self.unit_canon.append(len(self.canon))
            self.objs.extend(pending)
            self.objs.append(message)
            pending = []
            for piece in pieces:
                m = self._take(given, piece) if given else None
                if m is None:
                    given = None
                    m = piece.message(self.canon[-1].id if self.canon else None, index=j)
                self.by_id[m.id] = len(self.canon)
                self.canon.append(m)
                self.obj_of.append(len(self.objs) - 1)

    @staticmethod
    def _take(given: Iterator[Message], piece: Piece) -> Message | None:
        m = next(given, None)
        if m is None:
            return None
        same = (
            m.role == piece.role
            and m.content == piece.content
            and m.tool_calls == piece.tool_calls
            and m.tool_call_id == piece.tool_call_id
        )
        return m if same else None

    def _truncate(self, k: int) -> None:
        """Forget the units not wholly within ``objs[:k]`` (the history was rewritten from there)."""
        units = (
            len(self.unit_obj) if len(self.objs) <= k else max(bisect.bisect_right(self.unit_obj, k) - 1, 0)
        )
        if units == len(self.unit_obj):
            return
        obj_cut, canon_cut = self.unit_obj[units], self.unit_canon[units]
        for m in self.canon[canon_cut:]:
            self.by_id.pop(m.id, None)
        del self.objs[obj_cut:], self.canon[canon_cut:], self.obj_of[canon_cut:]
        del self.unit_obj[units:], self.unit_canon[units:]

    # -- where a canonical message comes from

    def group(self, c: int) -> tuple[int, int]:
        """``(first, size)``: the canonical messages from the same Pydantic AI message as ``canon[c]``."""
        obj = self.obj_of[c]
        u = bisect.bisect_right(self.unit_canon, c) - 1
        first = self.unit_canon[u]
        end = self.unit_canon[u + 1] if u + 1 < len(self.unit_canon) else len(self.canon)
        assert self.obj_of[first] == obj
        return first, end - first

    def unit_start(self, first: int) -> int:
        """Where in ``objs`` the unit of the group starting at canonical ``first`` begins."""
        return self.unit_obj[bisect.bisect_right(self.unit_canon, first) - 1]

    def origin(self, m: Message) -> int | None:
        """The index in ``canon`` of the history message ``m`` is, or stands for; None for one the engine wrote."""
        c = self.by_id.get(m.id)
        if c is None:
            c = self.by_id.get(original_id(m))  # a masked or shortened copy
        if c is None and m.id in self.replaced:
            c = self.by_id.get(self.replaced[m.id])  # a cut tool output, a repaired message
        return c

    def template(self, c: int) -> Template | None:
        """``canon[c]``'s parts and fields from the Pydantic AI objects it came from; None if they changed shape."""
        first, size = self.group(c)
        obj = self.objs[self.obj_of[c]]
        spans = part_spans(obj)
        if len(spans) != size:
            return None  # parts were added to or taken from the message since: rebuild from extra instead
        start, end, primary = spans[c - first]
        parts = list(obj.parts[start:end])
        head = c == first
        return Template(
            parts=parts,
            primary=None if primary is None else primary - start,
            envelope=obj if head else None,
            before=self.objs[self.unit_start(first) : self.obj_of[c]] if head else [],
        )

    # -- one step

    def step(self, history: Sequence[Any], prepared: Prepared, *, persist: bool) -> _Result:
        """The request (and, with ``persist``, the history) for what the engine prepared from ``canon``."""
        canon = self.canon
        compaction = prepared.compaction
        for action in prepared.report.actions:
            if len(action.message_ids) == 1 and len(action.replacement_ids) == 1:
                self.replaced[action.replacement_ids[0]] = action.message_ids[0]
        keep = compaction.keep if compaction is not None else len(canon)
        if compaction is None and len(prepared.messages) == len(canon):
            return _Result(None, None, prepared)
        if keep < len(canon):
            start, _ = self.group(keep)
            obj_cut = self.unit_start(start)
        else:
            start, obj_cut = len(canon), len(self.objs)
        trailing = list(history[len(self.objs) :])
        head = list(history[:obj_cut])
        tail = list(prepared.messages[start:])
        rebuild = _Rebuild(self, tail)
        request = [*head, *rebuild.build(range(len(tail))), *trailing]
        self.built = rebuild.built
        if not persist or compaction is None:
            return _Result(request, None, prepared)
        kept = [*canon[start:keep], *compaction.messages]
        if len(kept) == len(tail):
            persisted = request
        else:  # the request also answers calls still pending with stub results: not history
            persisted = [*head, *_Rebuild(self, kept).build(range(len(kept))), *trailing]
        self.sync(persisted, assigned=kept, same=obj_cut)
        return _Result(request, persisted, prepared)


class _Rebuild(Rebuilder):
    """Rebuilds from the original Pydantic AI objects: unchanged messages are the same objects."""

    def __init__(self, conversation: _Conversation, messages: Sequence[Message]) -> None:
        super().__init__(messages)
        self.conversation = conversation
        self.built: dict[str, Any] = {}

    def request_parts(self, m: Message, tpl: Template | None, index: int) -> list[Any]:
        parts = self.conversation.built.get(m.id)
        if parts is None:
            parts = super().request_parts(m, tpl, index)
        self.built[m.id] = parts
        return list(parts)

    def response(self, m: Message, tpl: Template | None, index: int) -> Any:
        response = self.conversation.built.get(m.id)
        if response is None:
            response = super().response(m, tpl, index)
        self.built[m.id] = response
        return response

    def template(self, index: int) -> Template | None:
        c = self.conversation.origin(self.messages[index])
        if c is not None:
            found = self.conversation.template(c)
            if found is not None:
                return found
        return super().template(index)

    def build(self, indices: Iterable[int]) -> list[ModelMessage]:
        order = list(indices)
        conv = self.conversation
        out: list[Any] = []
        run: list[int] = []
        i = 0
        while i < len(order):
            m = self.messages[order[i]]
            c = conv.by_id.get(m.id)
            if c is not None:
                first, size = conv.group(c)
                if (
                    first == c
                    and i + size <= len(order)
                    and all(self.messages[order[i + t]].id == conv.canon[c + t].id for t in range(size))
                ):
                    out.extend(super().build(run))
                    run = []
                    out.extend(conv.objs[conv.unit_start(first) : conv.obj_of[c] + 1])
                    i += size
                    continue
            run.append(order[i])
            i += 1
        out.extend(super().build(run))
        return out


# ----------------------------------------------------------------------------- tools and instructions


class _Definitions:
    """The request's tool definitions as the dicts the engine counts (the same dicts while they do not
    change: the engine counts a list of definitions once, recognised by identity), and its instructions."""

    def __init__(self) -> None:
        self._key: tuple[list[Any], list[Any], object] | None = None
        self._dicts: list[Mapping[str, JSONValue]] = []

    def of(self, params: ModelRequestParameters | None) -> tuple[list[Mapping[str, JSONValue]], str | None]:
        if params is None:
            return [], None
        function_tools = list(params.function_tools)
        output_tools = list(params.output_tools)
        parts = params.instruction_parts or []
        texts = [p.content for p in parts if p.content]
        # Structured output sent as text or as a response format: the model adds it after this hook (in
        # `Model.prepare_request`), so it is counted here as it will be sent. A PromptedOutput's 3,000-token
        # schema went uncounted and the provider refused the request.
        output = params.output_object if params.output_mode in ("prompted", "native") else None
        if output is not None and params.output_mode == "prompted":
            if params.prompted_output_template is None:  # the model sets its default later, as here
                params = dataclasses.replace(
                    params, prompted_output_template=DEFAULT_PROMPTED_OUTPUT_TEMPLATE
                )
            texts.append(params.prompted_output_instructions or "")
        instructions = "\n\n".join(texts) or None
        key = (function_tools, output_tools, output if params.output_mode == "native" else None)
        if self._key != key:
            self._dicts = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description or "",
                        "parameters": t.parameters_json_schema,
                    },
                }
                for t in [*function_tools, *output_tools]
            ]
            if output is not None and params.output_mode == "native":  # the response format's schema
                self._dicts.append(
                    {
                        "type": "function",
                        "function": {
                            "name": output.name or "output",
                            "description": output.description or "",
                            "parameters": output.json_schema,
                        },
                    }
                )
            self._key = key
        return self._dicts, instructions


# ----------------------------------------------------------------------------- the shared core


class _Core:
    def __init__(
        self, engine: Engine, *, persist: bool, max_conversations: int, fill: bool | float = False
    ) -> None:
        if not hasattr(engine, "aprepare"):
            raise ConfigError(
                f"engine must be an agentcontext Engine (ContextEngine), got {type(engine).__name__}"
            )
        if not isinstance(max_conversations, int) or max_conversations < 1:
            raise ConfigError(f"max_conversations must be an int >= 1, got {max_conversations!r}")
        self.fill = check_fill(fill)
        self.engine = engine
        self.persist = persist
        self.max_conversations = max_conversations
        self.conversations: OrderedDict[str, _Conversation] = OrderedDict()
        self.definitions = _Definitions()
        self.last: Prepared | None = None

    def conversation(self, key: str) -> _Conversation:
        conv = self.conversations.get(key)
        if conv is None:
            conv = self.conversations[key] = _Conversation()
            while len(self.conversations) > self.max_conversations:
                self.conversations.popitem(last=False)
        else:
            self.conversations.move_to_end(key)
        return conv

    async def run(
        self,
        ctx: RunContext[Any],
        history: Sequence[Any],
        params: ModelRequestParameters | None,
        *,
        persist: bool,
    ) -> _Result:
        conv = self.conversation(self.key(ctx))
        # A history processor's only view of the previous response (the capability has fed it already,
        # in wrap_model_request). A processor does not count the tool definitions, but the provider
        # bills them: their share is learned as part of the ratio (bounded: at most 2x the estimate), which errs
        # on the side of smaller requests.
        if conv.sent is not None:
            previous, conv.sent = conv.sent, None
            self.answered(previous, history)
        conv.sync(history)
        tools, instructions = self.definitions.of(params)
        prepared = await self.engine.aprepare(
            conv.canon, tools=tools or None, instructions=instructions, state=conv.state, fill=self.fill
        )
        conv.state = prepared.state
        self.last = prepared
        result = conv.step(history, prepared, persist=persist)
        sent = result.request if result.request is not None else history
        conv.sent = _Sent((ctx.run_id, ctx.run_step), prepared, sent[-1] if sent else None, len(sent) - 1)
        return result

    @staticmethod
    def key(ctx: RunContext[Any]) -> str:
        return ctx.conversation_id or ctx.run_id or ""

    # Usage feedback: the engine learns how far its counts are from what the provider bills
    # (`ContextEngine.record_usage`; an engine that counts exactly has nothing to learn). A usage is
    # fed only against the report of the request it is the usage of, in that request's conversation.

    def received(self, ctx: RunContext[Any], response: ModelResponse) -> None:
        """The model answered the request prepared for this run step with ``response``."""
        conv = self.conversations.get(self.key(ctx))
        if conv is None or conv.sent is None or conv.sent.run != (ctx.run_id, ctx.run_step):
            return  # not a request prepared here for this step (or its conversation was forgotten)
        sent, conv.sent = conv.sent, None
        self.feed(sent.prepared, response)

    def answered(self, sent: _Sent, history: Sequence[Any]) -> None:
        """Feed the response to ``sent`` if ``history`` holds it: the message right after the request sent.

        A history processor runs only before a request, so it sees the usage of the previous one
        here, at the next step, or when a later run continues the conversation.
        """
        at = sent.at
        if (
            0 <= at < len(history) - 1
            and history[at] is sent.last
            and isinstance(history[at + 1], ModelResponse)
        ):
            self.feed(sent.prepared, history[at + 1])

    def feed(self, prepared: Prepared, response: ModelResponse) -> None:
        tokens = _prompt_tokens(response)
        if tokens:
            feed_usage(self.engine, prepared.report, tokens)


# ----------------------------------------------------------------------------- the public API


class ContextCapability(AbstractCapability[Any]):
    """A Pydantic AI capability that fits every model request into the context window.

    Args:
        engine: the agentcontext engine (`ContextEngine`) that decides what to send.
        persist: ``False`` (default): only the request is compacted; the run's history
            (``result.all_messages()``) keeps every message. ``True``: the compaction is
            also written into the history (``ctx.messages``), so the next step and the
            next run of this conversation start from it instead of redoing it.
        max_conversations: how many conversations' state to remember (least recently
            used first out); a forgotten one costs one full pass when it comes back.
        fill: ``False`` (default): compact down to the engine's target, so that the prompt
            prefix stays the same for many steps (a running agent). ``True``, or a share of
            the budget such as ``0.9``: a one-shot fit that compacts only when over the
            budget and then fills it (a run that stands alone).

    With ``persist=True`` what the engine summarized, dropped or cut is gone from
    the history too (a cut tool output's full text stays in the engine's artifact
    store); with the default, the history keeps it and only the requests are smaller.

    Raises:
        ConfigError: a bad option (named), ``fill`` included.
        ContextOverflowError: (from the hook, so from the run) the system prompt, the
            latest user prompt, the instructions and the tool definitions alone do not
            fit the window.
        InvalidMessageError: (from the hook, so from the run) the history holds
            something that cannot be converted (names the message and field).
    """

    def __init__(
        self,
        engine: Engine,
        *,
        persist: bool = False,
        max_conversations: int = 256,
        fill: bool | float = False,
    ) -> None:
        self._core = _Core(engine, persist=persist, max_conversations=max_conversations, fill=fill)

    # The base class is a dataclass without fields: its equality would make every instance equal.
    __eq__ = object.__eq__
    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return f"ContextCapability(engine={self.engine!r}, persist={self.persist}, fill={self.fill!r})"

    @property
    def engine(self) -> Engine:
        """The engine this capability asks."""
        return self._core.engine

    @property
    def persist(self) -> bool:
        """Whether compactions are written into the run's history."""
        return self._core.persist

    @property
    def fill(self) -> bool | float:
        """Whether each request is a one-shot fit (True, or the share of the budget it fills)."""
        return self._core.fill

    @property
    def last(self) -> Prepared | None:
        """What the engine prepared for the latest request (None before the first)."""
        return self._core.last

    @classmethod
    def get_serialization_name(cls) -> str | None:
        """Not serializable in agent specs (it holds an engine)."""
        return None

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        """With ``persist``: write what the engine prepared into the history, and send it."""
        if not self.persist:
            return request_context  # only the request changes: see wrap_model_request
        result = await self._core.run(
            ctx,
            request_context.messages,  # read, not copied: a step stays O(new messages)
            request_context.model_request_parameters,
            persist=True,
        )
        if result.persisted is not None:
            ctx.messages[:] = result.persisted
        if result.request is not None:
            request_context.messages = result.request
        return request_context

    async def wrap_model_request(
        self,
        ctx: RunContext[Any],
        *,
        request_context: ModelRequestContext,
        handler: Callable[[ModelRequestContext], Awaitable[ModelResponse]],
    ) -> ModelResponse:
        """Without ``persist``: send what the engine prepared; the history keeps every message. With
        either: feed the response's usage back to the engine.

        Pydantic AI writes what ``before_model_request`` returns back into the
        run's history (2.31 does); what this hook hands to the model is not.
        """
        if not self.persist:
            result = await self._core.run(
                ctx,
                request_context.messages,
                request_context.model_request_parameters,
                persist=False,
            )
            if result.request is not None:
                request_context.messages = result.request  # a context made for this request alone
        response = await handler(request_context)
        # The usage of the request just sent (with persist, prepared by before_model_request for this
        # step): the engine learns from it here, the run's last response included.
        self._core.received(ctx, response)
        return response


def history_processor(
    engine: Engine, *, max_conversations: int = 256, fill: bool | float = False
) -> Callable[[RunContext[Any], list[ModelMessage]], Awaitable[list[ModelMessage]]]:
    """A history processor for Pydantic AI's ``ProcessHistory`` capability, backed by ``engine``.

    ``ProcessHistory`` writes what a processor returns back into the run's
    history, so this behaves like ``ContextCapability(engine, persist=True)``,
    except that a processor sees neither the tool definitions nor the
    instructions: they are not counted (leave room for them in ``reserve``).
    Prefer `ContextCapability` (which also learns from a run's last response: a
    processor sees a response's usage only in the history of the next request).
    ``fill`` is `ContextCapability`'s: ``True`` or a share
    such as ``0.9`` for a one-shot fit, ``False`` (default) for a running agent.

    Raises:
        ConfigError: a bad option (named), ``fill`` included.

    >>> from pydantic_ai.capabilities import ProcessHistory     # doctest: +SKIP
    >>> agent = Agent(model, capabilities=[ProcessHistory(history_processor(engine))])  # doctest: +SKIP
    """
    core = _Core(engine, persist=True, max_conversations=max_conversations, fill=fill)

    async def process(ctx: RunContext[Any], messages: list[ModelMessage]) -> list[ModelMessage]:
        result = await core.run(ctx, messages, None, persist=True)
        return result.request if result.request is not None else messages

    return process
