"""Lowering: a Kernel's AST -> loop code as a UOp graph.

Input: a `Kernel`. Output: a SINK of STOREs over lowered ops: RANGE (one loop per dim of the full shape),
INDEX (buffer + index expression + optional valid gate), LOAD, REDUCE (value, *reduce ranges) and ALU ops.
ShapeTrackers disappear here: each becomes an index expression and a validity expression in the ranges,
simplified by the symbolic rules.
"""
from __future__ import annotations
from typing import Callable
import functools
import itertools
import operator
from minigrad.dtype import dtypes
from minigrad.helpers import prod
from minigrad.uop.ops import UOp, Ops, GroupOp, one_hot_pick, toposort
from minigrad.uop.rewrite import graph_rewrite
from minigrad.uop.symbolic import symbolic, split_terms
from minigrad.codegen.kernel import Kernel
from minigrad.codegen.vectorize import vectorize
from minigrad.codegen.dtype_rules import lower_dtypes


def loop_ranges(k: Kernel, threaded: bool = False) -> list[UOp]:
  """CPU-shaped loops: one RANGE per loop dim; arg = (axis, "global" | "reduce"); local dims are plain inner loops.
  With `threaded`, the outermost global loop runs from `core_start` to `core_end`, kernel arguments that let
  the runtime split it across threads."""
  if k.axes_of("group"): raise RuntimeError(f"kernel {k.name} uses GROUP, which needs a device with local memory")
  ranges = []
  # the threads split the outermost loop at its largest size: a variable-length one stays on one thread
  threaded = threaded and not (k.extents and k.extents[0] is not None)
  for axis, size in enumerate(k.full_shape[:k.first_upcast]):
    kind = "reduce" if axis >= k.first_reduce else "global"
    if threaded and axis == 0 and kind == "global":
      bounds = (UOp.variable("core_start", 0, size - 1), UOp.variable("core_end", 1, size))
    else: bounds = (UOp.const(dtypes.index, 0), loop_end(k, axis))
    ranges.append(UOp(Ops.RANGE, dtypes.index, bounds, (axis, kind)))
  return ranges


def loop_end(k: Kernel, axis: int) -> UOp:
  """Where the loop over dim `axis` stops: its size, or for a variable-length dim the Variable's expression (a kernel
  argument; its range bounds the index math)."""
  if (extent := k.extents[axis]) is not None: return extent.cast(dtypes.index) if extent.dtype != dtypes.index else extent
  return UOp.const(dtypes.index, k.full_shape[axis])


MAX_GRID_DIMS = 3
MAX_GRID_YZ = 65535   # workgroups along y and z at most (CUDA's limit; x may have 2**31 - 1)


def grid_indices(sizes: list[int], prefix: str) -> list[UOp]:
  """GPU-shaped indices for dims of `sizes` (outermost first): SPECIAL `{prefix}0` is the innermost dim (x), then y, z.
  More than 3 dims: the outer ones share one SPECIAL and are recovered with // and %. A workgroup dim too big
  for y or z shares x with the dims inside it."""
  if len(sizes) > MAX_GRID_DIMS:
    merged = sizes[:len(sizes) - MAX_GRID_DIMS + 1]
    specials = grid_indices([prod(merged)] + sizes[len(merged):], prefix)
    below = [prod(merged[i + 1:]) for i in range(len(merged))]
    return [(specials[0] // step) % size for step, size in zip(below, merged)] + specials[1:]
  if prefix == "gidx" and any(size > MAX_GRID_YZ for size in sizes[:-1]):
    *outer, x = grid_indices(sizes[:-2] + [sizes[-2] * sizes[-1]], prefix)
    return outer + [x // sizes[-1], x % sizes[-1]]
  return [UOp(Ops.SPECIAL, dtypes.index, (), (f"{prefix}{len(sizes) - 1 - i}", size)) for i, size in enumerate(sizes)]


def gpu_indices(k: Kernel) -> list[UOp]:
  """Per loop dim: global dims -> workgroup ids (gidx), local and group dims -> thread ids (lidx), reduce dims -> RANGE."""
  # a variable-length global dim is a loop inside each thread (the grid is fixed when the kernel is compiled)
  globals_ = [a for a in k.axes_of("global") if k.extents[a] is None]
  threads = k.axes_of("local") + k.axes_of("group")
  by_axis = dict(zip(globals_, grid_indices([k.full_shape[a] for a in globals_], "gidx")))
  by_axis.update(zip(threads, grid_indices([k.full_shape[a] for a in threads], "lidx")))
  for axis in k.axes_of("global"):
    if axis not in by_axis: by_axis[axis] = UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, 0), loop_end(k, axis)), (axis, "global"))
  for axis in k.axes_of("reduce"):
    by_axis[axis] = UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, 0), loop_end(k, axis)), (axis, "reduce"))
  return [by_axis[axis] for axis in range(k.first_upcast)]


