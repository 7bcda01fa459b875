"""TinyJit: capture the kernels a function launches, then replay them on new inputs with no scheduling or codegen.

Input: a function of Tensors (Tensor arguments, positional or keyword; other arguments hashable) that returns
Tensors, or None, or tuples/lists/dicts of them. Output: a callable with the same results that, once two
consecutive calls launched the same kernels on equivalent buffers, runs only those kernels.

This is the one engine module that sees Tensors: it wraps a function of them, so it imports minigrad.tensor.

How a call goes
  * Arguments: each Tensor argument is realized (made contiguous if it is a view) before the call. The
    signature - shape, dtype, device and requires_grad of each Tensor argument, which arguments share memory,
    the value of every other argument, Tensor.training, Tensor.grad_enabled and the default device - picks a
    capture. A new signature gets its own capture (an input of another shape is captured again, never replayed
    wrongly); the 16 most recent signatures are kept.
  * Recording: the function runs eagerly while every kernel launch and every Tensor.assign is recorded. At its
    end the returned tensors and the tensors it assigned are realized (so BatchNorm's running stats are too).
    Every buffer a kernel touched is classified: an argument, the value of a carried tensor before the call, a
    buffer the call wrote that a returned or carried tensor now holds ("fresh"), an intermediate ("temp"),
    random-generator keys, other host data made during the call, or a constant that existed before it.
  * Capture: when two consecutive recordings agree (same kernels, same classification, same carried tensors),
    the second becomes the capture. The first call of a training step often differs (Adam's moments start as
    constants): then the next pair is compared. After four recordings without agreement the call raises,
    naming what changed (a Python number baked into the graph, a tensor computed by the previous call that
    is read without being passed in or assigned, ...).
  * Replay: the captured kernels run on the new arguments. Carried tensors are read where they are now and
    rebound to freshly written buffers (a buffer that nothing refers to any more is written again, under the
    same node: in a training loop the weights take turns between two); intermediates live in memory planned
    once for the capture (minigrad/engine/memory.py); random keys are refilled from the generator's counter,
    which advances as in an eager call - a replay draws exactly the numbers the eager call would have drawn.

Semantics (what differs from running the function eagerly)
  * Carried state: tensors that existed before the call and that the function assigns (assign, setitem,
    optimizers, BatchNorm). A replay rebinds them to their new values, as an eager call does: a tensor taken
    earlier (`old = w.detach()`) keeps the old value.
  * Returned tensors hold this call's values in new buffers: a tensor returned by an earlier call is never
    overwritten. They have no autograd history.
  * Nothing else is updated by a replay: Python side effects don't happen, and tensors the function leaves
    behind without returning or assigning them (e.g. `.grad` after a training step) keep the values of the
    last recorded call. Return what you need.
  * Tensors the function reads without getting them as arguments (weights of a model in eval) are constants
    of the capture. When one of them is assigned a new value later (a training step, load_state_dict), the
    capture is dropped and the function is recorded again. Rebinding a Python attribute to another Tensor
    (`model.w = Tensor(...)`) can't be seen: use assign.
  * Python control flow and Python numbers are frozen at capture; a number that changes from call to call is
    either an argument (a new signature) or, baked into a kernel, found by the recordings disagreeing.
  * Symbolic shapes: a bound Variable passed as an argument (`step(x, pos.bind(5))`) keys the capture by the
    variable, not its value: a replay runs the same kernels with the new value as their int argument, and returned
    tensors of symbolic shape get this call's lengths. A Variable the kernels use that is not an argument is fixed at
    its recorded value, so two recordings with different values disagree (pass it as an argument).
  * JIT=0 in the environment (or `JIT.value = 0`) makes the decorator call the function directly. A jitted
    function called while another one records simply runs (its kernels join the outer capture).
  * PROFILE=1 traces each replay and each recorded call as a span (minigrad/viz/trace.py); with PROFILE=1 or VIZ=1
    a replay launches its kernels one by one instead of as one thread-pool list, so each is timed and recorded.
"""
from __future__ import annotations
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Hashable
import functools
import gc
import sys
import weakref
from minigrad.helpers import DEBUG, ContextVar, GlobalCounters
from minigrad.dtype import DType, dtypes
from minigrad.uop.ops import UOp, Ops
from minigrad.uop.shapetracker import ShapeTracker
from minigrad.uop.variable import Variable
from minigrad.schedule.scheduler import buffer_view
from minigrad.runtime.device import Buffer, Device
from minigrad.engine import realize
from minigrad.engine.realize import CompiledKernel, buffer_of, launch
from minigrad.engine.eager import copy_shared_memory, worth_submitting
from minigrad.engine.memory import plan_memory
from minigrad.runtime.cpu_pool import LaunchList
from minigrad.tensor import Tensor
from minigrad.tensor.create import random_key_buffers, random_keys
from minigrad import viz
from minigrad.viz import trace

