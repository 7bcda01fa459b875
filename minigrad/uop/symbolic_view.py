"""Movement ops on symbolic sizes: what a reshape, permute, expand, pad, shrink or flip does to the dims whose length
is a variable.

Input: a ShapeTracker's integer shape (each symbolic dim at its largest value), its `extents` (per dim the size
expression, a UOp over BIND/DEFINE_VAR, or None for a fixed size) and a movement op's argument, whose entries may be
size expressions. Output: the integer argument for the ordinary (integer) movement op, and the extents after it.
minigrad.uop.shapetracker applies both.

The integer part is exact for every value because a symbolic dim is laid out at its largest size: element i of a
dim of length `pos` sits where it would sit if the length were max. That holds through a permute, an expand of a
size-1 dim, a shrink to (start, pos), a pad before the data, and a reshape that keeps each symbolic dim the
outermost of the dims it merges with or splits into (rows of a (pos, 64) array flatten to the prefix pos*64 of the
longest layout; columns would not). A shrink may also start at a size expression when its length is fixed (a window,
`x[pos:pos+1]`): `split_starts` turns it into the window at 0, and the tracker adds start * stride to its symbolic
offset (the dim must be addressed by one stride). Everything else raises ValueError naming the op and the argument.
"""
from __future__ import annotations
from typing import Any, Sequence
from minigrad.helpers import prod
from minigrad.uop.ops import UOp, Ops
from minigrad.uop.variable import Variable, render

Extents = tuple  # per dim a size expression (UOp) or None


def has_symbolic(arg: Any) -> bool:
  """Does a movement argument (ints, pairs of ints, nested tuples) hold a size expression (a UOp or a Variable)?"""
  if isinstance(arg, (UOp, Variable)): return True
  return isinstance(arg, (tuple, list)) and any(has_symbolic(a) for a in arg)


def to_ir(arg: Any) -> Any:
  """The argument with each Variable as its UOp expression."""
  if isinstance(arg, Variable): return arg.uop
  return tuple(to_ir(a) for a in arg) if isinstance(arg, (tuple, list)) else arg


def _show(x: Any) -> str: return render(x) if isinstance(x, UOp) else repr(x)


def _shown(arg: Any) -> str:
  if isinstance(arg, (tuple, list)): return "(" + ", ".join(_shown(a) for a in arg) + ("," if len(arg) == 1 else "") + ")"
  return _show(arg)


def _top(x: Any) -> int: return int(x.vmax) if isinstance(x, UOp) else x


def _size_expr(x: UOp) -> UOp | None:
  """A size expression simplified; None when it is a constant after all."""
  x = x.simplify()
  return None if x.op is Ops.CONST else x


def _same(a: UOp, b: UOp) -> bool: return a.simplify() is b.simplify()


def move_extents(shape: tuple[int, ...], extents: Extents | None, how: str, arg: tuple) -> tuple[tuple, Extents]:
  """(the integer argument, the extents after the move) for `how(arg)` on a tracker of `shape` with `extents`."""
  ext = extents if extents is not None else (None,) * len(shape)
  arg = to_ir(arg)
  if how == "permute": return arg, tuple(ext[i] for i in arg)
  if how == "flip":
    for axis in arg:
      if ext[axis % len(shape)] is not None:
        raise ValueError(f"flip: dim {axis} has the symbolic size {_show(ext[axis % len(shape)])}; flipping a variable-length dim is not supported")
    return arg, ext
  if how == "expand": return _expand(shape, ext, arg)
  if how == "pad": return _pad(shape, ext, arg)
  if how == "shrink": return _shrink(shape, ext, arg)
  if how == "reshape": return _reshape(shape, ext, arg)
  raise ValueError(f"unknown movement op {how}")


def _expand(shape: tuple[int, ...], ext: Extents, new_shape: tuple) -> tuple[tuple, Extents]:
  if len(new_shape) != len(shape): raise ValueError(f"expand: got {len(new_shape)} sizes {_shown(new_shape)} for the {len(shape)} dims of shape {shape}")
  sizes, out = [], []
  for d, (size, e, new) in enumerate(zip(shape, ext, new_shape)):
    if e is not None:
      if not (isinstance(new, UOp) and _same(new, e)):
        raise ValueError(f"expand: dim {d} has the symbolic size {_show(e)} and can't become {_show(new)}")
      sizes.append(size); out.append(e)
    elif isinstance(new, UOp):
      if size != 1: raise ValueError(f"expand: only a size-1 dim can grow to the symbolic size {_show(new)}; dim {d} has size {size}")
      sizes.append(_top(new)); out.append(_size_expr(new))
    else: sizes.append(new); out.append(None)
  return tuple(sizes), tuple(out)


def _pad(shape: tuple[int, ...], ext: Extents, padding: tuple) -> tuple[tuple, Extents]:
  out = []
  for d, ((before, after), e) in enumerate(zip(padding, ext)):
    if isinstance(before, UOp) or isinstance(after, UOp):
      raise ValueError(f"pad: the amounts {_shown(padding)} hold a symbolic size; padding by a variable amount is not supported")
    if e is not None and after != 0:
      raise ValueError(f"pad: dim {d} has the symbolic size {_show(e)}; it can only be padded before its data, not after (padding {padding[d]})")
    out.append(None if e is None else _size_expr(e + before))
  return padding, tuple(out)


