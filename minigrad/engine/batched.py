"""Batched launches: a schedule that ran before runs again as one call into the CPU thread pool.

Input: a schedule's kernels (CompiledKernels, in run order) and the runtime Buffers of each. Output: the kernels
have run, counted in GlobalCounters, with one ctypes call instead of one per kernel.

A plain training loop runs the same schedule every step (the same kernel ASTs in the same order, minigrad.schedule.
reuse) on new buffers. The first time, realize launches its kernels one by one; then a `Batch` is kept for that
sequence of ASTs: a LaunchList (minigrad/runtime/cpu_pool.py) of all of them, the buffer sizes each kernel was
checked against, and their FLOPs and bytes. Later runs write the new buffers' addresses into the list and run it
(if a buffer's size differs, nothing runs and the caller launches one by one, with its checks), or start it and
return while it runs (minigrad/engine/eager.py, which keeps its buffers until it is over). realize uses it
only when nothing watches launches one at a time (DEBUG, PROFILE/VIZ, a TinyJit capture) and every kernel runs
on the CPU thread pool (not on a GPU, the PYTHON interpreter, or with Variable arguments).
"""
from __future__ import annotations
from operator import attrgetter, is_, itemgetter
import threading
from typing import Any, Sequence
from minigrad.helpers import GlobalCounters
from minigrad.runtime import cpu_pool
from minigrad.runtime.cpu_pool import LaunchList

MAX_BATCHES = 256   # the most recently used sequences of kernels kept
_opaque, _size = attrgetter("_opaque"), attrgetter("size")


class Batch:
  """The kernels of one schedule as a LaunchList; `run` takes each kernel's Buffers (its schedule item's order)."""
  def __init__(self, keys: Sequence[tuple], kernels: Sequence[Any], buffers: Sequence[Sequence[Any]], entries: list[tuple]):
    self.keys, self.kernels = tuple(keys), tuple(kernels)   # each kernel's key in realize.compiled_kernels, and itself
    self.launches = LaunchList(entries)
    self.lock = threading.Lock()   # the address arrays are written per run: one thread at a time
    # per kernel: its address array in the list, which of its item's buffers it takes, and their sizes
    self.args = [(addresses, itemgetter(*k.buffer_args) if k.buffer_args else None, tuple(map(_size, bufs)))
                 for addresses, k, bufs in zip(self.launches.addresses, kernels, buffers)]
    self.kernel_count = len(kernels)
    self.flops = sum(k.flops for k in kernels)
    self.nbytes = sum(b.nbytes for bufs in buffers for b in bufs)

  def run(self, buffers: Sequence[Sequence[Any]], keep: list | None = None) -> bool:
    """Run every kernel on `buffers` (allocated); False, with nothing run, when a buffer's size differs from the
    one its kernel was checked against, or another thread is running this batch. With `keep` (the Buffers the
    kernels use, kept alive while they run) it returns once they are started
    (cpu_pool.LaunchList.submit): the caller doesn't touch their memory before cpu_pool.wait()."""
    for (_, _, sizes), bufs in zip(self.args, buffers):
      if tuple(map(_size, bufs)) != sizes: return False
    if not self.lock.acquire(blocking=False): return False
    try:
      cpu_pool.wait()   # the address arrays below may be in use by this batch's last run
      for (addresses, take, _), bufs in zip(self.args, buffers):
        if take is not None:
          taken = take(bufs)
          addresses[:] = list(map(_opaque, taken)) if isinstance(taken, tuple) else [taken._opaque]
      if keep is None: self.launches.run()
      else: self.launches.submit(keep, self)   # (self: its kernels' code stays loaded)
    finally: self.lock.release()
    GlobalCounters.kernel_count += self.kernel_count
    GlobalCounters.global_ops += self.flops
    GlobalCounters.global_mem += self.nbytes
    return True


batches: dict[tuple, Batch | None] = {}   # (the kernel ASTs in order, their devices) -> a Batch, None when it can't be one


def find(key: tuple, compiled: dict) -> Batch | None:
  """The Batch kept for a schedule's key (the most recently used last), or None; also None when one of its kernels
  is no longer the one `compiled` (realize.compiled_kernels) holds for its key: emptied, evicted or replaced, as
  when a setting changed, it is compiled again kernel by kernel. A batch found marks its kernels as the most
  recently used in `compiled` too, as launching them one by one would (so they are evicted last)."""
  if (batch := batches.pop(key, None)) is None: return None
  batches[key] = batch
  if not all(map(is_, map(compiled.get, batch.keys), batch.kernels)): return None
  compiled.update(zip(batch.keys, map(compiled.pop, batch.keys)))   # each moved to the end, in one C-level pass
  return batch


def keep(key: tuple, keys: Sequence[tuple], kernels: Sequence[Any], buffers: Sequence[list[Any]]) -> None:
  """After the kernels ran one by one on `buffers`: keep them as a Batch when each is a thread-pool CPU kernel
  (`keys`: their keys in realize.compiled_kernels)."""
  if key in batches and ((batch := batches[key]) is None or all(map(is_, batch.kernels, kernels))): return   # kept as it is
  if any(getattr(kernel, "variables", ()) for kernel in kernels):   # Variable values change between runs: not batched
    batches[key] = None
    return
  entries = [kernel.pool_launch(bufs) for kernel, bufs in zip(kernels, buffers)]
  batches[key] = None if any(entry is None for entry in entries) else Batch(keys, kernels, buffers, entries)
  while len(batches) > MAX_BATCHES: del batches[next(iter(batches))]