JIT = ContextVar("JIT", 1)
MAX_SIGNATURES = 16         # captures kept per jitted function (least recently used dropped)
MAX_RECORDINGS = 4          # recorded calls before two consecutive ones must agree
_KEPT_GENERATIONS = 4       # buffers a fresh slot keeps for reuse once nothing outside holds their nodes


class JitError(RuntimeError):
  """A function can't be captured: its calls launch different kernels, or read what they shouldn't."""


def _plain_base(u: UOp) -> UOp | None:
  """The BUFFER node `u` reads as one contiguous array of the buffer's own size, else None."""
  base = u.base
  if base.op is not Ops.BUFFER or u.size != base.size: return None
  return base if u is base or u.arg.contiguous else None


# ---------------------------------------------------------------- arguments and results

def _prepare_argument(value: Any, name: str) -> Any:
  """Tensors come back realized and contiguous (maybe as a contiguous copy); containers of Tensors are refused."""
  if isinstance(value, Tensor):
    if _plain_base(value.uop) is None: value.realize()
    if _plain_base(value.uop) is None: value = value.contiguous().realize()
    return value
  if isinstance(value, (list, tuple, dict)) and any(isinstance(v, Tensor) for v in (value.values() if isinstance(value, dict) else value)):
    raise TypeError(f"TinyJit: argument {name} is a {type(value).__name__} holding Tensors; pass each Tensor as its own argument")
  return value


def _signature(named: list[tuple[str, Any]], inputs: list[Tensor]) -> Hashable:
  """What must be equal for a capture to apply: see the module docstring."""
  first_with_base: dict[UOp, int] = {}
  aliases = tuple(first_with_base.setdefault(t.uop.base, k) for k, t in enumerate(inputs))
  parts: list[Any] = []
  for name, value in named:
    if isinstance(value, Tensor): parts.append((name, "tensor", value.shape, value.dtype, value.device, bool(value.requires_grad)))
    elif isinstance(value, Variable):   # a bound Variable: its value is a kernel argument of the capture, not part of the key
      if not value.bound or value.uop.op is not Ops.BIND: raise TypeError(f"TinyJit: argument {name} must be a bound Variable (Variable.bind), got {value}")
      parts.append((name, "variable", value.uop.src[0]))
    else:
      try: hash(value)
      except TypeError: raise TypeError(f"TinyJit: argument {name} ({type(value).__name__}) is not hashable; pass Tensors, or values that can key a capture") from None
      parts.append((name, type(value), value))
  return (tuple(parts), aliases, Tensor.training, Tensor.grad_enabled, Device.DEFAULT)


def _flatten(value: Any, path: str = "result") -> tuple[list[Tensor], Any]:
  """The Tensors in a result (Tensor, None, tuple/list/dict of them) and a description of its structure."""
  if isinstance(value, Tensor): return [value], "tensor"
  if value is None: return [], "none"
  if isinstance(value, (tuple, list, dict)):
    keys = list(value.keys()) if isinstance(value, dict) else list(range(len(value)))
    leaves, structure = [], []
    for key in keys:
      child_leaves, child = _flatten(value[key], f"{path}[{key!r}]")
      leaves += child_leaves
      structure.append(child)
    return leaves, (type(value), tuple(keys), tuple(structure))
  raise TypeError(f"TinyJit: the function returned a {type(value).__name__} in {path}; a replay runs no Python code, so return "
                  "Tensors (or None, or tuples/lists/dicts of them) and convert them (.item(), .numpy()) outside")


