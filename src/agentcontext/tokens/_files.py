"""Token estimates for files: documents (PDF, text), audio and video.

Providers read a file as what it holds, and bill it so. The rules, with the
documentation they come from:

* **PDF**: every provider reads each page as its extracted text plus an image
  of the page. Anthropic documents "1,500-3,000 tokens per page"; OpenAI
  documents the same text-plus-image reading without a figure. We count
  **3,000 per page** for both, the top of Anthropic's range, so the estimate
  errs high. Gemini documents 258 tokens per page; bills measured on text pages
  come to about 560, which we count. Pages are counted from the file itself
  (its ``/Type /Page`` objects, looked for in compressed object streams too,
  else the page tree's ``/Count``); a file we cannot read counts one page per
  50 kB.
* **Text** (``text/*``, JSON, XML, YAML): the text itself, counted with the
  counter's tokenizer (without one: a token per 3 bytes, high for English,
  right for CJK in UTF-8).
* **Audio**: by its length. OpenAI bills audio input at 10 tokens a second
  (1 per 100 ms), Gemini at 32; Anthropic does not take audio and is counted as
  Gemini. The length is read from a WAV header, or from an MP3 frame's bit
  rate; any other audio counts as 32 kbit/s (4 kB a second), which errs long.
* **Video**: Gemini bills 263 tokens a second (a frame a second plus its
  sound); we count 300 for every provider. The length is read from an MP4/MOV
  ``mvhd`` box; any other video counts as 1 Mbit/s.
* **Anything else** in a ``data:`` URL (a spreadsheet, a Word file) counts as
  text of its size: a token per 3 bytes.

A file given by URL or by a provider's file id has no bytes here and nothing
is downloaded: it costs `UNKNOWN_FILE_TOKENS`, the price of one PDF page. Pass
such files as ``data:`` URLs when the estimate matters, or let a
`CalibratedCounter` learn the gap from the usage the provider reports.
"""

from __future__ import annotations

import math
import re
import struct
import zlib
from collections.abc import Callable

from ..messages import FilePart
from ._images import ImageProvider

__all__ = ["UNKNOWN_FILE_TOKENS", "file_tokens", "pdf_pages"]

PDF_PAGE_TOKENS: dict[str, int] = {"openai": 3_000, "anthropic": 3_000, "gemini": 560}
AUDIO_TOKENS_PER_SECOND: dict[str, int] = {"openai": 10, "anthropic": 32, "gemini": 32}
VIDEO_TOKENS_PER_SECOND = 300
UNKNOWN_FILE_TOKENS = 3_000
"""What a file costs when its bytes are not here (a URL, a provider's file id)."""

_BYTES_PER_PDF_PAGE = 50_000
_BYTES_PER_TOKEN = 3
_AUDIO_BYTES_PER_SECOND = 4_000  # 32 kbit/s: low for speech codecs, so lengths err long
_VIDEO_BYTES_PER_SECOND = 125_000  # 1 Mbit/s
_INFLATE_LIMIT = 16 * 1024 * 1024
"""Most bytes one compressed PDF object stream may inflate to while pages are counted."""
_INFLATE_TOTAL = 64 * 1024 * 1024
"""Most bytes all of a PDF's object streams may inflate to (a crafted file holds thousands)."""

_TEXT_TYPES = ("application/json", "application/xml", "application/yaml", "application/x-yaml")
_PAGE = re.compile(rb"/Type\s*/Page(?![A-Za-z])")
_OBJECT_STREAM = re.compile(rb"/Type\s*/ObjStm\b")
_STREAM = re.compile(rb"stream\r?\n")
_COUNT = re.compile(rb"/Count\s+(\d+)")
_MP3_KBPS = (0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320)  # MPEG-1 layer III
_MP3_KBPS_2 = (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160)  # MPEG-2 and 2.5


