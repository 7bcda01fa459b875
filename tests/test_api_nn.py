"""Issue #25's nn functions vs torch, forward and backward: nll_loss (weights, ignore_index, reductions, N-d
inputs), binary_crossentropy(_logits) as Tensor methods with every reduction, conv with tinygrad's per-side and
negative padding (1-d, 2-d, 3-d, strided), conv_transpose3d, max_pool with return_indices and max_unpool,
trilinear interpolation with align_corners.
"""
from __future__ import annotations
import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from minigrad import Tensor
from minigrad.nn import functional as F
from torch_compare import assert_same, randn


def _compare_with_gradients(fn, torch_fn, *arrays: np.ndarray, atol: float = 1e-5, seed: int = 50) -> None:
  """fn(*tensors) vs torch_fn(*tensors): values, then the gradients of every float input for a random upstream."""
  mine = [Tensor(a, requires_grad=a.dtype.kind == "f") for a in arrays]
  theirs = [torch.tensor(a, requires_grad=a.dtype.kind == "f") for a in arrays]
  out, expected = fn(*mine), torch_fn(*theirs)
  assert_same(out, expected, atol=atol)
  upstream = randn(*expected.shape, seed=seed)
  (out * Tensor(upstream)).sum().backward()
  (expected * torch.tensor(upstream)).sum().backward()
  for m, t in zip(mine, theirs):
    if t.grad is not None: np.testing.assert_allclose(m.grad.numpy(), t.grad.numpy(), atol=atol, rtol=1e-4)


# ---------------------------------------------------------------- losses

NLL_CASES = [
  ((5, 4), dict()),
  ((5, 4), dict(weight=True, reduction="sum")),
  ((5, 4), dict(weight=True, ignore_index=2)),                   # weighted mean over the kept items
  ((2, 3, 4), dict(reduction="none", weight=True)),              # N-d: (N, C, d1)
  ((2, 3, 2, 2), dict(ignore_index=0)),
  ((4,), dict()),                                                # unbatched (C,)
]


@pytest.mark.parametrize("shape, kwargs", NLL_CASES)
def test_nll_loss(shape, kwargs):
  classes = shape[0] if len(shape) == 1 else shape[1]
  target_shape = () if len(shape) == 1 else shape[:1] + shape[2:]
  target = np.random.default_rng(1).integers(0, classes, target_shape).astype(np.int64)
  weight = np.linspace(0.5, 2.0, classes).astype(np.float32) if kwargs.pop("weight", False) else None
  mine_kw = dict(kwargs, weight=None if weight is None else Tensor(weight))
  torch_kw = dict(kwargs, weight=None if weight is None else torch.tensor(weight))
  class_axis = 0 if len(shape) == 1 else 1
  _compare_with_gradients(lambda x, t: x.log_softmax(class_axis).nll_loss(t, **mine_kw),
                          lambda x, t: TF.nll_loss(x.log_softmax(class_axis), t, **torch_kw), randn(*shape, seed=2), target)


def test_nll_loss_all_ignored_and_errors():
  x = Tensor(randn(3, 4)).log_softmax(1)
  assert np.isnan(x.nll_loss(Tensor(np.full(3, -100))).item())      # mean over nothing, as torch
  assert x.nll_loss(Tensor(np.full(3, -100)), reduction="sum").item() == 0
  with pytest.raises(RuntimeError, match="expected target dtype"): F.nll_loss(x, Tensor([0.0, 1.0, 2.0]))
  with pytest.raises(RuntimeError, match="multi-target not supported"): F.nll_loss(x, Tensor([[0], [1], [2]]))
  with pytest.raises(RuntimeError, match=r"Expected target size \[2, 2\]"): F.nll_loss(Tensor(randn(2, 3, 2)), Tensor([[0, 1, 2]] * 2))
  with pytest.raises(ValueError, match="batch_size"): F.nll_loss(x, Tensor([0, 1]))
  with pytest.raises(RuntimeError, match="weight tensor should be defined"): F.nll_loss(x, Tensor([0, 1, 2]), weight=Tensor([1.0, 2.0]))
  with pytest.raises(ValueError, match="not a valid value for reduction"): F.nll_loss(x, Tensor([0, 1, 2]), reduction="avg")


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_binary_crossentropy_methods(reduction):
  probs = np.clip(np.random.default_rng(3).uniform(0, 1, (3, 4)), 0.02, 0.98).astype(np.float32)
  probs[0, 0] = 1.0                                                  # torch clamps the log at -100
  target = np.random.default_rng(4).uniform(0, 1, (3, 4)).astype(np.float32)
  _compare_with_gradients(lambda p, t: p.binary_crossentropy(t, reduction=reduction),
                          lambda p, t: TF.binary_cross_entropy(p, t, reduction=reduction), probs, target, atol=1e-4)
  logits = randn(3, 4, seed=5) * 30                                  # large logits stay finite
  _compare_with_gradients(lambda x, t: x.binary_crossentropy_logits(t, reduction=reduction),
                          lambda x, t: TF.binary_cross_entropy_with_logits(x, t, reduction=reduction), logits, target, atol=1e-4)


