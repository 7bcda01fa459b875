"""Sorting: sort, argsort, topk, as a mixin of Tensor.

Input: Tensors (this class is mixed into `Tensor`, so `self` is a Tensor). Output: lazy Tensors; sort and topk
return (values, indices) pairs that behave like torch's named tuples (`.values`, `.indices`, unpacking).

Every element gets an unsigned integer *order key* whose unsigned order is torch's order of the values: NaN above
+inf (so NaN comes last ascending and first descending), -0.0 equal to 0.0; descending order is the bitwise not of
the key. Ties are broken by the element's position, which makes every sort stable (torch's stable=True; torch's
default sort gives no guarantee about ties, so stable results are valid for it too).

Three algorithms; minigrad.opt.sort_policy picks one from the device's renderer, the row length and the key width:
- rank sort, for short rows: rank[i] = how many elements come before element i (an (n, n) compare-and-sum), and
  output r is the element whose rank is r (an (n, n) one-hot sum). Two kernels, whatever n.
- the row sort, where the device's renderer spells Ops.SORT (the C renderer: a radix sort, minigrad/codegen/
  sort_kernel.py): key and position packed into one uint64 (key << 32 | position), the rows sorted by one SORT
  kernel (stably, by the high half), values and indices rebuilt from the words. Four kernels, whatever n.
- bitonic sort, for long rows elsewhere (and 64-bit keys): the row is padded to a power of two N, and
  log2(N) * (log2(N) + 1) / 2 compare-exchange steps run, one kernel each. A step pairs element i of each block with
  i + half (a flipped view of the same buffer) and keeps the smaller of the pair in the block's first half; each
  merge's first step pairs i with its mirror image in the block instead, so every step sorts ascending. Each step
  is a pass over memory. With a 32-bit key the packed words are the only column (a step is a min and a max); 64-bit
  keys travel with the positions and values as columns that swap with `where`.
With packed words the values are rebuilt from the keys (so -0.0 comes out as 0.0 and every NaN as the same NaN).
Gradients are torch's: each output's gradient goes back to the element it came from. The rank sort's one-hot
selection gets that from autograd; the other two write it out (autograd through the network's steps would fuse into
one expression whose size doubles with every step): the output gradient, sorted by the indices (the same algorithm,
a gradient of at most 32 bits packed with the index).
"""
from __future__ import annotations
from typing import TYPE_CHECKING
import minigrad.tensor.function as F
from minigrad.dtype import DType, dtypes
from minigrad.uop.ops import UOp, Ops
from minigrad.opt.sort_policy import sort_algorithm
from minigrad.runtime.device import Device
from minigrad.tensor.math_ops import normalize_axis
from minigrad.tensor.reduce_ops import ValuesIndices
if TYPE_CHECKING: from minigrad.tensor.tensor import Tensor

LOW32, HIGH_BIT = 0xFFFFFFFF, {32: 0x80000000, 64: 0x8000000000000000}


def _key_dtype(dtype: DType) -> DType:
  """uint32 for values of at most 32 bits (float16 and bfloat16 through float32), uint64 for 64-bit ones."""
  return dtypes.uint64 if dtype.itemsize == 8 else dtypes.uint32


def order_key(x: Tensor, descending: bool) -> Tensor:
  """Unsigned keys whose order is torch's sort order of x (NaN largest, -0.0 == 0.0); reversed when descending."""
  key_dtype = _key_dtype(x.dtype)
  bits = key_dtype.itemsize * 8
  if dtypes.is_float(x.dtype):
    wide = x if x.dtype.itemsize >= 4 else x.cast(dtypes.float32)
    wide = wide.eq(0).where(0.0, wide)                               # -0.0 sorts with 0.0
    raw = wide.bitcast(key_dtype)
    negative = (raw >> (bits - 1)).ne(0)
    key = negative.where(raw ^ (2 ** bits - 1), raw | HIGH_BIT[bits])   # negatives reversed, positives above them
    key = wide.ne(wide).where(2 ** bits - 1, key)                    # every NaN: the largest key
  elif dtypes.is_unsigned(x.dtype) or x.dtype == dtypes.bool: key = x.cast(key_dtype)
  else:   # signed ints: flip the sign bit so that unsigned order is signed order
    key = x.cast(dtypes.int64 if bits == 64 else dtypes.int32).bitcast(key_dtype) ^ HIGH_BIT[bits]
  return key ^ (2 ** bits - 1) if descending else key


