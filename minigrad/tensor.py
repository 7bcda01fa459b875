"""The Tensor API (PyTorch/tinygrad-shaped). Every op builds a lazy UOp graph; nothing runs until realize().

Input: Python lists/scalars and numpy arrays; tensor ops. Output: a lazy UOp graph, which `realize()` sends
through schedule -> codegen -> runtime, and `.numpy()` / `.item()` / `.tolist()` read back.

Arguments are checked here, before anything reaches generated code, with errors that name the shapes, dtypes
and axes involved (in PyTorch's words where it has them).
"""
from __future__ import annotations
from typing import Any, Sequence
import math
import numpy as np
from minigrad.dtype import DType, dtypes, to_dtype, to_numpy, from_numpy, promote_types, result_type_with_scalar
from minigrad.helpers import prod, to_tuple
from minigrad.uop.ops import UOp, Ops
import minigrad.function as F
from minigrad.function import const_uop
from minigrad.schedule.scheduler import create_schedule, mark_realized, buffer_view
from minigrad.engine.realize import run_schedule, buffer_of
from minigrad.runtime.device import Device

Scalar = int | float | bool


def _flatten_nested(data: Any) -> Any:
  """Validate a nested Python list (rectangular) and turn it into a numpy array with torch-like dtypes."""
  try: arr = np.array(data)
  except ValueError: arr = np.array(None, dtype=object)
  if arr.dtype == object: raise ValueError(f"can't build a tensor from ragged or non-numeric nested sequences: {str(data)[:80]}")
  if arr.dtype.kind == "f": return arr.astype(to_numpy(dtypes.default_float))
  if arr.dtype.kind in "iu": return arr.astype(to_numpy(dtypes.default_int))
  if arr.dtype.kind == "b": return arr
  if arr.size == 0: return arr.astype(to_numpy(dtypes.default_float))
  raise TypeError(f"can't build a tensor from {arr.dtype} data")


def _normalize_axis(axis: int, ndim: int) -> int:
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


