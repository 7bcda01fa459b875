"""Gradient allreduce among the ranks of one host through an MPI-3 shared-memory window, then across hosts over MPI.

Input: the node communicator (the ranks that share memory: MPI_COMM_TYPE_SHARED), the cross communicator (this
rank and the ranks of the same local rank on the other hosts; None on a single host) and the sizes and dtypes of
the buckets of one gradient layout. Output: a `NodeExchange` whose `allreduce()` sums every local rank's input
segment into one result that all the local ranks read, in the same memory.

Memory (one window made by MPI_Win_allocate_shared over the node communicator, made once per gradient layout)
  * per local rank: a flag line (an int64 counter) and an input segment holding all buckets, each 64-byte aligned;
  * on local rank 0 also the result: the same buckets again, read by every local rank. The optimizer kernels of
    every rank read the reduced gradients from there (the launch hands out Buffers over it), so the reduced values
    are written once per host and copied nowhere.

How an allreduce runs (each rank: `plan()` once for its gradients' flat arrays, then `pack()` and `allreduce()`)
  0. each bucket is cut into one chunk per local rank (64-byte aligned); a rank copies into its segment only the
     parts of its gradients outside its own chunk (the others will read them), and nothing of a gradient that is
     already at its place in the segment (`slot()`: in a TinyJit replay the backward's kernels write it there);
  1. node barrier: every local rank's segment is complete (and, since every rank got here after its previous
     step's optimizer, nobody still reads the previous result);
  2. reduce-scatter: rank r sums chunk r over the ranks in rank order - its own part straight from its gradients,
     the others' from their segments - into the result: every element is added once, by one rank, in the same
     order on every run, so all ranks see the same bits;
  3. across hosts (several hosts, the same number of ranks on each): rank r allreduces its chunk of the result with
     rank r of the other hosts (MPI_Allreduce over the cross communicator), so all hosts' chunks are summed in
     parallel, each by one MPI call;
  4. node barrier: the whole result is written.
The copies and sums of a set of gradients (numpy views of them, of the segments and of the result) are worked out
once, in a `ReductionPlan`: a TinyJit replay reduces gradients at the same addresses every step.
The node barrier is a counter per rank in shared memory: a rank publishes its count and waits until every local
rank's count reaches it (spinning a little, then yielding the core between looks, as Open MPI's waiting ranks do
with mpi_yield_when_idle, and sleeping between looks once the wait passes a millisecond). MPI_Win_sync around it orders the memory accesses (a full barrier on weakly ordered
CPUs). The wait is bounded: after `timeout` seconds it raises DistributedError naming the local ranks that did not
arrive (one that died is normally ended by the launcher first).
"""
from __future__ import annotations
from typing import Any, Sequence
import os
import time
import numpy as np

ALIGN = 64           # bytes: buckets and chunks start on their own cache line (no two writers share a line)
FLAG_BYTES = 4096    # the counter's own page, apart from the data
SPINS_BEFORE_YIELD = 64
YIELD_SECONDS = 1e-3   # a longer wait (rank 0 writing a checkpoint, a busy host) sleeps between looks instead
SLEEP_SECONDS = 50e-6


