"""Hand-written optimization choices: which dims of a kernel to upcast (SIMD lanes, register tiles) or unroll.

Input: a fresh `Kernel`. Output: the same kernel with `apply_opt` called for the actions chosen here.
`NOOPT=1` skips this; `BEAM=N` searches instead.

The rules, for a CPU with 16-float SIMD registers:
  - the output dim that is contiguous in memory becomes 16 (or 8, 4, 2) SIMD lanes, when loads along it are
    contiguous or broadcast;
  - in a reduce kernel whose output dim is vectorized, a second global dim that some input is broadcast
    along (a matmul's rows) is unrolled by 4, so each loaded vector is used 4 times (a 4x16 register tile);
  - a reduce kernel whose reduce dim is the contiguous one (row sums) takes its lanes from the reduce dim.
"""
from __future__ import annotations
from minigrad.codegen.kernel import Kernel, Opt
from minigrad.codegen.gpu_heuristics import gpu_optimizations
from minigrad.codegen.lowerer import VECTOR_WIDTHS
from minigrad.codegen.vectorize import vector_ok
from minigrad.uop.ops import Ops

LANES = tuple(sorted(VECTOR_WIDTHS, reverse=True))


def _strides(k: Kernel, axis: int) -> list[int | None]: return [st.real_strides()[axis] for st in k.sts]


def _lane_friendly(k: Kernel, axis: int) -> bool:
  """Every buffer reads this dim contiguously (stride 1) or not at all (stride 0)."""
  return all(stride in (0, 1) for stride in _strides(k, axis))


def _widest_lanes(size: int, dtype_bytes: int) -> int | None:
  return next((w for w in LANES if size % w == 0 and w * dtype_bytes <= 64), None)


def hand_coded_optimizations(k: Kernel) -> None:
  if k.has_local: return gpu_optimizations(k)
  if not k.full_shape: return
  stored = [n.src[2].dtype for n in k.ast.toposort if n.op is Ops.STORE]
  if any(not vector_ok(dt, 2) for dt in stored): return   # SIMD lanes are float32/float64 only
  dtype_bytes = max((n.dtype.itemsize for n in k.ast.toposort if n.op in (Ops.LOAD, Ops.CONST, Ops.ARANGE)), default=4)
  out_strides = k.output_st.real_strides()
  globals_ = list(range(k.first_reduce))
  reduces = list(range(k.first_reduce, k.first_upcast))
  # 1. lanes on the output's contiguous dim
  lane_axis = next((a for a in reversed(globals_) if out_strides[a] == 1 and _lane_friendly(k, a)), None)
  if lane_axis is not None and (width := _widest_lanes(k.full_shape[lane_axis], dtype_bytes)) is not None:
    k.apply_opt(Opt("UPCAST", globals_.index(lane_axis), width))
    if reduces:
      # 2. a register tile: reuse each loaded vector for 4 rows of a dim some input is broadcast along
      for axis in reversed(range(k.first_reduce)):
        if k.axis_kinds[axis] == "global" and k.full_shape[axis] % 4 == 0 and 0 in _strides(k, axis):
          k.apply_opt(Opt("UPCAST", axis, 4))
          break
    return
  # 3. row reductions: lanes from a contiguous reduce dim, summed across at the end
  for axis in reversed(reduces):
    if _lane_friendly(k, axis) and (width := _widest_lanes(k.full_shape[axis], dtype_bytes)) is not None:
      k.apply_opt(Opt("UNROLL", reduces.index(axis), width))
      return
