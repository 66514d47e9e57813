"""Module mechanics: registration, traversal, state_dict and its errors, modes, to(), repr,
containers, Parameter. No torch needed except where noted."""

import copy

import numpy as np
import pytest
from references import known

import ember
from ember import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 3)
        self.bn = nn.BatchNorm2d(2)
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(8, 3))
        self.scale = nn.Parameter(ember.ones(1))
        self.register_buffer("steps", ember.zeros(()))
        self.register_buffer("scratch", ember.zeros(2), persistent=False)
        self.not_registered = ember.zeros(3)  # a plain tensor attribute

    def forward(self, x):
        return self.head(self.bn(self.conv(x)).relu()) * self.scale


def test_registration_and_traversal():
    net = Net()
    names = [n for n, _ in net.named_parameters()]
    assert names == ["scale", "conv.weight", "conv.bias", "bn.weight", "bn.bias", "head.1.weight", "head.1.bias"]
    assert [n for n, _ in net.named_buffers()] == [
        "steps",
        "scratch",
        "bn.running_mean",
        "bn.running_var",
        "bn.num_batches_tracked",
    ]
    assert [n for n, _ in net.named_modules()] == ["", "conv", "bn", "head", "head.0", "head.1"]
    assert [type(m).__name__ for m in net.children()] == ["Conv2d", "BatchNorm2d", "Sequential"]
    assert len(list(net.modules())) == 6 and len(list(net.buffers())) == 5
    assert net.num_parameters() == 1 + 18 + 2 + 2 + 2 + 24 + 3
    assert "not_registered" not in dict(net.named_buffers())
    assert net.get_submodule("head.1") is net.head[1] and net.get_parameter("head.1.bias") is net.head[1].bias
    assert "conv" in dir(net)


def test_state_dict_order_names_and_persistence():
    net = Net()
    sd = net.state_dict()
    assert list(sd) == [
        "scale",
        "steps",
        "conv.weight",
        "conv.bias",
        "bn.weight",
        "bn.bias",
        "bn.running_mean",
        "bn.running_var",
        "bn.num_batches_tracked",
        "head.1.weight",
        "head.1.bias",
    ]
    assert not sd["conv.weight"].requires_grad
    assert np.shares_memory(sd["conv.weight"].numpy(), net.conv.weight.numpy())


def test_load_state_dict_copies_in_place_and_round_trips():
    a, b = Net(), Net()
    w = b.conv.weight
    result = b.load_state_dict(a.state_dict())
    assert result.missing_keys == [] and result.unexpected_keys == []
    assert b.conv.weight is w  # same Parameter object, new values
    x = ember.randn(2, 1, 4, 4)
    a.eval(), b.eval()
    assert a(x).equal(b(x))
    # NumPy arrays work too (e.g. from another framework)
    c = Net()
    c.load_state_dict({k: v.numpy() for k, v in a.state_dict().items()})
    assert c.eval()(x).equal(a(x))


def test_load_state_dict_mismatch_lists_names_and_shapes():
    net = Net()
    sd = dict(net.state_dict())
    del sd["head.1.bias"]
    sd["extra.weight"] = ember.zeros(4, 2)
    sd["conv.weight"] = ember.zeros(2, 1, 5, 5)
    with pytest.raises(nn.StateDictError) as err:
        net.load_state_dict(sd)  # user line
    msg = str(err.value)
    assert "missing" in msg and "head.1.bias (3,)" in msg
    assert "unexpected" in msg and "extra.weight (4, 2)" in msg
    assert "conv.weight model (2, 1, 3, 3) vs state_dict (2, 1, 5, 5)" in msg
    assert "test_module.py" in msg
    assert isinstance(err.value, ember.EmberError) and isinstance(err.value, RuntimeError)


def test_load_state_dict_non_strict_reports_and_shape_errors_stay_fatal():
    net = Net()
    sd = dict(net.state_dict())
    del sd["scale"]
    sd["junk"] = ember.zeros(1)
    missing, unexpected = net.load_state_dict(sd, strict=False)
    assert missing == ["scale"] and unexpected == ["junk"]
    sd["bn.weight"] = ember.zeros(3)
    with pytest.raises(nn.StateDictError, match=r"bn.weight model \(2,\) vs state_dict \(3,\)"):
        net.load_state_dict(sd, strict=False)