def _value_from_key(key: Tensor, dtype: DType, descending: bool) -> Tensor:
  """The inverse of order_key for 32-bit keys (floats come back with -0.0 as 0.0 and one NaN)."""
  if descending: key = key ^ LOW32
  if dtypes.is_float(dtype):
    negative = (key >> 31).eq(0)
    return negative.where(key ^ LOW32, key ^ HIGH_BIT[32]).bitcast(dtypes.float32).cast(dtype)
  if dtypes.is_unsigned(dtype) or dtype == dtypes.bool: return key.cast(dtype)
  return (key ^ HIGH_BIT[32]).bitcast(dtypes.int32).cast(dtype)


def _positions(x: Tensor, count: int) -> Tensor:
  from minigrad.tensor.tensor import Tensor
  return Tensor.arange(count, device=x.device).expand(x.shape[:-1] + (count,))


# ---- rank sort ----

def _rank_sort(x: Tensor, key: Tensor) -> tuple[Tensor, Tensor]:
  """(values, int64 indices) of the last axis sorted by (key, position): compares all pairs, then selects."""
  n = x.shape[-1]
  position = _positions(x, n).cast(dtypes.int32)
  key_i, key_j = key.unsqueeze(-1), key.unsqueeze(-2)            # (..., i, 1) and (..., 1, j)
  pos_i, pos_j = position.unsqueeze(-1), position.unsqueeze(-2)
  comes_before = (key_j < key_i) | (key_j.eq(key_i) & (pos_j < pos_i))
  rank = comes_before.cast(dtypes.int32).sum(-1, dtype=dtypes.int32)        # (..., i)
  chosen = rank.unsqueeze(-2).eq(position.unsqueeze(-1))                  # chosen[..., r, i]: element i goes to r
  indices = chosen.where(position.unsqueeze(-2), 0).sum(-1, dtype=dtypes.int32).cast(dtypes.int64)
  return _select(chosen, x), indices


def _select(chosen: Tensor, x: Tensor) -> Tensor:
  """out[..., r] = x[..., i] for the one i with chosen[..., r, i]: a one-hot sum that keeps x's dtype, -0.0 (the
  fill is -0.0, the additive identity) and NaN, and sends each output's gradient to its element."""
  if x.dtype == dtypes.bool: return _select(chosen, x.cast(dtypes.uint8)).cast(dtypes.bool)
  fill = -0.0 if dtypes.is_float(x.dtype) else 0
  return chosen.where(x.unsqueeze(-2), fill).sum(-1, dtype=x.dtype)


# ---- bitonic sort ----

