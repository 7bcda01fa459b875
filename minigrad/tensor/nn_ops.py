"""Linear algebra and neural-network ops on Tensor beyond matmul: einsum, convolutions, pooling (and unpooling),
interpolation, attention, losses. The implementations live in functional.py, conv.py and einsum.py beside this
file; these are the Tensor-method spellings.

Input: Tensors (this class is mixed into `Tensor`). Output: lazy Tensors.
"""
from __future__ import annotations
from typing import Any, Sequence, TYPE_CHECKING
if TYPE_CHECKING: from minigrad.tensor.tensor import Tensor


class NNMixin:
  """Linear-algebra and nn ops of Tensor (see minigrad.tensor): everything here forwards to functional.py, conv.py or
  einsum.py with torch's argument order."""

  @staticmethod
  def einsum(formula: str, *operands: Any) -> Tensor:
    """`Tensor.einsum("ij,jk->ik", a, b)`: Einstein summation, as torch.einsum (see minigrad.tensor.einsum)."""
    from minigrad.tensor.einsum import einsum
    return einsum(formula, *operands)

  def conv1d(self, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0, dilation: Any = 1,
             groups: int = 1) -> Tensor:
    from minigrad.tensor import functional
    return functional.conv1d(self, weight, bias, stride, padding, dilation, groups)

  def conv3d(self, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0, dilation: Any = 1,
             groups: int = 1) -> Tensor:
    from minigrad.tensor import functional
    return functional.conv3d(self, weight, bias, stride, padding, dilation, groups)

  def conv_transpose1d(self, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0,
                       output_padding: Any = 0, groups: int = 1, dilation: Any = 1) -> Tensor:
    from minigrad.tensor import functional
    return functional.conv_transpose1d(self, weight, bias, stride, padding, output_padding, groups, dilation)

  def conv_transpose2d(self, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0,
                       output_padding: Any = 0, groups: int = 1, dilation: Any = 1) -> Tensor:
    from minigrad.tensor import functional
    return functional.conv_transpose2d(self, weight, bias, stride, padding, output_padding, groups, dilation)

  def conv_transpose3d(self, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0,
                       output_padding: Any = 0, groups: int = 1, dilation: Any = 1) -> Tensor:
    from minigrad.tensor import functional
    return functional.conv_transpose3d(self, weight, bias, stride, padding, output_padding, groups, dilation)

  def max_pool1d(self, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1, ceil_mode: bool = False,
                 return_indices: bool = False) -> Any:
    from minigrad.tensor import functional
    return functional.max_pool1d(self, kernel_size, stride, padding, dilation, ceil_mode, return_indices)

  def max_pool3d(self, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1, ceil_mode: bool = False,
                 return_indices: bool = False) -> Any:
    from minigrad.tensor import functional
    return functional.max_pool3d(self, kernel_size, stride, padding, dilation, ceil_mode, return_indices)

  def avg_pool1d(self, kernel_size: Any, stride: Any = None, padding: Any = 0, count_include_pad: bool = True, *,
                 ceil_mode: bool = False) -> Tensor:
    from minigrad.tensor import functional
    return functional.avg_pool1d(self, kernel_size, stride, padding, count_include_pad, ceil_mode=ceil_mode)

  def avg_pool3d(self, kernel_size: Any, stride: Any = None, padding: Any = 0, count_include_pad: bool = True, *,
                 ceil_mode: bool = False, divisor_override: int | None = None) -> Tensor:
    from minigrad.tensor import functional
    return functional.avg_pool3d(self, kernel_size, stride, padding, count_include_pad, ceil_mode=ceil_mode,
                                 divisor_override=divisor_override)

  def interpolate(self, size: int | Sequence[int] | None = None, scale_factor: float | Sequence[float] | None = None,
                  mode: str = "nearest", align_corners: bool | None = None, recompute_scale_factor: bool | None = None) -> Tensor:
    from minigrad.tensor import functional
    return functional.interpolate(self, size, scale_factor, mode, align_corners, recompute_scale_factor)

  def scaled_dot_product_attention(self, key: Tensor, value: Tensor, attn_mask: Tensor | None = None, dropout_p: float = 0.0,
                                   is_causal: bool = False, scale: float | None = None, enable_gqa: bool = False) -> Tensor:
    """self is the query (..., L, E); see minigrad.tensor.functional.scaled_dot_product_attention."""
    from minigrad.tensor import functional
    return functional.scaled_dot_product_attention(self, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)

  def layer_norm(self, normalized_shape: int | Sequence[int], weight: Tensor | None = None, bias: Tensor | None = None,
                 eps: float = 1e-5) -> Tensor:
    """torch's F.layer_norm spelling (see also Tensor.layernorm(axis, eps))."""
    from minigrad.tensor import functional
    return functional.layer_norm(self, normalized_shape, weight, bias, eps)

  # ---- 2-d conv and pools, normalization, dropout, one-hot and losses ----
  def conv2d(self, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0, dilation: Any = 1, groups: int = 1) -> Tensor:
    from minigrad.tensor import functional
    return functional.conv2d(self, weight, bias, stride, padding, dilation, groups)
  def max_pool2d(self, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1, ceil_mode: bool = False,
                 return_indices: bool = False) -> Any:
    """Tensor, or (Tensor, int64 indices) with return_indices (see minigrad.tensor.functional.max_pool2d)."""
    from minigrad.tensor import functional
    return functional.max_pool2d(self, kernel_size, stride, padding, dilation, ceil_mode, return_indices)
  def max_unpool2d(self, indices: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0, output_size: Any = None) -> Tensor:
    from minigrad.tensor import functional
    return functional.max_unpool2d(self, indices, kernel_size, stride, padding, output_size)
  def avg_pool2d(self, kernel_size: Any, stride: Any = None, padding: Any = 0, count_include_pad: bool = True, *,
                 ceil_mode: bool = False, divisor_override: int | None = None) -> Tensor:
    from minigrad.tensor import functional
    return functional.avg_pool2d(self, kernel_size, stride, padding, count_include_pad, ceil_mode=ceil_mode, divisor_override=divisor_override)
  def one_hot(self, num_classes: int = -1) -> Tensor:
    from minigrad.tensor import functional
    return functional.one_hot(self, num_classes)
  def dropout(self, p: float = 0.5) -> Tensor:
    from minigrad.tensor import functional
    return functional.dropout(self, p)
  def layernorm(self, axis: int = -1, eps: float = 1e-5) -> Tensor:
    x = self._float()
    centered = x - x.mean(axis, keepdim=True)
    return centered * (centered.square().mean(axis, keepdim=True) + eps).rsqrt()
  def cross_entropy(self, target: Tensor, label_smoothing: float = 0.0, reduction: str = "mean") -> Tensor:
    from minigrad.tensor import functional
    return functional.cross_entropy(self, target, label_smoothing=label_smoothing, reduction=reduction)
  def sparse_categorical_crossentropy(self, labels: Tensor, label_smoothing: float = 0.0, reduction: str = "mean") -> Tensor:
    from minigrad.tensor import functional
    return functional.sparse_categorical_crossentropy(self, labels, label_smoothing=label_smoothing, reduction=reduction)
  def binary_crossentropy_logits(self, target: Tensor, reduction: str = "mean") -> Tensor:
    from minigrad.tensor import functional
    return functional.binary_crossentropy_logits(self, target, reduction=reduction)
  def binary_crossentropy(self, target: Tensor, reduction: str = "mean") -> Tensor:
    """self holds probabilities (see minigrad.tensor.functional.binary_crossentropy)."""
    from minigrad.tensor import functional
    return functional.binary_crossentropy(self, target, reduction=reduction)
  def nll_loss(self, target: Tensor, weight: Tensor | None = None, ignore_index: int = -100, reduction: str = "mean") -> Tensor:
    """self holds log-probabilities (see minigrad.tensor.functional.nll_loss)."""
    from minigrad.tensor import functional
    return functional.nll_loss(self, target, weight, ignore_index, reduction)