def test_train_eval_zero_grad_requires_grad():
    net = Net()
    assert net.training and net.head[1].training
    net.eval()
    assert not net.training and not net.head[1].training and not net.bn.training
    net.train()
    assert net.bn.training
    net(ember.randn(2, 1, 4, 4)).sum().backward()
    assert all(p.grad is not None for p in net.parameters())
    net.zero_grad(set_to_none=False)
    assert all(float(p.grad.abs().sum()) == 0 for p in net.parameters())
    net.zero_grad()
    assert all(p.grad is None for p in net.parameters())
    net.requires_grad_(False)
    assert not any(p.requires_grad for p in net.parameters())


def test_to_dtype_moves_in_place():
    net = Net()
    params = list(net.parameters())
    x = ember.randn(2, 1, 4, 4)
    net(x).sum().backward()
    net.to(ember.float64)
    assert [id(p) for p in net.parameters()] == [id(p) for p in params]  # optimizers keep their refs
    assert all(p.dtype is ember.float64 and p.grad.dtype is ember.float64 for p in net.parameters())
    assert net.bn.running_mean.dtype is ember.float64
    assert net.bn.num_batches_tracked.dtype is ember.int64  # integer buffers stay
    assert net(x.double()).dtype is ember.float64
    assert net.float().conv.weight.dtype is ember.float32
    assert net.to("numpy") is net and net.conv.weight.backend.name == "numpy"
    with pytest.raises(TypeError):
        net.to(ember.int64)
    with pytest.raises(ember.BackendError, match="nosuchbackend"):
        net.to("nosuchbackend")


def test_apply_and_reset_with_init():
    net = Net()
    seen = []
    net.apply(lambda m: seen.append(type(m).__name__))
    assert seen == ["Conv2d", "BatchNorm2d", "Flatten", "Linear", "Sequential", "Net"]
    net.apply(lambda m: nn.init.zeros_(m.weight) if isinstance(m, nn.Linear) else None)
    assert float(net.head[1].weight.abs().sum()) == 0


def test_repr_like_torch(torch):
    e = nn.Sequential(
        nn.Conv2d(1, 4, 3, stride=2, padding=1, bias=False),
        nn.BatchNorm2d(4),
        nn.ReLU(),
        nn.Sequential(nn.Dropout(0.1), nn.Linear(3, 2)),
        nn.Embedding(5, 2, padding_idx=0),
        nn.LayerNorm(4),
        nn.LSTM(3, 4, num_layers=2, batch_first=True),
        nn.MaxPool2d(2),
        nn.AvgPool2d(3),
        nn.AdaptiveAvgPool2d(1),
        nn.Softmax(dim=1),
        nn.GELU(),
        nn.LeakyReLU(0.2),
        nn.Flatten(),
        nn.Identity(),
        nn.CrossEntropyLoss(),
        nn.MSELoss(reduction="sum"),
    )
    t = torch.nn.Sequential(
        torch.nn.Conv2d(1, 4, 3, stride=2, padding=1, bias=False),
        torch.nn.BatchNorm2d(4),
        torch.nn.ReLU(),
        torch.nn.Sequential(torch.nn.Dropout(0.1), torch.nn.Linear(3, 2)),
        torch.nn.Embedding(5, 2, padding_idx=0),
        torch.nn.LayerNorm(4),
        torch.nn.LSTM(3, 4, num_layers=2, batch_first=True),
        torch.nn.MaxPool2d(2),
        torch.nn.AvgPool2d(3),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Softmax(dim=1),
        torch.nn.GELU(),
        torch.nn.LeakyReLU(0.2),
        torch.nn.Flatten(),
        torch.nn.Identity(),
        torch.nn.CrossEntropyLoss(),
        torch.nn.MSELoss(reduction="sum"),
    )
    assert repr(e) == known(lambda: repr(t))


