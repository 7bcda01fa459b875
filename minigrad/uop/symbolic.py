"""Symbolic simplification of index math, as rule groups (data, not a visitor).

Input: UOp expressions over CONST, DEFINE_VAR, RANGE/SPECIAL and ALU ops. Output: equal, simpler expressions.
Integer rules use C semantics (division truncates toward zero) and the value bounds `vmin`/`vmax`, so they
only fire where they are exact: e.g. `(i*8 + j) // 8 -> i` needs `0 <= j < 8`.

Groups: `constant_folding`, `identities`, `canonical_order`, `bounds_rules`, `div_mod_rules`;
`symbolic` is all of them together.
"""
from __future__ import annotations
from math import gcd
from minigrad.dtype import dtypes
from minigrad.uop.ops import UOp, Ops, GroupOp, exec_alu
from minigrad.uop.rewrite import UPat, PatternMatcher

INT_TYPES = (dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64)


def _fold(node: UOp) -> UOp | None:
  if node.dtype.count != 1 or any(s.op is not Ops.CONST or s.dtype.count != 1 for s in node.src): return None
  return UOp.const(node.dtype, exec_alu(node.op, node.dtype, tuple(s.arg for s in node.src)))


constant_folding = PatternMatcher([
  (UPat(GroupOp.ALU, name="node", src=UPat(Ops.CONST)), _fold),
  (UPat(Ops.CAST, name="node", src=(UPat.cvar("c"),)),
   lambda node, c: UOp.const(node.dtype, c.arg) if node.dtype.count == 1 else None),
])

x, y, c1, c2 = UPat.var("x"), UPat.var("y"), UPat.cvar("c1"), UPat.cvar("c2")
xi, yi = UPat.var("x", INT_TYPES), UPat.var("y", INT_TYPES)

