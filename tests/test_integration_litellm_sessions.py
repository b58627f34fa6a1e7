"""Two LiteLLM proxies, one PostgreSQL: the hook keeps each conversation in a `Session` the proxies share.

Two real ``litellm`` proxy processes are started once for the module from the
documented files (``examples/litellm/``) plus the documented ``sessions``
lines (``docs/litellm.md``), both on the same PostgreSQL schema, in front of
the loopback `providers.ProviderServer`. A conversation whose requests
alternate between them is sent upstream exactly as one proxy alone sends it:
every request fits and is valid, between compactions each request extends the
previous one (the provider's prompt cache keeps hitting), and the session log
holds every client message once, in order, with the compaction records, so a
compacted message is recallable by id. A client that rewrites its own history
(as Claude Code and Codex do when they compact) has the differing tail taken
back by a recorded rewind.

In-process beside them (no proxy): a client that keeps part of a compacted span
and changes the rest (the compaction is undone, then the tail rewound), JSON
Lines files in a directory, the environment variable, and a store that does
not answer (the request is fitted in memory, with one log line).

Skipped with a reason when PostgreSQL is not running, unless
``AGENTCONTEXT_DB_TESTS=required``.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import re
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentcontext.exceptions import ConfigError, ConversionWarning
from agentcontext.formats import anthropic
from agentcontext.formats import openai as oai
from agentcontext.integrations.litellm import SESSIONS_ENV, ContextHook
from agentcontext.messages import Message
from agentcontext.session import CompactionRecord, MessageRecord, RewindRecord, Session, UndoRecord
from agentcontext.session.stores import open_database
from db_servers import database, with_session
from litellm_proxy import ROOT, Proxy, documented_config, free_port, start_proxies
from providers import ProviderServer, Reply, Request

WINDOW = 6_000
SYSTEM = "You are a careful engineer. Use the run tool, then answer."
OUTPUT_LINE = "line of output for the step: lorem ipsum dolor sit amet\n"
STEPS = 14


def output(step: int) -> str:
    """A tool output of about 600 tokens: ten steps overflow the window."""
    return f"step {step} output\n" + OUTPUT_LINE * 60


def policy(request: Request) -> Reply:
    return Reply(text="ok")


def documented_sessions_config() -> dict[str, Any]:
    """The config.yaml lines docs/litellm.md gives for sessions (the YAML block that sets AGENTCONTEXT_SESSIONS)."""
    doc = (ROOT / "docs" / "litellm.md").read_text()
    blocks = [b for b in re.findall(r"```yaml\n(.*?)```", doc, flags=re.S) if SESSIONS_ENV in b]
    assert len(blocks) == 1, "docs/litellm.md must show the sessions lines of config.yaml once"
    config = yaml.safe_load(blocks[0])
    assert isinstance(config["environment_variables"][SESSIONS_ENV], str)
    return dict(config)


# ----------------------------------------------------------------------------- two proxies, one database


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    with database("postgres") as url:
        yield url


@pytest.fixture(scope="module")
def upstream() -> Iterator[ProviderServer]:
    with ProviderServer(window=WINDOW, policy=policy, reasoning=True) as server:
        yield server


@pytest.fixture(scope="module")
def proxies(
    pg_url: str, upstream: ProviderServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Proxy, Proxy]]:
    config = {**documented_config(upstream, WINDOW), **documented_sessions_config()}
    config["environment_variables"] = {SESSIONS_ENV: pg_url}  # the documented key, at the test's schema
    directory = tmp_path_factory.mktemp("litellm-sessions")
    with start_proxies([(config, directory / "a"), (config, directory / "b")]) as (a, b):
        yield a, b


def common_prefix(a: list[Any], b: list[Any]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def prefix_breaks(requests: list[list[Any]]) -> int:
    """How many requests do not extend the one before (each costs the provider's prompt cache)."""
    return sum(common_prefix(old, new) < len(old) for old, new in zip(requests, requests[1:], strict=False))


def scoped(url: str, name: str) -> str:
    """The session of the conversation ``name`` (route and header value): the proxies scope it to the key
    that sent it (``chat:u<digest>:<header>``), so that no other key can reach it by the same header."""
    database_ = open_database(url)
    try:
        found = [
            s.session_id for s in database_.sessions() if s.session_id.endswith(":" + name.split(":", 1)[1])
        ]
    finally:
        database_.close()
    assert len(found) == 1 and found[0].startswith(name.split(":", 1)[0] + ":u"), found
    return found[0]


def session_log(url: str, name: str) -> tuple[list[str], list[object]]:
    """The ids of the messages a session logged, in order, and all its records."""
    with Session.open(with_session(url, name), read_only=True) as session:
        records = list(session.records())
    return [r.message.id for r in records if isinstance(r, MessageRecord)], records


def assert_valid_and_fits(requests: list[Request]) -> None:
    assert requests
    for r in requests:
        assert r.error is None, r.error
        assert r.tokens <= WINDOW


# ----------------------------------------------------------------------------- chat


def chat(steps: int, tag: str = "") -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": f"Find which step fails.{tag}"},
    ]
    for step in range(steps):
        call = {"id": f"call_{step}", "type": "function", "function": {"name": "run", "arguments": "{}"}}
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": call["id"], "content": output(step)})
    return messages


