"""Rewrite rules as data: `UPat` patterns, a `PatternMatcher` of (pattern -> function) rules, and `graph_rewrite`.

Input: a UOp graph and a PatternMatcher. Output: the graph with every rule applied bottom-up until none fires.

A rule's function receives the pattern's named captures as keyword arguments (plus `ctx` if it asks for it)
and returns a replacement UOp, or None to leave the node alone. Patterns compose with Python operators so
rules read like the math they encode: `UPat.var("x") + 0 -> x`.
"""
from __future__ import annotations
from typing import Any, Callable, Iterable
import inspect
import itertools
from minigrad.dtype import DType
from minigrad.uop.ops import UOp, Ops, GroupOp


class UPat:
  """A pattern over UOps. `src` as a tuple matches in order; as a list it matches any order (commutative ops)."""
  def __init__(self, op: Ops | Iterable[Ops] | None = None, dtype: DType | Iterable[DType] | None = None,
               src: tuple[UPat, ...] | list[UPat] | UPat | None = None, arg: Any = None, name: str | None = None,
               allow_any_len: bool = False):
    self.ops: frozenset[Ops] | None = None if op is None else frozenset([op] if isinstance(op, Ops) else op)
    self.dtypes: frozenset[DType] | None = None if dtype is None else frozenset([dtype] if isinstance(dtype, DType) else dtype)
    self.src, self.arg, self.name, self.allow_any_len = src, arg, name, allow_any_len

  @staticmethod
  def var(name: str | None = None, dtype: DType | Iterable[DType] | None = None) -> UPat: return UPat(dtype=dtype, name=name)
  @staticmethod
  def cvar(name: str | None = None, dtype: DType | Iterable[DType] | None = None) -> UPat:
    return UPat(Ops.CONST, dtype=dtype, name=name)
  @staticmethod
  def const(value: Any, dtype: DType | Iterable[DType] | None = None) -> UPat: return UPat(Ops.CONST, dtype=dtype, arg=value)

  # operator sugar: commutative ops take their sources in any order
  def _binary(self, op: Ops, other: Any, reverse: bool = False) -> UPat:
    other_pat = other if isinstance(other, UPat) else UPat.const(other)
    pair = [other_pat, self] if reverse else [self, other_pat]
    return UPat(op, src=pair if op in GroupOp.Commutative else tuple(pair))
  def __add__(self, x: Any) -> UPat: return self._binary(Ops.ADD, x)
  def __radd__(self, x: Any) -> UPat: return self._binary(Ops.ADD, x, True)
  def __mul__(self, x: Any) -> UPat: return self._binary(Ops.MUL, x)
  def __rmul__(self, x: Any) -> UPat: return self._binary(Ops.MUL, x, True)
  def __floordiv__(self, x: Any) -> UPat: return self._binary(Ops.IDIV, x)
  def __mod__(self, x: Any) -> UPat: return self._binary(Ops.MOD, x)
  def __lt__(self, x: Any) -> UPat: return self._binary(Ops.CMPLT, x)
  def ne(self, x: Any) -> UPat: return self._binary(Ops.CMPNE, x)
  def maximum(self, x: Any) -> UPat: return self._binary(Ops.MAX, x)
  def __neg__(self) -> UPat: return UPat(Ops.NEG, src=(self,))
  def where(self, x: Any, y: Any) -> UPat:
    return UPat(Ops.WHERE, src=(self, x if isinstance(x, UPat) else UPat.const(x), y if isinstance(y, UPat) else UPat.const(y)))

  def match(self, uop: UOp, captures: dict[str, UOp]) -> list[dict[str, UOp]]:
    """All ways `uop` matches this pattern, each as the dict of named captures (empty list: no match)."""
    if self.ops is not None and uop.op not in self.ops: return []
    if self.dtypes is not None and uop.dtype not in self.dtypes and uop.dtype.scalar() not in self.dtypes: return []
    if self.arg is not None and (uop.arg != self.arg or type(uop.arg) is not type(self.arg) and not _num_equal(uop.arg, self.arg)):
      return []
    if self.name is not None:
      if self.name in captures and captures[self.name] is not uop: return []
      captures = {**captures, self.name: uop}
    if self.src is None: return [captures]
    if isinstance(self.src, UPat): orders: Iterable[Any] = [[self.src] * len(uop.src)]
    elif isinstance(self.src, list): orders = itertools.permutations(self.src)
    else: orders = [self.src]
    results: list[dict[str, UOp]] = []
    for order in orders:
      if len(order) != len(uop.src) and not (self.allow_any_len and len(order) <= len(uop.src)): continue
      partial = [captures]
      for pat, child in zip(order, uop.src):
        partial = [m for p in partial for m in pat.match(child, p)]
        if not partial: break
      results.extend(partial)
    return results

  def __repr__(self) -> str:
    ops = "any" if self.ops is None else "|".join(sorted(o.name for o in self.ops))
    return f"UPat({ops}{'' if self.name is None else ' ' + self.name})"


