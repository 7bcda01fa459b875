"""Indexing for Tensor.__getitem__ and Tensor.__setitem__.

Input: a Tensor and a Python index (for setitem also a value). Output: a Tensor (getitem) or the new value the
indexed tensor is rebound to (setitem).

Index kinds, following PyTorch (and numpy where PyTorch agrees with it):
  - ints, slices with any step (negative too, as numpy), None, Ellipsis, Python bools: "basic" indexing. These
    map to movement ops only (shrink, flip, pad, reshape), so `x[::2, 1]` is a zero-copy view.
  - integer tensors, lists and numpy arrays: "advanced" indexing. The index tensors broadcast together to a
    shape B. When they index adjacent dims, B replaces those dims in place; otherwise B goes first. An int next
    to an index tensor is a plain select (as in PyTorch: `x[0, :, [1, 2]]` has shape (5, 2) for x of (4, 5, 6)).
    A nested list is one multi-dim index tensor (numpy's reading and PyTorch's announced one).
  - boolean tensors/lists/arrays: masks. A mask's result size depends on the data, so the mask is realized and
    turned into integer indices (its nonzero positions). `t[mask] = value` with a value that broadcasts to the
    non-masked dims stays lazy: it is a where().

Index values are realized and checked on the host (IndexError naming the index and the size). The gather itself
is one one-hot reduce, out[b, ...] = sum_n (index[b] == n) * x[n, ...], with n an ARANGE computed in the
kernel: it fuses into one kernel and its gradient is the scatter-add PyTorch gives.

Aliasing: minigrad tensors never share memory. `t[idx] = v` rebinds `t` to a new lazy value (where(mask,
value, old) or its one-hot form); earlier graphs built from `t` keep the old value. A tensor that came out of
basic indexing is not a window into its source, so assigning into it would silently not change the source
(PyTorch would): `t[0][1] = 5` raises a RuntimeError instead -- write `t[0, 1] = 5`, or make a separate
tensor first (`row = t[0] + 0`). The same holds for the pieces of split/chunk. Other views (reshape, permute,
expand ...) are not tracked: assigning into them changes only them.
Autograd: when t is a non-leaf that requires grad, ops that used t before `t[idx] = v` see its old value in the
forward pass, but (minigrad has no version counters) their gradient also flows through the assignment: don't
backpropagate through both.
"""
from __future__ import annotations
from dataclasses import dataclass
from typing import Any, TYPE_CHECKING
import numpy as np
from minigrad.dtype import dtypes
from minigrad.helpers import prod
if TYPE_CHECKING: from minigrad.tensor.tensor import Tensor


# ---------------------------------------------------------------- parsing

@dataclass
class _Select:
  """Basic selection along one source dim: `count` elements from `start` every `step` (> 0), after a flip if
  `flipped`. `keep` is False for an int index (the dim is dropped from the result)."""
  start: int
  count: int
  step: int
  flipped: bool
  keep: bool


@dataclass
class _Advanced:
  """An integer index (values on the host) on source dim `dim`."""
  dim: int
  values: np.ndarray


@dataclass
class _Plan:
  """A parsed index: per source dim a _Select, the result layout (("src", dim) or ("new", size) per result
  dim of the basic part) and the advanced indices."""
  selects: list[_Select]
  layout: list[tuple[str, int]]
  advanced: list[_Advanced]

  @property
  def basic_shape(self) -> tuple[int, ...]:
    return tuple(self.selects[v].count if kind == "src" else v for kind, v in self.layout)

  def advanced_positions(self) -> list[int]:
    """Where each advanced index's dim sits in the basic part's result."""
    where = {v: i for i, (kind, v) in enumerate(self.layout) if kind == "src"}
    return [where[a.dim] for a in self.advanced]


