"""The scheduler: cut a lazy tensor graph into kernels.

Input: the tensor-graph UOps the user wants realized. Output: a list of `ScheduleItem(ast, bufs)` in run order,
and for each requested UOp the buffer-backed UOp it becomes once the schedule has run.

Which nodes get their own buffer ("realized"):
  - what was asked for, CONTIGUOUS nodes,
  - a reduce used by more than one consumer, or seen through a view other than a reshape (e.g. an expand:
    softmax's max), or sitting below another reduce in the same kernel.
Everything else fuses: elementwise ops and movement ops (VIEWs) fold into the consumer's indexing, so
`(x.T + 1)` is one kernel that reads x transposed and `(a @ b).relu() + bias` is one reduce kernel.

A kernel AST is SINK(STORE(DEFINE_GLOBAL 0, VIEW st_out, value)) where value is built from ALU/CAST ops,
REDUCE_AXIS, LOAD(DEFINE_GLOBAL i, VIEW st), CONST(VIEW st), ARANGE(VIEW st) and VALID(VIEW st). Every ShapeTracker in one
kernel has the same rank: loads under the reduce see the full shape, everything above sees it with the
reduce axes set to 1.
"""
from __future__ import annotations
from dataclasses import dataclass
import weakref
from minigrad.dtype import dtypes
from minigrad.uop.ops import UOp, Ops, GroupOp, toposort
from minigrad.uop.rewrite import PatternMatcher, UPat, graph_rewrite
from minigrad.uop.shapetracker import ShapeTracker
from minigrad.schedule.packing import pack_operands


@dataclass(frozen=True)
class ScheduleItem:
  ast: UOp                 # SINK of one STORE
  bufs: tuple[UOp, ...]    # BUFFER nodes in DEFINE_GLOBAL order: the output first, then the inputs

  @property
  def device(self) -> str: return self.bufs[0].device


# Realized nodes: a tensor-graph node -> the buffer-backed node holding its value. Documented cache: lets a
# lazy graph built before a realize reuse the result instead of recomputing it. Weak keys: entries die with
# the graph that mentions them.
realized: weakref.WeakKeyDictionary[UOp, UOp] = weakref.WeakKeyDictionary()

_use_realized = PatternMatcher([(UPat(name="node"), lambda node: realized.get(node))])


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


