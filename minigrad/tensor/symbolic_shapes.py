"""Tensor ops on symbolic shapes: shrink, slicing, reshape, expand, full and arange with bound Variables.

Input: Tensors and arguments holding bound `Variable`s (minigrad.uop.variable). Output: Tensors whose shape holds
those Variables. Tensor's own methods hand over here when an argument or the tensor's shape is symbolic, so the
common (all-int) paths stay as they are.

What is supported: `x.shrink(((0, v), None))` and `x[:, :v]` (a variable end; the start and step fixed), windows at a
variable position `x[:, pos:pos+n]` (a fixed length; the tracker's symbolic offset) and `x[:, pos:pos+n] = value`
(setitem: a KV-cache row written at a Variable position), reshape that keeps each variable-length dim the outermost
of the dims it merges with or splits into (`-1` allowed when it stands for fixed dims), expand of size-1 dims to a
variable size, pad before a variable-length dim or of other dims (zeros), `Tensor.full/zeros/ones` of a symbolic
shape, `Tensor.arange(v)` / `arange(start, v)`, elementwise ops, sum/max/min/mean/var/std and argmax/argmin over
variable-length axes (the kernel's loop runs to the value), gradients of all of these (a shrink's gradient goes back
through a mask: `unshrink`), and `.numpy()` of the result. Anything else raises an error saying which op and
argument (a symbolic path never guesses).
"""
from __future__ import annotations
from typing import Any, Sequence, TYPE_CHECKING
import numpy as np
from minigrad.helpers import prod
from minigrad.uop.ops import UOp, Ops
from minigrad.uop.variable import Variable, state, extents_of, symbolic_shape
from minigrad.uop.shapetracker import ShapeTracker
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
    if isinstance(start, Variable) and not isinstance(end, Variable):
      raise ValueError(f"shrink: dim {d} starts at the Variable {start} and ends at {end}: a window at a symbolic start ends at start + length")
    full.append((start if isinstance(start, Variable) else int(start), end if isinstance(end, Variable) else int(end)))
  if all(isinstance(e, int) and isinstance(s, int) and (s, e) == (0, size) for (s, e), size in zip(full, t.shape)): return t
  bounds_ir = tuple((s.uop if isinstance(s, Variable) else s, e.uop if isinstance(e, Variable) else e) for s, e in full)
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
      if isinstance(item.step, Variable) or item.step not in (None, 1):
        raise ValueError(f"slicing dim {dim} with {item}: with Variables only the start and end of a slice may be symbolic, with step 1")
      if isinstance(item.start, Variable):   # a window at a variable position: x[pos:pos+n]
        if not isinstance(item.stop, Variable):
          raise ValueError(f"slicing dim {dim} with {item}: a slice from a Variable must end at it plus a fixed length (x[pos:pos+n])")
        bounds.append((item.start, item.stop)); out_shape.append(_window_length(item.start, item.stop, dim))
        dim += 1
        continue
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