def _is_int(x: Any) -> bool: return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def _tensors_to_values(item: Any) -> Any:
  """A (nested) list of ints and Tensors, with each Tensor replaced by its values (torch accepts [t, 0] as an index)."""
  from minigrad.tensor.tensor import Tensor
  if isinstance(item, Tensor):
    if item.dtype != dtypes.bool and not dtypes.is_int(item.dtype):
      raise IndexError(f"tensors used as indices must be integer or bool tensors, got {item.dtype}")
    return item.numpy()
  return [_tensors_to_values(i) for i in item] if isinstance(item, (list, tuple)) else item


def _host_index(item: Any) -> tuple[str, Any]:
  """Classify one index item: ("new", size) / ("ellipsis", None) / ("int", v) / ("slice", s) /
  ("adv", int array) / ("mask", bool array)."""
  from minigrad.tensor.tensor import Tensor
  if item is None: return ("new", 1)
  if item is Ellipsis: return ("ellipsis", None)
  if isinstance(item, (bool, np.bool_)): return ("new", 1 if item else 0)
  if _is_int(item): return ("int", int(item))
  if isinstance(item, slice):
    for part in (item.start, item.stop, item.step):
      if part is not None and not _is_int(part) and not (isinstance(part, Tensor) and part.ndim == 0):
        raise TypeError(f"slice indices must be integers or None, got {part!r} in {item!r}")
    item = slice(*(int(p.item()) if isinstance(p, Tensor) else p for p in (item.start, item.stop, item.step)))
    if item.step == 0: raise ValueError(f"slice step cannot be zero: {item!r}")
    return ("slice", item)
  if isinstance(item, Tensor):
    if item.dtype != dtypes.bool and not dtypes.is_int(item.dtype):
      raise IndexError(f"tensors used as indices must be integer or bool tensors, got {item.dtype}")
    values = item.numpy()
  elif isinstance(item, (list, tuple, np.ndarray)):
    try: values = np.asarray(_tensors_to_values(item))
    except ValueError: raise IndexError(f"invalid index {str(item)[:60]}: ragged nested sequence") from None
    if values.size == 0 and values.dtype.kind == "f": values = values.astype(np.int64)
    if values.dtype.kind not in "biu": raise IndexError(f"invalid index {str(item)[:60]}: only integers and bools (dtype {values.dtype}) can index")
  else: raise TypeError(f"invalid index {item!r} of type {type(item).__name__}: use ints, slices, None, ..., bools or integer/bool tensors")
  if values.dtype == np.bool_: return ("new", int(values)) if values.ndim == 0 else ("mask", values)
  return ("int", int(values)) if values.ndim == 0 else ("adv", values.astype(np.int64))


def parse_index(shape: tuple[int, ...], index: Any) -> _Plan:
  """Turn a Python index for a tensor of `shape` into a _Plan, raising IndexError/TypeError as PyTorch does."""
  raw = list(index) if isinstance(index, tuple) else [index]
  items = [_host_index(it) for it in raw]
  if sum(kind == "ellipsis" for kind, _ in items) > 1: raise IndexError("an index can only have a single ellipsis ('...')")
  consumed = sum(1 if kind in ("int", "slice", "adv") else v.ndim if kind == "mask" else 0 for kind, v in items)
  if consumed > len(shape): raise IndexError(f"too many indices for tensor of dimension {len(shape)} (shape {shape}): {consumed} given")
  fill = [("slice", slice(None))] * (len(shape) - consumed)
  at = next((i for i, (kind, _) in enumerate(items) if kind == "ellipsis"), len(items))
  items = items[:at] + fill + items[at + 1:]
  selects: list[_Select] = []
  layout: list[tuple[str, int]] = []
  advanced: list[_Advanced] = []
  for kind, v in items:
    dim = len(selects)
    if kind == "new":
      layout.append(("new", v))
    elif kind == "int":
      size = shape[dim]
      if not -size <= v < size: raise IndexError(f"index {v} is out of bounds for dimension {dim} with size {size}")
      selects.append(_Select(v % size, 1, 1, False, False))
    elif kind == "slice":
      start, stop, step = v.indices(shape[dim])
      count = len(range(start, stop, step))
      if step < 0: selects.append(_Select(shape[dim] - 1 - start, count, -step, True, True))
      else: selects.append(_Select(start, count, step, False, True))
      layout.append(("src", dim))
    else:
      masks = [v] if kind == "adv" else list(np.nonzero(v))
      if kind == "mask" and v.shape != shape[dim:dim + v.ndim]:
        bad = next(i for i, (m, s) in enumerate(zip(v.shape, shape[dim:])) if m != s)
        raise IndexError(f"The shape of the mask {list(v.shape)} at index {bad} does not match the shape of the indexed "
                         f"tensor {list(shape)} at index {dim + bad}")
      for offset, values in enumerate(masks):
        selects.append(_Select(0, shape[dim + offset], 1, False, True))
        layout.append(("src", dim + offset))
        advanced.append(_Advanced(dim + offset, values))
  return _Plan(selects, layout, advanced)


