"""Scheduler: how many kernels a graph becomes (fusion), checked through GlobalCounters, with results vs numpy."""
import numpy as np
import pytest
import torch
from minigrad import Tensor, GlobalCounters
from minigrad.uop.ops import Ops

rng = np.random.default_rng(0)


def fresh(*shape):
  return rng.standard_normal(shape).astype(np.float32)


def count_kernels(*tensors):
  GlobalCounters.reset()
  Tensor.realize(*tensors)
  return GlobalCounters.kernel_count


def test_elementwise_chain_is_one_kernel():
  xn = fresh(64, 64)
  out = (Tensor(xn).relu() * 2 + 1).exp()
  assert count_kernels(out) == 1
  np.testing.assert_allclose(out.numpy(), np.exp(np.maximum(xn, 0) * 2 + 1), rtol=1e-5)


def test_matmul_is_one_kernel():
  an, bn = fresh(16, 32), fresh(32, 8)
  out = Tensor(an) @ Tensor(bn)
  assert count_kernels(out) == 1
  np.testing.assert_allclose(out.numpy(), an @ bn, rtol=1e-5, atol=1e-5)


def test_matmul_relu_bias_is_one_kernel():
  an, bn, biasn = fresh(16, 32), fresh(32, 8), fresh(8)
  out = (Tensor(an) @ Tensor(bn)).relu() + Tensor(biasn)
  assert count_kernels(out) == 1
  np.testing.assert_allclose(out.numpy(), np.maximum(an @ bn, 0) + biasn, rtol=1e-5, atol=1e-5)


def test_transpose_folds_into_indexing():
  xn = fresh(32, 16)
  x = Tensor(xn)
  out = x.T + 1
  items = out.schedule()
  assert len(items) == 1
  assert count_kernels(out) == 1
  np.testing.assert_allclose(out.numpy(), xn.T + 1)


def test_softmax_at_most_three_kernels():
  xn = fresh(8, 32)
  out = Tensor(xn).softmax(-1)
  assert count_kernels(out) <= 3
  e = np.exp(xn - xn.max(-1, keepdims=True))
  np.testing.assert_allclose(out.numpy(), e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)


def test_realized_tensor_is_not_recomputed():
  xn = fresh(32, 32)
  x = Tensor(xn)
  lazy_user = (x + 1) * 3          # built before a is realized
  a = (x + 1)
  a.realize()
  later = a * 2
  assert count_kernels(later) == 1
  ast = later.schedule()[0].ast if later.schedule() else None
  assert ast is None or not any(n.op is Ops.ADD for n in ast.toposort), "realized value recomputed"
  np.testing.assert_allclose(later.numpy(), (xn + 1) * 2, rtol=1e-6)
  # the realize cache also serves graphs built before the realize
  GlobalCounters.reset()
  items = lazy_user.schedule()
  assert len(items) == 1 and not any(n.op is Ops.ADD for n in items[0].ast.toposort)


