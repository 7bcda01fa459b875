"""Issue #25's math functions vs torch: hyperbolic and inverse trigonometric functions (values across their domains,
special values and gradients), softsign, copysign, isclose, isinf's sides, the tinygrad names (neg, mod, idiv,
lshift, rshift), div's rounding modes, logcumsumexp, and sum/prod/mean with dtype=.

Inputs are packed: one array holds the special values and a spread of ordinary ones, so one kernel checks them all.
"""
from __future__ import annotations
import math
import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from minigrad import Tensor, dtypes
from torch_compare import assert_same, randn

SPECIAL = [0.0, -0.0, 1e-30, -1e-8, 1e-4, 0.5, -0.5, 0.999, -0.999, 1.0, -1.0, 1.5, -2.5, 20.0, -20.0, 88.9, 89.3, -89.3,
           700.0, 3e10, -3e10, math.inf, -math.inf, math.nan]
UNARY = ["sinh", "cosh", "asin", "acos", "atan", "asinh", "acosh", "atanh"]


def _inputs(seed: int = 0) -> np.ndarray:
  rng = np.random.default_rng(seed)
  return np.concatenate([np.array(SPECIAL), rng.standard_normal(60) * 3, rng.uniform(-1, 1, 40), rng.uniform(1, 5, 20)])


def _assert_close(got: np.ndarray, expected: np.ndarray, rtol: float) -> None:
  """Same NaNs, same infinities, finite values within rtol (relative) or a tiny absolute error."""
  got, expected = np.asarray(got, np.float64), np.asarray(expected, np.float64)
  np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
  infinite = np.isinf(expected)
  np.testing.assert_array_equal(got[infinite], expected[infinite])
  finite = np.isfinite(expected)
  np.testing.assert_allclose(got[finite], expected[finite], rtol=rtol, atol=1e-300)


@pytest.mark.parametrize("name", UNARY)
@pytest.mark.parametrize("dtype, rtol", [("float32", 2.5e-7), ("float64", 1e-15)])
def test_hyperbolic_and_inverse_trig_values(name, dtype, rtol):
  x = _inputs().astype(dtype)
  got = getattr(Tensor(x), name)().numpy()
  with np.errstate(all="ignore"): expected = getattr(torch.tensor(x), name)().numpy()
  if name in ("sinh", "cosh") and dtype == "float32":
    # torch's float32 sinh/cosh overflow to inf from |x| = 88.72 (where exp does); the true values stay finite up
    # to 89.41, and minigrad gives them: compare those with float64's, rounded
    edge = (np.abs(x) > 88.7) & (np.abs(x) < 89.4)
    expected[edge] = getattr(np, name)(x[edge].astype(np.float64)).astype(np.float32)
    assert np.isfinite(got[edge]).all()
  _assert_close(got, expected, rtol)
  zero = (x == 0) & ~np.isnan(expected)
  np.testing.assert_array_equal(np.signbit(got[zero]), np.signbit(expected[zero]))   # odd functions keep -0.0


