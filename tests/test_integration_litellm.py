"""The LiteLLM proxy with agentcontext's hook: a real ``litellm`` proxy process in front of a loopback provider.

The proxy is started once for the module from the documented files
(``examples/litellm/config.yaml`` and ``agentcontext_hook.py``, which
``docs/litellm.md`` shows verbatim), with only its deployments pointed at
`providers.ProviderServer`, which counts every request with tiktoken on its own
and rejects what the APIs reject. Clients shaped like Claude Code
(``/v1/messages``), Codex (``/v1/responses``) and a plain OpenAI agent
(``/v1/chat/completions``) grow their conversations far past the window. The
promises: every upstream request fits, is valid for its API, keeps the system
prompt / instructions and the latest user input; messages the hook did not change
arrive exactly as sent; streams pass through; a request the hook cannot read is
forwarded unchanged with one log line, and the proxy stays up.

Beside it, LiteLLM's own ``trim_messages`` on the same inputs: it separates tool
results from their calls (litellm #4931), leaves trailing tool results out of its
count (#6505's fix), and returns its input unchanged on any error.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import logging
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from litellm.utils import trim_messages

from agentcontext.exceptions import ConfigError
from agentcontext.formats import anthropic, responses
from agentcontext.formats import openai as oai
from agentcontext.integrations.litellm import ContextHook
from litellm_proxy import EXAMPLE, ROOT, Proxy, documented_config, start_proxy
from providers import (
    ProviderServer,
    Reply,
    Request,
    _check_anthropic,
    _check_openai,
    check_responses,
)

WINDOW = 6_000
SYSTEM = "You are a careful engineer. Use the run tool, then answer."
OUTPUT_LINE = "line of output for the step: lorem ipsum dolor sit amet\n"


def output(step: int) -> str:
    """A tool output of about 600 tokens: ten steps overflow the window."""
    return f"step {step} output\n" + OUTPUT_LINE * 60


def policy(request: Request) -> Reply:
    """The model: calls ``run`` until the latest user input asks for the answer."""
    if "answer" in request.latest_user_text():
        return Reply(text="The third step failed.")
    return Reply(tool_calls=[("run", {"step": len(request.texts())})])


# ----------------------------------------------------------------------------- the proxy


@pytest.fixture(scope="module")
def upstream() -> Iterator[ProviderServer]:
    with ProviderServer(window=WINDOW, policy=policy, reasoning=True) as server:
        yield server


@pytest.fixture(scope="module")
def proxy(upstream: ProviderServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    config = documented_config(upstream, WINDOW)
    # Beside the documented groups: one whose deployment sets its reply limit in config.yaml.
    (gpt5,) = [d for d in config["model_list"] if d["model_name"] == "gpt-5"]
    capped = copy.deepcopy(gpt5)
    capped["model_name"] = "gpt-5-capped"
    capped["litellm_params"]["max_completion_tokens"] = CAPPED_REPLY
    config["model_list"].append(capped)
    with start_proxy(config, tmp_path_factory.mktemp("litellm")) as running:
        yield running


CAPPED_REPLY = 3_000


def sent_since(upstream: ProviderServer, start: int) -> list[Request]:
    return upstream.requests[start:]


def assert_fits(requests: list[Request]) -> None:
    assert requests
    for r in requests:
        assert r.error is None, r.error
        assert r.tokens <= WINDOW


# ----------------------------------------------------------------------------- the three routes

CHAT_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "run",
            "description": "Run one step of the task.",
            "parameters": {"type": "object", "properties": {"step": {"type": "integer"}}},
        },
    }
]


def run_calls(messages: list[dict[str, Any]], reply: dict[str, Any], step: int) -> None:
    """Append a Chat Completions reply's tool calls and their outputs to ``messages``."""
    calls = reply["choices"][0]["message"]["tool_calls"]
    messages.append(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": c["id"], "type": "function", "function": c["function"]} for c in calls],
        }
    )
    messages += [{"role": "tool", "tool_call_id": c["id"], "content": output(step)} for c in calls]


def test_chat_agent_that_never_compacts_stays_inside_the_window(
    proxy: Proxy, upstream: ProviderServer
) -> None:
    start = len(upstream.requests)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Find which step fails."},
    ]
    for step in range(16):
        body = {"model": "gpt-5", "messages": messages, "tools": CHAT_TOOLS, "max_tokens": 400}
        reply = proxy.post("/v1/chat/completions", body, **{"x-agentcontext-session": "chat-1"})
        run_calls(messages, reply, step)
    messages.append({"role": "user", "content": "Now answer: which step failed?"})
    reply = proxy.post("/v1/chat/completions", {"model": "gpt-5", "messages": messages, "tools": CHAT_TOOLS})
    assert reply["choices"][0]["message"]["content"] == "The third step failed."

    sent = sent_since(upstream, start)
    assert_fits(sent)
    assert _check_openai({"model": "gpt-5", "messages": messages, "tools": CHAT_TOOLS})[1] > 2 * WINDOW
    assert sent[0].body["messages"] == messages[:2]  # nothing to compact: forwarded as sent
    for r in sent:
        assert r.messages[0] == {"role": "system", "content": SYSTEM}
        assert r.body["tools"] == CHAT_TOOLS
    assert sent[-1].latest_user_text() == "Now answer: which step failed?"
    assert len(sent[-1].messages) < len(messages)


