"""A Kernel: one kernel AST plus the shape of its loop nest, ready for optimization and lowering.

Input: a kernel AST from the scheduler (SINK of STORE, every VIEW of the same rank). Output: a `Kernel` whose
`full_shape` lists the loop sizes, with global (output) dims first and reduce dims after `first_reduce`, and
whose ShapeTrackers (`sts`) were permuted/merged the same way. The lowerer turns it into loop code.

Shape simplification keeps the loop nest small and the names meaningful: size-1 dims are dropped, reduce
dims are moved last, and neighbouring dims merge when every buffer sees them as one (so a contiguous
1024x1024 elementwise op becomes a single loop of 1048576).
"""
from __future__ import annotations
from dataclasses import dataclass
from minigrad.uop.ops import UOp, Ops
from minigrad.uop.shapetracker import ShapeTracker
from minigrad.helpers import prod

VIEW_HOLDERS = (Ops.LOAD, Ops.STORE, Ops.CONST, Ops.VALID, Ops.ARANGE)


@dataclass(frozen=True)
class Opt:
  """One optimization action on a kernel axis (UPCAST, UNROLL, LOCAL, ... come with the optimizer)."""
  op: str
  axis: int
  amount: int


class Kernel:
  def __init__(self, ast: UOp):
    if ast.op is not Ops.SINK: raise ValueError(f"a kernel AST must be a SINK, got {ast.op}")
    self.ast = ast
    self.applied_opts: list[Opt] = []
    holders = [n for n in ast.toposort if n.op in VIEW_HOLDERS and any(s.op is Ops.VIEW for s in n.src)]
    self.views: list[UOp] = list(dict.fromkeys(s for n in holders for s in n.src if s.op is Ops.VIEW))
    self.sts: list[ShapeTracker] = [v.arg for v in self.views]
    ranks = {len(st.shape) for st in self.sts}
    if len(ranks) != 1: raise RuntimeError(f"kernel views disagree on rank: {[st.shape for st in self.sts]}")
    self.reduce_axes: set[int] = {a for n in ast.toposort if n.op is Ops.REDUCE_AXIS for a in n.arg[1]}
    self.output_st = next(s.arg for n in ast.toposort if n.op is Ops.STORE for s in n.src if s.op is Ops.VIEW)
    self._simplify_shape()

  # ---- shape bookkeeping ----
  @property
  def full_shape(self) -> tuple[int, ...]:
    return tuple(max(dims) for dims in zip(*(st.shape for st in self.sts))) if self.sts and self.sts[0].shape else ()

  @property
  def shape_len(self) -> int: return len(self.full_shape)

  @property
  def first_reduce(self) -> int:
    """Index of the first reduce dim (== shape_len when the kernel has no reduce)."""
    return next((i for i in range(self.shape_len) if i in self.reduce_axes), self.shape_len)

  @property
  def global_dims(self) -> tuple[int, ...]: return self.full_shape[:self.first_reduce]

  def _reshape_all(self, new_shape_of: dict[int, tuple[int, ...]] | None = None, order: list[int] | None = None) -> None:
    """Apply one permutation (order) or reshape to every ShapeTracker of the kernel."""
    if order is not None:
      self.sts = [st.permute(tuple(order)) for st in self.sts]
      self.reduce_axes = {order.index(a) for a in self.reduce_axes}
    if new_shape_of is not None: self.sts = [st.reshape(new_shape_of[i]) for i, st in enumerate(self.sts)]

  def _simplify_shape(self) -> None:
    full = self.full_shape
    # 1. move reduce dims last (stable)
    order = [i for i in range(len(full)) if i not in self.reduce_axes] + sorted(self.reduce_axes)
    if order != list(range(len(full))): self._reshape_all(order=order)
    # 2. drop size-1 dims
    full = self.full_shape
    keep = [i for i, d in enumerate(full) if d != 1]
    if len(keep) != len(full):
      self._reshape_all({k: tuple(st.shape[i] for i in keep) for k, st in enumerate(self.sts)})
      self.reduce_axes = {keep.index(a) for a in self.reduce_axes if a in keep}
    # 3. merge neighbouring dims of the same kind when no ShapeTracker grows a view
    i = 0
    while i + 1 < self.shape_len:
      if (i in self.reduce_axes) != (i + 1 in self.reduce_axes) or not self._mergeable(i):
        i += 1
        continue
      self._reshape_all({k: st.shape[:i] + (st.shape[i] * st.shape[i + 1],) + st.shape[i + 2:] for k, st in enumerate(self.sts)})
      self.reduce_axes = {a if a <= i else a - 1 for a in self.reduce_axes}

  def _mergeable(self, i: int) -> bool:
    for st in self.sts:
      merged = st.reshape(st.shape[:i] + (st.shape[i] * st.shape[i + 1],) + st.shape[i + 2:])
      if len(merged.views) > len(st.views): return False
      # merging must keep a 1 (a reduced dim of the output) as 1 and a full dim as full
      if (st.shape[i] == 1) != (st.shape[i + 1] == 1): return False
    return True

  def st_of(self, view: UOp) -> ShapeTracker: return self.sts[self.views.index(view)]

  # ---- naming ----
  @property
  def name(self) -> str:
    """E_ for elementwise kernels, r_ for reduce kernels, then the loop sizes: r_64_64_64 is a matmul."""
    prefix = "r" if self.reduce_axes else "E"
    dims = self.full_shape or (1,)
    return f"{prefix}_" + "_".join(str(d) for d in dims)

  def estimated_bytes(self, buffer_nbytes: list[int]) -> int: return sum(buffer_nbytes)

  @property
  def output_size(self) -> int: return prod(self.global_dims)
