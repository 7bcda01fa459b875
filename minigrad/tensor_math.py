"""Tensor math: elementwise ops, comparisons, reductions, matmul and the neural-network ops, as a mixin.

Input: Tensors (this class is mixed into `Tensor`, so `self` is a Tensor). Output: new lazy Tensors. Every op
here is built from the differentiable primitives in minigrad.function, so gradients come for free.
Argument checks raise early with messages naming the shapes, dtypes and axes involved.
"""
from __future__ import annotations
from typing import Any, Sequence, TYPE_CHECKING
import math
import numpy as np
import minigrad.function as F
from minigrad.dtype import DType, dtypes, to_dtype, promote_types, result_type_with_scalar
from minigrad.function import const_uop
from minigrad.helpers import prod
from minigrad.uop.ops import Ops
if TYPE_CHECKING: from minigrad.tensor import Tensor


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


class MathMixin:
  """Elementwise, reduce, linear-algebra and nn ops of Tensor (see minigrad.tensor)."""
  # ---- elementwise ----
  def _alu(self, op: Ops, *others: Tensor) -> Tensor:
    if (fn := DIFFERENTIABLE.get(op)) is not None: return fn.apply(self, *others)
    return type(self)(self.uop.alu(op, *(o.uop for o in others)))   # comparisons and bit ops: no gradient

  def _broadcasted(self, other: Any, reverse: bool = False) -> tuple[Tensor, Tensor]:
    if isinstance(other, MathMixin):
      if other.device != self.device: raise RuntimeError(f"tensors on different devices: {self.device} and {other.device}")
      dt = promote_types(self.dtype, other.dtype)
      x, y = self.cast(dt), other.cast(dt)
    elif isinstance(other, (int, float, bool, np.generic)):
      dt = result_type_with_scalar(self.dtype, other)
      x, y = self.cast(dt), type(self)(const_uop(other, dt, self.device, ()))
    else: raise TypeError(f"unsupported operand type for a Tensor op: {type(other).__name__}")
    if x.shape != y.shape:
      shape = broadcast_shape(x.shape, y.shape)
      x, y = x.expand(shape), y.expand(shape)
    return (y, x) if reverse else (x, y)

  def _float(self) -> Tensor: return self if dtypes.is_float(self.dtype) else self.cast(dtypes.default_float)

  def cast(self, dtype: DType | str) -> Tensor:
    dtype = to_dtype(dtype)
    return self if self.dtype == dtype else F.Cast.apply(self, dtype=dtype)
  def float(self) -> Tensor: return self.cast(dtypes.float32)
  def int(self) -> Tensor: return self.cast(dtypes.int32)
  def bool(self) -> Tensor: return self.cast(dtypes.bool)

  def add(self, x: Any, reverse: bool = False) -> Tensor:
    a, b = self._broadcasted(x, reverse)
    return a._alu(Ops.ADD, b)
  def sub(self, x: Any, reverse: bool = False) -> Tensor:
    a, b = self._broadcasted(x, reverse)
    if a.dtype == dtypes.bool: raise TypeError("subtraction of bool tensors is not supported, use logical_xor")
    return a._alu(Ops.ADD, b._alu(Ops.NEG))
  def mul(self, x: Any, reverse: bool = False) -> Tensor:
    a, b = self._broadcasted(x, reverse)
    return a._alu(Ops.MUL, b)
  def div(self, x: Any, reverse: bool = False) -> Tensor:
    a, b = self._broadcasted(x, reverse)
    return a._float()._alu(Ops.FDIV, b._float())
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
  def __matmul__(self, x: Tensor) -> Tensor: return self.matmul(x)
  def __rmatmul__(self, x: Tensor) -> Tensor: return x.matmul(self)
  def __pow__(self, x: Any) -> Tensor: return self.pow(x)

  def _compare(self, op: Ops, x: Any, reverse: bool = False) -> Tensor:
    a, b = self._broadcasted(x, reverse)
    return a._alu(op, b)
  def __lt__(self, x: Any) -> Tensor: return self._compare(Ops.CMPLT, x)
  def __gt__(self, x: Any) -> Tensor: return self._compare(Ops.CMPLT, x, True)
  def __ge__(self, x: Any) -> Tensor: return (self > x) | self.eq(x)
  def __le__(self, x: Any) -> Tensor: return (self < x) | self.eq(x)
  def ne(self, x: Any) -> Tensor: return self._compare(Ops.CMPNE, x)
  def eq(self, x: Any) -> Tensor: return self.ne(x).logical_not()
  def __eq__(self, x: Any) -> Tensor: return self.eq(x)  # type: ignore[override]
  def __ne__(self, x: Any) -> Tensor: return self.ne(x)  # type: ignore[override]
  __hash__ = object.__hash__

  def logical_not(self) -> Tensor: return self.cast(dtypes.bool)._alu(Ops.CMPNE, self.full(self.shape, True, dtypes.bool, self.device))
  def __and__(self, x: Any) -> Tensor:
    a, b = self._broadcasted(x)
    return a._alu(Ops.AND, b)
  def __or__(self, x: Any) -> Tensor:
    a, b = self._broadcasted(x)
    return a._alu(Ops.OR, b)
  def __xor__(self, x: Any) -> Tensor:
    a, b = self._broadcasted(x)
    return a._alu(Ops.XOR, b)

  def where(self, x: Any, y: Any) -> Tensor:
    """`cond.where(x, y)`: x where cond is true, else y (broadcasting all three)."""
    if not isinstance(x, MathMixin) and not isinstance(y, MathMixin):
      x = self.full((), x, promote_types(dtypes.from_py(x), dtypes.from_py(y)), self.device)
    xt, yt = x._broadcasted(y) if isinstance(x, MathMixin) else y._broadcasted(x, reverse=True)
    shape = broadcast_shape(self.shape, xt.shape)
    cond = self.cast(dtypes.bool).expand(shape)
    return cond._alu(Ops.WHERE, xt.expand(shape), yt.expand(shape))

  # ---- math ----
  def exp(self) -> Tensor: return (self._float() * (1 / math.log(2)))._alu(Ops.EXP2)
  def exp2(self) -> Tensor: return self._float()._alu(Ops.EXP2)
  def log(self) -> Tensor: return self._float()._alu(Ops.LOG2) * math.log(2)
  def log2(self) -> Tensor: return self._float()._alu(Ops.LOG2)
  def sqrt(self) -> Tensor: return self._float()._alu(Ops.SQRT)
  def rsqrt(self) -> Tensor: return self.sqrt().reciprocal()
  def sin(self) -> Tensor: return self._float()._alu(Ops.SIN)
  def cos(self) -> Tensor: return (math.pi / 2 - self._float()).sin()
  def reciprocal(self) -> Tensor: return self._float()._alu(Ops.RECIP)
  def relu(self) -> Tensor: return F.Relu.apply(self)
  def sigmoid(self) -> Tensor: return 1 / (1 + (-self._float()).exp())
  def tanh(self) -> Tensor: return 2.0 * (2.0 * self._float()).sigmoid() - 1.0
  def abs(self) -> Tensor: return self if dtypes.is_unsigned(self.dtype) or self.dtype == dtypes.bool else self.maximum(-self)
  def square(self) -> Tensor: return self * self
  def clip(self, min_: Any = None, max_: Any = None) -> Tensor:
    out = self if min_ is None else self.maximum(min_)
    return out if max_ is None else out.minimum(max_)
  clamp = clip
  def pow(self, x: Any) -> Tensor:
    """self ** x as torch computes it: integer exponents exactly (negative bases fine), 0 ** 0 = 1."""
    if isinstance(x, (int, float, np.number)) and not isinstance(x, bool) and float(x).is_integer() and abs(x) <= 64:
      n = int(x)
      base = self if isinstance(x, (int, np.integer)) or dtypes.is_float(self.dtype) else self._float()
      result, square = base.ones_like(), base
      for bit in bin(abs(n))[:1:-1]:   # binary exponentiation, lowest bit first
        if bit == "1": result = result * square
        square = square * square
      if n < 0: result = result.reciprocal() if dtypes.is_float(result.dtype) else (1 / result.cast(dtypes.default_float)).cast(result.dtype)
      return result
    if isinstance(x, (int, float)) and x == 0.5: return self.sqrt()
    base, exponent = self._broadcasted(x)
    base, exponent = base._float(), exponent._float()
    magnitude = (base.abs().log() * exponent).exp()
    # a negative base is fine for an integer exponent (sign from its parity) and NaN otherwise
    is_integer = exponent.eq(exponent.trunc())
    odd = (exponent.abs() % 2).eq(1)
    signed = (base < 0).where(is_integer.where(odd.where(-magnitude, magnitude), math.nan), magnitude)
    return exponent.eq(0).where(1.0, signed)

  def __rpow__(self, x: Any) -> Tensor: return self.full(self.shape, x, result_type_with_scalar(self.dtype, x), self.device).pow(self)
  def trunc(self) -> Tensor: return self._alu(Ops.TRUNC) if dtypes.is_float(self.dtype) else self
  def __mod__(self, x: Any) -> Tensor:
    """Remainder with the divisor's sign (torch's %): x - floor(x / y) * y for floats."""
    a, b = self._broadcasted(x)
    if dtypes.is_float(a.dtype):
      quotient = a / b
      floored = quotient.trunc() - ((quotient < 0) & quotient.ne(quotient.trunc())).cast(a.dtype)
      return a - floored * b
    remainder = type(self)(a.uop.alu(Ops.MOD, b.uop))
    fix = remainder.ne(0) & ((remainder < 0).ne(b < 0))
    return fix.where(remainder + b, remainder)

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
      out = self.full(kept, 0 if op is Ops.ADD else 1, self.dtype, self.device)
    else: out = (F.Sum if op is Ops.ADD else F.Max).apply(self, axes=axes) if axes else self
    return out if keepdim else out.reshape(tuple(s for i, s in enumerate(kept) if i not in axes))

  def sum(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
    x = self.cast(dtypes.int64) if dtypes.is_int(self.dtype) or self.dtype == dtypes.bool else self
    return x._reduce(Ops.ADD, axis, keepdim)
  def max(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
    return self._reduce(Ops.MAX, axis, keepdim)
  def min(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
    return self._flip_order().max(axis, keepdim)._flip_order()
  def mean(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
    count = prod(self.shape[a] for a in self._axes(axis))
    total = self._float().sum(axis, keepdim)
    return total / count if count else total * math.nan
  def softmax(self, axis: int = -1) -> Tensor:
    x = self._float()
    e = (x - x.max(axis, keepdim=True)).exp()
    return e / e.sum(axis, keepdim=True)
  def log_softmax(self, axis: int = -1) -> Tensor:
    x = self._float()
    shifted = x - x.max(axis, keepdim=True)
    return shifted - shifted.exp().sum(axis, keepdim=True).log()

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
    # sum in the inputs' dtype: int32 @ int32 stays int32 (as in torch), unlike sum() which widens ints
    out = (x.unsqueeze(-2) * y.transpose(-1, -2).unsqueeze(-3))._reduce(Ops.ADD, -1, False)
    if self.ndim == 1: out = out.squeeze(-2)
    if w.ndim == 1: out = out.squeeze(-1)
    return out

  def linear(self, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    out = self @ weight
    return out + bias if bias is not None else out

  # ---- neural-network ops, built from the ops above in minigrad.nn.functional ----
  def conv2d(self, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0, dilation: Any = 1, groups: int = 1) -> Tensor:
    from minigrad.nn import functional
    return functional.conv2d(self, weight, bias, stride, padding, dilation, groups)
  def max_pool2d(self, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1) -> Tensor:
    from minigrad.nn import functional
    return functional.max_pool2d(self, kernel_size, stride, padding, dilation)
  def avg_pool2d(self, kernel_size: Any, stride: Any = None, padding: Any = 0, count_include_pad: bool = True) -> Tensor:
    from minigrad.nn import functional
    return functional.avg_pool2d(self, kernel_size, stride, padding, count_include_pad=count_include_pad)
  def one_hot(self, num_classes: int = -1) -> Tensor:
    from minigrad.nn import functional
    return functional.one_hot(self, num_classes)
  def dropout(self, p: float = 0.5) -> Tensor:
    from minigrad.nn import functional
    return functional.dropout(self, p)
  def layernorm(self, axis: int = -1, eps: float = 1e-5) -> Tensor:
    x = self._float()
    centered = x - x.mean(axis, keepdim=True)
    return centered * (centered.square().mean(axis, keepdim=True) + eps).rsqrt()
  def cross_entropy(self, target: Tensor, label_smoothing: float = 0.0, reduction: str = "mean") -> Tensor:
    from minigrad.nn import functional
    return functional.cross_entropy(self, target, label_smoothing=label_smoothing, reduction=reduction)
  def sparse_categorical_crossentropy(self, labels: Tensor, label_smoothing: float = 0.0, reduction: str = "mean") -> Tensor:
    from minigrad.nn import functional
    return functional.sparse_categorical_crossentropy(self, labels, label_smoothing=label_smoothing, reduction=reduction)
  def binary_crossentropy_logits(self, target: Tensor, reduction: str = "mean") -> Tensor:
    from minigrad.nn import functional
    return functional.binary_crossentropy_logits(self, target, reduction=reduction)
