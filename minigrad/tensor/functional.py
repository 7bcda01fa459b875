"""Neural-network functions built only from public Tensor ops: convolution, pooling, interpolation, attention,
normalization, dropout, one-hot and losses. Every gradient comes from autograd, since each function composes
differentiable ops.

Input: Tensors (N, C, *spatial images, (N, C) logits, class-index or probability targets, (..., L, E) attention
queries) and Python hyper-parameters. Output: lazy Tensors. Convolutions and pools (any number of spatial dims)
live in minigrad.tensor.conv and einsum in minigrad.tensor.einsum; this module gives them torch's names (conv1d, conv2d,
conv3d, conv_transpose2d, max_pool2d, ...).

Arguments are checked before any graph is built; errors name the shapes involved, as PyTorch's do.
"""
from __future__ import annotations
from typing import Sequence
import math
import numpy as np
from minigrad import viz
from minigrad.dtype import dtypes
from minigrad.tensor.function import Composite, templated
from minigrad.helpers import prod
from minigrad.tensor.tensor import Tensor
from minigrad.tensor.math_ops import broadcast_shape, softmax_gradient
from minigrad.tensor.conv import ArgumentError, IntOrPair, sliding_windows, conv, conv_transpose, max_pool, max_unpool, avg_pool
from minigrad.tensor.einsum import einsum

__all__ = ["ArgumentError", "IntOrPair", "sliding_windows", "einsum", "conv1d", "conv2d", "conv3d", "conv_transpose1d",
           "conv_transpose2d", "conv_transpose3d", "max_pool1d", "max_pool2d", "max_pool3d", "avg_pool1d", "avg_pool2d",
           "avg_pool3d", "interpolate", "scaled_dot_product_attention", "softmax", "log_softmax", "dropout", "layer_norm",
           "batch_norm", "one_hot", "cross_entropy", "sparse_categorical_crossentropy", "binary_crossentropy_logits",
           "binary_crossentropy", "mse_loss", "l1_loss", "nll_loss", "max_unpool1d", "max_unpool2d", "max_unpool3d"]


# ---------------------------------------------------------------- convolution (see minigrad.tensor.conv)

def _conv_of_rank(x: Tensor, weight: Tensor, dims: int, what: str) -> None:
  if weight.ndim != dims + 2:
    raise ArgumentError(f"{what}: weight must be {dims + 2}-d (C_out, C_in/groups, *kernel), got weight of shape {weight.shape} "
                        f"(input shape {x.shape})")


def conv1d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: IntOrPair = 1, padding: IntOrPair | str = 0,
           dilation: IntOrPair = 1, groups: int = 1) -> Tensor:
  """1-d cross-correlation, as torch: x (N, C_in, L) or (C_in, L), weight (C_out, C_in // groups, K)."""
  _conv_of_rank(x, weight, 1, "conv1d")
  return conv(x, weight, bias, stride, padding, dilation, groups)


def conv2d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: IntOrPair = 1, padding: IntOrPair | str = 0,
           dilation: IntOrPair = 1, groups: int = 1) -> Tensor:
  """2-d cross-correlation, as torch: x (N, C_in, H, W) or (C_in, H, W), weight (C_out, C_in // groups, KH, KW);
  padding an int, a pair, 'valid' or 'same'."""
  _conv_of_rank(x, weight, 2, "conv2d")
  return conv(x, weight, bias, stride, padding, dilation, groups)


def conv3d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: IntOrPair = 1, padding: IntOrPair | str = 0,
           dilation: IntOrPair = 1, groups: int = 1) -> Tensor:
  """3-d cross-correlation, as torch: x (N, C_in, D, H, W) or (C_in, D, H, W), weight (C_out, C_in // groups, KD, KH, KW)."""
  _conv_of_rank(x, weight, 3, "conv3d")
  return conv(x, weight, bias, stride, padding, dilation, groups)


def _conv_transpose_of_rank(x: Tensor, weight: Tensor, dims: int, what: str) -> None:
  if weight.ndim != dims + 2:
    raise ArgumentError(f"{what}: weight must be {dims + 2}-d (C_in, C_out/groups, *kernel), got weight of shape {weight.shape} "
                        f"(input shape {x.shape})")


