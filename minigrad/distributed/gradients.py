"""Gradients and parameters across ranks: bucketed gradient allreduce (TinyJit replays it) and parameter broadcast.

Input: parameter Tensors (their `.grad` filled by backward()) and the Communicator of minigrad/distributed/comm.py.
Output: `allreduce_gradients` leaves every `.grad` holding the mean (or sum) over the ranks, as a view of a few large
flat buckets; `broadcast_parameters` gives every rank root's values after checking that all ranks hold the same
shapes and dtypes.

How an allreduce runs
  * The gradients are realized as plain buffers; grouped by (device, dtype) in parameter order, they are cut into
    buckets of at most `bucket_mb` MB (one tensor is never split). Each bucket is one new flat BUFFER, except for a
    large gradient (IN_PLACE_BYTES or more) whose buffer this call's realize just made: that buffer is a bucket of its
    own, reduced where it is (copying it would cost more than the extra MPI call).
  * One host launch (`AllreduceLaunch`, a CompiledKernel whose program is Python) copies each other gradient into
    its bucket and runs one MPI sum-allreduce per bucket (MPI_IN_PLACE, watched by the Communicator's timeout). On CPU
    and LLVM the buffers are read and reduced in minigrad's own memory (numpy views of the buffer addresses): the only
    copy is the packing of the small gradients; on other devices the buckets go through host memory.
  * Ranks on one host (CPU and LLVM, every host running the same number of ranks; see Communicator.node_exchange)
    reduce through a shared-memory window instead (minigrad/distributed/shared.py), one per gradient layout: each
    rank copies the parts of its gradients the others will sum into its segment, sums its own chunk of every bucket
    into the shared result, and (across hosts) allreduces that chunk over MPI. No gradient is reduced in its own
    buffer then: the buckets are the shared result, which every rank's optimizer reads. Eager calls copy the result
    into buckets of their own; under TinyJit the buckets are the result itself (see below).
  * Each `.grad` becomes a view (shrink + reshape) of its bucket, times 1/world size for "mean": movement ops are
    free and the scaling fuses into the optimizer's kernels, which read the reduced values straight from the buckets.

TinyJit: the host launch goes through realize.launch and is recorded like a kernel (realize.launch_recorder), so
a captured training step (forward, backward, allreduce_gradients, optimizer.step) replays the allreduce at the same
place each call, on that call's buffers. Its launch object is the same for the same gradient layout (kept in
`_launches`, a documented cache), as a captured kernel's must be. Through shared memory its buckets are Buffers over
the window's result, made with the launch and not declared as its outputs: to TinyJit they are constants that the
captured optimizer kernels read in place (the recording after the one that made them agrees with the next). And each
gradient the recorded call computed is given a home (realize.homes): a Buffer over its place in this rank's segment
of the window, which a replay's backward kernel writes instead of memory TinyJit plans, so a replay copies no
gradient at all (eager calls still pack: their kernels write buffers the eager engine makes). On CPU and LLVM the
replay stays one call into the thread pool: the launch is a ctypes callback with a kernel's entry signature (see
AllreduceLaunch); it makes its numpy views of the buffers, and the copies and sums of the reduction, once per set of
buffer addresses, which a replay doesn't change.

All ranks must call these functions in the same order, with gradients for the same parameters: the first allreduce
of a layout checks that the ranks agree (one allgather) and raises naming the rank that differs.
"""
from __future__ import annotations
from typing import Any, Callable, Iterable, Mapping, Sequence
import ctypes
import os
import sys
import time
import traceback
import numpy as np
from minigrad.dtype import DType, dtypes, to_numpy
from minigrad.tensor import Tensor
from minigrad.uop.ops import UOp, Ops
from minigrad.schedule.scheduler import buffer_view
from minigrad.runtime.device import Buffer, Device
from minigrad.runtime.ops_cpu import CPUAllocator
from minigrad.engine import realize
from minigrad.engine.realize import CompiledKernel, buffer_of
from minigrad.distributed.comm import CommCounters, Communicator, DistributedError, communicator

