"""Checks shared by the promise tests: when may the engine refuse?"""

from __future__ import annotations

from collections.abc import Sequence

from agentcontext import ContextEngine, ContextOverflowError, Message
from agentcontext.compaction import is_user_request
from agentcontext.repair import repair_messages


def essentials(messages: Sequence[Message], engine: ContextEngine) -> int:
    """What no compaction may remove, in the engine's tokens: the leading system messages, the latest
    user request and the reply priming (after the engine's input repairs, which can only make it cheaper
    to refuse wrongly, never hide a warranted refusal)."""
    repaired, _, _ = repair_messages(messages)
    counter = engine.counter
    total = counter.count_messages(())
    for m in repaired:
        if m.role != "system":
            break
        total += counter.count_message(m)
    latest = next((m for m in reversed(repaired) if is_user_request(m)), None)
    if latest is not None and latest.role == "user":
        total += counter.count_message(latest)
    return total


def assert_refusal_warranted(
    messages: Sequence[Message],
    engine: ContextEngine,
    error: ContextOverflowError,
    *,
    budget: int | None = None,
) -> None:
    """A refusal is right only when the essentials really exceed the budget; the error says so in numbers."""
    need = essentials(messages, engine)
    allowed = engine.budget if budget is None else budget
    assert error.required == need, (error.required, need)
    assert error.budget == allowed
    assert need > allowed, f"refused although the essentials ({need}) fit the budget ({allowed})"
