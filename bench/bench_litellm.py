"""The LiteLLM proxy hook: what it adds to a request, and LiteLLM's ``trim_messages`` beside it.

1. **Added latency through the real proxy.** Two ``litellm`` proxy processes
   serve the same model list in front of one loopback upstream that answers at
   once (no counting, no validation): one with ``examples/litellm``'s hook, one
   without callbacks. An agent's chat conversation grows two messages (a tool
   call and its output) per request from 2,000 messages; each request goes to
   both proxies in turn. The window (1,000,000 tokens) holds the whole
   conversation, so nothing needs compacting: this is the hook's steady-state
   cost, a prefix comparison, the conversion of the new messages and an O(new)
   engine call. Reported: client-measured latency p50/p99 with and without the
   hook, and their difference.
2. **The hook alone, in-process**: ``ContextHook.async_pre_call_hook`` on the
   same requests, timed per call (what the proxy's pre-call loop spends in it);
   then the same with ``sessions=`` a PostgreSQL database (``--postgres``, a
   fresh schema made and dropped): each request also reads the records other
   proxies wrote, appends its two new messages and takes the session's lease.
3. **Beside ``trim_messages``** on the same 2,000-message conversation at a
   window a quarter of its size: time per call and whether the output is a valid
   Chat Completions request that fits (``agentcontext.check_messages`` and
   tiktoken counts), ours with a fresh hook (a full pass: a first request, or
   after a restart) and with the conversation's state (the next request).

Run:  python bench/bench_litellm.py                 (about four minutes on 2 cores)
      python bench/bench_litellm.py --steps 30       (a smoke run)
      python bench/bench_litellm.py --only-in-process (the in-process rows: about a minute)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import httpx
import yaml
from litellm.utils import trim_messages

import agentcontext as ac
from agentcontext.formats import openai as oai
from agentcontext.integrations.litellm import ContextHook
from agentcontext.tokens import counter_for_tokenizer

ROOT = Path(__file__).resolve().parent.parent
KEY = "sk-" + "b3" * 32
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "run",
            "description": "Run a shell command.",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
        },
    }
]


def conversation(messages: int) -> list[dict[str, Any]]:
    """An agent's chat history: a task, then tool calls and outputs of 40 to 400 tokens."""
    out: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a careful engineer. Use the run tool."},
        {"role": "user", "content": "Find why the test suite fails and fix it."},
    ]
    step = 0
    while len(out) < messages:
        call = {
            "id": f"call_{step}",
            "type": "function",
            "function": {"name": "run", "arguments": json.dumps({"command": f"pytest -k case_{step}"})},
        }
        out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        lines = 4 + (step * 7) % 40
        out.append(
            {
                "role": "tool",
                "tool_call_id": call["id"],
                "content": "".join(
                    f"tests/test_case_{step}.py::{i} PASSED in 0.{i:02d}s\n" for i in range(lines)
                ),
            }
        )
        step += 1
    return out[:messages]


# ----------------------------------------------------------------------------- servers