def _unflatten(structure: Any, leaves: Any) -> Any:
  if structure == "tensor": return next(leaves)
  if structure == "none": return None
  kind, keys, children = structure
  values = [_unflatten(child, leaves) for child in children]
  if issubclass(kind, dict): return kind(zip(keys, values))
  return kind(*values) if hasattr(kind, "_fields") else kind(values)   # a namedtuple takes its fields one by one


# ---------------------------------------------------------------- recording one call

@dataclass
class _Recording:
  """One eagerly run call, with every buffer its kernels touched numbered ("slots") and classified."""
  signature: tuple                  # everything two recordings must agree on (kinds hold constant BUFFER nodes)
  kinds: list[tuple]                # per slot: ("input", k) ("state", j) ("fresh",) ("temp",) ("random", offset, streams) ("host", bytes) ("const", node)
  nodes: list[UOp]                  # per slot: the BUFFER node of this call
  launches: list[tuple[CompiledKernel, tuple[int, ...]]]
  var_vals: dict[str, int]          # the values of the Variables the kernels took (from the arguments, or fixed)
  state: list[Tensor]               # carried tensors, in the order of their first assign
  state_reads: list[int | None]     # per carried tensor: the slot of its value before the call (None: not read)
  state_writes: list[int]           # per carried tensor: the slot it holds after the call
  results: list[tuple]              # per returned tensor: ("state", j) | ("input", k) | ("view", slot, view or None, dtype)
  structure: Any
  rng_advance: int
  assign_count: int                 # realize.assign_count when the call was over
  start_id: int                     # buffers made during the call have ids from here on

  def forget_buffers(self) -> _Recording:
    """Keep only what the comparison with the next recording needs (no buffers of this call stay alive)."""
    self.nodes, self.launches, self.results = [], [], []
    return self


def _argument_values(named: list[tuple[str, Any]]) -> dict[str, int]:
  """name -> value of the bound Variables among the arguments."""
  return {v.uop.src[0].arg[0]: v.uop.src[1].arg for _, v in named if isinstance(v, Variable)}


def _record(fn: Callable, args: tuple, kwargs: dict, inputs: list[Tensor], arg_vals: dict[str, int]) -> tuple[Any, _Recording]:
  """Run fn eagerly, recording its launches and assigns; realize what it returned and assigned."""
  start_id = UOp.new_buffer(Device.DEFAULT, 0, dtypes.uint8).arg[0]   # buffers made by this call have larger ids
  rng_start = Tensor._rng_counter
  launches: list[tuple[CompiledKernel, tuple[UOp, ...], list[Buffer]]] = []
  assigns: list[tuple[weakref.ref, UOp]] = []
  realize.watch_assigns = True
  realize.launch_recorder, realize.assign_recorder = launches, assigns
  try:
    returned = fn(*args, **kwargs)
    leaves, structure = _flatten(returned)
    gc.collect()   # tensors the function assigned and dropped must be gone before we look for survivors
    before: dict[int, tuple[Tensor, UOp]] = {}
    for ref, old in assigns:
      if (t := ref()) is not None: before.setdefault(id(t), (t, old))
    assigned = [t for t, _ in before.values()]
    if pending := [t for t in leaves + assigned if t.uop.base.op is not Ops.BUFFER]: Tensor.realize(*pending)
    with Tensor.no_grad():
      for t in assigned:   # carried tensors start the next call as plain buffers
        if _plain_base(t.uop) is None: t.uop = t.contiguous().realize().uop
  finally:
    realize.launch_recorder = realize.assign_recorder = None
  # carried: assigned tensors that existed before the call (their value then was a buffer made earlier). The others
  # that survive were made by this call: kept apart, they become carried from the next call on, so their shapes
  # enter the comparison (a tensor first made by this call must not be missed by a capture taken now)
  state = [(t, old) for t, old in before.values() if (base := _plain_base(old)) is not None and base.arg[0] < start_id]
  made_here = tuple((t.shape, t.dtype) for t in assigned if all(t is not s for s, _ in state))
  return returned, _classify(launches, inputs, state, made_here, leaves, structure, start_id, rng_start, arg_vals)


