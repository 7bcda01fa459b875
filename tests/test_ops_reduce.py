"""Reductions and scans against torch, forward and backward: prod, var/std, argmax/argmin, any/all, logsumexp,
softmax/log_softmax edge cases and cumsum/cumprod/cummax/cummin.

Each case builds the same inputs in minigrad and torch (optionally through the same non-contiguous view: transposed,
sliced, expanded), compares shape, dtype and values, then backpropagates the same random upstream gradient
through both and compares the gradients of the leaves (float32, atol 1e-4). Shapes are small: compiling kernels
dominates the runtime.
"""
from __future__ import annotations
from typing import Any, Callable
import numpy as np
import pytest
import torch
from minigrad import Tensor, dtypes

from torch_compare import assert_same, randint, randn


def outputs(result: Any) -> list:
  return list(result) if isinstance(result, (tuple, list)) else [result]


def compare(fn: Callable, *arrays: np.ndarray, torch_fn: Callable | None = None, view: Callable | None = None,
            grad: bool = True, atol: float = 1e-4) -> None:
  """fn(*inputs) in minigrad vs (torch_fn or fn)(*inputs) in torch; with grad, also d(outputs . upstream)/d inputs."""
  view = view or (lambda t: t)
  mine = [Tensor(a, requires_grad=grad and a.dtype.kind == "f") for a in arrays]
  theirs = [torch.tensor(a, requires_grad=grad and a.dtype.kind == "f") for a in arrays]
  got, expected = outputs(fn(*[view(t) for t in mine])), outputs((torch_fn or fn)(*[view(t) for t in theirs]))
  assert len(got) == len(expected)
  for g, e in zip(got, expected): assert_same(g, e, atol=atol)
  if not grad: return
  differentiable = [(g, e) for g, e in zip(got, expected) if e.requires_grad]
  if not differentiable: return
  loss_mine, loss_theirs = None, None
  for i, (g, e) in enumerate(differentiable):
    upstream = randn(*e.shape, seed=100 + i)
    lm, lt = (g * Tensor(upstream)).sum(), (e * torch.tensor(upstream)).sum()
    loss_mine, loss_theirs = (lm, lt) if loss_mine is None else (loss_mine + lm, loss_theirs + lt)
  loss_theirs.backward()
  loss_mine.backward()
  for m, t in zip(mine, theirs):
    if t.grad is None: continue
    assert m.grad is not None, "minigrad gave no gradient where torch has one"
    np.testing.assert_allclose(m.grad.numpy(), t.grad.numpy(), atol=atol, rtol=1e-4, equal_nan=True)


VIEWS = {
  "contiguous": lambda t: t,
  "transposed": lambda t: t.transpose(0, 1),
  "sliced": lambda t: t[1:, ::2],
  "expanded": lambda t: t[:, :1].expand(4, 3),
}
VIEW_INPUT = (4, 6)   # every view above turns a (4, 6) input into a 2-d tensor


# ---------------------------------------------------------------- prod

@pytest.mark.parametrize("axis, keepdim", [(None, False), (0, False), (1, True), (-1, False)])
def test_prod_with_zeros_forward_and_gradient(axis, keepdim):
  x = randn(3, 4, seed=1)
  x[1, 2] = 0                  # row 0: no zero, row 1: one zero, row 2: two zeros
  x[2, 0], x[2, 3] = 0, 0
  tfn = (lambda t: t.prod()) if axis is None else (lambda t: t.prod(axis, keepdim))
  compare(lambda t: t.prod(axis, keepdim), x, torch_fn=tfn)
  if axis is None:
    compare(lambda t: t.prod(), x[:2], torch_fn=lambda t: t.prod())        # a single zero overall
    compare(lambda t: t.prod(), x[:1], torch_fn=lambda t: t.prod())        # no zero at all


