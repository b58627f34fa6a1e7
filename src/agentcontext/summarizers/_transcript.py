"""How a summarizer sees the conversation: a transcript with tool calls and their arguments, and its language.

Kimi CLI's compaction rendered text parts only, so the summarizer never saw
which commands ran or which files were edited; here every tool call is shown
with its name and arguments, and every result with the call it answers.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Sequence
from typing import Literal

from ..compaction import is_observation, kind_of
from ..messages import Message, tool_call_index, tool_name_for, with_attachments_noted

__all__ = ["Language", "detect_language", "render_transcript", "terminal_text"]

Language = Literal["en", "zh"]

_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_LATIN_WORD = re.compile(r"[A-Za-z]{2,}")
# Tags the transcript uses; text inside messages that closes them is defused so a
# message cannot end the transcript early and speak as the prompt (injection).
_OUR_TAGS = re.compile(
    r"</?(transcript|message|tool_call|tool_result|previous_summary|current_request)\b", re.I
)


# Terminal control in a command's output: colour and cursor sequences (CSI), titles and links (OSC),
# character-set and other escapes (``ESC ( B``, ``ESC =``, ``ESC 7``). pytest, cargo, npm and git colour
# their output when they think a terminal reads it, and agents that run commands in a pty record it as it came.
_ESCAPE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[ -/]*[0-~])")


@functools.lru_cache(maxsize=1024)
def terminal_text(text: str) -> str:
    """``text`` as a terminal shows it: escape sequences removed, a line a carriage return rewrote
    (a progress bar) as its last state. How a summarizer reads a command's output.

    Cached (bounded, by text): the extractive summary reads each output twice, once as the result of
    the call before it and once as a message of its own.
    """
    text = _unwrapped(text)
    if "\x1b" in text:
        text = _ESCAPE.sub("", text).replace("\x1b", "")  # and an escape cut off at the end
    if "\r" in text:
        text = "\n".join(_last_state(line) for line in text.replace("\r\n", "\n").split("\n"))
    return text


# A command's result as a JSON record (Codex's ``{"output": ..., "metadata": {"exit_code": 1, ...}}``):
# only these keys, so an API's JSON answer (tau-bench's records, say) is left whole.
_WRAPPER_KEYS = frozenset(
    {
        "output",
        "stdout",
        "stderr",
        "error",
        "metadata",
        "exit_code",
        "returncode",
        "duration_seconds",
        "timed_out",
    }
)


def _unwrapped(text: str) -> str:
    """A command's output wrapped in a JSON record, as its lines and its exit code; other text as it is.

    Escaped in JSON, the output is one line, and its error lines and test counts went unseen."""
    stripped = text.strip()
    if not (stripped.startswith("{") and stripped.endswith("}") and '"' in stripped[:20]):
        return text
    try:
        data = json.loads(stripped)
    except ValueError:
        return text
    if not isinstance(data, dict) or not data.keys() <= _WRAPPER_KEYS:
        return text
    parts = [v for k in ("stdout", "output", "stderr", "error") if isinstance(v := data.get(k), str) and v]
    if not parts:
        return text
    meta = data.get("metadata")
    for source in (data, meta if isinstance(meta, dict) else {}):
        code = source.get("exit_code", source.get("returncode"))
        if isinstance(code, int) and not isinstance(code, bool):
            parts.append(f"Exit code: {code}")
            break
    return "\n".join(parts)


def _last_state(line: str) -> str:
    return next((part for part in reversed(line.split("\r")) if part), "")


def detect_language(messages: Iterable[Message]) -> Language:
    """The conversation's main language, from what the user and assistant wrote (tool output excluded).

    Chinese when CJK ideographs make up at least a quarter of the words
    (an ideograph counted as a word), else English. Tool output is left out
    because an agent working on an English code base for a Chinese user still
    owes that user a Chinese summary.
    """
    cjk = 0
    latin = 0
    for m in messages:
        if m.role not in ("user", "assistant") or kind_of(m) not in (None, "summary", "verbatim"):
            continue
        if is_observation(m):
            continue  # a command's output sent back as a user message: tool output too
        text = m.text
        cjk += len(_CJK.findall(text))
        latin += len(_LATIN_WORD.findall(text))
    if cjk and cjk >= 0.25 * (cjk + latin):
        return "zh"
    return "en"


def _defuse(text: str) -> str:
    return _OUR_TAGS.sub(lambda m: m.group(0).replace("<", "&lt;", 1), text)


def render_transcript(messages: Sequence[Message], *, max_chars_per_message: int | None = None) -> str:
    """The messages as an XML-ish transcript: text, tool calls with arguments, results with their call.

    Args:
        messages: the messages to render.
        max_chars_per_message: cut longer message texts in the middle (None: no cut).
    """
    calls = tool_call_index(messages)
    lines: list[str] = ["<transcript>"]
    for i, m in enumerate(with_attachments_noted(m) for m in messages):  # images and files named in the text
        kind = kind_of(m)
        attrs = f'index="{i}" role="{m.role}"'
        if m.role == "tool":
            attrs += f' call_id="{m.tool_call_id}" tool="{tool_name_for(m, calls)}"'
        if kind == "verbatim":
            attrs += ' kept_verbatim="true"'
        elif kind is not None:
            attrs += f' note="{kind} (written by agentcontext)"'
        observation = kind is None and is_observation(m)
        if observation:
            attrs += ' note="command output"'  # the output of the command before it, not the user's words
        output = m.role == "tool" or observation
        body = _defuse(terminal_text(m.text) if output else m.text)
        if max_chars_per_message is not None and len(body) > max_chars_per_message:
            half = max_chars_per_message // 2
            body = body[:half] + f"\n[... {len(body) - 2 * half:,} characters omitted ...]\n" + body[-half:]
        lines.append(f"<message {attrs}>")
        if body:
            lines.append(body)
        for call in m.tool_calls:
            lines.append(
                f'<tool_call id="{call.id}" name="{call.name}">{_defuse(call.arguments)}</tool_call>'
            )
        lines.append("</message>")
    lines.append("</transcript>")
    return "\n".join(lines)
