"""Wire shapes of the provider formats, as TypedDicts (no SDK import).

These describe what `agentcontext.formats.openai.from_messages` and
`agentcontext.formats.anthropic.from_messages` return, so a type checker can
pass them straight to the providers' SDKs. They follow the SDKs' request
types (``openai.types.chat.ChatCompletion*MessageParam``,
``anthropic.types.MessageParam`` and its blocks), limited to what
agentcontext models. OpenAI messages may also carry the extra top-level keys
kept in `Message.extra` (``refusal``, ``reasoning_content``...), which a
TypedDict cannot list.

Optional keys live in ``total=False`` subclasses of the required ones, the
Python 3.10 spelling of ``NotRequired``.
"""

from __future__ import annotations

from typing import Literal, TypeAlias, TypedDict

from ..messages import JSONValue

__all__ = [
    "AnthropicBase64ImageSource",
    "AnthropicContentBlock",
    "AnthropicImageBlock",
    "AnthropicMessage",
    "AnthropicTextBlock",
    "AnthropicToolResultBlock",
    "AnthropicToolResultContent",
    "AnthropicToolUseBlock",
    "AnthropicURLImageSource",
    "ChatMessage",
    "OpenAIAssistantMessage",
    "OpenAIContentPart",
    "OpenAIFile",
    "OpenAIFilePart",
    "OpenAIFunction",
    "OpenAIImagePart",
    "OpenAIImageURL",
    "OpenAIInputAudio",
    "OpenAIInputAudioPart",
    "OpenAISystemMessage",
    "OpenAITextPart",
    "OpenAIToolCall",
    "OpenAIToolMessage",
    "OpenAIUserMessage",
]

# ----------------------------------------------------------------------------- OpenAI Chat Completions


class OpenAITextPart(TypedDict):
    """``{"type": "text", "text": ...}``: allowed in every role's content list."""

    type: Literal["text"]
    text: str


class _OpenAIImageURLRequired(TypedDict):
    url: str


class OpenAIImageURL(_OpenAIImageURLRequired, total=False):
    """The ``image_url`` object: an ``https://`` or ``data:`` URL and the optional ``detail``."""

    detail: Literal["auto", "low", "high"]


class OpenAIImagePart(TypedDict):
    """``{"type": "image_url", "image_url": {...}}``: user messages only."""

    type: Literal["image_url"]
    image_url: OpenAIImageURL


class OpenAIFile(TypedDict, total=False):
    """The ``file`` object: ``file_data`` (a ``data:`` URL) or ``file_id``, and an optional ``filename``."""

    file_data: str
    file_id: str
    filename: str


class OpenAIFilePart(TypedDict):
    """``{"type": "file", "file": {...}}``: a document, user messages only."""

    type: Literal["file"]
    file: OpenAIFile


class OpenAIInputAudio(TypedDict):
    """The ``input_audio`` object: base64 ``data`` and its ``format`` (``wav`` or ``mp3``)."""

    data: str
    format: str


class OpenAIInputAudioPart(TypedDict):
    """``{"type": "input_audio", "input_audio": {...}}``: audio, user messages only."""

    type: Literal["input_audio"]
    input_audio: OpenAIInputAudio


OpenAIContentPart: TypeAlias = OpenAITextPart | OpenAIImagePart | OpenAIFilePart | OpenAIInputAudioPart


class OpenAIFunction(TypedDict):
    """The function a tool call invokes; ``arguments`` is JSON text, kept verbatim."""

    name: str
    arguments: str


class OpenAIToolCall(TypedDict):
    """One entry of an assistant message's ``tool_calls``."""

    id: str
    type: Literal["function"]
    function: OpenAIFunction


class _OpenAISystemMessageRequired(TypedDict):
    role: Literal["system", "developer"]
    content: str | list[OpenAITextPart]


class OpenAISystemMessage(_OpenAISystemMessageRequired, total=False):
    """A system message (or ``developer``, kept as such through `Message.extra`)."""

    name: str


class _OpenAIUserMessageRequired(TypedDict):
    role: Literal["user"]
    content: str | list[OpenAIContentPart]


class OpenAIUserMessage(_OpenAIUserMessageRequired, total=False):
    """A user message: text, or a list of text, image, file and audio parts."""

    name: str


class _OpenAIAssistantMessageRequired(TypedDict):
    role: Literal["assistant"]
    content: str | list[OpenAITextPart] | None


class OpenAIAssistantMessage(_OpenAIAssistantMessageRequired, total=False):
    """An assistant message; ``content`` is ``None`` when it only calls tools."""

    name: str
    tool_calls: list[OpenAIToolCall]


class _OpenAIToolMessageRequired(TypedDict):
    role: Literal["tool"]
    content: str | list[OpenAITextPart]
    tool_call_id: str


class OpenAIToolMessage(_OpenAIToolMessageRequired, total=False):
    """A tool result, answering the call ``tool_call_id``."""

    name: str


ChatMessage: TypeAlias = OpenAISystemMessage | OpenAIUserMessage | OpenAIAssistantMessage | OpenAIToolMessage
"""One OpenAI Chat Completions message, as ``from_messages`` returns it."""

# ----------------------------------------------------------------------------- Anthropic Messages


class AnthropicTextBlock(TypedDict):
    """``{"type": "text", "text": ...}``; Anthropic rejects empty or whitespace-only text blocks."""

    type: Literal["text"]
    text: str


class AnthropicBase64ImageSource(TypedDict):
    """Image bytes inline (from a ``data:`` URL)."""

    type: Literal["base64"]
    media_type: str
    data: str


class AnthropicURLImageSource(TypedDict):
    """An image Anthropic fetches from a URL."""

    type: Literal["url"]
    url: str


class AnthropicImageBlock(TypedDict):
    """``{"type": "image", "source": {...}}``."""

    type: Literal["image"]
    source: AnthropicBase64ImageSource | AnthropicURLImageSource


class AnthropicToolUseBlock(TypedDict):
    """A tool call inside an assistant message; ``input`` must be a JSON object."""

    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, JSONValue]


AnthropicToolResultContent: TypeAlias = AnthropicTextBlock | AnthropicImageBlock


class _AnthropicToolResultBlockRequired(TypedDict):
    type: Literal["tool_result"]
    tool_use_id: str


class AnthropicToolResultBlock(_AnthropicToolResultBlockRequired, total=False):
    """A tool result inside a user message; ``content`` is optional (omitted for an empty result)."""

    content: str | list[AnthropicToolResultContent]
    is_error: bool


AnthropicContentBlock: TypeAlias = (
    AnthropicTextBlock | AnthropicImageBlock | AnthropicToolUseBlock | AnthropicToolResultBlock
)


class AnthropicMessage(TypedDict):
    """One entry of the ``messages`` parameter (``role="system"`` only for mid-conversation system messages)."""

    role: Literal["user", "assistant", "system"]
    content: str | list[AnthropicContentBlock]
