"""The CPU optimizer's machine facts: what each policy decision reads from the Target (minigrad/target.py).

Input: a `Target` (vector bytes and registers, cache sizes, cache line, whether wide vectors run as halves). Output:
the numbers the policies use: SIMD lane widths and register budgets for the kernel heuristics (opt/heuristics.py),
cache-fit thresholds, panel widths for operand packing (schedule/packing.py) and the row width convolutions compute
(tensor/conv.py). Adding a CPU means describing it as a Target; these rules then give its decisions.
"""
from __future__ import annotations
from typing import Sequence
from minigrad.target import Target


def lane_widths(target: Target, dtype_bytes: int, candidates: Sequence[int]) -> list[int]:
  """The `candidates` (SIMD lane counts the lowerer handles), widest first, whose vector of `dtype_bytes` elements
  fits one of the Target's vector registers (16 float32 with AVX-512, 8 with AVX2, 4 with SSE or NEON)."""
  return [w for w in sorted(candidates, reverse=True) if w * dtype_bytes <= target.vector_bytes]


def max_accumulators(target: Target) -> int:
  """Vector accumulators a register tile may keep: three quarters of the vector registers (24 of AVX-512's 32, 12 of
  AVX2's 16); the rest hold a trip's vector loads and a broadcast."""
  return target.vector_registers * 3 // 4


def row_by_row_accumulators(target: Target) -> int:
  """Past this many accumulators a tile's statements go row by row (one row's broadcast live at a time): half the
  vector registers."""
  return target.vector_registers // 2


def streamed_vector_bytes(target: Target) -> int:
  """Vector bytes for rows that only stream through (a row reduction): 32 on CPUs that run 64-byte vectors as two
  halves, which stream faster there as 32-byte vectors."""
  return min(target.vector_bytes, 32) if target.halves_wide_vectors else target.vector_bytes


def cached_bytes(target: Target) -> int:
  """An input part a tile reads over its whole reduce loop stays in cache up to this size: half of L2."""
  return target.l2_bytes // 2


def l1_resident_bytes(target: Target) -> int:
  """An input part a tile reads over its reduce loop stays in L1 up to this size: two thirds of L1d (32 of 48 KB)."""
  return target.l1d_bytes * 2 // 3


def line_elements(target: Target) -> int:
  """float32 elements per cache line."""
  return target.cache_line_bytes // 4


def panel_widths(target: Target) -> tuple[int, ...]:
  """Columns per packed matmul panel, widest first: 4 or 2 float32 vectors (64 or 32 with AVX-512, 32 or 16 with AVX2)."""
  return tuple(n * target.vector_bytes // 4 for n in (4, 2))


def min_packed_bytes(target: Target) -> int:
  """Matmul operands smaller than this (half of L2) stay in the L2 cache as they are: no packed copy."""
  return target.l2_bytes // 2


def conv_row_width(width: int, target: Target) -> int:
  """The row width a stride-1 convolution computes for rows of `width` outputs: a power of two below the Target's
  float32 lanes, else a multiple of its lanes (16 with AVX-512, 8 with AVX2), so that the row runs as whole SIMD
  vectors."""
  lanes = target.vector_bytes // 4
  return next((w for w in (1, 2, 4, 8, 16) if w >= width and w < lanes), -(-width // lanes) * lanes)
