"""The int8 arithmetic of quantized layers, written with public Tensor ops so every device runs it and the scheduler
fuses it like any other graph.

Input: float32 Tensors (activations), int8 Tensors (quantized weights) and float32 scales. Output: lazy Tensors.

Symmetric int8 everywhere: a real value v is stored as q = round(v / scale) clipped to [-127, 127] (-128 is never
produced, so a negated value still fits and int8 x int8 products stay within +-127*127), and read back as q * scale.
Weights have one scale per output channel, activations one per tensor. Where the matmul's words are "bytes7"
(AVX2's pmaddubsw, see quantize.int8_dot) activations are quantized to [-63, 63] instead: the same scale times
127 / 63 (a static layer's saved scale stays the 127 one).

The quantized matmul is int8 x int8 -> int32, summed in int32 (a sum of K products of at most 128*128 could overflow
int32 only past K = 131,000, which `check_reduce_length` refuses) over int32 words that pack 4 (or 2) int8 values
each, so that the CPU codegen can use the Target's dot-product instruction (see quantize.int8_dot). The input is
quantized and packed into words in one elementwise kernel; then, in the same kernel as the sum (the scheduler fuses
elementwise ops after a reduce into it): cast to float32, times input scale * weight scale, plus bias, and whatever
elementwise op the caller applies next (a ReLU). A dynamic scale (the batch's own) adds one kernel before those
two: max |x| in parts; the largest part is taken where the scale is read.
"""
from __future__ import annotations
import math
import numpy as np
from minigrad.dtype import dtypes
from minigrad.tensor import Tensor
import minigrad.tensor.function as F
from minigrad.nn import functional
from minigrad.tensor.conv import sliding_windows
from minigrad.quantize.int8_dot import (LAYOUTS, PackedWeight, activation_max, activation_words, layout_for, pack_weight, word_count,
                                        word_matmul)

QMAX = 127   # symmetric int8 range [-127, 127]
MAX_REDUCE_LENGTH = (2**31 - 1) // (128 * 128)   # products summed before an int32 sum could overflow (-128 too)
PEAK_PARTS = 8   # a dynamic scale's max |x| is taken in (up to) this many parts: a kernel that threads can share


def weight_scales(weight: np.ndarray) -> np.ndarray:
  """Per-output-channel (dim 0) scales of a float weight: max |w| of the channel / 127; an all-zero channel gets 1
  (any scale represents it exactly, and dividing by 0 is avoided)."""
  peak = np.abs(weight.reshape(weight.shape[0], -1)).max(axis=1) if weight.size else np.zeros(weight.shape[0])
  return np.where(peak > 0, peak / QMAX, 1.0).astype(np.float32)


