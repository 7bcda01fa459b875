"""Reductions and scans beyond sum/max/min/mean: prod, var/std, argmax/argmin, any/all, logsumexp, cumulative ops.

Input: Tensors (this class is mixed into `Tensor`). Output: lazy Tensors built from differentiable primitives, with
torch's result dtypes (prod/cumsum/cumprod of ints and bools give int64, arg* give int64, any/all give bool).

Cumulative ops (cumsum, cumprod, cummax, cummin, logcumsumexp) scan the last axis as a triangle: row i of an (n, n) view of the
input keeps the elements j <= i (the others become the op's identity) and is reduced. Rows longer than
SCAN_BLOCK are scanned in blocks: each block scans itself, the blocks' totals are scanned (recursively), and each
block is combined with the total of the blocks before it, so the work is O(n * SCAN_BLOCK) rather than O(n^2).
"""
from __future__ import annotations
from typing import Any, NamedTuple, Sequence, TYPE_CHECKING
import math
import minigrad.tensor.function as F
from minigrad.dtype import DType, dtypes, to_dtype
from minigrad.helpers import prod
from minigrad.tensor.math_ops import normalize_axis
import minigrad.tensor.symbolic_shapes as S
if TYPE_CHECKING: from minigrad.tensor.tensor import Tensor

Axis = int | Sequence[int] | None
SCAN_BLOCK = 64   # rows longer than twice this are scanned in blocks


class ValuesIndices(NamedTuple):
  """What cummax/cummin return, as torch's named tuple: `.values` and `.indices` (int64)."""
  values: Tensor
  indices: Tensor


def _identity(op: str, dtype: DType) -> Any:
  """The element that leaves `op` unchanged: 0 for sum, 1 for prod, the dtype's lowest value for max, -inf for
  logaddexp."""
  if op == "sum": return 0
  if op == "prod": return 1
  if op == "logaddexp": return -math.inf
  low = dtypes.min(dtype)
  return low if not dtypes.is_float(dtype) else -math.inf


def _combine(op: str, a: Tensor, b: Tensor) -> Tensor:
  if op == "sum": return a + b
  if op == "prod": return a * b
  if op == "logaddexp": return _logaddexp(a, b)
  return a.maximum(b)


def _logaddexp(a: Tensor, b: Tensor) -> Tensor:
  """log(exp(a) + exp(b)) = max + log1p(exp(min - max)); -inf when both are -inf. The inputs of the branch not
  taken are made finite first, so backward through the where never multiplies a zero by NaN."""
  high, low = a.maximum(b), a.minimum(b)
  both_lowest = high.eq(-math.inf)
  gap = both_lowest.where(0.0, low - high)
  return both_lowest.where(-math.inf, high + gap.exp().log1p())


def _reduce_last(op: str, x: Tensor) -> Tensor:
  if op == "sum": return x._reduce_keep_dtype("sum", (x.ndim - 1,), False)
  if op == "prod": return x._reduce_keep_dtype("prod", (x.ndim - 1,), False)
  if op == "logaddexp": return x.logsumexp(-1)
  return x.max(-1)


def _triangle_scan(x: Tensor, op: str) -> Tensor:
  """Inclusive scan of the last axis (size n): out[..., i] = op(x[..., 0..i]) as an (n, n) masked reduce."""
  n = x.shape[-1]
  rows = x.unsqueeze(-2).expand(x.shape[:-1] + (n, n))          # rows[..., i, j] = x[..., j]
  index = type(x).arange(n, device=x.device)
  keep = index.unsqueeze(-1) >= index                              # keep[i, j] = j <= i
  return _reduce_last(op, keep.where(rows, _identity(op, x.dtype)))