@pytest.mark.parametrize("view", list(VIEWS))
def test_prod_non_contiguous(view):
  x = randn(*VIEW_INPUT, seed=2) * 0.5 + 1
  x[2, 2] = 0
  compare(lambda t: t.prod(0), x, view=VIEWS[view])


def test_prod_tuple_axes_matches_repeated_prod():
  x = randn(2, 3, 4, seed=3)
  compare(lambda t: t.prod((0, 2)), x, torch_fn=lambda t: t.prod(2).prod(0))
  compare(lambda t: t.prod((0, 2), keepdim=True), x, torch_fn=lambda t: t.prod(2, True).prod(0, True))


@pytest.mark.parametrize("dtype", [np.int32, np.int8, np.uint8, np.bool_, np.float64])
def test_prod_dtypes(dtype):
  x = randint(3, 4, low=0 if dtype in (np.uint8, np.bool_) else -3, high=2 if dtype == np.bool_ else 4, dtype=dtype)
  compare(lambda t: t.prod(), x, grad=False)
  compare(lambda t: t.prod(1), x, grad=False)


def test_prod_dtype_argument():
  x = randint(3, 4, dtype=np.int32)
  compare(lambda t: t.prod(1, dtype=dtypes.float32), x, torch_fn=lambda t: t.prod(1, dtype=torch.float32), grad=False)


@pytest.mark.parametrize("shape, axis", [((0, 3), 0), ((0, 3), 1), ((2, 0), None), ((), None), ((), 0), ((1, 1), 1)])
def test_prod_edge_shapes(shape, axis):
  x = randn(*shape, seed=4)
  tfn = (lambda t: t.prod()) if axis is None else (lambda t: t.prod(axis))
  compare(lambda t: t.prod(axis), x, torch_fn=tfn)


# ---------------------------------------------------------------- var / std

@pytest.mark.parametrize("fn", ["var", "std"])
@pytest.mark.parametrize("axis, keepdim, correction", [(None, False, 1), (1, False, 0), ((0, 2), True, 1.5)])
def test_var_std(fn, axis, keepdim, correction):
  x = randn(3, 4, 5, seed=5)
  compare(lambda t: getattr(t, fn)(axis, keepdim, correction=correction), x,
          torch_fn=lambda t: getattr(t, fn)(axis, keepdim=keepdim, correction=correction))


@pytest.mark.parametrize("view", ["sliced", "expanded"])
def test_var_non_contiguous(view):
  compare(lambda t: t.var(1), randn(*VIEW_INPUT, seed=6), view=VIEWS[view])


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("shape, axis, correction", [((1, 3), 0, 1), ((3,), 0, 5), ((0,), None, 1), ((), None, 1), ((), None, 0),
                                                     ((2, 0), 0, 1), ((4, 2), 0, 4)])
def test_var_degenerate_gives_nan_or_inf_like_torch(shape, axis, correction):
  x = randn(*shape, seed=7)
  tfn = (lambda t: t.var(correction=correction)) if axis is None else (lambda t: t.var(axis, correction=correction))
  compare(lambda t: t.var(axis, correction=correction), x, torch_fn=tfn, grad=False)


def test_var_mean_std_mean_and_float64():
  x = randn(3, 4, seed=8).astype(np.float64)
  compare(lambda t: t.var_mean(1), x, torch_fn=lambda t: torch.var_mean(t, 1))
  compare(lambda t: t.std_mean(0, keepdim=True), x, torch_fn=lambda t: torch.std_mean(t, 0, keepdim=True))


def test_var_of_int_raises_like_torch():
  with pytest.raises(RuntimeError, match="floating point"): Tensor([1, 2, 3]).var()
  with pytest.raises(RuntimeError): torch.tensor([1, 2, 3]).var()


# ---------------------------------------------------------------- argmax / argmin

