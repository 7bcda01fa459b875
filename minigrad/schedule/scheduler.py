"""The scheduler: cut a lazy tensor graph into kernels.

Input: the tensor-graph UOps the user wants realized. Output: a list of `ScheduleItem(ast, bufs)` in run order,
and for each requested UOp the buffer-backed UOp it becomes once the schedule has run.

Which nodes get their own buffer ("realized"):
  - what was asked for, CONTIGUOUS nodes,
  - a reduce used by more than one consumer, or fused into two kernels,
  - an elementwise computation a reduce's input would redo 8 or more times per element, when it takes 8 or more
    ops per element (a BatchNorm backward under a convolution's input gradient; see _Fusion._recomputed),
  - a reduce seen through a view other than a reshape, unless (on CPU-like devices) the view only broadcasts its
    result back along the axes it reduced, and the axes it keeps are the kernel's outermost loops: then it is a
    side reduce of the consuming kernel (see KernelPlan), computed once per outer loop trip. softmax is one
    kernel: row max, row sum and the output, `(x - x.mean(1, keepdim=True)).square().sum(1)` too.
Everything else fuses: elementwise ops and movement ops (VIEWs) fold into the consumer's indexing, so
`(x.T + 1)` is one kernel that reads x transposed and `(a @ b).relu() + bias` is one reduce kernel.
Large matmul operands get a packed copy first (minigrad.schedule.packing); elementwise kernels over the same
elements that share data become one kernel with several outputs (minigrad.schedule.multi_output).
Each rule that realizes a node says why (`_Fusion.reasons`); minigrad.viz.boundaries turns that into the
`kernel boundary:` lines of each kernel (DEBUG>=3, `ScheduleItem.reasons`, the VIZ=1 report).

A kernel AST is SINK(STORE(DEFINE_GLOBAL 0, VIEW st_out, value), ...) where value is built from ALU/CAST ops,
REDUCE_AXIS, LOAD(DEFINE_GLOBAL i, VIEW st), CONST(VIEW st), ARANGE(VIEW st) and VALID(VIEW st). Every ShapeTracker in one
kernel has the same rank: loads under the main reduce see its full input shape, everything above sees it with
the reduce axes set to 1; each side reduce has dims of its own after those, where only its loads have size > 1.
"""
from __future__ import annotations
from dataclasses import dataclass, field
import dataclasses
import time
from minigrad.dtype import dtypes
from minigrad.helpers import prod
from minigrad.uop.ops import UOp, Ops, GroupOp, NodeTable, toposort
from minigrad.uop.shapetracker import ShapeTracker, View, row_major_strides, view_uop
from minigrad.uop import variable
from minigrad.uop.variable import extents_of, symbolic_shape, unbind
from minigrad.schedule.packing import pack_operands
from minigrad.schedule.multi_output import merge_elementwise
from minigrad.schedule import reuse
from minigrad import viz
from minigrad.viz import boundaries, errors, report, source, trace


@dataclass(frozen=True)
class ScheduleItem:
  ast: UOp                 # SINK of STOREs (one per output)
  bufs: tuple[UOp, ...]    # BUFFER nodes in DEFINE_GLOBAL order: the outputs first, then the inputs
  outputs: int = 1         # how many of `bufs` the kernel writes (several: minigrad.schedule.multi_output)
  var_vals: tuple[tuple[str, int], ...] = ()   # (name, value) of the Variables bound in the graph: the kernel's int arguments

  @property
  def device(self) -> str: return self.bufs[0].device

  @property
  def reasons(self) -> tuple[str, ...]:
    """Why this kernel starts and ends where it does (kept per AST, so a replayed schedule has them too; no key has them)."""
    return boundaries.reasons_of(self.ast)


# Realized nodes: a tensor-graph node -> the buffer-backed node holding its value. Documented cache: lets a lazy
# graph built before a realize reuse the result instead of recomputing it. Kept on the nodes: entries die with the
# graph that mentions them.
realized = NodeTable("realized_as")

