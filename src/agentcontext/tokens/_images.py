"""Per-provider token estimates for images.

Providers bill images by their pixel size, each with its own rule. The rules
below follow the providers' published documentation:

* **OpenAI** (GPT-4o, GPT-4.1, o-series "tile" models, Chat Completions
  ``image_url``): ``detail="low"`` costs 85 tokens whatever the size. ``"high"``
  and ``"auto"`` (counted as high, the costlier reading): the image is scaled down
  to fit a 2048×2048 square, then down so its shortest side is at most 768 px;
  each 512 px tile costs 170 tokens, plus 85. A 1024×1024 image costs 765, a
  2048×4096 one 1105. When the size is unknown we count 1445, the most any image
  can cost under this rule (768×2048: 2×4 tiles), so the estimate never falls
  short. Patch-based models (gpt-4.1-mini/nano, o4-mini) bill differently; their
  cost per image is capped near 1,536 patches times a per-model multiplier, and
  the calibration in `CalibratedCounter` absorbs the difference.
* **Anthropic** (Claude): ``tokens = width × height / 750`` after the image is
  scaled down so its long edge is at most 1568 px; images that would cost more
  than about 1,600 tokens are scaled down to that. Unknown size: 1,600 (the cap).
* **Gemini**: an image with both sides at most 384 px costs 258 tokens; larger
  ones are cropped and scaled into 768×768 tiles of 258 tokens each. Unknown
  size: 1,548 (a 1920×1080 screenshot, 3×2 tiles); there is no upper bound, so
  pass the size when you know it.

The size comes from `ImagePart.width`/`height` when set, else from the header of
a ``data:`` URL (PNG, GIF, JPEG and WebP are read without decoding the image);
an ``https://`` URL without a size counts as unknown. Nothing is downloaded.
"""

from __future__ import annotations

import base64
import binascii
import math
import struct
from typing import Literal, TypeAlias

from ..exceptions import ConfigError
from ..messages import ImagePart

__all__ = ["ImageProvider", "image_size", "image_tokens"]

ImageProvider: TypeAlias = Literal["openai", "anthropic", "gemini"]

OPENAI_LOW = 85
OPENAI_BASE = 85
OPENAI_PER_TILE = 170
OPENAI_UNKNOWN = OPENAI_BASE + OPENAI_PER_TILE * 8
ANTHROPIC_PIXELS_PER_TOKEN = 750
ANTHROPIC_MAX_EDGE = 1568
ANTHROPIC_MAX_TOKENS = 1600
GEMINI_PER_TILE = 258
GEMINI_SMALL_EDGE = 384
GEMINI_TILE = 768
GEMINI_UNKNOWN = GEMINI_PER_TILE * 6

# A JPEG's size sits in its SOF segment, after any EXIF/ICC segments; those
# rarely exceed 64 KiB, so decoding this much base64 finds it without decoding
# a multi-megabyte image.
_MAX_HEADER_B64 = 96 * 1024


def image_tokens(part: ImagePart, *, provider: ImageProvider = "openai") -> int:
    """Estimate the tokens ``part`` costs with ``provider`` (see the module docstring for the rules).

    Args:
        part: the image.
        provider: ``"openai"`` (default), ``"anthropic"`` or ``"gemini"``.

    Returns:
        The documented estimate; when the image's size is unknown, the
        provider's documented maximum (OpenAI, Anthropic) or a typical large
        screenshot (Gemini).

    Raises:
        ConfigError: ``provider`` is not one of the three.

    >>> from agentcontext import ImagePart
    >>> image_tokens(ImagePart(url="https://example.com/a.png", width=1024, height=1024))
    765
    >>> image_tokens(ImagePart(url="https://example.com/a.png", detail="low"))
    85
    """
    if provider == "openai":
        if part.detail == "low":
            return OPENAI_LOW
        size = image_size(part)
        return OPENAI_UNKNOWN if size is None else _openai_tiles(*size)
    if provider == "anthropic":
        size = image_size(part)
        return ANTHROPIC_MAX_TOKENS if size is None else _anthropic(*size)
    if provider == "gemini":
        size = image_size(part)
        return GEMINI_UNKNOWN if size is None else _gemini(*size)
    raise ConfigError(f"unknown image provider {provider!r}; expected 'openai', 'anthropic' or 'gemini'")


