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
from minigrad.dtype import DType, dtypes, to_dtype, to_numpy, from_numpy
from minigrad.helpers import prod, to_tuple
from minigrad.uop.ops import UOp, Ops
import minigrad.tensor.function as F
from minigrad.tensor.math_ops import MathMixin, normalize_axis
from minigrad.tensor.reduce_ops import ReduceMixin
from minigrad.tensor.index_ops import IndexMixin
from minigrad.tensor.create import CreationMixin, as_leaf, check_no_negative_dimension
from minigrad.tensor.nn_ops import NNMixin
from minigrad.tensor.sort_ops import SortMixin
from minigrad.tensor.function import const_uop
from minigrad.schedule.scheduler import create_schedule, buffer_view
from minigrad.engine.realize import buffer_of, buffers, note_assign
from minigrad.engine import eager
from minigrad.runtime.device import Buffer, Device
from minigrad.uop.variable import state as _variables, user_shape
import minigrad.tensor.symbolic_shapes as S

Scalar = int | float | bool


def _flatten_nested(data: Any, dtype: DType | None = None) -> Any:
  """Validate a nested Python list (rectangular) and turn it into a numpy array with torch-like dtypes. With a
  dtype, the numbers go to it directly (no detour through the default dtypes, which would round or wrap them)."""
  if dtype is not None:
    try: return np.array(data, dtype=to_numpy(dtype))
    except (OverflowError, ValueError, TypeError): pass   # out-of-range ints wrap (below), bad data fails below
  try: arr = np.array(data)
  except ValueError: arr = np.array(None, dtype=object)
  if arr.dtype == object: raise ValueError(f"can't build a tensor from ragged or non-numeric nested sequences: {str(data)[:80]}")
  if dtype is not None and arr.dtype.kind in "biuf": return arr
  if arr.dtype.kind == "f": return arr.astype(to_numpy(dtypes.default_float))
  if arr.dtype.kind in "iu":   # ints the default int can't hold become int64 rather than wrapping
    fits = arr.size == 0 or dtypes.min(dtypes.default_int) <= arr.min() and arr.max() <= dtypes.max(dtypes.default_int)
    return arr.astype(to_numpy(dtypes.default_int if fits else dtypes.int64))
  if arr.dtype.kind == "b": return arr
  if arr.size == 0: return arr.astype(to_numpy(dtypes.default_float))
  raise TypeError(f"can't build a tensor from {arr.dtype} data")