def conv_transpose1d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: IntOrPair = 1, padding: IntOrPair = 0,
                     output_padding: IntOrPair = 0, groups: int = 1, dilation: IntOrPair = 1) -> Tensor:
  """1-d transposed convolution, as torch (argument order too): weight (C_in, C_out // groups, K)."""
  _conv_transpose_of_rank(x, weight, 1, "conv_transpose1d")
  return conv_transpose(x, weight, bias, stride, padding, output_padding, groups, dilation)


def conv_transpose2d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: IntOrPair = 1, padding: IntOrPair = 0,
                     output_padding: IntOrPair = 0, groups: int = 1, dilation: IntOrPair = 1) -> Tensor:
  """2-d transposed convolution, as torch (argument order too): weight (C_in, C_out // groups, KH, KW)."""
  _conv_transpose_of_rank(x, weight, 2, "conv_transpose2d")
  return conv_transpose(x, weight, bias, stride, padding, output_padding, groups, dilation)


def conv_transpose3d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: IntOrPair = 1, padding: IntOrPair = 0,
                     output_padding: IntOrPair = 0, groups: int = 1, dilation: IntOrPair = 1) -> Tensor:
  """3-d transposed convolution, as torch (argument order too): weight (C_in, C_out // groups, KD, KH, KW)."""
  _conv_transpose_of_rank(x, weight, 3, "conv_transpose3d")
  return conv_transpose(x, weight, bias, stride, padding, output_padding, groups, dilation)


# ---------------------------------------------------------------- pooling (see minigrad.tensor.conv)

