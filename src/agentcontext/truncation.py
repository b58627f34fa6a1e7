"""Ingest truncation: cut an oversized tool output to a preview when it is added.

One huge tool result (a 5 MB log, a minified bundle, ``cat`` of a binary) must
never overflow the window on its own, so the engine shortens tool results as
they arrive, keeps the full text in an `~agentcontext.artifacts.ArtifactStore`,
and leaves the model a preview with a marker saying what was cut and where the
full text is (the marker is one line, wrapped here)::

    <head of the output>
    [... 1,234 lines, 56,789 bytes (about 14,000 tokens) of `pytest` output omitted; full output:
    artifact:sha256:9f86d0... (pass this reference to the recall tool to read it) ...]
    <tail of the output>

The marker says only what is true (`where_full_output`): it points the model to
its recall tool only when it has one (``recallable``, as a session's prepare
sets), says the output is kept outside the conversation (for the application)
when it is stored but the model has no way to read it, adds "until the store
evicts it" when the store is bounded (`~agentcontext.artifacts.may_evict`), and
says the full output was not kept when there is no store.

Truncators of this kind (a head/tail preview, the full text written to a file)
commonly get these wrong; here each is tested:

- **All limits hold on the preview, marker included.** A byte limit checked only
  per line lets a single 1 MB line pass whole; here lines, UTF-8 bytes and
  (optionally) tokens each bound the returned preview.
- **Head and tail never overlap.** Taking the first and last 1,000 lines of a
  1,500-line output duplicates 500 lines, so the "preview" is larger than its
  input. Here the kept head and tail are disjoint and something is always
  omitted, so the preview is strictly shorter.
- **The model is told.** Every preview carries a marker saying what was cut and
  where the full output is.
- **Safe artifact names.** File names built from tool names
  (``tool_{timestamp}_{tool_name}.json``) escape the directory for names with
  ``/`` or ``..`` and collide for two outputs in the same microsecond
  (``asyncio.gather``). Artifacts here are named by the SHA-256 of their content
  and the tool name is only shown in the marker.
- **No I/O at construction.** This dataclass is pure config; the store creates
  its directory on first use.

Peers, for scale: Gemini CLI keeps 40,000 chars (20% head, 80% tail) and a file
path; OpenHands cuts the middle at 50,000 chars and saves a file; Codex keeps
10 KiB / 256 lines of head and tail. The defaults here (2,000 lines, 50 KiB,
30% head) are common limits for coding agents, here enforced on the preview.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Literal, TypeAlias, get_args

from .artifacts import ArtifactRef, ArtifactStore, may_evict
from .compaction import is_observation
from .exceptions import ConfigError, InvalidMessageError
from .messages import ContentPart, FilePart, JSONValue, Message, TextPart
from .tokens._base import TokenCounter
from .tokens._calibrate import CalibratedCounter
from .tokens._tiktoken import TiktokenCounter

__all__ = [
    "Direction",
    "ObservationTruncator",
    "TruncationResult",
    "output_text",
    "truncate_message",
    "where_full_output",
]

Direction: TypeAlias = Literal["head", "tail", "head_tail"]
"""Which part of an output the preview keeps: the start, the end, or both."""

MIN_MAX_BYTES = 1024
"""Smallest ``max_bytes`` accepted: the marker alone takes up to ~340 bytes."""
MIN_MAX_TOKENS = 256
"""Smallest ``max_tokens`` accepted: the marker alone takes up to ~100 tokens (o200k)."""

_SNAP_SHARE = 0.1
_NL = 0x0A
_CR = 0x0D
_TOOL_NAME_CHARS = re.compile(r"[^A-Za-z0-9_.:-]")
_MAX_TOOL_NAME = 64


@dataclass(frozen=True, kw_only=True)
class TruncationResult:
    """What `ObservationTruncator.truncate` did to one output.

    Sizes come in three groups: ``original_*`` measure the input, ``kept_*``
    measure the returned ``preview`` (marker included: what enters the context
    window, and what the limits bound), ``omitted_*`` measure the part of the
    input the preview does not show (what the marker reports). Lines count
    ``\\n``-terminated runs plus a final unterminated one; bytes are UTF-8.
    Token fields are None when the truncator has no counter.
    """

    truncated: bool
    """Whether anything was cut. When False, ``preview`` is the input itself and nothing was stored."""
    preview: str
    """The text to put in the message: head, marker, tail (per ``direction``), or the input when not truncated."""
    ref: ArtifactRef | None
    """Where the full output is stored; None when not truncated or when the truncator has no store."""
    direction: Direction
    """The truncator's direction."""
    marker: str
    """The marker line inside ``preview`` (without the line breaks around it); ``""`` when not truncated."""
    head_chars: int
    """Characters of the input kept verbatim at the start of the preview."""
    tail_chars: int
    """Characters of the input kept verbatim at the end of the preview."""
    original_lines: int
    original_bytes: int
    original_tokens: int | None
    """The input's tokens: exact when the input was tokenized whole (it fit, or was small enough to
    count cheaply), else an estimate (``original_tokens_estimated``): a cut input is never tokenized
    whole, since its worst case (one character repeated for megabytes) costs seconds per megabyte."""
    kept_lines: int
    kept_bytes: int
    kept_tokens: int | None
    omitted_lines: int
    """Input lines of which the preview shows nothing (a line cut in the middle counts as kept)."""
    omitted_bytes: int
    """UTF-8 bytes of the input the preview does not show."""
    omitted_tokens: int | None
    """An estimate: the omitted bytes times the input's tokens per byte (measured on the whole input when it
    was counted, else on evenly spaced samples of it)."""
    original_tokens_estimated: bool = False
    """True when ``original_tokens`` is an estimate rather than a count."""


