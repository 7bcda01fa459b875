"""The meaning of each ALU op, cast and bitcast on numpy values, for the PYTHON device's interpreter.

Input: an op and the dtypes of its result and operands. Output: a function from numpy values (an array with one
entry per thread, or a numpy scalar when uniform) to the result, exactly as the C renderer's table computes it
(minigrad/codegen/c_renderer.py): integer division and remainder truncate toward zero, integer math wraps at the
type's width, float32 stays float32, MAX propagates NaN, CMPNE is true for NaN, float -> int casts truncate.
bfloat16 values are their 16-bit words (uint16); float16 is numpy's float16. Callers silence numpy's warnings
(overflow, invalid casts) around a whole launch.
"""
from __future__ import annotations
from typing import Any, Callable
import numpy as np
from minigrad.dtype import DType, dtypes, bfloat16_bits, to_numpy
from minigrad.uop.ops import Ops
from minigrad.runtime.device import bfloat16_bits_to_float32, float32_to_bfloat16_bits


def numpy_dtype(dt: DType) -> np.dtype:
  """How values of `dt` are held: bfloat16 as its uint16 words, everything else as numpy's own type."""
  return np.dtype(np.uint16) if dt == dtypes.bfloat16 else to_numpy(dt)


def scalar_of(value: Any, dt: DType) -> Any:
  """A constant as a numpy scalar of its dtype (a bfloat16 as its word)."""
  if dt == dtypes.bfloat16: return np.uint16(bfloat16_bits(value))
  return numpy_dtype(dt).type(value)


def _typed(result: Any, npdt: np.dtype) -> Any:
  return result if result.dtype == npdt else result.astype(npdt)


def _c_divide(a: Any, b: Any) -> Any:
  """Integer division rounding toward zero (C), via the remainder, which takes the dividend's sign: a - r is an
  exact multiple of b, so floor division of it is exact. Division by zero gives 0 instead of a crash."""
  return np.floor_divide(a - np.fmod(a, b), b)


def _max_float(a: Any, b: Any) -> Any: return np.where(np.isnan(a) | (a > b), a, b)   # a NaN in a wins, then b's
def _max_int(a: Any, b: Any) -> Any: return np.where(a < b, b, a)


def alu_function(op: Ops, dt: DType, operand_dt: DType) -> Callable[..., Any]:
  """The function computing `op` with result dtype `dt` on operands of dtype `operand_dt` (the values' dtype: for
  comparisons the compared type, for WHERE the selected type)."""
  npdt, floating = numpy_dtype(dt), dtypes.is_float(operand_dt)
  signed_int = dtypes.is_int(operand_dt) and not dtypes.is_unsigned(operand_dt)
  if op is Ops.NEG:
    negate = np.logical_not if dt == dtypes.bool else np.negative
    return lambda x: _typed(negate(x), npdt)
  if op is Ops.RECIP:
    one = npdt.type(1)
    return lambda x: _typed(np.divide(one, x), npdt)
  if op in (Ops.EXP2, Ops.LOG2, Ops.SIN) and npdt.itemsize < 8:
    # glibc's exp2f/log2f/sinf are (nearly always) correctly rounded; numpy's float32 SIMD versions are a few ulp off.
    # Computing in float64 and rounding once gives the correctly rounded float32.
    function = {Ops.EXP2: np.exp2, Ops.LOG2: np.log2, Ops.SIN: np.sin}[op]
    return lambda x: _typed(function(np.asarray(x, dtype=np.float64)), npdt)
  unary = {Ops.EXP2: np.exp2, Ops.LOG2: np.log2, Ops.SIN: np.sin, Ops.SQRT: np.sqrt, Ops.TRUNC: np.trunc}
  if op in unary:
    function = unary[op]
    return lambda x: _typed(function(x), npdt)
  if op in (Ops.IDIV, Ops.FDIV):   # C's `/`: true division on floats, truncating division on integers
    divide = np.divide if floating else _c_divide if signed_int else np.floor_divide
    return lambda a, b: _typed(divide(a, b), npdt)
  if op is Ops.MOD: return lambda a, b: _typed(np.fmod(a, b), npdt)
  if op is Ops.MAX:
    maximum = _max_float if floating else _max_int
    return lambda a, b: _typed(maximum(a, b), npdt)
  if op in (Ops.SHL, Ops.SHR):
    shift, operand_npdt = (np.left_shift if op is Ops.SHL else np.right_shift), numpy_dtype(operand_dt)
    return lambda a, b: _typed(shift(a, _typed(b, operand_npdt)), npdt)
  if op is Ops.WHERE: return lambda c, a, b: _typed(np.where(c, a, b), npdt)
  if op is Ops.MULACC:
    if floating: return lambda a, b, c: fma(a, b, c, npdt)
    return lambda a, b, c: _typed(np.add(np.multiply(a, b), c), npdt)
  binary = {Ops.ADD: np.add, Ops.MUL: np.multiply, Ops.CMPLT: np.less, Ops.CMPNE: np.not_equal,
            Ops.AND: np.bitwise_and, Ops.OR: np.bitwise_or, Ops.XOR: np.bitwise_xor}
  if op in binary:
    function = binary[op]
    return lambda a, b: _typed(function(a, b), npdt)
  raise NotImplementedError(f"the PYTHON device has no meaning for {op}")


