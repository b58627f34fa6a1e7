"""Files in a running conversation: cut, masked and summarized as what they are to a model and to a summarizer.

A provider bills a PDF by its pages; a summarizer reads a line naming it. A log a tool returns as a text
document is text to cut like any other output.
"""

from __future__ import annotations

import base64
import json

import agentcontext as ac
from agentcontext import FilePart, Message, TextPart, ToolCall
from agentcontext.formats import anthropic
from agentcontext.strategies import CompactionContext, MaskObservations


def pdf(pages: int) -> str:
    body = b"%PDF-1.4\n" + b"".join(b"%d 0 obj << /Type /Page >> endobj\n" % (i + 1) for i in range(pages))
    return "data:application/pdf;base64," + base64.b64encode(body).decode()


def reports(pages: int, rounds: int, *, text: bool = True) -> list[Message]:
    """A user asks to compare quarterly reports; a tool fetches each, returning a line of text and the PDF."""
    doc = pdf(pages)
    msgs = [
        Message(role="system", content="You compare reports."),
        Message(role="user", content="Compare the quarterly reports I will fetch."),
    ]
    for i in range(rounds):
        call = ToolCall(id=f"c{i}", name="fetch_report", arguments=json.dumps({"quarter": f"Q{i}"}))
        msgs += [
            Message(role="assistant", content=f"Fetching quarter {i}.", tool_calls=(call,)),
            Message(
                role="tool",
                tool_call_id=f"c{i}",
                name="fetch_report",
                content=(
                    *([TextPart(text=f"Q{i} revenue: {1000 + i} million")] if text else []),
                    FilePart(url=doc, name=f"q{i}.pdf"),
                ),
            ),
        ]
    return [*msgs, Message(role="user", content="Now compare them.")]


def test_a_log_a_tool_returns_as_a_text_document_is_cut_at_ingest_like_text() -> None:
    # 785k tokens of log as an Anthropic text document: the ingest truncator read only the message's text
    # parts, so the round was dropped whole and an empty summary ("0 earlier messages") stood for it.
    log = "\n".join(
        f"log line {i}: worker {i % 7} processed batch {i} in {i % 97} ms status=OK" for i in range(40_000)
    )
    document = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": log}}
    body = [
        {"role": "user", "content": "Find the failing batch in the log."},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "read_log", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [document]}]},
    ]
    prepared = ac.ContextEngine(model="claude-sonnet-4-5").prepare(anthropic.to_messages(body))
    assert [m.role for m in prepared.messages] == ["user", "assistant", "tool"]
    assert [a.kind for a in prepared.report.actions] == ["truncated"]
    result = prepared.messages[2]
    assert "log line 0:" in result.text and "log line 39999:" in result.text  # head and tail, as for a string
    assert result.files == ()  # the document's text is in the preview; the whole log is in the artifact store


def test_files_are_a_line_each_to_a_summarizer_so_one_request_reads_every_round() -> None:
    # Twelve results with a 50-page PDF each: the summary's read bound counted 150,000 tokens a result, so ten
    # of them were dropped without a summary (their revenue lines lost), for about 40 tokens of text each.
    prepared = ac.ContextEngine(model="gpt-4.1").prepare(reports(50, 12))
    assert [a.kind for a in prepared.report.actions] == ["summarized"]
    summary = next(m.text for m in prepared.messages if "summary of earlier context" in m.text)
    assert all(f"Q{i} revenue" in summary for i in range(11))  # the newest round stays whole after it
    # A model summarizer is asked once, not once a file (ten calls of 42 characters each).
    calls: list[ac.SummaryRequest] = []

    class Recording:
        calls_model = True

        def summarize(self, request: ac.SummaryRequest) -> str:
            calls.append(request)
            return "<summary>" + "; ".join(m.text for m in request.messages) + "</summary>"

    ac.ContextEngine(model="gpt-4o", summarizer=Recording()).prepare(reports(20, 10))
    assert len(calls) == 1
    assert "[attached file: q0.pdf]" in "\n".join(m.text for m in calls[0].messages)