# ---------------------------------------------------------------- basic indexing (movement ops)

def _take_every(t: Tensor, dim: int, start: int, count: int, step: int) -> Tensor:
  """Elements start, start+step, ... (count of them, step > 0) along dim, as movement ops only."""
  end = start + (count - 1) * step + 1 if count else start
  bounds = [(0, s) for s in t.shape]
  bounds[dim] = (start, end)
  t = t.shrink(bounds)
  if step == 1 or count <= 1: return t
  # pad to count*step, view as (count, step), keep column 0
  pad = [(0, 0)] * t.ndim
  pad[dim] = (0, count * step - (end - start))
  t = t.pad(pad)
  t = t.reshape(t.shape[:dim] + (count, step) + t.shape[dim + 1:])
  keep = [(0, s) for s in t.shape]
  keep[dim + 1] = (0, 1)
  t = t.shrink(keep)
  return t.reshape(t.shape[:dim + 1] + t.shape[dim + 2:])


def _place_every(t: Tensor, dim: int, start: int, step: int, size: int) -> Tensor:
  """The inverse of _take_every: put t's `count` elements along dim at start, start+step, ... of a dim of
  `size`, zeros (False) elsewhere. Movement ops only."""
  count = t.shape[dim]
  if step > 1 and count > 1:
    t = t.reshape(t.shape[:dim] + (count, 1) + t.shape[dim + 1:])
    t = t.pad([(0, 0)] * (dim + 1) + [(0, step - 1)] + [(0, 0)] * (t.ndim - dim - 2))
    t = t.reshape(t.shape[:dim] + (count * step,) + t.shape[dim + 2:])
    t = t.shrink([None] * dim + [(0, (count - 1) * step + 1)] + [None] * (t.ndim - dim - 1))
  pad = [(0, 0)] * t.ndim
  pad[dim] = (start, size - start - t.shape[dim])
  return t.pad(pad)


def _apply_basic(t: Tensor, plan: _Plan) -> Tensor:
  if not any(sel.flipped or (sel.step > 1 and sel.count > 1) for sel in plan.selects):   # windows only: one shrink
    t = t.shrink([(sel.start, sel.start + sel.count) for sel in plan.selects])
  else:
    for dim, sel in enumerate(plan.selects):
      if sel.flipped: t = t.flip(dim)
      t = _take_every(t, dim, sel.start, sel.count, sel.step)
  shape = plan.basic_shape
  if 0 in shape and t.numel() != 0:   # a False index adds an empty dim: keep it as 1 until after the reshape
    t = t.reshape(tuple(max(s, 1) if kind == "new" else s for s, (kind, _) in zip(shape, plan.layout)))
    return t.shrink([(0, s) for s in shape])
  return t.reshape(shape)


def _unapply_basic(value: Tensor, plan: _Plan, shape: tuple[int, ...]) -> Tensor:
  """Scatter `value` (of the basic part's result shape) back to a tensor of `shape`: zeros (False) outside the
  selected region. Movement ops only."""
  counts = tuple(sel.count if sel.keep else 1 for sel in plan.selects)
  value = value.reshape(counts)
  for dim, sel in enumerate(plan.selects):
    value = _place_every(value, dim, sel.start, sel.step, shape[dim])
    if sel.flipped: value = value.flip(dim)
  return value


