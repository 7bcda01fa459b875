"""Linear algebra and nn functional ops against torch, forward and backward: matmul/dot, einsum, conv1d/2d/3d,
conv_transpose1d/2d/3d, max/avg pooling, interpolate, layer_norm, scaled_dot_product_attention and dropout, plus the
errors bad arguments raise (torch's exception class, messages naming shapes and parameters).

Each case runs the same inputs through minigrad and torch, compares shape, dtype and values, then backpropagates
the same random upstream gradient through both and compares every input's gradient (float32, atol 1e-4). Shapes
are small: compiling kernels dominates the runtime.
"""
from __future__ import annotations
from typing import Callable
import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from minigrad import Tensor
from minigrad.nn import functional as F

from torch_compare import assert_same, randint, randn


def compare(fn: Callable, *arrays: np.ndarray, torch_fn: Callable | None = None, grad: bool = True, atol: float = 1e-4) -> None:
  """fn(*inputs) in minigrad vs (torch_fn or fn)(*inputs) in torch (torch_fn gets TF as its first argument when
  it takes one more parameter); with grad, also the gradients of sum(output * upstream) for every float input."""
  mine = [Tensor(a, requires_grad=grad and a.dtype.kind == "f") for a in arrays]
  theirs = [torch.tensor(a, requires_grad=grad and a.dtype.kind == "f") for a in arrays]
  got, expected = fn(*mine), (torch_fn or fn)(*theirs)
  assert_same(got, expected, atol=atol)
  if not grad or not expected.requires_grad: return
  upstream = randn(*expected.shape, seed=99)
  (expected * torch.tensor(upstream)).sum().backward()
  (got * Tensor(upstream)).sum().backward()
  for i, (m, t) in enumerate(zip(mine, theirs)):
    if t.grad is None: continue
    assert m.grad is not None, f"no gradient for input {i}"
    np.testing.assert_allclose(m.grad.numpy(), t.grad.numpy(), atol=atol, rtol=1e-4, err_msg=f"gradient of input {i}")


# ---------------------------------------------------------------- matmul and dot

MATMUL_SHAPES = [((3,), (3,)), ((3,), (3, 2)), ((2, 3), (3,)), ((3,), (2, 3, 4)), ((2, 4, 3), (3,)), ((2, 1, 3, 4), (5, 4, 2)),
                 ((1, 4), (4, 1)), ((3, 0), (0, 2)), ((0, 2, 3), (3, 4)), ((2, 3), (3, 0))]


@pytest.mark.parametrize("sa, sb", MATMUL_SHAPES, ids=[f"{a}@{b}" for a, b in MATMUL_SHAPES])
def test_matmul_shapes_and_gradients(sa, sb):
  compare(lambda a, b: a @ b, randn(*sa, seed=1), randn(*sb, seed=2))


def test_gradient_through_empty_reduction():
  x = Tensor(np.zeros((3, 0), np.float32), requires_grad=True)
  x.sum().backward()
  assert x.grad is not None and x.grad.shape == (3, 0)


@pytest.mark.parametrize("view", ["transposed", "sliced", "expanded"])
def test_matmul_non_contiguous(view):
  make = {"transposed": lambda a, b: (a.transpose(0, 1), b.transpose(-1, -2)),
          "sliced": lambda a, b: (a[1:, ::2], b[::2, 1:]),
          "expanded": lambda a, b: (a[:1].expand(3, 4), b[:, :1].expand(4, 3))}[view]
  compare(lambda a, b: (lambda x, y: x @ y)(*make(a, b)), randn(4, 4, seed=3), randn(4, 4, seed=4))


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.int8, np.float64])
def test_matmul_dtypes(dtype):
  big = dtype == np.int8
  a, b = randint(2, 3, low=-100 if big else -5, high=100 if big else 6, dtype=dtype), randint(3, 4, seed=1, dtype=dtype)
  compare(lambda x, y: x @ y, a, b, grad=False)            # int8 wraps around like torch's
  compare(lambda x, y: x @ y, a[0], b[:, 0], grad=False)   # 1-d @ 1-d