@dataclass(frozen=True, kw_only=True)
class ObservationTruncator:
    """Cuts tool outputs that exceed a limit down to a preview, keeping the full text in a store.

    Outputs within every limit are returned unchanged (and not stored). Over a
    limit, the preview keeps the head, the tail, or both, plus a one-line marker;
    the marker's size is budgeted, so the whole preview respects every limit.
    The kept head and tail are disjoint and something is always omitted, so the
    preview is smaller than the input in whatever measure the input was over
    (an output over the line limit only may still gain a few bytes: the marker
    can outweigh short omitted lines).
    Cuts fall on character boundaries (never inside a UTF-8 sequence or a
    ``\\r\\n`` pair) and snap back to a line break when one lies within 10% of the
    side's byte budget; a single line longer than the budget is cut inside the
    line, since there is no break to use.

    Args:
        max_lines: most lines in the preview, marker line included; None for no
            line limit. Default 2,000.
        max_bytes: most UTF-8 bytes in the preview, marker included; None for no
            byte limit. Default 50 KiB (51,200): about 12k
            tokens of English or code, more for CJK.
        max_tokens: most tokens in the preview by ``counter.count_text`` (the
            text alone: the message's framing overhead is the engine's to add);
            None (default) for no token limit. The input is never tokenized
            whole unless it is kept whole: bounds from its size decide first
            (a BPE tokenizer makes at most one token per byte, at least one per
            its longest token), then growing prefixes, and the cut is searched
            among preview-sized candidates, so the tokenizer sees O(preview)
            characters whatever the input's size. The search stops within
            ~1.5% of the best cut, so the preview may come in slightly under the limit.
        counter: the `TokenCounter` for ``max_tokens``; when given without
            ``max_tokens`` it only fills the results' token fields (the preview
            counted, the input's tokens estimated from samples when it was cut).
        direction: ``"head_tail"`` (default) keeps both ends; ``"head"`` the start
            (listings, file reads); ``"tail"`` the end (logs where only the
            latest lines matter).
        head_share: for ``"head_tail"``, the share of the line and byte budgets
            the head gets first (any budget one side leaves unused goes to the
            other). Default 0.3: errors, stack traces and test summaries come
            last, so the tail gets most; but a build's *first* error is usually
            the root cause and the head shows which command ran, so we keep
            more head than Gemini CLI's 0.2.
        store: where full outputs go; None (default) stores nothing and the
            marker says the full output was not kept.
        recallable: the model has a recall tool that reads ``store`` (a session's
            prepare sets it): the marker then tells it to pass the reference to
            that tool. Default False: the marker says the full output is kept
            outside the conversation, under its reference, and promises no recall.

    Raises:
        ConfigError: when an option is out of range or inconsistent (the message
            names the option and the accepted values).

    >>> from agentcontext.artifacts import MemoryArtifactStore
    >>> t = ObservationTruncator(max_lines=5, store=MemoryArtifactStore())
    >>> r = t.truncate("".join(f"line {i}\\n" for i in range(100)))
    >>> r.truncated, r.kept_lines, r.omitted_lines
    (True, 5, 96)
    >>> t.store.get(r.ref) == "".join(f"line {i}\\n" for i in range(100))
    True
    """

    max_lines: int | None = 2000
    max_bytes: int | None = 50 * 1024
    max_tokens: int | None = None
    counter: TokenCounter | None = field(default=None, compare=False)
    direction: Direction = "head_tail"
    head_share: float = 0.3
    store: ArtifactStore | None = field(default=None, compare=False)
    recallable: bool = False

    def __post_init__(self) -> None:
        _check_limit("max_lines", self.max_lines, minimum=1)
        _check_limit("max_bytes", self.max_bytes, minimum=MIN_MAX_BYTES)
        _check_limit("max_tokens", self.max_tokens, minimum=MIN_MAX_TOKENS)
        if self.max_lines is None and self.max_bytes is None and self.max_tokens is None:
            raise ConfigError(
                "ObservationTruncator needs at least one limit: set max_lines, max_bytes or max_tokens "
                "(max_bytes alone is the safest single choice)"
            )
        if self.counter is not None and not isinstance(self.counter, TokenCounter):
            raise ConfigError(
                f"counter must implement TokenCounter (count_text, count_message, ...), got {type(self.counter).__name__}"
            )
        if self.max_tokens is not None and self.counter is None:
            raise ConfigError(
                "max_tokens needs a counter to count with: pass counter=agentcontext.counter_for('<model>')"
            )
        if self.direction not in get_args(Direction):
            raise ConfigError(f"direction must be 'head', 'tail' or 'head_tail', got {self.direction!r}")
        share = self.head_share
        if isinstance(share, bool) or not isinstance(share, int | float) or not 0.0 <= share <= 1.0:
            raise ConfigError(f"head_share must be a number from 0.0 to 1.0, got {share!r}")
        if not isinstance(self.recallable, bool):
            raise ConfigError(f"recallable must be True or False, got {self.recallable!r}")
        if self.store is not None and not isinstance(self.store, ArtifactStore):
            raise ConfigError(
                f"store must implement ArtifactStore (put, get, __contains__), got {type(self.store).__name__}"
            )

    def full_output_note(self, ref: ArtifactRef | None) -> str:
        """What this truncator's markers say of a full output stored under ``ref`` (`where_full_output`)."""
        store = self.store
        return where_full_output(
            ref, recallable=self.recallable, evictable=store is not None and may_evict(store)
        )

    def surely_fits(self, text: str) -> bool:
        """Whether ``text`` is within every limit by its length alone: no encoding, no tokenizing.

        A character is at most 4 UTF-8 bytes, and a counter with byte bounds
        (`token_bounds`) makes at most one token a byte; when those bounds settle
        it, `truncate` would return ``text`` unchanged. False means "look closer",
        not "too long". The engine's ingest path asks this first, so a tool output
        far below the limits costs nothing here.
        """
        most_bytes = 4 * len(text)
        if self.max_bytes is not None and most_bytes > self.max_bytes:
            return False
        if self.max_lines is not None and text.count("\n") + 1 > self.max_lines:
            return False
        if self.max_tokens is not None:
            hi = token_bounds(self.counter, most_bytes)[1]
            if hi is None or hi > self.max_tokens:
                return False
        return True

    def truncate(self, text: str, *, tool_name: str | None = None) -> TruncationResult:
        """Return ``text`` unchanged if it is within every limit, else a preview and a stored original.

        Args:
            text: the tool's output.
            tool_name: shown in the marker (sanitised to ``[A-Za-z0-9_.:-]``, at
                most 64 characters) so the model knows which output was cut.
                Never used in a file name.

        Returns:
            A `TruncationResult`. When truncated, ``store.get(result.ref) == text``.

        Raises:
            InvalidMessageError: when ``text`` is not a str or holds a lone surrogate.
            ConfigError: when ``max_tokens`` is too small for even the marker by this counter.
            StoreError: when the store cannot keep the output (nothing is cut
                silently without its original being kept).
        """
        data = _encode(text)
        n = len(data)
        newlines = data.count(b"\n")
        original_lines = newlines + (1 if data and data[-1] != _NL else 0)
        over = (self.max_lines is not None and original_lines > self.max_lines) or (
            self.max_bytes is not None and n > self.max_bytes
        )
        tokens: int | None = None  # the input's exact count, when it was cheap to get
        at_least = 0  # tokens the input has at least, when it was not counted
        if not over and self.counter is not None:
            tokens, at_least = _count_within(self.counter, text, data, self.max_tokens)
        if (
            not over
            and (tokens is None or self.max_tokens is None or tokens <= self.max_tokens)
            and not at_least
        ):
            return TruncationResult(
                truncated=False,
                preview=text,
                ref=None,
                direction=self.direction,
                marker="",
                head_chars=len(text),
                tail_chars=0,
                original_lines=original_lines,
                original_bytes=n,
                original_tokens=tokens,
                kept_lines=original_lines,
                kept_bytes=n,
                kept_tokens=tokens,
                omitted_lines=0,
                omitted_bytes=0,
                omitted_tokens=0 if tokens is not None else None,
            )

        ref = self.store.put(text) if self.store is not None else None
        plan = _Plan(self, data, newlines, original_lines, ref, _clean_tool_name(tool_name))
        plan.tokens, plan.at_least = tokens, at_least
        return plan.run()