VECTOR_WIDTHS = (2, 4, 8, 16)


def pick_lane_axis(k: Kernel) -> int | None:
  """The upcast dim to turn into SIMD lanes: of a vector width, contiguous (stride 1) in some buffer, the widest
  (16 lanes beat 2), then contiguous in the most buffers, the output counting double (in a reduce kernel only half:
  it is stored once, the inputs are loaded every trip of the reduce loop); ties go to the innermost. In an
  elementwise kernel that transposes a square block (an input contiguous along one upcast dim, the output along
  another of the same size), the output doesn't count: stores of such a block are transposed by shuffles
  (vectorize.transposed_stores), loads are not."""
  output_weight = 0.5 if k.axes_of("reduce") else 2
  candidates = [a for a in range(k.first_upcast, k.shape_len) if k.full_shape[a] in VECTOR_WIDTHS]
  def read_along(axis: int) -> bool: return any(st is not k.output_st and st.real_strides()[axis] == 1 for st in k.sts)
  def score(axis: int) -> float:
    strides = [st.real_strides()[axis] for st in k.sts]
    block = not k.axes_of("reduce") and any(b != axis and k.full_shape[b] == k.full_shape[axis] and read_along(b) for b in candidates)
    return sum((0 if block else output_weight) if st is k.output_st else 1 for st, stride in zip(k.sts, strides) if stride == 1)
  return max(reversed(candidates), key=lambda a: (score(a) > 0, k.full_shape[a], score(a))) if candidates else None


def reduce_regions(k: Kernel) -> dict[UOp | None, list[UOp]]:
  """The VIEWs each REDUCE_AXIS reads directly (not through a reduce nested in it), and under None those read
  outside every reduce. A region's views have size 1 in the dims of the other regions' reduces, so a reduce
  owns the reduce/unroll dims its views span. A reduce whose input is another reduce (a sum over a size-1 axis of
  a row sum) reads no views directly: it owns no loop, and its value is the inner reduce's."""
  def direct_views(root: UOp) -> list[UOp]:
    nodes = toposort([root], enter=lambda node: node is root or node.op is not Ops.REDUCE_AXIS)
    return [s for n in nodes if n.op is not Ops.REDUCE_AXIS or n is root for s in n.src if s.op is Ops.VIEW]
  regions: dict[UOp | None, list[UOp]] = {r: direct_views(r) for r in k.ast.toposort if r.op is Ops.REDUCE_AXIS}
  regions[None] = direct_views(k.ast)
  return regions


def pick_lane_axes(k: Kernel, regions: dict[UOp | None, list[UOp]]) -> list[int]:
  """pick_lane_axis, plus dims of the same size in other regions (a fused softmax's row max, row sum and output
  each get lanes): they share one vector range, so no region may span two of them."""
  first = pick_lane_axis(k)
  if first is None: return []
  lanes = [first]
  for axis in range(k.first_upcast, k.shape_len):
    if axis in lanes or k.full_shape[axis] != k.full_shape[first]: continue
    spans = [{a for a in lanes + [axis] if any(k.st_of(v).shape[a] > 1 for v in views)} for views in regions.values()]
    if all(len(span) <= 1 for span in spans) and any(k.st_of(v).real_strides()[axis] == 1 for views in regions.values() for v in views):
      lanes.append(axis)
  return lanes


