"""einsum: Einstein summation over labeled dims, as torch.einsum, from movement ops, multiply and sum.

Input: a formula ("ij,jk->ik", "ii->", "...ij,...jk", implicit "ij,jk") and Tensors. Output: a lazy Tensor.

How it works: a label repeated inside one operand takes that operand's diagonal (a zero-copy view: flatten the two
dims, pad each row by one, read every (n+1)-th element). Labels only one operand uses and the output doesn't are
summed right away. Then every operand is viewed over one shared label order (output labels first, missing labels
as size-1 dims), and the operands are multiplied left to right; after each product the labels no later operand
and not the output needs are summed out, so intermediates stay small. Labeled dims of size 1 broadcast, as in torch.
Sums keep the operands' dtype (int32 stays int32, as torch), unlike Tensor.sum which widens ints.
"""
from __future__ import annotations
from typing import Sequence
from minigrad.dtype import promote_types
from minigrad.tensor.tensor import Tensor

ELLIPSIS = "..."


def _error(message: str) -> RuntimeError: return RuntimeError(f"einsum(): {message}")


def _parse_term(term: str, offset: int, operand: int | None) -> list[str]:
  """'ab...c' -> ['a', 'b', '...', 'c']; anything else than letters and one '...' is an error naming its index."""
  labels: list[str] = []
  i = 0
  while i < len(term):
    ch = term[i]
    if ch == ".":
      if term[i:i + 3] != ELLIPSIS:
        where = f"operand {operand}" if operand is not None else "the output"
        raise _error(f"found '.' for {where} that is not part of any ellipsis (index {offset + i} of the equation)")
      if ELLIPSIS in labels: raise _error(f"found more than one ellipsis ('...') in the subscripts of {'operand %d' % operand if operand is not None else 'the output'}")
      labels.append(ELLIPSIS)
      i += 3
      continue
    if not ("a" <= ch <= "z" or "A" <= ch <= "Z"):
      raise _error(f"invalid subscript given at index {offset + i} in the equation string, subscripts must be in [a-zA-Z]")
    labels.append(ch)
    i += 1
  return labels


def _parse(formula: str, count: int) -> tuple[list[list[str]], list[str] | None]:
  equation = formula.replace(" ", "")
  arrow = equation.find("->")
  lhs, rhs = (equation, None) if arrow < 0 else (equation[:arrow], equation[arrow + 2:])
  terms, offset, inputs = lhs.split(","), 0, []
  for number, term in enumerate(terms):
    inputs.append(_parse_term(term, offset, number))
    offset += len(term) + 1
  if len(inputs) > count: raise _error(f"fewer operands were provided than specified in the equation {formula!r} ({count} given)")
  if len(inputs) < count: raise _error(f"more operands were provided than specified in the equation {formula!r} ({count} given)")
  output = None if rhs is None else _parse_term(rhs, arrow + 2, None)
  return inputs, output


def _diagonal(t: Tensor, a: int, b: int) -> Tensor:
  """The diagonal of dims a < b (equal sizes n), which becomes dim a; dim b goes away. A view: flatten the two
  dims (moved last), pad by n, read as (n, n + 1) and keep column 0."""
  n = t.shape[a]
  rest = [d for d in range(t.ndim) if d not in (a, b)]
  moved = t.permute(rest + [a, b])
  lead = moved.shape[:-2]
  flat = moved.reshape(lead + (n * n,)).pad(((0, 0),) * len(lead) + ((0, n),))
  diag = flat.reshape(lead + (n, n + 1)).shrink(tuple((0, s) for s in lead) + ((0, n), (0, 1))).reshape(lead + (n,))
  order = list(range(len(lead)))
  order.insert(a, len(lead))
  return diag.permute(order)


