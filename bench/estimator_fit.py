"""Fit `ScriptEstimator`'s coefficients against exact o200k_base counts, and measure its error.

Run from the repository root::

    python bench/estimator_fit.py            # fit, evaluate, print coefficients and the results table
    python bench/estimator_fit.py --write    # the same, then write the parameters into the package
    python bench/estimator_fit.py --check    # evaluate the parameters currently in the package only
    python bench/estimator_fit.py --tables --write   # first rebuild the look-up tables from o200k_base

The look-up tables (``_cjk.py``, ``_byte_chars.py``, ``data/estimate_words.txt.gz``)
come from the public ``o200k_base`` vocabulary alone; the coefficients from the
corpus below.

The corpus is real text found on this machine, never downloaded:

* **prose**: package descriptions (``*.dist-info/METADATA``), licence texts
  (``/usr/share/common-licenses``, ``LICENSE`` files of installed packages), the
  English assistant and user turns of the eval conversations;
* **code**: the Python standard library, C headers under ``/usr/include``, the
  tool output of the SWE-agent and mini-SWE-agent conversations (file views,
  grep hits, tracebacks, test and shell output);
* **json**: tool results of the tau-bench conversations, AWS service
  definitions shipped with botocore/boto3, and JSON serialized (compact and
  indented) from installed packages' metadata;
* **chinese**: the Chinese MedicalGPT conversations, the ``zh_CN``/``zh_TW``
  message catalogs under ``/usr/share/locale``, CPython's CJK codec test texts;
* **other** (fitted, reported, not a target): Japanese, Korean, Russian,
  German, French, Greek, Hebrew, Arabic, Vietnamese, Hindi, Tamil, Thai,
  Georgian, Burmese and Amharic message catalogs.

Near-copies (documents of one kind with half their lines in common: OpenSSL's
headers once per target architecture, the codec tables of ``encodings/``, the
ISO 639 catalogs) are reduced to one document, then documents (not chunks) are
split 70/30 into train and test by a hash of their name, so no text, nor a twin
of it, is both fitted and scored. Each document gives chunks of 200, 1,000,
5,000 and 20,000 characters at seeded random offsets. The fit is a non-negative
least squares on *relative* error per kind of text (an "expert"), each source
weighted equally, with a few floors and fixed coefficients (below); each
expert is scaled so its median training error is ``+MARGIN``, so the estimator
errs high; a softmax gate on feature densities, fitted on the same samples,
blends the experts. Estimates are rounded to the nearest token.

Needs numpy and scipy (for the fit only; the package never imports them).
"""

from __future__ import annotations

import argparse
import gettext
import glob
import gzip
import hashlib
import json
import math
import os
import random
import re
import sys
import sysconfig
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.optimize import nnls

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from agentcontext.tokens import _estimate  # noqa: E402
from agentcontext.tokens._encodings import load_encoding  # noqa: E402
from agentcontext.tokens._estimate import ScriptEstimator  # noqa: E402

EVAL = Path(os.environ.get("AGENTCONTEXT_EVAL", "/work/shared/eval/conversations"))
SITE = Path(sysconfig.get_paths()["purelib"])
STDLIB = Path(sysconfig.get_paths()["stdlib"])
SIZES = (200, 1_000, 5_000, 20_000)
CHUNKS_PER_SIZE = 3
MAX_DOC_CHARS = 200_000
MARGIN = 0.015
GATE_STEPS = 3000
Z_CLIP = 6.0
RARE_SHARE = 0.005
GATE_RATE = 0.5
GATE_L2 = 1e-3
# Floors that keep pathological inputs from being undercounted: a ruler of
# dashes or equals signs costs a token per 8 characters at least, a flood of
# blank lines or tabs one per 16, a long string of digits one per three
# (o200k_base never puts more than three digits in one token).
LOWER_BOUNDS = {"long_punct": 0.25, "long_blanks": 0.5, "digit_triples": 0.9}
# Coefficients set, not fitted, because the corpus holds too few such characters
# to fit them (a free fit prices a byte character at 12 tokens): a character no
# token holds whole costs two or three byte tokens, so 2 on top of what its
# script's class charges (erring high); a character in a run of one box-drawing
# or dash symbol (``━━━━``) a quarter (o200k_base: 0.07 to 0.26).
FIXED = {"byte_chars": 2.0, "symbol_rulers": 0.25}
TEST_CAP = 60
KINDS = ("prose", "code", "json", "chinese", "other")
FITTED_KINDS = ("prose", "code", "json", "chinese", "other")
REPORTED_KINDS = ("prose", "code", "json", "chinese")
CJK = re.compile("[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")


