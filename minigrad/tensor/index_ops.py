"""Joining, splitting and indexing Tensors: cat/stack/split/chunk, repeat, roll, unflatten, gather/scatter
(scatter(reduce=), scatter_reduce), masked_fill, masked_select, and the non-constant pad modes (reflect,
replicate, circular).

Input: Tensors (this class is mixed into `Tensor`, so `self` is a Tensor). Output: lazy Tensors.
Joins and pads are movement-op compositions: `cat` pads each piece to the full size and adds them, so a cat and
whatever consumes it fuse into one kernel, and the gradient of each piece is a shrink. gather/scatter are one-hot
reduces against an in-kernel ARANGE; their index tensors are realized once to check the range on the host
(RuntimeError naming the index and the size, as PyTorch).
"""
from __future__ import annotations
from typing import Any, Sequence, TYPE_CHECKING
import math
import numpy as np
import minigrad.tensor.function as F
from minigrad.dtype import dtypes, promote_types
from minigrad.helpers import prod
from minigrad.tensor.math_ops import normalize_axis
if TYPE_CHECKING: from minigrad.tensor.tensor import Tensor


def _tensor_list(first: Any, rest: tuple) -> tuple[list[Tensor], tuple]:
  """Accept x.cat(y, z), Tensor.cat(x, y) and Tensor.cat([x, y], dim): the tensors and any leftover args."""
  if isinstance(first, (list, tuple)): return list(first), rest
  items = [first] + [r for r in rest if not isinstance(r, (int, np.integer))]
  return items, tuple(r for r in rest if isinstance(r, (int, np.integer)))


def _bounds(ndim: int, dim: int, start: int, end: int) -> list[tuple[int, int] | None]:
  bounds: list[tuple[int, int] | None] = [None] * ndim
  bounds[dim] = (start, end)
  return bounds


def _fresh(t: Tensor) -> Tensor:
  """A new Tensor object with t's value (and gradient path), so results never are the input object itself."""
  return F.Reshape.apply(t, shape=t.shape)


def _host_indices(index: Tensor, what: str) -> np.ndarray:
  if not dtypes.is_int(index.dtype): raise RuntimeError(f"{what}(): Expected dtype int32/int64 for index, got {index.dtype}")
  return index.numpy().astype(np.int64)


def _check_range(values: np.ndarray, size: int, dim: int) -> None:
  if values.size and (values.min() < 0 or values.max() >= size):
    bad = int(values.min()) if values.min() < 0 else int(values.max())
    raise RuntimeError(f"index {bad} is out of bounds for dimension {dim} with size {size}")


