"""``model.summary(input_shape)``: what each layer outputs and how many parameters it holds.

The model runs once on zeros of ``(batch_size, *input_shape)`` in eval mode under ``no_grad``
(so running statistics and gradients are untouched); each module's ``forward`` is wrapped for
that one call to note its output shape. A row is a module that holds parameters of its own or
has no children (a container is the sum of its rows), in the order the modules ran. Shapes
show the batch axis as -1, as torchsummary does.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from .. import dtypes as D


class Row(NamedTuple):
    name: str  # dotted path in the model ("features.0")
    kind: str  # class name ("Conv2d")
    output_shape: tuple  # with -1 for the batch axis
    params: int  # parameters this module holds itself


class ModelSummary(NamedTuple):
    """The rows and totals; ``str()`` is the table ``Module.summary`` prints."""

    model: str
    rows: list
    total_params: int
    trainable_params: int

    @property
    def non_trainable_params(self) -> int:
        return self.total_params - self.trainable_params

    def __str__(self):
        head = ("Layer (type)", "Output shape", "Param #")
        body = [(f"{r.name} ({r.kind})", str(list(r.output_shape)), f"{r.params:,}") for r in self.rows]
        widths = [max(len(line[i]) for line in [head] + body) for i in range(3)]
        rule = "-" * (sum(widths) + 4)

        def fmt(line):
            return f"{line[0]:<{widths[0]}}  {line[1]:<{widths[1]}}  {line[2]:>{widths[2]}}"

        return "\n".join(
            [self.model, rule, fmt(head), rule.replace("-", "=")]
            + [fmt(b) for b in body]
            + [
                rule.replace("-", "="),
                f"Total params: {self.total_params:,}",
                f"Trainable params: {self.trainable_params:,}",
                f"Non-trainable params: {self.non_trainable_params:,}",
                rule,
            ]
        )


def summary(model, input_shape, *, batch_size=2, dtype=D.float32) -> ModelSummary:
    """Run ``model`` once on ``(batch_size, *input_shape)`` and tabulate its layers (module doc).

    >>> import ember
    >>> from ember import nn
    >>> net = nn.Sequential(nn.Flatten(), nn.Linear(4, 3), nn.ReLU())
    >>> print(summary(net, (2, 2)))
    Sequential
    -----------------------------------
    Layer (type)  Output shape  Param #
    ===================================
    0 (Flatten)   [-1, 4]             0
    1 (Linear)    [-1, 3]            15
    2 (ReLU)      [-1, 3]             0
    ===================================
    Total params: 15
    Trainable params: 15
    Non-trainable params: 0
    -----------------------------------
    """
    from ..autodiff import no_grad
    from ..creation import zeros

    rows: list[Any] = []
    wrapped: list[Any] = []
    for name, module in model.named_modules():
        own = sum(p.numel() for p in module._parameters.values() if p is not None)
        if name and (own or not module._modules):
            wrapped.append(module)
            module.__dict__["forward"] = _noting(module, name, own, rows, batch_size)
    was_training = model.training
    model.eval()
    try:
        with no_grad():
            model(zeros((batch_size, *input_shape), dtype=dtype))
    finally:
        for module in wrapped:
            module.__dict__.pop("forward", None)
        model.train(was_training)
    if not rows and not model._modules:  # a single layer: itself is the one row
        with no_grad():
            out = model.eval()(zeros((batch_size, *input_shape), dtype=dtype))
        model.train(was_training)
        rows.append(Row(type(model).__name__, type(model).__name__, _shape(out, batch_size), model.num_parameters()))
    return ModelSummary(type(model).__name__, rows, model.num_parameters(), model.num_parameters(trainable_only=True))


def _noting(module, name, own, rows, batch_size):
    forward = type(module).forward.__get__(module)

    def noted(*args, **kwargs):
        out = forward(*args, **kwargs)
        rows.append(Row(name, type(module).__name__, _shape(out, batch_size), own))
        return out

    return noted


def _shape(out, batch_size):
    if isinstance(out, (tuple, list)):  # an RNN's (output, hidden): the output
        out = out[0]
    shape = tuple(getattr(out, "shape", ()))
    return (-1,) + shape[1:] if shape and shape[0] == batch_size else shape
