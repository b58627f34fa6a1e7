"""Every error agentcontext raises, under one root.

Usage errors (the caller gave something agentcontext cannot use) are kept apart
from runtime failures (something went wrong while doing the work), and each
usage error also subclasses the builtin a Python programmer would expect
(``ValueError``, ``LookupError``), so ``except ValueError`` still works::

    AgentContextError
    ├── UsageError (ValueError)             the caller's mistake: fix the call
    │   ├── InvalidMessageError             a message or wire dict is malformed
    │   ├── InvalidConversationError        the messages break a provider rule
    │   ├── ConfigError                     a bad option or setting
    │   └── UnknownModelError (LookupError) a model name the registry lacks
    ├── ContextOverflowError                even the essentials cannot fit
    ├── TokenizerError                      a tokenizer file is missing or corrupt
    ├── SummarizerError                     an LLM summarizer failed after its retries
    │   ├── SummarizerBackoff               not called: it failed recently and is backing off
    │   ├── SummarizerTimeout               no summary within its deadline
    │   └── UnusableSummaryError            a reply without the structure its prompt asks for, twice
    ├── StoreError                          a session store cannot be read or written
    │   ├── SessionNotFoundError            no session where one was expected
    │   ├── NotASessionError                a file that is not a session (a conversation...): never written
    │   ├── StorePathError                  the path cannot hold a session (a directory...)
    │   ├── StorePermissionError            the operating system refused access
    │   ├── SessionLockedError              another writer holds the session
    │   ├── ConcurrencyError                an append lost an optimistic race
    │   ├── StoreNotInitializedError        a database without agentcontext's tables (run `db init`)
    │   └── StoreUnavailableError           the database server could not be reached, even after retries
    ├── RecallError (LookupError)           a recall reference names nothing
    └── MissingDependencyError (ImportError) an optional extra is not installed

Warnings (``warnings.warn``, never raised): ``SessionWarning`` (UserWarning),
with ``CorruptRecordWarning`` (a torn or damaged record was skipped; the rest
loaded) and ``UnknownRecordWarning`` (a record from a newer version was kept
and passed over); ``ConversionWarning`` (UserWarning): a format passed an item
it does not model through unchanged (kept, but not counted).

Constructors only store their arguments: no logging, no I/O.
"""

from __future__ import annotations

__all__ = [
    "AgentContextError",
    "ConcurrencyError",
    "ConfigError",
    "ContextOverflowError",
    "ConversionWarning",
    "CorruptRecordWarning",
    "IdentityWarning",
    "InvalidConversationError",
    "InvalidMessageError",
    "MissingDependencyError",
    "NotASessionError",
    "RecallError",
    "SessionLockedError",
    "SessionNotFoundError",
    "SessionWarning",
    "StoreError",
    "StorePathError",
    "StoreNotInitializedError",
    "StorePermissionError",
    "StoreUnavailableError",
    "SummarizerBackoff",
    "SummarizerError",
    "SummarizerTimeout",
    "TokenizerError",
    "UnknownModelError",
    "UnknownRecordWarning",
    "UnusableSummaryError",
    "UsageError",
]


class AgentContextError(Exception):
    """The root of every error agentcontext raises."""


class UsageError(AgentContextError, ValueError):
    """The caller passed something agentcontext cannot use; the message says how to fix it."""


class InvalidMessageError(UsageError):
    """A message (or a provider's wire dict) is malformed.

    Attributes:
        index: position of the offending message in the input list, when known.
        field: the field at fault (``"role"``, ``"tool_calls[0].function.arguments"``...), when known.
    """

    def __init__(self, message: str, *, index: int | None = None, field: str | None = None) -> None:
        where = []
        if index is not None:
            where.append(f"message {index}")
        if field is not None:
            where.append(f"field {field!r}")
        prefix = f"{', '.join(where)}: " if where else ""
        super().__init__(prefix + message)
        self.index = index
        self.field = field


class InvalidConversationError(UsageError):
    """The messages break a rule a provider enforces (see `agentcontext.check_messages`).

    Attributes:
        violations: every rule broken, each naming the index, the rule and a fix.
    """

    def __init__(self, message: str, violations: tuple[object, ...] = ()) -> None:
        super().__init__(message)
        self.violations = violations


class ConfigError(UsageError):
    """An option or setting is out of range or inconsistent."""


