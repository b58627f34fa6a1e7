"""Provider message formats, to and from canonical `agentcontext.Message` objects.

Import the one you need as a module::

    from agentcontext.formats import openai as oai, anthropic

    msgs = oai.to_messages(openai_dicts)            # list[Message]
    dicts = oai.from_messages(msgs)                 # back, exactly
    system, params = anthropic.from_messages(msgs)  # Anthropic Messages API shape
    msgs = anthropic.to_messages(params, system=system)

Submodules:

- `agentcontext.formats.openai`: OpenAI Chat Completions messages (and the many
  OpenAI-compatible APIs). Lossless in both directions.
- `agentcontext.formats.anthropic`: Anthropic Messages API: the ``system``
  parameter plus ``messages``, tool results as ``tool_result`` blocks in user
  messages. Lossless for conversations Anthropic can carry; its module docstring
  lists the few normalizations (merged turns, dropped empty text blocks).
- `agentcontext.formats.langchain`: LangChain messages (``BaseMessage``; the
  ``langchain`` extra), LangChain ids kept so ``RemoveMessage`` works.
- `agentcontext.formats.pydantic_ai`: Pydantic AI v2 ``ModelRequest`` /
  ``ModelResponse`` parts (the ``pydantic-ai`` extra); a tool pair spans two of them.
- `agentcontext.formats.responses`: OpenAI Responses API input items (the
  Agents SDK's items too). Lossless in both directions; a reasoning item stays
  with the items of its response, hosted calls with their outputs, and what
  agentcontext does not model is carried whole and counted.

All check the conversation with `agentcontext.check_messages` on the way out
(``validate=True``) and raise `agentcontext.exceptions.InvalidMessageError`,
naming the message index and field, for input they cannot convert. The Chat
Completions and Anthropic wire shapes are TypedDicts in ``_wire.py``; Responses
items are plain JSON dicts (their union has some 30 item types). No provider SDK
is imported.

`agentcontext.formats.pydantic_ai` converts a Pydantic AI message history
(``ModelRequest`` / ``ModelResponse``), lossless in both directions; it needs
the ``pydantic-ai`` extra and imports Pydantic AI only when imported itself. It
does not validate on the way out: Pydantic AI repairs a history itself before
each request, and an integration sends what the engine made valid.
"""
