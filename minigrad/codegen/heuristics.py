"""Hand-written optimization choices: which dims of a kernel to upcast (SIMD lanes, register tiles) or unroll,
and in which order the loops run.

Input: a fresh `Kernel`. Output: the same kernel with `apply_opt` called for the actions chosen here.
`NOOPT=1` skips this; `BEAM=N` searches instead.

The rules, for a CPU with 32 SIMD registers of 16 floats and two FMA units (AVX-512):
  1. lanes: the output dim that is contiguous in memory becomes 16 (or 8, 4, 2) SIMD lanes, when every buffer
     reads the new lane dim contiguously or not at all. Padding is fine: a load whose validity changes
     across the lanes becomes a masked vector load.
  2. register tile, in a reduce kernel with lanes: a dim that the vector loads don't depend on (a matmul's rows,
     a convolution's output channels) is unrolled by up to 8 and the lane dim by 2 more vectors, so each loaded
     vector feeds 8 multiply-adds and each broadcast value 2: up to 16 independent accumulators, enough to
     keep both FMA units busy through their 4-cycle latency.
  3. short reduce dims (a 3x3 window) are unrolled: more independent work per loop trip, and the masks of
     padded loads stop depending on the loop.
  4. loop order: among the output loops, the dim the biggest per-tile input doesn't depend on runs innermost,
     so that input stays in cache while the tiles sweep along it (a matmul's packed column panel, see
     minigrad.schedule.packing).
  5. row reductions (no lanes on the output): lanes from a contiguous reduce dim, summed across at the end.
"""
from __future__ import annotations
import copy
import functools
from minigrad.codegen.kernel import Kernel, Opt, KernelOptError
from minigrad.codegen.gpu_heuristics import gpu_optimizations
from minigrad.codegen.lowerer import VECTOR_WIDTHS
from minigrad.codegen.vectorize import vector_ok
from minigrad.helpers import prod
from minigrad.uop.ops import Ops, UOp
from minigrad.uop.shapetracker import ShapeTracker
from minigrad.uop.symbolic import split_terms

LANES = tuple(sorted(VECTOR_WIDTHS, reverse=True))
TILE_ROWS = (8, 4, 2)      # register tile rows, tried in this order
TILE_VECTORS = 2           # vectors per tile row
MAX_UNROLLED_REDUCE = 4    # reduce dims up to this size are unrolled whole


@functools.lru_cache(maxsize=4096)
def index_strides(st: ShapeTracker) -> tuple[int | None, ...]:
  """Per dim the buffer stride if the index is affine in that dim (None if not). Unlike `real_strides`,
  validity (padding) may depend on the dim."""
  if len(st.views) == 1: return st.views[0].strides
  variables = [UOp.variable(f"idx{d}", 0, max(size - 1, 0)) for d, size in enumerate(st.shape)]
  dim_of = {variable: d for d, variable in enumerate(variables)}
  index, _ = st.to_indexed_uops(variables)
  strides: list[int | None] = [0] * len(st.shape)
  for term in split_terms(index):
    scaled = term.op is Ops.MUL and term.src[1].op is Ops.CONST
    base, coefficient = (term.src[0], term.src[1].arg) if scaled else (term, 1)
    if base in dim_of and strides[dim_of[base]] == 0: strides[dim_of[base]] = coefficient
    else:
      for node in term.toposort:
        if node in dim_of: strides[dim_of[node]] = None
  return tuple(strides)


def _strides(k: Kernel, axis: int) -> list[int | None]: return [index_strides(st)[axis] for st in k.sts]


def _trial(k: Kernel, opt: Opt) -> Kernel | None:
  """A copy of `k` with `opt` applied, or None if it doesn't apply."""
  trial = copy.copy(k)
  trial.sts, trial.axis_kinds, trial.applied_opts = list(k.sts), list(k.axis_kinds), list(k.applied_opts)
  try: trial.apply_opt(opt)
  except KernelOptError: return None
  return trial


def _lanes_fit(k: Kernel, opt: Opt) -> bool:
  """After `opt`, is the new (last) dim read contiguously or not at all by every buffer?"""
  trial = _trial(k, opt)
  return trial is not None and all(stride in (0, 1) for stride in _strides(trial, trial.shape_len - 1))


