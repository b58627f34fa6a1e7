"""What the extractive snapshot carries for an agent resuming a task: the names it touched, ranked, without
noise; what it changed; the last failure and test run; the user's and the agent's words when room is left."""

from __future__ import annotations

import json

import pytest

from agentcontext.messages import Message, ToolCall
from agentcontext.strategies._base import SummaryRequest
from agentcontext.summarizers import ExtractiveSummarizer
from agentcontext.summarizers._extractive import parse_snapshot
from agentcontext.summarizers._identifiers import extract_numbers, extract_symbols
from agentcontext.tokens import TiktokenCounter

O200K = TiktokenCounter("o200k_base")


def call(cid: str, name: str, **args: object) -> ToolCall:
    return ToolCall(id=cid, name=name, arguments=json.dumps(args))


def summarize(messages: list[Message], max_tokens: int = 800, previous: str | None = None) -> str:
    return ExtractiveSummarizer(counter=O200K).summarize(
        SummaryRequest(messages=tuple(messages), max_tokens=max_tokens, previous_summary=previous)
    )


def item(text: str, section: str, label: str) -> str:
    sections = parse_snapshot(text)
    assert sections is not None
    return next(i for i in sections.get(section, []) if i.startswith(label + ": ")).split(": ", 1)[1]


# ----------------------------------------------------------------------------- symbols and numbers


def test_code_symbols_are_found_in_every_case_style() -> None:
    text = (
        "call response.make_bytes() from HttpResponse.write, set MAX_SIZE in __init__, "
        "getElementById and JSONDecoder too"
    )
    assert extract_symbols(text) == [
        "response.make_bytes",
        "HttpResponse.write",
        "MAX_SIZE",
        "__init__",
        "getElementById",
        "JSONDecoder",
    ]


@pytest.mark.parametrize(
    "text",
    ["Plain prose with Python and Django, e.g. words.", "APIs URLs IDs iOS", "open setup.py and README.md"],
)
def test_prose_abbreviations_and_file_names_are_not_symbols(text: str) -> None:
    assert extract_symbols(text) == []


def test_a_file_name_s_stem_is_a_symbol_but_not_the_file() -> None:
    assert extract_symbols("edit my_module.py") == ["my_module"]


def test_terms_a_chinese_text_marks_are_kept() -> None:
    assert extract_symbols("只能使用“当前技能”中的技能，参考《三体》和 make_bytes") == [
        "make_bytes",
        "当前技能",
        "三体",
    ]


def test_long_numbers_but_not_decimals_listings_or_grouped_digits() -> None:
    text = "port localhost:8080, pi 3.14159, price 12,345, sed -n 1661,1693p x\n1470:    def f():\nid 7434610"
    assert extract_numbers(text) == ["8080", "1661", "7434610"]


# ----------------------------------------------------------------------------- ranking and noise


def coding_session() -> list[Message]:
    progress = "\n".join(f"Downloading {i * 10}%  {i * 0.3:.2f}s" for i in range(1, 10))
    return [
        Message(role="user", content="make_bytes mishandles memoryview in django/http/response.py; fix it."),
        Message(
            role="assistant",
            content="Looking for callers of force_bytes.",
            tool_calls=(call("c1", "bash", command="grep -rn 'def force_bytes' django/utils/"),),
        ),
        Message(
            role="tool",
            tool_call_id="c1",
            content=(
                "django/utils/encoding.py:82:def force_bytes(s, encoding='utf-8', strings_only=False):\n"
                "# Licensed under https://www.apache.org/licenses/LICENSE-2.0\n"
                "index 6a84e193ba..9333eb185d 100644\n"
                "2024-05-01 10:00:00 INFO cache_warmup done\n" + progress
            ),
        ),
        Message(
            role="assistant",
            tool_calls=(
                call(
                    "c2",
                    "bash",
                    command="sed -i 's/isinstance(value, bytes)/is_bytes_like(value)/' django/http/response.py",
                ),
            ),
        ),
        Message(role="tool", tool_call_id="c2", content=""),
    ]