def buffer_view(buffer: UOp, shape: tuple[int, ...]) -> UOp:
  """A tensor-graph node reading `buffer` as a contiguous array of `shape`."""
  if shape == buffer.shape: return buffer
  return UOp(Ops.VIEW, buffer.dtype, (buffer,), ShapeTracker.from_shape(shape))


def _is_leaf(u: UOp) -> bool: return u.op in (Ops.BUFFER, Ops.CONST, Ops.ARANGE, Ops.DEVICE)


def _to_compute(target: UOp) -> UOp | None:
  """The node whose value must be stored for `target`, or None when nothing needs computing."""
  base = target.base
  if base.op is Ops.BUFFER: return None
  if base is not target and base.op not in (Ops.CONST, Ops.ARANGE) and target.arg.contiguous and target.size == base.size: return base
  return target


@dataclass
class KernelPlan:
  """What one kernel fuses. `main`: a reduce seen through a plain reshape; the kernel's base shape is its input
  shape (outputs see the reduced axes as 1). `sides`: reduces whose result is broadcast back along the axes they
  reduced (a softmax's row max and row sum), each given its own loop dims after the base dims: side reduce ->
  (the base dims its kept axes run along, its own extra dims). The base dims a side reduce depends on are the
  outermost loops, so the linearizer computes it once per row, before the loops over the row open."""
  main: UOp | None = None
  sides: dict[UOp, tuple[tuple[int, ...], tuple[int, ...]]] = field(default_factory=dict)
  base_rank: int = 0

  @property
  def rank(self) -> int: return self.base_rank + sum(len(extra) for _, extra in self.sides.values())

  @property
  def reduces(self) -> list[UOp]: return ([self.main] if self.main is not None else []) + list(self.sides)


# devices whose kernels are loops: a side reduce is hoisted out of the row's loops (GPU threads would each redo it)
SIDE_REDUCE_DEVICES = ("CPU", "LLVM")
# an elementwise computation a reduce's input would redo this many times per element, at this many ops per element
# (EXPENSIVE_OPS count more; so does a padded view, a gated load: bounds checks, a select), is realized first
# (see _Fusion._recomputed)
RECOMPUTE_FACTOR, RECOMPUTE_WORK = 8, 8
# ... or cheap work (from MIN_CHEAP_WORK ops) redone so often that it adds up to RECOMPUTE_TOTAL ops per element: a
# relu's backward (h > 0) * dy under the weight gradient dy.T @ x, once per input feature
MIN_CHEAP_WORK, RECOMPUTE_TOTAL = 2, 512
EXPENSIVE_OPS = {Ops.FDIV: 4, Ops.RECIP: 4, Ops.SQRT: 4, Ops.EXP2: 4, Ops.LOG2: 4, Ops.SIN: 4, Ops.IDIV: 4, Ops.MOD: 4}
GATED_LOAD_WORK = 4


