"""The runnable examples work: the agent loop against a real loopback OpenAI-protocol server."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

from agentcontext.session import Session
from llm_servers import LLMServer, Reply, openai_ok

ROOT = Path(__file__).resolve().parents[1]


def load_example(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def tool_call_reply(call_id: str, name: str, arguments: dict[str, str]) -> Reply:
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
        ],
    }
    body = {
        "id": "x",
        "object": "chat.completion",
        "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
        "usage": {"prompt_tokens": 120, "completion_tokens": 9, "total_tokens": 129},
    }
    return Reply(body=body)


def test_agent_loop_runs_tools_persists_the_session_and_resumes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    agent = load_example("agent_loop")
    (tmp_path / "notes.txt").write_text("the answer is 42\n", encoding="utf-8")
    session_path = tmp_path / "runs" / "demo.jsonl"
    with LLMServer("openai") as server:
        server.script(
            tool_call_reply("c1", "read_file", {"path": "notes.txt"}), openai_ok("The notes say 42.")
        )
        code = agent.main(
            [
                "What do the notes say?",
                "--model",
                "gpt-4o-mini",
                "--base-url",
                server.url,
                "--root",
                str(tmp_path),
                "--session",
                str(session_path),
            ]
        )
        assert code == 0
        assert "42" in capsys.readouterr().out
        second = server.requests[-1].body
        tool_messages = [m for m in second["messages"] if m["role"] == "tool"]
        assert tool_messages == [{"role": "tool", "tool_call_id": "c1", "content": "the answer is 42\n"}]
        assert any(t["function"]["name"] == "recall" for t in second["tools"])
        # The run is in the log; a second run resumes the same conversation.
        server.script(openai_ok("Still 42."))
        assert (
            agent.main(
                [
                    "And now?",
                    "--base-url",
                    server.url,
                    "--root",
                    str(tmp_path),
                    "--session",
                    str(session_path),
                ]
            )
            == 0
        )
        assert [m["role"] for m in server.requests[-1].body["messages"]] == [
            "system",
            "user",
            "assistant",
            "tool",
            "assistant",
            "user",
        ]
    session = Session.open(session_path, read_only=True, create=False)
    try:
        assert [m.role for m in session.view][-1] == "assistant"
        assert session.usage_totals.calls == 3
        assert session.checkpoints
    finally:
        session.close()


def test_agent_loop_tools_stay_inside_the_root(tmp_path: Path) -> None:
    agent = load_example("agent_loop")
    assert "outside the project root" in agent.run_tool(
        tmp_path, "read_file", json.dumps({"path": "../../etc/passwd"})
    )
    assert agent.run_tool(tmp_path, "nope", "{}").startswith("error: unknown tool")


def test_agent_loop_resumes_a_failed_run_without_asking_twice(tmp_path: Path) -> None:
    from llm_servers import error

    agent = load_example("agent_loop")
    session_path = tmp_path / "demo.jsonl"
    argv = ["Count the files.", "--root", str(tmp_path), "--session", str(session_path)]
    with LLMServer("openai") as server:
        server.script(error(500, "overloaded"))
        for _ in range(2):  # two runs that fail at the endpoint
            assert agent.main([*argv, "--base-url", server.url]) == 1
        server.script(openai_ok("There are no files."))
        assert agent.main([*argv, "--base-url", server.url]) == 0
        sent = server.requests[-1].body["messages"]
        assert [m["content"] for m in sent if m["role"] == "user"] == ["Count the files."]
        # Answered now: the same task again is a new request.
        server.script(openai_ok("Still none."))
        assert agent.main([*argv, "--base-url", server.url]) == 0
        sent = server.requests[-1].body["messages"]
        assert [m["content"] for m in sent if m["role"] == "user"] == ["Count the files.", "Count the files."]