def _openai_tiles(width: int, height: int) -> int:
    w, h = float(width), float(height)
    if w > 2048 or h > 2048:
        scale = 2048 / max(w, h)
        w, h = w * scale, h * scale
    if min(w, h) > 768:
        # Only ever scaled down: a small image is not blown up to 768 px.
        scale = 768 / min(w, h)
        w, h = w * scale, h * scale
    tiles = math.ceil(round(w, 6) / 512) * math.ceil(round(h, 6) / 512)
    return OPENAI_BASE + OPENAI_PER_TILE * max(tiles, 1)


def _anthropic(width: int, height: int) -> int:
    w, h = float(width), float(height)
    if max(w, h) > ANTHROPIC_MAX_EDGE:
        scale = ANTHROPIC_MAX_EDGE / max(w, h)
        w, h = w * scale, h * scale
    return max(1, min(ANTHROPIC_MAX_TOKENS, math.ceil(w * h / ANTHROPIC_PIXELS_PER_TOKEN)))


def _gemini(width: int, height: int) -> int:
    if width <= GEMINI_SMALL_EDGE and height <= GEMINI_SMALL_EDGE:
        return GEMINI_PER_TILE
    return GEMINI_PER_TILE * math.ceil(width / GEMINI_TILE) * math.ceil(height / GEMINI_TILE)


def image_size(part: ImagePart) -> tuple[int, int] | None:
    """The image's ``(width, height)`` in pixels, or None when unknown.

    Uses `ImagePart.width`/`height` when both are set, else reads the header of
    a base64 ``data:`` URL (PNG, GIF, JPEG, WebP). Never downloads anything.
    """
    if part.width is not None and part.height is not None and part.width > 0 and part.height > 0:
        return part.width, part.height
    url = part.url
    if not url.startswith("data:"):
        return None
    head, sep, payload = url.partition(",")
    if not sep or not head.endswith(";base64"):
        return None
    chunk = payload[:_MAX_HEADER_B64].strip()
    chunk = chunk[: len(chunk) - len(chunk) % 4]
    try:
        data = base64.b64decode(chunk)
    except (binascii.Error, ValueError):
        return None
    return _sniff_size(data)


def _sniff_size(data: bytes) -> tuple[int, int] | None:
    try:
        size = _sniff(data)
    except struct.error:  # truncated header
        return None
    if size is None or size[0] <= 0 or size[1] <= 0:
        return None
    return size


def _sniff(data: bytes) -> tuple[int, int] | None:
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        w, h = struct.unpack(">II", data[16:24])
        return int(w), int(h)
    if data[:6] in (b"GIF87a", b"GIF89a"):
        w, h = struct.unpack("<HH", data[6:10])
        return int(w), int(h)
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return _webp(data)
    if data[:2] == b"\xff\xd8":
        return _jpeg(data)
    return None


def _webp(data: bytes) -> tuple[int, int] | None:
    chunk = data[12:16]
    if chunk == b"VP8 ":
        w, h = struct.unpack("<HH", data[26:30])
        return int(w) & 0x3FFF, int(h) & 0x3FFF
    if chunk == b"VP8L":
        b0, b1, b2, b3 = data[21:25]
        return 1 + (b0 | (b1 & 0x3F) << 8), 1 + (b1 >> 6 | b2 << 2 | (b3 & 0x0F) << 10)
    if chunk == b"VP8X":
        w = int.from_bytes(data[24:27], "little") + 1
        h = int.from_bytes(data[27:30], "little") + 1
        return w, h
    return None


_JPEG_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def _jpeg(data: bytes) -> tuple[int, int] | None:
    i = 2
    n = len(data)
    while i + 4 <= n:
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker in (0x01, 0xD8) or 0xD0 <= marker <= 0xD7:  # markers without a length
            i += 2
            continue
        (length,) = struct.unpack(">H", data[i + 2 : i + 4])
        if marker in _JPEG_SOF:
            h, w = struct.unpack(">HH", data[i + 5 : i + 9])
            return int(w), int(h)
        i += 2 + int(length)
    return None