def test_a_step_over_the_read_bound_is_summarized_never_dropped_with_an_empty_summary() -> None:
    # The newest step alone (a 90-page PDF on Claude) was over the bound: the safe point after it left nothing
    # to read, and a summary of "0 earlier messages" replaced the call and its result.
    msgs = reports(90, 1)[:-1]
    msgs[1] = Message(role="user", content="Read the report.")
    prepared = ac.ContextEngine(model="claude-sonnet-4-5").prepare(msgs)
    summarized = [a for a in prepared.report.actions if a.kind == "summarized"]
    assert summarized and len(summarized[0].message_ids) == 2
    assert not any(a.kind == "dropped" for a in prepared.report.actions)
    summary = next(m.text for m in prepared.messages if "summary of earlier context" in m.text)
    assert "0 earlier messages" not in summary and "fetch_report" in summary and "q0.pdf" in summary


def test_a_result_that_is_only_a_file_is_named_in_the_summary_and_in_its_placeholder() -> None:
    msgs = reports(5, 14, text=False)  # each result is the PDF alone
    summary = ac.ExtractiveSummarizer().summarize(
        ac.SummaryRequest(messages=tuple(msgs[1:-1]), max_tokens=2_000)
    )
    assert "(empty)" not in summary and "[attached file: q3.pdf]" in summary
    ctx = CompactionContext(counter=ac.counter_for("gpt-4o"), budget=40_000, target=20_000)
    masked = MaskObservations(keep_recent=1, clear_at_least=0).compact(tuple(msgs), ctx)
    placeholders = [m.text for m in masked.messages if "cleared to save context" in m.text]
    assert placeholders and "It held [attached file: q0.pdf]." in placeholders[0]


def test_a_summary_says_the_goal_stands_verbatim_and_keeps_what_each_request_attached() -> None:
    # A history never compacted, over what one summary reads (250k tokens): the user's first request is kept
    # word for word before the summarized span and was not shown to the summarizer, so the first request it
    # read passed for the goal; and the requests read from beyond the span lost the note of their file.
    msgs = [Message(role="system", content="You review contracts.")]
    for k in range(500):
        if k % 20 == 0:
            text = f"Review contract {k}" + " please" * 2_000
            msgs.append(
                Message(role="user", content=(TextPart(text=text), FilePart(url=pdf(1), name=f"c{k}.pdf")))
            )
        call = ToolCall(id=f"c{k}", name="grep", arguments=json.dumps({"q": f"t{k}"}))
        msgs += [
            Message(role="assistant", tool_calls=(call,)),
            Message(
                role="tool", tool_call_id=f"c{k}", name="grep", content=f"line {k}: " + "lorem ipsum " * 400
            ),
        ]
    msgs.append(Message(role="user", content="continue"))
    prepared = ac.ContextEngine(model="gpt-4o", window=60_000).prepare(msgs)
    summary = next(m.text for m in prepared.messages if "summary of earlier context" in m.text)
    goal = summary.split("<overall_goal>", 1)[1].split("</overall_goal>", 1)[0]
    assert "Review contract" not in goal and "kept verbatim" in goal
    assert any(m.text.startswith("Review contract 0 ") for m in prepared.messages)
    quoted = [k for k in range(20, 500, 20) if f"Review contract {k} " in summary]
    assert len(quoted) > 3 and all(f"[attached file: c{k}.pdf]" in summary for k in quoted)


def text_file(text: str, name: str) -> FilePart:
    return FilePart(url="data:text/plain;base64," + base64.b64encode(text.encode()).decode(), name=name)


def test_a_log_returned_as_a_text_file_keeps_its_errors_in_the_summary_as_text_does() -> None:
    # A summarizer was shown "[attached file: pytest.log]" for it: the failing test and its error were lost,
    # and the report said every identifier was kept.
    log = "\n".join(
        [f"test_{i} PASSED" for i in range(150)]
        + ["FAILED tests/test_pay.py::test_refund - KeyError: 'order_7731'", "1 failed, 150 passed in 3.2s"]
    )
    msgs = [
        Message(role="system", content="You are a coding agent."),
        Message(role="user", content="Run the tests and fix what fails."),
        Message(role="assistant", tool_calls=(ToolCall(id="c1", name="run_tests", arguments="{}"),)),
        Message(role="tool", tool_call_id="c1", content=(text_file(log, "pytest.log"),)),
        Message(role="assistant", content="One test fails; looking into it."),
    ]
    for k in range(2, 14):
        call = ToolCall(id=f"c{k}", name="read", arguments=json.dumps({"path": f"src/m{k}.py"}))
        code = "\n".join(f"def f{k}_{i}(): return {i}" for i in range(60))
        msgs += [
            Message(role="assistant", tool_calls=(call,)),
            Message(role="tool", tool_call_id=f"c{k}", content=code),
        ]
    prepared = ac.ContextEngine(model="gpt-4o", window=9_000, reserve=1_000).prepare(msgs)
    summarized = next(a for a in prepared.report.actions if a.kind == "summarized")
    assert any(m.id in summarized.message_ids for m in msgs[3:4])
    kept = "\n".join(m.text for m in prepared.messages)
    assert "order_7731" in kept and "1 failed" in kept


