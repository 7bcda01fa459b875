"""Eager reuse: a graph of a structure seen before gets the first schedule on its own buffers
(minigrad/schedule/reuse.py), and keyed Composite functions copy a graph built once (minigrad/tensor/function.py). The
answers must be the new data's, every time: checked against numpy and torch on the device under test."""
import gc
import weakref
import numpy as np
import pytest
import torch
from minigrad import Tensor, nn
from minigrad.helpers import DEBUG, GlobalCounters
from minigrad.nn.state import get_parameters
from minigrad.schedule import reuse
import minigrad.tensor.function as F


@pytest.fixture(autouse=True)
def fresh_recipes(monkeypatch):
  monkeypatch.setattr(reuse, "recipes", {})


def data(*shape, seed=0):
  return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def uses() -> list[int]: return [r.uses[0] for r in reuse.recipes.values()]


def test_a_structure_seen_again_gets_its_schedule_on_the_new_data():
  def program(a, b): return ((a * 2 + b[0]).relu() @ b.T).sum(1)
  for seed in range(3):
    a, b = data(8, 16, seed=seed), data(4, 16, seed=seed + 10)
    expected = program(torch.tensor(a), torch.tensor(b)).numpy()
    np.testing.assert_allclose(program(Tensor(a), Tensor(b)).numpy(), expected, rtol=1e-5, atol=1e-5)
  # one structure for the product, one for .numpy()'s copy-free read of it: each scheduled once, reused twice
  assert uses() and all(n == 2 for n in uses()), uses()


def test_which_inputs_are_the_same_tensor_is_part_of_the_structure():
  a, b = Tensor(data(16)), Tensor(data(16, seed=1))
  np.testing.assert_allclose((a + a).numpy(), data(16) * 2)
  np.testing.assert_allclose((a + b).numpy(), data(16) + data(16, seed=1))
  np.testing.assert_allclose((b + b).numpy(), data(16, seed=1) * 2)


def test_constants_are_part_of_the_structure():
  x = data(32)
  for k in (2.0, 3.0, -0.0, 2.0):
    np.testing.assert_array_equal((Tensor(x) * k).numpy(), x * np.float32(k))


def test_a_realized_intermediate_is_read_not_recomputed():
  """y = exp(x) is computed with its sum; a later graph over y reads y's buffer: one kernel, each time."""
  counts = []
  for seed in range(3):
    x = data(64, seed=seed)
    y = Tensor(x).exp()
    total = y.sum()
    total.realize()
    GlobalCounters.reset()
    np.testing.assert_allclose((y * 2).numpy(), np.exp(x) * 2, rtol=1e-6)
    counts.append(GlobalCounters.kernel_count)
    np.testing.assert_allclose(total.item(), np.exp(x).sum(), rtol=1e-5)
  assert counts[0] == counts[1] == counts[2] == 1, counts


