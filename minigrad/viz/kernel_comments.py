"""Kernels that name their ops: which tensor op, asked for on which line of the user's script, each piece of a kernel
computes, written as comments into its source (`/* exp  train.py:12 */`).

Input, in two steps, both only while `minigrad.viz.capturing` is on (VIZ=1, PROFILE=1, DEBUG>=3):
  1. at schedule time (boundaries.record_schedule), each kernel AST and the tensor-graph node each of its outputs
     computes. The AST was built from those nodes one for one (schedule/scheduler.py's _KernelBuilder: an ALU or
     REDUCE_AXIS node becomes the same op over its sources' kernel nodes, a VIEW disappears into its source, a
     realized node becomes a LOAD), so walking both from each STORE pairs them; an AST node gets the op name and
     line of its tensor node (source.created_at), or of its nearest labelled consumer (the polynomial inside `exp`
     is labelled "exp"). `labels_of(ast)` keeps that table.
  2. at render time, the kernel's linearized uops (after lowering, SIMD vectorization and linearization). They are
     paired with the AST the same way, from each STORE down: equal ops pair their sources; GEP/VECTORIZE (SIMD lanes)
     and casts are seen through; an accumulator (DEFINE_ACC, its ASSIGNs and the ops combining it) is its REDUCE_AXIS;
     an op that lowering rewrote takes the label of the AST node it came from. `notes_for(ast, uops)` -> uop: label.
Output: `commented_source(ast, renderer, name, uops, source)`: the source rendered again with those labels as
comments (C, OpenCL, CUDA: `/* ... */` lines; LLVM IR: `; ...` lines; PYTHON: `# ...` lines), or `source` when there
is nothing to say.

Costs nothing when capture is off: nothing is recorded, and the source that is compiled, cached on disk and keyed is
always the one rendered without comments (engine/realize.py); the commented text is only shown (DEBUG>=4, the VIZ
report) and is the same program.
"""
from __future__ import annotations
from typing import Any
from minigrad.uop.ops import UOp, Ops, GroupOp
from minigrad.viz import source

MAX_KERNELS = 4096
kernel_labels: dict[UOp, dict[UOp, str]] = {}   # kernel AST -> {AST node: "exp  train.py:12"}, the most recent last
LEAVES = (Ops.CONST, Ops.DEFINE_GLOBAL, Ops.DEFINE_VAR, Ops.DEFINE_LOCAL, Ops.SPECIAL, Ops.RANGE, Ops.INDEX, Ops.VALID,
          Ops.ARANGE, Ops.VIEW)


def label(where: source.SourceLine) -> str:
  """ "softmax: max  train.py:12" (the op, two spaces, the place), or the place alone when the op is unknown."""
  name = source.op_name(where)
  return f"{name}  {where.place}" if name else where.place


# ---------------------------------------------------------------- 1. tensor graph -> kernel AST

def record(ast: UOp, roots: list[UOp | None], realized: Any) -> None:
  """Label the nodes of `ast` (a SINK of one STORE per output) from `roots`, the tensor-graph node each STORE stores
  (None: no tensor node, e.g. a packed matmul operand). `realized`: the nodes of the schedule that have buffers."""
  labels: dict[UOp, str] = {}
  for store, root in zip(ast.src, roots):
    if root is not None and store.op is Ops.STORE: _pair_with_graph(root, store.src[-1], realized, labels)
  kernel_labels.pop(ast, None)
  kernel_labels[ast] = labels
  while len(kernel_labels) > MAX_KERNELS: del kernel_labels[next(iter(kernel_labels))]


def _pair_with_graph(root: UOp, value: UOp, realized: Any, labels: dict[UOp, str]) -> None:
  stack: list[tuple[UOp, UOp, str]] = [(root.src[0] if root.op is Ops.CONTIGUOUS else root, value, "")]
  seen: set[tuple[UOp, UOp]] = set()
  while stack:
    node, kernel_node, inherited = stack.pop()
    if (node, kernel_node) in seen: continue
    seen.add((node, kernel_node))
    if node.op is Ops.VIEW and node.src:   # a movement op computes nothing: its source takes the consumer's label
      if kernel_node.op is Ops.WHERE and kernel_node.src[0].op is Ops.VALID:   # a padded view: valid.where(x, 0)
        if inherited: labels.setdefault(kernel_node, inherited)
        kernel_node = kernel_node.src[1]
      stack.append((node.src[0], kernel_node, inherited))
      continue
    if (node is not root and node in realized) or node.op in (Ops.BUFFER, Ops.CONST, Ops.ARANGE, Ops.DEVICE): continue
    if node.op is not kernel_node.op or len(node.src) != len(kernel_node.src): continue
    where = source.created_at.get(node)
    text = label(where) if where is not None else inherited
    if text: labels.setdefault(kernel_node, text)
    stack.extend((s, k, text) for s, k in zip(node.src, kernel_node.src))


def labels_of(ast: UOp) -> dict[UOp, str]: return kernel_labels.get(ast, {})


# ---------------------------------------------------------------- 2. kernel AST -> linearized uops

