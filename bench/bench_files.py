"""What counting a file costs: a large PDF, a long recording, a crafted PDF of compressed streams.

A file is read once, when its message is first counted (the count is cached by message id):
its base64 decoded, its pages or length read. This measures that first count and a cached one.

Run from the repository root::

    python bench/bench_files.py        # a few seconds

Prints a Markdown section for ``bench/RESULTS.md``.
"""

from __future__ import annotations

import base64
import io
import os
import platform
import time
import wave
import zlib
from collections.abc import Callable

import agentcontext as ac
from agentcontext import FilePart, Message, TextPart


def pdf(pages: int, filler: int) -> bytes:
    objects = b"".join(b"%d 0 obj << /Type /Page >> endobj\n" % (i + 1) for i in range(pages))
    noise = os.urandom(filler)  # scanned pages: incompressible image data
    return b"%PDF-1.7\n" + noise[: filler // 2] + objects + noise[filler // 2 :]


def recording(seconds: int) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16_000)
        w.writeframes(b"\x00\x00" * 16_000 * seconds)
    return out.getvalue()


def bomb(streams: int) -> bytes:
    body = zlib.compress(b"<< /Type /Page >>" * 2_000_000, 9)  # 34 MB each, inflated
    parts = b"".join(
        b"1 0 obj << /Type /ObjStm /Filter /FlateDecode >>\nstream\n" + body + b"\nendstream\n"
        for _ in range(streams)
    )
    return b"%PDF-1.5\n" + parts


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def main() -> None:
    counter = ac.counter_for("gpt-4o")
    cases = [
        ("PDF, 200 pages, 30 MB", "application/pdf", pdf(200, 30_000_000)),
        ("WAV, 10 minutes, 19 MB", "audio/wav", recording(600)),
        ("crafted PDF, 50 streams of 34 MB inflated", "application/pdf", bomb(50)),
    ]
    print(f"### Counting files ({platform.python_version()}, {platform.machine()})\n")
    print("`python bench/bench_files.py`\n")
    print("| file | base64 | tokens | first count | cached count |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for label, media, data in cases:
        url = f"data:{media};base64,{base64.b64encode(data).decode()}"
        message = Message(role="user", content=(TextPart(text="Read this."), FilePart(url=url)))
        first, tokens = timed(lambda m=message: counter.count_message(m))
        cached, _ = timed(lambda m=message: counter.count_message(m))
        print(
            f"| {label} | {len(url) / 1e6:.0f} MB | {tokens:,} | {first * 1e3:.0f} ms | {cached * 1e6:.0f} µs |"
        )


if __name__ == "__main__":
    main()