# ---------------------------------------------------------------- fused multiply-add
# The C compilers behind the CPU device (and GPU compilers) contract a*b+c into one fused multiply-add, rounded once.
# numpy has no fma, so it is emulated exactly with error-free transformations and rounding to odd (Boldo and
# Melquiond, "Emulation of FMA and correctly rounded sums: proved algorithms using rounding to odd", 2008).

def _two_sum(a: Any, b: Any) -> tuple[Any, Any]:
  """s + e == a + b exactly, s = fl(a + b)."""
  s = a + b
  b_part = s - a
  return s, (a - (s - b_part)) + (b - b_part)


def _round_to_odd_sum(a: Any, b: Any) -> Any:
  """a + b rounded to odd: exact results stay, inexact ones take the neighbour whose last mantissa bit is 1.
  Rounding that to a format with at least 2 fewer bits rounds correctly (no double-rounding error)."""
  s, error = _two_sum(a, b)
  even = (np.asarray(s).view(np.uint64) & np.uint64(1)) == 0
  fix = (error != 0) & even & np.isfinite(s)
  return np.where(fix, np.nextafter(s, np.where(error > 0, np.inf, -np.inf)), s)


def _split(a: Any) -> tuple[Any, Any]:
  """Veltkamp's split of a float64 into two halves of 26 bits: a == high + low."""
  scaled = a * 134217729.0   # 2**27 + 1
  high = scaled - (scaled - a)
  return high, a - high


def fma(a: Any, b: Any, c: Any, npdt: np.dtype) -> Any:
  """a * b + c rounded once to float32 or float64."""
  a, b, c = (np.asarray(x, dtype=np.float64) for x in (a, b, c))
  if npdt == np.float32:   # the product of two float32 is exact in float64, so only the sum rounds before float32
    product = a * b
    total = product + c
    # rounding twice differs from rounding once only when the float64 sum lands exactly halfway between two float32
    # (the low 29 of its 52 mantissa bits are 1000...0) or in float32's subnormal range; else one rounding is enough
    halfway = (np.asarray(total).view(np.uint64) & np.uint64(0x1FFFFFFF)) == np.uint64(0x10000000)
    suspicious = halfway | ((np.abs(total) < 2.0 ** -126) & (total != 0))
    if not suspicious.any(): return total.astype(np.float32)
    if np.ndim(total) == 0: return np.where(np.isfinite(product), _round_to_odd_sum(product, c), total).astype(np.float32)
    which = np.flatnonzero(suspicious)   # redo just these, rounding the sum to odd
    product, c, total = np.broadcast_to(product, total.shape)[which], np.broadcast_to(c, total.shape)[which], total.copy()
    total[which] = np.where(np.isfinite(product), _round_to_odd_sum(product, c), total[which])
    return total.astype(np.float32)
  product = a * b
  a_high, a_low = _split(a)
  b_high, b_low = _split(b)
  product_low = ((a_high * b_high - product) + a_high * b_low + a_low * b_high) + a_low * b_low
  high, low = _two_sum(c, product)
  fused = high + _round_to_odd_sum(low, product_low)
  return np.where(np.isfinite(fused) & np.isfinite(product_low), fused, product + c)


def _word_array(x: Any) -> tuple[np.ndarray, bool]:
  """`x` as a 1-d array, and whether it was a scalar (to give one back)."""
  return np.asarray(x).reshape(-1), np.ndim(x) == 0


def cast_function(from_dt: DType, to_dt: DType) -> Callable[[Any], Any]:
  """Value conversion as C casts: float -> int truncates, anything -> bool is `!= 0` (NaN is true), ints wrap;
  bfloat16 words convert exactly to float32 and round to nearest-even from float32."""
  npdt = numpy_dtype(to_dt)
  if to_dt == dtypes.bfloat16 or from_dt == dtypes.bfloat16:
    def convert(x: Any) -> Any:
      words, scalar = _word_array(x)
      if from_dt == dtypes.bfloat16: out = bfloat16_bits_to_float32(words).astype(npdt)
      else: out = float32_to_bfloat16_bits(words.astype(np.float32))
      return out[0] if scalar else out
    return convert
  if to_dt == dtypes.bool: return lambda x: np.not_equal(x, 0)
  return lambda x: _typed(x, npdt)


def bitcast_function(from_dt: DType, to_dt: DType) -> Callable[[Any], Any]:
  """Reinterpret the bits (same size): numpy's .view."""
  npdt = numpy_dtype(to_dt)
  if numpy_dtype(from_dt).itemsize != npdt.itemsize: raise ValueError(f"can't bitcast {from_dt} to {to_dt}: sizes differ")
  def bitcast(x: Any) -> Any:
    words, scalar = _word_array(x)
    out = words.view(npdt)
    return out[0] if scalar else out
  return bitcast
