"""Neural-network functions built only from public Tensor ops: convolution, pooling, normalization, dropout,
one-hot and losses. Every gradient comes from autograd, since each function composes differentiable ops.

Input: Tensors (NCHW images, (N, C) logits, class-index or probability targets) and Python hyper-parameters.
Output: lazy Tensors. Nothing here copies data: convolution and pooling windows are zero-copy strided views
(pad, then a repeat/reshape/shrink trick), reduced with broadcast-multiply-sum or max.

Arguments are checked before any graph is built; errors name the shapes involved, as PyTorch's do.
"""
from __future__ import annotations
from typing import Sequence
import math
from minigrad.dtype import dtypes
from minigrad.helpers import prod
from minigrad.tensor import Tensor
from minigrad.nn.state import assign

IntOrPair = int | Sequence[int]


def _pair(value: IntOrPair, name: str, count: int = 2) -> tuple[int, ...]:
  """7 -> (7, 7); (2, 3) stays; anything else is a ValueError naming the argument."""
  if isinstance(value, int) and not isinstance(value, bool): values: tuple[int, ...] = (value,) * count
  else: values = tuple(value)
  if len(values) != count or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
    raise ValueError(f"{name} must be an int or a tuple of {count} ints, got {value!r}")
  return values


def _ceil_div(a: int, b: int) -> int: return -(-a // b)


# ---------------------------------------------------------------- sliding windows (zero-copy)

def _windows_along(x: Tensor, axis: int, kernel: int, stride: int, dilation: int) -> Tensor:
  """Split dim `axis` (size n) into (out, kernel) with view[..., o, k, ...] = x[..., o*stride + k*dilation, ...].

  Repeat the row `reps` times and flatten (a stride-0 view reshaped), so element j of the long row is
  x[j mod n]. Reading it as `kernel` rows of length L = n*f + dilation shifts each row by dilation against the
  previous one (row a starts at x[a*dilation]). Keeping every stride-th column of the first out*stride columns
  picks x[o*stride + a*dilation]. f = 2 only when out*stride would not fit in a row of length n + dilation."""
  n = x.shape[axis]
  out = (n - dilation * (kernel - 1) - 1) // stride + 1
  row = n * (1 if out * stride <= n + dilation else 2) + dilation
  reps = _ceil_div(kernel * row, n)
  before, after = x.shape[:axis], x.shape[axis + 1:]

  def keep(t: Tensor, dim: int, end: int) -> Tensor:
    return t.shrink(tuple((0, end) if d == dim else None for d in range(t.ndim)))

  x = x.reshape(before + (1, n) + after).expand(before + (reps, n) + after).reshape(before + (reps * n,) + after)
  x = keep(x, axis, kernel * row).reshape(before + (kernel, row) + after)
  x = keep(x, axis + 1, out * stride).reshape(before + (kernel, out, stride) + after)
  x = keep(x, axis + 2, 1).reshape(before + (kernel, out) + after)
  order = list(range(x.ndim))
  order[axis], order[axis + 1] = axis + 1, axis
  return x.permute(order)


def sliding_windows(x: Tensor, kernel: Sequence[int], stride: Sequence[int], dilation: Sequence[int]) -> Tensor:
  """(..., *spatial) -> (..., *out, *kernel): every kernel window of the last len(kernel) dims, as a view.
  out = (size - dilation*(kernel-1) - 1) // stride + 1 per spatial dim (the caller pads beforehand)."""
  dims = len(kernel)
  lead = x.ndim - dims
  for i in range(dims):
    x = _windows_along(x, lead + 2 * i, kernel[i], stride[i], dilation[i])   # dims become (..., o0, k0, o1, k1, ...)
  return x.permute(tuple(range(lead)) + tuple(lead + 2 * i for i in range(dims)) + tuple(lead + 2 * i + 1 for i in range(dims)))


def _check_window_fits(spatial: Sequence[int], kernel: Sequence[int], dilation: Sequence[int], what: str) -> None:
  reach = tuple(d * (k - 1) + 1 for k, d in zip(kernel, dilation))
  if any(s < r for s, r in zip(spatial, reach)):
    raise ValueError(f"{what}: padded input size per channel {tuple(spatial)} is smaller than the (dilated) kernel "
                     f"size {reach}; kernel size can't be greater than the actual input size")


# ---------------------------------------------------------------- convolution

def conv2d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: IntOrPair = 1, padding: IntOrPair | str = 0,
           dilation: IntOrPair = 1, groups: int = 1) -> Tensor:
  """2-d cross-correlation, as torch.nn.functional.conv2d. x: (N, C_in, H, W) or (C_in, H, W);
  weight: (C_out, C_in // groups, KH, KW); bias: (C_out,). padding: int, (ph, pw), "valid" or "same"."""
  if weight.ndim != 4: raise ValueError(f"conv2d: weight must be 4-d (C_out, C_in/groups, KH, KW), got shape {weight.shape}")
  if x.ndim not in (3, 4): raise ValueError(f"conv2d: expected a 3-d (C, H, W) or 4-d (N, C, H, W) input, got shape {x.shape}")
  if x.ndim == 3: return conv2d(x.unsqueeze(0), weight, bias, stride, padding, dilation, groups).squeeze(0)
  if not isinstance(groups, int) or groups < 1: raise ValueError(f"conv2d: groups must be a positive int, got {groups!r}")
  (n, c_in, _, _), (c_out, c_group, kh, kw) = x.shape, weight.shape
  if c_in != c_group * groups:
    raise ValueError(f"conv2d: input of shape {x.shape} has {c_in} channels, but weight of shape {weight.shape} "
                     f"with groups={groups} expects {c_group * groups}")
  if c_out % groups: raise ValueError(f"conv2d: out_channels {c_out} (weight shape {weight.shape}) is not divisible by groups={groups}")
  if bias is not None and bias.shape != (c_out,): raise ValueError(f"conv2d: bias must have shape ({c_out},), got {bias.shape}")
  strides, dilations = _pair(stride, "stride"), _pair(dilation, "dilation")
  if min(strides) < 1 or min(dilations) < 1: raise ValueError(f"conv2d: stride {strides} and dilation {dilations} must be positive")
  pads = _conv_padding(padding, (kh, kw), strides, dilations)
  x = x.pad(((0, 0), (0, 0)) + pads)
  _check_window_fits(x.shape[2:], (kh, kw), dilations, "conv2d")
  win = sliding_windows(x, (kh, kw), strides, dilations)                    # (N, C_in, OH, OW, KH, KW)
  oh, ow = win.shape[2], win.shape[3]
  win = win.reshape(n, groups, 1, c_group, oh, ow, kh, kw)
  w = weight.reshape(1, groups, c_out // groups, c_group, 1, 1, kh, kw)
  out = (win * w).sum((3, 6, 7)).reshape(n, c_out, oh, ow)
  return out if bias is None else out + bias.reshape(1, c_out, 1, 1)


def _conv_padding(padding: IntOrPair | str, kernel: Sequence[int], stride: Sequence[int],
                  dilation: Sequence[int]) -> tuple[tuple[int, int], ...]:
  """((top, bottom), (left, right)) from torch's padding argument forms."""
  if isinstance(padding, str):
    if padding == "valid": return ((0, 0), (0, 0))
    if padding != "same": raise ValueError(f"conv2d: padding must be an int, a pair, 'valid' or 'same', got {padding!r}")
    if any(s != 1 for s in stride): raise ValueError(f"conv2d: padding='same' is not supported for strided convolutions (stride {tuple(stride)})")
    total = [d * (k - 1) for k, d in zip(kernel, dilation)]
    return tuple((t // 2, t - t // 2) for t in total)
  pads = _pair(padding, "padding")
  if min(pads) < 0: raise ValueError(f"conv2d: padding must be non-negative, got {pads}")
  return tuple((p, p) for p in pads)


# ---------------------------------------------------------------- pooling

def _pool_setup(x: Tensor, kernel_size: IntOrPair, stride: IntOrPair | None, padding: IntOrPair, dilation: IntOrPair,
                what: str) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[tuple[int, int], ...]]:
  if x.ndim not in (3, 4): raise ValueError(f"{what}: expected a 3-d (C, H, W) or 4-d (N, C, H, W) input, got shape {x.shape}")
  kernel = _pair(kernel_size, "kernel_size")
  strides = kernel if stride is None else _pair(stride, "stride")
  pads, dilations = _pair(padding, "padding"), _pair(dilation, "dilation")
  if min(kernel) < 1 or min(strides) < 1 or min(dilations) < 1:
    raise ValueError(f"{what}: kernel_size {kernel}, stride {strides} and dilation {dilations} must be positive")
  if any(p < 0 or p > k // 2 for p, k in zip(pads, kernel)):
    raise ValueError(f"{what}: padding {pads} must be non-negative and at most half the kernel size {kernel}")
  return kernel, strides, dilations, ((0, 0),) * (x.ndim - 2) + tuple((p, p) for p in pads)


def max_pool2d(x: Tensor, kernel_size: IntOrPair, stride: IntOrPair | None = None, padding: IntOrPair = 0,
               dilation: IntOrPair = 1) -> Tensor:
  """Max over kernel windows of (N, C, H, W) or (C, H, W); stride defaults to kernel_size; padding is -inf."""
  kernel, strides, dilations, pads = _pool_setup(x, kernel_size, stride, padding, dilation, "max_pool2d")
  x = x.pad(pads, value=-math.inf) if any(p != (0, 0) for p in pads) else x
  _check_window_fits(x.shape[-2:], kernel, dilations, "max_pool2d")
  return sliding_windows(x, kernel, strides, dilations).max((-2, -1))


def avg_pool2d(x: Tensor, kernel_size: IntOrPair, stride: IntOrPair | None = None, padding: IntOrPair = 0,
               count_include_pad: bool = True) -> Tensor:
  """Mean over kernel windows of (N, C, H, W) or (C, H, W). With count_include_pad=False the zero padding is left
  out of each window's count (as torch)."""
  kernel, strides, dilations, pads = _pool_setup(x, kernel_size, stride, padding, 1, "avg_pool2d")
  padded = x.pad(pads)
  _check_window_fits(padded.shape[-2:], kernel, dilations, "avg_pool2d")
  total = sliding_windows(padded, kernel, strides, dilations).sum((-2, -1))
  if count_include_pad or all(p == (0, 0) for p in pads): return total / prod(kernel)
  ones = Tensor.ones(*x.shape[-2:], dtype=total.dtype, device=x.device).pad(pads[-2:])
  counts = sliding_windows(ones, kernel, strides, dilations).sum((-2, -1))
  return total / counts


# ---------------------------------------------------------------- dropout and normalization

def dropout(x: Tensor, p: float = 0.5) -> Tensor:
  """Zero each element with probability p and scale the rest by 1/(1-p), only when Tensor.training."""
  if not 0.0 <= p <= 1.0: raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
  if not Tensor.training or p == 0.0: return x
  if p == 1.0: return x * 0
  keep = Tensor.rand(*x.shape, device=x.device) >= p
  return keep.where(x, 0.0) * (1.0 / (1.0 - p))


def layer_norm(x: Tensor, normalized_shape: int | Sequence[int], weight: Tensor | None = None, bias: Tensor | None = None,
               eps: float = 1e-5) -> Tensor:
  """Normalize over the last len(normalized_shape) dims (biased variance), then scale by weight and shift by bias."""
  shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
  if x.shape[x.ndim - len(shape):] != shape or len(shape) > x.ndim:
    raise ValueError(f"layer_norm: normalized_shape {shape} doesn't match the trailing dims of input shape {x.shape}")
  for name, t in (("weight", weight), ("bias", bias)):
    if t is not None and t.shape != shape: raise ValueError(f"layer_norm: {name} has shape {t.shape}, expected {shape}")
  axes = tuple(range(x.ndim - len(shape), x.ndim))
  centered = x - x.mean(axes, keepdim=True)
  out = centered * (centered.square().mean(axes, keepdim=True) + eps).rsqrt()
  if weight is not None: out = out * weight
  return out + bias if bias is not None else out


def batch_norm(x: Tensor, running_mean: Tensor | None, running_var: Tensor | None, weight: Tensor | None = None,
               bias: Tensor | None = None, training: bool = False, momentum: float | None = 0.1, eps: float = 1e-5,
               num_batches_tracked: Tensor | None = None) -> Tensor:
  """Normalize x (N, C, ...) per channel (dim 1), as torch.nn.functional.batch_norm.

  training=True uses the batch's mean and biased variance and, when running stats are given, updates them in
  place (lazily: the tensors are rebound to their new values): running = (1-momentum)*running + momentum*batch,
  with the *unbiased* batch variance. momentum=None averages cumulatively using num_batches_tracked.
  training=False normalizes with running_mean / running_var."""
  if x.ndim < 2: raise ValueError(f"batch_norm: expected an input with at least 2 dims (N, C, ...), got shape {x.shape}")
  channels = x.shape[1]
  for name, t in (("running_mean", running_mean), ("running_var", running_var), ("weight", weight), ("bias", bias)):
    if t is not None and t.shape != (channels,):
      raise ValueError(f"batch_norm: {name} has shape {t.shape}, but input of shape {x.shape} has {channels} channels")
  axes = (0,) + tuple(range(2, x.ndim))
  stat_shape = (1, channels) + (1,) * (x.ndim - 2)
  if training:
    count = x.numel() // channels
    if count <= 1: raise ValueError(f"batch_norm: expected more than 1 value per channel when training, got input shape {x.shape}")
    mean = x.mean(axes, keepdim=True)
    centered = x - mean
    var = centered.square().mean(axes, keepdim=True)
    if running_mean is not None and running_var is not None:
      with Tensor.no_grad():
        if momentum is None:
          if num_batches_tracked is None: raise ValueError("batch_norm: momentum=None needs num_batches_tracked")
          factor: Tensor | float = 1.0 / (num_batches_tracked + 1).cast(running_mean.dtype)
        else: factor = momentum
        batch_mean, batch_var = mean.detach().reshape(channels), var.detach().reshape(channels) * (count / (count - 1))
        assign(running_mean, (running_mean * (1 - factor) + batch_mean * factor).cast(running_mean.dtype))
        assign(running_var, (running_var * (1 - factor) + batch_var * factor).cast(running_var.dtype))
    if num_batches_tracked is not None:
      with Tensor.no_grad(): assign(num_batches_tracked, num_batches_tracked + 1)
  else:
    if running_mean is None or running_var is None: raise ValueError("batch_norm: running_mean and running_var are needed when not training")
    centered, var = x - running_mean.reshape(stat_shape), running_var.reshape(stat_shape)
  out = centered * (var + eps).rsqrt()
  if weight is not None: out = out * weight.reshape(stat_shape)
  return out + bias.reshape(stat_shape) if bias is not None else out


# ---------------------------------------------------------------- one-hot and losses

def one_hot(labels: Tensor, num_classes: int = -1) -> Tensor:
  """Class indices of any shape -> (..., num_classes) of 0/1 in labels' dtype, by comparing with arange (no
  gather). num_classes=-1 reads max(labels)+1 (this realizes labels). Indices outside [0, num_classes) give a
  row of zeros (torch raises; checking would need the values on the host)."""
  if not (dtypes.is_int(labels.dtype)): raise TypeError(f"one_hot: labels must be an integer tensor, got {labels.dtype}")
  if num_classes == -1: num_classes = int(labels.max().item()) + 1 if labels.numel() else 0
  if num_classes < 0: raise ValueError(f"one_hot: num_classes must be -1 or non-negative, got {num_classes}")
  classes = Tensor.arange(num_classes, dtype=labels.dtype, device=labels.device)
  return labels.unsqueeze(-1).eq(classes).cast(labels.dtype)


def _reduce_loss(per_item: Tensor, reduction: str, count: Tensor | int | None = None) -> Tensor:
  if reduction == "none": return per_item
  if reduction == "sum": return per_item.sum()
  if reduction == "mean": return per_item.mean() if count is None else per_item.sum() / count
  raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def _class_last(logits: Tensor) -> Tensor:
  """(N, C, d1, ...) -> (N, d1, ..., C) so the class axis is the last one; (N, C) and (C,) are unchanged."""
  return logits if logits.ndim <= 2 else logits.permute((0,) + tuple(range(2, logits.ndim)) + (1,))


def cross_entropy(logits: Tensor, target: Tensor, label_smoothing: float = 0.0, reduction: str = "mean",
                  ignore_index: int = -100) -> Tensor:
  """torch.nn.functional.cross_entropy. logits: (C,), (N, C) or (N, C, d1, ...), class axis 1 (0 for 1-d).
  target: integer class indices of logits' shape without the class axis (entries equal to ignore_index are
  skipped and not counted by 'mean'), or float class probabilities of logits' shape. With label_smoothing e the
  target distribution becomes (1-e)*target + e/C. Uses a max-shifted log-softmax, so large logits stay finite."""
  if not 0.0 <= label_smoothing <= 1.0: raise ValueError(f"label_smoothing must be in [0, 1], got {label_smoothing}")
  if logits.ndim == 0: raise ValueError(f"cross_entropy: logits must have a class dimension, got shape {logits.shape}")
  class_axis = 0 if logits.ndim == 1 else 1
  classes = logits.shape[class_axis]
  log_probs = _class_last(logits).log_softmax(-1)
  ignored_count: Tensor | None = None
  if dtypes.is_int(target.dtype):
    expected = logits.shape[:class_axis] + logits.shape[class_axis + 1:]
    if target.shape != expected:
      raise ValueError(f"cross_entropy: logits of shape {logits.shape} need class-index target of shape {expected}, "
                       f"got target of shape {target.shape}")
    kept = target.ne(ignore_index)
    dist = one_hot(target, classes).cast(log_probs.dtype)
    if label_smoothing: dist = dist * (1 - label_smoothing) + kept.unsqueeze(-1).where(label_smoothing / classes, 0.0)
    ignored_count = kept.cast(log_probs.dtype).sum()
  elif dtypes.is_float(target.dtype):
    if target.shape != logits.shape:
      raise ValueError(f"cross_entropy: logits of shape {logits.shape} and probability target of shape {target.shape} must match")
    dist = _class_last(target).cast(log_probs.dtype)
    if label_smoothing: dist = dist * (1 - label_smoothing) + label_smoothing / classes
  else: raise TypeError(f"cross_entropy: target must hold class indices (int) or probabilities (float), got {target.dtype}")
  per_item = -(dist * log_probs).sum(-1)
  return _reduce_loss(per_item, reduction, ignored_count)


def sparse_categorical_crossentropy(logits: Tensor, labels: Tensor, ignore_index: int = -1, label_smoothing: float = 0.0,
                                    reduction: str = "mean") -> Tensor:
  """tinygrad's name: cross entropy of logits (N, C) against integer labels (N,); labels == ignore_index skipped."""
  if not dtypes.is_int(labels.dtype): raise TypeError(f"sparse_categorical_crossentropy: labels must be integers, got {labels.dtype}")
  return cross_entropy(logits, labels, label_smoothing, reduction, ignore_index)


def _as_float(t: Tensor) -> Tensor: return t if dtypes.is_float(t.dtype) else t.cast(dtypes.default_float)


def _check_same_shape(what: str, a: Tensor, b: Tensor, names: tuple[str, str]) -> None:
  if a.shape != b.shape: raise ValueError(f"{what}: {names[0]} of shape {a.shape} and {names[1]} of shape {b.shape} must have the same shape")


def binary_crossentropy_logits(logits: Tensor, target: Tensor, reduction: str = "mean", pos_weight: Tensor | None = None) -> Tensor:
  """torch's binary_cross_entropy_with_logits, computed stably: max(x,0) - x*t + log(1 + exp(-|x|)), so large
  logits give finite losses and gradients. pos_weight (broadcast on the last dim) weights the positive term."""
  _check_same_shape("binary_crossentropy_logits", logits, target, ("logits", "target"))
  x = _as_float(logits)
  t = target.cast(x.dtype)
  log_sigmoid_neg = -(x.maximum(0) + (1 + (-x.abs()).exp()).log())   # log(1 - sigmoid(x)) = log sigmoid(-x)
  if pos_weight is None: per_item = -(t * x) - log_sigmoid_neg        # = -t*log(sig(x)) - (1-t)*log(1-sig(x))
  else:
    log_sigmoid = x + log_sigmoid_neg
    per_item = -(pos_weight * t * log_sigmoid) - (1 - t) * log_sigmoid_neg
  return _reduce_loss(per_item, reduction)


def binary_crossentropy(probs: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
  """torch's binary_cross_entropy on probabilities; each log is clamped at -100 as torch does."""
  _check_same_shape("binary_crossentropy", probs, target, ("probs", "target"))
  t = target.cast(_as_float(probs).dtype)
  per_item = -(t * probs.log().maximum(-100.0) + (1 - t) * (1 - probs).log().maximum(-100.0))
  return _reduce_loss(per_item, reduction)


def mse_loss(prediction: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
  """Mean (or sum, or none) of squared differences; shapes must match (no silent broadcasting)."""
  _check_same_shape("mse_loss", prediction, target, ("prediction", "target"))
  return _reduce_loss((prediction - target).square(), reduction)


def l1_loss(prediction: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
  _check_same_shape("l1_loss", prediction, target, ("prediction", "target"))
  return _reduce_loss((prediction - target).abs(), reduction)