def _aligned(nbytes: int, to: int = ALIGN) -> int: return -(-nbytes // to) * to


def chunk_bounds(size: int, parts: int, itemsize: int) -> list[int]:
  """Element offsets cutting `size` elements into `parts` contiguous chunks whose starts are 64-byte aligned
  (chunk r is bounds[r]:bounds[r+1]; some may be empty when the bucket is small)."""
  step = max(1, ALIGN // itemsize)
  per = -(-size // parts)
  per = -(-per // step) * step
  return [min(size, r * per) for r in range(parts)] + [size]


class NodeExchange:
  """The shared window of one gradient layout among the local ranks (see the module docstring)."""

  def __init__(self, MPI: Any, node: Any, cross: Any | None, buckets: Sequence[tuple[int, np.dtype]], timeout: float | None):
    self.MPI, self.node, self.cross, self.timeout = MPI, node, cross, timeout
    self.rank, self.size = node.Get_rank(), node.Get_size()
    self.dtypes = [np.dtype(dtype) for _, dtype in buckets]
    self.sizes = [int(size) for size, _ in buckets]
    self.offsets: list[int] = []
    used = 0
    for size, dtype in zip(self.sizes, self.dtypes):
      self.offsets.append(used)
      used += _aligned(size * dtype.itemsize)
    data_bytes = _aligned(max(used, ALIGN), FLAG_BYTES)
    mine = FLAG_BYTES + data_bytes + (data_bytes if self.rank == 0 else 0) + ALIGN   # ALIGN: room to align the start
    self.window = MPI.Win.Allocate_shared(mine, 1, comm=node)
    self.window.Lock_all(MPI.MODE_NOCHECK)   # a passive epoch for the whole life of the window: Win_sync may be called
    self.flags: list[np.ndarray] = []
    self.segments: list[list[np.ndarray]] = []
    for r in range(self.size):
      memory, _ = self.window.Shared_query(r)
      raw = np.frombuffer(memory, dtype=np.uint8)
      raw = raw[-raw.__array_interface__["data"][0] % ALIGN:]
      self.flags.append(raw[:8].view(np.int64))
      self.segments.append(self._buckets(raw[FLAG_BYTES:FLAG_BYTES + data_bytes]))
      if r == 0: self.result = self._buckets(raw[FLAG_BYTES + data_bytes:FLAG_BYTES + 2 * data_bytes])
    self.flags[self.rank][0] = 0
    self.count = 0
    self.chunks = [chunk_bounds(size, self.size, dtype.itemsize) for size, dtype in zip(self.sizes, self.dtypes)]
    self.barrier()   # every rank's counter is 0 before anyone waits on it

  def _buckets(self, raw: np.ndarray) -> list[np.ndarray]:
    return [raw[o:o + n * d.itemsize].view(d) for o, n, d in zip(self.offsets, self.sizes, self.dtypes)]

  def slot(self, bucket: int, offset: int, size: int) -> np.ndarray:
    """Where this rank's segment holds `size` elements at element `offset` of bucket `bucket`: a gradient computed
    there (TinyJit gives its kernel this memory, see gradients.py) is neither copied nor read from anywhere else."""
    return self.segments[self.rank][bucket][offset:offset + size]

  def plan(self, gradients: Sequence[Sequence[tuple[int, np.ndarray]]]) -> ReductionPlan:
    """The copies and sums of an allreduce of these gradients: per bucket, (element offset in the bucket, flat array)
    of each gradient in it. Valid while the arrays' memory holds the gradients."""
    return ReductionPlan(self, gradients)

  def pack(self, plan: ReductionPlan) -> None:
    """Copy into this rank's segment what the other local ranks will read (see the module docstring)."""
    for destination, source in plan.copies: np.copyto(destination, source)

  def allreduce(self, plan: ReductionPlan, what: str = "allreduce") -> None:
    """After pack(plan): sum every local rank's gradients into `result` (and across hosts). Every local rank must
    call it, with gradients of the same layout."""
    self.barrier(what)
    for out, first, second, more in plan.sums:   # in rank order, whoever sums
      if second is None: np.copyto(out, first)
      else:
        np.add(first, second, out=out)
        for term in more: np.add(out, term, out=out)
    for chunk in plan.across_hosts: self.cross.Allreduce(self.MPI.IN_PLACE, chunk, op=self.MPI.SUM)
    self.barrier(what)

  def barrier(self, what: str = "barrier") -> None:
    """Wait until every local rank got here as often as this one (see the module docstring)."""
    self.count += 1
    count = self.count
    self.window.Sync()              # our writes before the counter
    self.flags[self.rank][0] = count
    for flag in self.flags:
      if flag[0] < count: self._wait(flag, count, what)
    self.window.Sync()              # their writes after their counters

  def _wait(self, flag: np.ndarray, count: int, what: str) -> None:
    """Until flag reaches count: look SPINS_BEFORE_YIELD times, then yield the core between looks, and after
    YIELD_SECONDS sleep SLEEP_SECONDS between them (on a busy host the rank we wait for may need this core)."""
    spins, started = 0, time.monotonic()
    while flag[0] < count:
      spins += 1
      if spins < SPINS_BEFORE_YIELD: continue
      if spins % 16 == 0:
        waited = time.monotonic() - started
        if self.timeout and waited > self.timeout: self._timed_out(what, count)
        if waited > YIELD_SECONDS:
          time.sleep(SLEEP_SECONDS)
          continue
      os.sched_yield()

  def _timed_out(self, what: str, count: int) -> None:
    from minigrad.distributed.comm import DistributedError
    late = [r for r, flag in enumerate(self.flags) if flag[0] < count]
    world = [self.node_to_world(r) for r in late]
    others = f"another rank (rank {world[0]})" if len(world) == 1 else f"other ranks (ranks {', '.join(map(str, world))})"
    raise DistributedError(f"{what} (shared-memory step #{count}) did not complete within {self.timeout:g} s: {others} died, hung "
                           "or did not make the same call (MINIGRAD_DIST_TIMEOUT sets the limit)")

  def node_to_world(self, node_rank: int) -> int:
    """The rank in MPI_COMM_WORLD of local rank `node_rank`."""
    return int(self.MPI.Group.Translate_ranks(self.node.Get_group(), [node_rank], self.MPI.COMM_WORLD.Get_group())[0])


def _address(array: np.ndarray) -> int: return array.__array_interface__["data"][0]


class ReductionPlan:
  """One allreduce of gradients at fixed addresses through a NodeExchange, as lists of numpy views:
    copies: (segment part, gradient part) for pack() - the parts outside this rank's chunks, unless the gradient is
      at its place in the segment already;
    sums: (result part, first, second or None, further terms) - this rank's chunk of every bucket, gradient by
      gradient, the terms in rank order (this rank's own term read from its gradient);
    across_hosts: this rank's chunk of every bucket's result (with several hosts)."""

  def __init__(self, exchange: NodeExchange, gradients: Sequence[Sequence[tuple[int, np.ndarray]]]):
    self.copies: list[tuple[np.ndarray, np.ndarray]] = []
    self.sums: list[tuple[np.ndarray, np.ndarray, np.ndarray | None, list[np.ndarray]]] = []
    self.across_hosts: list[np.ndarray] = []
    rank, mine = exchange.rank, exchange.segments[exchange.rank]
    for k, members in enumerate(gradients):
      start, end = exchange.chunks[k][rank], exchange.chunks[k][rank + 1]
      for offset, gradient in members:
        if gradient.size and _address(gradient) == _address(mine[k][offset:offset + 1]): continue   # computed in place
        for lo, hi in ((offset, min(offset + gradient.size, start)), (max(offset, end), offset + gradient.size)):
          if lo < hi: self.copies.append((mine[k][lo:hi], gradient[lo - offset:hi - offset]))
      if start == end: continue
      for offset, gradient in members:   # this chunk, one gradient's part at a time
        lo, hi = max(start, offset), min(end, offset + gradient.size)
        if lo >= hi: continue
        terms = [gradient[lo - offset:hi - offset] if r == rank else exchange.segments[r][k][lo:hi] for r in range(exchange.size)]
        self.sums.append((exchange.result[k][lo:hi], terms[0], terms[1] if len(terms) > 1 else None, terms[2:]))
      if exchange.cross is not None: self.across_hosts.append(exchange.result[k][start:end])
    self.nbytes = sum(r.nbytes for r in exchange.result)
    self.copy_bytes = sum(d.nbytes for d, _ in self.copies)
