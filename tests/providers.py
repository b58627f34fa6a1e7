"""A loopback model provider for integration tests: it validates requests the way the real APIs do.

`ProviderServer` answers OpenAI Chat Completions (``POST /v1/chat/completions``,
streaming or not), Anthropic Messages (``POST /v1/messages``) and OpenAI
Responses (``POST /v1/responses``, streaming or not) on a free 127.0.0.1 port, so a framework's own client (``ChatOpenAI``, Pydantic AI's
OpenAI model, the Agents SDK, a LiteLLM proxy...) talks to it as it would to
the provider. Before answering, it rejects with the provider's 400 what the
provider rejects:

- a tool result that answers no tool call of the assistant message before it
  (OpenAI: "messages with role 'tool' must be a response to a preceding message
  with 'tool_calls'"; Anthropic: "unexpected `tool_use_id` found in `tool_result`
  blocks"), and a tool call left unanswered before the next turn;
- a prompt over the context window, counted independently with tiktoken's
  o200k_base and the provider's message framing (``context_length_exceeded``);
- malformed bodies (no model, no messages, an unknown role, empty content);
- for the Responses API (`check_responses`): a ``function_call_output`` (or
  custom, computer, shell... output) whose call is not in the input ("No tool
  call found for function call output with call_id ..."), a call without its
  output ("No tool output found for function call ..."), a ``reasoning`` item
  not followed by an item of its response, and an item the server produced
  after a reasoning item sent back without that reasoning item ("Item 'fc_...'
  of type 'function_call' was provided without its required 'reasoning'
  item"). With ``reasoning=True`` its replies carry such reasoning items, with
  ``encrypted_content``, as reasoning models' do.

It answers through a *policy*: a function from the request (`Request`) to a
reply (`text`, `tool_calls`), so a test scripts an agent ("call ``run`` 200
times with a large output, then answer"). Every request is recorded with its
counted tokens and the verdict, for assertions.

>>> with ProviderServer(window=8_000, policy=tool_loop(steps=3)) as server:   # doctest: +SKIP
...     ChatOpenAI(base_url=server.openai_url, api_key="x", model="gpt-4o")...
...     assert server.rejected == []
"""

from __future__ import annotations

import base64
import io
import itertools
import json
import math
import re
import struct
import threading
import wave
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from agentcontext.tokens import load_encoding
from agentcontext.tokens._tools import render_tools

# The real o200k_base tiktoken encoding, from the rank file agentcontext ships (no download): the server
# counts with it directly and its own framing, independently of agentcontext's counters.
_ENCODING = load_encoding("o200k_base")


def count_text(text: str) -> int:
    """Tokens of ``text`` in o200k_base (special tokens counted as text)."""
    return len(_ENCODING.encode(text, disallowed_special=()))


# ----------------------------------------------------------------------------- what a policy sees and says


@dataclass
class Request:
    """One request the server received, as a policy and a test see it."""

    api: str
    """``"openai"``, ``"anthropic"`` or ``"responses"``."""
    body: dict[str, Any]
    tokens: int
    """Prompt tokens, counted independently (messages, system, tools)."""
    error: str | None = None
    """Why it was rejected (None: it was answered)."""

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The request's messages (OpenAI or Anthropic shape)."""
        msgs = self.body.get("messages")
        return msgs if isinstance(msgs, list) else []

    @property
    def items(self) -> list[dict[str, Any]]:
        """The request's Responses input items (a string input reads as one user message)."""
        value = self.body.get("input")
        if isinstance(value, str):
            return [{"role": "user", "content": value}]
        return [i for i in value if isinstance(i, dict)] if isinstance(value, list) else []

    def texts(self) -> list[str]:
        """Every text of the request (system, messages, tool results), for "was it kept" assertions."""
        if self.api == "responses":
            out = [self.body["instructions"]] if isinstance(self.body.get("instructions"), str) else []
            for item in self.items:
                out += list(_texts(item.get("content")))
                if isinstance(item.get("output"), str | list):
                    out += list(_texts(item["output"]))
            return out
        out: list[str] = []
        system = self.body.get("system")
        if isinstance(system, str):
            out.append(system)
        elif isinstance(system, list):
            out += [b.get("text", "") for b in system if isinstance(b, dict)]
        for m in self.messages:
            out += list(_texts(m.get("content")))
        return out

    def latest_user_text(self) -> str:
        """The text of the last user message that is not only tool results."""
        if self.api == "responses":
            for item in reversed(self.items):
                if item.get("role") == "user":
                    return "\n".join(_texts(item.get("content")))
            return ""
        for m in reversed(self.messages):
            if m.get("role") != "user":
                continue
            content = m.get("content")
            if (
                isinstance(content, list)
                and content
                and all(isinstance(b, dict) and b.get("type") == "tool_result" for b in content)
            ):
                continue
            return "\n".join(_texts(content))
        return ""


