"""Tensor creation beyond the basics in tensor.py: ranges, identity and triangular matrices, coordinate grids
(meshgrid), random tensors and initializers. Every creation function takes requires_grad= and returns a leaf
(as_leaf); a negative size raises NegativeDimensionError (a RuntimeError, as torch, and a ValueError).

Input: shapes, values, dtypes and devices. Output: lazy Tensors (mixed into `Tensor`, so these are called as
`Tensor.linspace(...)`, `Tensor.randint(...)`, `x.tril()` ...).

Random numbers come from a counter-based generator computed inside the kernels: element i of a call's output
is a hash of (i, key), where i comes from an ARANGE leaf and the key mixes the seed (`Tensor.manual_seed`)
with a counter that each call advances. So the numbers depend only on (seed, call number, index): the same
on every run and device, and no generator state beyond two integers. The hash is three rounds of a 32-bit
integer mixer (xor-shift and multiply) with a different key in each round; the keys are computed on the host and
loaded from a 3-word buffer per stream (so the kernels are the same call after call); the top bits of a word
give uniform floats in [0, 1); normals come from the Box-Muller transform.
"""
from __future__ import annotations
from typing import Any, TYPE_CHECKING
import math
import weakref
import numpy as np
from minigrad.dtype import DType, DTypeError, dtypes, to_dtype
from minigrad.helpers import prod
if TYPE_CHECKING: from minigrad.tensor.tensor import Tensor

MASK64 = (1 << 64) - 1


def _splitmix64(x: int) -> int:
  """A 64-bit mixing step (host side), used to turn (seed, counter) into the per-call keys."""
  x = (x + 0x9E3779B97F4A7C15) & MASK64
  x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
  x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
  return x ^ (x >> 31)


def random_keys(seed: int, counter: int, streams: int) -> np.ndarray:
  """The 3 * streams uint32 hash keys of call number `counter` of the generator seeded with `seed` (3 per stream)."""
  state = _splitmix64((seed & MASK64) ^ _splitmix64(counter))
  keys = []
  for _ in range(3 * streams):
    state = _splitmix64(state)
    keys.append(state & 0xFFFFFFFF)
  return np.array(keys, dtype=np.uint32)


# Key buffers of random tensors: BUFFER node -> (generator counter, streams) it was made for. A documented cache
# with weak keys; TinyJit (minigrad/engine/jit.py) uses it to refill the keys on each replay, advancing the
# counter as an eager call would, so a replay draws exactly the numbers the eager call would have drawn.
random_key_buffers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _mix32(h: Tensor) -> Tensor:
  """One round of the in-kernel hash: a bijection of uint32 whose output bits each depend on every input bit."""
  h = h ^ (h >> 16)
  h = h * 0x85EBCA6B
  h = h ^ (h >> 13)
  h = h * 0xC2B2AE35
  return h ^ (h >> 16)


class NegativeDimensionError(RuntimeError, ValueError):
  """A negative size in a creation function's shape. torch raises RuntimeError; it is also a ValueError, as
  minigrad raised before."""


def check_no_negative_dimension(dims: tuple[int, ...]) -> tuple[int, ...]:
  """dims, or NegativeDimensionError in torch's words when one is negative."""
  for d in dims:
    if d < 0: raise NegativeDimensionError(f"Trying to create tensor with negative dimension {d}: {list(dims)}")
  return dims


def _shape_of(shape: tuple) -> tuple[int, ...]:
  """f(2, 3) and f((2, 3)) -> (2, 3); negative sizes are an error."""
  dims = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else tuple(shape)
  if not all(isinstance(d, int) or hasattr(d, "__index__") for d in dims): raise TypeError(f"shape must be ints, got {dims}")
  return check_no_negative_dimension(tuple(int(d) for d in dims))


def _float_dtype(dtype: Any, op: str) -> DType:
  dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
  if not dtypes.is_float(dt): raise DTypeError(f"{op} needs a float dtype, got {dt.name}")
  return dt


