"""Data types shared by every stage: scalar, vector and pointer dtypes, numpy conversion and torch-style promotion.

Input: nothing (a leaf module). Output: `DType` values, the `dtypes` namespace, `to_dtype` (from a DType, a name,
a numpy or torch dtype), `to_numpy` / `from_numpy`, torch's type promotion (`promote_types` for two dtypes,
`result_type` for operands that are tensors, 0-d tensors or Python numbers), `truncate` (a Python number as a
dtype holds it) and `DTypeError`, raised when an op doesn't support a dtype.
"""
from __future__ import annotations
from dataclasses import dataclass, fields
from typing import Any
import math
import struct
import numpy as np


class _Interned(type):
  """DType(...) with the same fields returns the same object, so dtypes compare and hash by identity, in C: every
  graph node's key and every scheduled structure's key holds a dtype. Copies and pickles come back through here
  (DType.__reduce__)."""
  def __call__(cls, *args: Any, **kwargs: Any) -> Any:
    made = super().__call__(*args, **kwargs)
    key = (cls, *(getattr(made, f.name) for f in fields(made)))
    return _interned.setdefault(key, made)


_interned: dict[tuple, DType] = {}


@dataclass(frozen=True, eq=False)
class DType(metaclass=_Interned):
  """A scalar type (count == 1) or a vector of `count` scalars (float4 is float32.vec(4)). One object per distinct
  value: `==` is `is`."""
  priority: int          # orders types inside a category for promotion
  itemsize: int          # bytes of one element (of the whole vector for vectors)
  name: str              # spelling used in kernel names and error messages
  fmt: str | None        # struct / numpy format character, None for types numpy lacks (bfloat16)
  count: int = 1
  scalar_type: DType | None = None   # the element type of a vector

  def vec(self, count: int) -> DType:
    assert self.count == 1, f"can't make a vector of a vector type {self}"
    if count == 1: return self
    return DType(self.priority, self.itemsize * count, f"{self.name}{count}", None, count, self)

  def scalar(self) -> DType: return self.scalar_type or self

  def ptr(self, local: bool = False) -> PtrDType:
    return PtrDType(self.priority, self.itemsize, self.name, self.fmt, self.count, self.scalar_type, self, local)

  def __repr__(self) -> str: return f"dtypes.{self.name}"
  def __reduce__(self) -> tuple: return (type(self), tuple(getattr(self, f.name) for f in fields(self)))


@dataclass(frozen=True, eq=False)
class PtrDType(DType):
  """A pointer to `base` elements, in global memory or (local=True) in GPU shared/local memory."""
  base: DType | None = None
  local: bool = False

  def __repr__(self) -> str: return f"{self.base!r}.ptr({'local=True' if self.local else ''})"


class DTypeError(NotImplementedError, TypeError):
  """An op doesn't support a dtype (bitwise ops on floats, unsupported promotions, bad bitcasts). It is a TypeError,
  as Python code expects, and a RuntimeError/NotImplementedError, the classes torch raises for these cases."""


class dtypes:
  """The dtype namespace, as in tinygrad: `dtypes.float32`, `dtypes.is_float(dt)`, `dtypes.default_float`."""
  void = DType(-1, 0, "void", None)
  bool = DType(0, 1, "bool", "?")
  int8 = DType(1, 1, "char", "b")
  uint8 = DType(2, 1, "uchar", "B")
  int16 = DType(3, 2, "short", "h")
  uint16 = DType(4, 2, "ushort", "H")
  int32 = DType(5, 4, "int", "i")
  uint32 = DType(6, 4, "uint", "I")
  int64 = DType(7, 8, "long", "q")
  uint64 = DType(8, 8, "ulong", "Q")
  float16 = DType(9, 2, "half", "e")
  bfloat16 = DType(10, 2, "bfloat16", None)
  float32 = DType(11, 4, "float", "f")
  float64 = DType(12, 8, "double", "d")
  # aliases
  half, float, double, int, long, uchar, char = float16, float32, float64, int32, int64, uint8, int8
  default_float: DType = float32
  default_int: DType = int32
  # index math inside kernels
  index = int32

  @staticmethod
  def is_float(dt: DType) -> bool: return dt.scalar() in _FLOAT_SET
  @staticmethod
  def is_int(dt: DType) -> bool: return dt.scalar() in _INT_SET
  @staticmethod
  def is_unsigned(dt: DType) -> bool: return dt.scalar() in _UNSIGNED_SET
  @staticmethod
  def is_bool(dt: DType) -> bool: return dt.scalar() is dtypes.bool or dt.scalar() == dtypes.bool

  @staticmethod
  def from_py(x: Any) -> DType:
    """The dtype of a Python value: bool -> bool, int -> dtypes.default_int, float -> dtypes.default_float."""
    if isinstance(x, (bool, np.bool_)): return dtypes.bool
    if isinstance(x, (int, np.integer)): return dtypes.default_int
    if isinstance(x, (float, np.floating)): return dtypes.default_float
    if isinstance(x, (list, tuple)):
      return max((dtypes.from_py(v) for v in x), key=lambda d: d.priority, default=dtypes.default_float)
    raise TypeError(f"can't infer a dtype from {type(x).__name__} {x!r}")

  @staticmethod
  def min(dt: DType) -> int | float:
    if dtypes.is_bool(dt): return False
    if dtypes.is_int(dt): return 0 if dtypes.is_unsigned(dt) else -2 ** (dt.scalar().itemsize * 8 - 1)
    return -math.inf

  @staticmethod
  def max(dt: DType) -> int | float:
    if dtypes.is_bool(dt): return True
    if dtypes.is_int(dt): return 2 ** (dt.scalar().itemsize * 8 - (0 if dtypes.is_unsigned(dt) else 1)) - 1
    return math.inf

  @staticmethod
  def from_name(name: str) -> DType:
    found = NAMED.get(name)
    if found is None: raise TypeError(f"unknown dtype name {name!r}; known names: {', '.join(sorted(NAMED))}")
    return found

  @staticmethod
  def mantissa_bits(dt: DType) -> int:
    """Significand bits of a float dtype, the implicit leading bit included (float32: 24)."""
    return {dtypes.float16: 11, dtypes.bfloat16: 8, dtypes.float32: 24, dtypes.float64: 53}[dt.scalar()]