def claude_code_tools() -> list[dict[str, Any]]:
    return [
        {
            "name": "Bash",
            "description": "Executes a bash command.",
            "input_schema": {
                "type": "object",
                "properties": {"command": {"type": "string"}},
                "required": ["command"],
            },
        }
    ]


def test_claude_code_messages_fit_and_keep_what_it_sent(proxy: Proxy, upstream: ProviderServer) -> None:
    """Claude Code's shape: system blocks with cache_control, thinking blocks, a moving breakpoint."""
    start = len(upstream.requests)
    system = [
        {"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude."},
        {"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}},
    ]
    breakpoint_ = {"type": "ephemeral"}
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": [{"type": "text", "text": "Find which step fails."}]}
    ]
    bodies = []
    for step in range(16):
        # Claude Code puts its cache breakpoint on the newest message only.
        sent_messages = json.loads(json.dumps(messages))
        sent_messages[-1]["content"][-1]["cache_control"] = breakpoint_
        body = {
            "model": "claude-sonnet-4-5",
            "system": system,
            "messages": sent_messages,
            "tools": claude_code_tools(),
            "max_tokens": 1000,
        }
        bodies.append(body)
        reply = proxy.post("/v1/messages", body, **{"anthropic-version": "2023-06-01"})
        uses = [b for b in reply["content"] if b["type"] == "tool_use"]
        assert uses
        thinking = {"type": "thinking", "thinking": "Run the next step.", "signature": f"sig{step}"}
        messages.append({"role": "assistant", "content": [thinking, *uses]})
        messages.append(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": u["id"], "content": output(step)} for u in uses
                ],
            }
        )
    sent = sent_since(upstream, start)
    assert_fits(sent)
    assert _check_anthropic(bodies[-1])[1] > 2 * WINDOW
    assert sent[0].body["messages"] == bodies[0]["messages"]  # nothing to compact: forwarded as sent
    for r, body in zip(sent, bodies, strict=True):
        assert r.api == "anthropic"
        assert r.body["system"] == system  # the system prompt, its cache_control included
        assert r.body["tools"] == body["tools"]
        assert r.messages[-1] == body["messages"][-1]  # the newest turn exactly as sent, breakpoint included
        # The task, verbatim (after a summary, when there is one).
        assert "Find which step fails." in r.texts()
    assert len(sent[-1].messages) < len(bodies[-1]["messages"])


def test_claude_code_reading_a_pdf_fits_by_its_pages(proxy: Proxy, upstream: ProviderServer) -> None:
    """Claude Code's Read tool on a PDF returns it as a document block in the tool result.

    agentcontext carried such blocks through uncounted (2,400 tokens a page at this provider), so the
    requests went over the window at the provider once the history filled it.
    """
    start = len(upstream.requests)
    system = [{"type": "text", "text": SYSTEM}]
    page = base64.b64encode(b"%PDF-1.4\n1 0 obj << /Type /Page >> endobj\n").decode()
    document = {
        "type": "document",
        "source": {"type": "base64", "media_type": "application/pdf", "data": page},
    }
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": [{"type": "text", "text": "Read the manual."}]}
    ]
    bodies = []
    for step in range(10):
        body = {
            "model": "claude-sonnet-4-5",
            "system": system,
            "messages": json.loads(json.dumps(messages)),
            "tools": claude_code_tools(),
            "max_tokens": 400,
        }
        bodies.append(body)
        reply = proxy.post("/v1/messages", body, **{"anthropic-version": "2023-06-01"})
        uses = [b for b in reply["content"] if b["type"] == "tool_use"]
        messages.append({"role": "assistant", "content": uses})
        result: Any = [{"type": "text", "text": "manual.pdf"}, document] if step == 0 else output(step)
        messages.append(
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": u["id"], "content": result} for u in uses],
            }
        )
    sent = sent_since(upstream, start)
    assert_fits(sent)  # by the server's own bill: 2,400 tokens a page
    assert _check_anthropic(bodies[-1])[1] > WINDOW
    for r, body in zip(sent, bodies, strict=True):
        assert r.messages[-1] == body["messages"][-1]  # the newest turn exactly as sent
        assert "Read the manual." in r.texts()
    assert page in json.dumps(sent[1].body)  # the page went out while it was the newest result


SPEC = (
    "data:text/plain;base64,"
    + base64.b64encode(b"Step 3 must print DONE; any other output fails.\n").decode()
)