def _scan(x: Tensor, op: str) -> Tensor:
  """Inclusive scan of the last axis; blocked (see the module docstring) when the axis is long."""
  n = x.shape[-1]
  if n <= 2 * SCAN_BLOCK: return _triangle_scan(x, op)
  lead, count = x.shape[:-1], -(-n // SCAN_BLOCK)
  identity = _identity(op, x.dtype)
  blocks = x.pad(((0, 0),) * len(lead) + ((0, count * SCAN_BLOCK - n),), value=identity)
  inner = _triangle_scan(blocks.reshape(lead + (count, SCAN_BLOCK)), op)                  # each block on its own
  totals = inner.shrink(tuple((0, s) for s in lead) + ((0, count), (SCAN_BLOCK - 1, SCAN_BLOCK))).reshape(lead + (count,))
  before = _scan(totals, op).pad(((0, 0),) * len(lead) + ((1, 0),), value=identity)     # exclusive: the blocks before
  before = before.shrink(tuple((0, s) for s in lead) + ((0, count),))
  out = _combine(op, inner, before.unsqueeze(-1)).reshape(lead + (count * SCAN_BLOCK,))
  return out.shrink(tuple((0, s) for s in lead) + ((0, n),))


class ReduceMixin:
  """Reduce and scan ops of Tensor (see minigrad.tensor)."""

  def _reduce_keep_dtype(self, op: str, axis: Axis, keepdim: bool) -> Tensor:
    """Sum or product over `axis` in self's dtype (no widening); empty reductions give the identity."""
    axes = self._axes(axis)
    kept = tuple(1 if i in axes else s for i, s in enumerate(self.shape))
    if self.numel() == 0: out = self._empty_reduce(axes, _identity(op, self.dtype))
    elif not axes: out = self
    else: out = (F.Sum if op == "sum" else F.Prod).apply(self, axes=axes)
    return out if keepdim else out.reshape(tuple(s for i, s in enumerate(kept) if i not in axes))

  def _empty_reduce(self, axes: tuple[int, ...], identity: Any) -> Tensor:
    """The reduction of an empty tensor over `axes` (kept as size 1): `identity` everywhere. Built from self by
    shrink and pad, so the graph stays connected and backward gives self an (empty) zero gradient, as torch does."""
    part = self.shrink(tuple((0, min(1, s)) if i in axes else None for i, s in enumerate(self.shape)))
    return part.pad(tuple((0, 1 - part.shape[i]) if i in axes else (0, 0) for i in range(self.ndim)), value=identity)

  def _widened(self, dtype: Any) -> Tensor:
    """self cast to `dtype`, or to int64 when it holds ints or bools (torch's rule for prod and cumsum)."""
    if dtype is not None: return self.cast(to_dtype(dtype))
    return self.cast(dtypes.int64) if dtypes.is_int(self.dtype) or self.dtype == dtypes.bool else self

  # ---- products ----
  def prod(self, axis: Axis = None, keepdim: bool = False, dtype: Any = None) -> Tensor:
    """Product over `axis` (an int, a tuple, or None for all). Ints and bools multiply in int64, as in torch.
    The gradient is right with zeros in the input (see function.Prod)."""
    return self._widened(dtype)._reduce_keep_dtype("prod", axis, keepdim)

  # ---- spread ----
  def var(self, axis: Axis = None, keepdim: bool = False, correction: float = 1) -> Tensor:
    """Variance: sum((x - mean)^2) / max(0, N - correction). correction=1 is the unbiased (Bessel) estimate,
    correction=0 the population variance. Too few elements give nan or inf, as in torch."""
    if not dtypes.is_float(self.dtype):
      raise RuntimeError(f"std and var only support floating point dtypes, got {self.dtype} (shape {self.shape})")
    axes = self._axes(axis)
    if S.is_symbolic(self): return S.var(self, axes, keepdim, correction)   # a Variable count: summed in a kernel
    count = prod(self.shape[a] for a in axes)
    squares = (self - self.mean(axes, keepdim=True)).square().sum(axes, keepdim)
    return squares / max(0, count - correction)

  def std(self, axis: Axis = None, keepdim: bool = False, correction: float = 1) -> Tensor:
    """Standard deviation: the square root of var(axis, keepdim, correction)."""
    return self.var(axis, keepdim, correction).sqrt()

  def var_mean(self, axis: Axis = None, keepdim: bool = False, correction: float = 1) -> tuple[Tensor, Tensor]:
    return self.var(axis, keepdim, correction), self.mean(axis, keepdim)

  def std_mean(self, axis: Axis = None, keepdim: bool = False, correction: float = 1) -> tuple[Tensor, Tensor]:
    return self.std(axis, keepdim, correction), self.mean(axis, keepdim)

  # ---- positions ----
  def argmax(self, axis: int | None = None, keepdim: bool = False) -> Tensor:
    """Index (int64) of the first maximum along `axis`, or in the flattened tensor when axis is None. NaN counts
    as larger than everything (as in torch). tinygrad returns int32 here; minigrad keeps torch's int64."""
    if self.dtype == dtypes.bool: raise RuntimeError("argmax(): does not support bool input")
    if S.is_symbolic(self): return S.argmax(self, axis, keepdim)   # a variable-length dim
    if axis is None:
      if self.numel() == 0: raise IndexError(f"argmax(): Expected reduction dim to be specified for input.numel() == 0 (shape {self.shape})")
      flat = self.reshape(-1).argmax(0)
      return flat.reshape((1,) * self.ndim) if keepdim else flat
    dim = normalize_axis(axis, self.ndim)
    if self.ndim == 0: return self.full((), 0, dtypes.int64, self.device)
    size = self.shape[dim]
    if size == 0: raise IndexError(f"argmax(): Expected reduction dim {dim} to have non-zero size (shape {self.shape})")
    is_max = self.eq(self.max(dim, keepdim=True)) | self.ne(self)
    position = type(self).arange(size, device=self.device).reshape(tuple(size if i == dim else 1 for i in range(self.ndim)))
    # the first maximum has the largest (size - position)
    from_end = is_max.where(size - position, 0).max(dim, keepdim)
    return (size - from_end).cast(dtypes.int64)

  def argmin(self, axis: int | None = None, keepdim: bool = False) -> Tensor:
    """Index (int64) of the first minimum along `axis` (flattened when None); NaN counts as smallest."""
    if self.dtype == dtypes.bool: raise RuntimeError("argmin(): does not support bool input")
    return self._flip_order().argmax(axis, keepdim)

  # ---- logic ----
  def _bool_reduce(self, axis: Axis, keepdim: bool, empty_value: bool) -> Tensor:
    axes = self._axes(axis)
    truth = self.cast(dtypes.bool)
    if any(self.shape[a] == 0 for a in axes):
      kept = tuple(1 if i in axes else s for i, s in enumerate(self.shape))
      out = self.full(kept if keepdim else tuple(s for i, s in enumerate(kept) if i not in axes), empty_value, dtypes.bool, self.device)
    else: out = truth.max(axes, keepdim) if not empty_value else truth.min(axes, keepdim)
    return out.cast(dtypes.uint8) if self.dtype == dtypes.uint8 else out   # torch keeps uint8 for any/all

  def any(self, axis: Axis = None, keepdim: bool = False) -> Tensor:
    """True where any element along `axis` is non-zero (False for empty); uint8 input gives uint8, as in torch."""
    return self._bool_reduce(axis, keepdim, False)

  def all(self, axis: Axis = None, keepdim: bool = False) -> Tensor:
    """True where every element along `axis` is non-zero (True for empty); uint8 input gives uint8, as in torch."""
    return self._bool_reduce(axis, keepdim, True)

  # ---- log-sum-exp ----
  def logsumexp(self, axis: Axis = None, keepdim: bool = False) -> Tensor:
    """log(sum(exp(x))) over `axis`, computed as m + log(sum(exp(x - m))) with m the (finite) max, so large
    inputs don't overflow; rows of -inf give -inf and empty reductions give -inf, as in torch."""
    x = self._float()
    axes = x._axes(axis)
    if any(x.shape[a] == 0 for a in axes):
      out = x._empty_reduce(axes, -math.inf)
      return out if keepdim else out.reshape(tuple(s for i, s in enumerate(x.shape) if i not in axes))
    peak = x.max(axes, keepdim=True).detach()
    peak = peak.abs().eq(math.inf).where(0.0, peak)      # an infinite max would make x - m nan
    out = (x - peak).exp().sum(axes, keepdim=True).log() + peak
    return out if keepdim else out.reshape(tuple(s for i, s in enumerate(x.shape) if i not in axes))

  # ---- cumulative ----
  def _cumulative(self, axis: int, op: str) -> Tensor:
    if self.ndim == 0 or self.numel() == 0:
      if self.ndim: normalize_axis(axis, self.ndim)
      return self
    dim = normalize_axis(axis, self.ndim)
    return _scan(self.transpose(dim, -1), op).transpose(dim, -1)

  def cumsum(self, axis: int = 0, dtype: Any = None) -> Tensor:
    """Running sum along `axis`; ints and bools sum in int64 (as torch)."""
    return self._widened(dtype)._cumulative(axis, "sum")

  def cumprod(self, axis: int = 0, dtype: Any = None) -> Tensor:
    """Running product along `axis`; ints and bools multiply in int64 (as torch). Gradients are right with zeros."""
    return self._widened(dtype)._cumulative(axis, "prod")

  def logcumsumexp(self, axis: int = 0) -> Tensor:
    """log(cumsum(exp(x))) along `axis`, computed without overflow or underflow: each running value is a
    max-shifted log-sum-exp of the elements so far (a scan whose combining op is logaddexp). Integers give the
    default float."""
    return self._float()._cumulative(axis, "logaddexp")

  def cummax(self, axis: int = 0) -> ValuesIndices:
    """(values, indices) of the running maximum along `axis`, as torch.cummax: at ties the index is the latest
    position; once a NaN is seen the values stay NaN and the index is that of the latest NaN. The gradient of values
    goes to the element each index points at (as torch)."""
    if self.ndim == 0: return ValuesIndices(self, self.full((), 0, dtypes.int64, self.device))
    dim = normalize_axis(axis, self.ndim)
    if self.numel() == 0: return ValuesIndices(self, self.full(self.shape, 0, dtypes.int64, self.device))
    x = self.transpose(dim, -1)
    size = x.shape[-1]
    running = _scan(x.detach(), "max")
    position = type(self).arange(size, device=self.device)
    # the index is the last position (so far) where x reached the running max: a running max of positions where
    # x equals it. NaNs map to size + position, above every other key, so after a NaN the index is the latest NaN.
    key = x.eq(running).where(position, -1)
    key = x.ne(x).where(size + position, key)
    latest = _scan(key, "max")
    indices = (latest >= size).where(latest - size, latest)
    if self.requires_grad and type(self).grad_enabled and dtypes.is_float(self.dtype):
      picked = indices.unsqueeze(-1).eq(position)                   # (..., i, j): j is the index of out[i]
      running = picked.where(x.unsqueeze(-2), 0.0).sum(-1)          # the same values, differentiable like torch's
    return ValuesIndices(running.transpose(dim, -1), indices.cast(dtypes.int64).transpose(dim, -1))

  def cummin(self, axis: int = 0) -> ValuesIndices:
    """(values, indices) of the running minimum along `axis`, as torch.cummin (latest index at ties)."""
    flipped = self._flip_order().cummax(axis)
    return ValuesIndices(flipped.values._flip_order(), flipped.indices)