def send_chat(
    upstream: ProviderServer, order: list[Proxy], conversations: list[list[dict[str, Any]]], name: str
) -> list[Request]:
    start = len(upstream.requests)
    for i, messages in enumerate(conversations):
        body = {"model": "gpt-5", "messages": messages, "max_tokens": 400}
        order[i % len(order)].post("/v1/chat/completions", body, **{"x-agentcontext-session": name})
    return upstream.requests[start:]


def test_two_proxies_send_one_chat_conversation_as_one_proxy_would(
    proxies: tuple[Proxy, Proxy], upstream: ProviderServer, pg_url: str
) -> None:
    a, b = proxies
    steps = [chat(step) for step in range(1, STEPS + 1)]
    name = f"chat-{uuid.uuid4().hex[:8]}"
    alternating = send_chat(upstream, [a, b], steps, name)
    alone = send_chat(upstream, [a], steps, name + "-alone")

    assert_valid_and_fits(alternating)
    assert [r.messages for r in alternating] == [r.messages for r in alone]
    ids, records = session_log(pg_url, scoped(pg_url, f"chat:{name}"))
    compactions = [r for r in records if isinstance(r, CompactionRecord) and r.compacted]
    assert compactions, "the conversation outgrew the window: the session must have compacted it"
    # Cache-friendly: a request that does not extend the one before is one a compaction record explains.
    assert prefix_breaks([r.messages for r in alternating]) <= len(compactions)
    assert alternating[-1].messages[0] == {"role": "system", "content": SYSTEM}
    assert alternating[-1].messages[-1] == steps[-1][-1]

    # Every client message logged once, in order, whichever proxy served it.
    assert ids == [m.id for m in oai.to_messages(steps[-1])]
    # A message compaction took out of the prompt is still in the log, whole.
    sent = json.dumps(alternating[-1].messages)
    gone = next(m for m in oai.to_messages(steps[-1]) if m.role == "tool" and m.text not in sent)
    with Session.open(with_session(pg_url, scoped(pg_url, f"chat:{name}")), read_only=True) as session:
        assert session.recall(f"message:{gone.id}") == gone.text
    # Both proxies served it: each logged what its requests brought.
    assert a.process.poll() is None and b.process.poll() is None


def test_a_client_that_rewrites_its_history_is_rewound_not_lost(
    proxies: tuple[Proxy, Proxy], upstream: ProviderServer, pg_url: str
) -> None:
    a, b = proxies
    name = f"rewrite-{uuid.uuid4().hex[:8]}"
    first = [chat(step) for step in range(1, 11)]
    # The user edits the newest step: its call and output replaced by another one.
    edited = chat(9) + [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_x", "type": "function", "function": {"name": "run", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "call_x", "content": "edited step output"},
    ]
    # Then the client compacts its own history, as Claude Code does: a summary replaces all but the system.
    summary = {"role": "user", "content": "Summary of the work so far: steps 0 to 9 passed; step x is new."}
    compacted = [chat(0)[0], summary]
    after = [compacted + chat(step)[2:] for step in (1, 2)]
    requests = send_chat(upstream, [a, b], [*first, edited, compacted, *after], name)

    assert_valid_and_fits(requests)
    assert requests[10].messages[-1]["content"] == "edited step output"
    # Small again: sent as the client wrote it (LiteLLM itself leaves out a null "content").
    assert requests[-1].messages == [{k: v for k, v in m.items() if v is not None} for m in after[-1]]
    ids, records = session_log(pg_url, scoped(pg_url, f"chat:{name}"))
    rewinds = [r for r in records if isinstance(r, RewindRecord)]
    assert [r.length for r in rewinds][-1] == 1  # back to the system prompt, then the client's summary
    assert len(rewinds) == 2
    # Every message the client ever sent is logged once: the original history, the edit, the new start.
    sent = [oai.to_messages(m) for m in (first[-1], edited, after[-1])]
    expected = list(dict.fromkeys(m.id for conversation in sent for m in conversation))
    assert ids == expected
    with Session.open(with_session(pg_url, scoped(pg_url, f"chat:{name}")), read_only=True) as session:
        assert [m.id for m in session.view] == [m.id for m in sent[-1]]
        # What the rewinds took back is still recallable.
        assert session.recall(f"message:{sent[0][-1].id}") == output(9)


