"""Tests for minigrad/uop/shapetracker.py: View and ShapeTracker movement ops and their index math.

Input: movement-op chains. Output: pass/fail, checked against numpy (np.arange base, pad sentinel -1) with a
small numpy-vectorized evaluator for the (index, valid) UOps.
"""
from __future__ import annotations
from typing import Any
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st, HealthCheck
from minigrad.dtype import dtypes
from minigrad.uop.ops import UOp, Ops
from minigrad.uop.shapetracker import View, ShapeTracker, merge_views

SENTINEL = -1


# ---------------------------------------------------------------------------------------------------------------
# numpy evaluation of index UOps (C semantics for integer division)

def _c_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  b_safe = np.where(b == 0, 1, b)
  quotient = np.abs(a) // np.abs(b_safe)
  quotient = np.where((a < 0) != (b_safe < 0), -quotient, quotient)
  return np.where(b == 0, 0, quotient)


def _c_mod(a: np.ndarray, b: np.ndarray) -> np.ndarray: return a - _c_div(a, b) * b


NUMPY_ALU: dict[Ops, Any] = {
  Ops.ADD: np.add, Ops.MUL: np.multiply, Ops.IDIV: _c_div, Ops.MOD: _c_mod, Ops.MAX: np.maximum,
  Ops.CMPLT: np.less, Ops.CMPNE: np.not_equal, Ops.AND: np.bitwise_and, Ops.OR: np.bitwise_or,
  Ops.WHERE: np.where,
}


def evaluate(root: UOp, variables: dict[str, np.ndarray]) -> np.ndarray:
  """Value of an index expression with each variable bound to an int64 array."""
  values: dict[UOp, np.ndarray] = {}
  for node in root.toposort:
    if node.op is Ops.CONST: values[node] = np.asarray(node.arg, dtype=bool if node.dtype == dtypes.bool else np.int64)
    elif node.op is Ops.DEFINE_VAR: values[node] = variables[node.arg[0]]
    elif node.op is Ops.NEG:
      x = values[node.src[0]]
      values[node] = np.logical_not(x) if x.dtype == bool else -x
    elif node.op is Ops.CAST: values[node] = values[node.src[0]].astype(bool if node.dtype == dtypes.bool else np.int64)
    elif node.op in NUMPY_ALU: values[node] = NUMPY_ALU[node.op](*(values[s] for s in node.src))
    else: raise NotImplementedError(f"evaluator has no rule for {node.op}")
  return values[root]


def index_and_valid(tracker: ShapeTracker) -> tuple[np.ndarray, np.ndarray]:
  """For every element of tracker.shape: (buffer index, valid) as arrays of that shape."""
  index, valid = tracker.to_indexed_uops()
  grid = np.indices(tracker.shape, dtype=np.int64)
  variables = {f"idx{d}": grid[d] for d in range(len(tracker.shape))}
  return (np.broadcast_to(evaluate(index, variables), tracker.shape),
          np.broadcast_to(evaluate(valid, variables), tracker.shape).astype(bool))


def check_against_numpy(tracker: ShapeTracker, expected: np.ndarray, base_size: int) -> None:
  """expected holds the base index of each element (np.arange base) or SENTINEL where padding was read."""
  assert tracker.shape == expected.shape
  index, valid = index_and_valid(tracker)
  np.testing.assert_array_equal(valid, expected != SENTINEL)
  np.testing.assert_array_equal(index[valid], expected[valid])
  real_size = tracker.real_size()
  assert real_size <= base_size
  if valid.any(): assert real_size >= index[valid].max() + 1
  for d, stride in enumerate(tracker.real_strides()):
    if stride is None or tracker.shape[d] == 0: continue
    # validity doesn't depend on dim d, and the index moves by `stride` along it
    assert (valid == valid.take([0], axis=d)).all(), (d, tracker)
    both_valid = valid.take(range(1, tracker.shape[d]), axis=d) & valid.take(range(tracker.shape[d] - 1), axis=d)
    assert (np.diff(index, axis=d)[both_valid] == stride).all(), (d, stride, tracker)


