"""Tensor math: arithmetic with torch's type promotion, comparisons, logical and bitwise ops, pow, clamp, lerp,
where, the basic reductions, matmul and the neural-network op spellings, as a mixin.

Input: Tensors (this class is mixed into `Tensor`, so `self` is a Tensor). Output: new lazy Tensors. Every op
here is built from the differentiable primitives in minigrad.tensor.function, so gradients come for free. The
elementwise functions of one tensor (exp, sin, gelu ...) live in minigrad.tensor.unary_ops.
Semantics follow torch: result dtypes (minigrad.dtype.result_type), integer `//` floors and `%` takes the
divisor's sign, shifts by more than the width give 0 (or the sign), integer overflow wraps. Arguments are
checked early; errors name the shapes and dtypes involved. Integer division by zero gives 0 (torch raises).
"""
from __future__ import annotations
from typing import Any, Callable, Sequence, TYPE_CHECKING
import math
import numpy as np
import minigrad.tensor.function as F
from minigrad import viz
import minigrad.tensor.symbolic_shapes as S
from minigrad.uop.variable import state as variables, extents_of
from minigrad.dtype import DType, DTypeError, dtypes, to_dtype, result_type
from minigrad.tensor.function import const_uop
from minigrad.helpers import prod
from minigrad.uop.ops import Ops, UOp
from minigrad.tensor.unary_ops import UnaryMixin, _exp2_of
if TYPE_CHECKING: from minigrad.tensor.tensor import Tensor

Number = (int, float, bool, np.generic)


def normalize_axis(axis: int, ndim: int) -> int:
  low, high = (-ndim, ndim - 1) if ndim > 0 else (-1, 0)
  if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool):
    raise TypeError(f"axis must be an int, got {type(axis).__name__}")
  if not low <= axis <= high: raise IndexError(f"Dimension out of range (expected to be in range of [{low}, {high}], but got {axis})")
  return axis % ndim if ndim > 0 else 0


def broadcast_shape(*shapes: tuple[int, ...]) -> tuple[int, ...]:
  ndim = max(len(s) for s in shapes)
  padded = [(1,) * (ndim - len(s)) + s for s in shapes]
  out = []
  for i, sizes in enumerate(zip(*padded)):
    non_one = {s for s in sizes if s != 1}
    if len(non_one) > 1:
      raise ValueError(f"shapes {' and '.join(str(s) for s in shapes)} can't be broadcast: "
                       f"sizes {' vs '.join(str(s) for s in sizes)} at dimension {i}")
    out.append(non_one.pop() if non_one else 1)
  return tuple(out)


DIFFERENTIABLE: dict[Ops, type[F.Function]] = {
  Ops.ADD: F.Add, Ops.MUL: F.Mul, Ops.NEG: F.Neg, Ops.FDIV: F.Div, Ops.MAX: F.Maximum, Ops.WHERE: F.Where,
  Ops.EXP2: F.Exp2, Ops.LOG2: F.Log2, Ops.SIN: F.Sin, Ops.SQRT: F.Sqrt, Ops.RECIP: F.Reciprocal,
}


def _operand(x: Any) -> Any:
  """How an operand takes part in type promotion: (dtype, ndim) for a tensor, the number itself otherwise."""
  return (x.dtype, x.ndim) if isinstance(x, MathMixin) else x


def _wide2(a: Tensor, b: Tensor, fn: Callable[[Tensor, Tensor], Tensor]) -> Tensor:
  """fn(a, b) for two float tensors of one dtype, computed in float64 and rounded once."""
  if a.dtype == dtypes.float64: return fn(a, b)
  return fn(a.cast(dtypes.float64), b.cast(dtypes.float64)).cast(a.dtype)