def index_of(text: str) -> list[str]:
    sections = parse_snapshot(text)
    assert sections is not None
    return [i for i in sections.get("key_knowledge", []) if i.startswith(("ids: ", "names: "))]


def test_the_names_the_task_touched_are_kept_and_tool_output_noise_is_not() -> None:
    text = summarize(coding_session())
    for name in ("make_bytes", "force_bytes", "is_bytes_like", "django/utils/encoding.py"):
        assert name in text
    # Progress percentages, timings, a licence link, a diff's object hashes, a log's time stamp: none
    # of it is the task's.
    for noise in ("10%", "0.30s", "apache.org", "6a84e193ba", "2024-05-01"):
        assert noise not in text
    # Nor are the names in the lines of a file the agent only read (its first line is shown as the
    # grep's outcome, but the index does not list them).
    assert not any("strings_only" in line or "cache_warmup" in line for line in index_of(text))


def test_with_little_room_the_user_s_names_come_first() -> None:
    msgs = coding_session()
    msgs.append(Message(role="assistant", content=" ".join(f"helper_{i}" for i in range(200))))
    text = summarize(msgs, max_tokens=150)
    assert O200K.count_text(text) <= 150
    # The user's name, the grepped one and the one the edit wrote, before the agent's own words.
    for name in ("make_bytes", "force_bytes", "is_bytes_like", "helper_4"):
        assert name in text
    assert "helper_150" not in text


def test_the_index_lists_names_apart_from_ids() -> None:
    msgs = [
        *coding_session(),
        Message(role="assistant", content="Next: check encode_header in src/mail/utils.py."),
    ]
    text = summarize(msgs, max_tokens=150)
    assert "is_bytes_like" in item(text, "key_knowledge", "names")
    assert "django/utils/encoding.py" in item(text, "key_knowledge", "ids")


# ----------------------------------------------------------------------------- what happened


def test_the_latest_test_run_is_reported_with_its_counts_not_its_timing() -> None:
    msgs = [
        Message(role="user", content="Make the tests pass."),
        Message(role="assistant", tool_calls=(call("c1", "bash", command="python -m pytest tests -q"),)),
        Message(role="tool", tool_call_id="c1", content="..F\n===== 1 failed, 2 passed in 0.31s =====\n"),
        Message(role="assistant", tool_calls=(call("c2", "bash", command="python runtests.py responses"),)),
        Message(role="tool", tool_call_id="c2", content="...\nRan 3 tests in 0.004s\n\nOK\n"),
        Message(role="assistant", content="All green."),
    ]
    text = summarize(msgs)
    latest = item(text, "task_state", "latest test run")
    assert "python runtests.py responses" in latest and "Ran 3 tests; OK" in latest
    assert "1 failed, 2 passed" in text  # the earlier run is among the steps
    assert "0.31s" not in text and "0.004s" not in text


def test_the_last_failure_shows_the_exception_that_ended_a_long_traceback() -> None:
    frames = "\n".join(f'  File "lib/m{i}.py", line {i}, in f{i}\n    g()' for i in range(40))
    output = "Error: setup warning first\nTraceback (most recent call last):\n" + frames
    output += "\nZeroDivisionError: float division by zero\n"
    msgs = [
        Message(role="user", content="Run it."),
        Message(role="assistant", tool_calls=(call("c1", "bash", command="python final_test.py"),)),
        Message(role="tool", tool_call_id="c1", content=output),
    ]
    text = summarize(msgs)
    assert "python final_test.py → ZeroDivisionError: float division by zero" in text


