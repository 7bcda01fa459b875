"""Layers: callables holding parameter Tensors (requires_grad=True), initialized as PyTorch initializes them.

Input: Tensors shaped as the matching torch layer expects. Output: lazy Tensors; gradients reach the parameters
through autograd. `nn.optim` has the optimizers and schedules, `nn.state` the state dicts and safetensors,
`nn.functional` the functions the layers call.

Initial values come from minigrad's seeded generator (`Tensor.manual_seed`), drawn on the host so creating a
layer runs no kernel.
"""
from __future__ import annotations
from typing import Sequence
import math
import numpy as np
from minigrad.dtype import dtypes
from minigrad.tensor import Tensor
import minigrad.tensor.function as F
from minigrad.uop.ops import Ops
from minigrad.nn import functional, optim, state
from minigrad.tensor.conv import IntOrPair, _ntuple as _pair

__all__ = ["Linear", "Conv2d", "BatchNorm", "BatchNorm1d", "BatchNorm2d", "LayerNorm", "Embedding", "Dropout",
           "functional", "optim", "state"]


def _parameter(values: np.ndarray) -> Tensor: return Tensor(values.astype(np.float32), requires_grad=True)
def _uniform(shape: tuple[int, ...], bound: float) -> Tensor:
  """U(-bound, bound): what torch's kaiming_uniform_(a=sqrt(5)) gives for weights (bound = 1/sqrt(fan_in)) and
  what it uses for biases."""
  return _parameter(Tensor.rand(*shape).numpy() * (2 * bound) - bound)


class Linear:
  """y = x @ weight.T + bias; weight (out_features, in_features), both ~ U(-1/sqrt(in), 1/sqrt(in))."""
  def __init__(self, in_features: int, out_features: int, bias: bool = True):
    bound = 1 / math.sqrt(in_features) if in_features > 0 else 0.0
    self.weight = _uniform((out_features, in_features), bound)
    self.bias = _uniform((out_features,), bound) if bias else None

  def __call__(self, x: Tensor) -> Tensor:
    if x.ndim == 0 or x.shape[-1] != self.weight.shape[1]:
      raise ValueError(f"Linear: input of shape {x.shape} doesn't end in in_features={self.weight.shape[1]}")
    if self.bias is None: return F.differentiable("linear", _linear, x, self.weight)
    return F.differentiable("linear", _linear, x, self.weight, self.bias)


def _linear(x: Tensor, weight: Tensor, *bias: Tensor) -> Tensor:
  out = x.matmul(weight.T)
  return out + bias[0] if bias else out