class Tensor:
  """A lazily evaluated n-dimensional array. `Tensor([1, 2, 3])`, `Tensor(np_array)`, `Tensor.ones(2, 3)`."""
  training: bool = False          # layers like Dropout/BatchNorm behave differently when training
  grad_enabled: bool = True       # False inside `with Tensor.no_grad():`
  _seed: int = 0
  _rng_counter: int = 0

  def __init__(self, data: Any, device: str | None = None, dtype: DType | None = None, requires_grad: bool | None = None):
    self.requires_grad: bool | None = requires_grad
    self.grad: Tensor | None = None
    self._ctx: F.Function | None = None   # the op that made this tensor, while gradients are tracked
    if dtype is not None: dtype = to_dtype(dtype)
    if device == "": raise ValueError("device name is empty")
    dev = Device.canonicalize(device or Device.DEFAULT)
    if isinstance(data, UOp):
      self.uop = data if dtype is None or data.dtype == dtype else data.cast(dtype)
      return
    if isinstance(data, Tensor): data = data.numpy()
    if isinstance(data, (bool, int, float, np.generic)) and not isinstance(data, np.ndarray):
      dt = dtype or (from_numpy(data.dtype) if isinstance(data, np.generic) else dtypes.from_py(data))
      self.uop = const_uop(data, dt, dev, ())
      return
    if isinstance(data, (list, tuple)): arr = _flatten_nested(data)
    elif isinstance(data, np.ndarray): arr = data
    elif isinstance(data, (bytes, bytearray, memoryview)): arr = np.frombuffer(data, dtype=np.uint8)
    else: raise TypeError(f"can't build a Tensor from {type(data).__name__}")
    dt = dtype or from_numpy(arr.dtype)
    arr = np.require(arr.astype(to_numpy(dt), copy=False), requirements='C')   # keeps 0-d arrays 0-d
    buffer = UOp.new_buffer(dev, arr.size, dt)
    buffer_of(buffer).copyin(arr.reshape(-1))
    self.uop = buffer_view(buffer, arr.shape)

  # ---- facts ----
  @property
  def shape(self) -> tuple[int, ...]: return self.uop.shape
  @property
  def dtype(self) -> DType: return self.uop.dtype
  @property
  def device(self) -> str: return self.uop.device
  @property
  def ndim(self) -> int: return len(self.shape)
  def numel(self) -> int: return prod(self.shape)
  def size(self, dim: int | None = None) -> tuple[int, ...] | int:
    return self.shape if dim is None else self.shape[_normalize_axis(dim, self.ndim)]
  def __bool__(self) -> bool:
    if self.numel() != 1: raise RuntimeError(f"Boolean value of Tensor with {self.numel()} values (shape {self.shape}) is ambiguous")
    return bool(self.item())

  def __len__(self) -> int:
    if not self.shape: raise TypeError("len() of a 0-d tensor")
    return self.shape[0]
  def __repr__(self) -> str: return f"<Tensor shape={self.shape} dtype={self.dtype} device={self.device} op={self.uop.base.op.name}>"

  # ---- realization ----
  def realize(self, *others: Tensor) -> Tensor:
    """Compute this tensor (and `others`) now. `Tensor.realize(a, b)` realizes both in one schedule."""
    tensors = (self,) + others
    items, becomes, stored = create_schedule([t.uop for t in tensors])
    run_schedule(items)
    mark_realized(stored)
    for t in tensors: t.uop = becomes.get(t.uop, t.uop)
    return self

  def schedule(self, *others: Tensor) -> list:
    """The kernels realize() would run (ScheduleItems), without running them."""
    return create_schedule([t.uop for t in (self,) + others])[0]

  def contiguous(self) -> Tensor:
    base = self.uop.base
    if base.op is Ops.BUFFER and (self.uop is base or self.uop.arg.contiguous) and self.numel() == base.size: return self
    return F.Contiguous.apply(self)

  def numpy(self) -> np.ndarray:
    if self.numel() == 0: return np.zeros(self.shape, dtype=to_numpy(self.dtype))
    t = self.contiguous().realize()
    return buffer_of(t.uop.base).allocate().numpy()[:self.numel()].reshape(self.shape)

  def item(self) -> Scalar:
    if self.numel() != 1: raise RuntimeError(f"a Tensor with {self.numel()} elements (shape {self.shape}) cannot be converted to Scalar")
    return self.numpy().reshape(()).item()

  def tolist(self) -> Any: return self.numpy().tolist()

  def to(self, device: str) -> Tensor:
    device = Device.canonicalize(device)
    if device == self.device: return self
    raise NotImplementedError(f"copies between devices ({self.device} -> {device}) come with the multi-backend work")

  def detach(self) -> Tensor: return Tensor(self.uop)

  @property
  def is_leaf(self) -> bool:
    """True for tensors no recorded op produced (inputs, parameters), as in torch."""
    return self._ctx is None

  def assign(self, value: Tensor) -> Tensor:
    """Make this tensor hold `value` (same shape, dtype and device) from now on. Graphs built before keep the
    old value; `.grad` and `requires_grad` stay. Optimizers update parameters with it."""
    if not isinstance(value, Tensor): raise TypeError(f"assign expects a Tensor value, got {type(value).__name__}")
    if value.shape != self.shape: raise ValueError(f"assign: value of shape {value.shape} doesn't match target of shape {self.shape}")
    if value.dtype != self.dtype: raise ValueError(f"assign: value of dtype {value.dtype} doesn't match target of dtype {self.dtype}")
    if value.device != self.device: raise ValueError(f"assign: value on {value.device} but target on {self.device}")
    self.uop = value.uop
    return self

  # ---- autograd ----
  class no_grad:
    """`with Tensor.no_grad():` ops inside record nothing for backward (evaluation, optimizer updates)."""
    def __enter__(self) -> None: self.previous, Tensor.grad_enabled = Tensor.grad_enabled, False
    def __exit__(self, *exc: Any) -> None: Tensor.grad_enabled = self.previous

  class train:
    """`with Tensor.train():` sets Tensor.training (Dropout, BatchNorm) for the block; `Tensor.train(False)` for eval."""
    def __init__(self, mode: bool = True): self.mode = mode
    def __enter__(self) -> None: self.previous, Tensor.training = Tensor.training, self.mode
    def __exit__(self, *exc: Any) -> None: Tensor.training = self.previous

  def _seed_gradient(self, gradient: Tensor | None) -> Tensor:
    if gradient is None:
      if self.numel() != 1: raise RuntimeError(f"grad can be implicitly created only for scalar outputs (this tensor has shape {self.shape})")
      return Tensor.full(self.shape, 1.0, self.dtype, self.device)
    if gradient.shape != self.shape: raise RuntimeError(f"gradient has shape {gradient.shape} but the tensor has shape {self.shape}")
    return gradient

  def backward(self, gradient: Tensor | None = None) -> Tensor:
    """Accumulate d self / d leaf into `.grad` of every leaf tensor with requires_grad (as in PyTorch)."""
    if self._ctx is None and not self.requires_grad:
      raise RuntimeError("element 0 of tensors does not require grad and does not have a grad_fn")
    grads = F.backpropagate(self, self._seed_gradient(gradient))
    for t in _leaves(self):
      if (g := grads.get(id(t))) is not None: t.grad = g if t.grad is None else t.grad + g
    return self

  def gradient(self, *targets: Tensor, gradient: Tensor | None = None) -> list[Tensor]:
    """d self / d target for each target (zeros where self doesn't depend on it); `.grad` is untouched."""
    grads = F.backpropagate(self, self._seed_gradient(gradient))
    return [grads.get(id(t), t.zeros_like()) for t in targets]

  # ---- creation ----
  @staticmethod
  def full(shape: int | Sequence[int], value: Scalar, dtype: DType | None = None, device: str | None = None) -> Tensor:
    shape = _check_shape(to_tuple(shape))
    dt = to_dtype(dtype) if dtype is not None else dtypes.from_py(value)
    return Tensor(const_uop(value, dt, Device.canonicalize(device or Device.DEFAULT), shape))
  @staticmethod
  def zeros(*shape: Any, **kwargs: Any) -> Tensor: return Tensor.full(_shape_args(shape), 0.0, **{"dtype": dtypes.default_float, **kwargs})
  @staticmethod
  def ones(*shape: Any, **kwargs: Any) -> Tensor: return Tensor.full(_shape_args(shape), 1.0, **{"dtype": dtypes.default_float, **kwargs})
  def zeros_like(self, **kwargs: Any) -> Tensor: return Tensor.full(self.shape, 0, **{"dtype": self.dtype, "device": self.device, **kwargs})
  def ones_like(self, **kwargs: Any) -> Tensor: return Tensor.full(self.shape, 1, **{"dtype": self.dtype, "device": self.device, **kwargs})
  def full_like(self, value: Scalar, **kwargs: Any) -> Tensor:
    return Tensor.full(self.shape, value, **{"dtype": self.dtype, "device": self.device, **kwargs})

  @staticmethod
  def empty(*shape: Any, dtype: DType | None = None, device: str | None = None) -> Tensor:
    shp = _check_shape(_shape_args(shape))
    buffer = UOp.new_buffer(Device.canonicalize(device or Device.DEFAULT), prod(shp), to_dtype(dtype or dtypes.default_float))
    return Tensor(buffer_view(buffer, shp))

  @staticmethod
  def arange(start: Scalar, stop: Scalar | None = None, step: Scalar = 1, dtype: DType | None = None, device: str | None = None) -> Tensor:
    if stop is None: start, stop = 0, start
    if step == 0: raise ValueError("arange: step must be nonzero")
    is_float = any(isinstance(v, float) for v in (start, stop, step))
    dt = to_dtype(dtype) if dtype is not None else (dtypes.default_float if is_float else dtypes.default_int)
    return Tensor(np.arange(start, stop, step).astype(to_numpy(dt)), device=device, dtype=dt)

  @staticmethod
  def manual_seed(seed: int = 0) -> None:
    Tensor._seed, Tensor._rng_counter = seed, 0

  @staticmethod
  def _generator() -> np.random.Generator:
    """Counter-based (Philox) random streams: the same seed gives the same numbers on every run and device."""
    Tensor._rng_counter += 1
    return np.random.Generator(np.random.Philox(key=Tensor._seed, counter=Tensor._rng_counter))

  @staticmethod
  def rand(*shape: Any, dtype: DType | None = None, device: str | None = None) -> Tensor:
    data = Tensor._generator().random(_check_shape(_shape_args(shape)), dtype=np.float32)
    return Tensor(data, device=device, dtype=dtype or dtypes.default_float)
  @staticmethod
  def randn(*shape: Any, dtype: DType | None = None, device: str | None = None) -> Tensor:
    data = Tensor._generator().standard_normal(_check_shape(_shape_args(shape)), dtype=np.float32)
    return Tensor(data, device=device, dtype=dtype or dtypes.default_float)
  @staticmethod
  def uniform(*shape: Any, low: float = 0.0, high: float = 1.0, **kwargs: Any) -> Tensor:
    return Tensor.rand(*shape, **kwargs) * (high - low) + low

  # ---- movement (zero-copy views) ----
  def reshape(self, *shape: Any) -> Tensor:
    new_shape = list(_shape_args(shape))
    if new_shape.count(-1) > 1: raise RuntimeError(f"only one dimension can be inferred in reshape {tuple(new_shape)}")
    if -1 in new_shape:
      known = prod(s for s in new_shape if s != -1)
      if known == 0 or self.numel() % known: raise RuntimeError(f"shape '{list(new_shape)}' is invalid for input of size {self.numel()} (shape {self.shape})")
      new_shape[new_shape.index(-1)] = self.numel() // known
    if any(s < 0 for s in new_shape): raise RuntimeError(f"invalid shape dimension in {tuple(new_shape)}")
    if prod(new_shape) != self.numel():
      raise RuntimeError(f"can't reshape {self.shape} to {tuple(new_shape)}: shape '{list(new_shape)}' is invalid for input of size {self.numel()}")
    if tuple(new_shape) == self.shape: return self
    return F.Reshape.apply(self, shape=tuple(new_shape))

  def view(self, *shape: Any) -> Tensor: return self.reshape(*shape)
  def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    if self.ndim == 0: return self.reshape(1)
    s, e = _normalize_axis(start_dim, self.ndim), _normalize_axis(end_dim, self.ndim)
    return self.reshape(self.shape[:s] + (prod(self.shape[s:e + 1]),) + self.shape[e + 1:])

  def permute(self, *order: Any) -> Tensor:
    axes = tuple(_normalize_axis(a, self.ndim) for a in _shape_args(order))
    if sorted(axes) != list(range(self.ndim)): raise RuntimeError(f"permute order {tuple(_shape_args(order))} is not a permutation of the {self.ndim} dims of {self.shape}")
    if axes == tuple(range(self.ndim)): return self
    return F.Permute.apply(self, order=axes)

  def transpose(self, dim0: int = 1, dim1: int = 0) -> Tensor:
    order = list(range(self.ndim))
    a, b = _normalize_axis(dim0, self.ndim), _normalize_axis(dim1, self.ndim)
    order[a], order[b] = order[b], order[a]
    return self.permute(order)
  @property
  def T(self) -> Tensor: return self.permute(tuple(reversed(range(self.ndim))))

  def expand(self, *shape: Any) -> Tensor:
    new_shape = _shape_args(shape)
    if len(new_shape) < self.ndim: raise RuntimeError(f"expand: target shape {new_shape} has fewer dims than {self.shape}")
    old = (1,) * (len(new_shape) - self.ndim) + self.shape
    target = tuple(o if n == -1 else n for o, n in zip(old, new_shape))
    for i, (o, n) in enumerate(zip(old, target)):
      if o != n and o != 1:
        raise RuntimeError(f"expand: the expanded size {n} must match the existing size {o} at non-singleton dimension {i} (shape {self.shape} to {new_shape})")
    t = self.reshape(old) if old != self.shape else self
    return t if target == t.shape else F.Expand.apply(t, shape=target)

  def broadcast_to(self, shape: tuple[int, ...]) -> Tensor: return self.expand(shape)

  def pad(self, padding: Sequence[Any], value: float = 0.0) -> Tensor:
    """Pad with a constant. `padding` is ((before, after), ...) per dim (None: no padding) or torch's flat form
    (left, right, top, bottom, ...) starting from the last dim."""
    if padding and all(isinstance(p, int) for p in padding):
      if len(padding) % 2 or len(padding) // 2 > self.ndim: raise ValueError(f"pad: flat padding {tuple(padding)} needs pairs for at most {self.ndim} dims")
      pairs = [(0, 0)] * self.ndim
      for i in range(len(padding) // 2): pairs[self.ndim - 1 - i] = (padding[2 * i], padding[2 * i + 1])
    else:
      if len(padding) != self.ndim: raise ValueError(f"pad: {len(padding)} (before, after) pairs given for a {self.ndim}-d tensor of shape {self.shape}")
      pairs = [(0, 0) if p is None else tuple(p) for p in padding]
    if any(b < 0 or a < 0 for b, a in pairs):
      # negative padding crops, as in torch
      crop = tuple((max(0, -b), s - max(0, -a)) for (b, a), s in zip(pairs, self.shape))
      return self.shrink(crop).pad(tuple((max(0, b), max(0, a)) for b, a in pairs), value)
    if all(b == 0 and a == 0 for b, a in pairs): return self
    padded = F.Pad.apply(self, padding=tuple(pairs))
    if value == 0: return padded
    inside = F.Pad.apply(Tensor.full(self.shape, True, dtypes.bool, self.device), padding=tuple(pairs))
    return inside.where(padded, value)

  def shrink(self, bounds: Sequence[tuple[int, int] | None]) -> Tensor:
    if len(bounds) != self.ndim: raise ValueError(f"shrink: {len(bounds)} bounds given for a {self.ndim}-d tensor of shape {self.shape}")
    full = tuple((0, s) if b is None else (int(b[0]), int(b[1])) for b, s in zip(bounds, self.shape))
    for (start, end), s in zip(full, self.shape):
      if not 0 <= start <= end <= s: raise ValueError(f"shrink bounds {full} out of range for shape {self.shape}")
    if all(b == (0, s) for b, s in zip(full, self.shape)): return self
    return F.Shrink.apply(self, bounds=full)

  def flip(self, *axis: Any) -> Tensor:
    axes = tuple(sorted({_normalize_axis(a, self.ndim) for a in _shape_args(axis)}))
    return F.Flip.apply(self, axes=axes) if axes else self

  def unsqueeze(self, dim: int) -> Tensor:
    d = _normalize_axis(dim, self.ndim + 1)
    return self.reshape(self.shape[:d] + (1,) + self.shape[d:])

  def squeeze(self, dim: int | None = None) -> Tensor:
    if dim is None: return self.reshape(tuple(s for s in self.shape if s != 1))
    d = _normalize_axis(dim, self.ndim)
    return self if self.shape[d] != 1 else self.reshape(self.shape[:d] + self.shape[d + 1:])

  def __getitem__(self, index: Any) -> Tensor:
    from minigrad.indexing import getitem
    return getitem(self, index)

  # ---- elementwise ----
  def _alu(self, op: Ops, *others: Tensor) -> Tensor:
    if (fn := DIFFERENTIABLE.get(op)) is not None: return fn.apply(self, *others)
    return Tensor(self.uop.alu(op, *(o.uop for o in others)))   # comparisons and bit ops: no gradient

  def _broadcasted(self, other: Any, reverse: bool = False) -> tuple[Tensor, Tensor]:
    if isinstance(other, Tensor):
      if other.device != self.device: raise RuntimeError(f"tensors on different devices: {self.device} and {other.device}")
      dt = promote_types(self.dtype, other.dtype)
      x, y = self.cast(dt), other.cast(dt)
    elif isinstance(other, (int, float, bool, np.generic)):
      dt = result_type_with_scalar(self.dtype, other)
      x, y = self.cast(dt), Tensor(const_uop(other, dt, self.device, ()))
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

  def logical_not(self) -> Tensor: return self.cast(dtypes.bool)._alu(Ops.CMPNE, Tensor.full(self.shape, True, dtypes.bool, self.device))
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
    if not isinstance(x, Tensor) and not isinstance(y, Tensor):
      x = Tensor.full((), x, promote_types(dtypes.from_py(x), dtypes.from_py(y)), self.device)
    xt, yt = x._broadcasted(y) if isinstance(x, Tensor) else y._broadcasted(x, reverse=True)
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

  def __rpow__(self, x: Any) -> Tensor: return Tensor.full(self.shape, x, result_type_with_scalar(self.dtype, x), self.device).pow(self)
  def trunc(self) -> Tensor: return self._alu(Ops.TRUNC) if dtypes.is_float(self.dtype) else self
  def __mod__(self, x: Any) -> Tensor:
    """Remainder with the divisor's sign (torch's %): x - floor(x / y) * y for floats."""
    a, b = self._broadcasted(x)
    if dtypes.is_float(a.dtype):
      quotient = a / b
      floored = quotient.trunc() - ((quotient < 0) & quotient.ne(quotient.trunc())).cast(a.dtype)
      return a - floored * b
    remainder = Tensor(a.uop.alu(Ops.MOD, b.uop))
    fix = remainder.ne(0) & ((remainder < 0).ne(b < 0))
    return fix.where(remainder + b, remainder)

  # ---- reductions ----
  def _axes(self, axis: int | Sequence[int] | None) -> tuple[int, ...]:
    if axis is None: return tuple(range(self.ndim))
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    normalized = {_normalize_axis(a, self.ndim) for a in axes}
    return () if self.ndim == 0 else tuple(sorted(normalized))

  def _reduce(self, op: Ops, axis: int | Sequence[int] | None, keepdim: bool) -> Tensor:
    axes = self._axes(axis)
    kept = tuple(1 if i in axes else s for i, s in enumerate(self.shape))
    if 0 in self.shape:
      if op is Ops.MAX and any(self.shape[a] == 0 for a in axes): raise RuntimeError(f"max of an empty dimension (shape {self.shape}, axis {axis})")
      out = Tensor.full(kept, 0 if op is Ops.ADD else 1, self.dtype, self.device)
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
    if not isinstance(w, Tensor): raise TypeError(f"matmul expects a Tensor, got {type(w).__name__}")
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


def _shape_args(args: tuple) -> tuple[int, ...]:
  """Accept f(2, 3) and f((2, 3))."""
  if len(args) == 1 and isinstance(args[0], (tuple, list)): return tuple(int(a) for a in args[0])
  return tuple(int(a) for a in args)


def _check_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
  if any(s < 0 for s in shape): raise ValueError(f"negative dimension in shape {shape}")
  return shape


DIFFERENTIABLE: dict[Ops, type[F.Function]] = {
  Ops.ADD: F.Add, Ops.MUL: F.Mul, Ops.NEG: F.Neg, Ops.FDIV: F.Div, Ops.MAX: F.Maximum, Ops.WHERE: F.Where,
  Ops.EXP2: F.Exp2, Ops.LOG2: F.Log2, Ops.SIN: F.Sin, Ops.SQRT: F.Sqrt, Ops.RECIP: F.Reciprocal,
}


def _leaves(root: Tensor) -> list[Tensor]:
  """Tensors with requires_grad and no recorded op (parameters, inputs) that root was computed from."""
  found, seen, stack = [], set(), [root]
  while stack:
    t = stack.pop()
    if id(t) in seen: continue
    seen.add(id(t))
    if t._ctx is None:
      if t.requires_grad: found.append(t)
    else: stack.extend(t._ctx.inputs)
  return found