def _is_whole(plan: _Plan, shape: tuple[int, ...]) -> bool:
  return all(sel.start == 0 and sel.step == 1 and sel.count == size and sel.keep for sel, size in zip(plan.selects, shape))


# ---------------------------------------------------------------- advanced indexing (one-hot reduce)

@dataclass
class _Gather:
  """Advanced indices resolved against a basic view of shape `shape`: `positions` (the indexed dims), `flat`
  (the broadcast indices as flat positions into those dims, shape B) and where B goes in the result."""
  shape: tuple[int, ...]
  positions: list[int]
  flat: np.ndarray

  @property
  def count(self) -> int: return prod(self.shape[p] for p in self.positions)
  @property
  def rest_dims(self) -> list[int]: return [d for d in range(len(self.shape)) if d not in self.positions]
  @property
  def rest_shape(self) -> tuple[int, ...]: return tuple(self.shape[d] for d in self.rest_dims)
  @property
  def insert_at(self) -> int:
    """Where B goes among the non-indexed dims: in place when the indexed dims are adjacent, else first."""
    adjacent = self.positions == list(range(self.positions[0], self.positions[0] + len(self.positions)))
    return self.positions[0] if adjacent else 0
  @property
  def result_shape(self) -> tuple[int, ...]:
    rest, at = self.rest_shape, self.insert_at
    return rest[:at] + self.flat.shape + rest[at:]

  def to_front(self, t: Tensor) -> Tensor:
    """View t (the basic view) as (count, *rest): the indexed dims first, flattened."""
    return t.permute(self.positions + self.rest_dims).reshape((self.count,) + self.rest_shape)

  def from_front(self, t: Tensor) -> Tensor:
    """The inverse of to_front."""
    t = t.reshape(tuple(self.shape[p] for p in self.positions) + self.rest_shape)
    order = self.positions + self.rest_dims
    return t.permute([order.index(d) for d in range(len(order))])


def _resolve(plan: _Plan, shape: tuple[int, ...]) -> _Gather:
  """Broadcast the advanced indices, check their range and flatten them (negative indices count from the end)."""
  try: arrays = np.broadcast_arrays(*[a.values for a in plan.advanced])
  except ValueError:
    shapes = ", ".join(str(list(a.values.shape)) for a in plan.advanced)
    raise IndexError(f"shape mismatch: indexing tensors could not be broadcast together with shapes {shapes}") from None
  positions = plan.advanced_positions()
  wrapped = []
  for adv, values, pos in zip(plan.advanced, arrays, positions):
    size = shape[pos]
    if values.size:
      for bad in (int(values.min()), int(values.max())):
        if not -size <= bad < size: raise IndexError(f"index {bad} is out of bounds for dimension {adv.dim} with size {size}")
    wrapped.append(values % size if size else values)
  dims = tuple(shape[p] for p in positions)
  flat = np.ravel_multi_index(tuple(wrapped), dims) if 0 not in dims else np.zeros(arrays[0].shape, np.int64)
  return _Gather(shape, positions, np.asarray(flat, dtype=np.int64).reshape(arrays[0].shape))


def _index_tensor(values: np.ndarray, device: str) -> Tensor:
  from minigrad.tensor.tensor import Tensor
  if values.size and int(values.max()) >= 2 ** 31: raise IndexError(f"index {int(values.max())} does not fit in int32")
  return Tensor(np.ascontiguousarray(values, dtype=np.int32).reshape(-1), device=device)


def _one_hot(flat: np.ndarray, count: int, device: str, trailing: int) -> Tensor:
  """(P, count) + (1,)*trailing bool mask: row p is true at column flat[p] (never for flat[p] == -1)."""
  from minigrad.tensor.tensor import Tensor
  hot = _index_tensor(flat, device).reshape(-1, 1).eq(Tensor.arange(count, device=device))
  return hot.reshape(hot.shape + (1,) * trailing)


