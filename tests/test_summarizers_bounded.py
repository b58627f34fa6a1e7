"""LLM summarizers end by their deadline and within their byte cap whatever the server does, and never
pass off a refusal or an error text as a summary; an engine using one still returns a valid context.

Every server here is real (loopback HTTP speaking the provider's protocol, see ``llm_servers``). Where
something can be counted (requests, body bytes the server got out before the client hung up, bytes
held) the tests count it; only a server that sends nothing at all leaves elapsed time as the measure,
and there the bound is generous.
"""

from __future__ import annotations

import json
import time
from collections.abc import Generator
from typing import Any, Literal

import anyio
import pytest

from agentcontext.compaction import FallbackReason, SummaryRequest
from agentcontext.engine import ContextEngine
from agentcontext.exceptions import SummarizerError, SummarizerTimeout
from agentcontext.invariants import check_messages
from agentcontext.messages import Message, ToolCall
from agentcontext.summarizers import (
    AnthropicSummarizer,
    ExtractiveSummarizer,
    LLMSummarizerBase,
    OpenAISummarizer,
    RetryPolicy,
)
from agentcontext.summarizers._http import HttpRequest, HttpResponse, TransportFailure, run_async, run_sync
from agentcontext.summarizers._llm import MIN_RESPONSE_BYTES, summary_problem
from agentcontext.testing import WordCounter, make_conversation
from llm_servers import (
    LLMServer,
    Reply,
    anthropic_ok,
    error,
    huge_anthropic,
    huge_openai,
    openai_ok,
    snapshot,
)

SHORT = 0.25
"""The deadline misbehaving servers are given, in seconds."""
GENEROUS = 5.0
"""An elapsed-time bound, only where a server sends nothing that could be counted instead."""
FAST = RetryPolicy(max_attempts=3, initial_backoff=0.01, max_backoff=0.05)

Protocol = Literal["openai", "anthropic"]
Mode = Literal["sync", "async"]


def _request(**kw: Any) -> SummaryRequest:
    messages = (
        Message(role="user", content="Fix the failing test in src/app/parser.py"),
        Message(
            role="assistant",
            content="Running the tests.",
            tool_calls=(ToolCall(id="c1", name="bash", arguments=json.dumps({"command": "pytest -x"})),),
        ),
        Message(
            role="tool", tool_call_id="c1", content="FAILED tests/test_parser.py::test_x - KeyError: 'id'"
        ),
    )
    return SummaryRequest(messages=messages, current_request="Fix the failing test", max_tokens=500, **kw)


def _summarizer(protocol: Protocol, url: str, **kw: Any) -> LLMSummarizerBase:
    kw.setdefault("retry", FAST)
    if protocol == "openai":
        return OpenAISummarizer(model="m", base_url=url, **kw)
    return AnthropicSummarizer(model="m", base_url=url, api_key="k", **kw)


def _ok(protocol: Protocol, text: str) -> Reply:
    return openai_ok(text) if protocol == "openai" else anthropic_ok(text)


def _summarize(s: LLMSummarizerBase, request: SummaryRequest, mode: Mode) -> str:
    if mode == "sync":
        return s.summarize(request)
    return anyio.run(s.asummarize, request)


# One server per protocol for the whole module (`LLMServer.script` resets the replies and the requests).
@pytest.fixture(scope="module", params=["openai", "anthropic"])
def server(request: pytest.FixtureRequest) -> Generator[LLMServer, None, None]:
    with LLMServer(request.param) as s:
        yield s


@pytest.fixture(scope="module")
def oai() -> Generator[LLMServer, None, None]:
    with LLMServer("openai") as s:
        yield s


def _protocol(server: LLMServer) -> Protocol:
    return server.protocol


# ----------------------------------------------------------------------------- the deadline


