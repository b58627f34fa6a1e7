"""One HTTP exchange for sync and async summarizers: a generator of requests and sleeps, and two thin drivers.

The retry logic (which statuses to retry, how long to wait, when to give up)
lives once, in `exchange`, a generator that yields `HttpRequest` and `Sleep`
steps and receives `HttpResponse` or `TransportFailure` replies (httpx's
auth-flow pattern). `run_sync` drives it with ``httpx.Client`` and
``time.sleep``; `run_async` with ``httpx.AsyncClient`` and ``anyio.sleep``.
No SDK is involved, and httpx is imported only when a request is sent.
"""

from __future__ import annotations

import email.utils
import json
import random
import time
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from types import ModuleType

from ..exceptions import ConfigError, MissingDependencyError, SummarizerError
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


def require_httpx(extra: str) -> None:
    """Raise `MissingDependencyError` naming ``pip install 'agentcontext[<extra>]'`` when httpx is missing."""
    try:
        import httpx  # noqa: F401  # only checks that it is there
    except ImportError as exc:
        raise MissingDependencyError(
            f"this summarizer talks HTTP through httpx, which is not installed; "
            f"run: pip install 'agentcontext[{extra}]'"
        ) from exc


def _httpx() -> ModuleType:
    import httpx

    return httpx


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """When and how long an LLM summarizer retries.

    429, 408, 409, 425, 5xx (Anthropic's 529 included), timeouts, connection
    errors and empty replies are retried with exponential backoff and full
    jitter; a ``Retry-After`` (or ``retry-after-ms``) header sets the least wait.
    Other errors (400, 401, 403, 404, 413...) fail at once: retrying cannot fix them.

    Args:
        max_attempts: tries in all, the first included. Default 4.
        initial_backoff: the first wait in seconds; it doubles each time. Default 1.0.
        max_backoff: the longest wait between tries. Default 30.0.
        max_retry_after: a ``Retry-After`` longer than this fails at once instead of
            blocking the agent (the summary is not worth minutes). Default 60.0.
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
    """A POST with a JSON body."""

    url: str
    headers: Mapping[str, str]
    body: Mapping[str, JSONValue]
    timeout: float


@dataclass(frozen=True, kw_only=True)
class HttpResponse:
    """What came back: status, headers (lower-case names) and the raw body."""

    status: int
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""

    def json(self) -> JSONValue:
        """The body parsed as JSON (raises `SummarizerError` when it is not JSON)."""
        try:
            value: JSONValue = json.loads(self.body)
        except ValueError as exc:
            raise SummarizerError(f"the reply is not JSON: {_snippet(self.body)}") from exc
        return value


@dataclass(frozen=True, kw_only=True)
class TransportFailure:
    """The request did not get a reply: a timeout, a refused connection, a dropped stream."""

    error: str
    timeout: bool = False


@dataclass(frozen=True, kw_only=True)
class Sleep:
    """Wait this long before the next step."""

    seconds: float


class RetryableReply(SummarizerError):
    """A 2xx reply that is still worth retrying (an empty completion)."""


Exchange = Generator["HttpRequest | Sleep", "HttpResponse | TransportFailure | None", str]

_RETRY_STATUSES = frozenset({408, 409, 425, 429})


def _snippet(body: bytes, limit: int = 300) -> str:
    text = body.decode("utf-8", "replace").strip().replace("\n", " ")
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
        parsed = email.utils.parsedate_to_datetime(value) if value else None
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
                return f"{kind}: {message}" if isinstance(kind, str) else message
        if isinstance(error, str):
            return error
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
    rng: random.Random | None = None,
) -> Exchange:
    """Send ``request`` until ``parse`` accepts a reply, retrying what is worth retrying.

    Raises:
        SummarizerError: a reply that retrying cannot fix, or the last try failed; the
            message names the endpoint, the status and the number of attempts.
    """
    rng = rng or random.Random()
    last = "no attempt made"
    for attempt in range(1, policy.max_attempts + 1):
        reply = yield request
        wait: float | None = None
        if isinstance(reply, TransportFailure):
            last = f"{'timeout' if reply.timeout else 'transport error'}: {reply.error}"
        elif reply is None:
            raise SummarizerError(f"{endpoint}: the driver sent no reply")  # pragma: no cover - driver bug
        elif 200 <= reply.status < 300:
            try:
                return parse(reply)
            except RetryableReply as exc:
                last = str(exc)
        elif reply.status in _RETRY_STATUSES or reply.status >= 500:
            last = f"HTTP {reply.status}: {_error_detail(reply)}"
            if reply.status == 429 and _spend_limit(reply):
                raise SummarizerError(f"{endpoint} refused the request ({last}); retrying cannot help")
            wait = _retry_after(reply.headers)
            if wait is not None and wait > policy.max_retry_after:
                raise SummarizerError(
                    f"{endpoint} asked to retry after {wait:.0f} s ({last}), longer than "
                    f"max_retry_after={policy.max_retry_after:.0f} s; giving up after {attempt} attempt(s)"
                )
        else:
            raise SummarizerError(
                f"{endpoint} rejected the request with HTTP {reply.status}: {_error_detail(reply)} "
                "(not retried: check the model name, the API key and the endpoint URL)"
            )
        if attempt < policy.max_attempts:
            delay = policy.backoff(attempt, rng)
            yield Sleep(seconds=max(delay, wait or 0.0))
    raise SummarizerError(f"{endpoint} failed after {policy.max_attempts} attempt(s); last error: {last}")


def run_sync(flow: Exchange) -> str:
    """Drive ``flow`` with a blocking ``httpx.Client``."""
    httpx = _httpx()
    with httpx.Client() as client:
        try:
            step = next(flow)
            while True:
                if isinstance(step, Sleep):
                    time.sleep(step.seconds)
                    step = flow.send(None)
                    continue
                try:
                    r = client.post(
                        step.url, headers=dict(step.headers), json=step.body, timeout=step.timeout
                    )
                    reply: HttpResponse | TransportFailure = HttpResponse(
                        status=r.status_code,
                        headers={k.lower(): v for k, v in r.headers.items()},
                        body=r.content,
                    )
                except httpx.TimeoutException as exc:
                    reply = TransportFailure(
                        error=f"{type(exc).__name__} after {step.timeout} s", timeout=True
                    )
                except httpx.TransportError as exc:
                    reply = TransportFailure(error=f"{type(exc).__name__}: {exc}")
                step = flow.send(reply)
        except StopIteration as stop:
            text: str = stop.value
            return text


async def run_async(flow: Exchange) -> str:
    """Drive ``flow`` with an ``httpx.AsyncClient`` (asyncio or trio, through anyio)."""
    httpx = _httpx()
    import anyio  # a dependency of httpx

    async with httpx.AsyncClient() as client:
        try:
            step = next(flow)
            while True:
                if isinstance(step, Sleep):
                    await anyio.sleep(step.seconds)
                    step = flow.send(None)
                    continue
                try:
                    r = await client.post(
                        step.url, headers=dict(step.headers), json=step.body, timeout=step.timeout
                    )
                    reply: HttpResponse | TransportFailure = HttpResponse(
                        status=r.status_code,
                        headers={k.lower(): v for k, v in r.headers.items()},
                        body=r.content,
                    )
                except httpx.TimeoutException as exc:
                    reply = TransportFailure(
                        error=f"{type(exc).__name__} after {step.timeout} s", timeout=True
                    )
                except httpx.TransportError as exc:
                    reply = TransportFailure(error=f"{type(exc).__name__}: {exc}")
                step = flow.send(reply)
        except StopIteration as stop:
            text: str = stop.value
            return text
