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