@contextmanager
def instant_upstream() -> Iterator[str]:
    """An OpenAI-compatible upstream that answers every chat request at once with a fixed reply."""
    reply = json.dumps(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 0,
            "model": "gpt-4o",
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
            ],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }
    ).encode()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length", "0")))
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def proxy(upstream: str, directory: Path, *, hook: bool) -> Iterator[str]:
    """A litellm proxy process in front of ``upstream``, with examples/litellm's hook or without callbacks."""
    directory.mkdir()
    config: dict[str, Any] = {
        "model_list": [
            {
                "model_name": "gpt-4o",
                "litellm_params": {"model": "openai/gpt-4o", "api_base": upstream, "api_key": "test"},
                "model_info": {"max_input_tokens": 1_000_000},
            }
        ]
    }
    if hook:
        shutil.copy(ROOT / "examples" / "litellm" / "agentcontext_hook.py", directory)
        config["litellm_settings"] = {"callbacks": "agentcontext_hook.hook"}
    (directory / "config.yaml").write_text(yaml.safe_dump(config))
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env.update(
        PYTHONPATH=os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")]),
        LITELLM_MASTER_KEY=KEY,
        LITELLM_LOCAL_MODEL_COST_MAP="True",
        LITELLM_TELEMETRY="False",
        LITELLM_LOG="ERROR",
    )
    with (directory / "proxy.log").open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "litellm.proxy.proxy_cli", "--config", "config.yaml", "--port", str(port)],
            cwd=directory,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError((directory / "proxy.log").read_text(errors="replace")[-3000:])
            try:
                if httpx.get(url + "/health/liveliness", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


# ----------------------------------------------------------------------------- measurements


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


def through_proxies(start: int, steps: int) -> dict[str, tuple[float, float]]:
    full = conversation(start + 2 * (steps + 20))
    timings: dict[str, list[float]] = {"plain": [], "hook": []}
    with tempfile.TemporaryDirectory() as tmp, instant_upstream() as upstream:
        with (
            proxy(upstream, Path(tmp) / "plain", hook=False) as plain,
            proxy(upstream, Path(tmp) / "hook", hook=True) as hooked,
        ):
            with httpx.Client(headers={"authorization": f"Bearer {KEY}"}, timeout=120) as client:
                for step in range(steps + 20):  # the first 20 warm both up
                    body = {"model": "gpt-4o", "messages": full[: start + 2 * step], "tools": TOOLS}
                    content = json.dumps(body).encode()
                    for name, url in (("plain", plain), ("hook", hooked)):
                        t0 = time.perf_counter()
                        response = client.post(
                            url + "/v1/chat/completions",
                            content=content,
                            headers={"content-type": "application/json", "x-agentcontext-session": "bench"},
                        )
                        elapsed = time.perf_counter() - t0
                        assert response.status_code == 200, response.text
                        if step >= 20:
                            timings[name].append(elapsed * 1000)
    out = {name: percentiles(samples) for name, samples in timings.items()}
    deltas = [h - p for h, p in zip(timings["hook"], timings["plain"], strict=True)]
    out["added (paired)"] = percentiles(deltas)
    return out


def in_process(start: int, steps: int, sessions: str | None = None) -> tuple[float, float]:
    full = conversation(start + 2 * steps)
    hook = ContextHook(window=1_000_000, sessions=sessions)

    async def run() -> list[float]:  # one event loop, as in the proxy
        samples = []
        for step in range(steps):
            body = {"model": "gpt-4o", "messages": full[: start + 2 * step], "tools": TOOLS}
            data = json.loads(json.dumps(body))  # a fresh request, as the proxy decodes it
            data["proxy_server_request"] = {"headers": {"x-agentcontext-session": "bench"}}
            t0 = time.perf_counter()
            result = await hook.async_pre_call_hook(None, None, data, "acompletion")
            samples.append((time.perf_counter() - t0) * 1000)
            assert result is data and data["messages"] == body["messages"]  # forwarded untouched
        return samples

    try:
        return percentiles(asyncio.run(run())[1:])  # the first request is a full pass
    finally:
        hook.close()


@contextmanager
def postgres_schema(base: str) -> Iterator[str | None]:
    """A fresh schema with agentcontext's tables on ``base`` (dropped after), or None when it does not answer."""
    try:
        import psycopg

        psycopg.connect(base, connect_timeout=3).close()
    except Exception as e:
        print(f"PostgreSQL at {base} unavailable ({type(e).__name__}): no session row")
        yield None
        return
    from agentcontext.session.stores import open_database

    schema = f"bench_litellm_{os.getpid()}"
    url = f"{base}{'&' if '?' in base else '?'}schema={schema}"
    database = open_database(url)
    try:
        database.init()
        yield url
    finally:
        database.close()
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def valid_and_fits(messages: list[dict[str, Any]]) -> tuple[bool, int]:
    counter = counter_for_tokenizer("o200k_base")
    canonical = oai.to_messages(messages)
    tokens = counter.count_messages(canonical) + counter.count_tools(TOOLS)
    return not ac.check_messages(canonical), tokens


def beside_trim(size: int) -> list[tuple[str, float, bool, int, int]]:
    messages = conversation(size)
    counter = counter_for_tokenizer("o200k_base")
    total = counter.count_messages(oai.to_messages(messages))
    window = total // 4
    rows = []
    t0 = time.perf_counter()
    trimmed = trim_messages(messages, model="gpt-4o", max_tokens=window)
    elapsed = (time.perf_counter() - t0) * 1000
    ok, tokens = valid_and_fits(trimmed)
    rows.append(("trim_messages", elapsed, ok, tokens, window))
    hook = ContextHook(window=window, reserve=0)

    def ours(msgs: list[dict[str, Any]]) -> tuple[float, dict[str, Any]]:
        data = json.loads(json.dumps({"model": "gpt-4o", "messages": msgs, "tools": TOOLS}))
        data["proxy_server_request"] = {"headers": {"x-agentcontext-session": "trim"}}
        t0 = time.perf_counter()
        asyncio.run(hook.async_pre_call_hook(None, None, data, "acompletion"))
        return (time.perf_counter() - t0) * 1000, data

    elapsed, data = ours(messages)
    ok, tokens = valid_and_fits(data["messages"])
    rows.append(("ContextHook, first request (full pass)", elapsed, ok, tokens, window))
    more = conversation(size + 2)
    elapsed, data = ours(more)
    ok, tokens = valid_and_fits(data["messages"])
    rows.append(("ContextHook, next request (2 new messages)", elapsed, ok, tokens, window))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=2_000)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument(
        "--postgres",
        default="postgresql://postgres@127.0.0.1:5432/test",
        help="PostgreSQL database for the session row (a fresh schema is made and dropped)",
    )
    parser.add_argument("--only-in-process", action="store_true", help="skip the proxies and trim_messages")
    args = parser.parse_args()
    print(
        f"python {platform.python_version()}, {os.cpu_count()} cores; conversation from {args.messages:,} messages"
    )
    hook_p50, hook_p99 = in_process(args.messages, 300)
    print(
        f"\nContextHook.async_pre_call_hook in-process, nothing to compact: p50 {hook_p50:.2f} ms, p99 {hook_p99:.2f} ms"
    )
    with postgres_schema(args.postgres) as url:
        if url is not None:
            p50, p99 = in_process(args.messages, 300, sessions=url)
            print(f"  the same with a PostgreSQL session (sessions=URL): p50 {p50:.2f} ms, p99 {p99:.2f} ms")
    if args.only_in_process:
        return
    print("\nThrough the proxy (client-measured, ms)      p50      p99")
    for name, (p50, p99) in through_proxies(args.messages, args.steps).items():
        print(f"  {name:<40} {p50:8.2f} {p99:8.2f}")
    print(f"\nBeside trim_messages on {args.messages:,} messages, window a quarter of their tokens")
    print(f"  {'':<44} {'ms':>8}  valid  tokens / budget")
    for name, ms, ok, tokens, window in beside_trim(args.messages):
        print(f"  {name:<44} {ms:8.1f}  {'yes' if ok else 'NO ':<5}  {tokens:,} / {window:,}")


if __name__ == "__main__":
    main()
