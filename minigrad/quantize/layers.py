"""Quantized layers: drop-in replacements of nn.Linear and nn.Conv2d holding int8 weights and float32 scales.

Input: a float nn.Linear / nn.Conv2d and, for static quantization, the calibrated input scale. Output: a callable
with the float layer's call interface (float32 in, float32 out) whose Tensors are named so that
nn.state.get_state_dict / safe_save store them: `weight` (int8), `weight_scale` (float32, one per output channel),
`input_scale` (float32, one element; static only), `bias` (float32, as in the float layer).

Kinds (the `kind` class attribute, stored in saved files' metadata):
  static   activations quantized with a scale calibrated beforehand (QuantizedLinear / QuantizedConv2d)
  dynamic  activations quantized with the scale of each batch (same classes, input_scale None)
  weight   weight-only: activations stay float32, the int8 weight is dequantized inside the matmul (WeightOnly*)
"""
from __future__ import annotations
import numpy as np
from minigrad.dtype import dtypes
from minigrad.tensor import Tensor
from minigrad import nn
from minigrad.quantize import int8_dot, kernels

KINDS = ("static", "dynamic", "weight")


def _float_array(t: Tensor | None, what: str) -> np.ndarray | None:
  """A float layer's Tensor as float32 numpy; NaN or inf is a ValueError naming `what`."""
  if t is None: return None
  values = t.float().numpy().astype(np.float32)
  if not np.isfinite(values).all():
    bad = "NaN" if np.isnan(values).any() else "inf"
    raise ValueError(f"quantize: {what} contains {bad} ({int((~np.isfinite(values)).sum())} of {values.size} values): can't quantize it")
  return values


def _check_input(x: Tensor, expected: int, axis: int, name: str) -> None:
  if x.ndim == 0 or x.shape[axis] != expected:
    raise ValueError(f"{name}: input of shape {x.shape} should have {expected} features in dim {axis}")


class _Quantized:
  """What every quantized layer holds: the int8 weight, its per-output-channel scales, the bias, the kind."""
  kind = "static"

  def __init__(self, weight_q: Tensor, weight_scale: Tensor, bias: Tensor | None, input_scale: Tensor | None, kind: str):
    if kind not in KINDS: raise ValueError(f"unknown quantization kind {kind!r}; expected one of {KINDS}")
    if weight_q.dtype != dtypes.int8: raise TypeError(f"{type(self).__name__}: weight must be int8, got {weight_q.dtype}")
    if weight_scale.shape != (weight_q.shape[0],):
      raise ValueError(f"{type(self).__name__}: weight_scale of shape {weight_scale.shape} for a weight of shape {weight_q.shape}")
    if kind == "static" and (input_scale is None or input_scale.shape != (1,)):
      raise ValueError(f"{type(self).__name__}: static quantization needs a 1-element input_scale, got "
                       f"{None if input_scale is None else input_scale.shape}")
    self.kind, self.weight, self.weight_scale, self.bias = kind, weight_q, weight_scale, bias
    self.input_scale = input_scale if kind == "static" else None

  @classmethod
  def from_float(cls, layer, path: str, kind: str, input_scale: float | None = None):
    """Quantize `layer`'s weight (symmetric int8 per output channel); `path` names it in errors."""
    weight = _float_array(layer.weight, f"the weight of {path or 'the model'} ({type(layer).__name__} {tuple(layer.weight.shape)})")
    bias = _float_array(layer.bias, f"the bias of {path or 'the model'}")
    weight_q, scales = kernels.quantize_weight(weight)
    device = layer.weight.device
    scale = Tensor(np.array([input_scale], np.float32), device=device) if input_scale is not None else None
    return cls._build(layer, Tensor(weight_q, device=device), Tensor(scales, device=device),
                      Tensor(bias, device=device) if bias is not None else None, scale, kind)

  def packed_weight(self) -> int8_dot.PackedWeight:
    """The weight, as a matrix (C_out, the rest), packed into words for the device's int8 dot product
    (quantize.int8_dot), once: again only when `weight` is replaced (a loaded state dict) or moved to another device."""
    key = (self.weight.uop, self.weight.device)
    if getattr(self, "_packed_key", None) != key:
      matrix = self.weight.reshape(self.weight.shape[0], -1)
      kernels.check_reduce_length(matrix.shape[1], type(self).__name__)
      self._packed = int8_dot.pack_weight(matrix, int8_dot.layout_for(self.weight.device))
      self._packed_key = key
    return self._packed

  def dequantized_weight(self) -> np.ndarray:
    """The float32 weight this layer computes with: int8 weight * per-channel scale."""
    shape = (-1,) + (1,) * (self.weight.ndim - 1)
    return self.weight.numpy().astype(np.float32) * self.weight_scale.numpy().reshape(shape)

  def __repr__(self) -> str:
    return f"{type(self).__name__}(weight {self.weight.shape} int8, kind={self.kind}, bias={self.bias is not None})"


class QuantizedLinear(_Quantized):
  """y = dequantize(quantize(x) @ weight_q.T) + bias, int8 x int8 -> int32 (see quantize.kernels.int8_linear)."""
  @classmethod
  def _build(cls, layer, weight_q, weight_scale, bias, input_scale, kind):
    return cls(weight_q, weight_scale, bias, input_scale, kind)

  def __call__(self, x: Tensor) -> Tensor:
    _check_input(x, self.weight.shape[1], -1, type(self).__name__)
    return kernels.int8_linear(x, self.weight, self.weight_scale, self.bias, self.input_scale, self.packed_weight())