def test_a_one_shot_fit_widens_the_cut_of_a_text_file_as_of_text() -> None:
    # 14,000 lines returned as a file: cut at ingest by lines, and a one-shot fit with 68k tokens of room
    # left it cut (it measured the message's text, empty for a file).
    log = "x\n" * 14_000
    msgs = [
        Message(role="system", content="You are an agent."),
        Message(role="user", content="Show me the log."),
        Message(role="assistant", tool_calls=(ToolCall(id="c1", name="cat", arguments="{}"),)),
        Message(role="tool", tool_call_id="c1", content=(text_file(log, "run.log"),)),
    ]
    engine = ac.ContextEngine(model="gpt-4o", window=100_000, reserve=4_000)
    prepared = engine.prepare(msgs, fill=True)
    assert not any(a.kind == "truncated" for a in prepared.report.actions)
    assert prepared.report.tokens_after == engine.count(msgs)


def test_a_result_with_an_image_cut_for_a_summarizer_names_a_message_recall_finds() -> None:
    # The cut named the id of a copy with its image noted, which no message has: recall of it failed.
    import re

    from agentcontext import ImagePart, Level
    from agentcontext.session import MemoryStore
    from agentcontext.strategies import HardTruncate, Summarize, Tiered, TokenBudget
    from agentcontext.testing import ScriptedSummarizer

    summarizer = ScriptedSummarizer(replies=["The agent took a screenshot and read the log."])
    s = Summarize()
    pipes = {
        Level.NORMAL: Tiered(tiers=(s, TokenBudget())),
        Level.AGGRESSIVE: Tiered(tiers=(s, TokenBudget())),
        Level.EMERGENCY: Tiered(tiers=(s, HardTruncate())),
    }
    engine = ac.ContextEngine(
        model="gpt-4o", window=9_000, reserve=1_000, summarizer=summarizer, truncator=None, pipelines=pipes
    )
    log = "\n".join(f"line {i}: value={i * 7}" for i in range(1300))  # over one summary request
    shot = ImagePart(url="https://example.com/shot.png")
    session = ac.Session.from_store(MemoryStore(), engine=engine)
    for m in [
        Message(role="system", content="You are an agent."),
        Message(role="user", content="Take a screenshot and read the log."),
        Message(role="assistant", tool_calls=(ToolCall(id="c1", name="screenshot", arguments="{}"),)),
        Message(role="tool", tool_call_id="c1", content=(TextPart(text=log), shot)),
        Message(role="assistant", content="I see the log."),
        Message(role="user", content="Now fix the bug."),
        Message(role="assistant", tool_calls=(ToolCall(id="c2", name="ls", arguments="{}"),)),
        Message(role="tool", tool_call_id="c2", content="a.py b.py"),
    ]:
        session.append(m)
    session.prepare()
    refs = [
        ref for r in summarizer.requests for m in r.messages for ref in re.findall(r"message:msg_\w+", m.text)
    ]
    assert refs
    for ref in refs:
        assert session.recall(ref)  # raises RecallError for a reference to no message


def test_a_file_sent_on_its_own_before_the_question_about_it_is_kept_with_the_question() -> None:
    # Chat clients send an attachment as a message of its own, then the question: under emergency the file
    # was summarized to a note though the budget held it, and the question was about a file no longer there.
    msgs = [Message(role="system", content="sys")]
    for i in range(30):
        msgs += [
            Message(role="user", content=f"question {i} " + "blah " * 300),
            Message(role="assistant", content=f"answer {i} " + "bleh " * 300),
        ]
    contract = FilePart(url=pdf(4), name="contract.pdf")
    msgs += [
        Message(role="user", content=(contract,)),
        Message(role="user", content="Summarize the attached contract."),
    ]
    engine = ac.ContextEngine(model="gpt-4o", window=40_000)
    prepared = engine.prepare(msgs)
    assert prepared.report.tokens_after <= engine.budget
    assert [m.files for m in prepared.messages][-2] == (contract,)
    assert prepared.messages[-1].text == "Summarize the attached contract."
