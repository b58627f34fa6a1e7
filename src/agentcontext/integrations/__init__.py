"""Drop-in context management for agent frameworks, each behind its own extra.

Import the one you need as a module; ``import agentcontext`` never imports a framework:

- `agentcontext.integrations.langchain`: `ContextMiddleware` for LangChain v1's
  ``create_agent`` (``pip install 'agentcontext[langchain]'``).
- `agentcontext.integrations.langgraph`: `pre_model_hook` for LangGraph's prebuilt
  ``create_react_agent`` (same extra).
- `agentcontext.integrations.openai_agents`: the OpenAI Agents SDK
  (``pip install 'agentcontext[openai-agents]'``): `AgentContextSession`, a
  ``Session`` whose history fits the window, and `call_model_input_filter` for
  ``RunConfig``.
- `agentcontext.integrations.pydantic_ai`: `ContextCapability` for a Pydantic AI
  ``Agent(capabilities=[...])``, and `history_processor` for ``ProcessHistory``
  (``pip install 'agentcontext[pydantic-ai]'``).
- `agentcontext.integrations.litellm`: `ContextHook`, a LiteLLM proxy callback that
  fits every request (Chat Completions, Anthropic Messages, Responses) to its
  model's window (``pip install 'agentcontext[litellm]'``; docs/litellm.md).

An integration is thin: it converts the framework's messages (`agentcontext.formats`),
lets the engine (or a session) prepare them, applies the result and converts back.
"""
