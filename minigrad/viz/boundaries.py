"""Why each kernel starts and ends where it does: the scheduler's fusion decisions, in words, per kernel AST.

Input: from the scheduler (minigrad/schedule/scheduler.py), for each schedule it builds: the realized nodes in run
order, the buffer each one is stored in, the reasons it gave for realizing each (see `_Fusion`), and the final
ScheduleItems (after operand packing and multi-output merging). Output: `reasons_of(ast)`, the `kernel boundary:`
lines of a kernel, and `lines_of(ast)`, the user's source lines whose ops it computes (when `viz.capturing` is on;
then minigrad.viz.kernel_comments also labels the kernel's nodes with their ops, for comments in its source).

Both tables are keyed by the kernel AST, not by the ScheduleItem: a schedule replayed for a graph of a structure
seen before (minigrad/schedule/reuse.py) rebuilds its items from the same ASTs, so their reasons carry over. Neither
is part of any cache key. The MAX_KERNELS most recently scheduled kernels are kept.
"""
from __future__ import annotations
from minigrad import viz
from minigrad.uop.ops import UOp, Ops
from minigrad.viz import kernel_comments, source

MAX_KERNELS = 4096
kernel_reasons: dict[UOp, tuple[str, ...]] = {}
kernel_lines: dict[UOp, tuple[source.SourceLine, ...]] = {}


def requested() -> str:
  """The reason of a node the user asked for; with `viz.capturing` on, which call on which line asked."""
  where = source.user_line() if viz.capturing else None
  if where is None: return "realized by the user (Tensor.realize, .numpy(), .item(), .to(device) ...)"
  call = f".{where.call}()" if where.call else "a call"
  device = ": a copy to another device" if where.call == "to" else ""
  return f"realized by the user: {call} at {where}{device}"


def members(root: UOp, realized: dict[UOp, None]) -> list[UOp]:
  """The tensor-graph nodes fused into `root`'s kernel: those reached from it before a realized node or a buffer."""
  found, stack = {root: None}, list(root.src)
  while stack:
    node = stack.pop()
    if node in found or node in realized or node.op in (Ops.BUFFER, Ops.DEVICE): continue
    found[node] = None
    stack.extend(node.src)
  return list(found)


def record_schedule(items: list, order: list[UOp], buffers: dict[UOp, UOp], reasons: dict[UOp, dict[str, None]]) -> dict[UOp, list[UOp]] | None:
  """Turn the scheduler's per-node reasons into per-kernel lines (and, with `viz.capturing`, source lines). `order`:
  the realized nodes (the keys of `reasons`), `buffers`: node -> the BUFFER it is stored in. Returns each realized
  node's fused nodes when capturing (the report draws them), else None."""
  node_of = {buffers[n]: n for n in order}
  written_by: dict[UOp, int] = {}
  fused = {n: members(n, reasons) for n in order} if viz.capturing else None
  for index, item in enumerate(items):
    outputs = item.bufs[:item.outputs]
    lines = [f"{len(outputs)} elementwise kernels over the same elements merged into one with {len(outputs)} outputs"] if len(outputs) > 1 else []
    for buffer in outputs:
      if (node := node_of.get(buffer)) is None: lines.append("output: a packed copy of a matmul operand, laid out in panels for the next kernel")
      else: lines.extend(f"output: {reason}" for reason in reasons[node])
    for slot, buffer in enumerate(item.bufs[item.outputs:], start=item.outputs):
      if buffer in written_by: lines.append(f"input data{slot}: written by kernel {written_by[buffer] + 1} of this schedule")
      else: lines.append(f"input data{slot}: a buffer the user gave or an earlier schedule wrote")
    for buffer in outputs: written_by[buffer] = index
    _keep(kernel_reasons, item.ast, tuple(dict.fromkeys(lines)))   # a merged kernel's outputs may share reasons
    if fused is not None:
      _keep(kernel_lines, item.ast, tuple(source.lines_of(u for b in outputs if (n := node_of.get(b)) is not None for u in fused[n])))
      kernel_comments.record(item.ast, [node_of.get(b) for b in outputs], reasons)
  return fused


def _keep(table: dict, ast: UOp, value: tuple) -> None:
  table.pop(ast, None)
  table[ast] = value   # the most recent last
  while len(table) > MAX_KERNELS: del table[next(iter(table))]


def reasons_of(ast: UOp) -> tuple[str, ...]: return kernel_reasons.get(ast, ())
def lines_of(ast: UOp) -> tuple[source.SourceLine, ...]: return kernel_lines.get(ast, ())
