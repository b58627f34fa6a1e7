"""Files are counted by what they hold: a PDF by its pages, audio and video by their length, text as text."""

from __future__ import annotations

import base64
import io
import math
import struct
import wave
import zlib

import pytest

import agentcontext as ac
from agentcontext import FilePart, ImagePart, Message, TextPart
from agentcontext.exceptions import InvalidMessageError
from agentcontext.tokens import UNKNOWN_FILE_TOKENS, file_tokens, pdf_pages


def data_url(media_type: str, data: bytes) -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode()}"


def pdf(pages: int) -> bytes:
    """A PDF whose page objects stand in the file, as most writers put them."""
    objects = b"".join(b"%d 0 obj << /Type /Page /Parent 9 0 R >> endobj\n" % (i + 1) for i in range(pages))
    return (
        b"%PDF-1.4\n" + objects + b"9 0 obj << /Type /Pages /Count " + str(pages).encode() + b" >> endobj\n"
    )


def pdf_with_object_streams(pages: int) -> bytes:
    """A PDF 1.5 whose page objects are compressed in an object stream: not readable in the raw bytes."""
    objects = b"".join(b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>\n" for _ in range(pages))
    stream = zlib.compress(objects)
    head = f"%PDF-1.5\n1 0 obj << /Type /ObjStm /N {pages} /First 0 /Filter /FlateDecode /Length {len(stream)} >>"
    return head.encode() + b"\nstream\n" + stream + b"\nendstream\nendobj\n"


def wav(seconds: float, rate: int = 16_000) -> bytes:
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(b"\x00\x00" * int(seconds * rate))
    return buffer.getvalue()


def mp4(seconds: int) -> bytes:
    """The start of an MP4: an ``ftyp`` box, then a ``moov`` holding the ``mvhd`` that gives the length."""
    mvhd_body = struct.pack(">B3xIIII", 0, 0, 0, 1_000, seconds * 1_000) + b"\x00" * 80
    mvhd = struct.pack(">I4s", 8 + len(mvhd_body), b"mvhd") + mvhd_body
    moov = struct.pack(">I4s", 8 + len(mvhd), b"moov") + mvhd
    return struct.pack(">I4s", 16, b"ftyp") + b"isom\x00\x00\x02\x00" + moov + b"\x00" * 50_000


@pytest.mark.parametrize("pages", [1, 3, 12])
def test_a_pdf_costs_its_pages(pages: int) -> None:
    assert pdf_pages(pdf(pages)) == pages
    part = FilePart(url=data_url("application/pdf", pdf(pages)), name="spec.pdf")
    assert file_tokens(part, provider="anthropic") == pages * 3_000  # the top of Anthropic's 1,500-3,000
    assert file_tokens(part, provider="openai") == pages * 3_000
    assert file_tokens(part, provider="gemini") == pages * 560


def test_pages_are_found_in_compressed_object_streams_and_from_the_page_tree() -> None:
    assert pdf_pages(pdf_with_object_streams(7)) == 7
    # Neither page objects nor object streams: the page tree's count.
    assert pdf_pages(b"%PDF-1.7\n1 0 obj << /Type /Catalog >> endobj 2 0 obj << /Count 4 /Kids [] >>") == 4
    # Unreadable: counted by its size, one page per 50 kB, so a large file is never a one-page file.
    unreadable = b"%PDF-1.7\n" + bytes(range(256)) * 800  # 204,809 bytes
    assert pdf_pages(unreadable) is None
    assert file_tokens(FilePart(url=data_url("application/pdf", unreadable))) == 5 * 3_000


def test_pages_in_object_streams_count_beside_a_page_rewritten_plain() -> None:
    # An incremental update (an annotation added in a viewer) appends a rewritten page as a plain object:
    # that one page hid the sixty in the object stream.
    updated = (
        pdf_with_object_streams(60) + b"3 0 obj << /Type /Page /Parent 2 0 R /Annots [9 0 R] >> endobj\n"
    )
    assert pdf_pages(updated) == 61  # an update repeats a page: an overcount by one, never 60 pages short
    # The page tree's count, when it says more than the objects found.
    assert pdf_pages(b"%PDF-1.4\n1 0 obj << /Type /Page >> endobj 2 0 obj << /Type /Pages /Count 12 >>") == 12


def test_a_corrupt_object_stream_is_skipped_not_raised() -> None:
    broken = b"%PDF-1.5\n1 0 obj << /Type /ObjStm /Filter /FlateDecode >>\nstream\nnot zlib at all\nendstream"
    assert pdf_pages(broken) is None


def test_audio_costs_its_length() -> None:
    clip = FilePart(url=data_url("audio/wav", wav(6.0)))
    assert file_tokens(clip, provider="openai") == 60  # 10 tokens a second
    assert file_tokens(clip, provider="gemini") == 6 * 32
    # An MP3 by its frames' bit rate: 128 kbit/s, 80,000 bytes of frames = 5 seconds.
    frame_header = bytes([0xFF, 0xFB, 0x90, 0x64])
    mp3 = FilePart(url=data_url("audio/mpeg", frame_header + b"\x00" * 79_996))
    assert file_tokens(mp3, provider="openai") == 50
    # An Ogg Opus voice note by its last page's granule position (48 kHz samples): 60 s at 16 kbit/s.
    head = b"OggS" + b"\x00\x02" + (0).to_bytes(8, "little") + b"\x00" * 14 + b"OpusHead" + b"\x00" * 11
    tail = b"OggS" + b"\x00\x04" + (60 * 48_000).to_bytes(8, "little") + b"\x00" * 14
    voice = FilePart(url=data_url("audio/ogg", head + b"\x00" * 120_000 + tail))
    assert file_tokens(voice, provider="openai") == 600
    # FLAC by its stream info: 44.1 kHz, 30 s.
    info = (44_100 << 44 | 1 << 41 | 15 << 36 | 30 * 44_100).to_bytes(8, "big")
    flac = FilePart(
        url=data_url("audio/flac", b"fLaC" + b"\x00\x00\x00\x22" + b"\x00" * 10 + info + b"\x00" * 5_000)
    )
    assert file_tokens(flac, provider="openai") == 300
    # Anything else at 16 kbit/s, what voice notes run at (music errs long): 40,000 bytes = 20 s.
    unknown = FilePart(url=data_url("audio/webm", b"\x1aE\xdf\xa3" + b"\x00" * 39_996))
    assert file_tokens(unknown, provider="openai") == 200


def test_video_costs_its_length() -> None:
    assert file_tokens(FilePart(url=data_url("video/mp4", mp4(20)))) == 20 * 300
    # A fragmented MP4 (a live or browser recording) says 0 in its header: counted by its size, never as 1 token.
    fragmented = mp4(0) + b"\x00" * 200_000
    assert file_tokens(FilePart(url=data_url("video/mp4", fragmented))) == math.ceil(
        len(fragmented) / 125_000 * 300
    )
    unknown = FilePart(url=data_url("video/webm", b"\x1aE\xdf\xa3" + b"\x00" * 249_996))  # 250 kB at 1 Mbit/s
    assert file_tokens(unknown) == 2 * 300


def test_a_text_file_costs_its_text_by_the_counters_tokenizer() -> None:
    text = "def parse(line):\n    return line.split(',')\n" * 40
    part = FilePart(url=data_url("text/x-python", text.encode()), name="parse.py")
    counter = ac.counter_for("gpt-4o")
    assert file_tokens(part, count_text=counter.count_text) == counter.count_text(text)
    # A plain (not base64) data URL, as Anthropic's text documents arrive.
    plain = FilePart(url="data:text/plain,Step%203%20prints%20DONE.")
    assert plain.data == b"Step 3 prints DONE."
    assert file_tokens(plain, count_text=counter.count_text) == counter.count_text("Step 3 prints DONE.")


def test_a_file_that_is_not_here_costs_one_page_and_nothing_is_downloaded() -> None:
    for url in ("https://example.com/report.pdf", "openai-file-id:file-abc", "anthropic-file-id:file_01"):
        assert FilePart(url=url).data is None
        assert file_tokens(FilePart(url=url)) == UNKNOWN_FILE_TOKENS


def test_the_counter_counts_files_in_messages_by_its_provider_rule() -> None:
    doc = FilePart(url=data_url("application/pdf", pdf(2)), name="spec.pdf")
    message = Message(role="user", content=(TextPart(text="Read this."), doc))
    bare = Message(role="user", content=(TextPart(text="Read this."),))
    for model, page in (("gpt-4o", 3_000), ("claude-sonnet-4-5", 3_000), ("gemini-2.5-pro", 560)):
        counter = ac.counter_for(model)
        assert counter.count_message(message) - counter.count_message(bare) == 2 * page, model


@pytest.mark.parametrize("model", ["claude-sonnet-4-5", "claude-opus-4-7"])
def test_an_estimated_models_files_and_images_cost_their_rule_not_the_text_estimate_ratio(model: str) -> None:
    # An engine counting Claude by estimate multiplies its counts by the model's estimate ratio (1.2, or 1.6
    # for Opus 4.7's tokenizer) for the text it under-counts. A PDF page or an image is billed by a rule
    # already in Claude's tokens: the ratio must not apply to it again, or a 40-page report in a 200k window
    # (120k tokens, which Claude accepts) is refused as 144k. But the correction may learn down to 1.0 (text
    # billed below the prior): the rule's tokens then count at most the safety margin below the rule.
    spec = ac.models.get(model)
    margin = spec.estimate_margin
    counter = ac.counter_for(model, calibrated=True)
    assert isinstance(counter, ac.CalibratedCounter) and counter.correction == spec.estimate_ratio > 1.0
    doc = FilePart(url=data_url("application/pdf", pdf(40)), name="report.pdf")
    text = "Summarize the report for the board."
    with_doc = Message(role="user", content=(TextPart(text=text), doc))
    bare = Message(role="user", content=(TextPart(text=text),))
    shot = ImagePart(url="https://example.com/shot.png", width=1_000, height=750)  # 1,000 tokens on Claude
    with_shot = Message(role="user", content=(TextPart(text=text), shot))

    def media(m: Message) -> int:
        return counter.count_message(m) - counter.count_message(bare)

    assert media(with_doc) in range(120_000, 120_003)  # the rule, not 144k (192k at 1.6)
    assert media(with_shot) in range(1_000, 1_003)
    # Text keeps the ratio; an uncalibrated counter counts the rule as it is.
    assert counter.count_text(text) == math.ceil(ac.counter_for(model).count_text(text) * spec.estimate_ratio)
    plain = ac.counter_for(model)
    assert plain.count_message(with_doc) - plain.count_message(bare) == 120_000
    # Usage that teaches the lowest correction leaves the rule's tokens within the margin of the rule: the
    # correction is learned down by the safety margin at most (to 1.0 before, and 52 pages overflowed).
    counter.observe([bare] * 40, 1)
    assert counter.correction == pytest.approx(max(1.0, spec.estimate_ratio * (1 - margin)))
    assert media(with_doc) >= 120_000 * (1 - margin) and media(with_shot) >= 1_000 * (1 - margin)

    engine = ac.ContextEngine(model=model)  # its own window and reserve (claude-sonnet-4-5: 200k, 50k)
    request = [Message(role="system", content="You review documents."), with_doc]
    prepared = engine.prepare(request)
    assert prepared.messages == request and not prepared.report.actions


def test_a_file_part_checks_its_fields_and_reads_its_type() -> None:
    part = FilePart(url=data_url("application/pdf", b"%PDF"), name="a.pdf")
    assert part.media_type == "application/pdf" and part.label == "a.pdf" and part.size == 4
    assert FilePart(url="https://x.test/a.pdf").label == "https://x.test/a.pdf"
    assert FilePart(url=data_url("audio/wav", b"RIFF")).label == "audio/wav"
    with pytest.raises(InvalidMessageError, match="file url"):
        FilePart(url=7)  # type: ignore[arg-type]
    with pytest.raises(InvalidMessageError, match="file name"):
        FilePart(url="https://x.test/a.pdf", name="bad \ud800")


def test_a_message_with_a_file_round_trips_through_a_session_log(tmp_path: object) -> None:
    doc = FilePart(url=data_url("application/pdf", pdf(1)), name="spec.pdf")
    remote = FilePart(url="https://x.test/b.mp3", media_type="audio/mpeg")
    message = Message(role="user", content=(TextPart(text="Compare."), doc, remote))
    session = ac.Session.open(f"{tmp_path}/s.jsonl")
    session.append(message)
    session.close()
    again = ac.Session.open(f"{tmp_path}/s.jsonl")
    assert list(again.view) == [message]
    again.close()


def test_what_compressed_streams_may_inflate_to_is_bounded() -> None:
    # A crafted PDF: twenty object streams, each inflating to 32 MB of page objects. Read whole, that is
    # 640 MB of memory and work for one count; at most 16 MB a stream and 64 MB in all are read.
    page = b"<< /Type /Page >>"
    bomb = zlib.compress(page * (32 * 1024 * 1024 // len(page)), 9)
    streams = b"".join(
        b"1 0 obj << /Type /ObjStm /Filter /FlateDecode >>\nstream\n" + bomb + b"\nendstream\n"
        for _ in range(20)
    )
    pages = pdf_pages(b"%PDF-1.5\n" + streams)
    assert pages is not None and pages <= 64 * 1024 * 1024 // len(page) + 1
    assert pages >= 3 * (16 * 1024 * 1024 // len(page))  # the first streams were read, each up to its cap


def test_an_untyped_file_is_counted_by_what_its_bytes_are() -> None:
    # The Agents SDK's ToolOutputFileContent(file_data=<base64>) without a filename arrives untyped
    # (application/octet-stream): a 10-page PDF was counted at a token per 3 bytes, 667k for 2 MB.
    doc = pdf(10) + bytes(range(256)) * 8_000
    for media in ("application/octet-stream", "binary/octet-stream", ""):
        part = FilePart(url=f"data:{media};base64,{base64.b64encode(doc).decode()}")
        assert file_tokens(part) == 10 * 3_000, media
    assert file_tokens(FilePart(url=data_url("application/octet-stream", wav(6.0)))) == 60


def test_an_mp4_of_unknown_length_is_counted_by_its_size() -> None:
    unknown = bytearray(mp4(1))
    at = (
        unknown.find(b"mvhd") + 4 + 4 + 4 + 4 + 4
    )  # version/flags, creation, modification, scale: the duration
    unknown[at : at + 4] = b"\xff\xff\xff\xff"  # all ones: "unknown" in ISO/IEC 14496-12
    assert file_tokens(FilePart(url=data_url("video/mp4", bytes(unknown)))) == math.ceil(
        len(unknown) / 125_000 * 300
    )
