"""Programs the differential fuzzer (tests/test_fuzz.py) found giving wrong numbers or crashing, each kept as a named
test on whatever device the suite runs on (DEV=...), checked against numpy."""
from __future__ import annotations
import numpy as np
from minigrad import Tensor


def test_sum_over_a_size_1_axis_of_a_row_sum_adds_each_row_once():
  # the outer sum reduced nothing, but the lowerer gave it the inner sum's loop too: [9, 36] instead of [3, 12]
  b = np.arange(6, dtype=np.float32).reshape(2, 3)
  np.testing.assert_array_equal(Tensor(b).sum(1, keepdim=True).sum(1).numpy(), b.sum(1, keepdims=True).sum(1))


def test_sum_over_a_size_1_axis_of_a_row_max():
  a = np.arange(6, dtype=np.float32).reshape(2, 3, 1)
  np.testing.assert_array_equal(Tensor(a).max(1).sum(1).numpy(), a.max(1).sum(1))


def test_chained_reduces_with_no_output_loop_left():
  # every output dim has size 1: the CPU heuristics for kernels with several reduces indexed a global dim that isn't there
  a = np.random.default_rng(0).random((4, 1, 1), dtype=np.float32)
  got = Tensor(a).sum(1, keepdim=True).sum(1).mean(1, keepdim=True).numpy()
  np.testing.assert_allclose(got, a.sum(1, keepdims=True).sum(1).mean(1, keepdims=True), rtol=1e-6)
  np.testing.assert_allclose(Tensor(a[:1]).sum(1, keepdim=True).sum(1).max().numpy(), a[:1].sum(), rtol=1e-6)


def test_reduce_read_through_a_prefix_view_is_not_a_reshape():
  # v1 (2 rows) is read by the gradient of v0 through its first row only: a contiguous view of fewer elements. The
  # scheduler took that for a reshape of the matmul's reduce and failed to reshape (1, 1, 1, 1) to (1, 2, 1, 1)
  v0 = Tensor(np.full((1, 1, 1, 1), 0.5, np.float32), requires_grad=True)
  v3 = Tensor(np.full((1,), 0.25, np.float32), requires_grad=True)
  v1 = v0.cat(v0, dim=0)
  (v1 + v1 @ v3).sum().backward()
  np.testing.assert_allclose(v0.grad.numpy(), [[[[2 * (2 + 2 * 0.25)]]]], rtol=1e-6)   # (2, 1, 1, 1) + (2, 1, 1): each element added twice
  np.testing.assert_allclose(v3.grad.numpy(), [2 * 2 * 0.5], rtol=1e-6)


def test_pad_keeps_the_dtype_of_an_int_tensor():
  # padding an int32 tensor with 1.5 gave float32; torch pads with int(1.5) and keeps int32
  got = Tensor(np.array([[1, 2]], np.int32)).pad(((0, 0), (1, 1)), value=1.5)
  assert got.dtype.name == "int"
  np.testing.assert_array_equal(got.numpy(), [[1, 1, 2, 1]])


def test_cat_of_empty_tensors_is_differentiable():
  x = Tensor(np.zeros((0, 1), np.float32), requires_grad=True)
  y = x.cat(x, dim=0)
  assert y.requires_grad and y.shape == (0, 1)
  y.sum().backward()
  assert x.grad is not None and x.grad.shape == (0, 1)


def test_a_cast_to_int_has_no_gradient():
  # torch: an int result doesn't require grad; minigrad's did, so a float of it asked for a backward torch refuses
  a = Tensor(np.array([1.5, -2.0], np.float32), requires_grad=True)
  assert not a.int().requires_grad and not a.bool().requires_grad and not a.int().float().requires_grad
  (a * 2 + a.int().float()).sum().backward()
  np.testing.assert_array_equal(a.grad.numpy(), [2.0, 2.0])