class UnknownModelError(UsageError, LookupError):
    """A model name the registry does not know.

    Attributes:
        name: the name asked for.
        suggestions: close matches from the registry, best first.
        variant_of: the known model ``name`` starts with when what follows is not a date or
            version tag (``o1`` for ``o1-foo``): a different model, whose window may differ, so
            it is not taken as that one. ``None`` otherwise.
    """

    def __init__(
        self, name: str, suggestions: tuple[str, ...] = (), *, variant_of: str | None = None
    ) -> None:
        if variant_of is None:
            hint = f" Did you mean {', '.join(repr(s) for s in suggestions)}?" if suggestions else ""
            how = "or give the engine its window= and counter= (as for any model of your own)."
        else:
            hint = (
                f" It starts with {variant_of!r}, but what follows is not a date or version tag, so it may be "
                f"a different model with a different window: it is not taken as {variant_of!r}."
            )
            if suggestions:
                hint += f" Closest known: {', '.join(repr(s) for s in suggestions)}."
            how = (
                "or give the engine its window= and counter= (as for any model of your own; "
                f"counter=counter_for({variant_of!r}) if it shares that model's tokenizer)."
            )
        super().__init__(
            f"Unknown model {name!r}.{hint} Register it with `agentcontext.models.register(ModelSpec(...))`, {how}"
        )
        self.name = name
        self.suggestions = suggestions
        self.variant_of = variant_of

    def __str__(self) -> str:
        # LookupError (via KeyError-like formatting) is not involved, but keep the plain message.
        return str(self.args[0])


class ContextOverflowError(AgentContextError):
    """Even the messages that must be kept (system prompt, latest user message) do not fit.

    Attributes:
        required: tokens the essential messages need, output reserve excluded.
        budget: tokens available for input (window minus output reserve).
        window: the model's context window.
        reserve: tokens reserved for the reply.
    """

    def __init__(self, message: str, *, required: int, budget: int, window: int, reserve: int) -> None:
        super().__init__(message)
        self.required = required
        self.budget = budget
        self.window = window
        self.reserve = reserve


class TokenizerError(AgentContextError):
    """A tokenizer's data is missing, unreadable or fails its hash check."""


class SummarizerError(AgentContextError):
    """A summarizer could not produce a summary (after its retries, for LLM summarizers)."""


class SummarizerBackoff(SummarizerError):
    """The summarizer was not called: it failed recently and the engine skips it for a few calls."""


class SummarizerTimeout(SummarizerError):
    """No summary came back within the deadline (the summarizer's own, or the engine's for one prepare)."""


class UnusableSummaryError(SummarizerError):
    """The model answered, but not with a usable summary: it lacked the structure its prompt asks for
    (a ``<state_snapshot>``), even when asked again with a correction. The strategy reports it as
    ``unusable_summary`` and writes the summary offline instead."""


class StoreError(AgentContextError):
    """A session store cannot be opened, read or written."""


class SessionNotFoundError(StoreError):
    """There is no session where one was expected (a missing file, or no such session id)."""


class NotASessionError(StoreError):
    """The location holds something that is not a session of this store (a conversation, an empty
    or foreign file, an older-format log not yet migrated); it was left exactly as it was.

    The message says how to make a session of it (``agentcontext import``, ``agentcontext migrate``).
    """


class StorePathError(StoreError):
    """The path cannot hold a session: a directory, a device, or a parent that is a file."""


class StorePermissionError(StoreError):
    """The operating system refused access to the session's file or directory."""


class SessionLockedError(StoreError):
    """Another writer holds the session's lock."""


class ConcurrencyError(StoreError):
    """An append expected a sequence number that another writer has already used."""


class StoreNotInitializedError(StoreError):
    """The database holds no agentcontext tables (or an older version of them): run ``agentcontext db init``."""


class StoreUnavailableError(StoreError):
    """The database server could not be reached, and retrying with backoff did not help in time."""


class RecallError(AgentContextError, LookupError):
    """A recall reference does not name anything in this session's archive."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class MissingDependencyError(AgentContextError, ImportError):
    """An optional dependency is not installed; the message names the extra to install."""


class SessionWarning(UserWarning):
    """Something in a stored session was passed over; the rest loaded."""


class CorruptRecordWarning(SessionWarning):
    """A stored record is torn or damaged and was skipped; the message names the line (or seq)."""


class UnknownRecordWarning(SessionWarning):
    """A record of a type this version does not know (from a newer version) was kept and passed over."""


class IdentityWarning(UserWarning):
    """A conversation came back with the same messages under new ids (a history rebuilt from dicts at each
    call): ids tell the engine what it has seen, so it could not go on from what it remembered."""


class ConversionWarning(UserWarning):
    """A format kept an item as it is rather than convert it: one it does not model (kept for the way back,
    perhaps not counted), or one the provider may reject (an unknown type, a dangling reasoning item)."""
