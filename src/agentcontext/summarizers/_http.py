"""One HTTP exchange for sync and async summarizers: a generator of requests and sleeps, and two thin drivers.

The retry logic (which statuses to retry, how long to wait, when to give up)
lives once, in `exchange`, a generator that yields `HttpRequest` and `Sleep`
steps and receives `HttpResponse` or `TransportFailure` replies (httpx's
auth-flow pattern). `run_sync` drives it with ``httpx.Client`` and
``time.sleep``; `run_async` with ``httpx.AsyncClient`` and ``anyio.sleep``.
No SDK is involved, and httpx is imported only when a request is sent.

Every summary is bounded in time and memory, whatever the server does:

- **One deadline** (a `time.monotonic` value) covers connecting, sending,
  waiting, reading and every retry. The generator starts no attempt and no
  wait that cannot end before it (a ``Retry-After`` past it fails at once);
  the drivers end an attempt at it: the async driver with an anyio cancel
  scope, the sync one with per-operation timeouts set to the time left plus a
  watchdog that shuts the connection's socket down at the deadline, so a
  server dripping one byte a second cannot hold the call past it.
- **A byte cap**: the body is read as a stream and abandoned past
  ``HttpRequest.max_bytes`` (or at once when ``content-length`` announces
  more), so a runaway reply costs at most the cap in memory.
"""

from __future__ import annotations

import email.utils
import json
import math
import random
import socket
import threading
import time
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from ..exceptions import ConfigError, MissingDependencyError, SummarizerError, SummarizerTimeout
from ..messages import JSONValue

__all__ = [
    "Exchange",
    "HttpRequest",
    "HttpResponse",
    "RetryPolicy",
    "Sleep",
    "TransportFailure",
    "exchange",
    "require_httpx",
    "run_async",
    "run_sync",
]

MIN_ATTEMPT = 0.01
"""Seconds an attempt needs at least: with less time left before the deadline, none is started."""
ERROR_BODY_LIMIT = 64 * 1024
"""Bytes read of an error reply's body: enough for its message, however large the page."""


def require_httpx(extra: str) -> None:
    """Raise `MissingDependencyError` naming ``pip install 'agentcontext[<extra>]'`` when httpx is missing.

    Also does now what the first request would otherwise do within the first summary's deadline
    (about half a second): build the shared TLS context and import httpx's transport (httpcore,
    which httpx imports lazily) and anyio.
    """
    try:
        import httpx
    except ImportError as exc:
        raise MissingDependencyError(
            f"this summarizer talks HTTP through httpx, which is not installed; "
            f"run: pip install 'agentcontext[{extra}]'"
        ) from exc
    _ssl_context(httpx)
    import anyio  # noqa: F401  # dependencies of httpx, imported here rather than within a deadline
    import httpcore  # noqa: F401


def _httpx() -> ModuleType:
    import httpx

    return httpx


_SSL: list[Any] = []
_SSL_LOCK = threading.Lock()


def _ssl_context(httpx: ModuleType) -> Any:
    """One TLS context for every client: building one costs about 0.1 s, which a summary's deadline pays."""
    with _SSL_LOCK:
        if not _SSL:
            _SSL.append(httpx.create_ssl_context())
        return _SSL[0]


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """When and how long an LLM summarizer retries.

    429, 408, 409, 425, 5xx (Anthropic's 529 included), timeouts, connection
    errors and empty replies are retried with exponential backoff and full
    jitter; a ``Retry-After`` (or ``retry-after-ms``) header sets the least wait.
    Other errors (400, 401, 403, 404, 413...) fail at once: retrying cannot fix them.
    No retry and no wait outlives the summary's deadline (the summarizer's
    ``timeout``, or the engine's deadline when earlier): one that would fails at once.

    Args:
        max_attempts: tries in all, the first included. Default 4.
        initial_backoff: the first wait in seconds; it doubles each time. Default 1.0.
        max_backoff: the longest wait between tries. Default 30.0.
        max_retry_after: a ``Retry-After`` longer than this fails at once instead of
            blocking the agent (the summary is not worth minutes). Default 60.0;
            the time left before the deadline bounds it too.
    """

    max_attempts: int = 4
    initial_backoff: float = 1.0
    max_backoff: float = 30.0
    max_retry_after: float = 60.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ConfigError(f"RetryPolicy.max_attempts must be at least 1, got {self.max_attempts}")
        if self.initial_backoff < 0 or self.max_backoff < 0 or self.max_retry_after < 0:
            raise ConfigError("RetryPolicy waits must not be negative")

    def backoff(self, attempt: int, rng: random.Random) -> float:
        """The wait after failed try number ``attempt`` (1-based): full jitter under an exponential cap."""
        cap = min(self.max_backoff, self.initial_backoff * 2.0 ** (attempt - 1))
        jitter: float = rng.random()
        return cap * (0.5 + 0.5 * jitter)


