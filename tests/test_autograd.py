"""Autograd: every differentiable op's gradient vs torch (float32, atol 1e-4) and vs finite differences."""
import numpy as np
import pytest
import torch
from minigrad import Tensor, GlobalCounters, dtypes

rng = np.random.default_rng(1)


def check_grad(fn, *shapes, positive=False, atol=1e-4, rtol=1e-4, data=None):
  """Compare fn's gradients w.r.t. every input (seeded with a random upstream gradient) against torch."""
  arrays = data or [rng.uniform(0.5, 2.0, s).astype(np.float32) if positive else rng.standard_normal(s).astype(np.float32) for s in shapes]
  ours = [Tensor(a, requires_grad=True) for a in arrays]
  theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
  out, ref = fn(*ours), fn(*theirs)
  assert out.shape == tuple(ref.shape)
  upstream = rng.standard_normal(ref.shape).astype(np.float32)
  (out * Tensor(upstream)).sum().backward()
  (ref * torch.tensor(upstream)).sum().backward()
  np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), atol=atol, rtol=rtol)
  for o, t in zip(ours, theirs):
    assert o.grad is not None and o.grad.shape == o.shape
    np.testing.assert_allclose(o.grad.numpy(), t.grad.numpy(), atol=atol, rtol=rtol)


UNARY = {
  "neg": (lambda x: -x, False), "exp": (lambda x: x.exp(), False), "log": (lambda x: x.log(), True),
  "sqrt": (lambda x: x.sqrt(), True), "sin": (lambda x: x.sin(), False), "cos": (lambda x: x.cos(), False),
  "relu": (lambda x: x.relu(), False), "sigmoid": (lambda x: x.sigmoid(), False), "tanh": (lambda x: x.tanh(), False),
  "reciprocal": (lambda x: x.reciprocal(), True), "abs": (lambda x: x.abs(), False),
  "square": (lambda x: x * x, False), "pow3": (lambda x: x ** 3, True), "pow_half": (lambda x: x ** 0.5, True),
  "clip": (lambda x: x.clip(-0.5, 0.5), False), "scalar_ops": (lambda x: (2 - x) / 3 + 1 * x, False),
}


@pytest.mark.parametrize("name", list(UNARY))
def test_unary_grad(name):
  fn, positive = UNARY[name]
  check_grad(fn, (3, 5), positive=positive)


BINARY = {
  "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b, "div": lambda a, b: a / b,
  "maximum": lambda a, b: a.maximum(b), "minimum": lambda a, b: a.minimum(b),
  "where": lambda a, b: (a > b).where(a, b) if isinstance(a, Tensor) else torch.where(a > b, a, b),
  "pow": lambda a, b: a ** b,
}


@pytest.mark.parametrize("name", list(BINARY))
def test_binary_grad_with_broadcast(name):
  check_grad(BINARY[name], (4, 3), (3,), positive=name == "pow")


@pytest.mark.parametrize("axis, keepdim", [(None, False), (0, False), (1, True), ((0, 2), False), (-1, True)])
@pytest.mark.parametrize("op", ["sum", "max", "mean"])
def test_reduce_grad(op, axis, keepdim):
  def reduce(x):
    name = "amax" if op == "max" and not isinstance(x, Tensor) else op   # torch's max(dim) returns indices too
    return getattr(x, name)(axis, keepdim=keepdim) if axis is not None else getattr(x, name)()
  check_grad(reduce, (2, 3, 4))


@pytest.mark.parametrize("fn", [
  lambda x: x.softmax(-1), lambda x: x.log_softmax(1), lambda x: x.softmax(0),
])
def test_softmax_grads(fn):
  check_grad(fn, (4, 6))


def test_matmul_grad():
  check_grad(lambda a, b: a @ b, (5, 7), (7, 3))
  check_grad(lambda a, b: a @ b, (2, 5, 7), (7, 3))
  check_grad(lambda a, b: a @ b, (7,), (7, 3))