DEFAULT_BUCKET_MB = 25.0
# a gradient this large, in a buffer of its own that nothing else holds, is reduced in place instead of being copied
# into a bucket: copying costs about its size over the memory bandwidth, an extra MPI call a latency of some microseconds
IN_PLACE_BYTES = 256 * 1024
REDUCIBLE = (dtypes.float32, dtypes.float64, dtypes.int32, dtypes.int64)


# ---------------------------------------------------------------- host views of minigrad buffers

def host_view(buffer: Buffer) -> np.ndarray | None:
  """A 1-D numpy array sharing `buffer`'s memory (CPU and LLVM keep buffers in host memory), else None."""
  buffer.allocate()
  if not isinstance(Device[buffer.device].allocator, CPUAllocator) or not isinstance(buffer.opaque, int): return None
  if buffer.nbytes == 0: return np.empty(0, dtype=to_numpy(buffer.dtype))
  raw = (ctypes.c_uint8 * buffer.nbytes).from_address(buffer.opaque)
  return np.frombuffer(raw, dtype=to_numpy(buffer.dtype))


def _plain_buffer(t: Tensor) -> UOp | None:
  """The BUFFER node a tensor reads as one contiguous array of the buffer's own size, else None."""
  u, base = t.uop, t.uop.base
  if base.op is not Ops.BUFFER or u.size != base.size: return None
  return base if u is base or u.arg.contiguous else None


def realized_buffers(tensors: Sequence[Tensor], realize_with: Sequence[Tensor] = ()) -> list[UOp]:
  """The plain BUFFER node of each tensor, realizing them first (in one schedule with `realize_with`; a view that
  isn't one becomes a contiguous copy)."""
  with Tensor.no_grad():
    pending = [t for t in list(tensors) + list(realize_with) if t.uop.base.op is not Ops.BUFFER]
    if pending: Tensor.realize(*pending)
    ready = [t if _plain_buffer(t) is not None else t.contiguous().realize() for t in tensors]
  nodes = [_plain_buffer(t) for t in ready]
  if any(n is None for n in nodes): raise RuntimeError("internal error: a realized contiguous tensor is not a plain buffer")
  return nodes   # type: ignore[return-value]


# ---------------------------------------------------------------- bucketing

Layout = tuple[tuple[tuple[int, ...], DType, str], ...]   # per gradient: shape, dtype, device


def plan_buckets(layout: Layout, bucket_bytes: int, alone: Sequence[bool] = ()) -> list[list[int]]:
  """Indices of the gradients in each bucket: grouped by (device, dtype), in order, a new bucket when the next
  gradient would pass bucket_bytes (a gradient larger than that is a bucket of its own). Gradients marked in
  `alone` get a bucket of their own, and the others go on filling the open one."""
  buckets: list[list[int]] = []
  open_bucket: dict[tuple[str, DType], tuple[list[int], int]] = {}
  for i, (shape, dtype, device) in enumerate(layout):
    if i < len(alone) and alone[i]:
      buckets.append([i])
      continue
    key, nbytes = (device, dtype), int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    members, used = open_bucket.get(key, (None, 0))
    if members is None or used + nbytes > bucket_bytes:
      members, used = [], 0
      buckets.append(members)
    members.append(i)
    open_bucket[key] = (members, used + nbytes)
  return buckets


class _HostKernelInfo:
  """What TinyJit, DEBUG and VIZ read from a CompiledKernel's `kernel` (normally a codegen Kernel)."""
  def __init__(self, ast: UOp, size: int):
    self.ast, self.full_shape, self.reduce_axes, self.axis_kinds, self.applied_opts = ast, (size,), [], (), []


_POOL_ENTRY = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_int)   # a CPU kernel's entry (minigrad/runtime/cpu_pool.c)


def _array_at(address: int, size: int, dtype: DType) -> np.ndarray:
  """`size` elements of `dtype` at a host address, as a numpy array sharing that memory."""
  if size == 0: return np.empty(0, dtype=to_numpy(dtype))
  return np.frombuffer((ctypes.c_uint8 * (size * dtype.itemsize)).from_address(address), dtype=to_numpy(dtype))


