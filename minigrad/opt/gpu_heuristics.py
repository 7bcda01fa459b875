"""Hand-written optimization choices for GPU-shaped devices (CL, CUDA, PYTHON): workgroups and grouped reductions.

Input: a fresh `Kernel` for a device with local memory. Output: the same kernel with LOCAL/GROUP actions applied.
  - a reduction with little output to spread over threads (a full sum, a few rows) is GROUPed: the threads of a
    workgroup each sum a strided part and combine their partial sums in local memory (not a one-hot pick, which
    the lowerer makes a single load);
  - the innermost global dims get LOCAL threads (up to 16 each, 256 in all), so a workgroup covers a tile.
"""
from __future__ import annotations
from minigrad.helpers import prod
from minigrad.uop.ops import Ops, one_hot_pick
from minigrad.codegen.kernel import Kernel, Opt

GROUP_SIZES = (256, 128, 64, 32, 16, 8, 4, 2)
LOCAL_SIZES = (16, 8, 4, 2)
MAX_THREADS = 256
SMALL_OUTPUT = 2048   # below this many outputs a reduction is spread over workgroup threads


def gpu_optimizations(k: Kernel) -> None:
  if not k.full_shape: return
  reduces = k.axes_of("reduce")
  reduce_nodes = [n for n in k.ast.toposort if n.op is Ops.REDUCE_AXIS]
  # a one-hot pick (an embedding, a gather) is one load once lowered: nothing to share out
  if reduces and len(reduce_nodes) == 1 and one_hot_pick(reduce_nodes[0]) is None and prod(k.global_dims) <= SMALL_OUTPUT:
    size = k.full_shape[reduces[-1]]
    amount = next((g for g in GROUP_SIZES if size % g == 0 and size // g >= 4), None)
    if amount is not None: k.apply_opt(Opt("GROUP", len(reduces) - 1, amount))
  threads = prod(k.full_shape[a] for a in k.axes_of("group"))
  for axis in reversed(range(len(k.axes_of("global")))[-2:]):
    size = k.full_shape[k.axes_of("global")[axis]]
    amount = next((l for l in LOCAL_SIZES if size % l == 0 and threads * l <= MAX_THREADS), None)
    if amount is None: continue
    k.apply_opt(Opt("LOCAL", axis, amount))
    threads *= amount