def apply_numpy(array: np.ndarray, op: str, arg: Any) -> np.ndarray:
  if op == "reshape": return array.reshape(arg)
  if op == "permute": return array.transpose(arg)
  if op == "expand": return np.broadcast_to(array, arg)
  if op == "pad": return np.pad(array, arg, constant_values=SENTINEL) if array.ndim else array
  if op == "shrink": return array[tuple(slice(start, end) for start, end in arg)]
  if op == "flip": return np.flip(array, arg) if arg else array
  raise ValueError(op)


def apply_tracker(tracker: ShapeTracker, op: str, arg: Any) -> ShapeTracker: return getattr(tracker, op)(arg)


def numpy_base(shape: tuple[int, ...]) -> np.ndarray:
  return np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)


# ---------------------------------------------------------------------------------------------------------------
# View.create canonical form

def test_create_defaults_to_row_major():
  view = View.create((2, 3, 4))
  assert view.strides == (12, 4, 1) and view.offset == 0 and view.mask is None and view.contiguous


def test_create_canonicalizes_size_one_strides_and_full_masks():
  assert View.create((2, 1, 3)).strides == (3, 0, 1)
  assert View.create((2, 1, 3), (3, 3, 1)) == View.create((2, 1, 3))
  assert View.create((4, 5), mask=((0, 4), (0, 5))).mask is None
  assert View.create((4, 5), (5, 1), mask=((0, 4), (0, 5))).contiguous


def test_create_empty_mask_empties_every_dim():
  view = View.create((3, 4), (4, 1), offset=7, mask=((1, 1), (0, 4)))
  assert view.mask == ((0, 0), (0, 0)) and view.strides == (0, 0) and view.offset == 0 and not view.contiguous
  index, valid = view.to_indexed_uops([UOp.variable("a", 0, 2), UOp.variable("b", 0, 3)])
  assert valid.op is Ops.CONST and valid.arg is False


def test_create_single_index_mask_folds_into_offset():
  # dim 0 keeps only index 2: its term is the constant 2*5
  view = View.create((4, 5), (5, 1), mask=((2, 3), (0, 5)))
  assert view.strides == (0, 1) and view.offset == 10 and view.mask == ((2, 3), (0, 5))


def test_views_are_hashable_values():
  a = ShapeTracker.from_shape((4, 6)).permute((1, 0)).reshape((2, 3, 4))
  b = ShapeTracker.from_shape((4, 6)).permute((1, 0)).reshape((2, 3, 4))
  assert a == b and hash(a) == hash(b) and len({a, b}) == 1
  assert {a.views[0]: 1}[b.views[0]] == 1


# ---------------------------------------------------------------------------------------------------------------
# reshape

def test_reshape_contiguous_is_one_view():
  tracker = ShapeTracker.from_shape((2, 3, 4))
  for shape in [(24,), (4, 6), (2, 12), (1, 24, 1), (3, 2, 2, 2), (2, 3, 4)]:
    tracker = tracker.reshape(shape)
    assert len(tracker.views) == 1 and tracker.contiguous and tracker.shape == shape


def test_reshape_adding_and_removing_ones_stays_one_view():
  tracker = ShapeTracker.from_shape((4, 8)).permute((1, 0))
  back = tracker.reshape((8, 1, 4)).reshape((8, 4))
  assert back == tracker
  strided = ShapeTracker.from_shape((4, 1, 8)).reshape((4, 8))
  assert len(strided.views) == 1 and strided.contiguous
  x = ShapeTracker.from_shape((32,)).shrink(((0, 32),)).reshape((4, 1, 8)).flip((0,)).reshape((4, 8))
  assert len(x.views) == 1