class AllreduceLaunch(CompiledKernel):
  """A host launch that allreduces gradients into buckets: buffers = (bucket 0..k-1, gradient 0..n-1). An in-place
  bucket (`in_place[k]`) is its one gradient's own buffer, given in both places: it is reduced there, not packed.

  Run alone (eager steps, DEBUG, devices without host memory) it is called like any CompiledKernel. In a TinyJit
  replay on CPU or LLVM it is also an entry of the thread pool's launch list: `pool_launch` gives the pool a ctypes
  callback with a kernel's entry signature, `void entry(void *const *bufs, int start, int end)`, so the whole step
  still runs as one call into the pool, which calls back into Python (taking the GIL) for the allreduce between the
  backward and the optimizer kernels. An error there can't travel back through C: it is printed, naming the rank,
  and the job is aborted, as an uncaught error is (the replay must not go on with unreduced gradients)."""
  def __init__(self, layout: Layout, buckets: list[list[int]], op: str, comm: Communicator, in_place: Sequence[bool] = (),
               shared: bool = False):
    self.layout, self.buckets, self.op, self.comm = layout, buckets, op, comm
    self.in_place = [k < len(in_place) and bool(in_place[k]) for k in range(len(buckets))]
    self.sizes = [int(np.prod(shape, dtype=np.int64)) for shape, _, _ in layout]
    self.bucket_sizes = [sum(self.sizes[i] for i in members) for members in buckets]
    self.bucket_dtypes = [layout[members[0]][1] for members in buckets]
    self.member_offsets = [np.cumsum([0] + [self.sizes[i] for i in members[:-1]]).tolist() for members in buckets]
    # through shared memory: the reduced buckets are the exchange's result, which TinyJit sees as constant buffers
    # (made before the captured calls, never declared written), so a replay's optimizer kernels read them where they are
    self.exchange = comm.node_exchange([(n, to_numpy(d)) for n, d in zip(self.bucket_sizes, self.bucket_dtypes)]) if shared else None
    self.shared_nodes: list[UOp] = []
    if self.exchange is not None:
      for k, (size, dtype) in enumerate(zip(self.bucket_sizes, self.bucket_dtypes)):
        node = UOp.new_buffer(layout[buckets[k][0]][2], size, dtype)
        realize.buffers[node] = Buffer.of_host_array(node.device, self.exchange.result[k], dtype)
        self.shared_nodes.append(node)
    # an AST of its own for this layout (UOps are hash-consed: the same layout gives the same node); its sources
    # count the outputs, the buckets (none through shared memory, see above), which is all TinyJit reads from it
    outputs = () if self.exchange is not None else \
      tuple(UOp(Ops.CONST, dtype, (), 0.0 if dtypes.is_float(dtype) else 0) for dtype in self.bucket_dtypes)
    ast = UOp(Ops.SINK, dtypes.void, outputs, ("mpi_allreduce", op, id(comm), layout, tuple(map(tuple, buckets)), tuple(self.in_place), shared))
    name = f"mpi_allreduce_{op}_{len(buckets)}b_{sum(self.bucket_sizes)}"
    self.what = f"allreduce of {len(layout)} gradients in {len(buckets)} bucket{'s' if len(buckets) > 1 else ''}"
    self._entry: Any = None
    self._homes: dict[int, Buffer] = {}
    self._prepared_key: tuple | None = None
    self._prepared: tuple = ()
    super().__init__(name=name, device=layout[0][2], source=f"# host: MPI {self.what} ({op})", uops=[],
                     kernel=_HostKernelInfo(ast, sum(self.bucket_sizes)), program=None, flops=0, outer_loop=None,
                     buffer_args=list(range(len(buckets) + len(layout))))

  def home(self, i: int) -> Buffer:
    """A Buffer over gradient i's place in this rank's shared-memory segment (made once): TinyJit gives it to the
    kernel that computes the gradient in a replay (realize.homes), so the gradient is never copied there."""
    if (buffer := self._homes.get(i)) is None:
      assert self.exchange is not None
      k = next(k for k, members in enumerate(self.buckets) if i in members)
      offset = self.member_offsets[k][self.buckets[k].index(i)]
      buffer = self._homes[i] = Buffer.of_host_array(self.layout[i][2], self.exchange.slot(k, offset, self.sizes[i]), self.layout[i][1])
    return buffer

  def _prepare(self, key: tuple, arrays: Callable[[], tuple[list[np.ndarray], list[np.ndarray]]]) -> tuple:
    """(bucket arrays, gradient arrays, ReductionPlan or None, (bucket, result) copies) for buffers at the addresses
    `key`, remade only when those change (never, from one TinyJit replay to the next). `arrays` makes the views."""
    if key != self._prepared_key:
      buckets, grads = arrays()
      plan, copies = None, []
      if self.exchange is not None:
        plan = self.exchange.plan([[(offset, grads[i]) for i, offset in zip(m, offsets)] for m, offsets in zip(self.buckets, self.member_offsets)])
        copies = [(flat, result) for flat, result in zip(buckets, self.exchange.result)
                  if flat.__array_interface__["data"][0] != result.__array_interface__["data"][0]]
      self._prepared_key, self._prepared = key, (buckets, grads, plan, copies)
    return self._prepared

  def _reduce(self, buckets: list[np.ndarray], grads: list[np.ndarray | Buffer], plan: Any, copies: list, start: float) -> None:
    """Pack the gradients (numpy views, or Buffers to copy out) into the buckets, then allreduce the buckets.
    Through shared memory (`plan`): pack them into this rank's input segment, reduce into the shared result, and copy
    that into the buckets given unless they are the result itself (TinyJit's) - eager steps get buckets of their own,
    so that a lazy graph reading a .grad never sees a later step's values. CommCounters.seconds gets the time since
    `start` (the launch's), whatever the collectives counted themselves."""
    counted = CommCounters.seconds
    packing = time.perf_counter()
    if plan is not None:
      self.exchange.pack(plan)   # type: ignore[union-attr]
      CommCounters.pack_seconds += time.perf_counter() - packing
      CommCounters.pack_bytes += plan.copy_bytes
      self.comm.shared_allreduce_(self.exchange, plan, self.what)
      for flat, result in copies: np.copyto(flat, result)
    else:
      self._pack(buckets, grads, self.in_place)
      CommCounters.pack_seconds += time.perf_counter() - packing
      CommCounters.pack_bytes += sum(flat.nbytes for flat, in_place in zip(buckets, self.in_place) if not in_place)
      self.comm.allreduce_(buckets, "sum", self.what)   # a mean's 1/size is applied lazily to the gradient views
    CommCounters.seconds = counted + (time.perf_counter() - start)

  def _pack(self, buckets: list[np.ndarray], grads: list[np.ndarray | Buffer], in_place: list[bool]) -> None:
    for flat, members, in_place in zip(buckets, self.buckets, in_place):
      if in_place: continue   # the gradient's own buffer
      offset = 0
      for i in members:
        flat[offset:offset + self.sizes[i]] = grads[i] if isinstance(grads[i], np.ndarray) else grads[i].numpy()   # type: ignore[union-attr]
        offset += self.sizes[i]

  def __call__(self, buffers: list[Buffer], wait: bool = False, var_vals: dict[str, int] | None = None) -> float | None:
    start = time.perf_counter()
    buckets, grads = buffers[:len(self.buckets)], buffers[len(self.buckets):]
    if all(isinstance(Device[b.device].allocator, CPUAllocator) for b in buffers):   # host memory: views of it
      def views() -> tuple[list[np.ndarray], list[np.ndarray]]:
        return [host_view(b) for b in buckets], [host_view(g) for g in grads]   # type: ignore[misc]
      self._reduce(*self._prepare(tuple(b.allocate().opaque for b in buffers), views), start)
    else:   # a host copy of each bucket, filled by the packing or, in place, from the gradient
      host = [host_view(b) for b in buckets]
      flats = [v if v is not None else b.numpy() if in_place else np.empty(b.size, dtype=to_numpy(b.dtype))
               for v, b, in_place in zip(host, buckets, self.in_place)]
      self._reduce(flats, [v if (v := host_view(g)) is not None else g for g in grads], None, [], start)
      for view, flat, bucket in zip(host, flats, buckets):
        if view is None: bucket.copyin(flat)
    return time.perf_counter() - start if wait else None

  def pool_launch(self, buffers: list[Buffer], var_vals: dict[str, int] | None = None) -> tuple | None:
    """This launch as an entry of the CPU thread pool's list (host memory only; else None: run alone). It takes no
    Variables: var_vals is ignored, as in __call__."""
    if not all(host_view(b) is not None for b in buffers): return None
    if self._entry is None: self._entry = _POOL_ENTRY(self._pool_entry)   # kept alive with the launch (in `_launches`)
    return (ctypes.cast(self._entry, ctypes.c_void_p).value, [b.opaque for b in buffers], 0, 1)

  def _pool_entry(self, addresses: int, start: int, end: int) -> None:
    began = time.perf_counter()
    try:
      pointers = ctypes.cast(addresses, ctypes.POINTER(ctypes.c_void_p))[:len(self.buckets) + len(self.layout)]
      def views() -> tuple[list[np.ndarray], list[np.ndarray]]:
        return ([_array_at(pointers[k], size, dtype) for k, (size, dtype) in enumerate(zip(self.bucket_sizes, self.bucket_dtypes))],
                [_array_at(pointers[len(self.buckets) + i], size, dtype) for i, (size, (_, dtype, _)) in enumerate(zip(self.sizes, self.layout))])
      self._reduce(*self._prepare(tuple(pointers), views), began)
    except BaseException as error:   # noqa: BLE001 - nothing may pass back through the C thread pool
      rank, size = getattr(self.comm, "rank", 0), getattr(self.comm, "size", 1)
      sys.stderr.write("".join(traceback.format_exception(type(error), error, error.__traceback__)) +
                       f"minigrad.distributed: rank {rank} of {size}: the {self.what} of a TinyJit replay failed "
                       f"({type(error).__name__}: {error}); aborting all ranks\n")
      sys.stderr.flush()
      abort = getattr(self.comm, "abort", None)
      if abort is not None: abort(1)
      os._exit(1)