MOVEMENT = {
  "reshape": lambda x: x.reshape(6, 4), "permute": lambda x: x.permute(2, 0, 1), "T": lambda x: x.T if isinstance(x, Tensor) else x.permute(2, 1, 0),
  "expand": lambda x: x[:, :1].expand(2, 5, 4), "flip": lambda x: x.flip(1),
  "slice_step": lambda x: x[:, ::2, 1:], "neg_step": lambda x: x[::-1, 1] if isinstance(x, Tensor) else x.flip(0)[:, 1], "unsqueeze": lambda x: x.unsqueeze(1),
  "flatten": lambda x: x.flatten(1),
}


@pytest.mark.parametrize("name", list(MOVEMENT))
def test_movement_grad(name):
  check_grad(MOVEMENT[name], (2, 3, 4))


def test_pad_and_shrink_grad():
  x = rng.standard_normal((3, 4)).astype(np.float32)
  t = Tensor(x, requires_grad=True)
  tt = torch.tensor(x, requires_grad=True)
  (t.pad(((1, 2), (0, 1))).exp() * 2).sum().backward()
  (torch.nn.functional.pad(tt, (0, 1, 1, 2)).exp() * 2).sum().backward()
  np.testing.assert_allclose(t.grad.numpy(), tt.grad.numpy(), rtol=1e-5)
  check_grad(lambda x: x.shrink(((1, 3), (0, 2))) if isinstance(x, Tensor) else x[1:3, 0:2], (3, 4))


def test_max_ties_share_gradient_like_torch_amax():
  data = np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]], np.float32)
  t = Tensor(data, requires_grad=True)
  t.max(1).sum().backward()
  tt = torch.tensor(data, requires_grad=True)
  tt.amax(1).sum().backward()
  np.testing.assert_allclose(t.grad.numpy(), tt.grad.numpy())


def test_relu_at_zero_and_maximum_ties_like_torch():
  data = np.array([-1.0, 0.0, 2.0], np.float32)
  t, tt = Tensor(data, requires_grad=True), torch.tensor(data, requires_grad=True)
  t.relu().sum().backward()
  tt.relu().sum().backward()
  np.testing.assert_array_equal(t.grad.numpy(), tt.grad.numpy())
  a, b = Tensor([1.0, 2.0], requires_grad=True), Tensor([1.0, 3.0], requires_grad=True)
  ta, tb = torch.tensor([1.0, 2.0], requires_grad=True), torch.tensor([1.0, 3.0], requires_grad=True)
  a.maximum(b).sum().backward()
  ta.maximum(tb).sum().backward()
  np.testing.assert_array_equal(a.grad.numpy(), ta.grad.numpy())
  np.testing.assert_array_equal(b.grad.numpy(), tb.grad.numpy())


def test_comparisons_have_no_gradient():
  x = Tensor([1.0, -2.0, 3.0], requires_grad=True)
  ((x > 0).where(x, 0.0) * 3).sum().backward()
  np.testing.assert_array_equal(x.grad.numpy(), [3, 0, 3])


def finite_difference(fn, x, eps=1e-3):
  grad = np.zeros_like(x, dtype=np.float64)
  for idx in np.ndindex(x.shape):
    hi, lo = x.astype(np.float64).copy(), x.astype(np.float64).copy()
    hi[idx] += eps
    lo[idx] -= eps
    grad[idx] = (fn(hi) - fn(lo)) / (2 * eps)
  return grad


@pytest.mark.parametrize("expr", [
  lambda x: (x.exp() * x.sin()).sum(), lambda x: x.softmax(-1).max(), lambda x: (x @ x.T).tanh().mean(),
  lambda x: ((x - x.mean(1, keepdim=True)) ** 2).sum(),
])
def test_finite_differences(expr):
  x = rng.standard_normal((3, 4))
  t = Tensor(x.astype(np.float32), requires_grad=True)
  expr(t).backward()
  numeric = finite_difference(lambda v: expr(Tensor(v, dtype=dtypes.float64)).item(), x)
  np.testing.assert_allclose(t.grad.numpy(), numeric, atol=2e-3, rtol=2e-3)


