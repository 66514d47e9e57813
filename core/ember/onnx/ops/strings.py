"""The operators over string tensors: StringConcat, StringSplit, RegexFullMatch, StringNormalizer.

Text lives on the host (ember.text: object arrays of ``str`` on numpy, lists on python), so
these handlers read their input's elements as Python ``str`` and compute with ``str``'s own
methods and the standard library's ``re``, then make the result on the input's backend; no
numpy here, so they run in the browser's Pyodide too. Equal over strings is the elementwise
``==`` (elementwise.py), LabelEncoder and OneHotEncoder over strings are in ml.py.

Where ONNX leaves room, ember chooses:

=================  ==========================================================================
RegexFullMatch     Python's ``re`` with ``re.ASCII``, as ONNX's reference uses ``re``: RE2's
                   ``\\d``, ``\\w``, ``\\s`` and ``\\b`` are ASCII-only, and so are ember's. Python
                   accepts what RE2 refuses (backreferences, lookaround), and RE2's (?i) folds
                   all of Unicode where ``re.ASCII`` folds ASCII letters only.
StringNormalizer   stop words are removed whole (an element equal to one), compared after
                   ``str.lower`` when not case-sensitive; case changes are Unicode's default
                   mappings (``str.lower``/``upper``), so ``locale`` is read but locale-specific
                   rules (Turkish dotted i) are not applied; accents are kept (ONNX's reference
                   strips them, which the specification does not ask).
StringSplit        no delimiter (or an empty one) splits on runs of whitespace and drops it at the
                   ends, also after the last of ``maxsplit`` splits (as the specification says
                   and onnxruntime does; ONNX's reference keeps it there); a delimiter splits at
                   each occurrence, keeping empty parts (``str.split(d)``); an empty element has
                   no parts (onnxruntime; the reference gives one empty part).
=================  ==========================================================================
"""

from __future__ import annotations

import re
from typing import Any

from ... import dtypes as D
from ...tensor import Tensor, broadcast_tensors, tensor


def texts(x: Tensor) -> list[str]:
    """The elements of string tensor ``x``, flat and in row-major order."""
    if x.dtype is not D.string:
        raise TypeError(f"expects a string tensor, got {x.dtype}")
    flat: list[str] = x.reshape(-1).tolist()
    return flat


def made(values: list, shape: tuple, like: Tensor, dtype: Any = D.string) -> Tensor:
    """A tensor of ``shape`` holding ``values`` (flat), on ``like``'s backend."""
    return tensor(values, dtype=dtype, backend=like.backend).reshape(shape)


def string_concat(node, a, b):
    """Elementwise ``a + b`` of two string tensors, broadcasting."""
    a, b = broadcast_tensors(a, b)
    return made([p + q for p, q in zip(texts(a), texts(b))], a.shape, a)


def string_split(node, x):
    """Each element split into its parts: (parts padded with "" to the most parts, x.shape + (most,)),
    and each element's part count (int64, x.shape)."""
    sep = node.attr("delimiter") or None
    maxsplit = node.attr("maxsplit", -1)
    parts = [(s.split(sep, maxsplit) if sep else s.strip().split(None, maxsplit)) if s else [] for s in texts(x)]
    counts = [len(p) for p in parts]
    most = max(counts, default=0)
    padded = [q for p in parts for q in p + [""] * (most - len(p))]
    return made(padded, (*x.shape, most), x), made(counts, x.shape, x, D.int64)


def regex_full_match(node, x):
    """Whether each element matches ``pattern`` whole (a bool tensor of x's shape)."""
    pattern = node.attr("pattern")
    if pattern is None:
        raise node.error("the pattern attribute is missing")

    def compile_it():
        try:
            return re.compile(pattern, re.ASCII)
        except re.error as e:
            raise node.error(f"pattern {pattern!r} is not a regular expression: {e}") from None

    regex = node.cached("regex", compile_it)
    return made([regex.fullmatch(s) is not None for s in texts(x)], x.shape, x, D.bool_)


CASE_CHANGES = {"NONE": lambda s: s, "LOWER": str.lower, "UPPER": str.upper}


def string_normalizer(node, x):
    """A [C] or [1, C] string tensor without its stop words, case changed; [""] ([[""]]) when
    nothing is left."""
    if x.ndim not in (1, 2) or x.ndim == 2 and x.shape[0] != 1:
        raise node.error(f"input must have shape [C] or [1, C], got {list(x.shape)}")
    action = node.attr("case_change_action", "NONE")
    if action not in CASE_CHANGES:
        raise node.error(f"case_change_action must be one of {', '.join(CASE_CHANGES)}, got {action!r}")
    sensitive = bool(node.attr("is_case_sensitive", 0))
    key = (lambda s: s) if sensitive else str.lower
    stops = {key(w) for w in node.attr("stopwords", [])}
    kept = [CASE_CHANGES[action](s) for s in texts(x) if key(s) not in stops] or [""]
    return made(kept, (1, len(kept)) if x.ndim == 2 else (len(kept),), x)


OPS = {
    "StringConcat": (string_concat, 20),
    "StringSplit": (string_split, 20),
    "RegexFullMatch": (regex_full_match, 20),
    "StringNormalizer": (string_normalizer, 10),
}