class Conv2d:
  """2-d convolution over (N, C_in, H, W); weight (C_out, C_in // groups, KH, KW), weight and bias
  ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with fan_in = C_in // groups * KH * KW."""
  def __init__(self, in_channels: int, out_channels: int, kernel_size: IntOrPair, stride: IntOrPair = 1,
               padding: IntOrPair | str = 0, dilation: IntOrPair = 1, groups: int = 1, bias: bool = True):
    if in_channels % groups or out_channels % groups:
      raise ValueError(f"Conv2d: in_channels {in_channels} and out_channels {out_channels} must be divisible by groups={groups}")
    self.kernel_size = _pair(kernel_size, "kernel_size")
    self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
    fan_in = in_channels // groups * self.kernel_size[0] * self.kernel_size[1]
    bound = 1 / math.sqrt(fan_in)
    self.weight = _uniform((out_channels, in_channels // groups) + self.kernel_size, bound)
    self.bias = _uniform((out_channels,), bound) if bias else None

  def __call__(self, x: Tensor) -> Tensor:
    return functional.conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)


class BatchNorm:
  """Batch normalization over dim 1 (channels). Training (Tensor.training): normalize with the batch's mean and
  biased variance and update running_mean / running_var (unbiased variance, `momentum` weight; None:
  cumulative average) and num_batches_tracked, as torch does. Eval: normalize with the running stats (or with
  batch stats when track_running_stats=False). The running-stat updates stay lazy until the next call or
  until someone reads them; a pending update is realized before the next one is built, so their graph never
  grows step after step. Realized on their own they compute the forward pass up to the BatchNorm again: realize
  them together with the step's gradients (as examples/training.py does) to run it once."""
  expected_dims: tuple[int, ...] = ()

  def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = True,
               track_running_stats: bool = True):
    self.num_features, self.eps, self.momentum, self.track_running_stats = num_features, eps, momentum, track_running_stats
    self.weight = _parameter(np.ones(num_features)) if affine else None
    self.bias = _parameter(np.zeros(num_features)) if affine else None
    if track_running_stats:
      self.running_mean = Tensor(np.zeros(num_features, np.float32))
      self.running_var = Tensor(np.ones(num_features, np.float32))
      self.num_batches_tracked = Tensor(np.zeros(1, np.int64)).reshape(())
    else: self.running_mean = self.running_var = self.num_batches_tracked = None

  def __call__(self, x: Tensor) -> Tensor:
    if self.expected_dims and x.ndim not in self.expected_dims:
      raise ValueError(f"{type(self).__name__}: expected {' or '.join(f'{d}-d' for d in self.expected_dims)} input, got shape {x.shape}")
    if x.ndim < 2 or x.shape[1] != self.num_features:
      raise ValueError(f"{type(self).__name__}: input of shape {x.shape} should have {self.num_features} channels in dim 1")
    use_batch_stats = Tensor.training or not self.track_running_stats
    stats = (self.running_mean, self.running_var, self.num_batches_tracked)
    if Tensor.training and self.track_running_stats and any(not _is_realized(t) for t in stats):
      Tensor.realize(*stats)   # the previous step's update: realize it now so updates don't chain up
    update = Tensor.training and self.track_running_stats
    return functional.batch_norm(x, self.running_mean if update or not use_batch_stats else None,
                                 self.running_var if update or not use_batch_stats else None, self.weight, self.bias,
                                 training=use_batch_stats, momentum=self.momentum, eps=self.eps,
                                 num_batches_tracked=self.num_batches_tracked if update else None)


def _is_realized(t: Tensor) -> bool: return t.uop.base.op is Ops.BUFFER


class BatchNorm1d(BatchNorm):
  """BatchNorm over (N, C) or (N, C, L)."""
  expected_dims = (2, 3)


class BatchNorm2d(BatchNorm):
  """BatchNorm over (N, C, H, W)."""
  expected_dims = (4,)


class LayerNorm:
  """Normalize over the trailing `normalized_shape` dims; weight = 1, bias = 0 when elementwise_affine."""
  def __init__(self, normalized_shape: int | Sequence[int], eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True):
    self.normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    self.eps = eps
    self.weight = _parameter(np.ones(self.normalized_shape)) if elementwise_affine else None
    self.bias = _parameter(np.zeros(self.normalized_shape)) if elementwise_affine and bias else None

  def __call__(self, x: Tensor) -> Tensor:
    return functional.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)


class Embedding:
  """Rows of weight (num_embeddings, embedding_dim) ~ N(0, 1) picked by integer indices of any shape: computed
  as one_hot(indices) @ weight (no gather op), so the gradient flows to exactly the rows used."""
  def __init__(self, num_embeddings: int, embedding_dim: int):
    self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
    self.weight = _parameter(Tensor.randn(num_embeddings, embedding_dim).numpy())

  def __call__(self, indices: Tensor) -> Tensor:
    if not dtypes.is_int(indices.dtype): raise TypeError(f"Embedding: indices must be an integer tensor, got {indices.dtype}")
    return functional.one_hot(indices, self.num_embeddings).cast(self.weight.dtype).matmul(self.weight)


class Dropout:
  """Zero elements with probability p (scaling the rest by 1/(1-p)) while Tensor.training; identity otherwise."""
  def __init__(self, p: float = 0.5):
    if not 0.0 <= p <= 1.0: raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    self.p = p

  def __call__(self, x: Tensor) -> Tensor: return functional.dropout(x, self.p)
