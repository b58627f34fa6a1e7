"""Agents that act in text: the command in a fenced block of the reply, its output back as a user message.

mini-swe-agent, classic SWE-agent, ReAct loops and OpenHands without function calling
send each command's output as a user message under a header (``<returncode>``,
``OBSERVATION:``, ``Observation:``...). Those are tool results in all but role: a huge
one is shortened on arrival instead of making the engine refuse the call (it is not the
user's latest request, which is kept verbatim), old ones are masked, and a summary reads
each as the result of the command before it, not as something the user asked for.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentcontext import ContextEngine, Message, counter_for
from agentcontext.compaction import MessageKind, SummaryRequest, is_observation, is_user_request, kind_of
from agentcontext.invariants import check_messages
from agentcontext.strategies import MaskObservations
from agentcontext.strategies._base import CompactionContext
from agentcontext.summarizers import ExtractiveSummarizer
from agentcontext.testing import WordCounter
from realdata import DATA

TASK = "Fix the crash in src/report.py when the totals list is empty; keep the public API."


def observation(code: int, output: str) -> Message:
    return Message(role="user", content=f"<returncode>{code}</returncode>\n<output>\n{output}\n</output>")


def run(thought: str, command: str) -> Message:
    return Message(role="assistant", content=f"THOUGHT: {thought}\n\n```bash\n{command}\n```")


def section(summary: str, name: str) -> str:
    """One section of a snapshot summary ('' when it has none)."""
    _, found, rest = summary.partition(f"<{name}>")
    return rest.partition(f"</{name}>")[0] if found else ""


def text_agent(steps: int, output_lines: int = 3) -> list[Message]:
    msgs = [
        Message(role="system", content="You solve tasks with shell commands."),
        Message(role="user", content=TASK),
    ]
    for i in range(steps):
        listing = "\n".join(f"src/report.py:{n}: total_{i}_{n} = sum(values)" for n in range(output_lines))
        msgs += [run(f"look at step {i}", f"grep -n total_{i} src/report.py"), observation(0, listing)]
    return msgs


@pytest.mark.parametrize(
    "text",
    [
        "<returncode>0</returncode>\n<output>\nok\n</output>",
        "  <output>\nok\n</output>",
        "<exception>An error occurred while executing the command: timed out</exception>",
        "<exception>An error occurred</exception>\n<returncode>-1</returncode>\n<output>\n</output>",
        "OBSERVATION:\nfile listing",
        "EXECUTION RESULT of [execute_bash]:\nok",
    ],
)
def test_the_common_headers_mark_an_observation(text: str) -> None:
    m = Message(role="user", content=text)
    assert is_observation(m)
    assert not is_user_request(m)


@pytest.mark.parametrize(
    "text",
    [
        TASK,
        "Please print the <output> of the last run",
        "<output> should hold the totals; fix the template",
        "My observation: the totals are wrong",
        # ReAct's and smolagents' headers open sentences people write: outputs only after a command.
        "Observation: our nightly job got slower after the upgrade. What changed?",
        "Execution logs: attached below, please read them",
        "OBSERVATION: the cache misses doubled",
        "Fix it\n(Open file: n/a)\n(Current directory: /repo)\nbash-$",  # SWE-agent's task ends with its prompt too
    ],
)
def test_the_users_own_words_are_requests(text: str) -> None:
    m = Message(role="user", content=text)
    assert not is_observation(m)
    assert is_user_request(m)


def test_a_caller_can_mark_an_observation_and_only_user_messages_are_one() -> None:
    assert is_observation(Message(role="user", content="42 rows", metadata={"observation": True}))
    assert not is_observation(Message(role="assistant", content="Observation: I will look"))
    assert not is_observation(Message(role="tool", tool_call_id="c", content="<returncode>0</returncode>"))


def test_a_huge_latest_observation_is_shortened_on_arrival_and_the_task_is_kept() -> None:
    # Before: the 40,000-word output was "the latest user message", kept verbatim by promise, and
    # the call failed with ContextOverflowError. It is a command's output: cut at ingest, reported.
    msgs = text_agent(3)
    msgs.append(run("read the log", "cat build.log"))
    msgs.append(observation(0, "\n".join(f"line {n} of the build log" for n in range(8_000))))
    engine = ContextEngine(window=6_000, reserve=500, counter=WordCounter())
    prepared = engine.prepare(msgs)
    out = list(prepared.messages)
    check_messages(out)
    assert sum(WordCounter().count_message(m) for m in out) + 500 <= 6_000
    assert any(m.text == TASK for m in out)  # the latest request, verbatim
    cut = [a for a in prepared.report.actions if a.kind == "truncated"]
    assert [a.message_ids for a in cut] == [(msgs[-1].id,)]
    last = out[-1]
    assert last.role == "user" and is_observation(last) and "line 0 of the build log" in last.text
    assert last.metadata["truncated"]["ref"] is not None  # the whole output can be recalled


def test_old_observations_are_masked_like_tool_results() -> None:
    msgs = text_agent(8, output_lines=40)
    counter = WordCounter()
    ctx = CompactionContext(counter=counter, budget=1_500, target=900)
    result = MaskObservations(keep_recent=2).compact(msgs, ctx)
    masked = {a.message_ids[0] for a in result.actions if a.kind == "masked"}
    observations = [m.id for m in msgs if is_observation(m)]
    assert masked and masked <= set(observations[:-2])
    assert msgs[1].id not in masked  # the task is never a result to mask
    by_id = {m.id: m for m in result.messages}
    assert all(by_id[i].text == next(m.text for m in msgs if m.id == i) for i in observations[-2:])


def test_a_summary_reads_each_command_with_its_output_not_as_a_request() -> None:
    msgs = [
        Message(role="system", content="You solve tasks with shell commands."),
        Message(role="user", content=TASK),
        run("reproduce it", "cat > repro_empty.py << 'EOF'\nfrom report import totals\ntotals([])\nEOF"),
        observation(0, ""),
        run("run the reproduction", "python repro_empty.py"),
        observation(
            1,
            'Traceback (most recent call last):\n  File "src/report.py", line 9\nZeroDivisionError: division by zero',
        ),
        run("guard the empty case", "sed -i 's/return s \\/ n/return s \\/ n if n else 0.0/' src/report.py"),
        observation(0, ""),
    ]
    summary = ExtractiveSummarizer().summarize(SummaryRequest(messages=tuple(msgs), max_tokens=600))
    assert "python repro_empty.py" in summary and "ZeroDivisionError: division by zero" in summary
    assert "created: repro_empty.py" in summary.replace("/", "")  # the file the command wrote
    assert "modified: src/report.py" in summary
    constraints = section(summary, "active_constraints")
    assert "<returncode>" not in constraints  # outputs are not the user's requests


@pytest.mark.parametrize(
    ("reply", "output", "step"),
    [
        (  # OpenHands without native function calling
            "Let me run the tests.\n<function=execute_bash>\n<parameter=command>pytest -q tests/test_report.py</parameter>\n</function>",
            "EXECUTION RESULT of [execute_bash]:\nE   ZeroDivisionError: division by zero\n1 failed in 0.12s",
            "execute_bash: pytest -q tests/test_report.py",
        ),
        (  # ReAct
            "Thought: I need the tests' result.\nAction: shell\nAction Input: pytest -q tests/test_report.py",
            "Observation: E   ZeroDivisionError: division by zero\n1 failed in 0.12s",
            "shell: pytest -q tests/test_report.py",
        ),
    ],
)
def test_calls_written_in_other_text_forms_are_steps(reply: str, output: str, step: str) -> None:
    msgs = [
        Message(role="user", content=TASK),
        Message(role="assistant", content=reply),
        Message(role="user", content=output),
    ]
    summary = ExtractiveSummarizer().summarize(SummaryRequest(messages=tuple(msgs), max_tokens=400))
    assert step in section(summary, "recent_actions") or step in section(summary, "task_state")
    assert "ZeroDivisionError: division by zero" in summary
    assert "EXECUTION RESULT" not in section(summary, "active_constraints")
    assert "Observation:" not in section(summary, "active_constraints")


def _as_text_agent(path: Path) -> list[Message]:
    """A real tool-calling run rewritten the way mini-swe-agent's text mode sends it."""
    out: list[Message] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        m = json.loads(line)
        if m["role"] == "assistant" and m.get("tool_calls"):
            commands = [json.loads(c["function"]["arguments"]).get("command", "") for c in m["tool_calls"]]
            blocks = "".join(f"\n\n```bash\n{c}\n```" for c in commands)
            out.append(Message(role="assistant", content=(m.get("content") or "") + blocks))
        elif m["role"] == "tool":
            out.append(Message(role="user", content=m["content"]))
        else:
            out.append(Message(role=m["role"], content=m.get("content") or ""))
    merged: list[Message] = []
    for m in out:  # parallel calls' outputs: one user message
        if merged and m.role == "user" == merged[-1].role:
            merged[-1] = Message(role="user", content=merged[-1].text + "\n\n" + m.text)
        else:
            merged.append(m)
    return merged