def test_a_plain_training_loop_matches_torch_with_a_learning_rate_change():
  """Adam steps in a plain loop (each step's schedule reused), the learning rate changed between steps: the
  weights follow torch's."""
  rng = np.random.default_rng(0)
  w1, w2 = rng.standard_normal((16, 8)).astype(np.float32) * 0.3, rng.standard_normal((3, 16)).astype(np.float32) * 0.3
  layers = [nn.Linear(8, 16, bias=False), nn.Linear(16, 3, bias=False)]
  layers[0].weight, layers[1].weight = Tensor(w1, requires_grad=True), Tensor(w2, requires_grad=True)
  opt = nn.optim.Adam(get_parameters(layers), lr=0.01)
  tw1, tw2 = torch.tensor(w1, requires_grad=True), torch.tensor(w2, requires_grad=True)
  topt = torch.optim.Adam([tw1, tw2], lr=0.01)
  for step in range(5):
    x, y = rng.standard_normal((4, 8)).astype(np.float32), rng.integers(0, 3, 4)
    if step == 3: opt.lr, topt.param_groups[0]["lr"] = 0.05, 0.05
    with Tensor.train():
      loss = nn.functional.cross_entropy(layers[1](layers[0](Tensor(x)).relu()), Tensor(y.astype(np.int32)))
      opt.zero_grad()
      loss.backward()
      opt.step()
    tloss = torch.nn.functional.cross_entropy(torch.relu(torch.tensor(x) @ tw1.T) @ tw2.T, torch.tensor(y))
    topt.zero_grad()
    tloss.backward()
    topt.step()
    np.testing.assert_allclose(loss.item(), tloss.item(), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(layers[0].weight.numpy(), tw1.detach().numpy(), rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(layers[1].weight.numpy(), tw2.detach().numpy(), rtol=1e-4, atol=1e-5)
  assert max(uses()) >= 3, uses()


def test_a_kept_schedule_keeps_no_buffer_alive():
  a = Tensor(data(256))
  (a + 1).numpy()
  (Tensor(data(256, seed=1)) + 1).numpy()   # reused
  node = weakref.ref(a.uop.base)
  del a
  gc.collect()
  assert node() is None


def test_debug_2_says_when_a_structure_was_reused(capsys, monkeypatch):
  monkeypatch.setattr(DEBUG, "value", 2)
  for seed in range(2): (Tensor(data(8, seed=seed)) * 3).realize()
  assert "reused a structure" in capsys.readouterr().out


def test_a_keyed_composite_copies_its_graph_onto_any_input_view():
  """The graph built on a stand-in is rebuilt over the input, movement ops included: a transposed or broadcast
  input, and another shape, give their own answers."""
  def forward(t): return (t.T.reshape(-1) * 2).exp()
  def apply(t): return F.Composite.apply(t, fn=forward, gradient=lambda grad, y, x: (None,), key=forward)
  x = data(3, 4)
  for value, tensor in [(x, Tensor(x)), (x.T, Tensor(x).T), (np.broadcast_to(x[:1], (3, 4)), Tensor(x[:1]).expand(3, 4)),
                        (data(5, 2), Tensor(data(5, 2)))]:
    np.testing.assert_allclose(apply(tensor).numpy(), np.exp(value.T.reshape(-1) * 2), rtol=1e-6)
  assert sum(key[0] is forward for key in F.templates) == 3   # inputs of shape (3, 4), (4, 3) and (5, 2)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_primitives_built_from_templates_match_torch(dtype):
  x = np.linspace(-20, 20, 257).astype(dtype)
  for name in ("exp", "log", "sin", "tanh", "sigmoid"):
    arg = np.abs(x) + 0.5 if name == "log" else x
    for _ in range(2):   # the second time from the template
      got = getattr(Tensor(arg), name)().numpy().astype(np.float64)
      expected = getattr(torch.tensor(arg).float(), name)().to(getattr(torch, dtype)).double().numpy()
      np.testing.assert_allclose(got, expected, rtol=2e-3 if dtype == "float16" else 2e-6, atol=1e-7, err_msg=name)


def test_a_schedule_run_again_is_one_batch_on_the_new_buffers(monkeypatch):
  # minigrad/engine/batched.py: from the second run on, the kernels of a schedule run as one thread-pool call; each
  # run must read its own inputs and write its own outputs (a stale address would give the last step's numbers)
  from minigrad.engine import batched
  monkeypatch.setattr(batched, "batches", {})
  def program(a, b): return (((a @ b).relu() + 1).sum(1), (a * b[0]).exp().sum(0))
  runs = []
  for seed in range(4):
    a, b = data(16, 24, seed=seed), data(24, 24, seed=seed + 7)
    GlobalCounters.reset()
    got = Tensor.realize(*program(Tensor(a), Tensor(b)))
    runs.append(GlobalCounters.kernel_count)
    for mine, expected in zip(program(Tensor(a), Tensor(b)), program(torch.tensor(a), torch.tensor(b))):
      np.testing.assert_allclose(mine.numpy(), expected.numpy(), rtol=1e-5, atol=1e-5)
  assert runs[0] >= 2 and len(set(runs)) == 1, runs   # every kernel ran (and was counted) every time
  kept = [b for b in batched.batches.values() if b is not None]
  assert kept or Tensor(0).device != "CPU", batched.batches   # CPU kernels are batched; other devices launch one by one


def test_a_batched_schedule_on_buffers_of_another_size_runs_kernel_by_kernel(monkeypatch):
  from minigrad.engine import batched
  monkeypatch.setattr(batched, "batches", {})
  def program(t):
    outs = (t * 3, (t + 1).max())
    Tensor.realize(*outs)
    return outs
  for seed in range(2):
    GlobalCounters.reset()
    program(Tensor(data(64, seed=seed)))
    assert GlobalCounters.kernel_count >= 2   # a schedule of several kernels: batched from its second run
  big = data(80, seed=2)
  scaled, top = program(Tensor(big).shrink(((0, 64),)))   # the same kernel ASTs over a larger buffer
  np.testing.assert_allclose(scaled.numpy(), big[:64] * 3, rtol=1e-6)
  np.testing.assert_allclose(top.numpy(), big[:64].max() + 1, rtol=1e-6)


def test_a_batched_schedule_keeps_its_kernels_recently_used(monkeypatch):
  # a batch launches its kernels without get_kernel: it must still mark them used, or a process that compiles many
  # other kernels meanwhile evicts them (and the batch falls back to compiling kernel by kernel)
  from minigrad.engine import batched, realize
  monkeypatch.setattr(batched, "batches", {})
  def program(t):
    outs = (t * 3, (t + 1).max())
    Tensor.realize(*outs)
    return outs
  for seed in range(2): program(Tensor(data(64, seed=seed)))
  batch = next((b for b in batched.batches.values() if b is not None), None)
  if batch is None: pytest.skip(f"{Tensor(0).device} launches kernel by kernel (only the CPU thread pool batches)")
  for shift in (2.0, 5.0): (Tensor(data(48, seed=9)) - shift).realize()   # other kernels, used after the batch's
  assert list(realize.compiled_kernels)[-1] not in batch.keys
  x = data(64, seed=5)
  scaled, top = program(Tensor(x))
  np.testing.assert_allclose(scaled.numpy(), x * 3, rtol=1e-6)
  np.testing.assert_allclose(top.numpy(), x.max() + 1, rtol=1e-6)
  assert list(realize.compiled_kernels)[-len(batch.keys):] == list(batch.keys)


def test_a_templated_op_is_one_node_until_it_is_scheduled():
  # exp's graph (dozens of nodes) is a CALL of its template until the scheduler copies it in: a graph replayed is
  # keyed and walked without those nodes, and every result is still exact
  from minigrad.uop.ops import Ops
  x = data(8, 16, seed=3)
  for _ in range(3):   # the first time copied in by the scheduler, then replayed
    y = Tensor(x).softmax(-1)
    calls = [n for n in y.uop.toposort if n.op is Ops.CALL]
    assert len(calls) == 1 and len(y.uop.toposort) < 20, y.uop
    np.testing.assert_allclose(y.numpy(), torch.tensor(x).softmax(-1).numpy(), rtol=1e-6, atol=1e-7)
  # a CALL's output realized alone is kept for the graphs built on it, and both outputs of a template with two
  # (Adam's update of a parameter and its moments) come from one copy
  t = Tensor(x)
  e = t.exp()
  e.realize()
  assert e.uop.base.op is Ops.BUFFER
  np.testing.assert_allclose((e * 2).numpy(), np.exp(x) * 2, rtol=1e-6)
  w = Tensor(x, requires_grad=True)
  optimizer = nn.optim.Adam([w], lr=0.1)
  (w * w).sum().backward()
  optimizer.step()
  reference = torch.tensor(x, requires_grad=True)
  torch_optimizer = torch.optim.Adam([reference], lr=0.1)
  (reference * reference).sum().backward()
  torch_optimizer.step()
  np.testing.assert_allclose(w.numpy(), reference.detach().numpy(), rtol=1e-5, atol=2e-6)   # Adam's rounding differs
  np.testing.assert_allclose(optimizer.exp_avg[0].numpy(), torch_optimizer.state[reference]["exp_avg"].numpy(), rtol=1e-6)


def test_a_step_does_not_recompute_the_forward_for_its_loss():
  # a matmul's output is a view of the reduce its template stores; realizing the training step must leave it
  # realized for the loss's own realize (as a plain `loss.item()` after `optimizer.step()` does), not recompute it
  from minigrad.schedule import scheduler
  from minigrad.uop.ops import Ops
  x, w = Tensor(data(16, 32, seed=1)), Tensor(data(32, 8, seed=2), requires_grad=True)
  optimizer = nn.optim.SGD([w], lr=0.1)
  logits = x @ w
  loss = logits.relu().sum()
  loss.backward()
  optimizer.step()
  assert logits.uop.op is Ops.CALL and logits.uop in scheduler.realized
  GlobalCounters.reset()
  expected = np.maximum(data(16, 32, seed=1) @ data(32, 8, seed=2), 0).sum()
  np.testing.assert_allclose(loss.numpy(), expected, rtol=1e-5)
  assert GlobalCounters.kernel_count == 1   # the sum of the stored product, nothing more
