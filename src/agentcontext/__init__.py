"""agentcontext: keep an LLM agent's conversation inside its model's context window."""

from .exceptions import (
    AgentContextError as AgentContextError,
)
from .messages import ImagePart as ImagePart, Message as Message, TextPart as TextPart, ToolCall as ToolCall

__all__ = ["AgentContextError", "ImagePart", "Message", "TextPart", "ToolCall"]