def test_micrograd_sanity_expressions():
  """micrograd's engine tests: scalar expressions, values and gradients against torch."""
  x = Tensor(-4.0, requires_grad=True)
  z = 2 * x + 2 + x
  q = z.relu() + z * x
  h = (z * z).relu()
  y = h + q + q * x
  y.backward()
  xt = torch.tensor(-4.0, dtype=torch.float32, requires_grad=True)
  zt = 2 * xt + 2 + xt
  qt = zt.relu() + zt * xt
  ht = (zt * zt).relu()
  yt = ht + qt + qt * xt
  yt.backward()
  assert y.item() == pytest.approx(yt.item())
  assert x.grad.item() == pytest.approx(xt.grad.item())

  a, b = Tensor(-4.0, requires_grad=True), Tensor(2.0, requires_grad=True)
  at, bt = torch.tensor(-4.0, requires_grad=True), torch.tensor(2.0, requires_grad=True)
  def more(a, b):
    c = a + b
    d = a * b + b ** 3
    c = c + c + 1
    c = c + 1 + c + (-a)
    d = d + d * 2 + (b + a).relu()
    d = d + 3 * d + (b - a).relu()
    e = c - d
    f = e ** 2
    g = f / 2.0
    return g + 10.0 / f
  g, gt = more(a, b), more(at, bt)
  g.backward()
  gt.backward()
  assert g.item() == pytest.approx(gt.item(), rel=1e-5)
  assert a.grad.item() == pytest.approx(at.grad.item(), rel=1e-4)
  assert b.grad.item() == pytest.approx(bt.grad.item(), rel=1e-4)


def test_grad_accumulates_across_backward_calls():
  x = Tensor([1.0, 2.0, 3.0], requires_grad=True)
  (x * x).sum().backward()
  (x * 3).sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), [2 + 3, 4 + 3, 6 + 3])


def test_gradient_returns_grads_without_touching_grad():
  x, y = Tensor([1.0, 2.0], requires_grad=True), Tensor([3.0, 4.0], requires_grad=True)
  loss = (x * y).sum()
  dx, dy = loss.gradient(x, y)
  np.testing.assert_allclose(dx.numpy(), [3, 4])
  np.testing.assert_allclose(dy.numpy(), [1, 2])
  assert x.grad is None and y.grad is None


def test_no_grad_and_detach():
  x = Tensor([1.0, 2.0], requires_grad=True)
  with Tensor.no_grad():
    y = x * 2
  assert y._ctx is None and not y.requires_grad
  z = (x.detach() * x).sum()
  z.backward()
  np.testing.assert_allclose(x.grad.numpy(), [1, 2])


def test_only_leaves_get_grad():
  x = Tensor([1.0, 2.0], requires_grad=True)
  mid = x * 2
  (mid * mid).sum().backward()
  assert mid.grad is None
  np.testing.assert_allclose(x.grad.numpy(), [8, 16])


def test_backward_kernels_fuse():
  x = Tensor(rng.standard_normal((16, 16)).astype(np.float32), requires_grad=True)
  loss = (x.exp() * 2 + 1).sum()
  loss.backward()
  GlobalCounters.reset()
  x.grad.realize()
  assert GlobalCounters.kernel_count == 1


def test_backward_errors():
  with pytest.raises(RuntimeError, match="only for scalar outputs"):
    (Tensor([1.0, 2.0], requires_grad=True) * 2).backward()
  with pytest.raises(RuntimeError, match="does not require grad"):
    Tensor([1.0]).sum().backward()
  with pytest.raises(RuntimeError, match="gradient has shape"):
    (Tensor([1.0, 2.0], requires_grad=True) * 2).backward(Tensor([1.0]))


def test_requires_grad_in_place_like_torch():
  data = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
  x, tx = Tensor(data).requires_grad_(), torch.tensor(data).requires_grad_()
  assert x.requires_grad is True and x.is_leaf
  (x * x + x).sum().backward()
  (tx * tx + tx).sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-6)
  frozen = Tensor(data).requires_grad_(False)
  assert frozen.requires_grad is False and (frozen * x).sum().requires_grad
  computed = x * 2
  assert computed.requires_grad_(True) is computed   # already flowing from x: allowed, as in torch
  with pytest.raises(RuntimeError, match="detach"): computed.requires_grad_(False)
  with pytest.raises(TypeError, match="bool"): x.requires_grad_(1)
