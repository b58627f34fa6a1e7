"""`AnthropicSummarizer`: summaries from Anthropic's Messages API."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..exceptions import SummarizerError
from ..messages import JSONValue
from ._http import HttpRequest, HttpResponse
from ._llm import LLMSummarizerBase

__all__ = ["AnthropicSummarizer"]


@dataclass(frozen=True, kw_only=True)
class AnthropicSummarizer(LLMSummarizerBase):
    """Summarizes through ``POST {base_url}/v1/messages`` (Anthropic's Messages API).

    Talks HTTP directly (httpx, from the ``anthropic`` extra; no SDK): the key
    goes in ``x-api-key``, the API version in ``anthropic-version``, the prompt's
    rules in the top-level ``system`` field, and ``max_tokens`` (required by the
    API) is always set. No ``tools`` are offered. 429, 5xx (529 "overloaded"
    included) and timeouts are retried; a reached spend limit is not. The
    deadline, reply size cap and checks on the text are `OpenAISummarizer`'s.

    >>> s = AnthropicSummarizer(model="claude-haiku-4-5", api_key="sk-ant-...")

    Args:
        model: the model name.
        base_url: the API root. Default ``https://api.anthropic.com``.
        api_key: None reads ``ANTHROPIC_API_KEY``.
        anthropic_version: the ``anthropic-version`` header. Default ``"2023-06-01"``.
        timeout, max_output_tokens, max_response_bytes, prompt, temperature, retry,
            headers, extra_body: see `LLMSummarizerBase`.

    A reply that stopped at ``max_tokens`` or was a refusal is not used.
    """

    base_url: str = "https://api.anthropic.com"
    api_key_env: str = "ANTHROPIC_API_KEY"
    anthropic_version: str = "2023-06-01"
    _extra: str = field(default="anthropic", init=False, repr=False)

    @property
    def endpoint(self) -> str:
        """``{base_url}/v1/messages``."""
        return self.base_url.rstrip("/") + "/v1/messages"

    def http_request(self, *, system: str, user: str, max_tokens: int) -> HttpRequest:
        """A non-streaming Messages request with no tools."""
        body: dict[str, JSONValue] = {
            "model": self.model,
            "max_tokens": max_tokens,
            "system": system,
            "messages": [{"role": "user", "content": user}],
        }
        if self.send_temperature():
            body["temperature"] = self.temperature
        body.update(self.extra_body)
        headers = {
            "content-type": "application/json",
            "anthropic-version": self.anthropic_version,
            **self.headers,
        }
        key = self.key()
        if key:
            headers["x-api-key"] = key
        return HttpRequest(url=self.endpoint, headers=headers, body=body)

    def parse(self, response: HttpResponse) -> str:
        """The text blocks of ``content``; refuses replies cut at ``max_tokens``, refusals and tool use."""
        payload = self.payload(response)
        if not isinstance(payload, dict):
            raise SummarizerError(f"{self.endpoint}: the reply is not a message: {str(payload)[:300]}")
        stop = payload.get("stop_reason")
        blocks = payload.get("content")
        if stop == "max_tokens":
            raise SummarizerError(
                f"{self.endpoint}: the summary was cut at max_tokens (stop_reason 'max_tokens'); "
                "raise max_output_tokens or ask for a shorter summary"
            )
        if stop == "refusal":
            raise SummarizerError(f"{self.endpoint}: the model refused to summarize (stop_reason 'refusal')")
        if stop == "tool_use":
            raise SummarizerError(f"{self.endpoint}: the model tried to use a tool instead of summarizing")
        if not isinstance(blocks, list):
            raise SummarizerError(f"{self.endpoint}: the reply has no content: {str(payload)[:300]}")
        text = "".join(
            t
            for b in blocks
            if isinstance(b, dict) and b.get("type") == "text" and isinstance(t := b.get("text"), str)
        )
        reasoned = any(
            isinstance(b, dict) and b.get("type") in ("thinking", "redacted_thinking") for b in blocks
        )
        return self.accept(text, reasoned=reasoned)