def test_reshape_merges_permuted_dims_where_possible():
  base = ShapeTracker.from_shape((2, 3, 4))
  permuted = base.permute((2, 0, 1))             # (4, 2, 3), strides (1, 12, 4): dims 1, 2 are still adjacent
  merged = permuted.reshape((4, 6))
  assert len(merged.views) == 1 and merged.views[0].strides == (1, 4)
  assert permuted.permute((1, 2, 0)) == base    # permute back: the original view
  split = ShapeTracker.from_shape((4, 6)).permute((1, 0)).reshape((3, 2, 2, 2))
  assert len(split.views) == 1 and split.views[0].strides == (2, 1, 12, 6)
  flat = ShapeTracker.from_shape((4, 6)).permute((1, 0)).reshape((24,))   # a transpose can't be flattened
  assert len(flat.views) == 2
  check_against_numpy(flat, numpy_base((4, 6)).T.reshape(24), 24)


def test_reshape_expanded_view():
  expanded = ShapeTracker.from_shape((1, 4)).expand((3, 4))
  split = expanded.reshape((3, 2, 2))
  assert len(split.views) == 1 and split.views[0].strides == (0, 2, 1)
  broadcast_rows = ShapeTracker.from_shape((3, 1)).expand((3, 4)).reshape((12,))
  assert len(broadcast_rows.views) == 2
  check_against_numpy(broadcast_rows, np.broadcast_to(numpy_base((3, 1)), (3, 4)).reshape(12), 3)
  all_broadcast = ShapeTracker.from_shape((1, 1)).expand((3, 4)).reshape((2, 6))
  assert len(all_broadcast.views) == 1 and all_broadcast.views[0].strides == (0, 0)


def test_reshape_masked_views():
  padded = ShapeTracker.from_shape((2, 3)).pad(((1, 1), (0, 0)))   # (4, 3), rows 1..2 valid
  flat = padded.reshape((12,))
  assert len(flat.views) == 1 and flat.views[0].mask == ((3, 9),)
  check_against_numpy(flat, np.pad(numpy_base((2, 3)), ((1, 1), (0, 0)), constant_values=-1).reshape(12), 6)
  ones = ShapeTracker.from_shape((5,)).pad(((1, 2),)).reshape((1, 8, 1))
  assert len(ones.views) == 1 and ones.views[0].mask == ((0, 1), (1, 6), (0, 1))
  assert ones.reshape((8,)) == ShapeTracker.from_shape((5,)).pad(((1, 2),))
  # the valid interval [1, 6) of 8 elements is not a box of (2, 4): a second view is needed
  boxed = ShapeTracker.from_shape((5,)).pad(((1, 2),)).reshape((2, 4))
  assert len(boxed.views) == 2
  check_against_numpy(boxed, np.pad(numpy_base((5,)), (1, 2), constant_values=-1).reshape(2, 4), 5)


def test_reshape_returns_none_only_when_inexpressible():
  view = View.create((4, 6)).permute((1, 0))
  assert view.reshape((24,)) is None
  assert view.reshape((2, 3, 4)) is not None


# ---------------------------------------------------------------------------------------------------------------
# the other movement ops

def test_permute():
  view = View.create((2, 3, 4)).permute((2, 0, 1))
  assert view.shape == (4, 2, 3) and view.strides == (1, 12, 4) and not view.contiguous


def test_expand_uses_stride_zero():
  view = View.create((3, 1)).expand((3, 5))
  assert view.shape == (3, 5) and view.strides == (1, 0)
  masked = View.create((1,)).pad(((1, 0),)).shrink(((1, 2),))   # a single valid element with a mask
  assert masked.expand((4,)).shape == (4,)