def test_dot_and_matmul_method():
  compare(lambda a, b: a.dot(b), randn(5, seed=5), randn(5, seed=6), torch_fn=lambda a, b: torch.dot(a, b))
  compare(lambda a, b: a.matmul(b), randn(2, 5, seed=5), randn(5, 3, seed=6))


def test_matmul_errors_name_shapes():
  with pytest.raises(RuntimeError, match=r"\(2, 3\).*\(4, 5\)"): Tensor.ones(2, 3) @ Tensor.ones(4, 5)
  with pytest.raises(RuntimeError, match=r"\(3,\).*\(4,\)"): Tensor.ones(3) @ Tensor.ones(4)
  with pytest.raises(RuntimeError, match=r"\(2, 3, 4\).*\(3, 4, 5\)"): Tensor.ones(2, 3, 4) @ Tensor.ones(3, 4, 5)
  with pytest.raises(RuntimeError, match="1 dim"): Tensor(1.0) @ Tensor.ones(3)


# ---------------------------------------------------------------- einsum

EINSUM_CASES = [
  ("ij,jk->ik", [(2, 3), (3, 4)]),
  ("ij,jk", [(2, 3), (3, 4)]),                    # implicit output
  ("bij,bjk->bik", [(2, 2, 3), (2, 3, 2)]),
  ("ii->", [(3, 3)]),                             # trace
  ("ii", [(3, 3)]),
  ("ii->i", [(3, 3)]),                            # diagonal
  ("iij->j", [(2, 2, 3)]),
  ("ij->ji", [(2, 3)]),
  ("ba", [(2, 3)]),                               # implicit transpose
  ("i,j->ij", [(3,), (4,)]),                      # outer product
  ("i,i->", [(4,), (4,)]),
  ("ij->", [(2, 3)]),
  ("ij->j", [(2, 3)]),
  ("ijk,ikl,ilm->jm", [(2, 3, 2), (2, 2, 3), (2, 3, 2)]),
  ("ij,j->i", [(2, 3), (1,)]),                    # labeled size-1 dims broadcast
  ("Ab->bA", [(2, 3)]),
  ("...ij,...jk->...ik", [(2, 1, 2, 3), (4, 3, 2)]),
  ("...ii->...i", [(2, 3, 3)]),
  ("i...->...", [(2, 3, 4)]),
  ("b...,b->...b", [(2, 3), (2,)]),
  ("i j , j k -> i k", [(2, 3), (3, 2)]),        # spaces
  (",->", [(), ()]),
]


@pytest.mark.parametrize("formula, shapes", EINSUM_CASES, ids=[c[0] for c in EINSUM_CASES])
def test_einsum_matches_torch(formula, shapes):
  arrays = [randn(*s, seed=i) for i, s in enumerate(shapes)]
  compare(lambda *ts: Tensor.einsum(formula, *ts), *arrays, torch_fn=lambda *ts: torch.einsum(formula, *ts))


def test_einsum_list_operands_int_dtype_and_empty():
  a, b = randint(3, 4), randint(4, 2, seed=1)
  compare(lambda x, y: F.einsum("ij,jk->ik", [x, y]), a, b, torch_fn=lambda x, y: torch.einsum("ij,jk->ik", [x, y]), grad=False)
  compare(lambda x, y: Tensor.einsum("i,i", x, y), a[0].astype(np.int64), b[:, 0].astype(np.int64),
          torch_fn=lambda x, y: torch.einsum("i,i", x, y), grad=False)
  compare(lambda x, y: Tensor.einsum("ij,jk->ik", x, y), randn(2, 0), randn(0, 3), torch_fn=lambda x, y: torch.einsum("ij,jk->ik", x, y))
  # non-contiguous operands: transposed, strided, expanded
  view = lambda x, y: (x.transpose(0, 1), y[::2, :1].expand(2, 3))
  compare(lambda x, y: Tensor.einsum("ij,jk->ik", *view(x, y)), randn(2, 4, seed=3), randn(4, 2, seed=4),
          torch_fn=lambda x, y: torch.einsum("ij,jk->ik", *view(x, y)))


