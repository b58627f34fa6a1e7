"""Errors the command line raises for itself."""

from __future__ import annotations

__all__ = ["SummarizerFailed", "cli_words"]


class SummarizerFailed(BaseException):
    """The summarizer the user named failed; the command stops instead of falling back.

    A `BaseException`, so that it passes through the engine's own handling (which
    would otherwise hand the failure to the next tier) and stops the command
    before anything is written or recorded. Raised only inside the command line.
    """

    def __init__(self, spec: str, cause: BaseException) -> None:
        super().__init__(spec, cause)
        self.spec = spec
        self.cause = cause

    def __str__(self) -> str:
        cause = str(self.cause).strip().splitlines()
        detail = f"{type(self.cause).__name__}: {cause[0]}" if cause else type(self.cause).__name__
        return f"the summarizer {self.spec} failed ({detail})"


# The library's messages name Python arguments; the command line says what to type instead. Phrases
# are matched whole, so a message the library rewords stays correct in Python terms (a test pins them).
_CLI_WORDS = (
    ("drop strict=True", "drop --strict"),
    (
        "; pass create=True to start a new session there",
        "; `agentcontext import CONVERSATION SESSION` starts one from a conversation",
    ),
    (
        "Open it with migrate=True (or run `agentcontext migrate`) to rewrite it in the current schema, its "
        "original kept as a backup, or read_only=True",
        "Run `agentcontext migrate` to rewrite it in the current schema, its original kept as a backup",
    ),
    (" (Python: Session.open(path, migrate=True))", ""),
    (
        "open it with read_only=True, or upgrade agentcontext",
        "upgrade agentcontext (inspect and export still read it)",
    ),
    ("open the session read_only=True to read it", "use a command that only reads it (inspect, export)"),
    ("open it with read_only=True to read it", "use a command that only reads it (inspect, export)"),
    ("open this one with read_only=True to read it", "use a command that only reads it (inspect, export)"),
)


def cli_words(message: str) -> str:
    """``message`` with the library's Python advice (``strict=True``, ``create=True``...) put as command-line advice."""
    for python, cli in _CLI_WORDS:
        message = message.replace(python, cli)
    return message