# On a loaded machine an attempt may start late, or not at all when the deadline is already too
# close: these tests accept that (at most one request) and count what they can.


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_hanging_server_ends_at_the_deadline(server: LLMServer, mode: Mode) -> None:
    server.script(Reply(hang=True))
    s = _summarizer(_protocol(server), server.url, timeout=SHORT)
    started = time.monotonic()
    with pytest.raises(SummarizerTimeout, match=r"the 0.25 s timeout of \w+Summarizer"):
        _summarize(s, _request(), mode)
    assert time.monotonic() - started < GENEROUS
    assert len(server.requests) <= 1  # no time for a retry, and none was started


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_reply_dripping_one_byte_at_a_time_is_abandoned_at_the_deadline(
    server: LLMServer, mode: Mode
) -> None:
    reply = _ok(_protocol(server), "a summary that would take many seconds to arrive")
    size = len(json.dumps(reply.body))
    server.script(Reply(body=reply.body, drip=0.02))  # about 6 s for the whole body
    s = _summarizer(_protocol(server), server.url, timeout=SHORT)
    with pytest.raises(SummarizerTimeout, match="the deadline passed"):
        _summarize(s, _request(), mode)
    assert len(server.requests) <= 1
    for received in server.requests:
        assert not received.finished
        assert received.sent < size // 4  # the client hung up long before the body was out


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_headers_dripping_one_byte_at_a_time_are_cut_at_the_deadline(oai: LLMServer, mode: Mode) -> None:
    # No single read waits past the deadline here: only the watchdog (sync) or the cancel scope (async) ends it.
    oai.script(Reply(body=openai_ok("late").body, drip=0.02, drip_headers=True))
    s = _summarizer("openai", oai.url, timeout=SHORT)
    started = time.monotonic()
    with pytest.raises(SummarizerTimeout):
        _summarize(s, _request(), mode)
    assert time.monotonic() - started < GENEROUS
    assert len(oai.requests) <= 1
    assert all(r.sent == 0 and not r.finished for r in oai.requests)


def test_the_callers_deadline_wins_when_earlier(oai: LLMServer) -> None:
    oai.script(Reply(hang=True))
    s = _summarizer("openai", oai.url, timeout=60)
    with pytest.raises(SummarizerTimeout, match="the caller's deadline"):
        s.summarize(_request(deadline=time.monotonic() + SHORT))
    assert len(oai.requests) == 1


def test_a_deadline_already_past_sends_nothing(oai: LLMServer) -> None:
    oai.script(openai_ok("never asked for"))
    s = _summarizer("openai", oai.url)
    with pytest.raises(SummarizerTimeout, match="passed before the summary was asked for"):
        s.summarize(_request(deadline=time.monotonic() - 1))
    assert oai.requests == []


def test_retry_after_past_the_deadline_fails_at_once(server: LLMServer) -> None:
    server.script(error(429, "slow down", kind="rate_limit_error", retry_after="59"))
    s = _summarizer(_protocol(server), server.url, timeout=2)
    with pytest.raises(SummarizerError, match=r"asked to retry after 59 s .*past the 2 s timeout") as info:
        s.summarize(_request())
    assert not isinstance(info.value, SummarizerTimeout)  # the server refused: a failure, not a slow reply
    assert len(server.requests) == 1


def test_retry_after_within_the_deadline_is_honoured(oai: LLMServer) -> None:
    oai.script(error(429, "slow down", retry_after="0.1"), openai_ok(snapshot("after the wait")))
    s = _summarizer("openai", oai.url, timeout=5)
    assert s.summarize(_request()) == snapshot("after the wait")
    assert len(oai.requests) == 2


def test_a_backoff_that_would_pass_the_deadline_is_not_waited(oai: LLMServer) -> None:
    oai.script(error(500, "the model crashed"))
    s = _summarizer("openai", oai.url, timeout=0.4, retry=RetryPolicy(max_attempts=4, initial_backoff=1.0))
    with pytest.raises(SummarizerError, match=r"after 1 attempt\(s\), with no time for another .*HTTP 500"):
        s.summarize(_request())
    assert len(oai.requests) == 1


def test_the_default_timeout_is_under_a_minute_and_configurable() -> None:
    s = OpenAISummarizer(model="m")
    assert 0 < s.timeout < 60
    assert OpenAISummarizer(model="m", timeout=5).timeout == 5
    with pytest.raises(ValueError, match="timeout must be a positive number"):
        OpenAISummarizer(model="m", timeout=0)