@pytest.mark.parametrize("fn", ["argmax", "argmin"])
@pytest.mark.parametrize("axis, keepdim", [(None, False), (None, True), (0, False), (1, True), (-1, False)])
def test_arg_reductions_first_occurrence(fn, axis, keepdim):
  x = randint(4, 5, low=-2, high=3, seed=9).astype(np.float32)   # many ties
  compare(lambda t: getattr(t, fn)(axis, keepdim), x, torch_fn=lambda t: getattr(t, fn)(axis, keepdim=keepdim), grad=False)


@pytest.mark.parametrize("fn", ["argmax", "argmin"])
@pytest.mark.parametrize("view", list(VIEWS))
def test_arg_reductions_non_contiguous(fn, view):
  compare(lambda t: getattr(t, fn)(1), randint(*VIEW_INPUT, seed=10), view=VIEWS[view], grad=False)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int64, np.float64, np.float16])
def test_arg_reductions_dtypes(dtype):
  x = randint(3, 5, low=0, high=6, dtype=dtype, seed=11)
  compare(lambda t: t.argmax(1), x, grad=False)
  compare(lambda t: t.argmin(0), x, grad=False)
  compare(lambda t: t.argmin(), x, grad=False)


def test_arg_reductions_nan_and_inf():
  x = np.array([[1.0, np.nan, 5.0, np.nan], [-np.inf, 2.0, -np.inf, np.inf], [0.0, -0.0, 0.0, -1.0]], np.float32)
  for fn in ("argmax", "argmin"):
    compare(lambda t: getattr(t, fn)(1), x, grad=False)
    compare(lambda t: getattr(t, fn)(), x, grad=False)


def test_arg_reductions_edge_shapes():
  compare(lambda t: t.argmax(), np.float32(3.0), grad=False)
  compare(lambda t: t.argmax(0, True), np.float32(3.0), torch_fn=lambda t: t.argmax(0, keepdim=True), grad=False)
  compare(lambda t: t.argmin(1), randn(0, 3), grad=False)             # reducing a non-empty dim of an empty tensor
  compare(lambda t: t.argmax(1, True), randn(3, 1), torch_fn=lambda t: t.argmax(1, keepdim=True), grad=False)


def test_arg_reductions_errors_like_torch():
  with pytest.raises(IndexError, match="numel"): Tensor.zeros(0).argmax()
  with pytest.raises(IndexError, match="dim 1"): Tensor.zeros(2, 0).argmax(1)
  with pytest.raises(RuntimeError, match="bool"): Tensor([True, False]).argmax()
  with pytest.raises(IndexError): Tensor.zeros(2, 3).argmin(2)


# ---------------------------------------------------------------- any / all

@pytest.mark.parametrize("fn", ["any", "all"])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.bool_, np.uint8])
@pytest.mark.parametrize("axis, keepdim", [(None, False), (1, True)])
def test_any_all(fn, dtype, axis, keepdim):
  x = randint(3, 4, low=0, high=2, dtype=dtype, seed=12)
  x[1] = 1
  tfn = (lambda t: getattr(t, fn)()) if axis is None else (lambda t: getattr(t, fn)(axis, keepdim=keepdim))
  compare(lambda t: getattr(t, fn)(axis, keepdim), x, torch_fn=tfn, grad=False)


@pytest.mark.parametrize("fn", ["any", "all"])
def test_any_all_edge_cases(fn):
  compare(lambda t: getattr(t, fn)(), np.zeros(0, np.float32), grad=False)
  compare(lambda t: getattr(t, fn)(1), np.zeros((2, 0), np.float32), grad=False)
  compare(lambda t: getattr(t, fn)(0), np.zeros((3, 0), np.float32), grad=False)
  compare(lambda t: getattr(t, fn)(), np.array([np.nan, 0.5], np.float32), grad=False)
  compare(lambda t: getattr(t, fn)(0), np.float32(0.0), grad=False)
  compare(lambda t: getattr(t, fn)(0), randint(*VIEW_INPUT, low=0, high=2, seed=13), view=VIEWS["transposed"], grad=False)