def notes_for(ast: UOp, uops: list[UOp]) -> dict[UOp, str]:
  """Linearized uop -> the label of the tensor op it computes (empty when the AST was not labelled)."""
  labels = labels_of(ast)
  if not labels: return {}
  stored = {store.src[0].arg: store.src[-1] for store in ast.src if store.op is Ops.STORE}
  assigns: dict[UOp, list[UOp]] = {}
  data: set[UOp] = set()   # uops computed from memory or an accumulator (not index math, not broadcast constants)
  for u in uops:
    if u.op is Ops.ASSIGN: assigns.setdefault(u.src[0], []).append(u)
    if u.op in (Ops.LOAD, Ops.DEFINE_ACC) or any(s in data for s in u.src): data.add(u)
  # uop -> (how sure, label): 3 paired with an AST node of the same op, 2 a SIMD lane shuffle or accumulator write of
  # such a pairing, 1 a uop lowering made out of a node's computation (the closest labelled node's label)
  found: dict[UOp, tuple[int, str]] = {}
  def note(uop: UOp, sure: int, text: str) -> None:
    if text and (uop in data or sure == 3) and found.get(uop, (0, ""))[0] < sure: found[uop] = (sure, text)
  stack: list[tuple[UOp, UOp, str, bool]] = []   # (uop, AST node, the label inherited, paired exactly so far)
  for u in uops:
    if u.op is Ops.STORE and u.src[0].src[0].op is Ops.DEFINE_GLOBAL and (value := stored.get(u.src[0].src[0].arg)) is not None:
      note(u, 2, labels.get(value, ""))
      stack.append((u.src[1], value, labels.get(value, ""), True))
  seen: set[tuple[UOp, UOp]] = set()
  while stack:
    uop, node, inherited, paired = stack.pop()
    if (uop, node) in seen or uop.op in LEAVES: continue
    seen.add((uop, node))
    text = labels.get(node, inherited)
    if uop.op is Ops.LOAD:   # a grouped reduce's partials, read back from local memory after the barrier
      for store in (s for barrier in uop.src[1:] for s in barrier.src if s.op is Ops.STORE):
        note(store, 2 if paired else 1, text)
        stack.append((store.src[1], node, text, paired))
    elif uop.op in (Ops.GEP, Ops.VECTORIZE, Ops.ASSIGN):   # SIMD lanes and accumulator writes: what they hold
      note(uop, 2 if paired else 1, text)
      stack.extend((s, node, text, paired) for s in uop.src)
    elif uop.op is Ops.DEFINE_ACC:
      note(uop, 3 if node.op is Ops.REDUCE_AXIS else 1, text)
      stack.extend((a.src[1], node, text, paired) for a in assigns.get(uop, []))
    elif node.op is Ops.REDUCE_AXIS and (uop.op is node.arg[0] or uop.op is Ops.MULACC):   # combining into the accumulator
      note(uop, 3, text)
      for s in uop.src: stack.append((s, node, text, True) if _accumulator_side(s, node.arg[0]) else (s, node.src[0], text, True))
    elif uop.op is node.op and len(uop.src) == len(node.src):
      note(uop, 3, text)
      sources = node.src
      if uop.op in GroupOp.Commutative and len(sources) == 2 and _same_ops(uop.src, sources) < _same_ops(uop.src, sources[::-1]):
        sources = sources[::-1]   # canonical ordering swapped the operands
      stack.extend((s, n, text, True) for s, n in zip(uop.src, sources))
    elif uop in data:   # rewritten by lowering (a cast, folded constants, a fused multiply-add): part of `node`
      note(uop, 1, text)
      for s in uop.src: stack.append((s, next((n for n in node.src if n.op is s.op), node), text, False))
  return {uop: text for uop, (_, text) in found.items()}


def _accumulator_side(u: UOp, op: Ops) -> bool:
  """Is `u` the running value of a reduce by `op`: an accumulator, its lanes combined by `op`, or the partial results of
  a workgroup's threads (not the reduce's input)?"""
  stack, seen = [u], set()
  while stack:
    node = stack.pop()
    if node in seen: continue
    seen.add(node)
    if node.op is Ops.DEFINE_ACC: return True
    if node.op in (Ops.ASSIGN, Ops.GEP, Ops.VECTORIZE) or node.op is op: stack.extend(node.src)
    elif node.op is Ops.LOAD:   # a grouped reduce's partials, stored to local memory before the barrier
      stack.extend(store.src[1] for barrier in node.src[1:] for store in barrier.src if store.op is Ops.STORE)
  return False


def _same_ops(uops: tuple[UOp, ...], nodes: tuple[UOp, ...]) -> int: return sum(u.op is n.op for u, n in zip(uops, nodes))


# ---------------------------------------------------------------- the commented source

def commented_source(ast: UOp, renderer: Any, name: str, uops: list[UOp], plain: str) -> str:
  """`plain` (the source `renderer` made of `uops`) rendered again with the ops' labels as comments; `plain` when no
  label applies."""
  notes = notes_for(ast, uops)
  return renderer.render(name, uops, notes=notes) if notes else plain