class _Fusion:
  """Decides which nodes are realized, walking each kernel's graph with the view each node is seen through."""
  def __init__(self, roots: list[UOp]):
    nodes = _walk(roots)
    consumers: dict[UOp, set[UOp]] = {}
    for n in nodes:
      for s in n.src: consumers.setdefault(s, set()).add(n)
    self.realize: dict[UOp, None] = {}
    self.reasons: dict[UOp, dict[str, None]] = {}   # why each node is realized (minigrad/viz/boundaries.py prints them)
    requested = boundaries.requested()
    for root in roots: self._realize(root, requested)
    for n in nodes:
      if n.op is Ops.CONTIGUOUS and n not in self.realize: self._realize(n, "CONTIGUOUS: .contiguous() asks for a buffer of its own")
      if n.op is Ops.REDUCE_AXIS and len(consumers.get(n, ())) > 1: self._realize(n, f"a reduce read by {len(consumers[n])} ops: stored once")
      if n.op is Ops.SORT: self._realize_sort(n)
    # walking a kernel can realize more nodes (new kernels to walk), and a reduce fused into two kernels
    # would be computed twice: realize it too. Repeat until nothing changes.
    self.plans: dict[UOp, KernelPlan] = {}
    while True:
      count_before = len(self.realize)
      fused_into: dict[UOp, list[UOp]] = {}
      for root in list(self.realize):
        plan = self.plans[root] = self._fuse(root)
        for reduce in plan.reduces: fused_into.setdefault(reduce, []).append(root)
      for reduce, kernels in fused_into.items():
        if len(kernels) > 1: self._realize(reduce, f"a reduce that {len(kernels)} kernels would each compute: stored once")
      if len(self.realize) == count_before: break

  def _realize(self, node: UOp, reason: str) -> None:
    self.realize[node] = None
    self.reasons.setdefault(node, {})[reason] = None

  def _realize_sort(self, node: UOp) -> None:
    """A SORT is a kernel of its own that reads whole rows of a buffer (minigrad/codegen/sort_kernel.py)."""
    if node not in self.realize: self._realize(node, "SORT: a sort is a kernel of its own")
    if node.src[0].op is not Ops.BUFFER: self._realize(node.src[0], "the input of a SORT: its rows in a buffer")

  def _stops(self, node: UOp, root: UOp) -> bool: return (node in self.realize and node is not root) or _is_leaf(node)

  def _fuse(self, root: UOp) -> KernelPlan:
    """Walk one kernel's graph; realize the reduces that can't join it. Returns what it fuses."""
    start = root.src[0] if root.op is Ops.CONTIGUOUS else root
    plan = KernelPlan(main=self._main_reduce(root, start))
    base = plan.main.src[0].shape if plan.main is not None else root.shape
    plan.base_rank = len(base)
    top_view = ShapeTracker.from_shape(root.shape)
    if plan.main is not None and plan.main.shape != root.shape: top_view = top_view.reshape(plan.main.shape)
    # a region: for each axis of the coordinates a node is seen in, the base dim it runs along (None: a reduced axis)
    main_axes = set(plan.main.arg[1]) if plan.main is not None else set()
    top_region = tuple(None if a in main_axes else a for a in range(len(base)))
    side_ok = root.device in SIDE_REDUCE_DEVICES
    # (node, the view from the kernel's loops to it, its region, whether it is inside the main reduce's input)
    stack: list[tuple[UOp, ShapeTracker, tuple[int | None, ...], bool]] = [(start, top_view, top_region, False)]
    seen: set[tuple[UOp, ShapeTracker, tuple[int | None, ...], bool]] = set()
    while stack:
      item = stack.pop()
      if item in seen: continue
      seen.add(item)
      node, view, region, reduced = item
      if self._stops(node, root): continue
      if node.op is Ops.VIEW:
        if reduced and self._recomputed(node.src[0], node.arg + view, root):
          times = prod((node.arg + view).shape) // max(node.src[0].size, 1)
          self._realize(node.src[0], f"an elementwise input a reduce would compute {times} times per element: a kernel of its own")
          continue
        stack.append((node.src[0], node.arg + view, region, reduced))
      elif node.op is Ops.REDUCE_AXIS:
        if node is plan.main:
          # seen through another view too, or from inside a side reduce (which loops over other dims): a kernel of its own
          if not _reshapes(view, node): self._realize(node, "a reduce read through a view that is not a reshape (a permute, expand, pad or shrink of its result)")
          elif region != top_region: self._realize(node, "a reduce read from inside another reduce's loop")
          else: stack.append((node.src[0], ShapeTracker.from_shape(node.src[0].shape), top_region, True))
          continue
        kept = _broadcast_back(node, view, region) if side_ok else None
        if kept is None or (node in plan.sides and plan.sides[node][0] != kept):
          self._realize(node, _side_reduce_refused(node, kept, side_ok))
          continue
        if node not in plan.sides: plan.sides[node] = (kept, tuple(range(plan.rank, plan.rank + len(node.arg[1]))))
        stack.append((node.src[0], ShapeTracker.from_shape(node.src[0].shape), _side_region(node, kept), False))
      else: stack.extend((s, view, region, reduced) for s in node.src)
    return plan

  def _recomputed(self, node: UOp, view: ShapeTracker, root: UOp) -> bool:
    """Would fusing `node` into a reduce's input, seen through `view`, compute each of its elements RECOMPUTE_FACTOR
    or more times over, when it takes RECOMPUTE_WORK or more ops per element (or RECOMPUTE_TOTAL ops per element in
    all)? Then it gets a kernel of its own: the reduce reads it as a plain operand, SIMD rows without scalar work. (A
    convolution's input gradient reads the gradient of the layer above once per filter tap and input channel: a
    BatchNorm backward fused there was computed 144 times per element. A cat, a sum of padded views, under a
    matmul: each of its elements took one gated load per input, and no SIMD layout suits them all. Attention's
    softmax under the product with v was computed once per head dim: 8x slower than its own kernel.) The work counted
    stops at reduces: what they compute is not redone per element."""
    if node.op not in GroupOp.Elementwise or prod(view.shape) < RECOMPUTE_FACTOR * node.size: return False
    work, stack, seen = 0, [node], set()
    while stack:
      n = stack.pop()
      if n in seen or self._stops(n, root): continue
      seen.add(n)
      if n.op is Ops.REDUCE_AXIS: continue   # its own work is done once per output (a side reduce or a kernel)
      if n.op in GroupOp.ALU: work += EXPENSIVE_OPS.get(n.op, 1)
      if n.op is Ops.VIEW and any(v.mask is not None for v in n.arg.views): work += GATED_LOAD_WORK
      stack.extend(n.src)
    factor = prod(view.shape) // max(node.size, 1)
    return work >= RECOMPUTE_WORK or (work >= MIN_CHEAP_WORK and work * factor >= RECOMPUTE_TOTAL)

  def _main_reduce(self, root: UOp, start: UOp) -> UOp | None:
    """The first reduce reached from the root through reshapes only (not through another reduce)."""
    stack, seen = [(start, ShapeTracker.from_shape(root.shape))], set()
    while stack:
      node, view = item = stack.pop()
      if item in seen or self._stops(node, root): continue
      seen.add(item)
      if node.op is Ops.VIEW: stack.append((node.src[0], node.arg + view))
      elif node.op is Ops.REDUCE_AXIS:
        if _reshapes(view, node): return node
      else: stack.extend((s, view) for s in node.src)
    return None


