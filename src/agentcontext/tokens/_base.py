"""The `TokenCounter` protocol, and `BaseTokenCounter`: the per-message logic every counter shares.

A concrete counter only says how many tokens a piece of text has (``_count``).
`BaseTokenCounter` adds everything else a provider bills for a message: the
chat format's framing tokens, the role, the name, tool-call names and
arguments, images, and the reply priming, plus a bounded cache of per-message
counts keyed by message id.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from ..exceptions import ConfigError, InvalidMessageError, UsageError
from ..messages import ImagePart, JSONValue, Message, TextPart, carried_texts
from ._files import file_tokens, in_units
from ._images import ImageProvider, image_tokens
from ._tools import render_tools

__all__ = [
    "DEFAULT_CACHE_SIZE",
    "BaseTokenCounter",
    "ChatFormat",
    "CounterStats",
    "TokenCounter",
    "count_all",
]

DEFAULT_CACHE_SIZE = 65_536
"""Per-message counts a counter keeps by default (a few MB of memory)."""


@runtime_checkable
class TokenCounter(Protocol):
    """Counts tokens the way a provider bills them.

    ``count_message`` includes the chat format's per-message overhead, tool-call
    names and arguments, and image estimates; ``count_messages`` adds the reply
    priming overhead once. Implementations cache per-message counts by message
    id in a bounded cache, so re-counting a known conversation does no tokenizing.
    """

    @property
    def name(self) -> str:
        """A short name for reports, e.g. ``"tiktoken:o200k_base"`` or ``"estimate"``."""
        ...

    def count_text(self, text: str) -> int:
        """Tokens in a piece of plain text (no message overhead)."""
        ...

    def count_message(self, message: Message) -> int:
        """Tokens one message costs inside a prompt, overheads included."""
        ...

    def count_messages(self, messages: Sequence[Message]) -> int:
        """Tokens a whole prompt of ``messages`` costs, reply priming included."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class ChatFormat:
    """How a provider frames messages, tool calls and tools, in tokens, and how it bills images.

    The defaults are OpenAI's Chat Completions format (GPT-4o, GPT-4.1, GPT-4,
    GPT-3.5), from OpenAI's cookbook "How to count tokens with tiktoken" for
    text messages (exact for plain text) and from measurements published by
    others for tool calls (an estimate: the framing of tool calls is not
    documented). Each message also pays for its role, counted as text (one token
    in OpenAI's encodings).
    """

    per_message: int = 3
    """Framing tokens around every message (``<|start|>``, ``<|message|>``, ``<|end|>``)."""
    per_name: int = 1
    """Extra tokens when a message carries a ``name`` (the name itself is counted as text)."""
    reply_priming: int = 3
    """Tokens that prime the reply (``<|start|>assistant<|message|>``), once per prompt."""
    per_tool_call: int = 7
    """Framing of one tool call, on top of its name and arguments counted as text.

    OpenAI renders a call as a message addressed to ``functions.<name>``; an
    assistant message with one call to ``get_current_weather`` and its result
    measured 35 prompt tokens on gpt-4, which puts the framing at 5 tokens. We
    count 7 to stay on the safe side for newer models.
    """
    parallel_tool_calls: int = 10
    """Extra tokens once per message that issues two calls or more (OpenAI wraps them in one
    ``multi_tool_use.parallel`` call); measured at about 15 for two calls on gpt-4-1106, growing slowly."""
    tools_preamble: int = 9
    """Fixed tokens added when tool definitions are sent, on top of their rendering (see `count_tools`).

    OpenAI: 9 (4 fewer when a system message is present; we keep the higher figure).
    Anthropic adds a tool-use system prompt of a few hundred tokens instead (346 on
    recent Claude models with ``tool_choice`` auto); set it here for those models.
    """
    image_provider: ImageProvider = "openai"
    """Whose image and file rules `image_tokens` and `file_tokens` apply: ``"openai"``, ``"anthropic"`` or ``"gemini"``."""
    media_ratio: float = 1.0
    """Provider tokens per token this counter counts, for what a rule bills (images, PDF pages, audio, video).

    Those rules give provider tokens, while an estimate counts text in units that a `CalibratedCounter`
    multiplies by the model's ``estimate_ratio`` (1.2 for Claude). `models.counter_for` sets this to that
    ratio for the counter it calibrates, so a rule-billed part comes out at its rule, not 1.2 times it (a
    40-page PDF, 120k tokens, fits a 200k Claude window with the default reserve); the correction learns
    down by the safety margin at most, so it never counts more than the margin below the rule. A text
    file is counted as text, in the counter's units.
    """

    def __post_init__(self) -> None:
        for field_name in (
            "per_message",
            "per_name",
            "reply_priming",
            "per_tool_call",
            "parallel_tool_calls",
        ):
            value = getattr(self, field_name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigError(f"ChatFormat.{field_name} must be an int >= 0, got {value!r}")
        if not isinstance(self.tools_preamble, int) or self.tools_preamble < 0:
            raise ConfigError(f"ChatFormat.tools_preamble must be an int >= 0, got {self.tools_preamble!r}")
        ratio = self.media_ratio
        if isinstance(ratio, bool) or not isinstance(ratio, int | float) or not 1.0 <= ratio <= 2.0:
            raise ConfigError(f"ChatFormat.media_ratio must be a number in [1, 2], got {ratio!r}")
        if self.image_provider not in ("openai", "anthropic", "gemini"):
            raise ConfigError(
                f"ChatFormat.image_provider must be 'openai', 'anthropic' or 'gemini', got {self.image_provider!r}"
            )


OPENAI_CHAT = ChatFormat()
"""OpenAI's Chat Completions framing (the default)."""

CHATML = ChatFormat(per_message=4, per_tool_call=12)
"""ChatML-style templates of open models (Qwen, DeepSeek, Yi; Llama 3's header tokens cost the same).

``<|im_start|>`` role ``\\n`` content ``<|im_end|>`` ``\\n``: 4 framing tokens plus the
role; reply primed with ``<|im_start|>assistant\\n``; a tool call is a
``<tool_call>\\n{"name": ..., "arguments": ...}\\n</tool_call>`` block (about 12
tokens around the name and arguments).
"""


@dataclass(frozen=True, slots=True, kw_only=True)
class CounterStats:
    """A snapshot of a counter's work, for tests, benchmarks and `engine.stats`."""

    texts_tokenized: int
    """Calls that actually ran the tokenizer (empty strings and cache hits do not)."""
    chars_tokenized: int
    """Characters those calls covered."""
    cache_hits: int
    """Messages whose count came from the cache."""
    cache_misses: int
    """Messages that had to be counted."""
    cache_evictions: int
    """Entries dropped to respect the cache bound."""
    cache_size: int
    """Entries in the cache now."""
    cache_capacity: int
    """The bound (`cache_size` given to the constructor)."""


_RECENT_SIZE = 128
"""How many recent texts `BaseTokenCounter.count_text` remembers."""
_RECENT_MAX_CHARS = 16_384
"""Longer texts are not remembered (at most 128 x 16k characters are kept alive)."""


class BaseTokenCounter(ABC):
    """Shared logic of every counter: message overheads, tool calls, images, tools and a bounded cache.

    Subclasses implement `name` and ``_count(text)``; nothing else differs
    between counters.

    Per-message counts are cached by `Message.id` in an LRU cache of at most
    ``cache_size`` entries. An id names a message's content (see
    `agentcontext.messages`), so a changed message must carry a new id, which
    `Message.evolve` gives it. Recounting n cached messages is n dictionary
    lookups and no tokenizing.

    Thread safety: the cache and the statistics are guarded by one lock, taken
    once per `count_messages` call (not per message); tokenizing happens outside
    the lock, so threads sharing a counter only wait for each other on cache
    bookkeeping. Two threads missing the same message may both count it; the
    result is the same.
    """

    def __init__(
        self, *, chat_format: ChatFormat = OPENAI_CHAT, cache_size: int = DEFAULT_CACHE_SIZE
    ) -> None:
        """Set up the cache.

        Args:
            chat_format: framing and image rules (default: OpenAI Chat Completions).
            cache_size: most per-message counts kept (default 65,536); 0 disables the cache.

        Raises:
            ConfigError: ``cache_size`` is negative or not an int, or ``chat_format`` is not a `ChatFormat`.
        """
        if not isinstance(cache_size, int) or isinstance(cache_size, bool) or cache_size < 0:
            raise ConfigError(f"cache_size must be an int >= 0 (0 disables the cache), got {cache_size!r}")
        if not isinstance(chat_format, ChatFormat):
            raise ConfigError(f"chat_format must be a ChatFormat, got {type(chat_format).__name__}")
        self._format = chat_format
        self._capacity = cache_size
        self._cache: OrderedDict[str, int] = OrderedDict()
        self._lock = threading.Lock()
        self._roles: dict[str, int] = {}
        self._recent: dict[str, int] = {}
        self._texts = 0
        self._chars = 0
        self._hits = 0
        self._misses = 0
        self._evictions = 0

    # ------------------------------------------------------------------ what subclasses provide

    @property
    @abstractmethod
    def name(self) -> str:
        """A short name for reports, e.g. ``"tiktoken:o200k_base"``."""

    @abstractmethod
    def _count(self, text: str) -> int:
        """Tokens in ``text`` (a non-empty str); no bookkeeping."""

    def _count_texts(self, texts: Sequence[str]) -> list[int]:
        """Tokens in each of ``texts`` (0 for an empty one); no bookkeeping. Counters may do it faster."""
        count = self._count
        return [count(t) if t else 0 for t in texts]

    # ------------------------------------------------------------------ public API

    @property
    def chat_format(self) -> ChatFormat:
        """The framing and image rules this counter applies."""
        return self._format

    def count_text(self, text: str) -> int:
        """Tokens in ``text``, without any message overhead.

        Text that looks like a special token (``<|endoftext|>``) is counted as
        ordinary text, as providers do with user content; it never raises.

        Raises:
            UsageError: ``text`` is not a str.
        """
        if not isinstance(text, str):
            raise UsageError(f"count_text expects a str, got {type(text).__name__}")
        return self._text(text)

    def _text(self, text: str) -> int:
        """`count_text` of a str, without the type check (messages' text is checked when they are made)."""
        if not text:
            return 0
        # Unlocked increments: under the GIL they can lose an update only when two
        # threads collide, and these two numbers are statistics, not correctness.
        self._texts += 1
        self._chars += len(text)
        if len(text) > _RECENT_MAX_CHARS:
            return self._count(text)
        # The same text is often counted twice in a row (ingest truncation checks a tool
        # output, then the message is counted; a tool's name in every call): a small
        # cache of recent texts spares the second tokenization. A str caches its hash,
        # so a hit costs one dict lookup.
        recent = self._recent
        n = recent.get(text)
        if n is None:
            n = self._count(text)
            if len(recent) >= _RECENT_SIZE:
                recent.clear()  # cheaper than evicting the oldest one by one, and what matters is the last few
            recent[text] = n
        return n

    def count_message(self, message: Message) -> int:
        """Tokens ``message`` costs inside a prompt: framing, role, name, content, tool calls and images.

        Raises:
            InvalidMessageError: ``message`` is not a `Message`.
        """
        if not isinstance(message, Message):
            raise InvalidMessageError(f"expected a Message, got {type(message).__name__}")
        with self._lock:
            cached = self._cache.get(message.id)
            if cached is not None:
                self._cache.move_to_end(message.id)
                self._hits += 1
                return cached
            self._misses += 1
        n = self._compute(message)
        self._store(((message.id, n),))
        return n

    def count_messages(self, messages: Sequence[Message]) -> int:
        """Tokens a prompt made of ``messages`` costs: every message plus the reply priming (once).

        Cached messages cost one dictionary lookup each. The result is additive:
        ``count_messages(a + b) == count_messages(a) + count_messages(b) - reply_priming``.

        Raises:
            InvalidMessageError: an item is not a `Message` (the error names its index).
        """
        if isinstance(messages, Message) or not isinstance(messages, Sequence):
            raise InvalidMessageError(
                f"count_messages expects a list of Message, got {type(messages).__name__}"
            )
        total = self._format.reply_priming
        misses: list[Message] = []
        cache = self._cache
        bad = False
        with self._lock:
            try:
                for m in messages:
                    n = cache.get(m.id)
                    if n is None:
                        misses.append(m)
                    else:
                        cache.move_to_end(m.id)
                        total += n
            except (AttributeError, TypeError):
                bad = True  # reported below, outside the lock
            else:
                self._hits += len(messages) - len(misses)
                self._misses += len(misses)
        # Only misses need the type check: a hit was stored for a Message's id.
        if bad or any(not isinstance(m, Message) for m in misses):
            self._raise_bad_item(messages)
        if misses:
            computed = [(m.id, self._compute(m)) for m in misses]
            total += sum(n for _, n in computed)
            self._store(computed)
        return total

    def count_each(self, messages: Sequence[Message]) -> list[int]:
        """The tokens of each of ``messages``, as `count_message` gives them, for many at once.

        The cache is looked up under one lock and written under one more; of the
        new counts only the last ``cache_size`` are stored, since storing more would
        only push the earlier ones out again (the skipped ones count as evictions).

        A subclass that counts messages its own way (it overrides `count_message`
        or ``_compute``) has each message counted by its `count_message`.

        Raises:
            InvalidMessageError: an item is not a `Message` (the error names its index).
        """
        own = type(self)
        if (
            own.count_message is not BaseTokenCounter.count_message
            or own._compute is not BaseTokenCounter._compute
        ):
            return [self.count_message(m) for m in messages]
        cache = self._cache
        try:
            with self._lock:
                counts = [cache.get(m.id) for m in messages]
                hits = len(counts) - counts.count(None)
                if hits:
                    for m, n in zip(messages, counts, strict=True):
                        if n is not None:
                            cache.move_to_end(m.id)
                self._hits += hits
                self._misses += len(counts) - hits
        except (AttributeError, TypeError):
            self._raise_bad_item(messages)
        if hits < len(counts) and any(not isinstance(m, Message) for m in messages):
            self._raise_bad_item(messages)
        # Text-only messages (most of a long history) are framed here and their texts tokenized in one
        # go (`_count_texts`); the rest take the general path.
        plain: list[int] = []
        texts: list[str] = []
        other: list[int] = []
        for i, n in enumerate(counts):
            if n is None:
                m = messages[i]
                content = m.content
                if type(content) is str and not m.tool_calls and (m.name is None or m.role == "tool"):
                    plain.append(i)
                    texts.append(content)
                else:
                    other.append(i)
        roles, per_message = self._roles, self._format.per_message
        for i, n in zip(plain, self._count_texts(texts), strict=True):
            role = messages[i].role
            framing = roles.get(role)
            if framing is None:
                framing = roles[role] = self._count(role)
            counts[i] = per_message + framing + n
        self._texts += len(texts) - texts.count("")  # as `count_text`, which leaves empty texts out
        self._chars += sum(map(len, texts))
        compute = self._compute
        for i in other:
            counts[i] = compute(messages[i])
        result: list[int] = counts  # type: ignore[assignment]  # every None was just filled
        capacity = self._capacity
        if capacity and (plain or other):
            stored = (
                plain[-capacity:] if not other else sorted(plain[-capacity:] + other[-capacity:])[-capacity:]
            )
            self._store([(messages[i].id, result[i]) for i in stored])
            with self._lock:
                self._evictions += len(plain) + len(other) - len(stored)
        return result

    def count_tools(self, tools: Sequence[Mapping[str, JSONValue]]) -> int:
        """Tokens the ``tools`` parameter of a request costs (0 for no tools).

        The definitions are rendered the way OpenAI shows them to the model (see
        `agentcontext.tokens.render_tools`) and counted with this counter, plus
        `ChatFormat.tools_preamble`. Accepts OpenAI (``{"type": "function",
        "function": {...}}``), bare (``{"name", "description", "parameters"}``)
        and Anthropic (``input_schema``) shapes. Not cached: tools are usually
        few and the engine counts them once per request.

        Raises:
            UsageError: ``tools`` is not a list of tool definitions.
        """
        if isinstance(tools, Sequence) and not isinstance(tools, str | bytes) and len(tools) == 0:
            return 0
        return self.count_text(render_tools(tools)) + self._format.tools_preamble

    def image_tokens(self, part: ImagePart) -> int:
        """Tokens one image costs under this counter's `ChatFormat.image_provider` rule, in its units."""
        fmt = self._format
        return in_units(image_tokens(part, provider=fmt.image_provider), fmt.media_ratio)

    @property
    def stats(self) -> CounterStats:
        """Counts of tokenizer calls, cache hits, misses and evictions so far."""
        with self._lock:
            return CounterStats(
                texts_tokenized=self._texts,
                chars_tokenized=self._chars,
                cache_hits=self._hits,
                cache_misses=self._misses,
                cache_evictions=self._evictions,
                cache_size=len(self._cache),
                cache_capacity=self._capacity,
            )

    def clear_cache(self) -> None:
        """Forget every cached per-message count (statistics are kept)."""
        with self._lock:
            self._cache.clear()
            self._recent.clear()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, cache_size={self._capacity})"

    # ------------------------------------------------------------------ internals

    def _compute(self, m: Message) -> int:
        fmt = self._format
        role = self._roles.get(m.role)
        if role is None:
            role = self._roles[m.role] = self._count(m.role)
        n = fmt.per_message + role
        content = m.content
        text = self._text
        if isinstance(content, str):
            n += text(content)
        elif content is not None:
            for part in content:
                if isinstance(part, TextPart):
                    n += text(part.text)
                elif isinstance(part, ImagePart):
                    n += in_units(image_tokens(part, provider=fmt.image_provider), fmt.media_ratio)
                else:
                    n += file_tokens(
                        part, provider=fmt.image_provider, count_text=self._count, media_ratio=fmt.media_ratio
                    )
        # A tool result's name is the tool's, already paid for in the call it answers.
        if m.name is not None and m.role != "tool":
            n += text(m.name) + fmt.per_name
        calls = m.tool_calls
        if calls:
            for call in calls:
                n += fmt.per_tool_call + text(call.name) + text(call.arguments)
            if len(calls) > 1:
                n += fmt.parallel_tool_calls
        if m.metadata or m.extra:
            n += sum(text(t) for t in carried_texts(m))
        return n

    def _store(self, items: Sequence[tuple[str, int]]) -> None:
        if self._capacity == 0:
            return
        cache = self._cache
        with self._lock:
            for key, n in items:
                cache[key] = n
                cache.move_to_end(key)
            overflow = len(cache) - self._capacity
            for _ in range(max(overflow, 0)):
                cache.popitem(last=False)
            self._evictions += max(overflow, 0)

    @staticmethod
    def _raise_bad_item(messages: Sequence[Message]) -> None:
        for i, m in enumerate(messages):
            if not isinstance(m, Message):
                raise InvalidMessageError(f"expected a Message, got {type(m).__name__}", index=i)
        raise InvalidMessageError("messages could not be read as a list of Message")  # pragma: no cover


def count_all(messages: Sequence[Message], counter: TokenCounter) -> list[int]:
    """The tokens of each message: many in one batch when the counter can (`BaseTokenCounter.count_each`),
    a few (an agent's step) one by one, which costs less than setting up a batch."""
    if len(messages) > _BATCH_FROM and isinstance(counter, BaseTokenCounter):
        return counter.count_each(messages)
    return [counter.count_message(m) for m in messages]


_BATCH_FROM = 16