def where_full_output(ref: ArtifactRef | str | None, *, recallable: bool, evictable: bool) -> str:
    """What a truncation marker says of the full output: the one place this wording lives.

    Args:
        ref: the artifact's reference, or None when the full output was not kept.
        recallable: the model has a recall tool that reads the store.
        evictable: the store may drop the artifact later (a bounded memory store).

    >>> where_full_output(None, recallable=True, evictable=False)
    'the full output was not kept'
    >>> where_full_output("artifact:sha256:ab...", recallable=False, evictable=True)
    'full output kept outside the conversation under artifact:sha256:ab..., until the store evicts it'
    """
    if ref is None:
        return "the full output was not kept"
    until = ", until the store evicts it" if evictable else ""
    if recallable:
        return f"full output: {ref} (pass this reference to the recall tool to read it{until})"
    return f"full output kept outside the conversation under {ref}{until}"


def output_text(message: Message) -> str:
    """The text a tool result holds: its text, and the text of the text files it carries (a log returned as
    a document), each on lines of its own; what the ingest truncator reads and cuts."""
    texts = [p.text for p in message.files if p.text is not None]
    return "\n".join([message.text, *texts]) if texts else message.text


def truncate_message(message: Message, truncator: ObservationTruncator) -> tuple[Message, TruncationResult]:
    """Apply ``truncator`` to a tool message's text (or an observation's: `is_observation`); for the engine's append path.

    String content is replaced by the preview. Part content has its text parts
    and its text files (`output_text`: a log a tool returned as a document is
    text to cut like any other) replaced by one text part holding the preview,
    followed by the message's images and other files, unchanged and in their
    order: they are not text to cut, and dropping them would lose data the store
    cannot hold. A message whose text fits comes back as the very same object.

    The new message (new id, via `Message.evolve`) records what happened in
    ``metadata["truncated"]``: ``ref`` (the string form, or None), ``direction``,
    the ``original_*``, ``kept_*`` and ``omitted_*`` sizes and
    ``original_tokens_estimated``; other metadata is kept. Truncating an already truncated message again records only the latest
    cut.

    Args:
        message: a ``tool`` role message, or a user message that carries a command's output.
        truncator: the configured truncator; the message's ``name`` is passed as ``tool_name``.

    Returns:
        ``(message, result)``: the new (or same) message and the `TruncationResult`.

    Raises:
        InvalidMessageError: when ``message`` is neither a tool message nor an observation.
    """
    if not isinstance(message, Message):
        raise InvalidMessageError(f"truncate_message takes a Message, got {type(message).__name__}")
    if message.role != "tool" and not is_observation(message):
        raise InvalidMessageError(
            f"truncate_message shortens tool results only, got a {message.role!r} message that is not "
            "a command's output; filter with `message.role == 'tool'` first",
            field="role",
        )
    result = truncator.truncate(output_text(message), tool_name=message.name)
    if not result.truncated:
        return message, result
    content: str | tuple[ContentPart, ...]
    if isinstance(message.content, tuple):
        kept = (p for p in message.attachments if not (isinstance(p, FilePart) and p.text is not None))
        content = (TextPart(text=result.preview), *kept)
    else:
        content = result.preview
    record: dict[str, JSONValue] = {
        "ref": str(result.ref) if result.ref is not None else None,
        "direction": result.direction,
        "original_lines": result.original_lines,
        "original_bytes": result.original_bytes,
        "original_tokens": result.original_tokens,
        "kept_lines": result.kept_lines,
        "kept_bytes": result.kept_bytes,
        "kept_tokens": result.kept_tokens,
        "omitted_lines": result.omitted_lines,
        "omitted_bytes": result.omitted_bytes,
        "omitted_tokens": result.omitted_tokens,
        "original_tokens_estimated": result.original_tokens_estimated,
    }
    metadata: dict[str, JSONValue] = {**message.metadata, "truncated": record}
    if message.role == "user":
        metadata["observation"] = True  # still one once its header or prompt is cut away
    return message.evolve(content=content, metadata=metadata), result


