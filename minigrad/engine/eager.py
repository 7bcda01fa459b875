"""Eager realize: a structure realized before runs from what its first runs decided.

Input: the tensors of a `realize()` call. Output: the tensors hold their computed values (buffer views), exactly as
after create_schedule + run_schedule, which is what the first calls of each structure take.

A plain training loop realizes a graph of the same structure every step (minigrad.schedule.reuse keys it). Once a
structure's schedule was recorded and its kernels compiled, everything else a call decides is the same as last
time too: which buffer each kernel reads and writes, which new buffers outlive the call, how the short-lived ones
share memory (minigrad/engine/memory.py) and the batch of launches (minigrad/engine/batched.py). This module keeps
those per structure (`RunPlan`s, in the `_Kernels` kept in the recipe's `run`) and, on a later call, goes straight from the graph's
buffers to the launches: no ScheduleItems, no BUFFER nodes for buffers nobody will see, no memory planning, one
gather per kernel instead of a lookup per buffer.

It steps aside (the full path runs) whenever something watches or changes launches one by one (DEBUG, PROFILE/VIZ,
a TinyJit capture, BEAM), for structures with symbolic shapes (their kernels take the Variables' values, their
views are rebound per call), and for kernels that don't run on the CPU thread pool (GPUs, the PYTHON device).

Its launches don't wait: the batch starts on the pool's workers and realize returns, so Python builds the next
step's graph while the kernels run, as torch's CUDA launches do. The batch keeps its Buffers alive, and every
host access to their memory waits for it first (minigrad/runtime/cpu_pool.py, device.py): results read back,
copies in, raw addresses, other launches. A graph buffer that is the memory of a user's numpy array
(Tensor.from_numpy) is copied into minigrad's own first, because the user may change the array as soon as realize
returns; above ASYNC_COPY_MAX_BYTES of those, the call waits for its kernels instead. So does a call with less work
than ASYNC_MIN_FLOPS and ASYNC_MIN_BYTES (handing it over would cost more), and every call under LAUNCH_BLOCKING=1.
"""
from __future__ import annotations
from dataclasses import dataclass, field
from operator import itemgetter, methodcaller
from typing import Any, Callable, Iterable, Sequence
import ctypes
import weakref
from minigrad.helpers import BEAM, DEBUG, LAUNCH_BLOCKING
from minigrad.dtype import dtypes
from minigrad.uop.ops import UOp, Ops
from minigrad.runtime import cpu_pool
from minigrad.runtime.device import Buffer
from minigrad.schedule import reuse
from minigrad.schedule.scheduler import create_schedule, mark_realized, realized
from minigrad.engine import batched, realize as engine
from minigrad.engine.memory import PooledBuffer, plan_memory
from minigrad import viz


_allocated = methodcaller("allocate")   # a Buffer's allocate(), its subclass's own (PooledBuffer) included
ASYNC_COPY_MAX_BYTES = 4 << 20   # of user numpy arrays copied per call so that its kernels may run on after it returns
# a batch with less work than this takes less time than handing it to another thread and taking the results back
ASYNC_MIN_FLOPS, ASYNC_MIN_BYTES = 1 << 20, 1 << 20
MAX_RUN_PLANS = 8   # kept per structure, one per pattern of alive stored nodes (a loop has one or two): the oldest goes first


@dataclass
class _Kernels:
  """What every call of a structure shares: where each kernel's buffers are in the call's flat list of Buffers (the
  graph's buffers the kernels use, in `inputs` order, then the created ones, in the recipe's order) and the key of
  its batch of launches; and a RunPlan per pattern of alive stored nodes (`plans`, the MAX_RUN_PLANS newest)."""
  inputs: tuple[int, ...]                                # walk positions of the graph's BUFFERs the kernels use
  gathers: tuple[Callable[[list], tuple], ...]           # per kernel: flat list -> its buffers, in its item's order
  batch_key: tuple                                       # batched.batches' key: the ASTs and their devices
  compiled_keys: tuple[tuple, ...]                       # each kernel's key in engine.compiled_kernels
  outputs: tuple[tuple[int, ...], ...]                   # per kernel: the created-buffer indices it writes
  seen: tuple[int, ...]                                  # walk positions the targets or stored nodes become
  targets_new: tuple[int, ...]                           # created-buffer indices the targets become
  stored_positions: tuple[int, ...]                      # recipe.stored, in two columns
  stored_values: tuple[reuse.Value, ...]
  plans: dict[tuple[bool, ...], RunPlan] = field(default_factory=dict)


