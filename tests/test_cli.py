"""The `agentcontext` command, end to end: in this process through `agentcontext.cli.main` (fast), and
through its console script where the entry point itself is what is tested. Real files, real servers."""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from agentcontext.cli import main
from agentcontext.formats import openai as oai
from agentcontext.invariants import check_messages
from agentcontext.tokens import TiktokenCounter

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "django-11133.jsonl"


@dataclass(frozen=True)
class Ran:
    """What a command did: its exit code and what it wrote."""

    returncode: int
    stdout: str
    stderr: str


def run(*args: str, stdin: str | None = None) -> Ran:
    """Run the command line in this process, with its own stdin, stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    saved = sys.stdin
    sys.stdin = io.TextIOWrapper(io.BufferedReader(io.BytesIO((stdin or "").encode())), encoding="utf-8")  # type: ignore[arg-type]
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(list(args))
    finally:
        sys.stdin = saved
    return Ran(code, out.getvalue(), err.getvalue())


def assert_one_line_error(proc: Ran, code: int, *needles: str) -> None:
    assert proc.returncode == code, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("agentcontext: error: "), proc.stderr
    assert "Traceback" not in proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_console_script_is_installed() -> None:
    exe = shutil.which("agentcontext")
    assert exe is not None
    proc = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "fit" in proc.stdout


@pytest.mark.parametrize(
    "command",
    ["fit", "replay", "inspect", "compact", "undo", "checkpoints", "revert", "export", "count", "models"],
)
def test_every_command_has_help_with_an_example(command: str) -> None:
    proc = run(command, "--help")
    assert proc.returncode == 0
    assert "Example" in proc.stdout


def test_fit_writes_fitting_valid_messages_and_a_report(tmp_path: Path) -> None:
    out, report = tmp_path / "fitted.jsonl", tmp_path / "report.json"
    proc = run(
        "fit",
        str(EXAMPLE),
        "--model",
        "gpt-4o",
        "--window",
        "16000",
        "--reserve",
        "2000",
        "-o",
        str(out),
        "--report",
        str(report),
    )
    assert proc.returncode == 0, proc.stderr
    dicts = [json.loads(line) for line in out.read_text().splitlines()]
    messages = oai.to_messages(dicts)
    assert check_messages(messages) == []
    data = json.loads(report.read_text())
    assert data["budget"] == 14_000 and data["tokens_after"] <= 14_000
    assert TiktokenCounter("o200k_base").count_messages(messages) == data["tokens_after"]
    assert data["compacted"] and data["actions"]
    original = [json.loads(line) for line in EXAMPLE.read_text().splitlines()]
    assert dicts[0] == original[0]  # the system prompt, verbatim
    assert "->" in proc.stderr and "tokens" in proc.stderr


def test_fit_reads_stdin_and_keeps_the_json_array_layout() -> None:
    conversation = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}]
    proc = run("fit", "-", "--model", "gpt-4o", stdin=json.dumps(conversation))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == conversation  # under the soft limit: unchanged


@pytest.mark.parametrize(
    ("stdin", "needles"),
    [
        ("not json at all", ("not a conversation",)),
        ('[{"role": "user", "content": "hi"}, ]', ("not valid JSON", "line 1")),
        ('{"role": "user", "content": "hi"}\n{"content": "no role"}\n', ("message 1", "role")),
        ("[1, 2]", ("message 0", "number")),
        ('[{"role": "wizard", "content": "hi"}]', ("message 0", "wizard")),
        (
            '[{"role": "assistant", "tool_calls": [{"id": "a", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}}]}]',
            ("arguments",),
        ),
    ],
)
def test_fit_bad_input_gets_one_clear_line_and_exit_3(stdin: str, needles: tuple[str, ...]) -> None:
    assert_one_line_error(run("fit", "-", "--model", "gpt-4o", stdin=stdin), 3, *needles)


def test_fit_unknown_model_suggests_close_names() -> None:
    proc = run("fit", str(EXAMPLE), "--model", "gpt4o")
    assert_one_line_error(proc, 3, "gpt4o", "gpt-4o")


def test_fit_missing_file_and_directory(tmp_path: Path) -> None:
    assert_one_line_error(run("fit", str(tmp_path / "nope.jsonl"), "--model", "gpt-4o"), 3, "no such file")
    assert_one_line_error(run("fit", str(tmp_path), "--model", "gpt-4o"), 3, "directory")


def test_fit_that_cannot_fit_exits_4_with_the_numbers() -> None:
    conversation = [{"role": "user", "content": "word " * 3000}]
    proc = run(
        "fit",
        "-",
        "--model",
        "gpt-4o",
        "--window",
        "1000",
        "--reserve",
        "200",
        stdin=json.dumps(conversation),
    )
    assert_one_line_error(proc, 4, "does not fit", "800")


def test_fit_strict_refuses_invalid_conversations() -> None:
    conversation = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
        },
        {"role": "user", "content": "and?"},
    ]
    proc = run("fit", "-", "--model", "gpt-4o", "--strict", stdin=json.dumps(conversation))
    assert_one_line_error(proc, 3, "message 2", "never answered", "'a'")
    lenient = run("fit", "-", "--model", "gpt-4o", stdin=json.dumps(conversation))
    assert lenient.returncode == 0
    assert [d["role"] for d in json.loads(lenient.stdout)] == ["user", "assistant", "tool", "user"]


def test_bad_option_values_are_usage_errors() -> None:
    assert_one_line_error(
        run("fit", str(EXAMPLE), "--model", "gpt-4o", "--window", "-5"), 2, "--window", "-5"
    )
    assert_one_line_error(
        run("replay", str(EXAMPLE), "--model", "gpt-4o", "--soft", "0.3", "--target", "0.5"), 3, "thresholds"
    )
    proc = run("fit", str(EXAMPLE))
    assert proc.returncode == 2 and "--model" in proc.stderr


def test_count_conversation_and_text(tmp_path: Path) -> None:
    proc = run("count", str(EXAMPLE), "--model", "gpt-4o", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    msgs = oai.to_messages([json.loads(line) for line in EXAMPLE.read_text().splitlines()])
    assert data["tokens"] == TiktokenCounter("o200k_base").count_messages(msgs)
    assert data["by_role"]["tool"]["messages"] == sum(1 for m in msgs if m.role == "tool")
    text = tmp_path / "notes.txt"
    text.write_text("hello world, 你好世界\n", encoding="utf-8")
    proc = run("count", str(text), "--model", "gpt-4o", "--json")
    assert json.loads(proc.stdout)["tokens"] == TiktokenCounter("o200k_base").count_text(
        text.read_text(encoding="utf-8")
    )
    table = run("count", str(EXAMPLE), "--model", "gpt-4o")
    assert table.returncode == 0 and "tool: bash" in table.stdout
    assert "\x1b[" not in table.stdout  # no colour codes when stdout is not a terminal


def test_models_lists_the_registry() -> None:
    proc = run("models", "--json")
    rows = json.loads(proc.stdout)
    names = {r["name"] for r in rows}
    assert {"gpt-4o", "gpt-4.1"} <= names
    # Some providers let the output take the whole window (Kimi, Llama); never more than it.
    assert all(r["context_window"] >= r["max_output_tokens"] for r in rows)


def test_replay_prints_the_figures_as_json() -> None:
    proc = run("replay", str(EXAMPLE), "--model", "gpt-4o", "--window", "16000", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["calls"] == 132  # one per assistant message after the first message
    assert data["violations"] == 0 and data["over_budget"] == 0
    assert data["peak_tokens"] <= data["budget"] == 12_000
    assert sum(data["compactions"].values()) >= 1
    assert 0 < data["cache_share"] < 1
    assert data["input_cost_with_cache_usd"] < data["input_cost_usd"]
    assert data["identifiers_retained"] > 0.9


def test_replay_compare_table_and_plot(tmp_path: Path) -> None:
    png = tmp_path / "out" / "tokens.png"
    proc = run(
        "replay", str(EXAMPLE), "--model", "gpt-4o", "--window", "16000", "--compare", "--plot", str(png)
    )
    assert proc.returncode == 0, proc.stderr
    for column in ("default", "sliding_window", "token_budget", "masking"):
        assert column in proc.stdout
    assert "identifiers retained" in proc.stdout
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_replay_bad_summarizer_is_a_clear_error() -> None:
    proc = run("replay", str(EXAMPLE), "--model", "gpt-4o", "--summarizer", "gpt-4o")
    assert_one_line_error(proc, 3, "--summarizer")


# ----------------------------------------------------------------------------- session tools


@pytest.fixture
def session_file(tmp_path: Path) -> Path:
    """A real session: the django example appended step by step, prepared at a 16k window, with checkpoints."""
    from agentcontext.engine import ContextEngine
    from agentcontext.session import Session

    path = tmp_path / "run.jsonl"
    msgs = oai.to_messages([json.loads(line) for line in EXAMPLE.read_text().splitlines()])
    session = Session.open(path, engine=ContextEngine("gpt-4o", window=16_000))
    try:
        for i, m in enumerate(msgs[:120]):
            session.append(m)
            if m.role == "assistant":
                session.prepare()
            if i in (10, 60):
                session.checkpoint(label=f"after {i}")
    finally:
        session.close()
    return path


def test_inspect_shows_tokens_checkpoints_compactions_and_level(session_file: Path) -> None:
    proc = run("inspect", str(session_file), "--model", "gpt-4o", "--window", "16000", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert [c["label"] for c in data["checkpoints"]] == ["after 10", "after 60"]
    assert data["compactions"] and data["messages"] > 0
    assert data["status"]["level"] in ("none", "normal", "aggressive", "emergency")
    assert data["by_tool"]["bash"]["results"] > 0
    assert len(data["largest"]) == 5
    table = run("inspect", str(session_file), "--model", "gpt-4o")
    assert table.returncode == 0 and "largest messages" in table.stdout and "tool: bash" in table.stdout


def test_inspect_many_sessions_gives_one_row_each(session_file: Path, tmp_path: Path) -> None:
    other = tmp_path / "copy.jsonl"
    other.write_bytes(session_file.read_bytes())
    proc = run("inspect", str(session_file), str(other), "--model", "gpt-4o", "--json")
    assert proc.returncode == 0, proc.stderr
    assert [d["session"] for d in json.loads(proc.stdout)] == [str(session_file), str(other)]


def test_checkpoints_revert_and_export(session_file: Path, tmp_path: Path) -> None:
    cps = json.loads(run("checkpoints", str(session_file), "--json").stdout)
    first = cps[0]
    proc = run("revert", str(session_file), str(first["id"]))
    assert proc.returncode == 0, proc.stderr
    exported = run("export", str(session_file), "--format", "openai")
    assert exported.returncode == 0, exported.stderr
    dicts = [json.loads(line) for line in exported.stdout.splitlines()]
    assert len(dicts) == first["messages"]
    problems = check_messages(oai.to_messages(dicts))
    if problems:  # checkpoint taken between a call and its result: exported as is, with a warning
        assert "warning:" in exported.stderr and problems[0].rule == "unanswered_tool_call"
    out = tmp_path / "request.json"
    proc = run("export", str(session_file), "--format", "anthropic", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    body = json.loads(out.read_text())
    assert body["system"] and body["messages"][0]["role"] == "user"
    assert_one_line_error(run("revert", str(session_file), "999"), 3, "999")


def test_compact_records_a_compaction_that_inspect_lists(session_file: Path) -> None:
    before = json.loads(run("inspect", str(session_file), "--model", "gpt-4o", "--json").stdout)
    proc = run("compact", str(session_file), "--model", "gpt-4o", "--window", "16000", "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["tokens_after"] < report["tokens_before"]
    after = json.loads(run("inspect", str(session_file), "--model", "gpt-4o", "--json").stdout)
    assert len(after["compactions"]) == len(before["compactions"]) + 1
    assert after["tokens"] < before["tokens"]
    # The README calls it undoable: from the command line too.
    undone = run("undo", str(session_file))
    assert undone.returncode == 0 and "took back compaction:" in undone.stdout, undone.stderr
    again = json.loads(run("inspect", str(session_file), "--model", "gpt-4o", "--json").stdout)
    assert again["tokens"] == before["tokens"]


def test_session_tools_on_missing_or_wrong_files(tmp_path: Path) -> None:
    assert_one_line_error(run("inspect", str(tmp_path / "nope.jsonl")), 3)
    assert_one_line_error(run("checkpoints", str(tmp_path)), 3)
    junk = tmp_path / "junk.jsonl"
    junk.write_text("this is not a session\n", encoding="utf-8")
    proc = run("export", str(junk))
    assert proc.returncode == 3 and "Traceback" not in proc.stderr
    assert "not a session file" in proc.stderr.splitlines()[-1]
    assert all(line.startswith("agentcontext: ") for line in proc.stderr.splitlines())


# ----------------------------------------------------------------------------- whole requests


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a shell command in the repository and return its output.",
            "parameters": {
                "type": "object",
                "properties": {
                    "command": {"type": "string", "description": "the command line"},
                    "timeout": {"type": "integer", "description": "seconds"},
                },
                "required": ["command"],
            },
        },
    }
]


def example_dicts() -> list[dict[str, object]]:
    return [json.loads(line) for line in EXAMPLE.read_text(encoding="utf-8").splitlines()]


def test_fit_an_openai_request_counts_its_tools_and_keeps_every_other_field(tmp_path: Path) -> None:
    body = {
        "model": "gpt-4o",
        "temperature": 0.2,
        "tools": TOOLS,
        "tool_choice": "auto",
        "metadata": {"run": [1, 2]},
        "messages": example_dicts(),
    }
    src, out, report = tmp_path / "request.json", tmp_path / "out.json", tmp_path / "report.json"
    src.write_text(json.dumps(body), encoding="utf-8")
    proc = run("fit", str(src), "--model", "gpt-4o", "--window", "16000", "--reserve", "2000",
               "-o", str(out), "--report", str(report))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    fitted = json.loads(out.read_text(encoding="utf-8"))
    assert list(fitted) == list(body)
    assert {k: v for k, v in fitted.items() if k != "messages"} == {
        k: v for k, v in body.items() if k != "messages"
    }
    data = json.loads(report.read_text(encoding="utf-8"))
    counter = TiktokenCounter("o200k_base")
    assert data["tool_tokens"] == counter.count_tools(TOOLS) > 0
    messages = oai.to_messages(fitted["messages"])
    assert check_messages(messages) == []
    assert (
        counter.count_messages(messages) + data["tool_tokens"]
        == data["tokens_after"]
        <= data["budget"]
        == 14_000
    )
    assert "tools" in proc.stderr and "OpenAI Chat Completions request body" in proc.stderr


def anthropic_body() -> dict[str, object]:
    from agentcontext.formats import anthropic

    msgs = oai.to_messages(example_dicts())
    system, messages = anthropic.from_messages(msgs, validate=False)
    assert isinstance(system, str)
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 3000,
        "system": [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}],
        "tools": [
            {
                "name": "bash",
                "description": "Run a command.",
                "input_schema": {
                    "type": "object",
                    "properties": {"command": {"type": "string"}},
                    "required": ["command"],
                },
            }
        ],  # fmt: skip
        "messages": messages,
    }


def test_fit_an_anthropic_request_keeps_its_system_prompt_and_layout(tmp_path: Path) -> None:
    from agentcontext.formats import anthropic

    body = anthropic_body()
    src, out = tmp_path / "request.json", tmp_path / "out.json"
    src.write_text(json.dumps(body), encoding="utf-8")
    proc = run("fit", str(src), "--model", "claude-sonnet-4-5", "--window", "20000", "-o", str(out),
               "--report", str(tmp_path / "r.json"))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    fitted = json.loads(out.read_text(encoding="utf-8"))
    assert isinstance(fitted, dict) and list(fitted) == list(body)
    assert fitted["system"] == body["system"]  # verbatim, cache_control included
    assert fitted["tools"] == body["tools"] and fitted["max_tokens"] == 3000
    assert len(fitted["messages"]) < len(body["messages"])  # type: ignore[arg-type]
    msgs = anthropic.to_messages(fitted["messages"], system="s")
    assert check_messages(msgs, system_first_only=True) == []
    report = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert report["reserve"] == 3000  # the body's max_tokens
    assert report["tool_tokens"] > 0 and "max_tokens" in proc.stderr
    counted = run("count", str(src), "--model", "claude-sonnet-4-5", "--json")
    data = json.loads(counted.stdout)
    assert data["kind"] == "request" and data["format"] == "anthropic"
    assert data["instructions"]["tokens"] > 0 and data["tool_definitions"]["tokens"] > 0
    # What count says the request costs is what the engine counts before preparing it.
    from agentcontext.engine import ContextEngine

    sent = anthropic.to_messages(body["messages"])  # type: ignore[arg-type]
    system = body["system"][0]["text"]  # type: ignore[index]
    expected = ContextEngine("claude-sonnet-4-5").count(sent, tools=body["tools"], instructions=system)  # type: ignore[arg-type]
    assert data["tokens"] == expected  # with the estimate_ratio the engine starts from


def test_fit_writes_a_request_that_needs_nothing_back_as_it_came(tmp_path: Path) -> None:
    body = {"model": "gpt-4o", "stream": True, "messages": [{"role": "user", "content": "hi", "name": "ann"}],
            "response_format": {"type": "json_object"}, "x-unknown": [None, 1.5, "y"]}  # fmt: skip
    proc = run("fit", "-", "--model", "gpt-4o", stdin=json.dumps(body))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == body


def test_fit_a_responses_request(tmp_path: Path) -> None:
    pytest.importorskip("agentcontext.formats.responses")
    body = {
        "model": "gpt-4o",
        "instructions": "You are terse.",
        "tools": [
            {"type": "function", "name": "ls", "parameters": {"type": "object", "properties": {}}},
            {"type": "web_search"},
        ],  # fmt: skip
        "input": [
            {"role": "user", "content": "what is in /tmp?"},
            {"type": "function_call", "call_id": "c1", "name": "ls", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "a.txt"},
        ],
        "store": False,
    }
    proc = run("fit", "-", "--model", "gpt-4o", stdin=json.dumps(body))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == body
    assert "Responses API request body" in proc.stderr and "hosted tool" in proc.stderr


def test_fit_fills_the_budget_once_and_takes_a_target(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    proc = run("fit", str(EXAMPLE), "--model", "gpt-4o", "--window", "16000", "-o", str(tmp_path / "o.jsonl"),
               "--report", str(report))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    data = json.loads(report.read_text(encoding="utf-8"))
    assert data["fill"] is True and data["fill_target"] == 0.96
    assert any("one-shot fit" in n for n in data["notes"])
    proc = run("fit", str(EXAMPLE), "--model", "gpt-4o", "--window", "16000", "--target", "0.6",
               "-o", str(tmp_path / "o.jsonl"), "--report", str(report))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    data = json.loads(report.read_text(encoding="utf-8"))
    assert data["fill_target"] == 0.6 and data["tokens_after"] <= data["budget"]
    assert_one_line_error(run("fit", str(EXAMPLE), "--model", "gpt-4o", "--target", "1"), 3, "--target")


def test_the_bounded_report_groups_actions_and_the_full_one_lists_every_id(tmp_path: Path) -> None:
    short, full = tmp_path / "short.json", tmp_path / "full.json"
    args = ("fit", str(EXAMPLE), "--model", "gpt-4o", "--window", "6000", "-o", str(tmp_path / "o.jsonl"))
    assert run(*args, "--report", str(short)).returncode == 0
    assert run(*args, "--report", str(full), "--report-full").returncode == 0
    grouped = json.loads(short.read_text(encoding="utf-8"))
    listed = json.loads(full.read_text(encoding="utf-8"))
    assert grouped["full"] is False and listed["full"] is True
    assert grouped["tokens_after"] == listed["tokens_after"]
    by_kind: dict[str, int] = {}
    for action in listed["actions"]:
        by_kind[action["kind"]] = by_kind.get(action["kind"], 0) + len(action["message_ids"])
    assert {g["kind"]: g["messages"] for g in grouped["actions"]} == by_kind
    for group in grouped["actions"]:
        assert "message_ids" not in group
        assert all(0 <= a <= b < 266 for a, b in group["input_ranges"])


# ----------------------------------------------------------------------------- a summarizer that fails


@pytest.fixture
def failing_server(monkeypatch: pytest.MonkeyPatch) -> object:
    from llm_servers import LLMServer, error

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with LLMServer("openai") as server:
        server.script(error(401, "invalid api key", kind="authentication_error"))
        yield server


def test_fit_stops_when_the_named_summarizer_fails(failing_server: object, tmp_path: Path) -> None:
    url = failing_server.url  # type: ignore[attr-defined]
    out = tmp_path / "out.jsonl"
    args = ("fit", str(EXAMPLE), "--model", "gpt-4o", "--window", "16000", "--summarizer", "openai:m",
            "--base-url", url, "-o", str(out))  # fmt: skip
    proc = run(*args)
    assert_one_line_error(proc, 5, "openai:m failed", "401", "--allow-fallback")
    assert not out.exists() and proc.stdout == ""
    assert failing_server.requests  # type: ignore[attr-defined]
    proc = run(*args, "--allow-fallback")
    assert proc.returncode == 0, proc.stderr
    assert out.exists()
    assert "fallback: summarize wrote the summary offline: the summarizer failed" in proc.stderr


def test_compact_records_nothing_when_the_named_summarizer_fails(
    failing_server: object, session_file: Path
) -> None:
    before = session_file.read_bytes()
    proc = run("compact", str(session_file), "--model", "gpt-4o", "--window", "4000", "--summarizer",
               "openai:m", "--base-url", failing_server.url)  # type: ignore[attr-defined]  # fmt: skip
    assert_one_line_error(proc, 5, "openai:m failed", "nothing recorded")
    assert session_file.read_bytes() == before


# ----------------------------------------------------------------------------- the command line itself


def test_version_and_debug_anywhere() -> None:
    proc = run("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == "agentcontext 0.1.0"
    for args in (("--debug", "fit", "-", "--model", "gpt4o"), ("fit", "-", "--model", "gpt4o", "--debug")):
        proc = run(*args, stdin="[]")
        assert proc.returncode == 3
        assert "Traceback" in proc.stderr and proc.stderr.strip().splitlines()[-1].startswith(
            "agentcontext: error:"
        )
    proc = run("fit", "-", "--model", "gpt4o", stdin="[]")
    assert "Traceback" not in proc.stderr


def test_a_model_the_registry_does_not_know(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    proc = run("fit", str(EXAMPLE), "--model", "my-local-llama", "--window", "32000", "-o", str(tmp_path / "o"),
               "--report", str(report))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "my-local-llama is not in the model registry" in proc.stderr and "estimator" in proc.stderr
    data = json.loads(report.read_text(encoding="utf-8"))
    assert data["window"] == 32_000 and data["counter"].startswith("calibrated(estimate")
    proc = run("count", str(EXAMPLE), "--model", "my-local-llama", "--window", "32000", "--tokenizer",
               "cl100k_base", "--json")  # fmt: skip
    data = json.loads(proc.stdout)
    msgs = oai.to_messages(example_dicts())
    assert data["counter"] == "tiktoken:cl100k_base" and data["context_window"] == 32_000
    assert data["tokens"] == TiktokenCounter("cl100k_base").count_messages(msgs)
    proc = run(
        "fit", str(EXAMPLE), "--model", "gpt-4o", "--encoding", "cl100k_base", "-o", str(tmp_path / "o")
    )
    assert proc.returncode == 0 and "counting with cl100k_base" in proc.stderr


def test_python_m_agentcontext_exits_quietly_on_a_closed_pipe() -> None:
    proc = subprocess.run(
        f"{sys.executable} -m agentcontext models --json | head -c 10",
        shell=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0 and "Traceback" not in proc.stderr and "Exception" not in proc.stderr


def test_fit_keep_unknown_carries_thinking_and_documents_through_a_compaction(tmp_path: Path) -> None:
    # Claude Code with extended thinking sends thinking blocks back, and a user may attach a document with
    # citations: refused by default (they are not modelled); with --keep-unknown a long such request is
    # fitted, the messages it keeps go out exactly as sent, and a note names what was not counted (thinking
    # and the document are).
    messages: list[dict[str, object]] = [
        {
            "role": "user",
            "content": [
                {
                    "type": "document",
                    "source": {"type": "text", "media_type": "text/plain", "data": "Spec."},
                    "citations": {"enabled": True},
                },
                {"type": "text", "text": "Find which step fails."},
            ],
        }
    ]
    for step in range(30):
        thinking = {"type": "thinking", "thinking": f"Run step {step}.", "signature": f"sig{step}"}
        use = {"type": "tool_use", "id": f"toolu_{step}", "name": "Bash", "input": {"command": f"run {step}"}}
        messages.append({"role": "assistant", "content": [thinking, use]})
        result = {"type": "tool_result", "tool_use_id": f"toolu_{step}", "content": f"step {step} ok\n" * 60}
        messages.append({"role": "user", "content": [result]})
    body = {"model": "claude-sonnet-4-5", "max_tokens": 1_000, "system": "Be careful.", "messages": messages}
    request = tmp_path / "request.json"
    request.write_text(json.dumps(body), encoding="utf-8")
    out = tmp_path / "fitted.json"

    refused = run("fit", str(request), "--model", "claude-sonnet-4-5", "--window", "8000", "-o", str(out))
    assert_one_line_error(refused, 3, "'citations'", "--keep-unknown")
    assert not out.exists()

    kept = run("fit", str(request), "--model", "claude-sonnet-4-5", "--window", "8000", "--keep-unknown",
               "-o", str(out))  # fmt: skip
    assert kept.returncode == 0, kept.stderr
    assert (
        "'citations' on document blocks" in kept.stderr
        and "'thinking' blocks" in kept.stderr
        and "thinking blocks are counted, the rest is not" in kept.stderr
    )
    fitted = json.loads(out.read_text(encoding="utf-8"))
    sent = fitted["messages"]
    assert len(sent) < len(messages)  # compacted
    assert sent[-2:] == messages[-2:]  # the newest step exactly as sent, its thinking block included
    assert sent[0]["role"] == "user" and "Find which step fails." in json.dumps(sent[0])
    counted = run("count", str(request), "--model", "claude-sonnet-4-5", "--keep-unknown", "--json")
    assert counted.returncode == 0 and "'thinking' blocks" in counted.stderr, counted.stderr
    assert json.loads(counted.stdout)["tokens"] > 8_000


@pytest.mark.parametrize("keep", [False, True])
def test_fit_keeps_a_cut_tool_output_only_where_its_reference_can_be_read(tmp_path: Path, keep: bool) -> None:
    """A one-shot fit ends with its process: a reference to an in-memory store would send the model after
    text no one can read. With --artifacts the reference resolves to the full output on disk."""
    from agentcontext.artifacts import FileArtifactStore

    output = "\n".join(f"line {i}: value_{i} in src/pkg/mod_{i}.py" for i in range(3_000))
    messages = [
        {"role": "user", "content": "run the tests"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": output},
    ]
    path = tmp_path / "conv.jsonl"
    path.write_text("".join(json.dumps(m) + "\n" for m in messages))
    store = tmp_path / "artifacts"
    flags = ["--artifacts", str(store)] if keep else []
    proc = run("fit", str(path), "--model", "gpt-4o", "--window", "8000", *flags)
    assert proc.returncode == 0, proc.stderr
    cut = json.loads(proc.stdout.splitlines()[-1])["content"]
    assert len(cut) < len(output) // 5  # cut (a one-shot fit gives it the room the rest leaves)
    given = int(proc.stderr.split(": ", 1)[1].split(" -> ")[0].replace(",", ""))
    assert given > 40_000  # the line starts from the input as given, not from after the cut
    if keep:
        ref = "artifact:sha256:" + cut.split("artifact:sha256:")[1][:64]
        assert FileArtifactStore(store).get(ref) == output
        # For whoever runs fit, not for the model: it has no recall tool, and the files are never evicted.
        assert f"full output kept outside the conversation under {ref} ...]" in cut and "recall" not in cut
    else:
        assert "artifact:" not in cut and "the full output was not kept" in cut
        assert not store.exists()


# ----------------------------------------------------------------------------- what a new user met


SMALL = [
    {"role": "user", "content": "list the files"},
    {"role": "assistant", "content": "README.md setup.py"},
    {"role": "user", "content": "thanks"},
]


def small_file(tmp_path: Path, items: list[dict[str, object]] = SMALL) -> str:
    path = tmp_path / "small.jsonl"
    path.write_text("".join(json.dumps(m) + "\n" for m in items), encoding="utf-8")
    return str(path)


def test_count_takes_the_window_given_for_a_known_model(tmp_path: Path) -> None:
    f = small_file(tmp_path)
    data = json.loads(run("count", f, "--model", "gpt-4o", "--window", "5000", "--json").stdout)
    assert data["context_window"] == 5_000
    assert data["share_of_window"] == round(data["tokens"] / 5_000, 4)
    assert "5,000-token window" in run("count", f, "--model", "gpt-4o", "--window", "5000").stdout
    assert "gpt-4o's 128,000-token window" in run("count", f, "--model", "gpt-4o").stdout


def test_a_known_name_plus_a_variant_needs_its_window_and_a_family_name_is_noted(tmp_path: Path) -> None:
    f = small_file(tmp_path)
    # It starts with gpt-4 (8,192) but is another model: never counted with gpt-4's window.
    proc = run("count", f, "--model", "gpt-4-1-mini")
    assert_one_line_error(
        proc,
        3,
        "unknown model 'gpt-4-1-mini'",
        "starts with 'gpt-4'",
        "not counted as 'gpt-4'",
        "'gpt-4.1-mini'",
    )
    assert "--window TOKENS" in proc.stderr
    given = run("count", f, "--model", "o1-foo", "--window", "100000")
    assert given.returncode == 0
    assert (
        "o1-foo is not in the model registry: window 100,000 tokens, counted with the estimator"
        in given.stderr
    )
    family = run("count", f, "--model", "claude-3")
    assert family.returncode == 0
    assert (
        "'claude-3' names a family, not one model; counted as the smallest of claude-3-opus, claude-3-sonnet, "
        "claude-3-haiku (200,000-token window, estimate)"
    ) in family.stderr
    assert "o1-mini's 128,000-token window" in run("count", f, "--model", "o1-mini").stdout
    for dated in ("gpt-4o-2024-08-06", "claude-sonnet-4-5-20250929", "openai/gpt-4o", "o1-mini-2024-09-12"):
        noted = run("count", f, "--model", dated).stderr
        assert "not in the" not in noted and "family" not in noted, dated
    fitted = run("fit", f, "--model", "gpt-4o")
    assert fitted.returncode == 0 and "tokens for gpt-4o (budget" in fitted.stderr


def test_replay_and_import_keep_unknown_blocks(tmp_path: Path) -> None:
    thinking = {"type": "thinking", "thinking": "hm", "signature": "x"}
    body = {
        "model": "claude-sonnet-4-5",
        "system": "be brief",
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [thinking, {"type": "text", "text": "hello"}]},
            {"role": "user", "content": "more"},
            {"role": "assistant", "content": "ok"},
        ],
    }
    request = tmp_path / "request.json"
    request.write_text(json.dumps(body), encoding="utf-8")
    session = tmp_path / "s.jsonl"
    assert_one_line_error(run("replay", str(request), "--model", "claude-sonnet-4-5"), 3, "--keep-unknown")
    assert_one_line_error(run("import", str(request), str(session)), 3, "--keep-unknown")
    replayed = run("replay", str(request), "--model", "claude-sonnet-4-5", "--keep-unknown", "--json")
    assert replayed.returncode == 0 and json.loads(replayed.stdout)["calls"] == 2
    assert run("import", str(request), str(session), "--keep-unknown").returncode == 0
    exported = json.loads(run("export", str(session), "--format", "anthropic").stdout)
    assert exported["messages"][1]["content"][0] == thinking  # kept in the session, written back


def test_errors_give_command_line_advice_not_python_arguments(tmp_path: Path) -> None:
    from agentcontext.cli._errors import _CLI_WORDS

    broken = [{"role": "user", "content": "go"}, {"role": "tool", "tool_call_id": "x", "content": "orphan"}]
    proc = run("fit", "-", "--model", "gpt-4o", "--strict", stdin=json.dumps(broken))
    assert_one_line_error(proc, 3, "drop --strict")
    missing = run("compact", str(tmp_path / "missing.jsonl"), "--model", "gpt-4o")
    assert_one_line_error(missing, 3, "agentcontext import")
    assert "=True" not in proc.stderr + missing.stderr
    # Each phrase the command line rewords is still what the library says (string literals joined).
    source = "".join(p.read_text(encoding="utf-8") for p in (ROOT / "src" / "agentcontext").rglob("*.py"))
    joined = re.sub(r'"\s*\n\s*f?"', "", source)
    for python, _ in _CLI_WORDS:
        assert python in joined, python


def test_inspect_reports_every_good_session_and_each_bad_one(session_file: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not a session\n", encoding="utf-8")
    proc = run("inspect", str(session_file), str(bad), str(session_file), "--model", "gpt-4o", "--json")
    assert proc.returncode == 3
    assert [d["session"] for d in json.loads(proc.stdout)] == [str(session_file)] * 2
    errors = [line for line in proc.stderr.splitlines() if line.startswith("agentcontext: error:")]
    assert len(errors) == 1 and str(bad) in errors[0]
    table = run("inspect", str(session_file), str(bad), "--model", "gpt-4o")
    assert table.returncode == 3 and "2 sessions" not in table.stdout and str(session_file) in table.stdout


def test_a_missing_tokenizer_file_is_invalid_input(tmp_path: Path) -> None:
    proc = run(
        "count", small_file(tmp_path), "--model", "gpt-4o", "--tokenizer", "hf:/missing/tokenizer.json"
    )
    assert_one_line_error(proc, 3, "--tokenizer", "/missing/tokenizer.json")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "2 bad command-line usage" in readme  # `--window 0` exits 2, as documented


def test_replay_exits_4_when_calls_cannot_fit(tmp_path: Path) -> None:
    f = small_file(tmp_path, [{"role": "system", "content": "rule " * 1500}, *SMALL])
    for command in ("fit", "replay"):
        proc = run(command, f, "--model", "gpt-4o", "--window", "1000")
        assert proc.returncode == 4, (command, proc.stderr)
        assert "does not fit" in proc.stderr
    as_json = run("replay", f, "--model", "gpt-4o", "--window", "1000", "--json")
    data = json.loads(as_json.stdout)
    assert as_json.returncode == 4 and data["overflows"] == data["calls"] == 1
    assert data["output_cost_usd"] == 0  # nothing was sent, so nothing came back


def test_malformed_json_is_called_truncated_only_when_it_ends_early(tmp_path: Path) -> None:
    lines = [json.dumps(m) for m in SMALL]
    broken = tmp_path / "broken.jsonl"
    broken.write_text("\n".join([*lines[:2], '{"role": "user", "content": "unclosed', lines[2]]) + "\n")
    proc = run("count", str(broken), "--model", "gpt-4o")
    assert_one_line_error(proc, 3, "line 3", "not closed")
    assert "truncated" not in proc.stderr and "at at" not in proc.stderr
    cut = tmp_path / "cut.json"
    cut.write_text(json.dumps(SMALL)[:40], encoding="utf-8")
    proc = run("count", str(cut), "--model", "gpt-4o")
    assert_one_line_error(proc, 3, "truncated")
    assert "at at" not in proc.stderr