def test_reduce_with_two_consumers_computed_once():
  xn = fresh(16, 16)
  s = Tensor(xn).sum(1)
  a, b = s + 1, s * 2
  items = a.schedule(b)
  reduce_kernels = [it for it in items if any(n.op is Ops.REDUCE_AXIS for n in it.ast.toposort)]
  assert len(reduce_kernels) == 1
  assert count_kernels(a, b) == 2   # the sum, then one kernel storing both s + 1 and s * 2 (minigrad.schedule.multi_output)
  np.testing.assert_allclose(a.numpy(), xn.sum(1) + 1, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(b.numpy(), xn.sum(1) * 2, rtol=1e-5, atol=1e-5)


def test_reduce_through_elementwise_in_two_outputs_computed_once():
  xn = fresh(16, 16)
  y = Tensor(xn).sum(1) + 1      # the reduce has one consumer, but two kernels would fuse it
  a, b = y * 2, y * 3
  items = a.schedule(b)
  assert sum(any(n.op is Ops.REDUCE_AXIS for n in it.ast.toposort) for it in items) == 1
  Tensor.realize(a, b)
  np.testing.assert_allclose(a.numpy(), (xn.sum(1) + 1) * 2, rtol=1e-5, atol=1e-5)


def test_two_reduces_in_sequence():
  xn = fresh(8, 8)
  out = Tensor(xn).sum(1).max()
  assert count_kernels(out) == 2
  assert out.item() == pytest.approx(xn.sum(1).max(), rel=1e-5)


@pytest.mark.parametrize("target_name, packed", [("avx512", 0), ("avx2", 1)])
@pytest.mark.parametrize("prologue, kernels", [
  (lambda x: (x.abs().sqrt() / 3 + 1).exp() / (x * x + 2), 2),   # ~20 ops per element, read 16 times: its own kernel
  (lambda x: x.relu() * 2, 1),                                   # cheap: recomputing it is cheaper than a buffer
])
def test_expensive_input_of_a_reduce_is_computed_once(prologue, kernels, target_name, packed, monkeypatch):
  # out[n, j] = sum_k f(x)[n, k] * w[j, k]: the reduce reads each f(x) element once per j (16 times). The packing
  # policy reads the CPU Target (tests/cpu_targets.py): with AVX2, w's 16 rows are one panel of two 8-float vectors,
  # copied once for the 64 rows over a short k (see minigrad.schedule.packing); with AVX-512 they make no panel
  from cpu_targets import TARGETS, pin_policy_target
  pin_policy_target(monkeypatch, TARGETS[target_name])
  xn, wn = fresh(64, 32), fresh(16, 32)
  out = (prologue(Tensor(xn)).reshape(64, 1, 32) * Tensor(wn).reshape(1, 16, 32)).sum(-1)
  from minigrad.schedule.packing import PACKED_DEVICES
  assert count_kernels(out) == kernels + (packed if out.device in PACKED_DEVICES else 0)
  torch = pytest.importorskip("torch")
  expected = (prologue(torch.from_numpy(xn)).reshape(64, 1, 32) * torch.from_numpy(wn).reshape(1, 16, 32)).sum(-1)
  np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-5, atol=1e-5)


def test_cat_under_a_matmul_is_computed_once():
  # the gradient of q, k, v split from one projection is a cat of three, read by the projection's weight gradient
  # once per column: each element would take a gated load per part, so the cat gets a kernel of its own
  xn, wn = fresh(64, 32), fresh(32, 16)
  x = Tensor(xn)
  cat = x[:, :8].cat(x[:, 8:16] * 2, x[:, 16:] + 1, dim=1)
  assert count_kernels(cat @ Tensor(wn)) == 2
  np.testing.assert_allclose((cat @ Tensor(wn)).numpy(), np.concatenate([xn[:, :8], xn[:, 8:16] * 2, xn[:, 16:] + 1], 1) @ wn, rtol=1e-5, atol=1e-5)
  padded = x.pad(((0, 0), (2, 0)))[:, :32]   # one padded view: a masked load, fused
  assert count_kernels(padded @ Tensor(wn)) == 1
  np.testing.assert_allclose((padded @ Tensor(wn)).numpy(), np.pad(xn, ((0, 0), (2, 0)))[:, :32] @ wn, rtol=1e-5, atol=1e-5)


def test_reduce_broadcast_back_along_its_axis_fuses_on_cpu():
  xn = fresh(8, 8)
  x = Tensor(xn)
  out = (x - x.mean(1, keepdim=True)).square().sum(1)   # variance-like: the mean is broadcast back along its row
  assert count_kernels(out) == (1 if out.device in ("CPU", "LLVM") else 2)   # CPU: the mean is a side reduce, once per row
  np.testing.assert_allclose(out.numpy(), ((xn - xn.mean(1, keepdims=True)) ** 2).sum(1), rtol=1e-4)


