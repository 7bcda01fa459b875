"""Tests for minigrad.nn: functional ops (conv, pooling, norms, losses), layers, optimizers, schedules and state.

Forward values and gradients are checked against torch (float32) with the same inputs and weights. Shapes are
small: each distinct kernel is compiled once, and compiling dominates the runtime.

"""
from __future__ import annotations
import math
import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from minigrad import Tensor
from minigrad import nn
from minigrad.nn import functional as F
from minigrad.nn.optim import SGD, Adam, AdamW, StepLR, CosineAnnealingLR, LinearLR, LinearWarmup, clip_grad_norm
from minigrad.nn.state import get_parameters, get_state_dict, load_state_dict, safe_save, safe_load, safe_metadata


def randn(*shape: int, seed: int = 0, scale: float = 1.0) -> np.ndarray:
  return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


def close(mine: Tensor, theirs: torch.Tensor, atol: float = 1e-5, rtol: float = 1e-5) -> None:
  expected = theirs.detach().numpy()
  got = mine.numpy()
  assert got.shape == expected.shape, f"shape {got.shape} != torch's {expected.shape}"
  np.testing.assert_allclose(got, expected, atol=atol, rtol=rtol)


def leaf_pair(array: np.ndarray) -> tuple[Tensor, torch.Tensor]:
  return Tensor(array, requires_grad=True), torch.tensor(array, requires_grad=True)


def backward_both(mine: Tensor, theirs: torch.Tensor, seed: int = 1) -> None:
  """Backpropagate the same random upstream gradient through both graphs (a weighted sum as the loss)."""
  upstream = randn(*theirs.shape, seed=seed)
  (mine * Tensor(upstream)).sum().backward()
  (theirs * torch.tensor(upstream)).sum().backward()


# ---------------------------------------------------------------- convolution

CONV_CASES = [
  # (N, C_in, H, W), C_out, kernel, stride, padding, dilation, groups
  ((2, 3, 7, 6), 4, 3, 1, 0, 1, 1),
  ((1, 4, 8, 9), 6, (3, 2), (2, 1), (1, 2), 1, 2),      # non-square everything, groups
  ((2, 2, 9, 7), 2, 3, 2, 1, (2, 1), 2),                # depthwise, dilation
  ((1, 3, 6, 6), 3, (1, 3), 3, (0, 1), (1, 2), 1),      # stride larger than the kernel
  ((1, 2, 5, 5), 4, 5, 1, 2, 1, 1),                     # kernel as large as the input
]


