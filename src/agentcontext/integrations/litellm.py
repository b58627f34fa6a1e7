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
the request's conversation to canonical messages (`agentcontext.formats.openai`,
`agentcontext.formats.anthropic` with ``unknown="keep"``, or
`agentcontext.formats.responses`), lets an engine prepare them with the request's
tool definitions and instructions counted, and writes the result back into the
request: it fits, every tool result follows its call, the system prompt (or
``instructions``) and the latest request are kept, and a message the engine did
not change goes out exactly as it came (Anthropic ``cache_control`` breakpoints
and ``thinking`` blocks included). When nothing needs compacting the request is
forwarded untouched. Responses, streamed or not, pass through: the hook only
reads requests.

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
header, else by a hash of its system prompt and first user message.

**What it leaves alone.** A request it cannot read (a malformed message, a
content part agentcontext does not model in a Chat Completions request, a model
whose window nobody knows) or cannot fit (the system prompt, tools and latest
request alone overflow) is forwarded unchanged, with one warning line on the
``agentcontext.litellm`` logger naming the route and the reason; the provider
then answers as it would have. The hook never fails a request. Responses
requests that continue a stored response (``previous_response_id``,
``conversation``) are forwarded unchanged too: their history is on the server.

Requires ``pip install 'agentcontext[litellm]'``.
"""

from __future__ import annotations

import hashlib
import logging
import sys
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar, cast

from ..engine import ContextEngine, Engine, EngineState
from ..exceptions import AgentContextError, ConfigError, ConversionWarning, MissingDependencyError
from ..formats import anthropic, responses
from ..formats import openai as oai
from ..formats._common import canonical_json
from ..messages import JSONValue, Message
from ..models import ModelSpec, get
from ..tokens import counter_for_tokenizer

try:
    from litellm.integrations.custom_logger import CustomLogger
except ImportError as e:  # pragma: no cover - exercised without the extra installed
    raise MissingDependencyError(
        "agentcontext.integrations.litellm needs LiteLLM: pip install 'agentcontext[litellm]'"
    ) from e

__all__ = ["SESSION_HEADER", "ContextHook"]

SESSION_HEADER = "x-agentcontext-session"
"""The request header that names a conversation (else: a hash of its system prompt and first user message)."""

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

_K = TypeVar("_K")
_V = TypeVar("_V")
_MISSING = object()


class _LRU(MutableMapping[_K, _V]):
    """A dict that forgets its least recently used entries past ``size``."""

    def __init__(self, size: int) -> None:
        self._data: OrderedDict[_K, _V] = OrderedDict()
        self._size = size

    def __getitem__(self, key: _K) -> _V:
        value = self._data[key]
        self._data.move_to_end(key)
        return value

    def __setitem__(self, key: _K, value: _V) -> None:
        self._data[key] = value
        self._data.move_to_end(key)
        while len(self._data) > self._size:
            self._data.popitem(last=False)

    def __delitem__(self, key: _K) -> None:
        del self._data[key]

    def __iter__(self) -> Iterator[_K]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)


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
    cache: MutableMapping[str, str] = field(default_factory=lambda: _LRU(4096))


@dataclass(frozen=True)
class _Model:
    """What the hook knows of a model group: its window, and how to count its tokens."""

    window: int
    spec: ModelSpec | None


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
        header: the request header naming a conversation.
        engine: builds the engine for a ``(model group, window, reserve)``, for engine options
            (a summarizer, thresholds...); default ``ContextEngine(spec, window=, reserve=)``.

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
        header: str = SESSION_HEADER,
        engine: Callable[[ModelSpec | None, int, int], Engine] | None = None,
    ) -> None:
        super().__init__()
        for name, value in (("window", window), ("reserve", reserve)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise ConfigError(f"{name} must be a non-negative int (tokens) or None, got {value!r}")
        if not (isinstance(max_conversations, int) and max_conversations > 0):
            raise ConfigError(f"max_conversations must be a positive int, got {max_conversations!r}")
        self.window = window
        self.reserve = reserve
        self.model = get(model) if model is not None else None
        self.header = header.lower()
        self._make_engine = engine or _default_engine
        self._models: dict[str, _Model] = {}
        self._engines: _LRU[tuple[str, int, int], Engine] = _LRU(64)
        self._conversations: _LRU[tuple[int, str], _Conversation] = _LRU(max_conversations)
        self._tools: _LRU[str, list[Mapping[str, JSONValue]]] = _LRU(64)

    async def async_pre_call_hook(  # LiteLLM calls it with these keywords
        self,
        user_api_key_dict: Any,  # noqa: ARG002
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
                await self._prepare(api, data)
        except _Skip as e:
            logger.warning("agentcontext: %s request forwarded unchanged: %s", _ROUTES[api], e)
        except Exception as e:
            logger.warning(
                "agentcontext: %s request forwarded unchanged: %s: %s", _ROUTES[api], type(e).__name__, e
            )
        return data

    # ------------------------------------------------------------------ one request

    async def _prepare(self, api: Api, data: dict[str, Any]) -> None:
        if api == "responses" and (data.get("previous_response_id") or data.get("conversation")):
            return  # the history lives on the server; only the new items are here
        group = data.get("model")
        if not isinstance(group, str) or not group:
            raise _Skip(f"no model name (got {group!r})")
        engine = self._engine(group, api, data)
        conversation = self._conversation(api, data, id(engine))
        messages, instructions = self._convert(api, data, conversation)
        try:
            prepared = await engine.aprepare(
                messages,
                tools=self._tool_definitions(data.get("tools")),
                instructions=instructions,
                state=conversation.state,
            )
        except AgentContextError as e:
            raise _Skip(f"{type(e).__name__}: {e}") from None
        conversation.state = prepared.state
        out = prepared.messages
        if prepared.compaction is None and len(out) == len(messages):
            return  # the input, unchanged: send the request as it came
        fitted = list(out)
        if api == "chat":
            data["messages"] = oai.from_messages(fitted, validate=False)
        elif api == "anthropic":
            system, wire = anthropic.from_messages(fitted, validate=False, late_system="inline")
            data["messages"] = _with_breakpoints(wire, data["messages"])
            if system is None:
                data.pop("system", None)
            else:
                data["system"] = system
        else:
            data["input"] = responses.from_messages(fitted, validate=False, cache=conversation.cache)

    # ------------------------------------------------------------------ the conversation

    def _conversation(self, api: Api, data: Mapping[str, Any], engine: int) -> _Conversation:
        name = _header(data, self.header)
        if name is None:
            name = "hash:" + hashlib.sha256(canonical_json(_identity(api, data)).encode()).hexdigest()
        key = (engine, f"{api}:{name}")
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
        if api == "anthropic":
            # Claude Code moves its cache breakpoints to the newest messages at every request: a message
            # that only lost or gained cache_control is the same message (same id, the engine's O(new) path).
            while keep < min(len(old), len(wire)) and _sans_breakpoints(old[keep]) == _sans_breakpoints(
                wire[keep]
            ):
                keep += 1
        start = conversation.ends[keep - 1] if keep else 0
        messages = conversation.messages[:start]
        ends = conversation.ends[:keep]
        if api == "anthropic" and not keep and head is not None:
            messages = anthropic.to_messages([], system=head, unknown="keep")
        previous = messages[-1].id if messages else None
        for index in range(keep, len(wire)):
            d = wire[index]
            if api == "chat":
                new = [oai.to_message(d, index=index, previous_id=previous)]
            else:
                try:
                    sans = cast(Mapping[str, object], _sans_breakpoints(d))  # a non-dict is refused by name
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
        for name in _REPLY_LIMITS[api]:
            value = data.get(name)
            if isinstance(value, int) and not isinstance(value, bool):
                reserve = max(reserve, value)
                break
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
        return _Model(window=window, spec=spec)


_ROUTES: Mapping[Api, str] = {
    "chat": "/chat/completions",
    "anthropic": "/v1/messages",
    "responses": "/v1/responses",
}


def _default_engine(spec: ModelSpec | None, window: int, reserve: int) -> Engine:
    if spec is not None:
        return ContextEngine(spec, window=window, reserve=reserve)
    return ContextEngine(window=window, reserve=reserve, counter=counter_for_tokenizer("estimate"))


def _header(data: Mapping[str, Any], name: str) -> str | None:
    """The value of request header ``name``, as the proxy hands the request to the hook."""
    for holder in (data.get("proxy_server_request"), data.get("metadata"), data.get("litellm_metadata")):
        headers = holder.get("headers") if isinstance(holder, Mapping) else None
        if isinstance(headers, Mapping):
            for key, value in headers.items():
                if isinstance(key, str) and key.lower() == name and isinstance(value, str) and value:
                    return value
    return None


def _identity(api: Api, data: Mapping[str, Any]) -> list[object]:
    """What names a conversation without a header: its system prompt and its first user message."""
    if api == "responses":
        items = data.get("input")
        first = items if isinstance(items, str) else _first_user(items)
        return [data.get("instructions"), first]
    wire = data.get("messages")
    if api == "anthropic":
        return [data.get("system"), _first_user(wire)]
    system = (
        [m for m in wire if isinstance(m, Mapping) and m.get("role") in ("system", "developer")][:1]
        if isinstance(wire, list)
        else []
    )
    return [system, _first_user(wire)]


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


def _sans_breakpoints(message: object) -> object:
    """An Anthropic wire message without its ``cache_control`` breakpoints (itself when it has none)."""
    if not isinstance(message, Mapping):
        return message
    content = message.get("content")
    if not isinstance(content, list):
        return message
    blocks = [_block_sans_breakpoints(b) for b in content]
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


def _with_breakpoints(fitted: list[Any], sent: list[Any]) -> list[Any]:
    """``fitted`` with the client's own messages (and their breakpoints) for its unchanged newest messages.

    Messages are converted without ``cache_control``, so the breakpoints a client puts on its newest
    messages (Claude Code's) come back here: the tail the engine kept verbatim is the client's tail.
    """
    i, j = len(fitted) - 1, len(sent) - 1
    while i >= 0 and j >= 0 and fitted[i] == _sans_breakpoints(sent[j]):
        fitted[i] = sent[j]
        i, j = i - 1, j - 1
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
