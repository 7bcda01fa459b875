"""Convolution and pooling in any number of spatial dims, built from public Tensor ops. Convolution's gradients,
and those of max pooling whose windows tile the input, are written out so that they get fast kernels (see
_Convolution and _TiledMaxPool); the other poolings' come from autograd.

Input: Tensors laid out as torch lays them out ((N, C, *spatial) or unbatched (C, *spatial); conv weights
(C_out, C_in // groups, *kernel), transposed-conv weights (C_in, C_out // groups, *kernel)) and Python
hyper-parameters. Output: lazy Tensors. Kernel windows are zero-copy strided views (pad, then a
repeat/reshape/shrink trick), reduced with broadcast-multiply-sum, max or sum. A convolution copies its input
(padded) first when its rows aren't whole SIMD vectors, and so does its weight gradient (see opt.cpu_policy.conv_row_width).

A transposed convolution is the convolution of the input with zeros inserted between its elements (stride - 1 of
them), padded by dilation*(kernel-1) - padding, against the spatially flipped kernel with in/out channels swapped.

Bad arguments raise `ArgumentError` (a RuntimeError, as torch raises, and a ValueError) before any graph is built,
with messages naming the shapes and parameters involved.
"""
from __future__ import annotations
from typing import Callable, Sequence
import math
import numpy as np
from minigrad.dtype import dtypes
from minigrad.tensor.function import Composite, Function
from minigrad.helpers import prod
from minigrad.tensor.indexing import nothing_of
from minigrad.opt.cpu_policy import conv_row_width
from minigrad.target import cpu_target
from minigrad.tensor.tensor import Tensor
from minigrad.uop.ops import UOp

IntOrPair = int | Sequence[int]
LANE_DEVICES = ("CPU", "LLVM")   # their kernels take SIMD lanes along a row: a convolution's rows are widened to whole vectors


class ArgumentError(RuntimeError, ValueError):
  """A bad convolution or pooling argument. torch raises RuntimeError for these; it is also a ValueError so
  code written against minigrad's earlier conv2d/pool errors keeps working."""


def _ntuple(value: IntOrPair, name: str, count: int = 2) -> tuple[int, ...]:
  """7 -> (7,) * count; a sequence of `count` ints stays; anything else is an ArgumentError naming the argument."""
  if isinstance(value, (int, np.integer)) and not isinstance(value, bool): values: tuple[int, ...] = (int(value),) * count
  else:
    try: values = tuple(value)   # type: ignore[arg-type]
    except TypeError: values = ()
    if len(values) == 1: values = values * count
  if len(values) != count or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in values):
    raise ArgumentError(f"expected {name} to be a single integer value or a list of {count} values to match the "
                        f"{count} spatial dimensions, but got {name}={value!r}")
  return tuple(int(v) for v in values)


