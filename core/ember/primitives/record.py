"""The primitive record: everything ember knows about one primitive, in one definition.

``defprim`` makes a :class:`Primitive` and registers it in :data:`PRIMITIVES`. A record carries

- ``name`` and ``group`` (the section of docs/primitives.md, and for the jit, what fuses);
- ``doc``: the spec paragraph a backend implements;
- ``abstract``: the abstract evaluation rule, input avals (``(shape, dtype)`` pairs, or a Python
  scalar where the spec allows one) and params -> output ``(shape, dtype)``, raising ShapeError or
  DTypeError when the inputs do not fit. It is the written spec, ``ember.jit``'s shape inference,
  and what explains a backend's failure in shapes at the user's line;
- ``vjp``: the gradient rule ``vjp(g, out, *inputs, **params)`` -> one cotangent per input (None
  where an input gets none), written in Tensor ops so that it is differentiable in turn; a
  primitive without one is not differentiable (dispatch records no graph for it);
- ``dtypes`` and ``cases``: the dtypes conformance tier 2 covers and its case generator
  ``cases(d, dtype)``, which draws one case with the toolkit ``d`` that tier 2 passes in
  (``ember.conformance.cases.Draw``: hypothesis, shapes, arrays with NaN/inf);
- ``grad_cases(r)``: tier 3's fixed gradient cases, drawn with ``r``
  (``ember.conformance.gradcases.Rand``), and ``second_order``: differentiate the rule once more.

The toolkits are passed in, so this package imports neither NumPy nor hypothesis (``import
ember`` works without them, as in Pyodide).

A primitive *is* its name: :class:`Primitive` subclasses ``str``, so backends' ``impls`` tables
keyed by name strings, graph records and JSON reports take it unchanged, while core code names
it as an object (``P.add``), so a misspelt primitive fails where it is written.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from .. import dtypes as D
from ..text import guard_abstract

ALL = tuple(d.name for d in D.ALL + D.OPTIONAL)  # a backend is checked on the OPTIONAL ones it lists
NUMERIC = tuple(n for n in ALL if n != "bool")
FLOATS = ("float16", "float32", "float64")

#: name -> record, in definition order (docs/primitives.md and the conformance tiers follow it)
PRIMITIVES: dict = {}
#: dispatch records no graph for these (comparisons, argmax, ...): the records without a VJP
NON_DIFFERENTIABLE: set = set()
#: group -> its primitives, in definition order
GROUPS: dict = {}


class Primitive(str):
    """One primitive: a ``str`` equal to its name that carries its record.

    >>> from ember import primitives as P
    >>> P.add == "add", P.add.group, P.add.differentiable, P.eq.differentiable
    (True, 'binary', True, False)
    >>> {"add": 1}[P.add]                 # backends' name-keyed tables take it as it is
    1
    """

    group: str
    doc: str
    abstract: Callable
    vjp: Callable | None
    dtypes: tuple
    cases: Callable
    grad_cases: Callable | None
    second_order: bool
    required: bool

    def __new__(
        cls,
        name,
        group,
        doc,
        abstract,
        vjp=None,
        dtypes=FLOATS,
        cases=None,
        grad_cases=None,
        second_order=False,
        required=True,
    ):
        self = super().__new__(cls, name)
        # string operands are refused by every rule but those of movement and equality (ember.text)
        self.group, self.doc, self.abstract, self.vjp = group, doc, guard_abstract(name, abstract), vjp
        self.dtypes, self.cases, self.grad_cases = tuple(dtypes), cases, grad_cases
        self.second_order, self.required = second_order, required
        return self

    @property
    def name(self) -> str:
        return str(self)

    @property
    def differentiable(self) -> bool:
        return self.vjp is not None

    def __call__(self, *args, **params):
        """Apply to Tensors (through dispatch, like a Tensor method): ``P.exp(x)``. VJP rules
        use this for primitives that have no Tensor method (``conv2d_grad_input(g, w, ...)``)."""
        for a in args:
            if hasattr(a, "_apply"):
                return a._apply(self, *args, **params)
        raise TypeError(
            f"primitive {self.name!r} needs a Tensor argument; creation primitives run through ember.dispatch.create"
        )

    def __reduce__(self):  # a copy or unpickled graph names the one registered record
        return (_lookup, (str(self),))


def _lookup(name):
    return PRIMITIVES[name]


def defprim(
    name, group, doc, abstract, *, cases, dtypes=FLOATS, vjp=None, grad_cases=None, second_order=False, required=True
) -> Primitive:
    """Define and register a primitive; returns its record (see the module doc for the fields).

    Incomplete records fail here, at import: a differentiable primitive needs gradient cases,
    and a name is defined once. The record also becomes an attribute of ``ember.primitives``.
    """
    if name in PRIMITIVES:
        raise ValueError(f"primitive {name!r} is already defined (in group {PRIMITIVES[name].group!r})")
    if (vjp is None) != (grad_cases is None) or (second_order and vjp is None):
        raise TypeError(
            f"defprim({name!r}): vjp and grad_cases go together (a differentiable primitive "
            f"is checked by tier 3; one without a vjp has nothing to check)"
        )
    if cases is None:
        raise TypeError(f"defprim({name!r}): give tier 2 a case generator, cases(d, dtype)")
    p = Primitive(name, group, doc, abstract, vjp, dtypes, cases, grad_cases, second_order, required)
    PRIMITIVES[name] = p
    GROUPS.setdefault(group, []).append(p)
    if vjp is None:
        NON_DIFFERENTIABLE.add(p)
    # ``P.name``: the built-in groups' __all__ make it visible to static tools as well; set
    # here too (the package imports this module, not the other way round) so that a primitive
    # defined outside them, in a plugin or a test, is reachable like the built-in ones.
    package = sys.modules.get(__package__)
    if package is not None:
        setattr(package, name, p)
    return p


def abstract_eval(name, *avals, **params):
    """Output (shape, dtype) of primitive ``name``, or a ShapeError/DTypeError saying why not.

    >>> from ember import dtypes as D
    >>> abstract_eval("matmul", ((2, 3), D.float32), ((3, 5), D.float32))
    ((2, 5), ember.float32)
    """
    return PRIMITIVES[name].abstract(*avals, **params)


#: what holds for every primitive (docs/primitives.md's first section; tier 2 checks each)
RULES = (
    (
        "**Python scalars are weak** (NumPy 2's rule, NEP 50). A binary primitive or `where` takes a Python "
        "`bool`, `int` or `float` on either side. The scalar takes the array's dtype when its kind is not higher "
        "(bool < int < float); otherwise the result has the default dtype of the scalar's kind: "
        "`add(int32[2], 0.5)` is float64, `add(uint8[2], 3)` is uint8, `mul(True, float16[2])` is float16, "
        "`lt(int32[2], 0.5)` compares in float64. Two arrays always have the same dtype (the front end casts first)."
    ),
    (
        "**Inputs are read-only.** A primitive never writes into an input buffer. Its result may be a new buffer, "
        "or the input itself or a view of it (the reference returns views from reshape, permute, expand, slice, "
        "flip and windows), so whatever writes into a result in place must allow for that."
    ),
    (
        "**Deterministic.** The same inputs give the same bits on every call (random_bits included: it is a "
        "function of shape, seed and offset)."
    ),
    (
        "**Special values.** Float inputs include NaN, +-inf and -0.0; the IEEE-754 result is required "
        "(reciprocal(-0.0) = -inf). A NaN result must be NaN (its payload is not observable through any "
        "primitive, so not specified); -0.0 and 0.0 compare equal in results. Subnormal inputs are not part of "
        "the contract (GPUs may flush them to zero)."
    ),
    ("**Layouts.** Inputs may be any view the backend's own primitives make (permuted, strided, offset)."),
)


def markdown() -> str:
    """The contract as a Markdown page: docs/primitives.md is this text (a test keeps it current;
    ``python -m ember.primitives > docs/primitives.md`` regenerates it).

    >>> markdown().splitlines()[0]
    '# The primitive contract'
    """
    lines = (
        [
            "# The primitive contract",
            "",
            "Generated from the primitive records (`ember.primitives`, one `defprim` per primitive) by",
            "`python -m ember.primitives > docs/primitives.md`. A backend implements each primitive as",
            "`impls[name](*buffers, **params) -> buffer` (see docs/writing-a-backend.md). Gradients are",
            "ember's business: backends never write backward code. The last column lists the dtypes",
            "conformance tier 2 checks; int8, int16, uint16 and uint64 among them are optional (a backend",
            "computes them where its capabilities list them, and is checked on those).",
            "",
            "## Rules for every primitive",
            "",
        ]
        + [f"- {r}" for r in RULES]
        + [""]
    )
    for group, prims in GROUPS.items():
        lines += [f"## {group}", "", "| primitive | differentiable | spec | tier-2 dtypes |", "|---|---|---|---|"]
        for p in prims:
            dtypes = (
                "all"
                if p.dtypes == ALL
                else "all but bool"
                if p.dtypes == NUMERIC
                else "floats"
                if p.dtypes == FLOATS
                else ", ".join(p.dtypes)
            )
            optional = "" if p.required else "*Optional.* "
            lines.append(
                f"| `{p.name}` | {'yes' if p.differentiable else 'no'} | {optional}{p.doc.replace('|', '/')} "
                f"| {dtypes} |"
            )
        lines.append("")
    return "\n".join(lines)
