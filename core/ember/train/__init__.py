"""Training: a Trainer with hooks, metrics, progress, logs, curves and resumable checkpoints.

>>> import ember
>>> from ember.train import Trainer
>>> Trainer.__name__
'Trainer'

Modules, in the order a training run meets them: recipes.py (defaults per dataset and model),
trainer.py (the loop), metrics.py (running numbers), progress.py (the bar), logbook.py (JSONL
log and the PNG of curves), state.py (checkpoint save/resume), cli.py (``ember train``/``eval``).
"""

from .metrics import Accuracy, Mean, RunningMean
from .state import load_training_state, save_training_state
from .trainer import Trainer

__all__ = ["Trainer", "Mean", "RunningMean", "Accuracy", "save_training_state", "load_training_state"]
