"""The README's code runs: its agent loop with the real OpenAI SDK against a loopback server, and its session tour."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

import agentcontext as ac
from llm_servers import LLMServer, Reply, openai_ok

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)


def tool_call(call_id: str) -> Reply:
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": "ls", "arguments": '{"path": "."}'}}
        ],
    }
    return Reply(
        body={
            "id": "x",
            "object": "chat.completion",
            "created": 0,
            "model": "gpt-4o",
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 50, "completion_tokens": 5, "total_tokens": 55},
        }
    )


def test_readme_agent_loop_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("openai")
    loop = next(b for b in python_blocks() if "while True" in b)
    ran: list[str] = []

    def run_tool(call: object) -> str:
        ran.append(call.name)  # type: ignore[attr-defined]
        return "README.md\nsrc/"

    tools = [
        {"type": "function", "function": {"name": "ls", "parameters": {"type": "object", "properties": {}}}}
    ]
    with LLMServer("openai") as server:
        server.script(tool_call("c1"), tool_call("c2"), openai_ok("Two files."))
        monkeypatch.setenv("OPENAI_BASE_URL", server.url)
        monkeypatch.setenv("OPENAI_API_KEY", "test-key")
        scope: dict[str, object] = {
            "SYSTEM": "You are terse.",
            "TASK": "List the files.",
            "TOOLS": tools,
            "run_tool": run_tool,
        }
        try:
            exec(compile(loop, "README.md", "exec"), scope)
        finally:
            client = scope.get("client")
            if client is not None:
                client.close()  # type: ignore[attr-defined]  # the README's loop leaves its SDK client open
        sent = server.requests[-1].body["messages"]
    history = scope["history"]
    assert ran == ["ls", "ls"]
    assert [m.role for m in history] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
    ]  # type: ignore[attr-defined]
    assert history[-1].text == "Two files."  # type: ignore[index]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool", "assistant", "tool"]
    assert json.dumps(sent)  # what the SDK sent is plain JSON


def test_readme_session_tour_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tour = next(b for b in python_blocks() if "session.checkpoint()" in b)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    scope: dict[str, object] = {
        "ac": ac,
        "TASK": "Fix the parser.",
        "usage": SimpleNamespace(prompt_tokens=42),
    }
    first = ac.Message(role="user", content="Fix the parser.")
    scope["message_id"] = first.id
    # The tour recalls a message it appended: run it with that message's id.
    code = tour.replace('session.append(ac.Message(role="user", content=TASK))', "session.append(first)")
    scope["first"] = first
    exec(compile(code, "README.md", "exec"), scope)
    session = scope["session"]
    try:
        assert (tmp_path / "runs" / "task-42.jsonl").exists()
        assert session.recall("message:" + first.id)  # type: ignore[attr-defined]
    finally:
        session.close()  # type: ignore[attr-defined]


# Pages whose every Python block a test runs as written (tests/test_integration_langchain.py,
# test_integrations_pydantic_ai.py, test_docs_openai_agents.py, test_session_databases.py; litellm.md's is
# the hook file the proxy in test_integration_litellm.py loads, checked to be the same).
RUN_DOCS = ["langchain.md", "pydantic_ai.md", "openai_agents.md", "sessions-on-databases.md", "litellm.md"]


def test_every_other_readme_snippet_is_a_slice_of_a_docs_page_whose_code_runs() -> None:
    """The README's short framework snippets are cut from code that runs, so they cannot rot unnoticed."""
    docs = README.parent / "docs"
    runs = [
        b
        for page in RUN_DOCS
        for b in re.findall(r"```python\n(.*?)```", (docs / page).read_text(), flags=re.S)
    ]
    run_here = [b for b in python_blocks() if "while True" in b or "session.checkpoint()" in b]
    assert len(run_here) == 2
    for block in python_blocks():
        if block in run_here:
            continue
        assert any(block in code for code in runs), (
            f"README snippet not found verbatim in {RUN_DOCS}:\n{block}"
        )


def test_the_readme_proxy_config_is_a_slice_of_the_config_the_proxy_tests_load() -> None:
    config = (README.parent / "examples" / "litellm" / "config.yaml").read_text(encoding="utf-8")
    blocks = re.findall(r"```yaml\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)
    assert blocks
    for block in blocks:
        assert block in config, f"README yaml not found verbatim in examples/litellm/config.yaml:\n{block}"
