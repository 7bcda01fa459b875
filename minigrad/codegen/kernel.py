"""A Kernel: one kernel AST plus the shape of its loop nest, and the optimization actions that reshape it.

Input: a kernel AST from the scheduler (SINK of STORE, every VIEW of the same rank). Output: a `Kernel` whose
`full_shape` lists the loop sizes and whose `axis_kinds` say what each dim becomes:
  "global"  an output loop (on CPU the outermost one is split across threads; on GPUs a grid dim: gidx)
  "local"   a piece of a global dim run by the threads of one workgroup (GPU lidx; on CPU just an inner loop)
  "group"   a piece of a reduce dim shared out to the threads of a workgroup, whose partial results meet in
            local memory (GPU only)
  "reduce"  a loop a REDUCE accumulates over
  "upcast"  a piece of a global dim, unrolled in the kernel body (the innermost one becomes SIMD lanes)
  "unroll"  a piece of a reduce dim, unrolled in the loop body
Dims are kept in that order: globals, locals, groups, reduces, then upcast/unroll dims in the order they were made.
All ShapeTrackers (`sts`) are reshaped/permuted together, so every buffer keeps seeing the same loop nest.

Shape simplification keeps the loop nest small and the names meaningful: size-1 dims are dropped, reduce
dims are moved last, and neighbouring dims merge when every buffer sees them as one (so a contiguous
1024x1024 elementwise op becomes a single loop of 1048576).
"""
from __future__ import annotations
import copy
from dataclasses import dataclass
from minigrad.uop.ops import UOp, Ops
from minigrad.uop.shapetracker import ShapeTracker, View
from minigrad.target import Target, cpu_target

VIEW_HOLDERS = (Ops.LOAD, Ops.STORE, Ops.CONST, Ops.VALID, Ops.ARANGE)
OPT_KINDS = ("UPCAST", "UNROLL", "LOCAL", "GROUP", "GROUPTOP", "PADTO", "SWAP")
KIND_ORDER = ("global", "local", "group", "reduce")   # the loop dims, in this order; upcast/unroll dims follow
# ops f with f(0, 0, ...) == 0: padding a reduce dim with zeros leaves a sum unchanged if only these sit between
# the padded leaves (which load/give 0 outside their mask) and the sum
ZERO_PRESERVING = {Ops.ADD, Ops.MUL, Ops.NEG, Ops.MAX, Ops.WHERE, Ops.CAST, Ops.CMPLT, Ops.CMPNE, Ops.AND, Ops.OR,
                   Ops.XOR, Ops.LOAD, Ops.CONST, Ops.VALID, Ops.ARANGE, Ops.VIEW, Ops.DEFINE_GLOBAL}


@dataclass(frozen=True)
class Opt:
  """One optimization action on the dims of one kind (`axis` counts among those dims only):
    UPCAST   split `amount` off global dim `axis` into an unrolled/SIMD dim
    UNROLL   the same for reduce dim `axis`
    LOCAL    split `amount` off global dim `axis` into a local dim (threads of a GPU workgroup)
    GROUP    share reduce dim `axis` among `amount` threads of a workgroup, thread t taking elements t, t+amount, ...
    GROUPTOP the same, thread t taking the t-th contiguous chunk
    PADTO    pad loop dim `axis` (counting all loop dims) up to a multiple of `amount`; the padding is masked
    SWAP     exchange global dims `axis` and `amount`"""
  op: str
  axis: int
  amount: int

  def __repr__(self) -> str: return f"Opt({self.op}, {self.axis}, {self.amount})"


class KernelOptError(ValueError):
  """An optimization action that doesn't fit the kernel (axis out of range, amount not dividing the dim ...)."""


