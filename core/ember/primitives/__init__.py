"""The primitive set: the contract between ember and every backend, one record per primitive.

Each primitive is defined once, by ``defprim`` in the module of its group (creation,
elementwise, reduce, movement, indexing, linalg, sorting, bitwise), with its spec, abstract
shape/dtype rule, VJP rule and conformance cases (record.py says what each field is for). Every record is an
attribute of this package, so core code names primitives as objects:

>>> from ember import primitives as P
>>> P.matmul.group, P.matmul.abstract(((2, 3), P.D.float32), ((3, 4), P.D.float32))
('linalg', ((2, 4), ember.float32))
>>> len(P.PRIMITIVES), P.PRIMITIVES["exp"] is P.exp
(64, True)

A backend implements a primitive as ``impls[name](*buffers, **params) -> buffer`` (backend.py);
``python -m ember.primitives`` prints docs/primitives.md, generated from the records.
"""

# isort: off
from .. import dtypes as D  # noqa: F401 - for the examples above
from .record import (
    ALL,
    FLOATS,
    GROUPS,
    NON_DIFFERENTIABLE,
    NUMERIC,
    PRIMITIVES,  # noqa: F401
    Primitive,
    abstract_eval,
    defprim,
    markdown,
)
from .shapes import broadcast_shapes, conv_out_size, normalize_axis  # noqa: F401

# The groups, in the order of docs/primitives.md (the order their defprim calls register in);
# each module's __all__ lists its records, so P.add is visible to linters and type checkers.
from .creation import *  # noqa: E402,F403
from .elementwise import *  # noqa: E402,F403
from .reduce import *  # noqa: E402,F403
from .movement import *  # noqa: E402,F403
from .indexing import *  # noqa: E402,F403
from .linalg import *  # noqa: E402,F403
from .sorting import *  # noqa: E402,F403
from .bitwise import *  # noqa: E402,F403
# isort: on

#: the built-in primitives every backend must implement (tier 0 checks each record's ``required``)
REQUIRED = tuple(n for n, p in PRIMITIVES.items() if p.required)