@dataclass
class Reply:
    """What the model answers: text and/or tool calls (``(name, arguments dict)``)."""

    text: str | None = None
    tool_calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    reasoning: str | None = None
    """The model's reasoning, returned as reasoning models return it: ``reasoning_content`` beside
    the content in Chat Completions (DeepSeek, Kimi, Qwen, vLLM), a signed ``thinking`` block first
    in Anthropic's content."""


Policy = Callable[[Request], Reply]


def tool_loop(
    *, steps: int, tool: str = "run", final: str = "done", args: Callable[[int], dict[str, Any]] | None = None
) -> Policy:
    """An agent that calls ``tool`` once per request ``steps`` times, then answers ``final``.

    The step is counted by the server's own calls to the policy (a compacted
    history no longer shows every earlier call), so restart with a new policy
    per conversation.
    """
    counter = itertools.count()

    def policy(request: Request) -> Reply:
        i = next(counter)
        if i < steps:
            return Reply(tool_calls=[(tool, args(i) if args else {"step": i})])
        return Reply(text=final)

    return policy


# ----------------------------------------------------------------------------- the server


class ProviderServer:
    """OpenAI Chat Completions and Anthropic Messages on a free loopback port (see the module docstring).

    Args:
        window: the model's context window; a prompt over ``window - max_tokens``
            of the request (or over the window when it names none) is rejected.
        policy: answers accepted requests (default: "ok").
        reasoning: Responses replies start with a ``reasoning`` item (with
            ``encrypted_content``) that the reply's other items depend on.
        bill: the prompt tokens the provider bills for a request, from its API (``"openai"``,
            ``"responses"`` or ``"anthropic"``) and body (default: the server's own o200k
            count), as a model with another tokenizer bills them; the window check and the
            reply's ``usage`` both use it.
    """

    def __init__(
        self,
        *,
        window: int = 128_000,
        policy: Policy | None = None,
        reasoning: bool = False,
        bill: Callable[[str, dict[str, Any]], int] | None = None,
    ) -> None:
        self.window = window
        self.reasoning = reasoning
        self.bill = bill
        self.policy: Policy = policy or (lambda _r: Reply(text="ok"))
        self._tied: dict[str, str] = {}  # item id -> the reasoning item it was produced after
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def root(self) -> str:
        assert self._server is not None, "use the server as a context manager"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def openai_url(self) -> str:
        """The base URL for OpenAI clients (``/v1`` included, as the SDK expects)."""
        return self.root + "/v1"

    @property
    def anthropic_url(self) -> str:
        """The base URL for Anthropic clients (they add ``/v1/messages``)."""
        return self.root

    @property
    def rejected(self) -> list[Request]:
        """Requests answered with an error."""
        return [r for r in self.requests if r.error is not None]

    @property
    def accepted(self) -> list[Request]:
        """Requests answered normally."""
        return [r for r in self.requests if r.error is None]

    def __enter__(self) -> ProviderServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length", "0")))
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = None
                path = self.path.split("?", 1)[0]
                if path.endswith("/chat/completions"):
                    status, payload, stream = server._openai(body)
                elif path.endswith("/v1/messages"):
                    status, payload, stream = server._anthropic(body)
                elif path.endswith("/v1/responses"):
                    status, payload, stream = server._responses(body)
                else:
                    status, payload, stream = 404, {"error": {"message": f"unknown path {path}"}}, None
                try:
                    if stream is not None:
                        self._stream(stream)
                    else:
                        self._json(status, payload)
                except OSError:
                    self.close_connection = True

            def _json(self, status: int, payload: Any) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, events: Iterator[str]) -> None:
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                for event in events:
                    data = event.encode()
                    self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.write(b"0\r\n\r\n")

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05})
        self._thread.daemon = True
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None and self._thread is not None
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    # ------------------------------------------------------------------ OpenAI Chat Completions

    def _openai(self, body: Any) -> tuple[int, Any, Iterator[str] | None]:
        problem, tokens = _check_openai(body)
        if problem is None and self.bill is not None:
            tokens = self.bill("openai", body)
        limit = (
            self.window - (_int(body, "max_completion_tokens") or _int(body, "max_tokens") or 0)
            if isinstance(body, dict)
            else self.window
        )
        if problem is None and tokens > limit:
            problem = (
                f"This model's maximum context length is {self.window} tokens. However, your messages resulted "
                f"in {tokens} tokens. Please reduce the length of the messages."
            )
            code = "context_length_exceeded"
        else:
            code = None
        request = Request(
            api="openai", body=body if isinstance(body, dict) else {}, tokens=tokens, error=problem
        )
        with self._lock:
            self.requests.append(request)
        if problem is not None:
            return (
                400,
                {
                    "error": {
                        "message": problem,
                        "type": "invalid_request_error",
                        "param": "messages",
                        "code": code,
                    }
                },
                None,
            )
        reply = self.policy(request)
        calls = [
            {
                "id": f"call_{next(self._ids)}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)},
            }
            for name, args in reply.tool_calls
        ]
        message: dict[str, Any] = {"role": "assistant", "content": reply.text}
        if reply.reasoning is not None:
            message["reasoning_content"] = reply.reasoning
        if calls:
            message["tool_calls"] = calls
        usage = {"prompt_tokens": tokens, "completion_tokens": 5, "total_tokens": tokens + 5}
        finish = "tool_calls" if calls else "stop"
        if body.get("stream"):
            return 200, None, _openai_stream(body.get("model", ""), message, finish, usage)
        return (
            200,
            {
                "id": f"chatcmpl-{next(self._ids)}",
                "object": "chat.completion",
                "created": 0,
                "model": body.get("model", ""),
                "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
                "usage": usage,
            },
            None,
        )

    # ------------------------------------------------------------------ OpenAI Responses

    def _responses(self, body: Any) -> tuple[int, Any, Iterator[str] | None]:
        with self._lock:
            tied = dict(self._tied)
        problem, tokens = check_responses(body, tied=tied)
        if problem is None and self.bill is not None:
            tokens = self.bill("responses", body)
        limit = (
            self.window - (_int(body, "max_output_tokens") or 0) if isinstance(body, dict) else self.window
        )
        code = None
        if problem is None and tokens > limit:
            problem = (
                f"Your input exceeds the context window of this model ({self.window} tokens): "
                f"{tokens} input tokens. Please adjust your input and try again."
            )
            code = "context_length_exceeded"
        request = Request(
            api="responses", body=body if isinstance(body, dict) else {}, tokens=tokens, error=problem
        )
        with self._lock:
            self.requests.append(request)
        if problem is not None:
            error = {"message": problem, "type": "invalid_request_error", "param": "input", "code": code}
            return 400, {"error": error}, None
        reply = self.policy(request)
        n = next(self._ids)
        output: list[dict[str, Any]] = []
        reasoning_id = f"rs_{n}" if self.reasoning else None
        if reasoning_id is not None:
            output.append(
                {
                    "type": "reasoning",
                    "id": reasoning_id,
                    "summary": [{"type": "summary_text", "text": "Thinking about the next step."}],
                    "encrypted_content": f"gAAAAB{n:06d}" + "x" * 40,
                }
            )
        if reply.text is not None:
            output.append(
                {
                    "type": "message",
                    "id": f"msg_{n}",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": reply.text, "annotations": []}],
                }
            )
        for k, (name, args) in enumerate(reply.tool_calls):
            output.append(
                {
                    "type": "function_call",
                    "id": f"fc_{n}_{k}",
                    "call_id": f"call_{n}_{k}",
                    "name": name,
                    "arguments": json.dumps(args),
                    "status": "completed",
                }
            )
        if reasoning_id is not None:
            with self._lock:
                self._tied.update({item["id"]: reasoning_id for item in output[1:]})
        response = {
            "id": f"resp_{n}",
            "object": "response",
            "created_at": 0,
            "status": "completed",
            "model": body.get("model", ""),
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "error": None,
            "incomplete_details": None,
            "instructions": body.get("instructions"),
            "metadata": {},
            "usage": {
                "input_tokens": tokens,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": 5,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": tokens + 5,
            },
        }
        if body.get("stream"):
            return 200, None, _responses_stream(response)
        return 200, response, None

    # ------------------------------------------------------------------ Anthropic Messages

    def _anthropic(self, body: Any) -> tuple[int, Any, Iterator[str] | None]:
        problem, tokens = _check_anthropic(body)
        limit = self.window - (_int(body, "max_tokens") or 0) if isinstance(body, dict) else self.window
        if problem is None and self.bill is not None:
            tokens = self.bill("anthropic", body)
        if problem is None and tokens > limit:
            problem = f"prompt is too long: {tokens} tokens > {limit} maximum"
        request = Request(
            api="anthropic", body=body if isinstance(body, dict) else {}, tokens=tokens, error=problem
        )
        with self._lock:
            self.requests.append(request)
        if problem is not None:
            return (
                400,
                {"type": "error", "error": {"type": "invalid_request_error", "message": problem}},
                None,
            )
        reply = self.policy(request)
        content: list[dict[str, Any]] = [{"type": "text", "text": reply.text}] if reply.text else []
        if reply.reasoning is not None:
            thinking = {
                "type": "thinking",
                "thinking": reply.reasoning,
                "signature": f"sig_{next(self._ids)}",
            }
            content.insert(0, thinking)
        content += [
            {"type": "tool_use", "id": f"toolu_{next(self._ids)}", "name": name, "input": args}
            for name, args in reply.tool_calls
        ]
        message = {
            "id": f"msg_{next(self._ids)}",
            "type": "message",
            "role": "assistant",
            "model": body.get("model", ""),
            "content": content,
            "stop_reason": "tool_use" if reply.tool_calls else "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": tokens, "output_tokens": 5},
        }
        if body.get("stream"):
            return 200, None, _anthropic_stream(message)
        return 200, message, None