@dataclass(frozen=True)
class Doc:
    kind: str
    name: str
    text: str


# ----------------------------------------------------------------------------- corpus


def _read(path: Path | str) -> str:
    try:
        raw = Path(path).read_bytes()
    except OSError:
        return ""
    if str(path).endswith(".gz"):
        raw = gzip.decompress(raw)
    return raw.decode("utf-8", "replace")[:MAX_DOC_CHARS]


def _eval_messages() -> Iterator[tuple[str, dict[str, object]]]:
    for f in sorted(EVAL.glob("*.jsonl")):
        for line in f.read_text(encoding="utf-8").splitlines():
            if line.strip():
                yield f.stem, json.loads(line)


def prose_docs() -> Iterator[Doc]:
    for meta in sorted(SITE.glob("*.dist-info/METADATA")):
        text = _read(meta)
        body = text.split("\n\n", 1)[1] if "\n\n" in text else ""
        if len(body) > 500:
            yield Doc("prose", f"metadata:{meta.parent.name}", body)
    for lic in sorted(glob.glob("/usr/share/common-licenses/*")):
        if os.path.isfile(lic):
            yield Doc("prose", f"licence:{lic}", _read(lic))
    seen: set[str] = set()
    for lic in sorted(SITE.glob("*.dist-info/licenses/LICENSE*")) + sorted(SITE.glob("*.dist-info/LICENSE*")):
        text = _read(lic)
        digest = hashlib.sha1(text.encode()).hexdigest()
        if len(text) > 500 and digest not in seen:
            seen.add(digest)
            yield Doc("prose", f"licence:{lic.parent.name}", text)
    turns: dict[str, list[str]] = {}
    for stem, m in _eval_messages():
        content = m.get("content")
        if stem.startswith(("tau-bench", "swe-agent", "mini-swe")) and m["role"] in ("assistant", "user"):
            if isinstance(content, str) and content.strip() and not CJK.search(content):
                turns.setdefault(stem, []).append(content)
    for stem, texts in turns.items():
        yield Doc("prose", f"eval:{stem}", "\n\n".join(texts))


def code_docs() -> Iterator[Doc]:
    for py in sorted(STDLIB.glob("*.py")) + sorted(STDLIB.glob("*/*.py")):
        if "test" not in py.parts and "idlelib" not in py.parts:
            text = _read(py)
            if len(text) > 1000:
                yield Doc("code", f"py:{py.relative_to(STDLIB)}", text)
    for h in sorted(glob.glob("/usr/include/**/*.h", recursive=True))[::7]:
        text = _read(h)
        if len(text) > 1000:
            yield Doc("code", f"c:{h}", text)
    # What a coding agent reads back: file views, grep hits, tracebacks, test and shell output.
    outputs: dict[str, list[str]] = {}
    for stem, m in _eval_messages():
        content = m.get("content")
        if stem.startswith(("swe-agent", "mini-swe")) and m["role"] == "tool" and isinstance(content, str):
            outputs.setdefault(stem, []).append(content)
    for stem, texts in outputs.items():
        yield Doc("code", f"eval:{stem}", "\n".join(texts))


