"""Session tools: ``inspect``, ``compact``, ``checkpoints``, ``revert``, ``export``, ``import``, ``migrate``."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.table import Table

from .._report import Status
from ..engine import ContextEngine
from ..exceptions import NotASessionError, SessionNotFoundError, StorePathError
from ..formats import anthropic as anthropic_format
from ..formats import openai as oai
from ..invariants import check_messages
from ..messages import JSONValue, Message, tool_call_index, tool_name_for
from ..session import SCHEMA_VERSION, Checkpoint, CompactionRecord, Session, SessionWarning
from ..session.stores._url import parse_location
from ..session.stores.jsonl import legacy_error
from . import EXIT_FALLBACK, Consoles, explain, say_error
from ._common import (
    add_model_options,
    add_summarizer_options,
    count,
    engine_from,
    model_from,
    named_summarizer,
)
from ._errors import SummarizerFailed
from ._io import FORMATS, InputError, read_request, write_file
from ._progress import Activity
from ._reporting import SUMMARIZER_FAILURES, bounded_report, describe_fallback, fallbacks, summary_line
from ._text import plain, preview


def register(sub: Any, formatter: Callable[[str], argparse.HelpFormatter]) -> None:
    """Add the session sub-commands."""
    p = sub.add_parser(
        "inspect",
        help="look inside one or more sessions",
        formatter_class=formatter,
        description="""Show what a session holds: messages, tokens per role and per tool, the largest messages,
checkpoints, compactions, and the current level for a model. Several sessions get a progress bar
and one summary row each.

