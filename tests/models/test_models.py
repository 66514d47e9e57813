"""The model zoo: shapes, parameter counts and names against torch-built twins, forward and
gradients with copied weights, and one SGD step lowering the loss on a fixed batch."""

import numpy as np
import pytest
from references import known

import ember
import ember.nn.functional as F
from ember import models


def sgd_step_lowers_loss(model, x, y, lr, loss_fn=F.cross_entropy):
    before = loss_fn(model(x), y)
    model.zero_grad()
    before.backward()
    assert all(p.grad is not None for p in model.parameters())
    with ember.no_grad():
        for p in model.parameters():
            p.sub_(p.grad * lr)
    after = loss_fn(model(x), y)
    assert after.item() < before.item(), (before.item(), after.item())


def batch(shape, classes=10, seed=0):
    g = ember.Generator(seed)
    return ember.randn(*shape, generator=g), ember.randint(0, classes, (shape[0],), generator=g)


# ----------------------------------------------------------------------------- torch twins
def torch_lenet(torch):
    tnn = torch.nn

    class LeNet(tnn.Module):
        def __init__(self):
            super().__init__()
            self.conv1, self.conv2 = tnn.Conv2d(1, 32, 3), tnn.Conv2d(32, 64, 3)
            self.fc1, self.fc2 = tnn.Linear(1600, 128), tnn.Linear(128, 10)

        def forward(self, x):
            x = tnn.functional.max_pool2d(self.conv1(x).relu(), 2)
            x = tnn.functional.max_pool2d(self.conv2(x).relu(), 2)
            return self.fc2(self.fc1(x.flatten(1)).relu())

    return LeNet()


