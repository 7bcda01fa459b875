"""The eager fast path (minigrad/engine/eager.py): a structure realized before runs from its recorded plan. Each call
must give the new data's answer, keep every result someone can still see, and never let shared scratch memory
overwrite one; checked against numpy on the device under test."""
import numpy as np
import pytest
from minigrad import Tensor
from minigrad.engine import eager
from minigrad.schedule import reuse


@pytest.fixture(autouse=True)
def fresh_recipes(monkeypatch):
  monkeypatch.setattr(reuse, "recipes", {})


def data(*shape, seed=0):
  return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def fast_runs() -> int:
  """How many calls took the fast path: each ran from a RunPlan kept in its recipe."""
  return sum(r.uses[0] for r in reuse.recipes.values() if isinstance(r.run[0], eager._Kernels) and r.run[0].plans)


def test_new_data_gives_new_answers():
  for seed in range(5):
    a, b = data(8, 16, seed=seed), data(16, 4, seed=seed + 10)
    out = ((Tensor(a) * 2 + 1).relu() @ Tensor(b)).exp().sum(1).realize()
    np.testing.assert_allclose(out.numpy(), np.exp(np.maximum(a * 2 + 1, 0) @ b).sum(1), rtol=1e-5)
  assert all(r.uses[0] >= 3 for r in reuse.recipes.values() if r.items), [r.uses[0] for r in reuse.recipes.values()]
  # CPU kernels take the fast path from the third call on; other devices launch kernels their own way
  assert fast_runs() >= 3 or Tensor(0).device != "CPU", {id(r): r.run[0] for r in reuse.recipes.values()}


def test_an_intermediate_the_caller_holds_keeps_its_value():
  # `product` is a kernel's output; held in some calls (it must be kept), dropped in others (its memory is shared
  # scratch): every held one must keep its own values to the end
  held = []
  for seed in range(6):
    a, b = data(32, 32, seed=seed), data(32, 32, seed=seed + 20)
    product = Tensor(a) @ Tensor(b)
    total = (product.relu() * 0.1).sum(0).exp().realize()
    np.testing.assert_allclose(total.numpy(), np.exp((np.maximum(a @ b, 0) * 0.1).sum(0)), rtol=1e-4)
    if seed % 2 == 0: held.append((product, a @ b))
    del product
  assert fast_runs() >= 3 or Tensor(0).device != "CPU"
  for product, expected in held: np.testing.assert_allclose(product.numpy(), expected, rtol=1e-4, atol=1e-4)


def test_several_targets_and_a_target_that_is_an_input():
  for seed in range(4):
    a = Tensor(data(64, seed=seed)).realize()
    s, m = (a * 2).sum(), (a - 1).max()
    Tensor.realize(s, m, a)
    np.testing.assert_allclose([s.item(), m.item()], [(data(64, seed=seed) * 2).sum(), (data(64, seed=seed) - 1).max()], rtol=1e-5)


def test_a_training_step_updates_in_place_every_call():
  w = Tensor(data(16, 8), requires_grad=True)
  expected = data(16, 8)
  for seed in range(5):
    x = data(4, 16, seed=seed + 1)
    loss = (Tensor(x) @ w).square().mean()
    w.grad = None
    loss.backward()
    grad = w.grad.numpy()
    np.testing.assert_allclose(grad, 2 * x.T @ (x @ expected) / (4 * 8), rtol=1e-4, atol=1e-6)
    w.assign(w - w.grad * 0.1).realize()
    expected = expected - grad * 0.1
    np.testing.assert_allclose(w.numpy(), expected, rtol=1e-5, atol=1e-6)
