"""What the OpenAI-compatible and Anthropic summarizers share: settings, prompt, clean-up of the reply."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from ..exceptions import ConfigError
from ..messages import JSONValue
from ..strategies._base import SummaryRequest
from ._http import Exchange, HttpRequest, HttpResponse, RetryPolicy, exchange, run_async, run_sync
from ._prompts import PromptName, PromptTemplate, build_prompt, get_prompt

__all__ = ["LLMSummarizerBase", "clean_summary"]

_REASONING = re.compile(r"<(think|thinking|scratchpad)>.*?</\1>\s*", re.S | re.I)
_UNCLOSED_REASONING = re.compile(r"^\s*<(think|thinking)>.*", re.S | re.I)


def clean_summary(text: str) -> str:
    """Strip reasoning blocks (``<think>``, ``<scratchpad>``) some models put before the answer."""
    text = _REASONING.sub("", text)
    text = _UNCLOSED_REASONING.sub("", text)  # a reasoning block cut off: nothing usable after it
    return text.strip()


@dataclass(frozen=True, kw_only=True)
class LLMSummarizerBase:
    """Settings every LLM summarizer has; subclasses say how to build the request and read the reply."""

    model: str
    """The model name the endpoint expects."""
    base_url: str = ""
    api_key: str | None = field(default=None, repr=False)
    """The API key; None reads the environment variable named by ``api_key_env``."""
    api_key_env: str = ""
    timeout: float = 60.0
    """Seconds to wait for one reply (a summary of a long history can take a while)."""
    max_output_tokens: int = 4096
    """The most tokens the summary may take; the strategy's own limit applies when smaller."""
    prompt: PromptName | PromptTemplate = "state_snapshot"
    """Which template to use (see `agentcontext.summarizers.PromptTemplate`)."""
    temperature: float | None = 0.0
    """Sampling temperature; None leaves it out (some reasoning models reject it)."""
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    headers: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    """Extra HTTP headers (a gateway's routing header, an organization id...)."""
    extra_body: Mapping[str, JSONValue] = field(default_factory=lambda: MappingProxyType({}))
    """Extra fields merged into the request body (e.g. vLLM's ``chat_template_kwargs``)."""

    _extra: str = field(default="openai", init=False, repr=False)

    def __post_init__(self) -> None:
        from ._http import require_httpx

        require_httpx(self._extra)
        if not self.model:
            raise ConfigError(f"{type(self).__name__} needs a model name")
        if not self.base_url.startswith(("http://", "https://")):
            raise ConfigError(
                f"{type(self).__name__}.base_url must start with http:// or https://, got {self.base_url!r}"
            )
        if self.timeout <= 0:
            raise ConfigError(f"{type(self).__name__}.timeout must be positive, got {self.timeout}")
        if self.max_output_tokens < 16:
            raise ConfigError(
                f"{type(self).__name__}.max_output_tokens must be at least 16, got {self.max_output_tokens}"
            )
        get_prompt(self.prompt)  # fail early on an unknown name
        object.__setattr__(self, "headers", MappingProxyType(dict(self.headers)))
        object.__setattr__(self, "extra_body", MappingProxyType(dict(self.extra_body)))

    # ------------------------------------------------------------------ the Summarizer protocol

    def summarize(self, request: SummaryRequest) -> str:
        """Return the summary of ``request`` (raises `SummarizerError` after the last retry)."""
        return run_sync(self.flow(request))

    async def asummarize(self, request: SummaryRequest) -> str:
        """Async twin of `summarize` (same exchange, driven by ``httpx.AsyncClient``)."""
        return await run_async(self.flow(request))

    # ------------------------------------------------------------------ shared logic

    def flow(self, request: SummaryRequest) -> Exchange:
        """The HTTP exchange for ``request``, for the sync and async drivers alike."""
        output = self.output_tokens(request)
        system, user = build_prompt(request, get_prompt(self.prompt), max_tokens=output)
        return exchange(
            self.http_request(system=system, user=user, max_tokens=output),
            endpoint=self.endpoint,
            parse=self.parse,
            policy=self.retry,
        )

    def output_tokens(self, request: SummaryRequest) -> int:
        """The output limit: the strategy's ``max_tokens`` when set and smaller than ``max_output_tokens``."""
        if request.max_tokens is not None and request.max_tokens > 0:
            return max(16, min(self.max_output_tokens, request.max_tokens))
        return self.max_output_tokens

    def key(self) -> str | None:
        """The API key: ``api_key``, else the environment variable, else None (local endpoints need none)."""
        if self.api_key:
            return self.api_key
        if not self.api_key_env:
            return None
        return os.environ.get(self.api_key_env) or None

    @property
    def endpoint(self) -> str:
        """The URL requests go to (named in errors; never includes the key)."""
        raise NotImplementedError

    def http_request(self, *, system: str, user: str, max_tokens: int) -> HttpRequest:
        """The provider-specific request."""
        raise NotImplementedError

    def parse(self, response: HttpResponse) -> str:
        """The summary text from a 2xx reply, or raise."""
        raise NotImplementedError
