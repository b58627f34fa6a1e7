"""Crash safety: a writer killed with SIGKILL at random moments never loses an append that returned.

A child process appends messages (of very different sizes, with checkpoints
mixed in) in a loop and prints each record's seq and message id only after
``append`` returned. The parent kills it with SIGKILL at a random moment,
then restores the session: the restore must succeed, hold every printed
record, and go on accepting appends, for the next child to continue the same
log. Fifty kills per store.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest

from _sizes import runs
from agentcontext.session import CorruptRecordWarning, Session, SQLiteStore

pytestmark = pytest.mark.skipif(os.name != "posix", reason="SIGKILL")

KILLS = runs(8, 50)

_CHILD = textwrap.dedent(
    """
    import random, sys
    from agentcontext.messages import Message
    from agentcontext.session import Session, SQLiteStore
    kind, path, fsync, seed = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    rng = random.Random(seed)
    if kind == "jsonl":
        s = Session.open(path, fsync=fsync)
    else:
        s = Session.from_store(SQLiteStore(path, fsync=fsync))
    print("ready", s.last_seq, flush=True)
    while True:
        if rng.random() < 0.1:
            s.checkpoint()
            print(s.last_seq, "checkpoint", flush=True)
        size = rng.choice([5, 5, 300, 300, 3_000, 12_000])
        m = Message(role="user", content=f"{rng.random()} " + "y" * size)
        s.append(m)
        print(s.last_seq, m.id, flush=True)
    """
)


def _restore(kind: str, path: Path) -> Session:
    # A kill mid-write may leave a torn last line: the restore skips it with a warning.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CorruptRecordWarning)
        if kind == "jsonl":
            return Session.open(path, fsync="never")
        return Session.from_store(SQLiteStore(path, fsync="never"))


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
def test_sigkill_at_random_moments_never_loses_a_returned_append(kind: str, tmp_path: Path) -> None:
    rng = random.Random(20240601)
    path = tmp_path / ("run.jsonl" if kind == "jsonl" else "run.db")
    confirmed: dict[int, str] = {}  # seq -> message id (or "checkpoint"), as printed after append returned
    killed_mid_loop = 0
    for round_no in range(KILLS):
        fsync = ("never", "always", "interval")[round_no % 3]
        with (
            open(tmp_path / "child.err", "w+") as errors,
            subprocess.Popen(
                [sys.executable, "-c", _CHILD, kind, str(path), fsync, str(round_no)],
                stdout=subprocess.PIPE,
                stderr=errors,
                text=True,
            ) as child,
        ):
            assert child.stdout is not None
            ready = child.stdout.readline().split()
            if ready[:1] != ["ready"]:
                child.wait(timeout=60)
                errors.seek(0)
                pytest.fail(f"the child did not start: {errors.read()}")
            assert int(ready[1]) >= max(confirmed, default=0)
            time.sleep(rng.uniform(0.0, 0.04))
            child.send_signal(signal.SIGKILL)
            out = child.stdout.read()  # through the same reader readline used: nothing skipped
            assert child.wait(timeout=60) == -signal.SIGKILL
        # Each line was printed (and flushed) only after its append returned.
        lines = out.split("\n")
        printed = [line.split() for line in lines[:-1]]  # a last line without newline was not finished
        for seq, what in printed:
            confirmed[int(seq)] = what
        killed_mid_loop += bool(printed)

        session = _restore(kind, path)  # must always succeed
        try:
            assert session.last_seq >= max(confirmed, default=0)
            for seq, what in confirmed.items():
                if what != "checkpoint":
                    assert session.message(what).id == what, f"round {round_no}: seq {seq} lost"
            view_ids = [m.id for m in session.view]
            wanted = [what for _, what in sorted(confirmed.items()) if what != "checkpoint"]
            wanted_set = set(wanted)
            assert [i for i in view_ids if i in wanted_set] == wanted  # all there, in order
            confirmed_checkpoints = sum(1 for w in confirmed.values() if w == "checkpoint")
            assert len(session.checkpoints) >= confirmed_checkpoints
        finally:
            session.close()
    assert killed_mid_loop >= KILLS // 2, "the kills should mostly land while the child is appending"
    assert len(confirmed) > KILLS


def test_a_dmail_delivery_cut_by_a_crash_leaves_the_dmail_pending(tmp_path: Path) -> None:
    """The revert and the D-Mail's message are one batch: a crash keeps both or neither."""
    from agentcontext.messages import Message

    path = tmp_path / "run.jsonl"
    with Session.open(path) as s:
        s.append(Message(role="user", content="task"))
        cp = s.checkpoint()
        s.append(Message(role="assistant", content="a wrong turn"))
        s.send_dmail(cp, "take the other branch")
        before = path.read_bytes()
        assert s.deliver_dmail() is not None
    lines = path.read_bytes()[len(before) :].splitlines(keepends=True)
    assert len(lines) == 2
    path.write_bytes(before + lines[0])  # the crash: the revert on disk, the D-Mail's message not
    with pytest.warns(CorruptRecordWarning, match="1 of the 2 records of one append"):
        s = Session.open(path)
    with s:
        # Before: the revert was applied, the message lost, and the D-Mail no longer pending (lost).
        assert [m.text for m in s.view] == ["task", "a wrong turn"]
        assert s.pending_dmail is not None and s.pending_dmail.text == "take the other branch"
        delivered = s.deliver_dmail()
        assert delivered is not None and [m.text for m in s.view][0] == "task" and len(s.view) == 2
