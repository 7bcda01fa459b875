"""BEAM search, the device-free half: which actions to try on a kernel, and a stable text key for a kernel AST.

Input: a `Kernel` (an AST plus the actions applied so far). Output: `child_kernels(kernel)`, the kernels that
one more action makes, and `ast_key(ast)`, a deterministic printout of a kernel AST for the on-disk cache of
search results. Compiling and timing the candidates needs a device; that half is minigrad/engine/search.py.

Actions are enumerated from `OPT_KINDS` (every kind x loop dim x amount) and `Kernel.apply_opt` refuses the
ones that don't fit this kernel (KernelOptError), so a new kind of action joins the search by being added there.
"""
from __future__ import annotations
from minigrad.codegen.kernel import Kernel, KernelOptError, Opt, OPT_KINDS
from minigrad.helpers import prod
from minigrad.uop.ops import UOp

# amounts tried for a split-like action (UPCAST, UNROLL, LOCAL, GROUP ...): apply_opt drops those not dividing the dim
SPLIT_AMOUNTS = tuple(range(2, 17)) + (32,)
# kinds whose amount means something else
AMOUNTS_OF_KIND = {
  "PADTO": (4, 8, 16, 32),   # pad a dim up to a multiple of a vector width / unroll size
}
AXIS_AMOUNT_KINDS = ("SWAP",)   # the amount is a second axis
# the largest product of upcast/unroll dims: past it the unrolled code grows faster than it speeds up
MAX_UNROLLED = 256


def amounts_for(kind: str, kernel: Kernel) -> tuple[int, ...]:
  if kind in AXIS_AMOUNT_KINDS: return tuple(range(kernel.shape_len))
  return AMOUNTS_OF_KIND.get(kind, SPLIT_AMOUNTS)


def actions(kernel: Kernel) -> list[Opt]:
  """Every action to try on `kernel`, most of which `apply_opt` will refuse: each kind x loop dim x amount."""
  return [Opt(kind, axis, amount) for kind in OPT_KINDS for axis in range(kernel.shape_len) for amount in amounts_for(kind, kernel)]


def unrolled_size(kernel: Kernel) -> int:
  """How many copies of the loop body the upcast/unroll dims make."""
  return prod(size for size, kind in zip(kernel.full_shape, kernel.axis_kinds) if kind in ("upcast", "unroll"))


def kernel_signature(kernel: Kernel) -> tuple:
  """Two kernels with equal signatures lower to the same code, whatever actions led there."""
  return (tuple(kernel.full_shape), tuple(kernel.axis_kinds), tuple(kernel.sts))


def child_kernels(kernel: Kernel) -> list[Kernel]:
  """The kernels one more action makes from `kernel` (each a copy), without repeats and without ones that unroll
  the body more than MAX_UNROLLED times."""
  children: dict[tuple, Kernel] = {}
  for opt in actions(kernel):
    child = kernel.copy()
    try: child.apply_opt(opt)
    except KernelOptError: continue
    if unrolled_size(child) > MAX_UNROLLED: continue
    children.setdefault(kernel_signature(child), child)
  return list(children.values())


def ast_key(ast: UOp) -> str:
  """A printout of a kernel AST that is the same in every process: one line per node in dependency order, with
  op, dtype, sources (by line number) and arg (ShapeTrackers, dtypes and constants print their values)."""
  numbers: dict[UOp, int] = {}
  lines = []
  for node in ast.toposort:
    numbers[node] = len(numbers)
    lines.append(f"{node.op.name} {node.dtype!r} ({','.join(str(numbers[s]) for s in node.src)}) {node.arg!r}")
  return "\n".join(lines)