@pytest.mark.parametrize("formula, shapes, message", [
  ("ij,jk", [(2, 3), (4, 5)], r"subscript j has size 4.*size 3"),
  ("ij->k", [(2, 3)], "output subscript k does not appear"),
  ("ij", [(2, 3, 4)], r"number of subscripts.*\(2\).*\(3\)"),
  ("i1", [(2, 3)], "invalid subscript given at index 1"),
  ("ij,jk->ii", [(2, 3), (3, 2)], "appears more than once in the output"),
  ("ij,jk", [(2, 3)], "fewer operands"),
  ("i", [(2,), (2,)], "more operands"),
  ("ii->i", [(2, 3)], "repeated for operand 0 but the sizes don't match"),
  ("i . j", [(2, 3)], "not part of any ellipsis"),
  ("ij->ij->", [(2, 3)], "invalid subscript"),
])
def test_einsum_errors_like_torch(formula, shapes, message):
  with pytest.raises(RuntimeError):
    torch.einsum(formula, *[torch.zeros(s) for s in shapes])
  with pytest.raises(RuntimeError, match=message):
    Tensor.einsum(formula, *[Tensor.zeros(*s) for s in shapes])


# ---------------------------------------------------------------- convolution

CONV_CASES = [
  # dims, (N, C_in, *spatial), C_out, kernel, kwargs
  (1, (2, 4, 9), 6, (3,), dict(stride=2, padding=1, groups=2)),
  (1, (1, 3, 8), 2, (4,), dict(padding="same", dilation=2)),
  (1, (1, 2, 7), 3, (3,), dict(padding="valid", stride=3)),
  (2, (1, 4, 6, 7), 4, (3, 2), dict(stride=(2, 1), padding=(1, 2), dilation=(1, 2), groups=4)),
  (2, (2, 3, 5, 5), 2, (2, 2), dict(padding="same")),
  (3, (1, 2, 4, 5, 4), 4, (2, 3, 2), dict(stride=(1, 2, 1), padding=1, groups=2)),
  (3, (1, 1, 5, 4, 4), 2, (3, 1, 2), dict(dilation=(2, 1, 1), padding="same")),
]