def test_chat_completions_with_cache_breakpoints_and_files_fit_and_keep_them(
    proxy: Proxy, upstream: ProviderServer
) -> None:
    """Cline's shape on /v1/chat/completions for a Claude model: cache_control on text parts, a file part.

    agentcontext used to refuse parts it does not model on this route, so the hook forwarded every such
    request unchanged and the conversation overflowed the window at the provider.
    """
    start = len(upstream.requests)
    breakpoint_ = {"type": "ephemeral"}
    system = {"role": "system", "content": [{"type": "text", "text": SYSTEM, "cache_control": breakpoint_}]}
    task = {
        "role": "user",
        "content": [
            {"type": "text", "text": "Find which step fails; the spec is attached."},
            {"type": "file", "file": {"file_data": SPEC, "filename": "spec.txt"}},
        ],
    }
    messages: list[dict[str, Any]] = [task]
    bodies = []
    for step in range(16):
        sent_messages = json.loads(json.dumps([system, *messages]))
        last = sent_messages[-1]
        if isinstance(last["content"], str):
            last["content"] = [{"type": "text", "text": last["content"]}]
        last["content"][0]["cache_control"] = breakpoint_  # the breakpoint moves to the newest message
        body = {
            "model": "claude-sonnet-4-5",
            "messages": sent_messages,
            "tools": CHAT_TOOLS,
            "max_tokens": 400,
        }
        bodies.append(body)
        reply = proxy.post("/v1/chat/completions", body, **{"x-agentcontext-session": "cline-1"})
        run_calls(messages, reply, step)
    sent = sent_since(upstream, start)
    assert len(sent) == len(bodies)
    assert_fits(sent)  # before: forwarded unchanged, over the window from the eighth step on
    assert _check_openai({"model": "gpt-5", "messages": bodies[-1]["messages"]})[1] > 2 * WINDOW
    for r in sent:
        assert r.api == "anthropic"  # LiteLLM translated the request for the Claude model
        assert r.body["system"][-1].get("cache_control") == breakpoint_  # the system prompt's breakpoint
        assert json.dumps(r.messages[-1]).count('"cache_control"') == 1  # and the newest message's
        assert "Find which step fails; the spec is attached." in r.texts()
        assert SPEC.split(",", 1)[1] in json.dumps(r.body)  # the attached file goes with it, every time
    assert len(sent[-1].messages) < len(bodies[-1]["messages"])
    # The breakpoint turns the newest message's string into a text part, and back in the next request:
    # the same message, so compaction stays rare (before: a rewritten history, compacted at every step).
    summaries = [
        r.messages[0]["content"][0]["text"] for r in sent if "summary of earlier" in json.dumps(r.messages[0])
    ]
    # (The upstream bills the estimate's own tokens, 1.2 times fewer than the Claude prior; the correction
    # learns down by the safety margin at most, so a little less is packed than the upstream would take.)
    assert 1 <= len(set(summaries)) <= 5


def test_codex_responses_fit_with_reasoning_items(proxy: Proxy, upstream: ProviderServer) -> None:
    """Codex's shape: instructions, reasoning items with encrypted content, function calls and outputs."""
    start = len(upstream.requests)
    tools = [
        {
            "type": "function",
            "name": "shell",
            "description": "Runs a shell command.",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
        }
    ]
    items: list[dict[str, Any]] = [
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "Find which step fails."}],
        }
    ]
    bodies = []
    for step in range(16):
        body = {"model": "gpt-5", "instructions": SYSTEM, "input": items, "tools": tools, "store": False}
        bodies.append(json.loads(json.dumps(body)))
        reply = proxy.post("/v1/responses", body)
        produced = [o for o in reply["output"] if o["type"] in ("reasoning", "function_call")]
        assert [o["type"] for o in produced] == ["reasoning", "function_call"]
        items = items + [{k: v for k, v in o.items() if v is not None} for o in produced]
        items.append(
            {"type": "function_call_output", "call_id": produced[-1]["call_id"], "output": output(step)}
        )
    items.append(
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Now answer."}]}
    )
    reply = proxy.post(
        "/v1/responses", {"model": "gpt-5", "instructions": SYSTEM, "input": items, "tools": tools}
    )
    sent = sent_since(upstream, start)
    assert_fits(sent)
    assert check_responses({"model": "gpt-5", "input": items, "tools": tools})[1] > 2 * WINDOW
    assert sent[0].body["input"] == bodies[0]["input"]
    for r in sent:
        assert r.api == "responses"
        assert r.body["instructions"] == SYSTEM
    assert sent[-1].latest_user_text() == "Now answer."
    assert len(sent[-1].items) < len(items)


# ----------------------------------------------------------------------------- streams, bad input


