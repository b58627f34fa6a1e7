"""Loopback HTTP servers that speak OpenAI's Chat Completions and Anthropic's Messages protocols.

Tests script what the server answers (a summary, a 429 with Retry-After, a 500,
a reply that arrives too late, an empty or an over-long completion, a dropped
connection) and read back the requests it received. Misbehaving servers are
scripted too: one that never answers (`Reply.hang`), drips its reply a byte
at a time (`Reply.drip`, headers included with `Reply.drip_headers`), or sends
a body of any size without holding it in memory (`huge`); each request records
how many body bytes the server got out before the client hung up (`Received.sent`). The servers are real
(stdlib ``http.server`` on a free 127.0.0.1 port, in a thread) and check
requests the way the real APIs do (a required ``max_tokens``, the
``anthropic-version`` header, JSON bodies), so the summarizers are tested over
real HTTP, without any SDK or mock.

>>> with LLMServer("openai") as server:                     # doctest: +SKIP
...     server.script(openai_ok("the summary"))
...     OpenAISummarizer(model="m", base_url=server.url).summarize(request)
"""

from __future__ import annotations

import json
import re
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

Protocol = Literal["openai", "anthropic"]


@dataclass(frozen=True)
class Reply:
    """One scripted answer."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    """Seconds to wait before answering (longer than the client's timeout: a timeout)."""
    drop: bool = False
    """Close the connection without answering."""
    hang: bool = False
    """Never answer (until the server shuts down)."""
    drip: float = 0.0
    """Seconds between the bytes of the body (0: send it at once)."""
    drip_headers: bool = False
    """Drip the status line and headers too (with ``drip`` seconds between bytes)."""
    raw: bytes | None = None
    """Send these bytes as the body instead of ``body`` as JSON."""
    content_type: str = "application/json"
    huge: tuple[bytes, int, bytes] | None = None
    """``(prefix, n, suffix)``: a body of ``prefix``, ``n`` filler bytes and ``suffix``, streamed in chunks."""
    length: bool = True
    """Send ``content-length``; False sends none and closes the connection after the body."""


def openai_ok(text: str | None, *, finish_reason: str = "stop", model: str = "test-model") -> Reply:
    """A Chat Completions reply carrying ``text``."""
    return Reply(
        body={
            "id": "chatcmpl-test",
            "object": "chat.completion",
            "created": 0,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": finish_reason,
                }
            ],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        }
    )


def snapshot(goal: str, state: str = "[TODO] rerun the tests") -> str:
    """The smallest reply the default prompt accepts: a ``<state_snapshot>`` with its two required sections."""
    return f"<state_snapshot><overall_goal>{goal}</overall_goal><task_state>{state}</task_state></state_snapshot>"


def anthropic_ok(text: str, *, stop_reason: str = "end_turn", model: str = "test-model") -> Reply:
    """A Messages reply carrying ``text``."""
    content = [{"type": "text", "text": text}] if text else []
    return Reply(
        body={
            "id": "msg_test",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 5},
        }
    )


def huge_openai(n: int) -> Reply:
    """A Chat Completions reply whose content is ``n`` bytes of ``x`` (streamed, never held in memory)."""
    prefix = b'{"id":"chatcmpl-huge","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"'
    return Reply(huge=(prefix, n, b'"},"finish_reason":"stop"}]}'))


def huge_anthropic(n: int) -> Reply:
    """A Messages reply whose text is ``n`` bytes of ``x`` (streamed, never held in memory)."""
    prefix = b'{"id":"msg_huge","type":"message","role":"assistant","content":[{"type":"text","text":"'
    return Reply(huge=(prefix, n, b'"}],"stop_reason":"end_turn"}'))


def error(
    status: int, message: str = "error", *, kind: str = "api_error", retry_after: str | None = None
) -> Reply:
    """An error reply in the shape both APIs use (``{"error": {"type", "message"}}``)."""
    headers = {"retry-after": retry_after} if retry_after is not None else {}
    return Reply(
        status=status, body={"type": "error", "error": {"type": kind, "message": message}}, headers=headers
    )


@dataclass
class Received:
    """A request the server got."""

    path: str
    headers: dict[str, str]
    body: Any
    sent: int = 0
    """Body bytes the server wrote before it finished or the client hung up."""
    finished: bool = False
    """True when the whole reply was written (False: the client hung up first)."""