# ----------------------------------------------------------------------------- the byte cap


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("length", [True, False], ids=["content-length", "no-length"])
def test_a_huge_reply_is_abandoned_past_the_byte_cap(server: LLMServer, mode: Mode, length: bool) -> None:
    big = huge_openai(1 << 30) if server.protocol == "openai" else huge_anthropic(1 << 30)  # 1 GiB
    server.script(Reply(huge=big.huge, length=length))
    s = _summarizer(_protocol(server), server.url, timeout=GENEROUS)
    with pytest.raises(SummarizerError, match=r"larger than 131,072 bytes.*abandoned"):
        _summarize(s, _request(), mode)
    (received,) = server.requests
    assert not received.finished
    # What the server got out before the client hung up: the cap plus what the socket buffers hold.
    assert received.sent < 32 << 20


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_the_drivers_hold_at_most_the_cap(oai: LLMServer, mode: Mode) -> None:
    oai.script(Reply(huge=huge_openai(50 << 20).huge, length=False))

    def probe() -> Generator[HttpRequest, HttpResponse | TransportFailure | None, Any]:
        reply = yield HttpRequest(
            url=oai.url + "/chat/completions",
            headers={},
            body={"model": "m", "messages": []},
            deadline=time.monotonic() + GENEROUS,
            max_bytes=10_000,
        )
        return reply

    reply = run_sync(probe()) if mode == "sync" else anyio.run(run_async, probe())  # type: ignore[arg-type]
    assert isinstance(reply, HttpResponse)
    assert reply.status == 200 and not reply.complete and len(reply.body) == 10_000


