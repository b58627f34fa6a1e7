"""OpenAI's ``o200k_base`` and ``cl100k_base`` encodings, loaded offline from files shipped in the package.

tiktoken downloads its rank files on first use, which fails on machines without
network access and makes the first count slow and non-deterministic. agentcontext
ships the same files (gzipped) under ``agentcontext/tokens/data/``, checks their
SHA-256 against the hashes OpenAI publishes (the ones in tiktoken's own
``tiktoken_ext/openai_public.py``), and builds `tiktoken.Encoding` objects from
them with the same regex and special tokens, so the token ids are exactly
tiktoken's.

Each encoding is built at most once per process, on first use, under a lock.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import hashlib
import threading
from dataclasses import dataclass
from importlib import resources
from typing import Literal

import tiktoken

from ..exceptions import ConfigError, TokenizerError

__all__ = ["ENCODING_NAMES", "EncodingName", "load_encoding"]

EncodingName = Literal["o200k_base", "cl100k_base"]

ENDOFTEXT = "<|endoftext|>"
FIM_PREFIX = "<|fim_prefix|>"
FIM_MIDDLE = "<|fim_middle|>"
FIM_SUFFIX = "<|fim_suffix|>"
ENDOFPROMPT = "<|endofprompt|>"


@dataclass(frozen=True, slots=True, kw_only=True)
class _EncodingSpec:
    name: str
    filename: str
    sha256: str
    """SHA-256 of the *uncompressed* rank file, as published by OpenAI."""
    pat_str: str
    special_tokens: dict[str, int]


# Copied from tiktoken_ext/openai_public.py (tiktoken 0.7 to 0.14 agree on these).
_SPECS: dict[str, _EncodingSpec] = {
    "o200k_base": _EncodingSpec(
        name="o200k_base",
        filename="o200k_base.tiktoken.gz",
        sha256="446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
        pat_str="|".join(
            [
                r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
                r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
                r"""\p{N}{1,3}""",
                r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
                r"""\s*[\r\n]+""",
                r"""\s+(?!\S)""",
                r"""\s+""",
            ]
        ),
        special_tokens={ENDOFTEXT: 199999, ENDOFPROMPT: 200018},
    ),
    "cl100k_base": _EncodingSpec(
        name="cl100k_base",
        filename="cl100k_base.tiktoken.gz",
        sha256="223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
        pat_str=r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s""",
        special_tokens={
            ENDOFTEXT: 100257,
            FIM_PREFIX: 100258,
            FIM_MIDDLE: 100259,
            FIM_SUFFIX: 100260,
            ENDOFPROMPT: 100276,
        },
    ),
}

ENCODING_NAMES: tuple[str, ...] = tuple(sorted(_SPECS))
"""The encodings agentcontext ships: ``("cl100k_base", "o200k_base")``."""

_lock = threading.Lock()
_loaded: dict[str, tiktoken.Encoding] = {}

_REINSTALL = "reinstall agentcontext (`pip install --force-reinstall agentcontext`) to restore the file"


def _read_rank_file(spec: _EncodingSpec) -> bytes:
    resource = resources.files("agentcontext.tokens").joinpath("data").joinpath(spec.filename)
    try:
        compressed = resource.read_bytes()
    except OSError as exc:
        raise TokenizerError(
            f"the rank file for {spec.name!r} is missing: cannot read agentcontext/tokens/data/{spec.filename} "
            f"({exc}); {_REINSTALL}"
        ) from exc
    try:
        data = gzip.decompress(compressed)
    except (OSError, EOFError) as exc:
        raise TokenizerError(
            f"the rank file agentcontext/tokens/data/{spec.filename} is not valid gzip ({exc}); {_REINSTALL}"
        ) from exc
    digest = hashlib.sha256(data).hexdigest()
    if digest != spec.sha256:
        raise TokenizerError(
            f"the rank file agentcontext/tokens/data/{spec.filename} fails its hash check: SHA-256 of its "
            f"contents is {digest}, OpenAI publishes {spec.sha256}; the file is corrupt or was replaced; "
            f"{_REINSTALL}"
        )
    return data


def _parse_ranks(data: bytes, filename: str) -> dict[bytes, int]:
    ranks: dict[bytes, int] = {}
    for lineno, line in enumerate(data.splitlines(), start=1):
        if not line:
            continue
        try:
            token, rank = line.split()
            ranks[base64.b64decode(token, validate=True)] = int(rank)
        except (ValueError, binascii.Error) as exc:
            # Unreachable for a file that passed its hash check; kept so a future
            # format change fails with a clear message instead of a bare ValueError.
            raise TokenizerError(
                f"line {lineno} of {filename} is not '<base64 token> <rank>': {line[:80]!r}"
            ) from exc
    return ranks


def load_encoding(name: str) -> tiktoken.Encoding:
    """Return the tiktoken encoding ``name`` built from the rank file shipped with agentcontext.

    Never touches the network. The first call per encoding reads, decompresses and
    hash-checks the file (about 0.3 s for ``o200k_base``); later calls return the same
    object. Safe to call from several threads.

    Args:
        name: ``"o200k_base"`` (GPT-4o, GPT-4.1, GPT-5, o-series) or ``"cl100k_base"``
            (GPT-4, GPT-3.5-turbo, text-embedding-3).

    Raises:
        ConfigError: ``name`` is not an encoding agentcontext ships.
        TokenizerError: the shipped file is missing, unreadable or fails its SHA-256 check.
    """
    enc = _loaded.get(name)
    if enc is not None:
        return enc
    spec = _SPECS.get(name)
    if spec is None:
        raise ConfigError(
            f"unknown tiktoken encoding {name!r}; agentcontext ships {', '.join(map(repr, ENCODING_NAMES))}. "
            "For another tokenizer use HuggingFaceCounter.from_file('tokenizer.json') or ScriptEstimator()."
        )
    with _lock:
        enc = _loaded.get(name)
        if enc is None:
            ranks = _parse_ranks(_read_rank_file(spec), spec.filename)
            enc = tiktoken.Encoding(
                name=spec.name,
                pat_str=spec.pat_str,
                mergeable_ranks=ranks,
                special_tokens=dict(spec.special_tokens),
            )
            _loaded[name] = enc
    return enc
