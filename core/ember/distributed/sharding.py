"""Each rank's share of every batch.

The wrapped loader produces *global* batches (same seed, same permutation on every rank);
rank r keeps rows ``[r*n//R, (r+1)*n//R)`` of each. So R ranks see exactly the batches one
process would see with the same global batch size, and the loader's saved position is the
same whatever R is: a run can resume on a different number of ranks.
"""

from __future__ import annotations


class ShardedLoader:
    """Iterate over ``loader``'s batches, keeping this rank's rows of each."""

    def __init__(self, loader, rank: int, world_size: int):
        self.loader, self.rank, self.world_size = loader, rank, world_size
        self.global_size = 0

    def __len__(self):
        return len(self.loader)

    @property
    def dataset(self):
        return self.loader.dataset

    def state_dict(self):
        return self.loader.state_dict()

    def load_state_dict(self, state):
        self.loader.load_state_dict(state)

    def set_epoch(self, epoch):
        self.loader.set_epoch(epoch)

    def __iter__(self):
        r, world = self.rank, self.world_size
        for batch in self.loader:
            n = batch[0].shape[0]
            if n < world:
                continue  # a last batch with fewer rows than ranks is dropped on every rank
            self.global_size = n
            lo, hi = r * n // world, (r + 1) * n // world
            yield tuple(b[lo:hi] for b in batch)