def json_docs() -> Iterator[Doc]:
    results: dict[str, list[str]] = {}
    for stem, m in _eval_messages():
        content = m.get("content")
        if stem.startswith("tau-bench") and m["role"] == "tool" and isinstance(content, str):
            results.setdefault(stem, []).append(content)
    for stem, texts in results.items():
        yield Doc("json", f"eval:{stem}", "\n".join(texts))
    for path in sorted(glob.glob(str(SITE / "botocore/data/*/*/examples-1.json")))[::9]:
        text = _read(path)
        if len(text) > 1000:
            yield Doc("json", f"botocore:{path}", text)
    for path in sorted(glob.glob(str(SITE / "botocore/data/*/*/service-2.json*")))[::40]:
        data = json.loads(_read_full(path))
        shapes = data.get("shapes", {})
        # An API reply is data, not documentation: drop the doc strings.
        for shape in list(shapes.values())[:400]:
            shape.pop("documentation", None)
            for member in shape.get("members", {}).values():
                member.pop("documentation", None)
        compact = json.dumps(shapes, ensure_ascii=False)
        yield Doc("json", f"botocore-shapes:{path}", compact[:MAX_DOC_CHARS])
    for path in sorted(glob.glob(str(SITE / "boto3/data/*/*/resources-1.json"))):
        data = json.loads(_read_full(path))
        yield Doc("json", f"boto3-indent:{path}", json.dumps(data, indent=2)[:MAX_DOC_CHARS])
    records = []
    for meta in sorted(SITE.glob("*.dist-info/METADATA")):
        headers: dict[str, object] = {}
        for line in _read(meta).split("\n\n", 1)[0].splitlines():
            key, sep, value = line.partition(": ")
            if sep and key in (
                "Name",
                "Version",
                "Summary",
                "Author",
                "Author-email",
                "License",
                "Requires-Python",
            ):
                headers[key.lower()] = value
            elif sep and key == "Requires-Dist":
                headers.setdefault("requires", [])
                assert isinstance(headers["requires"], list)
                headers["requires"].append(value)
        records.append(headers)
    for i in range(0, len(records), 20):
        batch = records[i : i + 20]
        style = (i // 20) % 3
        if style == 0:
            text = json.dumps(batch)
        elif style == 1:
            text = json.dumps(batch, indent=2)
        else:
            text = json.dumps({"status": "ok", "count": len(batch), "results": batch}, separators=(",", ":"))
        yield Doc("json", f"metadata-json:{i}", text)


def _read_full(path: str) -> str:
    raw = Path(path).read_bytes()
    if path.endswith(".gz"):
        raw = gzip.decompress(raw)
    return raw.decode("utf-8")


def _catalog(path: str) -> str:
    try:
        with open(path, "rb") as f:
            catalog = gettext.GNUTranslations(f)
    except (OSError, UnicodeDecodeError, gettext.error if hasattr(gettext, "error") else OSError):  # noqa: B030
        return ""
    except Exception:
        return ""
    values = [v for k, v in catalog._catalog.items() if k and isinstance(v, str)]  # type: ignore[attr-defined]
    return "\n".join(values)[:MAX_DOC_CHARS]


def chinese_docs() -> Iterator[Doc]:
    for f in sorted(EVAL.glob("medicalgpt__*.jsonl")):
        parts = []
        for line in f.read_text(encoding="utf-8").splitlines():
            m = json.loads(line)
            if isinstance(m.get("content"), str):
                parts.append(m["content"])
            for call in m.get("tool_calls") or []:
                parts.append(call["function"]["arguments"])
        yield Doc("chinese", f"eval:{f.stem}", "\n\n".join(parts))
    for lang in ("zh_CN", "zh_TW"):
        for mo in sorted(glob.glob(f"/usr/share/locale/{lang}/LC_MESSAGES/*.mo")):
            text = _catalog(mo)
            if len(text) > 1000 and len(CJK.findall(text)) > len(text) * 0.2:
                yield Doc("chinese", f"mo:{mo}", text)
    for txt in sorted(glob.glob("/root/.pyenv/versions/*/lib/python3.*/test/cjkencodings/*-utf8.txt"))[:12]:
        if any(x in txt for x in ("gb", "big5", "hz")):
            yield Doc("chinese", f"cjkcodec:{txt}", _read(txt))


def other_docs() -> Iterator[Doc]:
    # Every script family the byte classes tell apart: kana and Hangul, Cyrillic,
    # Greek, Hebrew, Arabic, accented Latin, Indic, Thai, Georgian, Myanmar, Ethiopic.
    for lang in ("ja", "ko", "ru", "de", "fr", "el", "he", "ar", "vi", "hi", "ta", "th", "ka", "my", "am"):
        for mo in sorted(glob.glob(f"/usr/share/locale/{lang}/LC_MESSAGES/*.mo"))[::3]:
            text = _catalog(mo)
            if len(text) > 1000:
                yield Doc("other", f"mo:{lang}:{mo}", text)


def corpus() -> list[Doc]:
    docs = [*prose_docs(), *code_docs(), *json_docs(), *chinese_docs(), *other_docs()]
    return [d for d in docs if len(d.text) >= 200]


def near_duplicate_groups(docs: list[Doc]) -> list[str]:
    """Each document's group, in order: near-copies of one kind (half their lines in common) share one.

    The corpus holds the same text more than once: OpenSSL's headers once per
    target architecture, the ISO 639 language names in four catalogs, licences
    that differ by a copyright line. Split by document name alone, a test text
    would have its twin in training; split by group, it cannot.
    """
    lines: list[set[int]] = []
    for doc in docs:
        lines.append({hash(line.strip()) for line in doc.text.splitlines() if len(line.strip()) >= 20})
    holders: dict[int, list[int]] = {}
    for i, found in enumerate(lines):
        for h in found:
            holders.setdefault(h, []).append(i)
    parent = list(range(len(docs)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    shared: Counter[tuple[int, int]] = Counter()
    for docs_with_line in holders.values():
        # A line in hundreds of documents is boilerplate, not a sign of a copy.
        if 1 < len(docs_with_line) <= 200:
            for a_i, a in enumerate(docs_with_line):
                for b in docs_with_line[a_i + 1 :]:
                    shared[a, b] += 1
    for (a, b), n in shared.items():
        if docs[a].kind == docs[b].kind and n >= 0.5 * max(5, len(lines[a]), len(lines[b])):
            parent[root(a)] = root(b)
    members: dict[int, list[str]] = {}
    for i, doc in enumerate(docs):
        members.setdefault(root(i), []).append(doc.name)
    return [min(members[root(i)]) for i in range(len(docs))]


def is_test(name: str) -> bool:
    return int(hashlib.sha256(name.encode()).hexdigest()[:8], 16) % 10 < 3


# ----------------------------------------------------------------------------- samples


@dataclass(frozen=True)
class Sample:
    kind: str
    source: str
    size: int
    text: str
    exact: int
    features: tuple[int, ...]


def samples(docs: list[Doc], seed: int) -> list[Sample]:
    enc = load_encoding("o200k_base")
    rng = random.Random(seed)
    out: list[Sample] = []
    for doc in docs:
        for size in SIZES:
            if len(doc.text) < size:
                continue
            for _ in range(CHUNKS_PER_SIZE if len(doc.text) >= 2 * size else 1):
                start = rng.randrange(0, len(doc.text) - size + 1)
                text = doc.text[start : start + size]
                exact = len(enc.encode_ordinary(text))
                if exact:
                    out.append(
                        Sample(doc.kind, doc.name.split(":")[0], size, text, exact, _estimate.features(text))
                    )
    return out


def cap(items: list[Sample], seed: int) -> list[Sample]:
    """At most TEST_CAP samples per (kind, source, size), so one large source does not decide a kind's figures."""
    rng = random.Random(seed)
    groups: dict[tuple[str, str, int], list[Sample]] = {}
    for s in items:
        groups.setdefault((s.kind, s.source, s.size), []).append(s)
    out: list[Sample] = []
    for group in groups.values():
        out.extend(rng.sample(group, min(TEST_CAP, len(group))))
    return out


# ----------------------------------------------------------------------------- fit and report


@dataclass(frozen=True)
class Model:
    """Kind-specific coefficient sets ("experts") blended by a softmax gate on feature densities."""

    kinds: tuple[str, ...]
    experts: np.ndarray  # (kinds, features)
    mu: np.ndarray  # (features,) mean feature density (count per character) in training
    sd: np.ndarray  # (features,) its standard deviation
    gate: np.ndarray  # (kinds, features), on standardized, clipped densities
    gate_bias: np.ndarray  # (kinds,)

    def estimate(self, features: np.ndarray, chars: np.ndarray) -> np.ndarray:
        z = np.clip((features / chars[:, None] - self.mu) / self.sd, -Z_CLIP, Z_CLIP)
        logits = z @ self.gate.T + self.gate_bias
        logits -= logits.max(axis=1, keepdims=True)
        p = np.exp(logits)
        p /= p.sum(axis=1, keepdims=True)
        raw = (p * (features @ self.experts.T)).sum(axis=1)
        return np.maximum(1, np.ceil(raw - 0.5))

    def count_text(self, text: str) -> int:
        """What `ScriptEstimator.count_text` returns once these parameters are written."""
        return int(self.estimate(np.array([_estimate.features(text)], dtype=float), np.array([len(text)]))[0])


def _matrix(items: list[Sample]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    x = np.array([s.features for s in items], dtype=float)
    y = np.array([s.exact for s in items], dtype=float)
    n = np.array([len(s.text) for s in items], dtype=float)
    return x, y, n


def _weights(items: list[Sample], y: np.ndarray) -> np.ndarray:
    # Relative error (divide by y); each kind weighs the same in total, and within
    # a kind each source does, so 800 C headers do not drown the Python files,
    # nor UI catalogs the conversations.
    per_source = Counter((s.kind, s.source) for s in items)
    sources_per_kind = Counter(kind for kind, _ in per_source)
    return np.array(
        [
            1.0 / (y_i * math.sqrt(per_source[s.kind, s.source] * sources_per_kind[s.kind]))
            for y_i, s in zip(y, items, strict=True)
        ]
    )


def _nnls(x: np.ndarray, y: np.ndarray, w: np.ndarray, fixed: dict[int, float]) -> np.ndarray:
    """Non-negative least squares with some coefficients fixed and the LOWER_BOUNDS floors."""
    names = _estimate.FEATURE_NAMES
    lower = np.array([LOWER_BOUNDS.get(name, 0.0) for name in names])
    fixed = {**{names.index(name): value for name, value in FIXED.items()}, **fixed}
    for i, value in fixed.items():
        lower[i] = value
    free = [i for i in range(len(names)) if i not in fixed]
    # Fixed values and floors move to the target side: coef = lower + c, c >= 0.
    c, _ = nnls(x[:, free] * w[:, None], (y - x @ lower) * w)
    coef = lower.copy()
    coef[free] += c
    return coef


def fit_expert(items: list[Sample], pooled: np.ndarray) -> np.ndarray:
    x, y, _ = _matrix(items)
    # A feature this kind hardly ever sees (under 0.5% of its tokens by the pooled
    # fit) keeps the pooled coefficient: a code expert fitted on three Korean
    # comments would otherwise price Hangul at 20 tokens a character.
    share = (x * pooled).sum(axis=0) / y.sum()
    fixed = {i: float(pooled[i]) for i in range(len(pooled)) if share[i] < RARE_SHARE}
    coef = _nnls(x, y, _weights(items, y), fixed)
    # Err high: scale so this kind's median training error is +MARGIN.
    median = float(np.median((x @ coef - y) / y))
    return coef * (1 + MARGIN) / (1 + median)


def fit_gate(
    items: list[Sample], kinds: tuple[str, ...]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Multinomial logistic regression of the kind on standardized densities (each kind weighted equally)."""
    x, _, n = _matrix(items)
    d = x / n[:, None]
    mu, sd = d.mean(axis=0), d.std(axis=0) + 1e-6
    z = np.clip((d - mu) / sd, -Z_CLIP, Z_CLIP)
    labels = np.array([kinds.index(s.kind) for s in items])
    onehot = np.eye(len(kinds))[labels]
    sample_w = 1.0 / np.bincount(labels)[labels]
    sample_w /= sample_w.sum()
    w = np.zeros((len(kinds), z.shape[1]))
    b = np.zeros(len(kinds))
    for _ in range(GATE_STEPS):
        logits = z @ w.T + b
        logits -= logits.max(axis=1, keepdims=True)
        p = np.exp(logits)
        p /= p.sum(axis=1, keepdims=True)
        g = (p - onehot) * sample_w[:, None]
        w -= GATE_RATE * (g.T @ z + GATE_L2 * w)
        b -= GATE_RATE * g.sum(axis=0)
    return mu, sd, w, b


def fit(train: list[Sample]) -> Model:
    kinds = FITTED_KINDS
    x, y, _ = _matrix(train)
    pooled = _nnls(x, y, _weights(train, y), {})
    experts = np.array([fit_expert([s for s in train if s.kind == k], pooled) for k in kinds])
    mu, sd, gate, gate_bias = fit_gate(train, kinds)
    return Model(kinds, experts, mu, sd, gate, gate_bias)


def package_estimates(items: list[Sample]) -> np.ndarray:
    estimator = ScriptEstimator(cache_size=0)
    return np.array([estimator.count_text(s.text) for s in items], dtype=float)


def len4(s: Sample) -> int:
    return max(1, math.ceil(len(s.text) / 4))


def cjk_rule(s: Sample) -> int:
    cjk = len(CJK.findall(s.text))
    return max(1, math.ceil(cjk / 1.5 + (len(s.text) - cjk) / 4))


def stats(errors: np.ndarray) -> tuple[float, float, float]:
    return float(np.median(errors)), float(np.percentile(np.abs(errors), 90)), float(np.mean(errors < 0))


def report(items: list[Sample], estimates: np.ndarray) -> str:
    y = np.array([s.exact for s in items], dtype=float)
    err = estimates / y - 1
    kinds = np.array([s.kind for s in items])
    sizes = np.array([s.size for s in items])
    l4 = np.array([len4(s) for s in items]) / y - 1
    cr = np.array([cjk_rule(s) for s in items]) / y - 1
    lines = [
        "| text kind | samples | median error | p90 \\|error\\| | undercounts | len/4 median | len/4 undercounts "
        "| CJK/1.5+other/4 median | its undercounts |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for kind in KINDS:
        sel = kinds == kind
        if not sel.any():
            continue
        e, a, b = stats(err[sel]), stats(l4[sel]), stats(cr[sel])
        lines.append(
            f"| {kind} | {sel.sum()} | {e[0]:+.1%} | {e[1]:.1%} | {e[2]:.0%} | {a[0]:+.1%} | {a[2]:.0%} "
            f"| {b[0]:+.1%} | {b[2]:.0%} |"
        )
    lines += [
        "",
        "By sample size (median error / p90 |error|):",
        "",
        "| text kind | 200 chars | 1,000 chars | 5,000 chars | 20,000 chars |",
        "| --- | --- | --- | --- | --- |",
    ]
    for kind in KINDS:
        cells = []
        for size in SIZES:
            sel = (kinds == kind) & (sizes == size)
            if sel.any():
                med, p90, _ = stats(err[sel])
                cells.append(f"{med:+.1%} / {p90:.1%} (n={sel.sum()})")
            else:
                cells.append("n/a")
        lines.append(f"| {kind} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def conversation_report(held_out: set[str], count_text: Callable[[str], int]) -> str:
    """Whole held-out eval conversations: the sum over messages, as the engine counts them."""
    enc = load_encoding("o200k_base")
    per_source: dict[str, list[float]] = {}
    for f in sorted(EVAL.glob("*.jsonl")):
        if f.stem not in held_out:
            continue
        exact = est = 0
        for line in f.read_text(encoding="utf-8").splitlines():
            m = json.loads(line)
            texts = [m["content"]] if isinstance(m.get("content"), str) else []
            texts += [c["function"]["arguments"] for c in m.get("tool_calls") or []]
            for t in texts:
                exact += len(enc.encode_ordinary(t))
                est += count_text(t) if t else 0
        if exact:
            per_source.setdefault(f.stem.split("__")[0], []).append(est / exact - 1)
    lines = ["| conversations | count | median error | worst error |", "| --- | ---: | ---: | ---: |"]
    for source, errs in sorted(per_source.items()):
        a = np.array(errs)
        worst = a[np.argmax(np.abs(a))]
        lines.append(f"| {source} | {len(a)} | {np.median(a):+.1%} | {worst:+.1%} |")
    return "\n".join(lines)


def write_params(model: Model) -> None:
    path = ROOT / "src/agentcontext/tokens/_estimate_params.py"
    names = _estimate.FEATURE_NAMES

    def vector(values: np.ndarray, indent: str) -> str:
        return "".join(f"{indent}{v:.6g},  # {name}\n" for name, v in zip(names, values, strict=True))

    def matrix(rows: np.ndarray) -> str:
        out = ""
        for kind, row in zip(model.kinds, rows, strict=True):
            out += f"    (  # {kind}\n{vector(row, ' ' * 8)}    ),\n"
        return out

    path.write_text(
        '"""Fitted parameters of `ScriptEstimator`.\n\n'
        "Generated by ``python bench/estimator_fit.py --write`` (see ``bench/RESULTS.md``); do not edit.\n"
        '"""\n\n'
        f"KINDS: tuple[str, ...] = ({', '.join(repr(k).replace(chr(39), chr(34)) for k in model.kinds)})\n\n"
        "# Tokens per feature count, one row per kind of text.\n"
        f"EXPERTS: tuple[tuple[float, ...], ...] = (\n{matrix(model.experts)})\n\n"
        "# The gate standardizes each feature's density (count per character) and clips it to +-Z_CLIP.\n"
        f"Z_CLIP = {Z_CLIP!r}\n"
        f"MEAN: tuple[float, ...] = (\n{vector(model.mu, ' ' * 4)})\n"
        f"STD: tuple[float, ...] = (\n{vector(model.sd, ' ' * 4)})\n\n"
        "# Gate logits: GATE_BIAS[k] + sum(GATE[k][i] * z[i]); the kinds' weights are their softmax.\n"
        f"GATE: tuple[tuple[float, ...], ...] = (\n{matrix(model.gate)})\n"
        "GATE_BIAS: tuple[float, ...] = (" + ", ".join(f"{v:.6g}" for v in model.gate_bias) + ")\n",
        encoding="utf-8",
    )
    print(f"wrote {path.relative_to(ROOT)}", file=sys.stderr)


def write_tables() -> None:
    """Derive the estimator's look-up tables from the public ``o200k_base`` vocabulary (no corpus involved)."""
    enc = load_encoding("o200k_base")
    ideographs = re.compile("[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
    ascii_word = re.compile("[A-Za-z]+")
    common: set[str] = set()
    pairs: set[str] = set()
    words: set[str] = set()
    seen: set[str] = set()
    for token in range(enc.n_vocab):
        try:
            data = enc.decode_single_token_bytes(token)
        except KeyError:
            continue
        # Characters a token holds whole; the cut ones at its edges are dropped.
        seen.update(data.decode("utf-8", "ignore"))
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            continue
        # A word is cheap when it is one token, after a space (`` value``) or not
        # (``Value`` in ``getValue``, ``value`` after a dot).
        if ascii_word.fullmatch(text.removeprefix(" ")):
            words.add(text.removeprefix(" "))
        runs = ideographs.findall(text)
        if sum(map(len, runs)) >= 2:
            common.update("".join(runs))
        for run in runs:
            pairs.update(run[i : i + 2] for i in range(len(run) - 1))
    chars = "".join(sorted(common))
    joined = "".join(sorted(pairs))
    assert set(joined) <= common

    def lines(s: str, step: int) -> str:
        return "\n".join(f'    "{s[i : i + step]}"' for i in range(0, len(s), step))

    path = ROOT / "src/agentcontext/tokens/_cjk.py"
    path.write_text(
        '"""Frequent CJK ideographs and the pairs they form: data tables for `ScriptEstimator`.\n\n'
        "Generated by ``bench/estimator_fit.py --tables``; do not edit.\n\n"
        "Frequent characters merge with their neighbours into multi-character tokens in\n"
        "modern BPE vocabularies (o200k_base, Claude's, Qwen's...), so they cost about\n"
        "half a token each, while rarer ones cost one or more. `COMMON_CJK` holds the\n"
        f"{len(chars)} ideographs that ``o200k_base`` uses inside tokens of two ideographs\n"
        "or more, a proxy for how common a character is in web text. `COMMON_PAIRS`\n"
        f"holds the {len(pairs)} pairs of adjacent ideographs inside those tokens, two\n"
        "characters each, concatenated: a pair that is not among them cannot merge.\n"
        '"""\n\n'
        f"COMMON_CJK = (\n{lines(chars, 50)}\n)\n\n"
        f"COMMON_PAIRS = (\n{lines(joined, 50)}\n)\n",
        encoding="utf-8",
    )
    print(f"wrote {path.relative_to(ROOT)} ({len(chars)} characters, {len(pairs)} pairs)", file=sys.stderr)
    write_byte_chars(seen)
    data = ROOT / "src/agentcontext/tokens/data" / _estimate.WORDS_FILE
    # mtime=0: the same vocabulary always gives the same bytes.
    data.write_bytes(
        gzip.compress("\n".join(sorted(words)).encode("ascii") + b"\n", compresslevel=9, mtime=0)
    )
    print(f"wrote {data.relative_to(ROOT)} ({len(words)} words)", file=sys.stderr)


def write_byte_chars(seen: set[str]) -> None:
    """Basic-plane characters no ``o200k_base`` token holds whole, as regex character classes.

    Outside U+3000-9FFF they are few ranges (`BYTE_CHARS`); inside, where most
    ideographs are spelled in bytes, the table lists the characters some token
    does hold (`CJK_WHOLE`), to be used negated. Surrogates are left out: they
    cannot be tokenized at all.
    """
    ranges: list[list[int]] = []
    for cp in [*range(0x80, 0x3000), *range(0xA000, 0xD800), *range(0xE000, 0x10000)]:
        if chr(cp) in seen:
            continue
        if ranges and ranges[-1][1] == cp - 1:
            ranges[-1][1] = cp
        else:
            ranges.append([cp, cp])
    whole = [cp for cp in range(0x3000, 0xA000) if chr(cp) in seen]
    items = [f"\\u{lo:04x}" + (f"-\\u{hi:04x}" if hi > lo else "") for lo, hi in ranges]
    byte_lines = "\n".join(f'    "{"".join(items[i : i + 6])}"' for i in range(0, len(items), 6))
    # Ideographs are written as themselves, the rest of the block as escapes.
    chars = [chr(cp) if 0x3400 <= cp else f"\\u{cp:04x}" for cp in whole]
    whole_lines = "\n".join(f'    "{"".join(chars[i : i + 40])}"' for i in range(0, len(chars), 40))
    path = ROOT / "src/agentcontext/tokens/_byte_chars.py"
    path.write_text(
        '"""Characters ``o200k_base`` spells byte by byte: data tables for `ScriptEstimator`.\n\n'
        "Generated by ``bench/estimator_fit.py --tables``; do not edit.\n\n"
        "No token of the vocabulary holds these basic-plane characters whole (most CJK\n"
        "ideographs, Ethiopic, Lao, Tibetan, Cherokee, most box drawing, private use...),\n"
        "so each costs two or three byte tokens. `BYTE_CHARS` is the body of a regex\n"
        f"character class for them outside U+3000-9FFF ({len(ranges)} ranges); `CJK_WHOLE` lists\n"
        f"the {len(whole)} characters of U+3000-9FFF that some token does hold whole.\n"
        '"""\n\n'
        f"BYTE_CHARS = (\n{byte_lines}\n)\n\n"
        f"CJK_WHOLE = (\n{whole_lines}\n)\n",
        encoding="utf-8",
    )
    print(
        f"wrote {path.relative_to(ROOT)} ({len(ranges)} ranges, {len(whole)} CJK characters)", file=sys.stderr
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="evaluate the package's current parameters only")
    parser.add_argument("--write", action="store_true", help="write the fitted parameters into the package")
    parser.add_argument(
        "--tables", action="store_true", help="regenerate the word and ideograph tables from o200k_base first"
    )
    parser.add_argument("--seed", type=int, default=20240601)
    args = parser.parse_args()
    if args.tables:
        write_tables()

    found = corpus()
    # One document per group: copies add weight to one text, not information.
    docs = [d for d, group in zip(found, near_duplicate_groups(found), strict=True) if group == d.name]
    print(f"{len(found)} documents, {len(docs)} once near-copies are dropped", file=sys.stderr)
    train_docs = [d for d in docs if not is_test(d.name)]
    test_docs = [d for d in docs if is_test(d.name)]
    for kind in KINDS:
        n_train = sum(d.kind == kind for d in train_docs)
        n_test = sum(d.kind == kind for d in test_docs)
        chars = sum(len(d.text) for d in docs if d.kind == kind)
        print(f"{kind:8s} documents: {n_train} train, {n_test} test; {chars:,} characters", file=sys.stderr)
    test = cap(samples(test_docs, args.seed + 1), args.seed + 2)
    x, _, n = _matrix(test)
    if args.check:
        estimates = package_estimates(test)
        count_text = ScriptEstimator(cache_size=0).count_text
    else:
        train = samples(train_docs, args.seed)
        print(f"{len(train)} training samples, {len(test)} test samples", file=sys.stderr)
        model = fit(train)
        for kind, row in zip(model.kinds, model.experts, strict=True):
            print(
                f"{kind:8s} "
                + " ".join(f"{name}={v:.3f}" for name, v in zip(_estimate.FEATURE_NAMES, row, strict=True))
            )
        xt, _, nt = _matrix(train)
        print("\nTraining set:\n")
        print(report(train, model.estimate(xt, nt)))
        estimates = model.estimate(x, n)
        count_text = model.count_text
        if args.write:
            write_params(model)
    print("\nHeld-out test set (error = estimate / exact - 1; undercounts = share of samples below exact):\n")
    print(report(test, estimates))
    held_out = {d.name.split(":", 1)[1] for d in test_docs if d.name.startswith("eval:")}
    held_out -= {d.name.split(":", 1)[1] for d in train_docs if d.name.startswith("eval:")}
    print("\nHeld-out eval conversations, whole (sum over message texts):\n")
    print(conversation_report(held_out, count_text))


if __name__ == "__main__":
    main()