identities = PatternMatcher([
  # x+0, x*1, x//1 hold for every type; x*0 -> 0 only for integers (nan*0 is nan)
  (x + 0, lambda x: x),
  (x * 1, lambda x: x),
  (xi * 0, lambda x: x.const_like(0)),
  (x // 1, lambda x: x),
  (xi % 1, lambda x: x.const_like(0)),
  (UPat(Ops.NEG, INT_TYPES, (xi,)), lambda x: x * -1),
  (UPat(Ops.NEG, src=(UPat(Ops.NEG, src=(x,)),)), lambda x: x),
  # boolean logic
  (UPat(Ops.AND, dtypes.bool, [x, UPat.const(True)]), lambda x: x),
  (UPat(Ops.AND, dtypes.bool, [x, UPat.const(False)]), lambda x: x.const_like(False)),
  (UPat(Ops.OR, dtypes.bool, [x, UPat.const(False)]), lambda x: x),
  (UPat(Ops.OR, dtypes.bool, [x, UPat.const(True)]), lambda x: x.const_like(True)),
  (UPat(Ops.AND, src=[x, x]), lambda x: x), (UPat(Ops.OR, src=[x, x]), lambda x: x),
  (UPat(Ops.MAX, src=[x, x]), lambda x: x),
  (UPat.var("c", dtypes.bool).where(x, y), lambda c, x, y: x if c.op is Ops.CONST and c.arg else y if c.op is Ops.CONST else None),
  (UPat(Ops.WHERE, src=(UPat.var("c"), x, x)), lambda c, x: x),
  # integer term collection: x+x -> x*2, x*a + x*b -> x*(a+b), (x+c1)+c2 -> x+(c1+c2), (x*c1)*c2 -> x*(c1*c2)
  (xi + xi, lambda x: x * 2),
  (xi * c1 + xi * c2, lambda x, c1, c2: x * (c1.arg + c2.arg)),
  (xi * c1 + xi, lambda x, c1: x * (c1.arg + 1)),
  ((xi + c1) + c2, lambda x, c1, c2: x + (c1.arg + c2.arg)),
  ((xi * c1) * c2, lambda x, c1, c2: x * (c1.arg * c2.arg)),
  # distribute constants over sums so index expressions stay flat: (x+y)*c -> x*c + y*c
  ((xi + yi) * c1, lambda x, y, c1: x * c1 + y * c1),
  # x - x -> 0 as x + x*-1
  (xi + xi * -1, lambda x: x.const_like(0)),
  # (x*c1)//c2 -> x*(c1//c2) when c2 divides c1 (exact for either sign)
  ((xi * c1) // c2, lambda x, c1, c2: x * (c1.arg // c2.arg) if c2.arg > 0 and c1.arg % c2.arg == 0 else None),
  ((xi * c1) % c2, lambda x, c1, c2: x.const_like(0) if c2.arg > 0 and c1.arg % c2.arg == 0 else None),
  # (x//a)//b -> x//(a*b) for positive a, b
  ((xi // c1) // c2, lambda x, c1, c2: x // (c1.arg * c2.arg) if c1.arg > 0 and c2.arg > 0 else None),
  # (x%a)%b -> x%b when b divides a and x >= 0
  ((xi % c1) % c2, lambda x, c1, c2: x % c2.arg if x.vmin >= 0 and c2.arg > 0 and c1.arg % c2.arg == 0 else None),
  # (x%c)//c -> 0 is covered by bounds; (x//c)*c + x%c -> x
  ((xi // c1) * c1 + xi % c1, lambda x, c1: x if c1.arg > 0 else None),
  (((yi + (xi // c1) * c1) + xi % c1), lambda x, y, c1: y + x if c1.arg > 0 else None),
])


def _const_first(node: UOp) -> UOp | None:
  a, b = node.src
  if a.op is Ops.CONST and b.op is not Ops.CONST: return node.replace(src=(b, a))
  # move constants outward: (x+c)+y -> (x+y)+c
  if a.op is node.op and a.src[1].op is Ops.CONST and b.op is not Ops.CONST and dtypes.is_int(node.dtype):
    return node.replace(src=(node.replace(src=(a.src[0], b)), a.src[1]))
  return None


canonical_order = PatternMatcher([
  (UPat((Ops.ADD, Ops.MUL), INT_TYPES, name="node"), _const_first),
])


def _fold_by_bounds(node: UOp) -> UOp | None:
  if node.op is Ops.CONST or node.dtype.count != 1: return None
  if not (dtypes.is_int(node.dtype) or dtypes.is_bool(node.dtype)): return None
  lo, hi = node.vmin, node.vmax
  return UOp.const(node.dtype, lo) if lo == hi else None


bounds_rules = PatternMatcher([
  (UPat(GroupOp.ALU, name="node"), _fold_by_bounds),
  (xi % c1, lambda x, c1: x if 0 <= x.vmin and x.vmax < c1.arg else None),
  (UPat(Ops.MAX, INT_TYPES, src=[x, y]), lambda x, y: x if x.vmin >= y.vmax else None),
])


def split_terms(u: UOp) -> list[UOp]:
  """The addends of a (nested) integer ADD."""
  return split_terms(u.src[0]) + split_terms(u.src[1]) if u.op is Ops.ADD else [u]


def _coefficient(term: UOp) -> tuple[UOp | None, int]:
  """term == base * coefficient; base None for a constant term."""
  if term.op is Ops.CONST: return None, term.arg
  if term.op is Ops.MUL and term.src[1].op is Ops.CONST: return term.src[0], term.src[1].arg
  return term, 1


def _rebuild(terms: list[tuple[UOp | None, int]], like: UOp) -> UOp:
  out: UOp | None = None
  constant = 0
  for base, coef in terms:
    if base is None: constant += coef; continue
    t = base if coef == 1 else base * coef
    out = t if out is None else out + t
  if out is None: return like.const_like(constant)
  return out + constant if constant else out


def _divide_sum(numerator: UOp, divisor: UOp, want_mod: bool) -> UOp | None:
  """(sum of terms) // c or % c, when every term is >= 0: each coefficient splits into a multiple of c, which
  goes to the quotient, and a remainder below c: (y + k*35) % 34 -> (y + k) % 34, (y + k*35) // 34 -> k + (y + k) // 34."""
  c = divisor.arg
  if c <= 0 or numerator.op is not Ops.ADD: return None
  terms = [_coefficient(t) for t in split_terms(numerator)]
  if any(coef < 0 or (base is not None and base.vmin < 0) for base, coef in terms): return None
  if all(coef < c for _, coef in terms):
    # common factor: (x*4 + y*6) // 2 -> (x*2 + y*3), (x*4+y*6) % 2 -> 0
    g = c
    for _, coef in terms: g = gcd(g, coef)
    if g > 1 and not want_mod: return _rebuild([(b, coef // g) for b, coef in terms], numerator) // (c // g)
    return _divide_digits(terms, c, want_mod, numerator)
  rest = [(b, coef % c) for b, coef in terms if coef % c]
  remainder = _rebuild(rest, numerator) if rest else numerator.const_like(0)
  if want_mod: return remainder % c if rest else numerator.const_like(0)
  quotient = _rebuild([(b, coef // c) for b, coef in terms if coef >= c], numerator)
  return quotient + remainder // c if rest else quotient


def _divide_digits(terms: list[tuple[UOp | None, int]], c: int, want_mod: bool, like: UOp) -> UOp | None:
  """Sums like g*q + r with g dividing c and 0 <= r < g (an index split into digits): with c = g*m,
  (g*q + r) // c -> q // m and (g*q + r) % c -> g*(q % m) + r. E.g. (x*16 + l) % 32 -> (x % 2)*16 + l for l < 16."""
  for g in sorted({coef for _, coef in terms if 1 < coef < c and c % coef == 0}, reverse=True):
    high = [(b, coef // g) for b, coef in terms if coef % g == 0]
    low = [(b, coef) for b, coef in terms if coef % g != 0]
    if not high or not low or sum(coef * (1 if b is None else b.vmax) for b, coef in low) >= g: continue
    q = _rebuild(high, like)
    if not want_mod: return q // (c // g)
    return (q % (c // g)) * g + _rebuild(low, like)
  return None


def _collect_terms(node: UOp) -> UOp | None:
  """Flatten a sum of integer terms and merge those with the same base: (r*4+13) + (r*-4+-12) -> 1."""
  terms = [_coefficient(t) for t in split_terms(node)]
  if len(terms) < 3: return None
  merged: dict[UOp | None, int] = {}
  for base, coef in terms: merged[base] = merged.get(base, 0) + coef
  if len(merged) == len(terms): return None   # nothing combines: keep the expression as written
  return _rebuild([(b, c) for b, c in merged.items() if c != 0 or b is None], node)


div_mod_rules = PatternMatcher([
  (UPat(Ops.ADD, INT_TYPES, name="node"), _collect_terms),
  (xi // c1, lambda x, c1: _divide_sum(x, c1, False)),
  (xi % c1, lambda x, c1: _divide_sum(x, c1, True)),
  # comparisons of a scaled value: x*c < d -> x < ceil(d/c) for c > 0
  (UPat(Ops.CMPLT, src=(xi * c1, c2)),
   lambda x, c1, c2: x < -(-c2.arg // c1.arg) if c1.arg > 0 else None),
])

symbolic = (constant_folding + bounds_rules + identities + canonical_order + div_mod_rules).remembering()
