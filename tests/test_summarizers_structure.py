"""A reply to a prompt that asks for a structure (the ``<state_snapshot>`` XML) is used only with it.

Over real loopback servers speaking the OpenAI and Anthropic protocols: prose is asked for again once,
with a correction; a second miss is an unusable summary, which the engine writes offline instead and
reports; a preamble or code fence around a good snapshot is dropped; malformed XML is refused.
"""

from __future__ import annotations

from collections.abc import Generator

import pytest

from agentcontext.compaction import OFFLINE_INSTEAD, FallbackReason, SummaryRequest
from agentcontext.engine import ContextEngine
from agentcontext.exceptions import ConfigError, UnusableSummaryError
from agentcontext.invariants import check_messages
from agentcontext.messages import Message
from agentcontext.summarizers import (
    AnthropicSummarizer,
    OpenAISummarizer,
    RetryPolicy,
    SummaryProblem,
    SummaryStructure,
    get_prompt,
    structured_summary,
)
from agentcontext.testing import WordCounter, make_conversation
from llm_servers import LLMServer, anthropic_ok, openai_ok

FAST = RetryPolicy(max_attempts=3, initial_backoff=0.01, max_backoff=0.05)
SNAPSHOT = get_prompt("state_snapshot").structure
PROSE = "Sure! Here's a summary of the conversation: the user wants a task app, and the agent wrote app.py."
GOOD = (
    "<state_snapshot>\n"
    "<overall_goal>Build a task app with auth</overall_goal>\n"
    '<active_constraints>- "use flask"</active_constraints>\n'
    "<key_knowledge>- tests run with `pytest -q`; `if a < b && c` guards List<String> parsing</key_knowledge>\n"
    "<artifact_trail>- src/app.py: created</artifact_trail>\n"
    "<file_system_state>- created src/app.py</file_system_state>\n"
    "<recent_actions>- pytest -q: exit 0</recent_actions>\n"
    "<task_state>[DONE] scaffold\n[TODO] auth</task_state>\n"
    "</state_snapshot>"
)
CORRECTION = "Your previous answer was not in the required format"


@pytest.fixture(scope="module")
def oai() -> Generator[LLMServer, None, None]:
    with LLMServer("openai") as server:
        yield server


@pytest.fixture(scope="module")
def ant() -> Generator[LLMServer, None, None]:
    with LLMServer("anthropic") as server:
        yield server


def _request(**kw: object) -> SummaryRequest:
    messages = (
        Message(role="user", content="Build a task app with auth, in flask."),
        Message(role="assistant", content="Created src/app.py; pytest -q passes."),
    )
    return SummaryRequest(messages=messages, max_tokens=500, **kw)  # type: ignore[arg-type]


def _user_prompt(server: LLMServer, n: int) -> str:
    body = server.requests[n].body
    content = body["messages"][-1]["content"]
    assert isinstance(content, str)
    return content


# ----------------------------------------------------------------------------- the summarizer


def test_a_good_snapshot_is_used_unchanged_at_the_first_request(oai: LLMServer) -> None:
    assert structured_summary(GOOD, SNAPSHOT) == GOOD  # type: ignore[arg-type]
    oai.script(openai_ok(GOOD))
    assert OpenAISummarizer(model="m", base_url=oai.url, retry=FAST).summarize(_request()) == GOOD
    assert len(oai.requests) == 1


def test_prose_is_asked_for_again_with_a_correction_and_the_snapshot_is_used(oai: LLMServer) -> None:
    oai.script(openai_ok(PROSE), openai_ok(GOOD))
    assert OpenAISummarizer(model="m", base_url=oai.url, retry=FAST).summarize(_request()) == GOOD
    assert len(oai.requests) == 2
    assert CORRECTION not in _user_prompt(oai, 0)
    again = _user_prompt(oai, 1)
    assert CORRECTION in again and "no <state_snapshot> element" in again
    assert "with <overall_goal> and <task_state> filled in" in again
    # The same prompt otherwise: the correction rides in the strategy's extra instructions.
    assert again.startswith(_user_prompt(oai, 0).rsplit("\n\n", 1)[0])


def test_the_correction_is_added_to_the_strategy_s_own_instructions(oai: LLMServer) -> None:
    oai.script(openai_ok(PROSE), openai_ok(GOOD))
    note = "This is part 1 of 2 of the history; summarize this part only."
    OpenAISummarizer(model="m", base_url=oai.url, retry=FAST).summarize(_request(instructions=note))
    again = _user_prompt(oai, 1)
    assert note in again and CORRECTION in again


