"""Public test doubles: a conversation generator, a scripted summarizer, a cheap counter, in-memory stores.

Users testing their own agent loops need these as much as we do.

>>> from agentcontext.testing import make_conversation
>>> msgs = make_conversation(seed=1, rounds=3)
>>> msgs[0].role, msgs[1].role
('system', 'user')
"""

from __future__ import annotations

import asyncio
import json
import random
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from .artifacts import MemoryArtifactStore
from .compaction import SummaryRequest
from .exceptions import SummarizerError
from .messages import Message, ToolCall, iter_text
from .session.stores import MemoryStore

__all__ = ["MemoryArtifactStore", "MemoryStore", "ScriptedSummarizer", "WordCounter", "make_conversation"]

_WORDS = (
    "the agent reads the file and runs the tests again because the last change broke the parser "
    "config value error import module function class return result path build deploy check fix"
).split()
_CJK = "我们需要检查配置文件并重新运行测试因为上一次修改导致解析器出错请确认路径是否正确"
_TOOLS = ("bash", "read_file", "search", "edit_file", "get_reservation", "list_dir")


def _text(rng: random.Random, words: int, *, cjk: bool) -> str:
    if cjk:
        return "".join(rng.choice(_CJK) for _ in range(words * 2))
    return " ".join(rng.choice(_WORDS) for _ in range(words))