def _sum_selected(mask: Tensor, values: Tensor, axis: int, dtype: Any) -> Tensor:
  """sum over `axis` of where(mask, values, 0), in values' dtype (exact: at most one term is nonzero per output
  for gathers)."""
  picked = mask & values if values.dtype == dtypes.bool else mask.where(values, 0)
  return picked.sum(axis).cast(dtype)


def nothing_of(t: Tensor, shape: tuple[int, ...]) -> Tensor:
  """A zero-size tensor of `shape` selected from t: an empty slice of it, so backward gives t zero gradients (a
  fresh empty tensor would have no history)."""
  return t.reshape(-1).shrink(((0, 0),)).reshape(shape)


def gather_advanced(t: Tensor, info: _Gather) -> Tensor:
  """t (the basic view) indexed by the advanced indices in `info`."""
  rest, flat = info.rest_shape, info.flat.reshape(-1)
  if flat.size == 0 or 0 in rest: return nothing_of(t, info.result_shape)
  hot = _one_hot(flat, info.count, t.device, len(rest))
  out = _sum_selected(hot, info.to_front(t).reshape((1, info.count) + rest), 1, t.dtype)   # (P, *rest)
  out = out.reshape(info.flat.shape + rest)
  nb, at = info.flat.ndim, info.insert_at
  if at == 0: return out
  order = list(range(nb, nb + at)) + list(range(nb)) + list(range(nb + at, out.ndim))
  return out.permute(order)


def take(t: Tensor, dim: int, values: np.ndarray) -> Tensor:
  """t indexed along `dim` by the integer array `values` (its dims replace dim): used by repeat_interleave."""
  return getitem(t, (slice(None),) * dim + (values,))


def getitem(t: Tensor, index: Any) -> Tensor:
  plan = parse_index(t.shape, index)
  view = _apply_basic(t, plan)
  if not plan.advanced:
    if view is not t: view._view_of_another = True   # setitem on it refuses: see setitem
    return view
  return gather_advanced(view, _resolve(plan, view.shape))


# ---------------------------------------------------------------- setitem

def _value_tensor(t: Tensor, value: Any) -> Tensor:
  from minigrad.tensor.tensor import Tensor
  if isinstance(value, Tensor):
    if value.device != t.device: raise RuntimeError(f"setitem: value on {value.device} but the tensor is on {t.device}")
    return value.cast(t.dtype)
  if isinstance(value, (bool, int, float, np.generic)): return Tensor.full((), value, t.dtype, t.device)
  if isinstance(value, (list, tuple, np.ndarray)): return Tensor(np.asarray(value), device=t.device).cast(t.dtype)
  raise TypeError(f"can't assign a {type(value).__name__} to a Tensor: use a scalar or a Tensor")


def _fit_value(value: Tensor, shape: tuple[int, ...]) -> Tensor:
  """Broadcast value to the indexing result's shape (leading size-1 dims of value may be dropped, as in PyTorch)."""
  original = value.shape
  while value.ndim > len(shape) and value.shape[0] == 1: value = value.reshape(value.shape[1:])
  aligned = (1,) * (len(shape) - value.ndim) + value.shape
  if value.ndim > len(shape) or any(v != s and v != 1 for v, s in zip(aligned, shape)):
    raise RuntimeError(f"shape mismatch: value tensor of shape {list(original)} cannot be broadcast to indexing result of shape {list(shape)}")
  return value.expand(shape)