UNSIGNED = (dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64)
SIGNED = (dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64)
INTS = UNSIGNED + SIGNED
FLOATS = (dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64)
ALL_DTYPES = (dtypes.bool,) + INTS + FLOATS
_FLOAT_SET, _INT_SET, _UNSIGNED_SET = frozenset(FLOATS), frozenset(INTS), frozenset(UNSIGNED)   # the dtype tests' lookups
# native-order numpy dtype -> the first DType of ALL_DTYPES stored as it (reversed: the first one is written last)
_FROM_NUMPY: dict[np.dtype, DType] = {np.dtype(d.fmt): d for d in reversed(ALL_DTYPES) if d.fmt is not None}
# torch / numpy spellings and the C-like names of tinygrad
NAMED = {**{d.name: d for d in ALL_DTYPES}, "float32": dtypes.float32, "float64": dtypes.float64,
         "float16": dtypes.float16, "int32": dtypes.int32, "int64": dtypes.int64, "int8": dtypes.int8,
         "uint8": dtypes.uint8, "int16": dtypes.int16, "uint16": dtypes.uint16, "uint32": dtypes.uint32,
         "uint64": dtypes.uint64, "bool_": dtypes.bool, "bf16": dtypes.bfloat16}
# unsigned types torch only half supports: they don't promote with any other integer type (or bool)
LIMITED_UNSIGNED = (dtypes.uint16, dtypes.uint32, dtypes.uint64)


def to_dtype(value: Any) -> DType:
  """A DType from a DType, a name ("float32", "half", "bfloat16"), a numpy dtype/type or a torch dtype.
  TypeError for anything else, naming the value."""
  if isinstance(value, DType): return value
  if isinstance(value, str): return dtypes.from_name(value)
  text = str(value)
  if text.startswith("torch."): return dtypes.from_name(text[len("torch."):])
  if value is None or isinstance(value, (bool, int, float)): raise TypeError(f"can't use {value!r} as a dtype")
  try: npdt = np.dtype(value)
  except TypeError: raise TypeError(f"can't use {value!r} as a dtype") from None
  return from_numpy(npdt)


def to_numpy(dt: DType) -> np.dtype:
  """The numpy dtype used to hold `dt` on the host. bfloat16 has none: it is carried as float32."""
  if dt == dtypes.bfloat16: return np.dtype(np.float32)
  if dt.fmt is None: raise TypeError(f"{dt} has no numpy equivalent")
  return np.dtype(dt.fmt)


def from_numpy(npdt: np.dtype | type) -> DType:
  """The DType of a numpy dtype (either byte order)."""
  npdt = np.dtype(npdt)
  if npdt.byteorder not in "=|": npdt = npdt.newbyteorder("=")
  if (found := _FROM_NUMPY.get(npdt)) is not None: return found
  raise TypeError(f"numpy dtype {npdt} is not supported; supported: {', '.join(d.name for d in ALL_DTYPES)}")


# ---------------------------------------------------------------- type promotion (torch's rules)

def _category(dt: DType) -> int: return 0 if dtypes.is_bool(dt) else 1 if dtypes.is_int(dt) else 2