def test_a_call_that_changes_a_record_is_listed_with_all_its_ids() -> None:
    flights = [{"flight_number": f"HAT{100 + i}", "date": f"2024-05-{10 + i}"} for i in range(6)]
    msgs = [
        Message(role="user", content="Downgrade reservation JG7FMM to economy."),
        Message(
            role="assistant",
            tool_calls=(
                call("c1", "get_reservation_details", reservation_id="JG7FMM"),
                call(
                    "c2",
                    "update_reservation_flights",
                    reservation_id="JG7FMM",
                    cabin="economy",
                    flights=flights,
                    payment_id="gift_card_3481935",
                ),
            ),
        ),
        Message(role="tool", tool_call_id="c1", content='{"reservation_id": "JG7FMM", "cabin": "business"}'),
        Message(role="tool", tool_call_id="c2", content='{"reservation_id": "JG7FMM", "cabin": "economy"}'),
    ]
    changed = item(summarize(msgs), "file_system_state", "changed")
    assert changed.startswith("update_reservation_flights: reservation_id=JG7FMM, cabin=economy")
    assert "HAT105" in changed and "payment_id=gift_card_3481935" in changed


def test_an_editor_command_without_a_path_modified_the_file_its_result_names() -> None:
    msgs = [
        Message(role="user", content="Fix the rounding."),
        Message(
            role="assistant",
            tool_calls=(call("c1", "bash", command="edit 1475:1475\n    return int(x)\nend_of_edit"),),
        ),
        Message(
            role="tool",
            tool_call_id="c1",
            content="[File: /repo/src/marshmallow/fields.py (1997 lines total)]\n1475:    return int(x)",
        ),
        Message(
            role="assistant", tool_calls=(call("c2", "bash", command="python reproduce.py > /dev/null"),)
        ),
        Message(role="tool", tool_call_id="c2", content=""),
    ]
    text = summarize(msgs)
    assert "/repo/src/marshmallow/fields.py" in item(text, "file_system_state", "modified")
    assert "/dev/null" not in item(text, "file_system_state", "modified")


def test_a_module_the_code_imports_is_not_a_file_it_read() -> None:
    code = "python -c 'from django.conf import settings; import django.db; print(1)' && cat settings.conf"
    msgs = [
        Message(role="user", content="Check the settings."),
        Message(role="assistant", tool_calls=(call("c1", "bash", command=code),)),
        Message(role="tool", tool_call_id="c1", content="1"),
    ]
    read = item(summarize(msgs), "artifact_trail", "read").split(", ")
    assert read == ["settings.conf"]


# ----------------------------------------------------------------------------- summaries of summaries


def test_re_summarizing_keeps_the_test_run_the_changes_and_the_names() -> None:
    msgs = [
        Message(role="user", content="Fix parse_header in src/http/headers.py."),
        Message(
            role="assistant",
            tool_calls=(call("c1", "cancel_reservation", reservation_id="ZFA04Y"),),
        ),
        Message(role="tool", tool_call_id="c1", content="cancelled"),
        Message(role="assistant", tool_calls=(call("c2", "bash", command="pytest tests/test_headers.py"),)),
        Message(role="tool", tool_call_id="c2", content="==== 4 passed in 0.10s ===="),
        Message(role="assistant", content="Tests pass."),
    ]
    first = summarize(msgs)
    later = [
        Message(role="assistant", tool_calls=(call("c3", "bash", command="ls"),)),
        Message(role="tool", tool_call_id="c3", content="README.md"),
    ]
    second = summarize(later, previous=first)
    assert "4 passed" in item(second, "task_state", "latest test run")
    assert "ZFA04Y" in item(second, "file_system_state", "changed")
    assert "parse_header" in second


def test_the_engine_knows_the_extractive_summarizer_makes_no_model_call() -> None:
    from agentcontext.engine import ContextEngine, Level
    from agentcontext.strategies import Tiered
    from agentcontext.strategies.summarize import Summarize

    offline = ExtractiveSummarizer(counter=O200K)
    engine = ContextEngine(window=8000, counter=O200K, summarizer=offline)
    normal = engine.pipelines[Level.NORMAL]
    assert isinstance(normal, Tiered) and isinstance(normal.tiers[0], Summarize)  # summarize before masking
