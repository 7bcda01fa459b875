"""Issue #25's creation, shape and indexing API vs torch: requires_grad= on creation functions, meshgrid,
scaled_uniform, repeat with more repeats than dims, fancy indexing with lists, scatter(reduce=), scatter_reduce,
masked_select, and the errors that must match torch's (gather, eye, linspace, cumsum/cumprod, einsum).
"""
from __future__ import annotations
import numpy as np
import pytest
import torch
from minigrad import Tensor, dtypes
from torch_compare import assert_same, randn


def _gradients_match(fn, torch_fn, *arrays: np.ndarray, seed: int = 40) -> None:
  """Values of fn vs torch_fn and the gradients of each float input for a random upstream gradient."""
  mine = [Tensor(a, requires_grad=a.dtype.kind == "f") for a in arrays]
  theirs = [torch.tensor(a, requires_grad=a.dtype.kind == "f") for a in arrays]
  out, expected = fn(*mine), torch_fn(*theirs)
  assert_same(out, expected)
  upstream = randn(*expected.shape, seed=seed)
  (out * Tensor(upstream)).sum().backward()
  (expected * torch.tensor(upstream)).sum().backward()
  for m, t in zip(mine, theirs):
    if t.grad is not None: np.testing.assert_allclose(m.grad.numpy(), t.grad.numpy(), rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- creation

def test_creation_functions_take_requires_grad():
  made = [Tensor.eye(3, requires_grad=True), Tensor.eye(2, 3, dtype=dtypes.float64, requires_grad=True),
          Tensor.linspace(0, 1, 4, requires_grad=True), Tensor.scaled_uniform(2, 3, requires_grad=True),
          Tensor.rand(2, requires_grad=True), Tensor.randn(2, requires_grad=True), Tensor.uniform(2, requires_grad=True)]
  for t in made:
    assert t.requires_grad is True and t.is_leaf
    (t * 2).sum().backward()
    np.testing.assert_array_equal(t.grad.numpy(), np.full(t.shape, 2.0))
  assert Tensor.eye(2).requires_grad is None and Tensor.randint(3, requires_grad=False).requires_grad is False
  with pytest.raises(RuntimeError, match="Only Tensors of floating point"): Tensor.randint(3, requires_grad=True)
  with pytest.raises(RuntimeError, match="Only Tensors of floating point"): Tensor.eye(2, dtype=dtypes.int32, requires_grad=True)
  with pytest.raises(TypeError, match="requires_grad must be a bool"): Tensor.linspace(0, 1, 3, requires_grad="yes")


def test_scaled_uniform_range_and_shape():
  Tensor.manual_seed(3)
  t = Tensor.scaled_uniform(8, 8)
  assert t.shape == (8, 8) and t.dtype == dtypes.float32
  values = t.numpy()
  assert np.abs(values).max() <= 1 / 8 and values.std() > 0.02     # U(-1, 1) / sqrt(64)


@pytest.mark.parametrize("indexing", ["ij", "xy"])
def test_meshgrid(indexing):
  a, b, c = randn(2, seed=1), randn(3, seed=2), randn(4, seed=3)
  for arrays in ((a, b), (a, b, c), (a,)):
    grids = Tensor.meshgrid(*[Tensor(x) for x in arrays], indexing=indexing)
    expected = torch.meshgrid(*[torch.tensor(x) for x in arrays], indexing=indexing)
    assert len(grids) == len(expected)
    for g, e in zip(grids, expected): assert_same(g, e)
  grids = Tensor(np.array([1, 2])).meshgrid(Tensor(np.array(5)), indexing=indexing)   # method form, a 0-d input
  expected = torch.meshgrid(torch.tensor([1, 2]), torch.tensor(5), indexing=indexing)
  for g, e in zip(grids, expected): assert_same(g, e)
  _gradients_match(lambda x, y: sum(g * (i + 1) for i, g in enumerate(x.meshgrid(y, indexing=indexing))),
                   lambda x, y: sum(g * (i + 1) for i, g in enumerate(torch.meshgrid(x, y, indexing=indexing))), a, b)


def test_meshgrid_errors():
  with pytest.raises(RuntimeError, match="indexing must be one of"): Tensor([1]).meshgrid(Tensor([2]), indexing="yx")
  with pytest.raises(RuntimeError, match="Expected 0D or 1D tensor"): Tensor([[1]]).meshgrid(Tensor([2]))
  with pytest.raises(RuntimeError, match="same dtype"): Tensor([1]).meshgrid(Tensor([2.0]))


# ---------------------------------------------------------------- shape

def test_repeat_with_more_repeats_than_dims():
  _gradients_match(lambda x: x.repeat(2, 1, 3), lambda x: x.repeat(2, 1, 3), randn(2, 3, seed=4))
  _gradients_match(lambda x: x.repeat((2, 2, 1, 2)), lambda x: x.repeat((2, 2, 1, 2)), randn(3, seed=5))
  assert_same(Tensor(np.array(7)).repeat(2, 3), torch.tensor(7).repeat(2, 3))
  with pytest.raises(RuntimeError, match="can not be smaller"): Tensor(randn(2, 3)).repeat(2)


# ---------------------------------------------------------------- indexing

@pytest.mark.parametrize("make_index", [
  lambda T: ([1, 0],),
  lambda T: ([1, 0], slice(None), [3, 2]),
  lambda T: ([[0, 1], [1, 1]], T([2, 0])),              # a list of lists beside a tensor
  lambda T: (slice(None), [0, 2], None, T([1, 3])),      # separated advanced indices: their dims go first
  lambda T: (..., [-1, 0]),
])
def test_fancy_indexing_with_lists(make_index):
  _gradients_match(lambda x: x[make_index(Tensor)], lambda x: x[make_index(torch.tensor)], randn(2, 3, 4, seed=6))


@pytest.mark.filterwarnings("ignore:The reduce argument of torch.scatter")
def test_scatter_with_reduce():
  x, src = randn(3, 4, seed=7), randn(2, 4, seed=8)
  index = np.array([[0, 1, 0, 2], [2, 2, 0, 1]])
  for reduce in ("add", "multiply"):
    expected = torch.tensor(x).scatter(0, torch.tensor(index), torch.tensor(src), reduce=reduce)
    assert_same(Tensor(x).scatter(0, Tensor(index), Tensor(src), reduce=reduce), expected)
    assert_same(Tensor(x).scatter(1, Tensor(index), 2.0, reduce=reduce), torch.tensor(x).scatter(1, torch.tensor(index), 2.0, reduce=reduce))
  with pytest.raises(RuntimeError, match="reduce argument must be either add or multiply"):
    Tensor(x).scatter(0, Tensor(index), Tensor(src), reduce="sum")


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce(reduce, include_self):
  index = np.array([[0, 1, 0, 2], [2, 2, 0, 1]])     # repeated targets and untouched rows
  _gradients_match(lambda x, s: x.scatter_reduce(0, Tensor(index), s, reduce, include_self=include_self),
                   lambda x, s: x.scatter_reduce(0, torch.tensor(index), s, reduce, include_self=include_self),
                   randn(4, 4, seed=9), randn(2, 4, seed=10))


def test_scatter_reduce_errors():
  x, index = Tensor(randn(3, 4)), Tensor(np.array([[0, 1]]))
  with pytest.raises(RuntimeError, match="reduce argument must be either sum, prod, mean, amax or amin"):
    x.scatter_reduce(0, index, Tensor(randn(1, 2)), "max")
  with pytest.raises(RuntimeError, match="index 3 is out of bounds"): x.scatter_reduce(0, Tensor(np.array([[3]])), Tensor(randn(1, 1)), "sum")
  with pytest.raises(RuntimeError, match="same number of dimensions"): x.scatter_reduce(0, Tensor([0]), Tensor(randn(1)), "sum")


@pytest.mark.parametrize("mask_shape", [(3, 4), (4,), (3, 1)])
def test_masked_select(mask_shape):
  mask = np.random.default_rng(11).uniform(size=mask_shape) > 0.4
  _gradients_match(lambda x: x.masked_select(Tensor(mask)), lambda x: x.masked_select(torch.tensor(mask)), randn(3, 4, seed=12))
  nothing = np.zeros(mask_shape, np.bool_)
  _gradients_match(lambda x: x.masked_select(Tensor(nothing)), lambda x: x.masked_select(torch.tensor(nothing)), randn(3, 4, seed=12))


def test_masked_select_errors():
  with pytest.raises(RuntimeError, match="expected BoolTensor for mask"): Tensor(randn(2, 2)).masked_select(Tensor(randn(2, 2)))
  with pytest.raises(RuntimeError, match="can't be broadcast"): Tensor(randn(2, 2)).masked_select(Tensor(np.ones(3, np.bool_)))


# ---------------------------------------------------------------- errors as torch raises them

def test_errors_match_torch():
  x = Tensor(randn(2, 2))
  with pytest.raises(RuntimeError, match="Index tensor must have the same number of dimensions"): x.gather(1, Tensor([0, 1]))
  with pytest.raises(RuntimeError, match="must be greater or equal to 0"): Tensor.eye(-1)
  with pytest.raises(RuntimeError, match="non-negative"): Tensor.linspace(0, 1, -1)
  with pytest.raises(TypeError): Tensor.linspace(0, 1, 2.5)
  with pytest.raises(IndexError, match="Dimension out of range"): Tensor(randn(2)).cumsum(1)
  with pytest.raises(IndexError, match="Dimension out of range"): Tensor(randn(2)).cumprod(-2)
  with pytest.raises(IndexError, match="Dimension out of range"): Tensor(randn(2)).logcumsumexp(3)
  with pytest.raises(RuntimeError, match="fewer operands"): Tensor.einsum("ij,jk->ik", x)
  with pytest.raises(RuntimeError, match="does not broadcast"): Tensor.einsum("ij,jk->ik", x, Tensor(randn(3, 2)))


# ---------------------------------------------------------------- the functions defined in minigrad/tensor/tensor.py
# (full, zeros, ones, empty, arange, the *_like functions, reshape, flip)

def test_basic_creation_takes_requires_grad():
  like = Tensor(randn(2, 3))
  made = [Tensor.ones(3, requires_grad=True), Tensor.zeros(2, 2, requires_grad=True), Tensor.full((2,), 1.5, requires_grad=True),
          Tensor.empty(2, requires_grad=True), Tensor.arange(3.0, requires_grad=True), Tensor.arange(0, 1, 0.25, requires_grad=True),
          like.zeros_like(requires_grad=True), like.ones_like(requires_grad=True), like.full_like(2.0, requires_grad=True),
          like.empty_like(requires_grad=True), like.rand_like(requires_grad=True)]
  for t in made:
    assert t.requires_grad is True and t.is_leaf
    (t.zeros_like() + t * 3).sum().backward()
    np.testing.assert_array_equal(t.grad.numpy(), np.full(t.shape, 3.0))
  assert Tensor.ones(2).requires_grad is None
  with pytest.raises(RuntimeError, match="Only Tensors of floating point"): Tensor.arange(3, requires_grad=True)
  with pytest.raises(RuntimeError, match="Only Tensors of floating point"): Tensor.zeros(3, dtype=dtypes.int32, requires_grad=True)


def test_reshape_none_flip_repeated_and_negative_sizes():
  x = Tensor(randn(2, 3, 4))
  assert x.reshape(None, 12).shape == (2, 12)
  assert x.reshape((None, None, 2, 2)).shape == (2, 3, 2, 2)
  assert x.reshape(None, -1).shape == (2, 12)
  np.testing.assert_array_equal(x.reshape(None, 4, 3).numpy(), x.numpy().reshape(2, 4, 3))
  with pytest.raises(RuntimeError, match="None"): Tensor(randn(3)).reshape(3, None)
  with pytest.raises(RuntimeError, match="dim 0 appears multiple times"): x.flip(0, 0)
  with pytest.raises(RuntimeError, match="dim 2 appears multiple times"): x.flip(2, -1)
  for make in (lambda: Tensor.zeros(-1), lambda: Tensor.ones(2, -3), lambda: Tensor.full((2, -1), 1.0), lambda: Tensor.rand(-2)):
    with pytest.raises(RuntimeError, match="Trying to create tensor with negative dimension"): make()


def test_fancy_indexing_with_lists_mixing_tensors():
  for make_index in (lambda T: ([T(1), 0],), lambda T: ([T(1), 0], [2, T(0)]), lambda T: (slice(None), [T(2), 0, T(1)])):
    _gradients_match(lambda x: x[make_index(Tensor)], lambda x: x[make_index(torch.tensor)], randn(2, 3, 4, seed=13))
