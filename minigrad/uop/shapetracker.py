"""Zero-copy movement ops: `View` and `ShapeTracker`.

Input: a shape and movement-op arguments (reshape, permute, expand, pad, shrink, flip).
Output: `View` / `ShapeTracker` values, and from `to_indexed_uops` the (index, valid) int32 / bool UOps that
LOAD and STORE use to address the underlying buffer.

A View maps a multi-index `idx` over `shape` to the buffer element `offset + sum(idx[d] * strides[d])`; the
element is valid (readable) where every `idx[d]` lies inside `mask[d]`, and reads as zero elsewhere (that is
how pad works; expand is a stride of 0, flip a negative stride, shrink an offset plus a smaller shape).
A ShapeTracker is a stack of views for the movement chains one view can't express (e.g. a reshape of a
permuted or padded view): `views[0]` addresses the buffer and each later view addresses a contiguous array
of the previous view's shape. Adjacent views are merged whenever the pair is expressible as one view.
"""
from __future__ import annotations
import functools
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence
import operator
from minigrad.dtype import dtypes
from minigrad.helpers import cached_hash, prod
from minigrad.uop.ops import UOp, Ops
from minigrad.uop.rewrite import graph_rewrite
from minigrad.uop.symbolic import symbolic, split_terms
from minigrad.uop.symbolic_view import has_symbolic, move_extents, split_starts, to_ir
from minigrad.uop.variable import unbind, bound_values, rebind, symbolic_shape

Mask = tuple[tuple[int, int], ...]


# ---------------------------------------------------------------------------------------------------------------
# small helpers on plain integers

def row_major_strides(shape: Sequence[int]) -> tuple[int, ...]:
  """The strides of a C-contiguous array of `shape`, with 0 for size-1 dims (the canonical form)."""
  strides: list[int] = []
  step = 1
  for size in reversed(shape):
    strides.append(0 if size == 1 else step)
    step *= size
  return tuple(reversed(strides))


def _flat_strides(shape: Sequence[int]) -> list[int]:
  """Row-major strides without the size-1 canonicalization: the place value of each coordinate."""
  strides, step = [], 1
  for size in reversed(shape):
    strides.append(step)
    step *= size
  return strides[::-1]


def _unravel(flat: int, shape: Sequence[int]) -> list[int]:
  """The coordinates of element `flat` of a C-contiguous array of `shape` (0 <= flat < prod(shape))."""
  coords = []
  for size in reversed(shape):
    coords.append(flat % size)
    flat //= size
  return coords[::-1]