def long_chat(steps: int, *, ids: str = "s", out: Callable[[int], str] = output) -> list[dict[str, Any]]:
    """A chat history of ``steps`` tool calls (ids ``call_<ids><step>``) with ``out(step)`` outputs, then a question."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Find which step fails."},
    ]
    for step in range(steps):
        call = {"id": f"call_{ids}{step}", "type": "function", "function": {"name": "run", "arguments": "{}"}}
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": call["id"], "content": out(step)})
    messages.append({"role": "user", "content": "Now answer: which step failed?"})
    return messages


def test_a_streamed_reply_passes_through(proxy: Proxy, upstream: ProviderServer) -> None:
    start = len(upstream.requests)
    lines = proxy.stream("/v1/chat/completions", {"model": "gpt-5", "messages": long_chat(14)})
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line[len("data: ") :]) for line in lines[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == "The third step failed."
    (sent,) = sent_since(upstream, start)
    assert_fits([sent])
    assert sent.body["stream"] is True

    start = len(upstream.requests)
    events = proxy.stream(
        "/v1/messages",
        {
            "model": "claude-sonnet-4-5",
            "system": SYSTEM,
            "max_tokens": 500,
            "messages": [{"role": "user", "content": "Now answer: " + OUTPUT_LINE * 400}],
        },
    )
    assert any('"text_delta"' in e and "The third step failed." in e for e in events)
    (sent,) = sent_since(upstream, start)
    assert_fits([sent])


def test_unreadable_input_is_forwarded_unchanged_with_one_log_line(
    proxy: Proxy, upstream: ProviderServer
) -> None:
    start = len(upstream.requests)
    marker = "tool-call-id-on-a-user-message-7f3a"
    messages = [
        {"role": "user", "content": "Hello", "tool_call_id": marker}
    ]  # only tool messages answer calls
    proxy.post("/v1/chat/completions", {"model": "gpt-5", "messages": messages})
    (sent,) = sent_since(upstream, start)
    assert sent.body["messages"] == messages
    lines = proxy.log_lines("agentcontext: /chat/completions request forwarded unchanged")
    assert len([line for line in lines if "tool_call_id" in line]) == 1
    # The proxy is still up and the hook still works.
    proxy.post("/v1/chat/completions", {"model": "gpt-5", "messages": long_chat(12)})
    assert_fits(sent_since(upstream, start + 1))
    assert proxy.process.poll() is None


def test_a_reply_limit_set_in_the_proxy_config_is_kept_free(proxy: Proxy, upstream: ProviderServer) -> None:
    # LiteLLM adds the deployment's max_completion_tokens after the hook: a one-shot fit filled the budget
    # left by the hook's own reserve, and the provider refused prompt plus reply as over the window.
    messages = long_chat(9)
    start = len(upstream.requests)
    proxy.post(
        "/v1/chat/completions",
        {"model": "gpt-5-capped", "messages": messages},
        **{"x-agentcontext-fill": "1"},
    )
    (sent,) = sent_since(upstream, start)
    assert sent.body.get("max_completion_tokens") == CAPPED_REPLY
    assert sent.error is None and sent.tokens + CAPPED_REPLY <= WINDOW
    assert len(sent.messages) < len(messages)  # it had to be fitted


def test_the_documentation_shows_the_files_the_proxy_ran() -> None:
    doc = (ROOT / "docs" / "litellm.md").read_text()
    for name in ("config.yaml", "agentcontext_hook.py"):
        assert (EXAMPLE / name).read_text().strip() in doc, (
            f"docs/litellm.md must show examples/litellm/{name}"
        )


# ----------------------------------------------------------------------------- trim_messages, beside the hook


def parallel_calls(steps: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Find which step fails."},
    ]
    for step in range(steps):
        calls = [
            {"id": f"c{step}{x}", "type": "function", "function": {"name": "run", "arguments": "{}"}}
            for x in "ab"
        ]
        messages.append({"role": "assistant", "content": None, "tool_calls": calls})
        messages += [{"role": "tool", "tool_call_id": c["id"], "content": output(step)} for c in calls]
    return messages


def hooked(messages: list[dict[str, Any]], window: int) -> dict[str, Any]:
    """What the hook sends upstream for this chat request (in-process: the same hook the proxy runs)."""
    hook = ContextHook(window=window, reserve=0)
    data: dict[str, Any] = {"model": "gpt-4o", "messages": json.loads(json.dumps(messages))}
    return asyncio.run(hook.async_pre_call_hook(None, None, data, "acompletion"))


@pytest.mark.parametrize("budget", [2_000, 2_500, 3_000, 3_500])
def test_trim_messages_parts_tool_results_from_their_calls(budget: int) -> None:
    """litellm #4931: trimming keeps a tool result whose assistant tool call it dropped."""
    messages = parallel_calls(6) + [{"role": "user", "content": "Now answer."}]
    trimmed = trim_messages(messages, model="gpt-4o", max_tokens=budget)
    problem, _ = _check_openai({"model": "gpt-4o", "messages": trimmed})
    assert problem is not None and "must be a response to a preceeding message with 'tool_calls'" in problem

    data = hooked(messages, budget)
    problem, tokens = _check_openai(data)
    assert problem is None and tokens <= budget
    assert data["messages"][0] == messages[0] and data["messages"][-1] == messages[-1]
    assert messages[1] in data["messages"]  # the task, verbatim


def test_trim_messages_does_not_count_trailing_tool_results() -> None:
    """#6505's fix sets trailing tool results aside and appends them after trimming, uncounted: over budget."""
    messages = long_chat(12)[:-1]
    trimmed = trim_messages(messages, model="gpt-4o", max_tokens=3_000)
    assert trimmed[-1] == messages[-1]
    assert _check_openai({"model": "gpt-4o", "messages": trimmed})[1] > 3_000

    data = hooked(messages, 3_000)
    problem, tokens = _check_openai(data)
    assert problem is None and tokens <= 3_000
    assert data["messages"][-2] == messages[-2]  # the newest call, answered by its (possibly cut) result
    assert data["messages"][-1]["tool_call_id"] == messages[-1]["tool_call_id"]


def test_trim_messages_returns_its_input_on_any_error() -> None:
    """A system prompt given as content parts makes trim_messages fail, and it returns the input, over budget."""
    messages = parallel_calls(6) + [{"role": "user", "content": "Now answer."}]
    messages[0] = {"role": "system", "content": [{"type": "text", "text": SYSTEM}]}
    trimmed = trim_messages(messages, model="gpt-4o", max_tokens=3_000)
    assert trimmed is messages
    assert _check_openai({"model": "gpt-4o", "messages": trimmed})[1] > 3_000

    data = hooked(messages, 3_000)
    problem, tokens = _check_openai(data)
    assert problem is None and tokens <= 3_000
    assert data["messages"][0] == messages[0]


