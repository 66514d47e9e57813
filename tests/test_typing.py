"""User code type-checks against ember: a typed training script passes ``mypy --strict``.

The script below is what a user writes (an MLP's training step over a DataLoader, save and
load, sort/topk/max with their named results); it runs here too, so it is real code. mypy
reads ember from ``core/`` (its sources, as a ``py.typed`` package ships them), so what is
checked is the annotations of Tensor and the public API, not a stub. A second script with
type errors in it shows the check can fail, and that the errors are found where they are.
"""

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

USER = """
import io

import ember
from ember import Tensor, nn, optim
from ember.data import DataLoader, TensorDataset
from ember.nn import functional as F


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.fc2 = nn.Linear(8, 3)

    def forward(self, x: Tensor) -> Tensor:
        # calling a module returns Any (as in torch: __call__ cannot know forward's type)
        out: Tensor = self.fc2(self.fc1(x).relu())
        return out


ember.manual_seed(0)
model = MLP()
opt = optim.SGD(model.parameters(), lr=0.1)
x = ember.randn(16, 4)
y = ember.randint(0, 3, (16,))
losses: list[float] = []
for xb, yb in DataLoader(TensorDataset(x, y), batch_size=4, shuffle=True):
    opt.zero_grad()
    loss = F.cross_entropy(model(xb), yb)
    loss.backward()
    opt.step()
    losses.append(float(loss.item()))
grad = model.fc1.weight.grad
norm: Tensor | None = grad.norm() if grad is not None else None

buf = io.BytesIO()
ember.save(model.state_dict(), buf)
buf.seek(0)
model.load_state_dict(ember.load(buf))

values, indices = ember.tensor([3.0, 1.0, 2.0]).sort(descending=True)
top: Tensor = x.topk(2, dim=1).values
largest, where = x.max(1)
overall: Tensor = x.max()
shape: tuple[int, ...] = (x @ x.T).shape
rows: int = x.size(0)
scaled: Tensor = 2.0 * x.exp().sum(dim=1, keepdim=True) - 1
zeros: Tensor = ember.zeros_like(x) + ember.where(x > 0, x, 0.0)
RESULT = (len(losses), values.tolist(), indices.tolist(), top.shape, largest.shape, str(where.dtype),
          overall.ndim, shape, rows, scaled.shape, zeros.shape, norm is not None)
"""

# Each line is wrong in one way a type checker should catch; the comment says what mypy names.
BROKEN = """
import ember
from ember import Tensor

x = ember.ones(2, 3)
n: str = x.size(0)  # int, not str
values: Tensor = x.max(1)  # MaxMin, not Tensor
x.sort().values.no_such_method()  # Tensor has no such attribute
ember.zeros(2, dtype=ember.float32, requires_grad="yes")  # bool expected
"""


def test_the_user_script_runs():
    scope: dict = {}
    exec(compile(USER, "user.py", "exec"), scope)
    n, values, indices, top, largest, where, ndim, shape, rows, scaled, zeros, has_norm = scope["RESULT"]
    assert (n, values, indices) == (4, [3.0, 2.0, 1.0], [0, 2, 1])
    assert (top, largest, where, ndim, shape, rows, scaled, zeros) == (
        (16, 2),
        (16,),
        "int64",
        0,
        (16, 16),
        16,
        (16, 1),
        (16, 4),
    )
    assert has_norm


def test_user_code_type_checks_under_strict_and_errors_are_found(tmp_path, monkeypatch):
    api = pytest.importorskip("mypy.api", reason="mypy is in the lint extra: pip install -e '.[lint]'")
    (tmp_path / "user.py").write_text(USER)
    (tmp_path / "broken.py").write_text(BROKEN)
    # mypy reads sources, not setuptools' editable finder: ember's package directory is core/ember.
    monkeypatch.setenv("MYPYPATH", str(ROOT / "core"))
    out, _, status = api.run(
        [
            "--strict",
            "--no-incremental",
            "--follow-imports=silent",  # check the scripts; ember's own findings are CI's mypy step
            "--python-version=3.11",
            "--config-file=",
            "--cache-dir=" + str(tmp_path / ".mypy_cache"),
            str(tmp_path / "user.py"),
            str(tmp_path / "broken.py"),
        ]
    )
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert not [e for e in errors if "user.py" in e], out
    # every wrong line of the broken script is found, and nothing else there
    assert sorted({int(e.split(":")[1]) for e in errors if "broken.py" in e}) == [6, 7, 8, 9], out
    assert status == 1, out