class Kernel:
  def __init__(self, ast: UOp, has_local: bool = False, target: Target | None = None):
    """`has_local`: the target device has workgroups with local memory (GPU-shaped), which GROUP needs. `target`:
    the CPU the kernel is compiled for, which the optimizer's policy reads (None: `minigrad.target.cpu_target()`,
    the CPU and LLVM devices' Target, looked up when first asked)."""
    if ast.op is not Ops.SINK: raise ValueError(f"a kernel AST must be a SINK, got {ast.op}")
    self.ast, self.has_local, self._target = ast, has_local, target
    self.applied_opts: list[Opt] = []
    # indices into `sts` whose only mask is PADTO's padding of output dims: what they load there reaches only
    # padded outputs, which are never stored, so the lowerer may read any in-bounds element instead of gating the load
    self.padding_only: set[int] = set()
    holders = [n for n in ast.toposort if n.op in VIEW_HOLDERS and any(s.op is Ops.VIEW for s in n.src)]
    self.views: list[UOp] = list(dict.fromkeys(s for n in holders for s in n.src if s.op is Ops.VIEW))
    self.sts: list[ShapeTracker] = [v.arg for v in self.views]
    ranks = {len(st.shape) for st in self.sts}
    if len(ranks) != 1: raise RuntimeError(f"kernel views disagree on rank: {[st.shape for st in self.sts]}")
    # variable-length loops (symbolic shapes): per dim the size expression the loop runs to, None for a fixed size.
    # The trackers keep only their integer part (the largest size): the index math is the same for every length.
    self.extents: list[UOp | None] = _loop_extents(self.sts)
    self.sts = [st.with_extents(None) for st in self.sts]
    reduce_axes = {a for n in ast.toposort if n.op is Ops.REDUCE_AXIS for a in n.arg[1]}
    self.axis_kinds: list[str] = ["reduce" if i in reduce_axes else "global" for i in range(len(self.sts[0].shape))]
    self.output_view = next(s for n in ast.toposort if n.op is Ops.STORE for s in n.src if s.op is Ops.VIEW)
    self._simplify_shape()

  @property
  def target(self) -> Target:
    """The CPU Target this kernel is optimized for."""
    if self._target is None: self._target = cpu_target()
    return self._target

  # ---- shape bookkeeping ----
  @property
  def full_shape(self) -> tuple[int, ...]:
    return tuple(max(dims) for dims in zip(*(st.shape for st in self.sts))) if self.sts and self.sts[0].shape else ()

  @property
  def shape_len(self) -> int: return len(self.full_shape)

  @property
  def reduce_axes(self) -> set[int]: return {i for i, kind in enumerate(self.axis_kinds) if kind in ("reduce", "unroll")}

  def axes_of(self, kind: str) -> list[int]: return [i for i, k in enumerate(self.axis_kinds) if k == kind]

  @property
  def first_reduce(self) -> int:
    """Index of the first group/reduce dim (== the number of global and local dims: the output loops)."""
    return sum(1 for kind in self.axis_kinds if kind in ("global", "local"))

  @property
  def first_upcast(self) -> int:
    """Index of the first upcast/unroll dim (== the number of loops)."""
    return sum(1 for kind in self.axis_kinds if kind in KIND_ORDER)

  @property
  def global_dims(self) -> tuple[int, ...]: return self.full_shape[:self.first_reduce]

  @property
  def output_st(self) -> ShapeTracker: return self.st_of(self.output_view)

  def _permute_all(self, order: list[int]) -> None:
    self.sts = [st.permute(tuple(order)) for st in self.sts]
    self.axis_kinds = [self.axis_kinds[i] for i in order]
    self.extents = [self.extents[i] for i in order]

  @property
  def symbolic(self) -> bool:
    """Does some loop run to a Variable's value (a symbolic shape)?"""
    return any(e is not None for e in self.extents)

  def _reshape_all(self, shape_of: list[tuple[int, ...]]) -> None:
    self.sts = [st.reshape(shape) for st, shape in zip(self.sts, shape_of)]

  def _simplify_shape(self) -> None:
    # 1. reduce dims last (stable)
    order = [i for i, k in enumerate(self.axis_kinds) if k == "global"] + [i for i, k in enumerate(self.axis_kinds) if k == "reduce"]
    if order != list(range(len(order))): self._permute_all(order)
    # 2. drop size-1 dims
    keep = [i for i, d in enumerate(self.full_shape) if d != 1 or self.extents[i] is not None]
    if len(keep) != self.shape_len:
      self._reshape_all([tuple(st.shape[i] for i in keep) for st in self.sts])
      self.axis_kinds = [self.axis_kinds[i] for i in keep]
      self.extents = [self.extents[i] for i in keep]
    # 3. merge neighbouring dims of the same kind when no ShapeTracker grows a view
    i = 0
    while i + 1 < self.shape_len:
      if self.axis_kinds[i] != self.axis_kinds[i + 1] or not self._mergeable(i):
        i += 1
        continue
      if self.extents[i] is not None: self.extents[i] = (self.extents[i] * self.full_shape[i + 1]).simplify()
      self._reshape_all([st.shape[:i] + (st.shape[i] * st.shape[i + 1],) + st.shape[i + 2:] for st in self.sts])
      del self.axis_kinds[i + 1]
      del self.extents[i + 1]

  def _mergeable(self, i: int) -> bool:
    # a variable-length dim merges only with the fixed dims inside it: (pos, 64) is the prefix pos*64 of the layout
    if self.extents[i + 1] is not None: return False
    for st in self.sts:
      merged = st.reshape(st.shape[:i] + (st.shape[i] * st.shape[i + 1],) + st.shape[i + 2:])
      if len(merged.views) > len(st.views): return False
      if (st.shape[i] == 1) != (st.shape[i + 1] == 1): return False   # an output's reduced dim stays 1
    return True

  def st_of(self, view: UOp) -> ShapeTracker: return self.sts[self.views.index(view)]

  def copy(self) -> Kernel:
    """A copy whose actions don't change this kernel: its lists, dicts and sets are copied, the immutable values shared."""
    new = copy.copy(self)
    for name, value in vars(self).items():
      if isinstance(value, (list, dict, set)): setattr(new, name, copy.copy(value))
    return new

  # ---- optimization actions ----
  def apply_opt(self, opt: Opt) -> None:
    """Apply one action (see `Opt`), or raise KernelOptError saying why it doesn't fit this kernel."""
    if opt.op not in OPT_KINDS: raise KernelOptError(f"unknown optimization {opt.op!r}; known: {OPT_KINDS}")
    if opt.op == "PADTO": self._pad_to(opt)
    elif opt.op == "SWAP": self._swap(opt)
    else:
      kind = "global" if opt.op in ("UPCAST", "LOCAL") else "reduce"
      if opt.op in ("GROUP", "GROUPTOP"):
        if not self.has_local: raise KernelOptError(f"{opt}: GROUP needs a device with workgroups and local memory (CL, CUDA, PYTHON)")
        if sum(1 for n in self.ast.toposort if n.op is Ops.REDUCE_AXIS) != 1:
          raise KernelOptError(f"{opt}: GROUP needs a kernel with exactly one reduction, {self.name} has another")
        if self.axes_of("group"): raise KernelOptError(f"{opt}: kernel {self.name} is already grouped")
        if any(self.extents[a] is not None for a in self.axes_of("global")):   # that global dim is a loop in each thread
          raise KernelOptError(f"{opt}: kernel {self.name} has a variable-length output dim; its threads can't share local memory across it")
      axis = self._axis(opt, kind)
      new_kind = {"UPCAST": "upcast", "UNROLL": "unroll", "LOCAL": "local", "GROUP": "group", "GROUPTOP": "group"}[opt.op]
      self._split(axis, opt, new_kind, amount_outside=opt.op == "GROUPTOP")
    self.applied_opts.append(opt)

  def _axis(self, opt: Opt, kind: str) -> int:
    candidates = self.axes_of(kind)
    if not 0 <= opt.axis < len(candidates):
      raise KernelOptError(f"{opt}: axis {opt.axis} out of range, kernel {self.name} has {len(candidates)} {kind} dims {[self.full_shape[i] for i in candidates]}")
    return candidates[opt.axis]

  def _split(self, axis: int, opt: Opt, new_kind: str, amount_outside: bool = False) -> None:
    """Split `opt.amount` off dim `axis` into a new dim of `new_kind`, placed where its kind goes. The amount is the
    inner (fast) part of the index, or with `amount_outside` the outer part."""
    size = self.full_shape[axis]
    if self.extents[axis] is not None: raise KernelOptError(f"{opt}: dim {opt.axis} of kernel {self.name} has a variable length")
    if opt.amount <= 1 or size % opt.amount != 0:
      raise KernelOptError(f"{opt}: amount {opt.amount} doesn't divide dim {opt.axis} of size {size} in kernel {self.name}")
    parts = (opt.amount, size // opt.amount) if amount_outside else (size // opt.amount, opt.amount)
    self._reshape_all([st.shape[:axis] + (parts if st.shape[axis] != 1 else (1, 1)) + st.shape[axis + 1:] for st in self.sts])
    new_axis = axis if amount_outside else axis + 1
    self.axis_kinds.insert(new_axis, new_kind)
    self.extents.insert(new_axis, None)
    # move the new dim to the end of its kind's block (upcast/unroll dims go last)
    rest = [i for i in range(self.shape_len) if i != new_axis]
    if new_kind in KIND_ORDER:
      rank = KIND_ORDER.index(new_kind)
      position = sum(1 for i in rest if self.axis_kinds[i] in KIND_ORDER[:rank + 1])
    else: position = len(rest)
    self._permute_all(rest[:position] + [new_axis] + rest[position:])
    # the whole dim went into the new one: drop the size-1 leftover
    leftover = [i for i in range(self.shape_len) if self.full_shape[i] == 1 and self.extents[i] is None]
    if leftover:
      keep = [i for i in range(self.shape_len) if i not in leftover]
      self._reshape_all([tuple(st.shape[i] for i in keep) for st in self.sts])
      self.axis_kinds = [self.axis_kinds[i] for i in keep]
      self.extents = [self.extents[i] for i in keep]

  def _swap(self, opt: Opt) -> None:
    globals_ = self.axes_of("global")
    if not (0 <= opt.axis < len(globals_) and 0 <= opt.amount < len(globals_)) or opt.axis == opt.amount:
      raise KernelOptError(f"{opt}: SWAP needs two different global dims below {len(globals_)} in kernel {self.name}")
    order = list(range(self.shape_len))
    a, b = globals_[opt.axis], globals_[opt.amount]
    order[a], order[b] = order[b], order[a]
    self._permute_all(order)

  def _pad_to(self, opt: Opt) -> None:
    if not 0 <= opt.axis < self.first_upcast:
      raise KernelOptError(f"{opt}: axis {opt.axis} out of range, kernel {self.name} has {self.first_upcast} loop dims")
    size = self.full_shape[opt.axis]
    if self.extents[opt.axis] is not None: raise KernelOptError(f"{opt}: dim {opt.axis} of kernel {self.name} has a variable length")
    if opt.amount <= 1: raise KernelOptError(f"{opt}: amount must be > 1")
    padded = -(-size // opt.amount) * opt.amount
    if padded == size: raise KernelOptError(f"{opt}: dim {opt.axis} of size {size} is already a multiple of {opt.amount}")
    if padded > 2 * size: raise KernelOptError(f"{opt}: padding dim {opt.axis} from {size} to {padded} more than doubles it")
    if self.axis_kinds[opt.axis] in ("reduce", "group"):
      reduces = [n for n in self.ast.toposort if n.op is Ops.REDUCE_AXIS]
      if any(r.arg[0] is not Ops.ADD for r in reduces) or any(n.op not in ZERO_PRESERVING for r in reduces for n in r.src[0].toposort):
        raise KernelOptError(f"{opt}: padding a reduce dim is only exact for a sum of ops that keep zeros zero")
    padding = tuple((0, padded - size) if i == opt.axis else (0, 0) for i in range(self.shape_len))
    stored = {n.src[1] for n in self.ast.toposort if n.op is Ops.STORE}
    output_dim = self.axis_kinds[opt.axis] not in ("reduce", "group")
    for i, (view, st) in enumerate(zip(self.views, self.sts)):
      if st.shape[opt.axis] == 1: continue
      if view not in stored and (longer := self._broadcast_longer(st, opt.axis, padded)) is not None:
        self.sts[i] = longer
        continue
      if output_dim and view not in stored and (i in self.padding_only or all(v.mask is None for v in st.views)): self.padding_only.add(i)
      else: self.padding_only.discard(i)
      self.sts[i] = st.pad(padding)

  def _broadcast_longer(self, st: ShapeTracker, axis: int, padded: int) -> ShapeTracker | None:
    """A load that reads the same element all along an output dim (stride 0, unmasked) needs no mask where that dim
    is padded: its index stays in bounds, and the stores drop the padded outputs. Saves a gate per load in the inner
    loop (a matmul's B operand along the padded rows of A). None where a mask is needed."""
    last = st.views[-1]
    if self.axis_kinds[axis] in ("reduce", "group") or last.strides[axis] != 0 or (last.mask is not None and last.mask[axis] != (0, last.shape[axis])):
      return None
    shape = last.shape[:axis] + (padded,) + last.shape[axis + 1:]
    mask = None if last.mask is None else last.mask[:axis] + ((0, padded),) + last.mask[axis + 1:]
    return st.with_views(st.views[:-1] + (View.create(shape, last.strides, last.offset, mask),))

  # ---- naming ----
  @property
  def name(self) -> str:
    """E_ for elementwise kernels, r_ for reduce kernels, then the loop sizes: r_64_64_64 is a matmul.
    Upcast/unrolled dims follow in the name too (E_4096_4 is 4096 loops of 4 unrolled/SIMD elements)."""
    prefix = "r" if self.reduce_axes else "E"
    dims = self.full_shape or (1,)
    return f"{prefix}_" + "_".join(str(d) for d in dims)


def _loop_extents(sts: list[ShapeTracker]) -> list[UOp | None]:
  """Per dim the variable length the kernel's views agree on (None: fixed). Views without one on a dim read it at
  its largest size, which is the same layout."""
  rank = len(sts[0].shape) if sts else 0
  out: list[UOp | None] = [None] * rank
  for st in sts:
    for d, e in enumerate(st.extents or ()):
      if e is None: continue
      if out[d] is not None and out[d] is not e.simplify():
        raise RuntimeError(f"internal error: the views of a kernel disagree on the length of dim {d}: {out[d]} vs {e}")
      out[d] = e.simplify()
  return out
