"""sort / argsort / topk / msort vs torch: values, int64 indices, stability (equal elements keep their order, also
descending), NaN and -0.0, every dtype family, any dim, and the gradient of the values. Each algorithm runs on the
same cases: the rank sort, the bitonic network, and (on devices whose renderer sorts rows: CPU) the SORT kernel,
forced through the policy function sort_ops calls; sizes around each of the SORT kernel's thresholds; the policy's
own choices. Run per device with DEV=CPU|LLVM|CL|PYTHON.
"""
from __future__ import annotations
import math
import numpy as np
import pytest
import torch
import minigrad.tensor.sort_ops as sorting
from minigrad import Tensor
from minigrad.codegen import sort_kernel
from minigrad.opt import sort_policy
from minigrad.runtime.device import Device
from torch_compare import assert_same, randn

SORTS_ROWS = getattr(Device[Device.DEFAULT].renderer, "sorts_rows", False)


def force(monkeypatch, algorithm: str) -> None:
  """Every sort takes `algorithm` (a 64-bit key still takes the network when "rows" is asked: the SORT kernel packs
  a 32-bit key with the position)."""
  if algorithm == "rows" and not SORTS_ROWS: pytest.skip(f"{Device.DEFAULT}'s renderer doesn't sort rows")
  monkeypatch.setattr(sorting, "sort_algorithm", lambda renderer, rows, n, key_bits: algorithm)


@pytest.fixture(params=["rank", "network", "rows"])
def algorithm(request, monkeypatch):
  force(monkeypatch, request.param)
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


@pytest.mark.parametrize("dtype", ["int32", "int64", "float64", "int8", "uint8", "int16", "bool", "float16"])
def test_sort_other_dtypes(dtype, algorithm):
  x = _ties_and_specials(2, 9, seed=1)
  x = np.nan_to_num(x, nan=3, posinf=100, neginf=-100).astype(dtype) if dtype not in ("float64", "float16") else x.astype(dtype)
  _check_sort(x, -1, descending=False)
  _check_sort(x, -1, descending=True)


def test_sort_extreme_integers(algorithm):
  x = np.array([[2**31 - 1, -2**31, 0, -1, 1, -2**31, 2**31 - 1, 7] * 3], np.int32)
  _check_sort(x, -1, descending=False)
  _check_sort(x, -1, descending=True)
  _check_sort(x.astype(np.int64) * 2**32, -1, descending=False)


def test_sort_gradient_goes_back_to_each_element(algorithm):
  x = randn(3, 13, seed=2)
  upstream = randn(3, 13, seed=3)
  mine, theirs = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
  values, expected = mine.sort(1, descending=True).values, theirs.sort(dim=1, descending=True).values
  assert_same(values, expected)
  (values * Tensor(upstream)).sum().backward()
  (expected * torch.tensor(upstream)).sum().backward()
  np.testing.assert_allclose(mine.grad.numpy(), theirs.grad.numpy(), rtol=1e-6)


@pytest.mark.parametrize("dtype", ["float16", "float64"])
def test_sort_gradient_other_float_dtypes(dtype, algorithm):
  x, upstream = randn(2, 20, seed=12).astype(dtype), randn(2, 20, seed=13).astype(dtype)
  mine, theirs = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
  (mine.sort(-1).values * Tensor(upstream)).sum().backward()
  (theirs.sort(dim=-1).values * torch.tensor(upstream)).sum().backward()
  np.testing.assert_allclose(mine.grad.numpy().astype(np.float64), theirs.grad.numpy().astype(np.float64), rtol=1e-3)


# around every threshold of the SORT kernel (insertion, radix in cache, 11-bit digits) and of the policy
ROW_LENGTHS = sorted({sort_policy.ROW_SORT_MIN_ROW - 1, sort_policy.ROW_SORT_MIN_ROW, sort_policy.ROW_SORT_MIN_ROW + 1,
                      sort_kernel.SMALL_ROW - 1, sort_kernel.SMALL_ROW, sort_kernel.SMALL_ROW + 1,
                      sort_kernel.CACHED_ROW - 1, sort_kernel.CACHED_ROW, sort_kernel.CACHED_ROW + 1, 70_000})


