"""`OpenAISummarizer`: summaries from any OpenAI-compatible Chat Completions endpoint."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ..exceptions import SummarizerError
from ..messages import JSONValue
from ._http import HttpRequest, HttpResponse
from ._llm import LLMSummarizerBase, reasoning_model

__all__ = ["OpenAISummarizer"]


@dataclass(frozen=True, kw_only=True)
class OpenAISummarizer(LLMSummarizerBase):
    """Summarizes through ``POST {base_url}/chat/completions``: OpenAI, vLLM, Ollama, DeepSeek, Moonshot, Qwen...

    Talks HTTP directly (httpx, from the ``openai`` extra; no SDK). The request
    carries a system and a user message and no ``tools``, so the model cannot
    act while it summarizes. 429, 5xx and timeouts are retried (see
    `RetryPolicy`); after the last try, or on an error no retry can fix, it
    raises `SummarizerError` naming the endpoint and the status, and the
    engine falls back to the next tier. One deadline bounds the whole summary
    (``timeout``, 30 s by default, or the engine's when earlier: then
    `SummarizerTimeout`), a byte cap bounds the reply, and a refusal, an
    apology or an error text is never returned as a summary (`summary_problem`).
    A reply without the structure the prompt asks for (the default prompt's
    ``<state_snapshot>``, see `structured_summary`) is asked for once more with
    a correction, then refused (`UnusableSummaryError`); a preamble or code
    fence around it is dropped.

    >>> s = OpenAISummarizer(model="qwen2.5-7b-instruct", base_url="http://localhost:8000/v1")

    Args:
        model: the model name.
        base_url: the API root, ``/chat/completions`` is appended. Default OpenAI's.
        api_key: sent as ``Authorization: Bearer``; None reads ``OPENAI_API_KEY``, and
            sends no header when that is unset too (local servers need none).
        max_tokens_field: ``"max_completion_tokens"`` (OpenAI's current name; its
            reasoning models reject the other) or ``"max_tokens"`` (what most
            compatible servers understand). None picks the first for api.openai.com
            and for OpenAI's reasoning models by name (o1, o3, o4-mini, gpt-5...,
            wherever served: Azure, a gateway), the second elsewhere.
        timeout, max_output_tokens, max_response_bytes, prompt, temperature,
            reasoning_headroom, retry, headers, extra_body: see `LLMSummarizerBase`.

    A reply cut at the output limit (``finish_reason`` ``"length"``) is refused
    rather than used: its last sections (the task state) would be missing.
    """

    base_url: str = "https://api.openai.com/v1"
    api_key_env: str = "OPENAI_API_KEY"
    max_tokens_field: Literal["max_tokens", "max_completion_tokens"] | None = None
    _extra: str = field(default="openai", init=False, repr=False)

    @property
    def endpoint(self) -> str:
        """``{base_url}/chat/completions``."""
        return self.base_url.rstrip("/") + "/chat/completions"

    def http_request(self, *, system: str, user: str, max_tokens: int) -> HttpRequest:
        """A non-streaming Chat Completions request with no tools."""
        limit_field = self.max_tokens_field or (
            "max_completion_tokens"
            if "api.openai.com" in self.base_url or reasoning_model(self.model)
            else "max_tokens"
        )
        body: dict[str, JSONValue] = {
            "model": self.model,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
            limit_field: max_tokens,
            "stream": False,
        }
        if self.send_temperature():
            body["temperature"] = self.temperature
        body.update(self.extra_body)
        headers = {"content-type": "application/json", **self.headers}
        key = self.key()
        if key:
            headers["authorization"] = f"Bearer {key}"
        return HttpRequest(url=self.endpoint, headers=headers, body=body)

    def parse(self, response: HttpResponse) -> str:
        """``choices[0].message.content``; refuses cut, filtered or malformed replies."""
        payload = self.payload(response)
        choices = payload.get("choices") if isinstance(payload, dict) else None
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise SummarizerError(f"{self.endpoint}: the reply has no choices: {str(payload)[:300]}")
        choice = choices[0]
        finish = choice.get("finish_reason")
        message = choice.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):  # some compatible servers return content parts
            content = "".join(
                t for p in content if isinstance(p, dict) and isinstance(t := p.get("text"), str)
            )
        reasoned = isinstance(message, dict) and any(
            isinstance(r := message.get(k), str) and r.strip() for k in ("reasoning_content", "reasoning")
        )
        if finish == "length":
            raise SummarizerError(
                f"{self.endpoint}: the summary was cut at the output limit (finish_reason 'length')"
                + (
                    "; the model spent it on reasoning: raise reasoning_headroom"
                    if reasoned and not content
                    else "; raise max_output_tokens or ask for a shorter summary"
                )
            )
        if finish == "content_filter":
            raise SummarizerError(f"{self.endpoint}: the summary was withheld by a content filter")
        if finish == "tool_calls":
            raise SummarizerError(f"{self.endpoint}: the model tried to call a tool instead of summarizing")
        return self.accept(content if isinstance(content, str) else "", reasoned=reasoned)