_launches: dict[tuple, AllreduceLaunch] = {}   # (layout, op, bucket bytes, communicator) -> its launch, made once
_agreed: set[tuple] = set()                    # layouts whose agreement across ranks was checked


def dtype_name(dtype: DType) -> str:
  """numpy's name of a dtype ("float32"), as errors across ranks print it."""
  return "bfloat16" if dtype == dtypes.bfloat16 else to_numpy(dtype).name


def _check_same_layout(comm: Communicator, layout: Layout, op: str, what: str, alone: Sequence[bool] = ()) -> None:
  """One allgather: every rank must reduce gradients of the same shapes and dtypes, with the same op (and, so that
  they make the same MPI calls, the same gradients in place)."""
  mine = (op, [(shape, dtype_name(dtype)) for shape, dtype, _ in layout], [i for i, a in enumerate(alone) if a])
  everyone = comm.allgather_object(mine, f"{what}: checking that the ranks agree on the gradients")
  for rank, theirs in enumerate(everyone):
    if theirs == everyone[0]: continue
    if theirs[0] != everyone[0][0]: raise DistributedError(f"{what}: rank {rank} reduces with op={theirs[0]!r} but rank 0 with op={everyone[0][0]!r}")
    if theirs[1] == everyone[0][1]:
      raise DistributedError(f"{what}: rank 0 reduces gradients {everyone[0][2]} in their own buffers but rank {rank} gradients {theirs[2]}: "
                             "the ranks must compute the gradients the same way (one realized them before the call?)")
    a, b = everyone[0][1], theirs[1]
    if len(a) != len(b):
      raise DistributedError(f"{what}: rank 0 has gradients for {len(a)} parameters but rank {rank} for {len(b)}: every rank must "
                             "compute gradients for the same parameters (a parameter unused on one rank? give it a zero gradient)")
    k = next(k for k, (x, y) in enumerate(zip(a, b)) if x != y)
    raise DistributedError(f"{what}: gradient {k} is {a[k][0]} {a[k][1]} on rank 0 but {b[k][0]} {b[k][1]} on rank {rank}")