def _scatter_advanced(view: Tensor, info: _Gather, value: Tensor) -> Tensor:
  """view (the basic view) with the advanced-indexed elements replaced by value. With repeated indices the last
  one wins, as on PyTorch's CPU."""
  from minigrad.tensor.tensor import Tensor
  rest, flat = info.rest_shape, info.flat.reshape(-1)
  value = _fit_value(value, info.result_shape)
  if flat.size == 0 or 0 in rest: return view
  nb, at = info.flat.ndim, info.insert_at
  if at: value = value.permute(list(range(at, at + nb)) + list(range(at)) + list(range(at + nb, value.ndim)))
  value = value.reshape((flat.size, 1) + rest)
  _, last_from_end = np.unique(flat[::-1], return_index=True)
  winners = flat.size - 1 - last_from_end
  kept = np.full_like(flat, -1)
  kept[winners] = flat[winners]
  placed = _sum_selected(_one_hot(kept, info.count, view.device, len(rest)), value, 0, view.dtype)   # (count, *rest)
  hit = np.zeros(info.count, np.bool_)
  hit[flat] = True
  hit_t = Tensor(hit, device=view.device).reshape((info.count,) + (1,) * len(rest))
  return info.from_front(hit_t.where(placed, info.to_front(view)))


def _mask_fast_path(t: Tensor, index: Any, value: Tensor) -> Tensor | None:
  """`t[mask] = value` for a bool Tensor mask over t's leading dims and a value that broadcasts to the remaining
  dims: a lazy where(), no realize."""
  from minigrad.tensor.tensor import Tensor
  if not (isinstance(index, Tensor) and index.dtype == dtypes.bool and 0 < index.ndim <= t.ndim): return None
  if index.shape != t.shape[:index.ndim]: return None
  rest = t.shape[index.ndim:]
  shape = value.shape[1:] if value.ndim == len(rest) + 1 and value.shape[0] == 1 else value.shape
  if len(shape) > len(rest) or any(v != s and v != 1 for v, s in zip(shape[::-1], rest[::-1])): return None
  return index.reshape(index.shape + (1,) * len(rest)).where(value.reshape(shape), t)


def setitem(t: Tensor, index: Any, value: Any) -> None:
  """`t[index] = value`: rebind t to a new value with the indexed elements replaced (value cast to t's dtype and
  broadcast to the indexing result). Gradients flow to the kept part of t and to value, as in PyTorch."""
  from minigrad.tensor.tensor import Tensor
  if getattr(t, "_view_of_another", False):
    raise RuntimeError(f"can't assign into a tensor of shape {t.shape} that came out of basic indexing or split (a view in "
                       "PyTorch): minigrad tensors "
                       "don't share memory, so this would not change the tensor it was taken from (as PyTorch would). "
                       "Index the original in one step (t[i, j] = v instead of t[i][j] = v), or make a separate tensor first "
                       "(row = t[0] + 0)")
  if Tensor.grad_enabled and t.requires_grad and t.is_leaf:
    raise RuntimeError(f"a leaf Tensor (shape {t.shape}) that requires grad is being used in an in-place operation (setitem); "
                       "do it inside `with Tensor.no_grad():` or on a copy")
  value = _value_tensor(t, value)
  track = Tensor.grad_enabled and bool(t.requires_grad or value.requires_grad)
  old = t
  if track:   # the old value keeps its own history: the assignment is a new op on top of it
    old = Tensor(t.uop)
    old._ctx, old.requires_grad = t._ctx, t.requires_grad
  new = _mask_fast_path(old, index, value)
  if new is None:
    plan = parse_index(t.shape, index)
    view = _apply_basic(old, plan)
    if plan.advanced: new_view = _scatter_advanced(view, _resolve(plan, view.shape), value)
    else: new_view = _fit_value(value, view.shape)
    if 0 in plan.basic_shape: new = old
    elif _is_whole(plan, t.shape): new = _unapply_basic(new_view, plan, t.shape)
    else:
      inside = _unapply_basic(Tensor.full(plan.basic_shape, True, dtypes.bool, t.device), plan, t.shape)
      new = inside.where(_unapply_basic(new_view, plan, t.shape), old)
  new = new.cast(t.dtype)
  if new.shape != t.shape: new = new.expand(t.shape)
  t.assign(new)   # an assignment: TinyJit sees it (carried state, constants that changed)
  if track: t._ctx, t.requires_grad = new._ctx, new.requires_grad
