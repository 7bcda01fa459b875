"""Lowering: a Kernel's AST -> loop code as a UOp graph.

Input: a `Kernel`. Output: a SINK of STOREs over lowered ops: RANGE (one loop per dim of the full shape),
INDEX (buffer + index expression + optional valid gate), LOAD, REDUCE (value, *reduce ranges) and ALU ops.
ShapeTrackers disappear here: each becomes an index expression and a validity expression in the ranges,
simplified by the symbolic rules.
"""
from __future__ import annotations
from typing import Callable
import itertools
from minigrad.dtype import dtypes
from minigrad.uop.ops import UOp, Ops, GroupOp
from minigrad.uop.rewrite import graph_rewrite
from minigrad.uop.symbolic import symbolic
from minigrad.codegen.kernel import Kernel
from minigrad.codegen.vectorize import vectorize
from minigrad.codegen.dtype_rules import lower_dtypes


def loop_ranges(k: Kernel, threaded: bool = False) -> list[UOp]:
  """One RANGE per dim; arg = (axis, "global" | "reduce"). With `threaded`, the outermost global loop runs
  from `core_start` to `core_end`, kernel arguments that let the runtime split it across threads."""
  ranges = []
  for axis, size in enumerate(k.full_shape):
    if axis >= k.first_upcast: break
    kind = "reduce" if axis >= k.first_reduce else "global"
    if threaded and axis == 0 and kind == "global":
      bounds = (UOp.variable("core_start", 0, size - 1), UOp.variable("core_end", 1, size))
    else: bounds = (UOp.const(dtypes.index, 0), UOp.const(dtypes.index, size))
    ranges.append(UOp(Ops.RANGE, dtypes.index, bounds, (axis, kind)))
  return ranges


VECTOR_WIDTHS = (2, 4, 8, 16)


def pick_lane_axis(k: Kernel) -> int | None:
  """The upcast dim to turn into SIMD lanes: of a vector width, and contiguous (stride 1) in the most buffers,
  the output counting double; ties go to the innermost."""
  def score(axis: int) -> int:
    strides = [st.real_strides()[axis] for st in k.sts]
    return sum(2 if st is k.output_st else 1 for st, stride in zip(k.sts, strides) if stride == 1)
  candidates = [a for a in range(k.first_upcast, k.shape_len) if k.full_shape[a] in VECTOR_WIDTHS]
  return max(reversed(candidates), key=score) if candidates else None


def lower(k: Kernel, threaded: bool = False, vector_lanes: bool = True) -> UOp:
  """Lower the kernel: loops for global/reduce dims; upcast/unroll dims are unrolled (one copy of the body per
  combination of their indices), except the innermost one, which becomes a "vector" range that the
  vectorizer turns into SIMD lanes."""
  loops = loop_ranges(k, threaded)
  upcast_axes = list(range(k.first_upcast, k.shape_len))
  lane_axis = pick_lane_axis(k) if vector_lanes else None
  unrolled = [a for a in upcast_axes if a != lane_axis]
  lane = None if lane_axis is None else UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, 0), UOp.const(dtypes.index, k.full_shape[lane_axis])),
                                            (lane_axis, "vector"))
  combos = list(itertools.product(*(range(k.full_shape[a]) for a in unrolled)))
  reduce_loops = tuple(loops[a] for a in range(k.first_reduce, k.first_upcast)) + \
    ((lane,) if lane is not None and k.axis_kinds[lane_axis] == "unroll" else ())
  unroll_positions = [i for i, a in enumerate(unrolled) if k.axis_kinds[a] == "unroll"]

  def axis_index(axis: int, combo: tuple[int, ...]) -> UOp:
    if axis < k.first_upcast: return loops[axis]
    if axis == lane_axis: return lane
    return UOp.const(dtypes.index, combo[unrolled.index(axis)])

  def indexed(view: UOp, combo: tuple[int, ...]) -> tuple[UOp, UOp]:
    st = k.st_of(view)
    # a dim the view has as 1 (e.g. the reduce dims of the output) is indexed by 0, not by its loop
    return st.to_indexed_uops([UOp.const(dtypes.index, 0) if st.shape[i] == 1 else axis_index(i, combo) for i in range(len(st.shape))])

  def unroll_variants(combo: tuple[int, ...]) -> list[tuple[int, ...]]:
    """combo with its unrolled reduce dims taking every value: the copies one accumulator sums."""
    variants = [combo]
    for pos in unroll_positions:
      variants = [v[:pos] + (value,) + v[pos + 1:] for v in variants for value in range(k.full_shape[unrolled[pos]])]
    return variants

  built: dict[tuple[UOp, tuple[int, ...]], UOp] = {}
  for node in k.ast.toposort:
    for combo in combos:
      built[(node, combo)] = _lower_node(node, combo, built, indexed, unroll_variants, reduce_loops)
  stores = dict.fromkeys(built[(k.ast.src[0], combo)] for combo in combos)
  return vectorize(lower_dtypes(graph_rewrite(UOp(Ops.SINK, dtypes.void, tuple(stores)), symbolic)))


def _lower_node(node: UOp, combo: tuple[int, ...], built: dict, indexed: Callable, unroll_variants: Callable, reduce_loops: tuple[UOp, ...]) -> UOp:
  def src(i: int, c: tuple[int, ...] = combo) -> UOp: return built[(node.src[i], c)]
  if node.op in (Ops.VIEW, Ops.DEFINE_GLOBAL): return node
  if node.op in (Ops.LOAD, Ops.STORE):
    buf, view = node.src[:2]
    index, valid = indexed(view, combo)
    if node.op is Ops.LOAD and valid.op is Ops.CONST and not valid.arg: return node.const_like(0)
    gate = () if valid.op is Ops.CONST and valid.arg else (valid,)
    pointer = UOp(Ops.INDEX, buf.dtype, (buf, index) + gate)
    return UOp(Ops.LOAD, node.dtype, (pointer,)) if node.op is Ops.LOAD else UOp(Ops.STORE, dtypes.void, (pointer, src(2)))
  if node.op in (Ops.CONST, Ops.ARANGE, Ops.VALID):
    views = [s for s in node.src if s.op is Ops.VIEW]
    index, valid = indexed(views[0], combo) if views else (None, UOp.const(dtypes.bool, True))
    if node.op is Ops.VALID: return valid
    # element i of an arange is i: the view's index expression is the value
    value = UOp.const(node.dtype, node.arg) if node.op is Ops.CONST else index.cast(node.dtype)
    return value if valid.op is Ops.CONST and valid.arg else valid.where(value, value.const_like(0))
  if node.op is Ops.REDUCE_AXIS:
    op = node.arg[0]
    values = [src(0, variant) for variant in unroll_variants(combo)]
    combined = values[0]
    for v in values[1:]: combined = combined.alu(op, v)
    return UOp(Ops.REDUCE, node.dtype, (combined,) + reduce_loops, op) if reduce_loops else combined
  if node.op is Ops.SINK: return node
  if node.op in GroupOp.Elementwise: return node.replace(src=tuple(src(i) for i in range(len(node.src))))
  raise RuntimeError(f"lowerer doesn't know {node.op}")