def _classify(launches: list, inputs: list[Tensor], state: list[tuple[Tensor, UOp]], made_here: tuple, leaves: list[Tensor],
              structure: Any, start_id: int, rng_start: int, arg_vals: dict[str, int]) -> _Recording:
  for j, (t, _) in enumerate(state):
    if any(t is x for x in inputs):
      raise JitError(f"TinyJit: the function assigns its argument {next(k for k, x in enumerate(inputs) if x is t)} (shape {t.shape}); "
                     "a replay can't rebind the caller's tensors: return the new value instead")
  input_of: dict[UOp, int] = {}
  for k, t in enumerate(inputs): input_of.setdefault(t.uop.base, k)
  state_of: dict[UOp, int] = {}
  for j, (t, old) in enumerate(state): state_of.setdefault(old.base, j)
  written = {node for kernel, nodes, *_ in launches for node in nodes[:kernel.outputs]}
  held = {t.uop.base for t in leaves} | {t.uop.base for t, _ in state}
  slot_of: dict[UOp, int] = {}
  kinds: list[tuple] = []
  nodes: list[UOp] = []

  def kind_of(node: UOp) -> tuple:
    if node in input_of:
      if node in state_of:
        raise JitError(f"TinyJit: argument {input_of[node]} shares memory with a tensor the function assigns "
                       f"(shape {state[state_of[node]][0].shape}); pass a copy")
      return ("input", input_of[node])
    if node in state_of: return ("state", state_of[node])
    if node in written: return ("fresh",) if node in held else ("temp",)
    if node.arg[0] >= start_id:
      if (key := random_key_buffers.get(node)) is not None: return ("random", key[0] - rng_start, key[1])
      return ("host", buffer_of(node).allocate().numpy().tobytes())
    return ("const", node)

  def slot(node: UOp) -> int:
    if node.op is not Ops.BUFFER: raise RuntimeError(f"internal error: TinyJit expected a buffer, got {node.op}")
    if (found := slot_of.get(node)) is None:
      found = slot_of[node] = len(kinds)
      kinds.append(kind_of(node))
      nodes.append(node)
    return found

  slot_launches = [(kernel, tuple(slot(n) for n in launch_nodes)) for kernel, launch_nodes, *_ in launches]
  # Variables the kernels took: those passed as arguments change from replay to replay; any other one is fixed at
  # its recorded value, so two recordings must agree on it (like a Python number baked into a kernel)
  var_vals: dict[str, int] = {}
  for _, _, _, *rest in launches:
    if rest and rest[0]: var_vals.update(rest[0])
  fixed_vals = tuple(sorted((name, value) for name, value in var_vals.items() if name not in arg_vals))
  state_tensors = [t for t, _ in state]
  results: list[tuple] = []
  for t in leaves:
    if any(t is s for s in state_tensors): results.append(("state", next(j for j, s in enumerate(state_tensors) if s is t)))
    elif any(t is x for x in inputs): results.append(("input", next(k for k, x in enumerate(inputs) if x is t)))
    else:
      view = None if t.uop.op is Ops.BUFFER else t.uop.arg.unbind()   # a symbolic result's lengths are bound at each replay
      results.append(("view", slot(t.uop.base), view, t.uop.dtype))
  state_writes = [slot(t.uop.base) for t in state_tensors]
  state_reads = [slot_of.get(old.base) for _, old in state]
  rng_advance = Tensor._rng_counter - rng_start
  signature = (tuple((kernel.kernel.ast, kernel.device, slots) for kernel, slots in slot_launches), tuple(kinds),
               tuple(id(t) for t in state_tensors), made_here, tuple(state_reads), tuple(state_writes), tuple(results), structure, rng_advance,
               fixed_vals)
  return _Recording(signature, kinds, nodes, slot_launches, var_vals, state_tensors, state_reads, state_writes, results, structure,
                    rng_advance, realize.assign_count, start_id)