@pytest.mark.parametrize("n", ROW_LENGTHS)
def test_sort_row_lengths_around_thresholds(n, monkeypatch):
  """Random floats with ties (rounded), specials at the ends, both orders, at the lengths the policy and the SORT
  kernel treat differently: with the policy's choice, and (where the renderer sorts rows) with the SORT kernel.
  Devices without it check up to the CACHED_ROW lengths."""
  if n > sort_kernel.CACHED_ROW and not SORTS_ROWS: pytest.skip("long rows on the network: covered on the devices that sort rows")
  x = np.round(randn(2, n, seed=n) * 8) / 4
  x[0, :3], x[1, -3:] = [math.nan, -0.0, math.inf], [-math.inf, 0.0, math.nan]
  for descending in (False, True): _check_sort(x, -1, descending)
  if SORTS_ROWS:
    force(monkeypatch, "rows")
    for descending in (False, True): _check_sort(x, -1, descending)


def test_sort_keys_in_every_digit(monkeypatch):
  """Keys that differ in every 8- and 11-bit digit; that share all but the lowest digit (skipped passes); all equal;
  and, for the SORT kernel, a long row whose top digit's buckets are too long to sort one by one (passes over the
  whole row) beside one whose buckets take the cache path."""
  if not SORTS_ROWS: pytest.skip(f"{Device.DEFAULT}'s renderer doesn't sort rows: long rows are covered by the network tests")
  force(monkeypatch, "rows")
  rng = np.random.default_rng(7)
  for x in (rng.integers(-2**31, 2**31 - 1, (1, 6000), dtype=np.int64).astype(np.int32),
            rng.integers(0, 3, (1, 6000)).astype(np.int32) + 1000,
            np.full((1, 5000), 3.5, np.float32),
            rng.integers(0, 2**23, (1, 300_000)).astype(np.int32),
            rng.integers(-2**31, 2**31 - 1, (2, 150_000), dtype=np.int64).astype(np.int32)):
    _check_sort(x, -1, descending=False)
    _check_sort(x, -1, descending=True)


def test_sort_many_rows_and_other_axes(algorithm):
  x = np.round(randn(40, 50, seed=8) * 4)
  _check_sort(x, 1, descending=False)
  _check_sort(x, 0, descending=True)
  y = np.round(randn(3, 20, 5, seed=9) * 3)
  _check_sort(y, 1, descending=False)
  _check_sort(y, 0, descending=True)


@pytest.mark.parametrize("largest", [True, False])
def test_topk_values_indices_and_gradient(largest, algorithm):
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


@pytest.mark.parametrize("largest", [True, False])
def test_topk_of_a_long_row(largest):
  """The policy's own choice for a long row (the SORT kernel on CPU); k of 10 and of 1000."""
  n = 20_000 if SORTS_ROWS else 3000
  x = np.random.default_rng(10).permutation(n).astype(np.float32).reshape(1, n) / 7   # distinct values
  for k in (10, 1000):
    got, expected = Tensor(x).topk(k, largest=largest), torch.tensor(x).topk(k, largest=largest)
    assert_same(got.values, expected.values)
    assert_same(got.indices, expected.indices)


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


def test_sort_policy():
  """Which algorithm the policy picks, for renderers that do and don't sort rows."""
  class Rows: sorts_rows = True
  class NoRows: sorts_rows = False
  assert sort_policy.sort_algorithm(Rows(), 1, 1 << 20, 32) == "rows"
  assert sort_policy.sort_algorithm(Rows(), 1, 1 << 20, 64) == "network"     # a 64-bit key doesn't pack
  assert sort_policy.sort_algorithm(Rows(), 100, 8, 32) == "rank"            # shorter than ROW_SORT_MIN_ROW
  assert sort_policy.sort_algorithm(Rows(), 1 << 20, 8, 32) == "rows"       # ... unless the rank sort is too much work
  assert sort_policy.sort_algorithm(NoRows(), 1 << 20, 8, 32) == "network"
  assert sort_policy.sort_algorithm(NoRows(), 1, 1 << 20, 32) == "network"
  assert sort_policy.sort_algorithm(NoRows(), 4, 100, 32) == "rank"
  assert sort_policy.sort_algorithm(object(), 4, 100, 32) == "rank"


def test_sort_errors():
  x = Tensor(randn(2, 3))
  with pytest.raises(IndexError, match="Dimension out of range"): x.sort(2)
  with pytest.raises(RuntimeError, match="selected index k out of range"): x.topk(4)
  with pytest.raises(RuntimeError, match="selected index k out of range"): x.topk(-1)
  with pytest.raises(TypeError): x.topk(1.5)
