"""The validity rules: each rule on hand-made cases, the incremental checker against the batch one, and real logs."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from _sizes import examples
from agentcontext.exceptions import InvalidConversationError, InvalidMessageError
from agentcontext.formats import openai as oai
from agentcontext.invariants import ConversationChecker, Violation, check_messages, ensure_valid
from agentcontext.messages import ImagePart, Message, TextPart, ToolCall
from realdata import load, manifest
from strategies import canonical_conversations


def user(text: str = "hi") -> Message:
    return Message(role="user", content=text)


def asst(text: str | None = "ok", *calls: str) -> Message:
    return Message(role="assistant", content=text, tool_calls=[ToolCall(id=c, name="bash") for c in calls])


def tool(call_id: str, text: str | None = "out") -> Message:
    return Message(role="tool", tool_call_id=call_id, content=text)


def rules(messages: list[Message], **kw: bool) -> list[tuple[int, str]]:
    return [(v.index, v.rule) for v in check_messages(messages, **kw)]


# ----------------------------------------------------------------------------- each rule


def test_a_valid_conversation_has_no_violations() -> None:
    msgs = [
        Message(role="system", content="be brief"),
        user(),
        asst(None, "a", "b"),
        tool("b"),
        tool("a", ""),
        asst("done"),
    ]
    assert check_messages(msgs) == []
    assert check_messages([]) == []


def test_parallel_results_may_come_in_any_order_but_all_before_the_next_message() -> None:
    assert rules([user(), asst(None, "a", "b", "c"), tool("c"), tool("a"), tool("b"), asst()]) == []
    found = check_messages([user(), asst(None, "a", "b"), tool("b"), asst("next")])
    assert [(v.index, v.rule, v.tool_call_id) for v in found] == [(1, "unanswered_tool_call", "a")]
    assert "'a'" in found[0].message and "tool_call_id='a'" in found[0].fix


def test_unanswered_at_the_end_and_in_the_middle_are_reported_at_their_call() -> None:
    msgs = [user(), asst(None, "x"), user("again"), asst(None, "y")]
    assert rules(msgs) == [(1, "unanswered_tool_call"), (3, "unanswered_tool_call")]


def test_a_system_message_also_closes_the_block_of_results() -> None:
    msgs = [user(), asst(None, "x"), Message(role="system", content="note"), tool("x")]
    assert rules(msgs) == [(1, "unanswered_tool_call"), (3, "orphan_tool_result")]


def test_orphan_results_never_called_or_called_before_the_block_closed() -> None:
    never = check_messages([user(), tool("ghost")])
    assert [(v.index, v.rule) for v in never] == [(1, "orphan_tool_result")]
    assert "no earlier assistant message calls 'ghost'" in never[0].message
    late = check_messages([user(), asst(None, "x"), tool("x"), user("more"), tool("x")])
    assert [(v.index, v.rule) for v in late] == [(4, "orphan_tool_result")]
    assert "message 1" in late[0].message and "message 1" in late[0].fix


def test_duplicate_call_ids_across_turns_and_within_one_message() -> None:
    # Reusing an id later (as real tau-bench and SWE-agent logs do) is a duplicate, and
    # the second result answers the second call: neither orphan nor duplicate result.
    msgs = [user(), asst(None, "x"), tool("x"), asst(None, "x"), tool("x"), asst("done")]
    found = check_messages(msgs)
    assert [(v.index, v.rule, v.tool_call_id) for v in found] == [(3, "duplicate_tool_call_id", "x")]
    assert "message 1" in found[0].message
    same = check_messages([user(), asst(None, "x", "x"), tool("x"), tool("x")])
    assert [(v.index, v.rule) for v in same] == [(1, "duplicate_tool_call_id"), (3, "duplicate_tool_result")]
    assert "same message" in same[0].message


def test_a_call_answered_twice() -> None:
    found = check_messages([user(), asst(None, "x"), tool("x"), tool("x", "again")])
    assert [(v.index, v.rule, v.tool_call_id) for v in found] == [(3, "duplicate_tool_result", "x")]


def test_first_non_system_message_must_be_the_user() -> None:
    assert rules([Message(role="system", content="s"), asst("hello")]) == [(1, "first_not_user")]
    assert rules([tool("x")]) == [(0, "first_not_user"), (0, "orphan_tool_result")]
    assert rules([Message(role="system", content="s")]) == []


@pytest.mark.parametrize(
    ("message", "empty"),
    [
        (Message(role="user", content=""), True),
        (Message(role="user", content=" \n\t"), True),
        (Message(role="user", content=()), True),
        (Message(role="user", content=None), True),
        (Message(role="user", content=(TextPart(text=""), ImagePart(url="https://x/y.png"))), False),
        (Message(role="user", content="你好"), False),
        (Message(role="system", content=""), True),
        (Message(role="assistant", content=""), True),
        (Message(role="assistant", content=None), True),
        (Message(role="assistant", content="", tool_calls=[ToolCall(id="c", name="f")]), False),
        (Message(role="tool", tool_call_id="c", content=""), False),
        (Message(role="tool", tool_call_id="c", content=None), True),
    ],
)
def test_empty_content_is_what_openai_or_anthropic_rejects(message: Message, empty: bool) -> None:
    head = [user()] if message.role != "user" else []
    if message.role == "tool":
        head = [user(), asst(None, "c")]
    found = [v for v in check_messages([*head, message]) if v.rule == "empty_content"]
    assert bool(found) == empty
    if found:
        assert found[0].index == len(head)


def test_late_system_messages_are_reported_only_when_asked() -> None:
    msgs = [
        Message(role="system", content="a"),
        Message(role="system", content="b"),
        user(),
        Message(role="system", content="late"),
    ]
    assert check_messages(msgs) == []
    found = check_messages(msgs, system_first_only=True)
    assert [(v.index, v.rule) for v in found] == [(3, "system_not_first")]


def test_violations_are_sorted_and_readable() -> None:
    found = check_messages([asst(None, "x"), user(""), tool("x")])
    assert [v.index for v in found] == sorted(v.index for v in found)
    text = str(found[0])
    assert text.startswith("message 0 [") and "Fix:" in text


def test_non_messages_are_rejected_with_their_index() -> None:
    with pytest.raises(InvalidMessageError, match=r"message 1: .*got dict.*to_messages"):
        check_messages([user(), {"role": "user", "content": "x"}])  # type: ignore[list-item]


def test_ensure_valid_raises_with_every_violation() -> None:
    msgs = [user(), asst(None, "a", "b", "c", "d")]
    with pytest.raises(InvalidConversationError) as info:
        ensure_valid(msgs, target="OpenAI", hint="Try again.")
    assert len(info.value.violations) == 4
    assert all(isinstance(v, Violation) for v in info.value.violations)
    assert "4 problems that OpenAI would reject" in str(info.value)
    assert "and 1 more" in str(info.value) and str(info.value).endswith("Try again.")
    ensure_valid([user()])  # valid: no error


# ----------------------------------------------------------------------------- the incremental checker


def test_checker_reports_pending_calls_and_finish_does_not_change_state() -> None:
    checker = ConversationChecker()
    assert checker.feed(user()) == []
    assert checker.feed(asst(None, "a", "b")) == []
    assert checker.pending_tool_call_ids == ("a", "b")
    assert dict(checker.pending_calls) == {"a": 1, "b": 1}
    assert [v.tool_call_id for v in checker.finish()] == ["a", "b"]
    assert [v.tool_call_id for v in checker.finish()] == ["a", "b"]
    assert checker.feed(tool("a")) == []
    assert checker.pending_tool_call_ids == ("b",)
    assert checker.messages_seen == 3
    found = checker.feed(asst("next"))
    assert [(v.index, v.rule, v.tool_call_id) for v in found] == [(1, "unanswered_tool_call", "b")]
    assert checker.finish() == []


def _mutations() -> st.SearchStrategy[list[Message]]:
    """Valid conversations broken at random: messages dropped, duplicated, moved."""

    @st.composite
    def build(draw: st.DrawFn) -> list[Message]:
        msgs = draw(canonical_conversations())
        for _ in range(draw(st.integers(0, 3))):
            if not msgs:
                break
            i = draw(st.integers(0, len(msgs) - 1))
            op = draw(st.sampled_from(["drop", "dup", "move"]))
            if op == "drop":
                del msgs[i]
            elif op == "dup":
                msgs.insert(i, msgs[i])
            else:
                msgs.insert(draw(st.integers(0, len(msgs) - 1)), msgs.pop(i))
        return msgs

    return build()


@settings(max_examples=examples(60), deadline=None)
@given(_mutations())
def test_feeding_one_by_one_finds_what_the_batch_check_finds(msgs: list[Message]) -> None:
    checker = ConversationChecker(system_first_only=True)
    found: list[Violation] = []
    for i, m in enumerate(msgs):
        new = checker.feed(m)
        # A message's violations never point past it.
        assert all(v.index <= i for v in new)
        found.extend(new)
    found.extend(checker.finish())
    assert sorted(found, key=lambda v: v.index) == check_messages(msgs, system_first_only=True)


@settings(max_examples=examples(40), deadline=None)
@given(_mutations(), _mutations(), st.data())
def test_copies_are_independent_even_when_both_branches_go_on(
    base: list[Message], other: list[Message], data: st.DataObject
) -> None:
    cut = data.draw(st.integers(0, len(base)))
    checker = ConversationChecker()
    prefix_found = [v for m in base[:cut] for v in checker.feed(m)]
    snapshot = checker.copy()
    # Both branches go on from the same state, fed in an interleaved order.
    a_rest, b_rest = iter(base[cut:]), iter(other)
    a_seen: list[Violation] = []
    b_seen: list[Violation] = []
    for take_a in data.draw(st.permutations([True] * (len(base) - cut) + [False] * len(other))):
        if take_a:
            a_seen.extend(checker.feed(next(a_rest)))
        else:
            b_seen.extend(snapshot.feed(next(b_rest)))
    by_index = lambda v: v.index  # noqa: E731
    assert sorted(prefix_found + a_seen + checker.finish(), key=by_index) == check_messages(base)
    assert sorted(prefix_found + b_seen + snapshot.finish(), key=by_index) == check_messages(
        base[:cut] + other
    )


def test_copy_shares_the_call_history_until_the_branches_diverge() -> None:
    # The engine snapshots before each step; that must not copy the whole history.
    checker = ConversationChecker()
    checker.feed(user())
    for k in range(2_000):
        checker.feed(asst(None, f"c{k}"))
        checker.feed(tool(f"c{k}"))
    log = checker._log
    for k in range(50):
        snapshot = checker.copy()
        assert snapshot._log is log  # O(1) copy: the history is shared
        checker.feed(asst(None, f"d{k}"))
        checker.feed(tool(f"d{k}"))
        assert checker._log is log  # the branch that goes on keeps appending in place
    # Reverting to an old snapshot forks once; its view of the history is its own.
    assert snapshot.feed(asst(None, "d49")) == []  # d49 was issued only on the other branch
    assert snapshot._log is not log
    assert [v.rule for v in snapshot.feed(asst(None, "c0"))] == [
        "unanswered_tool_call",
        "duplicate_tool_call_id",
    ]


# ----------------------------------------------------------------------------- properties on valid conversations


@settings(max_examples=examples(40), deadline=None)
@given(canonical_conversations(), st.data())
def test_removing_one_result_leaves_exactly_its_call_unanswered(
    msgs: list[Message], data: st.DataObject
) -> None:
    assert check_messages(msgs) == []
    results = [i for i, m in enumerate(msgs) if m.role == "tool"]
    if not results:
        return
    i = data.draw(st.sampled_from(results))
    call_id = msgs[i].tool_call_id
    found = check_messages(msgs[:i] + msgs[i + 1 :])
    assert [(v.rule, v.tool_call_id) for v in found] == [("unanswered_tool_call", call_id)]
    assert call_id in {c.id for c in msgs[found[0].index].tool_calls}


@settings(max_examples=examples(40), deadline=None)
@given(canonical_conversations(), st.data())
def test_removing_an_assistant_message_orphans_its_results(msgs: list[Message], data: st.DataObject) -> None:
    callers = [i for i, m in enumerate(msgs) if m.tool_calls]
    if not callers:
        return
    i = data.draw(st.sampled_from(callers))
    found = check_messages(msgs[:i] + msgs[i + 1 :])
    orphans = {v.tool_call_id for v in found if v.rule == "orphan_tool_result"}
    assert orphans == {c.id for c in msgs[i].tool_calls}


# ----------------------------------------------------------------------------- real logs


def test_real_logs_match_the_manifest_counts() -> None:
    """The checker counts what the manifest counts, on every real conversation.

    The manifest counts *distinct* repeated ids (``call_5iDd...`` used 4 times
    counts once); the checker reports each reuse, so ids are deduplicated here.
    """
    entries = manifest()
    assert len(entries) >= 10
    totals: Counter[str] = Counter()
    expected: Counter[str] = Counter()
    for entry in entries:
        msgs = oai.to_messages(load(entry["path"]))
        assert len(msgs) == entry["message_count"]
        found = check_messages(msgs)
        by_rule = Counter(v.rule for v in found)
        totals.update(by_rule)
        got = {
            "unanswered_tool_calls": by_rule["unanswered_tool_call"],
            "orphan_tool_results": by_rule["orphan_tool_result"],
            "duplicate_tool_call_ids": len(
                {v.tool_call_id for v in found if v.rule == "duplicate_tool_call_id"}
            ),
        }
        assert got == {k: entry[k] for k in got}, entry["file"]
        expected["unanswered_tool_call"] += entry["unanswered_tool_calls"]
        # Nothing else is wrong with these logs.
        assert set(by_rule) <= {"unanswered_tool_call", "orphan_tool_result", "duplicate_tool_call_id"}
    # Each reuse of an id is reported: more reports than distinct ids, and some of both kinds exist.
    assert totals["unanswered_tool_call"] == expected["unanswered_tool_call"] > 0
    assert totals["duplicate_tool_call_id"] >= sum(e["duplicate_tool_call_ids"] for e in entries) > 0


def test_docstring_examples_run() -> None:
    import doctest

    from agentcontext import invariants

    assert doctest.testmod(invariants).failed == 0
