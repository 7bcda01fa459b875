"""A Kernel: one kernel AST plus the shape of its loop nest, and the optimization actions that reshape it.

Input: a kernel AST from the scheduler (SINK of STORE, every VIEW of the same rank). Output: a `Kernel` whose
`full_shape` lists the loop sizes and whose `axis_kinds` say what each dim becomes:
  "global"  an output loop (on CPU the outermost one is split across threads; on GPUs a grid dim)
  "reduce"  a loop a REDUCE accumulates over
  "upcast"  a piece of a global dim, unrolled in the kernel body (the innermost one becomes SIMD lanes)
  "unroll"  a piece of a reduce dim, unrolled in the loop body
Dims are kept in that order: globals, reduces, then upcast/unroll dims in the order they were made.
All ShapeTrackers (`sts`) are reshaped/permuted together, so every buffer keeps seeing the same loop nest.

Shape simplification keeps the loop nest small and the names meaningful: size-1 dims are dropped, reduce
dims are moved last, and neighbouring dims merge when every buffer sees them as one (so a contiguous
1024x1024 elementwise op becomes a single loop of 1048576).
"""
from __future__ import annotations
from dataclasses import dataclass
from minigrad.uop.ops import UOp, Ops
from minigrad.uop.shapetracker import ShapeTracker

VIEW_HOLDERS = (Ops.LOAD, Ops.STORE, Ops.CONST, Ops.VALID, Ops.ARANGE)
OPT_KINDS = ("UPCAST", "UNROLL")


@dataclass(frozen=True)
class Opt:
  """One optimization action. UPCAST splits `amount` off global dim `axis` into an unrolled/SIMD dim; UNROLL
  does the same to reduce dim `axis` (axis counts from the first reduce dim)."""
  op: str
  axis: int
  amount: int

  def __repr__(self) -> str: return f"Opt({self.op}, {self.axis}, {self.amount})"