# ---------------------------------------------------------------- logsumexp

@pytest.mark.parametrize("axis, keepdim", [(1, False), (0, True), ((0, 1), False), (-1, True)])
def test_logsumexp(axis, keepdim):
  x = randn(3, 5, seed=14) * 4
  compare(lambda t: t.logsumexp(axis, keepdim), x, torch_fn=lambda t: t.logsumexp(axis, keepdim=keepdim))


def test_logsumexp_is_stable_and_handles_infinities():
  x = np.array([[1e4, 1e4 + 1, -1e4], [-1e4, -1e4, -1e4 - 2], [-np.inf, 0.0, 1.0]], np.float32)
  compare(lambda t: t.logsumexp(1), x)
  special = np.array([[-np.inf, -np.inf], [np.inf, 1.0], [np.nan, 1.0]], np.float32)
  compare(lambda t: t.logsumexp(1), special, grad=False)


def test_logsumexp_edge_shapes_and_dtypes():
  compare(lambda t: t.logsumexp(0), randn(0, 3), grad=False)
  compare(lambda t: t.logsumexp(1), randn(0, 3), grad=False)
  compare(lambda t: t.logsumexp(0), np.float32(2.0))
  compare(lambda t: t.logsumexp(0), randint(3, 4), grad=False)
  compare(lambda t: t.logsumexp(1), randint(3, 4, low=0, high=2).astype(np.bool_), grad=False)
  compare(lambda t: t.logsumexp(0), randn(*VIEW_INPUT, seed=15), view=VIEWS["expanded"])


# ---------------------------------------------------------------- softmax / log_softmax (implemented elsewhere)

@pytest.mark.parametrize("fn", ["softmax", "log_softmax"])
@pytest.mark.parametrize("axis, view", [(0, "contiguous"), (1, "sliced"), (-1, "expanded")])
def test_softmax_gradients(fn, axis, view):
  compare(lambda t: getattr(t, fn)(axis), randn(*VIEW_INPUT, seed=16), view=VIEWS[view])


@pytest.mark.parametrize("fn", ["softmax", "log_softmax"])
def test_softmax_edge_cases(fn):
  compare(lambda t: getattr(t, fn)(0), np.float32(2.0))
  compare(lambda t: getattr(t, fn)(1), randn(0, 3), grad=False)
  compare(lambda t: getattr(t, fn)(1), np.array([[-np.inf, -np.inf], [-np.inf, 0.0], [np.inf, 0.0]], np.float32), grad=False)
  compare(lambda t: getattr(t, fn)(0), randn(3, 2).astype(np.float64))


def test_softmax_over_empty_dim():
  compare(lambda t: t.softmax(1), randn(3, 0), grad=False)


# ---------------------------------------------------------------- cumulative ops

def torch_cum(name: str) -> Callable:
  return {"cumsum": lambda t, a: t.cumsum(a), "cumprod": lambda t, a: t.cumprod(a),
          "cummax": lambda t, a: tuple(t.cummax(a)), "cummin": lambda t, a: tuple(t.cummin(a))}[name]


CUMULATIVE = ["cumsum", "cumprod", "cummax", "cummin"]


@pytest.mark.parametrize("name", CUMULATIVE)
@pytest.mark.parametrize("axis", [0, 1])
def test_cumulative_every_axis(name, axis):
  x = randn(3, 4, 5, seed=17)
  compare(lambda t: getattr(t, name)(axis), x, torch_fn=lambda t: torch_cum(name)(t, axis))


@pytest.mark.parametrize("name, view", [("cumsum", "transposed"), ("cumprod", "sliced"), ("cummax", "expanded"), ("cummin", "transposed")])
def test_cumulative_non_contiguous(name, view):
  compare(lambda t: getattr(t, name)(1), randn(*VIEW_INPUT, seed=18), view=VIEWS[view],
          torch_fn=lambda t: torch_cum(name)(t, 1))


