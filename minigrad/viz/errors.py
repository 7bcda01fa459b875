"""Errors that point at the user's line: what a failing kernel computes, and which lines of the user's script asked for it.

Input: an exception raised while a schedule's kernel was compiled (rendered, compiled, BEAM-searched) or launched
(engine/realize.py's run_schedule), with the kernel's AST; or raised while the scheduler built the kernel of a tensor-
graph node (`add_node_context`). Output: a note added to the exception (Python's `add_note`, printed under the message
in the traceback; on Python 3.10 appended to the message), naming
  - the kernel (its place in the schedule) and the tensor ops it computes, each with the line of the user's script
    that created it, when source lines were captured (VIZ=1, PROFILE=1, DEBUG>=3);
  - else the ops of its AST and how to see those lines ("run with DEBUG=3 ...");
  - in both cases, the user's line that asked for the result (found now, on the error path, where it costs nothing).
The exception keeps its type, so callers catching it are not affected.
"""
from __future__ import annotations
from minigrad.uop.ops import UOp, Ops, GroupOp
from minigrad.viz import boundaries, kernel_comments, source

HOW_TO_SEE_LINES = "run with DEBUG=3 (or VIZ=1) to see the lines of your script that created these ops"
MAX_OPS = 8


def add_note(error: BaseException, text: str) -> None:
  """`text` under the exception's message (Python 3.11's add_note; before it, appended to a string message)."""
  if hasattr(error, "add_note"): error.add_note(text)
  elif error.args and isinstance(error.args[0], str): error.args = (f"{error.args[0]}\n{text}",) + error.args[1:]


def add_kernel_context(error: BaseException, ast: UOp, stage: str, index: int, count: int, device: str) -> None:
  """Note on `error` (raised while `stage`, "compiling" or "running", kernel `index` of a schedule of `count` kernels
  on `device`) what that kernel computes and the user's lines behind it; once (an inner schedule's note is kept)."""
  if any(note.startswith("minigrad: while") for note in getattr(error, "__notes__", ())): return
  add_note(error, "\n".join([f"minigrad: while {stage} kernel {index + 1} of {count} on {device}, which computes:"] +
                            [f"  {line}" for line in kernel_lines(ast)] + _asked_here()))


def add_node_context(error: BaseException, node: UOp) -> None:
  """Note on `error` (raised while scheduling `node`, a tensor-graph node) the op and the user's line that created it."""
  where = source.created_at.get(node)
  if where is not None: what = f"  {source.op_name(where) or node.op.name} ({node.op.name} {node.dtype.name} {node.shape}), created at {where}"
  else: what = f"  {node.op.name} {node.dtype.name} {node.shape} ({HOW_TO_SEE_LINES})"
  add_note(error, "\n".join(["minigrad: while scheduling the kernel of this tensor op:", what] + _asked_here()))


def kernel_lines(ast: UOp) -> list[str]:
  """The kernel's ops by the user's line that created them ("train.py:12 y = x.exp()   [exp]"), or its AST's ops and
  how to see those lines when they were not captured."""
  labels = kernel_comments.labels_of(ast)
  ops_by_place: dict[str, dict[str, None]] = {}
  for node in ast.toposort:   # the kernel's ops in the order they compute
    op, _, place = labels.get(node, "").rpartition("  ")
    if op: ops_by_place.setdefault(place, {})[op] = None
  lines = [f"{line}   [{', '.join(ops_by_place[line.place])}]" for line in boundaries.lines_of(ast) if line.place in ops_by_place]
  if lines: return lines
  ops = [f"{n.arg[0].name} reduce over axes {n.arg[1]}" if n.op is Ops.REDUCE_AXIS else n.op.name
         for n in ast.toposort if n.op is Ops.REDUCE_AXIS or n.op in GroupOp.Elementwise]
  distinct = list(dict.fromkeys(ops))
  shown = ", ".join(distinct[:MAX_OPS]) + (f" and {len(distinct) - MAX_OPS} more" if len(distinct) > MAX_OPS else "")
  outputs = ", ".join(f"{store.src[-1].dtype.name}{list(store.src[1].arg.shape) if store.src[1].op is Ops.VIEW else ''}" for store in ast.src)
  return [f"{shown or 'a copy'} into {outputs}", f"({HOW_TO_SEE_LINES})"]


def _asked_here() -> list[str]:
  where = source.user_line()
  return [] if where is None else [f"  asked for at {where}"]
