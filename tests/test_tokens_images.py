"""Image token estimates: the providers' documented rules, and sizes read from data: URL headers."""

from __future__ import annotations

import base64
import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from _sizes import examples
from agentcontext.exceptions import ConfigError
from agentcontext.messages import ImagePart
from agentcontext.tokens import image_size, image_tokens

PIL = pytest.importorskip("PIL.Image")


def _data_url(fmt: str, width: int, height: int) -> str:
    buf = io.BytesIO()
    img = PIL.new("RGB", (width, height), (200, 30, 30))
    if fmt == "JPEG":
        # An EXIF block before the frame header, as cameras write it, so the size is not in the first bytes.
        exif = PIL.Exif()
        exif[0x010E] = "x" * 5000  # ImageDescription
        img.save(buf, fmt, exif=exif)
    else:
        img.save(buf, fmt)
    media = {"PNG": "png", "GIF": "gif", "JPEG": "jpeg", "WEBP": "webp"}[fmt]
    return f"data:image/{media};base64," + base64.b64encode(buf.getvalue()).decode()


@pytest.mark.parametrize("fmt", ["PNG", "GIF", "JPEG", "WEBP"])
@pytest.mark.parametrize(("width", "height"), [(1, 1), (640, 480), (1500, 3000)])
def test_sizes_are_read_from_data_url_headers(fmt: str, width: int, height: int) -> None:
    assert image_size(ImagePart(url=_data_url(fmt, width, height))) == (width, height)


def test_webp_lossless_and_extended_headers() -> None:
    buf = io.BytesIO()
    PIL.new("RGBA", (321, 123), (0, 0, 0, 0)).save(buf, "WEBP", lossless=True)
    url = "data:image/webp;base64," + base64.b64encode(buf.getvalue()).decode()
    assert image_size(ImagePart(url=url)) == (321, 123)


@pytest.mark.parametrize(
    "url",
    [
        "https://example.com/cat.png",
        "data:image/png;base64,not-base64!!",
        "data:image/png,rawdata",
        "data:image/png;base64,iVBORw0KGgo=",
        "data:image/bmp;base64," + base64.b64encode(b"BM" + b"\0" * 40).decode(),
    ],
)
def test_unknown_sizes_are_none_and_never_raise(url: str) -> None:
    assert image_size(ImagePart(url=url)) is None


def test_explicit_size_wins_over_the_header() -> None:
    part = ImagePart(url=_data_url("PNG", 10, 10), width=1024, height=1024)
    assert image_size(part) == (1024, 1024)
    assert image_tokens(part) == 765


@pytest.mark.parametrize(
    ("width", "height", "expected"),
    [
        (1024, 1024, 765),  # OpenAI's documented examples
        (2048, 4096, 1105),
        (512, 512, 255),
        (1, 1, 255),
        (768, 2048, 1445),
        (4096, 8192, 1105),
    ],
)
def test_openai_high_detail_follows_the_documented_tiling(width: int, height: int, expected: int) -> None:
    part = ImagePart(url="https://x/y.png", width=width, height=height, detail="high")
    assert image_tokens(part, provider="openai") == expected
    assert image_tokens(ImagePart(url="https://x/y.png", width=width, height=height, detail="low")) == 85


def test_unknown_sizes_take_a_documented_conservative_default() -> None:
    unknown = ImagePart(url="https://example.com/cat.png")
    assert image_tokens(unknown, provider="openai") == 1445  # the most any image costs under the tile rule
    assert image_tokens(unknown, provider="anthropic") == 1600  # Anthropic's resize cap
    assert image_tokens(unknown, provider="gemini") == 1548


@settings(max_examples=examples(100), deadline=None)
@given(w=st.integers(1, 20_000), h=st.integers(1, 20_000))
def test_the_unknown_size_default_bounds_every_known_size(w: int, h: int) -> None:
    known = ImagePart(url="https://x/y.png", width=w, height=h)
    unknown = ImagePart(url="https://x/y.png")
    assert image_tokens(known, provider="openai") <= image_tokens(unknown, provider="openai")
    assert 1 <= image_tokens(known, provider="anthropic") <= image_tokens(unknown, provider="anthropic")
    assert image_tokens(known, provider="gemini") >= 258


@pytest.mark.parametrize(
    ("width", "height", "expected"),
    [(200, 200, 54), (1000, 1000, 1334), (1092, 1092, 1590), (3000, 3000, 1600), (1568, 300, 628)],
)
def test_anthropic_is_area_over_750_capped_by_its_resizing(width: int, height: int, expected: int) -> None:
    assert (
        image_tokens(ImagePart(url="https://x/y.png", width=width, height=height), provider="anthropic")
        == expected
    )


@pytest.mark.parametrize(
    ("width", "height", "expected"), [(384, 384, 258), (600, 400, 258), (1920, 1080, 1548)]
)
def test_gemini_tiles(width: int, height: int, expected: int) -> None:
    assert (
        image_tokens(ImagePart(url="https://x/y.png", width=width, height=height), provider="gemini")
        == expected
    )


def test_unknown_provider_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="openai.*anthropic.*gemini"):
        image_tokens(ImagePart(url="https://x/y.png"), provider="azure")  # type: ignore[arg-type]
