"""Operand packing: give a big matrix product's reused operand a tile-friendly layout first.

Input: the scheduler's ScheduleItems. Output: the same items, where a large matmul-shaped reduce kernel that
reads a 2-d operand `b` (one output dim j; the reduce dim k, or several that read b as one, as a weight gradient's
batch and token dims) gets a copy kernel before it that writes
b[k, j] as panels of W columns: packed[j // W][k][j % W], W the first of opt.cpu_policy.panel_widths that divides b's columns.
The product then reads one contiguous panel per tile of output columns instead of W-wide strips a whole row
apart: the panel stays in the L2 cache while the kernel sweeps the rows, and one stream is easy to prefetch
(the C renderer prefetches it ahead, see codegen.cpu_patterns.panel_prefetches). (Rows a power-of-two apart also map to
the same few cache sets, so unpacked strips evict each other.)

A transposed b (its columns a row apart: w in `x @ w.T`, a Linear layer's (out, in) weight) is packed whatever its
size once MIN_ROWS_TRANSPOSED output rows reuse it. Unpacked, the kernel can only take dot products along k, one
horizontal sum per output; packed, it gets the same vector tiles as `x @ w`, faster even with the
copy. So is one with a short k (up to MAX_SHORT_K), once MIN_ROWS_SHORT_K rows reuse it,
also one per batch: attention's scores q @ k.T per head over 32 or 64 dims, where a dot product would end after two
or four trips (of 16 lanes) in 16 horizontal sums.

The other operand, a in a[i, k], is read one row per tile row and trip of the reduce loop. When it lies k-major (a
weight gradient's dy.T, its rows i side by side) with its k rows a multiple of 2 KB apart (so they share a few cache
sets), it gets a row-major copy instead (see _row_major_plan).

The heuristics (minigrad/opt/heuristics.py) give such a kernel output tiles of W columns (with AVX-512: 6 or 4 rows x 4 vectors of 16
floats for W = 64, 8 x 2 for W = 32: the tiles with the fewest loads per multiply-add), so each tile reads exactly one
panel.
"""
from __future__ import annotations
from typing import NamedTuple
from minigrad.dtype import dtypes
from minigrad.helpers import prod
from minigrad.uop.ops import UOp, Ops, one_hot_pick
from minigrad.uop.shapetracker import ShapeTracker, View
from minigrad.opt.cpu_policy import min_packed_bytes, panel_widths
from minigrad.target import cpu_target

MIN_ROWS = 64                 # the packed copy must be reused by at least this many output rows
MIN_ROWS_TRANSPOSED = 256     # ... when b is transposed: fewer rows run faster on dot products along k as b lies
MIN_REDUCE = 64               # and be long enough in k to pay for the copy
MAX_SHORT_K = 64              # ... except a transposed b (also one per batch) with a k this short,
MIN_ROWS_SHORT_K = 32         # once this many rows reuse it
ALIASED_ROW_BYTES = 2048      # a k-major first operand whose rows are a multiple of this apart is copied row-major
PACKED_DEVICES = ("CPU", "LLVM")   # a layout for CPU caches


def pack_operands(items: list, make_item) -> list:
  """Insert packing copies in front of the matmul kernels that profit (see the module docstring).
  `make_item(ast, bufs)` builds a ScheduleItem."""
  out = []
  for item in items:
    packs = [p for p in (_packing_plan(item, load) or _row_major_plan(item, load) for load in _reduce_loads(item.ast)) if p is not None] \
      if item.device in PACKED_DEVICES and not _has_symbolic_dims(item.ast) else []
    if not packs:
      out.append(item)
      continue
    replace: dict[UOp, UOp] = {}
    bufs = list(item.bufs)
    for load, packed_view, pack_view, panels in packs:
      source = item.bufs[load.src[0].arg]
      packed = UOp.new_buffer(source.device, panels.size(), load.dtype)
      out.append(make_item(_copy_ast(load.dtype, pack_view, panels), (packed, source)))
      # a new kernel argument: other loads may still read the unpacked buffer
      replace[load] = UOp(Ops.LOAD, load.dtype, (UOp(Ops.DEFINE_GLOBAL, load.src[0].dtype, (), len(bufs)), UOp(Ops.VIEW, arg=packed_view)))
      bufs.append(packed)
    out.append(make_item(item.ast.substitute(replace), tuple(bufs)))
  return out