def as_leaf(t: Tensor, requires_grad: bool | None) -> Tensor:
  """t's value as a new leaf tensor (no recorded history) with `requires_grad`: what every creation function
  returns. As in torch, only floating-point tensors can require gradients."""
  from minigrad.tensor.tensor import Tensor
  if requires_grad is not None and not isinstance(requires_grad, bool):
    raise TypeError(f"requires_grad must be a bool, got {type(requires_grad).__name__}")
  if requires_grad and not dtypes.is_float(t.dtype):
    raise RuntimeError(f"Only Tensors of floating point and complex dtype can require gradients (got {t.dtype.name}, shape {t.shape})")
  result = Tensor(t.uop)
  result.requires_grad = requires_grad
  return result


def calculate_gain(nonlinearity: str, param: float | None = None) -> float:
  """torch.nn.init.calculate_gain: the recommended std scaling for a nonlinearity."""
  if nonlinearity in ("linear", "identity", "sigmoid") or nonlinearity.startswith("conv"): return 1.0
  if nonlinearity == "tanh": return 5.0 / 3
  if nonlinearity == "relu": return math.sqrt(2.0)
  if nonlinearity == "leaky_relu": return math.sqrt(2.0 / (1 + (0.01 if param is None else param) ** 2))
  if nonlinearity == "selu": return 3.0 / 4
  raise ValueError(f"Unsupported nonlinearity {nonlinearity}")


def fan_in_and_out(shape: tuple[int, ...]) -> tuple[int, int]:
  """(fan_in, fan_out) of a weight of `shape` as torch computes them: (out, in, *kernel)."""
  if len(shape) < 2: raise ValueError(f"Fan in and fan out can not be computed for tensor with fewer than 2 dimensions (shape {shape})")
  receptive = prod(shape[2:])
  return shape[1] * receptive, shape[0] * receptive