class _Fusion:
  """Decides which nodes are realized, walking each kernel's graph with the view each node is seen through."""
  def __init__(self, roots: list[UOp]):
    nodes = _walk(roots)
    consumers: dict[UOp, set[UOp]] = {}
    for n in nodes:
      for s in n.src: consumers.setdefault(s, set()).add(n)
    self.realize: dict[UOp, None] = dict.fromkeys(roots)
    for n in nodes:
      if n.op is Ops.CONTIGUOUS or (n.op is Ops.REDUCE_AXIS and len(consumers.get(n, ())) > 1): self.realize[n] = None
    # walking a kernel can realize more nodes (new kernels to walk), and a reduce fused into two kernels
    # would be computed twice: realize it too. Repeat until nothing changes.
    self.kernel_reduce: dict[UOp, UOp | None] = {}   # kernel root -> the reduce fused into it
    while True:
      count_before = len(self.realize)
      fused_into: dict[UOp, list[UOp]] = {}
      for root in list(self.realize):
        reduce = self.kernel_reduce[root] = self._fuse(root)
        if reduce is not None: fused_into.setdefault(reduce, []).append(root)
      self.realize.update(dict.fromkeys(r for r, kernels in fused_into.items() if len(kernels) > 1))
      if len(self.realize) == count_before: break

  def _fuse(self, root: UOp) -> UOp | None:
    """Walk one kernel's graph; realize the reduces that can't join it. Returns the reduce it fuses, if any."""
    kernel_reduce: UOp | None = None
    start = root.src[0] if root.op is Ops.CONTIGUOUS else root
    stack: list[tuple[UOp, ShapeTracker, bool]] = [(start, ShapeTracker.from_shape(root.shape), False)]
    seen: set[tuple[UOp, ShapeTracker, bool]] = set()
    while stack:
      item = stack.pop()
      if item in seen: continue
      seen.add(item)
      node, view, below_reduce = item
      if (node in self.realize and node is not root) or _is_leaf(node): continue
      if node.op is Ops.VIEW: stack.append((node.src[0], node.arg + view, below_reduce))
      elif node.op is Ops.REDUCE_AXIS:
        if below_reduce or not view.contiguous or (kernel_reduce is not None and kernel_reduce is not node):
          self.realize[node] = None
          continue
        kernel_reduce = node
        stack.append((node.src[0], ShapeTracker.from_shape(node.src[0].shape), True))
      else: stack.extend((s, view, below_reduce) for s in node.src)
    return kernel_reduce


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
  def __init__(self, root: UOp, reduce: UOp | None, buffers: dict[UOp, UOp]):
    self.root, self.reduce, self.buffers = root, reduce, buffers
    self.inputs: list[UOp] = []   # BUFFER nodes, DEFINE_GLOBAL i+1 reads inputs[i]
    self.memo: dict[tuple[UOp, ShapeTracker], UOp] = {}

  def build(self, output: UOp) -> UOp:
    value_root = self.root.src[0] if self.root.op is Ops.CONTIGUOUS else self.root
    kernel_shape = self.reduce.shape if self.reduce is not None else self.root.shape
    root_view = ShapeTracker.from_shape(self.root.shape)
    if kernel_shape != self.root.shape: root_view = root_view.reshape(kernel_shape)
    value = self._value(value_root, root_view)
    out_global = UOp(Ops.DEFINE_GLOBAL, output.dtype.ptr(), (), 0)
    store = UOp(Ops.STORE, dtypes.void, (out_global, UOp(Ops.VIEW, arg=ShapeTracker.from_shape(kernel_shape)), value))
    return UOp(Ops.SINK, dtypes.void, (store,))

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
      elif node.op is Ops.REDUCE_AXIS: self.memo[key] = UOp(Ops.REDUCE_AXIS, node.dtype, built, node.arg)
      elif node.op in GroupOp.Elementwise: self.memo[key] = node.replace(src=built)
      else: raise RuntimeError(f"scheduler can't put {node.op} inside a kernel")
    return self.memo[(start, start_view)]

  def _children(self, node: UOp, view: ShapeTracker) -> list[tuple[UOp, ShapeTracker]]:
    if node.op is Ops.VIEW: return [(node.src[0], node.arg + view)]
    if node.op is Ops.REDUCE_AXIS:
      if not view.contiguous: raise RuntimeError(f"internal error: reduce fused through a non-reshape view {view}")
      return [(node.src[0], ShapeTracker.from_shape(node.src[0].shape))]
    return [(s, view) for s in node.src]


def create_schedule(targets: list[UOp]) -> tuple[list[ScheduleItem], dict[UOp, UOp], dict[UOp, UOp]]:
  """Kernels (in run order) that compute `targets`; what each target becomes once they ran; and the nodes
  those kernels store, for `mark_realized` to record after the run (never before: a schedule may not run)."""
  rewritten = {t: graph_rewrite(t, _use_realized) for t in targets}   # reuse what earlier schedules computed
  roots = list(dict.fromkeys(r for t in rewritten.values() if (r := _to_compute(t)) is not None))
  if not roots: return [], rewritten, {}
  fusion = _Fusion(roots)
  order = [n for n in toposort(roots) if n in fusion.realize]   # run order: each after what it reads
  buffers: dict[UOp, UOp] = {n: UOp.new_buffer(n.device, n.size, n.dtype) for n in order}
  items = []
  for node in order:
    builder = _KernelBuilder(node, fusion.kernel_reduce[node], buffers)
    ast = builder.build(buffers[node])
    items.append(ScheduleItem(ast, (buffers[node], *builder.inputs)))
  items = pack_operands(items, ScheduleItem)
  stored = {node: buffer_view(buffers[node], node.shape) for node in order}
  becomes: dict[UOp, UOp] = {}
  for original, t in rewritten.items():
    if t in stored: becomes[original] = stored[t]
    elif t.base in stored: becomes[original] = UOp(Ops.VIEW, t.dtype, (buffers[t.base],), t.arg)
    else: becomes[original] = t
  return items, becomes, stored


def mark_realized(stored: dict[UOp, UOp]) -> None:
  """Record computed nodes so later graphs load them instead of computing them again."""
  realized.update(stored)