def test_pad_makes_a_mask():
  view = View.create((3,)).pad(((1, 2),))
  assert view.shape == (6,) and view.mask == ((1, 4),) and view.offset == -1
  tracker = ShapeTracker.from_shape((2, 3)).pad(((0, 0), (2, 1)))
  check_against_numpy(tracker, np.pad(numpy_base((2, 3)), ((0, 0), (2, 1)), constant_values=-1), 6)
  _, valid = tracker.to_indexed_uops()
  assert "idx0" not in str(valid), "only dim 1 is padded: dim 0 needs no check"


def test_shrink_and_pad_cancel():
  tracker = ShapeTracker.from_shape((4, 5))
  assert tracker.pad(((1, 1), (2, 0))).shrink(((1, 5), (2, 7))) == tracker
  assert tracker.shrink(((1, 3), (0, 5))).views[0].offset == 5


def test_flip_uses_negative_strides():
  view = View.create((2, 4)).flip((1,))
  assert view.strides == (4, -1) and view.offset == 3
  assert View.create((2, 4)).flip((-1,)) == view
  assert view.flip((1,)) == View.create((2, 4))
  tracker = ShapeTracker.from_shape((3, 4)).pad(((1, 0), (0, 2))).flip((0, 1))
  check_against_numpy(tracker, np.flip(np.pad(numpy_base((3, 4)), ((1, 0), (0, 2)), constant_values=-1)), 12)


def test_zero_size_dims():
  tracker = ShapeTracker.from_shape((0, 3))
  assert tracker.size == 0 and tracker.contiguous and tracker.real_size() == 0
  assert tracker.reshape((3, 0, 2)).shape == (3, 0, 2)
  assert tracker.permute((1, 0)).shape == (3, 0)
  assert tracker.pad(((1, 1), (0, 0))).shape == (2, 3)
  check_against_numpy(tracker.pad(((1, 1), (0, 0))), np.full((2, 3), -1), 0)
  assert ShapeTracker.from_shape((2, 3)).shrink(((1, 1), (0, 3))).shape == (0, 3)
  assert ShapeTracker.from_shape((2, 1)).expand((2, 0)).shape == (2, 0)
  assert ShapeTracker.from_shape((0, 4)).flip((0,)).shape == (0, 4)
  _, valid = tracker.to_indexed_uops()
  assert valid.op is Ops.CONST and valid.arg is False


def test_scalar_shape():
  tracker = ShapeTracker.from_shape(())
  index, valid = tracker.to_indexed_uops()
  assert index.op is Ops.CONST and index.arg == 0 and valid.arg is True
  assert tracker.reshape((1, 1)).reshape(()) == tracker
  # a scalar that is padding: one invalid element survives a reshape to ()
  invalid = ShapeTracker.from_shape((1,)).pad(((1, 0),)).shrink(((0, 1),)).reshape(())
  assert invalid.shape == () and index_and_valid(invalid)[1].item() is False


# ---------------------------------------------------------------------------------------------------------------
# bad arguments

@pytest.mark.parametrize("op, arg, words", [
  ("reshape", (4, 2), "(2, 3)"),
  ("reshape", (-1, 6), "negative"),
  ("permute", (0, 0), "permutation"),
  ("permute", (1,), "permutation"),
  ("expand", (4, 3), "(2, 3)"),
  ("expand", (2, 3, 1), "expand"),
  ("pad", ((0, -1), (0, 0)), "negative"),
  ("pad", ((1, 1),), "pad"),
  ("shrink", ((0, 3), (0, 3)), "out of range"),
  ("shrink", ((1, 0), (0, 3)), "out of range"),
  ("flip", (2,), "out of range"),
  ("flip", (0, -2), "repeat"),
])
def test_bad_arguments_raise(op: str, arg: Any, words: str):
  for target in (ShapeTracker.from_shape((2, 3)), View.create((2, 3))):
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")):
      getattr(target, op)(arg)


def test_compose_out_of_range_raises():
  with pytest.raises(ValueError, match="outside"):
    _ = ShapeTracker.from_shape((2, 3)) + ShapeTracker.from_shape((7,))


# ---------------------------------------------------------------------------------------------------------------
# index expressions read well