def index_on_padding(index: UOp, valid: UOp) -> UOp | None:
  """An ungated index for a load whose mask only hides padded outputs (Kernel.padding_only): `index` where `valid`,
  elsewhere the index at the start of the padded dims (the loops in `valid` at 0), which is in bounds. The two differ
  only in the padded dims' terms, so the select stays out of the loops inside them (a matmul's reduce loop) and the
  load needs no branch. None when the start of the padded dims is itself masked."""
  at_start = {v: v.const_like(0) for v in valid.toposort if v.op in (Ops.RANGE, Ops.SPECIAL)}
  if not ((inside := valid.substitute(at_start).simplify()).op is Ops.CONST and inside.arg): return None
  taken, fallback = split_terms(index.simplify()), split_terms(index.substitute(at_start).simplify())
  common = [t for t in taken if t in fallback]
  def total(terms: list[UOp]) -> UOp: return functools.reduce(operator.add, terms, index.const_like(0))
  return (valid.where(total([t for t in taken if t not in common]), total([t for t in fallback if t not in common])) + total(common)).simplify()


def lower(k: Kernel, threaded: bool = False, vector_lanes: bool = True, gpu: bool = False) -> UOp:
  """Lower the kernel: loops for global/reduce dims (with `gpu`, workgroup/thread ids for global/local/group dims);
  upcast/unroll dims are unrolled (one copy of the body per combination of their indices), except the lane dims
  (pick_lane_axes), which become one "vector" range that the vectorizer turns into SIMD lanes. Each reduce loops
  over the reduce dims its own views span (a kernel can hold several reduces side by side or nested)."""
  loops = gpu_indices(k) if gpu else loop_ranges(k, threaded)
  upcast_axes = list(range(k.first_upcast, k.shape_len))
  regions = reduce_regions(k)
  lane_axes = pick_lane_axes(k, regions) if vector_lanes else []
  unrolled = [a for a in upcast_axes if a not in lane_axes]
  lane = None if not lane_axes else UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, 0), UOp.const(dtypes.index, k.full_shape[lane_axes[0]])),
                                        (lane_axes[0], "vector"))
  combos = list(itertools.product(*(range(k.full_shape[a]) for a in unrolled)))
  # each reduce loops over the reduce dims (and the unrolled ones) its own views span
  own_dims = {r: {a for a in range(k.first_reduce, k.shape_len) if k.axis_kinds[a] in ("reduce", "unroll", "group")
                  and any(k.st_of(v).shape[a] > 1 for v in views)} for r, views in regions.items() if r is not None}
  reduce_loops = {r: tuple(loops[a] for a in k.axes_of("reduce") if a in dims) + ((lane,) if any(a in dims for a in lane_axes) else ())
                  for r, dims in own_dims.items()}

  def axis_index(axis: int, combo: tuple[int, ...]) -> UOp:
    if axis < k.first_upcast: return loops[axis]
    if axis in lane_axes: return lane
    return UOp.const(dtypes.index, combo[unrolled.index(axis)])

  index_cache: dict[tuple[UOp, tuple[int, ...]], tuple[UOp, UOp]] = {}

  def indexed(view: UOp, combo: tuple[int, ...]) -> tuple[UOp, UOp]:
    st = k.st_of(view)
    # a dim the view has as 1 (e.g. the reduce dims of the output) is indexed by 0, not by its loop: combos that
    # differ only there give the same index
    key = (view, tuple(value for value, axis in zip(combo, unrolled) if st.shape[axis] > 1))
    if key not in index_cache:
      index, valid = st.to_indexed_uops([UOp.const(dtypes.index, 0) if st.shape[i] == 1 else axis_index(i, combo) for i in range(len(st.shape))])
      if k.views.index(view) in k.padding_only and (lane is None or lane not in valid.toposort) and (read := index_on_padding(index, valid)):
        index, valid = read, UOp.const(dtypes.bool, True)
      index_cache[key] = (index, valid)
    return index_cache[key]

  def unroll_variants(reduce: UOp, combo: tuple[int, ...]) -> list[tuple[int, ...]]:
    """combo with the reduce's unrolled dims taking every value: the copies one accumulator sums."""
    variants = [combo]
    for pos, axis in enumerate(unrolled):
      if k.axis_kinds[axis] != "unroll" or axis not in own_dims[reduce]: continue
      variants = [v[:pos] + (value,) + v[pos + 1:] for v in variants for value in range(k.full_shape[axis])]
    return variants

  lowering = _NodeLowering(k, loops, indexed, unroll_variants, reduce_loops)
  for node in k.ast.toposort:
    for combo in combos: lowering.lower(node, combo)
  stores = dict.fromkeys(lowering.built[(store, combo)] for store in k.ast.src for combo in combos)
  return vectorize(lower_dtypes(graph_rewrite(UOp(Ops.SINK, dtypes.void, tuple(stores)), symbolic)))


