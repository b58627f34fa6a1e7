"""``agentcontext db``: set up a session database, list, delete and prune its sessions."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from typing import Any

from rich.table import Table

from ..exceptions import ConfigError, SessionNotFoundError
from ..session.stores import SessionDatabase, SessionInfo, open_database
from ..session.stores._url import parse_location
from . import Consoles

HELP = """Manage a database of sessions: SQLite (sqlite:///runs.db), PostgreSQL
(postgresql://user@host:5432/db, optionally ?schema=NAME) or Redis (redis://host:6379/0,
optionally ?prefix=NAME).

PostgreSQL and Redis are never set up silently: run `db init` once per database (again after
upgrading agentcontext, to migrate); opening a session before that fails with a message naming it.

Examples:
  agentcontext db init postgresql://app@db.internal/agents
  agentcontext db list redis://127.0.0.1:6379/0
  agentcontext db delete sqlite:///runs.db --session task-42
  agentcontext db prune postgresql://app@db.internal/agents --older-than 30"""


def register(sub: Any, formatter: Callable[[str], argparse.HelpFormatter]) -> None:
    """Add the ``db`` sub-command group."""
    p = sub.add_parser("db", help="set up, list, delete and prune a session database", description=HELP,
                       formatter_class=formatter)  # fmt: skip
    actions = p.add_subparsers(dest="db_command", metavar="ACTION", parser_class=type(p))
    p.set_defaults(handler=lambda _args, _io: _usage(p))

    q = actions.add_parser(
        "init",
        help="create or migrate the tables (PostgreSQL) or key layout (Redis)",
        formatter_class=formatter,
        description="Create what the session stores need, or migrate it to this version. Safe to run "
        "again: a current database is left as it is.\n\nExample:\n  agentcontext db init "
        "postgresql://app@db.internal/agents",
    )
    q.add_argument("url", help="the database URL")
    q.set_defaults(handler=run_init)

    q = actions.add_parser(
        "list",
        help="list the sessions, oldest update first",
        formatter_class=formatter,
        description="List the sessions of a database: id, records, created, last update.\n\nExample:\n"
        "  agentcontext db list redis://127.0.0.1:6379/0 --json",
    )
    q.add_argument("url", help="the database URL")
    q.add_argument("--json", action="store_true", help="print JSON for scripts")
    q.set_defaults(handler=run_list)

    q = actions.add_parser(
        "delete",
        help="delete one session with everything it holds",
        formatter_class=formatter,
        description="Delete a session: its records, backups, lease and artifacts.\n\nExample:\n"
        "  agentcontext db delete sqlite:///runs.db --session task-42",
    )
    q.add_argument("url", help="the database URL (or a session's URL with ?session=ID)")
    q.add_argument("--session", help="the session id (default: the URL's session=)")
    q.set_defaults(handler=run_delete)

    q = actions.add_parser(
        "prune",
        help="delete the sessions not appended to for a number of days (retention)",
        formatter_class=formatter,
        description="Delete every session whose last record is older than --older-than days.\n\n"
        "Example:\n  agentcontext db prune postgresql://app@db.internal/agents --older-than 30 --dry-run",
    )
    q.add_argument("url", help="the database URL")
    q.add_argument(
        "--older-than", type=float, required=True, metavar="DAYS", help="age in days (e.g. 30, 0.5)"
    )
    q.add_argument("--dry-run", action="store_true", help="list what would be deleted, delete nothing")
    q.add_argument("--json", action="store_true", help="print JSON for scripts")
    q.set_defaults(handler=run_prune)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


@contextmanager
def _database(url: str) -> Iterator[SessionDatabase]:
    db = open_database(url)
    try:
        yield db
    finally:
        db.close()


def _when(value: datetime | None) -> str:
    return "-" if value is None else value.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _info(i: SessionInfo) -> dict[str, object]:
    return {
        "session": i.session_id,
        "records": i.records,
        "created": None if i.created is None else i.created.isoformat(),
        "updated": None if i.updated is None else i.updated.isoformat(),
    }


def run_init(args: argparse.Namespace, io: Consoles) -> int:
    """Create or migrate the database's tables / key layout."""
    with _database(args.url) as db:
        done = db.init()
        for line in done:
            if line.startswith("warning: "):
                io.err.print(f"agentcontext: {line}", markup=False)
            else:
                io.out.print(line, markup=False)
        if not [line for line in done if not line.startswith("warning: ")]:
            io.out.print(f"{db.location} is up to date", markup=False)
    return 0


def run_list(args: argparse.Namespace, io: Consoles) -> int:
    """List the sessions."""
    with _database(args.url) as db:
        infos = db.sessions()
        if args.json:
            io.out.print(json.dumps([_info(i) for i in infos]), markup=False)
            return 0
        table = Table(title=f"{len(infos)} session(s) in {db.location}")
        table.add_column("session")
        table.add_column("records", justify="right")
        table.add_column("created")
        table.add_column("updated")
        for i in infos:
            table.add_row(i.session_id, f"{i.records:,}", _when(i.created), _when(i.updated))
        io.out.print(table)
    return 0


def run_delete(args: argparse.Namespace, io: Consoles) -> int:
    """Delete one session."""
    session = args.session or parse_location(args.url).session
    if not session:
        raise ConfigError("name the session to delete: --session ID (or ?session=ID in the URL)")
    with _database(args.url) as db:
        if not db.delete(session):
            raise SessionNotFoundError(
                f"no session {session!r} in {db.location}; `agentcontext db list` shows them"
            )
        io.out.print(f"deleted session {session!r} from {db.location}", markup=False)
    return 0


def run_prune(args: argparse.Namespace, io: Consoles) -> int:
    """Delete the sessions older than ``--older-than`` days."""
    if not args.older_than >= 0:
        raise ConfigError(f"--older-than must be zero or more days, got {args.older_than}")
    age = timedelta(days=args.older_than)
    with _database(args.url) as db:
        if args.dry_run:
            cutoff = datetime.now(timezone.utc) - age
            gone = [i.session_id for i in db.sessions() if i.updated is not None and i.updated < cutoff]
        else:
            gone = db.prune(age)
        if args.json:
            io.out.print(json.dumps({"deleted": [] if args.dry_run else gone, "would_delete": gone if args.dry_run else []}),
                         markup=False)  # fmt: skip
            return 0
        verb = "would delete" if args.dry_run else "deleted"
        io.out.print(f"{verb} {len(gone)} session(s) not updated for {args.older_than:g} day(s) in {db.location}",
                     markup=False)  # fmt: skip
        for session in gone:
            io.out.print(f"  {session}", markup=False)
    return 0