# ----------------------------------------------------------------------------- conversations, in-process


def test_a_conversation_is_prepared_incrementally_and_a_header_names_it() -> None:
    hook = ContextHook(window=WINDOW, reserve=500)
    messages = long_chat(4)

    def call(messages: list[dict[str, Any]], session: str | None) -> dict[str, Any]:
        data: dict[str, Any] = {"model": "gpt-4o", "messages": json.loads(json.dumps(messages))}
        if session is not None:
            data["proxy_server_request"] = {"headers": {"X-AgentContext-Session": session}}
        return asyncio.run(hook.async_pre_call_hook(None, None, data, "acompletion"))

    call(messages, None)
    call(messages + [{"role": "assistant", "content": "ok"}], None)
    call(messages, "a")
    call(messages, "b")
    names = sorted(name for _engine, name in hook._conversations)
    assert names[:2] == ["chat:a", "chat:b"]
    # The two calls without a header: one conversation (same system prompt and first user message).
    assert len(names) == 3


def test_what_the_hook_did_to_a_request_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    # A request cut from 21 messages to 6 left no trace, and a client's broken history was repaired (a second
    # answer to one call taken out) without a word, where the docs promised it went out unchanged.
    hook = ContextHook(window=WINDOW, reserve=500)

    def call(messages: list[dict[str, Any]]) -> dict[str, Any]:
        data: dict[str, Any] = {"model": "gpt-4o", "messages": json.loads(json.dumps(messages))}
        return asyncio.run(hook.async_pre_call_hook(None, None, data, "acompletion"))

    call_a = {"id": "a", "type": "function", "function": {"name": "run", "arguments": "{}"}}
    broken = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [call_a]},
        {"role": "tool", "tool_call_id": "a", "content": "first"},
        {"role": "tool", "tool_call_id": "a", "content": "second"},
        {"role": "user", "content": "next"},
    ]
    with caplog.at_level(logging.INFO, logger="agentcontext.litellm"):
        call(broken)
        call(long_chat(4))
        assert caplog.records == [r for r in caplog.records if r.name == "agentcontext.litellm"]
        quiet = len(caplog.records)
        sent = call(long_chat(30))["messages"]
    warning, compacted = caplog.records[0], caplog.records[-1]
    assert warning.levelno == logging.WARNING and "its history was repaired" in warning.getMessage()
    assert "tool result for 'a' taken out of the prompt: it answers a call that was already answered" in (
        warning.getMessage()
    )
    assert quiet == 1  # a request that needed nothing logs nothing
    assert len(sent) < len(long_chat(30)) and compacted.levelno == logging.INFO
    assert re.search(
        r"chat:hash:\w+: [\d,]+ -> [\d,]+ tokens \(budget [\d,]+, level \w+\): .*summarized",
        compacted.getMessage(),
    )


@pytest.mark.parametrize("sessions", [False, True])
def test_a_reply_length_that_changes_between_requests_keeps_one_conversation(
    sessions: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each max_tokens above the default reserve got its own engine, and the conversation a state per engine:
    # a client alternating two values switched between lineages, and broke the cached prefix at every
    # request after the first compaction; with sessions, the session was closed and reopened at each change.
    def run(alternate: bool) -> tuple[list[int], ContextHook]:
        hook = ContextHook(
            window=WINDOW, sessions=f"sqlite:///{tmp_path / f's{alternate}.db'}" if sessions else None
        )
        sent = []
        for step in range(1, 15):
            data: dict[str, Any] = {
                "model": "gpt-4o",
                "messages": long_chat(step),
                "max_tokens": 1_700 - (100 * (step % 2) if alternate else 0),
                "proxy_server_request": {"headers": {"x-agentcontext-session": "conv"}},
            }
            sent.append(asyncio.run(hook.async_pre_call_hook(None, None, data, "acompletion"))["messages"])
        breaks = [
            i
            for i, (old, new) in enumerate(zip(sent, sent[1:], strict=False), 1)
            if new[: len(old) - 1] != old[:-1]
        ]
        return breaks, hook

    from agentcontext.integrations import litellm as hook_module

    opens: list[str] = []
    real_open = hook_module._SessionPlace.open
    monkeypatch.setattr(
        hook_module._SessionPlace, "open", lambda self, *a: opens.append(a[0]) or real_open(self, *a)
    )
    steady, _ = run(alternate=False)
    breaks, hook = run(alternate=True)
    assert len(hook._conversations) == 1 and len(hook._engines) == 2
    assert (
        steady and len(breaks) <= len(steady) + 1
    )  # the prefix breaks at compactions only, as with one length
    assert opens == (["chat:conv", "chat:conv"] if sessions else [])  # one open per run: never reopened
    hook.close()


def test_the_conversations_kept_are_bounded_in_memory_not_only_in_number() -> None:
    # 1,024 conversations were kept whatever their size: about 4 times each request body, 1.6 GB for
    # 420 kB histories, and a proxy serving long agent sessions could be killed for its memory.
    import gc
    import tracemalloc

    line = "some tool output line with a path /src/module/file.py:123 and a value 0xdeadbeef\n"

    def history(k: int) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": "You are an agent."},
            {"role": "user", "content": f"task {k}"},
        ]
        for i in range(100):
            call = {"id": f"c{k}_{i}", "type": "function", "function": {"name": "run", "arguments": "{}"}}
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": f"{k}/{i} " + line * 12})
        return messages

    cap = 4 * 1024 * 1024
    hook = ContextHook(window=400_000, reserve=16_000, max_conversation_bytes=cap, artifacts=False)
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for k in range(30):  # about 500 kB kept each: 15 MB without the bound
            data: dict[str, Any] = {"model": "gpt-5", "messages": history(k)}
            asyncio.run(hook.async_pre_call_hook(None, None, data, "acompletion"))
            del data
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert 1 <= len(hook._conversations) < 30
    assert held < 2 * cap, f"{held / 1e6:.1f} MB held for a {cap / 1e6:.1f} MB bound"
    assert hook._conversations.weight <= cap
    newest = [name for _model, name in hook._conversations]
    assert newest[-1] == _name_of(history(29))  # the most recent stays


