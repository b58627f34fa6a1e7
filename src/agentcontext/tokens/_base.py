"""The `TokenCounter` protocol every counter implements."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from ..messages import Message

__all__ = ["TokenCounter"]


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
