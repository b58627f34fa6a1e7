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

Both check the conversation with `agentcontext.check_messages` on the way out
(``validate=True``) and raise `agentcontext.exceptions.InvalidMessageError`,
naming the message index and field, for input they cannot convert. The wire
shapes are TypedDicts in ``_wire.py``; no provider SDK is imported.
"""