def _side_reduce_refused(reduce: UOp, kept: tuple[int, ...] | None, side_ok: bool) -> str:
  """Why a reduce read through a view other than a reshape could not be a side reduce of the kernel reading it."""
  if not side_ok: return f"a reduce read through a view that is not a reshape ({reduce.device} kernels have no side reduces)"
  if kept is None: return "a reduce read through a view that neither reshapes it nor broadcasts it back along its reduced axes over the outermost loops"
  return "a reduce broadcast back along two different sets of loops in one kernel"


def _reshapes(view: ShapeTracker, node: UOp) -> bool:
  """Does `view` read all of `node` in order, as a plain reshape? (A contiguous view of fewer elements reads a prefix:
  the first row of a reduce's output seen as (1, 1) is contiguous too.)"""
  return view.with_extents(None).contiguous and prod(view.shape) == node.size   # (a symbolic one reads the same layout)


def _side_region(reduce: UOp, kept: tuple[int, ...]) -> tuple[int | None, ...]:
  """The region of a side reduce's input: its kept axes run along base dims `kept` (in order), the rest are its own."""
  kept_axes = [a for a, size in enumerate(reduce.shape) if size > 1]
  return tuple(kept[kept_axes.index(a)] if a in kept_axes else None for a in range(len(reduce.shape)))