def einsum(formula: str, *operands: Tensor | Sequence[Tensor]) -> Tensor:
  """Einstein summation, as torch.einsum: `einsum("bij,bjk->bik", a, b)`, `einsum("ii", m)` (trace),
  `einsum("i,j->ij", u, v)` (outer), `einsum("...ij->...ji", x)`. Without '->' the output is the labels used
  once, in alphabetical order, after the ellipsis dims. Operands may also be given as one list."""
  if len(operands) == 1 and isinstance(operands[0], (list, tuple)): operands = tuple(operands[0])
  tensors: list[Tensor] = list(operands)   # type: ignore[arg-type]
  for t in tensors:
    if not isinstance(t, Tensor): raise TypeError(f"einsum(): operands must be Tensors, got {type(t).__name__}")
  inputs, output = _parse(formula, len(tensors))

  # name the dims an ellipsis stands for ('.0', '.1', ... right-aligned across operands) and check label counts
  ellipsis_dims = 0
  for number, (labels, t) in enumerate(zip(inputs, tensors)):
    named = len(labels) - (ELLIPSIS in labels)
    if (ELLIPSIS not in labels and named != t.ndim) or named > t.ndim:
      raise _error(f"the number of subscripts in the equation ({named}) does not match the number of dimensions ({t.ndim}) "
                   f"for operand {number} of shape {t.shape}{'' if ELLIPSIS in labels else ' and no ellipsis was given'}")
    if ELLIPSIS in labels: ellipsis_dims = max(ellipsis_dims, t.ndim - named)
  expanded: list[list[str]] = []
  for labels, t in zip(inputs, tensors):
    if ELLIPSIS in labels:
      at, count = labels.index(ELLIPSIS), t.ndim - (len(labels) - 1)
      labels = labels[:at] + [f".{ellipsis_dims - count + k}" for k in range(count)] + labels[at + 1:]
    expanded.append(labels)
  every_ellipsis_label = [f".{k}" for k in range(ellipsis_dims)]

  # sizes (size 1 broadcasts) and repeated labels inside one operand (diagonals)
  sizes: dict[str, int] = {}
  for number, (labels, t) in enumerate(zip(expanded, tensors)):
    seen: dict[str, int] = {}
    for dim, (label, size) in enumerate(zip(labels, t.shape)):
      if label in seen and t.shape[seen[label]] != size:
        raise _error(f"subscript {label} is repeated for operand {number} but the sizes don't match, {size} != {t.shape[seen[label]]} "
                     f"(operand shape {t.shape})")
      seen.setdefault(label, dim)
      known = sizes.get(label, 1)
      if size != 1 and known != 1 and size != known:
        what = "the ellipsis dims" if label.startswith(".") else f"subscript {label}"
        raise _error(f"{what} has size {size} for operand {number} (shape {t.shape}) which does not broadcast with previously seen size {known}")
      sizes[label] = size if known == 1 else known

  if output is None:
    once = sorted(label for label in sizes if not label.startswith(".") and sum(labels.count(label) for labels in expanded) == 1)
    out_labels = every_ellipsis_label + once
  else:
    out_labels = []
    for label in output:
      if label == ELLIPSIS:
        out_labels.extend(every_ellipsis_label)
        continue
      if label in out_labels: raise _error(f"output subscript {label} appears more than once in the output")
      if label not in sizes: raise _error(f"output subscript {label} does not appear in the equation for any input operand")
      out_labels.append(label)

  # per operand: take diagonals, sum labels used nowhere else
  prepared: list[tuple[Tensor, list[str]]] = []
  for number, (labels, t) in enumerate(zip(expanded, tensors)):
    labels = list(labels)
    while len(set(labels)) != len(labels):
      first = next(i for i, label in enumerate(labels) if labels.index(label) != i)
      t = _diagonal(t, labels.index(labels[first]), first)
      del labels[first]
    elsewhere = set(out_labels).union(*(expanded[k] for k in range(len(expanded)) if k != number))
    lonely = tuple(i for i, label in enumerate(labels) if label not in elsewhere)
    if lonely:
      t = t._reduce_keep_dtype("sum", lonely, False)
      labels = [label for i, label in enumerate(labels) if i not in lonely]
    prepared.append((t, labels))

  # view every operand over one label order, multiply left to right, summing labels as soon as they are done
  order = out_labels + [label for label in sizes if label not in out_labels and any(label in labels for _, labels in prepared)]
  position = {label: i for i, label in enumerate(order)}
  dtype = prepared[0][0].dtype
  for t, _ in prepared[1:]: dtype = promote_types(dtype, t.dtype)

  def aligned(t: Tensor, labels: list[str]) -> Tensor:
    t = t.permute(sorted(range(len(labels)), key=lambda i: position[labels[i]])) if labels else t
    present = {label: t.shape[i] for i, label in enumerate(sorted(labels, key=lambda label: position[label]))}
    return t.reshape(tuple(present.get(label, 1) for label in order)).cast(dtype)

  result = aligned(*prepared[0])
  for k in range(1, len(prepared) + 1):
    if k < len(prepared): result = result * aligned(*prepared[k])
    needed = set(out_labels).union(*(labels for _, labels in prepared[k + 1:]))
    done = tuple(i for i, label in enumerate(order) if label not in needed and result.shape[i] != 1)
    if done: result = result._reduce_keep_dtype("sum", done, True)
  final = result.reshape(result.shape[:len(out_labels)]) if len(order) > len(out_labels) else result
  return final.expand(tuple(sizes[label] for label in out_labels)) if final.shape != tuple(sizes[label] for label in out_labels) else final