def hand_coded_optimizations(k: Kernel) -> None:
  if k.has_local: return gpu_optimizations(k)
  if not k.full_shape: return
  stored = [n.src[2].dtype for n in k.ast.toposort if n.op is Ops.STORE]
  if any(not vector_ok(dt, 2) for dt in stored): return   # SIMD lanes for float32/float64/int32 outputs
  dtype_bytes = max((n.dtype.itemsize for n in k.ast.toposort if n.op in (Ops.LOAD, Ops.CONST, Ops.ARANGE)), default=4)
  widths = [w for w in LANES if w * dtype_bytes <= 64]
  out_strides = index_strides(k.output_st)
  globals_ = k.axes_of("global")
  has_reduce = bool(k.axes_of("reduce"))
  # 1. lanes on the output's contiguous dim
  for axis in reversed(globals_):
    if out_strides[axis] != 1: continue
    width = next((w for w in widths if _lanes_fit(k, Opt("UPCAST", globals_.index(axis), w))), None)
    if width is None: continue
    size = k.full_shape[axis]
    k.apply_opt(Opt("UPCAST", globals_.index(axis), width))
    if has_reduce: _register_tile(k, lane_remainder=axis if size > width else None)   # the rest of the split dim stays at `axis`
    return
  # 5. row reductions: lanes from a contiguous reduce dim, summed across at the end
  reduces = k.axes_of("reduce")
  for axis in reversed(reduces):
    width = next((w for w in widths if _lanes_fit(k, Opt("UNROLL", reduces.index(axis), w))), None)
    if width is not None:
      k.apply_opt(Opt("UNROLL", reduces.index(axis), width))
      return


def _register_tile(k: Kernel, lane_remainder: int | None) -> None:
  lane_axis = k.shape_len - 1
  vector_loads = [i for i, stride in enumerate(_strides(k, lane_axis)) if stride == 1 and k.sts[i] is not k.output_st]
  # 2. rows: a global dim the vector loads don't depend on
  globals_ = k.axes_of("global")
  rows_axis = next((a for a in reversed(globals_) if a != lane_remainder and all(_strides(k, a)[i] == 0 for i in vector_loads)), None)
  rows = next((r for r in TILE_ROWS if rows_axis is not None and k.full_shape[rows_axis] % r == 0), None)
  if rows is not None:
    if lane_remainder is not None and k.full_shape[lane_remainder] % TILE_VECTORS == 0 and rows * TILE_VECTORS <= 16:
      k.apply_opt(Opt("UPCAST", globals_.index(lane_remainder), TILE_VECTORS))
    globals_ = k.axes_of("global")
    rows_global = globals_.index(rows_axis) if rows_axis in globals_ else None
    if rows_global is not None: k.apply_opt(Opt("UPCAST", rows_global, rows))
  # 3. short reduce dims are unrolled whole (the innermost one)
  reduces = k.axes_of("reduce")
  short = [a for a in reduces if k.full_shape[a] <= MAX_UNROLLED_REDUCE]
  if short and len(reduces) > 1: k.apply_opt(Opt("UNROLL", reduces.index(short[-1]), k.full_shape[short[-1]]))
  # 4. loop order: the dim the biggest per-tile input doesn't depend on runs innermost
  _order_loops(k)


def _order_loops(k: Kernel) -> None:
  globals_ = k.axes_of("global")
  if len(globals_) < 2: return
  inner = [a for a in range(k.shape_len) if k.axis_kinds[a] not in ("global", "local")]

  def tile_elements(st: ShapeTracker) -> int:
    strides = index_strides(st)
    return prod(k.full_shape[a] for a in inner if strides[a] != 0)
  inputs = [st for st in k.sts if st is not k.output_st]
  if not inputs: return
  biggest = max(inputs, key=tile_elements)
  strides = index_strides(biggest)
  candidates = [a for a in globals_ if strides[a] == 0 and k.full_shape[a] > 1]
  if not candidates or candidates[-1] == globals_[-1]: return
  k.apply_opt(Opt("SWAP", globals_.index(candidates[-1]), len(globals_) - 1))