def _broadcast_back(reduce: UOp, view: ShapeTracker, region: tuple[int | None, ...]) -> tuple[int, ...] | None:
  """When `view` (from the current coordinates to the reduce's output) only broadcasts the reduce's result back
  along the axes it reduced (x - x.max(1, keepdim=True)), the base dims its kept axes run along; else None.
  Those must be the outermost base dims, so the reduce is computed once per outer loop trip."""
  if len(view.views) != 1: return None
  v = view.views[0]
  if v.mask is not None or v.offset != 0: return None
  out_shape = reduce.shape
  out_strides = row_major_strides(out_shape)
  kept, used = [], set()
  for axis, size in enumerate(out_shape):
    if size == 1: continue
    dims = [d for d in range(len(v.shape)) if d not in used and v.strides[d] == out_strides[axis] and v.shape[d] == size]
    if len(dims) != 1 or region[dims[0]] is None: return None
    used.add(dims[0])
    kept.append(region[dims[0]])
  if any(stride != 0 for d, stride in enumerate(v.strides) if d not in used): return None
  if not kept or sorted(kept) != list(range(len(kept))): return None
  return tuple(kept)


def _walk(roots: list[UOp]) -> list[UOp]:
  """The tensor-graph nodes reachable from roots, stopping at buffers."""
  order, seen, stack = [], set(), list(roots)
  while stack:
    n = stack.pop()
    if n in seen: continue
    seen.add(n)
    order.append(n)
    if n.op is not Ops.BUFFER: stack.extend(n.src)
  return order