def _num_equal(a: Any, b: Any) -> bool:
  return isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool) and a == b


Rule = tuple[UPat, Callable[..., UOp | None]]


class PatternMatcher:
  """An ordered list of rules, indexed by op so only candidate rules are tried."""
  def __init__(self, rules: list[Rule]):
    self.rules = rules
    self.memory: dict[UOp, UOp] | None = None   # see remembering()
    self.by_op: dict[Ops, list[tuple[UPat, Callable[..., UOp | None], bool]]] = {}
    self.any_op: list[tuple[UPat, Callable[..., UOp | None], bool]] = []
    for pat, fn in rules:
      wants_ctx = "ctx" in inspect.signature(fn).parameters
      if pat.ops is None: self.any_op.append((pat, fn, wants_ctx))
      else:
        for op in pat.ops: self.by_op.setdefault(op, []).append((pat, fn, wants_ctx))

  def __add__(self, other: PatternMatcher) -> PatternMatcher: return PatternMatcher(self.rules + other.rules)

  def remembering(self) -> PatternMatcher:
    """This matcher with a memory of its rewrites (without ctx) that graph_rewrite shares between calls: for rules
    that depend on nothing but the node, such as the simplifier's. Index expressions repeat their subexpressions
    from one load to the next, and a kernel's lowering simplifies thousands of them."""
    remembering = PatternMatcher(self.rules)
    remembering.memory = {}
    return remembering

  def rewrite(self, uop: UOp, ctx: Any = None) -> UOp | None:
    """The first rule's replacement for `uop`, or None if no rule changes it."""
    for pat, fn, wants_ctx in self.by_op.get(uop.op, []) + self.any_op:
      for captures in pat.match(uop, {}):
        result = fn(ctx=ctx, **captures) if wants_ctx else fn(**captures)
        if result is not None and result is not uop: return result
    return None


MEMORY_LIMIT = 1 << 17   # rewrites a remembering matcher keeps (it holds its nodes alive), then it starts over


def graph_rewrite(root: UOp, pm: PatternMatcher, ctx: Any = None) -> UOp:
  """Rewrite sources before their users, and each node until no rule fires (iterative: deep graphs are fine)."""
  done: dict[UOp, UOp] = {} if ctx is not None or pm.memory is None else pm.memory
  if len(done) > MEMORY_LIMIT: done.clear()
  # stack entries: (node, stage, replacement); stage 0 = visit sources, 1 = rebuild and rewrite, 2 = adopt replacement
  stack: list[tuple[UOp, int, UOp | None]] = [(root, 0, None)]
  while stack:
    node, stage, replacement = stack.pop()
    if node in done: continue
    if stage == 0:
      stack.append((node, 1, None))
      stack.extend((s, 0, None) for s in reversed(node.src) if s not in done)
    elif stage == 1:
      new_src = tuple(done[s] for s in node.src)
      rebuilt = node if new_src == node.src else node.replace(src=new_src)
      result = pm.rewrite(rebuilt, ctx)
      if result is None: done[node] = rebuilt
      elif result in done: done[node] = done[result]
      else:
        stack.append((node, 2, result))
        stack.append((result, 0, None))
    else:
      assert replacement is not None
      done[node] = done[replacement]
  return done[root]
