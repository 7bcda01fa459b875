"""The UOp IR: hash-consing, pattern matching, graph_rewrite, value bounds and symbolic simplification."""
import gc
import weakref
import pytest
from hypothesis import given, settings, strategies as st
from minigrad.dtype import dtypes
from minigrad.uop.ops import UOp, toposort, _c_div, _c_mod
from minigrad.uop.rewrite import UPat, PatternMatcher, graph_rewrite
from minigrad.uop.symbolic import symbolic

i32 = dtypes.int32


def var(name, lo, hi): return UOp.variable(name, lo, hi)


def test_hash_consing_returns_same_object():
  a, b = var("a", 0, 9), var("a", 0, 9)
  assert a is b
  assert (a + 1) is (b + 1)
  assert UOp.const(i32, 3) is UOp.const(i32, 3)
  assert UOp.const(dtypes.float32, 1.0) is not UOp.const(i32, 1)


def test_hash_consing_keeps_distinct_values_apart():
  assert UOp.const(dtypes.float32, 0.0) is not UOp.const(dtypes.float32, -0.0)
  assert UOp.const(dtypes.bool, True) is not UOp.const(i32, 1)


def test_uops_are_garbage_collected():
  nodes = [var(f"tmp{k}", 0, 5) * 7 for k in range(100)]
  refs = [weakref.ref(n) for n in nodes] + [weakref.ref(n.src[0]) for n in nodes]
  assert var("tmp3", 0, 5) * 7 is nodes[3]       # alive: the cache returns the same node
  del nodes
  gc.collect()
  assert all(r() is None for r in refs)          # dead: the cache doesn't keep nodes alive


def test_toposort_orders_sources_first_and_handles_depth():
  x = var("x", 0, 10)
  node = x
  for _ in range(5000): node = node + 1   # deep: no recursion limit
  order = toposort([node])
  position = {n: k for k, n in enumerate(order)}
  assert all(position[s] < position[n] for n in order for s in n.src)
  assert order[-1] is node


def test_pattern_matcher_commutative_and_named():
  x = var("x", 0, 10)
  pm = PatternMatcher([(UPat.var("a") * 2, lambda a: a + a)])
  assert pm.rewrite(x * 2) is x + x
  assert pm.rewrite(UOp.const(i32, 2) * x) is x + x     # either order
  assert pm.rewrite(x * 3) is None


def test_pattern_same_name_must_be_same_node():
  x, y = var("x", 0, 10), var("y", 0, 10)
  pm = PatternMatcher([(UPat.var("a") + UPat.var("a"), lambda a: a * 2)])
  assert pm.rewrite(x + x) is x * 2
  assert pm.rewrite(x + y) is None


def test_graph_rewrite_reaches_fixed_point_bottom_up():
  x = var("x", 0, 10)
  expr = ((x + 0) * 1 + 0) * 1
  assert graph_rewrite(expr, symbolic) is x


def test_remembering_matcher_rewrites_each_node_once(monkeypatch):
  x, y = var("x", 0, 10), var("y", 0, 10)
  calls = []
  def double_to_sum(a):
    calls.append(a)
    return a + a
  plain = PatternMatcher([(UPat.var("a") * 2, double_to_sum)])
  remembering = plain.remembering()
  expr = (x * 2) * 2 + y * 2
  expected = graph_rewrite(expr, plain)
  calls.clear()
  assert graph_rewrite(expr, remembering) is expected and len(calls) == 3
  assert graph_rewrite(expr, remembering) is expected and len(calls) == 3      # remembered: no rule runs again
  assert graph_rewrite(x * 2 + 1, remembering) is (x + x) + 1 and len(calls) == 3   # x*2 too
  assert graph_rewrite(expr, remembering, ctx={}) is expected and len(calls) == 6  # a ctx may change rules: no memory
  monkeypatch.setattr("minigrad.uop.rewrite.MEMORY_LIMIT", 2)
  assert graph_rewrite(y * 2, remembering) is y + y and len(calls) == 7   # past the limit: starts over
  assert len(remembering.memory) == 4 and graph_rewrite(expr, remembering) is expected and len(calls) == 10


@pytest.mark.parametrize("build, expected", [
  (lambda i, j: (i * 8 + j) // 8, lambda i, j: i),
  (lambda i, j: (i * 8 + j) % 8, lambda i, j: j),
  (lambda i, j: i * 0 + j, lambda i, j: j),
  (lambda i, j: (i * 4) // 4, lambda i, j: i),
  (lambda i, j: (i // 2) // 3, lambda i, j: i // 6),
  (lambda i, j: j % 8, lambda i, j: j),
  (lambda i, j: j // 8, lambda i, j: UOp.const(i32, 0)),
  (lambda i, j: UOp.const(i32, 3) + UOp.const(i32, 4), lambda i, j: UOp.const(i32, 7)),
  (lambda i, j: (j < 8), lambda i, j: UOp.const(dtypes.bool, True)),
  (lambda i, j: i + i, lambda i, j: i * 2),
])
def test_symbolic_rules(build, expected):
  i, j = var("i", 0, 15), var("j", 0, 7)
  assert build(i, j).simplify() is expected(i, j)


def test_bounds():
  i, j = var("i", 0, 15), var("j", -3, 7)
  assert ((i * 2 + j).vmin, (i * 2 + j).vmax) == (-3, 37)
  assert ((i % 4).vmin, (i % 4).vmax) == (0, 3)
  assert ((i // 4).vmin, (i // 4).vmax) == (0, 3)
  assert (i < 16).vmin is True


def test_c_division_semantics():
  assert _c_div(-7, 2) == -3 and _c_mod(-7, 2) == -1
  assert _c_div(7, -2) == -3 and _c_mod(7, -2) == 1


# random index expressions: simplification must never change the value
_leaf = st.sampled_from(["a", "b", "c"]) | st.integers(-6, 12)


def _expr(depth):
  if depth == 0: return _leaf
  sub = _expr(depth - 1)
  return _leaf | st.tuples(st.sampled_from(["+", "*", "//", "%", "<", "max"]), sub, sub)


BOUNDS = {"a": (0, 9), "b": (0, 4), "c": (-5, 5)}


def _build(tree):
  if isinstance(tree, str): return var(tree, *BOUNDS[tree])
  if isinstance(tree, int): return UOp.const(i32, tree)
  op, left, right = tree
  x, y = _build(left), _build(right)
  if x.dtype == dtypes.bool: x = x.cast(i32)
  if y.dtype == dtypes.bool: y = y.cast(i32)
  if op in ("//", "%"):
    # positive constant divisors: the only kind index math produces
    divisor = abs(right) + 1 if isinstance(right, int) else 3
    return x // divisor if op == "//" else x % divisor
  return {"+": x + y, "*": x * y, "<": x < y, "max": x.maximum(y)}[op]


@settings(max_examples=400, deadline=None)
@given(_expr(3), st.integers(0, 9), st.integers(0, 4), st.integers(-5, 5))
def test_simplify_preserves_value(tree, a, b, c):
  expr = _build(tree)
  env = {"a": a, "b": b, "c": c}
  simplified = expr.simplify()
  assert simplified.evaluate({k: v for k, v in env.items()}) == expr.evaluate(env)
  # bounds must contain the value
  value = expr.evaluate(env)
  assert simplified.vmin <= value <= simplified.vmax
