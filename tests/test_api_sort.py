"""sort / argsort / topk / msort vs torch: values, int64 indices, stability (equal elements keep their order, also
descending), NaN and -0.0, every dtype family, any dim, and the gradient of the values; both algorithms (the rank
sort for short rows, the bitonic network for long ones) run on the same cases.
"""
from __future__ import annotations
import math
import numpy as np
import pytest
import torch
import minigrad.tensor.sort_ops as sorting
from minigrad import Tensor
from torch_compare import assert_same, randn


@pytest.fixture(params=["rank", "network"])
def algorithm(request, monkeypatch):
  """Run the test with each algorithm: the rank sort's limit set to 0 sends every row to the bitonic network."""
  if request.param == "network": monkeypatch.setattr(sorting, "RANK_SORT_MAX_WORK", 0)
  return request.param


def _ties_and_specials(rows: int, n: int, seed: int = 0) -> np.ndarray:
  """Small integers (many ties) with NaN, -0.0, 0.0 and infinities mixed in."""
  x = np.random.default_rng(seed).integers(-4, 5, (rows, n)).astype(np.float32)
  x[0, 1], x[0, 4], x[1 % rows, 2], x[1 % rows, 3] = math.nan, -0.0, math.inf, -math.inf
  x[0, 7] = math.nan
  return x


def _check_sort(x: np.ndarray, dim: int, descending: bool) -> None:
  values, indices = Tensor(x).sort(dim, descending=descending)
  expected = torch.tensor(x).sort(dim=dim, descending=descending, stable=True)
  assert_same(indices, expected.indices)
  assert_same(values, expected.values)


@pytest.mark.parametrize("descending", [False, True])
def test_sort_floats_with_ties_nan_and_zeros(algorithm, descending):
  x = _ties_and_specials(3, 12)
  _check_sort(x, 1, descending)
  _check_sort(x, 0, descending)


@pytest.mark.parametrize("dtype, network", [("int32", False), ("int64", False), ("float64", False), ("int8", False), ("uint8", False),
                                             ("bool", False), ("float16", False), ("int64", True), ("float64", True), ("int8", True)])
def test_sort_other_dtypes(dtype, network, monkeypatch):
  if network: monkeypatch.setattr(sorting, "RANK_SORT_MAX_WORK", 0)
  x = _ties_and_specials(2, 9, seed=1)
  x = np.nan_to_num(x, nan=3, posinf=100, neginf=-100).astype(dtype) if dtype not in ("float64", "float16") else x.astype(dtype)
  _check_sort(x, -1, descending=False)
  _check_sort(x, -1, descending=True)


def test_sort_gradient_goes_back_to_each_element(algorithm):
  x = randn(3, 13, seed=2)
  upstream = randn(3, 13, seed=3)
  mine, theirs = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
  values, expected = mine.sort(1, descending=True).values, theirs.sort(dim=1, descending=True).values
  assert_same(values, expected)
  (values * Tensor(upstream)).sum().backward()
  (expected * torch.tensor(upstream)).sum().backward()
  np.testing.assert_allclose(mine.grad.numpy(), theirs.grad.numpy(), rtol=1e-6)


@pytest.mark.parametrize("largest", [True, False])
def test_topk_values_indices_and_gradient(largest):
  x = randn(4, 30, seed=4)            # distinct values: torch's topk leaves the order of ties unspecified
  upstream = randn(4, 5, seed=5)
  mine, theirs = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
  got, expected = mine.topk(5, largest=largest), theirs.topk(5, largest=largest)
  assert_same(got.values, expected.values)
  assert_same(got.indices, expected.indices)
  (got.values * Tensor(upstream)).sum().backward()
  (expected.values * torch.tensor(upstream)).sum().backward()
  np.testing.assert_allclose(mine.grad.numpy(), theirs.grad.numpy())
  values, indices = Tensor(x).topk(2, dim=0, largest=largest)    # unpacks like torch's named tuple
  expected = torch.tensor(x).topk(2, dim=0, largest=largest)
  assert_same(values, expected.values)
  assert_same(indices, expected.indices)


def test_argsort_msort_and_small_shapes():
  x = _ties_and_specials(3, 9, seed=6)
  assert_same(Tensor(x).argsort(0, descending=True), torch.tensor(x).argsort(dim=0, descending=True, stable=True))
  assert_same(Tensor(x).msort(), torch.tensor(x).msort())
  assert_same(Tensor(x[:, :1]).sort(1).values, torch.tensor(x[:, :1]).sort(dim=1).values)        # one element per row
  scalar = Tensor(2.5).sort()
  assert scalar.values.item() == 2.5 and scalar.indices.item() == 0
  empty = Tensor(np.zeros((0, 3), np.float32)).sort(1)
  assert empty.values.shape == (0, 3) and empty.indices.shape == (0, 3)
  assert Tensor(x).topk(0).values.shape == (3, 0)


def test_sort_errors():
  x = Tensor(randn(2, 3))
  with pytest.raises(IndexError, match="Dimension out of range"): x.sort(2)
  with pytest.raises(RuntimeError, match="selected index k out of range"): x.topk(4)
  with pytest.raises(RuntimeError, match="selected index k out of range"): x.topk(-1)
  with pytest.raises(TypeError): x.topk(1.5)