# ---------------------------------------------------------------- convolution and pooling

CONV_CASES = [   # input, weight, per-side padding (last dim first), stride
  ((2, 3, 7, 6), (4, 3, 3, 2), (1, 2, 0, 1), 1),
  ((1, 3, 7, 6), (2, 3, 3, 2), (-1, 2, 2, -1), 2),   # negative amounts crop
  ((1, 2, 9), (3, 2, 3), (2, -1), 2),
  ((1, 2, 5, 6, 4), (2, 2, 3, 2, 2), (1, 0, -1, 1, 0, 2), 1),
]


@pytest.mark.parametrize("x_shape, w_shape, padding, stride", CONV_CASES)
def test_conv_tinygrad_per_side_padding(x_shape, w_shape, padding, stride):
  name = {3: "conv1d", 4: "conv2d", 5: "conv3d"}[len(x_shape)]
  _compare_with_gradients(lambda x, w: getattr(x, name)(w, padding=padding, stride=stride),
                          lambda x, w: getattr(TF, name)(TF.pad(x, padding), w, stride=stride),
                          randn(*x_shape, seed=6), randn(*w_shape, seed=7), atol=1e-4)


def test_conv_torch_padding_forms_keep_torch_errors():
  x, w = Tensor(randn(1, 2, 5, 5)), Tensor(randn(3, 2, 3, 3))
  with pytest.raises(RuntimeError, match="negative padding"): x.conv2d(w, padding=-1)
  with pytest.raises(RuntimeError, match="negative padding"): x.conv2d(w, padding=(1, -1))
  with pytest.raises(RuntimeError, match="padding"): x.conv2d(w, padding=(1, 1, 1))


def test_conv_transpose3d_strided():
  _compare_with_gradients(lambda x, w: x.conv_transpose3d(w, stride=2, padding=1, output_padding=1),
                          lambda x, w: TF.conv_transpose3d(x, w, stride=2, padding=1, output_padding=1),
                          randn(1, 2, 2, 3, 2, seed=8), randn(2, 3, 3, 2, 3, seed=9), atol=1e-4)


@pytest.mark.parametrize("shape, kwargs", [((2, 2, 6, 7), dict(kernel_size=2)),
                                           ((1, 2, 7, 7), dict(kernel_size=3, stride=2, padding=1)),
                                           ((1, 2, 5, 5), dict(kernel_size=3, stride=1))])   # overlapping windows
def test_max_pool2d_return_indices_and_max_unpool2d(shape, kwargs):
  x = randn(*shape, seed=10)
  x[0, 0, 0, :2] = 5.0                                               # a tie inside a window: the first one wins
  mine, theirs = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
  values, indices = mine.max_pool2d(**kwargs, return_indices=True)
  expected, expected_indices = TF.max_pool2d(theirs, **kwargs, return_indices=True)
  assert_same(values, expected)
  assert_same(indices, expected_indices)
  out = F.max_unpool2d(values, indices, **kwargs, output_size=shape[-2:])
  expected_out = TF.max_unpool2d(expected, expected_indices, **kwargs, output_size=shape[-2:])
  assert_same(out, expected_out)
  upstream = randn(*shape, seed=11)
  (out * Tensor(upstream)).sum().backward()
  (expected_out * torch.tensor(upstream)).sum().backward()
  np.testing.assert_allclose(mine.grad.numpy(), theirs.grad.numpy(), atol=1e-6)


def test_max_pool_indices_1d_3d_and_unpool_default_size():
  x = randn(1, 2, 9, seed=12)
  v, i = Tensor(x).max_pool1d(3, stride=2, return_indices=True)
  tv, ti = TF.max_pool1d(torch.tensor(x), 3, stride=2, return_indices=True)
  assert_same(v, tv)
  assert_same(i, ti)
  assert_same(F.max_unpool1d(v, i, 3, stride=2), TF.max_unpool1d(tv, ti, 3, stride=2))
  y = randn(1, 1, 4, 4, 4, seed=13)
  v, i = Tensor(y).max_pool3d(2, return_indices=True)
  tv, ti = TF.max_pool3d(torch.tensor(y), 2, return_indices=True)
  assert_same(i, ti)
  assert_same(F.max_unpool3d(v, i, 2), TF.max_unpool3d(tv, ti, 2))
  with pytest.raises(RuntimeError, match="indices"): F.max_unpool2d(Tensor(randn(1, 1, 2, 2)), Tensor([[0]]), 2)


@pytest.mark.parametrize("align_corners", [False, True])
def test_trilinear_interpolation(align_corners):
  _compare_with_gradients(lambda x: x.interpolate(size=(3, 4, 2), mode="trilinear", align_corners=align_corners),
                          lambda x: TF.interpolate(x, size=(3, 4, 2), mode="trilinear", align_corners=align_corners),
                          randn(1, 2, 2, 3, 3, seed=14), atol=1e-5)