def test_containers():
    seq = nn.Sequential(nn.Linear(2, 3), nn.ReLU())
    seq.append(nn.Linear(3, 1))
    assert len(seq) == 3 and isinstance(seq[-1], nn.Linear)
    assert isinstance(seq[:2], nn.Sequential) and len(seq[:2]) == 2 and seq[:2][0] is seq[0]
    assert seq(ember.ones(4, 2)).shape == (4, 1)
    del seq[1]
    assert list(seq._modules) == ["0", "1"]
    seq.insert(1, nn.Tanh())
    assert [type(m).__name__ for m in seq] == ["Linear", "Tanh", "Linear"]
    with pytest.raises(IndexError):
        seq[5]
    from collections import OrderedDict

    named = nn.Sequential(OrderedDict([("fc", nn.Linear(2, 2)), ("act", nn.ReLU())]))
    assert [n for n, _ in named.named_parameters()] == ["fc.weight", "fc.bias"]

    ml = nn.ModuleList([nn.Linear(2, 2)])
    ml.append(nn.ReLU()).extend([nn.Linear(2, 1)])
    ml += [nn.Tanh()]
    assert len(ml) == 4 and [n for n, _ in ml.named_parameters()] == ["0.weight", "0.bias", "2.weight", "2.bias"]
    del ml[0]
    assert list(ml._modules) == ["0", "1", "2"] and isinstance(ml[1], nn.Linear)

    md = nn.ModuleDict({"a": nn.Linear(2, 2)})
    md["b"] = nn.ReLU()
    assert list(md) == ["a", "b"] and "a" in md and len(md) == 2
    assert [n for n, _ in md.named_parameters()] == ["a.weight", "a.bias"]
    with pytest.raises(KeyError, match="keys: a, b"):
        md["zzz"]
    assert md.pop("b").__class__ is nn.ReLU and len(md) == 1


def test_shared_parameters_count_once_but_save_under_every_name():
    a = nn.Linear(3, 3)
    net = nn.Sequential(a, nn.ReLU(), a)
    assert net.num_parameters() == 12 and len(list(net.parameters())) == 2
    tied = nn.Module()
    tied.emb = nn.Embedding(5, 3)
    tied.head = nn.Linear(3, 5, bias=False)
    tied.head.weight = tied.emb.weight
    assert [n for n, _ in tied.named_parameters()] == ["emb.weight"]
    assert list(tied.state_dict()) == ["emb.weight", "head.weight"]
    tied.load_state_dict({"emb.weight": ember.ones(5, 3), "head.weight": ember.ones(5, 3)})


def test_parameter_basics_and_assignment_rules():
    p = nn.Parameter(ember.tensor([1.0, 2.0]))
    assert isinstance(p, ember.Tensor) and p.requires_grad and p.is_leaf
    assert repr(p).startswith("Parameter containing:\ntensor(")
    y = p * 2
    assert type(y) is ember.Tensor
    assert not nn.Parameter(ember.zeros(2), requires_grad=False).requires_grad
    m = nn.Linear(2, 2)
    with pytest.raises(TypeError, match="nn.Parameter"):
        m.weight = ember.zeros(2, 2)
    m.bias = None
    assert [n for n, _ in m.named_parameters()] == ["weight"]
    assert m(ember.ones(1, 2)).shape == (1, 2)

    class Forgot(nn.Module):
        def __init__(self):
            self.w = nn.Parameter(ember.zeros(1))

    with pytest.raises(AttributeError, match=r"super\(\)\.__init__\(\)"):
        Forgot()
    with pytest.raises(NotImplementedError, match="forward"):
        nn.Module()(1)


def test_deepcopy_gives_an_independent_model_on_the_same_backend():
    net = Net()
    clone = copy.deepcopy(net)
    assert clone.conv.weight is not net.conv.weight and isinstance(clone.conv.weight, nn.Parameter)
    assert clone.conv.weight.backend is net.conv.weight.backend
    with ember.no_grad():
        clone.conv.weight.add_(1.0)
    assert not clone.conv.weight.equal(net.conv.weight)
    x = ember.randn(2, 1, 4, 4)
    clone(x)  # runs: its tensors live on the real backend


def test_to_another_backend_moves_in_place_and_computes_the_same():
    from ember.registry import backends  # (ember.backends is also the name of a subpackage)

    if "python" not in [b["name"] for b in backends()]:
        pytest.skip("the pure-Python backend is not installed")
    ember.manual_seed(0)
    net = Net().eval()
    x = ember.randn(2, 1, 4, 4)
    ref = net(x).numpy()
    weight = net.conv.weight
    net.to("python")
    assert net.conv.weight is weight and weight.backend.name == "python"
    assert all(t.backend.name == "python" for t in net.state_dict().values())
    out = net(x.to("python"))
    assert out.backend.name == "python"
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-5, atol=1e-6)
    with pytest.raises(ember.BackendError, match="numpy"):
        net(x)  # a numpy input to a python-backend model names both backends