class IndexMixin:
  """Join/split/index ops of Tensor (see minigrad.tensor)."""

  # ---- joining ----
  def cat(self, *others: Any, dim: int = 0) -> Tensor:
    """Concatenate along dim: `x.cat(y, dim=1)`, `Tensor.cat([x, y], dim=1)`. dtypes promote as in torch.cat;
    1-d empty tensors are skipped (PyTorch's legacy rule)."""
    tensors, extra = _tensor_list(self, others)
    if extra: dim = int(extra[0])
    if not tensors: raise ValueError("cat(): expected a non-empty list of Tensors")
    if not all(isinstance(t, IndexMixin) for t in tensors): raise TypeError(f"cat(): expected Tensors, got {[type(t).__name__ for t in tensors]}")
    for i, t in enumerate(tensors):
      if t.ndim == 0: raise RuntimeError(f"zero-dimensional tensor (at position {i}) cannot be concatenated")
    dtype = tensors[0].dtype
    for t in tensors[1:]: dtype = promote_types(dtype, t.dtype)
    used = [t for t in tensors if t.shape != (0,)] or tensors[:1]
    ref = used[0]
    dim = normalize_axis(dim, ref.ndim)
    for i, t in enumerate(tensors):
      if t.shape == (0,) and t is not ref: continue   # legacy empty: skipped whatever its rank
      if t.ndim != ref.ndim: raise RuntimeError(f"Tensors must have same number of dimensions: got {ref.ndim} and {t.ndim} (shapes {ref.shape} and {t.shape})")
      for d, (a, b) in enumerate(zip(ref.shape, t.shape)):
        if d != dim and a != b:
          raise RuntimeError(f"Sizes of tensors must match except in dimension {dim}. Expected size {a} but got size {b} "
                             f"for tensor number {i} in the list (shapes {ref.shape} and {t.shape})")
      if t.device != ref.device: raise RuntimeError(f"cat(): tensors on different devices: {ref.device} and {t.device}")
    total = sum(t.shape[dim] for t in used)
    out, offset = None, 0
    for t in used:
      size = t.shape[dim]
      if size == 0: continue
      padding = [(0, 0)] * t.ndim
      padding[dim] = (offset, total - offset - size)
      piece = t.cast(dtype).pad(padding)
      out = piece if out is None else (out | piece if dtype == dtypes.bool else out + piece)
      offset += size
    if out is None:   # every part is empty: still differentiable, with empty gradients, as in torch
      empty = ref.full(ref.shape[:dim] + (0,) + ref.shape[dim + 1:], 0, dtype=dtype)
      return F.Composite.apply(*tensors, fn=lambda *xs: empty, gradient=lambda grad, y, *xs: tuple(x.zeros_like() for x in xs))
    # an empty part (along `dim`, or a skipped 1-d empty) adds nothing but gets a (zero) gradient, as in torch; the
    # values pass unchanged (adding its empty sum, 0, would turn -0.0 into 0.0)
    if empty_parts := [t for t in tensors if t.requires_grad and t.numel() == 0]:
      out = F.Composite.apply(out, *empty_parts, fn=lambda o, *xs: o, gradient=lambda grad, y, o, *xs: (grad, *(x.zeros_like() for x in xs)))
    return _fresh(out) if any(out is t for t in tensors) else out

  def stack(self, *others: Any, dim: int = 0) -> Tensor:
    """Join equal-shaped tensors along a new dim: `x.stack(y)`, `Tensor.stack([x, y], dim=1)`."""
    tensors, extra = _tensor_list(self, others)
    if extra: dim = int(extra[0])
    if not tensors: raise RuntimeError("stack expects a non-empty TensorList")
    for i, t in enumerate(tensors[1:], start=1):
      if t.shape != tensors[0].shape:
        raise RuntimeError(f"stack expects each tensor to be equal size, but got {list(tensors[0].shape)} at entry 0 and {list(t.shape)} at entry {i}")
    dim = normalize_axis(dim, tensors[0].ndim + 1)
    return type(tensors[0]).cat([t.unsqueeze(dim) for t in tensors], dim=dim)

  # ---- splitting ----
  def split(self, split_size_or_sections: int | Sequence[int], dim: int = 0) -> tuple[Tensor, ...]:
    """Views of consecutive pieces along dim: pieces of `int` size (the last may be smaller) or of the given sizes."""
    if self.ndim == 0: raise RuntimeError("split expects at least a 1-dimensional tensor")
    dim = normalize_axis(dim, self.ndim)
    size = self.shape[dim]
    if isinstance(split_size_or_sections, (int, np.integer)):
      step = int(split_size_or_sections)
      if step < 0: raise RuntimeError(f"split expects split_size be non-negative, but got split_size={step}")
      if step == 0:
        if size: raise RuntimeError(f"split_size can only be 0 if dimension size is 0, but got dimension size of {size}")
        return (_fresh(self),)
      sizes = [min(step, size - start) for start in range(0, size, step)] or [0]
    else:
      sizes = [int(s) for s in split_size_or_sections]
      if any(s < 0 for s in sizes): raise RuntimeError(f"split_with_sizes expects split_sizes have only non-negative entries, but got split_sizes={sizes}")
      if sum(sizes) != size:
        raise RuntimeError(f"split_with_sizes expects split_sizes to sum exactly to {size} (input tensor's size at dimension {dim}), but got split_sizes={sizes}")
    pieces, start = [], 0
    for s in sizes:
      piece = self.shrink(_bounds(self.ndim, dim, start, start + s))
      piece = _fresh(piece) if piece is self else piece
      piece._view_of_another = True   # a view in PyTorch: setitem on it refuses (see minigrad.tensor.indexing)
      pieces.append(piece)
      start += s
    return tuple(pieces)

  def chunk(self, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
    """Split into `chunks` pieces of ceil(size / chunks) (fewer pieces when that covers the dim sooner)."""
    if chunks <= 0: raise RuntimeError(f"chunk expects `chunks` to be greater than 0, got: {chunks}")
    if self.ndim == 0: raise RuntimeError("chunk expects at least a 1-dimensional tensor")
    size = self.shape[normalize_axis(dim, self.ndim)]
    if size == 0: return self.split([0] * chunks, dim)
    return self.split(math.ceil(size / chunks), dim)

  def unflatten(self, dim: int, sizes: Sequence[int]) -> Tensor:
    """Split dim into `sizes` (one of them may be -1)."""
    dim = normalize_axis(dim, self.ndim)
    sizes = [int(s) for s in sizes]
    if not sizes: raise RuntimeError(f"unflatten: sizes must be non-empty (dim {dim} of shape {self.shape})")
    if sizes.count(-1) > 1: raise RuntimeError(f"unflatten: only one dimension can be inferred, got sizes {sizes}")
    known = prod(s for s in sizes if s != -1)
    if -1 in sizes:
      if known == 0 or self.shape[dim] % known:
        raise RuntimeError(f"unflatten: Provided sizes {sizes} don't multiply up to the size of dim {dim} ({self.shape[dim]}) in the input tensor")
      sizes[sizes.index(-1)] = self.shape[dim] // known
    if prod(sizes) != self.shape[dim] or any(s < 0 for s in sizes):
      raise RuntimeError(f"unflatten: Provided sizes {sizes} don't multiply up to the size of dim {dim} ({self.shape[dim]}) in the input tensor")
    return self.reshape(self.shape[:dim] + tuple(sizes) + self.shape[dim + 1:])

  # ---- repeating ----
  def repeat(self, *repeats: Any) -> Tensor:
    """Tile: `x.repeat(2, 3)` repeats the whole tensor 2x along dim -2 and 3x along dim -1 (broadcast + reshape)."""
    reps = tuple(int(r) for r in (repeats[0] if len(repeats) == 1 and isinstance(repeats[0], (list, tuple)) else repeats))
    if len(reps) < self.ndim:
      raise RuntimeError(f"Number of dimensions of repeat dims ({len(reps)}) can not be smaller than number of dimensions of tensor ({self.ndim}, shape {self.shape})")
    if any(r < 0 for r in reps): raise RuntimeError(f"repeat: repeats must be non-negative, got {list(reps)}")
    base = (1,) * (len(reps) - self.ndim) + self.shape
    x = self.reshape(tuple(v for s in base for v in (1, s)))
    x = x.expand(tuple(v for r, s in zip(reps, base) for v in (r, s)))
    out = x.reshape(tuple(r * s for r, s in zip(reps, base)))
    return _fresh(out) if out is self else out

  def repeat_interleave(self, repeats: int | Tensor, dim: int | None = None) -> Tensor:
    """Repeat each element `repeats` times along dim (flattened first when dim is None). A tensor of repeats
    (one per element) gives a data-dependent size: it is realized."""
    x = self.flatten() if dim is None else self
    dim = 0 if dim is None else normalize_axis(dim, self.ndim)
    if isinstance(repeats, IndexMixin):
      counts = repeats.numpy().reshape(-1).astype(np.int64)
      if counts.size == 1 and repeats.ndim <= 1: return x.repeat_interleave(int(counts[0]), dim)
      if repeats.ndim > 1: raise RuntimeError(f"repeat_interleave: repeats must be 0-d or 1-d, got shape {repeats.shape}")
      if counts.size != x.shape[dim]:
        raise RuntimeError(f"repeats must have the same size as input along dim, but got repeats.size(0) = {counts.size} and input.size({dim}) = {x.shape[dim]}")
      if (counts < 0).any(): raise RuntimeError("Repeats must be non-negative")
      from minigrad.tensor.indexing import take
      return take(x, dim, np.repeat(np.arange(counts.size), counts))
    count = int(repeats)
    if count < 0: raise RuntimeError("Repeats must be non-negative")
    if x.ndim == 0: x = x.reshape(1)
    shape = x.shape
    out = x.unsqueeze(dim + 1).expand(shape[:dim + 1] + (count,) + shape[dim + 1:])
    return out.reshape(shape[:dim] + (shape[dim] * count,) + shape[dim + 1:])

  def roll(self, shifts: int | Sequence[int], dims: int | Sequence[int] | None = None) -> Tensor:
    """Shift elements along dims, wrapping around (two shrinks joined by cat)."""
    shift_list = [int(shifts)] if isinstance(shifts, (int, np.integer)) else [int(s) for s in shifts]
    if dims is None:
      if len(shift_list) != 1: raise RuntimeError(f"shifts and dimensions must align. shifts: {len(shift_list)}, dims:0")
      return self.flatten().roll(shift_list[0], 0).reshape(self.shape)
    dim_list = [int(dims)] if isinstance(dims, (int, np.integer)) else [int(d) for d in dims]
    if not shift_list: raise RuntimeError("`shifts` required")
    if len(shift_list) != len(dim_list): raise RuntimeError(f"shifts and dimensions must align. shifts: {len(shift_list)}, dims:{len(dim_list)}")
    if self.ndim == 0: raise IndexError(f"Dimension specified as {dim_list[0]} but tensor has no dimensions")
    out = self
    for shift, d in zip(shift_list, dim_list):
      d = normalize_axis(d, self.ndim)
      size = out.shape[d]
      if size == 0 or shift % size == 0: continue
      cut = size - shift % size
      out = out.shrink(_bounds(out.ndim, d, cut, size)).cat(out.shrink(_bounds(out.ndim, d, 0, cut)), dim=d)
    return _fresh(out) if out is self else out

  # ---- gather / scatter ----
  def _check_index_shape(self, what: str, dim: int, index: Tensor, src: Tensor | None = None) -> int:
    if not isinstance(index, IndexMixin): raise TypeError(f"{what}(): index must be a Tensor, got {type(index).__name__}")
    ndim = max(self.ndim, 1)
    if max(index.ndim, 1) != ndim: raise RuntimeError(f"Index tensor must have the same number of dimensions as input tensor ({what}: index {index.shape}, input {self.shape})")
    dim = normalize_axis(dim, self.ndim)
    ishape, sshape = index.shape or (1,), self.shape or (1,)
    for d in range(ndim):
      if d != dim and ishape[d] > sshape[d]:
        raise RuntimeError(f"Size does not match at dimension {d} expected index {list(ishape)} to be no larger than self {list(sshape)} apart from dimension {dim}")
      if src is not None and ishape[d] > (src.shape or (1,))[d]:
        raise RuntimeError(f"Expected index {list(ishape)} to be no larger than self {list(sshape)} apart from dimension {dim} and to be no larger size than src {list(src.shape)}")
    return dim

  def gather(self, dim: int, index: Tensor) -> Tensor:
    """out[i][j] = self[index[i][j]][j] (dim 0), as torch.gather: one-hot compare with an ARANGE, then a sum."""
    from minigrad.tensor.tensor import Tensor
    dim = self._check_index_shape("gather", dim, index)
    values = _host_indices(index, "gather")
    x = self.reshape(1) if self.ndim == 0 else self
    values = values.reshape(-1) if self.ndim == 0 else values
    _check_range(values, x.shape[dim], dim)
    if values.size == 0:
      from minigrad.tensor.indexing import nothing_of
      return nothing_of(self, index.shape)
    size = x.shape[dim]
    x = x.shrink(tuple(None if d == dim else (0, s) for d, s in enumerate(values.shape)))
    x = x.unsqueeze(-1).transpose(dim, -1)                       # index's shape with dim -> 1, then (size,)
    idx = Tensor(values.astype(np.int32), device=self.device)   # the checked host values: a lazy index isn't recomputed
    hot = idx.unsqueeze(-1).eq(Tensor.arange(size, device=self.device))
    picked = hot & x if x.dtype == dtypes.bool else hot.where(x, 0)
    return picked.sum(-1).cast(self.dtype).reshape(index.shape)

  def _scatter_parts(self, dim: int, index: Tensor, src: Any, what: str, last_wins: bool) -> tuple[Tensor, Tensor, int, np.ndarray, np.ndarray]:
    """The pieces every scatter needs: the one-hot mask (index.shape + (size,)), src cut to index's shape and
    shaped to broadcast with it, the host-side hit mask and counts over self (shape self.shape, bool / int)."""
    from minigrad.tensor.tensor import Tensor
    src_t = src if isinstance(src, IndexMixin) else None
    if self.ndim == 0: raise RuntimeError(f"{what}(): 0-d tensors are not supported (use a 1-element tensor)")
    dim = self._check_index_shape(what, dim, index, src_t)
    values = _host_indices(index, what)
    size = self.shape[dim]
    _check_range(values, size, dim)
    # flat key of each target element (index's coords with dim replaced by the index value), C order over index
    coords = list(np.indices(index.shape))
    coords[dim] = values
    keys = np.ravel_multi_index(tuple(coords), self.shape).reshape(-1) if values.size else np.zeros(0, np.int64)
    counts = np.bincount(keys, minlength=prod(self.shape)).reshape(self.shape)
    if last_wins and values.size:   # repeated targets: the last source wins (PyTorch's CPU order)
      _, last_from_end = np.unique(keys[::-1], return_index=True)
      keep = np.zeros(keys.size, np.bool_)
      keep[keys.size - 1 - last_from_end] = True
      values = np.where(keep.reshape(values.shape), values, -1)
    idx = Tensor(values.astype(np.int32), device=self.device)
    hot = idx.unsqueeze(-1).eq(Tensor.arange(size, device=self.device))
    if src_t is None: src_t = Tensor.full(index.shape, src, self.dtype, self.device)
    src_t = src_t.cast(self.dtype).shrink(tuple((0, s) for s in index.shape)).unsqueeze(-1)
    return hot, src_t, dim, counts > 0, counts

  def _place_reduced(self, reduced: Tensor, dim: int, index_shape: tuple[int, ...]) -> Tensor:
    """(index_shape with dim -> 1) + (size,) -> self's shape (zeros outside index's extent)."""
    out = reduced.transpose(dim, -1).squeeze(-1)
    return out.pad(tuple((0, 0) if d == dim else (0, s - i) for d, (s, i) in enumerate(zip(self.shape, index_shape))))

  def scatter(self, dim: int, index: Tensor, src: Tensor | float | int, reduce: str | None = None) -> Tensor:
    """A copy of self with self[index[i][j]][j] = src[i][j] (dim 0), as torch.scatter (src may be a scalar).
    Repeated targets: the last source wins. reduce="add" / "multiply" combines instead (scatter_reduce's "sum" /
    "prod" with self included)."""
    from minigrad.tensor.tensor import Tensor
    if reduce is not None:
      if reduce not in ("add", "multiply"): raise RuntimeError(f"reduce argument must be either add or multiply, got {reduce!r}")
      if not isinstance(src, IndexMixin):
        if not isinstance(index, IndexMixin): raise TypeError(f"scatter(): index must be a Tensor, got {type(index).__name__}")
        src = Tensor.full(index.shape, src, self.dtype, self.device)
      return self.scatter_reduce(dim, index, src, "sum" if reduce == "add" else "prod", include_self=True)
    hot, src_t, dim, hit, _ = self._scatter_parts(dim, index, src, "scatter", last_wins=True)
    if index.numel() == 0: return _fresh(self)
    picked = hot & src_t if self.dtype == dtypes.bool else hot.where(src_t, 0)
    placed = self._place_reduced(picked.sum(dim, keepdim=True).cast(self.dtype), dim, index.shape)
    return Tensor(hit, device=self.device).where(placed, self)

  def scatter_reduce(self, dim: int, index: Tensor, src: Tensor, reduce: str, include_self: bool = True) -> Tensor:
    """Combine src into self at index with reduce 'sum', 'prod', 'mean', 'amax' or 'amin' (as torch.scatter_reduce)."""
    from minigrad.tensor.tensor import Tensor
    if reduce not in ("sum", "prod", "mean", "amax", "amin"):
      raise RuntimeError(f"reduce argument must be either sum, prod, mean, amax or amin, got {reduce!r}")
    if not isinstance(src, IndexMixin): raise TypeError(f"scatter_reduce(): src must be a Tensor, got {type(src).__name__}")
    hot, src_t, dim, hit, counts = self._scatter_parts(dim, index, src, "scatter_reduce", last_wins=False)
    if index.numel() == 0: return _fresh(self)
    hit_t = Tensor(hit, device=self.device)
    if reduce in ("sum", "mean"):
      total = self._place_reduced(hot.where(src_t, 0).sum(dim, keepdim=True).cast(self.dtype), dim, index.shape)
      if reduce == "sum": return self + total if include_self else hit_t.where(total, self)
      if not dtypes.is_float(self.dtype): raise NotImplementedError(f"scatter_reduce 'mean' on {self.dtype}: only float tensors")
      n = Tensor(counts + (1 if include_self else 0), device=self.device).cast(self.dtype)
      return hit_t.where(((self + total) if include_self else total) / n.maximum(1), self)
    # prod / amax / amin: self (restricted to index's extent) joins the reduce (tied maxima share the gradient evenly)
    if reduce == "prod": fill: Any = 1
    elif dtypes.is_float(self.dtype): fill = -math.inf if reduce == "amax" else math.inf
    else: fill = dtypes.min(self.dtype) if reduce == "amax" else dtypes.max(self.dtype)
    candidates = hot.where(src_t, fill)
    if include_self:
      own = self.shrink(tuple(None if d == dim else (0, s) for d, s in enumerate(index.shape))).unsqueeze(-1).transpose(dim, -1)
      candidates = own.cat(candidates, dim=dim)
    reduced = getattr(candidates, {"prod": "prod", "amax": "max", "amin": "min"}[reduce])(dim, keepdim=True).cast(self.dtype)
    return hit_t.where(self._place_reduced(reduced, dim, index.shape), self)

  def masked_fill(self, mask: Tensor, value: Any) -> Tensor:
    """value where mask is true, else self (broadcasting mask and self); value is a scalar or 0-d tensor, cast to self's dtype."""
    if not isinstance(mask, IndexMixin) or mask.dtype != dtypes.bool:
      raise RuntimeError(f"masked_fill only supports boolean masks, but got mask with dtype {getattr(mask, 'dtype', type(mask).__name__)}")
    if isinstance(value, IndexMixin):
      if value.ndim != 0: raise RuntimeError(f"masked_fill only supports a 0-dimensional value tensor, but got tensor with {value.ndim} dimension(s).")
      fill = value.cast(self.dtype)
    elif isinstance(value, (bool, int, float, np.generic)): fill = self.full((), value, self.dtype, self.device)
    else: raise TypeError(f"masked_fill: value must be a number or a 0-d Tensor, got {type(value).__name__}")
    return mask.where(fill, self)

  def masked_select(self, mask: Tensor) -> Tensor:
    """The elements of self where mask is true (both broadcast), as a 1-d tensor in row-major order. Its size
    depends on the mask's values, so the mask is realized."""
    if not isinstance(mask, IndexMixin) or mask.dtype != dtypes.bool:
      raise RuntimeError(f"masked_select: expected BoolTensor for mask, got {getattr(mask, 'dtype', type(mask).__name__)}")
    from minigrad.tensor.math_ops import broadcast_shape
    try: shape = broadcast_shape(self.shape, mask.shape)
    except ValueError: raise RuntimeError(f"masked_select: the shape of the mask {mask.shape} and the shape of the input {self.shape} can't be broadcast") from None
    flat, chosen = self.expand(shape).reshape(-1), mask.expand(shape).reshape(-1).numpy()
    return flat[chosen] if chosen.any() else flat.shrink(((0, 0),))   # the empty result keeps its (zero) gradient

  def index_select(self, dim: int, index: Tensor) -> Tensor:
    """self indexed along dim by a 1-d (or 0-d) integer tensor."""
    if not isinstance(index, IndexMixin) or not dtypes.is_int(index.dtype) or index.ndim > 1:
      raise RuntimeError(f"index_select(): index must be a 0-d or 1-d integer tensor, got {getattr(index, 'shape', index)}")
    dim = normalize_axis(dim, self.ndim)
    if self.ndim == 0: return self.reshape(1)[index.reshape(-1)].reshape(index.shape)
    return self[(slice(None),) * dim + (index.reshape(-1),)]


def pad_with_mode(t: Tensor, pairs: Sequence[tuple[int, int]], mode: str) -> Tensor:
  """Pad each dim by (before, after) repeating the data: 'reflect' (mirror, edge not repeated), 'replicate'
  (edge value) or 'circular' (wrap around), as torch.nn.functional.pad. Negative amounts crop."""
  x = t
  if mode == "circular":   # PyTorch crops first, then wraps the cropped data
    x = x.shrink(tuple((max(0, -b), s - max(0, -a)) for (b, a), s in zip(pairs, x.shape)))
  for dim, (before, after) in enumerate(pairs):
    size = x.shape[dim]
    if mode == "reflect" and (before or after) and (before >= size or after >= size):
      raise RuntimeError(f"Argument #4: Padding size should be less than the corresponding input dimension, but got: "
                         f"padding ({before}, {after}) at dimension {dim} of input {list(t.shape)}")
    if mode == "replicate" and size == 0 and (before > 0 or after > 0):
      raise RuntimeError(f"replicate padding of the empty dimension {dim} of input {list(t.shape)}")
    if mode == "circular" and (before > size or after > size):
      raise RuntimeError(f"Padding value causes wrapping around more than once: padding ({before}, {after}) at dimension {dim} of input {list(t.shape)}")
    lead, tail = max(0, before), max(0, after)
    if lead == 0 and tail == 0: continue
    if mode == "reflect": pieces = [x.shrink(_bounds(x.ndim, dim, 1, lead + 1)).flip(dim), x, x.shrink(_bounds(x.ndim, dim, size - 1 - tail, size - 1)).flip(dim)]
    elif mode == "replicate":
      edge_shape = lambda n: x.shape[:dim] + (n,) + x.shape[dim + 1:]
      pieces = [x.shrink(_bounds(x.ndim, dim, 0, 1)).expand(edge_shape(lead)), x, x.shrink(_bounds(x.ndim, dim, size - 1, size)).expand(edge_shape(tail))]
    else: pieces = [x.shrink(_bounds(x.ndim, dim, size - lead, size)), x, x.shrink(_bounds(x.ndim, dim, 0, tail))]
    x = type(x).cat([p for p in pieces if p.shape[dim]], dim=dim)
  if mode != "circular":
    x = x.shrink(tuple((max(0, -b), s - max(0, -a)) for (b, a), s in zip(pairs, x.shape)))
  return _fresh(x) if x is t else x