Examples:
  agentcontext inspect runs/task-42.jsonl --model gpt-4o
  agentcontext inspect runs/*.jsonl --model gpt-4o --json""",
    )
    p.add_argument("sessions", nargs="+", help="session files (.jsonl)")
    add_model_options(p, required=False, thresholds=False, reserve=False, default="gpt-4o")
    p.add_argument("--json", action="store_true", help="print JSON for scripts")
    p.set_defaults(handler=run_inspect)

    p = sub.add_parser(
        "compact",
        help="compact a session now",
        formatter_class=formatter,
        description="""Compact a session now with the chosen summarizer, whatever its level, and record the
compaction in its log (nothing is deleted: `agentcontext inspect` lists it, and the originals stay
recallable).

Examples:
  agentcontext compact runs/task-42.jsonl --model gpt-4o --window 32000
  agentcontext compact runs/task-42.jsonl --model gpt-4o --summarizer openai:gpt-4o-mini""",
    )
    p.add_argument("session", help="session file (.jsonl)")
    add_model_options(p)
    add_summarizer_options(p)
    p.add_argument(
        "--json", action="store_true", help="print the report as JSON (bounded: counts and ranges)"
    )
    p.add_argument(
        "--report-full", action="store_true", help="the JSON report lists every action and message id"
    )
    p.set_defaults(handler=run_compact)

    p = sub.add_parser(
        "checkpoints",
        help="list a session's checkpoints",
        formatter_class=formatter,
        description="""List a session's checkpoints: id, label, time, and the view's size then.

Example:
  agentcontext checkpoints runs/task-42.jsonl""",
    )
    p.add_argument("session", help="session file (.jsonl)")
    p.add_argument("--json", action="store_true", help="print JSON for scripts")
    p.set_defaults(handler=run_checkpoints)

    p = sub.add_parser(
        "revert",
        help="revert a session to a checkpoint",
        formatter_class=formatter,
        description="""Revert a session's view to a checkpoint. Nothing is lost: the records after it stay
in the log (see the session docs) and can still be recalled.

Example:
  agentcontext revert runs/task-42.jsonl 3""",
    )
    p.add_argument("session", help="session file (.jsonl)")
    p.add_argument("checkpoint", type=count, help="checkpoint id (see `agentcontext checkpoints`)")
    p.set_defaults(handler=run_revert)

    p = sub.add_parser(
        "undo",
        help="take back a session's newest compaction",
        formatter_class=formatter,
        description="""Take back the newest compaction of a session's view: what it summarized, masked or
dropped is in the view again, and messages appended since stay. The compaction's record stays in the
log; undo again to go one compaction further back, or `agentcontext compact` to compact anew.

Example:
  agentcontext undo runs/task-42.jsonl""",
    )
    p.add_argument("session", help="session file (.jsonl)")
    p.set_defaults(handler=run_undo)

    p = sub.add_parser(
        "export",
        help="export a session's view in a provider's format",
        formatter_class=formatter,
        description="""Write a session's current view (what the model sees) as OpenAI Chat Completions
messages (JSON Lines) or as an Anthropic Messages request body ({"system", "messages"}).

Examples:
  agentcontext export runs/task-42.jsonl --format openai > view.jsonl
  agentcontext export runs/task-42.jsonl --format anthropic -o request.json""",
    )
    p.add_argument("session", help="session file (.jsonl)")
    p.add_argument(
        "--format", choices=("openai", "anthropic"), default="openai", help="output format (default openai)"
    )
    p.add_argument("--output", "-o", help="write here instead of stdout")
    p.set_defaults(handler=run_export)

    p = sub.add_parser(
        "import",
        help="make a new session of a conversation file",
        formatter_class=formatter,
        description="""Read a conversation (OpenAI, Anthropic or Responses API: a JSON array, JSON Lines or a
request body, as `fit` reads it) and write it as a new session, one message record each. The
conversation file is only read. The session must not exist yet.

Examples:
  agentcontext import conversation.jsonl runs/task-42.jsonl
  agentcontext import request.json sqlite:///runs.db?session=task-42""",
    )
    p.add_argument("conversation", help="the conversation file (- for stdin)")
    p.add_argument("session", help="the new session: a .jsonl path or a database URL")
    p.add_argument("--format", choices=FORMATS, default="auto", help="the input's API (default: recognised)")
    p.add_argument(
        "--keep-unknown",
        action="store_true",
        help="keep content agentcontext does not model (Anthropic thinking and document blocks, other parts) "
        "in the session with its message, not counted; `export --format anthropic` writes it back as it "
        "came for each message no compaction changed",
    )
    p.set_defaults(handler=run_import)

    p = sub.add_parser(
        "migrate",
        help="rewrite an older-format session log in the current schema",
        formatter_class=formatter,
        description="""Rewrite a session log written in an older schema (a Kimi CLI context file: JSON Lines
of messages without an agentcontext header) in the current one. The original is kept beside it,
bytes and mode, as <stem>.bak-<n>.jsonl; nothing else ever migrates a file.

Example:
  agentcontext migrate ~/.kimi/sessions/context.jsonl""",
    )
    p.add_argument("session", help="session file (.jsonl)")
    p.set_defaults(handler=run_migrate)


@contextmanager
def _open(
    path: str,
    *,
    read_only: bool,
    engine: ContextEngine | None = None,
    err: Console | None = None,
    migrate: bool = False,
) -> Iterator[Session]:
    """Open an existing session; its warnings (skipped lines...) become one-line messages on stderr.

    A file without an agentcontext header (a conversation, a Kimi CLI context file) is refused
    even for reading, unless ``migrate``: the commands work on sessions only.
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", SessionWarning)
        session = Session.open(path, create=False, read_only=read_only, engine=engine, migrate=migrate)
    skipped = [w for w in caught if issubclass(w.category, SessionWarning)]
    try:
        if session.schema_version < SCHEMA_VERSION and not migrate:
            raise legacy_error(path)
        if skipped and not len(session.view) and not session.checkpoints and not session.compactions:
            raise InputError(
                f"{path}: not a session file: none of its lines could be read ({len(skipped)} skipped); "
                "for a conversation file, use `agentcontext fit`, `count` or `replay`"
            )
        for w in skipped[:5]:
            if err is not None:
                err.print(f"agentcontext: warning: {plain(str(w.message))}")
        if len(skipped) > 5 and err is not None:
            err.print(f"agentcontext: warning: ... and {len(skipped) - 5} more")
        yield session
    finally:
        session.close()


@dataclass(frozen=True, kw_only=True)
class SessionSummary:
    """What `inspect` reports about one session."""

    path: str
    model: str
    messages: int
    status: Status
    by_role: dict[str, tuple[int, int]]
    """Role -> (messages, tokens)."""
    by_tool: dict[str, tuple[int, int]]
    """Tool -> (results, tokens)."""
    largest: list[tuple[int, Message, int]]
    """(index, message, tokens), largest first."""
    checkpoints: tuple[Checkpoint, ...]
    compactions: tuple[CompactionRecord, ...]

    def to_dict(self) -> dict[str, JSONValue]:
        """A JSON-ready dict."""
        return {
            "session": self.path,
            "model": self.model,
            "messages": self.messages,
            "tokens": self.status.tokens,
            "status": self.status.to_dict(),
            "by_role": {r: {"messages": n, "tokens": t} for r, (n, t) in self.by_role.items()},
            "by_tool": {k: {"results": n, "tokens": t} for k, (n, t) in self.by_tool.items()},
            "largest": [
                {"index": i, "role": m.role, "id": m.id, "tokens": t, "preview": m.text[:80]}
                for i, m, t in self.largest
            ],
            "checkpoints": [
                {"id": c.id, "label": c.label, "ts": c.ts, "messages": c.messages} for c in self.checkpoints
            ],
            "compactions": [
                {
                    "seq": c.seq,
                    "ts": c.ts,
                    "level": c.level,
                    "covers": len(c.covers),
                    "tokens_before": c.tokens_before,
                    "tokens_after": c.tokens_after,
                }
                for c in self.compactions
            ],
        }


def inspect_one(path: str, *, engine: ContextEngine, err: Console | None = None) -> SessionSummary:
    """Everything `inspect` reports about one session, counted and judged by ``engine``."""
    counter = engine.counter
    with _open(path, read_only=True, err=err) as session:
        view = list(session.view)
        calls = tool_call_index(view)
        by_role: dict[str, tuple[int, int]] = {}
        by_tool: dict[str, tuple[int, int]] = {}
        sizes: list[tuple[int, int]] = []
        for i, m in enumerate(view):
            n = counter.count_message(m)
            sizes.append((n, i))
            count, tokens = by_role.get(m.role, (0, 0))
            by_role[m.role] = (count + 1, tokens + n)
            if m.role == "tool":
                tool = tool_name_for(m, calls)
                count, tokens = by_tool.get(tool, (0, 0))
                by_tool[tool] = (count + 1, tokens + n)
        return SessionSummary(
            path=path,
            model=engine.model.name if engine.model is not None else "custom",
            messages=len(view),
            status=engine.status(view),
            by_role=by_role,
            by_tool=by_tool,
            largest=[(i, view[i], n) for n, i in sorted(sizes, reverse=True)[:5]],
            checkpoints=session.checkpoints,
            compactions=session.compactions,
        )


def run_inspect(args: argparse.Namespace, io: Consoles) -> int:
    """Inspect one or more sessions."""
    results: list[SessionSummary] = []
    spec, note = model_from(args)
    if note:
        io.err.print(f"note: {plain(note)}")
    engine = ContextEngine(spec, window=args.window)
    failed = 0  # the worst exit code of a session that could not be inspected; the others are still reported
    with Activity(io) as activity, activity.step("inspecting", total=len(args.sessions)) as done:
        for i, path in enumerate(args.sessions):
            try:
                results.append(inspect_one(path, engine=engine, err=io.err))
            except Exception as exc:
                if len(args.sessions) == 1:
                    raise
                code, message = explain(exc)
                failed = max(failed, code)
                say_error(io.err, message if path in message else f"{path}: {message}")
            done(i + 1)
    if not results:
        return failed
    if args.json:
        dicts = [r.to_dict() for r in results]
        io.out.print(json.dumps(dicts if len(args.sessions) > 1 else dicts[0], ensure_ascii=False))
        return failed
    if len(args.sessions) > 1:
        table = Table(title=f"{len(results)} sessions ({results[0].model})")
        for col in ("session", "messages", "tokens", "level", "checkpoints", "compactions"):
            table.add_column(col, justify="left" if col == "session" else "right")
        for r in results:
            table.add_row(
                plain(r.path),
                f"{r.messages:,}",
                f"{r.status.tokens:,}",
                r.status.level.label,
                str(len(r.checkpoints)),
                str(len(r.compactions)),
            )
        io.out.print(table)
        return failed
    r = results[0]
    io.out.print(
        f"{plain(r.path)}: {r.messages:,} messages in view, {r.status.tokens:,} tokens for {r.model}"
    )
    io.out.print(r.status.recommendation)
    table = Table(title="tokens by role and tool")
    table.add_column("role / tool")
    table.add_column("messages", justify="right")
    table.add_column("tokens", justify="right")
    for role, (n, t) in sorted(r.by_role.items(), key=lambda kv: -kv[1][1]):
        table.add_row(role, f"{n:,}", f"{t:,}")
    for tool, (n, t) in sorted(r.by_tool.items(), key=lambda kv: -kv[1][1]):
        table.add_row(f"  tool: {plain(tool)}", f"{n:,}", f"{t:,}")
    io.out.print(table)
    largest = Table(title="largest messages")
    for col in ("index", "role", "tokens", "starts with"):
        largest.add_column(col, justify="right" if col in ("index", "tokens") else "left")
    for i, m, t in r.largest:
        largest.add_row(str(i), m.role, f"{t:,}", preview(m.text))
    io.out.print(largest)
    io.out.print(f"checkpoints: {len(r.checkpoints)}; compactions: {len(r.compactions)}")
    return 0


def run_compact(args: argparse.Namespace, io: Consoles) -> int:
    """Compact a session now."""
    spec, note = model_from(args)
    engine = engine_from(args, spec=spec)
    named = named_summarizer(args)
    with (
        Activity(io) as activity,
        activity.step(f"compacting {args.session}"),
        _open(args.session, read_only=False, engine=engine, err=io.err) as session,
    ):
        inputs = list(session.view)
        try:
            prepared = session.compact()
        except SummarizerFailed as exc:
            io.err.print(
                f"agentcontext: error: {plain(str(exc))}; nothing recorded. Fix the summarizer, or pass "
                "--allow-fallback to compact without it"
            )
            return EXIT_FALLBACK
        report = prepared.report
        failed = [a for a in fallbacks(report.actions) if a.fallback in SUMMARIZER_FAILURES]
        if named is not None and failed and not args.allow_fallback:
            if prepared.compaction is not None:
                session.undo_compaction()
            io.err.print(
                f"agentcontext: error: the summarizer {named} did not deliver: {describe_fallback(failed[0])}; "
                "the compaction was taken back. Fix the summarizer, or pass --allow-fallback to compact without it"
            )
            return EXIT_FALLBACK
    if note:
        io.err.print(f"note: {plain(note)}")
    if args.json:
        data = bounded_report(report, inputs, full=args.report_full)
        io.out.print(json.dumps(data, ensure_ascii=False))
    else:
        io.out.print(
            f"{plain(args.session)}: {report.tokens_before:,} -> {report.tokens_after:,} tokens "
            f"(level {report.final_level.label}): {summary_line(report)}; the originals stay in the log"
        )
    for text in report.notes:
        io.err.print(f"note: {plain(text)}")
    seen: dict[str, int] = {}
    for action in fallbacks(report.actions):
        text = describe_fallback(action)
        seen[text] = seen.get(text, 0) + 1
    for text, n in seen.items():
        io.err.print(f"fallback: {plain(text)}" + (f" ({n} times)" if n > 1 else ""))
    return 0


def run_checkpoints(args: argparse.Namespace, io: Consoles) -> int:
    """List checkpoints."""
    with _open(args.session, read_only=True, err=io.err) as session:
        cps = session.checkpoints
    if args.json:
        rows = [{"id": c.id, "label": c.label, "ts": c.ts, "messages": c.messages} for c in cps]
        io.out.print(json.dumps(rows, ensure_ascii=False))
        return 0
    table = Table(title=f"{plain(args.session)}: {len(cps)} checkpoints")
    for col in ("id", "label", "time", "messages in view"):
        table.add_column(col, justify="right" if col in ("id", "messages in view") else "left")
    for c in cps:
        table.add_row(str(c.id), preview(c.label or ""), plain(c.ts or ""), f"{c.messages:,}")
    io.out.print(table)
    return 0


def run_revert(args: argparse.Namespace, io: Consoles) -> int:
    """Revert to a checkpoint."""
    with _open(args.session, read_only=False, err=io.err) as session:
        session.revert_to(args.checkpoint)
        n = len(session.view)
    io.out.print(f"{plain(args.session)}: reverted to checkpoint {args.checkpoint}; {n:,} messages in view")
    return 0


def run_undo(args: argparse.Namespace, io: Consoles) -> int:
    """Take back the newest compaction."""
    with _open(args.session, read_only=False, err=io.err) as session:
        before = len(session.view)
        record = session.undo_compaction()
        n = len(session.view)
    io.out.print(
        f"{plain(args.session)}: took back compaction:{record.seq}; {n:,} messages in view (was {before:,})"
    )
    return 0


def run_export(args: argparse.Namespace, io: Consoles) -> int:
    """Export the view."""
    with _open(args.session, read_only=True, err=io.err) as session:
        view = list(session.view)
    # The view is exported as it is, even when a provider would reject it (a revert to a checkpoint
    # taken between a tool call and its result): say so instead of refusing or changing it.
    problems = check_messages(view)
    if problems:
        io.err.print(
            f"agentcontext: warning: {len(problems)} problem(s) a provider would reject, first: "
            f"{plain(str(problems[0]))} (`prepare` repairs them before a model call)"
        )
    if args.format == "openai":
        text = "".join(
            json.dumps(d, ensure_ascii=False) + "\n" for d in oai.from_messages(view, validate=False)
        )
    else:
        system, messages = anthropic_format.from_messages(view, validate=False)
        body: dict[str, Any] = {"messages": messages}
        if system is not None:
            body["system"] = system
        text = json.dumps(body, ensure_ascii=False, indent=1) + "\n"
    if args.output:
        write_file(args.output, lambda f: f.write(text))
        io.err.print(f"{len(view):,} messages written to {plain(args.output)}")
    else:
        sys.stdout.write(text)
    return 0


def run_import(args: argparse.Namespace, io: Consoles) -> int:
    """Write a conversation file as a new session."""
    with Activity(io) as activity:
        request = read_request(
            args.conversation,
            fmt=args.format,
            progress=activity.reading(args.conversation),
            unknown="keep" if args.keep_unknown else "raise",
        )
    messages = list(request.messages)
    notes = list(request.notes)
    if request.instructions is not None:
        # A body's system prompt (Anthropic system, Responses instructions) is part of what the model saw.
        messages.insert(0, Message(role="system", content=request.instructions))
        notes.append("the body's system prompt is the session's first message (a system message)")
    if request.tools:
        notes.append(
            f"the body's {len(request.tools)} tool definition(s) are not part of a session: pass them to "
            "prepare(tools=...)"
        )
    if not messages:
        raise InputError(f"{args.conversation}: holds no messages; nothing to import")
    target = args.session
    loc = parse_location(target)
    if loc.kind == "jsonl" and os.path.lexists(loc.target):
        raise StorePathError(
            f"{target!r} already exists; import writes a new session: pass a new path (to add to a session, "
            "use the library: Session.open(...).extend(...))"
        )
    if loc.kind != "jsonl":
        try:
            Session.open(target, create=False, read_only=True).close()
        except SessionNotFoundError:
            pass
        else:
            raise StorePathError(
                f"{target!r} already holds a session; import writes a new one: pass a new id"
            )
    session = Session.open(target, create=True)
    try:
        session.extend(messages)  # one batch: all of them, or (a bad message) none
    except BaseException:
        session.close()
        if loc.kind == "jsonl":  # the file this command just created holds only a header: take it back
            for leftover in (loc.target, loc.target + ".lock"):
                with contextlib.suppress(OSError):
                    os.unlink(leftover)
        raise
    sid = session.id
    session.close()
    io.out.print(
        f"{plain(target)}: new session {sid} with {len(messages):,} messages from {plain(args.conversation)} "
        f"({request.describe()})"
    )
    for text in notes:
        io.err.print(f"note: {plain(text)}")
    return 0


def run_migrate(args: argparse.Namespace, io: Consoles) -> int:
    """Rewrite an older-format session log in the current schema."""
    with _open(args.session, read_only=False, err=io.err, migrate=True) as session:
        backup = session.migrated_backup
        version = session.schema_version
        n = len(session.view)
    if backup is None:
        if version >= SCHEMA_VERSION:
            io.out.print(f"{plain(args.session)}: already in schema {SCHEMA_VERSION}; nothing to do")
            return 0
        raise NotASessionError(
            f"{args.session}: could not be migrated"
        )  # pragma: no cover - a read-only store
    io.out.print(
        f"{plain(args.session)}: migrated from schema {version} to {SCHEMA_VERSION} ({n:,} messages in view); "
        f"the original is kept at {plain(backup)}"
    )
    return 0