class _KernelBuilder:
  """Builds one kernel AST from a realized root, turning realized inputs into LOADs."""
  def __init__(self, root: UOp, plan: KernelPlan, buffers: dict[UOp, UOp]):
    self.root, self.plan, self.buffers = root, plan, buffers
    self.inputs: list[UOp] = []   # BUFFER nodes, DEFINE_GLOBAL i+1 reads inputs[i]
    self.memo: dict[tuple[UOp, ShapeTracker], UOp] = {}
    self.extra = (1,) * (plan.rank - plan.base_rank)   # side reduces' dims, size 1 where they aren't looped over

  def build(self, output: UOp) -> UOp:
    if self.root.op is Ops.SORT: return self._sort_kernel(output)
    value_root = self.root.src[0] if self.root.op is Ops.CONTIGUOUS else self.root
    # shapes with variable-length dims as expressions over DEFINE_VARs: the kernel loops to them, whatever their values
    root_shape = symbolic_shape(self.root, bound=False)
    kernel_shape = symbolic_shape(self.plan.main, bound=False) if self.plan.main is not None else root_shape
    root_view = ShapeTracker.from_shape(root_shape).reshape(kernel_shape + self.extra)
    value = self._value(value_root, root_view)
    out_global = UOp(Ops.DEFINE_GLOBAL, output.dtype.ptr(), (), 0)
    store = UOp(Ops.STORE, dtypes.void, (out_global, UOp(Ops.VIEW, arg=ShapeTracker.from_shape(kernel_shape + self.extra)), value))
    return UOp(Ops.SINK, dtypes.void, (store,))

  def _sort_kernel(self, output: UOp) -> UOp:
    """SINK(STORE(out, row starts, SORT(LOAD(in, row starts)))): one loop over the rows; the SORT reads and writes a
    whole row of `arg` words from where each view points (a view of shape (rows, 1) with the row stride)."""
    source = self.root.src[0]
    length = self.root.shape[-1]
    rows = self.root.size // length
    if not isinstance(length, int) or (extents_of(self.root) is not None): raise NotImplementedError("SORT of a variable-length row")
    row_starts = ShapeTracker.from_shape((rows, length)).shrink(((0, rows), (0, 1)))
    words = self._load(self.buffers.get(source, source), row_starts)
    value = UOp(Ops.SORT, self.root.dtype, (words,), length)
    out_global = UOp(Ops.DEFINE_GLOBAL, output.dtype.ptr(), (), 0)
    return UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (out_global, UOp(Ops.VIEW, arg=row_starts), value)),))

  def _side_view(self, reduce: UOp) -> ShapeTracker:
    """Kernel coordinates -> the side reduce's input: kept axes along their base dims, reduced axes along its own dims."""
    kept, extra = self.plan.sides[reduce]
    in_shape = reduce.src[0].shape
    in_strides = row_major_strides(in_shape)
    shape, strides = [1] * self.plan.rank, [0] * self.plan.rank
    for axis, dim in zip([a for a, size in enumerate(reduce.shape) if size > 1], kept): shape[dim], strides[dim] = in_shape[axis], in_strides[axis]
    for axis, dim in zip(reduce.arg[1], extra): shape[dim], strides[dim] = in_shape[axis], in_strides[axis]
    view = ShapeTracker((View.create(shape, strides),))
    if (in_extents := extents_of(reduce.src[0])) is None: return view
    # variable-length axes of the input (symbolic shapes): the loops over their dims run to the Variable
    extents: list[UOp | None] = [None] * self.plan.rank
    for axis, dim in zip([a for a, size in enumerate(reduce.shape) if size > 1], kept): extents[dim] = in_extents[axis]
    for axis, dim in zip(reduce.arg[1], extra): extents[dim] = in_extents[axis]
    return view.with_extents(tuple(None if e is None else unbind(e) for e in extents))

  def _load(self, buffer: UOp, view: ShapeTracker) -> UOp:
    if buffer not in self.inputs: self.inputs.append(buffer)
    glob = UOp(Ops.DEFINE_GLOBAL, buffer.dtype.ptr(), (), self.inputs.index(buffer) + 1)
    return UOp(Ops.LOAD, buffer.dtype, (glob, UOp(Ops.VIEW, arg=view)))

  def _value(self, start: UOp, start_view: ShapeTracker) -> UOp:
    """Iterative post-order build of (node, view) pairs: deep elementwise chains don't hit the recursion limit."""
    stack: list[tuple[UOp, ShapeTracker, bool]] = [(start, start_view, False)]
    while stack:
      node, view, children_ready = stack.pop()
      key = (node, view)
      if key in self.memo: continue
      if node is not self.root and node in self.buffers:
        self.memo[key] = self._load(self.buffers[node], view)
        continue
      if node.op is Ops.BUFFER:
        self.memo[key] = self._load(node, view)
        continue
      if node.op in (Ops.CONST, Ops.ARANGE):   # leaves computed in the kernel from the view
        self.memo[key] = UOp(node.op, node.dtype, (UOp(Ops.VIEW, arg=view),), node.arg)
        continue
      children = self._children(node, view)
      if not children_ready:
        stack.append((node, view, True))
        stack.extend((c, v, False) for c, v in children if (c, v) not in self.memo)
        continue
      built = tuple(self.memo[c] for c in children)
      if node.op is Ops.VIEW:
        inner = built[0]
        has_mask = any(v.mask is not None for v in node.arg.views)
        if has_mask and inner.op not in (Ops.LOAD, Ops.CONST, Ops.ARANGE):
          valid = UOp(Ops.VALID, dtypes.bool, (UOp(Ops.VIEW, arg=children[0][1]),))
          inner = valid.where(inner, inner.const_like(0))
        self.memo[key] = inner
      elif node.op is Ops.REDUCE_AXIS:
        axes = self.plan.sides[node][1] if node in self.plan.sides else node.arg[1]
        self.memo[key] = UOp(Ops.REDUCE_AXIS, node.dtype, built, (node.arg[0], axes))
      elif node.op in GroupOp.Elementwise: self.memo[key] = node.replace(src=built)
      else: raise RuntimeError(f"scheduler can't put {node.op} inside a kernel")
    return self.memo[(start, start_view)]

  def _children(self, node: UOp, view: ShapeTracker) -> list[tuple[UOp, ShapeTracker]]:
    if node.op is Ops.VIEW: return [(node.src[0], node.arg + view)]
    if node.op is Ops.REDUCE_AXIS:
      if node in self.plan.sides: return [(node.src[0], self._side_view(node))]
      if not view.with_extents(None).contiguous: raise RuntimeError(f"internal error: reduce fused through a non-reshape view {view}")
      src_shape = symbolic_shape(node.src[0], bound=False)
      return [(node.src[0], ShapeTracker.from_shape(src_shape).reshape(src_shape + self.extra))]
    return [(s, view) for s in node.src]