def split_starts(shape: tuple[int, ...], extents: Extents | None, bounds: tuple) -> tuple[tuple, dict[int, UOp]]:
  """A shrink whose starts may be symbolic (a window at a variable position, `x[pos:pos+1]`) as a shrink starting at 0
  plus, per such dim, the start expression: the tracker adds start * stride to its symbolic offset (the dim must be
  addressed affinely; the caller checks). The window's length must be fixed and fit at every start."""
  bounds = to_ir(bounds)
  ints, starts = [], {}
  for d, ((start, end), size) in enumerate(zip(bounds, shape)):
    if not isinstance(start, UOp): ints.append((start, end)); continue
    if extents is not None and extents[d] is not None:
      raise ValueError(f"shrink: dim {d} has the symbolic size {_show(extents[d])}; a window at the symbolic start {_show(start)} needs a fixed-size dim")
    length = (end - start).simplify() if isinstance(end, UOp) else None
    if length is None or length.op is not Ops.CONST:
      raise ValueError(f"shrink: dim {d} from the symbolic start {_show(start)} to {_show(end)}: a window at a symbolic start "
                       "must have a fixed length (x[pos:pos+n])")
    if start.vmin < 0 or start.vmax + length.arg > size:
      raise ValueError(f"shrink: dim {d} of size {size} can't hold the window ({_show(start)}, {_show(end)}) for every value "
                       f"(the start ranges over [{start.vmin}, {start.vmax}], the length is {length.arg})")
    ints.append((0, length.arg)); starts[d] = start.simplify()
  return tuple(ints), starts


def _shrink(shape: tuple[int, ...], ext: Extents, bounds: tuple) -> tuple[tuple, Extents]:
  ints, out = [], []
  for d, ((start, end), size, e) in enumerate(zip(bounds, shape, ext)):
    if isinstance(start, UOp):
      raise ValueError(f"internal error: shrink dim {d} starts at the symbolic {_show(start)} (split_starts handles those)")
    if isinstance(end, UOp):
      if e is not None and _same(end, e): ints.append((start, size)); out.append(_size_expr(e - start)); continue
      limit = size if e is None else int(e.vmin)
      if end.vmax > limit or end.vmin < start:
        raise ValueError(f"shrink: dim {d} of size {_show(e) if e is not None else size} can't be shrunk to ({start}, {_show(end)}): "
                         f"the end must stay in [{start}, {limit}] for every value (it ranges over [{end.vmin}, {end.vmax}])")
      ints.append((start, int(end.vmax))); out.append(_size_expr(end - start))
    else:
      if e is not None and end > e.vmin:
        raise ValueError(f"shrink: dim {d} has the symbolic size {_show(e)} (at least {e.vmin}); a fixed end {end} past that is not supported")
      ints.append((start, end)); out.append(None)
  return tuple(ints), tuple(out)


def _reshape(shape: tuple[int, ...], ext: Extents, new_shape: tuple) -> tuple[tuple, Extents]:
  """Each symbolic dim must be the outermost of the dims it merges with or splits into, with the same total size."""
  new_ints = tuple(_top(n) for n in new_shape)
  new_ext = tuple(_size_expr(n) if isinstance(n, UOp) else None for n in new_shape)
  old = [(s, e) for s, e in zip(shape, ext) if s != 1 or e is not None]
  new = [(s, e) for s, e in zip(new_ints, new_ext) if s != 1 or e is not None]
  if prod(s for s, _ in old) != prod(s for s, _ in new):
    raise ValueError(f"reshape: can't reshape {_shown(_sym(shape, ext))} to {_shown(tuple(new_shape))}: the sizes differ")
  i = j = 0
  while i < len(old) and j < len(new):
    group_old, group_new = [old[i]], [new[j]]
    i, j = i + 1, j + 1
    while prod(s for s, _ in group_old) != prod(s for s, _ in group_new):
      take_old = prod(s for s, _ in group_old) < prod(s for s, _ in group_new)
      if (i if take_old else j) >= len(old if take_old else new):   # (empty dims: no grouping to check against)
        raise ValueError(f"reshape: can't reshape {_shown(_sym(shape, ext))} to {_shown(tuple(new_shape))} with a variable-length dim")
      if take_old: group_old.append(old[i]); i += 1
      else: group_new.append(new[j]); j += 1
    totals = []
    for group in (group_old, group_new):
      if any(e is not None for _, e in group[1:]) or (group[0][1] is None and any(e is not None for _, e in group)):
        raise ValueError(f"reshape: can't reshape {_shown(_sym(shape, ext))} to {_shown(tuple(new_shape))}: a variable-length dim "
                         "can only merge with or split into the dims inside it (it must stay the outermost)")
      head = group[0][1]
      totals.append(None if head is None else head * prod(s for s, _ in group[1:]))
    if (totals[0] is None) != (totals[1] is None) or (totals[0] is not None and not _same(totals[0], totals[1])):
      raise ValueError(f"reshape: can't reshape {_shown(_sym(shape, ext))} to {_shown(tuple(new_shape))}: the symbolic sizes don't match "
                       f"({_show(totals[0]) if totals[0] is not None else 'fixed'} vs {_show(totals[1]) if totals[1] is not None else 'fixed'})")
  if any(e is not None for _, e in old[i:] + new[j:]):
    raise ValueError(f"reshape: can't reshape {_shown(_sym(shape, ext))} to {_shown(tuple(new_shape))}: a variable-length dim has no counterpart")
  return new_ints, new_ext


def _sym(shape: Sequence[int], ext: Extents) -> tuple:
  return tuple(s if e is None else e for s, e in zip(shape, ext))
