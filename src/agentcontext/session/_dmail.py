"""The D-Mail tool for models: list checkpoints on demand, send a message back to one.

Kimi CLI lets the model name checkpoints by appending a ``<system>CHECKPOINT
n</system>`` user message at every step, which eats context all the time for a
tool used rarely. Here the model asks for the list only when it wants to send
a D-Mail: call the tool without a checkpoint and the result lists them (id,
label, size of the view then); call it with one and the D-Mail is queued for
`Session.deliver_dmail`. Label your checkpoints (``session.checkpoint(label=
"before step 7: run the migration")``) so the list means something.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Literal

from ..exceptions import ConfigError, UsageError
from ..messages import JSONValue
from ._recall import _check_name, parse_tool_arguments
from ._types import Checkpoint, DMail

__all__ = ["DMAIL_TOOL_DESCRIPTION", "answer_dmail_call", "dmail_tool_anthropic", "dmail_tool_openai"]

DMAIL_TOOL_DESCRIPTION = (
    "Send a message back in time to an earlier checkpoint of this conversation, when a path turned out "
    "wrong: the conversation returns to that checkpoint and your message is shown there, so your earlier "
    "self can do better. Call with checkpoint null (or omitted) to list the checkpoints first."
)

_CHECKPOINT = "The checkpoint id to return to; null to list the checkpoints."
_MESSAGE = "What your earlier self should know (what went wrong, what to do instead)."


def dmail_tool_openai(
    *, api: Literal["chat", "responses"] = "chat", name: str = "send_dmail"
) -> dict[str, JSONValue]:
    """The D-Mail tool in OpenAI's format (strict mode); pair it with `Session.handle_dmail`.

    Args:
        api: ``"chat"`` (Chat Completions, nested under ``"function"``) or ``"responses"`` (flat).
        name: the tool's name; default ``"send_dmail"``.
    """
    _check_name(name)
    parameters: dict[str, JSONValue] = {
        "type": "object",
        "properties": {
            "checkpoint": {"type": ["integer", "null"], "description": _CHECKPOINT},
            "message": {"type": ["string", "null"], "description": _MESSAGE},
        },
        "required": ["checkpoint", "message"],
        "additionalProperties": False,
    }
    body: dict[str, JSONValue] = {
        "name": name,
        "description": DMAIL_TOOL_DESCRIPTION,
        "parameters": parameters,
        "strict": True,
    }
    if api == "chat":
        return {"type": "function", "function": body}
    if api == "responses":
        return {"type": "function", **body}
    raise ConfigError(f"api must be 'chat' or 'responses', got {api!r}")


def dmail_tool_anthropic(*, name: str = "send_dmail") -> dict[str, JSONValue]:
    """The D-Mail tool in Anthropic's Messages API format; pair it with `Session.handle_dmail`."""
    return {
        "name": _check_name(name),
        "description": DMAIL_TOOL_DESCRIPTION,
        "input_schema": {
            "type": "object",
            "properties": {
                "checkpoint": {"type": "integer", "minimum": 0, "description": _CHECKPOINT},
                "message": {"type": "string", "description": _MESSAGE},
            },
        },
    }


def answer_dmail_call(
    arguments: str | Mapping[str, object],
    *,
    checkpoints: Sequence[Checkpoint],
    send: Callable[[int, str], DMail],
) -> str:
    """The text for a D-Mail tool result (see `Session.handle_dmail`)."""
    args = parse_tool_arguments(arguments)
    if isinstance(args, str):
        return f"dmail failed: {args}"
    checkpoint, text = args.get("checkpoint"), args.get("message")
    if checkpoint is None:
        listed = checkpoints[-20:]
        if not listed:
            return "There are no checkpoints yet; a D-Mail cannot be sent."
        rows = [
            f"checkpoint {c.id}: {c.label or '(no label)'} ({c.messages} messages in view)" for c in listed
        ]
        return "Checkpoints, oldest first:\n" + "\n".join(rows)
    if not isinstance(text, str) or not text.strip():
        return "dmail failed: pass the message your earlier self should read"
    try:
        sent = send(checkpoint, text)  # type: ignore[arg-type]  # send_dmail checks the id's type
    except UsageError as exc:
        return f"dmail failed: {exc}"
    return (
        f"D-Mail queued for checkpoint {sent.checkpoint}. When this step ends, the conversation returns "
        "to that checkpoint and your message is shown there."
    )
