"""Data types shared by every stage: scalar, vector and pointer dtypes, numpy conversion and torch-style promotion.

Input: nothing (a leaf module). Output: `DType` values, the `dtypes` namespace, `to_numpy`, `from_numpy`,
`promote_types` (tensor op tensor) and `result_type_with_scalar` (tensor op Python number).
"""
from __future__ import annotations
from dataclasses import dataclass
from typing import Any
import math
import numpy as np


@dataclass(frozen=True)
class DType:
  """A scalar type (count == 1) or a vector of `count` scalars (float4 is float32.vec(4))."""
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


@dataclass(frozen=True)
class PtrDType(DType):
  """A pointer to `base` elements, in global memory or (local=True) in GPU shared/local memory."""
  base: DType | None = None
  local: bool = False

  def __repr__(self) -> str: return f"{self.base!r}.ptr({'local=True' if self.local else ''})"


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
  def is_float(dt: DType) -> bool: return dt.scalar() in FLOATS
  @staticmethod
  def is_int(dt: DType) -> bool: return dt.scalar() in INTS
  @staticmethod
  def is_unsigned(dt: DType) -> bool: return dt.scalar() in UNSIGNED
  @staticmethod
  def is_bool(dt: DType) -> bool: return dt.scalar() == dtypes.bool

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
    if found is None: raise TypeError(f"unknown dtype {name!r}; known: {sorted(NAMED)}")
    return found


UNSIGNED = (dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64)
SIGNED = (dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64)
INTS = UNSIGNED + SIGNED
FLOATS = (dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64)
ALL_DTYPES = (dtypes.bool,) + INTS + FLOATS
NAMED = {**{d.name: d for d in ALL_DTYPES}, "float32": dtypes.float32, "float64": dtypes.float64,
         "float16": dtypes.float16, "int32": dtypes.int32, "int64": dtypes.int64, "int8": dtypes.int8,
         "uint8": dtypes.uint8, "int16": dtypes.int16, "uint16": dtypes.uint16, "uint32": dtypes.uint32,
         "uint64": dtypes.uint64}


def to_dtype(value: Any) -> DType:
  """A DType from a DType, a name ("float32", "half") or a numpy dtype/type; TypeError for anything else."""
  if isinstance(value, DType): return value
  if isinstance(value, str): return dtypes.from_name(value)
  try: return from_numpy(np.dtype(value))
  except TypeError as e: raise TypeError(f"can't use {value!r} as a dtype: {e}") from None


def to_numpy(dt: DType) -> np.dtype:
  """The numpy dtype used to hold `dt` on the host. bfloat16 has none: it is carried as float32."""
  if dt == dtypes.bfloat16: return np.dtype(np.float32)
  if dt.fmt is None: raise TypeError(f"{dt} has no numpy equivalent")
  return np.dtype(dt.fmt)


def from_numpy(npdt: np.dtype | type) -> DType:
  npdt = np.dtype(npdt)
  for d in ALL_DTYPES:
    if d.fmt is not None and np.dtype(d.fmt) == npdt: return d
  raise TypeError(f"numpy dtype {npdt} is not supported; supported: {[d.name for d in ALL_DTYPES]}")


def _category(dt: DType) -> int: return 0 if dtypes.is_bool(dt) else 1 if dtypes.is_int(dt) else 2


def promote_types(a: DType, b: DType) -> DType:
  """The dtype of `a op b` for two tensors, following torch.promote_types."""
  if a == b: return a
  ca, cb = _category(a), _category(b)
  if ca != cb: return a if ca > cb else b
  if ca == 2:
    if {a, b} == {dtypes.float16, dtypes.bfloat16}: return dtypes.float32
    return a if a.itemsize > b.itemsize else b
  # two different integer types
  if dtypes.is_unsigned(a) == dtypes.is_unsigned(b): return a if a.itemsize > b.itemsize else b
  unsigned, signed = (a, b) if dtypes.is_unsigned(a) else (b, a)
  if unsigned != dtypes.uint8:
    raise TypeError(f"promotion of {unsigned.name} with {signed.name} is not supported (as in torch)")
  return signed if signed.itemsize > 1 else dtypes.int16


def result_type_with_scalar(dt: DType, value: Any) -> DType:
  """The dtype of `tensor op python_number`: the tensor's dtype unless the number is of a higher category."""
  scalar_category = 0 if isinstance(value, bool) else 1 if isinstance(value, int) else 2
  if scalar_category <= _category(dt): return dt
  return dtypes.default_float if scalar_category == 2 else dtypes.int64 if _category(dt) == 0 else dt


def truncate(value: Any, dt: DType) -> Any:
  """Convert a Python number to the value `dt` holds (wrap-around for ints, rounding for floats)."""
  if dtypes.is_bool(dt): return bool(value)
  if dtypes.is_int(dt):
    if isinstance(value, float) and not math.isfinite(value): return 0
    bits = dt.scalar().itemsize * 8
    v = int(value) & ((1 << bits) - 1)
    return v - (1 << bits) if not dtypes.is_unsigned(dt) and v >= 1 << (bits - 1) else v
  v = float(value)
  if dt.scalar() in (dtypes.float32, dtypes.float16) and math.isfinite(v):
    return float(np.array(v, dtype=to_numpy(dt.scalar())))
  return v
