"""Tensor ops on symbolic shapes: shrink, slicing, reshape, expand, full and arange with bound Variables.

Input: Tensors and arguments holding bound `Variable`s (minigrad.uop.variable). Output: Tensors whose shape holds
those Variables. Tensor's own methods hand over here when an argument or the tensor's shape is symbolic, so the
common (all-int) paths stay as they are.

What is supported: `x.shrink(((0, v), None))` and `x[:, :v]` (a variable end; the start and step fixed), reshape
that keeps each variable-length dim the outermost of the dims it merges with or splits into (`-1` allowed when it
stands for fixed dims), expand of size-1 dims to a variable size, pad before a variable-length dim or of other
dims (zeros), `Tensor.full/zeros/ones` of a symbolic shape, `Tensor.arange(v)` / `arange(start, v)`, elementwise
ops and sum/max/min reductions over variable-length axes (the kernel's loop runs to the value), and `.numpy()` of
the result. Anything else raises an error saying which op and argument (a symbolic path never guesses).
"""
from __future__ import annotations
from typing import Any, Sequence, TYPE_CHECKING
import numpy as np
from minigrad.helpers import prod
from minigrad.uop.ops import UOp, Ops
from minigrad.uop.variable import Variable, state, extents_of
import minigrad.tensor.function as F
if TYPE_CHECKING: from minigrad.tensor.tensor import Tensor


def involved(*args: Any) -> bool:
  """Does an argument (nested tuples/lists/slices) hold a Variable? False until the first Variable exists."""
  if not state["in_use"]: return False
  return _holds(args)


def _holds(x: Any) -> bool:
  if isinstance(x, Variable): return True
  if isinstance(x, slice): return _holds((x.start, x.stop, x.step))
  return isinstance(x, (tuple, list)) and any(_holds(a) for a in x)


def _check_bound(x: Any, where: str) -> None:
  if isinstance(x, Variable) and not x.bound:
    raise ValueError(f"{where}: Variable {x} is not bound; use Variable.bind(value) before using it in a shape")


def is_symbolic(t: Tensor) -> bool:
  """Does the tensor's shape hold a Variable?"""
  return state["in_use"] and extents_of(t.uop) is not None


def shrink(t: Tensor, bounds: Sequence[Any]) -> Tensor:
  if len(bounds) != t.ndim: raise ValueError(f"shrink: {len(bounds)} bounds given for a {t.ndim}-d tensor of shape {t.shape}")
  full = []
  for d, (b, size) in enumerate(zip(bounds, t.shape)):
    if b is None: full.append((0, size)); continue
    start, end = b
    for x in (start, end): _check_bound(x, f"shrink dim {d}")
    if isinstance(start, Variable): raise ValueError(f"shrink: dim {d} starts at the Variable {start}; only the end of a shrink may be a Variable")
    full.append((int(start), end if isinstance(end, Variable) else int(end)))
  if all(isinstance(e, int) and isinstance(s, int) and (s, e) == (0, size) for (s, e), size in zip(full, t.shape)): return t
  bounds_ir = tuple((s, e.uop if isinstance(e, Variable) else e) for s, e in full)
  # the integer part of each end is its largest value: ValueErrors from the ShapeTracker name the dim and the range
  return F.Shrink.apply(t, bounds=bounds_ir)


def getitem(t: Tensor, index: Any) -> Tensor:
  """Basic indexing (ints, slices with step 1, None, ...) of a symbolic tensor or with a slice ending at a Variable:
  one shrink, then a reshape that drops the int-indexed dims and adds the None ones."""
  items = list(index) if isinstance(index, tuple) else [index]
  if any(not isinstance(i, (slice, int, type(None), type(Ellipsis))) or isinstance(i, bool) for i in items):
    raise TypeError(f"indexing with Variables or a tensor of symbolic shape {t.shape} supports slices, ints, None and ... only, got {index!r}")
  if items.count(Ellipsis) > 1: raise IndexError("an index can only have a single ellipsis ('...')")
  dims_used = sum(1 for i in items if i is not None and i is not Ellipsis)
  if dims_used > t.ndim: raise IndexError(f"too many indices for tensor of dimension {t.ndim} (shape {t.shape})")
  if Ellipsis in items:
    at = items.index(Ellipsis)
    items[at:at + 1] = [slice(None)] * (t.ndim - dims_used)
  items += [slice(None)] * (t.ndim - sum(1 for i in items if i is not None))   # the dims not indexed are kept whole
  bounds: list[Any] = []
  out_shape: list[Any] = []
  dim = 0
  for item in items:
    if item is None: out_shape.append(1); continue
    size = t.shape[dim]
    if isinstance(item, int):
      if isinstance(size, Variable):
        if not 0 <= item < size.min: raise IndexError(f"index {item} of dim {dim} (symbolic size {size}) must be in [0, {size.min}) for every value")
      elif not -size <= item < size: raise IndexError(f"index {item} is out of bounds for dimension {dim} with size {size}")
      bounds.append((item % size if isinstance(size, int) else item, (item % size if isinstance(size, int) else item) + 1))
    else:
      if isinstance(item.start, Variable) or isinstance(item.step, Variable) or item.step not in (None, 1):
        raise ValueError(f"slicing dim {dim} with {item}: with Variables only the end of a slice may be symbolic, with step 1")
      begin = item.start or 0
      if isinstance(item.stop, Variable) or isinstance(size, Variable):
        if begin < 0: raise ValueError(f"slicing dim {dim} with {item}: a negative start on a symbolic size is not supported")
        stop = size if item.stop is None else item.stop
      else: begin, stop, _ = item.indices(size)
      stop_is_int = isinstance(stop, int)
      bounds.append((begin, max(begin, stop) if stop_is_int else stop))
      out_shape.append((max(begin, stop) if stop_is_int else stop) - begin)
    dim += 1
  shrunk = shrink(t, bounds)
  return shrunk if tuple(out_shape) == shrunk.shape else reshape(shrunk, out_shape)