def _ceil_div(a: int, b: int) -> int: return -(-a // b)


def _int_tuple(values: Iterable[int], what: str) -> tuple[int, ...]:
  try: return tuple(operator.index(v) for v in values)
  except TypeError: raise ValueError(f"{what} must be a sequence of ints, got {values!r}") from None


def _int_pairs(values: Iterable[tuple[int, int]], what: str) -> tuple[tuple[int, int], ...]:
  try: pairs = tuple(tuple(operator.index(x) for x in pair) for pair in values)
  except TypeError: raise ValueError(f"{what} must be a sequence of (int, int) pairs, got {values!r}") from None
  if any(len(pair) != 2 for pair in pairs):
    raise ValueError(f"{what} must be a sequence of (int, int) pairs, got {values!r}")
  return pairs  # type: ignore[return-value]


def _check_rank(shape: tuple[int, ...], args: tuple, op: str) -> None:
  if len(args) != len(shape):
    raise ValueError(f"{op}: got {len(args)} entries {args} for the {len(shape)} dims of shape {shape}")


# ---------------------------------------------------------------------------------------------------------------
# View

@cached_hash
@dataclass(frozen=True)
class View:
  """One strided, optionally masked window onto a flat buffer. Build it with `View.create` (canonical form)."""
  shape: tuple[int, ...]
  strides: tuple[int, ...]
  offset: int
  mask: Mask | None      # per dim the valid [start, end); None = everything valid
  contiguous: bool       # offset 0, no mask and row-major strides: the view is the buffer itself

  @staticmethod
  def create(shape: Sequence[int], strides: Sequence[int] | None = None, offset: int = 0,
             mask: Sequence[tuple[int, int]] | None = None) -> View:
    """A view in canonical form, so equal mappings compare (and hash) equal as often as possible:
    size-1 dims get stride 0, a mask covering everything becomes None, a dim whose mask keeps a single index
    gets stride 0 (its term folds into the offset), an empty mask on any dim makes every dim empty with
    strides 0, and a view with no elements (a 0 in shape) is the plain contiguous one."""
    shape = _int_tuple(shape, "shape")
    if any(size < 0 for size in shape): raise ValueError(f"shape {shape} has a negative dimension")
    if 0 in shape: return View(shape, (0,) * len(shape), 0, None, True)
    strides = row_major_strides(shape) if strides is None else _int_tuple(strides, "strides")
    _check_rank(shape, strides, "strides")
    strides = tuple(0 if size == 1 else stride for size, stride in zip(shape, strides))
    offset = operator.index(offset)
    if mask is not None:
      mask = _int_pairs(mask, "mask")
      _check_rank(shape, mask, "mask")
      mask = tuple((max(0, start), min(size, end)) for (start, end), size in zip(mask, shape))
      if any(start >= end for start, end in mask):
        return View(shape, (0,) * len(shape), 0, ((0, 0),) * len(shape), False)
      # a dim that keeps one index adds the same amount everywhere it is valid: move that into the offset
      offset += sum(start * stride for (start, end), stride in zip(mask, strides) if end - start == 1)
      strides = tuple(0 if end - start == 1 else stride for (start, end), stride in zip(mask, strides))
      if all(start == 0 and end == size for (start, end), size in zip(mask, shape)): mask = None
    contiguous = offset == 0 and mask is None and strides == row_major_strides(shape)
    return View(shape, strides, offset, mask, contiguous)

  def size(self) -> int: return prod(self.shape)

  def full_mask(self) -> Mask:
    """The mask with None spelled out as full ranges."""
    return self.mask if self.mask is not None else tuple((0, size) for size in self.shape)

  def all_invalid(self) -> bool:
    """True when no element is valid (an empty mask; a view without elements counts too)."""
    return self.size() == 0 or (self.mask is not None and any(start >= end for start, end in self.mask))

  def valid_index_range(self) -> tuple[int, int] | None:
    """(smallest, largest) buffer index a valid element reads, or None if no element is valid."""
    if self.all_invalid(): return None
    low = high = self.offset
    for stride, (start, end) in zip(self.strides, self.full_mask()):
      low += min(stride * start, stride * (end - 1))
      high += max(stride * start, stride * (end - 1))
    return low, high

  # ---- movement ops ----
  def reshape(self, new_shape: Sequence[int]) -> View | None:
    """The same elements in row-major order over `new_shape`, or None when no single view can express it."""
    new_shape = _int_tuple(new_shape, "reshape shape")
    if any(size < 0 for size in new_shape): raise ValueError(f"reshape: shape {new_shape} has a negative dimension")
    if prod(new_shape) != self.size():
      raise ValueError(f"reshape: can't reshape shape {self.shape} ({self.size()} elements) "
                       f"to {new_shape} ({prod(new_shape)} elements)")
    if new_shape == self.shape: return self
    if self.contiguous or self.size() == 0: return View.create(new_shape)
    if self.all_invalid(): return _all_invalid_view(new_shape)
    # size-1 dims carry nothing (stride 0, full mask): drop them, reshape the rest group by group, put 1s back
    old_dims = [(size, stride, start, end) for size, stride, (start, end)
                in zip(self.shape, self.strides, self.full_mask()) if size != 1]
    new_sizes = [size for size in new_shape if size != 1]
    offset = self.offset
    new_dims: list[tuple[int, tuple[int, int]]] = []   # (stride, mask) per new dim of size > 1
    for old_group, new_group in _reshape_groups([dim[0] for dim in old_dims], new_sizes):
      merged = _merge_dims([old_dims[i] for i in old_group])
      if merged is None: return None
      stride, start, end, offset_delta = merged
      split = _split_dim(stride, start, end, [new_sizes[j] for j in new_group])
      if split is None: return None
      offset += offset_delta
      new_dims.extend(split)
    dims = iter(new_dims)
    strides, mask = [], []
    for size in new_shape:
      stride, valid_range = (0, (0, 1)) if size == 1 else next(dims)
      strides.append(stride)
      mask.append(valid_range)
    return View.create(new_shape, strides, offset, mask)

  def permute(self, order: Sequence[int]) -> View:
    """Reorder the dims: new dim i is old dim order[i]."""
    order = _int_tuple(order, "permute order")
    if sorted(order) != list(range(len(self.shape))):
      raise ValueError(f"permute: {order} is not a permutation of the {len(self.shape)} dims of shape {self.shape}")
    mask = None if self.mask is None else tuple(self.mask[i] for i in order)
    return View.create(tuple(self.shape[i] for i in order), tuple(self.strides[i] for i in order), self.offset, mask)

  def expand(self, new_shape: Sequence[int]) -> View:
    """Broadcast size-1 dims to `new_shape` (stride 0); every other dim must keep its size."""
    new_shape = _int_tuple(new_shape, "expand shape")
    _check_rank(self.shape, new_shape, "expand")
    for old, new in zip(self.shape, new_shape):
      if new != old and (old != 1 or new < 0):
        raise ValueError(f"expand: can't expand shape {self.shape} to {new_shape}: only size-1 dims can grow")
    if new_shape == self.shape: return self
    if self.all_invalid(): return _all_invalid_view(new_shape)  # type: ignore[return-value]  # rank >= 1 here
    mask = None if self.mask is None else tuple((0, new) if old != new else valid_range
                                                for old, new, valid_range in zip(self.shape, new_shape, self.mask))
    return View.create(new_shape, self.strides, self.offset, mask)

  def pad(self, padding: Sequence[tuple[int, int]]) -> View:
    """Add `before` invalid elements at the start and `after` at the end of each dim."""
    padding = _int_pairs(padding, "padding")
    _check_rank(self.shape, padding, "pad")
    if any(before < 0 or after < 0 for before, after in padding):
      raise ValueError(f"pad: padding {padding} of shape {self.shape} has a negative amount (use shrink)")
    if all(before == 0 and after == 0 for before, after in padding): return self
    new_shape = tuple(before + size + after for (before, after), size in zip(padding, self.shape))
    if self.all_invalid(): return _all_invalid_view(new_shape)  # type: ignore[return-value]
    offset = self.offset - sum(before * stride for (before, _), stride in zip(padding, self.strides))
    mask = tuple((start + before, end + before) for (start, end), (before, _) in zip(self.full_mask(), padding))
    return View.create(new_shape, self.strides, offset, mask)

  def shrink(self, bounds: Sequence[tuple[int, int]]) -> View:
    """Keep the elements [start, end) of each dim."""
    bounds = _int_pairs(bounds, "shrink bounds")
    _check_rank(self.shape, bounds, "shrink")
    if any(not 0 <= start <= end <= size for (start, end), size in zip(bounds, self.shape)):
      raise ValueError(f"shrink: bounds {bounds} are out of range for shape {self.shape} "
                       "(need 0 <= start <= end <= size)")
    if all(start == 0 and end == size for (start, end), size in zip(bounds, self.shape)): return self
    new_shape = tuple(end - start for start, end in bounds)
    offset = self.offset + sum(start * stride for (start, _), stride in zip(bounds, self.strides))
    mask = None if self.mask is None else tuple((valid_start - start, valid_end - start)
                                                for (valid_start, valid_end), (start, _) in zip(self.mask, bounds))
    return View.create(new_shape, self.strides, offset, mask)

  def flip(self, axes: Sequence[int]) -> View:
    """Reverse the given dims (negative axes count from the end)."""
    axes = _int_tuple(axes, "flip axes")
    ndim = len(self.shape)
    if any(not -ndim <= axis < ndim for axis in axes):
      raise ValueError(f"flip: axes {axes} out of range for shape {self.shape}")
    flipped = {axis % ndim for axis in axes}
    if len(flipped) != len(axes): raise ValueError(f"flip: axes {axes} repeat a dim")
    if not flipped or self.size() == 0: return self
    offset = self.offset + sum((self.shape[d] - 1) * self.strides[d] for d in flipped)
    strides = tuple(-stride if d in flipped else stride for d, stride in enumerate(self.strides))
    mask = None if self.mask is None else tuple((size - end, size - start) if d in flipped else (start, end)
                                                for d, ((start, end), size) in enumerate(zip(self.mask, self.shape)))
    return View.create(self.shape, strides, offset, mask)

  # ---- lowering to index math ----
  def to_indexed_uops(self, idxs: Sequence[UOp]) -> tuple[UOp, UOp]:
    """(buffer index, valid) for the element at `idxs` (one int32 UOp per dim). Terms with stride 0 and mask
    checks that the idx bounds already guarantee are left out."""
    _check_rank(self.shape, tuple(idxs), "to_indexed_uops idxs")
    if self.all_invalid(): return UOp.const(dtypes.int32, 0), UOp.const(dtypes.bool, False)
    index: UOp | None = None
    for idx, stride in zip(idxs, self.strides):
      if stride == 0: continue
      term = idx if stride == 1 else idx * stride
      index = term if index is None else index + term
    if index is None: index = UOp.const(dtypes.int32, self.offset)
    elif self.offset != 0: index = index + self.offset
    valid = UOp.const(dtypes.bool, True)
    for idx, (start, end), size in zip(idxs, self.full_mask(), self.shape):
      if start > 0 and idx.vmin < start: valid = _and(valid, idx >= start)
      if end < size and idx.vmax >= end: valid = _and(valid, idx < end)
    return index, valid


def _all_invalid_view(shape: tuple[int, ...]) -> View | None:
  """A view of `shape` with nothing valid; None for shape () where a mask has no dim to be empty on."""
  if len(shape) == 0: return None
  return View.create(shape, mask=((0, 0),) * len(shape))


def _and(a: UOp, b: UOp) -> UOp:
  if a.op is Ops.CONST and a.arg is True: return b
  if b.op is Ops.CONST and b.arg is True: return a
  return a & b


def _reshape_groups(old_sizes: list[int], new_sizes: list[int]) -> list[tuple[list[int], list[int]]]:
  """Split two lists of sizes (all >= 2, same product) into the finest runs with equal products."""
  groups: list[tuple[list[int], list[int]]] = []
  i = j = 0
  while i < len(old_sizes):
    old_group, new_group = [i], [j]
    old_product, new_product = old_sizes[i], new_sizes[j]
    i, j = i + 1, j + 1
    while old_product != new_product:
      if old_product < new_product:
        old_group.append(i); old_product *= old_sizes[i]; i += 1
      else:
        new_group.append(j); new_product *= new_sizes[j]; j += 1
    groups.append((old_group, new_group))
  return groups


def _merge_dims(dims: list[tuple[int, int, int, int]]) -> tuple[int, int, int, int] | None:
  """Fuse consecutive dims (size, stride, mask start, mask end), outer first, into one dim of their total size.

  Possible when the valid box is one interval [start, end) of the fused (row-major) position and the index is
  affine in that position on it. Returns (stride, start, end, offset_delta) so that on valid elements
  index = offset + offset_delta + stride * position, or None."""
  # the box is an interval when inner dims are full, then one partial dim, then dims that keep one index
  partial = len(dims) - 1
  while partial > 0 and dims[partial][2:] == (0, dims[partial][0]): partial -= 1
  if any(end - start != 1 for _, _, start, end in dims[:partial]): return None
  place = _flat_strides([size for size, _, _, _ in dims])
  start = sum(dim_start * value for (_, _, dim_start, _), value in zip(dims, place))
  end = start + (dims[partial][3] - dims[partial][2]) * place[partial]
  stride = 0 if end - start == 1 else dims[-1][1]
  for (_, dim_stride, dim_start, dim_end), value in zip(dims, place):
    if dim_end - dim_start > 1 and dim_stride != stride * value: return None
  offset_delta = sum(dim_stride * dim_start for _, dim_stride, dim_start, _ in dims) - stride * start
  return stride, start, end, offset_delta


def _split_dim(stride: int, start: int, end: int, sizes: list[int]) -> list[tuple[int, tuple[int, int]]] | None:
  """Split one dim (stride, valid [start, end)) into row-major dims of `sizes`: (stride, mask) per new dim, or
  None when the valid interval isn't a box in the new dims."""
  out: list[tuple[int, tuple[int, int]]] = []
  place = _flat_strides(sizes)
  for d, size in enumerate(sizes):
    block = place[d]
    if start % block == 0 and end % block == 0:
      out.append((stride * block, (start // block, end // block)))
      out.extend((stride * place[inner], (0, sizes[inner])) for inner in range(d + 1, len(sizes)))
      return out
    if start // block != (end - 1) // block: return None
    out.append((stride * block, (start // block, start // block + 1)))
    start, end = start % block, (end - 1) % block + 1
  return out


def merge_views(first: View, second: View) -> View | None:
  """One view equal to applying `second` on top of `first` (second indexes a contiguous array of first.shape),
  or None when a single view can't express the pair."""
  if second.all_invalid() or first.contiguous: return second
  if first.size() == 0: return None  # second reads valid elements of an empty array: not a real composition
  if first.all_invalid(): return _all_invalid_view(second.shape)
  if second.contiguous and second.size() == first.size():
    reshaped = first.reshape(second.shape)
    if reshaped is not None: return reshaped
  # Walk second's valid box in first's coordinates: from the first valid element, one step along dim j moves the
  # coordinates by steps[j]. That is exact when no coordinate leaves its range anywhere on the box (no carries).
  box = second.full_mask()
  base_flat = second.offset + sum(stride * start for stride, (start, _) in zip(second.strides, box))
  if not 0 <= base_flat < first.size(): return None
  base = _unravel(base_flat, first.shape)
  steps: list[list[int]] = []
  for stride, (start, end) in zip(second.strides, box):
    if end - start <= 1: steps.append([0] * len(first.shape)); continue
    if not 0 <= base_flat + stride < first.size(): return None
    steps.append([moved - at for moved, at in zip(_unravel(base_flat + stride, first.shape), base)])
  low, high = list(base), list(base)
  for step, (start, end) in zip(steps, box):
    for k, move in enumerate(step):
      low[k] += min(0, move * (end - 1 - start))
      high[k] += max(0, move * (end - 1 - start))
  if any(lo < 0 or hi >= size for lo, hi, size in zip(low, high, first.shape)): return None
  strides = [sum(first_stride * move for first_stride, move in zip(first.strides, step)) for step in steps]
  offset = (first.offset + sum(first_stride * at for first_stride, at in zip(first.strides, base))
            - sum(stride * start for stride, (start, _) in zip(strides, box)))
  # first's mask on coordinate k becomes a mask on the one dim of second that moves it
  mask = list(box)
  for k, (valid_start, valid_end) in enumerate(first.full_mask()):
    if valid_start <= low[k] and high[k] < valid_end: continue
    movers = [j for j, step in enumerate(steps) if step[k] != 0]
    if not movers: return _all_invalid_view(second.shape)
    if len(movers) > 1: return None
    j = movers[0]
    move, box_start = steps[j][k], box[j][0]
    if move > 0:
      lo, hi = box_start + _ceil_div(valid_start - base[k], move), box_start + _ceil_div(valid_end - base[k], move)
    else:
      lo = box_start + (base[k] - valid_end) // -move + 1
      hi = box_start + (base[k] - valid_start) // -move + 1
    mask[j] = (max(mask[j][0], lo), min(mask[j][1], hi))
  return View.create(second.shape, strides, offset, mask)


# ---------------------------------------------------------------------------------------------------------------
# ShapeTracker

@cached_hash
@dataclass(frozen=True)
class ShapeTracker:
  """A stack of views: views[0] addresses the buffer, views[-1] gives the visible shape. `extents`: per visible dim
  the size expression of a variable-length dim (its integer size in `shape` is the largest value), else None; None
  when no dim is symbolic (see minigrad.uop.variable). `offset`: a size expression added to every buffer index (a
  window at a symbolic position, `x[:, pos:pos+1]`: the views describe the window at position 0), else None."""
  views: tuple[View, ...]
  extents: tuple[UOp | None, ...] | None = None
  offset: UOp | None = None

  def __repr__(self) -> str:   # the symbolic parts only when there are some: most printed graphs have none
    extra = ("" if self.extents is None else f", extents={self.extents!r}") + ("" if self.offset is None else f", offset={self.offset!r}")
    return f"ShapeTracker(views={self.views!r}{extra})"

  @staticmethod
  def from_shape(shape: Sequence[int | UOp]) -> ShapeTracker:
    """The row-major tracker of `shape`; entries may be size expressions (laid out at their largest value)."""
    shape = tuple(shape)
    if not has_symbolic(shape): return _contiguous(shape)
    shape = to_ir(shape)
    return _contiguous(tuple(int(s.vmax) if isinstance(s, UOp) else s for s in shape)).with_extents(
      tuple(s if isinstance(s, UOp) else None for s in shape))

  # ---- symbolic sizes ----
  def with_extents(self, extents: tuple[UOp | None, ...] | None) -> ShapeTracker:
    """This tracker's views with other extents (none at all when every dim is fixed)."""
    if extents is not None and all(e is None for e in extents): extents = None
    return self if extents == self.extents else ShapeTracker(self.views, extents, self.offset)
  def with_views(self, views: tuple[View, ...]) -> ShapeTracker:
    """Other views with this tracker's symbolic parts (for callers that rebuild the views of a kernel's tracker)."""
    return ShapeTracker(views, self.extents, self.offset)
  @property
  def symbolic(self) -> bool:
    """Does the tracker hold a size expression (a variable-length dim or a symbolic offset)?"""
    return self.extents is not None or self.offset is not None
  @property
  def symbolic_shape(self) -> tuple[int | UOp, ...]:
    """The shape with each variable-length dim as its size expression."""
    if self.extents is None: return self.shape
    return tuple(s if e is None else e for s, e in zip(self.shape, self.extents))
  def unbind(self) -> ShapeTracker:
    """The tracker with its size expressions over DEFINE_VARs only (what kernel ASTs hold: the same for every value)."""
    if not self.symbolic: return self
    extents = None if self.extents is None else tuple(None if e is None else unbind(e) for e in self.extents)
    return ShapeTracker(self.views, extents, None if self.offset is None else unbind(self.offset))
  def rebind(self, values: dict[str, int]) -> ShapeTracker:
    """The tracker with the Variables named in `values` bound to those values instead."""
    if not self.symbolic: return self
    extents = None if self.extents is None else tuple(None if e is None else rebind(e, values) for e in self.extents)
    return ShapeTracker(self.views, extents, None if self.offset is None else rebind(self.offset, values))
  def bound_values(self, into: dict[str, int]) -> None:
    """Add the values the size expressions are bound to (name -> value) to `into`."""
    for e in (self.extents or ()) + (self.offset,):
      if e is not None: bound_values(e, into)

  @property
  def shape(self) -> tuple[int, ...]: return self.views[-1].shape
  @property
  def size(self) -> int: return self.views[-1].size()
  @property
  def contiguous(self) -> bool:   # a symbolic view shows a prefix or a window of its buffer, never all of it
    return len(self.views) == 1 and self.views[0].contiguous and self.extents is None and self.offset is None

  def _with_last(self, view: View) -> ShapeTracker:
    tracker = ShapeTracker(self.views[:-1] + (view,))
    return tracker.simplify() if len(tracker.views) > 1 else tracker

  # ---- movement ops (same arguments as View's), remembered: a training step moves the same trackers every step ----
  def reshape(self, new_shape: Sequence[int]) -> ShapeTracker: return _moved(self, "reshape", tuple(new_shape))
  def permute(self, order: Sequence[int]) -> ShapeTracker: return _moved(self, "permute", tuple(order))
  def expand(self, new_shape: Sequence[int]) -> ShapeTracker: return _moved(self, "expand", tuple(new_shape))
  def pad(self, padding: Sequence[tuple[int, int]]) -> ShapeTracker: return _moved(self, "pad", tuple(map(tuple, padding)))
  def shrink(self, bounds: Sequence[tuple[int, int]]) -> ShapeTracker: return _moved(self, "shrink", tuple(map(tuple, bounds)))
  def flip(self, axes: Sequence[int]) -> ShapeTracker: return _moved(self, "flip", tuple(axes))

  def _move(self, how: str, arg: tuple) -> ShapeTracker:
    if self.offset is not None:   # a constant added to every buffer index commutes with every movement
      moved = ShapeTracker(self.views, self.extents)._move(how, arg)
      return ShapeTracker(moved.views, moved.extents, self.offset if moved.offset is None else (self.offset + moved.offset).simplify())
    if how == "shrink" and has_symbolic(arg) and any(isinstance(to_ir(start), UOp) for start, _ in arg):
      return self._shrink_at(arg)
    if self.extents is not None or has_symbolic(arg):   # the integer part moves as usual; the extents follow
      int_arg, extents = move_extents(self.shape, self.extents, how, arg)
      return ShapeTracker(self.views)._move(how, int_arg).with_extents(extents)
    if how == "reshape" and (reshaped := self.views[-1].reshape(arg)) is None:
      return ShapeTracker(self.views + (View.create(arg),)).simplify()
    return self._with_last(reshaped if how == "reshape" else getattr(self.views[-1], how)(arg))

  def _shrink_at(self, bounds: tuple) -> ShapeTracker:
    """A shrink with symbolic starts: the window at position 0, moved by start * stride in buffer elements."""
    int_starts, starts = split_starts(self.shape, self.extents, bounds)
    if not starts: return self._move("shrink", int_starts)
    strides = ShapeTracker(self.views).real_strides()
    offset = None
    for d, start in starts.items():
      if strides[d] is None:
        raise ValueError(f"shrink: dim {d} of {self} isn't addressed by one stride (a padded, masked or reshaped layout); "
                         f"a window at a symbolic start needs that (make the tensor contiguous first)")
      if strides[d] == 0: continue
      term = start * strides[d]
      offset = term if offset is None else offset + term
    moved = self._move("shrink", int_starts)
    return ShapeTracker(moved.views, moved.extents, None if offset is None else offset.simplify())

  def __add__(self, other: ShapeTracker) -> ShapeTracker:
    """Composition: `other` indexes a contiguous array of self.shape; the result maps other.shape to self's base."""
    if not isinstance(other, ShapeTracker): return NotImplemented
    return _compose(self, other)

  def _compose(self, other: ShapeTracker) -> ShapeTracker:
    reach = other.views[0].valid_index_range()
    if reach is not None and not (0 <= reach[0] and reach[1] < self.size):
      raise ValueError(f"can't compose: {other} reads elements {reach[0]}..{reach[1]}, outside the {self.size} "
                       f"elements of shape {self.shape}")
    # the result shows other's dims: other's extents (self's describe the array other reads, laid out at full size).
    # Offsets are unbound: the composition is what a kernel reads (the scheduler's); its values travel beside it.
    offset = None if self.offset is None else unbind(self.offset)
    if other.offset is not None:   # a flat offset into self's shape is one into the buffer only when self is the buffer
      if len(self.views) != 1 or not self.views[0].contiguous:
        raise ValueError(f"can't compose: {other} has a symbolic offset and {self} is not a plain buffer")
      offset = unbind(other.offset) if offset is None else (offset + unbind(other.offset)).simplify()
    return ShapeTracker(self.views + other.views).simplify().with_extents(other.extents).with_offset(offset)

  def with_offset(self, offset: UOp | None) -> ShapeTracker:
    return self if offset is self.offset else ShapeTracker(self.views, self.extents, offset)

  def simplify(self) -> ShapeTracker:
    """Merge adjacent views while some pair is expressible as one view."""
    views = list(self.views)
    merged_any = True
    while merged_any and len(views) > 1:
      merged_any = False
      for i in range(len(views) - 1):
        merged = merge_views(views[i], views[i + 1])
        if merged is not None:
          views[i:i + 2] = [merged]
          merged_any = True
          break
    return self if len(views) == len(self.views) else ShapeTracker(tuple(views), self.extents, self.offset)

  # ---- lowering to index math ----
  def to_indexed_uops(self, idxs: Sequence[UOp] | None = None) -> tuple[UOp, UOp]:
    """(buffer index, valid) for the element at `idxs` (one int32 UOp per dim; default: variables idx0, idx1...).
    Walks views from last to first: the later view's index is a flat position in the earlier view's shape."""
    if idxs is None: idxs = [UOp.variable(f"idx{d}", 0, max(size - 1, 0)) for d, size in enumerate(self.shape)]
    _check_rank(self.shape, tuple(idxs), "to_indexed_uops idxs")
    index, valid = self.views[-1].to_indexed_uops(list(idxs))
    for view in reversed(self.views[:-1]):
      flat = graph_rewrite(index, symbolic)
      index, view_valid = view.to_indexed_uops(_unravel_uops(flat, view.shape))
      valid = _and(valid, view_valid)
    if self.offset is not None: index = index + unbind(self.offset).cast(index.dtype) if self.offset.dtype != index.dtype else index + unbind(self.offset)
    return graph_rewrite(index, symbolic), graph_rewrite(valid, symbolic)

  # ---- questions the optimizer asks ----
  def real_strides(self) -> tuple[int | None, ...]:
    """Per dim the buffer stride if the index is affine in that dim and validity doesn't depend on it, else None."""
    if len(self.views) == 1:
      view = self.views[0]
      return tuple(stride if (start, end) == (0, size) else None
                   for stride, (start, end), size in zip(view.strides, view.full_mask(), view.shape))
    variables = [UOp.variable(f"idx{d}", 0, max(size - 1, 0)) for d, size in enumerate(self.shape)]
    dim_of = {variable: d for d, variable in enumerate(variables)}
    index, valid = self.to_indexed_uops(variables)
    strides: list[int | None] = [0] * len(self.shape)
    not_affine: set[int] = set()
    for term in split_terms(index):
      scaled = term.op is Ops.MUL and term.src[1].op is Ops.CONST
      base, coefficient = (term.src[0], term.src[1].arg) if scaled else (term, 1)
      if base in dim_of and strides[dim_of[base]] == 0: strides[dim_of[base]] = coefficient
      else: not_affine.update(dim_of[node] for node in term.toposort if node in dim_of)
    not_affine.update(dim_of[node] for node in valid.toposort if node in dim_of)
    for d in not_affine: strides[d] = None
    return tuple(strides)

  def unit_stride_axes(self) -> list[int]:
    return [d for d, stride in enumerate(self.real_strides()) if stride == 1]

  def real_size(self) -> int:
    """How many buffer elements are needed: 1 + the largest index views[0] can read (0 if nothing is valid)."""
    if any(view.all_invalid() for view in self.views): return 0
    reach = self.views[0].valid_index_range()
    return 0 if reach is None else reach[1] + 1 + (0 if self.offset is None else int(self.offset.vmax))


def _unravel_uops(flat: UOp, shape: Sequence[int]) -> list[UOp]:
  """Coordinates of flat position `flat` in a C-contiguous array of `shape` (no % on the outermost dim, no //
  on the innermost: a valid position is in range, and an invalid one is masked out anyway)."""
  place = _flat_strides(shape)
  outermost = next((d for d, size in enumerate(shape) if size != 1), None)
  coords = []
  for d, size in enumerate(shape):
    if size == 1:
      coords.append(UOp.const(dtypes.int32, 0))
      continue
    coord = flat // place[d] if place[d] != 1 else flat
    coords.append(coord if d == outermost else coord % size)
  return coords


@functools.lru_cache(maxsize=1 << 16)
def _compose(first: ShapeTracker, second: ShapeTracker) -> ShapeTracker:
  """Trackers are immutable values, and training steps compose the same pairs every step: remember them."""
  return first._compose(second)


@functools.lru_cache(maxsize=1 << 16)
def _moved(tracker: ShapeTracker, how: str, arg: tuple) -> ShapeTracker:
  """tracker.<how>(arg), remembered (a bad argument raises each time: errors are not cached)."""
  return tracker._move(how, arg)


@functools.lru_cache(maxsize=4096)
def _contiguous(shape: tuple[int, ...]) -> ShapeTracker:
  """The plain row-major ShapeTracker of `shape` (made often: every buffer's own view)."""
  return ShapeTracker((View.create(shape),))


def view_uop(u: UOp, apply: Callable[[ShapeTracker], ShapeTracker]) -> UOp:
  """A tensor-graph node seen through a movement (`apply` maps the tracker it is read with to the new one): VIEWs
  stack into one VIEW over the base, and a contiguous view of the whole base is the base itself. A node of symbolic
  shape (Variables) starts from a tracker with its size expressions."""
  base, st = (u.src[0], u.arg) if u.op is Ops.VIEW and u.src else (u, ShapeTracker.from_shape(symbolic_shape(u)))
  new_st = apply(st)
  return base if new_st.contiguous and new_st.shape == base.shape else UOp(Ops.VIEW, u.dtype, (base,), new_st)