@pytest.mark.parametrize("build, kernels", [
  (lambda x: x / x.sum(), 2),                           # a full reduce would be redone for every row: its own kernel
  (lambda x: x / x.sum(0, keepdim=True), 2),            # along the outer dim: not once per outer loop trip
  (lambda x: x.softmax(-1), 1),                         # row max and row sum inside the output kernel
  (lambda x: x.log_softmax(-1), 1),
  (lambda x: x.sum(1) * x.square().sum(1), 1),          # two row reduces side by side
  (lambda x: (x.softmax(-1) * x).sum(1), 1),            # row max and row sum nested in a reduce
])
def test_side_reduces(build, kernels):
  # positive inputs: a column sum near 0 would turn float32 rounding (the order of the sum differs from torch's)
  # into a large relative error of x / x.sum(0)
  xn = np.abs(fresh(16, 32)) + 0.5
  out = build(Tensor(xn))
  if out.device in ("CPU", "LLVM"): assert count_kernels(out) == kernels
  torch = pytest.importorskip("torch")
  np.testing.assert_allclose(out.numpy(), build(torch.from_numpy(xn)).numpy(), rtol=1e-5, atol=1e-6)


def test_pad_of_elementwise_keeps_zeros():
  xn = fresh(4, 4)
  out = (Tensor(xn) + 1).pad(((1, 1), (2, 0))).exp()
  assert count_kernels(out) == 1
  np.testing.assert_allclose(out.numpy(), np.exp(np.pad(xn + 1, ((1, 1), (2, 0)))), rtol=1e-6)


def test_contiguous_makes_a_kernel_and_a_buffer():
  xn = fresh(8, 4)
  t = Tensor(xn).T.contiguous()
  assert count_kernels(t) == 1
  assert t.uop.base.op is Ops.BUFFER
  np.testing.assert_allclose(t.numpy(), xn.T)


def test_realized_input_is_zero_kernels():
  x = Tensor(fresh(4, 4))
  assert count_kernels(x) == 0
  assert count_kernels(x.reshape(16)) == 0


def test_constant_tensors_realize():
  out = Tensor.ones(3, 4) * 2
  assert count_kernels(out) == 1
  np.testing.assert_array_equal(out.numpy(), np.full((3, 4), 2, np.float32))
  assert Tensor(5.0).item() == 5.0


def test_identical_kernels_compile_once(monkeypatch):
  from minigrad.engine import realize
  monkeypatch.setattr(realize, "compiled_kernels", {})
  for _ in range(3): (Tensor(fresh(7, 5)) * 3 + 2).realize()
  assert len(realize.compiled_kernels) == 1


def test_compiled_kernels_keep_the_most_recently_used(monkeypatch):
  from minigrad.engine import realize
  monkeypatch.setattr(realize, "compiled_kernels", {})
  monkeypatch.setattr(realize, "MAX_COMPILED_KERNELS", 2)
  x = fresh(7, 5)
  programs = [lambda: Tensor(x) * 3 + 2, lambda: Tensor(x) - 1, lambda: Tensor(x).exp()]
  keys = {}
  for i in (0, 1, 0, 2):   # the first used again, then a third kernel: the second goes
    programs[i]().realize()
    keys[i] = list(realize.compiled_kernels)[-1]
  assert len(set(keys.values())) == 3 and list(realize.compiled_kernels) == [keys[0], keys[2]]
  np.testing.assert_allclose(programs[1]().numpy(), x - 1)   # compiled again, still right
  np.testing.assert_allclose(programs[0]().numpy(), x * 3 + 2, rtol=1e-5, atol=1e-6)


def test_deep_elementwise_graph():
  xn = fresh(10)
  acc = Tensor(xn)
  for _ in range(2000): acc = acc + 1
  assert count_kernels(acc) == 1
  np.testing.assert_allclose(acc.numpy(), xn + 2000, rtol=1e-5)


def test_a_reduce_feeding_a_side_reduce_gets_its_own_kernel():
  a, b = fresh(16, 8), fresh(8, 32)
  out = (Tensor(a) @ Tensor(b)).softmax(-1)   # the matmul is read by the row max and sum loops too: not fused into them
  assert count_kernels(out) == (2 if out.device in ("CPU", "LLVM") else 4)   # GPU-shaped: no side reduces (max, sum, divide)
  e = np.exp(a @ b - (a @ b).max(-1, keepdims=True))
  np.testing.assert_allclose(out.numpy(), e / e.sum(-1, keepdims=True), rtol=1e-4, atol=1e-6)


