"""Text as a character-level dataset: each sample is ``seq_len`` characters and, as targets,
the same characters shifted by one (the next character at every position).

The vocabulary is the file's distinct characters, sorted, so it is the same for both splits
and can be saved with a model (``vocab``) to turn ids back into text. The first 90% of the
text is the training split, the rest the test split; windows do not overlap.

>>> import os, tempfile
>>> path = os.path.join(tempfile.mkdtemp(), "tiny.txt")
>>> _ = open(path, "w").write("abcabcabcabc" * 10)
>>> train = TextFile(path, seq_len=4)
>>> train.vocab, len(train), train.decode(train[0][0]), train.decode(train[0][1])
('abc', 26, 'abca', 'bcab')
"""

from __future__ import annotations

import os

import numpy as np

from .dataset import ArrayDataset
from .errors import DataError

TEST_FRACTION = 0.1
MAX_BYTES = 256 << 20  # a text file is read whole; beyond this it is likely not meant as one


class TextFile(ArrayDataset):
    """The characters of the UTF-8 file ``path`` as ``(ids[t:t+T], ids[t+1:t+T+1])`` pairs of
    int64 arrays. ``vocab`` (default: the file's own characters) fixes the ids, as a saved
    model needs; ``train`` picks the first 90% or the last 10% of the text."""

    def __init__(self, path, seq_len: int = 64, train: bool = True, vocab: str | None = None):
        self.path, self.seq_len, self.train = os.fspath(path), seq_len, train
        text = read_text(self.path)
        self.vocab = vocab if vocab is not None else "".join(sorted(set(text)))
        self.classes = list(self.vocab)
        unknown = sorted(set(text) - set(self.vocab))
        if unknown:
            raise DataError(
                f"{self.path}: characters {''.join(unknown[:20])!r} are not in the model's vocabulary "
                f"(it was trained on another text)"
            )
        cut = int(len(text) * (1 - TEST_FRACTION))
        part = text[:cut] if train else text[cut:]
        n = (len(part) - 1) // seq_len
        if n < 1:
            need = int((seq_len + 1) / TEST_FRACTION) + 1
            raise DataError(
                f"{self.path}: {len(text)} characters is too short for sequences of {seq_len} "
                f"(the {'training' if train else 'test'} split has {len(part)}; "
                f"give at least {need} characters or a shorter sequence)"
            )
        lookup = {c: i for i, c in enumerate(self.vocab)}
        ids = np.fromiter((lookup[c] for c in part[: n * seq_len + 1]), dtype=np.int64, count=n * seq_len + 1)
        super().__init__(ids[:-1].reshape(n, seq_len), ids[1:].reshape(n, seq_len))

    def encode(self, text: str) -> np.ndarray:
        """Character ids of ``text`` (characters outside the vocabulary are an error)."""
        lookup = {c: i for i, c in enumerate(self.vocab)}
        return np.array([lookup[c] for c in text], dtype=np.int64)

    def decode(self, ids) -> str:
        """The text of character ids."""
        return "".join(self.vocab[int(i)] for i in np.asarray(ids).reshape(-1))


def read_text(path: str) -> str:
    """The UTF-8 text of ``path``; a ``DataError`` naming the file and the cause otherwise."""
    try:
        size = os.path.getsize(path)
        if size > MAX_BYTES:
            raise DataError(f"{path}: {size} bytes, more than the {MAX_BYTES >> 20} MiB a text dataset reads")
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise DataError(f"{path}: no such file (ember train text FILE reads a UTF-8 text file)") from None
    except IsADirectoryError:
        raise DataError(f"{path} is a directory; ember train text FILE reads one UTF-8 text file") from None
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not UTF-8 text (byte {e.start}: {e.reason})") from None
    except OSError as e:
        raise DataError(f"{path}: cannot read it ({e.strerror or e})") from None
    if len(set(text)) < 2:
        raise DataError(f"{path}: holds {len(set(text))} distinct character(s); a character model needs at least 2")
    return text