@pytest.mark.parametrize("name", CUMULATIVE)
def test_cumulative_long_rows_use_blocks(name):
  x = randn(2, 300, seed=19) * (0.1 if name == "cumprod" else 1) + (1 if name == "cumprod" else 0)
  compare(lambda t: getattr(t, name)(1), x, torch_fn=lambda t: torch_cum(name)(t, 1), atol=1e-3)


def test_cumprod_gradient_with_zeros():
  x = randn(3, 6, seed=20)
  x[0, 2] = 0
  x[1, 1], x[1, 4] = 0, 0
  compare(lambda t: t.cumprod(1), x)


def test_cummax_ties_and_nan_indices():
  x = np.array([[1, 3, 3, 2, 3, 0], [np.nan, 1, np.nan, 5, 5, 5], [2, 2, 2, np.nan, 9, np.inf]], np.float32)
  compare(lambda t: tuple(t.cummax(1)), x, torch_fn=lambda t: tuple(t.cummax(1)), grad=False)
  compare(lambda t: tuple(t.cummin(1)), x, torch_fn=lambda t: tuple(t.cummin(1)), grad=False)
  ties = np.array([[1, 3, 3, 2, 3, 0], [4, 4, 4, 4, 4, 4]], np.float32)    # the gradient goes to the latest tie
  compare(lambda t: tuple(t.cummax(1)), ties, torch_fn=lambda t: tuple(t.cummax(1)))
  compare(lambda t: tuple(t.cummin(1)), ties, torch_fn=lambda t: tuple(t.cummin(1)))
  assert Tensor(ties).cummax(1).values.shape == (2, 6)


@pytest.mark.parametrize("name, dtype", [(name, dtype) for name in CUMULATIVE for dtype in (np.int32, np.bool_)] +
                         [("cumsum", np.uint8), ("cumsum", np.int8), ("cummax", np.uint8), ("cummin", np.int8)])
def test_cumulative_dtypes(name, dtype):
  x = randint(3, 5, low=0 if dtype in (np.bool_, np.uint8) else -3, high=2 if dtype == np.bool_ else 4, dtype=dtype, seed=21)
  compare(lambda t: getattr(t, name)(1), x, torch_fn=lambda t: torch_cum(name)(t, 1), grad=False)


@pytest.mark.parametrize("name", CUMULATIVE)
def test_cumulative_edge_shapes(name):
  compare(lambda t: getattr(t, name)(0), np.float32(2.5), torch_fn=lambda t: torch_cum(name)(t, 0))
  compare(lambda t: getattr(t, name)(1), randn(2, 0), torch_fn=lambda t: torch_cum(name)(t, 1), grad=False)
  compare(lambda t: getattr(t, name)(0), randn(1, 3), torch_fn=lambda t: torch_cum(name)(t, 0))
  with pytest.raises(IndexError): getattr(Tensor.ones(2, 3), name)(2)


def test_cumsum_dtype_argument_and_float64():
  compare(lambda t: t.cumsum(0, dtype=dtypes.float32), randint(4, 3), torch_fn=lambda t: t.cumsum(0, dtype=torch.float32), grad=False)
  compare(lambda t: t.cumsum(1), randn(3, 4).astype(np.float64))


def test_cumsum_large_int_is_exact():
  x = np.full((1, 1000), 2**22, np.int32)
  compare(lambda t: t.cumsum(1), x, grad=False)


def test_functional_softmax_dtype_argument():
  from minigrad.nn import functional as F
  x = randn(3, 4, seed=22)
  compare(lambda t: F.softmax(t, 1, dtype=dtypes.float64), x, torch_fn=lambda t: torch.softmax(t, 1, dtype=torch.float64))
  compare(lambda t: F.log_softmax(t, 0, dtype=dtypes.float64), x, torch_fn=lambda t: torch.log_softmax(t, 0, dtype=torch.float64))