def test_contiguous_index_is_minimal():
  index, valid = ShapeTracker.from_shape((4, 8)).to_indexed_uops()
  x, y = UOp.variable("idx0", 0, 3), UOp.variable("idx1", 0, 7)
  assert index is x * 8 + y and valid.op is Ops.CONST and valid.arg is True
  index, _ = ShapeTracker.from_shape((4, 1)).expand((4, 8)).to_indexed_uops()
  assert index is x, "stride-0 dims add no term"


def test_pad_valid_checks_only_needed_bounds():
  index, valid = ShapeTracker.from_shape((4,)).pad(((1, 0),)).to_indexed_uops()
  x = UOp.variable("idx0", 0, 4)
  assert all(valid.evaluate({"idx0": i}) == (i >= 1) for i in range(5))
  assert index.evaluate({"idx0": 2}) == 1
  assert sum(1 for node in valid.toposort if node.op is Ops.CMPLT) == 1
  assert x in valid.toposort


def test_two_view_index_unravels():
  tracker = ShapeTracker.from_shape((3, 4)).permute((1, 0)).reshape((12,))
  index, valid = tracker.to_indexed_uops()
  assert [index.evaluate({"idx0": i}) for i in range(12)] == list(numpy_base((3, 4)).T.reshape(12))
  assert valid.op is Ops.CONST and valid.arg is True


def test_evaluator_matches_uop_evaluate():
  tracker = ShapeTracker.from_shape((3, 5)).pad(((1, 2), (0, 1))).permute((1, 0)).reshape((2, 3, 6)).flip((2,))
  index, valid = tracker.to_indexed_uops()
  fast_index, fast_valid = index_and_valid(tracker)
  for position in np.ndindex(*tracker.shape):
    variables = {f"idx{d}": p for d, p in enumerate(position)}
    assert bool(valid.evaluate(variables)) == fast_valid[position]
    if fast_valid[position]: assert index.evaluate(variables) == fast_index[position]
  assert (_c_div(np.array([-7, 7, -7]), np.array([2, -2, 0])) == [-3, -3, 0]).all()
  assert (_c_mod(np.array([-7, 7]), np.array([2, -2])) == [-1, 1]).all()


# ---------------------------------------------------------------------------------------------------------------
# composition, simplify and the optimizer's questions

def test_compose_with_contiguous_is_free():
  tracker = ShapeTracker.from_shape((4, 6)).permute((1, 0)).pad(((1, 1), (0, 0)))
  assert tracker + ShapeTracker.from_shape(tracker.shape) == tracker
  other = ShapeTracker.from_shape((8, 4)).shrink(((1, 7), (0, 4))).permute((1, 0))
  assert ShapeTracker.from_shape((8, 4)) + other == other


def test_compose_merges_into_one_view():
  first = ShapeTracker.from_shape((4, 6)).permute((1, 0))          # (6, 4)
  second = ShapeTracker.from_shape((6, 4)).shrink(((1, 5), (0, 4))).flip((1,))
  composed = first + second
  assert len(composed.views) == 1
  check_against_numpy(composed, np.flip(numpy_base((4, 6)).T[1:5], 1), 24)


def test_simplify_merges_views_made_by_later_ops():
  tracker = ShapeTracker.from_shape((4, 6)).permute((1, 0)).reshape((24,))
  assert len(tracker.views) == 2
  # keeping only the first column of the transposed array makes the pair a single strided view again
  narrowed = tracker.shrink(((0, 4),))
  assert len(narrowed.views) == 1 and narrowed.views[0].strides == (6,)
  two = ShapeTracker((View.create((4, 6)), View.create((2, 12))))
  assert two.simplify() == ShapeTracker.from_shape((2, 12))