class _NodeLowering:
  """Lowers AST nodes one (node, combination of unrolled indices) at a time into `built`."""

  def __init__(self, k: Kernel, loops: list[UOp], indexed: Callable, unroll_variants: Callable, reduce_loops: dict[UOp, tuple[UOp, ...]]):
    self.k, self.loops, self.indexed, self.unroll_variants, self.reduce_loops = k, loops, indexed, unroll_variants, reduce_loops
    self.built: dict[tuple[UOp, tuple[int, ...]], UOp] = {}
    self.group_axes = k.axes_of("group")
    self.thread_axes = k.axes_of("local") + self.group_axes
    self.temp_count = 0

  def lower(self, node: UOp, combo: tuple[int, ...]) -> None:
    self.built[(node, combo)] = self._lower(node, combo)

  def _lower(self, node: UOp, combo: tuple[int, ...]) -> UOp:
    def src(i: int, c: tuple[int, ...] = combo) -> UOp: return self.built[(node.src[i], c)]
    if node.op in (Ops.VIEW, Ops.DEFINE_GLOBAL, Ops.SINK): return node
    if node.op in (Ops.LOAD, Ops.STORE):
      buf, view = node.src[:2]
      index, valid = self.indexed(view, combo)
      if node.op is Ops.LOAD and valid.op is Ops.CONST and not valid.arg: return node.const_like(0)
      if node.op is Ops.STORE:   # in a grouped reduce every thread of the group has the result: the first one stores it
        for axis in self.group_axes: valid = valid & self.loops[axis].eq(0)
      gate = () if valid.op is Ops.CONST and valid.arg else (valid,)
      pointer = UOp(Ops.INDEX, buf.dtype, (buf, index) + gate)
      return UOp(Ops.LOAD, node.dtype, (pointer,)) if node.op is Ops.LOAD else UOp(Ops.STORE, dtypes.void, (pointer, src(2)))
    if node.op in (Ops.CONST, Ops.ARANGE, Ops.VALID):
      views = [s for s in node.src if s.op is Ops.VIEW]
      index, valid = self.indexed(views[0], combo) if views else (None, UOp.const(dtypes.bool, True))
      if node.op is Ops.VALID: return valid
      # element i of an arange is i: the view's index expression is the value
      value = UOp.const(node.dtype, node.arg) if node.op is Ops.CONST else index.cast(node.dtype)
      return value if valid.op is Ops.CONST and valid.arg else valid.where(value, value.const_like(0))
    if node.op is Ops.REDUCE_AXIS:
      if (picked := self._one_hot_pick(node, combo)) is not None: return picked
      op, loops = node.arg[0], self.reduce_loops[node]
      values = [src(0, variant) for variant in self.unroll_variants(node, combo)]
      if (lanes := self._row_lanes(loops, values)) is not None:   # one accumulator per vector of the trip
        values = [UOp(Ops.REDUCE, node.dtype, (v,) + tuple(l for l in loops if l is not lanes), op) for v in values]
        loops = (lanes,)
      combined = values[0]
      for v in values[1:]: combined = combined.alu(op, v)
      partial = UOp(Ops.REDUCE, node.dtype, (combined,) + loops, op) if loops else combined
      return self._group_reduce(partial, op) if self.group_axes else partial
    if node.op in GroupOp.Elementwise: return node.replace(src=tuple(src(i) for i in range(len(node.src))))
    if node.op is Ops.SORT: return node.replace(src=(src(0),))   # the renderer sorts the row its LOAD's index starts
    raise RuntimeError(f"lowerer doesn't know {node.op}")

  def _row_lanes(self, loops: tuple[UOp, ...], values: list[UOp]) -> UOp | None:
    """The lane range of a row reduction that adds several vectors per trip of a loop (rule 5 of the heuristics:
    no tile of outputs, so no other accumulators): each vector then gets an accumulator of its own, and they are
    combined, then their lanes, after the loop. Independent chains, and more partial sums for float rounding
    (4 x 8 lanes: a sum of 2^17 float32 numbers within 1e-6, where one 8-lane accumulator was 4e-6 off)."""
    lanes = next((l for l in loops if l.op is Ops.RANGE and l.arg[1] == "vector"), None)
    if lanes is None or len(values) < 2 or len(loops) < 2 or "upcast" in self.k.axis_kinds: return None
    return lanes

  def _one_hot_pick(self, node: UOp, combo: tuple[int, ...]) -> UOp | None:
    """A sum over r of (a == r) * x(r) (uop.ops.one_hot_pick), `a` the same for every r: that is x(a) where
    0 <= a < R, else 0. Lowered as such, the loop over r goes away and x's loads read where `a` points, gated by its
    range. None for other reduces, or when r is not one whole loop (unrolled, grouped, split into lanes)."""
    loops = self.reduce_loops[node]
    if (parts := one_hot_pick(node)) is None or len(loops) != 1 or loops[0].arg[1] != "reduce" or self.unroll_variants(node, combo) != [combo]: return None
    (a_node, arange, x), r = parts, loops[0]
    a, position = self.built[(a_node, combo)], self.built[(arange, combo)]
    if (position.src[0] if position.op is Ops.CAST else position) is not r or r.src[0].op is not Ops.CONST or r.src[0].arg != 0 or r in a.toposort: return None
    at = a.cast(dtypes.index)
    valid = (at >= 0) & (at < r.src[1])
    reads = {u: UOp(Ops.INDEX, u.dtype, (u.src[0], u.src[1].substitute({r: at}), (u.src[2].substitute({r: at}) & valid) if len(u.src) > 2 else valid))
             for u in self.built[(x, combo)].toposort if u.op is Ops.INDEX and r in u.src[1].toposort}
    picked = self.built[(x, combo)].substitute(reads).substitute({r: at})
    return (picked if picked.op is Ops.LOAD else valid.where(picked, picked.const_like(0))).cast(node.dtype)   # a gated load reads 0

  def _thread_position(self, index_of: dict[int, UOp]) -> UOp:
    position = UOp.const(dtypes.index, 0)
    for axis in self.thread_axes: position = position * self.k.full_shape[axis] + index_of.get(axis, self.loops[axis])
    return position

  def _group_reduce(self, partial: UOp, op: Ops) -> UOp:
    """Each thread of a workgroup wrote its partial result; after a barrier every thread combines the partials of
    its group from local memory (the store is then gated to the group's first thread)."""
    size = prod(self.k.full_shape[a] for a in self.thread_axes)
    temp = UOp(Ops.DEFINE_LOCAL, partial.dtype.ptr(local=True), (), (f"temp{self.temp_count}", size))
    self.temp_count += 1
    store = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, temp.dtype, (temp, self._thread_position({}))), partial))
    barrier = UOp(Ops.BARRIER, dtypes.void, (store,))
    group_ranges = {axis: UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, 0), UOp.const(dtypes.index, self.k.full_shape[axis])),
                              (self.k.shape_len + axis, "reduce")) for axis in self.group_axes}
    loaded = UOp(Ops.LOAD, partial.dtype, (UOp(Ops.INDEX, temp.dtype, (temp, self._thread_position(group_ranges))), barrier))
    return UOp(Ops.REDUCE, partial.dtype, (loaded, *group_ranges.values()), op)