class MathMixin(UnaryMixin):
  """Arithmetic, comparison, logical/bitwise, reduce, linear-algebra and nn ops of Tensor (see minigrad.tensor)."""
  # ---- building blocks ----
  def _alu(self, op: Ops, *others: Tensor) -> Tensor:
    if (fn := DIFFERENTIABLE.get(op)) is not None: return fn.apply(self, *others)
    return type(self)(self.uop.alu(op, *(o.uop for o in others)))   # comparisons and bit ops: no gradient

  def _const(self, value: Any, dtype: DType) -> Tensor: return type(self)(const_uop(value, dtype, self.device, ()))

  def _broadcasted(self, other: Any, reverse: bool = False) -> tuple[Tensor, Tensor]:
    """self and other cast to their result dtype (torch's promotion) and expanded to one shape."""
    if type(other) is type(self):   # two tensors of one dtype, shape and device: nothing to do (most ops of a step)
      a, b = self.uop, other.uop
      if a.dtype is b.dtype and a.shape == b.shape and a.device == b.device and not (variables["in_use"] and extents_of(a) != extents_of(b)):
        return (other, self) if reverse else (self, other)   # (with Variables, the symbolic sizes must agree too)
      if a.dtype is b.dtype and a.device == b.device and not variables["in_use"]:   # one dtype: each broadcast in one op
        shape = broadcast_shape(a.shape, b.shape)
        x = self if a.shape == shape else F.Broadcast.apply(self, shape=shape)
        y = other if b.shape == shape else F.Broadcast.apply(other, shape=shape)
        return (y, x) if reverse else (x, y)
    if isinstance(other, MathMixin):
      if other.device != self.device: raise RuntimeError(f"tensors on different devices: {self.device} and {other.device}")
      dt = result_type(_operand(self), _operand(other))
      x, y = self.cast(dt), other.cast(dt)
    elif isinstance(other, Number):   # the constant is made in the tensor's shape: no broadcasting to do
      dt = result_type(_operand(self), other)
      x = self.cast(dt)
      y = type(self)(const_uop(other, dt, self.device, x.shape))
      return (y, x) if reverse else (x, y)
    else: raise TypeError(f"unsupported operand type for a Tensor op: {type(other).__name__}")
    if x.shape != y.shape:
      shape = broadcast_shape(x.shape, y.shape)
      x, y = x.expand(shape), y.expand(shape)
    return (y, x) if reverse else (x, y)

  def _float(self) -> Tensor: return self if dtypes.is_float(self.dtype) else self.cast(dtypes.default_float)

  # ---- dtypes ----
  def cast(self, dtype: DType | str | Any) -> Tensor:
    """Convert to `dtype` (a DType, a name like "float16", a numpy or torch dtype). Floats to ints truncate. As in
    torch, an integer or bool result has no gradient: it doesn't require grad, and backward stops there."""
    dtype = to_dtype(dtype)
    if self.dtype == dtype: return self
    return F.Cast.apply(self, dtype=dtype) if dtypes.is_float(dtype) else F.Cast.apply(self.detach(), dtype=dtype)
  def float(self) -> Tensor: return self.cast(dtypes.float32)
  def half(self) -> Tensor: return self.cast(dtypes.float16)
  def bfloat16(self) -> Tensor: return self.cast(dtypes.bfloat16)
  def double(self) -> Tensor: return self.cast(dtypes.float64)
  def int(self) -> Tensor: return self.cast(dtypes.int32)
  def long(self) -> Tensor: return self.cast(dtypes.int64)
  def short(self) -> Tensor: return self.cast(dtypes.int16)
  def char(self) -> Tensor: return self.cast(dtypes.int8)
  def byte(self) -> Tensor: return self.cast(dtypes.uint8)
  def bool(self) -> Tensor: return self.cast(dtypes.bool)

  def bitcast(self, dtype: DType | str | Any) -> Tensor:
    """Reinterpret the bits of each element as `dtype`, which must have the same itemsize. No gradient."""
    dtype = to_dtype(dtype)
    if dtype.itemsize != self.dtype.itemsize:
      raise DTypeError(f"can't bitcast {self.dtype.name} ({self.dtype.itemsize} bytes) to {dtype.name} ({dtype.itemsize} bytes): "
                       f"bitcast needs dtypes of the same itemsize (tensor of shape {self.shape})")
    if dtype == self.dtype: return self.detach()
    return type(self)(UOp(Ops.BITCAST, dtype, (self.uop,)))

  def element_size(self) -> int: return self.dtype.itemsize
  def is_floating_point(self) -> bool: return dtypes.is_float(self.dtype)

  # ---- arithmetic ----
  def add(self, x: Any, reverse: bool = False) -> Tensor:
    a, b = self._broadcasted(x, reverse)
    return a._alu(Ops.ADD, b)
  def sub(self, x: Any, reverse: bool = False) -> Tensor:
    if self.dtype == dtypes.bool or isinstance(x, (bool, np.bool_)) or (isinstance(x, MathMixin) and x.dtype == dtypes.bool):
      raise DTypeError(f"Subtraction, the `-` operator, with a bool tensor or value is not supported (operands {self.dtype.name} and "
                       f"{x.dtype.name if isinstance(x, MathMixin) else repr(x)}). Use the `^` or `logical_xor()` operator instead.")
    a, b = self._broadcasted(x, reverse)
    return a._alu(Ops.ADD, b._alu(Ops.NEG))
  def mul(self, x: Any, reverse: bool = False) -> Tensor:
    a, b = self._broadcasted(x, reverse)
    return a._alu(Ops.MUL, b)

  def div(self, x: Any, reverse: bool = False, rounding_mode: str | None = None) -> Tensor:
    """True division (ints give the default float), or with rounding_mode "trunc" / "floor" (dtype kept)."""
    # true division: a Python number joins as a float (torch doesn't wrap 300 into an int8 tensor's range here)
    if rounding_mode is None and isinstance(x, Number) and not isinstance(x, MathMixin): x = float(x)
    a, b = self._broadcasted(x, reverse)
    if rounding_mode is None: return a._float()._alu(Ops.FDIV, b._float())
    if rounding_mode not in ("trunc", "floor"):
      raise RuntimeError(f"div expected rounding_mode to be one of None, 'trunc', or 'floor' but found {rounding_mode!r}")
    if a.dtype == dtypes.bool: raise DTypeError(f"div with rounding_mode={rounding_mode!r} is not implemented for bool tensors")
    if not dtypes.is_float(a.dtype): return a._int_divide(b, floor=rounding_mode == "floor")
    if rounding_mode == "trunc": return a._opmath(lambda x: (x / b.cast(x.dtype)).trunc())
    return a._opmath(lambda x: _floor_divide_float(x, b.cast(x.dtype)))
  def floor_divide(self, x: Any) -> Tensor: return self.div(x, rounding_mode="floor")
  def idiv(self, x: Any, reverse: bool = False) -> Tensor:
    """Division rounding toward zero (tinygrad's name; C's integer division): torch's div(rounding_mode="trunc")."""
    return self.div(x, reverse, rounding_mode="trunc")
  def mod(self, x: Any, reverse: bool = False) -> Tensor:
    """tinygrad's name for `%` (the remainder with the divisor's sign, torch.remainder)."""
    return self.remainder(x, reverse)
  def neg(self) -> Tensor: return -self

  def _safe_divisor(self, b: Tensor) -> tuple[Tensor, Tensor, Tensor | None]:
    """(divisor with 0 and -1 replaced by 1, where it was 0, where it was -1 or None). x86 traps on a division
    by zero and on INT_MIN / -1 (int32 and int64; smaller types divide as C ints), so neither may reach C."""
    zero = b.eq(0)
    traps = not dtypes.is_unsigned(b.dtype) and b.dtype.itemsize >= 4
    minus_one = b.eq(-1) if traps else None
    safe = (zero | minus_one if minus_one is not None else zero).where(self._const(1, b.dtype), b)
    return safe, zero, minus_one

  def _int_divide(self, b: Tensor, floor: bool) -> Tensor:
    """Integer division of same-dtype tensors, rounding toward zero or down. Division by zero gives 0, and
    x // -1 is -x (wrapping at INT_MIN)."""
    safe, zero, minus_one = self._safe_divisor(b)
    quotient = type(self)(self.uop.alu(Ops.IDIV, safe.uop))
    if floor and not dtypes.is_unsigned(self.dtype):
      remainder = type(self)(self.uop.alu(Ops.MOD, safe.uop))
      quotient = quotient - (remainder.ne(0) & (remainder < 0).ne(safe < 0)).cast(self.dtype)
    if minus_one is not None: quotient = minus_one.where(-self, quotient)
    return zero.where(self._const(0, self.dtype), quotient)

  def remainder(self, x: Any, reverse: bool = False) -> Tensor:
    """Remainder with the divisor's sign (torch's %, Python's %). Integer x % 0 gives 0."""
    a, b = self._broadcasted(x, reverse)
    if a.dtype == dtypes.bool: raise DTypeError("remainder (%) is not implemented for bool tensors")
    if dtypes.is_float(a.dtype): return a._opmath(lambda x: _remainder_float(x, b.cast(x.dtype)))
    safe, zero, _ = a._safe_divisor(b)   # x % -1 is x % 1 = 0
    r = type(self)(a.uop.alu(Ops.MOD, safe.uop))
    if not dtypes.is_unsigned(a.dtype): r = (r.ne(0) & (r < 0).ne(safe < 0)).where(r + safe, r)
    return zero.where(self._const(0, a.dtype), r)

  def fmod(self, x: Any) -> Tensor:
    """Remainder with the dividend's sign (C's fmod, torch.fmod)."""
    a, b = self._broadcasted(x)
    if not dtypes.is_float(a.dtype):
      safe, zero, _ = a._safe_divisor(b)
      return zero.where(self._const(0, a.dtype), type(self)(a.uop.alu(Ops.MOD, safe.uop)))
    return a._opmath(lambda x: _fmod_float(x, b.cast(x.dtype)))

  def maximum(self, x: Any) -> Tensor:
    a, b = self._broadcasted(x)
    return a._alu(Ops.MAX, b)
  def minimum(self, x: Any) -> Tensor:
    a, b = self._broadcasted(x)
    return a._flip_order().maximum(b._flip_order())._flip_order()

  def _flip_order(self) -> Tensor:
    """An order-reversing map that is its own inverse: -x (floats), ~x (ints, no overflow), not x (bools)."""
    if dtypes.is_float(self.dtype): return -self
    return self.logical_not() if self.dtype == dtypes.bool else self ^ -1

  def __neg__(self) -> Tensor: return self.logical_not() if self.dtype == dtypes.bool else self._alu(Ops.NEG)
  def __add__(self, x: Any) -> Tensor: return self.add(x)
  def __radd__(self, x: Any) -> Tensor: return self.add(x, True)
  def __sub__(self, x: Any) -> Tensor: return self.sub(x)
  def __rsub__(self, x: Any) -> Tensor: return self.sub(x, True)
  def __mul__(self, x: Any) -> Tensor: return self.mul(x)
  def __rmul__(self, x: Any) -> Tensor: return self.mul(x, True)
  def __truediv__(self, x: Any) -> Tensor: return self.div(x)
  def __rtruediv__(self, x: Any) -> Tensor: return self.div(x, True)
  def __floordiv__(self, x: Any) -> Tensor: return self.div(x, rounding_mode="floor")
  def __rfloordiv__(self, x: Any) -> Tensor: return self.div(x, True, rounding_mode="floor")
  def __mod__(self, x: Any) -> Tensor: return self.remainder(x)
  def __rmod__(self, x: Any) -> Tensor: return self.remainder(x, True)
  def __matmul__(self, x: Tensor) -> Tensor: return self.matmul(x)
  def __rmatmul__(self, x: Tensor) -> Tensor: return x.matmul(self)
  def __pow__(self, x: Any) -> Tensor: return self.pow(x)
  def __rpow__(self, x: Any) -> Tensor:
    if not isinstance(x, Number): raise TypeError(f"unsupported operand type for **: {type(x).__name__}")
    dt = result_type(x, _operand(self))
    return self.full(self.shape, x, dt, self.device).pow(self)

  # ---- comparisons ----
  def _compare(self, op: Ops, x: Any, reverse: bool = False) -> Tensor:
    a, b = self._broadcasted(x, reverse)
    return a._alu(op, b)
  def __lt__(self, x: Any) -> Tensor: return self._compare(Ops.CMPLT, x)
  def __gt__(self, x: Any) -> Tensor: return self._compare(Ops.CMPLT, x, True)
  def __ge__(self, x: Any) -> Tensor: return (self > x) | self.eq(x)
  def __le__(self, x: Any) -> Tensor: return (self < x) | self.eq(x)
  def ne(self, x: Any) -> Tensor: return self._compare(Ops.CMPNE, x)
  def eq(self, x: Any) -> Tensor: return self.ne(x).logical_not()
  def lt(self, x: Any) -> Tensor: return self < x
  def gt(self, x: Any) -> Tensor: return self > x
  def le(self, x: Any) -> Tensor: return self <= x
  def ge(self, x: Any) -> Tensor: return self >= x
  def __eq__(self, x: Any) -> Tensor: return self.eq(x)  # type: ignore[override]
  def __ne__(self, x: Any) -> Tensor: return self.ne(x)  # type: ignore[override]
  __hash__ = object.__hash__

  def isnan(self) -> Tensor: return self.ne(self) if dtypes.is_float(self.dtype) else self.full_like(False, dtype=dtypes.bool)
  def isinf(self, detect_positive: bool = True, detect_negative: bool = True) -> Tensor:
    """True at +inf and -inf; tinygrad's detect_positive / detect_negative pick one side."""
    if not dtypes.is_float(self.dtype) or not (detect_positive or detect_negative): return self.full_like(False, dtype=dtypes.bool)
    if detect_positive and detect_negative: return self.abs().eq(math.inf)
    return self.eq(math.inf if detect_positive else -math.inf)
  def isfinite(self) -> Tensor: return (self.abs() < math.inf) if dtypes.is_float(self.dtype) else self.full_like(True, dtype=dtypes.bool)
  def isposinf(self) -> Tensor: return self.eq(math.inf) if dtypes.is_float(self.dtype) else self.full_like(False, dtype=dtypes.bool)
  def isneginf(self) -> Tensor: return self.eq(-math.inf) if dtypes.is_float(self.dtype) else self.full_like(False, dtype=dtypes.bool)

  def isclose(self, other: Any, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> Tensor:
    """|self - other| <= atol + rtol * |other| elementwise, as torch.isclose: equal values (infinities too) are
    close, an infinity is close to nothing else, NaN is close to NaN only with equal_nan. Same dtypes required."""
    if isinstance(other, MathMixin) and other.dtype != self.dtype:
      raise RuntimeError(f"isclose(): {self.dtype.name} did not match {other.dtype.name} (shapes {self.shape} and {other.shape})")
    if rtol < 0: raise RuntimeError(f"rtol must be greater than or equal to zero, but got {rtol}")
    if atol < 0: raise RuntimeError(f"atol must be greater than or equal to zero, but got {atol}")
    a, b = self._broadcasted(other)
    close = a.eq(b)
    if self.dtype == dtypes.bool: return close
    af, bf = (a, b) if dtypes.is_float(a.dtype) else (a.cast(dtypes.float64), b.cast(dtypes.float64))
    close = close | (af.isfinite() & bf.isfinite() & ((af - bf).abs() <= atol + rtol * bf.abs()))
    return close | (af.isnan() & bf.isnan()) if equal_nan else close
  def allclose(self, other: Any, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> bool:
    """True when every element is close (see isclose)."""
    return bool(self.isclose(other, rtol, atol, equal_nan).all().item())

  def copysign(self, other: Any) -> Tensor:
    """|self| with the sign of other (its sign bit: -0.0 and -NaN count as negative), as torch.copysign; the result is
    a float. The gradient is torch's: grad * out / self to self (0 where self is 0; NaN at infinities), none to other."""
    a, b = self._broadcasted(other)
    a, b = a._float(), b._float()
    def forward(x: Tensor, y: Tensor) -> Tensor:
      return _sign_bit(x).ne(_sign_bit(y)).where(-x, x)
    return F.Composite.apply(a, b.detach(), fn=forward,
                             gradient=lambda grad, out, x, y: (grad * x.eq(0).where(0.0, out / x), None))

  # ---- logical ops (any dtype, truthiness) ----
  def logical_not(self) -> Tensor: return self.cast(dtypes.bool)._alu(Ops.CMPNE, self.full(self.shape, True, dtypes.bool, self.device))
  def _logical(self, op: Ops, x: Any) -> Tensor:
    other = x.cast(dtypes.bool) if isinstance(x, MathMixin) else bool(x)
    a, b = self.cast(dtypes.bool)._broadcasted(other)
    return a._alu(op, b)
  def logical_and(self, x: Any) -> Tensor: return self._logical(Ops.AND, x)
  def logical_or(self, x: Any) -> Tensor: return self._logical(Ops.OR, x)
  def logical_xor(self, x: Any) -> Tensor: return self._logical(Ops.CMPNE, x)

  # ---- bitwise ops and shifts (integers and bools) ----
  def _bitwise(self, op: Ops, x: Any, name: str, reverse: bool = False) -> Tensor:
    a, b = self._broadcasted(x, reverse)
    if dtypes.is_float(a.dtype):
      raise DTypeError(f"{name} is only implemented on integer and bool tensors, got {self.dtype.name}"
                       f"{'' if not isinstance(x, MathMixin) else ' and ' + x.dtype.name} (result dtype {a.dtype.name})")
    return a._alu(op, b)
  def bitwise_and(self, x: Any) -> Tensor: return self._bitwise(Ops.AND, x, "bitwise_and (&)")
  def bitwise_or(self, x: Any) -> Tensor: return self._bitwise(Ops.OR, x, "bitwise_or (|)")
  def bitwise_xor(self, x: Any) -> Tensor: return self._bitwise(Ops.XOR, x, "bitwise_xor (^)")
  def __and__(self, x: Any) -> Tensor: return self._bitwise(Ops.AND, x, "bitwise_and (&)")
  def __or__(self, x: Any) -> Tensor: return self._bitwise(Ops.OR, x, "bitwise_or (|)")
  def __xor__(self, x: Any) -> Tensor: return self._bitwise(Ops.XOR, x, "bitwise_xor (^)")
  def __rand__(self, x: Any) -> Tensor: return self._bitwise(Ops.AND, x, "bitwise_and (&)", True)
  def __ror__(self, x: Any) -> Tensor: return self._bitwise(Ops.OR, x, "bitwise_or (|)", True)
  def __rxor__(self, x: Any) -> Tensor: return self._bitwise(Ops.XOR, x, "bitwise_xor (^)", True)

  def bitwise_not(self) -> Tensor:
    if self.dtype == dtypes.bool: return self.logical_not()
    if not dtypes.is_int(self.dtype): raise DTypeError(f"~ (operator.invert) is only implemented on integer and Boolean-type tensors, got {self.dtype.name}")
    return self ^ -1
  __invert__ = bitwise_not

  def _shift(self, x: Any, left: bool, reverse: bool = False) -> Tensor:
    """Shifts as torch defines them for every amount: by a negative amount or the width or more, << gives 0
    and >> gives 0 or -1 (the sign); C leaves those undefined, so the amount is checked first."""
    a, b = self._broadcasted(x, reverse)
    name = "<< (bitwise_left_shift)" if left else ">> (bitwise_right_shift)"
    if not dtypes.is_int(a.dtype): raise DTypeError(f"{name} is only implemented on integer tensors, got {a.dtype.name}")
    bits = a.dtype.itemsize * 8
    in_range = (b < bits) if dtypes.is_unsigned(a.dtype) else (b >= 0) & (b < bits)
    if left: return in_range.where(a._alu(Ops.SHL, in_range.where(b, 0)), 0)
    if dtypes.is_unsigned(a.dtype): return in_range.where(a._alu(Ops.SHR, in_range.where(b, 0)), 0)
    return a._alu(Ops.SHR, in_range.where(b, bits - 1))
  def __lshift__(self, x: Any) -> Tensor: return self._shift(x, left=True)
  def __rshift__(self, x: Any) -> Tensor: return self._shift(x, left=False)
  def __rlshift__(self, x: Any) -> Tensor: return self._shift(x, left=True, reverse=True)
  def __rrshift__(self, x: Any) -> Tensor: return self._shift(x, left=False, reverse=True)
  def bitwise_left_shift(self, x: Any) -> Tensor: return self << x
  def bitwise_right_shift(self, x: Any) -> Tensor: return self >> x
  def lshift(self, x: Any, reverse: bool = False) -> Tensor: return self._shift(x, left=True, reverse=reverse)
  def rshift(self, x: Any, reverse: bool = False) -> Tensor: return self._shift(x, left=False, reverse=reverse)

  # ---- selection ----
  def where(self, x: Any, y: Any) -> Tensor:
    """`cond.where(x, y)`: x where cond is true (non-zero), else y; all three broadcast. The result dtype is
    torch's promotion of x and y (two Python ints give dtypes.default_int)."""
    if not isinstance(x, MathMixin) and not isinstance(y, MathMixin):
      dt = result_type(x, y)
      if dt == dtypes.int64: dt = dtypes.default_int
    else: dt = result_type(_operand(x), _operand(y))
    xt = x.cast(dt) if isinstance(x, MathMixin) else self._const(x, dt)
    yt = y.cast(dt) if isinstance(y, MathMixin) else self._const(y, dt)
    shape = broadcast_shape(self.shape, xt.shape, yt.shape)
    return self.cast(dtypes.bool).expand(shape)._alu(Ops.WHERE, xt.expand(shape), yt.expand(shape))

  def clamp(self, min_: Any = None, max_: Any = None, **bounds: Any) -> Tensor:
    """Limit to [min, max] (numbers or tensors, either may be None; `min=`/`max=` as in torch). The gradient
    reaches self where min <= self <= max and a bound where it was taken; NaN stays NaN (a NaN bound gives
    NaN); min > max gives max everywhere, as torch does."""
    low, high = bounds.pop("min", min_), bounds.pop("max", max_)
    if bounds: raise TypeError(f"clamp got unexpected keyword arguments {sorted(bounds)}")
    if low is None and high is None: raise RuntimeError("torch.clamp: At least one of 'min' or 'max' must not be None")
    dt = result_type(_operand(self), *(_operand(b) for b in (low, high) if b is not None))
    out = self.cast(dt)
    for bound, beyond in ((low, lambda v, b: v < b), (high, lambda v, b: v > b)):
      if bound is None: continue
      b = bound.cast(dt) if isinstance(bound, MathMixin) else self._const(bound, dt)
      outside = beyond(out, b)
      if dtypes.is_float(dt): outside = outside | b.ne(b)
      out = outside.where(b, out)
    return out
  clip = clamp

  def lerp(self, end: Any, weight: Any) -> Tensor:
    """self + weight * (end - self), computed as torch does (from the nearer end for weight >= 0.5)."""
    start, stop = self._broadcasted(end)
    if not dtypes.is_float(start.dtype): raise DTypeError(f"lerp is only implemented for float tensors, got {start.dtype.name}")
    def fn(a: Tensor) -> Tensor:   # in float32 for half types, rounded once (torch's opmath)
      b = stop.cast(a.dtype)
      w = weight.cast(a.dtype) if isinstance(weight, MathMixin) else weight
      diff = b - a
      if not isinstance(w, MathMixin): return a + w * diff if w < 0.5 else b - diff * (1 - w)
      return (w.abs() < 0.5).where(a + w * diff, b - diff * (1 - w))
    return start._opmath(fn)

  # ---- powers ----
  def pow(self, exponent: Any) -> Tensor:
    """self ** exponent as torch computes it: integer tensors stay integers (exact, wrapping), integer exponents
    of floats by multiplication (negative bases fine), 0 ** 0 = 1, NaN for a negative base and fractional exponent."""
    if isinstance(exponent, MathMixin):
      base, power = self._broadcasted(exponent)
      if not dtypes.is_float(base.dtype): return base._int_pow(power)
      return F.Composite.apply(base, power, fn=lambda b, e: b._opmath(lambda x: _wide2(x, e.cast(x.dtype), _pow_forward)),
                               gradient=_pow_gradient)
    if not isinstance(exponent, Number): raise TypeError(f"unsupported exponent type for pow: {type(exponent).__name__}")
    dt = result_type(_operand(self), exponent)
    base = self.cast(dt)
    if not dtypes.is_float(dt):
      if exponent < 0: raise RuntimeError(f"Integers to negative integer powers are not allowed (tensor of {dt.name} ** {exponent}).")
      return base._int_pow_scalar(int(exponent))
    if float(exponent).is_integer() and abs(exponent) <= 64: return base._opmath(lambda x: x._float_pow_int(int(exponent)))
    if exponent == 0.5: return base.sqrt()
    return base.pow(base._const(exponent, dt))

  def _float_pow_int(self, n: int) -> Tensor:
    """x ** n by square-and-multiply from the top bit (torch uses x*x, x*x*x for small n); n < 0 takes the reciprocal."""
    if n == 0: return F.Composite.apply(self, fn=lambda x: x.ones_like(), gradient=lambda grad, y, x: (grad.zeros_like(),))
    result = self
    for bit in bin(abs(n))[3:]:
      result = result * result
      if bit == "1": result = result * self
    return result.reciprocal() if n < 0 else result

  def _wrapping_twin(self) -> Tensor:
    """int32 values as uint32 (multiplication wraps to the same bits). Long int32 product chains would be
    rendered as index math, inlined without limit: see tests/test_dtypes.py::test_renderer_int32_chain."""
    return self.cast(dtypes.uint32) if self.dtype == dtypes.int32 else self

  def _int_pow_scalar(self, n: int) -> Tensor:
    result, square = self._wrapping_twin().ones_like(), self._wrapping_twin()
    while n:
      if n & 1: result = result * square
      n >>= 1
      if n: square = square * square
    return result.cast(self.dtype)

  def _int_pow(self, exponent: Tensor) -> Tensor:
    """Integer power with an integer tensor exponent: square-and-multiply over every bit, wrapping like torch;
    negative exponents give 1 for a base of 1, +-1 for -1 and 0 otherwise (torch's rule)."""
    result, square = self._wrapping_twin().ones_like(), self._wrapping_twin()
    bits = self.dtype.itemsize * 8 - (0 if dtypes.is_unsigned(self.dtype) else 1)
    one = self._const(1, self.dtype)
    for i in range(bits):
      result = ((exponent >> i) & 1).ne(0).where(result * square, result)
      if i + 1 < bits: square = square * square
    result = result.cast(self.dtype)
    if dtypes.is_unsigned(self.dtype) or self.dtype == dtypes.bool: return result
    odd = (exponent & 1).ne(0)
    negative_power = self.eq(1).where(one, self.eq(-1).where(odd.where(-one, one), self._const(0, self.dtype)))
    return (exponent < 0).where(negative_power, result)

  # ---- reductions ----
  def _axes(self, axis: int | Sequence[int] | None) -> tuple[int, ...]:
    if axis is None: return tuple(range(self.ndim))
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    normalized = {normalize_axis(a, self.ndim) for a in axes}
    return () if self.ndim == 0 else tuple(sorted(normalized))

  def _reduce(self, op: Ops, axis: int | Sequence[int] | None, keepdim: bool) -> Tensor:
    axes = self._axes(axis)
    kept = tuple(1 if i in axes else s for i, s in enumerate(self.shape))
    if 0 in self.shape:
      if op is Ops.MAX and any(self.shape[a] == 0 for a in axes): raise RuntimeError(f"max of an empty dimension (shape {self.shape}, axis {axis})")
      empty = self.full(kept, 0 if op is Ops.ADD else 1, self.dtype, self.device)   # still differentiable: zero gradient
      out = F.Composite.apply(self, fn=lambda x: empty, gradient=lambda grad, y, x: (x.zeros_like(),))
    else: out = (F.Sum if op is Ops.ADD else F.Max).apply(self, axes=axes) if axes else self
    return out if keepdim else out.reshape(tuple(s for i, s in enumerate(kept) if i not in axes))

  def sum(self, axis: int | Sequence[int] | None = None, keepdim: bool = False, dtype: DType | str | None = None) -> Tensor:
    """Sum over `axis`. Ints and bools sum in int64 and float16/bfloat16 accumulate in float32 (as torch)."""
    if dtype is not None: return self.cast(to_dtype(dtype))._reduce(Ops.ADD, axis, keepdim)
    if dtypes.is_int(self.dtype) or self.dtype == dtypes.bool: return self.cast(dtypes.int64)._reduce(Ops.ADD, axis, keepdim)
    return self._opmath(lambda x: x._reduce(Ops.ADD, axis, keepdim))
  def max(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
    return self._reduce(Ops.MAX, axis, keepdim)
  def min(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
    return self._flip_order().max(axis, keepdim)._flip_order()
  def mean(self, axis: int | Sequence[int] | None = None, keepdim: bool = False, dtype: DType | str | None = None) -> Tensor:
    """Mean over `axis`; with `dtype` the input is cast to it first (as torch). Integer input gives the default
    float (torch raises without a dtype)."""
    if dtype is not None:
      target = to_dtype(dtype)
      if not dtypes.is_float(target): raise RuntimeError(f"mean(): could not infer output dtype. Optional dtype must be either a floating point or complex dtype. Got: {target.name}")
      return self.cast(target).mean(axis, keepdim)
    if S.is_symbolic(self): return S.mean(self, axis, keepdim)   # a Variable count: summed in a kernel
    count = prod(self.shape[a] for a in self._axes(axis))
    def fn(x: Tensor) -> Tensor:
      total = x.sum(axis, keepdim)
      return total / count if count else total * math.nan
    return self._opmath(fn)
  # softmax and log_softmax of float32/float64 are one Function each: the forward is a template (built once per
  # shape, minigrad.tensor.function.Template) and so is the gradient, a formula in the output y. While source lines
  # are captured the forward is built op by op (the same nodes), so that each carries its own op's name
  def softmax(self, axis: int = -1) -> Tensor:
    if self.ndim and self.shape[normalize_axis(axis, self.ndim)] == 0: return self._float()   # nothing to normalize
    if self.dtype not in (dtypes.float32, dtypes.float64): return self._opmath(lambda x: _softmax(x, axis))
    return F.Composite.apply(self, fn=lambda x: _softmax(x, axis), key=None if viz.capturing else ("softmax", axis),
                             gradient=lambda grad, y, x: F.templated(("softmax gradient", axis), softmax_gradient(axis), grad, y))
  def log_softmax(self, axis: int = -1) -> Tensor:
    if self.ndim and self.shape[normalize_axis(axis, self.ndim)] == 0: return self._float()
    if self.dtype not in (dtypes.float32, dtypes.float64): return self._opmath(lambda x: _log_softmax(x, axis))
    return F.Composite.apply(self, fn=lambda x: _log_softmax(x, axis), key=None if viz.capturing else ("log_softmax", axis),
                             gradient=lambda grad, y, x: F.templated(("log_softmax gradient", axis), log_softmax_gradient(axis), grad, y))

  # ---- linear algebra ----
  def dot(self, w: Tensor) -> Tensor: return self.matmul(w)
  def matmul(self, w: Tensor) -> Tensor:
    """Broadcast-multiply-reduce: (..., n, k) @ (..., k, m) -> (..., n, m); 1-d operands as in numpy."""
    if not isinstance(w, MathMixin): raise TypeError(f"matmul expects a Tensor, got {type(w).__name__}")
    if self.ndim == 0 or w.ndim == 0: raise RuntimeError(f"both arguments to matmul need at least 1 dimension, got {self.shape} and {w.shape}")
    x, y = (self.unsqueeze(0) if self.ndim == 1 else self), (w.unsqueeze(-1) if w.ndim == 1 else w)
    if x.shape[-1] != y.shape[-2]:
      raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({self.shape} @ {w.shape}: {x.shape[-1]} != {y.shape[-2]})")
    try: broadcast_shape(x.shape[:-2], y.shape[:-2])
    except ValueError: raise RuntimeError(f"matmul batch dimensions of {self.shape} and {w.shape} can't be broadcast") from None
    if x.dtype in (dtypes.float16, dtypes.bfloat16) or y.dtype in (dtypes.float16, dtypes.bfloat16):   # accumulate in float32, as torch
      dt = result_type(_operand(self), _operand(w))
      if dt in (dtypes.float16, dtypes.bfloat16): return self.cast(dtypes.float32).matmul(w.cast(dtypes.float32)).cast(dt)
    # sum in the inputs' dtype: int32 @ int32 stays int32 (as in torch), unlike sum() which widens ints
    out = F.Matmul.apply(x, y)
    if self.ndim == 1: out = out.squeeze(-2)
    if w.ndim == 1: out = out.squeeze(-1)
    return out

  def linear(self, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    out = self @ weight
    return out + bias if bias is not None else out


def _sign_bit(x: Tensor) -> Tensor:
  """True where a float's sign bit is set (also for -0.0 and -NaN)."""
  as_int = {2: dtypes.int16, 4: dtypes.int32, 8: dtypes.int64}[x.dtype.itemsize]
  return x.bitcast(as_int) < 0


# ---- float division with rounding, torch's algorithms (in float32 for float16/bfloat16, like torch) ----
def _fmod_float(x: Tensor, y: Tensor) -> Tensor:
  """C's fmod (the MOD op on floats: fmod/frem, exact), with torch's gradients: 1 for x, -trunc(x/y) for y."""
  return F.Composite.apply(x, y, fn=lambda a, b: type(a)(a.uop.alu(Ops.MOD, b.uop)),
                           gradient=lambda grad, out, a, b: (grad, -grad * (a / b).trunc()))


def _remainder_float(x: Tensor, y: Tensor) -> Tensor:
  """torch's remainder (the divisor's sign), with its gradients: 1 for x, -floor_divide(x, y) for y."""
  def forward(a: Tensor, b: Tensor) -> Tensor:
    mod = type(a)(a.uop.alu(Ops.MOD, b.uop))
    return (mod.ne(0) & (b < 0).ne(mod < 0)).where(mod + b, mod)
  return F.Composite.apply(x, y, fn=forward, gradient=lambda grad, out, a, b: (grad, -grad * _floor_divide_float(a, b)))


def _floor_divide_float(x: Tensor, y: Tensor) -> Tensor:
  """torch's floor division: (x - fmod(x, y)) / y, one less when the remainder's sign differs from y's, then
  rounded to the nearest integer; x / y when y is 0."""
  mod = type(x)(x.uop.alu(Ops.MOD, y.uop))
  div = (x - mod) / y
  div = div - (mod.ne(0) & (y < 0).ne(mod < 0)).cast(div.dtype)
  floored = div.floor()
  floored = floored + (div - floored > 0.5).cast(div.dtype)
  return y.eq(0).where(x / y, div.eq(0).where(0.0, floored))


SMALL_POWER_BITS = 7   # integer exponents below 2**7 multiply (exact like C's pow on exact cases)


def _pow_forward(b: Tensor, e: Tensor) -> Tensor:
  """b ** e for float tensors with C's pow rules. Integer exponents below 128 in magnitude: square-and-multiply
  over the exponent's bits (exact where the result is representable; signs, zeros and infinities fall out).
  Others: the magnitude from exp2(e * log2|b|), the sign from the parity of an integer e, NaN for b < 0 with a
  fractional e; 1 for e = 0 and for b = 1 (even with NaN)."""
  e_integer = e.eq(e.trunc())
  n = (e_integer & (e.abs() < 2 ** SMALL_POWER_BITS)).where(e.abs(), 0.0)
  product, square = b.ones_like(), b
  for i in range(SMALL_POWER_BITS):
    bit = ((n * 2.0 ** -i).floor() - (n * 2.0 ** -(i + 1)).floor() * 2).eq(1)
    product = bit.where(product * square, product)
    if i + 1 < SMALL_POWER_BITS: square = square * square
  product = (e < 0).where(1.0 / product, product)
  magnitude = _exp2_of(e * b.abs()._alu(Ops.LOG2))
  e_odd = e_integer & e.isfinite() & (e - (e * 0.5).trunc() * 2).ne(0)
  general = (b < 0).where(e_integer.where(e_odd.where(-magnitude, magnitude), b.isfinite().where(math.nan, magnitude)), magnitude)
  one = e.eq(0) | b.eq(1) | (b.eq(-1) & e.isinf())
  return one.where(1.0, (e_integer & (e.abs() < 2 ** SMALL_POWER_BITS)).where(product, general))


def _pow_gradient(grad: Tensor, y: Tensor, b: Tensor, e: Tensor) -> tuple[Tensor, Tensor]:
  """torch's: d/db = e * b ** (e - 1) (0 where e = 0); d/de = y * log(b) (0 where b = 0 and e >= 0)."""
  d_base = e.eq(0).where(0.0, e * b.pow(e - 1))
  d_exponent = (b.eq(0) & (e >= 0)).where(0.0, y * b.log())
  return grad * d_base, grad * d_exponent


def _softmax(x: Tensor, axis: int) -> Tensor:
  e = (x - x.max(axis, keepdim=True))._exp_at_most_zero()
  return e * e.sum(axis, keepdim=True).reciprocal()

def _log_softmax(x: Tensor, axis: int) -> Tensor:
  shifted = x - x.max(axis, keepdim=True)
  return shifted - shifted._exp_at_most_zero().sum(axis, keepdim=True).log()

def softmax_gradient(axis: int) -> Callable[[Tensor, Tensor], Tensor]:
  """d softmax: y * (g - sum(g * y)) over the axis."""
  return lambda grad, y: y * (grad - (grad * y).sum(axis, keepdim=True))

def log_softmax_gradient(axis: int) -> Callable[[Tensor, Tensor], Tensor]:
  """d log_softmax: g - exp(y) * sum(g) over the axis."""
  return lambda grad, y: grad - y.exp() * grad.sum(axis, keepdim=True)
