"""Progress on stderr for long commands: bytes read, then each step with its elapsed time (terminals only)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import TracebackType

from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from . import Consoles
from ._text import plain

__all__ = ["Activity"]


def _ignore(done: int) -> None:
    """Progress nobody sees (stderr is not a terminal)."""


class Activity:
    """A transient progress display on stderr, shown only when stderr is a terminal.

    >>> with Activity(io) as activity:                                # doctest: +SKIP
    ...     request = read_request(path, progress=activity.reading(path))
    ...     with activity.step("fitting"):
    ...         prepared = engine.prepare(request.messages)
    """

    def __init__(self, io: Consoles) -> None:
        enabled = io.err.is_terminal
        self._bytes = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            DownloadColumn(),
            TimeElapsedColumn(),
            console=io.err,
            transient=True,
            disable=not enabled,
        )
        self._steps = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[done]}"),
            TimeElapsedColumn(),
            console=io.err,
            transient=True,
            disable=not enabled,
        )
        self.enabled = enabled

    def __enter__(self) -> Activity:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for progress in (self._bytes, self._steps):
            if progress.live.is_started:  # stopping one never started prints a blank line
                progress.stop()

    def reading(self, path: str) -> Callable[[int], None] | None:
        """A callback for `read_request`: the bytes read of ``path`` against its size."""
        if not self.enabled:
            return None
        try:
            total: float | None = os.stat(path).st_size if path != "-" else None
        except OSError:
            total = None
        self._bytes.start()
        task = self._bytes.add_task(f"reading {plain(path)}", total=total)
        last = [0]

        def update(done: int) -> None:
            if done - last[0] >= 1 << 20 or (total is not None and done >= total):
                last[0] = done
                self._bytes.update(task, completed=done)

        return update

    @contextmanager
    def step(self, description: str, total: int | None = None) -> Iterator[Callable[[int], None]]:
        """Show ``description`` while the block runs; the yielded callback sets how much of ``total`` is done."""
        if self._bytes.live.is_started:
            self._bytes.stop()
        if not self.enabled:
            yield _ignore
            return
        self._steps.start()
        task: TaskID = self._steps.add_task(plain(description), total=total, done="")

        def update(done: int) -> None:
            self._steps.update(task, completed=done, done=f"{done:,}/{total:,}" if total else "")

        try:
            yield update
        finally:
            self._steps.remove_task(task)