def _has_symbolic_dims(ast: UOp) -> bool:
  """A kernel with variable-length loops (symbolic shapes) keeps its operands as they are: a packed copy is laid
  out for fixed sizes."""
  return any(n.op is Ops.VIEW and n.arg.symbolic for n in ast.toposort)


def _reduce_loads(ast: UOp) -> list[UOp]:
  reduces = [n for n in ast.toposort if n.op is Ops.REDUCE_AXIS]
  # a one-hot pick reads one row of its table per output (see one_hot_pick): no reuse to pack for
  if len(reduces) != 1 or reduces[0].arg[0] is not Ops.ADD or one_hot_pick(reduces[0]) is not None: return []
  return [n for n in reduces[0].src[0].toposort if n.op is Ops.LOAD]


class _Operand(NamedTuple):
  view: View              # how the kernel reads the operand
  reduce_axes: set[int]
  k_axes: list[int]       # the reduce dims it reads, consecutive, reading it as one dim
  out_axes: list[int]     # the output dims it reads
  out_view: View          # how the kernel writes its output


def _operand(item, load: UOp) -> _Operand | None:
  """`load` as a matmul operand: float32, read through one unmasked view along output dims and a run of reduce dims
  that read it as one dim (several when the sum runs over a batch and its tokens), which are all the kernel sums
  over; the output written through one view. Else None."""
  st: ShapeTracker = load.src[1].arg
  if len(st.views) != 1 or load.dtype.itemsize != 4 or st.views[0].mask is not None: return None
  view = st.views[0]
  reduce = next(n for n in item.ast.toposort if n.op is Ops.REDUCE_AXIS)
  reduce_axes = set(reduce.arg[1])
  used = [a for a, stride in enumerate(view.strides) if stride != 0]
  k_axes = [a for a in used if a in reduce_axes]
  out_axes = [a for a in used if a not in reduce_axes]
  if not out_axes or not k_axes or k_axes != list(range(k_axes[0], k_axes[-1] + 1)): return None
  # the k dims must read the operand as one dim: each one's stride is the next one's times its size
  if any(view.strides[a] != view.strides[a + 1] * view.shape[a + 1] for a in k_axes[:-1]): return None
  if any(view.shape[a] > 1 for a in reduce_axes - set(k_axes)): return None
  store = next(n for n in item.ast.toposort if n.op is Ops.STORE)
  if len(store.src[1].arg.views) != 1: return None
  return _Operand(view, reduce_axes, k_axes, out_axes, store.src[1].arg.views[-1])


def _seen_by_kernel(st: ShapeTracker, axes: list[int], view: View) -> ShapeTracker:
  """`st`, whose dims run along the kernel axes `axes` in that order, at the kernel's coordinates (`view`'s shape)."""
  st = st.permute(tuple(axes.index(a) for a in sorted(axes)))
  return st.reshape(tuple(size if a in axes else 1 for a, size in enumerate(view.shape))).expand(view.shape)