def file_tokens(
    part: FilePart,
    *,
    provider: ImageProvider = "openai",
    count_text: Callable[[str], int] | None = None,
) -> int:
    """Estimate the tokens ``part`` costs with ``provider`` (the rules are in the module docstring).

    Args:
        part: the file.
        provider: whose billing rule applies: ``"openai"`` (default), ``"anthropic"`` or ``"gemini"``.
        count_text: counts a text file's text (a counter's ``count_text``); None: a token per 3 bytes.

    >>> import base64
    >>> from agentcontext import FilePart
    >>> pdf = b"%PDF-1.4 1 0 obj << /Type /Page >> endobj 2 0 obj << /Type /Page >> endobj"
    >>> file_tokens(FilePart(url="data:application/pdf;base64," + base64.b64encode(pdf).decode()))
    6000
    >>> file_tokens(FilePart(url="https://example.com/report.pdf"))
    3000
    """
    data = part.data
    if data is None:
        return UNKNOWN_FILE_TOKENS
    media = (part.media_type or "").lower()
    if media == "application/pdf" or (not media and data.startswith(b"%PDF")):
        pages = pdf_pages(data)
        if pages is None:
            pages = max(1, math.ceil(len(data) / _BYTES_PER_PDF_PAGE))
        return pages * PDF_PAGE_TOKENS.get(provider, PDF_PAGE_TOKENS["openai"])
    if media.startswith("text/") or media in _TEXT_TYPES or media.endswith(("+json", "+xml")):
        if count_text is not None:
            return max(1, count_text(data.decode("utf-8", errors="replace")))
        return max(1, math.ceil(len(data) / _BYTES_PER_TOKEN))
    if media.startswith("audio/"):
        seconds = _audio_seconds(data)
        rate = AUDIO_TOKENS_PER_SECOND.get(provider, AUDIO_TOKENS_PER_SECOND["gemini"])
        return max(1, math.ceil(seconds * rate))
    if media.startswith("video/"):
        length = _mp4_seconds(data)
        if length is None:
            length = len(data) / _VIDEO_BYTES_PER_SECOND
        return max(1, math.ceil(length * VIDEO_TOKENS_PER_SECOND))
    return max(1, math.ceil(len(data) / _BYTES_PER_TOKEN))


def pdf_pages(data: bytes) -> int | None:
    """The number of pages of a PDF, read from its page objects; None when they cannot be found.

    Page objects are counted where they stand and inside Flate-compressed object
    streams (PDF 1.5 and later often keep them there); failing both, the page
    tree's ``/Count`` is read. Nothing is rendered.
    """
    pages = len(_PAGE.findall(data))
    if pages:
        return pages
    budget, view = (
        _INFLATE_TOTAL,
        memoryview(data),
    )  # a view: slicing the rest of the file copied it per stream
    for header in _OBJECT_STREAM.finditer(data):
        start = _STREAM.search(data, header.end())
        if start is None:
            continue
        inflater = zlib.decompressobj()
        try:
            body = inflater.decompress(view[start.end() :], min(_INFLATE_LIMIT, budget))
        except zlib.error:
            continue
        pages += len(_PAGE.findall(body))
        budget -= len(body)
        if budget <= 0:
            break
    if pages:
        return pages
    counts = [int(m.group(1)) for m in _COUNT.finditer(data)]
    return max(counts) if counts and max(counts) > 0 else None


def _audio_seconds(data: bytes) -> float:
    seconds = _wav_seconds(data)
    if seconds is None:
        seconds = _mp3_seconds(data)
    return seconds if seconds is not None else len(data) / _AUDIO_BYTES_PER_SECOND


def _wav_seconds(data: bytes) -> float | None:
    if len(data) < 12 or data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        return None
    at, byte_rate = 12, 0
    while at + 8 <= len(data):
        chunk, size = data[at : at + 4], struct.unpack_from("<I", data, at + 4)[0]
        if chunk == b"fmt " and at + 20 <= len(data):
            byte_rate = struct.unpack_from("<I", data, at + 16)[0]
        elif chunk == b"data" and byte_rate:
            # A streamed WAV writes 0 or 0xFFFFFFFF as its size; the bytes that are here tell then.
            size = len(data) - at - 8 if size in (0, 0xFFFFFFFF) else min(size, len(data) - at - 8)
            return size / byte_rate
        at += 8 + size + (size & 1)
    return None


def _mp3_seconds(data: bytes) -> float | None:
    at = 0
    if data[:3] == b"ID3" and len(data) >= 10:  # skip the tag: its size is 4 bytes of 7 bits each
        at = 10 + ((data[6] & 0x7F) << 21 | (data[7] & 0x7F) << 14 | (data[8] & 0x7F) << 7 | (data[9] & 0x7F))
    if at + 4 > len(data) or data[at] != 0xFF or data[at + 1] & 0xE0 != 0xE0:
        return None
    table = _MP3_KBPS if data[at + 1] & 0x18 == 0x18 else _MP3_KBPS_2
    index = data[at + 2] >> 4
    kbps = table[index] if index < len(table) else 0
    return (len(data) - at) * 8 / (kbps * 1000) if kbps else None


def _mp4_seconds(data: bytes) -> float | None:
    at = data.find(b"mvhd", 0, 8 * 1024 * 1024)
    if at < 0 or at + 24 > len(data):
        return None
    version = data[at + 4]
    try:
        if version == 1:
            scale, duration = struct.unpack_from(">IQ", data, at + 24)
        else:
            scale, duration = struct.unpack_from(">II", data, at + 16)
    except struct.error:
        return None
    return duration / scale if scale else None