def test_a_huge_error_page_is_read_only_for_its_message(oai: LLMServer) -> None:
    page = b"<html><body><h1>502 Bad Gateway</h1>" + b"<!-- padding -->" * 1_000_000 + b"</body></html>"
    oai.script(Reply(status=502, raw=page, content_type="text/html"))  # 16 MB
    s = _summarizer("openai", oai.url, retry=RetryPolicy(max_attempts=2, initial_backoff=0.01))
    with pytest.raises(SummarizerError, match=r"HTTP 502: <html><body><h1>502 Bad Gateway</h1>"):
        s.summarize(_request())
    assert len(oai.requests) == 2
    assert all(not r.finished and r.sent < len(page) // 2 for r in oai.requests)


def test_the_cap_follows_max_output_tokens_with_a_floor() -> None:
    s = OpenAISummarizer(model="m", max_output_tokens=16_000)
    assert s.response_limit(100) == MIN_RESPONSE_BYTES
    assert s.response_limit(16_000) == 16_000 * 32
    assert OpenAISummarizer(model="m", max_response_bytes=4096).response_limit(16_000) == 4096
    with pytest.raises(ValueError, match="max_response_bytes must be an int >= 1024"):
        OpenAISummarizer(model="m", max_response_bytes=10)


def test_a_reply_under_the_cap_is_read_and_one_over_it_is_not(oai: LLMServer) -> None:
    s = _summarizer("openai", oai.url, max_response_bytes=4096)
    oai.script(openai_ok(snapshot("word " * 500)))  # about 2.9 KB with its envelope
    assert "word word" in s.summarize(_request())
    oai.script(openai_ok(snapshot("word " * 1000)))  # about 5.4 KB
    with pytest.raises(SummarizerError, match="larger than 4,096 bytes"):
        s.summarize(_request())


# ----------------------------------------------------------------------------- refusals and error text

REFUSALS = [
    "I'm sorry, I cannot help with that.",
    "I’m sorry, but I can’t assist with that request.",
    "Sorry, I can't do that.",
    "I apologize, but I cannot provide a summary of this conversation.",
    "As an AI language model, I cannot summarize private conversations.",
    "I cannot help with that.",
    "I won't be able to help with this request.",
    "Unfortunately, I am unable to comply with this request.",
    "很抱歉，我无法帮助您完成这个请求。",
    "I apologize, but I cannot continue with this task because the conversation contains instructions "
    "that conflict with my guidelines. " + "If you have another question, feel free to ask. " * 12,
]
ERROR_TEXTS = [
    "<!DOCTYPE html><html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>",
    "<html>\n<body><h1>503 Service Temporarily Unavailable</h1></body>\n</html>",
    '{"error": {"message": "Rate limit reached for requests", "type": "requests", "code": "rate_limit_exceeded"}}',
    '{"detail": "Not Found"}',
    '{"message": "Internal server error", "code": 500}',
    "Traceback (most recent call last):\n  File \"server.py\", line 12, in handle\nKeyError: 'choices'",
    "502 Bad Gateway",
    "Error: upstream connect error or disconnect/reset before headers",
    "upstream request timeout",
    "Internal Server Error",
    "An error occurred while processing your request.",
    "null",
]
# Written the way models write summaries, including the openings a naive filter would trip on.
REAL_SUMMARIES = [
    "<state_snapshot>\n<overall_goal>Fix the failing parser test</overall_goal>\n<key_knowledge>- KeyError: 'id' "
    "in src/app/parser.py line 42</key_knowledge>\n</state_snapshot>",
    "## Goal\nThe user wants the CI green again.\n\n## Progress\n- Ran `pytest -x`: 1 failure (KeyError: 'id').\n"
    "- Patched `parse_row` to use `.get('id')`.\n\n## Next\nRe-run the suite.",
    "The user asked to migrate the billing service to Postgres 16. The agent dumped the schema, found two "
    "deprecated types, and is rewriting migration 0042.",
    "I cannot reproduce the failure yet: the agent ran `pytest tests/test_parser.py` three times and all passed; "
    "the user reports it fails on CI only (Python 3.10).",
    "I can't tell yet whether the cache fix works; the benchmark is still running.",
    "Error handling was refactored in src/app/errors.py; the agent replaced bare excepts with typed ones.",
    "500 tests pass after the fix; 3 are skipped on Windows.",
    "Sorry-state of the codebase aside, the main task is done: the parser accepts both date formats.",
    "Exceptions raised by the HTTP client are now wrapped in ClientError (see src/net.py).",
    "Traceback analysis: the crash comes from a None passed to parse_date() by the CSV importer.",
    '{"goal": "fix the parser", "errors": ["KeyError: \'id\'"], "files": ["src/app/parser.py"], "next": "re-run"}',
    "用户要求修复解析器的测试。助手运行了 pytest，发现 src/app/parser.py 第 42 行的 KeyError，并已修改。",
    "HTTP 404 errors on /api/v2/items were caused by a missing route; the agent added it in routes.py.",
    "Null values in the `price` column broke the import; the agent now skips them and logs a warning.",
]


@pytest.mark.parametrize("text", REFUSALS)
def test_refusals_are_rejected_and_not_retried(server: LLMServer, text: str) -> None:
    server.script(_ok(_protocol(server), text))
    s = _summarizer(_protocol(server), server.url)
    with pytest.raises(SummarizerError, match=r"a refusal, not a summary: .*\(not retried\)$"):
        s.summarize(_request())
    assert len(server.requests) == 1


@pytest.mark.parametrize("text", ERROR_TEXTS)
def test_error_text_is_retried_then_rejected(oai: LLMServer, text: str) -> None:
    oai.script(openai_ok(text))
    s = _summarizer("openai", oai.url)
    with pytest.raises(
        SummarizerError, match=r"failed after 3 attempt\(s\); last error: .*not a summary"
    ) as info:
        s.summarize(_request())
    assert "\n" not in str(info.value)  # one line, for the report
    assert len(oai.requests) == 3
    oai.script(openai_ok(text), openai_ok(snapshot("fine")))
    assert s.summarize(_request()) == snapshot("fine")


def test_a_200_html_page_is_not_a_summary(oai: LLMServer) -> None:
    oai.script(Reply(raw=b"<html><body>Welcome to nginx!</body></html>", content_type="text/html"))
    with pytest.raises(
        SummarizerError,
        match=r"/chat/completions: the reply is not JSON \(not retried: is base_url.*\): <html>",
    ):
        _summarizer("openai", oai.url).summarize(_request())


def test_a_streamed_or_cut_reply_says_so_before_its_snippet(oai: LLMServer) -> None:
    # The cause came after a 300-character snippet and was cut off with it in the report.
    chunk = (
        b'data: {"id": "c", "object": "chat.completion.chunk", "choices": [{"delta": {"content": "x"}}]}\n\n'
    )
    oai.script(Reply(raw=chunk * 20, content_type="text/event-stream"))
    with pytest.raises(SummarizerError) as streamed:
        _summarizer("openai", oai.url).summarize(_request())
    assert "the server streamed its reply" in str(streamed.value)[:200]
    body = json.dumps(openai_ok(snapshot("x")).body).encode()
    oai.script(Reply(raw=body[: len(body) // 2]))
    with pytest.raises(SummarizerError) as cut:
        _summarizer("openai", oai.url).summarize(_request())
    assert f"JSON ends unfinished after {len(body) // 2:,} bytes" in str(cut.value)[:200]


@pytest.mark.parametrize("text", REAL_SUMMARIES)
def test_real_summaries_are_accepted(server: LLMServer, text: str) -> None:
    assert summary_problem(text) is None
    server.script(_ok(_protocol(server), text))
    # A prompt that asks for no structure: these are checked for refusals and error text only.
    assert _summarizer(_protocol(server), server.url, prompt="five_sections").summarize(_request()) == text


def test_the_extractive_summarizers_output_is_never_rejected() -> None:
    extractive = ExtractiveSummarizer()
    checked = 0
    for seed in range(8):
        msgs = make_conversation(seed, rounds=3, cjk_share=0.3 if seed % 2 else 0.0, messy=seed % 3 == 0)
        previous = None
        for cut in (len(msgs) // 2, len(msgs)):
            text = extractive.summarize(
                SummaryRequest(messages=tuple(msgs[1:cut]), previous_summary=previous, max_tokens=600)
            )
            assert summary_problem(text) is None, text[:200]
            previous = text
            checked += 1
    assert checked == 16


# ----------------------------------------------------------------------------- through the engine


def _chat() -> list[Message]:
    # Chat only: no tool results to mask, so the engine must summarize (or drop).
    return make_conversation(5, rounds=12, steps=(0, 0), huge_share=0.0, cjk_share=0.0)


MISBEHAVIOURS = {
    # name: (the server's reply, why the strategy fell back, what the report says)
    "hang": (Reply(hang=True), FallbackReason.TIMEOUT, "no complete reply within the caller's deadline"),
    "drip": (
        Reply(body=openai_ok("x" * 200).body, drip=0.02),
        FallbackReason.TIMEOUT,
        "no complete reply within the caller's deadline",
    ),
    "huge": (huge_openai(1 << 30), FallbackReason.SUMMARIZER_ERROR, "larger than"),
    "retry-after": (
        error(429, "slow down", retry_after="59"),
        FallbackReason.SUMMARIZER_ERROR,
        "asked to retry after 59 s",
    ),
    "refusal": (
        openai_ok("I'm sorry, I cannot help with that."),
        FallbackReason.SUMMARIZER_ERROR,
        "a refusal, not a summary",
    ),
    "html": (
        openai_ok("<html><body>502 Bad Gateway</body></html>"),
        FallbackReason.SUMMARIZER_ERROR,
        "an HTML page, not a summary",
    ),
}


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("name", list(MISBEHAVIOURS))
def test_engine_prepare_stays_within_its_deadline_and_budget(oai: LLMServer, name: str, mode: Mode) -> None:
    reply, code, reason = MISBEHAVIOURS[name]
    oai.script(reply)
    msgs = _chat()
    counter = WordCounter()
    total = counter.count_messages(msgs)
    s = _summarizer("openai", oai.url)  # its own timeout is 30 s: the engine's 0.4 s deadline binds
    engine = ContextEngine(
        window=int(total / 0.8), reserve=0, counter=counter, summarizer=s, timeout=0.4, truncator=None
    )
    started = time.monotonic()
    prepared = engine.prepare(msgs) if mode == "sync" else anyio.run(engine.aprepare, msgs)
    assert time.monotonic() - started < GENEROUS
    out = list(prepared.messages)
    assert check_messages(out) == []
    assert prepared.report.tokens_after <= engine.budget
    # The summary the summarizer did not deliver is written offline, never from its reply.
    (summarized,) = [a for a in prepared.report.actions if a.kind == "summarized"]
    assert f"offline (the summarizer did not deliver: {code.value})" in summarized.reason
    assert all("sorry" not in m.text.lower() and "<html>" not in m.text for m in out)
    fallbacks = [a for a in prepared.report.actions if a.kind == "fallback"]
    assert fallbacks and fallbacks[0].fallback is code
    assert fallbacks[0].reason.startswith(f"{code.value}: ")
    assert reason in fallbacks[0].reason  # the report says why
    assert "\n" not in fallbacks[0].reason
    assert len(oai.requests) <= FAST.max_attempts