@pytest.mark.filterwarnings("ignore:Using padding='same'")
@pytest.mark.parametrize("dims, in_shape, c_out, kernel, kwargs", CONV_CASES)
def test_conv_forward_and_gradients(dims, in_shape, c_out, kernel, kwargs):
  x, w, b = randn(*in_shape, seed=1), randn(c_out, in_shape[1] // kwargs.get("groups", 1), *kernel, seed=2), randn(c_out, seed=3)
  name = f"conv{dims}d"
  compare(lambda x, w, b: getattr(F, name)(x, w, b, **kwargs), x, w, b, torch_fn=lambda x, w, b: getattr(TF, name)(x, w, b, **kwargs))


def test_conv_tensor_methods_unbatched_and_non_contiguous():
  x1, w1 = randn(3, 8, seed=4), randn(2, 3, 3, seed=5)
  compare(lambda x, w: x.conv1d(w, padding=1), x1, w1, torch_fn=lambda x, w: TF.conv1d(x, w, padding=1))   # unbatched
  x3, w3 = randn(1, 2, 3, 4, 5, seed=6), randn(2, 2, 2, 2, 2, seed=7)
  compare(lambda x, w: x.conv3d(w, stride=2, padding=1), x3, w3, torch_fn=lambda x, w: TF.conv3d(x, w, stride=2, padding=1))
  x2, w2 = randn(1, 2, 5, 6, seed=8), randn(3, 2, 3, 3, seed=9)
  compare(lambda x, w: x.transpose(2, 3)[:, :, ::2].conv2d(w), x2, w2, torch_fn=lambda x, w: TF.conv2d(x.transpose(2, 3)[:, :, ::2], w))
  compare(lambda x, w: x[:, :1].expand(1, 2, 5, 6).conv2d(w), x2, w2, torch_fn=lambda x, w: TF.conv2d(x[:, :1].expand(1, 2, 5, 6), w))


def test_conv_empty_batch_and_float64():
  compare(lambda x, w: F.conv2d(x, w), randn(0, 2, 4, 4), randn(3, 2, 3, 3), torch_fn=lambda x, w: TF.conv2d(x, w))   # zero gradients
  compare(lambda x, w: F.conv1d(x, w, padding=1), randn(1, 2, 5).astype(np.float64), randn(3, 2, 3).astype(np.float64),
          torch_fn=lambda x, w: TF.conv1d(x, w, padding=1))


CONV_ERRORS = [
  ((1, 3, 5, 5), (2, 4, 3, 3), {}, r"\(1, 3, 5, 5\).*4 channels.*\(2, 4, 3, 3\)"),
  ((1, 3, 5, 5), (2, 3, 7, 7), {}, r"padded input size per channel: \(5 x 5\). Kernel size: \(7 x 7\)"),
  ((1, 3, 5, 5), (2, 3, 3, 3), dict(dilation=3), r"Kernel size: \(7 x 7\)"),
  ((1, 3, 5, 5), (2, 1, 3, 3), dict(groups=3), "groups=3.*divisible by 3"),
  ((1, 3, 5, 5), (2, 3, 3, 3), dict(groups=2), r"groups=2.*6 channels.*got 3"),
  ((1, 3, 5, 5), (2, 3, 3, 3), dict(padding=-1), "negative padding"),
  ((1, 3, 5, 5), (2, 3, 3, 3), dict(stride=0), "stride"),
  ((1, 3, 5, 5), (2, 3, 3, 3), dict(stride=(1, 2, 3)), "stride"),
  ((1, 3, 5, 5), (2, 3, 3, 3), dict(padding="same", stride=2), "strided"),
  ((1, 3, 5, 5), (2, 3, 3, 3), dict(padding="full"), "padding string"),
  ((1, 3, 5, 5), (2, 3, 3, 3), dict(groups=0), "groups"),
  ((5, 5), (2, 3, 3, 3), {}, r"3D \(unbatched\) or 4D \(batched\).*\(5, 5\)"),
]


@pytest.mark.parametrize("x_shape, w_shape, kwargs, message", CONV_ERRORS)
def test_conv2d_errors_like_torch(x_shape, w_shape, kwargs, message):
  with pytest.raises(RuntimeError):
    TF.conv2d(torch.zeros(x_shape), torch.zeros(w_shape), **kwargs)
  with pytest.raises(RuntimeError, match=message):
    F.conv2d(Tensor.zeros(*x_shape), Tensor.zeros(*w_shape), **kwargs)
  with pytest.raises(ValueError):   # also a ValueError, as minigrad's conv errors were before
    F.conv2d(Tensor.zeros(*x_shape), Tensor.zeros(*w_shape), **kwargs)


def test_conv_bias_shape_error():
  with pytest.raises(RuntimeError, match=r"bias.*2 elements.*\(3,\)"):
    F.conv2d(Tensor.zeros(1, 3, 5, 5), Tensor.zeros(2, 3, 3, 3), Tensor.zeros(3))


# ---------------------------------------------------------------- transposed convolution

CONV_TRANSPOSE_CASES = [
  (2, (1, 4, 3, 4), 6, (3, 2), dict()),
  (2, (2, 2, 3, 3), 3, (3, 3), dict(stride=2, padding=1, output_padding=1)),
  (2, (1, 4, 3, 4), 4, (2, 3), dict(stride=(2, 3), padding=(0, 2), dilation=2, groups=2, output_padding=(1, 0))),
  (2, (1, 2, 4, 4), 2, (3, 3), dict(padding=2)),
  (1, (1, 3, 5), 2, (4,), dict(stride=3, padding=1, output_padding=2)),
  (3, (1, 2, 2, 3, 2), 2, (2, 2, 3), dict(stride=(2, 1, 2), padding=(0, 1, 1))),
]


@pytest.mark.parametrize("dims, in_shape, c_out, kernel, kwargs", CONV_TRANSPOSE_CASES)
def test_conv_transpose_forward_and_gradients(dims, in_shape, c_out, kernel, kwargs):
  groups = kwargs.get("groups", 1)
  x, w, b = randn(*in_shape, seed=10), randn(in_shape[1], c_out // groups, *kernel, seed=11), randn(c_out, seed=12)
  name = f"conv_transpose{dims}d"
  compare(lambda x, w, b: getattr(x, name)(w, b, **kwargs), x, w, b, torch_fn=lambda x, w, b: getattr(TF, name)(x, w, b, **kwargs))


def test_conv_transpose_unbatched_and_errors():
  compare(lambda x, w: F.conv_transpose2d(x, w, stride=2), randn(2, 3, 3, seed=13), randn(2, 1, 2, 2, seed=14),
          torch_fn=lambda x, w: TF.conv_transpose2d(x, w, stride=2))
  x, w = Tensor.zeros(1, 3, 5, 5), Tensor.zeros(3, 2, 3, 3)
  for kwargs, message in [(dict(stride=2, output_padding=2), "output padding must be smaller"), (dict(padding=5), "Output size is too small"),
                          (dict(groups=2), "divisible by 2"), (dict(padding=-1), "negative padding")]:
    with pytest.raises(RuntimeError): TF.conv_transpose2d(torch.zeros(1, 3, 5, 5), torch.zeros(3, 2, 3, 3), **kwargs)
    with pytest.raises(RuntimeError, match=message): F.conv_transpose2d(x, w, **kwargs)
  with pytest.raises(RuntimeError, match=r"\(1, 3, 5, 5\).*2 channels"): F.conv_transpose2d(x, Tensor.zeros(2, 2, 3, 3))


# ---------------------------------------------------------------- pooling

MAX_POOL_CASES = [
  (2, (1, 2, 6, 7), dict(kernel_size=3, stride=2, padding=1)),
  (2, (1, 1, 7, 7), dict(kernel_size=(2, 3), stride=(2, 1), padding=(1, 0), dilation=(2, 1))),
  (2, (2, 1, 5, 6), dict(kernel_size=2, ceil_mode=True)),
  (2, (1, 1, 6, 6), dict(kernel_size=3, stride=2, padding=1, dilation=2, ceil_mode=True)),
  (1, (1, 2, 9), dict(kernel_size=4, stride=3, padding=2, ceil_mode=True)),
  (3, (1, 1, 4, 5, 4), dict(kernel_size=2, stride=(1, 2, 2), padding=1)),
]


@pytest.mark.parametrize("dims, shape, kwargs", MAX_POOL_CASES)
def test_max_pool(dims, shape, kwargs):
  name = f"max_pool{dims}d"
  compare(lambda x: getattr(F, name)(x, **kwargs), randn(*shape, seed=15), torch_fn=lambda x: getattr(TF, name)(x, **kwargs))


AVG_POOL_CASES = [
  (2, (1, 2, 6, 7), dict(kernel_size=3, stride=2, padding=1)),
  (2, (1, 2, 6, 7), dict(kernel_size=3, stride=2, padding=1, count_include_pad=False)),
  (2, (1, 1, 5, 6), dict(kernel_size=(3, 2), stride=2, padding=(1, 1), ceil_mode=True)),
  (2, (1, 1, 5, 6), dict(kernel_size=(3, 2), stride=2, padding=(1, 1), ceil_mode=True, count_include_pad=False)),
  (2, (1, 1, 5, 5), dict(kernel_size=2, ceil_mode=True, divisor_override=3)),
  (1, (2, 2, 7), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)),
  (3, (1, 1, 4, 3, 5), dict(kernel_size=2, stride=(2, 1, 2), padding=(1, 0, 1), count_include_pad=False)),
]


@pytest.mark.parametrize("dims, shape, kwargs", AVG_POOL_CASES)
def test_avg_pool(dims, shape, kwargs):
  name = f"avg_pool{dims}d"
  compare(lambda x: getattr(F, name)(x, **kwargs), randn(*shape, seed=16), torch_fn=lambda x: getattr(TF, name)(x, **kwargs))


def test_pool_tensor_methods_unbatched_and_non_contiguous():
  compare(lambda x: x.max_pool1d(2), randn(3, 6, seed=17), torch_fn=lambda x: TF.max_pool1d(x, 2))
  compare(lambda x: x.avg_pool3d(2, ceil_mode=True), randn(1, 3, 3, 4, seed=18), torch_fn=lambda x: TF.avg_pool3d(x, 2, ceil_mode=True))
  compare(lambda x: x.transpose(2, 3).max_pool2d(2), randn(1, 2, 4, 6, seed=19), torch_fn=lambda x: TF.max_pool2d(x.transpose(2, 3), 2))


POOL_ERRORS = [
  (dict(kernel_size=2, padding=2), "half of kernel size"),
  (dict(kernel_size=7), r"Output size is too small"),
  (dict(kernel_size=3, dilation=3), r"Output size is too small"),
  (dict(kernel_size=2, stride=0), "stride"),
  (dict(kernel_size=3, padding=-1), "non-negative"),
]


@pytest.mark.parametrize("fn, kwargs, error, message", [
  *[(fn, kwargs, RuntimeError, message) for fn in ("max_pool2d", "avg_pool2d") for kwargs, message in POOL_ERRORS
    if not (fn == "avg_pool2d" and "dilation" in kwargs)],
  ("avg_pool2d", dict(kernel_size=3, dilation=3), TypeError, "dilation"),   # avg_pool2d takes no dilation, in torch either
])
def test_pool_errors_like_torch(fn, kwargs, error, message):
  with pytest.raises(error): getattr(TF, fn)(torch.zeros(1, 3, 5, 5), **kwargs)
  with pytest.raises(error, match=message): getattr(F, fn)(Tensor.zeros(1, 3, 5, 5), **kwargs)


@pytest.mark.parametrize("dtype", [np.int64, np.uint8, np.int8])
def test_pool_integer_dtypes(dtype):
  x = randint(1, 2, 5, 6, low=0 if dtype == np.uint8 else -60, high=100, dtype=dtype, seed=37)
  compare(lambda t: F.max_pool2d(t, 2, padding=1), x, torch_fn=lambda t: TF.max_pool2d(t, 2, padding=1), grad=False)
  if dtype == np.int64:   # torch averages only int64 among the integer types (truncating)
    compare(lambda t: F.avg_pool2d(t, 3, stride=2, padding=1), x, torch_fn=lambda t: TF.avg_pool2d(t, 3, stride=2, padding=1), grad=False)


def test_pool_wrong_rank_names_shape():
  with pytest.raises(RuntimeError, match=r"4-d.*\(5, 5\)"): F.max_pool2d(Tensor.zeros(5, 5), 2)


# ---------------------------------------------------------------- interpolate

INTERPOLATE_CASES = [
  ((1, 2, 5), dict(scale_factor=2)),
  ((1, 2, 5), dict(size=8)),
  ((1, 2, 7), dict(size=3)),
  ((1, 1, 4, 6), dict(scale_factor=(1.5, 0.5))),
  ((1, 1, 4, 6), dict(size=(6, 4), mode="nearest-exact")),
  ((1, 2, 5), dict(size=8, mode="linear")),
  ((1, 2, 5), dict(scale_factor=1.7, mode="linear", align_corners=True)),
  ((1, 1, 4, 5), dict(size=(7, 3), mode="bilinear")),
  ((1, 1, 4, 5), dict(scale_factor=2.5, mode="bilinear", align_corners=True)),
  ((1, 1, 4, 5), dict(scale_factor=2.5, mode="bilinear", recompute_scale_factor=True)),
  ((1, 1, 2, 3, 2), dict(scale_factor=2, mode="trilinear")),
  ((1, 2, 5, 7), dict(size=(3, 4), mode="area")),
]


@pytest.mark.parametrize("shape, kwargs", INTERPOLATE_CASES)
def test_interpolate(shape, kwargs):
  compare(lambda x: x.interpolate(**kwargs), randn(*shape, seed=20), torch_fn=lambda x: TF.interpolate(x, **kwargs))


def test_interpolate_ints_and_errors():
  x = randint(1, 1, 3, 4, low=0, high=255, dtype=np.uint8)
  compare(lambda t: F.interpolate(t, size=(5, 7)), x, torch_fn=lambda t: TF.interpolate(t, size=(5, 7)), grad=False)
  t = Tensor.zeros(1, 1, 4)
  for kwargs, error in [(dict(scale_factor=2, size=3), ValueError), (dict(size=3, mode="bilinear"), NotImplementedError),
                        (dict(size=3, align_corners=True), ValueError), (dict(size=(2, 3)), ValueError), (dict(size=0), RuntimeError),
                        (dict(size=3, mode="cubic"), NotImplementedError)]:
    with pytest.raises(error): TF.interpolate(torch.zeros(1, 1, 4), **kwargs)
    with pytest.raises(error): F.interpolate(t, **kwargs)
  with pytest.raises(NotImplementedError, match="got 1D"): F.interpolate(Tensor.zeros(4), scale_factor=2)


# ---------------------------------------------------------------- layer norm

@pytest.mark.parametrize("shape, normalized", [((2, 3, 4), (3, 4)), ((5,), (5,))])
def test_layer_norm(shape, normalized):
  x, w, b = randn(*shape, seed=21) * 3 + 1, randn(*normalized, seed=22), randn(*normalized, seed=23)
  compare(lambda x, w, b: x.layer_norm(normalized, w, b), x, w, b, torch_fn=lambda x, w, b: TF.layer_norm(x, normalized, w, b))
  compare(lambda x: F.layer_norm(x, normalized, eps=0.1), x, torch_fn=lambda x: TF.layer_norm(x, normalized, eps=0.1))


def test_tensor_layernorm_method():
  compare(lambda x: x.layernorm(), randn(3, 5, seed=24), torch_fn=lambda x: TF.layer_norm(x, (5,)))


# ---------------------------------------------------------------- attention

def _mask(shape: tuple[int, ...], seed: int, empty_row: bool = False) -> np.ndarray:
  m = np.random.default_rng(seed).random(shape) > 0.4
  if empty_row: m[..., 1, :] = False
  return m


SDPA_CASES = [
  ("plain_with_scale", dict(scale=0.3)),
  ("causal", dict(is_causal=True)),
  ("bool_mask", dict(attn_mask=("bool", (4, 5)))),
  ("bool_mask_empty_row", dict(attn_mask=("bool_empty", (2, 1, 4, 5)))),
  ("float_mask", dict(attn_mask=("float", (1, 4, 5)))),
]


@pytest.mark.parametrize("name, kwargs", SDPA_CASES, ids=[c[0] for c in SDPA_CASES])
def test_scaled_dot_product_attention(name, kwargs):
  q, k, v = randn(2, 3, 4, 8, seed=25), randn(2, 3, 5, 8, seed=26), randn(2, 3, 5, 6, seed=27)
  mask = kwargs.get("attn_mask")
  extra = () if mask is None else ((randn(*mask[1], seed=28),) if mask[0] == "float" else (_mask(mask[1], 29, mask[0] == "bool_empty"),))
  rest = {key: value for key, value in kwargs.items() if key != "attn_mask"}
  def run(lib_fn: Callable) -> Callable:
    return lambda q, k, v, *m: lib_fn(q, k, v, attn_mask=m[0] if m else None, **rest)
  compare(run(lambda q, k, v, **kw: q.scaled_dot_product_attention(k, v, **kw)), q, k, v, *extra,
          torch_fn=run(TF.scaled_dot_product_attention))


def test_scaled_dot_product_attention_gqa_3d_and_errors():
  q, k, v = randn(1, 4, 3, 8, seed=30), randn(1, 2, 3, 8, seed=31), randn(1, 2, 3, 8, seed=32)
  compare(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True), q, k, v,
          torch_fn=lambda q, k, v: TF.scaled_dot_product_attention(q, k, v, enable_gqa=True))
  compare(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), q[0], k[0, :1].repeat(4, 0)[:, :2], v[0, :1].repeat(4, 0)[:, :2],
          torch_fn=lambda q, k, v: TF.scaled_dot_product_attention(q, k, v, is_causal=True))
  with pytest.raises(RuntimeError, match="is_causal"):
    F.scaled_dot_product_attention(Tensor(q), Tensor(q), Tensor(q), attn_mask=Tensor.ones(3, 3).bool(), is_causal=True)
  with pytest.raises(RuntimeError, match=r"\(1, 4, 3, 8\).*\(1, 2, 3, 5\)"):
    F.scaled_dot_product_attention(Tensor(q), Tensor(randn(1, 2, 3, 5)), Tensor(v))