def setitem(t: Tensor, index: Any, value: Any) -> None:
  """`t[..., pos:pos+n, ...] = value` with a bound Variable `pos` (slices with step 1 only): t is rebound to the
  value inside the window and its old elements elsewhere, as any setitem, in kernels that take `pos` as an argument
  (one kernel set for every position). A window of length 1 broadcasts the value along its dim; a longer one reads
  the value through a zero-padded copy moved to the position."""
  from minigrad.tensor.tensor import Tensor
  from minigrad.tensor.indexing import _value_tensor, _fit_value
  if is_symbolic(t): raise ValueError(f"setitem into a tensor of symbolic shape {t.shape} is not supported")
  if getattr(t, "_view_of_another", False) or (Tensor.grad_enabled and t.requires_grad and t.is_leaf):
    from minigrad.tensor.indexing import setitem as plain_setitem
    return plain_setitem(t, index, value)   # raises its errors (a view of another tensor, a leaf that requires grad)
  items = list(index) if isinstance(index, tuple) else [index]
  if any(not isinstance(i, (slice, type(Ellipsis))) for i in items) or items.count(Ellipsis) > 1:
    raise TypeError(f"setitem with a Variable supports slices (step 1) and one ... only, got {index!r}")
  if len(items) - items.count(Ellipsis) > t.ndim: raise IndexError(f"too many indices for tensor of dimension {t.ndim} (shape {t.shape})")
  if Ellipsis in items:
    at = items.index(Ellipsis)
    items[at:at + 1] = [slice(None)] * (t.ndim - len(items) + 1)
  items += [slice(None)] * (t.ndim - len(items))
  windows: dict[int, tuple[Variable, int]] = {}
  ranges: list[tuple[int, int]] = []
  for d, (item, size) in enumerate(zip(items, t.shape)):
    if item.step not in (None, 1): raise ValueError(f"setitem with a Variable: dim {d} has step {item.step}; only step 1 is supported")
    if isinstance(item.start, Variable) or isinstance(item.stop, Variable):
      if not isinstance(item.start, Variable) or not isinstance(item.stop, Variable):
        raise ValueError(f"setitem: dim {d} sliced with {item}: with a Variable, only a window x[pos:pos+n] can be assigned")
      _check_bound(item.start, f"setitem dim {d}")
      length = _window_length(item.start, item.stop, d)
      if item.start.min < 0 or item.start.max + length > size:
        raise ValueError(f"setitem: dim {d} of size {size} can't hold the window [{item.start}, {item.stop}) for every value of "
                         f"{item.start} (range [{item.start.min}, {item.start.max}])")
      windows[d] = (item.start, length); ranges.append((0, length))
    else:
      begin, stop, _ = item.indices(size)
      ranges.append((begin, max(begin, stop)))
  region = tuple(end - begin for begin, end in ranges)
  value = _value_tensor(t, value)
  track = Tensor.grad_enabled and bool(t.requires_grad or value.requires_grad)
  old = t
  if track:   # the old value keeps its own history: the assignment is a new op on top of it (as indexing.setitem)
    old = Tensor(t.uop)
    old._ctx, old.requires_grad = t._ctx, t.requires_grad
  placed = _fit_value(value, region)
  if placed.shape != region: placed = placed.expand(region)
  placed, inside = _place(placed, tuple((windows[d][0], windows[d][0] + windows[d][1]) if d in windows else r for d, r in enumerate(ranges)), t.shape)
  new = placed if inside is None else inside.where(placed, old)
  if new.shape != t.shape: new = new.expand(t.shape)
  new = new.cast(t.dtype)
  t.assign(new)
  if track: t._ctx, t.requires_grad = new._ctx, new.requires_grad


def _place(value: Tensor, bounds: Sequence[tuple[Any, Any]], shape: tuple[int, ...]) -> tuple[Tensor, Tensor | None]:
  """(value moved to the region `bounds` of a tensor of the fixed `shape`, the bool mask of that region or None when it
  is everything): the inverse of a shrink. Per dim a bound is ints, (int, Variable end) (value's dim has that variable
  length), or a window (Variable start, start + n). Outside the region the moved value is anything (finite or not):
  use the mask."""
  from minigrad.tensor.tensor import Tensor
  inside = None
  for d, ((start, stop), size) in enumerate(zip(bounds, shape)):
    if not isinstance(size, int): raise ValueError(f"the inverse of a shrink into the symbolic size {size} (dim {d}) is not supported")
    along = lambda n: tuple(n if i == d else (0, 0) for i in range(len(shape)))   # noqa: E731
    if isinstance(start, Variable):   # a window: value[i - start] at i
      length = _window_length(start, stop, d)
      if length == 1: value = value.expand(tuple(size if i == d else n for i, n in enumerate(value.shape)))
      else:   # a copy padded by `size` zeros each side, read from size - start on
        value = shrink(value.pad(along((size, size))).contiguous(), tuple((size - start, 2 * size - start) if i == d else None for i in range(len(shape))))
      mask = _below(stop, size, value.device) & ~_below(start, size, value.device)
    elif isinstance(stop, Variable):   # a variable length from a fixed start: its largest layout, cut by the mask
      value = _fixed_length(value, d)
      value = value.pad(along((start, size - start - value.shape[d])))
      mask = _below(stop, size, value.device)
      if start > 0: mask = mask & (Tensor.arange(size, device=value.device) >= start)
    else:
      if (start, stop) == (0, size): continue
      value = value.pad(along((start, size - stop)))
      rows = Tensor.arange(size, device=value.device)
      mask = (rows >= start) & (rows < stop)
    mask = mask.reshape(tuple(size if i == d else 1 for i in range(len(shape))))
    inside = mask if inside is None else inside & mask
  return value, inside


