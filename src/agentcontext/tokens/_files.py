"""Token estimates for files: documents (PDF, text), audio and video.

Providers read a file as what it holds, and bill it so. The rules, with the
documentation they come from:

* **PDF**: every provider reads each page as its extracted text plus an image
  of the page. Anthropic documents "1,500-3,000 tokens per page"; OpenAI
  documents the same text-plus-image reading without a figure. We count
  **3,000 per page** for both, the top of Anthropic's range, so the estimate
  errs high. Gemini documents 258 tokens per page; bills measured on text pages
  come to about 560, which we count. Pages are counted from the file itself
  (its ``/Type /Page`` objects, where they stand and in compressed object
  streams, or the page tree's ``/Count`` when that says more); a file we cannot
  read counts one page per 50 kB.
* **Text** (``text/*``, JSON, XML, YAML): the text itself, counted with the
  counter's tokenizer (without one: a token per 3 bytes, high for English,
  right for CJK in UTF-8).
* **Audio**: by its length. OpenAI bills audio input at 10 tokens a second
  (1 per 100 ms), Gemini at 32; Anthropic does not take audio and is counted as
  Gemini. The length is read from the file: a WAV header, an MP3 frame's bit
  rate, an Ogg (Opus, Vorbis) stream's last granule, FLAC's stream info, an
  M4A's ``mvhd``; any other audio counts as 16 kbit/s (2 kB a second), what
  voice notes are recorded at (music errs long).
* **Video**: Gemini bills 263 tokens a second (a frame a second plus its
  sound); we count 300 for every provider. The length is read from an MP4/MOV
  ``mvhd`` box; any other video (a fragmented MP4, WebM) counts as 1 Mbit/s.
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
_AUDIO_BYTES_PER_SECOND = 2_000  # 16 kbit/s, what voice-note codecs (Opus, AMR) run at: music errs long
_VIDEO_BYTES_PER_SECOND = 125_000  # 1 Mbit/s
_INFLATE_LIMIT = 16 * 1024 * 1024
"""Most bytes one compressed PDF object stream may inflate to while pages are counted."""
_INFLATE_TOTAL = 64 * 1024 * 1024
"""Most bytes all of a PDF's object streams may inflate to (a crafted file holds thousands)."""

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
    media_ratio: float = 1.0,
) -> int:
    """Estimate the tokens ``part`` costs with ``provider`` (the rules are in the module docstring).

    Args:
        part: the file.
        provider: whose billing rule applies: ``"openai"`` (default), ``"anthropic"`` or ``"gemini"``.
        count_text: counts a text file's text (a counter's ``count_text``); None: a token per 3 bytes.
        media_ratio: what the rule's provider tokens are divided by (`ChatFormat.media_ratio`, default 1);
            a text file's text is counted by ``count_text`` as it is.

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
        return in_units(UNKNOWN_FILE_TOKENS, media_ratio)
    text = part.text
    if text is not None:
        return max(1, count_text(text) if count_text is not None else math.ceil(len(data) / _BYTES_PER_TOKEN))
    return in_units(_billed(part, data, provider), media_ratio)


def in_units(tokens: int, ratio: float) -> int:
    """``tokens`` a provider bills, in a counter's units of ``ratio`` provider tokens each (rounded up)."""
    return tokens if ratio == 1.0 else math.ceil(tokens / ratio - 1e-9)


def _billed(part: FilePart, data: bytes, provider: ImageProvider) -> int:
    """What a file that is not text costs by the provider's rule."""
    media = (part.media_type or "").lower()
    if not media or media in _GENERIC:  # untyped (an SDK's bare base64): the bytes say what it is
        media = _sniff(data) or media
    if media == "application/pdf":
        pages = pdf_pages(data)
        if pages is None:
            pages = max(1, math.ceil(len(data) / _BYTES_PER_PDF_PAGE))
        return pages * PDF_PAGE_TOKENS.get(provider, PDF_PAGE_TOKENS["openai"])
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


_GENERIC = frozenset({"application/octet-stream", "binary/octet-stream", "application/binary"})