def promote_types(a: DType, b: DType) -> DType:
  """The dtype of `a op b` for two tensors of at least one dimension, as torch.promote_types."""
  if a == b: return a
  ca, cb = _category(a), _category(b)
  if ca == 2 or cb == 2:
    if ca != cb: return a if ca > cb else b
    if {a, b} == {dtypes.float16, dtypes.bfloat16}: return dtypes.float32
    return a if a.itemsize > b.itemsize else b
  if a in LIMITED_UNSIGNED or b in LIMITED_UNSIGNED:
    raise DTypeError(f"Promotion for uint16, uint32, uint64 types is not supported, attempted to promote {a.name} and {b.name}")
  if ca != cb: return a if ca > cb else b
  # two different integer types
  if dtypes.is_unsigned(a) == dtypes.is_unsigned(b): return a if a.itemsize > b.itemsize else b
  unsigned, signed = (a, b) if dtypes.is_unsigned(a) else (b, a)
  return signed if signed.itemsize > unsigned.itemsize else dtypes.int16   # only uint8 gets here


def _scalar_dtype(value: Any) -> DType:
  """The dtype torch gives a Python number taking part in an op: bool, int64, or the default float."""
  if isinstance(value, (bool, np.bool_)): return dtypes.bool
  if isinstance(value, (int, np.integer)): return dtypes.int64
  if isinstance(value, (float, np.floating)): return dtypes.default_float
  raise TypeError(f"can't use {type(value).__name__} {value!r} as a number in a Tensor op")


def _combine(higher: DType | None, lower: DType | None) -> DType | None:
  """torch's rule for operands of different priority: the higher one's dtype wins unless the lower one is of a
  higher category (a float scalar with an int tensor, an int 0-d tensor with a bool tensor)."""
  if higher is None: return lower
  if lower is None or dtypes.is_float(higher): return higher
  if dtypes.is_bool(higher) or dtypes.is_float(lower): return promote_types(higher, lower)
  return higher


def result_type(*operands: tuple[DType, int] | Any) -> DType:
  """The result dtype of an elementwise op, as torch.result_type. Each operand is a Python number or a pair
  (dtype, ndim). Tensors with dims outrank 0-d tensors, which outrank Python numbers: a lower-ranked operand
  only matters when its category (bool < int < float) is higher."""
  if len(operands) == 2 and type(a := operands[0]) is tuple:   # the common cases first, with the same answers
    if type(b := operands[1]) is tuple:
      if a[0] is b[0]: return a[0]   # two tensors of one dtype
    elif type(b) in (int, float) and a[0] in _FLOAT_SET: return a[0]   # a float tensor and a Python int or float
  ranked: list[DType | None] = [None, None, None]   # tensors with dims, 0-d tensors, Python numbers
  for operand in operands:
    dt, rank = (operand[0], 0 if operand[1] > 0 else 1) if isinstance(operand, tuple) else (_scalar_dtype(operand), 2)
    ranked[rank] = dt if ranked[rank] is None else promote_types(ranked[rank], dt)
  result = _combine(ranked[0], _combine(ranked[1], ranked[2]))
  assert result is not None, "result_type needs at least one operand"
  return result


def result_type_with_scalar(dt: DType, value: Any) -> DType:
  """The dtype of `tensor op python_number`: the tensor's dtype unless the number is of a higher category."""
  return result_type((dt, 1), value)


# ---------------------------------------------------------------- Python numbers as a dtype holds them

def round_to_bfloat16(value: float) -> float:
  """The bfloat16 nearest to `value` (via float32, ties to even, as torch rounds); NaN stays NaN."""
  if math.isnan(value): return math.nan
  with np.errstate(over="ignore"): bits = int(np.array(value, dtype=np.float32).view(np.uint32))
  bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16
  return float(np.array(bits & 0xFFFFFFFF, dtype=np.uint32).view(np.float32))


def bfloat16_bits(value: float) -> int:
  """The 16-bit word of the bfloat16 nearest to `value` (NaN: the quiet NaN 0x7FC0)."""
  if math.isnan(value): return 0x7FC0
  return int(np.array(round_to_bfloat16(value), dtype=np.float32).view(np.uint32)) >> 16


def truncate(value: Any, dt: DType) -> Any:
  """Convert a Python number to the value `dt` holds (wrap-around for ints, rounding for floats)."""
  if dtypes.is_bool(dt): return bool(value)
  if dtypes.is_int(dt):
    if isinstance(value, float) and not math.isfinite(value): return 0
    bits = dt.scalar().itemsize * 8
    v = int(value) & ((1 << bits) - 1)
    return v - (1 << bits) if not dtypes.is_unsigned(dt) and v >= 1 << (bits - 1) else v
  v = float(value)
  if not math.isfinite(v): return v
  if dt.scalar() == dtypes.bfloat16: return round_to_bfloat16(v)
  if dt.scalar() in (dtypes.float32, dtypes.float16):
    # struct rounds to nearest even like numpy; it raises when the rounded value is out of range: an infinity
    try: return struct.unpack(dt.scalar().fmt, struct.pack(dt.scalar().fmt, v))[0]
    except OverflowError: return math.copysign(math.inf, v)
  return v