def torch_resnet18(torch, num_classes=10):
    tnn = torch.nn

    class BasicBlock(tnn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = tnn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = tnn.BatchNorm2d(cout)
            self.conv2 = tnn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = tnn.BatchNorm2d(cout)
            self.downsample = None
            if stride != 1 or cin != cout:
                self.downsample = tnn.Sequential(tnn.Conv2d(cin, cout, 1, stride, bias=False), tnn.BatchNorm2d(cout))

        def forward(self, x):
            out = self.bn2(self.conv2(self.bn1(self.conv1(x)).relu()))
            return (out + (x if self.downsample is None else self.downsample(x))).relu()

    class ResNet(tnn.Module):
        def __init__(self):
            super().__init__()
            self.conv1, self.bn1 = tnn.Conv2d(3, 64, 3, 1, 1, bias=False), tnn.BatchNorm2d(64)
            cin = 64
            for i, c in enumerate((64, 128, 256, 512)):
                setattr(
                    self, f"layer{i + 1}", tnn.Sequential(BasicBlock(cin, c, 1 if i == 0 else 2), BasicBlock(c, c, 1))
                )
                cin = c
            self.fc = tnn.Linear(512, num_classes)

        def forward(self, x):
            x = self.bn1(self.conv1(x)).relu()
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(x.mean((2, 3)))

    return ResNet()


def torch_char_transformer(torch, vocab, d, heads, layers, max_len):
    tnn = torch.nn

    class Block(tnn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = tnn.LayerNorm(d)
            self.attn = tnn.MultiheadAttention(d, heads, batch_first=True)
            self.ln2 = tnn.LayerNorm(d)
            self.mlp = tnn.Sequential(tnn.Linear(d, 4 * d), tnn.GELU(), tnn.Linear(4 * d, d), tnn.Dropout(0.0))

        def forward(self, x, mask):
            h = self.ln1(x)
            x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
            return x + self.mlp(self.ln2(x))

    class CharTransformer(tnn.Module):
        def __init__(self):
            super().__init__()
            self.tok_emb, self.pos_emb = tnn.Embedding(vocab, d), tnn.Embedding(max_len, d)
            self.drop = tnn.Dropout(0.0)
            self.blocks = tnn.ModuleList([Block() for _ in range(layers)])
            self.ln_f = tnn.LayerNorm(d)
            self.head = tnn.Linear(d, vocab, bias=False)
            self.head.weight = self.tok_emb.weight

        def forward(self, idx):
            T = idx.shape[1]
            pos = torch.arange(T)
            x = self.drop(self.tok_emb(idx) + self.pos_emb(pos))
            mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
            for b in self.blocks:
                x = b(x, mask)
            return self.head(self.ln_f(x))

    return CharTransformer()


# ----------------------------------------------------------------------------- tests
# The whole-model twins below copy torch's weights (0.2 to 11 M parameters): too big to store,
# so they compare with a live torch run (marked torch; CI runs them with torch installed).
@pytest.mark.torch
def test_mlp_matches_torch(twin, torch, rng):
    e = models.MLP()
    t = torch.nn.Sequential(
        torch.nn.Flatten(),
        torch.nn.Linear(784, 512),
        torch.nn.ReLU(),
        torch.nn.Linear(512, 512),
        torch.nn.ReLU(),
        torch.nn.Linear(512, 10),
    )
    (out,), _ = twin.module(e, t, rng.standard_normal((8, 1, 28, 28)).astype(np.float32))
    assert out.shape == (8, 10)


def test_mlp_size_and_step():
    assert models.MLP().num_parameters() == 669_706
    assert [tuple(p.shape) for p in models.MLP().parameters()] == [
        (512, 784),
        (512,),
        (512, 512),
        (512,),
        (10, 512),
        (10,),
    ]
    sgd_step_lowers_loss(models.MLP(hidden=(64,), dropout=0.1), *batch((16, 1, 28, 28)), lr=0.05)


@pytest.mark.torch
def test_lenet_matches_torch(twin, torch, rng):
    e, t = models.LeNet(), torch_lenet(torch)
    (out,), _ = twin.module(e, t, rng.standard_normal((4, 1, 28, 28)).astype(np.float32))
    assert out.shape == (4, 10)


def test_lenet_is_workload_w2():
    e = models.LeNet()
    assert e.num_parameters() == 225_034
    assert [tuple(p.shape) for p in e.parameters()] == [
        (32, 1, 3, 3),
        (32,),
        (64, 32, 3, 3),
        (64,),
        (128, 1600),
        (128,),
        (10, 128),
        (10,),
    ]
    sgd_step_lowers_loss(e, *batch((16, 1, 28, 28)), lr=0.05)


@pytest.mark.torch
def test_resnet18_cifar_matches_torch(twin, torch, rng):
    e, t = models.resnet18(), torch_resnet18(torch)
    assert e.num_parameters() == 11_173_962 == sum(p.numel() for p in t.parameters())
    assert {k: tuple(v.shape) for k, v in e.state_dict().items()} == {
        k: tuple(v.shape) for k, v in t.state_dict().items()
    }
    # 16x16 keeps the test fast; the global average pool makes the network size-agnostic.
    (out,), _ = twin.module(e, t, rng.standard_normal((2, 3, 16, 16)).astype(np.float32), rtol=1e-3, atol=1e-4)
    assert out.shape == (2, 10)
    twin.close(e.layer4[1].bn2.running_var, t.layer4[1].bn2.running_var, "running stats after one step")
    e.eval(), t.eval()
    x = rng.standard_normal((2, 3, 16, 16)).astype(np.float32)
    twin.close(e(ember.tensor(x)), t(torch.tensor(x)), "eval forward", rtol=1e-3, atol=1e-4)


def test_resnet18_shape_options_and_step():
    ember.manual_seed(0)
    m = models.resnet18(num_classes=7, in_channels=1)
    assert m.num_parameters() == 11_173_962 - 2 * 64 * 9 - 512 * 3 - 3
    x, y = batch((4, 1, 16, 16), classes=7)
    assert m(x).shape == (4, 7)
    sgd_step_lowers_loss(m, x, y, lr=0.01)


def test_char_transformer_matches_torch(twin, torch, rng):
    e = models.CharTransformer(17, d_model=16, n_heads=4, n_layers=2, max_len=12)
    t = torch_char_transformer(torch, 17, 16, 4, 2, 12)
    assert list(e.state_dict()) == known(lambda: list(t.state_dict()))
    assert e.head.weight is e.tok_emb.weight
    idx = rng.integers(0, 17, size=(3, 10))
    twin.load(e, t)
    twin.check(lambda _: e(ember.tensor(idx)), lambda _: t(torch.tensor(idx)), np.zeros(1, np.float32), emod=e, tmod=t)
    assert e.num_parameters() == known(lambda: sum(p.numel() for p in t.parameters()))
    assert repr(e) == known(lambda: repr(t)).replace("NonDynamicallyQuantizableLinear", "Linear")


def test_char_transformer_is_causal_and_trains():
    ember.manual_seed(0)
    m = models.CharTransformer(11, d_model=16, n_heads=2, n_layers=1, max_len=8, tie_weights=False)
    idx = ember.randint(0, 11, (2, 8), generator=ember.Generator(1))
    changed = ember.cat([idx[:, :5], (idx[:, 5:] + 1) % 11], 1)
    a, b = m(idx), m(changed)
    np.testing.assert_array_equal(a[:, :5].numpy(), b[:, :5].numpy())  # the past never sees the future
    assert not np.allclose(a[:, 5:].numpy(), b[:, 5:].numpy())
    assert m.head.weight is not m.tok_emb.weight
    with pytest.raises(ember.ShapeError, match="exceeds max_len 8"):
        m(ember.zeros(1, 9, dtype=ember.int64))
    inputs, targets = idx[:, :-1], idx[:, 1:]
    sgd_step_lowers_loss(
        m, inputs, targets, lr=0.1, loss_fn=lambda logits, y: F.cross_entropy(logits.reshape(-1, 11), y.reshape(-1))
    )


def test_registry():
    assert set(models.names()) >= {"mlp", "cnn", "resnet18", "transformer"}
    assert isinstance(models.get("cnn"), models.LeNet)
    assert isinstance(models.get("mlp", in_features=12, hidden=(4,), num_classes=3), models.MLP)
    assert models.get("cnn", in_channels=3, image_size=32)(ember.zeros(1, 3, 32, 32)).shape == (1, 10)
    assert models.get("transformer", vocab_size=5, d_model=8, n_heads=2, n_layers=1, max_len=4).vocab_size == 5
    with pytest.raises(models.UnknownModelError) as err:
        models.get("vgg16")
    msg = str(err.value)
    assert "'vgg16'" in msg and "cnn, lenet, mlp, resnet18, transformer" in msg
    assert isinstance(err.value, ember.EmberError)