class WeightOnlyLinear(QuantizedLinear):
  """y = x @ (weight_q * weight_scale).T + bias with x in float32: the int8 weight is cast inside the matmul."""
  def __init__(self, weight_q: Tensor, weight_scale: Tensor, bias: Tensor | None, input_scale: Tensor | None = None, kind: str = "weight"):
    super().__init__(weight_q, weight_scale, bias, None, "weight")

  def __call__(self, x: Tensor) -> Tensor:
    _check_input(x, self.weight.shape[1], -1, type(self).__name__)
    return kernels.weight_only_linear(x, self.weight, self.weight_scale, self.bias)


class QuantizedConv2d(_Quantized):
  """A Conv2d on int8 input and weight with integer sums, dequantized per output channel (kernels.int8_conv2d)."""
  def __init__(self, weight_q: Tensor, weight_scale: Tensor, bias: Tensor | None, input_scale: Tensor | None, kind: str,
               stride=1, padding=0, dilation=1, groups: int = 1):
    super().__init__(weight_q, weight_scale, bias, input_scale, kind)
    if weight_q.ndim != 4: raise ValueError(f"{type(self).__name__}: weight must be 4-d (C_out, C_in/groups, KH, KW), got {weight_q.shape}")
    self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups

  @classmethod
  def _build(cls, layer, weight_q, weight_scale, bias, input_scale, kind):
    return cls(weight_q, weight_scale, bias, input_scale, kind, layer.stride, layer.padding, layer.dilation, layer.groups)

  def __call__(self, x: Tensor) -> Tensor:
    _check_input(x, self.weight.shape[1] * self.groups, -3, type(self).__name__)
    packed = self.packed_weight() if kernels.conv_as_word_matmul(x, self.stride, self.padding, self.dilation, self.groups) else None
    return kernels.int8_conv2d(x, self.weight, self.weight_scale, self.bias, self.input_scale, self.stride, self.padding,
                               self.dilation, self.groups, packed)


class WeightOnlyConv2d(QuantizedConv2d):
  """A Conv2d on float32 input whose int8 weight is cast to float32 inside the convolution."""
  def __init__(self, weight_q: Tensor, weight_scale: Tensor, bias: Tensor | None, input_scale: Tensor | None = None,
               kind: str = "weight", stride=1, padding=0, dilation=1, groups: int = 1):
    super().__init__(weight_q, weight_scale, bias, None, "weight", stride, padding, dilation, groups)

  def __call__(self, x: Tensor) -> Tensor:
    _check_input(x, self.weight.shape[1] * self.groups, -3, type(self).__name__)
    return kernels.weight_only_conv2d(x, self.weight, self.weight_scale, self.bias, self.stride, self.padding,
                                      self.dilation, self.groups)


# the float layers quantize() replaces, and their replacement by kind
REPLACEMENTS: dict[type, dict[str, type]] = {
  nn.Linear: {"static": QuantizedLinear, "dynamic": QuantizedLinear, "weight": WeightOnlyLinear},
  nn.Conv2d: {"static": QuantizedConv2d, "dynamic": QuantizedConv2d, "weight": WeightOnlyConv2d},
}
QUANTIZED_LAYERS = (QuantizedLinear, QuantizedConv2d)   # WeightOnly* are subclasses


def replacement_for(layer, kind: str) -> type:
  """The quantized class for a float layer (its exact type or nearest supported base class)."""
  for base in type(layer).__mro__:
    if base in REPLACEMENTS: return REPLACEMENTS[base][kind]
  raise TypeError(f"no quantized replacement for {type(layer).__name__}")


class Observer:
  """Stands in for a float layer during calibration: calls it, and records the range of its input. `absmax` is the
  largest |x| seen; with `keep_samples` it also keeps up to that many |x| values (a random subset per batch) for a
  percentile."""
  def __init__(self, layer, path: str, keep_samples: int = 0, seed: int = 0):
    self.layer, self.path, self.keep_samples = layer, path, keep_samples
    self.absmax, self.batches, self.samples = 0.0, 0, []
    self._rng = np.random.default_rng(seed)
    self.batch_index = 0   # set by the calibration loop, for messages

  def __call__(self, x: Tensor) -> Tensor:
    values = x.float().numpy()   # realizes x: the layer below reuses its buffer
    if np.isnan(values).any():
      raise ValueError(f"quantize: calibration batch {self.batch_index} gives NaN at the input of {self.path} "
                       f"({type(self.layer).__name__}); calibrate with finite data")
    magnitudes = np.abs(values).reshape(-1)
    if magnitudes.size: self.absmax = max(self.absmax, float(magnitudes.max()))
    if self.keep_samples and magnitudes.size:
      per_batch = max(1, self.keep_samples // 8)
      self.samples.append(magnitudes if magnitudes.size <= per_batch else self._rng.choice(magnitudes, per_batch, replace=False))
    self.batches += 1
    return self.layer(x)

  def scale(self, percentile: float | None) -> float:
    """The input scale: (max |x|, or its `percentile`-th percentile) / 127; 1.0 for an input that was all zeros."""
    if not self.batches: raise ValueError(f"quantize: {self.path} was never called by the calibration batches, so its input range is unknown")
    peak = self.absmax if percentile is None else float(np.percentile(np.concatenate(self.samples), percentile))
    if not np.isfinite(peak): raise ValueError(f"quantize: the input of {self.path} reached {peak} during calibration")
    return peak / kernels.QMAX if peak > 0 else 1.0