def test_prose_twice_is_an_unusable_summary(oai: LLMServer) -> None:
    oai.script(openai_ok(PROSE))  # the last reply repeats
    s = OpenAISummarizer(model="m", base_url=oai.url, retry=FAST)
    with pytest.raises(
        UnusableSummaryError, match=r"no <state_snapshot> element.*reply to a correction"
    ) as info:
        s.summarize(_request())
    assert "\n" not in str(info.value)  # one line, for the report
    assert len(oai.requests) == 2  # one correction, not the transport retries


@pytest.mark.parametrize(
    "reply",
    [
        "```xml\n" + GOOD + "\n```",
        "Here is the state snapshot:\n\n" + GOOD,
        "Here is the <state_snapshot> you asked for:\n```\n"
        + GOOD
        + "\n```\nLet me know if anything is missing.",
    ],
    ids=["fence", "preamble", "preamble-naming-the-tag-and-fence"],
)
def test_a_preamble_or_fence_around_a_snapshot_is_dropped(oai: LLMServer, reply: str) -> None:
    oai.script(openai_ok(reply))
    assert OpenAISummarizer(model="m", base_url=oai.url, retry=FAST).summarize(_request()) == GOOD
    assert len(oai.requests) == 1


MALFORMED = {
    "unclosed-root": (GOOD.removesuffix("</state_snapshot>"), "<state_snapshot> is not closed"),
    "unclosed-section": (GOOD.replace("</overall_goal>", ""), "<overall_goal> is not closed"),
    "closed-twice": (
        GOOD.replace("</key_knowledge>", "</key_knowledge></key_knowledge>"),
        "<key_knowledge> is closed but never opened",
    ),
    "overlapping": (
        GOOD.replace("</overall_goal>\n<active_constraints>", "<active_constraints></overall_goal>"),
        "<active_constraints> starts inside <overall_goal>",
    ),
    "no-task-state": (
        GOOD.replace("<task_state>[DONE] scaffold\n[TODO] auth</task_state>\n", ""),
        "<task_state>",
    ),
    "empty-goal": (GOOD.replace("Build a task app with auth", " "), "<overall_goal> missing or empty"),
    "two-snapshots": (GOOD + "\n" + GOOD, "2 <state_snapshot> elements"),
    "a-second-unclosed": (GOOD + "\n<state_snapshot>", "a second <state_snapshot> is not closed"),
    "no-root": (
        GOOD.removeprefix("<state_snapshot>\n").removesuffix("\n</state_snapshot>"),
        "no <state_snapshot>",
    ),
}


@pytest.mark.parametrize("name", list(MALFORMED))
def test_malformed_xml_is_refused(oai: LLMServer, name: str) -> None:
    reply, reason = MALFORMED[name]
    problem = structured_summary(reply, SNAPSHOT)  # type: ignore[arg-type]
    assert isinstance(problem, SummaryProblem) and reason in problem.reason
    oai.script(openai_ok(reply))
    with pytest.raises(UnusableSummaryError, match="not the structure the prompt asks for"):
        OpenAISummarizer(model="m", base_url=oai.url, retry=FAST).summarize(_request())
    assert len(oai.requests) == 2


@pytest.mark.parametrize(
    "reply",
    [
        # Sections left out are fine; text inside a section is not parsed as XML.
        "<state_snapshot><overall_goal>Fix a && b</overall_goal><key_knowledge/>"
        "<task_state>[TODO] rerun</task_state></state_snapshot>",
        # The snapshot format's Chinese tags, and Gemini CLI's name for the plan.
        "<状态快照>\n<总体目标>\n修复解析器\n</总体目标>\n<任务状态>\n- 计划：重跑测试\n</任务状态>\n</状态快照>",
        "<state_snapshot><overall_goal>Ship</overall_goal><current_plan>[TODO] tag</current_plan></state_snapshot>",
    ],
    ids=["optional-left-out", "chinese-tags", "current-plan"],
)
def test_tolerated_variants_are_used_as_written(oai: LLMServer, reply: str) -> None:
    assert structured_summary(reply, SNAPSHOT) == reply  # type: ignore[arg-type]
    oai.script(openai_ok(reply))
    assert OpenAISummarizer(model="m", base_url=oai.url, retry=FAST).summarize(_request()) == reply
    assert len(oai.requests) == 1


