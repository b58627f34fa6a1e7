"""docs/openai_agents.md runs as written: its code blocks, with the SDK's default client, against a loopback provider."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import pytest
from agents.models import openai_provider

from providers import ProviderServer, tool_loop

DOC = Path(__file__).resolve().parents[1] / "docs" / "openai_agents.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)


def test_the_documented_code_runs_and_every_call_fits(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocks = python_blocks()
    assert len(blocks) == 2
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.setenv("OPENAI_AGENTS_DISABLE_TRACING", "1")
    scope: dict[str, Any] = {}
    real_run = asyncio.run

    async def and_close(main: Coroutine[Any, Any, Any]) -> Any:
        # The SDK shares one HTTP client between event loops; close it in the loop that opened its connections.
        try:
            return await main
        finally:
            client = openai_provider._http_client
            openai_provider._http_client = None
            if client is not None:
                await client.aclose()

    monkeypatch.setattr(asyncio, "run", lambda main: real_run(and_close(main)))
    with ProviderServer(window=128_000, policy=tool_loop(steps=3), reasoning=True) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.openai_url)
        exec(compile(blocks[0], str(DOC), "exec"), scope)
        # UsageHooks logged each call's billed prompt in the session.
        assert scope["session"].session.usage_totals.prompt_tokens == sum(r.tokens for r in server.requests)
        assert scope["session"].session.usage_totals.calls == len(server.requests) == 5
        server.policy = tool_loop(steps=2)
        exec(compile(blocks[1], str(DOC), "exec"), scope)
        scope["session"].session.close()
    assert capsys.readouterr().out.split() == ["done", "done", "done"]
    assert server.rejected == [] and len(server.requests) == 4 + 1 + 3
    assert all(r.body["instructions"] == "Fix the failing test." for r in server.requests)
    assert (tmp_path / "runs" / "chat-42.jsonl").stat().st_size > 0
    assert (tmp_path / "runs" / "sdk.db").stat().st_size > 0