def _ceil_div(a: int, b: int) -> int: return -(-a // b)


def _sizes(values: Sequence[int]) -> str: return " x ".join(str(v) for v in values)


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
  return x.permute(_outs_then_kernel(lead, dims))


def _outs_then_kernel(lead: int, dims: int) -> tuple[int, ...]:
  """The permutation (..., o0, k0, o1, k1, ...) -> (..., o0, o1, ..., k0, k1, ...): window positions, then taps."""
  return tuple(range(lead)) + tuple(lead + 2 * i for i in range(dims)) + tuple(lead + 2 * i + 1 for i in range(dims))


# ---------------------------------------------------------------- convolution

def _positive(values: tuple[int, ...], name: str, what: str) -> None:
  if min(values) < 1: raise ArgumentError(f"{what}: non-positive {name} is not supported, got {name}={values}")


def _conv_padding(padding: IntOrPair | str, kernel: Sequence[int], stride: Sequence[int], dilation: Sequence[int],
                  what: str) -> tuple[tuple[int, int], ...]:
  """((before, after), ...) per spatial dim from torch's padding forms: an int, one int per dim, 'valid', 'same'
  ('same' puts the odd element of an even total on the right, as torch does), or tinygrad's per-side form of
  2 * dims ints, last dim first ((left, right, top, bottom) for 2-d), where a negative amount crops the input."""
  dims = len(kernel)
  if isinstance(padding, str):
    if padding == "valid": return ((0, 0),) * dims
    if padding != "same": raise ArgumentError(f"{what}: Invalid padding string: {padding!r} (use an int, a tuple, 'valid' or 'same')")
    if any(s != 1 for s in stride): raise ArgumentError(f"{what}: padding='same' is not supported for strided convolutions (stride {tuple(stride)})")
    total = [d * (k - 1) for k, d in zip(kernel, dilation)]
    return tuple((t // 2, t - t // 2) for t in total)
  if isinstance(padding, (list, tuple)) and len(padding) == 2 * dims:   # tinygrad's per-side form, last dim first
    sides = _ntuple(padding, "padding", 2 * dims)
    return tuple((sides[2 * (dims - 1 - d)], sides[2 * (dims - 1 - d) + 1]) for d in range(dims))
  pads = _ntuple(padding, "padding", dims)
  if min(pads) < 0: raise ArgumentError(f"{what}: negative padding is not supported, got padding={pads}")
  return tuple((p, p) for p in pads)


def _check_batched(x: Tensor, dims: int, what: str) -> None:
  if x.ndim not in (dims + 1, dims + 2):
    raise ArgumentError(f"Expected {dims + 1}D (unbatched) or {dims + 2}D (batched) input to {what}, but got input of shape {x.shape}")


def conv(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: IntOrPair = 1, padding: IntOrPair | str = 0,
         dilation: IntOrPair = 1, groups: int = 1) -> Tensor:
  """N-d cross-correlation (N = weight.ndim - 2), as torch.nn.functional.conv1d/2d/3d. x: (batch, C_in, *spatial)
  or (C_in, *spatial); weight: (C_out, C_in // groups, *kernel); bias: (C_out,).
  padding: an int, one int per spatial dim, 'valid' or 'same' (torch), or 2 * dims ints (tinygrad's per-side form,
  last dim first: (left, right, top, bottom) for 2-d; negative amounts crop)."""
  dims = weight.ndim - 2
  what = f"conv{dims}d"
  if dims < 1: raise ArgumentError(f"conv: weight must have at least 3 dims (C_out, C_in/groups, *kernel), got shape {weight.shape}")
  _check_batched(x, dims, what)
  if x.ndim == dims + 1: return conv(x.unsqueeze(0), weight, bias, stride, padding, dilation, groups).squeeze(0)
  if not isinstance(groups, int) or groups < 1: raise ArgumentError(f"{what}: non-positive groups is not supported, got groups={groups!r}")
  n, c_in = x.shape[:2]
  c_out, c_group, kernel = weight.shape[0], weight.shape[1], weight.shape[2:]
  if c_out % groups:
    raise ArgumentError(f"{what}: Given groups={groups}, expected weight to be divisible by {groups} at dimension 0, but got "
                        f"weight of shape {weight.shape} instead")
  if c_in != c_group * groups:
    raise ArgumentError(f"{what}: Given groups={groups}, expected input of shape {x.shape} to have {c_group * groups} channels "
                        f"(weight of shape {weight.shape}), but got {c_in} channels instead")
  if bias is not None and bias.shape != (c_out,):
    raise ArgumentError(f"{what}: Given weight of shape {weight.shape}, expected bias to be 1-dimensional with {c_out} elements, "
                        f"but got bias of shape {bias.shape} instead")
  strides, dilations = _ntuple(stride, "stride", dims), _ntuple(dilation, "dilation", dims)
  _positive(strides, "stride", what)
  _positive(dilations, "dilation", what)
  pads = _conv_padding(padding, kernel, strides, dilations, what)
  if any(b < 0 or a < 0 for b, a in pads):   # tinygrad's negative padding: crop first, convolve with the rest
    x = x.pad(((0, 0), (0, 0)) + tuple((min(b, 0), min(a, 0)) for b, a in pads))
    pads = tuple((max(b, 0), max(a, 0)) for b, a in pads)
  padded = tuple(s + b + a for s, (b, a) in zip(x.shape[2:], pads))
  reach = tuple(d * (k - 1) + 1 for k, d in zip(kernel, dilations))
  if any(p < r for p, r in zip(padded, reach)):
    raise ArgumentError(f"{what}: Calculated padded input size per channel: ({_sizes(padded)}). Kernel size: ({_sizes(reach)}). "
                        f"Kernel size can't be greater than actual input size (input shape {x.shape}, weight shape {weight.shape}; the kernel size includes dilation)")
  out_sizes = tuple((p - r) // s + 1 for p, r, s in zip(padded, reach, strides))
  if x.numel() == 0 or weight.numel() == 0:   # zeros, tied to x and weight (empty slices) so both get zero gradients
    tie = nothing_of(x, (0,)).sum() + nothing_of(weight, (0,)).sum()
    out = Tensor.zeros(n, c_out, *out_sizes, dtype=x.dtype, device=x.device) + tie
    return out if bias is None else out + bias.reshape((1, c_out) + (1,) * dims)
  out = _Convolution.apply(x, weight, strides=strides, dilations=dilations, pads=pads, groups=groups)
  return out if bias is None else out + bias.reshape((1, c_out) + (1,) * dims)


def _grouped_windows(x: Tensor, kernel: tuple[int, ...], strides: tuple[int, ...], dilations: tuple[int, ...],
                     pads: tuple[tuple[int, int], ...], groups: int) -> Tensor:
  """The kernel windows of x padded by `pads`, as (N, groups, 1, C_in // groups, *out, *kernel): a view."""
  win = sliding_windows(x.pad(((0, 0), (0, 0)) + pads), kernel, strides, dilations)   # (N, C_in, *out, *kernel)
  return win.reshape((x.shape[0], groups, 1, x.shape[1] // groups) + win.shape[2:])


class _Convolution(Function):
  """conv without bias, checked arguments. The forward multiplies the kernel windows (a view) by the weights and
  sums; rows of outputs that aren't whole SIMD vectors are computed wider, then cut (the MNIST CNN's conv2: rows
  of 14 computed 16 wide, where 14 gave the kernel 2-lane vectors).
  The gradients are written out rather than left to autograd: d x is a transposed convolution of the output
  gradient, so it runs as a forward convolution kernel. Autograd's d x summed the windows' gradient, a
  (N, C_in, *out, *kernel) tensor computed by a kernel without SIMD lanes (its innermost dim is the 3x3 taps) and
  then scattered back: a third of the MNIST CNN's CPU training step. d weight: see _weight_gradient."""
  def forward(self, x: UOp, weight: UOp, strides: tuple[int, ...], dilations: tuple[int, ...],
              pads: tuple[tuple[int, int], ...], groups: int) -> UOp:
    self.x, self.weight, self.geometry = x, weight, (strides, dilations, pads, groups)
    w, image = Tensor(weight), Tensor(x)
    c_out, c_group, kernel, dims = w.shape[0], w.shape[1], w.shape[2:], w.ndim - 2
    width = (x.shape[-1] + sum(pads[-1]) - dilations[-1] * (kernel[-1] - 1) - 1) // strides[-1] + 1
    widened = conv_row_width(width, cpu_target()) if strides[-1] == 1 and x.device in LANE_DEVICES else width
    if widened != width:
      # rows of whole SIMD vectors: the input copied once with its zeros and enough more on the right for
      # `widened` outputs per row, so the loads need no masks; the extra outputs are dropped after the sum
      image = _padded_wider(image, pads, widened - width)
      pads = ((0, 0),) * dims
    win = _grouped_windows(image, kernel, strides, dilations, pads, groups)
    w = w.reshape((1, groups, c_out // groups, c_group) + (1,) * dims + kernel)
    out = (win * w).sum((3,) + tuple(range(4 + dims, 4 + 2 * dims))).reshape((x.shape[0], c_out) + win.shape[4:4 + dims])
    if widened == width: return out.uop
    # copied without the extra outputs: the layers after it read rows of `width` again, contiguous
    return out.shrink(tuple((0, s) for s in out.shape[:-1]) + ((0, width),)).contiguous().uop

  def backward(self, grad: Tensor) -> tuple[Tensor | None, Tensor | None]:
    strides, dilations, pads, groups = self.geometry
    x, weight = self.tensor(self.x), self.tensor(self.weight)
    kernel = weight.shape[2:]
    grad_x = grad_w = None
    if self.needs_grad[0]:
      # the rows at the end that no window reached get no gradient: pad the far side by that many more
      unread = [size + before + after - d * (k - 1) - 1 - (out - 1) * s
                for size, (before, after), d, k, out, s in zip(x.shape[2:], pads, dilations, kernel, grad.shape[2:], strides)]
      around = tuple((d * (k - 1) - before, d * (k - 1) - after + extra) for d, k, (before, after), extra in zip(dilations, kernel, pads, unread))
      grad_x = _transposed(grad, weight, None, strides, dilations, around, groups)
    if self.needs_grad[1]: grad_w = _weight_gradient(x, grad, weight.shape, strides, dilations, pads, groups)
    return grad_x, grad_w


def _padded_wider(x: Tensor, pads: tuple[tuple[int, int], ...], extra: int) -> Tensor:
  """x (N, C, *spatial) padded by `pads` and by `extra` more zeros at the end of its last dim, copied once, so the
  loads of a convolution's sum over it need no masks."""
  return x.pad(((0, 0), (0, 0)) + pads[:-1] + ((pads[-1][0], pads[-1][1] + extra),)).contiguous()


def _weight_gradient(x: Tensor, grad: Tensor, weight_shape: tuple[int, ...], strides: tuple[int, ...],
                     dilations: tuple[int, ...], pads: tuple[tuple[int, int], ...], groups: int) -> Tensor:
  """d conv / d weight: per weight, the sum over the batch and the output positions of output gradient x window
  element. The sum runs along the output rows, contiguous in both operands when the stride is 1; the rows are
  widened to a multiple of the SIMD width (the gradient with zero columns, the input padded further right), so
  the kernel gets vector lanes and a register tile (the MNIST CNN's conv2: rows of 14 widened to 16)."""
  n, c_out, kernel, dims = x.shape[0], weight_shape[0], weight_shape[2:], len(weight_shape) - 2
  width = grad.shape[-1]
  if strides[-1] == 1 and width > 1 and x.device in LANE_DEVICES:
    widened = conv_row_width(width, cpu_target())
    # both copied once with their zeros, so that the loads in the sum need no masks
    grad = grad.pad(((0, 0),) * (grad.ndim - 1) + ((0, widened - width),)).contiguous()
    x = _padded_wider(x, pads, widened - width)
    pads = ((0, 0),) * dims
  # the taps outermost, the channels last: the kernel's register tile takes output x input channels (the output
  # gradient's loads are shared along the input channels, the input's along the output channels)
  taps_first = tuple(range(4 + dims, 4 + 2 * dims)) + tuple(range(4 + dims))
  win = _grouped_windows(x, kernel, strides, dilations, pads, groups).permute(taps_first)
  g = grad.reshape((n, groups, c_out // groups, 1) + grad.shape[2:] + (1,) * dims).permute(taps_first)
  summed = (win * g).sum((dims,) + tuple(range(dims + 4, 2 * dims + 4))).contiguous()   # (*kernel, groups, C_out // groups, C_in // groups)
  return summed.permute(tuple(range(dims, dims + 3)) + tuple(range(dims))).reshape(weight_shape)


def conv_transpose(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: IntOrPair = 1, padding: IntOrPair = 0,
                   output_padding: IntOrPair = 0, groups: int = 1, dilation: IntOrPair = 1) -> Tensor:
  """N-d transposed convolution (the gradient of conv with respect to its input), as
  torch.nn.functional.conv_transpose1d/2d/3d. x: (batch, C_in, *spatial) or (C_in, *spatial);
  weight: (C_in, C_out // groups, *kernel). Output size per dim:
  (size - 1)*stride - 2*padding + dilation*(kernel - 1) + output_padding + 1."""
  dims = weight.ndim - 2
  what = f"conv_transpose{dims}d"
  if dims < 1: raise ArgumentError(f"conv_transpose: weight must have at least 3 dims (C_in, C_out/groups, *kernel), got shape {weight.shape}")
  _check_batched(x, dims, what)
  if x.ndim == dims + 1:
    return conv_transpose(x.unsqueeze(0), weight, bias, stride, padding, output_padding, groups, dilation).squeeze(0)
  if not isinstance(groups, int) or groups < 1: raise ArgumentError(f"{what}: non-positive groups is not supported, got groups={groups!r}")
  n, c_in = x.shape[:2]
  kernel = weight.shape[2:]
  if weight.shape[0] % groups:
    raise ArgumentError(f"{what}: Given groups={groups}, expected weight to be divisible by {groups} at dimension 0, but got "
                        f"weight of shape {weight.shape} instead")
  if weight.shape[0] != c_in:
    raise ArgumentError(f"{what}: Given transposed=1, expected input of shape {x.shape} to have {weight.shape[0]} channels "
                        f"(weight of shape {weight.shape}), but got {c_in} channels instead")
  c_out = weight.shape[1] * groups
  if bias is not None and bias.shape != (c_out,):
    raise ArgumentError(f"{what}: Given transposed=1, weight of shape {weight.shape}, expected bias to be 1-dimensional with "
                        f"{c_out} elements, but got bias of shape {bias.shape} instead")
  strides, dilations = _ntuple(stride, "stride", dims), _ntuple(dilation, "dilation", dims)
  pads, extra = _ntuple(padding, "padding", dims), _ntuple(output_padding, "output_padding", dims)
  _positive(strides, "stride", what)
  _positive(dilations, "dilation", what)
  if min(pads) < 0: raise ArgumentError(f"{what}: negative padding is not supported, got padding={pads}")
  if min(extra) < 0 or any(e >= s and e >= d for e, s, d in zip(extra, strides, dilations)):
    raise ArgumentError(f"{what}: output padding must be smaller than either stride or dilation, but got output_padding={extra}, "
                        f"stride={strides}, dilation={dilations}")
  out_sizes = tuple((size - 1) * s - 2 * p + d * (k - 1) + e + 1
                    for size, s, p, d, k, e in zip(x.shape[2:], strides, pads, dilations, kernel, extra))
  if min(out_sizes) < 1:
    raise ArgumentError(f"{what}: Given input size per channel: ({_sizes(x.shape[2:])}). Calculated output size per channel: "
                        f"({_sizes(out_sizes)}). Output size is too small (weight shape {weight.shape}, padding={pads})")
  around = tuple((d * (k - 1) - p, d * (k - 1) - p + e) for d, k, p, e in zip(dilations, kernel, pads, extra))
  return _transposed(x, weight, bias, strides, dilations, around, groups)


def _transposed(x: Tensor, weight: Tensor, bias: Tensor | None, strides: tuple[int, ...], dilations: tuple[int, ...],
                around: tuple[tuple[int, int], ...], groups: int) -> Tensor:
  """A transposed convolution: x with stride - 1 zeros inserted between its elements, padded by `around` (before,
  after) per spatial dim (negative crops), convolved with the spatially flipped kernel, in/out channels swapped."""
  dims, c_in, kernel = weight.ndim - 2, weight.shape[0], weight.shape[2:]
  c_out = weight.shape[1] * groups
  for i, s in enumerate(strides):
    if s == 1: continue
    axis = 2 + i
    size = x.shape[axis]
    spaced = x.unsqueeze(axis + 1).pad(tuple((0, s - 1) if d == axis + 1 else (0, 0) for d in range(x.ndim + 1)))
    x = spaced.reshape(x.shape[:axis] + (size * s,) + x.shape[axis + 1:])
    x = x.shrink(tuple((0, (size - 1) * s + 1) if d == axis else None for d in range(x.ndim)))
  x = x.pad(((0, 0), (0, 0)) + around)
  spatial = tuple(range(2, 2 + dims))
  w = weight.reshape((groups, c_in // groups, c_out // groups) + tuple(kernel)).transpose(1, 2)
  w = w.reshape((c_out, c_in // groups) + tuple(kernel)).flip(spatial)
  return conv(x, w, bias, 1, 0, dilations, groups)


# ---------------------------------------------------------------- pooling

def _pool_geometry(x: Tensor, dims: int, kernel_size: IntOrPair, stride: IntOrPair | None, padding: IntOrPair,
                   dilation: IntOrPair, ceil_mode: bool, what: str) -> tuple[tuple[int, ...], ...]:
  """Check pooling arguments; return (kernel, stride, dilation, padding, output sizes, extra right padding)."""
  if x.ndim not in (dims + 1, dims + 2):
    raise ArgumentError(f"{what}: expected a {dims + 1}-d (C, *spatial) or {dims + 2}-d (N, C, *spatial) input, got shape {x.shape}")
  kernel = _ntuple(kernel_size, "kernel_size", dims)
  strides = kernel if stride is None or (isinstance(stride, (list, tuple)) and len(stride) == 0) else _ntuple(stride, "stride", dims)
  pads, dilations = _ntuple(padding, "padding", dims), _ntuple(dilation, "dilation", dims)
  if min(kernel) < 1: raise ArgumentError(f"{what}: kernel_size must be greater than zero, but got kernel_size={kernel}")
  if min(strides) < 1: raise ArgumentError(f"{what}: stride should be greater than zero, but got stride={strides}")
  if min(dilations) < 1: raise ArgumentError(f"{what}: dilation should be greater than zero, but got dilation={dilations}")
  if min(pads) < 0: raise ArgumentError(f"{what}: pad must be non-negative, but got padding={pads}")
  if any(p > k // 2 for p, k in zip(pads, kernel)):
    raise ArgumentError(f"{what}: pad should be at most half of kernel size, but got padding={pads} and kernel_size={kernel}")
  spatial = x.shape[-dims:]
  outs, extras = [], []
  for size, k, s, p, d in zip(spatial, kernel, strides, pads, dilations):
    span = size + 2 * p - d * (k - 1) - 1
    out = (span + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and out > 0 and (out - 1) * s >= size + p: out -= 1   # the last window must start inside input or left pad
    outs.append(out)
    extras.append(max(0, (out - 1) * s + d * (k - 1) + 1 - (size + 2 * p)))
  if min(outs) < 1:
    raise ArgumentError(f"{what}: Given input size: ({'x'.join(map(str, x.shape[-dims - 1:]))}). Calculated output size: "
                        f"({'x'.join(map(str, (x.shape[-dims - 1],) + tuple(outs)))}). Output size is too small "
                        f"(kernel_size={kernel}, stride={strides}, padding={pads}, dilation={dilations})")
  return kernel, strides, dilations, pads, tuple(outs), tuple(extras)


def _pooled_windows(x: Tensor, dims: int, kernel: tuple[int, ...], strides: tuple[int, ...], dilations: tuple[int, ...],
                    pads: tuple[int, ...], outs: tuple[int, ...], extras: tuple[int, ...], value: float) -> Tensor:
  lead = x.ndim - dims
  padded = x.pad(((0, 0),) * lead + tuple((p, p + e) for p, e in zip(pads, extras)), value=value)
  win = sliding_windows(padded, kernel, strides, dilations)
  return win.shrink(tuple((0, s) for s in win.shape[:lead]) + tuple((0, o) for o in outs) + tuple((0, k) for k in kernel))


def max_pool(x: Tensor, dims: int, kernel_size: IntOrPair, stride: IntOrPair | None = None, padding: IntOrPair = 0,
             dilation: IntOrPair = 1, ceil_mode: bool = False, return_indices: bool = False) -> Tensor | tuple[Tensor, Tensor]:
  """Max over kernel windows of the last `dims` dims of (N, C, *spatial) or (C, *spatial), as torch's max_poolNd:
  stride defaults to kernel_size, padding counts as -inf, ceil_mode keeps a last partial window that starts
  inside the input or the left padding. return_indices: also the int64 position of each window's first maximum,
  flat in the input's spatial dims (what max_unpool takes)."""
  what = f"max_pool{dims}d"
  kernel, strides, dilations, pads, outs, extras = _pool_geometry(x, dims, kernel_size, stride, padding, dilation, ceil_mode, what)
  if return_indices:
    lowest = -math.inf if dtypes.is_float(x.dtype) else dtypes.min(x.dtype)
    win = _pooled_windows(x, dims, kernel, strides, dilations, pads, outs, extras, lowest)
    flat = win.reshape(win.shape[:-dims] + (prod(kernel),))
    first = _first_maximum(flat, flat.max(-1, keepdim=True).detach())
    spatial = x.shape[-dims:]
    positions = Tensor.arange(prod(spatial), device=x.device).reshape(spatial)   # each input element's flat position
    positions = _pooled_windows(positions, dims, kernel, strides, dilations, pads, outs, extras, -1)
    positions = positions.reshape(positions.shape[:-dims] + (prod(kernel),))
    indices = first.where(positions, 0).sum(-1, dtype=dtypes.int32).cast(dtypes.int64)
    return first.where(flat, 0).sum(-1, dtype=x.dtype), indices
  if strides == kernel and set(dilations) == {1} and not any(pads) and not any(extras):
    return _TiledMaxPool.apply(x, kernel=kernel, outs=outs)
  lowest = -math.inf if dtypes.is_float(x.dtype) else dtypes.min(x.dtype)
  win = _pooled_windows(x, dims, kernel, strides, dilations, pads, outs, extras, lowest)
  if not (x.requires_grad and Tensor.grad_enabled): return win.max(tuple(range(-dims, 0)))
  # With gradients: torch sends each window's gradient to its first maximum (row-major in the window), where a
  # plain max would share it between ties (common after relu). Pick that element with a one-hot mask and sum.
  flat = win.reshape(win.shape[:-dims] + (prod(kernel),))
  return _first_maximum(flat, flat.max(-1, keepdim=True).detach()).where(flat, 0).sum(-1)


def max_unpool(x: Tensor, indices: Tensor, dims: int, kernel_size: IntOrPair, stride: IntOrPair | None = None,
               padding: IntOrPair = 0, output_size: Sequence[int] | None = None) -> Tensor:
  """The inverse of max pooling, as torch's max_unpoolNd: zeros of the pooled input's size with x placed at
  `indices` (flat spatial positions from max_pool(return_indices=True)). The output's spatial size is
  (in - 1) * stride - 2 * padding + kernel, or the last dims of output_size. Placement is a one-hot compare, so
  indices outside the output give nothing (torch raises; checking needs the indices on the host)."""
  what = f"max_unpool{dims}d"
  if x.ndim not in (dims + 1, dims + 2):
    raise ArgumentError(f"{what}: expected a {dims + 1}-d (C, *spatial) or {dims + 2}-d (N, C, *spatial) input, got shape {x.shape}")
  if not isinstance(indices, Tensor) or indices.shape != x.shape or not dtypes.is_int(indices.dtype):
    raise ArgumentError(f"{what}: Expected shape of indices to be same as that of the input tensor ({x.shape}) and an integer dtype, "
                        f"got indices of shape {getattr(indices, 'shape', None)} and dtype {getattr(indices, 'dtype', None)}")
  kernel = _ntuple(kernel_size, "kernel_size", dims)
  strides = kernel if stride is None else _ntuple(stride, "stride", dims)
  pads = _ntuple(padding, "padding", dims)
  default = tuple((size - 1) * s - 2 * p + k for size, s, p, k in zip(x.shape[-dims:], strides, pads, kernel))
  if output_size is None: spatial = default
  else:
    spatial = tuple(int(v) for v in output_size)[-dims:] if len(output_size) in (dims, x.ndim) else ()
    if len(spatial) != dims or any(s < 1 for s in spatial):
      raise ArgumentError(f"{what}: output_size must have {dims} or {x.ndim} elements (spatial sizes >= 1), got {tuple(output_size)}")
  lead, count = x.shape[:-dims], prod(x.shape[-dims:])
  flat_x, flat_i = x.reshape(lead + (count, 1)), indices.reshape(lead + (count, 1))
  hit = flat_i.eq(Tensor.arange(prod(spatial), device=x.device))                  # (..., input position, output position)
  def place(values: Tensor) -> Tensor:   # an output position hit twice (overlapping windows) holds the same element: max
    lowest = -math.inf if dtypes.is_float(values.dtype) else dtypes.min(values.dtype)
    return hit.any(-2).where(hit.where(values, lowest).max(-2), 0).cast(values.dtype)
  out = _placed(flat_x, hit, place) if x.requires_grad and Tensor.grad_enabled else place(flat_x)
  return out.reshape(lead + spatial)


def _placed(flat_x: Tensor, hit: Tensor, place: Callable[[Tensor], Tensor]) -> Tensor:
  """place(flat_x) with torch's gradient: each input element gets the gradient of the output it went to."""
  return Composite.apply(flat_x, fn=place, gradient=lambda grad, out, _: (hit.where(grad.unsqueeze(-2), 0).sum(-1, keepdim=True),))


def _first_maximum(flat: Tensor, peak: Tensor) -> Tensor:
  """True at the first maximum of each row of `flat` along its last dim (NaN counts as one), given the rows'
  maxima `peak` (keepdim): the element torch's max pooling sends a window's gradient to."""
  count = flat.shape[-1]
  is_max = flat.eq(peak) | flat.ne(flat)
  first = count - is_max.where(count - Tensor.arange(count, device=flat.device), 0).max(-1, keepdim=True)
  return first.eq(Tensor.arange(count, device=flat.device))


class _TiledMaxPool(Function):
  """Max pooling whose windows tile the input (stride = kernel, no padding or dilation; rows and columns left
  over at the end are not read): the windows are a reshape and a permute. The forward is the max alone; the
  backward picks each window's first maximum and writes the gradient in the input's layout. The generic path
  computes the first maximum in the forward too, and its gradient is a sum over the repeats of the window view
  (the MNIST CNN: two pooling kernels and two scatters instead of one kernel each way)."""
  def forward(self, x: UOp, kernel: tuple[int, ...], outs: tuple[int, ...]) -> UOp:
    self.x, self.kernel, self.outs = x, kernel, outs
    win = self._windows(Tensor(x))
    self.peak = win.max(tuple(range(-len(kernel), 0))).uop
    return self.peak

  def _windows(self, x: Tensor) -> Tensor:
    """(..., *outs, *kernel): every window, as a view of x."""
    lead, dims = x.ndim - len(self.kernel), len(self.kernel)
    used = x.shrink(tuple((0, size) for size in x.shape[:lead]) + tuple((0, o * k) for o, k in zip(self.outs, self.kernel)))
    split = used.reshape(x.shape[:lead] + tuple(d for o, k in zip(self.outs, self.kernel) for d in (o, k)))
    return split.permute(_outs_then_kernel(lead, dims))

  def backward(self, grad: Tensor) -> Tensor:
    x, dims = self.tensor(self.x), len(self.kernel)
    lead = x.ndim - dims
    win = self._windows(x)
    flat = win.reshape(win.shape[:-dims] + (prod(self.kernel),))
    spread = _first_maximum(flat, self.tensor(self.peak).unsqueeze(-1)).where(grad.unsqueeze(-1), 0).reshape(win.shape)
    grouped = _outs_then_kernel(lead, dims)
    order = tuple(sorted(range(len(grouped)), key=grouped.__getitem__))   # its inverse: back to (..., o0, k0, o1, k1, ...)
    # stored in the (..., o0, k0, o1, k1, ...) shape, the input's layout: the kernel indexes the windows' values
    # with those dims, not with divisions of a flat position
    tiled = spread.permute(order).contiguous().reshape(x.shape[:lead] + tuple(o * k for o, k in zip(self.outs, self.kernel)))
    leftover = tuple((0, size - o * k) for size, o, k in zip(x.shape[lead:], self.outs, self.kernel))
    return tiled.pad(((0, 0),) * lead + leftover).contiguous() if any(after for _, after in leftover) else tiled


def _window_counts(size: int, kernel: int, stride: int, pad: int, out: int, count_include_pad: bool) -> np.ndarray:
  """How many elements each output's window averages over, along one dim (torch's avg_pool divisor): the window
  clipped to the padded input (count_include_pad) or to the input itself (not counting padding)."""
  starts = np.arange(out) * stride - pad
  ends = np.minimum(starts + kernel, size + pad)
  if not count_include_pad: starts, ends = np.maximum(starts, 0), np.minimum(ends, size)
  return (ends - starts).astype(np.float64)


def avg_pool(x: Tensor, dims: int, kernel_size: IntOrPair, stride: IntOrPair | None = None, padding: IntOrPair = 0,
             ceil_mode: bool = False, count_include_pad: bool = True, divisor_override: int | None = None) -> Tensor:
  """Mean over kernel windows of the last `dims` dims of (N, C, *spatial) or (C, *spatial), as torch's avg_poolNd:
  zero padding counted in each window's size (count_include_pad) or not, and windows that ceil_mode adds past the
  padding never counted; divisor_override replaces the count."""
  what = f"avg_pool{dims}d"
  kernel, strides, dilations, pads, outs, extras = _pool_geometry(x, dims, kernel_size, stride, padding, 1, ceil_mode, what)
  if divisor_override is not None and (not isinstance(divisor_override, int) or divisor_override == 0):
    raise ArgumentError(f"{what}: divisor must be not zero, got divisor_override={divisor_override!r}")
  win = _pooled_windows(x, dims, kernel, strides, dilations, pads, outs, extras, 0)
  total = win.sum(tuple(range(-dims, 0)))
  if not dtypes.is_float(x.dtype):   # integer averages truncate toward zero and keep the dtype, as torch's int64 pool
    return (_averaged(total.cast(dtypes.float64), x, dims, kernel, strides, pads, outs, count_include_pad, divisor_override)
            .trunc().cast(x.dtype))
  return _averaged(total, x, dims, kernel, strides, pads, outs, count_include_pad, divisor_override)


def _averaged(total: Tensor, x: Tensor, dims: int, kernel: tuple[int, ...], strides: tuple[int, ...], pads: tuple[int, ...],
              outs: tuple[int, ...], count_include_pad: bool, divisor_override: int | None) -> Tensor:
  """Window sums divided by divisor_override or by each window's element count."""
  if divisor_override is not None: return total / divisor_override
  counts = [_window_counts(size, k, s, p, o, count_include_pad) for size, k, s, p, o in zip(x.shape[-dims:], kernel, strides, pads, outs)]
  if all(np.all(c == c[0]) for c in counts) and all(c[0] == k for c, k in zip(counts, kernel)): return total / prod(kernel)
  divisor = counts[0]
  for c in counts[1:]: divisor = np.multiply.outer(divisor, c)
  return total / Tensor(divisor.astype(np.float32), device=x.device).cast(total.dtype)