def _tool_output(rng: random.Random, size: int, *, cjk: bool) -> str:
    kind = rng.random()
    if kind < 0.3:
        rows = [
            {"id": rng.randrange(10_000), "path": f"src/mod{rng.randrange(50)}.py", "ok": rng.random() < 0.5}
            for _ in range(max(1, size // 12))
        ]
        return json.dumps(rows)
    lines = []
    for i in range(max(1, size // 10)):
        lines.append(f"{i:5d}  " + _text(rng, 8, cjk=cjk and rng.random() < 0.3))
    return "\n".join(lines)


def make_conversation(
    seed: int,
    *,
    rounds: int = 5,
    steps: tuple[int, int] = (0, 4),
    parallel: int = 3,
    system: bool = True,
    cjk_share: float = 0.2,
    huge_share: float = 0.05,
    output_tokens: tuple[int, int] = (5, 400),
    messy: bool = False,
    text_actions: float = 0.0,
) -> list[Message]:
    """A random agent conversation, deterministic for a seed.

    Each round is a user request followed by ``steps`` assistant turns, each
    making up to ``parallel`` tool calls answered by tool results of random size
    (some huge, some Chinese), and a final assistant answer. With ``messy``,
    it adds what real logs hold: unanswered calls, orphan results, repeated call
    ids and empty messages. ``text_actions`` is the share of steps an agent that
    acts in text takes instead: a command in a fenced block, and its output back
    as a user message under mini-swe-agent's ``<returncode>`` header.
    """
    rng = random.Random(seed)
    out: list[Message] = []
    if system:
        out.append(
            Message(
                role="system",
                content="You are a careful coding agent. " + _text(rng, rng.randint(5, 60), cjk=False),
            )
        )
    call_no = 0
    for _ in range(rounds):
        cjk = rng.random() < cjk_share
        out.append(Message(role="user", content=_text(rng, rng.randint(3, 80), cjk=cjk)))
        for _ in range(rng.randint(*steps)):
            if text_actions and rng.random() < text_actions:
                command = _text(rng, rng.randint(1, 30), cjk=False)
                out.append(Message(role="assistant", content=f"THOUGHT: next.\n\n```bash\n{command}\n```"))
                size = rng.randint(*output_tokens) * (40 if rng.random() < huge_share else 1)
                output = _tool_output(rng, size, cjk=cjk)
                code = rng.choice((0, 0, 1))
                out.append(
                    Message(
                        role="user", content=f"<returncode>{code}</returncode>\n<output>\n{output}\n</output>"
                    )
                )
                continue
            calls = []
            for _ in range(rng.randint(1, max(1, parallel))):
                call_no += 1
                cid = f"call_{call_no}"
                if messy and rng.random() < 0.1 and call_no > 2:
                    cid = f"call_{rng.randint(1, call_no - 1)}"  # a repeated id
                args = json.dumps({"cmd": _text(rng, rng.randint(1, 30), cjk=False)})
                calls.append(ToolCall(id=cid, name=rng.choice(_TOOLS), arguments=args))
            ids = [c.id for c in calls]
            if len(set(ids)) != len(ids):
                calls = [
                    ToolCall(id=f"{c.id}_{i}", name=c.name, arguments=c.arguments)
                    for i, c in enumerate(calls)
                ]
            text = _text(rng, rng.randint(0, 20), cjk=cjk) if rng.random() < 0.5 else None
            out.append(Message(role="assistant", content=text, tool_calls=tuple(calls)))
            for call in calls:
                if messy and rng.random() < 0.08:
                    continue  # never answered
                size = rng.randint(*output_tokens)
                if rng.random() < huge_share:
                    size *= 40
                out.append(
                    Message(
                        role="tool",
                        tool_call_id=call.id,
                        name=call.name,
                        content=_tool_output(rng, size, cjk=cjk),
                    )
                )
            if messy and rng.random() < 0.05:
                out.append(Message(role="tool", tool_call_id="call_orphan", content="stray output"))
        if messy and rng.random() < 0.05:
            out.append(Message(role="assistant", content=""))
        else:
            out.append(Message(role="assistant", content=_text(rng, rng.randint(1, 60), cjk=cjk)))
    return out


@dataclass(kw_only=True)
class ScriptedSummarizer:
    """A summarizer that returns scripted replies in order (or raises scripted errors).

    ``replies`` items are strings to return or exceptions to raise; when they run
    out, the last one repeats. Every request is kept in ``requests``.
    """

    replies: list[str | Exception] = field(default_factory=lambda: ["summary"])
    requests: list[SummaryRequest] = field(default_factory=list)

    def summarize(self, request: SummaryRequest) -> str:
        """Return (or raise) the next scripted reply."""
        self.requests.append(request)
        if not self.replies:
            raise SummarizerError("ScriptedSummarizer has no replies")
        reply = self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]
        if isinstance(reply, Exception):
            raise reply
        return reply

    async def asummarize(self, request: SummaryRequest) -> str:
        """Async twin of `summarize`."""
        await asyncio.sleep(0)
        return self.summarize(request)


class WordCounter:
    """A cheap deterministic counter: one token per whitespace-separated word (plus overheads).

    For tests that need predictable numbers; it counts what the real counters
    count (text, tool names and arguments) and caches by message id in a bounded
    cache, with a ``tokenized`` counter of cache misses.
    """

    name = "words"

    def __init__(self, *, per_message: int = 3, reply: int = 3, cache_size: int = 10_000) -> None:
        self.per_message = per_message
        self.reply = reply
        self.cache_size = cache_size
        self.tokenized = 0
        self._cache: OrderedDict[str, int] = OrderedDict()
        self._lock = threading.Lock()

    def count_text(self, text: str) -> int:
        """Words in ``text``."""
        return len(text.split())

    def count_message(self, message: Message) -> int:
        """Words in everything the message carries, plus ``per_message``."""
        with self._lock:
            hit = self._cache.get(message.id)
            if hit is not None:
                self._cache.move_to_end(message.id)
                return hit
        self.tokenized += 1
        n = self.per_message + sum(self.count_text(t) for t in iter_text(message))
        with self._lock:
            self._cache[message.id] = n
            if len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return n

    def count_messages(self, messages: Sequence[Message] | Iterable[Message]) -> int:
        """Sum of `count_message` plus ``reply``."""
        return sum(self.count_message(m) for m in messages) + self.reply