def allreduce_gradients(params: Iterable[Tensor], op: str = "mean", bucket_mb: float = DEFAULT_BUCKET_MB,
                        realize_with: Sequence[Tensor] = (), comm: Communicator | None = None) -> None:
  """Reduce the `.grad` of every parameter across ranks (op "mean", the default, or "sum"), in place of .grad.
  Call it between backward() and optimizer.step(); inside a TinyJit step it is replayed every call. Parameters
  without a gradient are skipped (on every rank alike). At world size 1 it only realizes the gradients (with
  realize_with).
  realize_with: tensors to compute in the same schedule as the gradients, e.g. the loss (read after the step, it
  would otherwise run the forward pass again)."""
  if op not in ("mean", "sum"): raise ValueError(f"allreduce_gradients: op must be 'mean' or 'sum', got {op!r}")
  if bucket_mb <= 0: raise ValueError(f"allreduce_gradients: bucket_mb must be positive, got {bucket_mb}")
  comm = comm if comm is not None else communicator()
  params = [p for p in params if isinstance(p, Tensor) and p.grad is not None]
  if comm is None or not params:   # nothing to reduce: still compute the gradients with realize_with, in one schedule
    if pending := [t for t in [*realize_with, *(p.grad for p in params)] if t is not None and t.uop.base.op is not Ops.BUFFER]:
      Tensor.realize(*pending)
    return
  for i, p in enumerate(params):
    if p.grad.dtype not in REDUCIBLE:   # type: ignore[union-attr]
      raise TypeError(f"allreduce_gradients: gradient {i} (shape {p.shape}) is {dtype_name(p.grad.dtype)}; MPI reduces "   # type: ignore[union-attr]
                      f"{', '.join(dtype_name(d) for d in REDUCIBLE)}: cast the parameter or train in float32")
  # a gradient not yet realized (or not a plain buffer) gets a buffer of its own from the realize below
  fresh = [p.grad.uop.base.op is not Ops.BUFFER or _plain_buffer(p.grad) is None for p in params]   # type: ignore[union-attr]
  grads = realized_buffers([p.grad for p in params], realize_with)   # type: ignore[misc]
  layout: Layout = tuple((p.shape, node.dtype, node.device) for p, node in zip(params, grads))
  # through shared memory every gradient is copied into the window; else large fresh ones are reduced where they are
  shared = getattr(comm, "shared", False) and all(isinstance(Device[device].allocator, CPUAllocator) for _, _, device in layout)
  alone = tuple(not shared and f and node.size * node.dtype.itemsize >= IN_PLACE_BYTES and grads.count(node) == 1
                for f, node in zip(fresh, grads))
  key = (layout, op, int(bucket_mb * 2**20), id(comm), alone, shared)
  if (launch := _launches.get(key)) is None:
    if (layout, op, id(comm), alone) not in _agreed:   # the ranks must make the same MPI calls: the same buckets
      _check_same_layout(comm, layout, op, "allreduce_gradients", alone)
      _agreed.add((layout, op, id(comm), alone))
    buckets = plan_buckets(layout, key[2], alone)
    launch = _launches[key] = AllreduceLaunch(layout, buckets, op, comm, [len(m) == 1 and alone[m[0]] for m in buckets], shared)
  if launch.shared_nodes and realize.launch_recorder is not None: bucket_nodes = list(launch.shared_nodes)
  else:
    bucket_nodes = [grads[m[0]] if in_place else UOp.new_buffer(layout[m[0]][2], size, layout[m[0]][1])
                    for m, size, in_place in zip(launch.buckets, launch.bucket_sizes, launch.in_place)]
  nodes = tuple(bucket_nodes) + tuple(grads)
  buffers = [buffer_of(node).allocate() for node in nodes]
  if realize.launch_recorder is not None:
    realize.launch_recorder.append((launch, nodes, buffers))
    if launch.exchange is not None:   # a replay computes each gradient this call made at its place in the segment
      for i, (node, made) in enumerate(zip(grads, fresh)):
        if made and grads.count(node) == 1: realize.homes[node] = launch.home(i)
  realize.launch(launch, buffers)
  with Tensor.no_grad():
    for node, members, size in zip(bucket_nodes, launch.buckets, launch.bucket_sizes):
      flat, offset = Tensor(buffer_view(node, (size,))), 0
      for i in members:
        n = launch.sizes[i]
        grad = flat.shrink(((offset, offset + n),)).reshape(params[i].shape)
        params[i].grad = grad * (1.0 / comm.size) if op == "mean" else grad
        offset += n


