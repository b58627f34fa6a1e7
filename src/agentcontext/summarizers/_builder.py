"""Reading a conversation into what an extractive summary can hold: the snapshot's raw material.

`collect` walks the messages once: the user's goal and requests, the agent's steps (each tool
call with a short form of its arguments and how it ended; the agent's own words), the files
and records the calls changed, the errors met, the latest test run, the identifiers with where
they were met (`IdentifierIndex`), and what an earlier summary held (ours: its items go back
to their places; another writer's: its prose is kept as it is).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from ..compaction import SummaryRequest, answers_text_action, is_observation, kind_of
from ..messages import JSONValue, Message, ToolCall, tool_call_index, tool_name_for, with_attachments_noted
from ._commands import (
    brief_arguments,
    edited_file,
    error_lines,
    failed,
    file_op,
    is_change,
    is_plan_tool,
    is_verdict,
    outcome,
    plan_of,
    test_summary,
)
from ._identifiers import argument_keys, arguments_text, classify_identifier, extract_identifiers
from ._ranking import AGENT, ERROR_NAME, OUTPUT, TARGET, USER, IdentifierIndex, Rank
from ._snapshot import LABELS, parse_snapshot, split_label
from ._transcript import Language, terminal_text

__all__ = ["State", "Step", "collect"]

_CHANGE_LIMIT = 400
"""Characters of arguments shown for a call that changed a record: its ids are the point."""


@dataclass
class Step:
    """One step of the agent: a tool call and how it ended."""

    seq: int
    """Its place in the conversation (orders steps of one section)."""
    text: str
    failed: bool = False
    change: bool = False
    """A call that changed a record (``update_...``): listed with the changes."""


@dataclass
class State:
    """What a summary holds, before it is fitted to a budget."""

    goal: str | None = None
    requests: list[str] = field(default_factory=list)
    errors: dict[str, None] = field(default_factory=dict)
    files: dict[str, set[str]] = field(default_factory=dict)
    steps: list[Step] = field(default_factory=list)
    index: IdentifierIndex = field(default_factory=IdentifierIndex)
    notes: list[str] = field(default_factory=list)
    """agentcontext's own notes (an elision note, an earlier summary's ``note:`` items): kept if room is left."""
    prior: list[tuple[str, str]] = field(default_factory=list)
    """(section, text) of another writer's earlier summary (an LLM's), in its order: distilled
    knowledge that exists nowhere else in the context, so it ranks right after the user's words."""
    last: str | None = None
    said: list[str] = field(default_factory=list)
    """What the agent said before its last message, oldest first (its findings and decisions): kept if
    room is left, since only their identifiers are indexed."""
    test: str | None = None
    """The latest test run: its command and result."""
    plan: str | None = None
    """The latest plan or to-do list a tool call set, one ``[status] item`` a line: where the agent is going."""

    def add_file(self, path: str, op: str) -> None:
        self.files.setdefault(path, set()).add(op)

    def add_step(self, step: Step) -> None:
        self.steps.append(step)


class _NoIndex(IdentifierIndex):
    """An index that keeps nothing, for a state read for its files, steps and test run only."""

    def add_text(self, text: str, *, tier: int, when: int) -> None:  # noqa: ARG002 - the index's own signature
        return

    def put(self, ident: str, rank: Rank) -> None:  # noqa: ARG002
        return


def collect(request: SummaryRequest, lang: Language, *, identifiers: bool = True) -> State:
    """The state of ``request``'s messages (and of the previous summary it carries); without their
    ``identifiers`` ranked when only the files, steps and test run are wanted (a third of the cost)."""
    state = State() if identifiers else State(index=_NoIndex())
    if request.previous_summary:
        _merge_summary(state, request.previous_summary, when=0)
    # Images and files are named where they stood (a tool that returned only a PDF did not return nothing).
    messages = tuple(with_attachments_noted(m) for m in request.messages)
    calls = tool_call_index(messages)
    results: dict[str, Message] = {}
    for m in messages:
        if m.role == "tool" and m.tool_call_id is not None:
            results.setdefault(m.tool_call_id, m)
    action: tuple[str, str] | None = None
    """The call (name, JSON arguments) the latest assistant message wrote in text (an agent that acts without tool calls)."""
    for i, m in enumerate(messages, start=1):
        kind = kind_of(m)
        if kind == "summary" or (kind == "shortened" and _was(m) == "summary"):
            _merge_summary(state, m.text, when=i)
        elif kind == "elision":
            state.notes.append(m.text)
        elif is_observation(m) or (action is not None and answers_text_action(m)):
            output = terminal_text(m.text)
            _add_output(state, output, i)
            if action is not None:  # the command's output: one step, as a tool call and its result
                _add_call(state, *action, m, seq=i * 1000, lang=lang)
            else:
                state.add_step(
                    Step(seq=i * 1000, text=f"output → {outcome(output, lang)}", failed=failed(output))
                )
        elif kind != "summary_ack":
            _add_message(state, m, i, calls, results, lang)
        if m.role != "tool":
            action = _text_action(m) if m.role == "assistant" else None
    return state


