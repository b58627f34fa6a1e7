"""The database servers the store tests run against.

- The shared PostgreSQL and Redis (``AGENTCONTEXT_TEST_POSTGRES``, default
  ``postgresql://postgres@127.0.0.1:5432/test``; ``AGENTCONTEXT_TEST_REDIS``,
  default ``redis://127.0.0.1:6379/0``). Every test works in its own schema or
  key prefix and removes it afterwards, so parallel runs (and other projects on
  the same servers) never collide.
- Private servers (`PrivateRedis`, `PrivatePostgres`) on free ports in a
  temporary directory, for the tests that kill or restart a server: never the
  shared ones.

Without a server the tests that need it are skipped with a reason naming the
command that starts it; with ``AGENTCONTEXT_DB_TESTS=required`` (``.ci/run``
sets it) they fail instead.
"""

from __future__ import annotations

import contextlib
import functools
import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

PG_URL = os.environ.get("AGENTCONTEXT_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("AGENTCONTEXT_TEST_REDIS", "redis://127.0.0.1:6379/0")
REQUIRED = os.environ.get("AGENTCONTEXT_DB_TESTS") == "required"

_START = {
    "postgres": "pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start",
    "redis": 'redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no',
}


def _missing(what: str, why: str) -> None:
    message = f"{what} is not available ({why}); start it with: {_START[what]}"
    if REQUIRED:
        pytest.fail(f"AGENTCONTEXT_DB_TESTS=required, but {message}")
    pytest.skip(message)


@functools.cache
def _postgres_problem() -> str | None:
    try:
        import psycopg
    except ImportError:
        return "psycopg is not installed: pip install 'agentcontext[postgres]'"
    try:
        psycopg.connect(PG_URL, connect_timeout=3).close()
    except psycopg.Error as exc:
        return f"{PG_URL}: {str(exc).strip().splitlines()[0] if str(exc).strip() else exc!r}"
    return None


@functools.cache
def _redis_problem() -> str | None:
    try:
        import redis
    except ImportError:
        return "redis-py is not installed: pip install 'agentcontext[redis]'"
    try:
        client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=3)
        client.ping()
        client.close()
    except redis.RedisError as exc:
        return f"{REDIS_URL}: {exc}"
    return None


def need(kind: str) -> None:
    """Skip (or fail, when required) unless the shared server of ``kind`` answers."""
    problem = _postgres_problem() if kind == "postgres" else _redis_problem()
    if problem is not None:
        _missing(kind, problem)


def unique(prefix: str = "t") -> str:
    """A name no other test run uses."""
    return f"{prefix}{uuid.uuid4().hex[:12]}"


@contextlib.contextmanager
def postgres_schema(base: str = PG_URL) -> Iterator[str]:
    """A fresh schema with agentcontext's tables; yields the database URL with ``?schema=``; dropped after."""
    import psycopg

    from agentcontext.session.stores import open_database

    schema = unique("ac_test_")
    url = f"{base}{'&' if '?' in base else '?'}schema={schema}"
    db = open_database(url)
    try:
        db.init()
        yield url
    finally:
        db.close()
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@contextlib.contextmanager
def redis_prefix(base: str = REDIS_URL) -> Iterator[str]:
    """A fresh key prefix, initialised; yields the server URL with ``?prefix=``; its keys are deleted after."""
    import redis

    from agentcontext.session.stores import open_database

    prefix = unique("actest:")
    url = f"{base}{'&' if '?' in base else '?'}prefix={prefix}"
    db = open_database(url)
    try:
        db.init()
        yield url
    finally:
        db.close()
        client = redis.Redis.from_url(base)
        try:
            keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
            for i in range(0, len(keys), 500):
                client.unlink(*keys[i : i + 500])
        finally:
            client.close()


@contextlib.contextmanager
def database(kind: str) -> Iterator[str]:
    """`postgres_schema` or `redis_prefix` on the shared server, after checking it answers."""
    need(kind)
    with postgres_schema() if kind == "postgres" else redis_prefix() as url:
        yield url


def with_session(url: str, session_id: str) -> str:
    """``url`` naming one session."""
    return f"{url}{'&' if '?' in url else '?'}session={session_id}"


# ----------------------------------------------------------------------------- private servers


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_port(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout} s")


class PrivateRedis:
    """A redis-server of our own on a free port, with every write fsynced to its append-only file.

    So a kill of the server loses nothing it acknowledged, which is what the
    restart tests check.
    """

    def __init__(self, *options: str) -> None:
        self.options = options  # more redis-server options, e.g. ("--maxmemory", "100mb")
        binary = shutil.which("redis-server")
        if binary is None:
            _missing("redis", "redis-server is not on PATH")
        self.binary = str(binary)
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="agentcontext-redis-"))
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                self.binary,
                "--bind", "127.0.0.1",
                "--port", str(self.port),
                "--dir", str(self.dir),
                "--save", "",
                "--appendonly", "yes",
                "--appendfsync", "always",
                *self.options,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        _wait_port(self.port)

    def kill(self) -> None:
        """SIGKILL: no shutdown, no final save (the append-only file has every acknowledged write)."""
        if self.proc is not None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=30)
            self.proc = None

    def __enter__(self) -> PrivateRedis:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


def _pg_bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return candidates[-1] if candidates else None


class PrivatePostgres:
    """A PostgreSQL cluster of our own (initdb + pg_ctl) on a free port in a temporary directory.

    Run as the ``postgres`` user when the tests run as root (PostgreSQL refuses
    root). ``restart()`` stops it with ``-m immediate`` (a crash, as far as the
    database can tell: recovery replays the write-ahead log at the next start).
    """

    def __init__(self) -> None:
        initdb, pg_ctl = _pg_bin("initdb"), _pg_bin("pg_ctl")
        if initdb is None or pg_ctl is None:
            _missing("postgres", "initdb and pg_ctl are not installed")
        self.initdb, self.pg_ctl = str(initdb), str(pg_ctl)
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="agentcontext-pg-"))
        self._as: list[str] = []
        if os.geteuid() == 0:
            self._as = ["runuser", "-u", "postgres", "--"]
            shutil.chown(self.dir, user="postgres")

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str) -> None:
        subprocess.run([*self._as, *args], check=True, capture_output=True, timeout=120)

    def _ctl(self, action: str) -> None:
        options = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run(
            self.pg_ctl, "-D", str(self.dir / "data"), "-l", str(self.dir / "log"), "-m", "immediate", "-w",
            "-o", options, action,
        )  # fmt: skip

    def start(self) -> None:
        if not (self.dir / "data").exists():
            self._run(self.initdb, "-D", str(self.dir / "data"), "-A", "trust", "-U", "postgres", "--no-sync")
        self._ctl("start")

    def restart(self) -> None:
        self._ctl("restart")

    def stop(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            self._ctl("stop")

    def __enter__(self) -> PrivatePostgres:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