CHAIN_STEPS = [
  lambda x, ax, w: x.softmax(ax),
  lambda x, ax, w: x - x.max(ax, keepdim=True),
  lambda x, ax, w: x / (x.abs().sum(ax, keepdim=True) + 1),
  lambda x, ax, w: x - x.mean(ax, keepdim=True),
  lambda x, ax, w: (x * 0.1).exp(),
  lambda x, ax, w: x @ w,
  lambda x, ax, w: (x * x).sum(ax, keepdim=True) * x,
]


def _numpy_step(i, x, ax, w):
  if i == 0:
    e = np.exp(x - x.max(ax, keepdims=True))
    return e / e.sum(ax, keepdims=True)
  return [None, lambda: x - x.max(ax, keepdims=True), lambda: x / (np.abs(x).sum(ax, keepdims=True) + 1),
          lambda: x - x.mean(ax, keepdims=True), lambda: np.exp(x * 0.1), lambda: x @ w, lambda: (x * x).sum(ax, keepdims=True) * x][i]()


@pytest.mark.parametrize("seed", range(24))
def test_random_chains_of_reduces_and_broadcasts_match_numpy(seed):
  """Whatever the scheduler fuses (side reduces, nested reduces, matmuls), the numbers are numpy's."""
  r = np.random.default_rng(seed)
  xn, wn = r.standard_normal((6, 8)).astype(np.float32), r.standard_normal((8, 8)).astype(np.float32)
  x, expected, w = Tensor(xn), xn.astype(np.float64), Tensor(wn)
  for _ in range(int(r.integers(2, 5))):
    i, ax = int(r.integers(len(CHAIN_STEPS))), int(r.choice([0, 1, -1]))
    x, expected = CHAIN_STEPS[i](x, ax, w), _numpy_step(i, expected, ax, wn.astype(np.float64))
  np.testing.assert_allclose(x.numpy(), expected, rtol=1e-4, atol=1e-4)


def test_attention_softmax_is_not_recomputed_per_head_dim():
  # softmax(q @ k.T) @ v: the softmax under the product with v would be computed once per head dim (64 times per
  # element) if it fused there; it gets its own kernel (row max, row sum and output), then the product
  rng = np.random.default_rng(11)
  q, k, v = (rng.standard_normal((2, 3, 32, 64)).astype(np.float32) for _ in range(3))
  out = Tensor(q).scaled_dot_product_attention(Tensor(k), Tensor(v), is_causal=True)
  product = out.schedule()[-1].ast   # the product with v: its one reduce, no exp (the softmax ran before it)
  assert sum(u.op is Ops.REDUCE_AXIS for u in product.toposort) == 1 and not any(u.op is Ops.EXP2 for u in product.toposort)
  expected = torch.nn.functional.scaled_dot_product_attention(*(torch.from_numpy(a) for a in (q, k, v)), is_causal=True)
  np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-4, atol=1e-5)


def test_cheap_work_redone_per_input_feature_gets_its_own_kernel():
  # a relu's backward under the weight gradient dy.T @ x: (h > 0) * dy would be recomputed once per input feature
  # (784 times per element); realized first, the product reads a plain operand
  rng = np.random.default_rng(12)
  h, dy, x = rng.standard_normal((128, 256)).astype(np.float32), rng.standard_normal((128, 256)).astype(np.float32), rng.standard_normal((128, 784)).astype(np.float32)
  grad = (Tensor(h) > 0).where(Tensor(dy), 0.0).T @ Tensor(x)
  items = grad.schedule()
  elementwise = [i for i in items if not any(u.op is Ops.REDUCE_AXIS for u in i.ast.toposort)
                 and any(u.op is Ops.WHERE for u in i.ast.toposort)]
  assert len(elementwise) == 1
  np.testing.assert_allclose(grad.numpy(), np.where(h > 0, dy, 0).T @ x, rtol=1e-4, atol=1e-3)
  few = (Tensor(h[:, :8]) > 0).where(Tensor(dy[:, :8]), 0.0).T @ Tensor(x[:, :16])   # redone 16 times: stays fused
  assert not any(not any(u.op is Ops.REDUCE_AXIS for u in i.ast.toposort) for i in few.schedule())