# ----------------------------------------------------------------------------- validation and counting


def _int(body: Any, key: str) -> int | None:
    value = body.get(key) if isinstance(body, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _texts(content: Any) -> Iterator[str]:
    if isinstance(content, str):
        yield content
    elif isinstance(content, list):
        for block in content:
            if isinstance(block, dict):
                if isinstance(block.get("text"), str):
                    yield block["text"]
                if block.get("type") == "tool_result":
                    yield from _texts(block.get("content"))


PDF_PAGE_BILL = 2_400
"""What the server bills a PDF page: about what Claude bills a page of text (measured 2,330-2,480)."""


def _file_tokens(content: Any) -> int:
    """What the files in a content list cost, as a provider reads them (decoded, never as base64 text).

    The server's own reading, apart from agentcontext's: a PDF by its ``/Type /Page`` objects at
    `PDF_PAGE_BILL` each, a text file by its text, a WAV by its length at 10 tokens a second; a file
    given by id or URL is not billed (the server does not have it).
    """
    total = 0
    for block in content if isinstance(content, list) else ():
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "tool_result":
            total += _file_tokens(block.get("content"))
            continue
        media, raw = None, None
        if kind == "file" and isinstance(block.get("file"), dict):
            raw = block["file"].get("file_data")
        elif kind == "input_file":
            raw = block.get("file_data")
        elif kind == "input_audio" and isinstance(block.get("input_audio"), dict):
            media, raw = "audio/wav", block["input_audio"].get("data")
        elif kind == "document" and isinstance(block.get("source"), dict):
            source = block["source"]
            if source.get("type") == "text":
                total += count_text(str(source.get("data", "")))
                continue
            if source.get("type") == "base64":
                media, raw = source.get("media_type"), source.get("data")
        if not isinstance(raw, str):
            continue
        if raw.startswith("data:"):
            head, _, raw = raw[5:].partition(",")
            media = head.split(";")[0]
        data = base64.b64decode(raw)
        if media == "application/pdf" or data.startswith(b"%PDF"):
            total += PDF_PAGE_BILL * max(1, len(re.findall(rb"/Type\s*/Page[^s]", data)))
        elif media is not None and media.startswith("audio/"):
            with wave.open(io.BytesIO(data)) as w:
                total += math.ceil(w.getnframes() / w.getframerate() * 10)
        else:
            total += count_text(data.decode("utf-8", errors="replace"))
    return total


def _tool_tokens(tools: Any) -> int:
    if not isinstance(tools, list) or not tools:
        return 0
    return count_text(render_tools(tools)) + 9


def _check_openai(body: Any) -> tuple[str | None, int]:
    """OpenAI's checks of a Chat Completions body, and its prompt tokens.

    The framing is OpenAI's cookbook rule (3 tokens a message plus its role, 3
    priming the reply; a ``name`` costs 1 more) and the published measurements
    of tool calls; counted here with tiktoken directly, not with agentcontext's
    counter, so the two check each other.
    """
    if not isinstance(body, dict) or not isinstance(body.get("model"), str):
        return "you must provide a model parameter", 0
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "'messages' must be a non-empty array", 0
    tokens = 3 + _tool_tokens(body.get("tools"))
    open_calls: set[str] = set()
    answered: set[str] = set()
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            return f"messages[{i}] must be an object", tokens
        role = m.get("role")
        if role not in ("system", "developer", "user", "assistant", "tool"):
            return f"messages[{i}].role: invalid value {role!r}", tokens
        content = m.get("content")
        text = "\n".join(_texts(content))
        tokens += 3 + count_text(role) + count_text(text) + _file_tokens(content)
        # Reasoning sent back beside the content is read, and billed (DeepSeek, Kimi, Qwen, vLLM, OpenRouter).
        tokens += sum(
            count_text(m[k]) for k in ("reasoning_content", "reasoning") if isinstance(m.get(k), str)
        )
        if isinstance(m.get("name"), str) and role != "tool":
            tokens += 1 + count_text(m["name"])
        if role == "tool":
            cid = m.get("tool_call_id")
            if cid not in open_calls or cid in answered:
                return (
                    f"Invalid parameter: messages with role 'tool' must be a response to a preceeding message "
                    f"with 'tool_calls' (messages[{i}], tool_call_id {cid!r})"
                ), tokens
            answered.add(cid)
            continue
        if open_calls - answered:
            missing = sorted(open_calls - answered)
            return (
                f"An assistant message with 'tool_calls' must be followed by tool messages responding to each "
                f"'tool_call_id'. The following tool_call_ids did not have response messages: {', '.join(missing)}"
            ), tokens
        open_calls, answered = set(), set()
        calls = m.get("tool_calls") or []
        if role == "assistant" and calls:
            # OpenAI frames each call as a message to ``functions.<name>`` (about 5-7 tokens measured) and
            # wraps parallel calls in one ``multi_tool_use.parallel`` call (about 10 more).
            tokens += 10 if len(calls) > 1 else 0
            for c in calls:
                fn = c.get("function") or {}
                tokens += 7 + count_text(fn.get("name") or "") + count_text(fn.get("arguments") or "")
                if c.get("id") in open_calls:
                    return f"messages[{i}]: duplicate tool_call id {c.get('id')!r}", tokens
                open_calls.add(c.get("id"))
        elif (
            role in ("user", "system", "developer")
            and not text.strip()
            and not (isinstance(content, list) and content)
        ):
            return f"messages[{i}].content: a {role} message must have content", tokens
    if open_calls - answered:
        return (
            "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
            f"'tool_call_id'. The following tool_call_ids did not have response messages: {', '.join(sorted(open_calls - answered))}"
        ), tokens
    return None, tokens


def _check_anthropic(body: Any) -> tuple[str | None, int]:
    """Anthropic's checks of a Messages body, and its prompt tokens (counted with o200k as an approximation)."""
    if not isinstance(body, dict) or not isinstance(body.get("model"), str):
        return "model: Field required", 0
    if not isinstance(body.get("max_tokens"), int):
        return "max_tokens: Field required", 0
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required", 0
    system = body.get("system")
    tokens = _tool_tokens(body.get("tools")) + sum(count_text(t) for t in _texts(system)) + 3
    previous_uses: set[str] = set()
    for i, m in enumerate(messages):
        role = m.get("role") if isinstance(m, dict) else None
        if role not in ("user", "assistant"):
            return f"messages.{i}.role: Input should be 'user' or 'assistant'", tokens
        content = m.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if not isinstance(blocks, list) or not blocks:
            return f"messages.{i}: all messages must have non-empty content", tokens
        uses: set[str] = set()
        results: set[str] = set()
        for block in blocks:
            kind = block.get("type") if isinstance(block, dict) else None
            if kind == "text":
                if not str(block.get("text", "")).strip() and role == "user":
                    return f"messages.{i}: text content blocks must be non-empty", tokens
                tokens += count_text(block["text"])
            elif kind == "tool_use":
                uses.add(block.get("id"))
                tokens += count_text(block.get("name", "")) + count_text(json.dumps(block.get("input", {})))
            elif kind == "tool_result":
                results.add(block.get("tool_use_id"))
                tokens += sum(count_text(t) for t in _texts(block.get("content")))
                tokens += _file_tokens(block.get("content"))
            elif kind == "document":
                tokens += _file_tokens([block])
            else:
                tokens += count_text(json.dumps(block))
        tokens += 3
        if role == "user":
            unexpected = results - previous_uses
            if unexpected:
                return (
                    f"messages.{i}.content: unexpected `tool_use_id` found in `tool_result` blocks: "
                    f"{', '.join(sorted(map(str, unexpected)))}. Each `tool_result` block must have a corresponding "
                    "`tool_use` block in the previous message."
                ), tokens
            missing = previous_uses - results
            if missing:
                return (
                    f"messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately after: "
                    f"{', '.join(sorted(map(str, missing)))}"
                ), tokens
            previous_uses = set()
        else:
            if previous_uses:
                return (
                    f"messages.{i}: `tool_use` blocks must be followed by a user message with their results",
                    tokens,
                )
            previous_uses = uses
    return None, tokens


# Responses items: the model produces these (a reasoning item must be followed by one of them) ...
_MODEL_ITEMS = frozenset(
    {
        "message",
        "function_call",
        "custom_tool_call",
        "web_search_call",
        "file_search_call",
        "computer_call",
        "code_interpreter_call",
        "image_generation_call",
        "local_shell_call",
        "shell_call",
        "apply_patch_call",
        "mcp_call",
        "mcp_list_tools",
        "mcp_approval_request",
        "tool_search_call",
        "program",
    }
)
# ... these answer a call on its call_id ...
_OUTPUT_FOR = {
    "function_call_output": "function_call",
    "custom_tool_call_output": "custom_tool_call",
    "computer_call_output": "computer_call",
    "local_shell_call_output": "local_shell_call",
    "shell_call_output": "shell_call",
    "apply_patch_call_output": "apply_patch_call",
}
# ... and these stand on their own.
_CLIENT_ITEMS = frozenset(
    {
        "compaction",
        "compaction_trigger",
        "item_reference",
        "mcp_approval_response",
        "tool_search_output",
        "program_output",
        "additional_tools",
    }
)
_IMAGE_TOKENS = 765  # OpenAI's documented cost of a 1024x1024 image at high detail (85 at low detail)


def _image_tokens(part: dict[str, Any]) -> int:
    """An input image's tokens: 85 at low detail; else OpenAI's tiles for a PNG data URL whose size
    its header gives (fitted into 2048x2048, then its short side down to at most 768 px; 512 px
    tiles of 170 tokens plus 85; a small image is not scaled up), and a flat 765 for any other."""
    if part.get("detail") == "low":
        return 85
    url = part.get("image_url")
    if isinstance(url, str) and url.startswith("data:image/png;base64,"):
        head = base64.b64decode(url.split(",", 1)[1][:44] + "==")[:24]
        if head[:8] == b"\x89PNG\r\n\x1a\n":
            w, h = struct.unpack(">II", head[16:24])
            if max(w, h) > 2048:
                w, h = w * 2048 / max(w, h), h * 2048 / max(w, h)
            if min(w, h) > 768:
                w, h = w * 768 / min(w, h), h * 768 / min(w, h)
            return 85 + 170 * math.ceil(w / 512) * math.ceil(h / 512)
    return _IMAGE_TOKENS


def _content_tokens(content: Any) -> int:
    """Text tokens of a message content or tool output, images at a flat rate, other parts as JSON."""
    if isinstance(content, str):
        return count_text(content)
    tokens = 0
    for part in content if isinstance(content, list) else []:
        if not isinstance(part, dict):
            continue
        for key in ("text", "refusal"):
            if isinstance(part.get(key), str):
                tokens += count_text(part[key])
                break
        else:
            if part.get("type") == "input_image":
                tokens += _image_tokens(part)
            elif part.get("type") == "input_file" and isinstance(part.get("file_data"), str):
                tokens += count_text(json.dumps({k: v for k, v in part.items() if k != "file_data"}))
            else:
                tokens += count_text(json.dumps(part, sort_keys=True))
    return tokens


def _json_tokens(item: dict[str, Any]) -> int:
    """Tokens of an item the API renders as it likes (hosted calls): its JSON, images at a flat rate."""
    images = 0

    def strip(value: Any) -> Any:
        nonlocal images
        if isinstance(value, dict):
            out = {}
            for k, v in value.items():
                if k in ("image_url", "result") and isinstance(v, str) and len(v) > 200:
                    images += 1
                    continue
                if k == "file_data":
                    continue
                out[k] = strip(v)
            return out
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return count_text(json.dumps(strip(item), sort_keys=True)) + images * _IMAGE_TOKENS


def _responses_tool_tokens(tools: Any) -> int:
    if not isinstance(tools, list) or not tools:
        return 0
    named = [t for t in tools if isinstance(t, dict) and isinstance(t.get("name"), str)]
    others = [t for t in tools if t not in named]
    return _tool_tokens(named) + sum(count_text(json.dumps(t)) for t in others)


def check_responses(body: Any, *, tied: dict[str, str] | None = None) -> tuple[str | None, int]:
    """The Responses API's checks of a request body, and its input tokens (counted independently).

    Counting: 3 tokens an item plus its role and text (messages), 7 plus the
    name and arguments (calls, as OpenAI frames tool calls), the text of an
    output, the summary text of a reasoning item (its encrypted content is not
    text the model reads back), the JSON of hosted items; images by OpenAI's tile rule when their
    size is in a PNG header, else at a flat 765 (85 at ``detail="low"``).

    Args:
        body: the request body.
        tied: item id -> the id of the reasoning item it was produced after (the
            server's own replies): such an item needs that reasoning item in the
            same run of model items.

    Returns:
        ``(problem, tokens)``: the API's error message (None when valid) and the input tokens.
    """
    if not isinstance(body, dict) or not isinstance(body.get("model"), str):
        return "Missing required parameter: 'model'.", 0
    value = body.get("input")
    items: list[Any] = [{"role": "user", "content": value}] if isinstance(value, str) else value
    if not isinstance(items, list):
        return "Invalid type for 'input': expected a string or an array of input items.", 0
    instructions = body.get("instructions")
    tokens = 3 + _responses_tool_tokens(body.get("tools"))
    if isinstance(instructions, str):
        tokens += 3 + count_text("developer") + count_text(instructions)
    tied = tied or {}
    calls: dict[str, str] = {}  # call_id -> call type
    answered: set[str] = set()
    run_reasoning: set[str] = set()  # reasoning ids of the current run of model items
    previous_reasoning: str | None = None  # a reasoning item waiting for its following item
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            return f"Invalid type for 'input[{i}]': expected an object.", tokens
        kind = item.get("type", "message" if "role" in item else None)
        role = item.get("role")
        if kind == "reasoning":
            if not isinstance(item.get("id"), str) or not isinstance(item.get("summary"), list):
                return f"Missing required parameter: 'input[{i}].summary'.", tokens
            run_reasoning.add(item["id"])
            previous_reasoning = item["id"]
            tokens += sum(count_text(s.get("text", "")) for s in item["summary"] if isinstance(s, dict))
            continue
        model = kind in _MODEL_ITEMS and (kind != "message" or role == "assistant")
        if previous_reasoning is not None and not model:
            return (
                f"Item '{previous_reasoning}' of type 'reasoning' was provided without its required following item."
            ), tokens
        previous_reasoning = None
        if not model:
            run_reasoning = set()
        item_id = item.get("id")
        if isinstance(item_id, str) and item_id in tied and tied[item_id] not in run_reasoning:
            return (
                f"Item '{item_id}' of type '{kind}' was provided without its required 'reasoning' item: "
                f"'{tied[item_id]}'."
            ), tokens
        if kind == "message":
            if role not in ("user", "assistant", "system", "developer"):
                return (
                    f"Invalid value: '{role}'. Supported values are: 'assistant', 'system', 'developer', and 'user'.",
                    tokens,
                )
            content = item.get("content")
            if not isinstance(content, str | list):
                return f"Invalid type for 'input[{i}].content': expected a string or an array.", tokens
            tokens += 3 + count_text(role) + _content_tokens(content)
        elif kind in ("function_call", "custom_tool_call"):
            body_key = "arguments" if kind == "function_call" else "input"
            cid, name, args = item.get("call_id"), item.get("name"), item.get(body_key)
            if not (isinstance(cid, str) and cid and isinstance(name, str) and isinstance(args, str)):
                return f"Missing required parameter: 'input[{i}].call_id', 'name' or '{body_key}'.", tokens
            if cid in calls:
                return f"Duplicate item found with call_id '{cid}'.", tokens
            calls[cid] = kind
            tokens += 7 + count_text(name) + count_text(args)
        elif kind in _OUTPUT_FOR:
            cid = item.get("call_id")
            if calls.get(cid) != _OUTPUT_FOR[kind]:
                what = kind.removesuffix("_output").replace("_", " ")
                return f"No tool call found for {what} output with call_id {cid}.", tokens
            if cid in answered:
                return f"Duplicate output for call_id {cid}.", tokens
            answered.add(cid)
            output = item.get("output")
            tokens += 3 + (_content_tokens(output) if isinstance(output, str | list) else _json_tokens(item))
        elif kind in _MODEL_ITEMS:  # hosted calls
            cid = item.get("call_id")
            if kind in _OUTPUT_FOR.values():
                if not isinstance(cid, str) or not cid:
                    return f"Missing required parameter: 'input[{i}].call_id'.", tokens
                calls[cid] = kind
            tokens += 3 + _json_tokens(item)
        elif kind in _CLIENT_ITEMS:
            tokens += 3 + _json_tokens(item)
        else:
            return f"Invalid value: '{kind}'. Supported values are the input item types.", tokens
    if previous_reasoning is not None:
        return (
            f"Item '{previous_reasoning}' of type 'reasoning' was provided without its required following item.",
            tokens,
        )
    missing = [cid for cid in calls if cid not in answered]
    if missing:
        kind = calls[missing[0]].replace("_", " ")
        return f"No tool output found for {kind} {missing[0]}.", tokens
    return None, tokens


# ----------------------------------------------------------------------------- streaming


def _responses_stream(response: dict[str, Any]) -> Iterator[str]:
    """The Responses API's server-sent events for ``response``: created, each item added and done, completed."""
    seq = itertools.count()

    def event(kind: str, data: dict[str, Any]) -> str:
        return f"event: {kind}\ndata: {json.dumps({'type': kind, 'sequence_number': next(seq), **data})}\n\n"

    yield event(
        "response.created", {"response": {**response, "status": "in_progress", "output": [], "usage": None}}
    )
    for index, item in enumerate(response["output"]):
        if item["type"] == "message":
            yield event(
                "response.output_item.added",
                {"output_index": index, "item": {**item, "content": [], "status": "in_progress"}},
            )
            text = item["content"][0]["text"]
            part = {"type": "output_text", "text": "", "annotations": []}
            yield event(
                "response.content_part.added",
                {"item_id": item["id"], "output_index": index, "content_index": 0, "part": part},
            )
            yield event(
                "response.output_text.delta",
                {
                    "item_id": item["id"],
                    "output_index": index,
                    "content_index": 0,
                    "delta": text,
                    "logprobs": [],
                },
            )
            yield event(
                "response.output_text.done",
                {
                    "item_id": item["id"],
                    "output_index": index,
                    "content_index": 0,
                    "text": text,
                    "logprobs": [],
                },
            )
            yield event(
                "response.content_part.done",
                {
                    "item_id": item["id"],
                    "output_index": index,
                    "content_index": 0,
                    "part": {**part, "text": text},
                },
            )
        elif item["type"] == "function_call":
            yield event(
                "response.output_item.added",
                {"output_index": index, "item": {**item, "arguments": "", "status": "in_progress"}},
            )
            yield event(
                "response.function_call_arguments.delta",
                {"item_id": item["id"], "output_index": index, "delta": item["arguments"]},
            )
            yield event(
                "response.function_call_arguments.done",
                {
                    "item_id": item["id"],
                    "output_index": index,
                    "arguments": item["arguments"],
                    "name": item["name"],
                },
            )
        else:
            yield event("response.output_item.added", {"output_index": index, "item": item})
        yield event("response.output_item.done", {"output_index": index, "item": item})
    yield event("response.completed", {"response": response})


def _openai_stream(model: str, message: dict[str, Any], finish: str, usage: dict[str, int]) -> Iterator[str]:
    base = {"id": "chatcmpl-stream", "object": "chat.completion.chunk", "created": 0, "model": model}
    delta: dict[str, Any] = {"role": "assistant", "content": message.get("content") or ""}
    if "reasoning_content" in message:
        delta["reasoning_content"] = message["reasoning_content"]
    yield (
        "data: "
        + json.dumps({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
        + "\n\n"
    )
    for k, call in enumerate(message.get("tool_calls") or []):
        chunk = {"index": k, "id": call["id"], "type": "function", "function": call["function"]}
        yield (
            "data: "
            + json.dumps(
                {**base, "choices": [{"index": 0, "delta": {"tool_calls": [chunk]}, "finish_reason": None}]}
            )
            + "\n\n"
        )
    yield (
        "data: "
        + json.dumps(
            {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}], "usage": usage}
        )
        + "\n\n"
    )
    yield "data: [DONE]\n\n"


def _anthropic_stream(message: dict[str, Any]) -> Iterator[str]:
    def event(kind: str, data: dict[str, Any]) -> str:
        return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n"

    start = {**message, "content": [], "stop_reason": None}
    yield event("message_start", {"message": start})
    for i, block in enumerate(message["content"]):
        if block["type"] == "text":
            yield event("content_block_start", {"index": i, "content_block": {"type": "text", "text": ""}})
            yield event(
                "content_block_delta", {"index": i, "delta": {"type": "text_delta", "text": block["text"]}}
            )
        elif block["type"] == "thinking":
            start_block = {"type": "thinking", "thinking": "", "signature": ""}
            yield event("content_block_start", {"index": i, "content_block": start_block})
            for delta in (
                {"type": "thinking_delta", "thinking": block["thinking"]},
                {"type": "signature_delta", "signature": block["signature"]},
            ):
                yield event("content_block_delta", {"index": i, "delta": delta})
        else:
            yield event(
                "content_block_start",
                {"index": i, "content_block": {**block, "input": {}}},
            )
            yield event(
                "content_block_delta",
                {
                    "index": i,
                    "delta": {"type": "input_json_delta", "partial_json": json.dumps(block["input"])},
                },
            )
        yield event("content_block_stop", {"index": i})
    yield event(
        "message_delta",
        {
            "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
            "usage": {"output_tokens": 5},
        },
    )
    yield event("message_stop", {})