def _name_of(messages: list[dict[str, Any]]) -> str:
    hook = ContextHook(window=400_000)
    return hook._name("chat", {"messages": messages})


def test_a_breakpoint_moving_off_the_first_message_keeps_the_conversation() -> None:
    # Cline and Roo Code put a cache breakpoint on their newest user messages: the first one has it in the
    # first request and not after. The chat route hashed it with its breakpoint, and split the conversation.
    hook = ContextHook(window=WINDOW, reserve=500)
    messages = long_chat(4)
    first = next(i for i, m in enumerate(messages) if m["role"] == "user")
    marked = json.loads(json.dumps(messages))
    marked[first]["content"] = [
        {"type": "text", "text": messages[first]["content"], "cache_control": {"type": "ephemeral"}}
    ]
    for request in (marked, messages + [{"role": "assistant", "content": "ok"}]):
        data: dict[str, Any] = {"model": "gpt-4o", "messages": json.loads(json.dumps(request))}
        asyncio.run(hook.async_pre_call_hook(None, None, data, "acompletion"))
    assert len(hook._conversations) == 1


def test_the_hook_fits_off_the_event_loop_one_request_of_a_conversation_at_a_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A first request of a long conversation (or a compaction) takes up to a second of CPU: it runs in a
    worker thread, so the proxy's event loop serves other requests meanwhile, and two requests of one
    conversation arriving together take turns on its state instead of both advancing it."""
    import threading
    import time

    from agentcontext import ContextEngine
    from agentcontext.formats.openai import to_messages
    from agentcontext.invariants import check_messages

    threads: list[int] = []
    inside = [0, 0]  # now, most at once
    real = ContextEngine.prepare

    def spy(self: ContextEngine, *args: Any, **kwargs: Any) -> Any:
        threads.append(threading.get_ident())
        inside[0] += 1
        inside[1] = max(inside)
        time.sleep(0.05)  # a long fit: the window in which a second request could overlap it
        try:
            return real(self, *args, **kwargs)
        finally:
            inside[0] -= 1

    monkeypatch.setattr(ContextEngine, "prepare", spy)
    hook = ContextHook(window=WINDOW, reserve=500)
    history = long_chat(4)
    later = history + [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "and then?"}]

    async def both() -> tuple[int, list[dict[str, Any]]]:
        requests = [{"model": "gpt-4o", "messages": json.loads(json.dumps(m))} for m in (history, later)]
        done = await asyncio.gather(
            *(hook.async_pre_call_hook(None, None, r, "acompletion") for r in requests)
        )
        return threading.get_ident(), list(done)

    loop_thread, done = asyncio.run(both())
    assert len(threads) == 2 and loop_thread not in threads
    assert inside[1] == 1  # one conversation: the second request waited for the first
    assert len(hook._conversations) == 1
    for request in done:
        assert check_messages(to_messages(request["messages"])) == []
    assert done[1]["messages"][-1] == {"role": "user", "content": "and then?"}


# ----------------------------------------------------------------------------- one-shot fits

BUDGET = WINDOW - WINDOW // 4
"""The hook's budget for the proxy's model groups: their window, less a quarter kept for the reply."""


def history_once(steps: int = 60) -> list[dict[str, Any]]:
    """A whole history sent in one request (about 9k tokens, two budgets) by a client that never compacts."""
    return long_chat(steps, ids="o", out=lambda step: f"step {step}\n" + OUTPUT_LINE * 12)


def test_the_proxy_fills_the_budget_when_a_request_asks_and_compacts_to_its_target_otherwise(
    proxy: Proxy, upstream: ProviderServer
) -> None:
    messages = history_once()
    assert _check_openai({"model": "gpt-5", "messages": messages})[1] > 2 * BUDGET
    sent: dict[str, Request] = {}
    asks: dict[str, tuple[dict[str, Any], dict[str, str]]] = {
        "default": ({}, {}),
        "header": ({}, {"x-agentcontext-fill": "1"}),
        "metadata": ({"metadata": {"agentcontext_fill": 0.9}}, {}),
        "bad": ({}, {"x-agentcontext-fill": "lots"}),
    }
    for name, (extra, headers) in asks.items():
        start = len(upstream.requests)
        body = {"model": "gpt-5", "messages": messages, **extra}
        reply = proxy.post(
            "/v1/chat/completions", body, **{"x-agentcontext-session": f"once-{name}"}, **headers
        )
        assert reply["choices"][0]["message"]["content"] == "The third step failed."
        (sent[name],) = sent_since(upstream, start)
        assert_fits([sent[name]])
        assert sent[name].latest_user_text() == "Now answer: which step failed?"
    assert sent["header"].tokens > 0.85 * BUDGET  # nearly the whole budget (counted by the provider)
    assert 0.8 * BUDGET < sent["metadata"].tokens <= 0.9 * BUDGET  # the share asked for
    assert sent["default"].tokens < 0.6 * BUDGET  # the hysteresis target
    # A value the hook cannot read: one warning line naming it, and the request fitted with the default.
    assert sent["bad"].tokens == sent["default"].tokens
    # On /v1/messages, where `metadata` is Anthropic's, the signal goes in LiteLLM's own `litellm_metadata`.
    for name, extra in (
        ("anthropic-default", {}),
        ("anthropic", {"litellm_metadata": {"agentcontext_fill": 1}}),
    ):
        start = len(upstream.requests)
        body = {"model": "claude-sonnet-4-5", **anthropic_once(), **extra}
        proxy.post(
            "/v1/messages", body, **{"anthropic-version": "2023-06-01", "x-agentcontext-session": name}
        )
        (sent[name],) = sent_since(upstream, start)
        assert_fits([sent[name]])
        assert "litellm_metadata" not in sent[name].body
    assert sent["anthropic"].tokens > 1.5 * sent["anthropic-default"].tokens
    lines = proxy.log_lines(
        "agentcontext: /chat/completions request: ignored x-agentcontext-fill header 'lots'"
    )
    assert len(lines) == 1 and "fitted with the hook's default fill=False" in lines[0]
    assert proxy.process.poll() is None


class Recording:
    """An engine factory for the hook (``engine=``) that keeps the report of every preparation."""

    def __init__(self) -> None:
        self.reports: list[Any] = []

    def __call__(self, spec: Any, window: int, reserve: int) -> Any:
        from agentcontext import ContextEngine

        reports = self.reports

        class Engine(ContextEngine):
            def prepare(self, *args: Any, **kwargs: Any) -> Any:
                prepared = super().prepare(*args, **kwargs)
                reports.append(prepared.report)
                return prepared

        return Engine(spec, window=window, reserve=reserve)


def fit_once(
    hook: ContextHook,
    *,
    call_type: str = "acompletion",
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    data: dict[str, Any] = {"model": "gpt-4o", "messages": history_once(), **extra}
    if headers is not None:
        data["proxy_server_request"] = {"headers": headers}
    return asyncio.run(hook.async_pre_call_hook(None, None, data, call_type))


@pytest.mark.parametrize("sessions", [False, True])
def test_the_hook_fills_the_budget_by_default_or_per_request_and_its_report_says_so(
    sessions: bool, tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    where = tmp_path / "sessions" if sessions else None
    recording = Recording()
    hook = ContextHook(window=WINDOW, reserve=WINDOW // 4, engine=recording, sessions=where)
    filling = ContextHook(window=WINDOW, reserve=WINDOW // 4, engine=recording, sessions=where, fill=True)
    asks: list[tuple[ContextHook, dict[str, Any]]] = [
        (hook, {}),  # the default: hysteresis
        (filling, {}),  # the hook's default: a one-shot fit
        (hook, {"headers": {"X-AgentContext-Fill": "true"}}),
        (hook, {"headers": {"x-agentcontext-fill": "0.9"}}),
        (hook, {"metadata": {"agentcontext_fill": True}}),
        (filling, {"headers": {"x-agentcontext-fill": "0"}}),  # a request opting out
        (
            filling,
            {"metadata": {"agentcontext_fill": 0}, "headers": {"x-agentcontext-fill": "0.9"}},
        ),  # header wins
        (hook, {"headers": {"x-agentcontext-fill": "1.5"}}),  # refused: the default, and one warning
        (filling, {"metadata": {"agentcontext_fill": "lots"}}),
    ]
    with caplog.at_level(logging.WARNING, logger="agentcontext.litellm"):
        for n, (h, ask) in enumerate(asks):
            headers = {**ask.get("headers", {}), "x-agentcontext-session": f"s{n}"}
            data = fit_once(h, headers=headers, **{k: v for k, v in ask.items() if k != "headers"})
            problem, tokens = _check_openai(data)
            assert problem is None and tokens <= BUDGET
    assert len(recording.reports) == len(asks)
    fills = [r.fill for r in recording.reports]
    assert fills == [False, True, True, True, True, False, True, False, True]
    for report in recording.reports:
        assert report.tokens_before > 2 * report.budget
        if report.fill:
            assert any(n.startswith("one-shot fit: filled up to") for n in report.notes)
            assert report.tokens_after > (0.8 if "90%" in report.notes[0] else 0.85) * report.budget
        else:
            assert report.tokens_after < 0.6 * report.budget
    warned = [r.getMessage() for r in caplog.records if r.name == "agentcontext.litellm"]
    assert warned == [
        "agentcontext: /chat/completions request: ignored x-agentcontext-fill header '1.5' (expected 1, 0 or a "
        "share of the budget within (0, 1) such as 0.9); fitted with the hook's default fill=False",
        "agentcontext: /chat/completions request: ignored metadata['agentcontext_fill'] 'lots' (expected 1, 0 or "
        "a share of the budget within (0, 1) such as 0.9); fitted with the hook's default fill=True",
    ]
    hook.close()
    filling.close()


def anthropic_once() -> dict[str, Any]:
    """`history_once` as a /v1/messages body (its system prompt apart)."""
    system, wire = anthropic.from_messages(oai.to_messages(history_once()))
    return {"system": system, "messages": wire, "max_tokens": 500}


def test_the_fill_signal_is_read_on_every_route() -> None:
    """Anthropic's and the Responses API's ``metadata`` are the provider's: LiteLLM's is ``litellm_metadata``."""
    recording = Recording()
    hook = ContextHook(window=WINDOW, reserve=WINDOW // 4, engine=recording)
    canonical = oai.to_messages(history_once())
    requests = [
        ("anthropic_messages", anthropic_once()),
        ("aresponses", {"input": responses.from_messages(canonical)}),
    ]
    for call_type, body in requests:
        for ask in (
            {"litellm_metadata": {"agentcontext_fill": "yes"}},
            {"metadata": {"agentcontext_fill": "yes"}},  # the provider's field: not read, sent upstream as is
        ):
            data = {"model": "gpt-4o", **json.loads(json.dumps(body)), **ask}
            asyncio.run(hook.async_pre_call_hook(None, None, data, call_type))
    assert [r.fill for r in recording.reports] == [True, False, True, False]


def test_a_bad_fill_for_the_hook_is_refused_by_name() -> None:
    for bad in (1.5, 0, "yes", None):
        with pytest.raises(ConfigError, match=r"fill must be False .* got " + re.escape(repr(bad))):
            ContextHook(fill=bad)  # type: ignore[arg-type]
    assert ContextHook(fill=0.9).fill == 0.9


# ----------------------------------------------------------------------------- full tool outputs, in-process


def test_the_hooks_cut_outputs_are_kept_in_one_bounded_store_and_the_marker_promises_no_recall() -> None:
    """A proxy runs for weeks: every engine of the hook kept every output it cut, for the process's life
    (50 requests: 5.7 MB), and told the model to pass the reference to a recall tool it does not have."""
    from agentcontext.artifacts import DEFAULT_MAX_BYTES, FileArtifactStore, MemoryArtifactStore

    hook = ContextHook(window=WINDOW, reserve=500)
    store = hook.artifacts
    assert isinstance(store, MemoryArtifactStore) and store.max_bytes == DEFAULT_MAX_BYTES

    def request(hook: ContextHook, i: int, max_tokens: int) -> dict[str, Any]:
        call = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
        data: dict[str, Any] = {
            "model": "gpt-4o",
            "max_tokens": max_tokens,  # another reserve: another engine of the hook
            "messages": [
                {"role": "user", "content": f"conversation {i}"},
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "c1", "content": f"run {i}\n" + OUTPUT_LINE * 2_000},
            ],
        }
        return asyncio.run(hook.async_pre_call_hook(None, None, data, "acompletion"))

    markers = []
    for i in range(4):
        cut = request(hook, i, 500 + 100 * (i % 2))["messages"][-1]["content"]
        (marker,) = [line for line in cut.splitlines() if line.startswith("[... ")]
        markers.append(marker)
    assert len(hook._engines) == 2 and len(store) == 4  # one store for both engines
    for marker in markers:
        ref = "artifact:sha256:" + marker.split("artifact:sha256:")[1][:64]
        assert marker.endswith(f"kept outside the conversation under {ref}, until the store evicts it ...]")
        assert "recall" not in marker and ref in store

    smaller = MemoryArtifactStore(max_bytes=300_000)
    bounded = ContextHook(window=WINDOW, reserve=500, artifacts=smaller)
    for i in range(6):  # ~110 KB each
        request(bounded, i, 500)
    assert bounded.artifacts is smaller and smaller.total_bytes <= 300_000 and smaller.evictions == 4

    keeping_none = ContextHook(window=WINDOW, reserve=500, artifacts=False)
    assert keeping_none.artifacts is None
    assert "the full output was not kept ...]" in request(keeping_none, 0, 500)["messages"][-1]["content"]
    with pytest.raises(ConfigError, match="artifacts must be an ArtifactStore"):
        ContextHook(artifacts="/tmp/outputs")  # type: ignore[arg-type]
    assert isinstance(ContextHook(artifacts=FileArtifactStore("unused")).artifacts, FileArtifactStore)

    # An engine built with a truncator of your own keeps its store, unless the hook was given one.
    import tempfile

    from agentcontext import ContextEngine
    from agentcontext.truncation import ObservationTruncator

    directory = tempfile.mkdtemp()
    yours = FileArtifactStore(directory)

    def your_engine(spec: Any, window: int, reserve: int) -> ContextEngine:
        truncator = ObservationTruncator(max_bytes=8_192, store=yours)
        return ContextEngine(model=spec, window=window, reserve=reserve, truncator=truncator)

    own = ContextHook(window=WINDOW, reserve=500, engine=your_engine)
    cut = request(own, 0, 500)["messages"][-1]["content"]
    ref = "artifact:sha256:" + cut.split("artifact:sha256:")[1][:64]
    assert ref in yours and ref not in own.artifacts  # type: ignore[operator]