def _was(m: Message) -> object:
    """What a message agentcontext shortened was before (``"summary"``...), when it was one of ours."""
    meta = m.metadata.get("agentcontext")
    return meta.get("was") if isinstance(meta, dict) else None


_FENCE = re.compile(r"^```[^\n`]*\n(.*?)^```", re.DOTALL | re.MULTILINE)
# OpenHands' calls for models without native function calling, and a ReAct step.
_FUNCTION = re.compile(r"<function=([\w.-]+)>")
_PARAMETER = re.compile(r"<parameter=([\w.-]+)>(.*?)</parameter>", re.DOTALL)
_REACT = re.compile(r"^Action:[ \t]*([\w.-]+)[ \t]*\n+Action Input:[ \t]*(.*)", re.DOTALL | re.MULTILINE)


def _text_action(m: Message) -> tuple[str, str] | None:
    """The call an assistant message without tool calls wrote in its text, as (name, JSON arguments).

    The first found of: the last ``<function=name><parameter=key>value</parameter></function>``
    (OpenHands without native function calling), ``Action: name`` / ``Action Input: ...``
    (ReAct), the last fenced block (mini-swe-agent, SWE-agent: a shell command).
    """
    if m.tool_calls:
        return None
    text = m.text
    end = text.rfind("</function>")
    start = text.rfind("<function=", 0, end) if end >= 0 else -1
    call = _FUNCTION.match(text, start) if start >= 0 else None
    if call is not None:  # the last call, found from the end: linear in the text, whatever it holds
        body = text[call.end() : end]
        return call[1], json.dumps({k: v.strip("\n") for k, v in _PARAMETER.findall(body)})
    react = _REACT.search(text)
    if react is not None:
        given = react[2].split("\nObservation:", 1)[0].strip()
        try:
            parsed = json.loads(given)
        except ValueError:
            parsed = None
        return react[1], json.dumps(parsed if isinstance(parsed, dict) else {"input": given})
    blocks = _FENCE.findall(text)
    command = blocks[-1].strip() if blocks else ""
    return ("run", json.dumps({"command": command})) if command else None


def _add_output(state: State, text: str, i: int) -> None:
    """A tool's output: where identifiers were met, and the errors it reported."""
    state.index.add_text(text, tier=OUTPUT, when=i)
    for line in error_lines(text):
        if is_verdict(line):
            continue  # a test run's result, reported with the run
        state.errors.pop(line, None)
        state.errors[line] = None  # newest last


def _add_message(
    state: State,
    m: Message,
    i: int,
    calls: dict[str, tuple[int, ToolCall]],
    results: dict[str, Message],
    lang: Language,
) -> None:
    text = m.text
    if kind_of(m) == "verbatim":
        # Kept word for word next to the summary: point to it, do not repeat it.
        if state.goal is None and m.role == "user":
            state.goal = LABELS[lang]["goal_kept"]
        return
    if m.role in ("user", "system"):
        if m.role == "user" and state.goal is None:
            state.goal = text
        else:
            state.requests.append(text)
        state.index.add_text(text, tier=USER, when=i)
    elif m.role == "assistant":
        if text.strip():
            if state.last is not None:
                state.said.append(state.last)
            state.last = text
            state.index.add_text(text, tier=AGENT, when=i)
        for k, call in enumerate(m.tool_calls, start=1):
            result = results.get(call.id)
            _add_call(state, call.name, call.arguments, result, seq=i * 1000 + k, lang=lang)
    else:
        text = terminal_text(text)
        _add_output(state, text, i)
        if m.tool_call_id not in calls:
            name = tool_name_for(m, calls)
            state.add_step(Step(seq=i * 1000, text=f"{name} → {outcome(text, lang)}", failed=failed(text)))