# ----------------------------------------------------------------------------- Claude Code


def bash_tool() -> list[dict[str, Any]]:
    return [
        {
            "name": "Bash",
            "description": "Executes a bash command.",
            "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}},
        }
    ]


def claude_code(steps: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Claude Code's request after ``steps`` tool rounds: thinking blocks, the breakpoint on the newest message."""
    system = [
        {"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude."},
        {"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}},
    ]
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": [{"type": "text", "text": "Find which step fails (shared)."}]}
    ]
    for step in range(steps):
        thinking = {"type": "thinking", "thinking": "Run the next step.", "signature": f"sig{step}"}
        use = {
            "type": "tool_use",
            "id": f"toolu_{step}",
            "name": "Bash",
            "input": {"command": f"step {step}"},
        }
        messages.append({"role": "assistant", "content": [thinking, use]})
        messages.append(
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": use["id"], "content": output(step)}],
            }
        )
    clean = copy.deepcopy(messages)
    messages[-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}
    body = {"model": "claude-sonnet-4-5", "system": system, "messages": messages, "tools": bash_tool()}
    return clean, {**body, "max_tokens": 1000}


def sans_breakpoints(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: sans_breakpoints(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [sans_breakpoints(v) for v in value]
    return value


def test_two_proxies_serve_claude_code_messages_as_one_proxy_would(
    proxies: tuple[Proxy, Proxy], upstream: ProviderServer, pg_url: str
) -> None:
    a, b = proxies
    bodies = [claude_code(step)[1] for step in range(STEPS + 1)]
    head = {"anthropic-version": "2023-06-01"}
    start = len(upstream.requests)
    for i, body in enumerate(bodies):  # no header, as Claude Code: the conversation is named by its start
        (a, b)[i % 2].post("/v1/messages", body, **head)
    alternating = upstream.requests[start:]
    start = len(upstream.requests)
    solo = f"cc-alone-{uuid.uuid4().hex[:8]}"
    for body in bodies:
        a.post("/v1/messages", body, **head, **{"x-agentcontext-session": solo})
    alone = upstream.requests[start:]

    assert_valid_and_fits(alternating)
    assert [r.body["messages"] for r in alternating] == [r.body["messages"] for r in alone]
    for r, body in zip(alternating, bodies, strict=True):
        assert r.body["system"] == body["system"]  # its cache_control included
        assert r.messages[-1] == body["messages"][-1]  # the newest turn as sent, breakpoint included
        assert "Find which step fails (shared)." in r.texts()
    assert len(alternating[-1].messages) < len(bodies[-1]["messages"])
    # Claude Code's breakpoint moves every request; the rest of the prompt extends the previous one.
    database_ = open_database(pg_url)
    try:
        names = [
            s.session_id
            for s in database_.sessions()
            if s.session_id.startswith("anthropic:u") and ":hash:" in s.session_id
        ]
    finally:
        database_.close()
    assert len(names) == 1, names  # one conversation, whichever proxy served it
    ids, records = session_log(pg_url, names[0])
    compactions = [r for r in records if isinstance(r, CompactionRecord) and r.compacted]
    assert compactions
    assert prefix_breaks([sans_breakpoints(r.messages) for r in alternating]) <= len(compactions)
    clean, last = claude_code(STEPS)
    with warnings.catch_warnings():  # thinking blocks, cache_control: kept as sent, as the hook keeps them
        warnings.simplefilter("ignore", ConversionWarning)
        expected = anthropic.to_messages(clean, system=last["system"], unknown="keep")
    assert ids == [m.id for m in expected]


# ----------------------------------------------------------------------------- in-process


def hook_call(hook: ContextHook, messages: list[dict[str, Any]], name: str = "c") -> dict[str, Any]:
    data: dict[str, Any] = {
        "model": "gpt-4o",
        "messages": copy.deepcopy(messages),
        "proxy_server_request": {"headers": {"x-agentcontext-session": name}},
    }
    return asyncio.run(hook.async_pre_call_hook(None, None, data, "acompletion"))


def test_a_client_that_keeps_part_of_a_compacted_span_has_the_compaction_undone(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'sessions.db'}"
    hook = ContextHook(window=WINDOW, reserve=500, sessions=url)
    for step in range(1, 13):
        hook_call(hook, chat(step))
    with Session.open(with_session(url, "chat:c"), read_only=True) as session:
        assert any(r.compacted for r in session.compactions)
        summarized = [m for m in oai.to_messages(chat(12)) if m.id not in {x.id for x in session.view}]
    assert len(summarized) > 4
    # The client keeps its first three steps and replaces everything after them.
    kept = chat(3)
    rewritten = kept + [{"role": "user", "content": "Start over from step 3, differently."}]
    data = hook_call(hook, rewritten)
    assert data["messages"] == rewritten  # small again: sent as written
    ids, records = [], []
    with Session.open(with_session(url, "chat:c"), read_only=True) as session:
        records = list(session.records())
        ids = [r.message.id for r in records if isinstance(r, MessageRecord)]
        assert [m.id for m in session.view] == [m.id for m in oai.to_messages(rewritten)]
    assert any(isinstance(r, UndoRecord) for r in records)
    assert any(isinstance(r, RewindRecord) for r in records)
    assert len(ids) == len(set(ids))  # nothing logged twice
    assert ids[: len(chat(12))] == [m.id for m in oai.to_messages(chat(12))]


def test_a_client_that_goes_back_before_a_summary_gets_no_summary_of_what_it_took_back(
    tmp_path: Path,
) -> None:
    # A chat UI whose user edits an early message after a compaction: the summary (placed before the kept
    # first request) stood for the abandoned branch, and was sent with the new one.
    url = f"sqlite:///{tmp_path / 'sessions.db'}"
    hook = ContextHook(window=WINDOW, reserve=500, sessions=url)
    for step in range(1, 13):
        hook_call(hook, chat(step))
    with Session.open(with_session(url, "chat:c"), read_only=True) as session:
        assert any(r.compacted for r in session.compactions)
    edited = chat(0) + [
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "Forget that; do something else."},
    ]
    data = hook_call(hook, edited)
    assert data["messages"] == edited  # no summary of the steps the client took back
    with Session.open(with_session(url, "chat:c"), read_only=True) as session:
        assert [m.id for m in session.view] == [m.id for m in oai.to_messages(edited)]
        ids = [r.message.id for r in session.records() if isinstance(r, MessageRecord)]
    assert ids[: len(chat(12))] == [m.id for m in oai.to_messages(chat(12))]  # the log keeps the branch


def test_two_callers_whose_chats_open_alike_are_two_conversations(tmp_path: Path) -> None:
    # Same system prompt, same first message, no header: one conversation for every caller, so one user's
    # summary went out with the other's requests (and each request re-prepared the other's from scratch).
    from litellm.proxy._types import UserAPIKeyAuth

    url = f"sqlite:///{tmp_path / 'sessions.db'}"
    hook = ContextHook(window=WINDOW, reserve=500, sessions=url)
    callers = {"alice": UserAPIKeyAuth(api_key="sk-alice"), "bob": UserAPIKeyAuth(api_key="sk-bob")}
    sent: dict[str, list[list[dict[str, Any]]]] = {"alice": [], "bob": []}
    for step in range(1, 12):
        for who, auth in callers.items():
            messages = chat(step, tag="")
            for m in messages:
                if m["role"] == "tool":
                    m["content"] = m["content"].replace("step", f"{who}-step")
            data = {"model": "gpt-4o", "messages": messages}
            sent[who].append(
                asyncio.run(hook.async_pre_call_hook(auth, None, data, "acompletion"))["messages"]
            )
    assert not any("bob-step" in json.dumps(r) for r in sent["alice"])
    assert not any("alice-step" in json.dumps(r) for r in sent["bob"])
    database_ = open_database(url)
    try:
        names = sorted(s.session_id for s in database_.sessions())
    finally:
        database_.close()
    assert len(names) == 2 and all(n.startswith("chat:u") for n in names), names
    for name in names:
        with Session.open(with_session(url, name), read_only=True) as session:
            assert not any(isinstance(r, RewindRecord) for r in session.records())  # neither undid the other
    # An end user named in the request (OpenAI's `user`) is a conversation of its own under one key.
    data = {"model": "gpt-4o", "messages": chat(1), "user": "carol"}
    asyncio.run(hook.async_pre_call_hook(callers["alice"], None, data, "acompletion"))
    database_ = open_database(url)
    try:
        assert len(database_.sessions()) == 3
    finally:
        database_.close()


def test_sessions_in_a_directory_of_jsonl_files_and_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SESSIONS_ENV, str(tmp_path / "sessions"))
    hook = ContextHook(window=WINDOW, reserve=500)
    for step in range(1, 12):
        data = hook_call(hook, chat(step), name="run/42")
    assert len(data["messages"]) < len(chat(11))
    (path,) = (tmp_path / "sessions").glob("*.jsonl")  # one conversation, one file (a header names none)
    assert path.name.startswith("sha256-")  # "chat:run/42" is no file name: its hash is
    hook.close()
    with Session.open(path, read_only=True) as session:
        assert [r.message.id for r in session.records() if isinstance(r, MessageRecord)] == [
            m.id for m in oai.to_messages(chat(11))
        ]


