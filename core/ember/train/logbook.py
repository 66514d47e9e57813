"""The run's record: one JSON object per line in ``metrics.jsonl``, and a PNG of the curves."""

from __future__ import annotations

import json
import os


class Logbook:
    """Append-only JSONL metrics log of a run directory.

    On resume the records after the resumed step are dropped first, and so are evaluations of
    epochs the checkpoint had not finished (a kill after the evaluation, before the epoch's
    checkpoint), so the log reads as if the run had never been interrupted.
    """

    def __init__(self, directory, resume_step: int | None = None, resume_epoch: int | None = None):
        self.path = os.path.join(os.fspath(directory), "metrics.jsonl")
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        if resume_step is not None and os.path.exists(self.path):
            kept = [
                r
                for r in read_log(self.path)
                if r.get("step", 0) <= resume_step
                and not (r.get("split") == "eval" and resume_epoch is not None and r.get("epoch", 0) > resume_epoch)
            ]
            tmp = self.path + ".tmp"
            with open(tmp, "w") as f:
                f.writelines(json.dumps(r) + "\n" for r in kept)
            os.replace(tmp, self.path)
        elif resume_step is None and os.path.exists(self.path):
            os.remove(self.path)

    def write(self, **record) -> None:
        with open(self.path, "a") as f:
            f.write(json.dumps(record, allow_nan=True) + "\n")


def read_log(path) -> list[dict]:
    path = os.fspath(path)
    if os.path.isdir(path):
        path = os.path.join(path, "metrics.jsonl")
    records: list = []
    if not os.path.exists(path):
        return records
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError:
                    pass  # a line cut by a kill: the run went on from its last checkpoint
    return records


def plot_curves(run_dir, out=None) -> str:
    """Write ``curves.png`` (loss and accuracy against step) for a run; needs matplotlib
    (``pip install ember[plot]``)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        from ..errors import EmberError

        raise EmberError("plotting needs matplotlib: pip install 'ember[plot]'") from None
    records = read_log(run_dir)
    out = out or os.path.join(os.fspath(run_dir), "curves.png")
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 4))
    for split, style in (("train", "-"), ("eval", "o-")):
        rows = [r for r in records if r.get("split") == split]
        if rows:
            steps = [r["step"] for r in rows]
            ax_loss.plot(steps, [r["loss"] for r in rows], style, label=split)
            if all("accuracy" in r for r in rows):
                ax_acc.plot(steps, [r["accuracy"] for r in rows], style, label=split)
    ax_loss.set(xlabel="step", ylabel="loss", title="loss")
    ax_acc.set(xlabel="step", ylabel="accuracy", title="accuracy")
    for ax in (ax_loss, ax_acc):
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