def _disagreement(first: _Recording, second: _Recording) -> str:
  """Why two recordings can't be replayed as one capture, in words."""
  kernels_a, kernels_b = first.signature[0], second.signature[0]
  if len(kernels_a) != len(kernels_b): return f"the calls launched {len(kernels_a)} and {len(kernels_b)} kernels"
  for i, (a, b) in enumerate(zip(kernels_a, kernels_b)):
    if a[0] is not b[0] or a[1] != b[1]:
      return f"kernel {i} differs between the calls (a Python number that changes, baked into the graph? pass it as a Tensor)"
  for slot, (a, b) in enumerate(zip(first.kinds, second.kinds)):
    if a == b: continue
    if b[0] == "const" and b[1].arg[0] >= first.start_id:
      return (f"buffer {slot} (shape {b[1].arg[1]}, {b[1].dtype}) was computed by the previous call and is read without being passed in "
              "or assigned: pass it as an argument, or keep it in a tensor the function assigns")
    if a[0] == "host" and b[0] == "host": return f"the function builds a tensor from Python data that changes between calls (buffer {slot}); pass it as an argument"
    return f"buffer {slot} was {a[0]} in one call and {b[0]} in the next"
  if first.signature[-1] != second.signature[-1]:
    return (f"the values of the Variables {dict(first.signature[-1])} and {dict(second.signature[-1])} differ between the calls: "
            "pass the bound Variable as an argument of the jitted function")
  if first.signature[2:4] != second.signature[2:4]:
    return "the calls assigned different tensors (a tensor created by each call, assigned and kept alive after it?)"
  return "the calls' carried tensors, results or random numbers differ"


# ---------------------------------------------------------------- the capture

class _Generation:
  """One buffer of a fresh slot, with its BUFFER node and the VIEWs of it that tensors were given."""
  __slots__ = ("node", "buffer", "views")

  def __init__(self, node: UOp, buffer: Buffer):
    self.node, self.buffer = node, buffer
    self.views: dict[tuple[DType, ShapeTracker], UOp] = {}

  def view(self, dtype: DType, st: ShapeTracker | None) -> UOp:
    """The node a tensor of this slot holds: the BUFFER itself (st None) or a VIEW of it, made once."""
    if st is None: return self.node
    if (found := self.views.get((dtype, st))) is None: found = self.views[(dtype, st)] = UOp(Ops.VIEW, dtype, (self.node,), st)
    return found

  def shaped(self, shape: tuple[int, ...]) -> UOp:
    """The node a carried tensor of `shape` holds: what buffer_view gives, made once."""
    return self.view(self.node.dtype, None if shape == self.node.shape else ShapeTracker.from_shape(shape))

  def unused(self) -> bool:
    """True when nothing outside this generation holds its node or views (no tensor, lazy graph or cache), so a
    new value can be written into it under the same node. sys.getrefcount counts its own argument; the node is
    also held by this object and by each VIEW's sources, each VIEW by the dict and the loop variable."""
    return sys.getrefcount(self.node) == 2 + len(self.views) and all(sys.getrefcount(v) == 3 for v in self.views.values())


class _FreshSlot:
  """Buffers for a slot whose value a returned or carried tensor holds after the call: each replay writes into a
  generation that nothing outside holds any more (in a training loop, the one before last: the weights
  alternate between two), else into a new one. A tensor given an earlier result is never overwritten."""
  def __init__(self, node: UOp):
    self.device, self.size, self.dtype = node.device, node.arg[1], node.dtype
    self.generations: list[_Generation] = [_Generation(node, buffer_of(node))]

  def take(self) -> _Generation:
    for generation in self.generations:
      if generation.unused(): return generation
    node = UOp.new_buffer(self.device, self.size, self.dtype)
    generation = _Generation(node, Buffer(self.device, self.size, self.dtype).allocate())
    realize.buffers[node] = generation.buffer
    self.generations = self.generations[-(_KEPT_GENERATIONS - 1):] + [generation]
    return generation


_RECORD_AGAIN = object()