# ----------------------------------------------------------------------------- the cut


class _Plan:
    """One truncation: budgets, cuts and the marker, over the input's UTF-8 bytes.

    Working on bytes keeps every step at C speed: ``\\n`` (0x0A) never occurs
    inside a multi-byte UTF-8 sequence, so line search is a byte search, and a
    byte offset is a character boundary unless it points at a continuation byte
    (0b10xxxxxx), which is at most 3 steps from one.
    """

    def __init__(
        self,
        config: ObservationTruncator,
        data: bytes,
        newlines: int,
        original_lines: int,
        ref: ArtifactRef | None,
        tool_name: str | None,
    ) -> None:
        self.config = config
        self.data = data
        self.newlines = newlines
        self.original_lines = original_lines
        self.ref = ref
        self.tool_name = tool_name
        self.where = config.full_output_note(ref)
        """What the marker says of the full output (computed once: the marker is built per probe)."""
        self.tokens: int | None = None
        """The input's exact token count, when it was cheap to get."""
        self.at_least = 0
        """Tokens the input has at least (from its size, or a counted prefix)."""
        self.density = 0.0
        """The input's tokens per byte, measured (`measure`)."""

    def run(self) -> TruncationResult:
        cfg = self.config
        n = len(self.data)
        # Budget the marker at its largest possible size: the omitted amounts can
        # only be smaller than the input's, and the token estimate is at most
        # _MAX_DENSITY tokens per byte, so the real marker is never longer.
        worst_tokens = None if cfg.counter is None else self.tokens or math.ceil(n * _MAX_DENSITY)
        worst = self.marker(self.original_lines, n, worst_tokens)
        marker_bytes = len(worst.encode("utf-8")) + 2  # plus the line breaks around it
        byte_budget = n - 1  # something is always omitted, so head and tail never meet
        if cfg.max_bytes is not None:
            byte_budget = min(byte_budget, cfg.max_bytes - marker_bytes)
        line_budget = cfg.max_lines - 1 if cfg.max_lines is not None else self.original_lines
        first_cut = self.cut(byte_budget, line_budget)
        if cfg.counter is None:
            return self.result(*first_cut)
        # Tokens per byte, from samples about the preview's size (or from the whole input when that
        # is no larger): what the marker's estimate and the token search's first guess need.
        kept = first_cut[0] + n - first_cut[1]
        if cfg.max_tokens is not None:
            kept = min(kept, 4 * cfg.max_tokens)
        self.measure(max(kept, _MIN_SAMPLE))
        if cfg.max_tokens is None:
            return self.result(*first_cut)

        # Token limit: search the byte budget, tokenizing only preview-sized
        # candidates, never the whole input. Tokens grow about in proportion to
        # bytes, so each next budget is the last one scaled by how far its preview
        # is from the limit (a secant step), falling back to bisection when that
        # leaves the bracket; the first is the budget the measured density
        # predicts. Two or three counts usually land within 1/64 of the limit,
        # where the search stops: closer is not worth another tokenization.
        limit = cfg.max_tokens
        close = limit - max(1, limit // 64)
        budget = min(byte_budget, max(1, math.floor(limit / self.density * 0.98)))
        best: TruncationResult | None = None
        fit, miss = -1, byte_budget + 1  # largest budget known to fit, smallest known not to
        for _ in range(_MAX_PROBES):
            trial = self.result(*self.cut(budget, line_budget))
            tokens = trial.kept_tokens
            assert tokens is not None
            if tokens <= limit:
                fit, best = budget, trial
                if budget >= byte_budget or tokens >= close:
                    break
            else:
                miss = budget
            if miss - max(fit, 0) <= max(16, miss // 64):
                break
            step = int(budget * limit / max(tokens, 1) * (0.99 if tokens <= limit else 0.97))
            budget = step if fit < step < miss else (max(fit, 0) + miss) // 2
        if best is None:
            best = self.result(*self.cut(0, line_budget))
            if not self.fits(best):
                raise ConfigError(
                    f"max_tokens={limit:,} is too small for this output: the preview still costs "
                    f"{best.kept_tokens:,} tokens by {cfg.counter.name} with only the marker left; raise max_tokens"
                )
        return best

    def measure(self, budget: int) -> None:
        """Set `density` from the exact count, the whole input (when within ``budget`` bytes), or samples.

        The samples are ``_SAMPLES`` windows spread evenly over the input,
        ``budget`` bytes in all, so their cost is the preview's, not the input's.
        """
        data, n = self.data, len(self.data)
        if self.tokens is None and n <= budget:
            self.tokens = self.count(data.decode("utf-8"))
        if self.tokens is not None:
            self.density = self.tokens / n
        else:
            width = max(budget // _SAMPLES, 64)
            tokens = nbytes = 0
            for i in range(_SAMPLES):
                start = _char_start(data, i * (n - width) // (_SAMPLES - 1))
                end = _char_start(data, min(n, start + width))
                if end > start:
                    tokens += self.count(data[start:end].decode("utf-8"))
                    nbytes += end - start
            self.density = tokens / max(nbytes, 1)
        # Bounded both ways: the marker's size is budgeted with the upper bound, and the
        # token search divides by it.
        self.density = min(max(self.density, _MIN_DENSITY), _MAX_DENSITY)

    def original_tokens(self) -> int:
        """The input's tokens: the count when there is one, else the estimate within the counter's bounds."""
        if self.tokens is not None:
            return self.tokens
        lo, hi = token_bounds(self.config.counter, len(self.data))
        estimate = max(round(self.density * len(self.data)), lo, self.at_least, 1)
        return min(estimate, hi) if hi is not None and hi >= max(lo, self.at_least) else estimate

    def fits(self, result: TruncationResult) -> bool:
        limit = self.config.max_tokens
        return limit is None or (result.kept_tokens is not None and result.kept_tokens <= limit)

    def count(self, text: str) -> int:
        counter = self.config.counter
        assert counter is not None
        return counter.count_text(text)

    # --------------------------------------------------------------------- choosing head and tail

    def cut(self, byte_budget: int, line_budget: int) -> tuple[int, int]:
        """Byte offsets ``(head_end, tail_start)``: keep ``data[:head_end]`` and ``data[tail_start:]``."""
        data, n = self.data, len(self.data)
        byte_budget = max(0, byte_budget)
        line_budget = max(0, line_budget)
        direction = self.config.direction
        if direction == "head":
            return _head_end(data, n, line_budget, byte_budget), n
        if direction == "tail":
            return 0, _tail_start(data, 0, line_budget, byte_budget)
        share = self.config.head_share
        head = _head_end(data, n, math.floor(line_budget * share), math.floor(byte_budget * share))
        head_lines = _line_count(data[:head])
        tail = _tail_start(data, head, line_budget - head_lines, byte_budget - head)
        # Give the head whatever the tail left unused (short tail lines, or a tail
        # limited by lines): the head is recomputed with the remainder and may only grow.
        tail_lines = _line_count(data[tail:])
        regrown = _head_end(data, tail, line_budget - tail_lines, byte_budget - (n - tail))
        return max(head, regrown), tail

    # --------------------------------------------------------------------- the marker and the result

    def marker(self, lines: int, nbytes: int, tokens: int | None) -> str:
        amount = f"{lines:,} line{'s' if lines != 1 else ''}, " if lines else ""
        amount += f"{nbytes:,} byte{'s' if nbytes != 1 else ''}"
        if tokens is not None:
            amount += f" (about {tokens:,} tokens)"
        what = f" of `{self.tool_name}` output" if self.tool_name else ""
        return f"[... {amount}{what} omitted; {self.where} ...]"

    def result(self, head_end: int, tail_start: int) -> TruncationResult:
        data, n = self.data, len(self.data)
        head_b, tail_b = data[:head_end], data[tail_start:]
        head, tail = head_b.decode("utf-8"), tail_b.decode("utf-8")
        head_lines, tail_lines = _line_count(head_b), _line_count(tail_b)
        # A line cut on both sides (the middle of one long line) is one kept line, not two.
        # (Line breaks in the omitted middle are counted by difference: it is never scanned.)
        middle_breaks = self.newlines - head_b.count(b"\n") - tail_b.count(b"\n")
        same_line = bool(head_b) and bool(tail_b) and head_b[-1] != _NL and middle_breaks == 0
        omitted_lines = self.original_lines - head_lines - tail_lines + (1 if same_line else 0)
        original_tokens: int | None = None
        omitted_tokens: int | None = None
        if self.config.counter is not None:
            original_tokens = self.original_tokens()
            omitted_tokens = min(round(self.density * (tail_start - head_end)), original_tokens)
        marker = self.marker(omitted_lines, n - head_end - (n - tail_start), omitted_tokens)
        # The marker sits on a line of its own: break before it unless the head ends
        # a line, and after it when a tail follows. So the preview has exactly
        # head_lines + tail_lines + 1 lines.
        before = "\n" if head and not head.endswith("\n") else ""
        after = "\n" if tail else ""
        preview = f"{head}{before}{marker}{after}{tail}"
        preview_bytes = len(head_b) + len(before) + len(marker.encode("utf-8")) + len(after) + len(tail_b)
        return TruncationResult(
            truncated=True,
            preview=preview,
            ref=self.ref,
            direction=self.config.direction,
            marker=marker,
            head_chars=len(head),
            tail_chars=len(tail),
            original_lines=self.original_lines,
            original_bytes=n,
            original_tokens=original_tokens,
            kept_lines=head_lines + tail_lines + 1,
            kept_bytes=preview_bytes,
            kept_tokens=self.count(preview) if self.config.counter is not None else None,
            omitted_lines=omitted_lines,
            omitted_bytes=tail_start - head_end,
            omitted_tokens=omitted_tokens,
            original_tokens_estimated=original_tokens is not None and self.tokens is None,
        )


def _head_end(data: bytes, limit: int, lines: int, nbytes: int) -> int:
    """Largest prefix end <= ``limit`` with at most ``lines`` lines and ``nbytes`` bytes, at a clean boundary."""
    if lines <= 0 or nbytes <= 0 or limit <= 0:
        return 0
    by_lines = limit
    # Only the first ``nbytes`` can be kept, so only their line breaks matter:
    # each probe of the token search stays preview-sized, even on a huge input.
    if data.count(b"\n", 0, min(limit, nbytes)) >= lines:
        pos = -1
        for _ in range(lines):
            pos = data.find(b"\n", pos + 1, limit)
        by_lines = pos + 1
    end = min(nbytes, limit)
    while 0 < end < len(data) and data[end] & 0xC0 == 0x80:
        end -= 1  # never split a UTF-8 sequence
    if end >= by_lines:
        return by_lines  # the line limit binds: the cut is already at a line break
    if end > 0 and data[end - 1] != _NL:
        snap = data.rfind(b"\n", max(0, end - int(nbytes * _SNAP_SHARE)), end)
        if snap >= 0:
            end = snap + 1
        elif data[end - 1] == _CR and end < len(data) and data[end] == _NL:
            end -= 1  # keep "\r\n" whole
    return end


def _tail_start(data: bytes, limit: int, lines: int, nbytes: int) -> int:
    """Smallest suffix start >= ``limit`` with at most ``lines`` lines and ``nbytes`` bytes, at a clean boundary."""
    n = len(data)
    if lines <= 0 or nbytes <= 0 or limit >= n:
        return n
    by_lines = limit
    # A final "\n" ends the last line; it does not start another one.
    end = n - 1 if data[-1] == _NL else n
    if data.count(b"\n", max(limit, n - nbytes), end) >= lines:
        search_end = end
        for _ in range(lines):
            search_end = data.rfind(b"\n", limit, search_end)
        by_lines = search_end + 1
    start = max(limit, n - nbytes)
    while start < n and data[start] & 0xC0 == 0x80:
        start += 1  # never split a UTF-8 sequence
    if start <= by_lines:
        return by_lines
    if start < n and data[start - 1] != _NL:
        snap = data.find(b"\n", start, min(n, start + int(nbytes * _SNAP_SHARE)))
        if 0 <= snap < n - 1:
            start = snap + 1
        elif data[start - 1] == _CR and data[start] == _NL:
            start += 1  # keep "\r\n" whole
    return start


# ----------------------------------------------------------------------------- counting what is kept

_SAMPLES = 8
"""Windows the token density of a cut input is sampled from."""
_MAX_PROBES = 24
"""Preview candidates the token search counts at most (it usually needs two or three)."""
_MIN_SAMPLE = 4096
"""Bytes sampled at least (a preview may be tiny; the estimate still needs a few hundred tokens)."""
_MIN_DENSITY = 1e-4
_MAX_DENSITY = 8.0
"""Tokens per byte the estimate stays within (no tokenizer makes more than one token per byte;
the margin is for counters that overcount on purpose)."""
_LONGEST_TOKEN: dict[str, int] = {}


def token_bounds(counter: TokenCounter | None, nbytes: int) -> tuple[int, int | None]:
    """Bounds ``(at least, at most or None)`` on the tokens of any text of ``nbytes`` UTF-8 bytes.

    A byte-level BPE tokenizer (tiktoken's encodings) splits the bytes into
    tokens of 1 to ``L`` bytes each, ``L`` its longest token (128 for
    ``o200k_base`` and ``cl100k_base``), so ``ceil(nbytes / L) <= tokens <= nbytes``;
    a `CalibratedCounter` scales its inner counter's bounds by its correction.
    Other counters get ``(0, None)``: no bound, and the truncator counts growing
    prefixes instead.
    """
    if isinstance(counter, CalibratedCounter):
        lo, hi = token_bounds(counter.inner, nbytes)
        c = counter.correction
        return math.ceil(lo * c - 1e-9), None if hi is None else math.ceil(hi * c - 1e-9)
    if isinstance(counter, TiktokenCounter):
        longest = _LONGEST_TOKEN.get(counter.name)
        if longest is None:
            longest = _LONGEST_TOKEN[counter.name] = max(map(len, counter.encoding.token_byte_values()))
        return -(-nbytes // longest), nbytes
    return 0, None


def _count_within(counter: TokenCounter, text: str, data: bytes, limit: int | None) -> tuple[int | None, int]:
    """``(tokens, 0)`` when ``text`` has at most ``limit`` tokens (or there is no limit), else ``(None, at_least)``.

    Over the limit, ``text`` is never tokenized whole: its size bounds decide
    when they can (`token_bounds`), else prefixes of 4x ``limit`` bytes and
    doubling are counted until one is clearly over the limit (by a margin for
    the token a cut splits). What is tokenized is then O(``limit`` tokens' worth
    of text), whatever the size of ``text``.
    """
    if limit is None:
        return counter.count_text(text), 0
    n = len(data)
    lo, hi = token_bounds(counter, n)
    if lo > limit:
        return None, lo
    if hi is not None and hi <= limit:
        return counter.count_text(text), 0
    margin = max(16, limit // 64)
    size = max(_MIN_SAMPLE, 4 * limit)
    while size < n:
        end = _char_start(data, size)
        snap = data.rfind(b"\n", end - end // 10, end)  # a line break cuts no token
        prefix = data[: snap + 1 if snap > 0 else end].decode("utf-8")
        tokens = counter.count_text(prefix)
        if tokens > limit + margin:
            return None, max(lo, tokens - margin)
        size *= 2
    return counter.count_text(text), 0


def _char_start(data: bytes, i: int) -> int:
    """The largest character boundary at or before ``i``."""
    while 0 < i < len(data) and data[i] & 0xC0 == 0x80:
        i -= 1
    return i


def _check_limit(name: str, value: object, *, minimum: int) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{name} must be an int >= {minimum:,} or None (no limit), got {value!r}")


def _line_count(data: bytes) -> int:
    return data.count(b"\n") + (1 if data and data[-1] != _NL else 0)


def _encode(text: object) -> bytes:
    if not isinstance(text, str):
        raise InvalidMessageError(
            f"a tool output to truncate must be a str, got {type(text).__name__}", field="content"
        )
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidMessageError(
            f"the tool output holds a lone UTF-16 surrogate at index {exc.start}, which UTF-8 cannot encode; "
            "decode it with errors='replace' first",
            field="content",
        ) from None


def _clean_tool_name(name: str | None) -> str | None:
    if not name:
        return None
    cleaned = _TOOL_NAME_CHARS.sub("_", name)[:_MAX_TOOL_NAME]
    return cleaned or None
