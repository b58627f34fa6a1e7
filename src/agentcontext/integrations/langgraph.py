"""`pre_model_hook`: agentcontext in LangGraph's prebuilt ``create_react_agent``.

Needs the ``langchain`` extra (``pip install 'agentcontext[langchain]'``)::

    from langgraph.prebuilt import create_react_agent
    from agentcontext import ContextEngine
    from agentcontext.integrations.langgraph import pre_model_hook

    prompt = "You are a careful research assistant."
    agent = create_react_agent(
        model, tools, prompt=prompt,
        pre_model_hook=pre_model_hook(ContextEngine(model="gpt-4o"), prompt=prompt, tools=tools),
    )

The hook runs before every model call and returns ``{"llm_input_messages": ...}``:
the messages the model gets this time, prepared by the engine (they fit, a
provider accepts them, the latest user message is kept), while the graph state
keeps the full history. The engine keeps one state per ``thread_id``, so a step
costs O(new messages) and the prompt prefix stays the same between compactions.
At each step the hook reads the usage the model reported for the thread's
previous call (the ``usage_metadata`` of the reply now in the history) and feeds
it back (see `agentcontext.integrations.langchain`); a run's last reply is not
read until the thread's next step.

``create_react_agent`` adds its ``prompt`` in front of these messages and sends
the tools with them; pass the same ``prompt`` and ``tools`` to the hook so they
are counted (the hook never returns the prompt itself). ``fill=True`` (or a
share such as ``0.9``) makes each call a one-shot fit that fills the budget
instead of compacting to the engine's hysteresis target (see
`agentcontext.integrations.langchain`; a running agent keeps the default). LangChain v1 users:
prefer `agentcontext.integrations.langchain.ContextMiddleware` with ``create_agent``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..engine import Engine
from ..exceptions import ConfigError, MissingDependencyError
from .langchain import SessionSource, _Core, _Result

try:
    from langchain_core.messages import BaseMessage, SystemMessage
    from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda
    from langchain_core.tools import BaseTool
except ImportError as exc:  # pragma: no cover - exercised without the extra installed
    raise MissingDependencyError(
        "agentcontext.integrations.langgraph needs LangGraph: pip install 'agentcontext[langchain]'"
    ) from exc

__all__ = ["pre_model_hook"]


def pre_model_hook(
    engine: Engine | None = None,
    *,
    prompt: str | SystemMessage | None = None,
    tools: Sequence[BaseTool | dict[str, Any]] = (),
    session: SessionSource | None = None,
    max_threads: int = 256,
    fill: bool | float = False,
) -> Runnable[dict[str, Any], dict[str, Any]]:
    """A ``pre_model_hook`` for ``create_react_agent`` that prepares each model call with ``engine``.

    Args:
        engine: the engine (e.g. ``ContextEngine(model="gpt-4o")``); optional when
            ``session`` brings one.
        prompt: the agent's ``prompt`` (a string or `SystemMessage`), counted
            against the budget; never returned (the agent adds it).
        tools: the agent's tools, counted against the budget.
        session: a `Session`, or a function ``thread_id -> Session``: every message is
            appended to it and it prepares the requests (give the model
            `agentcontext.integrations.langchain.recall_tool` to read originals back).
        max_threads: how many threads' states to remember.
        fill: ``False`` (default): compact down to the engine's target (a running agent: the
            prompt prefix stays stable for many steps). ``True``, or a share of the budget such
            as ``0.9``: a one-shot fit, compacting only when over the budget and then filling it.

    Returns:
        A runnable (sync and async) to pass as ``pre_model_hook=``.

    Raises:
        ConfigError: a bad option (named), ``fill`` included.
    """
    if prompt is not None and not isinstance(prompt, str | SystemMessage):
        raise ConfigError(
            f"prompt must be the agent's prompt as a str or SystemMessage, got {type(prompt).__name__}; "
            "a callable or runnable prompt cannot be counted: leave prompt=None"
        )
    core = _Core(engine, session=session, window="engine", max_threads=max_threads, fill=fill)
    system = SystemMessage(content=prompt) if isinstance(prompt, str) else prompt
    tool_list = list(tools)

    def args(state: dict[str, Any], config: RunnableConfig | None) -> tuple[Any, ...]:
        messages = state.get("messages") if isinstance(state, dict) else getattr(state, "messages", None)
        if not isinstance(messages, list):
            raise ConfigError("pre_model_hook expects the agent state's 'messages' list")
        tid = ((config or {}).get("configurable") or {}).get("thread_id")
        return ("hook", None if tid is None else str(tid), messages, system, tool_list, None)

    def output(result: _Result) -> dict[str, Any]:
        messages: list[BaseMessage] = list(result.messages)
        return {"llm_input_messages": messages}

    # The hook never sees the model's response; its reply is in the history by the next step (history=True).
    def hook(state: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        return output(core.run(*args(state, config), history=True))

    async def ahook(state: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        return output(await core.arun(*args(state, config), history=True))

    return RunnableLambda(hook, afunc=ahook, name="agentcontext_pre_model_hook")