def test_merge_views_moves_masks():
  first = View.create((4, 6)).pad(((0, 0), (1, 1)))             # (4, 8), cols 1..6 valid
  second = View.create((4, 8)).shrink(((0, 4), (0, 4)))         # (4, 4) over a contiguous (4, 8)
  merged = merge_views(first, second)
  assert merged is not None and merged.mask == ((0, 4), (1, 4))


def test_real_strides_and_unit_stride_axes():
  tracker = ShapeTracker.from_shape((4, 6)).permute((1, 0))
  assert tracker.real_strides() == (1, 6) and tracker.unit_stride_axes() == [0]
  padded = ShapeTracker.from_shape((4, 6)).pad(((0, 0), (1, 0)))
  assert padded.real_strides() == (6, None) and padded.unit_stride_axes() == []
  two = ShapeTracker.from_shape((4, 6)).permute((1, 0)).reshape((2, 12))
  assert len(two.views) == 2
  assert two.real_strides() == (3, None)


def test_real_size():
  assert ShapeTracker.from_shape((4, 6)).real_size() == 24
  assert ShapeTracker.from_shape((4, 6)).shrink(((0, 2), (1, 3))).real_size() == 9
  assert ShapeTracker.from_shape((4, 6)).flip((0,)).real_size() == 24
  assert ShapeTracker.from_shape((3,)).pad(((2, 0),)).shrink(((0, 2),)).real_size() == 0
  assert ShapeTracker.from_shape((1,)).expand((5,)).real_size() == 1


# ---------------------------------------------------------------------------------------------------------------
# property tests: random movement chains against numpy

MAX_SIZE = 256


@st.composite
def small_shapes(draw: Any) -> tuple[int, ...]:
  ndim = draw(st.integers(0, 4))
  shape: list[int] = []
  for _ in range(ndim):
    limit = max(1, min(6, 64 // max(1, int(np.prod(shape)))))
    shape.append(draw(st.integers(1, limit)))
  if shape and draw(st.integers(0, 19)) == 0: shape[draw(st.integers(0, len(shape) - 1))] = 0
  return tuple(shape)


def _factorization(draw: Any, size: int) -> tuple[int, ...]:
  if size == 0:
    dims = list(draw(st.lists(st.integers(1, 3), min_size=0, max_size=2)))
    dims.insert(draw(st.integers(0, len(dims))), 0)
    return tuple(dims)
  dims, remaining = [], size
  while remaining > 1 and len(dims) < 4:
    divisors = [d for d in range(2, remaining + 1) if remaining % d == 0]
    dims.append(draw(st.sampled_from(divisors)))
    remaining //= dims[-1]
  if remaining > 1: dims.append(remaining)
  for _ in range(draw(st.integers(0, 2))): dims.insert(draw(st.integers(0, len(dims))), 1)
  return tuple(dims)


@st.composite
def movement_op(draw: Any, shape: tuple[int, ...], history: list[tuple[int, ...]]) -> tuple[str, Any]:
  size, ndim = int(np.prod(shape)), len(shape)
  choices = ["reshape", "permute", "pad", "shrink", "flip"] + (["expand"] if 1 in shape else [])
  op = draw(st.sampled_from(choices))
  if op == "reshape":
    earlier = [s for s in history if int(np.prod(s)) == size and s != shape]
    if earlier and draw(st.booleans()): return op, draw(st.sampled_from(earlier))   # often undo a reshape
    return op, _factorization(draw, size)
  if op == "permute": return op, tuple(draw(st.permutations(range(ndim))))
  if op == "expand":
    new = tuple(draw(st.integers(1, 4)) if s == 1 else s for s in shape)
    return (op, new) if int(np.prod(new)) <= MAX_SIZE else (op, shape)
  if op == "pad":
    padding = tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in shape)
    new_size = int(np.prod([s + before + after for s, (before, after) in zip(shape, padding)]))
    return (op, padding) if new_size <= MAX_SIZE else (op, tuple((0, 0) for _ in shape))
  if op == "shrink":
    bounds = []
    allow_empty = draw(st.integers(0, 9)) == 0   # an empty result now and then, not half the time
    for s in shape:
      if s == 0 or allow_empty:
        start = draw(st.integers(0, s))
        bounds.append((start, draw(st.integers(start, s))))
      else:
        start = draw(st.integers(0, s - 1))
        bounds.append((start, draw(st.integers(start + 1, s))))
    return op, tuple(bounds)
  axes = draw(st.lists(st.integers(0, ndim - 1), unique=True, max_size=ndim)) if ndim else []
  return op, tuple(axes)


@st.composite
def movement_chain(draw: Any, shape: tuple[int, ...], min_ops: int = 1, max_ops: int = 6) -> list[tuple[str, Any]]:
  chain: list[tuple[str, Any]] = []
  history = [shape]
  for _ in range(draw(st.integers(min_ops, max_ops))):
    op, arg = draw(movement_op(shape, history))
    chain.append((op, arg))
    shape = apply_numpy(np.empty(shape, dtype=np.int8), op, arg).shape
    history.append(shape)
  return chain


def run_chain(tracker: ShapeTracker, array: np.ndarray,
              chain: list[tuple[str, Any]]) -> tuple[ShapeTracker, np.ndarray]:
  for op, arg in chain:
    tracker, array = apply_tracker(tracker, op, arg), apply_numpy(array, op, arg)
  return tracker, array


@st.composite
def shape_and_chain(draw: Any) -> tuple[tuple[int, ...], list[tuple[str, Any]]]:
  shape = draw(small_shapes())
  return shape, draw(movement_chain(shape))


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape_and_chain())
def test_random_movement_chains_match_numpy(case: tuple[tuple[int, ...], list[tuple[str, Any]]]):
  shape, chain = case
  tracker, expected = run_chain(ShapeTracker.from_shape(shape), numpy_base(shape), chain)
  check_against_numpy(tracker, expected, int(np.prod(shape)))
  reshapes = sum(1 for op, _ in chain if op == "reshape")
  assert len(tracker.views) <= reshapes + 1, tracker