class CapturedCall:
  """The kernels of one recorded call, ready to run on new arguments."""
  def __init__(self, recording: _Recording):
    self.kinds, self.launches, self.state = recording.kinds, recording.launches, recording.state
    self.var_vals = recording.var_vals
    self.results, self.structure, self.rng_advance = recording.results, recording.structure, recording.rng_advance
    self.state_writes, self.captured_at = recording.state_writes, recording.assign_count
    self.buffers: list[Buffer | None] = [None] * len(self.kinds)   # fixed buffers: constants, host data, intermediates, keys
    self.pinned: dict[int, UOp] = {}                              # slot -> BUFFER node of constants and host data
    self.input_slots: list[tuple[int, int]] = []
    self.state_slots: list[tuple[int, int]] = []
    self.fresh: list[tuple[int, _FreshSlot]] = []
    self.random: list[tuple[int, int, int]] = []
    temps: dict[int, tuple[str, int, DType]] = {}
    for slot, (kind, node) in enumerate(zip(self.kinds, recording.nodes)):
      if kind[0] == "input": self.input_slots.append((slot, kind[1]))
      elif kind[0] == "state": self.state_slots.append((slot, kind[1]))
      elif kind[0] == "fresh": self.fresh.append((slot, _FreshSlot(node)))
      elif kind[0] == "temp":
        if (home := realize.homes.get(node)) is not None: self.buffers[slot] = home.allocate()   # memory given by its reader
        else: temps[slot] = (node.device, node.arg[1], node.dtype)
      elif kind[0] == "random":
        self.buffers[slot] = Buffer(node.device, node.arg[1], node.dtype).allocate()
        self.random.append((slot, kind[1], kind[2]))
      else:   # host data and constants stay as they are
        self.pinned[slot] = node
        self.buffers[slot] = buffer_of(node).allocate()
    # a carried tensor whose value before the call shared a slot with another one must still share it
    self.alias_checks = [(slot, j) for j, slot in enumerate(recording.state_reads) if slot is not None and self.kinds[slot] != ("state", j)]
    self.bound: list[tuple[UOp | None, UOp | None]] = [(None, None)] * len(self.state)   # per carried tensor: (node given, its base)
    self.launch_list: LaunchList | bool | None = None   # all kernels as one CPU thread-pool call (built at the first replay)
    self.asynchronous = False                            # whether that call may return before its kernels are done
    self.staged: dict[int, Buffer] = {}                  # slot -> the copy of a shared numpy argument
    self.input_positions = [slot for slot, _ in self.input_slots]
    self.variable_args: list[tuple[int, Any, int]] = []   # (slot, a launch's address array, argument) each replay rewrites
    self.value_args: list[tuple[Any, int, str]] = []       # (a launch's address array, argument, Variable name) likewise
    self.counts = (0, 0)                                   # FLOPs and bytes of one replay, for GlobalCounters
    self.memory = plan_memory([slots for _, slots in self.launches], temps)
    for slot, pooled in self.memory.buffers.items(): self.buffers[slot] = pooled.allocate()
    if DEBUG >= 1:
      print(f"TinyJit: captured {len(self.launches)} kernels, {len(self.input_slots)} inputs, {len(self.state)} carried tensors, "
            f"{len(self.results)} results")
    if DEBUG >= 2: print(f"TinyJit memory: {self.memory.summary()}")

  def valid(self) -> bool:
    """False when a constant the capture reads was replaced by an assign since (the function must be recorded again)."""
    return all(realize.replaced_at.get(node, 0) <= self.captured_at for node in self.pinned.values())

  def replay(self, inputs: list[Tensor], arg_vals: dict[str, int] | None = None) -> Any:
    if not self.valid(): return _RECORD_AGAIN
    var_vals = {**self.var_vals, **(arg_vals or {})}
    table = list(self.buffers)
    for slot, k in self.input_slots: table[slot] = buffer_of(inputs[k].uop.base)
    state_bases = [base if t.uop is given else self._current_base(t) for t, (given, base) in zip(self.state, self.bound)]
    for slot, j in self.state_slots: table[slot] = buffer_of(state_bases[j])
    for slot, j in self.alias_checks:
      if table[slot] is not buffer_of(state_bases[j]): return _RECORD_AGAIN
    generations = {slot: fresh.take() for slot, fresh in self.fresh}
    for slot, generation in generations.items(): table[slot] = generation.buffer
    counter = Tensor._rng_counter
    for slot, offset, streams in self.random: table[slot].copyin(random_keys(Tensor._seed, counter + offset, streams))
    Tensor._rng_counter = counter + self.rng_advance
    # PROFILE=1 / VIZ=1 (minigrad/viz/): kernel by kernel, so each launch is timed and recorded
    if DEBUG >= 1 or viz.observing or not self._run_as_one_list(table, var_vals):
      for kernel, slots in self.launches: launch(kernel, [table[s] for s in slots], var_vals)

    def node_of(slot: int) -> UOp:
      kind = self.kinds[slot]
      if kind[0] == "input": return inputs[kind[1]].uop.base
      if kind[0] == "state": return state_bases[kind[1]]
      return generations[slot].node if slot in generations else self.pinned[slot]
    for j, (t, slot) in enumerate(zip(self.state, self.state_writes)):
      old = t.uop
      if (generation := generations.get(slot)) is not None: node, t.uop = generation.node, generation.shaped(t.shape)
      else: node = node_of(slot); t.uop = buffer_view(node, t.shape)
      self.bound[j] = (t.uop, node)
      realize.note_assign(t, old)
    leaves = []
    for result in self.results:
      if result[0] == "state": leaves.append(self.state[result[1]])
      elif result[0] == "input": leaves.append(inputs[result[1]])
      else:
        _, slot, view, dtype = result
        if view is not None and view.symbolic: view = view.rebind(var_vals)   # this call's lengths
        if slot in generations: leaves.append(Tensor(generations[slot].view(dtype, view)))
        else: leaves.append(Tensor(node_of(slot) if view is None else UOp(Ops.VIEW, dtype, (node_of(slot),), view)))
    return _unflatten(self.structure, iter(leaves))

  def _run_as_one_list(self, table: list[Buffer], var_vals: dict[str, int]) -> bool:
    """Run every kernel with one call into the CPU thread pool, when all of them are CPU kernels (False: they
    aren't, nothing ran). The list is built at the first replay; later ones only rewrite the buffer addresses of
    arguments, carried tensors and fresh results, the slots that change from call to call."""
    if self.launch_list is None:
      entries = [kernel.pool_launch([table[s] for s in slots], var_vals) for kernel, slots in self.launches]
      if any(entry is None for entry in entries):
        self.launch_list = False
        return False
      variable = {slot for slot, _ in self.input_slots + self.state_slots} | {slot for slot, _ in self.fresh}
      self.launch_list = LaunchList(entries)
      addresses = self.launch_list.addresses
      self.variable_args = [(slots[j], addresses[i], arg) for i, (kernel, slots) in enumerate(self.launches)
                            for arg, j in enumerate(kernel.buffer_args) if slots[j] in variable]
      # the values of Variables sit after each kernel's buffer addresses: rewritten at every replay too
      self.value_args = [(addresses[i], len(kernel.buffer_args) + j, name) for i, (kernel, _) in enumerate(self.launches)
                         for j, (name, _, _) in enumerate(kernel.variables)]
      self.counts = (sum(kernel.flops for kernel, _ in self.launches), sum(table[s].nbytes for _, slots in self.launches for s in slots))
      # compiled kernels only: a host launch (an MPI allreduce) must run in the caller's thread, before the call returns
      self.asynchronous = all(isinstance(getattr(kernel.program, "entry", None), int) for kernel, _ in self.launches)
    if self.launch_list is False: return False
    # the call may return while its kernels run (minigrad/engine/eager.py says how), with shared numpy arguments copied
    asynchronous = self.asynchronous and worth_submitting(*self.counts) and copy_shared_memory(table, self.input_positions, self.staged)
    for slot, addresses, arg in self.variable_args: addresses[arg] = table[slot].opaque   # (waits for the last replay)
    for addresses, arg, name in self.value_args: addresses[arg] = var_vals[name]
    if asynchronous: self.launch_list.submit(table, self)
    else: self.launch_list.run()
    GlobalCounters.kernel_count += len(self.launches)
    GlobalCounters.global_ops += self.counts[0]
    GlobalCounters.global_mem += self.counts[1]
    return True

  @staticmethod
  def _current_base(t: Tensor) -> UOp:
    """The buffer a carried tensor holds now, as one contiguous array (realized first if it was given a lazy value)."""
    if (base := _plain_base(t.uop)) is None:
      with Tensor.no_grad(): t.uop = t.contiguous().realize().uop
      base = t.uop.base
    return base