class LLMServer:
    """A scripted OpenAI- or Anthropic-protocol server on a free loopback port.

    Use as a context manager. `script` sets the replies, in order; the last one
    repeats. `respond` instead computes each reply from the request's body (a
    deterministic stand-in model). `requests` holds every request received.
    """

    def __init__(self, protocol: Protocol) -> None:
        self.protocol = protocol
        self.requests: list[Received] = []
        self._replies: list[Reply] = []
        self._responder: Callable[[dict[str, Any]], Reply] | None = None
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    # ------------------------------------------------------------------ control

    @property
    def url(self) -> str:
        """The base URL to give a summarizer (``/v1`` included for OpenAI, as its SDK expects)."""
        assert self._server is not None
        host, port = self._server.server_address[:2]
        root = f"http://{host}:{port}"
        return root + "/v1" if self.protocol == "openai" else root

    def script(self, *replies: Reply) -> None:
        with self._lock:
            self._replies = list(replies)
            self.requests.clear()

    def respond(self, responder: Callable[[dict[str, Any]], Reply] | None) -> None:
        """Answer every valid request with ``responder(body)`` (None: back to the scripted replies)."""
        with self._lock:
            self._responder = responder
            self.requests.clear()

    def _next(self, body: Any) -> Reply:
        with self._lock:
            responder = self._responder
        if responder is not None:
            return responder(body)
        with self._lock:
            if not self._replies:
                return error(500, "no scripted reply")
            return self._replies.pop(0) if len(self._replies) > 1 else self._replies[0]

    def __enter__(self) -> LLMServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:  # keep test output clean
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = None
                headers = {k.lower(): v for k, v in self.headers.items()}
                received = Received(path=self.path, headers=headers, body=body)
                with server._lock:
                    server.requests.append(received)
                problem = server._validate(self.path, headers, body)
                reply = error(400, problem, kind="invalid_request_error") if problem else server._next(body)
                if reply.delay:
                    server._stop.wait(reply.delay)
                if reply.hang:
                    server._stop.wait()
                    self.close_connection = True
                    return
                if reply.drop:
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
                    return
                try:
                    self._answer(reply, received)
                except OSError:  # the client gave up (a timeout or size-cap test)
                    self.close_connection = True

            def _answer(self, reply: Reply, received: Received) -> None:
                if reply.huge is not None:
                    prefix, n, suffix = reply.huge
                    size = len(prefix) + n + len(suffix)
                    chunks: Iterator[bytes] = _filler(prefix, n, suffix)
                else:
                    payload = (
                        reply.raw
                        if reply.raw is not None
                        else json.dumps(reply.body).encode()
                        if reply.body is not None
                        else b""
                    )
                    size = len(payload)
                    chunks = iter([payload])
                head = [
                    f"HTTP/1.1 {reply.status} {_REASONS.get(reply.status, 'Status')}",
                    f"content-type: {reply.content_type}",
                ]
                if reply.length:
                    head.append(f"content-length: {size}")
                else:
                    head.append("connection: close")
                    self.close_connection = True
                head += [f"{k}: {v}" for k, v in reply.headers.items()]
                head_bytes = ("\r\n".join(head) + "\r\n\r\n").encode()
                self._write(head_bytes, reply.drip if reply.drip_headers else 0.0, None)
                for chunk in chunks:
                    self._write(chunk, reply.drip, received)
                    if server._stop.is_set():
                        return
                received.finished = True
                if not reply.length:
                    self.wfile.flush()
                    self.connection.shutdown(socket.SHUT_WR)

            def _write(self, data: bytes, drip: float, received: Received | None) -> None:
                if not drip:
                    self.wfile.write(data)
                    self.wfile.flush()
                    if received is not None:
                        received.sent += len(data)
                    return
                for i in range(len(data)):
                    if server._stop.wait(drip):
                        raise OSError("the server is shutting down")
                    self.wfile.write(data[i : i + 1])
                    self.wfile.flush()
                    if received is not None:
                        received.sent += 1

        class Server(ThreadingHTTPServer):
            def handle_error(self, request: object, client_address: object) -> None:
                pass  # a client that hung up mid-reply is what the misbehaviour tests provoke

        self._stop.clear()
        self._server = Server(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05})
        self._thread.daemon = True
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None and self._thread is not None
        self._stop.set()  # wakes hanging and dripping handlers
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    # ------------------------------------------------------------------ what the real APIs check

    def _validate(self, path: str, headers: dict[str, str], body: Any) -> str | None:
        if not isinstance(body, dict):
            return "the body must be a JSON object"
        if self.protocol == "openai":
            if path != "/v1/chat/completions":
                return f"unknown path {path}"
            if not isinstance(body.get("model"), str) or not isinstance(body.get("messages"), list):
                return "model and messages are required"
            for m in body["messages"]:
                if m.get("role") not in ("system", "developer", "user", "assistant", "tool"):
                    return f"invalid role {m.get('role')!r}"
            if re.search(r"(?:^|/)(?:o\d|gpt-5)", body["model"]):  # OpenAI's reasoning models
                if body.get("temperature", 1) != 1:
                    return (
                        f"Unsupported value: 'temperature' does not support {body['temperature']} with this "
                        "model. Only the default (1) value is supported."
                    )
                if "max_tokens" in body:
                    return (
                        "Unsupported parameter: 'max_tokens' is not supported with this model. "
                        "Use 'max_completion_tokens' instead."
                    )
            return None
        if path != "/v1/messages":
            return f"unknown path {path}"
        if "anthropic-version" not in headers:
            return "anthropic-version header is required"
        if "x-api-key" not in headers:
            return "x-api-key header is required"
        if not isinstance(body.get("max_tokens"), int):
            return "max_tokens: Field required"
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return "messages: at least one message is required"
        for m in messages:
            if m.get("role") not in ("user", "assistant"):
                return f"messages: unexpected role {m.get('role')!r}"
        return None


_REASONS = {
    200: "OK",
    400: "Bad Request",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
}


def _filler(prefix: bytes, n: int, suffix: bytes, chunk: int = 1 << 16) -> Iterator[bytes]:
    yield prefix
    block = b"x" * chunk
    while n > 0:
        yield block[: min(chunk, n)]
        n -= chunk
    yield suffix


@contextmanager
def closed_port() -> Iterator[str]:
    """A loopback URL on which nothing listens (connection refused)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    yield f"http://127.0.0.1:{port}/v1"
