"""Dtype lowering: float16 and bfloat16 arithmetic becomes float32 arithmetic, and bfloat16 becomes bit operations.

Input: lowered loop code (a SINK of STOREs, from minigrad.codegen.lowerer). Output: the same code where
  - every ALU op, comparison and REDUCE on float16/bfloat16 values computes in float32 and rounds its result
    back once: the same per-op rounding torch's CPU kernels do (C compilers would otherwise keep _Float16
    intermediates in float32 across a whole expression, and gcc 12 has no bfloat16 arithmetic at all);
  - bfloat16 exists only as 16-bit words: in memory (LOAD/STORE), as constants, in WHEREs (a selection moves
    the bits unchanged) and in BITCASTs. Widening is exact (the word is the top half of a float32: shift it
    left by 16 and bitcast); narrowing rounds to nearest, ties to even, keeping NaNs NaN;
  - float64 -> float16 goes through float32, as torch converts.
The rules run together with the symbolic rules, so constants fold as they appear (a bfloat16 constant used in
arithmetic becomes a float32 constant). `lower_dtypes(sink)` applies them.
"""
from __future__ import annotations
from minigrad.dtype import dtypes
from minigrad.uop.ops import UOp, Ops, GroupOp
from minigrad.uop.rewrite import PatternMatcher, UPat, graph_rewrite
from minigrad.uop.symbolic import symbolic

HALF_TYPES = (dtypes.float16, dtypes.bfloat16)
# ops whose result on half types is computed in float32 (WHERE only moves bits, so it stays)
FLOAT32_COMPUTED = (GroupOp.ALU - GroupOp.Comparison - {Ops.WHERE})


def _as_float32(x: UOp) -> UOp: return x.cast(dtypes.float32)


def _compute_in_float32(node: UOp) -> UOp | None:
  if node.dtype.count != 1: return None
  return UOp(node.op, dtypes.float32, tuple(_as_float32(s) for s in node.src), node.arg).cast(node.dtype)


def _compare_in_float32(node: UOp) -> UOp | None:
  if node.src[0].dtype not in HALF_TYPES: return None
  return UOp(node.op, node.dtype, tuple(_as_float32(s) for s in node.src), node.arg)


def _reduce_in_float32(node: UOp) -> UOp | None:
  """Accumulate half types in float32 (torch's accumulate type), rounding once at the end."""
  if node.dtype.count != 1: return None
  value, loops = node.src[0], node.src[1:]
  return UOp(Ops.REDUCE, dtypes.float32, (_as_float32(value),) + loops, node.arg).cast(node.dtype)


def bfloat16_to_float32(x: UOp) -> UOp:
  """Exact: a bfloat16 word is the upper half of the float32 with the same value."""
  word = UOp(Ops.BITCAST, dtypes.uint16, (x,)).cast(dtypes.uint32)
  return UOp(Ops.BITCAST, dtypes.float32, (word.alu(Ops.SHL, UOp.const(dtypes.uint32, 16)),))


def float32_to_bfloat16(f: UOp) -> UOp:
  """Round a float32 to bfloat16, to nearest with ties to even; a NaN stays NaN (quiet, same sign)."""
  bits = UOp(Ops.BITCAST, dtypes.uint32, (f,))
  upper = bits.alu(Ops.SHR, UOp.const(dtypes.uint32, 16))
  # adding 0x7FFF (+1 when the kept part is odd) carries into the upper half exactly when rounding up is due
  rounded = (bits + (upper & 1) + 0x7FFF).alu(Ops.SHR, UOp.const(dtypes.uint32, 16))
  word = f.ne(f).where(upper | 0x40, rounded).cast(dtypes.uint16)
  return UOp(Ops.BITCAST, dtypes.bfloat16, (word,))


def _cast_from_bfloat16(node: UOp, x: UOp) -> UOp | None:
  if node.dtype.count != 1 or node.dtype == dtypes.bfloat16: return None
  return bfloat16_to_float32(x).cast(node.dtype)


def _cast_to_bfloat16(node: UOp, x: UOp) -> UOp | None:
  if node.dtype.count != 1 or x.dtype == dtypes.bfloat16: return None
  return float32_to_bfloat16(_as_float32(x))


dtype_rules = PatternMatcher([
  (UPat(FLOAT32_COMPUTED, HALF_TYPES, name="node"), _compute_in_float32),
  (UPat(GroupOp.Comparison, name="node"), _compare_in_float32),
  (UPat(Ops.REDUCE, HALF_TYPES, name="node"), _reduce_in_float32),
  (UPat(Ops.CAST, dtypes.bfloat16, src=(UPat.var("x"),), name="node"), _cast_to_bfloat16),
  (UPat(Ops.CAST, src=(UPat.var("x", dtypes.bfloat16),), name="node"), _cast_from_bfloat16),
  (UPat(Ops.CAST, dtypes.float16, src=(UPat.var("x", dtypes.float64),)), lambda x: _as_float32(x).cast(dtypes.float16)),
])


def lower_dtypes(sink: UOp) -> UOp:
  """Apply the dtype rules (with constant folding and the other symbolic rules) to lowered loop code."""
  return graph_rewrite(sink, symbolic + dtype_rules)