def test_a_part_empty_along_the_cat_dim_gets_a_zero_gradient():
  # it added nothing and was left out of the graph, so the input it was shrunk from got no gradient (torch: zeros)
  v0 = Tensor(np.ones((1, 1, 1, 1), np.float32), requires_grad=True)
  v4 = Tensor(np.ones((1, 0, 0, 0), np.float32), requires_grad=True)
  v0.shrink(((0, 0), (0, 0), (0, 0), (0, 0))).cat(v4, dim=0).sum().backward()
  np.testing.assert_array_equal(v0.grad.numpy(), np.zeros((1, 1, 1, 1)))
  a, b = Tensor([[1.0, 2.0]], requires_grad=True), Tensor(np.zeros((0, 2), np.float32), requires_grad=True)
  (a.cat(b) * 3).sum().backward()
  np.testing.assert_array_equal(a.grad.numpy(), [[3.0, 3.0]])
  assert b.grad.shape == (0, 2)


def test_gradient_through_float16_is_within_half_rounding_of_torch():
  # found as a fuzz failure that was the check's, not minigrad's: a float32 gradient that flowed through float16 math
  # differs from torch's by a float16 rounding (1/x and grad * (1/x) each rounded to half), so the fuzzer compares it
  # at float16's tolerance; this keeps that difference bounded
  import torch
  x = np.array(0.52196, np.float32)
  mine = Tensor(x, requires_grad=True)
  (mine.cast("float16").abs() + 1).log().float().sum().backward()
  theirs = torch.tensor(x, requires_grad=True)
  (theirs.half().abs() + 1).log().float().sum().backward()
  np.testing.assert_allclose(mine.grad.numpy(), theirs.grad.numpy(), rtol=2e-3)


def test_a_skipped_1d_empty_part_of_cat_gets_a_zero_gradient():
  # cat skips 1-d empty tensors (torch's legacy rule), which cut their inputs off from backward: no gradient at all for
  # v0 (expanded, then shrunk to nothing) and v5 (divides an empty tensor); torch gives zeros
  v0 = Tensor(np.array(1.5, np.float32), requires_grad=True)
  v4 = Tensor(np.array([2.0], np.float32), requires_grad=True)
  (v0.expand((2,)).shrink(((2, 2),)).cat(v4, dim=0) * 3).sum().backward()
  np.testing.assert_array_equal(v0.grad.numpy(), np.float32(0))
  np.testing.assert_array_equal(v4.grad.numpy(), [3])
  v5 = Tensor(np.array([2.0], np.float32), requires_grad=True)
  empty = Tensor(np.zeros((0,), np.float32), requires_grad=True)
  (empty / (v5.abs() + 1)).cat(empty @ Tensor(np.zeros((0, 1), np.float32)), dim=0).sum().backward()
  np.testing.assert_array_equal(v5.grad.numpy(), [0])


def test_cat_with_an_empty_part_keeps_negative_zero():
  # the empty part's gradient hook added its sum (0.0) to the result, turning -0.0 into 0.0
  part = Tensor(np.zeros((2, 0), np.float32), requires_grad=True)
  out = Tensor(np.array([[-0.0], [1.0]], np.float32)).cat(part, dim=1).numpy()
  assert np.signbit(out[0, 0]) and out[1, 0] == 1


def test_hoisted_reduce_takes_no_reduce_of_an_unopened_loop():
  # the input gradient of a 3-d convolution over a padded and cropped input: upcast lanes give reduces of which some
  # read no global index; one of those was computed before the global loops opened and took along, in the same loop
  # nest, a lane that reads global index 1 ("range (1, 'global') used outside its loop")
  import torch
  from minigrad.tensor.conv import _Convolution
  rng = np.random.default_rng(0)
  x, w = rng.standard_normal((1, 2, 5, 6, 4)).astype(np.float32), rng.standard_normal((2, 2, 3, 2, 2)).astype(np.float32)
  tx = Tensor(x, requires_grad=True)
  _Convolution.apply(tx, Tensor(w), strides=(1, 1, 1), dilations=(1, 1, 1), pads=((0, 2), (-1, 1), (1, 0)), groups=1).sum().backward()
  ref = torch.tensor(x, requires_grad=True)
  padded = torch.nn.functional.pad(ref, (1, 0, -1, 1, 0, 2))   # last dim first; a negative pad crops
  torch.nn.functional.conv3d(padded, torch.tensor(w)).sum().backward()
  np.testing.assert_allclose(tx.grad.numpy(), ref.grad.numpy(), rtol=1e-5, atol=1e-5)