@pytest.mark.parametrize("name", UNARY + ["softsign"])
def test_hyperbolic_and_inverse_trig_gradients(name):
  # inside each function's domain, away from the poles where the derivative blows up
  x = {"acosh": np.linspace(1.1, 6, 12), "asin": np.linspace(-0.95, 0.95, 12), "acos": np.linspace(-0.95, 0.95, 12),
       "atanh": np.linspace(-0.95, 0.95, 12)}.get(name, np.linspace(-4, 4, 12)).astype(np.float32)
  upstream = randn(12, seed=1)
  mine, theirs = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
  torch_fn = TF.softsign if name == "softsign" else getattr(torch, name)
  out, expected = getattr(mine, name)(), torch_fn(theirs)
  assert_same(out, expected, atol=1e-6)
  (out * Tensor(upstream)).sum().backward()
  (expected * torch.tensor(upstream)).sum().backward()
  np.testing.assert_allclose(mine.grad.numpy(), theirs.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_unary_on_integers_and_half_give_torch_dtypes():
  assert_same(Tensor([0, 1, 2]).atan(), torch.tensor([0, 1, 2]).atan())
  x = np.array([-2.0, -0.3, 0.0, 0.7, 3.0], np.float16)
  assert_same(Tensor(x).sinh(), torch.tensor(x).sinh(), atol=1e-3, rtol=1e-3)
  assert_same(Tensor(x).softsign(), TF.softsign(torch.tensor(x)), atol=1e-3, rtol=1e-3)


def test_copysign_values_and_gradient():
  a = np.array([1.0, -2.0, 0.0, -0.0, math.nan, math.inf, 3.0, -4.0], np.float32)
  b = np.array([-1.0, 2.0, -0.0, -1.0, -1.0, -math.nan, 0.0, math.inf], np.float32)
  mine, theirs = Tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
  out, expected = mine.copysign(Tensor(b)), theirs.copysign(torch.tensor(b))
  assert_same(out, expected)
  np.testing.assert_array_equal(np.signbit(out.numpy()), np.signbit(expected.detach().numpy()))   # -0.0 and -nan
  out.sum().backward()
  expected.sum().backward()
  np.testing.assert_array_equal(mine.grad.numpy(), theirs.grad.numpy())
  assert_same(Tensor([1, -2, 3]).copysign(-1), torch.tensor([1, -2, 3]).copysign(-1))      # integers give floats
  assert_same(Tensor([1.5, -2.0]).copysign(Tensor([[1], [-1]])), torch.tensor([1.5, -2.0]).copysign(torch.tensor([[1], [-1]])))


@pytest.mark.parametrize("kwargs", [{}, {"equal_nan": True}, {"rtol": 0.1, "atol": 0.0}, {"rtol": 0.0, "atol": 0.5}])
def test_isclose(kwargs):
  a = np.array([1.0, math.nan, math.inf, -math.inf, math.inf, 1e-9, 100.0001, 2.0, 5.0, -0.0], np.float32)
  b = np.array([1.0 + 1e-6, math.nan, math.inf, math.inf, 1e30, 0.0, 100.0, 2.3, 4.6, 0.0], np.float32)
  assert_same(Tensor(a).isclose(Tensor(b), **kwargs), torch.tensor(a).isclose(torch.tensor(b), **kwargs))
  ints = (np.array([1, 2, 10, -3]), np.array([1, 3, 11, 3]))
  assert_same(Tensor(ints[0]).isclose(Tensor(ints[1]), **kwargs), torch.tensor(ints[0]).isclose(torch.tensor(ints[1]), **kwargs))
  assert Tensor(a[:1]).allclose(Tensor(b[:1])) is True


def test_isclose_errors():
  with pytest.raises(RuntimeError, match="did not match"): Tensor([1.0]).isclose(Tensor([1.0], dtype=dtypes.float64))
  with pytest.raises(RuntimeError, match="rtol must be greater than or equal to zero"): Tensor([1.0]).isclose(Tensor([1.0]), rtol=-1)
  with pytest.raises(RuntimeError, match="atol must be greater than or equal to zero"): Tensor([1.0]).isclose(Tensor([1.0]), atol=-1)


def test_isinf_sides():
  x = Tensor([math.inf, -math.inf, 1.0, math.nan])
  assert x.isinf().tolist() == [True, True, False, False]
  assert x.isinf(detect_positive=False).tolist() == [False, True, False, False]
  assert x.isinf(detect_negative=False).tolist() == [True, False, False, False]
  assert x.isinf(detect_positive=False, detect_negative=False).tolist() == [False] * 4
  assert Tensor([1, 2]).isinf(detect_negative=False).tolist() == [False, False]


def test_tinygrad_names_neg_mod_idiv_shifts():
  a, b = np.array([7, -7, 7, -7, 0, 5], np.int32), np.array([2, 2, -2, -2, 3, 1], np.int32)
  ta, tb = torch.tensor(a), torch.tensor(b)
  assert_same(Tensor(a).neg(), ta.neg())
  assert_same(Tensor(a).mod(Tensor(b)), ta.remainder(tb))
  assert_same(Tensor(a).idiv(Tensor(b)), ta.div(tb, rounding_mode="trunc"))
  assert_same(Tensor(a).lshift(2), ta << 2)
  assert_same(Tensor(a).rshift(1), ta >> 1)
  assert_same(Tensor(a).lshift(Tensor(np.array([0, 1, 2, 3, 4, 31], np.int32))), ta << torch.tensor([0, 1, 2, 3, 4, 31], dtype=torch.int32))
  f = np.array([7.5, -7.5, 2.0], np.float32)
  assert_same(Tensor(f).mod(2), torch.tensor(f).remainder(2))
  assert_same(Tensor(f).idiv(2), torch.tensor(f).div(2, rounding_mode="trunc"))
  assert_same(Tensor(f).neg(), torch.tensor(f).neg())


@pytest.mark.parametrize("mode", ["trunc", "floor"])
def test_div_rounding_modes_on_integers(mode):
  a = np.array([7, -7, 7, -7, 0, 6, -128, 127], np.int8)
  b = np.array([2, 2, -2, -2, 3, -4, 3, -5], np.int8)
  assert_same(Tensor(a).div(Tensor(b), rounding_mode=mode), torch.tensor(a).div(torch.tensor(b), rounding_mode=mode))
  c = np.array([10, -10, 9], np.int64)
  assert_same(Tensor(c).div(4, rounding_mode=mode), torch.tensor(c).div(4, rounding_mode=mode))


@pytest.mark.parametrize("n", [7, 150])   # 150: the blocked scan
def test_logcumsumexp_values_and_gradient(n):
  a = randn(3, n, seed=2) * 30
  a[0, :2] = -math.inf
  a[1, 1] = -1000.0          # far below the others: a plain log(cumsum(exp)) would lose it
  upstream = randn(3, n, seed=3)
  mine, theirs = Tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
  out, expected = mine.logcumsumexp(1), theirs.logcumsumexp(1)
  assert_same(out, expected, atol=2e-5)
  (out * Tensor(upstream)).sum().backward()
  (expected * torch.tensor(upstream)).sum().backward()
  np.testing.assert_allclose(mine.grad.numpy(), theirs.grad.numpy(), rtol=1e-4, atol=1e-4, equal_nan=True)
  assert_same(Tensor(a[1:]).logcumsumexp(0), torch.tensor(a[1:]).logcumsumexp(0), atol=2e-5)


def test_reductions_with_dtype():
  x = np.array([[1, 2, 3], [4, 5, 250]], np.uint8)
  t = torch.tensor(x)
  assert_same(Tensor(x).sum(dtype=dtypes.float32), t.sum(dtype=torch.float32))
  assert_same(Tensor(x).sum(1, dtype=dtypes.uint8), t.sum(1, dtype=torch.uint8))     # wraps, as torch
  assert_same(Tensor(x).prod(0, dtype=dtypes.int16), t.prod(0, dtype=torch.int16))
  assert_same(Tensor(x).mean(dtype=dtypes.float64), t.mean(dtype=torch.float64))
  assert_same(Tensor(x).mean(1, keepdim=True, dtype="float16"), t.mean(1, keepdim=True, dtype=torch.float16), atol=1e-3)
  f = randn(2, 3, seed=4)
  assert_same(Tensor(f).mean(0, dtype=dtypes.float64), torch.tensor(f).mean(0, dtype=torch.float64))
  with pytest.raises(RuntimeError, match="floating point"): Tensor(x).mean(dtype=dtypes.int32)