@pytest.mark.parametrize(
    "name", sorted(p.name for p in (DATA / "conversations").glob("mini-swe-agent__*.jsonl"))
)
def test_a_real_text_agent_run_fits_with_its_task_commands_and_files(name: str) -> None:
    msgs = _as_text_agent(DATA / "conversations" / name)
    task = next(m for m in msgs if m.role == "user")
    assert sum(is_observation(m) for m in msgs) >= 10
    tokens = sum(counter_for("gpt-4o").count_message(m) for m in msgs)
    engine = ContextEngine(model="gpt-4o", window=tokens // 3 + 1_000, reserve=1_000)
    prepared = engine.prepare(msgs, fill=True)
    out = list(prepared.messages)
    check_messages(out)
    assert any(m.text == task.text for m in out)
    summary = next(m.text for m in out if "<state_snapshot>" in m.text)
    assert "<recent_actions>" in summary or "<file_system_state>" in summary
    constraints = section(summary, "active_constraints")
    assert "<returncode>" not in constraints


def test_outputs_beyond_the_horizon_are_not_kept_as_the_users_requests() -> None:
    # At any age the horizon keeps the user's requests (up to a ledger's room): not command outputs.
    msgs = text_agent(400)
    engine = ContextEngine(window=3_000, reserve=500, counter=WordCounter(), horizon=5_000)
    prepared = engine.prepare(msgs)
    out = list(prepared.messages)
    check_messages(out)
    horizon = next(a for a in prepared.report.actions if a.strategy == "horizon")
    dropped = set(horizon.message_ids)
    cut = max(i for i, m in enumerate(msgs) if m.id in dropped)
    assert cut > 100
    assert all(m.id in dropped for m in msgs[:cut] if is_observation(m))  # every output before the cut goes
    assert msgs[1].id not in dropped and any(m.text == TASK for m in out)  # the task stays


def test_a_persons_message_that_opens_like_an_output_stays_their_latest_request() -> None:
    log = "\n".join(f"02:{n % 60:02d} job step {n} took {n % 7} s" for n in range(3_000))
    ask = f"Observation: our nightly job got slower after the upgrade. Here is the log:\n{log}\nWhat changed?"
    msgs = [Message(role="system", content="You are an SRE."), Message(role="user", content=ask)]
    prepared = ContextEngine(model="gpt-4o").prepare(msgs)
    assert prepared.report.actions == ()
    assert list(prepared.messages)[-1].text == ask


def test_masked_outputs_are_summarized_as_outputs_not_as_requests() -> None:
    msgs = text_agent(8, output_lines=40)
    ctx = CompactionContext(counter=WordCounter(), budget=1_500, target=900)
    masked = MaskObservations(keep_recent=2).compact(msgs, ctx).messages
    assert sum(kind_of(m) is MessageKind.MASKED for m in masked) >= 3
    summary = ExtractiveSummarizer().summarize(SummaryRequest(messages=tuple(masked), max_tokens=600))
    assert "cleared to save context" not in section(summary, "active_constraints")
    assert "run: grep -n total_0 src/report.py" in summary  # the command is still a step
