"""Training on text: the zoo's CharTransformer as a character model (``ember train text FILE``).

The loss is cross-entropy at every position of every sequence; at the end of a run the model
writes a sample, one character at a time, each drawn from its predicted distribution.
"""

from __future__ import annotations

import numpy as np

from ..autodiff import no_grad


def sequence_cross_entropy(logits, targets):
    """Mean cross-entropy of ``(N, T, V)`` logits against ``(N, T)`` next-character ids.

    >>> import ember
    >>> logits = ember.zeros(2, 3, 4)
    >>> round(sequence_cross_entropy(logits, ember.zeros(2, 3, dtype=ember.int64)).item(), 4)   # log 4
    1.3863
    """
    from ..nn import functional as F

    v = logits.shape[-1]
    return F.cross_entropy(logits.reshape(-1, v), targets.reshape(-1))


def generate(model, prompt, length: int, *, temperature: float = 0.8, seed: int = 0) -> np.ndarray:
    """``length`` new character ids after ``prompt`` (ids), each drawn from the model's
    distribution for the next character (sharpened by ``temperature``), seeded.

    >>> import ember
    >>> from ember.models import CharTransformer
    >>> _ = ember.manual_seed(0)
    >>> model = CharTransformer(5, d_model=16, n_heads=2, n_layers=1, max_len=8)
    >>> generate(model, np.array([1, 2]), 10).shape
    (10,)
    """
    from ..tensor import tensor

    rng = np.random.default_rng(seed)
    ids = [int(i) for i in prompt]
    was_training = model.training
    model.eval()
    with no_grad():
        for _ in range(length):
            window = ids[-model.max_len :]
            logits = model(tensor([window])).numpy()[0, -1].astype(np.float64) / temperature
            p = np.exp(logits - logits.max())
            ids.append(int(rng.choice(len(p), p=p / p.sum())))
    model.train(was_training)
    return np.array(ids[len(prompt) :], dtype=np.int64)
