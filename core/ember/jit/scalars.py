"""Python numbers that change between calls: learning rates and optimizer step counters.

An optimizer keeps Python numbers that a jitted training step must not bake in: ``lr`` in each
param group (a scheduler changes it) and counters in its state (Adam's ``step``, incremented
at every call). While tracing, ember.jit replaces each such number with a :class:`Scalar`: a
number that also carries a traced 0-d float64 tensor, read from the same place at every call.
Arithmetic on Scalars is recorded (``1 - beta1 ** step`` becomes graph nodes), a Scalar meeting
a tensor acts as the Python number it stands for (cast to the tensor's dtype, exactly what
NumPy does with a Python scalar), and a number written back into the state (``step += 1``)
is written back at every call.

Anything that needs the Python value itself (``if lr > 0.1``, ``float(lr)``, formatting)
gets the value seen while tracing, and adds a *guard*: the call re-traces when that number
changes.
"""

from __future__ import annotations

import operator

from .. import dispatch, dtypes as D
from ..tensor import Tensor


class Scalar:
    """A traced Python number: ``value`` (its value while tracing), ``t`` (a traced 0-d
    float64 tensor) and ``roots`` (the sources it was computed from, for guards)."""

    __slots__ = ("value", "t", "roots", "tracer")

    def __init__(self, value, t, roots, tracer):
        self.value, self.t, self.roots, self.tracer = value, t, roots, tracer

    # -- leaving the graph: the Python value, guarded ----------------------------------------------
    def concrete(self):
        for source in self.roots:
            self.tracer.python_guards.append((source.obj, source.key, _read(source)))
        return self.value

    def __float__(self):
        return float(self.concrete())

    def __int__(self):
        return int(self.concrete())

    def __index__(self):
        return operator.index(self.concrete())

    def __bool__(self):
        return bool(self.concrete())

    def __hash__(self):
        return hash(self.concrete())

    def __format__(self, spec):
        return format(self.concrete(), spec)

    def __repr__(self):
        return f"Scalar({self.value!r}, traced)"

    def __eq__(self, o):
        return self.concrete() == _value(o)

    def __ne__(self, o):
        return self.concrete() != _value(o)

    def __lt__(self, o):
        return self.concrete() < _value(o)

    def __le__(self, o):
        return self.concrete() <= _value(o)

    def __gt__(self, o):
        return self.concrete() > _value(o)

    def __ge__(self, o):
        return self.concrete() >= _value(o)

    # -- arithmetic: recorded ----------------------------------------------------------------------
    def _op(self, name, pyop, other, reverse=False):
        if isinstance(other, Tensor):
            return _with_tensor(name, other, self, reverse)
        if isinstance(other, Scalar):
            ot, ov, roots = other.t, other.value, self.roots | other.roots
        elif isinstance(other, (int, float)) and not isinstance(other, bool):
            ot, ov, roots = self.t._full_like(float(other), shape=()), other, self.roots
        else:
            return NotImplemented
        a, b = (ot, self.t) if reverse else (self.t, ot)
        value = pyop(ov, self.value) if reverse else pyop(self.value, ov)
        return Scalar(value, dispatch.apply2(name, a, b), roots, self.tracer)

    def __add__(self, o):
        return self._op("add", operator.add, o)

    def __radd__(self, o):
        return self._op("add", operator.add, o, True)

    def __sub__(self, o):
        return self._op("sub", operator.sub, o)

    def __rsub__(self, o):
        return self._op("sub", operator.sub, o, True)

    def __mul__(self, o):
        return self._op("mul", operator.mul, o)

    def __rmul__(self, o):
        return self._op("mul", operator.mul, o, True)

    def __truediv__(self, o):
        return self._op("div", operator.truediv, o)

    def __rtruediv__(self, o):
        return self._op("div", operator.truediv, o, True)

    def __pow__(self, o):
        return self._op("pow", operator.pow, o)

    def __rpow__(self, o):
        return self._op("pow", operator.pow, o, True)

    def __neg__(self):
        return Scalar(-self.value, dispatch.apply1("neg", self.t), self.roots, self.tracer)

    def __pos__(self):
        return self

    def __abs__(self):
        return Scalar(abs(self.value), dispatch.apply1("abs", self.t), self.roots, self.tracer)


def _value(o):
    return o.concrete() if isinstance(o, Scalar) else o


def _read(source):
    return source.obj.get(source.key) if isinstance(source.obj, dict) else source.obj[source.key]


def _with_tensor(name, tensor, s, reverse):
    """``s OP tensor`` (``tensor OP s`` if ``reverse``) as if ``s`` were the Python number it
    stands for: NumPy casts a Python number to the tensor's dtype, and so do we."""
    dtype = D.result_with_scalar(tensor.dtype, s.value)
    if name == "div" and not dtype.is_floating_point:
        dtype = D.default_float
    x = tensor if dtype is tensor.dtype else tensor.to(dtype)
    y = s.t.to(dtype)
    return dispatch.apply2(name, x, y) if reverse else dispatch.apply2(name, y, x)


def operand(s, dtype):
    """The traced operand that a Scalar passed straight to a primitive stands for."""
    return s.t.to(dtype)
