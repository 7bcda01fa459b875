"""Lowering: a Kernel's AST -> loop code as a UOp graph.

Input: a `Kernel`. Output: a SINK of STOREs over lowered ops: RANGE (one loop per dim of the full shape),
INDEX (buffer + index expression + optional valid gate), LOAD, REDUCE (value, *reduce ranges) and ALU ops.
ShapeTrackers disappear here: each becomes an index expression and a validity expression in the ranges,
simplified by the symbolic rules.
"""
from __future__ import annotations
from minigrad.dtype import dtypes
from minigrad.uop.ops import UOp, Ops, GroupOp
from minigrad.uop.rewrite import graph_rewrite
from minigrad.uop.symbolic import symbolic
from minigrad.codegen.kernel import Kernel


def loop_ranges(k: Kernel, threaded: bool = False) -> list[UOp]:
  """One RANGE per dim; arg = (axis, "global" | "reduce"). With `threaded`, the outermost global loop runs
  from `core_start` to `core_end`, kernel arguments that let the runtime split it across threads."""
  ranges = []
  for axis, size in enumerate(k.full_shape):
    kind = "reduce" if axis >= k.first_reduce else "global"
    if threaded and axis == 0 and kind == "global":
      bounds = (UOp.variable("core_start", 0, size - 1), UOp.variable("core_end", 1, size))
    else: bounds = (UOp.const(dtypes.index, 0), UOp.const(dtypes.index, size))
    ranges.append(UOp(Ops.RANGE, dtypes.index, bounds, (axis, kind)))
  return ranges


def lower(k: Kernel, threaded: bool = False) -> UOp:
  ranges = loop_ranges(k, threaded)
  built: dict[UOp, UOp] = {}

  def indexed(view: UOp) -> tuple[UOp, UOp]:
    st = k.st_of(view)
    # a dim the view has as 1 (e.g. the reduce dims of the output) is indexed by 0, not by its loop
    idxs = [UOp.const(dtypes.index, 0) if st.shape[i] == 1 else ranges[i] for i in range(len(st.shape))]
    return st.to_indexed_uops(idxs)

  for node in k.ast.toposort:
    if node.op in (Ops.VIEW, Ops.DEFINE_GLOBAL): built[node] = node
    elif node.op is Ops.LOAD:
      buf, view = node.src
      index, valid = indexed(view)
      gate = () if valid.op is Ops.CONST and valid.arg else (valid,)
      built[node] = UOp(Ops.LOAD, node.dtype, (UOp(Ops.INDEX, buf.dtype, (buf, index) + gate),))
      if valid.op is Ops.CONST and not valid.arg: built[node] = node.const_like(0)
    elif node.op is Ops.CONST:
      views = [s for s in node.src if s.op is Ops.VIEW]
      value = UOp.const(node.dtype, node.arg)
      if views:
        _, valid = indexed(views[0])
        if not (valid.op is Ops.CONST and valid.arg): value = valid.where(value, value.const_like(0))
      built[node] = value
    elif node.op is Ops.VALID: built[node] = indexed(node.src[0])[1]
    elif node.op is Ops.ARANGE:   # element i of an arange is i: the view's index expression is the value
      index, valid = indexed(node.src[0])
      value = index.cast(node.dtype)
      built[node] = value if valid.op is Ops.CONST and valid.arg else valid.where(value, value.const_like(0))
    elif node.op is Ops.REDUCE_AXIS:
      op, axes = node.arg
      reduce_ranges = tuple(ranges[a] for a in sorted(k.reduce_axes))
      built[node] = UOp(Ops.REDUCE, node.dtype, (built[node.src[0]],) + reduce_ranges, op)
    elif node.op is Ops.STORE:
      buf, view, value = node.src
      index, valid = indexed(view)
      gate = () if valid.op is Ops.CONST and valid.arg else (valid,)
      built[node] = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, buf.dtype, (buf, index) + gate), built[value]))
    elif node.op is Ops.SINK: built[node] = UOp(Ops.SINK, dtypes.void, tuple(built[s] for s in node.src))
    elif node.op in GroupOp.Elementwise: built[node] = node.replace(src=tuple(built[s] for s in node.src))
    else: raise RuntimeError(f"lowerer doesn't know {node.op}")
  return graph_rewrite(built[k.ast], symbolic)