def create_schedule(targets: list[UOp], structure: reuse.Structure | None = None) -> tuple[list[ScheduleItem], dict[UOp, UOp], dict[UOp, UOp]]:
  """Kernels (in run order) that compute `targets`; what each target becomes once they ran; and the nodes
  those kernels store, for `mark_realized` to record after the run (never before: a schedule may not run).
  A graph of a structure scheduled before gets that schedule on its own buffers (minigrad.schedule.reuse);
  `structure`, when the caller has it, is `reuse.Structure(targets, realized)`."""
  begin = time.perf_counter() if viz.profiling else 0.0
  if structure is None: structure = reuse.Structure(targets, realized)   # earlier results read from their buffers
  if (found := reuse.replay(structure, ScheduleItem)) is not None:
    items, becomes, stored = found
    if values := bound_variables(structure.nodes):   # the recipe's symbolic views hold the values of the call that recorded it
      items = _with_values(items, values)
      becomes, stored = [_rebound(u, values) for u in becomes], {node: _rebound(view, values) for node, view in stored.items()}
    if viz.profiling: trace.complete("schedule (replayed)", "schedule", begin, kernels=len(items))
    if viz.reporting: report.replayed(items)
    return items, dict(zip(targets, becomes)), stored
  start = time.perf_counter()
  graphs = _substitute_realized(targets)
  if any(g is not t for g, t in zip(graphs, targets)): structure = reuse.Structure(graphs)   # the graph scheduled
  inlined, origin = _inline_calls(graphs) if any(n.op is Ops.CALL for n in structure.nodes) else (graphs, {})
  items, becomes, stored = _schedule(dict(zip(targets, inlined)))
  if origin: stored = _stored_of_graph(stored, origin, structure.index)
  reuse.record(structure, items, [becomes[t] for t in targets], stored, time.perf_counter() - start)
  if values := bound_variables(structure.nodes): items = _with_values(items, values)
  if viz.profiling: trace.complete("schedule", "schedule", begin, kernels=len(items))
  return items, becomes, stored


def _schedule(rewritten: dict[UOp, UOp]) -> tuple[list[ScheduleItem], dict[UOp, UOp], dict[UOp, UOp]]:
  """create_schedule for targets (keys) whose graphs (values) read earlier results from their buffers."""
  roots = list(dict.fromkeys(r for t in rewritten.values() if (r := _to_compute(t)) is not None))
  if not roots: return [], rewritten, {}
  fusion = _Fusion(roots)
  order = [n for n in toposort(roots) if n in fusion.realize]   # run order: each after what it reads
  buffers: dict[UOp, UOp] = {n: UOp.new_buffer(n.device, n.size, n.dtype) for n in order}
  items = []
  for node in order:
    builder = _KernelBuilder(node, fusion.plans[node], buffers)
    try: ast = builder.build(buffers[node])
    except Exception as error:   # say which tensor op (and, with source lines captured, which user's line) it was
      errors.add_node_context(error, node)
      raise
    items.append(ScheduleItem(ast, (buffers[node], *builder.inputs)))
  items = merge_elementwise(pack_operands(items, ScheduleItem), ScheduleItem)
  fused = boundaries.record_schedule(items, order, buffers, fusion.reasons)
  if viz.reporting and fused is not None: report.scheduled(items, order, buffers, fused)
  stored = {node: _stored_view(buffers[node], node) for node in order}
  becomes: dict[UOp, UOp] = {}
  for original, t in rewritten.items():
    if t in stored: becomes[original] = stored[t]
    elif t.base in stored: becomes[original] = UOp(Ops.VIEW, t.dtype, (buffers[t.base],), t.arg)
    else: becomes[original] = t
  return items, becomes, stored


def _stored_view(buffer: UOp, node: UOp) -> UOp:
  """The buffer-backed node holding `node`'s value: a variable-length dim keeps its size expression (the buffer is
  laid out for the largest size)."""
  if (extents := extents_of(node)) is None: return buffer_view(buffer, node.shape)
  return UOp(Ops.VIEW, buffer.dtype, (buffer,), ShapeTracker.from_shape(node.shape).with_extents(extents))