# ---------------------------------------------------------------- parameters

def _named(params: Iterable[Tensor] | Mapping[str, Tensor]) -> list[tuple[str, Tensor]]:
  if isinstance(params, Mapping): return [(str(name), t) for name, t in params.items()]
  return [(f"parameter {i}", t) for i, t in enumerate(params)]


def broadcast_parameters(params: Iterable[Tensor] | Mapping[str, Tensor], root: int = 0, comm: Communicator | None = None) -> None:
  """Give every rank root's values of `params` (a list, or a state dict: then errors name the tensors). First checks
  that every rank holds the same number of tensors with the same shapes and dtypes, else raises DistributedError
  on every rank naming the first tensor and the rank that differ. A no-op at world size 1."""
  comm = comm if comm is not None else communicator()
  if comm is None: return
  if not 0 <= root < comm.size: raise ValueError(f"broadcast_parameters: root {root} is not a rank of a world of {comm.size}")
  named = _named(params)
  seen: dict[int, str] = {}
  named = [(name, t) for name, t in named if seen.setdefault(id(t), name) == name]   # tied tensors once
  mine = [(name, t.shape, dtype_name(t.dtype)) for name, t in named]
  everyone = comm.allgather_object(mine, "broadcast_parameters: checking that the ranks agree on the parameters")
  reference = everyone[root]
  for rank, theirs in enumerate(everyone):
    if theirs == reference: continue
    if len(theirs) != len(reference):
      raise DistributedError(f"broadcast_parameters: rank {root} has {len(reference)} parameters but rank {rank} has {len(theirs)}: "
                             "every rank must build the same model")
    k = next(k for k, (x, y) in enumerate(zip(reference, theirs)) if x != y)
    (name_a, shape_a, dtype_a), (name_b, shape_b, dtype_b) = reference[k], theirs[k]
    raise DistributedError(f"broadcast_parameters: {name_a} is {shape_a} {dtype_a} on rank {root} but rank {rank} has "
                           f"{'' if name_a == name_b else name_b + ' '}{shape_b} {dtype_b} there: every rank must build the same model")
  tensors = [t for _, t in named]
  if not tensors: return
  nodes = realized_buffers(tensors)
  layout: Layout = tuple((t.shape, node.dtype, node.device) for t, node in zip(tensors, nodes))
  buckets = plan_buckets(layout, int(DEFAULT_BUCKET_MB * 2**20))
  sizes = [int(np.prod(t.shape, dtype=np.int64)) for t in tensors]
  flats: list[np.ndarray] = []   # bfloat16 travels as float32 (to_numpy), and is rounded back on arrival
  for members in buckets:
    if comm.rank == root: flats.append(np.concatenate([buffer_of(nodes[i]).numpy() for i in members]))
    else: flats.append(np.empty(sum(sizes[i] for i in members), dtype=to_numpy(nodes[members[0]].dtype)))
  comm.broadcast_(flats, root, f"broadcast_parameters of {len(tensors)} tensors")
  if comm.rank == root: return
  with Tensor.no_grad():
    fresh: list[Tensor] = []
    for flat, members in zip(flats, buckets):
      offset = 0
      for i in members:
        t = tensors[i]
        fresh.append(t.assign(Tensor(flat[offset:offset + sizes[i]].reshape(t.shape), device=t.device, dtype=t.dtype)))
        offset += sizes[i]
    Tensor.realize(*fresh)
