"""The small public types a session hands out: checkpoints, D-Mails and usage totals."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "DEFAULT_RECALL_MAX_CHARS",
    "DMAIL_TEMPLATE",
    "Checkpoint",
    "DMail",
    "UsageTotals",
]

DMAIL_TEMPLATE = (
    "<system>D-Mail: this conversation was rewound to an earlier point, and the message below comes "
    "from your own later self, who saw how things went. Take it into account from here on; do not "
    "mention the D-Mail to the user.</system>\n\n{text}"
)
"""How a delivered D-Mail reads to the model (``{text}`` is the sent text)."""

DEFAULT_RECALL_MAX_CHARS = 20_000
"""Characters per page `Session.handle_recall` returns (about 5,000 tokens of English)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Checkpoint:
    """A checkpoint of the session (`Session.checkpoints`)."""

    id: int
    """Stable for the session's life: compactions and reverts never change or reuse it."""
    seq: int
    """The seq of its record in the log."""
    ts: str | None
    label: str | None
    messages: int
    """How many messages the view held at the checkpoint."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DMail:
    """A D-Mail waiting to be delivered (`Session.pending_dmail`)."""

    checkpoint: int
    text: str
    seq: int
    """The seq of its record."""


@dataclass(frozen=True, slots=True, kw_only=True)
class UsageTotals:
    """Provider-reported usage summed over every recorded call (reverted branches included: they were paid for)."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