def _fixed_length(t: Tensor, dim: int) -> Tensor:
  """t with its variable-length dim `dim` read at its largest size (what lies past the bound length is anything). t is
  stored first (its buffer is laid out for the largest size): a kernel of fixed size can't fuse the variable-length
  computation behind it."""
  from minigrad.tensor.tensor import Tensor
  u = F.Contiguous.apply(t).uop
  base, st = (u.src[0], u.arg) if u.op is Ops.VIEW and u.src else (u, ShapeTracker.from_shape(symbolic_shape(u)))
  extents = tuple(None if i == dim else e for i, e in enumerate(st.extents or ()))
  return Tensor(UOp(Ops.VIEW, u.dtype, (base,), st.with_extents(extents or None)))   # kept even when contiguous


def _below(limit: Variable, size: int, device: str) -> Tensor:
  """The bool tensor (size,) that is True at i < limit, limit a bound Variable in [0, size]: element i of a shifted
  arange (a window at the symbolic start top - limit) is i + top - limit, below top exactly where i < limit."""
  from minigrad.tensor.tensor import Tensor
  top = limit.max
  shifted = shrink(Tensor.arange(size + top, device=device), ((top - limit, top - limit + size),))
  return shifted < top


def unshrink(grad: Tensor, bounds: Sequence[tuple[Any, Any]], shape: tuple[int, ...]) -> Tensor:
  """The gradient of a shrink with symbolic bounds: `grad` in the region, zeros elsewhere (Shrink's backward)."""
  placed, inside = _place(grad, bounds, shape)
  return placed if inside is None else inside.where(placed, 0.0)


def _window_length(start: Variable, stop: Variable, dim: int) -> int:
  length = (stop - start).uop.simplify()
  if length.op is not Ops.CONST or length.arg < 0:
    raise ValueError(f"slicing dim {dim} from {start} to {stop}: a window at a symbolic start needs a fixed length (x[pos:pos+n])")
  return length.arg


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


def var(t: Tensor, axes: tuple[int, ...], keepdim: bool, correction: float) -> Tensor:
  """var over axes that may have a variable length: sum((x - mean)^2) / max(0, count - correction), the count summed
  in a kernel like mean's (nan or inf with too few elements, as in torch)."""
  from minigrad.tensor.tensor import Tensor
  count = Tensor.full(t.shape, 1.0, dtype=t.dtype, device=t.device).sum(axes, keepdim)
  squares = (t - mean(t, axes, True)).square().sum(axes, keepdim)
  return squares / (count - correction).maximum(0.0)


def argmax(t: Tensor, axis: Any, keepdim: bool) -> Tensor:
  """argmax along a dim of a tensor of symbolic shape (flattened when axis is None): the first maximum is the one with
  the largest `top - position`, `top` the dim's largest size; the reduce loops over the bound length only."""
  from minigrad.tensor.tensor import Tensor
  from minigrad.dtype import dtypes
  from minigrad.tensor.math_ops import normalize_axis
  if axis is None:
    if t.ndim == 0: return Tensor.full((), 0, dtypes.int64, t.device)
    flat_size = t.shape[0] * prod(t.shape[1:]) if all(isinstance(s, int) for s in t.shape[1:]) else None
    if flat_size is None: raise ValueError(f"argmax/argmin without an axis of shape {t.shape}: only the outermost dim may be symbolic")
    flat = argmax(reshape(t, (flat_size,)), 0, False)
    return flat.reshape((1,) * t.ndim) if keepdim else flat
  dim = normalize_axis(axis, t.ndim)
  size = t.shape[dim]
  top = size if isinstance(size, int) else size.max
  is_max = t.eq(t.max(dim, keepdim=True)) | t.ne(t)
  position = Tensor.arange(size, device=t.device).reshape(tuple(size if i == dim else 1 for i in range(t.ndim)))
  from_end = is_max.where(top - position, 0).max(dim, keepdim)
  return (top - from_end).cast(dtypes.int64)
