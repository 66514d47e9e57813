"""The objective and the runners the ember.optim tests share: one small MLP-like loss, written
once with operators that ember and torch both have, trained in each framework from the same
initial values."""

import numpy as np

SHAPES = [(4, 8), (8,), (8, 3), (3,)]


def initial(seed=0, dtype="float32"):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(s) * 0.5).astype(dtype) for s in SHAPES]


def batch(seed=1, dtype="float32"):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((16, 4)).astype(dtype), rng.standard_normal((16, 3)).astype(dtype)


def objective(params, x, y, sign=1.0):
    """Mean squared error of a tanh MLP plus an L2 term (well-conditioned, nothing exactly 0)."""
    w1, b1, w2, b2 = params
    out = (x @ w1 + b1).tanh() @ w2 + b2
    return (((out - y) ** 2).mean() + 0.05 * (w1**2).sum()) * sign


def leaves(lib, arrays):
    return [lib.tensor(a.copy(), requires_grad=True) for a in arrays]


def snapshot(params):
    return [p.detach().numpy().copy() for p in params]


def train(lib, params, opt, steps, x, y, sign=1.0, sched=None, closure=False):
    """Run ``steps`` optimizer steps; return the parameters after each one."""
    xs, ys = lib.tensor(x), lib.tensor(y)
    history = []
    for _ in range(steps):

        def loss_fn():
            opt.zero_grad()
            loss = objective(params, xs, ys, sign)
            loss.backward()
            return loss

        if closure:
            opt.step(loss_fn)
        else:
            loss_fn()
            opt.step()
        if sched is not None:
            sched.step()
        history.append(snapshot(params))
    return history


def assert_histories_close(got, want, rtol, atol):
    for step, (g_params, w_params) in enumerate(zip(got, want)):
        for i, (g, w) in enumerate(zip(g_params, w_params)):
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"parameter {i} after step {step + 1}")


def assert_state_matches_torch(mine, theirs, steps, rtol=1e-11):
    """An ember optimizer's state_dict()["state"] against torch's, as ``known`` gives it back
    (NumPy arrays): the same parameter indices and keys per parameter, ``step`` as an int equal
    to torch's step tensor, every state tensor close."""
    assert sorted(mine) == sorted(theirs), f"state for parameters {sorted(mine)}, torch's for {sorted(theirs)}"
    for i, entries in theirs.items():
        assert set(mine[i]) == set(entries), f"parameter {i}: keys {sorted(mine[i])}, torch's {sorted(entries)}"
        for key, value in entries.items():
            if key == "step":
                assert mine[i][key] == int(np.asarray(value).item()) == steps
            else:
                np.testing.assert_allclose(
                    mine[i][key].numpy(), np.asarray(value), rtol=rtol, err_msg=f"state {key!r} of parameter {i}"
                )