def test_scaled_dot_product_attention_dropout_only_when_training():
  q, k, v = (Tensor(randn(1, 2, 4, 8, seed=s)) for s in (33, 34, 35))
  plain = F.scaled_dot_product_attention(q, k, v).numpy()
  np.testing.assert_allclose(F.scaled_dot_product_attention(q, k, v, dropout_p=0.5).numpy(), plain, atol=1e-6)
  with Tensor.train():
    Tensor.manual_seed(3)
    dropped = F.scaled_dot_product_attention(q, k, v, dropout_p=0.5).numpy()
    zeroed = F.scaled_dot_product_attention(q, k, v, dropout_p=1.0).numpy()
  assert not np.allclose(dropped, plain) and np.all(zeroed == 0)


# ---------------------------------------------------------------- dropout

def test_dropout_statistics_and_gradient():
  x = Tensor(np.ones((200, 50), np.float32), requires_grad=True)
  assert F.dropout(x, 0.3) is x                                  # not training: identity
  with Tensor.train():
    Tensor.manual_seed(7)
    y = F.dropout(x, 0.3)
    y.sum().backward()
  out = y.numpy()
  kept = out != 0
  assert abs(kept.mean() - 0.7) < 0.02
  np.testing.assert_allclose(out[kept], 1 / 0.7, rtol=1e-6)
  np.testing.assert_allclose(x.grad.numpy(), out, rtol=1e-6)   # d(sum)/dx is the same mask and scale
  with Tensor.train(): assert np.all(F.dropout(Tensor.ones(3, 3), 1.0).numpy() == 0)
  for p in (-0.1, 1.5):
    with pytest.raises(ValueError, match="between 0 and 1"): F.dropout(x, p)
    with pytest.raises(ValueError): TF.dropout(torch.ones(2), p)


def test_max_pool_gradient_goes_to_first_maximum_like_torch():
  x = np.maximum(randn(1, 2, 6, 6, seed=36), 0)     # relu output: windows full of tied zeros
  x[0, 0, 0, :2] = 5.0                               # a tie between two maxima in one window
  x[0, 1, 2, 2] = np.inf
  compare(lambda t: F.max_pool2d(t, 3, stride=2, padding=1), x, torch_fn=lambda t: TF.max_pool2d(t, 3, stride=2, padding=1))
  compare(lambda t: F.max_pool2d(t, 2).relu(), x, torch_fn=lambda t: TF.max_pool2d(t, 2).relu())
  # windows that tile the input (a reshape; the gradient written in the input's layout), a row and columns left over
  y = np.maximum(randn(2, 3, 7, 8, seed=37), 0)
  compare(lambda t: F.max_pool2d(t, (2, 3)) * 2, y, torch_fn=lambda t: TF.max_pool2d(t, (2, 3)) * 2)
  compare(lambda t: F.max_pool1d(t, 3), y[0], torch_fn=lambda t: TF.max_pool1d(t, 3))
