"""Token counting: exact, offline OpenAI encodings; Hugging Face tokenizers; a script-aware estimator; calibration.

Every counter implements `TokenCounter` and shares the per-message logic of
`BaseTokenCounter` (chat framing, tool calls, images, tool definitions, a
bounded per-message cache):

* `TiktokenCounter`: exact ``o200k_base`` / ``cl100k_base`` counts from rank
  files shipped in the package and checked against OpenAI's SHA-256; nothing is
  downloaded, ever.
* `HuggingFaceCounter`: exact counts for open models from a local
  ``tokenizer.json`` (``pip install 'agentcontext[hf]'``).
* `ScriptEstimator`: for models without a public tokenizer; errs high.
* `CalibratedCounter`: corrects any of them with the prompt tokens the provider reports.

`counter_for_tokenizer` maps a tokenizer name to a shared counter.

>>> from agentcontext.tokens import counter_for_tokenizer
>>> counter_for_tokenizer("o200k_base").count_text("Hello, world!")
4
"""

from ..exceptions import MissingDependencyError
from ._base import (
    CHATML,
    DEFAULT_CACHE_SIZE,
    OPENAI_CHAT,
    BaseTokenCounter,
    ChatFormat,
    CounterStats,
    TokenCounter,
)
from ._calibrate import CalibratedCounter, Calibration
from ._encodings import ENCODING_NAMES, load_encoding
from ._estimate import ScriptEstimator
from ._files import UNKNOWN_FILE_TOKENS, file_tokens, pdf_pages
from ._hf import HuggingFaceCounter
from ._images import ImageProvider, image_size, image_tokens
from ._registry import TOKENIZER_NAMES, counter_for_tokenizer
from ._tiktoken import TiktokenCounter
from ._tools import render_tools

__all__ = [
    "BaseTokenCounter",
    "CHATML",
    "CalibratedCounter",
    "Calibration",
    "ChatFormat",
    "CounterStats",
    "DEFAULT_CACHE_SIZE",
    "ENCODING_NAMES",
    "HuggingFaceCounter",
    "ImageProvider",
    "MissingDependencyError",
    "OPENAI_CHAT",
    "ScriptEstimator",
    "TOKENIZER_NAMES",
    "TiktokenCounter",
    "TokenCounter",
    "UNKNOWN_FILE_TOKENS",
    "counter_for_tokenizer",
    "file_tokens",
    "image_size",
    "image_tokens",
    "load_encoding",
    "pdf_pages",
    "render_tools",
]
