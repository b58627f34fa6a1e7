"""A small agent loop on any OpenAI-compatible endpoint, with a persistent agentcontext Session.

The agent can list and read files under a directory, and recall anything
agentcontext compacted away. Every message, usage report, checkpoint and
compaction goes to the session's JSON Lines log, so the run survives a crash:
run the same command again and it carries on where it stopped (the task is
not asked a second time).

    pip install -e '.[openai]'
    export OPENAI_API_KEY=...      # or point --base-url at vLLM, Ollama, DeepSeek, Moonshot, Qwen...
    python examples/agent_loop.py --model gpt-4o-mini --root . --session runs/demo.jsonl \\
        "Which file in this directory defines ContextEngine, and what does prepare() return?"

Then look inside:  agentcontext inspect runs/demo.jsonl --model gpt-4o-mini
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import httpx

import agentcontext as ac
from agentcontext.compaction import is_user_request
from agentcontext.formats import openai as oai
from agentcontext.session import Session, recall_tool_openai

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "list_files",
            "description": "List the files under a directory, relative to the project root.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a text file, relative to the project root.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    },
]


def run_tool(root: Path, name: str, arguments: str) -> str:
    """Run one of the file tools, confined to ``root``; errors come back as text for the model."""
    try:
        args = json.loads(arguments or "{}")
        target = (root / str(args.get("path", "."))).resolve()
        if root.resolve() not in (target, *target.parents):
            return f"error: {args.get('path')!r} is outside the project root"
        if name == "list_files":
            return "\n".join(
                sorted(str(p.relative_to(root.resolve())) for p in target.rglob("*") if p.is_file())[:500]
            )
        if name == "read_file":
            return target.read_text(encoding="utf-8", errors="replace")
        return f"error: unknown tool {name!r}"
    except (OSError, ValueError) as exc:
        return f"error: {exc}"


def unfinished(view: Sequence[ac.Message], task: str) -> bool:
    """True when the latest request in ``view`` is ``task`` and no final answer followed it.

    That is a run that stopped (an endpoint error, a crash, the step limit): running
    the same command again carries on with it instead of asking a second time.
    """
    for message in reversed(view):
        if message.role == "assistant" and not message.tool_calls and message.text.strip():
            return False  # answered: the same task again is a new request
        if is_user_request(message):
            return message.text == task
    return False


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("task", help="what the agent should do")
    ap.add_argument("--model", default="gpt-4o-mini")
    ap.add_argument("--base-url", default=os.environ.get("OPENAI_BASE_URL", "https://api.openai.com/v1"))
    ap.add_argument("--window", type=int, help="context window (default: the model's, or 32,000 if unknown)")
    ap.add_argument("--root", default=".", help="the directory the file tools may read")
    ap.add_argument("--session", default="runs/agent.jsonl", help="the session log (created or resumed)")
    ap.add_argument("--max-steps", type=int, default=20)
    args = ap.parse_args(argv)

    try:
        engine = ac.ContextEngine(model=args.model, window=args.window)
    except ac.UnknownModelError:
        # Any endpoint works: size the window yourself and count with the estimator.
        engine = ac.ContextEngine(
            window=args.window or 32_000, counter=ac.ScriptEstimator(), safety_margin=0.1
        )
    Path(args.session).parent.mkdir(parents=True, exist_ok=True)
    session = Session.open(args.session, engine=engine)
    if not len(session.view):
        session.append(
            ac.Message(role="system", content="You are a careful assistant. Use the tools to look at files.")
        )
    if unfinished(session.view, args.task):
        print("agent_loop: resuming the unfinished task", file=sys.stderr)
    else:
        session.append(ac.Message(role="user", content=args.task))
    headers = {"Authorization": f"Bearer {os.environ.get('OPENAI_API_KEY', 'none')}"}
    tools = [*TOOLS, recall_tool_openai()]
    try:
        with httpx.Client(base_url=args.base_url, headers=headers, timeout=120) as client:
            for _ in range(args.max_steps):
                prepared = session.prepare()  # fits the window, valid, compaction recorded in the log
                body = {"model": args.model, "messages": oai.from_messages(prepared.messages), "tools": tools}
                response = client.post("/chat/completions", json=body)
                response.raise_for_status()
                data = response.json()
                usage = data.get("usage") or {}
                if "prompt_tokens" in usage:
                    session.record_usage(
                        prompt_tokens=usage["prompt_tokens"], completion_tokens=usage.get("completion_tokens")
                    )
                reply = oai.to_message(data["choices"][0]["message"])
                session.append(reply)
                if not reply.tool_calls:
                    print(reply.text)
                    return 0
                session.checkpoint()
                for call in reply.tool_calls:
                    if call.name == "recall":
                        result = session.handle_recall(call.arguments)
                    else:
                        result = run_tool(Path(args.root), call.name, call.arguments)
                    session.append(ac.Message(role="tool", tool_call_id=call.id, content=result))
    except httpx.HTTPError as exc:
        print(f"agent_loop: the model endpoint failed: {exc}", file=sys.stderr)
        return 1
    finally:
        session.close()
    print(f"agent_loop: stopped after {args.max_steps} steps without a final answer", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