def test_anthropic_asks_again_the_same_way(ant: LLMServer) -> None:
    ant.script(anthropic_ok(PROSE), anthropic_ok(GOOD))
    s = AnthropicSummarizer(model="m", base_url=ant.url, api_key="k", retry=FAST)
    assert s.summarize(_request()) == GOOD
    assert len(ant.requests) == 2 and CORRECTION in _user_prompt(ant, 1)


@pytest.mark.anyio
async def test_async_asks_again_the_same_way(oai: LLMServer) -> None:
    oai.script(openai_ok(PROSE), openai_ok(PROSE))
    s = OpenAISummarizer(model="m", base_url=oai.url, retry=FAST)
    with pytest.raises(UnusableSummaryError):
        await s.asummarize(_request())
    assert len(oai.requests) == 2


def test_the_priorities_prompt_is_checked_and_five_sections_is_not(oai: LLMServer) -> None:
    focus = "<current_focus>auth</current_focus>\n<code_state><file>src/app.py</file></code_state>"
    oai.script(openai_ok("Here you go:\n" + focus + "\nHope this helps."))
    s = OpenAISummarizer(model="m", base_url=oai.url, retry=FAST, prompt="priorities")
    assert s.summarize(_request()) == focus
    oai.script(openai_ok(PROSE))
    with pytest.raises(UnusableSummaryError, match="<current_focus> missing"):
        s.summarize(_request())
    assert get_prompt("five_sections").structure is None
    oai.script(openai_ok(PROSE))
    assert (
        OpenAISummarizer(model="m", base_url=oai.url, prompt="five_sections").summarize(_request()) == PROSE
    )


def test_a_structure_names_tags_and_requires_some_of_its_sections() -> None:
    with pytest.raises(ConfigError, match="not an XML tag name"):
        SummaryStructure(sections=("a b",), required=("a b",))
    with pytest.raises(ConfigError, match="must name at least one of its sections"):
        SummaryStructure(sections=("goal",), required=("plan",))


# ----------------------------------------------------------------------------- through the engine


def _engine(server: LLMServer) -> tuple[ContextEngine, list[Message]]:
    # Chat only: no tool results to mask, so the engine must summarize.
    msgs = make_conversation(5, rounds=12, steps=(0, 0), huge_share=0.0, cjk_share=0.0)
    counter = WordCounter()
    total = counter.count_messages(msgs)
    s = OpenAISummarizer(model="m", base_url=server.url, retry=FAST)
    engine = ContextEngine(window=int(total / 0.8), reserve=0, counter=counter, summarizer=s, truncator=None)
    return engine, msgs


def test_engine_uses_the_snapshot_the_correction_brought(oai: LLMServer) -> None:
    oai.script(openai_ok(PROSE), openai_ok("```xml\n" + GOOD + "\n```"))
    engine, msgs = _engine(oai)
    prepared = engine.prepare(msgs)
    out = list(prepared.messages)
    (summary,) = [m for m in out if m.metadata.get("agentcontext", {}).get("kind") == "summary"]
    assert f"<context_summary>\n{GOOD}\n" in summary.text
    assert not any("Here's a summary" in m.text or "```" in m.text for m in out)
    assert [a for a in prepared.report.actions if a.kind == "fallback"] == []
    assert engine.stats.summarizer_failures == 0 and engine.stats.summaries == 1
    assert len(oai.requests) == 2
    assert check_messages(out) == []


def test_engine_writes_the_summary_offline_after_prose_twice_and_reports_it(oai: LLMServer) -> None:
    oai.script(openai_ok(PROSE))
    engine, msgs = _engine(oai)
    prepared = engine.prepare(msgs)
    out = list(prepared.messages)
    assert not any("Here's a summary" in m.text for m in out)  # the prose is never the summary
    (fallback,) = [a for a in prepared.report.actions if a.kind == "fallback"]
    assert fallback.fallback is FallbackReason.UNUSABLE_SUMMARY
    assert fallback.reason.startswith("unusable_summary: ") and fallback.reason.endswith(OFFLINE_INSTEAD)
    assert "no <state_snapshot> element" in fallback.reason
    (summarized,) = [a for a in prepared.report.actions if a.kind == "summarized"]
    assert "offline (the summarizer did not deliver: unusable_summary)" in summarized.reason
    assert engine.stats.fallbacks == {"unusable_summary": 1}
    assert engine.stats.summarizer_failures == 1  # and the engine backs off from it, as from any failure
    assert len(oai.requests) == 2
    assert prepared.report.tokens_after <= prepared.report.target
    assert check_messages(out) == []
