"""Memory planning: intermediate buffers whose lifetimes don't overlap share one allocation.

Input: the launches of a schedule (or of a TinyJit capture) as lists of buffer keys, the written buffers first, and
which of those keys are intermediates that may share memory, with their device, size and dtype. Output: a
`MemoryPlan` holding one `PooledBuffer` per intermediate (a Buffer that borrows the memory of a larger block) and
the bytes allocated with and without sharing.

An intermediate lives from the launch that writes it to the last launch that reads it. Intermediates are placed
greedily in order of their first use: each takes a free block of its device (one whose last occupant was last read
strictly before this intermediate is written, so a kernel never reads and writes the same memory), preferring the
smallest block that is big enough, else the biggest one, which grows. Blocks are allocated once, after planning.
"""
from __future__ import annotations
from dataclasses import dataclass, field
from typing import Hashable, Sequence
import numpy as np
from minigrad.dtype import DType, dtypes
from minigrad.runtime.device import Buffer


class PooledBuffer(Buffer):
  """A Buffer of its own size and dtype that uses the first bytes of a shared block (`block`). Allocating it
  allocates the block; freeing it only lets go of the block, which is freed with its last user."""

  def __init__(self, block: Buffer, size: int, dtype: DType):
    if size * dtype.itemsize > block.nbytes:
      raise ValueError(f"a pooled buffer of {size * dtype.itemsize} bytes doesn't fit its block of {block.nbytes} bytes")
    super().__init__(block.device, size, dtype)
    self.block = block

  def allocate(self) -> PooledBuffer:
    if self._allocator is None:
      self.block.allocate()
      self._allocator, self._opaque = self.block._allocator, self.block._opaque
    return self

  def deallocate(self) -> None:
    self._allocator, self._opaque = None, None   # the memory belongs to the block

  def copyin(self, data) -> PooledBuffer:
    whole = bytearray(self.block.nbytes)
    self.allocate().block.copyout(memoryview(whole))
    incoming = self._host_bytes_of(data) if isinstance(data, np.ndarray) else memoryview(data).cast("B")
    if incoming.nbytes != self.nbytes: raise ValueError(f"copyin of {incoming.nbytes} bytes into {self!r}, which holds {self.nbytes} bytes")
    whole[:self.nbytes] = incoming
    self.block.copyin(memoryview(whole))
    return self

  def copyout(self, dest: memoryview) -> None:
    view = memoryview(dest).cast("B")
    if view.nbytes != self.nbytes: raise ValueError(f"copyout of {self!r} ({self.nbytes} bytes) into {view.nbytes} bytes of host memory")
    whole = bytearray(self.block.nbytes)
    self.block.copyout(memoryview(whole))
    view[:] = whole[:self.nbytes]

  def __repr__(self) -> str: return f"<PooledBuffer {self.device} size={self.size} dtype={self.dtype} in a block of {self.block.nbytes} bytes>"


@dataclass
class MemoryPlan:
  """Where each intermediate lives, and what the plan saves."""
  buffers: dict[Hashable, PooledBuffer] = field(default_factory=dict)   # intermediate key -> its buffer
  blocks: list[Buffer] = field(default_factory=list)                     # the shared allocations
  planned_bytes: int = 0      # bytes the intermediates take with sharing (the blocks)
  unplanned_bytes: int = 0    # bytes they would take each in its own allocation

  def summary(self) -> str:
    return (f"{len(self.buffers)} intermediates in {len(self.blocks)} blocks: {_megabytes(self.planned_bytes)} "
            f"({_megabytes(self.unplanned_bytes)} without reuse)")


@dataclass
class _Block:
  device: str
  nbytes: int
  free_after: int   # index of the launch that last reads the current occupant
  members: list[Hashable] = field(default_factory=list)


def plan_memory(launches: Sequence[Sequence[Hashable]], intermediates: dict[Hashable, tuple[str, int, DType]]) -> MemoryPlan:
  """Share memory among `intermediates` (key -> (device, size, dtype)) used by `launches` (each a sequence of
  buffer keys, the written ones first). Keys not in `intermediates` are left alone."""
  first_use: dict[Hashable, int] = {}
  last_use: dict[Hashable, int] = {}
  for i, keys in enumerate(launches):
    for key in keys:
      if key in intermediates:
        first_use.setdefault(key, i)
        last_use[key] = i
  plan = MemoryPlan()
  blocks: list[_Block] = []
  for key in sorted(first_use, key=first_use.__getitem__):   # stable: ties keep launch order
    device, size, dtype = intermediates[key]
    nbytes = size * dtype.itemsize
    plan.unplanned_bytes += nbytes
    start = first_use[key]
    free = [b for b in blocks if b.device == device and b.free_after < start]
    big_enough = [b for b in free if b.nbytes >= nbytes]
    if big_enough: block = min(big_enough, key=lambda b: b.nbytes)
    elif free: block = max(free, key=lambda b: b.nbytes)
    else:
      block = _Block(device, 0, -1)
      blocks.append(block)
    block.nbytes, block.free_after = max(block.nbytes, nbytes), last_use[key]
    block.members.append(key)
  for block in blocks:
    memory = Buffer(block.device, block.nbytes, dtypes.uint8)
    plan.blocks.append(memory)
    plan.planned_bytes += block.nbytes
    for key in block.members:
      _, size, dtype = intermediates[key]
      plan.buffers[key] = PooledBuffer(memory, size, dtype)
  return plan


def _megabytes(nbytes: int) -> str: return f"{nbytes / 1e6:.2f} MB"
