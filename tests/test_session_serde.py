"""The session codec: messages and records to JSON and back, schema versions, upcasting."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from _sizes import examples
from agentcontext import _serde
from agentcontext._serde import (
    SCHEMA_VERSION,
    RecordDecodeError,
    UnknownRecord,
    decode_message,
    decode_record,
    detect_version,
    dumps,
    encode_message,
    encode_record,
    loads,
    upcast,
)
from agentcontext.exceptions import InvalidMessageError
from agentcontext.messages import ImagePart, Message, TextPart, ToolCall
from agentcontext.session import (
    CheckpointRecord,
    CompactionRecord,
    DMailRecord,
    HeaderRecord,
    MessageRecord,
    RevertRecord,
    RewindRecord,
    UndoRecord,
    UsageRecord,
)
from strategies import canonical_conversations, canonical_messages

FIXTURES = Path(__file__).parent / "fixtures" / "sessions"
V1 = FIXTURES / "v1" / "basic.jsonl"
V0 = FIXTURES / "v0" / "kimi_context.jsonl"


def _roundtrip(m: Message) -> Message:
    return decode_message(json.loads(dumps(encode_message(m))), where="test")


# ----------------------------------------------------------------------------- messages


@settings(max_examples=examples(80), deadline=None)
@given(canonical_messages())
def test_every_message_survives_the_codec(m: Message) -> None:
    back = _roundtrip(m)
    assert back == m
    assert back.id == m.id


@settings(max_examples=examples(20), deadline=None)
@given(canonical_conversations())
def test_whole_conversations_survive_the_codec_with_metadata_and_extra(msgs: list[Message]) -> None:
    for m in msgs:
        assert _roundtrip(m) == m


def test_defaults_are_left_out_and_parts_images_and_calls_are_kept() -> None:
    m = Message(role="user", content="hi", id="m1")
    assert encode_message(m) == {"id": "m1", "role": "user", "content": "hi"}
    rich = Message(
        role="user",
        id="m2",
        content=(TextPart(text="look"), ImagePart(url="data:image/png;base64,AAAA", detail="high", width=3)),
        name="ana",
        metadata={"pinned": True},
        extra={"x-trace": [1, 2]},
    )
    assert _roundtrip(rich) == rich
    call = Message(role="assistant", id="m3", tool_calls=(ToolCall(id="c", name="ls", arguments="not json"),))
    data = encode_message(call)
    assert "content" not in data
    assert _roundtrip(call) == call


def test_nan_in_metadata_is_refused_before_anything_is_written() -> None:
    m = Message(role="user", content="x", metadata={"score": float("nan")})
    with pytest.raises(InvalidMessageError, match="JSON"):
        dumps({"seq": 1, "type": "message", "message": encode_message(m)})


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        ("text", "must be an object"),
        ({"role": "user", "content": "x"}, "non-empty string 'id'"),
        ({"id": "a", "role": "robot", "content": "x"}, "unknown role 'robot'"),
        ({"id": "a", "role": "user", "content": [{"type": "audio"}]}, "unknown part type 'audio'"),
        ({"id": "a", "role": "assistant", "tool_calls": [{"name": "ls"}]}, "lacks 'id'"),
        ({"id": "a", "role": "tool", "content": "x"}, "tool_call_id"),
        ({"id": "a", "role": "user", "content": "x", "metadata": [1]}, "metadata must be an object"),
    ],
)
def test_bad_message_data_raises_a_decode_error_that_says_where_and_why(data: object, reason: str) -> None:
    with pytest.raises(RecordDecodeError, match=reason) as info:
        decode_message(data, where="line 7")
    assert info.value.where == "line 7"
    assert str(info.value).startswith("line 7: ")


# ----------------------------------------------------------------------------- records


def _all_records() -> list[object]:
    msg = Message(role="user", content="hello", id="m1")
    return [
        HeaderRecord(seq=0, ts="t", schema_version=1, session_id="s"),
        MessageRecord(seq=1, ts="t", message=msg),
        UsageRecord(seq=2, ts=None, prompt_tokens=10, cached_tokens=3, view_len=1),
        CheckpointRecord(seq=3, ts="t", id=0, label="start", view_len=1),
        CompactionRecord(
            seq=4,
            ts="t",
            keep=0,
            view=("m2",),
            replacements=(Message(role="user", content="summary", id="m2"),),
            covers=("m1",),
            actions=({"kind": "summarized", "message_ids": ["m1"]},),
            compacted=True,
            level="normal",
        ),
        RevertRecord(seq=5, ts="t", checkpoint=0, dmail=6),
        UndoRecord(seq=6, ts="t", compaction=4),
        DMailRecord(seq=7, ts="t", checkpoint=0, text="go back"),
        DMailRecord(seq=8, ts="t", checkpoint=0, status="cancelled"),
        RewindRecord(seq=9, ts="t", length=1),
    ]


@pytest.mark.parametrize("record", _all_records(), ids=lambda r: type(r).__name__)
def test_every_record_type_round_trips_through_json_text(record: object) -> None:
    data = loads(dumps(encode_record(record)), where="x")
    assert list(data)[:3] == ["seq", "type", "ts"]
    assert decode_record(data, where="x") == record


def test_the_registered_types_are_exactly_the_documented_ones() -> None:
    assert _serde.registered_types() == (
        "checkpoint",
        "compaction",
        "dmail",
        "header",
        "message",
        "revert",
        "rewind",
        "undo",
        "usage",
    )


def test_the_v1_fixture_is_exactly_what_the_current_encoder_writes() -> None:
    # If this fails, the on-disk format changed: bump SCHEMA_VERSION, add an upcaster
    # from the old version, and keep the old fixture under its own version directory.
    lines = V1.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 17
    unknown = 0
    for number, line in enumerate(lines, 1):
        record = decode_record(loads(line, where=f"line {number}"), where=f"line {number}")
        if isinstance(record, UnknownRecord):
            unknown += 1
            assert record.type == "hologram" and record.seq == 14
        assert dumps(encode_record(record)) == line, f"line {number} would be written differently"
    assert unknown == 1
    assert detect_version(json.loads(lines[0])) == SCHEMA_VERSION == 1


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        ({"seq": 1, "ts": None}, "no string 'type'"),
        ({"seq": 1, "type": "usage", "ts": None}, "needs the field 'prompt_tokens'"),
        (
            {"seq": 1, "type": "usage", "ts": None, "prompt_tokens": "10", "view_len": 0},
            "expected an integer",
        ),
        ({"seq": True, "type": "checkpoint", "ts": None, "id": 0}, "expected an integer, got bool"),
        ({"seq": 1, "type": "dmail", "ts": None, "checkpoint": 0, "status": "lost"}, "one of"),
        ({"seq": 1, "type": "compaction", "ts": None, "keep": 0, "view": "m1"}, "expected a list"),
        ({"seq": "1", "type": "message", "message": {}}, "integer 'seq'"),
        ({"seq": 1, "type": "message", "ts": 5, "message": {}}, "field 'ts'"),
    ],
)
def test_bad_records_raise_decode_errors(data: dict[str, object], reason: str) -> None:
    with pytest.raises(RecordDecodeError, match=reason):
        decode_record(data, where="line 3")  # type: ignore[arg-type]


def test_unknown_types_are_kept_verbatim_and_written_back_unchanged() -> None:
    data = {"seq": 9, "type": "telepathy", "ts": "t", "nested": {"a": [1, 2]}}
    record = decode_record(data, where="line 9")
    assert isinstance(record, UnknownRecord)
    assert record.seq == 9 and record.type == "telepathy"
    assert encode_record(record) == data


@pytest.mark.parametrize(
    ("raw", "ok"),
    [
        (b'{"seq":1}\n', True),
        (b'  {"seq":1}  ', True),
        (b'{"seq":1} trailing', False),
        (b"[1, 2]", False),
        (b'{"seq":1', False),
        (b"\xed\xa0\x80", False),  # an encoded surrogate: not UTF-8, refused
        (b"", False),
    ],
)
def test_loads_accepts_one_json_object_per_line_only(raw: bytes, ok: bool) -> None:
    if ok:
        assert loads(raw, where="line 1") == {"seq": 1}
    else:
        with pytest.raises(RecordDecodeError, match="line 1"):
            loads(raw, where="line 1")


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)  # beyond 64 bits too: orjson reads those as floats
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(blacklist_categories=("Cs",))),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=examples(300), deadline=None)
@given(value=st.dictionaries(st.text(max_size=5), JSON_VALUES, max_size=5), as_bytes=st.booleans())
def test_loads_reads_exactly_what_json_reads(value: dict[str, object], as_bytes: bool) -> None:
    """Records are parsed by orjson when it can: the result is json's to the bit, integers beyond 64 bits
    included (orjson makes floats of them), and whatever orjson refuses falls back to json."""
    text = json.dumps(value, ensure_ascii=False)
    got = loads(text.encode() if as_bytes else text, where="line 1")
    assert got == json.loads(text)
    assert json.dumps(got) == json.dumps(json.loads(text))  # same types (int stays int, -0.0 stays -0.0)


@pytest.mark.parametrize(
    "raw",
    [
        b'{"big": 123456789012345678901234567890}',
        b'{"low": -9223372036854775809}',
        b'{"lone": "\\ud800"}',
        b'{"nan": NaN}',
        b'{"huge": 1e400}',
    ],
)
def test_what_orjson_reads_differently_or_refuses_is_read_by_json(raw: bytes) -> None:
    assert json.dumps(loads(raw, where="line 1")) == json.dumps(json.loads(raw))


# ----------------------------------------------------------------------------- version 0


def _v0_pairs() -> list[tuple[str, dict[str, object]]]:
    return [
        (f"line {i}", json.loads(line))
        for i, line in enumerate(V0.read_text(encoding="utf-8").splitlines(), 1)
    ]


def test_version_detection() -> None:
    assert detect_version({"role": "user", "content": "x"}) == 0
    assert detect_version({"role": "_usage", "token_count": 3}) == 0
    assert detect_version({"seq": 0, "type": "header", "schema_version": 7}) == 7
    assert detect_version({"seq": 3, "type": "message"}) is None
    assert detect_version({"seq": 0, "type": "header", "schema_version": "1"}) is None


def test_the_v0_upcaster_turns_a_kimi_context_file_into_v1_records() -> None:
    pairs = _v0_pairs()
    assert detect_version(pairs[0][1]) == 0
    out = list(upcast(pairs, from_version=0))  # type: ignore[arg-type]
    records = [decode_record(data, where=where) for where, data in out]
    header = records[0]
    assert isinstance(header, HeaderRecord) and header.schema_version == SCHEMA_VERSION
    assert header.session_id.startswith("v0-")
    assert [r.seq for r in records if not isinstance(r, UnknownRecord)] == list(range(len(records) - 1))
    messages = [r.message for r in records if isinstance(r, MessageRecord)]
    # The CHECKPOINT marker messages are gone; everything else is there, in order.
    assert [m.role for m in messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert all("CHECKPOINT" not in m.text for m in messages)
    assistant = messages[2]
    assert assistant.text == "Listing the directory."
    assert assistant.tool_calls == (ToolCall(id="Shell:0", name="Shell", arguments='{"command": "ls -a"}'),)
    assert assistant.metadata["v0_parts"] == [
        {"type": "think", "think": "I should run ls first.", "encrypted": None}
    ]
    assert messages[3].tool_call_id == "Shell:0" and "说明.txt" in messages[3].text
    checkpoints = [r for r in records if isinstance(r, CheckpointRecord)]
    assert [(c.id, c.view_len) for c in checkpoints] == [(0, 1), (1, 2), (2, 4)]
    usages = [r for r in records if isinstance(r, UsageRecord)]
    assert [(u.prompt_tokens, u.view_len) for u in usages] == [(2150, 3), (2301, 5)]
    unknown = [r for r in records if isinstance(r, UnknownRecord)]
    assert len(unknown) == 1 and unknown[0].type == "v0_record"
    assert unknown[0].data["record"] == {"role": "_mystery", "note": "a role this upcaster does not know"}


def test_upcasting_is_deterministic_so_ids_are_stable_across_restores() -> None:
    first = list(upcast(_v0_pairs(), from_version=0))  # type: ignore[arg-type]
    second = list(upcast(_v0_pairs(), from_version=0))  # type: ignore[arg-type]
    assert first == second


@given(
    st.lists(st.sampled_from(["user", "assistant", "_usage", "_checkpoint", "tool", "_weird"]), max_size=12)
)
@settings(max_examples=examples(40), deadline=None)
def test_the_upcaster_never_raises_on_odd_v0_lines(roles: list[str]) -> None:
    pairs = []
    for i, role in enumerate(roles):
        line: dict[str, object] = {"role": role}
        if role in ("user", "assistant"):
            line["content"] = [{"type": "text", "text": f"t{i}"}] if i % 2 else f"t{i}"
        if role == "tool":
            line["content"] = None if i % 3 == 0 else 5  # odd shapes: reported, not raised
        if role == "_checkpoint":
            line["id"] = i
        pairs.append((f"line {i + 1}", line))
    for where, data in upcast(pairs, from_version=0):  # type: ignore[arg-type]
        try:
            decode_record(data, where=where)
        except RecordDecodeError as exc:
            assert exc.where == where