@pytest.mark.parametrize("in_shape,c_out,kernel,stride,padding,dilation,groups", CONV_CASES)
def test_conv2d_forward_and_gradients_match_torch(in_shape, c_out, kernel, stride, padding, dilation, groups):
  k = (kernel, kernel) if isinstance(kernel, int) else kernel
  x, tx = leaf_pair(randn(*in_shape, seed=0))
  w, tw = leaf_pair(randn(c_out, in_shape[1] // groups, *k, seed=1))
  b, tb = leaf_pair(randn(c_out, seed=2))
  out = F.conv2d(x, w, b, stride, padding, dilation, groups)
  expected = TF.conv2d(tx, tw, tb, stride, padding, dilation, groups)
  close(out, expected)
  backward_both(out, expected)
  close(x.grad, tx.grad, atol=1e-4)
  close(w.grad, tw.grad, atol=1e-4)
  close(b.grad, tb.grad, atol=1e-4)


def test_conv2d_unbatched_input_no_bias_and_same_padding():
  x, w = randn(3, 6, 5), randn(2, 3, 3, 2, seed=1)
  close(F.conv2d(Tensor(x), Tensor(w)), TF.conv2d(torch.tensor(x), torch.tensor(w)))
  close(F.conv2d(Tensor(x), Tensor(w), padding="same", dilation=2),
        TF.conv2d(torch.tensor(x), torch.tensor(w), padding="same", dilation=2))


def test_conv2d_bad_arguments_name_shapes():
  x = Tensor(randn(1, 3, 5, 5))
  with pytest.raises(ValueError, match=r"\(1, 3, 5, 5\).*\(2, 4, 3, 3\)"): F.conv2d(x, Tensor(randn(2, 4, 3, 3)))
  with pytest.raises(ValueError, match="kernel"): F.conv2d(x, Tensor(randn(2, 3, 7, 7)))
  with pytest.raises(ValueError, match="groups"): F.conv2d(x, Tensor(randn(2, 1, 3, 3)), groups=3)
  with pytest.raises(ValueError, match="stride"): F.conv2d(x, Tensor(randn(2, 3, 3, 3)), stride=(1, 2, 3))


def test_sliding_windows_are_views_not_copies():
  x = Tensor(randn(1, 1, 6, 6))
  win = F.sliding_windows(x, (3, 3), (1, 1), (1, 1))
  assert win.shape == (1, 1, 4, 4, 3, 3)
  assert win.uop.base is x.uop.base   # only movement ops between the windows and the buffer


# ---------------------------------------------------------------- pooling

@pytest.mark.parametrize("kernel,stride,padding,dilation", [(2, None, 0, 1), (3, 2, 1, 1), ((2, 3), (1, 2), (1, 0), (2, 1))])
def test_max_pool2d_matches_torch(kernel, stride, padding, dilation):
  x, tx = leaf_pair(randn(2, 2, 7, 8))
  out = F.max_pool2d(x, kernel, stride, padding, dilation)
  expected = TF.max_pool2d(tx, kernel, stride, padding, dilation)
  close(out, expected)
  backward_both(out, expected)
  close(x.grad, tx.grad)


@pytest.mark.parametrize("kernel,stride,padding,count_include_pad", [(2, None, 0, True), (3, 2, 1, True), ((3, 2), 1, (1, 1), False)])
def test_avg_pool2d_matches_torch(kernel, stride, padding, count_include_pad):
  x, tx = leaf_pair(randn(1, 3, 6, 7))
  out = F.avg_pool2d(x, kernel, stride, padding, count_include_pad)
  expected = TF.avg_pool2d(tx, kernel, stride, padding, count_include_pad=count_include_pad)
  close(out, expected)
  backward_both(out, expected)
  close(x.grad, tx.grad)


def test_pool_bad_padding():
  with pytest.raises(ValueError, match="padding"): F.max_pool2d(Tensor(randn(1, 1, 4, 4)), 2, padding=2)
  with pytest.raises(ValueError, match="4-d"): F.avg_pool2d(Tensor(randn(4, 4)), 2)


# ---------------------------------------------------------------- layers vs torch layers

def test_linear_matches_torch_and_init_bounds():
  Tensor.manual_seed(3)
  layer = nn.Linear(5, 3)
  bound = 1 / math.sqrt(5)
  assert np.all(np.abs(layer.weight.numpy()) <= bound) and np.all(np.abs(layer.bias.numpy()) <= bound)
  ref = torch.nn.Linear(5, 3)
  with torch.no_grad():
    ref.weight.copy_(torch.tensor(layer.weight.numpy()))
    ref.bias.copy_(torch.tensor(layer.bias.numpy()))
  x, tx = leaf_pair(randn(2, 4, 5))
  out, expected = layer(x), ref(tx)
  close(out, expected)
  backward_both(out, expected)
  close(layer.weight.grad, ref.weight.grad, atol=1e-4)
  close(layer.bias.grad, ref.bias.grad, atol=1e-4)
  close(x.grad, tx.grad)
  assert nn.Linear(5, 3, bias=False).bias is None


def test_conv2d_layer_matches_torch():
  layer = nn.Conv2d(4, 6, (3, 2), stride=(1, 2), padding=1, groups=2)
  assert np.all(np.abs(layer.weight.numpy()) <= 1 / math.sqrt(2 * 3 * 2))
  ref = torch.nn.Conv2d(4, 6, (3, 2), stride=(1, 2), padding=1, groups=2)
  ref.load_state_dict({k: torch.tensor(v.numpy()) for k, v in get_state_dict(layer).items() if k in ("weight", "bias")})
  x = randn(2, 4, 5, 6)
  close(layer(Tensor(x)), ref(torch.tensor(x)))


@pytest.mark.parametrize("cls,shape", [(nn.BatchNorm1d, (6, 3)), (nn.BatchNorm1d, (4, 3, 5)), (nn.BatchNorm2d, (3, 3, 4, 2))])
def test_batchnorm_train_and_eval_match_torch(cls, shape):
  layer, ref = cls(3, momentum=0.2), getattr(torch.nn, cls.__name__)(3, momentum=0.2)
  with torch.no_grad():
    ref.weight.copy_(torch.tensor([0.5, 1.5, -1.0]))
    ref.bias.copy_(torch.tensor([0.1, 0.0, -0.3]))
  load_state_dict(layer, {k: v.numpy() for k, v in ref.state_dict().items()})   # numpy values are accepted too
  ref.train()
  with Tensor.train():
    for step in range(3):
      x, tx = leaf_pair(randn(*shape, seed=step, scale=2.0) + step)
      out, expected = layer(x), ref(tx)
      close(out, expected, atol=1e-4)
  backward_both(out, expected)
  close(x.grad, tx.grad, atol=1e-4)
  close(layer.weight.grad, ref.weight.grad, atol=1e-4)
  close(layer.bias.grad, ref.bias.grad, atol=1e-4)
  close(layer.running_mean, ref.running_mean)
  close(layer.running_var, ref.running_var)
  assert layer.num_batches_tracked.item() == 3
  ref.eval()
  x = randn(*shape, seed=9)
  assert not Tensor.training
  close(layer(Tensor(x)), ref(torch.tensor(x)), atol=1e-5)


def test_batchnorm_cumulative_momentum_and_no_running_stats():
  layer, ref = nn.BatchNorm1d(2, momentum=None), torch.nn.BatchNorm1d(2, momentum=None)
  with Tensor.train():
    for step in range(3): layer(Tensor(randn(5, 2, seed=step) * (step + 1)))
  for step in range(3): ref(torch.tensor(randn(5, 2, seed=step) * (step + 1)))
  close(layer.running_mean, ref.running_mean)
  close(layer.running_var, ref.running_var)
  plain, ref_plain = nn.BatchNorm1d(2, affine=False, track_running_stats=False), torch.nn.BatchNorm1d(2, affine=False, track_running_stats=False)
  x = randn(4, 2, seed=7)
  close(plain(Tensor(x)), ref_plain.eval()(torch.tensor(x)))   # eval without running stats uses the batch
  assert plain.weight is None and plain.running_mean is None


def test_batchnorm_rejects_bad_input():
  with pytest.raises(ValueError, match="channels"): nn.BatchNorm2d(3)(Tensor(randn(2, 4, 2, 2)))
  with pytest.raises(ValueError, match="4-d"): nn.BatchNorm2d(3)(Tensor(randn(2, 3)))
  with Tensor.train(), pytest.raises(ValueError, match="more than 1 value"): nn.BatchNorm1d(3)(Tensor(randn(1, 3)))


def test_layernorm_matches_torch():
  layer, ref = nn.LayerNorm((3, 4)), torch.nn.LayerNorm((3, 4))
  with torch.no_grad():
    ref.weight.copy_(torch.tensor(randn(3, 4, seed=5)))
    ref.bias.copy_(torch.tensor(randn(3, 4, seed=6)))
  load_state_dict(layer, {k: v.detach().numpy() for k, v in ref.state_dict().items()})
  x, tx = leaf_pair(randn(2, 3, 4, scale=3.0))
  out, expected = layer(x), ref(tx)
  close(out, expected, atol=1e-5)
  backward_both(out, expected)
  close(x.grad, tx.grad, atol=1e-4)
  close(layer.weight.grad, ref.weight.grad, atol=1e-4)
  close(layer.bias.grad, ref.bias.grad, atol=1e-4)
  with pytest.raises(ValueError, match="normalized_shape"): layer(Tensor(randn(2, 4, 3)))


def test_embedding_matches_torch():
  layer = nn.Embedding(5, 3)
  ref = torch.nn.Embedding(5, 3)
  with torch.no_grad(): ref.weight.copy_(torch.tensor(layer.weight.numpy()))
  idx = np.array([[0, 4, 4], [2, 1, 0]], dtype=np.int32)
  out, expected = layer(Tensor(idx)), ref(torch.tensor(idx, dtype=torch.long))
  close(out, expected)
  backward_both(out, expected)
  close(layer.weight.grad, ref.weight.grad)
  with pytest.raises(TypeError, match="integer"): layer(Tensor([0.0, 1.0]))


def test_dropout_only_while_training():
  layer = nn.Dropout(0.25)
  x = Tensor(np.ones((40, 50), np.float32))
  assert layer(x) is x
  Tensor.manual_seed(0)
  with Tensor.train(): values = layer(x).numpy()
  assert set(np.unique(values)) <= {0.0, np.float32(1 / 0.75)}
  assert 0.2 < np.mean(values == 0) < 0.3
  with Tensor.train(): assert np.all(nn.Dropout(1.0)(x).numpy() == 0)
  with pytest.raises(ValueError): nn.Dropout(1.5)


# ---------------------------------------------------------------- one-hot and losses

def test_one_hot():
  labels = np.array([[2, 0], [1, 3]], dtype=np.int32)
  np.testing.assert_array_equal(F.one_hot(Tensor(labels), 4).numpy(), np.eye(4, dtype=np.int32)[labels])
  assert F.one_hot(Tensor(labels)).shape == (2, 2, 4)


@pytest.mark.parametrize("smoothing", [0.0, 0.2])
def test_cross_entropy_with_class_indices_matches_torch(smoothing):
  x, tx = leaf_pair(randn(4, 5, scale=3.0))
  labels = np.array([1, 0, 4, 4], dtype=np.int32)
  loss = F.cross_entropy(x, Tensor(labels), label_smoothing=smoothing)
  expected = TF.cross_entropy(tx, torch.tensor(labels, dtype=torch.long), label_smoothing=smoothing)
  close(loss, expected)
  loss.backward()
  expected.backward()
  close(x.grad, tx.grad)


def test_cross_entropy_probabilities_ignore_index_and_spatial():
  x, tx = leaf_pair(randn(3, 4, scale=2.0))
  probs = TF.softmax(torch.tensor(randn(3, 4, seed=4)), -1).numpy()
  loss, expected = F.cross_entropy(x, Tensor(probs), label_smoothing=0.1), TF.cross_entropy(tx, torch.tensor(probs), label_smoothing=0.1)
  close(loss, expected)
  loss.backward()
  expected.backward()
  close(x.grad, tx.grad)
  labels = np.array([2, -100, 0], dtype=np.int32)
  close(F.cross_entropy(Tensor(randn(3, 4)), Tensor(labels), label_smoothing=0.3),
        TF.cross_entropy(torch.tensor(randn(3, 4)), torch.tensor(labels, dtype=torch.long), label_smoothing=0.3))
  spatial, spatial_labels = randn(2, 3, 2, 2), np.array([[[0, 1], [2, 2]], [[1, 1], [0, 2]]], dtype=np.int32)
  close(F.cross_entropy(Tensor(spatial), Tensor(spatial_labels), reduction="none"),
        TF.cross_entropy(torch.tensor(spatial), torch.tensor(spatial_labels, dtype=torch.long), reduction="none"))


@pytest.mark.parametrize("shape", [(5,), (4, 5), (2, 3, 2, 2)], ids=["1d", "2d", "spatial"])
@pytest.mark.parametrize("target_kind", ["indices", "probabilities"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
def test_cross_entropy_gradients_match_torch(shape, target_kind, reduction, smoothing):
  # the loss's gradient is a formula beside its forward graph: every layout, target kind and reduction against torch,
  # twice (the second call copies the graphs built by the first), with an ignored item among the class indices
  class_axis = 0 if len(shape) == 1 else 1
  rest = shape[:class_axis] + shape[class_axis + 1:]
  rng = np.random.default_rng(5)
  for _ in range(2):
    logits = randn(*shape, seed=int(rng.integers(1000)), scale=2.0)
    if target_kind == "indices":
      labels = rng.integers(0, shape[class_axis], rest).astype(np.int32)
      if labels.size > 1: labels.reshape(-1)[1] = -100
      target, torch_target = Tensor(labels), torch.tensor(labels, dtype=torch.long)
    else:
      probs = TF.softmax(torch.tensor(randn(*shape, seed=int(rng.integers(1000)))), class_axis).numpy()
      target, torch_target = Tensor(probs), torch.tensor(probs)
    x, tx = leaf_pair(logits)
    loss = F.cross_entropy(x, target, label_smoothing=smoothing, reduction=reduction)
    expected = TF.cross_entropy(tx, torch_target, label_smoothing=smoothing, reduction=reduction)
    close(loss, expected, atol=1e-5, rtol=1e-4)
    backward_both(loss, expected) if reduction == "none" else (loss.backward(), expected.backward())
    close(x.grad, tx.grad, atol=1e-5, rtol=1e-4)


def test_sparse_categorical_crossentropy_and_large_logits():
  logits = randn(3, 4) * 1000   # naive softmax would overflow
  labels = np.array([3, -1, 1], dtype=np.int32)
  x, tx = leaf_pair(logits)
  loss = F.sparse_categorical_crossentropy(x, Tensor(labels))
  expected = TF.cross_entropy(tx, torch.tensor(labels, dtype=torch.long), ignore_index=-1)
  close(loss, expected, rtol=1e-5, atol=1e-3)
  loss.backward()
  expected.backward()
  close(x.grad, tx.grad)


def test_losses_check_shapes():
  with pytest.raises(ValueError, match=r"\(4, 5\).*\(3,\)"): F.cross_entropy(Tensor(randn(4, 5)), Tensor([1, 2, 3]))
  with pytest.raises(ValueError, match=r"\(4, 5\).*\(4, 4\)"): F.cross_entropy(Tensor(randn(4, 5)), Tensor(randn(4, 4)))
  with pytest.raises(ValueError, match=r"\(2, 3\).*\(3, 2\)"): F.mse_loss(Tensor(randn(2, 3)), Tensor(randn(3, 2)))
  with pytest.raises(ValueError, match=r"\(4,\).*\(4, 1\)"): F.binary_crossentropy_logits(Tensor(randn(4)), Tensor(randn(4, 1)))
  with pytest.raises(ValueError, match="reduction"): F.mse_loss(Tensor(randn(2)), Tensor(randn(2)), reduction="avg")
  with pytest.raises(ValueError, match="reduction"): F.cross_entropy(Tensor(randn(2, 3)), Tensor([0, 2]), reduction="avg")


def test_binary_crossentropy_logits_stable_and_matches_torch():
  logits = np.array([[-300.0, -20.0, 0.0], [0.5, 40.0, 500.0]], dtype=np.float32)
  target = np.array([[1.0, 0.0, 1.0], [0.3, 0.0, 1.0]], dtype=np.float32)
  x, tx = leaf_pair(logits)
  loss = F.binary_crossentropy_logits(x, Tensor(target))
  expected = TF.binary_cross_entropy_with_logits(tx, torch.tensor(target))
  assert math.isfinite(loss.item())
  close(loss, expected, atol=1e-4)
  loss.backward()
  expected.backward()
  assert np.all(np.isfinite(x.grad.numpy()))
  close(x.grad, tx.grad)
  pos_weight = np.array([2.0, 0.5, 1.0], dtype=np.float32)
  close(F.binary_crossentropy_logits(Tensor(randn(2, 3)), Tensor(target), reduction="sum", pos_weight=Tensor(pos_weight)),
        TF.binary_cross_entropy_with_logits(torch.tensor(randn(2, 3)), torch.tensor(target), reduction="sum", pos_weight=torch.tensor(pos_weight)))


def test_mse_and_bce_match_torch():
  p, tp = leaf_pair(randn(3, 4))
  target = randn(3, 4, seed=2)
  loss, expected = F.mse_loss(p, Tensor(target)), TF.mse_loss(tp, torch.tensor(target))
  close(loss, expected)
  loss.backward()
  expected.backward()
  close(p.grad, tp.grad)
  probs, labels = 1 / (1 + np.exp(-randn(5))), (randn(5, seed=3) > 0).astype(np.float32)
  close(F.binary_crossentropy(Tensor(probs.astype(np.float32)), Tensor(labels)),
        TF.binary_cross_entropy(torch.tensor(probs.astype(np.float32)), torch.tensor(labels)))


# ---------------------------------------------------------------- optimizers

def _train(make_mine, make_torch, steps: int = 4) -> None:
  """Fit y = x @ w.T + b by a few optimizer steps in both libraries; params must agree after every step."""
  x, y = randn(6, 4, seed=10), randn(6, 3, seed=11)
  w0, b0 = randn(3, 4, seed=12), randn(3, seed=13)
  w, b = Tensor(w0, requires_grad=True), Tensor(b0, requires_grad=True)
  tw, tb = torch.tensor(w0, requires_grad=True), torch.tensor(b0, requires_grad=True)
  opt, topt = make_mine([w, b]), make_torch([tw, tb])
  for _ in range(steps):
    opt.zero_grad()
    topt.zero_grad()
    F.mse_loss(Tensor(x).matmul(w.T) + b, Tensor(y)).backward()
    TF.mse_loss(torch.tensor(x) @ tw.T + tb, torch.tensor(y)).backward()
    opt.step()
    topt.step()
    close(w, tw, atol=1e-5)
    close(b, tb, atol=1e-5)
  assert w.grad is not None and w.requires_grad


@pytest.mark.parametrize("kwargs", [dict(lr=0.1), dict(lr=0.05, momentum=0.9), dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.1),
                                    dict(lr=0.05, momentum=0.5, dampening=0.3)])
def test_sgd_matches_torch(kwargs):
  _train(lambda p: SGD(p, **kwargs), lambda p: torch.optim.SGD(p, **kwargs))


@pytest.mark.parametrize("kwargs", [dict(lr=0.01), dict(lr=0.02, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1)])
def test_adam_matches_torch(kwargs):
  _train(lambda p: Adam(p, **kwargs), lambda p: torch.optim.Adam(p, **kwargs), steps=5)


def test_adamw_matches_torch():
  _train(lambda p: AdamW(p, lr=0.02, weight_decay=0.05), lambda p: torch.optim.AdamW(p, lr=0.02, weight_decay=0.05), steps=5)


def test_optimizer_step_reuses_kernels_when_lr_changes(monkeypatch):
  from minigrad.engine import realize
  from minigrad.helpers import GlobalCounters
  monkeypatch.setattr(realize, "compiled_kernels", {})
  w = Tensor(randn(4), requires_grad=True)
  opt = Adam([w], lr=0.1)

  def one_step() -> int:
    opt.zero_grad()
    (w * w).sum().backward()
    GlobalCounters.reset()
    opt.step()
    return GlobalCounters.kernel_count
  one_step()
  one_step()
  before = len(realize.compiled_kernels)
  opt.lr = 0.05
  assert one_step() > 0
  assert 0 < len(realize.compiled_kernels) == before   # the new lr and step count are data, not constants in the kernels


def test_optimizer_rejects_bad_params():
  with pytest.raises(ValueError, match="require"): SGD([Tensor(randn(3))], lr=0.1)
  with pytest.raises(ValueError, match="require"): Adam([Tensor(randn(3), requires_grad=True), Tensor(randn(2), requires_grad=False)])
  with pytest.raises(ValueError, match="empty"): AdamW([])
  with pytest.raises(ValueError, match="Nesterov"): SGD([Tensor(randn(3), requires_grad=True)], lr=0.1, nesterov=True)


def test_optimizer_skips_params_without_grad():
  a, b = Tensor(randn(2), requires_grad=True), Tensor(randn(2, seed=1), requires_grad=True)
  before = b.numpy().copy()
  opt = SGD([a, b], lr=0.5)
  (a * 2).sum().backward()
  opt.step()
  np.testing.assert_allclose(a.numpy(), randn(2) - 1.0, rtol=1e-6)
  np.testing.assert_array_equal(b.numpy(), before)


def test_clip_grad_norm_matches_torch():
  grads = [randn(3, 2, seed=1, scale=3.0), randn(4, seed=2)]
  params = [Tensor(np.zeros_like(g), requires_grad=True) for g in grads]
  tparams = [torch.zeros(g.shape, requires_grad=True) for g in grads]
  for p, tp, g in zip(params, tparams, grads): p.grad, tp.grad = Tensor(g), torch.tensor(g)
  total, expected = clip_grad_norm(params, 1.5), torch.nn.utils.clip_grad_norm_(tparams, 1.5)
  close(total, expected)
  for p, tp in zip(params, tparams): close(p.grad, tp.grad)
  for p, tp, g in zip(params, tparams, grads): p.grad, tp.grad = Tensor(g), torch.tensor(g)
  close(clip_grad_norm(params, 100.0, norm_type=math.inf), torch.nn.utils.clip_grad_norm_(tparams, 100.0, norm_type=math.inf))
  for p, tp in zip(params, tparams): close(p.grad, tp.grad)


# ---------------------------------------------------------------- learning-rate schedules

def _lrs_match(make_mine, make_torch, steps: int = 12) -> None:
  opt = SGD([Tensor(randn(2), requires_grad=True)], lr=0.5)
  topt = torch.optim.SGD([torch.zeros(2, requires_grad=True)], lr=0.5)
  sched, tsched = make_mine(opt), make_torch(topt)
  mine, theirs = [], []
  for _ in range(steps):
    mine.append(opt.lr)
    theirs.append(topt.param_groups[0]["lr"])
    opt.step()
    topt.step()
    sched.step()
    tsched.step()
  np.testing.assert_allclose(mine, theirs, rtol=1e-9, atol=1e-12)
  assert opt.lr_tensor.item() == pytest.approx(opt.lr, rel=1e-6)


def test_step_lr_matches_torch():
  _lrs_match(lambda o: StepLR(o, 3, gamma=0.5), lambda o: torch.optim.lr_scheduler.StepLR(o, 3, gamma=0.5))


def test_cosine_annealing_matches_torch():
  _lrs_match(lambda o: CosineAnnealingLR(o, T_max=5, eta_min=0.01), lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=5, eta_min=0.01))


def test_linear_lr_matches_torch():
  _lrs_match(lambda o: LinearLR(o, 0.25, 1.0, 4), lambda o: torch.optim.lr_scheduler.LinearLR(o, 0.25, 1.0, 4))


def test_linear_warmup_then_cosine_matches_torch_sequential_lr():
  def mine(o):
    return LinearWarmup(o, 3, after=CosineAnnealingLR(o, T_max=6), start_factor=0.2)
  def theirs(o):
    lr = torch.optim.lr_scheduler
    return lr.SequentialLR(o, [lr.LinearLR(o, 0.2, 1.0, 3), lr.CosineAnnealingLR(o, T_max=6)], milestones=[3])
  _lrs_match(mine, theirs)


# ---------------------------------------------------------------- state dicts and safetensors

class TinyNet:
  def __init__(self):
    self.layers = [nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2)]
    self.head = {"fc": nn.Linear(8, 3)}
    self.tied = self.layers[0].weight   # the same tensor under a second name
    self.note = "not a tensor"


def test_state_dict_names_and_parameters():
  net = TinyNet()
  names = list(get_state_dict(net))
  assert names == ["layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias", "layers.1.running_mean",
                   "layers.1.running_var", "layers.1.num_batches_tracked", "head.fc.weight", "head.fc.bias", "tied"]
  params = get_parameters(net)
  assert len(params) == 6 and all(p.requires_grad for p in params)   # no duplicates, no running stats
  assert params[0] is net.layers[0].weight
  assert list(get_state_dict(net.layers[1], prefix="bn.")) == ["bn.weight", "bn.bias", "bn.running_mean", "bn.running_var", "bn.num_batches_tracked"]


def test_state_dict_matches_torch_names_for_batchnorm():
  assert list(get_state_dict(nn.BatchNorm2d(2))) == list(torch.nn.BatchNorm2d(2).state_dict())


def test_safe_save_load_round_trip_and_torch_reads_it(tmp_path):
  from safetensors.torch import load_file
  net = TinyNet()
  with Tensor.train(): net.layers[1](Tensor(randn(3, 2, 2, 2)))   # non-trivial running stats
  state = get_state_dict(net)
  path = tmp_path / "net.safetensors"
  safe_save(state, path, metadata={"epoch": "3"})
  assert safe_metadata(path) == {"epoch": "3"}
  loaded = safe_load(path)
  assert set(loaded) == set(state)
  for name, t in state.items():
    assert loaded[name].shape == t.shape and loaded[name].dtype == t.dtype, name
    np.testing.assert_array_equal(loaded[name].numpy(), t.numpy())
  from_torch = load_file(str(path))
  for name, t in state.items(): np.testing.assert_array_equal(from_torch[name].numpy(), t.numpy())
  assert from_torch["layers.1.num_batches_tracked"].dtype == torch.int64 and from_torch["layers.1.num_batches_tracked"].item() == 1
  fresh = TinyNet()
  load_state_dict(fresh, loaded)
  x = Tensor(randn(1, 1, 4, 4, seed=5))
  np.testing.assert_allclose(fresh.layers[1](fresh.layers[0](x)).numpy(), net.layers[1](net.layers[0](x)).numpy(), rtol=1e-6)


def test_torch_state_dict_loads_into_minigrad_layer(tmp_path):
  from safetensors.torch import save_file
  ref = torch.nn.BatchNorm1d(3)
  ref(torch.tensor(randn(4, 3)))
  save_file(ref.state_dict(), str(tmp_path / "bn.safetensors"))
  layer = nn.BatchNorm1d(3)
  load_state_dict(layer, safe_load(tmp_path / "bn.safetensors"))
  close(layer.running_var, ref.running_var)
  assert layer.num_batches_tracked.shape == () and layer.num_batches_tracked.item() == 1


def test_safe_load_rejects_truncated_and_corrupt_files(tmp_path):
  path = tmp_path / "model.safetensors"
  safe_save({"w": Tensor(randn(16, 16))}, path)
  data = path.read_bytes()
  truncated = tmp_path / "truncated.safetensors"
  truncated.write_bytes(data[:len(data) - 100])
  with pytest.raises(ValueError, match="truncated.safetensors"): safe_load(truncated)
  corrupt = tmp_path / "corrupt.safetensors"
  corrupt.write_bytes(data[:8] + b"{not json" + data[17:])
  with pytest.raises(ValueError, match="corrupt.safetensors"): safe_load(corrupt)
  tiny = tmp_path / "tiny.safetensors"
  tiny.write_bytes(b"\x01\x02")
  with pytest.raises(ValueError, match="tiny.safetensors"): safe_load(tiny)
  with pytest.raises(FileNotFoundError): safe_load(tmp_path / "missing.safetensors")


def test_load_state_dict_strict_errors_assign_nothing():
  layer = nn.Linear(3, 2)
  weight_before = layer.weight.numpy().copy()
  good = {"weight": Tensor(np.ones((2, 3), np.float32)), "bias": Tensor(np.ones(2, np.float32))}
  with pytest.raises(RuntimeError, match="Missing key.*'bias'"): load_state_dict(layer, {"weight": good["weight"]})
  with pytest.raises(RuntimeError, match="Unexpected key.*'extra'"): load_state_dict(layer, {**good, "extra": Tensor([1.0])})
  with pytest.raises(RuntimeError, match=r"size mismatch for bias.*\(3,\).*\(2,\)"):
    load_state_dict(layer, {**good, "bias": Tensor(np.ones(3, np.float32))})
  with pytest.raises(RuntimeError, match="size mismatch"): load_state_dict(layer, {"bias": Tensor(np.ones(3, np.float32))}, strict=False)
  np.testing.assert_array_equal(layer.weight.numpy(), weight_before)   # every failed load left the layer alone
  load_state_dict(layer, {"weight": good["weight"], "extra": Tensor([1.0])}, strict=False)
  np.testing.assert_array_equal(layer.weight.numpy(), np.ones((2, 3)))
  assert layer.weight.requires_grad


def test_training_loop_end_to_end():
  """A small conv net learns a separable toy problem: loss goes down with Adam + BatchNorm + dropout."""
  Tensor.manual_seed(0)
  rng = np.random.default_rng(0)
  images = rng.standard_normal((16, 1, 6, 6)).astype(np.float32)
  labels = (images[:, 0, :3].mean((1, 2)) > images[:, 0, 3:].mean((1, 2))).astype(np.int32)
  conv, bn, fc = nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.Linear(4 * 3 * 3, 2)
  opt = Adam(get_parameters([conv, bn, fc]), lr=0.05)
  losses = []
  with Tensor.train():
    for _ in range(8):
      opt.zero_grad()
      h = F.max_pool2d(bn(conv(Tensor(images))).relu(), 2)
      loss = F.cross_entropy(fc(F.dropout(h.reshape(16, -1), 0.1)), Tensor(labels))
      loss.backward()
      opt.step()
      losses.append(loss.item())
  assert losses[-1] < losses[0] * 0.7, losses


# ---------------------------------------------------------------- core bugs found while building nn

def test_tensor_from_0d_numpy_array_is_0d():
  assert Tensor(np.array(2.0, np.float32)).shape == ()


def test_tensor_methods_match_torch_functional():
  rng = np.random.default_rng(7)
  x, w, b = rng.standard_normal((2, 3, 9, 9)).astype(np.float32), rng.standard_normal((4, 3, 3, 3)).astype(np.float32), rng.standard_normal(4).astype(np.float32)
  tx, tw, tb = torch.tensor(x), torch.tensor(w), torch.tensor(b)
  np.testing.assert_allclose(Tensor(x).conv2d(Tensor(w), Tensor(b), stride=2, padding=1).numpy(),
                             torch.nn.functional.conv2d(tx, tw, tb, stride=2, padding=1).numpy(), atol=1e-4)
  np.testing.assert_allclose(Tensor(x).max_pool2d(2).numpy(), torch.nn.functional.max_pool2d(tx, 2).numpy())
  np.testing.assert_allclose(Tensor(x).avg_pool2d(3, stride=2).numpy(), torch.nn.functional.avg_pool2d(tx, 3, stride=2).numpy(), atol=1e-6)
  np.testing.assert_allclose(Tensor(x).layernorm().numpy(), torch.nn.functional.layer_norm(tx, (9,)).numpy(), atol=1e-5)
  logits, labels = rng.standard_normal((5, 4)).astype(np.float32), np.array([0, 3, 1, 1, 2], np.int32)
  np.testing.assert_allclose(Tensor(logits).sparse_categorical_crossentropy(Tensor(labels)).item(),
                             torch.nn.functional.cross_entropy(torch.tensor(logits), torch.tensor(labels).long()).item(), rtol=1e-5)
  np.testing.assert_array_equal(Tensor(labels).one_hot(4).numpy(), np.eye(4, dtype=np.int32)[labels])


def test_assign_and_is_leaf():
  p = Tensor([1.0, 2.0], requires_grad=True)
  assert p.is_leaf and not (p * 2).is_leaf
  p.assign(Tensor([5.0, 6.0]))
  np.testing.assert_array_equal(p.numpy(), [5, 6])
  with pytest.raises(ValueError, match="shape"):
    p.assign(Tensor([1.0]))


# ---------------------------------------------------------------- whole layers as one Function (templated gradients)

@pytest.mark.parametrize("weight, bias", [(True, True), (True, False), (False, True), (False, False)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_layer_norm_gradients_of_every_input_match_torch(weight, bias, dtype):
  rng = np.random.default_rng(7)
  x_np, g_np = (rng.standard_normal((3, 5, 6)) * 3 + 1).astype(dtype), rng.standard_normal((3, 5, 6)).astype(dtype)
  w_np, b_np = rng.standard_normal(6).astype(dtype), rng.standard_normal(6).astype(dtype)
  x, tx = Tensor(x_np, requires_grad=True), torch.tensor(x_np, requires_grad=True)
  w, tw = (Tensor(w_np, requires_grad=True), torch.tensor(w_np, requires_grad=True)) if weight else (None, None)
  b, tb = (Tensor(b_np, requires_grad=True), torch.tensor(b_np, requires_grad=True)) if bias else (None, None)
  (nn.functional.layer_norm(x, (6,), w, b) * Tensor(g_np)).sum().backward()
  (torch.nn.functional.layer_norm(tx, (6,), tw, tb) * torch.tensor(g_np)).sum().backward()
  for mine, theirs in ((x, tx), (w, tw), (b, tb)):
    if mine is not None: np.testing.assert_allclose(mine.grad.numpy(), theirs.grad.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("bias", [True, False])
def test_linear_gradients_match_torch_on_3d_input(bias):
  rng = np.random.default_rng(8)
  layer, ref = nn.Linear(5, 3, bias=bias), torch.nn.Linear(5, 3, bias=bias)
  with torch.no_grad():
    ref.weight.copy_(torch.tensor(layer.weight.numpy()))
    if bias: ref.bias.copy_(torch.tensor(layer.bias.numpy()))
  x_np, g_np = rng.standard_normal((2, 4, 5)).astype(np.float32), rng.standard_normal((2, 4, 3)).astype(np.float32)
  for _ in range(2):   # the second call copies the gradient's template built by the first
    layer.weight.grad = None
    if bias: layer.bias.grad = None
    ref.zero_grad()
    x, tx = Tensor(x_np, requires_grad=True), torch.tensor(x_np, requires_grad=True)
    (layer(x) * Tensor(g_np)).sum().backward()
    (ref(tx) * torch.tensor(g_np)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(layer.weight.grad.numpy(), ref.weight.grad.numpy(), rtol=1e-5, atol=1e-6)
    if bias: np.testing.assert_allclose(layer.bias.grad.numpy(), ref.bias.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_causal_attention_with_more_keys_than_queries_matches_torch_gradients():
  rng = np.random.default_rng(9)
  q_np, k_np, v_np = (rng.standard_normal(s).astype(np.float32) for s in ((2, 3, 3, 4), (2, 3, 6, 4), (2, 3, 6, 5)))
  g_np = rng.standard_normal((2, 3, 3, 5)).astype(np.float32)
  mine = [Tensor(a, requires_grad=True) for a in (q_np, k_np, v_np)]
  theirs = [torch.tensor(a, requires_grad=True) for a in (q_np, k_np, v_np)]
  out = mine[0].scaled_dot_product_attention(mine[1], mine[2], is_causal=True)
  expected = torch.nn.functional.scaled_dot_product_attention(*theirs, is_causal=True)
  np.testing.assert_allclose(out.numpy(), expected.detach().numpy(), rtol=1e-5, atol=1e-5)
  (out * Tensor(g_np)).sum().backward()
  (expected * torch.tensor(g_np)).sum().backward()
  for a, b in zip(mine, theirs): np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-4, atol=1e-5)