@dataclass
class RunPlan:
  """How a call lays out its created buffers, for one pattern of alive stored nodes (its key in _Kernels.plans): `kept`
  get a BUFFER node and memory of their own (results someone can see), the others share the `blocks` (device, bytes)."""
  kept: tuple[int, ...]                                  # created-buffer indices
  blocks: tuple[tuple[str, int], ...]
  pooled: tuple[tuple[int, int, int, Any], ...]          # (created-buffer index, block, size, dtype)


def realize(tensors: Sequence[Any]) -> None:
  """Compute `tensors` (Tensors) and point each at its value."""
  targets = [t.uop for t in tensors]
  if all(u.base.op is Ops.BUFFER for u in targets): return   # each already reads a buffer: nothing to compute
  structure = reuse.Structure(targets, realized)
  if (recipe := _fast_recipe(structure)) is not None:
    del targets
    return _run(tensors, structure, recipe)
  items, becomes, stored = create_schedule(targets, structure)
  for t in tensors: t.uop = becomes.get(t.uop, t.uop)
  del becomes, targets, structure   # the old graphs die here unless something else holds them: intermediates can share memory
  engine.run_schedule(items, stored, keep=[t.uop for t in tensors])


def _fast_recipe(structure: reuse.Structure) -> reuse.Recipe | None:
  """The structure's recipe when this call may take the fast path."""
  if (engine.launch_recorder is not None or viz.observing or DEBUG >= 1 or BEAM >= 1
      or (recipe := reuse.find(structure)) is None): return None
  if (kernels := recipe.run[0]) is None:
    if (kernels := _shared_part(recipe)) is None: return None   # not compiled yet, or not for the thread pool
    recipe.run[0] = kernels
  if not kernels: return None
  recipe.uses[0] += 1
  return recipe


def _shared_part(recipe: reuse.Recipe) -> _Kernels | bool | None:
  """The recipe's _Kernels; False when its kernels can never take the fast path; None when they aren't compiled yet."""
  if any(slots[0] >= 0 for _, slots, _ in recipe.items): return False   # a kernel writing a buffer of the graph
  keys = tuple((ast, recipe.new_buffers[-1 - slots[0]][0], None) for ast, slots, _ in recipe.items)
  compiled = [engine.compiled_kernels.get(key) for key in keys]
  if any(kernel is None for kernel in compiled): return None
  if any(getattr(kernel.program, "entry", None) is None or kernel.variables for kernel in compiled): return False
  values = (*recipe.becomes, *(v for _, v in recipe.stored))
  if any(v.__class__ is not int and getattr(v[2], "symbolic", False) for v in values): return False   # rebound per call
  inputs = tuple(sorted({slot for _, slots, _ in recipe.items for slot in slots if slot >= 0}))
  flat_index = {slot: i for i, slot in enumerate(inputs)}
  flat_index.update({-1 - j: len(inputs) + j for j in range(len(recipe.new_buffers))})
  gathers = tuple(_gather([flat_index[slot] for slot in slots]) for _, slots, _ in recipe.items)
  outputs = tuple(tuple(-1 - slot for slot in slots[:count] if slot < 0) for _, slots, count in recipe.items)
  seen = tuple({slot for v in values if (slot := _slot(v)) >= 0})
  targets_new = tuple(sorted({-1 - slot for v in recipe.becomes if (slot := _slot(v)) < 0}))
  return _Kernels(inputs, gathers, (tuple(key[0] for key in keys), tuple(key[1] for key in keys)), keys, outputs, seen,
                  targets_new, tuple(p for p, _ in recipe.stored), tuple(v for _, v in recipe.stored))


def _slot(v: reuse.Value) -> int: return v if v.__class__ is int else v[0]


def _gather(indices: list[int]) -> Callable[[list], tuple]:
  if len(indices) == 1:
    only = indices[0]
    return lambda flat: (flat[only],)
  return itemgetter(*indices)