class CreationMixin:
  """Creation ops of Tensor (see minigrad.tensor)."""

  # ---- ranges and matrices ----
  @staticmethod
  def linspace(start: float, end: float, steps: int, dtype: Any = None, device: str | None = None,
               requires_grad: bool | None = None) -> Tensor:
    """`steps` values evenly spaced from start to end inclusive (torch.linspace: the first half counts up from
    start, the second half down from end, so both ends are exact)."""
    from minigrad.tensor.tensor import Tensor
    if not isinstance(steps, int) or isinstance(steps, bool): raise TypeError(f"linspace: steps must be an int, got {type(steps).__name__}")
    if steps < 0: raise RuntimeError(f"linspace: number of steps must be non-negative, got {steps}")
    dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
    compute = dt if dt in (dtypes.float32, dtypes.float64) else dtypes.float64 if not dtypes.is_float(dt) else dtypes.float32
    if steps <= 1: return as_leaf(Tensor.full((steps,), start, dtype=compute, device=device).cast(dt), requires_grad)
    step = (float(end) - float(start)) / (steps - 1)
    index = Tensor.arange(steps, device=device).cast(compute)
    from_start = index * step + float(start)
    from_end = float(end) - (steps - 1 - index) * step
    values = (index < steps // 2).where(from_start, from_end)
    return as_leaf(values.cast(dt), requires_grad)

  @staticmethod
  def eye(n: int, m: int | None = None, dtype: Any = None, device: str | None = None, requires_grad: bool | None = None) -> Tensor:
    """The n x m identity matrix (m defaults to n)."""
    from minigrad.tensor.tensor import Tensor
    m = n if m is None else m
    for name, v in (("n", n), ("m", m)):
      if not isinstance(v, (int, np.integer)) or isinstance(v, bool): raise TypeError(f"eye(): argument '{name}' must be int, not {type(v).__name__}")
    if n < 0 or m < 0: raise RuntimeError(f"eye: n and m must be greater or equal to 0, got n={n}, m={m}")
    rows, cols = Tensor.arange(n, device=device).reshape(n, 1), Tensor.arange(m, device=device).reshape(1, m)
    return as_leaf(rows.eq(cols).cast(to_dtype(dtype) if dtype is not None else dtypes.default_float), requires_grad)

  def _triangle(self, diagonal: int, lower: bool, name: str) -> Tensor:
    if self.ndim < 2: raise RuntimeError(f"{name}: input tensor must have at least 2 dimensions, got shape {self.shape}")
    rows, cols = self.shape[-2:]
    row_index = type(self).arange(rows, device=self.device).reshape(rows, 1)
    col_index = type(self).arange(cols, device=self.device).reshape(1, cols)
    keep = (col_index <= row_index + diagonal) if lower else (col_index >= row_index + diagonal)
    return keep.where(self, self.zeros_like())

  def tril(self, diagonal: int = 0) -> Tensor:
    """The lower triangle of the last two dims (j <= i + diagonal), zeros elsewhere; batched over leading dims."""
    return self._triangle(diagonal, True, "tril")
  def triu(self, diagonal: int = 0) -> Tensor:
    """The upper triangle of the last two dims (j >= i + diagonal), zeros elsewhere; batched over leading dims."""
    return self._triangle(diagonal, False, "triu")

  def empty_like(self, **kwargs: Any) -> Tensor:
    return type(self).empty(self.shape, **{"dtype": self.dtype, "device": self.device, **kwargs})

  # ---- the generator ----
  @staticmethod
  def _random_bits(shape: tuple[int, ...], device: str | None, streams: int = 1) -> list[Tensor]:
    """`streams` independent uint32 tensors of `shape`, from one step of the (seed, counter) generator."""
    from minigrad.tensor.tensor import Tensor
    count = prod(shape)
    if count >= 2 ** 31: raise ValueError(f"random tensors are limited to 2**31 - 1 elements, shape {shape} has {count}")
    Tensor._rng_counter += 1
    # the keys are loaded from a small buffer, not baked into the kernel: every call runs the same kernels, and a
    # TinyJit replay refills the buffer (see random_key_buffers) instead of repeating the captured numbers
    keys = Tensor(random_keys(Tensor._seed, Tensor._rng_counter, streams), device=device)
    random_key_buffers[keys.uop.base] = (Tensor._rng_counter, streams)
    index = Tensor.arange(count, device=device).cast(dtypes.uint32)
    out = []
    for stream in range(streams):
      h = _mix32(index ^ keys[3 * stream])
      h = _mix32(h + keys[3 * stream + 1])
      out.append(_mix32(h ^ keys[3 * stream + 2]).reshape(shape))
    return out

  @staticmethod
  def _uniform_from_bits(bits: list[Tensor], dt: DType) -> Tensor:
    """Uniform floats in [0, 1) of dtype dt, using as many top bits as dt's significand holds (so rounding
    can never reach 1.0): 2 words for float64, 24/11/8 bits for float32/float16/bfloat16."""
    if dt == dtypes.float64:
      high, low = (bits[0] >> 5).cast(dtypes.float64), (bits[1] >> 6).cast(dtypes.float64)
      return (high * 2.0 ** 26 + low) * 2.0 ** -53
    keep = dtypes.mantissa_bits(dt)
    return ((bits[0] >> (32 - keep)).cast(dtypes.float32) * 2.0 ** -keep).cast(dt)

  @staticmethod
  def rand(*shape: Any, dtype: Any = None, device: str | None = None, requires_grad: bool | None = None) -> Tensor:
    """Uniform random numbers in [0, 1), from the in-kernel counter-based generator (see the module docstring)."""
    from minigrad.tensor.tensor import Tensor
    shp, dt = _shape_of(shape), _float_dtype(dtype, "rand")
    out = Tensor._uniform_from_bits(Tensor._random_bits(shp, device, 2 if dt == dtypes.float64 else 1), dt)
    return Tensor._finish_random(out, requires_grad)

  @staticmethod
  def randn(*shape: Any, dtype: Any = None, device: str | None = None, requires_grad: bool | None = None) -> Tensor:
    """Standard normal random numbers (Box-Muller: sqrt(-2 ln u1) * sin(2 pi u2), u1 in (0, 1])."""
    from minigrad.tensor.tensor import Tensor
    shp, dt = _shape_of(shape), _float_dtype(dtype, "randn")
    compute = dtypes.float64 if dt == dtypes.float64 else dtypes.float32
    bits = Tensor._random_bits(shp, device, 4 if compute == dtypes.float64 else 2)
    half = len(bits) // 2
    u1 = 1.0 - Tensor._uniform_from_bits(bits[:half], compute)   # (0, 1]: the log stays finite
    u2 = Tensor._uniform_from_bits(bits[half:], compute)
    radius = (u1.log2() * (-2.0 * math.log(2))).sqrt()
    return Tensor._finish_random((radius * (u2 * (2 * math.pi)).sin()).cast(dt), requires_grad)

  @staticmethod
  def _finish_random(out: Tensor, requires_grad: bool | None) -> Tensor:
    from minigrad.tensor.tensor import Tensor
    result = Tensor(out.uop)   # no history: a random tensor is a leaf
    result.requires_grad = requires_grad
    return result

  @staticmethod
  def randint(*shape: Any, low: int = 0, high: int = 10, dtype: Any = None, device: str | None = None,
              requires_grad: bool | None = None) -> Tensor:
    """Uniform random integers in [low, high) (tinygrad's signature; dtype defaults to dtypes.default_int)."""
    from minigrad.tensor.tensor import Tensor
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (low, high)): raise TypeError(f"randint: low and high must be ints, got {low!r}, {high!r}")
    if high <= low: raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got from={low} >= to={high}")
    if high - low > 2 ** 32: raise ValueError(f"randint: the range [{low}, {high}) is wider than 2**32")
    dt = to_dtype(dtype) if dtype is not None else dtypes.default_int
    if dtypes.is_bool(dt) or not (dtypes.min(dt) <= low and high - 1 <= dtypes.max(dt)):
      raise RuntimeError(f"randint: [{low}, {high}) doesn't fit dtype {dt.name}")
    (bits,) = Tensor._random_bits(_shape_of(shape), device)
    offset = (bits.cast(dtypes.uint64) * (high - low)) >> 32   # multiply-shift: unbiased to 2**-32 * range
    return as_leaf((offset.cast(dtypes.int64) + low).cast(dt), requires_grad)

  @staticmethod
  def uniform(*shape: Any, low: float = 0.0, high: float = 1.0, **kwargs: Any) -> Tensor:
    """Uniform random numbers in [low, high)."""
    from minigrad.tensor.tensor import Tensor
    requires_grad = kwargs.pop("requires_grad", None)
    return Tensor._finish_random(Tensor.rand(*shape, **kwargs) * (high - low) + low, requires_grad)

  @staticmethod
  def normal(*shape: Any, mean: float = 0.0, std: float = 1.0, **kwargs: Any) -> Tensor:
    """Normal random numbers with the given mean and standard deviation."""
    from minigrad.tensor.tensor import Tensor
    requires_grad = kwargs.pop("requires_grad", None)
    return Tensor._finish_random(Tensor.randn(*shape, **kwargs) * std + mean, requires_grad)

  @staticmethod
  def scaled_uniform(*shape: Any, **kwargs: Any) -> Tensor:
    """U(-1, 1) scaled by 1/sqrt(number of elements) (tinygrad's initializer)."""
    from minigrad.tensor.tensor import Tensor
    shp = _shape_of(shape)
    requires_grad = kwargs.pop("requires_grad", None)
    return as_leaf(Tensor.uniform(*shp, low=-1.0, high=1.0, **kwargs) * prod(shp) ** -0.5, requires_grad)

  def meshgrid(self, *others: Tensor, indexing: str = "ij") -> tuple[Tensor, ...]:
    """Coordinate grids from 1-d (or 0-d) tensors, as torch.meshgrid: `Tensor.meshgrid(x, y)` or `x.meshgrid(y)`.
    indexing="ij": output i varies along dim i; "xy" (numpy's default) swaps the first two dims. Views (expands)."""
    tensors = [self, *others]
    if indexing not in ("ij", "xy"): raise RuntimeError(f'torch.meshgrid: indexing must be one of "xy" or "ij", but received: {indexing}')
    for t in tensors:
      if not isinstance(t, CreationMixin): raise TypeError(f"meshgrid expects Tensors, got {type(t).__name__}")
      if t.ndim > 1: raise RuntimeError(f"torch.meshgrid: Expected 0D or 1D tensor in the tensor list but got a tensor of shape {t.shape}")
      if t.dtype != self.dtype: raise RuntimeError(f"torch.meshgrid: expects all tensors to have the same dtype (got {self.dtype.name} and {t.dtype.name})")
      if t.device != self.device: raise RuntimeError(f"torch.meshgrid: expects all tensors to have the same device (got {self.device} and {t.device})")
    swap = indexing == "xy" and len(tensors) >= 2
    order = [1, 0] + list(range(2, len(tensors))) if swap else list(range(len(tensors)))
    sizes = [t.numel() for t in tensors]
    shape = tuple(sizes[i] for i in order)
    grids = []
    for i, t in enumerate(tensors):
      axis = order.index(i)
      grids.append(t.reshape(tuple(sizes[i] if d == axis else 1 for d in range(len(tensors)))).expand(shape))
    return tuple(grids)

  def rand_like(self, **kwargs: Any) -> Tensor:
    return type(self).rand(*self.shape, **{"dtype": self.dtype if dtypes.is_float(self.dtype) else None, "device": self.device, **kwargs})
  def randn_like(self, **kwargs: Any) -> Tensor:
    return type(self).randn(*self.shape, **{"dtype": self.dtype if dtypes.is_float(self.dtype) else None, "device": self.device, **kwargs})

  # ---- initializers (torch.nn.init's formulas) ----
  @staticmethod
  def kaiming_uniform(*shape: Any, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu", **kwargs: Any) -> Tensor:
    """U(-b, b) with b = gain * sqrt(3 / fan) (torch.nn.init.kaiming_uniform_)."""
    from minigrad.tensor.tensor import Tensor
    shp = _shape_of(shape)
    bound = math.sqrt(3.0) * calculate_gain(nonlinearity, a) / math.sqrt(_fan(shp, mode))
    return Tensor.uniform(*shp, low=-bound, high=bound, **kwargs)

  @staticmethod
  def kaiming_normal(*shape: Any, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu", **kwargs: Any) -> Tensor:
    """N(0, std) with std = gain / sqrt(fan) (torch.nn.init.kaiming_normal_)."""
    from minigrad.tensor.tensor import Tensor
    shp = _shape_of(shape)
    return Tensor.normal(*shp, std=calculate_gain(nonlinearity, a) / math.sqrt(_fan(shp, mode)), **kwargs)

  @staticmethod
  def glorot_uniform(*shape: Any, gain: float = 1.0, **kwargs: Any) -> Tensor:
    """U(-b, b) with b = gain * sqrt(6 / (fan_in + fan_out)) (torch.nn.init.xavier_uniform_)."""
    from minigrad.tensor.tensor import Tensor
    shp = _shape_of(shape)
    fan_in, fan_out = fan_in_and_out(shp)
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return Tensor.uniform(*shp, low=-bound, high=bound, **kwargs)
  xavier_uniform = glorot_uniform

  @staticmethod
  def xavier_normal(*shape: Any, gain: float = 1.0, **kwargs: Any) -> Tensor:
    """N(0, std) with std = gain * sqrt(2 / (fan_in + fan_out)) (torch.nn.init.xavier_normal_)."""
    from minigrad.tensor.tensor import Tensor
    shp = _shape_of(shape)
    fan_in, fan_out = fan_in_and_out(shp)
    return Tensor.normal(*shp, std=gain * math.sqrt(2.0 / (fan_in + fan_out)), **kwargs)


def _fan(shape: tuple[int, ...], mode: str) -> int:
  if mode not in ("fan_in", "fan_out"): raise ValueError(f"Mode {mode} not supported, please use one of fan_in, fan_out")
  fan_in, fan_out = fan_in_and_out(shape)
  return fan_in if mode == "fan_in" else fan_out

