"""Which examples each rank trains on: a seeded shard of every epoch.

Input: the dataset's length, the world (rank, size), a seed and the epoch. Output: this rank's indices for the
epoch, and its batches. Every epoch is one permutation of the dataset, drawn from (seed, epoch) alone, so runs
repeat exactly and every rank computes the same permutation without talking to the others.

Rank r takes positions r, r + size, r + 2*size, ... of the permutation. So batch k of every rank together is
exactly positions [k*B*size, (k+1)*B*size) of the permutation: with a per-rank batch B, the ranks see the same
global batches a single process with batch B*size sees (in another order inside a batch), which is why a
data-parallel run with a mean gradient allreduce follows the single-process run.

When the dataset does not divide among the ranks, `drop_last=False` (default) repeats the permutation's first
examples to fill the last round, as torch's DistributedSampler does; `drop_last=True` leaves the tail out.
"""
from __future__ import annotations
from typing import Iterator
import numpy as np


class DistributedSampler:
  """`sampler.set_epoch(e)`, then `for index in sampler.batches(B)`: this rank's index arrays of (at most) B examples.
  world_size and rank default to the MPI world of minigrad.distributed.init() (1 and 0 outside MPI)."""

  def __init__(self, length: int, world_size: int | None = None, rank: int | None = None, shuffle: bool = True,
               seed: int = 0, drop_last: bool = False):
    if world_size is None or rank is None:
      from minigrad.distributed.comm import world
      w = world()
      world_size = w.size if world_size is None else world_size
      rank = w.rank if rank is None else rank
    if length < 0: raise ValueError(f"DistributedSampler: length must be >= 0, got {length}")
    if world_size < 1: raise ValueError(f"DistributedSampler: world_size must be >= 1, got {world_size}")
    if not 0 <= rank < world_size: raise ValueError(f"DistributedSampler: rank {rank} is not in a world of {world_size}")
    if drop_last and length < world_size: raise ValueError(f"DistributedSampler: {length} examples can't give each of {world_size} ranks one")
    self.length, self.world_size, self.rank = length, world_size, rank
    self.shuffle, self.seed, self.drop_last = shuffle, seed, drop_last
    self.epoch = 0

  def set_epoch(self, epoch: int) -> None:
    """The epoch whose shard __iter__ and batches() give (call it at the start of every epoch)."""
    self.epoch = epoch

  def __len__(self) -> int:
    """Examples per rank per epoch (the same on every rank)."""
    if self.drop_last: return self.length // self.world_size
    return -(-self.length // self.world_size)

  def epoch_order(self, epoch: int | None = None) -> np.ndarray:
    """The whole epoch's order (every rank's), padded or cut to len(self) * world_size."""
    epoch = self.epoch if epoch is None else epoch
    order = np.random.default_rng([self.seed, epoch]).permutation(self.length) if self.shuffle else np.arange(self.length)
    total = len(self) * self.world_size
    if total <= self.length: return order[:total]
    return np.concatenate([order, np.resize(order, total - self.length)]) if self.length else order

  def indices(self, epoch: int | None = None) -> np.ndarray:
    """This rank's shard of the epoch, in training order."""
    return self.epoch_order(epoch)[self.rank::self.world_size]

  def __iter__(self) -> Iterator[int]: return iter(self.indices().tolist())

  def batches(self, batch_size: int, epoch: int | None = None, drop_last: bool = False) -> list[np.ndarray]:
    """This rank's shard cut into consecutive batches of batch_size; the last one may be shorter (the same length
    on every rank), unless drop_last."""
    if batch_size < 1: raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    shard = self.indices(epoch)
    cut = len(shard) - len(shard) % batch_size if drop_last else len(shard)
    return [shard[start:start + batch_size] for start in range(0, cut, batch_size)]