@dataclass(frozen=True, kw_only=True)
class HttpRequest:
    """A POST with a JSON body, and the bounds the driver enforces while it runs."""

    url: str
    headers: Mapping[str, str]
    body: Mapping[str, JSONValue]
    deadline: float = math.inf
    """`time.monotonic` value by which the reply must be in; the driver abandons the attempt then."""
    max_bytes: int | None = None
    """Most bytes of a 2xx body the driver reads; past them it abandons the body (None: no cap)."""


@dataclass(frozen=True, kw_only=True)
class HttpResponse:
    """What came back: status, headers (lower-case names) and the raw body."""

    status: int
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""
    complete: bool = True
    """False when the driver abandoned the body at its byte cap (``body`` is then the part read)."""

    def json(self, *, where: str = "", hint: str = "") -> JSONValue:
        """The body parsed as JSON; when it is not JSON, `SummarizerError` says what it is, then
        ``where`` it came from and the caller's ``hint`` in that order, then a snippet of it."""
        try:
            value: JSONValue = json.loads(self.body)
        except ValueError as exc:
            # What it is comes first: the snippet is cut, and what follows it was lost with it.
            streamed = "text/event-stream" in self.headers.get(
                "content-type", ""
            ) or self.body.lstrip().startswith(b"data:")
            if streamed:
                what = "the server streamed its reply (server-sent events) though the request asked for none"
            elif isinstance(exc, json.JSONDecodeError) and (
                exc.msg.startswith("Unterminated") or exc.pos >= len(self.body.rstrip())
            ):
                what = (
                    f"the reply's JSON ends unfinished after {len(self.body):,} bytes (cut short on the way)"
                )
            else:
                what = "the reply is not JSON"
            head = f"{where}: {what}" if where else what
            raise SummarizerError(f"{head}{f' ({hint})' if hint else ''}: {_snippet(self.body)}") from exc
        return value


@dataclass(frozen=True, kw_only=True)
class TransportFailure:
    """The request did not get a (whole) reply: a timeout, a refused connection, a dropped stream."""

    error: str
    timeout: bool = False
    """True when time ran out (an operation's timeout, or the request's deadline)."""


@dataclass(frozen=True, kw_only=True)
class Sleep:
    """Wait this long before the next step."""

    seconds: float


class RetryableReply(SummarizerError):
    """A 2xx reply that is still worth retrying (an empty completion, a gateway's error page)."""


Exchange = Generator["HttpRequest | Sleep", "HttpResponse | TransportFailure | None", str]

_RETRY_STATUSES = frozenset({408, 409, 425, 429})


def _snippet(body: bytes, limit: int = 300) -> str:
    text = " ".join(body[: limit * 4].decode("utf-8", "replace").split())
    return text if len(text) <= limit else text[:limit] + "…"