def reshape(t: Tensor, shape: Sequence[Any]) -> Tensor:
  for x in shape: _check_bound(x, "reshape")
  new_shape = list(shape)
  if new_shape.count(-1) > 1: raise RuntimeError(f"only one dimension can be inferred in reshape {tuple(new_shape)}")
  if -1 in new_shape:
    # the variable-length dims must come through as they are: -1 stands for fixed dims only
    old_vars = [s for s in t.shape if isinstance(s, Variable)]
    new_vars = [s for s in new_shape if isinstance(s, Variable)]
    if len(old_vars) != len(new_vars) or any(v not in old_vars for v in new_vars):
      raise RuntimeError(f"reshape {tuple(new_shape)} of shape {t.shape}: -1 can only stand for fixed sizes; give the symbolic sizes explicitly")
    known = prod(s for s in new_shape if isinstance(s, int) and s != -1)
    total = prod(s for s in t.shape if isinstance(s, int))
    if known == 0 or total % known: raise RuntimeError(f"shape {tuple(new_shape)} is invalid for input of shape {t.shape}")
    new_shape[new_shape.index(-1)] = total // known
  for s in new_shape:
    if isinstance(s, int) and s < 0: raise RuntimeError(f"invalid shape dimension {s} in {tuple(new_shape)}")
  if tuple(new_shape) == t.shape: return t
  return F.Reshape.apply(t, shape=tuple(s.uop if isinstance(s, Variable) else s for s in new_shape))


def expand(t: Tensor, shape: Sequence[Any]) -> Tensor:
  for x in shape: _check_bound(x, "expand")
  if len(shape) < t.ndim: raise RuntimeError(f"expand: target shape {tuple(shape)} has fewer dims than {t.shape}")
  old = (1,) * (len(shape) - t.ndim) + tuple(t.shape)
  target = tuple(o if isinstance(n, int) and n == -1 else n for o, n in zip(old, shape))
  for i, (o, n) in enumerate(zip(old, target)):
    if isinstance(o, Variable) and not (isinstance(n, Variable) and n == o):
      raise RuntimeError(f"expand: dim {i} has the symbolic size {o} and can't become {n} (shape {t.shape} to {tuple(shape)})")
    if isinstance(o, int) and o != 1 and o != n:
      raise RuntimeError(f"expand: the expanded size {n} must match the existing size {o} at non-singleton dimension {i} (shape {t.shape} to {tuple(shape)})")
  x = t.reshape(old) if old != t.shape else t
  if target == x.shape: return x
  return F.Expand.apply(x, shape=tuple(s.uop if isinstance(s, Variable) else s for s in target))


def full(shape: tuple, value: Any, dtype: Any, device: str) -> UOp:
  """The graph of a constant of a symbolic shape (a CONST broadcast by a VIEW, no memory)."""
  for x in shape:
    _check_bound(x, "full")
    if isinstance(x, int) and x < 0: raise ValueError(f"Trying to create tensor with negative dimension {x}: {list(shape)}")
  return F.const_uop(value, dtype, device, tuple(s.uop if isinstance(s, Variable) else s for s in shape))


def arange(start: Any, stop: Any, step: Any, dtype: Any, device: str) -> Tensor:
  """arange up to a Variable: the elements start, start+1, ... below it (step 1, integer start)."""
  from minigrad.tensor.tensor import Tensor
  from minigrad.dtype import dtypes, to_dtype
  _check_bound(stop, "arange")
  if isinstance(start, Variable) or isinstance(step, Variable) or step != 1 or not isinstance(start, int):
    raise ValueError(f"arange({start}, {stop}, {step}): with a Variable, only the end may be symbolic, with an int start and step 1")
  if stop.min < start: raise ValueError(f"arange({start}, {stop}): the Variable's range [{stop.min}, {stop.max}] goes below the start")
  count = stop - start
  index = Tensor(UOp(Ops.ARANGE, dtypes.int32, (UOp(Ops.DEVICE, arg=device),), count.max))
  index = shrink(index, ((0, count),))
  out = index if start == 0 else index + start
  return out.cast(to_dtype(dtype) if dtype is not None else dtypes.default_int)


def numpy(t: Tensor) -> np.ndarray:
  """The values of a tensor of symbolic shape at the bound values: computed in the layout of the largest sizes,
  then cut to the values."""
  from minigrad.engine.realize import buffer_of
  from minigrad.dtype import to_numpy
  sizes = tuple(s.val if isinstance(s, Variable) else s for s in t.shape)
  if 0 in sizes: return np.zeros(sizes, dtype=to_numpy(t.dtype))
  out = F.Contiguous.apply(t).realize()
  layout = out.uop.shape   # the integer (largest) shape the kernel stored
  data = buffer_of(out.uop.base).allocate().numpy()[:prod(layout)].reshape(layout)
  return np.ascontiguousarray(data[tuple(slice(0, s) for s in sizes)])


def mean(t: Tensor, axis: Any, keepdim: bool) -> Tensor:
  """Mean over axes that may have a variable length: the sum over the count, the count itself summed in a kernel (a
  Variable's value is not a constant of any kernel)."""
  from minigrad.dtype import dtypes
  from minigrad.tensor.tensor import Tensor
  x = t if dtypes.is_float(t.dtype) else t.cast(dtypes.default_float)
  count = Tensor.full(x.shape, 1.0, dtype=x.dtype, device=x.device).sum(axis, keepdim)
  return x.sum(axis, keepdim) / count