@st.composite
def two_chains(draw: Any) -> tuple[tuple[int, ...], list[tuple[str, Any]], list[tuple[str, Any]]]:
  shape = draw(small_shapes())
  first = draw(movement_chain(shape, max_ops=4))
  middle = run_chain(ShapeTracker.from_shape(shape), numpy_base(shape), first)[0].shape
  return shape, first, draw(movement_chain(middle, max_ops=4))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(two_chains())
def test_composition_matches_numpy(case: tuple[tuple[int, ...], list[tuple[str, Any]], list[tuple[str, Any]]]):
  shape, first_chain, second_chain = case
  first, middle = run_chain(ShapeTracker.from_shape(shape), numpy_base(shape), first_chain)
  second, expected = run_chain(ShapeTracker.from_shape(first.shape), middle, second_chain)
  composed = first + second
  check_against_numpy(composed, expected, int(np.prod(shape)))
  reshapes = sum(1 for op, _ in first_chain + second_chain if op == "reshape")
  assert len(composed.views) <= reshapes + 1, composed


def test_mask_survives_a_flat_position_past_int32():
  # 2052 x 2048 x 2048 elements of padded view: the later view's flat position passes 2**31, the element's
  # row (position // 2048**2) doesn't; the row's mask must still be checked (it was dropped: an overflowed sum's
  # bounds are int32's, and dividing those made the row look < 2048)
  tracker = ShapeTracker.from_shape((2048, 2048, 2048)).pad(((0, 4), (0, 0), (0, 0))).reshape((342, 6, 2048, 2048))
  _, valid = tracker.to_indexed_uops()
  assert valid.evaluate({"idx0": 341, "idx1": 1, "idx2": 0, "idx3": 0}) is True
  assert valid.evaluate({"idx0": 341, "idx1": 4, "idx2": 0, "idx3": 0}) is False