def _compare_exchange(columns: list[Tensor], half: int, mirrored: bool) -> list[Tensor]:
  """One step of the network on (..., N) columns: elements i and i + half of each block of 2*half are compared
  (with `mirrored`, i and 2*half - 1 - i) and the lexicographically smaller (key, position) goes first. Every
  element reads its partner through a flipped view of the same buffer and keeps the min or the max of the pair,
  by which half of its block it is in: one load of each, no data movement besides the output."""
  from minigrad.tensor.tensor import Tensor
  lead, size = columns[0].shape[:-1], columns[0].shape[-1]
  if mirrored:   # blocks of 2*half, the partner is the mirror image
    block_shape = lead + (size // (2 * half), 2 * half)
    partner_of = lambda c: c.reshape(block_shape).flip(-1)
    first_half = Tensor.arange(2 * half, device=columns[0].device) < half
  else:          # blocks of (2, half), the partner is in the other row
    block_shape = lead + (size // (2 * half), 2, half)
    partner_of = lambda c: c.reshape(block_shape).flip(-2)
    first_half = (Tensor.arange(2, device=columns[0].device) < 1).reshape(2, 1)
  mine = [c.reshape(block_shape) for c in columns]
  partners = [partner_of(c) for c in columns]
  if len(columns) == 1:   # a packed key, unique: the smaller of the pair first
    out = [first_half.where(mine[0].minimum(partners[0]), mine[0].maximum(partners[0]))]
  else:                   # columns[0] the key, columns[1] the position (the tie-break), then payloads
    partner_first = (partners[0] < mine[0]) | (partners[0].eq(mine[0]) & (partners[1] < mine[1]))
    take_partner = partner_first.eq(first_half)
    out = [take_partner.where(p, m) for m, p in zip(mine, partners)]
  return [o.reshape(lead + (size,)).contiguous() for o in out]


def _bitonic_sort(columns: list[Tensor]) -> list[Tensor]:
  """Sort (..., N) columns (N a power of two) along the last axis by (columns[0], columns[1]). Each step is one
  kernel (fusing steps measured no faster on 1M elements: each output recomputes the 2**k elements it depends on)."""
  size = columns[0].shape[-1]
  merge = 2
  while merge <= size:
    columns = _compare_exchange(columns, merge // 2, mirrored=True)
    half = merge // 4
    while half >= 1:
      columns = _compare_exchange(columns, half, mirrored=False)
      half //= 2
    merge *= 2
  return columns


def _keyed_sort(x: Tensor, key: Tensor, descending: bool, in_rows: bool) -> tuple[Tensor, Tensor]:
  """(values, int64 indices) of the last axis sorted by (key, position): with `in_rows` by one SORT kernel (32-bit
  keys only), else with the bitonic network. The values' gradient is written out (the network's own backward would
  be one fused expression whose size doubles with every step): each output's gradient goes back to the position it
  came from, by sorting the gradient by index."""
  n = x.shape[-1]
  if key.dtype == dtypes.uint32:   # key and position packed into one uint64
    if in_rows: packed = _sort_rows((key.cast(dtypes.uint64) << 32) | _positions(x, n).cast(dtypes.uint64))
    else:
      position = _positions(x, _padded_size(n)).cast(dtypes.uint64)
      packed = (key.cast(dtypes.uint64) << 32).pad(((0, 0),) * (x.ndim - 1) + ((0, position.shape[-1] - n),), value=LOW32 << 32)
      (packed,) = _bitonic_sort([packed | position])
      packed = _first(packed, n)
    values, indices = _value_from_key((packed >> 32).cast(dtypes.uint32), x.dtype, descending), (packed & LOW32).cast(dtypes.int64)
  else:
    payload = x.detach() if x.dtype != dtypes.bool else x.detach().cast(dtypes.uint8)
    values, indices = _sort_with_payload(key, payload)
    values = values.cast(x.dtype)
  if not (x.requires_grad and type(x).grad_enabled and dtypes.is_float(x.dtype)): return values, indices
  sorted_values = values
  return F.Composite.apply(x, fn=lambda _: sorted_values, gradient=lambda grad, out, _: (_unpermute(grad, indices, in_rows),)), indices


def _sort_rows(words: Tensor) -> Tensor:
  """uint64 words sorted along the last axis by their high 32 bits, stably, by one Ops.SORT kernel (the device's
  renderer spells it; see minigrad.opt.sort_policy)."""
  from minigrad.tensor.tensor import Tensor
  rows = words.reshape(-1, words.shape[-1]).contiguous()
  return Tensor(UOp(Ops.SORT, dtypes.uint64, (rows.uop,))).reshape(words.shape)


def _padded_size(n: int) -> int: return 1 << (n - 1).bit_length()
def _first(t: Tensor, n: int) -> Tensor: return t.shrink(tuple((0, s) for s in t.shape[:-1]) + ((0, n),))


def _sort_with_payload(key: Tensor, payload: Tensor) -> tuple[Tensor, Tensor]:
  """(payload, int64 positions) sorted by (key, position) along the last axis (any key dtype)."""
  n, size = key.shape[-1], _padded_size(key.shape[-1])
  pads = ((0, 0),) * (key.ndim - 1) + ((0, size - n),)
  position = _positions(key, size).cast(dtypes.uint32)    # padding gets positions n.. : after every element
  columns = [key.pad(pads, value=2 ** (key.dtype.itemsize * 8) - 1), position, payload.pad(pads)]
  _, position, sorted_payload = _bitonic_sort(columns)
  return _first(sorted_payload, n), _first(position, n).cast(dtypes.int64)


def _unpermute(grad: Tensor, indices: Tensor, in_rows: bool) -> Tensor:
  """out[..., indices[..., i]] = grad[..., i] for a permutation `indices` of the last axis: grad sorted by index
  (with `in_rows`, a gradient of at most 32 bits travels in the low half of (index << 32 | its bits))."""
  if not in_rows or grad.dtype.itemsize > 4: return _sort_with_payload(indices.cast(dtypes.uint32), grad)[0]
  bits = grad.cast(dtypes.float32).bitcast(dtypes.uint32).cast(dtypes.uint64)
  words = _sort_rows((indices.cast(dtypes.uint64) << 32) | bits)
  return (words & LOW32).cast(dtypes.uint32).bitcast(dtypes.float32).cast(grad.dtype)


def _sort_last_axis(x: Tensor, descending: bool) -> tuple[Tensor, Tensor]:
  n = x.shape[-1]
  key = order_key(x.detach(), descending)
  algorithm = sort_algorithm(Device[x.device].renderer, x.numel() // n, n, key.dtype.itemsize * 8)
  if algorithm == "rank": return _rank_sort(x, key)
  return _keyed_sort(x, key, descending, in_rows=algorithm == "rows")


class SortMixin:
  """sort, argsort and topk of Tensor (see minigrad.tensor)."""

  def sort(self, dim: int = -1, descending: bool = False, stable: bool | None = False) -> ValuesIndices:
    """(values, indices) of self sorted along `dim`, as torch.sort. Always stable (equal elements keep their order,
    also when descending); NaN sorts above +inf. Indices are int64; values carry the gradient."""
    if not isinstance(descending, bool) or not isinstance(stable, (bool, type(None))):
      raise TypeError(f"sort(): descending and stable must be bools, got {descending!r} and {stable!r}")
    if self.ndim == 0: return ValuesIndices(self, self.full((), 0, dtypes.int64, self.device))
    dim = normalize_axis(dim, self.ndim)
    if self.shape[dim] <= 1 or self.numel() == 0:
      return ValuesIndices(self, self.full(self.shape, 0, dtypes.int64, self.device))
    values, indices = _sort_last_axis(self.transpose(dim, -1), descending)
    return ValuesIndices(values.transpose(dim, -1), indices.transpose(dim, -1))

  def argsort(self, dim: int = -1, descending: bool = False, stable: bool | None = False) -> Tensor:
    """The int64 indices that sort self along `dim` (stable; see sort)."""
    return self.sort(dim, descending, stable).indices

  def topk(self, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> ValuesIndices:
    """(values, indices) of the k largest (or smallest) elements along `dim`, as torch.topk; the result is always
    sorted (torch allows that for sorted=False), and equal elements come in their order in self."""
    if not isinstance(k, int) or isinstance(k, bool): raise TypeError(f"topk(): k must be an int, got {type(k).__name__}")
    size = self.shape[normalize_axis(dim, self.ndim)] if self.ndim else 1
    if not 0 <= k <= size: raise RuntimeError(f"selected index k out of range (k={k}, dim {dim} of size {size}, shape {self.shape})")
    values, indices = self.sort(dim, descending=largest)
    if self.ndim == 0: return ValuesIndices(values, indices)
    axis = normalize_axis(dim, self.ndim)
    bounds = tuple((0, k) if d == axis else (0, s) for d, s in enumerate(self.shape))
    return ValuesIndices(values.shrink(bounds), indices.shrink(bounds))

  def msort(self) -> Tensor:
    """self sorted along dim 0 (torch.msort)."""
    return self.sort(0).values