class Tensor(MathMixin, ReduceMixin, IndexMixin, CreationMixin, NNMixin, SortMixin):
  """A lazily evaluated n-dimensional array. `Tensor([1, 2, 3])`, `Tensor(np_array)`, `Tensor.ones(2, 3)`."""
  training: bool = False          # layers like Dropout/BatchNorm behave differently when training
  grad_enabled: bool = True       # False inside `with Tensor.no_grad():`
  _seed: int = 0
  _rng_counter: int = 0

  def __init__(self, data: Any, device: str | None = None, dtype: DType | None = None, requires_grad: bool | None = None):
    self.requires_grad: bool | None = requires_grad
    self.grad: Tensor | None = None
    self._ctx: F.Function | None = None   # the op that made this tensor, while gradients are tracked
    if type(data) is UOp and device is None:   # every op's result: the graph node says where it lives
      self.uop = data if dtype is None else data.cast(to_dtype(dtype))
      return
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
    if isinstance(data, (list, tuple)): arr = _flatten_nested(data, dtype)
    elif isinstance(data, np.ndarray): arr = data
    elif isinstance(data, (bytes, bytearray, memoryview)): arr = np.frombuffer(data, dtype=np.uint8)
    else: raise TypeError(f"can't build a Tensor from {type(data).__name__}")
    dt = dtype or from_numpy(arr.dtype)
    arr = np.require(arr.astype(to_numpy(dt), copy=False), requirements='C')   # keeps 0-d arrays 0-d
    buffer = UOp.new_buffer(dev, arr.size, dt)
    buffer_of(buffer).copyin(arr.reshape(-1))
    self.uop = buffer_view(buffer, arr.shape)

  @staticmethod
  def from_numpy(array: np.ndarray, device: str | None = None) -> Tensor:
    """A tensor sharing the memory of a numpy array, as torch.from_numpy: no copy, same dtype and shape. Evaluation
    is lazy, so a change to the array shows in every result computed from the tensor afterwards; minigrad never
    writes into the array. The array must be C-contiguous, aligned and in native byte order, and the device one
    that keeps buffers in host memory (CPU, LLVM); Tensor(array) copies any array, to any device."""
    if not isinstance(array, np.ndarray): raise TypeError(f"Tensor.from_numpy takes a numpy array, got {type(array).__name__}")
    if array.dtype.byteorder not in "=|": raise ValueError(f"Tensor.from_numpy: the array's byte order ({array.dtype}) isn't native; Tensor(array) converts it")
    if not array.flags.c_contiguous or not array.flags.aligned:
      raise ValueError("Tensor.from_numpy needs a C-contiguous, aligned array (np.ascontiguousarray makes one; Tensor(array) copies any array)")
    dt = from_numpy(array.dtype)
    buffer = UOp.new_buffer(Device.canonicalize(device or Device.DEFAULT), array.size, dt)
    buffers[buffer] = Buffer.of_host_array(buffer.device, array, dt)
    return Tensor(buffer_view(buffer, array.shape))

  # ---- facts ----
  @property
  def shape(self) -> tuple[int, ...]: return user_shape(self.uop) if _variables["in_use"] else self.uop.shape   # Variables: symbolic dims
  @property
  def dtype(self) -> DType: return self.uop.dtype
  @property
  def device(self) -> str: return self.uop.device
  @property
  def ndim(self) -> int: return len(self.shape)
  def numel(self) -> int: return prod(self.shape)
  def size(self, dim: int | None = None) -> tuple[int, ...] | int:
    return self.shape if dim is None else self.shape[normalize_axis(dim, self.ndim)]
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
    eager.realize((self,) + others)   # minigrad/engine/eager.py: the schedule, its run, and reuse of both
    return self

  def schedule(self, *others: Tensor) -> list:
    """The kernels realize() would run (ScheduleItems), without running them."""
    return create_schedule([t.uop for t in (self,) + others])[0]

  def contiguous(self) -> Tensor:
    base = self.uop.base
    if base.op is Ops.BUFFER and (self.uop is base or self.uop.arg.contiguous) and self.numel() == base.size: return self
    return F.Contiguous.apply(self)

  def numpy(self) -> np.ndarray:
    if S.is_symbolic(self): return S.numpy(self)   # cut to the bound values of its Variables
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
    return F.Copy.apply(self, device=device)

  def detach(self) -> Tensor: return Tensor(self.uop)

  def requires_grad_(self, requires_grad: bool = True) -> Tensor:
    """Set requires_grad in place and return the tensor, as torch's `x.requires_grad_()`. Like torch, only leaf
    tensors take it: a computed tensor's gradient flows from its inputs."""
    if not isinstance(requires_grad, bool): raise TypeError(f"requires_grad_ takes a bool, got {type(requires_grad).__name__}")
    if not self.is_leaf and not requires_grad:
      raise RuntimeError("requires_grad_(False) on a tensor computed by a recorded op; use .detach() to get one without history")
    self.requires_grad = requires_grad
    return self

  @property
  def is_leaf(self) -> bool:
    """True for tensors no recorded op produced (inputs, parameters), as in torch."""
    return self._ctx is None

  def assign(self, value: Tensor) -> Tensor:
    """Make this tensor hold `value` (same shape, dtype and device) from now on. Graphs built before keep the
    old value; `.grad` and `requires_grad` stay. Optimizers update parameters with it."""
    if not isinstance(value, Tensor): raise TypeError(f"assign expects a Tensor value, got {type(value).__name__}")
    old, new = self.uop, value.uop
    if _variables["in_use"] or new.dtype is not old.dtype or new.shape != old.shape or new.device != old.device:   # checked in full
      if value.shape != self.shape: raise ValueError(f"assign: value of shape {value.shape} doesn't match target of shape {self.shape}")
      if value.dtype != self.dtype: raise ValueError(f"assign: value of dtype {value.dtype} doesn't match target of dtype {self.dtype}")
      if value.device != self.device: raise ValueError(f"assign: value on {value.device} but target on {self.device}")
    self.uop = new
    note_assign(self, old)   # lets TinyJit see carried state and notice constants that changed
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
  def full(shape: int | Sequence[int], value: Scalar, dtype: DType | None = None, device: str | None = None,
           requires_grad: bool | None = None) -> Tensor:
    if S.involved(shape):   # a symbolic shape (Variables)
      dt = to_dtype(dtype) if dtype is not None else dtypes.from_py(value)
      out = Tensor(S.full(tuple(shape), value, dt, Device.canonicalize(device or Device.DEFAULT)))
      return out if requires_grad is None else as_leaf(out, requires_grad)
    shape = check_no_negative_dimension(to_tuple(shape))
    dt = to_dtype(dtype) if dtype is not None else dtypes.from_py(value)
    out = Tensor(const_uop(value, dt, Device.canonicalize(device or Device.DEFAULT), shape))
    return out if requires_grad is None else as_leaf(out, requires_grad)
  @staticmethod
  def zeros(*shape: Any, **kwargs: Any) -> Tensor: return Tensor.full(_shape_args(shape), 0.0, **{"dtype": dtypes.default_float, **kwargs})
  @staticmethod
  def ones(*shape: Any, **kwargs: Any) -> Tensor: return Tensor.full(_shape_args(shape), 1.0, **{"dtype": dtypes.default_float, **kwargs})
  def zeros_like(self, **kwargs: Any) -> Tensor: return Tensor.full(self.shape, 0, **{"dtype": self.dtype, "device": self.device, **kwargs})
  def ones_like(self, **kwargs: Any) -> Tensor: return Tensor.full(self.shape, 1, **{"dtype": self.dtype, "device": self.device, **kwargs})
  def full_like(self, value: Scalar, **kwargs: Any) -> Tensor:
    return Tensor.full(self.shape, value, **{"dtype": self.dtype, "device": self.device, **kwargs})

  @staticmethod
  def empty(*shape: Any, dtype: DType | None = None, device: str | None = None, requires_grad: bool | None = None) -> Tensor:
    shp = check_no_negative_dimension(_shape_args(shape))
    buffer = UOp.new_buffer(Device.canonicalize(device or Device.DEFAULT), prod(shp), to_dtype(dtype or dtypes.default_float))
    out = Tensor(buffer_view(buffer, shp))
    return out if requires_grad is None else as_leaf(out, requires_grad)

  @staticmethod
  def arange(start: Scalar, stop: Scalar | None = None, step: Scalar = 1, dtype: DType | None = None, device: str | None = None,
             requires_grad: bool | None = None) -> Tensor:
    if requires_grad is not None: return as_leaf(Tensor.arange(start, stop, step, dtype, device), requires_grad)
    if stop is None: start, stop = 0, start
    if S.involved(start, stop, step): return S.arange(start, stop, step, dtype, Device.canonicalize(device or Device.DEFAULT))
    if step == 0: raise ValueError("arange: step must be nonzero")
    is_float = any(isinstance(v, float) for v in (start, stop, step))
    dt = to_dtype(dtype) if dtype is not None else (dtypes.default_float if is_float else dtypes.default_int)
    count = max(0, math.ceil((stop - start) / step))
    index = Tensor(UOp(Ops.ARANGE, dtypes.int32, (UOp(Ops.DEVICE, arg=Device.canonicalize(device or Device.DEFAULT)),), count))
    if start == 0 and step == 1: return index.cast(dt)
    if dtypes.is_float(dt):   # in float64, then rounded once, as torch computes it
      return (index.cast(dtypes.float64) * step + start).cast(dt)
    return (index * step + start).cast(dt) if not is_float else (index.cast(dtypes.float64) * step + start).cast(dt)

  @staticmethod
  def manual_seed(seed: int = 0) -> None:
    """Restart the random generator: the same seed gives the same random tensors, call by call, everywhere."""
    Tensor._seed, Tensor._rng_counter = int(seed), 0

  # rand, randn, randint, uniform, normal ... : minigrad.tensor.create (computed in kernels from the seed)

  # ---- movement (zero-copy views) ----
  def reshape(self, *shape: Any) -> Tensor:
    """The same elements in a new shape: one size may be -1 (inferred), and None keeps that dim's size (tinygrad)."""
    given = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
    if None in given:
      if any(s is None and i >= self.ndim for i, s in enumerate(given)):
        raise RuntimeError(f"reshape: None keeps the size of the dim at its position, but {tuple(given)} has a None past the {self.ndim} dims of {self.shape}")
      shape = tuple(self.shape[i] if s is None else s for i, s in enumerate(given))
    if _variables["in_use"] and (S.involved(shape) or S.is_symbolic(self)):   # Variables in either shape
      return S.reshape(self, shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape)
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
    s, e = normalize_axis(start_dim, self.ndim), normalize_axis(end_dim, self.ndim)
    if self.ndim == 0: return self.reshape(1)
    if s > e: raise RuntimeError(f"flatten() has invalid args: start_dim ({start_dim}) cannot come after end_dim ({end_dim}) for shape {self.shape}")
    return self.reshape(self.shape[:s] + (prod(self.shape[s:e + 1]),) + self.shape[e + 1:])

  def permute(self, *order: Any) -> Tensor:
    axes = tuple(normalize_axis(a, self.ndim) for a in _shape_args(order))
    if sorted(axes) != list(range(self.ndim)): raise RuntimeError(f"permute order {tuple(_shape_args(order))} is not a permutation of the {self.ndim} dims of {self.shape}")
    if axes == tuple(range(self.ndim)): return self
    return F.Permute.apply(self, order=axes)

  def transpose(self, dim0: int = 1, dim1: int = 0) -> Tensor:
    order = list(range(self.ndim))
    a, b = normalize_axis(dim0, self.ndim), normalize_axis(dim1, self.ndim)
    order[a], order[b] = order[b], order[a]
    return self.permute(order)
  @property
  def T(self) -> Tensor: return self.permute(tuple(reversed(range(self.ndim))))

  def expand(self, *shape: Any) -> Tensor:
    if _variables["in_use"] and (S.involved(shape) or S.is_symbolic(self)): return S.expand(self, shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape)
    new_shape = _shape_args(shape)
    if new_shape == self.shape: return self
    if len(new_shape) < self.ndim: raise RuntimeError(f"expand: target shape {new_shape} has fewer dims than {self.shape}")
    old = (1,) * (len(new_shape) - self.ndim) + self.shape
    for i, n in enumerate(new_shape):
      if n == -1 and i < len(new_shape) - self.ndim:
        raise RuntimeError(f"expand: the expanded size of the tensor (-1) isn't allowed in a leading, non-existing dimension {i} (shape {self.shape} to {new_shape})")
      if n < -1: raise RuntimeError(f"expand: invalid size {n} at dimension {i} (shape {self.shape} to {new_shape})")
    target = tuple(o if n == -1 else n for o, n in zip(old, new_shape))
    for i, (o, n) in enumerate(zip(old, target)):
      if o != n and o != 1:
        raise RuntimeError(f"expand: the expanded size {n} must match the existing size {o} at non-singleton dimension {i} (shape {self.shape} to {new_shape})")
    t = self.reshape(old) if old != self.shape else self
    return t if target == t.shape else F.Expand.apply(t, shape=target)

  def broadcast_to(self, shape: tuple[int, ...]) -> Tensor: return self.expand(shape)

  def pad(self, padding: Sequence[Any], mode: str | float = "constant", value: float | None = None) -> Tensor:
    """Pad with a constant (mode 'constant', `value`, default 0) or by repeating the data: 'reflect', 'replicate',
    'circular' (as torch.nn.functional.pad). `padding` is ((before, after), ...) per dim (None: no padding) or
    torch's flat form (left, right, top, bottom, ...) starting from the last dim. Negative amounts crop.
    (A number in place of `mode` is taken as the value: `x.pad(pads, -1.0)`.)"""
    if not isinstance(mode, str): mode, value = "constant", mode
    if mode not in ("constant", "reflect", "replicate", "circular"): raise NotImplementedError(f"Unrecognised padding mode {mode}")
    if mode != "constant" and value is not None: raise RuntimeError(f'Padding mode "{mode}" doesn\'t take in value argument')
    value = 0.0 if value is None else value
    if padding and all(isinstance(p, int) for p in padding):
      if len(padding) % 2 or len(padding) // 2 > self.ndim: raise ValueError(f"pad: flat padding {tuple(padding)} needs pairs for at most {self.ndim} dims")
      pairs = [(0, 0)] * self.ndim
      for i in range(len(padding) // 2): pairs[self.ndim - 1 - i] = (padding[2 * i], padding[2 * i + 1])
    else:
      if len(padding) != self.ndim: raise ValueError(f"pad: {len(padding)} (before, after) pairs given for a {self.ndim}-d tensor of shape {self.shape}")
      pairs = [(0, 0) if p is None else tuple(p) for p in padding]
    if mode != "constant":
      from minigrad.tensor.index_ops import pad_with_mode
      return pad_with_mode(self, pairs, mode)
    if any(b < 0 or a < 0 for b, a in pairs):
      # negative padding crops, as in torch
      crop = tuple((max(0, -b), s - max(0, -a)) for (b, a), s in zip(pairs, self.shape))
      return self.shrink(crop).pad(tuple((max(0, b), max(0, a)) for b, a in pairs), value=value)
    if all(b == 0 and a == 0 for b, a in pairs): return self
    padded = F.Pad.apply(self, padding=tuple(pairs))
    if value == 0: return padded
    inside = F.Pad.apply(Tensor.full(self.shape, True, dtypes.bool, self.device), padding=tuple(pairs))
    return inside.where(padded, value).cast(self.dtype)   # the value takes the tensor's dtype (torch: int32 padded with 1.5 pads 1)

  def shrink(self, bounds: Sequence[tuple[int, int] | None]) -> Tensor:
    if _variables["in_use"] and (S.involved(bounds) or S.is_symbolic(self)): return S.shrink(self, bounds)
    if len(bounds) != self.ndim: raise ValueError(f"shrink: {len(bounds)} bounds given for a {self.ndim}-d tensor of shape {self.shape}")
    full = tuple((0, s) if b is None else (int(b[0]), int(b[1])) for b, s in zip(bounds, self.shape))
    for (start, end), s in zip(full, self.shape):
      if not 0 <= start <= end <= s: raise ValueError(f"shrink bounds {full} out of range for shape {self.shape}")
    if all(b == (0, s) for b, s in zip(full, self.shape)): return self
    return F.Shrink.apply(self, bounds=full)

  def flip(self, *axis: Any) -> Tensor:
    given = [normalize_axis(a, self.ndim) for a in _shape_args(axis)]
    for a in given:
      if given.count(a) > 1: raise RuntimeError(f"dim {a} appears multiple times in the list of dims (flip {tuple(_shape_args(axis))} of shape {self.shape})")
    axes = tuple(sorted(set(given)))
    return F.Flip.apply(self, axes=axes) if axes and self.ndim else self   # a 0-d tensor flips to itself

  def unsqueeze(self, dim: int) -> Tensor:
    d = normalize_axis(dim, self.ndim + 1)
    return self.reshape(self.shape[:d] + (1,) + self.shape[d:])

  def squeeze(self, dim: int | Sequence[int] | None = None) -> Tensor:
    """Drop size-1 dims: all of them, or those among `dim` (an int or a tuple; other sizes are left alone)."""
    if dim is None: return self.reshape(tuple(s for s in self.shape if s != 1))
    dims = {normalize_axis(d, self.ndim) for d in ((dim,) if isinstance(dim, (int, np.integer)) else dim)}
    if self.ndim == 0: return self
    return self.reshape(tuple(s for i, s in enumerate(self.shape) if not (i in dims and s == 1)))

  def __getitem__(self, index: Any) -> Tensor:
    """ints, slices (any step), None, ..., bools, integer tensors/lists (advanced) and bool masks: see minigrad.tensor.indexing."""
    if _variables["in_use"] and (S.involved(index) or S.is_symbolic(self)): return S.getitem(self, index)   # a slice ending at a Variable, a symbolic shape
    from minigrad.tensor.indexing import getitem
    return getitem(self, index)

  def __setitem__(self, index: Any, value: Any) -> None:
    """`t[index] = value` rebinds t to a new lazy value (tensors don't alias: a view taken earlier keeps the old
    values, and assigning into the result of basic indexing, `t[0][1] = v`, raises). See minigrad.tensor.indexing."""
    if _variables["in_use"] and S.involved(index): return S.setitem(self, index, value)   # a window at a Variable position
    from minigrad.tensor.indexing import setitem
    setitem(self, index, value)


_INT = {int}


def _shape_args(args: tuple) -> tuple[int, ...]:
  """Accept f(2, 3) and f((2, 3)): sizes or axes, which must be ints (as in torch: 1.5 or "x" is a TypeError)."""
  values = args[0] if len(args) == 1 and isinstance(args[0], (tuple, list)) else args
  if set(map(type, values)) <= _INT: return values if type(values) is tuple else tuple(values)   # the common case, in C
  if S.involved(values): return tuple(values)   # symbolic sizes (Variables): checked where they are used
  for a in values:
    if not isinstance(a, (int, np.integer)) or isinstance(a, bool):
      raise TypeError(f"dims and axes must be ints, got {a!r} ({type(a).__name__}) in {tuple(values)}")
  return tuple(int(a) for a in values)


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