def max_pool1d(x: Tensor, kernel_size: IntOrPair, stride: IntOrPair | None = None, padding: IntOrPair = 0,
               dilation: IntOrPair = 1, ceil_mode: bool = False, return_indices: bool = False) -> Tensor | tuple[Tensor, Tensor]:
  return max_pool(x, 1, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def max_pool2d(x: Tensor, kernel_size: IntOrPair, stride: IntOrPair | None = None, padding: IntOrPair = 0,
               dilation: IntOrPair = 1, ceil_mode: bool = False, return_indices: bool = False) -> Tensor | tuple[Tensor, Tensor]:
  """Max over kernel windows of (N, C, H, W) or (C, H, W), as torch: stride defaults to kernel_size, padding is
  -inf, ceil_mode keeps a last partial window; return_indices adds the flat (h * W + w) position of each maximum."""
  return max_pool(x, 2, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def max_pool3d(x: Tensor, kernel_size: IntOrPair, stride: IntOrPair | None = None, padding: IntOrPair = 0,
               dilation: IntOrPair = 1, ceil_mode: bool = False, return_indices: bool = False) -> Tensor | tuple[Tensor, Tensor]:
  return max_pool(x, 3, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def max_unpool1d(x: Tensor, indices: Tensor, kernel_size: IntOrPair, stride: IntOrPair | None = None, padding: IntOrPair = 0,
                 output_size: Sequence[int] | None = None) -> Tensor:
  return max_unpool(x, indices, 1, kernel_size, stride, padding, output_size)


def max_unpool2d(x: Tensor, indices: Tensor, kernel_size: IntOrPair, stride: IntOrPair | None = None, padding: IntOrPair = 0,
                 output_size: Sequence[int] | None = None) -> Tensor:
  """Put each value of a max_pool2d output back at its index (from return_indices=True), zeros elsewhere."""
  return max_unpool(x, indices, 2, kernel_size, stride, padding, output_size)


def max_unpool3d(x: Tensor, indices: Tensor, kernel_size: IntOrPair, stride: IntOrPair | None = None, padding: IntOrPair = 0,
                 output_size: Sequence[int] | None = None) -> Tensor:
  return max_unpool(x, indices, 3, kernel_size, stride, padding, output_size)


# avg_pool's fifth positional argument is count_include_pad (minigrad's earlier order); ceil_mode and
# divisor_override are keyword-only so a torch-ordered positional call can't silently mean something else.
def avg_pool1d(x: Tensor, kernel_size: IntOrPair, stride: IntOrPair | None = None, padding: IntOrPair = 0,
               count_include_pad: bool = True, *, ceil_mode: bool = False) -> Tensor:
  return avg_pool(x, 1, kernel_size, stride, padding, ceil_mode, count_include_pad)


def avg_pool2d(x: Tensor, kernel_size: IntOrPair, stride: IntOrPair | None = None, padding: IntOrPair = 0,
               count_include_pad: bool = True, *, ceil_mode: bool = False, divisor_override: int | None = None) -> Tensor:
  """Mean over kernel windows of (N, C, H, W) or (C, H, W), as torch: with count_include_pad=False the zero
  padding is left out of each window's count; divisor_override replaces the count."""
  return avg_pool(x, 2, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)


def avg_pool3d(x: Tensor, kernel_size: IntOrPair, stride: IntOrPair | None = None, padding: IntOrPair = 0,
               count_include_pad: bool = True, *, ceil_mode: bool = False, divisor_override: int | None = None) -> Tensor:
  return avg_pool(x, 3, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)


# ---------------------------------------------------------------- interpolation

LINEAR_MODES = {"linear": 1, "bilinear": 2, "trilinear": 3}
INTERPOLATE_MODES = ("nearest", "nearest-exact", "area") + tuple(LINEAR_MODES)


def _source_index_nearest(in_size: int, out_size: int, scale: float | None, exact: bool, real: type) -> np.ndarray:
  """torch's nearest / nearest-exact source index per output index, in the same float precision torch uses."""
  ratio = real(1.0 / scale) if scale else real(in_size) / real(out_size)
  dst = np.arange(out_size).astype(real) + (real(0.5) if exact else real(0))
  return np.minimum(np.floor(dst * ratio).astype(np.int64), in_size - 1)


def _resample_matrix(in_size: int, out_size: int, scale: float | None, mode: str, align_corners: bool, real: type) -> np.ndarray:
  """(out, in) weights: output element o = sum_i W[o, i] * input element i along one dim."""
  weights = np.zeros((out_size, in_size), dtype=np.float64)
  rows = np.arange(out_size)
  if mode in ("nearest", "nearest-exact"):
    weights[rows, _source_index_nearest(in_size, out_size, scale, mode == "nearest-exact", real)] = 1
  elif mode == "area":   # adaptive average pooling: window [floor(o*in/out), ceil((o+1)*in/out))
    for o in rows:
      start, end = (o * in_size) // out_size, -((-(o + 1) * in_size) // out_size)
      weights[o, start:end] = 1.0 / (end - start)
  elif in_size == out_size: weights[rows, rows] = 1
  else:
    if align_corners: ratio = real(in_size - 1) / real(out_size - 1) if out_size > 1 else real(0)
    else: ratio = real(1.0 / scale) if scale else real(in_size) / real(out_size)
    dst = rows.astype(real)
    source = ratio * dst if align_corners else np.maximum(ratio * (dst + real(0.5)) - real(0.5), real(0))
    low = np.minimum(np.floor(source).astype(np.int64), in_size - 1)
    fraction = np.clip(source - low.astype(real), 0, 1)
    high = np.where(low < in_size - 1, low + 1, low)
    np.add.at(weights, (rows, low), 1 - fraction)
    np.add.at(weights, (rows, high), fraction)
  return weights


def _resample_axis(x: Tensor, axis: int, out_size: int, scale: float | None, mode: str, align_corners: bool) -> Tensor:
  in_size = x.shape[axis]
  real = np.float64 if x.dtype == dtypes.float64 else np.float32
  if mode in ("nearest", "nearest-exact"):
    source = _source_index_nearest(in_size, out_size, scale, mode == "nearest-exact", real)
    if out_size % in_size == 0 and np.array_equal(source, np.arange(out_size) // (out_size // in_size)):   # repeat: a view
      repeat = out_size // in_size
      shape = x.shape[:axis] + (in_size, repeat) + x.shape[axis + 1:]
      return x.unsqueeze(axis + 1).expand(shape).reshape(x.shape[:axis] + (out_size,) + x.shape[axis + 1:])
    if in_size % out_size == 0 and np.array_equal(source, np.arange(out_size) * (in_size // out_size)):      # subsample: a view
      step = in_size // out_size
      t = x.reshape(x.shape[:axis] + (out_size, step) + x.shape[axis + 1:])
      return t.shrink(tuple((0, 1) if d == axis + 1 else None for d in range(t.ndim))).reshape(x.shape[:axis] + (out_size,) + x.shape[axis + 1:])
  weights = _resample_matrix(in_size, out_size, scale, mode, align_corners, real)
  moved = x.transpose(axis, -1).unsqueeze(-2)                                     # (..., 1, in)
  if mode in ("nearest", "nearest-exact"):   # pick, don't multiply: keeps ints exact and inf/nan where they were
    picked = Tensor(weights > 0, device=x.device).where(moved, 0)._reduce_keep_dtype("sum", -1, False)
  else:
    floating = moved if dtypes.is_float(moved.dtype) else moved.cast(dtypes.default_float)
    picked = (floating * Tensor(weights.astype(real), device=x.device).cast(floating.dtype)).sum(-1)
  return picked.transpose(axis, -1)


def interpolate(x: Tensor, size: int | Sequence[int] | None = None, scale_factor: float | Sequence[float] | None = None,
                mode: str = "nearest", align_corners: bool | None = None, recompute_scale_factor: bool | None = None,
                antialias: bool = False) -> Tensor:
  """Resize the spatial dims of (N, C, *spatial), as torch.nn.functional.interpolate: modes 'nearest',
  'nearest-exact', 'linear' (3-d input), 'bilinear' (4-d), 'trilinear' (5-d) and 'area'. Give `size` or
  `scale_factor` (the output size is floor(size * factor) and, unless recompute_scale_factor, 1/factor maps output
  to input coordinates as in torch). Each dim is resampled separately, by a repeat/stride view when nearest
  scales by an integer and otherwise by a small (out, in) weight matrix."""
  if mode not in INTERPOLATE_MODES or x.ndim not in (3, 4, 5):
    raise NotImplementedError(f"Input Error: Only 3D, 4D and 5D input Tensors supported (got {x.ndim}D, shape {x.shape}) for the "
                              f"modes: {' | '.join(INTERPOLATE_MODES)} (got {mode})")
  dims = x.ndim - 2
  if mode in LINEAR_MODES and LINEAR_MODES[mode] != dims:
    raise NotImplementedError(f"Got {x.ndim}D input (shape {x.shape}), but {mode} mode needs {LINEAR_MODES[mode] + 2}D input")
  if align_corners is not None and mode not in LINEAR_MODES:
    raise ValueError(f"align_corners option can only be set with the interpolating modes: {' | '.join(LINEAR_MODES)} (got {mode})")
  if antialias: raise NotImplementedError("interpolate: antialias=True is not supported")
  if (size is None) == (scale_factor is None):
    raise ValueError("only one of size or scale_factor should be defined" if size is not None else "either size or scale_factor should be defined")
  spatial = x.shape[2:]
  if size is not None:
    sizes = (size,) * dims if isinstance(size, (int, np.integer)) else tuple(size)
    scales: tuple[float | None, ...] = (None,) * dims
    given = sizes
  else:
    factors = (scale_factor,) * dims if isinstance(scale_factor, (int, float)) else tuple(scale_factor)   # type: ignore[arg-type]
    given = factors
    sizes = tuple(int(math.floor(s * float(f))) for s, f in zip(spatial, factors)) if len(factors) == dims else ()
    scales = (None,) * dims if recompute_scale_factor else tuple(float(f) for f in factors)
  if len(given) != dims:
    raise ValueError(f"Input and output must have the same number of spatial dimensions, but got input with spatial dimensions of "
                     f"{list(spatial)} and output size of {tuple(given)}")
  if min(sizes) <= 0 or min(spatial) <= 0:
    raise RuntimeError(f"Input and output sizes should be greater than 0, but got input {tuple(spatial)} and output {tuple(sizes)}")
  for d in range(dims):
    if sizes[d] != spatial[d] or mode == "area" or (scales[d] and scales[d] != 1.0):
      x = _resample_axis(x, 2 + d, int(sizes[d]), scales[d], mode, bool(align_corners))
  return x


# ---------------------------------------------------------------- attention and softmax

def softmax(x: Tensor, dim: int = -1, dtype: object = None) -> Tensor:
  """torch.nn.functional.softmax: x cast to `dtype` first when given."""
  return (x.cast(dtype) if dtype is not None else x).softmax(dim)


def log_softmax(x: Tensor, dim: int = -1, dtype: object = None) -> Tensor:
  """torch.nn.functional.log_softmax: x cast to `dtype` first when given."""
  return (x.cast(dtype) if dtype is not None else x).log_softmax(dim)


def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None = None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale: float | None = None, enable_gqa: bool = False) -> Tensor:
  """softmax(query @ key^T * scale + mask) @ value, as torch: query (..., L, E), key (..., S, E), value (..., S, Ev);
  scale defaults to 1/sqrt(E). attn_mask: bool (True = may attend) or float (added), broadcast to (..., L, S);
  is_causal masks j > i. Rows with nothing to attend to give 0 (torch's safe softmax). Dropout on the attention
  weights applies only while Tensor.training (like minigrad's dropout). enable_gqa repeats key/value heads (dim -3)
  to match the query's."""
  for name, t in (("query", query), ("key", key), ("value", value)):
    if t.ndim < 2: raise RuntimeError(f"scaled_dot_product_attention: {name} must have at least 2 dims (..., L, E), got shape {t.shape}")
  if query.shape[-1] != key.shape[-1] or key.shape[-2] != value.shape[-2]:
    raise RuntimeError(f"scaled_dot_product_attention: query {query.shape}, key {key.shape} and value {value.shape} don't fit: "
                       f"need query (..., L, E), key (..., S, E), value (..., S, Ev)")
  if is_causal and attn_mask is not None: raise RuntimeError("_scaled_dot_product_attention: Explicit attn_mask should not be set when is_causal=True")
  if not 0.0 <= dropout_p <= 1.0: raise ValueError(f"dropout probability has to be between 0 and 1, but got {dropout_p}")
  if enable_gqa and query.ndim >= 3 and key.shape[-3] != query.shape[-3]:
    heads, kv_heads = query.shape[-3], key.shape[-3]
    if heads % kv_heads:
      raise RuntimeError(f"scaled_dot_product_attention: query heads {heads} (shape {query.shape}) must be a multiple of key/value heads "
                         f"{kv_heads} (shape {key.shape}) with enable_gqa")
    def repeat_heads(t: Tensor) -> Tensor:
      shape = t.shape[:-3] + (kv_heads, heads // kv_heads) + t.shape[-2:]
      return t.unsqueeze(-3).expand(shape).reshape(t.shape[:-3] + (heads,) + t.shape[-2:])
    key, value = repeat_heads(key), repeat_heads(value)
  factor = 1 / math.sqrt(query.shape[-1]) if scale is None else scale
  scores = (query @ key.transpose(-2, -1)) * factor
  if is_causal or (attn_mask is not None and attn_mask.dtype == dtypes.bool and scores.dtype in (dtypes.float32, dtypes.float64)
                   and broadcast_shape(scores.shape, attn_mask.shape) == scores.shape):
    weights = _masked_softmax(scores, None if is_causal else attn_mask)
  elif attn_mask is not None:
    weights = _softmax_of_masked(attn_mask.where(scores, -math.inf) if attn_mask.dtype == dtypes.bool else scores + attn_mask)
  else: weights = scores.softmax(-1)
  if dropout_p > 0 and Tensor.training: weights = dropout(weights, dropout_p)
  return weights @ value


def _softmax_of_masked(scores: Tensor) -> Tensor:
  """softmax over the last axis of scores where masked entries are -inf; a row with every entry masked gives 0."""
  nothing = scores.max(-1, keepdim=True).detach().eq(-math.inf)
  return nothing.where(0.0, nothing.where(0.0, scores).softmax(-1))


def _masked_softmax(scores: Tensor, mask: Tensor | None) -> Tensor:
  """Attention weights of float scores under a bool mask (None: causal, j <= i) broadcast to the scores' shape: one
  Function whose forward is a template and whose gradient is softmax's, y * (g - sum(g * y)) (zero where masked)."""
  if scores.dtype not in (dtypes.float32, dtypes.float64): return _masked_softmax_forward(scores, *(() if mask is None else (mask,)))
  inputs = (scores,) if mask is None else (scores, mask)
  return Composite.apply(*inputs, fn=_masked_softmax_forward, key=None if viz.capturing else ("masked softmax", mask is None),
                         gradient=lambda grad, y, *xs: templated(("softmax gradient", -1), softmax_gradient(-1), grad, y) + (None,) * (len(xs) - 1))


def _masked_softmax_forward(scores: Tensor, *mask: Tensor) -> Tensor:
  if not mask:
    rows, cols = Tensor.arange(scores.shape[-2], device=scores.device), Tensor.arange(scores.shape[-1], device=scores.device)
    mask = (rows.unsqueeze(-1) >= cols,)
  return _softmax_of_masked(mask[0].where(scores, -math.inf))


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
  given = (weight is not None, bias is not None)
  affine = tuple(t for t in (weight, bias) if t is not None)
  if x.dtype not in (dtypes.float32, dtypes.float64) or any(t.dtype != x.dtype for t in affine):
    return _layer_norm(len(shape), eps, given)(x, *affine)
  # one Function: the forward and the gradient are templates (built once per shapes), the gradient a formula; while
  # source lines are captured the forward is built op by op (the same nodes, each naming its own op)
  key = (len(shape), eps, given)
  return Composite.apply(x, *affine, fn=_layer_norm(*key), key=None if viz.capturing else ("layer_norm",) + key,
                         gradient=lambda grad, y, *xs: templated(("layer_norm gradient",) + key, _layer_norm_gradient(*key), grad, *xs))


def _layer_norm(dims: int, eps: float, given: tuple[bool, bool]):
  """(x, weight?, bias?) -> x normalized over its last `dims` dims, scaled and shifted."""
  def forward(x: Tensor, *affine: Tensor) -> Tensor:
    axes = tuple(range(x.ndim - dims, x.ndim))
    centered = x - x.mean(axes, keepdim=True)
    out = centered * (centered.square().mean(axes, keepdim=True) + eps).rsqrt()
    if given[0]: out = out * affine[0]
    return out + affine[-1] if given[1] else out
  return forward


def _layer_norm_gradient(dims: int, eps: float, given: tuple[bool, bool]):
  """(grad, x, weight?, bias?) -> the gradients of x, weight and bias. With x^ the normalized x, r = 1/sqrt(var + eps)
  and h = grad * weight: d x = r * (h - mean(h) - x^ * mean(h * x^)); d weight = sum(grad * x^), d bias = sum(grad)
  over the leading dims."""
  def gradient(grad: Tensor, x: Tensor, *affine: Tensor) -> tuple[Tensor, ...]:
    axes, leading = tuple(range(x.ndim - dims, x.ndim)), tuple(range(x.ndim - dims))
    centered = x - x.mean(axes, keepdim=True)
    scale = (centered.square().mean(axes, keepdim=True) + eps).rsqrt()
    normalized = centered * scale
    h = grad * affine[0] if given[0] else grad
    dx = scale * (h - h.mean(axes, keepdim=True) - normalized * (h * normalized).mean(axes, keepdim=True))
    return (dx,) + (((grad * normalized).sum(leading),) if given[0] else ()) + ((grad.sum(leading),) if given[1] else ())
  return gradient


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
        running_mean.assign((running_mean * (1 - factor) + batch_mean * factor).cast(running_mean.dtype))
        running_var.assign((running_var * (1 - factor) + batch_var * factor).cast(running_var.dtype))
    if num_batches_tracked is not None:
      with Tensor.no_grad(): num_batches_tracked.assign(num_batches_tracked + 1)
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
  target distribution becomes (1-e)*target + e/C. Uses a max-shifted log-softmax, so large logits stay finite.
  With float32/float64 logits the loss is one Function: its graph is built once per shapes and copied (a
  template), and its gradient is the formula softmax * sum(target) - target (no chain rule through the softmax)."""
  if not 0.0 <= label_smoothing <= 1.0: raise ValueError(f"label_smoothing must be in [0, 1], got {label_smoothing}")
  if logits.ndim == 0: raise ValueError(f"cross_entropy: logits must have a class dimension, got shape {logits.shape}")
  class_axis = 0 if logits.ndim == 1 else 1
  if dtypes.is_int(target.dtype):
    expected = logits.shape[:class_axis] + logits.shape[class_axis + 1:]
    if target.shape != expected:
      raise ValueError(f"cross_entropy: logits of shape {logits.shape} need class-index target of shape {expected}, "
                       f"got target of shape {target.shape}")
  elif dtypes.is_float(target.dtype):
    if target.shape != logits.shape:
      raise ValueError(f"cross_entropy: logits of shape {logits.shape} and probability target of shape {target.shape} must match")
  else: raise TypeError(f"cross_entropy: target must hold class indices (int) or probabilities (float), got {target.dtype}")
  options = (label_smoothing, reduction, ignore_index)
  if logits.dtype not in (dtypes.float32, dtypes.float64): return _cross_entropy(logits, target, *options)
  return Composite.apply(logits, target, fn=lambda z, t: _cross_entropy(z, t, *options), key=("cross_entropy",) + options,
                         gradient=lambda grad, loss, z, t: (_cross_entropy_gradient(grad, z, t, options), None))


def _target_distribution(log_probs: Tensor, target: Tensor, label_smoothing: float, ignore_index: int) -> tuple[Tensor, Tensor | None]:
  """The target as a distribution over the last axis of log_probs (one-hot for class indices, smoothed), and for
  class indices the number of items not ignored."""
  classes = log_probs.shape[-1]
  if dtypes.is_float(target.dtype):
    dist = _class_last(target).cast(log_probs.dtype)
    return (dist * (1 - label_smoothing) + label_smoothing / classes if label_smoothing else dist), None
  kept = target.ne(ignore_index)
  dist = one_hot(target, classes).cast(log_probs.dtype)
  if label_smoothing: dist = dist * (1 - label_smoothing) + kept.unsqueeze(-1).where(label_smoothing / classes, 0.0)
  return dist, kept.cast(log_probs.dtype).sum()


def _cross_entropy(logits: Tensor, target: Tensor, label_smoothing: float, reduction: str, ignore_index: int) -> Tensor:
  log_probs = _class_last(logits).log_softmax(-1)
  dist, kept_count = _target_distribution(log_probs, target, label_smoothing, ignore_index)
  return _reduce_loss(-(dist * log_probs).sum(-1), reduction, kept_count)


def _cross_entropy_gradient(grad: Tensor, logits: Tensor, target: Tensor, options: tuple) -> Tensor:
  """d loss / d logits: per item, softmax * sum(target distribution) - target distribution, times the upstream
  gradient of the item (divided by the count for 'mean'), built once per shapes like the forward."""
  def formula(grad: Tensor, logits: Tensor, target: Tensor) -> Tensor:
    label_smoothing, reduction, ignore_index = options
    log_probs = _class_last(logits).log_softmax(-1)   # the forward's nodes: built alike on the same inputs
    dist, kept_count = _target_distribution(log_probs, target, label_smoothing, ignore_index)
    per_item = log_probs.exp() * dist.sum(-1, keepdim=True) - dist
    if reduction == "none": upstream = grad.unsqueeze(-1)
    elif reduction == "sum": upstream = grad
    else: upstream = grad / (kept_count if kept_count is not None else prod(per_item.shape[:-1]))
    out = per_item * upstream
    return out if logits.ndim <= 2 else out.permute((0, out.ndim - 1) + tuple(range(1, out.ndim - 1)))   # class axis back to 1
  return templated(("cross_entropy gradient",) + options, formula, grad, logits, target)[0]


def nll_loss(log_probs: Tensor, target: Tensor, weight: Tensor | None = None, ignore_index: int = -100,
             reduction: str = "mean") -> Tensor:
  """torch.nn.functional.nll_loss: -weight[t] * log_probs[t] per item, the class axis 1 of (N, C, d1, ...) or (N, C)
  (0 of (C,)); target holds class indices of log_probs' shape without the class axis. Items whose target is
  ignore_index count for nothing; 'mean' divides by the sum of the kept items' weights (NaN if none is kept).
  Targets outside [0, C) are not checked (that would need their values on the host) and give 0, like one_hot."""
  if log_probs.ndim == 0: raise ValueError(f"nll_loss: input must have a class dimension, got shape {log_probs.shape}")
  if not dtypes.is_int(target.dtype): raise RuntimeError(f"expected target dtype to be Long or Byte, but got {target.dtype.name}")
  class_axis = 0 if log_probs.ndim == 1 else 1
  classes = log_probs.shape[class_axis]
  expected = log_probs.shape[:class_axis] + log_probs.shape[class_axis + 1:]
  if log_probs.ndim == 2 and target.ndim > 1: raise RuntimeError(f"0D or 1D target tensor expected, multi-target not supported (target shape {target.shape})")
  if target.shape != expected:
    if log_probs.ndim >= 2 and target.ndim >= 1 and target.shape[0] != log_probs.shape[0]:
      raise ValueError(f"Expected input batch_size ({log_probs.shape[0]}) to match target batch_size ({target.shape[0]}).")
    raise RuntimeError(f"Expected target size {list(expected)}, got {list(target.shape)} (input shape {log_probs.shape})")
  if weight is not None and weight.shape != (classes,):
    raise RuntimeError(f"weight tensor should be defined either for all {classes} classes or no classes but got weight tensor of shape: {list(weight.shape)}")
  if reduction not in ("none", "mean", "sum"): raise ValueError(f"{reduction} is not a valid value for reduction")
  x = _class_last(log_probs)
  hit = target.unsqueeze(-1).eq(Tensor.arange(classes, device=target.device)) & target.ne(ignore_index).unsqueeze(-1)
  picked = hit.where(x, 0.0).sum(-1)                        # where, not a product: -inf elsewhere in the row stays out
  item_weight = hit.where(weight.cast(x.dtype), 0.0).sum(-1) if weight is not None else hit.any(-1).cast(x.dtype)
  per_item = -picked * item_weight if weight is not None else -picked
  if reduction == "mean": return per_item.sum() / item_weight.sum()
  return per_item.sum() if reduction == "sum" else per_item


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
  """torch's binary_cross_entropy on probabilities; each log is clamped at -100 as torch does. The gradients are
  torch's formulas: (p - t) / max(p (1 - p), 1e-12) for p (finite at p = 0 and 1, where the clamped logs have
  none) and log(1 - p) - log(p) (not clamped: infinite at 0 and 1) for the target."""
  _check_same_shape("binary_crossentropy", probs, target, ("probs", "target"))
  p = _as_float(probs)
  t = target.cast(p.dtype)
  def forward(p: Tensor, t: Tensor) -> Tensor: return -(t * p.log().maximum(-100.0) + (1 - t) * (1 - p).log().maximum(-100.0))
  def gradient(grad: Tensor, out: Tensor, p: Tensor, t: Tensor) -> tuple[Tensor, Tensor]:
    return grad * (p - t) / (p * (1 - p)).maximum(1e-12), grad * ((1 - p).log() - p.log())
  return _reduce_loss(Composite.apply(p, t, fn=forward, gradient=gradient), reduction)


def mse_loss(prediction: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
  """Mean (or sum, or none) of squared differences; shapes must match (no silent broadcasting)."""
  _check_same_shape("mse_loss", prediction, target, ("prediction", "target"))
  return _reduce_loss((prediction - target).square(), reduction)


def l1_loss(prediction: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
  _check_same_shape("l1_loss", prediction, target, ("prediction", "target"))
  return _reduce_loss((prediction - target).abs(), reduction)