def _retry_after(headers: Mapping[str, str]) -> float | None:
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            return max(float(ms) / 1000.0, 0.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        try:
            parsed = email.utils.parsedate_to_datetime(value) if value else None
        except (TypeError, ValueError):
            return None
        if parsed is None:
            return None
        return max(parsed.timestamp() - time.time(), 0.0)


def _error_detail(response: HttpResponse) -> str:
    try:
        payload = json.loads(response.body)
    except ValueError:
        return _snippet(response.body)
    if isinstance(payload, dict):
        error = payload.get("error")
        if isinstance(error, dict):
            message = error.get("message")
            kind = error.get("type") or error.get("code")
            if isinstance(message, str):
                detail = f"{kind}: {message}" if isinstance(kind, str) else message
                return _snippet(detail.encode())
        if isinstance(error, str):
            return _snippet(error.encode())
    return _snippet(response.body)


def _spend_limit(response: HttpResponse) -> bool:
    # Anthropic reports a reached monthly spend cap as a 429 that no retry can fix.
    return b"enforced_spend_limit_reached" in response.body or b"insufficient_quota" in response.body


def exchange(
    request: HttpRequest,
    *,
    endpoint: str,
    parse: Callable[[HttpResponse], str],
    policy: RetryPolicy,
    deadline_note: str = "the deadline",
    rng: random.Random | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Exchange:
    """Send ``request`` until ``parse`` accepts a reply, retrying what is worth retrying, by its deadline.

    Args:
        request: the request; its ``deadline`` bounds the whole exchange and its
            ``max_bytes`` every 2xx body.
        endpoint: the URL, for error messages.
        parse: the summary text from a 2xx reply; raises `RetryableReply` to retry.
        policy: how often and how long to retry.
        deadline_note: what the deadline is, for error messages (e.g. "the 30 s timeout").
        rng: the jitter source.
        clock: the clock the deadline is read on (`time.monotonic`).

    Raises:
        SummarizerTimeout: the deadline passed (before an attempt could start, or while one ran).
        SummarizerError: a reply that retrying cannot fix, a reply over the byte cap, a
            ``Retry-After`` past the deadline, or the last try failed; the one-line message
            names the endpoint, the status and the number of attempts.
    """
    rng = rng or random.Random()
    deadline = request.deadline
    last = "no attempt made"
    for attempt in range(1, policy.max_attempts + 1):
        if deadline - clock() < MIN_ATTEMPT:
            done = (
                f"after {attempt - 1} attempt(s); last error: {last}" if attempt > 1 else "before the request"
            )
            raise SummarizerTimeout(f"{endpoint}: {deadline_note} passed {done}")
        reply = yield request
        wait: float | None = None
        if isinstance(reply, TransportFailure):
            last = f"{'timeout' if reply.timeout else 'transport error'}: {reply.error}"
            if reply.timeout and deadline - clock() < MIN_ATTEMPT:
                raise SummarizerTimeout(
                    f"{endpoint}: no complete reply within {deadline_note} ({reply.error}; attempt {attempt})"
                )
        elif reply is None:
            raise SummarizerError(f"{endpoint}: the driver sent no reply")  # pragma: no cover - driver bug
        elif 200 <= reply.status < 300:
            if not reply.complete:
                raise SummarizerError(
                    f"{endpoint}: the reply is larger than {request.max_bytes or 0:,} bytes, the cap for "
                    "this summary's output tokens; it was abandoned unread (not retried)"
                )
            try:
                return parse(reply)
            except RetryableReply as exc:
                last = str(exc)
        elif reply.status in _RETRY_STATUSES or reply.status >= 500:
            last = f"HTTP {reply.status}: {_error_detail(reply)}"
            if reply.status == 429 and _spend_limit(reply):
                raise SummarizerError(f"{endpoint} refused the request ({last}); retrying cannot help")
            wait = _retry_after(reply.headers)
            if wait is not None:
                _check_retry_after(wait, policy, deadline - clock(), endpoint, last, attempt, deadline_note)
        else:
            raise SummarizerError(
                f"{endpoint} rejected the request with HTTP {reply.status}: {_error_detail(reply)} "
                "(not retried: check the model name, the API key and the endpoint URL)"
            )
        if attempt < policy.max_attempts:
            delay = max(policy.backoff(attempt, rng), wait or 0.0)
            if deadline - clock() - delay < MIN_ATTEMPT:
                raise SummarizerError(
                    f"{endpoint} failed after {attempt} attempt(s), with no time for another within "
                    f"{deadline_note}; last error: {last}"
                )
            yield Sleep(seconds=delay)
    raise SummarizerError(f"{endpoint} failed after {policy.max_attempts} attempt(s); last error: {last}")


def _check_retry_after(
    wait: float, policy: RetryPolicy, left: float, endpoint: str, last: str, attempt: int, note: str
) -> None:
    """Fail at once when the server asks for a wait the summary cannot afford."""
    if wait > policy.max_retry_after:
        raise SummarizerError(
            f"{endpoint} asked to retry after {wait:.0f} s ({last}), longer than "
            f"max_retry_after={policy.max_retry_after:.0f} s; giving up after {attempt} attempt(s)"
        )
    if left - wait < MIN_ATTEMPT:
        raise SummarizerError(
            f"{endpoint} asked to retry after {wait:.3g} s ({last}), past {note} "
            f"({max(left, 0.0):.3g} s left); giving up after {attempt} attempt(s)"
        )


# ----------------------------------------------------------------------------- drivers


class _Body:
    """A reply's body read as a stream, within the request's byte cap."""

    def __init__(self, request: HttpRequest) -> None:
        self.request = request
        self.status = 0
        self.headers: dict[str, str] = {}
        self.chunks: list[bytes] = []
        self.size = 0
        self.limit: int | None = None
        self.complete = True

    def start(self, status: int, headers: Any) -> bool:
        """Note the status and headers; False when a 2xx ``content-length`` alone is over the cap.

        An error reply is read up to `ERROR_BODY_LIMIT`, whatever its length: its start holds the message.
        """
        self.status = status
        self.headers = {k.lower(): v for k, v in headers.items()}
        if not 200 <= status < 300:
            self.limit = ERROR_BODY_LIMIT
            return True
        self.limit = self.request.max_bytes
        declared = self.headers.get("content-length", "")
        if self.limit is not None and declared.isdigit() and int(declared) > self.limit:
            self.complete = False
            return False
        return True

    def add(self, chunk: bytes) -> bool:
        """Keep ``chunk``; False (stop reading) once the cap is reached."""
        if self.limit is not None and self.size + len(chunk) > self.limit:
            self.chunks.append(chunk[: self.limit - self.size])
            self.size = self.limit
            self.complete = False
            return False
        self.chunks.append(chunk)
        self.size += len(chunk)
        return True

    def response(self) -> HttpResponse:
        return HttpResponse(
            status=self.status, headers=self.headers, body=b"".join(self.chunks), complete=self.complete
        )

    def late(self) -> TransportFailure:
        """The failure for an attempt the deadline ended."""
        if not self.status:
            return TransportFailure(error="the deadline passed before a reply came", timeout=True)
        return TransportFailure(
            error=f"the deadline passed while the reply was arriving ({self.size:,} bytes read)", timeout=True
        )


def _timeout(httpx: ModuleType, left: float) -> Any:
    # Each operation (connect, write, every read) may take at most what is left of the deadline.
    return httpx.Timeout(left, connect=left, read=left, write=left, pool=left)


class _Watchdog:
    """Shuts down the sockets of one sync attempt at its deadline, unblocking any read or write on them.

    httpx's timeouts bound each socket operation, not their sum: a server that
    sends a byte before every read timeout would keep a blocking call alive
    indefinitely. The sockets come from httpcore's ``trace`` extension (the
    attempt's connection is new: the sync client keeps no idle connections).
    """

    _EVENTS = frozenset(
        {
            "connection.connect_tcp.complete",
            "connection.connect_unix_socket.complete",
            "connection.start_tls.complete",
        }
    )

    def __init__(self, seconds: float) -> None:
        self.fired = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(max(seconds, 0.0), self._fire)
        self._timer.daemon = True
        self._timer.start()

    def trace(self, event: str, info: Mapping[str, Any]) -> None:
        if event not in self._EVENTS:
            return
        stream = info.get("return_value")
        sock = stream.get_extra_info("socket") if stream is not None else None
        if not isinstance(sock, socket.socket):
            return
        with self._lock:
            self._sockets.append(sock)
            fired = self.fired
        if fired:
            _shutdown(sock)

    def _fire(self) -> None:
        with self._lock:
            self.fired = True
            sockets = list(self._sockets)
        for sock in sockets:
            _shutdown(sock)

    def cancel(self) -> None:
        self._timer.cancel()


def _shutdown(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:  # already closed
        pass


def _failure(httpx: ModuleType, exc: Exception, body: _Body, late: bool) -> TransportFailure:
    if late:
        return body.late()
    error = " ".join(f"{type(exc).__name__}: {exc}".split())  # one line, for the report
    return TransportFailure(error=error, timeout=isinstance(exc, httpx.TimeoutException))


def _post_sync(httpx: ModuleType, client: Any, request: HttpRequest) -> HttpResponse | TransportFailure:
    body = _Body(request)
    left = request.deadline - time.monotonic()
    if left <= 0:
        return body.late()
    watchdog = _Watchdog(left) if math.isfinite(left) else None
    try:
        with client.stream(
            "POST",
            request.url,
            headers=dict(request.headers),
            json=dict(request.body),
            timeout=_timeout(httpx, left) if watchdog is not None else httpx.USE_CLIENT_DEFAULT,
            extensions={"trace": watchdog.trace} if watchdog is not None else {},
        ) as r:
            if body.start(r.status_code, r.headers):
                for chunk in r.iter_bytes():
                    if not body.add(chunk):
                        break  # leaving the block closes the connection: the rest is never read
                    if time.monotonic() >= request.deadline:
                        return body.late()
            return body.response()
    except (httpx.TransportError, httpx.StreamError) as exc:
        late = (watchdog is not None and watchdog.fired) or time.monotonic() >= request.deadline
        return _failure(httpx, exc, body, late)
    finally:
        if watchdog is not None:
            watchdog.cancel()


def run_sync(flow: Exchange) -> str:
    """Drive ``flow`` with a blocking ``httpx.Client``."""
    httpx = _httpx()
    # No idle connections: each attempt connects anew, so its watchdog sees the socket it must shut.
    with httpx.Client(verify=_ssl_context(httpx), limits=httpx.Limits(max_keepalive_connections=0)) as client:
        try:
            step = next(flow)
            while True:
                if isinstance(step, Sleep):
                    time.sleep(step.seconds)
                    step = flow.send(None)
                else:
                    step = flow.send(_post_sync(httpx, client, step))
        except StopIteration as stop:
            text: str = stop.value
            return text


async def _post_async(
    httpx: ModuleType, client: Any, request: HttpRequest
) -> HttpResponse | TransportFailure:
    import anyio  # a dependency of httpx

    body = _Body(request)
    left = request.deadline - time.monotonic()
    if left <= 0:
        return body.late()
    with anyio.move_on_after(left if math.isfinite(left) else None):
        try:
            async with client.stream(
                "POST",
                request.url,
                headers=dict(request.headers),
                json=dict(request.body),
                timeout=_timeout(httpx, left) if math.isfinite(left) else httpx.USE_CLIENT_DEFAULT,
            ) as r:
                if body.start(r.status_code, r.headers):
                    async for chunk in r.aiter_bytes():
                        if not body.add(chunk):
                            break
                return body.response()
        except (httpx.TransportError, httpx.StreamError) as exc:
            return _failure(httpx, exc, body, time.monotonic() >= request.deadline)
    return body.late()  # the cancel scope ended the attempt at the deadline


async def run_async(flow: Exchange) -> str:
    """Drive ``flow`` with an ``httpx.AsyncClient`` (asyncio or trio, through anyio)."""
    httpx = _httpx()
    import anyio  # a dependency of httpx

    async with httpx.AsyncClient(verify=_ssl_context(httpx)) as client:
        try:
            step = next(flow)
            while True:
                if isinstance(step, Sleep):
                    await anyio.sleep(step.seconds)
                    step = flow.send(None)
                else:
                    step = flow.send(await _post_async(httpx, client, step))
        except StopIteration as stop:
            text: str = stop.value
            return text