def _add_call(
    state: State, name: str, arguments: str, result: Message | None, *, seq: int, lang: Language
) -> None:
    when = seq // 1000
    try:
        parsed: JSONValue = json.loads(arguments)
    except ValueError:
        parsed = arguments
    plan = plan_of(parsed)
    if plan is not None:  # the agent's plan: the newest replaces the last
        state.plan = "\n".join(plan)
        state.index.add_text(state.plan, tier=AGENT, when=when)
        if is_plan_tool(name) or not is_change(name, parsed):
            return  # setting the plan is not a step to repeat
    change = is_change(name, parsed)
    brief = brief_arguments(arguments, _CHANGE_LIMIT if change else 160)
    # Read as the agent wrote them, not as JSON escapes them (a name after an escaped new line).
    written = arguments_text(parsed, keys=False)
    state.index.add_text(written, tier=TARGET, when=when)
    # The parameter names (``file_path``, ``old_string``) say how the agent called its tools, but they are
    # the tool's, met in every call: after what the calls acted on, beside the agent's own words (at the
    # level of the values, a call's keys led the names list; at the level of tool output, a tight summary
    # lost the names of the edits it made).
    state.index.add_text("\n".join(argument_keys(parsed)), tier=AGENT, when=when)
    command = f"{name} {arguments}"
    target = _target(parsed)
    for ident in extract_identifiers(written):
        if ident[0] in "0123456789$#" or classify_identifier(ident) != "path" or _SUBSTITUTION.match(ident):
            continue
        if "/" in ident or not _imported(ident, written):
            state.add_file(ident, file_op(command, ident, target=target))
    text = terminal_text(result.text) if result is not None else ""
    shell = parsed.get("command") if isinstance(parsed, dict) else parsed
    if isinstance(shell, str) and result is not None:
        edited = edited_file(shell, text)
        if edited is not None:
            state.add_file(edited, "modified")
            state.index.add_text(edited, tier=TARGET, when=when)
    done = outcome(text, lang, command=brief) if result is not None else None
    step = Step(
        seq=seq,
        text=f"{name}: {brief}" + (f" → {done}" if done else ""),
        failed=result is not None and failed(text, command=command),
        change=change,
    )
    state.add_step(step)
    if result is not None and test_summary(text, command=brief) is not None:
        state.test = step.text


_TARGET_KEYS = (
    "path",
    "file_path",
    "filepath",
    "filePath",
    "filename",
    "file",
    "target_file",
    "notebook_path",
)
_SUBSTITUTION = re.compile(r"[sy]/[^/]*/[^/]*/?[a-zA-Z]*$")
"""A sed or perl substitution (``s/old/new/g``), which reads as a path."""


def _target(parsed: JSONValue) -> str | None:
    """The file a tool's arguments name as the one it acts on (an edit tool's ``path``), if any."""
    if isinstance(parsed, dict):
        for key in _TARGET_KEYS:
            value = parsed.get(key)
            if isinstance(value, str) and value:
                return value
    return None


def _imported(name: str, code: str) -> bool:
    """True when ``name`` (``django.conf``) is a module the code imports, not a file it touches."""
    return re.search(rf"\b(?:from|import)\s+{re.escape(name)}\b", code) is not None


FACTS_LEFT_OUT: dict[Language, tuple[str, str, str, str]] = {
    "en": (
        "What the summarized calls did that this summary had left out:",
        "files changed",
        "last failed step",
        "latest test run",
    ),
    "zh": ("被摘要的调用所做、而本摘要遗漏的：", "改动的文件", "最近一次失败的步骤", "最近一次测试"),
}
"""The header of what a model's summary left out of its calls (`strategies.summarize`), and its labels."""
_FACT_FILE = re.compile(
    r"(.+?) \(((?:created|modified|deleted)(?:, (?:created|modified|deleted))*)\)(?:, |$)"
)
"""One ``path (what, what)`` of a files-changed line: a path may hold commas and parentheses."""