def _packing_plan(item, load: UOp):
  """(load, the view reading the packed copy, the view the copy reads b through, the copy's shape as a View)
  when `load` is a matmul operand worth packing, else None."""
  if (operand := _operand(item, load)) is None: return None
  view, reduce_axes, k_axes, j_axes, out_view = operand
  # j must be the output's contiguous dim; b's other output dims are batch dims (a batched product: b per head)
  j_axis = next((a for a in j_axes if out_view.strides[a] == 1), None)
  if j_axis is None: return None
  batch_axes = [a for a in j_axes if a != j_axis]
  J, K = view.shape[j_axis], prod(view.shape[a] for a in k_axes)
  rows = [a for a, size in enumerate(view.shape) if a not in j_axes and a not in reduce_axes and size > 1]
  target = cpu_target()
  width = next((w for w in panel_widths(target) if J % w == 0), None)
  s_j, s_k = view.strides[j_axis], view.strides[k_axes[-1]]
  # b's columns a row apart (x @ w.T, w stored (out, in)): the copy is what makes the product's tiles whole vectors
  transposed = s_j != 1
  if width is None or not rows or (batch_axes and not transposed): return None
  reuse = prod(view.shape[a] for a in rows + batch_axes)
  if transposed and K <= MAX_SHORT_K:
    # a short k (attention's q @ k.T over a head's 64 dims): dot products would end after 4 trips in 16 horizontal sums
    if prod(view.shape[a] for a in rows) < MIN_ROWS_SHORT_K: return None
  elif K < MIN_REDUCE: return None
  # every row dim reads b at the same place: a transposed b is reused by all of them (a batch's tokens, say)
  elif transposed and (batch_axes or reuse < MIN_ROWS_TRANSPOSED): return None
  elif not transposed and (J * K * 4 < min_packed_bytes(target) or max(view.shape[a] for a in rows) < MIN_ROWS): return None
  # the copy: packed[batch...][p][k][c] = b[batch offsets + (p * width + c) * s_j + k * s_k + offset]
  batch = tuple(view.shape[a] for a in batch_axes)
  panels = View.create(batch + (J // width, K, width))
  pack_view = ShapeTracker((View.create(panels.shape, tuple(view.strides[a] for a in batch_axes) + (width * s_j, s_k, s_j), view.offset),))
  # the product reads packed[batch...][j // width][k][j % width] at kernel coordinates (..., j, ..., k dims, ...)
  nb = len(batch)
  as_bjk = ShapeTracker.from_shape(panels.shape).permute(tuple(range(nb)) + (nb, nb + 2, nb + 1)) \
    .reshape(batch + (J,) + tuple(view.shape[a] for a in k_axes))
  return load, _seen_by_kernel(as_bjk, batch_axes + [j_axis] + k_axes, view), pack_view, panels


def _row_major_plan(item, load: UOp):
  """Like _packing_plan, for the other operand: `a` in a[i, k] read k-major (its rows i side by side, k a row apart: dy
  in a weight gradient dy.T @ x), when it is big and its k rows are a multiple of ALIASED_ROW_BYTES apart. The
  product reads each tile's rows along k, one cache line per trip, all in the same one or two L1 cache sets, which
  the hardware prefetcher doesn't follow (nn.Linear(128, 512)'s weight gradient over 1024 tokens ran at 0.65x
  torch's speed). The copy writes a row-major, transposing 16x16 blocks (see opt.heuristics, rule 1b), and the
  product reads each row as one stream (0.88x, the copy included). Rows 1.5 KB apart (384 floats) run as fast
  unpacked."""
  if (operand := _operand(item, load)) is None or len(operand.out_axes) != 1: return None
  view, reduce_axes, k_axes, (i_axis,), out_view = operand
  # i: rows of the output, side by side in a
  if out_view.strides[i_axis] == 1 or view.strides[i_axis] != 1: return None
  I, K = view.shape[i_axis], prod(view.shape[a] for a in k_axes)
  columns = prod(size for a, size in enumerate(view.shape) if a != i_axis and a not in reduce_axes)
  if I * K * 4 < min_packed_bytes(cpu_target()) or view.strides[k_axes[-1]] * 4 % ALIASED_ROW_BYTES: return None
  if K < MIN_REDUCE or columns < MIN_ROWS: return None
  rows = View.create((I, K))
  pack_view = ShapeTracker((View.create(rows.shape, (1, view.strides[k_axes[-1]]), view.offset),))
  as_ik = ShapeTracker.from_shape(rows.shape).reshape((I,) + tuple(view.shape[a] for a in k_axes))
  return load, _seen_by_kernel(as_ik, [i_axis] + k_axes, view), pack_view, rows


def _copy_ast(dtype, pack_view: ShapeTracker, panels: View) -> UOp:
  """A copy of panels loops over k outermost (after any batch dims; then panel, then column): b is read row by row,
  in order. A row-major copy of `a` loops over its rows."""
  nb = len(panels.shape) - 3
  order = tuple(range(nb)) + (nb + 1, nb, nb + 2) if nb >= 0 else (0, 1)
  source = UOp(Ops.LOAD, dtype, (UOp(Ops.DEFINE_GLOBAL, dtype.ptr(), (), 1), UOp(Ops.VIEW, arg=pack_view.permute(order))))
  store = UOp(Ops.STORE, dtypes.void, (UOp(Ops.DEFINE_GLOBAL, dtype.ptr(), (), 0), UOp(Ops.VIEW, arg=ShapeTracker((panels,)).permute(order)), source))
  return UOp(Ops.SINK, dtypes.void, (store,))