# ---------------------------------------------------------------- the decorator

class _Entry:
  """The recordings and the capture of one signature."""
  def __init__(self) -> None:
    self.previous: _Recording | None = None
    self.recordings = 0
    self.captured: CapturedCall | None = None

  def add(self, recording: _Recording) -> None:
    self.recordings += 1
    if self.previous is not None and self.previous.signature == recording.signature:
      self.previous, self.captured = None, CapturedCall(recording)
      return
    if self.previous is not None and self.recordings >= MAX_RECORDINGS:
      raise JitError(f"TinyJit: {self.recordings} calls were recorded and no two in a row launched the same kernels on the same "
                     f"kinds of buffers, so the function can't be replayed: {_disagreement(self.previous, recording)}. "
                     "Run it without TinyJit (or JIT=0).")
    self.previous = recording.forget_buffers()


class TinyJit:
  """Decorator: `@TinyJit def step(x, y): ...`. See the module docstring for what a replay does and doesn't do."""
  def __init__(self, fn: Callable):
    if not callable(fn): raise TypeError(f"TinyJit wraps a function, got {type(fn).__name__}")
    functools.update_wrapper(self, fn, updated=())   # name and docstring (not fn's __dict__)
    self.fn = fn
    self.entries: OrderedDict[Hashable, _Entry] = OrderedDict()

  def __get__(self, obj: Any, owner: type | None = None) -> Any:
    """As a method decorator: the instance is the first (hashed) argument."""
    return self if obj is None else functools.partial(self.__call__, obj)

  def reset(self) -> None:
    """Drop every capture: the next calls are recorded again."""
    self.entries.clear()

  @property
  def captured(self) -> list[CapturedCall]:
    return [entry.captured for entry in self.entries.values() if entry.captured is not None]

  def __call__(self, *args: Any, **kwargs: Any) -> Any:
    if not JIT or realize.launch_recorder is not None: return self.fn(*args, **kwargs)
    args = tuple(_prepare_argument(a, str(i)) for i, a in enumerate(args))
    kwargs = {name: _prepare_argument(v, repr(name)) for name, v in kwargs.items()}
    named = [(str(i), a) for i, a in enumerate(args)] + sorted(kwargs.items())
    inputs = [v for _, v in named if isinstance(v, Tensor)]
    key = _signature(named, inputs)
    if (entry := self.entries.get(key)) is None:
      entry = self.entries[key] = _Entry()
      if len(self.entries) > MAX_SIGNATURES: self.entries.popitem(last=False)
    self.entries.move_to_end(key)
    start = trace.now() if viz.profiling else 0.0   # PROFILE=1: a span for each replay and each recorded call
    arg_vals = _argument_values(named)
    if entry.captured is not None:
      if (result := entry.captured.replay(inputs, arg_vals)) is not _RECORD_AGAIN:
        if viz.profiling: trace.complete(f"TinyJit replay {getattr(self, '__name__', 'function')}", "jit", start, kernels=len(entry.captured.launches))
        return result
      if DEBUG >= 1: print("TinyJit: a constant of the capture changed (or carried tensors share memory differently): recording again")
      entry = self.entries[key] = _Entry()
    returned, recording = _record(self.fn, args, kwargs, inputs, arg_vals)
    entry.add(recording)
    if viz.profiling: trace.complete(f"TinyJit record {getattr(self, '__name__', 'function')}", "jit", start, captured=entry.captured is not None)
    return returned