def _run(tensors: Sequence[Any], structure: reuse.Structure, recipe: reuse.Recipe) -> None:
  kernels: _Kernels = recipe.run[0]
  nodes, new_buffers = structure.nodes, recipe.new_buffers
  flat: list = list(map(_allocated, map(engine.buffer_of, map(nodes.__getitem__, kernels.inputs))))
  node_at = {slot: nodes[slot] for slot in kernels.seen}   # slot -> the node a result is seen through (reuse.Value)
  for j in kernels.targets_new: node_at[-1 - j] = UOp.new_buffer(*new_buffers[j])
  becomes = [node_at[v] if v.__class__ is int else UOp(Ops.VIEW, v[1], (node_at[v[0]],), v[2]) for v in recipe.becomes]
  stored = [(weakref.ref(node), v) for node, v in zip(map(nodes.__getitem__, kernels.stored_positions), kernels.stored_values)]
  for t, new in zip(tensors, becomes): t.uop = new
  del becomes, nodes, structure   # the old graphs die here unless something else holds them
  alive = tuple(ref() is not None for ref, _ in stored)
  if (plan := kernels.plans.get(alive)) is None:
    plan = kernels.plans[alive] = _plan(recipe, kernels, [v for (_, v), live in zip(stored, alive) if live])
    if len(kernels.plans) > MAX_RUN_PLANS: del kernels.plans[next(iter(kernels.plans))]
  flat.extend([None] * len(new_buffers))
  base, runtime_buffer = len(kernels.inputs), engine.buffers
  for j in plan.kept:
    if (node := node_at.get(-1 - j)) is None: node = node_at[-1 - j] = UOp.new_buffer(*new_buffers[j])
    flat[base + j] = runtime_buffer[node] = Buffer(*new_buffers[j]).allocate()
  blocks = [Buffer(device, nbytes, dtypes.uint8).allocate() for device, nbytes in plan.blocks]
  for j, block, size, dtype in plan.pooled: flat[base + j] = PooledBuffer(blocks[block], size, dtype).allocate()
  try: _launch(kernels, flat)
  except BaseException:
    engine.failed_buffers.update({node_at[-1 - j]: True for j in plan.kept})
    raise
  mark_realized({node: node_at[v] if v.__class__ is int else UOp(Ops.VIEW, v[1], (node_at[v[0]],), v[2])
                 for ref, v in stored if (node := ref()) is not None})


def worth_submitting(flops: int, nbytes: int) -> bool:
  """Whether launches of this much work (FLOPs, bytes their kernels read and write) should run on after the call
  that started them returns."""
  return not LAUNCH_BLOCKING and (flops >= ASYNC_MIN_FLOPS or nbytes >= ASYNC_MIN_BYTES)


def copy_shared_memory(buffers: list, positions: Iterable[int], kept: dict | None = None) -> bool:
  """Replace, in `buffers`, each Buffer at `positions` (read, not written, by the launches) that is the memory of a
  user's numpy array by a copy in minigrad's memory: a new one, or the one `kept` for that position (written once the
  launches that read it last are over). False, with nothing replaced, when they hold more than ASYNC_COPY_MAX_BYTES
  in all: the launches must then finish before the call returns."""
  shared = [i for i in positions if buffers[i]._allocator.shares_host_arrays]
  if not shared: return True
  if sum(buffers[i].nbytes for i in shared) > ASYNC_COPY_MAX_BYTES: return False
  if kept is not None: cpu_pool.wait()
  for i in shared:
    original = buffers[i]
    if kept is None or (copy := kept.get(i)) is None or copy.nbytes != original.nbytes:
      copy = Buffer(original.device, original.size, original.dtype).allocate()
      if kept is not None: kept[i] = copy
    ctypes.memmove(copy._opaque, original._opaque, original.nbytes)
    buffers[i] = copy
  return True


def _plan(recipe: reuse.Recipe, kernels: _Kernels, alive_values: list) -> RunPlan:
  """Which created buffers a call keeps (the targets' and the alive stored nodes'), and how the rest share memory."""
  kept = set(kernels.targets_new) | {-1 - slot for v in alive_values if (slot := _slot(v)) < 0}
  intermediates = {j: recipe.new_buffers[j] for outputs in kernels.outputs for j in outputs if j not in kept}
  memory = plan_memory([tuple(-1 - slot for slot in slots if slot < 0) for _, slots, _ in recipe.items], intermediates)
  block_at = {id(block): i for i, block in enumerate(memory.blocks)}
  return RunPlan(tuple(sorted(kept)), tuple((block.device, block.nbytes) for block in memory.blocks),
                 tuple((j, block_at[id(b.block)], b.size, b.dtype) for j, b in memory.buffers.items()))


def _launch(kernels: _Kernels, flat: list) -> None:
  """Run the kernels on their buffers (`flat`, gathered per kernel) as one batch, started and not waited for when
  that pays (or one by one and waited for, the first time or when the batch is busy in another thread)."""
  if (batch := batched.find(kernels.batch_key, engine.compiled_kernels)) is not None:
    keep = flat if worth_submitting(batch.flops, batch.nbytes) and copy_shared_memory(flat, range(len(kernels.inputs))) else None
    if batch.run([gather(flat) for gather in kernels.gathers], keep): return
  launches = [gather(flat) for gather in kernels.gathers]
  compiled = [engine.get_kernel(ast, device) for ast, device, _ in kernels.compiled_keys]
  for kernel, bufs in zip(compiled, launches): engine.launch(kernel, list(bufs))
  if batch is None: batched.keep(kernels.batch_key, kernels.compiled_keys, compiled, launches)