def _sniff(data: bytes) -> str | None:
    """A file's type from its first bytes, for the kinds counted by what they hold."""
    if data.startswith(b"%PDF"):
        return "application/pdf"
    if data[:4] == b"RIFF" and data[8:12] == b"WAVE":
        return "audio/wav"
    if data[:3] == b"ID3" or (len(data) > 1 and data[0] == 0xFF and data[1] & 0xE0 == 0xE0):
        return "audio/mpeg"
    if data[:4] in (b"OggS", b"fLaC"):
        return "audio/ogg" if data[:4] == b"OggS" else "audio/flac"
    if data[4:8] == b"ftyp":
        return "audio/mp4" if data[8:12] in (b"M4A ", b"M4B ") else "video/mp4"
    return None


def pdf_pages(data: bytes) -> int | None:
    """The number of pages of a PDF, read from its page objects; None when they cannot be found.

    Page objects are counted where they stand and inside Flate-compressed object
    streams (PDF 1.5 and later often keep them there); failing both, the page
    tree's ``/Count`` is read. Nothing is rendered.
    """
    # Page objects where they stand and in object streams, together: a file updated incrementally keeps
    # the pages it rewrote plain and the others compressed. An overcount (an update repeats a page) is
    # harmless; an undercount has the provider refuse the request.
    pages = len(_PAGE.findall(data))
    budget = _INFLATE_TOTAL
    for header in _OBJECT_STREAM.finditer(data):
        start = _STREAM.search(data, header.end())
        if start is None:
            continue
        body = _inflate(data, start.end(), min(_INFLATE_LIMIT, budget))
        pages += len(_PAGE.findall(body))
        budget -= len(body)
        if budget <= 0:
            break
    tree = max((int(m.group(1)) for m in _COUNT.finditer(data)), default=0)
    return max(pages, tree) or None


def _inflate(data: bytes, at: int, limit: int) -> bytes:
    """The Flate stream starting at ``at``, inflated to at most ``limit`` bytes (what inflated before an error).

    Fed in 64 kB pieces until the stream ends: handed the rest of the file at once, zlib keeps a copy
    of everything after the stream, and a file of many streams was copied once per stream.
    """
    inflater, view = zlib.decompressobj(), memoryview(data)
    out: list[bytes] = []
    size = 0
    try:
        while not inflater.eof and at < len(data) and size < limit:
            piece: bytes | memoryview = view[at : at + 65_536]
            at += len(piece)
            while piece and size < limit and not inflater.eof:
                chunk = inflater.decompress(piece, limit - size)
                out.append(chunk)
                size += len(chunk)
                piece = inflater.unconsumed_tail
    except zlib.error:
        pass
    return b"".join(out)


def _audio_seconds(data: bytes) -> float:
    for read in (_wav_seconds, _mp3_seconds, _ogg_seconds, _flac_seconds, _mp4_seconds):
        seconds = read(data)
        if seconds is not None:
            return seconds
    return len(data) / _AUDIO_BYTES_PER_SECOND


def _ogg_seconds(data: bytes) -> float | None:
    """An Ogg Opus or Vorbis stream's length: the last page's granule position over the sample rate."""
    if data[:4] != b"OggS":
        return None
    if b"OpusHead" in data[:200]:
        rate = 48_000  # Opus granules count 48 kHz samples whatever the input rate
    else:
        at = data.find(b"\x01vorbis", 0, 200)
        if at < 0 or at + 16 > len(data):
            return None
        rate = struct.unpack_from("<I", data, at + 12)[0]
    last = data.rfind(b"OggS")
    if last + 14 > len(data) or not rate:
        return None
    granule = struct.unpack_from("<q", data, last + 6)[0]
    return granule / rate if granule > 0 else None


def _flac_seconds(data: bytes) -> float | None:
    """A FLAC file's length, from its STREAMINFO block: total samples over the sample rate."""
    if data[:4] != b"fLaC" or len(data) < 26:
        return None
    info = int.from_bytes(data[18:26], "big")  # 20 bits rate, 3 channels, 5 bits per sample, 36 samples
    rate, samples = info >> 44, info & ((1 << 36) - 1)
    return samples / rate if rate and samples else None


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
    at = data.find(b"mvhd")  # cameras and phones write it after the media, at the end
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
    # A fragmented MP4 (a live or browser recording) writes 0 here, and all ones means "unknown": the
    # length is then read from the size.
    unknown = 0xFFFFFFFF if version != 1 else 0xFFFFFFFFFFFFFFFF
    return duration / scale if scale and duration and duration != unknown else None
