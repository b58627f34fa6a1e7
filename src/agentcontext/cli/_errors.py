"""Errors the command line raises for itself."""

from __future__ import annotations

__all__ = ["SummarizerFailed"]


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