def test_a_store_that_does_not_answer_leaves_the_request_fitted_in_memory_with_one_log_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    down = f"postgresql://postgres@127.0.0.1:{free_port()}/test"  # nothing listens there
    hook = ContextHook(window=WINDOW, reserve=500, sessions=down)
    baseline = ContextHook(window=WINDOW, reserve=500)
    with caplog.at_level(logging.WARNING, logger="agentcontext.litellm"):
        for step in (11, 12):
            data = hook_call(hook, chat(step))
            assert data["messages"] == hook_call(baseline, chat(step))["messages"]
    lines = [r.getMessage() for r in caplog.records if r.name == "agentcontext.litellm"]
    assert len(lines) == 1, lines  # the next request within the retry time does not knock again
    assert "StoreUnavailableError" in lines[0] and "fitted in memory" in lines[0]


def test_bad_sessions_options_are_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="names one session"):
        ContextHook(sessions="postgresql://postgres@127.0.0.1/test?session=one")
    with pytest.raises(ConfigError, match="unknown session location scheme"):
        ContextHook(sessions="mysql://db/test")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="is a file"):
        ContextHook(sessions=tmp_path / "file")
    with pytest.raises(ConfigError, match="max_sessions"):
        ContextHook(max_sessions=0)


@pytest.mark.parametrize("route", ["chat", "responses"])
@pytest.mark.parametrize("kind", ["postgres", "redis"])
def test_two_hooks_on_one_database_send_what_one_hook_sends(kind: str, route: str) -> None:
    """The two-proxy promise on both shared stores and both OpenAI routes, in-process (one hook per proxy):
    requests of one conversation alternating between two hooks on one database come out exactly as from one
    hook, and every client message is logged once, in order."""
    from agentcontext.formats import responses

    def request(hook: ContextHook, messages: list[dict[str, Any]], name: str) -> object:
        headers = {"headers": {"x-agentcontext-session": name}}
        if route == "chat":
            data: dict[str, Any] = {"model": "gpt-4o", "messages": copy.deepcopy(messages)}
            call_type = "acompletion"
        else:
            items = responses.from_messages(oai.to_messages(messages))
            data = {"model": "gpt-4o", "input": json.loads(json.dumps(items))}
            call_type = "aresponses"
        data["proxy_server_request"] = headers
        done = asyncio.run(hook.async_pre_call_hook(None, None, data, call_type))
        return done["messages"] if route == "chat" else done["input"]

    steps = [chat(step) for step in range(1, STEPS + 1)]
    with database(kind) as url:
        hooks = [ContextHook(window=WINDOW, reserve=500, sessions=url) for _ in range(3)]
        try:
            name = f"c-{uuid.uuid4().hex[:8]}"
            alternating = [request(hooks[i % 2], s, name) for i, s in enumerate(steps)]
            alone = [request(hooks[2], s, name + "-alone") for s in steps]
            assert alternating == alone
            assert len(alternating[-1]) < len(steps[-1])  # it outgrew the window and was compacted
            _, records = session_log(url, f"{route}:{name}")
            assert any(isinstance(r, CompactionRecord) and r.compacted for r in records)

            def shape(m: Message) -> tuple[object, ...]:
                calls = tuple((c.id, c.name, c.arguments) for c in m.tool_calls)
                return (m.role, m.text, m.tool_call_id, calls)

            logged = [r.message for r in records if isinstance(r, MessageRecord)]
            assert [shape(m) for m in logged] == [shape(m) for m in oai.to_messages(steps[-1])]
        finally:
            for hook in hooks:
                hook.close()