def quantize_weight(weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """(int8 weight, float32 per-output-channel scales) of a float weight of any rank (output channels in dim 0)."""
  scales = weight_scales(weight)
  shaped = scales.reshape((-1,) + (1,) * (weight.ndim - 1))
  quantized = np.clip(np.rint(weight / shaped), -QMAX, QMAX).astype(np.int8)   # rint: half to even, as torch
  return quantized, scales


def quantize_activation(x: Tensor, scale: Tensor) -> Tensor:
  """x / scale rounded (half up) and clipped to [-127, 127], as int8 (see quantized_values)."""
  return quantized_values(x, scale).cast(dtypes.int8)


def quantized_values(x: Tensor, scale: Tensor, qmax: int = QMAX, clip: bool = True) -> Tensor:
  """x / scale rounded (half up) and clipped to [-qmax, qmax] (qmax <= 127), as int32 values. `scale` is a Tensor of one element (a calibrated
  constant or the batch's own). Rounding: +128.5 makes every value positive, so the cast to int32 (truncation) is
  floor(v + 0.5); -128 brings it back. It costs a handful of ops per element where round() (half to even) costs
  a dozen, and multiplying by the reciprocal and max/min build small graphs where / and clip() build large ones (the
  graph is built on every eager call). NaN in x gives an unspecified int8 (C leaves the cast undefined).
  `clip=False` for a scale of x's own (dynamic_scale): |x| / scale is at most qmax times (1 + a few float32 roundings),
  below qmax + 0.5, so the clip would change nothing."""
  scaled = x.float() * scale.reciprocal()
  if clip:
    low = (scaled < -qmax).where(-qmax, scaled)   # where(p < q, q, p): one max instruction (codegen.cpu_patterns.simd_idioms)
    scaled = (qmax < low).where(qmax, low)
  return (scaled + (QMAX + 1.5)).cast(dtypes.int32) - (QMAX + 1)


def dynamic_scale(x: Tensor, qmax: int = QMAX) -> Tensor:
  """The scale of a batch quantized on its own (torch's quantize_dynamic): max |x| / qmax, as a 1-element Tensor. An
  all-zero batch gets a tiny scale (1e-30 / qmax), which quantizes it to zeros, as any scale would."""
  return _scale_of_peak(batch_peak_bits(x), qmax)


def batch_peak_bits(x: Tensor) -> Tensor:
  """max |x| of the whole batch as int32 bits, (1,): |x| as its bits with the sign cleared (non-negative floats order
  as their bits do, so the largest is an int32 max: one instruction where a float max must mind NaN; a NaN in x gives
  a NaN). The max is taken in PEAK_PARTS parts, one reduce kernel whose parts the CPU threads share, then the
  largest of the parts with elementwise maxima, which fuse into the kernels that read the scale (a reduce to one
  value is one loop: one thread)."""
  bits = x.float().bitcast(dtypes.int32) & 0x7FFFFFFF
  parts = math.gcd(bits.numel(), PEAK_PARTS) if isinstance(bits.numel(), int) else 1
  partial = bits.reshape(parts, -1).max(1)
  peak = partial.shrink(((0, 1),))
  for i in range(1, parts): peak = peak.maximum(partial.shrink(((i, i + 1),)))
  return peak


def _scale_of_peak(peak_bits: Tensor, qmax: int) -> Tensor:
  return peak_bits.bitcast(dtypes.float32).maximum(1e-30) * (1 / qmax)


def activation_scale(x: Tensor, input_scale: Tensor | None, qmax: int) -> Tensor:
  """The scale x is quantized with to [-qmax, qmax]: the batch's own (input_scale None), else the calibrated one
  (saved for [-127, 127]) times 127 / qmax."""
  if input_scale is None: return dynamic_scale(x, qmax)
  return input_scale * (QMAX / qmax) if qmax != QMAX else input_scale


def check_reduce_length(length: int, what: str) -> None:
  if length > MAX_REDUCE_LENGTH:
    raise ValueError(f"{what}: {length} products per output could overflow the int32 sum (at most {MAX_REDUCE_LENGTH})")


def int8_matmul(x_q: Tensor, weight_q: Tensor, layout: str | None = None) -> Tensor:
  """(..., K) int8 @ (N, K).T int8 -> (..., N) int32, exact: summed in int32 over words of `layout` (None: the
  device's for full int8 operands, see quantize.int8_dot.layout_for; not "bytes7", whose activations are 7-bit). The
  weight is packed on each call: layers pack theirs once."""
  if x_q.dtype != dtypes.int8 or weight_q.dtype != dtypes.int8:
    raise TypeError(f"int8_matmul: expected int8 operands, got {x_q.dtype} {x_q.shape} and {weight_q.dtype} {weight_q.shape}")
  if x_q.ndim == 0 or weight_q.ndim != 2 or x_q.shape[-1] != weight_q.shape[1]:
    raise ValueError(f"int8_matmul: input {x_q.shape} and weight {weight_q.shape} don't match: expected (..., K) and (N, K)")
  check_reduce_length(weight_q.shape[1], "int8_matmul")
  if layout == "bytes7": raise ValueError("int8_matmul: \"bytes7\" words hold activations in [-64, 63] only, not all of int8")
  packed = pack_weight(weight_q, layout or layout_for(weight_q.device, full_range=True))
  return word_matmul(activation_words(x_q.cast(dtypes.int32), packed.layout), packed)


def dequantize_output(accumulated: Tensor, output_scale: Tensor, bias: Tensor | None, channel_axis: int = -1) -> Tensor:
  """The float32 result of an integer sum: accumulated * output_scale (per output channel, along `channel_axis`)
  plus bias. Elementwise: it fuses into the kernel that computed `accumulated`."""
  shape = [1] * accumulated.ndim
  shape[channel_axis] = -1
  out = accumulated.cast(dtypes.float32) * output_scale.reshape(shape)
  return out + bias.reshape(shape) if bias is not None else out


def int8_linear(x: Tensor, weight_q: Tensor, weight_scale: Tensor, bias: Tensor | None, input_scale: Tensor | None,
                packed: PackedWeight | None = None) -> Tensor:
  """A quantized Linear: x quantized with `input_scale` (None: the batch's own, dynamic) then int8 @ int8 -> int32,
  dequantized with input_scale * weight_scale, plus bias: float32 (..., N). `packed`: weight_q packed already
  (quantize.int8_dot.pack_weight), else it is packed here. The activation range is the layout's (activation_max)."""
  if packed is None:
    check_reduce_length(weight_q.shape[1], "int8_linear")
    packed = pack_weight(weight_q, layout_for(weight_q.device))
  # the layer's graph is built once per shapes and layout and copied (a template, minigrad.tensor.function.templated):
  # an eager call costs a few nodes, not the hundred ops of quantizing, packing and dequantizing; no gradient flows
  # a dynamic scale reads x twice (its max, then its quantization): x is stored once (after a layer below, in that
  # layer's matmul kernel), not computed again in both from the int32 sums below (where the scale below, read inside
  # the max's loop, would get a kernel of its own too); a realized x is read as it is
  if input_scale is None: x = x.float().contiguous()
  given = (packed.correction is not None, bias is not None, input_scale is not None)
  key = ("int8_linear", packed.layout, packed.k, packed.n, packed.k_major) + given
  inputs = [t for t in (packed.correction, bias, input_scale) if t is not None]
  return F.templated(key, _int8_linear_graph(packed, given), x, packed.words, weight_scale, *inputs)[0]


def _int8_linear_graph(packed: PackedWeight, given: tuple[bool, bool, bool]):
  """int8_linear's graph on (x, weight words, weight scale, correction?, bias?, input scale?)."""
  def graph(x: Tensor, words: Tensor, weight_scale: Tensor, *rest: Tensor) -> Tensor:
    optional = iter(rest)
    correction, bias, input_scale = (next(optional) if present else None for present in given)
    weight = PackedWeight(packed.layout, words, correction, packed.k, packed.n, packed.k_major)
    qmax = activation_max(packed.layout)
    scale = activation_scale(x, input_scale, qmax)
    # the activation's words are built where it is quantized, in one elementwise kernel before the matmul's; x is
    # padded to whole words with zeros before it is quantized (exact: the padded weights are 0), so only its loads
    # are gated, not the quantization's arithmetic
    padding = word_count(packed.k, packed.layout) * LAYOUTS[packed.layout] - packed.k
    if padding: x = x.pad(((0, 0),) * (x.ndim - 1) + ((0, padding),))
    x_words = activation_words(quantized_values(x, scale, qmax, clip=input_scale is not None), packed.layout, in_range=True).contiguous()
    return dequantize_output(word_matmul(x_words, weight), scale * weight_scale, bias)
  return graph


def _pair(value) -> tuple[int, int] | None:
  if isinstance(value, int): return (value, value)
  if isinstance(value, (tuple, list)) and len(value) == 2 and all(isinstance(v, int) for v in value): return tuple(value)
  return None


def conv_as_word_matmul(x: Tensor, stride, padding, dilation, groups: int) -> bool:
  """Whether int8_conv2d runs as a word matmul over the input's windows: groups 1, a 4-d input, int or pair
  stride/padding/dilation (else, e.g. padding="same", it takes the integer convolution of nn.conv)."""
  return groups == 1 and x.ndim == 4 and None not in (_pair(stride), _pair(padding), _pair(dilation))


def int8_conv2d(x: Tensor, weight_q: Tensor, weight_scale: Tensor, bias: Tensor | None, input_scale: Tensor | None,
                stride, padding, dilation, groups: int, packed: PackedWeight | None = None) -> Tensor:
  """A quantized Conv2d: x quantized as in int8_linear, convolved with the int8 weight in integers, dequantized.
  Where conv_as_word_matmul: the int8 matmul of int8_linear, of each output position's window (C_in * KH * KW values,
  packed into words where the input is quantized: one elementwise kernel) with the weight as a (C_out, C_in * KH * KW)
  matrix (`packed`, else packed here). Otherwise the convolution of nn.conv, which sums integer products as
  Tensor.sum does, in int64 (as torch): exact all the same."""
  if conv_as_word_matmul(x, stride, padding, dilation, groups):
    (pad_h, pad_w), c_out, (kh, kw) = _pair(padding), weight_q.shape[0], weight_q.shape[2:]
    out_h, out_w = ((size + 2 * p - d * (k - 1) - 1) // s + 1 for size, p, d, k, s in
                    zip(x.shape[2:], _pair(padding), _pair(dilation), (kh, kw), _pair(stride)))
    if out_h >= 1 and out_w >= 1 and x.shape[1] == weight_q.shape[1]:   # else nn.conv's error
      if packed is None:
        check_reduce_length(int(np.prod(weight_q.shape[1:])), "int8_conv2d")
        packed = pack_weight(weight_q.reshape(c_out, -1), layout_for(weight_q.device))
      qmax = activation_max(packed.layout)
      scale = activation_scale(x, input_scale, qmax)
      # quantized once into int8 (a window reads each value KH * KW times), padded with zeros (0 quantizes to 0)
      quantized = quantized_values(x, scale, qmax, clip=input_scale is not None).cast(dtypes.int8).contiguous().cast(dtypes.int32)
      padded = quantized.pad(((0, 0), (0, 0), (pad_h, pad_h), (pad_w, pad_w)))
      windows = sliding_windows(padded, (kh, kw), _pair(stride), _pair(dilation))   # (N, C_in, OH, OW, KH, KW)
      patches = windows.permute(0, 2, 3, 1, 4, 5).reshape(x.shape[0], out_h, out_w, -1)
      # the words stored position-minor, (N, words, OH, OW): their kernel then reads and writes rows of positions
      words = activation_words(patches, packed.layout, in_range=True).permute(0, 3, 1, 2).contiguous().permute(0, 2, 3, 1)
      accumulated = word_matmul(words, packed)   # (N, OH, OW, C_out)
      return dequantize_output(accumulated, scale * weight_scale, bias).permute(0, 3, 1, 2)
  scale = dynamic_scale(x) if input_scale is None else input_scale
  check_reduce_length(int(np.prod(weight_q.shape[1:])), "int8_conv2d")
  x_q = quantize_activation(x, scale)
  accumulated = functional.conv2d(x_q.cast(dtypes.int32), weight_q.cast(dtypes.int32), None, stride, padding, dilation, groups)
  return dequantize_output(accumulated, scale * weight_scale, bias, channel_axis=1 if accumulated.ndim == 4 else 0)


def weight_only_linear(x: Tensor, weight_q: Tensor, weight_scale: Tensor, bias: Tensor | None) -> Tensor:
  """x (float) @ int8 weight.T: the weight is cast to float32 where the matmul loads it (1 byte per weight read
  from memory instead of 4), the per-channel scale applied once per output after the sum."""
  out = x.float().matmul(weight_q.cast(dtypes.float32).T) * weight_scale
  return out + bias if bias is not None else out


def weight_only_conv2d(x: Tensor, weight_q: Tensor, weight_scale: Tensor, bias: Tensor | None, stride, padding, dilation,
                       groups: int) -> Tensor:
  """A Conv2d whose int8 weight is cast to float32 inside the convolution, scaled per output channel after the sum."""
  out = functional.conv2d(x.float(), weight_q.cast(dtypes.float32), None, stride, padding, dilation, groups)
  return dequantize_output(out, weight_scale, bias, channel_axis=1 if out.ndim == 4 else 0)