class KernelOptError(ValueError):
  """An optimization action that doesn't fit the kernel (axis out of range, amount not dividing the dim ...)."""


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
    reduce_axes = {a for n in ast.toposort if n.op is Ops.REDUCE_AXIS for a in n.arg[1]}
    self.axis_kinds: list[str] = ["reduce" if i in reduce_axes else "global" for i in range(len(self.sts[0].shape))]
    self.output_view = next(s for n in ast.toposort if n.op is Ops.STORE for s in n.src if s.op is Ops.VIEW)
    self._simplify_shape()

  # ---- shape bookkeeping ----
  @property
  def full_shape(self) -> tuple[int, ...]:
    return tuple(max(dims) for dims in zip(*(st.shape for st in self.sts))) if self.sts and self.sts[0].shape else ()

  @property
  def shape_len(self) -> int: return len(self.full_shape)

  @property
  def reduce_axes(self) -> set[int]: return {i for i, kind in enumerate(self.axis_kinds) if kind in ("reduce", "unroll")}

  @property
  def first_reduce(self) -> int:
    """Index of the first reduce loop (== the number of global loops)."""
    return sum(1 for kind in self.axis_kinds if kind == "global")

  @property
  def first_upcast(self) -> int:
    """Index of the first upcast/unroll dim (== the number of loops)."""
    return sum(1 for kind in self.axis_kinds if kind in ("global", "reduce"))

  @property
  def global_dims(self) -> tuple[int, ...]: return self.full_shape[:self.first_reduce]

  @property
  def output_st(self) -> ShapeTracker: return self.st_of(self.output_view)

  def _permute_all(self, order: list[int]) -> None:
    self.sts = [st.permute(tuple(order)) for st in self.sts]
    self.axis_kinds = [self.axis_kinds[i] for i in order]

  def _reshape_all(self, shape_of: list[tuple[int, ...]]) -> None:
    self.sts = [st.reshape(shape) for st, shape in zip(self.sts, shape_of)]

  def _simplify_shape(self) -> None:
    # 1. reduce dims last (stable)
    order = [i for i, k in enumerate(self.axis_kinds) if k == "global"] + [i for i, k in enumerate(self.axis_kinds) if k == "reduce"]
    if order != list(range(len(order))): self._permute_all(order)
    # 2. drop size-1 dims
    keep = [i for i, d in enumerate(self.full_shape) if d != 1]
    if len(keep) != self.shape_len:
      self._reshape_all([tuple(st.shape[i] for i in keep) for st in self.sts])
      self.axis_kinds = [self.axis_kinds[i] for i in keep]
    # 3. merge neighbouring dims of the same kind when no ShapeTracker grows a view
    i = 0
    while i + 1 < self.shape_len:
      if self.axis_kinds[i] != self.axis_kinds[i + 1] or not self._mergeable(i):
        i += 1
        continue
      self._reshape_all([st.shape[:i] + (st.shape[i] * st.shape[i + 1],) + st.shape[i + 2:] for st in self.sts])
      del self.axis_kinds[i + 1]

  def _mergeable(self, i: int) -> bool:
    for st in self.sts:
      merged = st.reshape(st.shape[:i] + (st.shape[i] * st.shape[i + 1],) + st.shape[i + 2:])
      if len(merged.views) > len(st.views): return False
      if (st.shape[i] == 1) != (st.shape[i + 1] == 1): return False   # an output's reduced dim stays 1
    return True

  def st_of(self, view: UOp) -> ShapeTracker: return self.sts[self.views.index(view)]

  # ---- optimization actions ----
  def apply_opt(self, opt: Opt) -> None:
    """Split `opt.amount` off a global (UPCAST) or reduce (UNROLL) dim into a new innermost unrolled dim."""
    if opt.op not in OPT_KINDS: raise KernelOptError(f"unknown optimization {opt.op!r}; known: {OPT_KINDS}")
    kind = "global" if opt.op == "UPCAST" else "reduce"
    candidates = [i for i, k in enumerate(self.axis_kinds) if k == kind]
    if not 0 <= opt.axis < len(candidates):
      raise KernelOptError(f"{opt}: axis {opt.axis} out of range, kernel {self.name} has {len(candidates)} {kind} dims {[self.full_shape[i] for i in candidates]}")
    axis = candidates[opt.axis]
    size = self.full_shape[axis]
    if opt.amount <= 1 or size % opt.amount != 0:
      raise KernelOptError(f"{opt}: amount {opt.amount} doesn't divide dim {opt.axis} of size {size} in kernel {self.name}")
    # split dim `axis` into (size/amount, amount) in every view, then move the amount part to the end
    self._reshape_all([st.shape[:axis] + ((st.shape[axis] // opt.amount, opt.amount) if st.shape[axis] != 1 else (1, 1)) + st.shape[axis + 1:]
                       for st in self.sts])
    self.axis_kinds.insert(axis + 1, "upcast" if opt.op == "UPCAST" else "unroll")
    order = [i for i in range(self.shape_len) if i != axis + 1] + [axis + 1]
    self._permute_all(order)
    if self.full_shape[axis] == 1:   # the whole dim went into the new one: drop the size-1 loop
      keep = [i for i in range(self.shape_len) if i != axis]
      self._reshape_all([tuple(st.shape[i] for i in keep) for st in self.sts])
      del self.axis_kinds[axis]
    self.applied_opts.append(opt)

  # ---- naming ----
  @property
  def name(self) -> str:
    """E_ for elementwise kernels, r_ for reduce kernels, then the loop sizes: r_64_64_64 is a matmul.
    Upcast/unrolled dims follow in the name too (E_4096_4 is 4096 loops of 4 unrolled/SIMD elements)."""
    prefix = "r" if self.reduce_axes else "E"
    dims = self.full_shape or (1,)
    return f"{prefix}_" + "_".join(str(d) for d in dims)