def _rebound(u: UOp, values: dict[str, int]) -> UOp:
  """A replayed buffer view with its Variables bound to this call's values."""
  if u.op is not Ops.VIEW or not u.arg.symbolic: return u
  return UOp(Ops.VIEW, u.dtype, u.src, u.arg.rebind(values))


def bound_variables(nodes: list[UOp]) -> dict[str, int]:
  """name -> value of every Variable bound in the VIEWs among `nodes` (an error when one name has two values); empty
  at once while no Variable exists."""
  values: dict[str, int] = {}
  if not variable.state["in_use"]: return values
  for n in nodes:
    if n.op is Ops.VIEW and n.arg.symbolic: n.arg.bound_values(values)
  return values


def _with_values(items: list[ScheduleItem], values: dict[str, int]) -> list[ScheduleItem]:
  """The items with the values of the graph's bound Variables: every kernel's int arguments come from them."""
  var_vals = tuple(sorted(values.items()))
  return [dataclasses.replace(item, var_vals=var_vals) for item in items]


def _substitute_realized(targets: list[UOp]) -> list[UOp]:
  """The targets' graphs with each node computed before (in `realized`) replaced by the buffer view holding it, the
  nodes above rebuilt: one walk over all of them, which mostly overlap (a training step's weights and optimizer
  state share the whole backward graph). The walk stops at the first realized node on each path."""
  if not realized: return list(targets)
  done: dict[UOp, UOp] = {}
  stack: list[tuple[UOp, bool]] = [(t, False) for t in targets]
  while stack:
    node, sources_done = stack.pop()
    if node in done: continue
    if not sources_done:
      if (value := realized.get(node)) is not None: done[node] = value
      elif node.op is Ops.BUFFER: done[node] = node
      else:
        stack.append((node, True))
        stack.extend((s, False) for s in node.src if s not in done)
      continue
    src = tuple(done[s] for s in node.src)
    done[node] = node if all(new is old for new, old in zip(src, node.src)) else node.replace(src=src)
    if viz.capturing: source.carry(node, done[node])   # the rebuilt node keeps the user's line
  return [done[t] for t in targets]


def _inline_calls(graphs: list[UOp]) -> tuple[list[UOp], dict[UOp, UOp]]:
  """The graphs with each CALL replaced by its template's copy on the CALL's sources (Template.on, once per template
  and sources for all of its outputs), the nodes above rebuilt; and, per node that replaced another, that node."""
  done: dict[UOp, UOp] = {}
  copies: dict[tuple, tuple[UOp, ...]] = {}
  origin: dict[UOp, UOp] = {}
  for node in toposort(graphs):
    src = tuple(done[s] for s in node.src)
    if node.op is Ops.CALL:
      template, output = node.arg
      if (outputs := copies.get((template, src))) is None: outputs = copies[(template, src)] = template.on(src)
      new = outputs[output]
    else: new = node if all(a is b for a, b in zip(src, node.src)) else node.replace(src=src)
    done[node] = new
    if new is not node: origin[new] = node
  return [done[g] for g in graphs], origin


def _stored_of_graph(stored: dict[UOp, UOp], origin: dict[UOp, UOp], nodes: dict[UOp, int]) -> dict[UOp, UOp]:
  """The stored nodes of an inlined graph as nodes of the graph it came from (`origin`), to record and mark realized:
  a template's inner nodes are nobody's, except that a CALL whose output is a view of a stored inner node (a
  matmul's reduce, reshaped) holds that view of its buffer."""
  kept = {node: view for n, view in stored.items() if (node := origin.get(n, n)) in nodes}
  for new, node in origin.items():
    if node.op is Ops.CALL and node not in kept and new.op is Ops.VIEW and (inner := stored.get(new.src[0])) is not None:
      kept[node] = view_uop(inner, lambda st: st + new.arg)
  return kept


def mark_realized(stored: dict[UOp, UOp]) -> None:
  """Record computed nodes so later graphs load them instead of computing them again."""
  realized.update(stored)