def _merge_facts(state: State, text: str, *, when: int) -> None:
    """The files the lines a summary carries after a model's text list as changed (`FACTS_LEFT_OUT`)."""
    for labels in FACTS_LEFT_OUT.values():
        if labels[0] not in text:
            continue
        prefix = f"- {labels[1]}: "
        for line in text.splitlines():
            if line.startswith(prefix):
                for path, ops in _FACT_FILE.findall(line[len(prefix) :]):
                    if "[…]" in path:
                        continue  # where a long line was cut in the middle: no file's name
                    for op in ops.split(", "):
                        state.add_file(path.strip(), op)
                        state.index.add_text(path.strip(), tier=TARGET, when=when)


def _merge_summary(state: State, text: str, *, when: int) -> None:
    """Fold an earlier summary in: its items return to their sections, its identifiers keep their tier.

    An identifier keeps the importance it had (a file the agent changed stays a
    file it changed), so re-summarizing does not slowly demote what the task
    touched below what the newest tool output listed. Prose is not repeated:
    items are re-chosen by the same priorities as new ones.
    """
    _merge_facts(state, text, when=when)
    sections = parse_snapshot(text)
    if sections is None:
        state.prior.append(("key_knowledge", text.strip()))
        state.index.add_text(text, tier=AGENT, when=when)
        return
    goal = sections.get("overall_goal")
    if goal and state.goal is None:
        state.goal = goal[0]
        state.index.add_text(goal[0], tier=USER, when=when)
    for item in sections.get("active_constraints", []):
        state.requests.append(item)
        state.index.add_text(item, tier=USER, when=when)
    for item in sections.get("key_knowledge", []):
        _merge_knowledge(state, item, when=when)
    for key in ("artifact_trail", "file_system_state"):
        for item in sections.get(key, []):
            label, rest = split_label(item)
            if label in ("read", "modified", "created", "deleted"):
                for path in rest.split(", "):
                    if path:
                        state.add_file(path, label)
                        state.index.add_text(path, tier=TARGET, when=when)
            elif label == "changed":
                state.add_step(Step(seq=when * 1000, text=rest, change=True))
                state.index.add_text(rest, tier=TARGET, when=when)
            else:
                _keep_other(state, key, label, rest)
                state.index.add_text(rest, tier=AGENT, when=when)
    for item in sections.get("recent_actions", []):
        _merge_step(state, item, when=when)
    for item in sections.get("task_state", []):
        _merge_task_state(state, item, when=when)


def _merge_task_state(state: State, item: str, *, when: int) -> None:
    label, rest = split_label(item)
    if label == "last":
        if state.last is not None:
            state.said.append(state.last)
        state.last = rest
    elif label == "test":
        state.test = rest
    elif label == "plan":
        state.plan = rest.removeprefix("\n")
    else:
        _keep_other(state, "task_state", label, rest)
    state.index.add_text(rest, tier=AGENT, when=when)


def _merge_step(state: State, item: str, *, when: int) -> None:
    command, _, result = item.partition(" → ")
    state.add_step(Step(seq=when * 1000, text=item, failed=failed(result)))
    state.index.add_text(command, tier=TARGET, when=when)
    state.index.add_text(result, tier=OUTPUT, when=when)


def _merge_knowledge(state: State, item: str, *, when: int) -> None:
    label, rest = split_label(item)
    if label == "error":
        state.errors.setdefault(rest, None)
        state.index.add_text(rest, tier=ERROR_NAME, when=when)
    elif label in ("ids", "symbols"):
        # The index was written best first: equal ranks keep that order (the sort is stable).
        for ident in rest.split(", "):
            if ident:
                state.index.put(ident, (AGENT, 0, -1, -when))
    elif label == "said":
        state.said.append(rest)
        state.index.add_text(rest, tier=AGENT, when=when)
    else:
        _keep_other(state, "key_knowledge", label, rest)
        state.index.add_text(rest, tier=AGENT, when=when)


def _keep_other(state: State, section: str, label: str | None, text: str) -> None:
    """An item that is not one of ours: a note we wrote, or another writer's words (kept in place)."""
    if label == "note":
        state.notes.append(text)
    else:
        state.prior.append((section, text))
