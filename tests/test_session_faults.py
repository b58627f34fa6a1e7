"""Faults at every store write: a write that fails (an error injected at the OS call, a half-written batch, a
failed fsync, a full disk) leaves the session and its engine exactly as before the call, and the prompt the live
session prepares is the prompt a restore of its file prepares.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import textwrap
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest

from agentcontext.engine import ContextEngine
from agentcontext.exceptions import StoreError
from agentcontext.messages import Message
from agentcontext.session import CorruptRecordWarning, Session
from agentcontext.testing import WordCounter, make_conversation


def _engine() -> ContextEngine:
    return ContextEngine(window=2500, reserve=400, counter=WordCounter())


def _state(s: Session) -> tuple[object, ...]:
    return (list(s.view), s.checkpoints, [c.seq for c in s.compactions], s.usage_totals, s.last_seq, s.id)


class Faults:
    """Makes the OS calls on one file fail on a schedule: a failed write (half of it written), or a failed fsync."""

    def __init__(self, path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.path = path
        self.armed: str | None = None
        self.fired = 0
        real_write, real_fsync = os.write, os.fsync

        def ours(fd: int) -> bool:
            try:
                return os.path.samestat(os.fstat(fd), os.stat(self.path))
            except OSError:
                return False

        def write(fd: int, data: bytes | memoryview) -> int:
            if self.armed == "write" and ours(fd):
                self.armed = None
                self.fired += 1
                real_write(fd, bytes(data)[: max(1, len(data) // 2)])  # the disk took half of it
                raise OSError(errno.ENOSPC, "No space left on device")
            return real_write(fd, data)

        def fsync(fd: int) -> None:
            if self.armed == "fsync" and ours(fd):
                self.armed = None
                self.fired += 1
                raise OSError(errno.EIO, "Input/output error")
            real_fsync(fd)

        monkeypatch.setattr(os, "write", write)
        monkeypatch.setattr(os, "fsync", fsync)


def _restored_prompt(path: Path, tmp_path: Path) -> tuple[list[Message], list[Message]]:
    """The view and the prepared prompt of a restore of ``path`` (a copy, so the live session keeps its lock)."""
    copy = tmp_path / f"restore-{len(list(tmp_path.iterdir()))}.jsonl"
    shutil.copy(path, copy)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CorruptRecordWarning)  # a failed append left nothing half-written
        restored = Session.open(copy, engine=_engine(), fsync="never")
    with restored:
        return list(restored.view), list(restored.prepare().messages)


OPS: dict[str, Callable[[Session, Message], object]] = {
    "append": lambda s, m: s.append(m),
    "checkpoint": lambda s, m: s.checkpoint(label=m.id),
    "prepare": lambda s, m: s.prepare(),
    "usage": lambda s, m: s.record_usage(prompt_tokens=1000),
}


@pytest.mark.parametrize("fault", ["write", "fsync"])
def test_a_failed_write_changes_nothing_and_the_restore_agrees(
    fault: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "run.jsonl"
    session = Session.open(path, engine=_engine(), fsync="always")
    faults = Faults(path, monkeypatch)
    msgs = make_conversation(seed=7, rounds=10, steps=(1, 3), output_tokens=(40, 400))
    failures = 0
    step = 0
    for m in msgs:
        ops = ["prepare", "append", "usage", "checkpoint"] if m.role == "assistant" else ["append"]
        for op in ops:
            step += 1
            if step % 3 == 0:
                prompt_before = session.prepare().messages if op != "prepare" else None
                before = _state(session)
                faults.armed = fault
                try:
                    OPS[op](session, m)
                except StoreError:
                    failures += 1
                    assert _state(session) == before, op  # nothing applied
                    view, prompt = _restored_prompt(path, tmp_path)
                    assert view == list(session.view)
                    live = session.prepare().messages
                    assert list(live) == prompt  # the live prompt is the restore's
                    if prompt_before is not None:
                        assert list(live) == list(prompt_before)  # and what it was before the failure
                faults.armed = None
            OPS[op](session, m)  # the step itself, as the agent would retry it
    session.close()
    assert failures >= 10 and faults.fired == failures
    view, prompt = _restored_prompt(path, tmp_path)
    again = Session.open(path, engine=_engine())
    assert list(again.view) == view and list(again.prepare().messages) == prompt
    again.close()


_FULL_DISK_CHILD = textwrap.dedent(
    """
    import json, os, resource, signal, sys
    from agentcontext.engine import ContextEngine
    from agentcontext.exceptions import StoreError
    from agentcontext.messages import Message
    from agentcontext.session import Session
    from agentcontext.testing import WordCounter
    path = sys.argv[1]
    s = Session.open(path, engine=ContextEngine(window=4000, reserve=400, counter=WordCounter()))
    for i in range(5):
        s.append(Message(role="user", content=f"warm up {i}"))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of a signal
    room = os.path.getsize(path) + 1500
    resource.setrlimit(resource.RLIMIT_FSIZE, (room, room))
    failed = {}
    for i in range(200):
        before = (s.last_seq, [m.id for m in s.view])
        op = ("append", "checkpoint", "usage")[i % 3]
        try:
            if op == "append":
                s.append(Message(role="user", content=f"message {i} " + "x" * 150))
            elif op == "checkpoint":
                s.checkpoint(label=f"cp {i}")
            else:
                s.record_usage(prompt_tokens=100 + i)
        except StoreError as exc:
            assert (s.last_seq, [m.id for m in s.view]) == before, op
            failed[op] = str(exc)
        if len(failed) == 3:
            break
    print(json.dumps({"failed": failed, "seq": s.last_seq, "view": [m.id for m in s.view],
                      "prompt": [m.id for m in s.prepare().messages]}))
    """
)


@pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_FSIZE")
def test_a_full_disk_fails_each_write_cleanly(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    result = subprocess.run(
        [sys.executable, "-c", _FULL_DISK_CHILD, str(path)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    live = json.loads(result.stdout)
    assert set(live["failed"]) == {"append", "checkpoint", "usage"}  # every kind of write met the full disk
    assert all("File too large" in text for text in live["failed"].values()), live["failed"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", CorruptRecordWarning)  # no half-written line was left
        restored = Session.open(path, engine=ContextEngine(window=4000, reserve=400, counter=WordCounter()))
    with restored:
        assert restored.last_seq == live["seq"]
        assert [m.id for m in restored.view] == live["view"]
        assert [m.id for m in restored.prepare().messages] == live["prompt"]
        restored.append(Message(role="user", content="room again"))  # and the log goes on
