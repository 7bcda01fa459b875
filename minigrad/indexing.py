"""Basic indexing for Tensor.__getitem__: ints, slices (any step, negative too), None and Ellipsis.

Input: a Tensor and a Python index. Output: a Tensor that is a zero-copy view (shrink, flip, reshape, pad).
Every piece maps to movement ops, so `x[::2, 1]` costs no kernel until it is used.
"""
from __future__ import annotations
from typing import Any, TYPE_CHECKING
import numpy as np
if TYPE_CHECKING: from minigrad.tensor import Tensor


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


def getitem(t: Tensor, index: Any) -> Tensor:
  from minigrad.tensor import Tensor
  items = list(index) if isinstance(index, tuple) else [index]
  for it in items:
    if isinstance(it, (Tensor, list)):
      raise NotImplementedError("indexing with tensors or lists (advanced indexing) is not supported yet")
    if not (it is None or it is Ellipsis or isinstance(it, (int, np.integer, slice)) and not isinstance(it, (bool, np.bool_))):
      raise TypeError(f"invalid index {it!r} of type {type(it).__name__}: use ints, slices, None or ...")
  if sum(it is Ellipsis for it in items) > 1: raise IndexError("an index can only have a single ellipsis ('...')")
  real = sum(1 for it in items if it is not None and it is not Ellipsis)
  if real > t.ndim: raise IndexError(f"too many indices for tensor of dimension {t.ndim} (shape {t.shape}): {real} given")
  if Ellipsis in items:
    at = items.index(Ellipsis)
    items = items[:at] + [slice(None)] * (t.ndim - real) + items[at + 1:]
  else: items = items + [slice(None)] * (t.ndim - real)
  out_shape: list[int] = []
  dim = 0
  for it in items:
    if it is None:
      out_shape.append(1)
      continue
    size = t.shape[dim]
    if isinstance(it, (int, np.integer)):
      it = int(it)
      if not -size <= it < size: raise IndexError(f"index {it} is out of bounds for dimension {dim} with size {size}")
      t = _take_every(t, dim, it % size, 1, 1)
    else:
      start, stop, step = it.indices(size)
      count = len(range(start, stop, step))
      if step < 0:
        t = t.flip(dim)
        start, step = size - 1 - start, -step
      t = _take_every(t, dim, start, count, step)
      out_shape.append(count)
    dim += 1
  return t.reshape(tuple(out_shape))
