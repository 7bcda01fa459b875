"""TinyJit: captured kernels replayed on new inputs give the eager results (numpy / un-jitted minigrad), carried
state (optimizers, BatchNorm) follows the eager run step for step, and calls that can't be replayed are recorded
again or refused with a clear error.

Input: minigrad.engine.jit.TinyJit on small functions and MLP training steps. Output: pass/fail.
"""
from __future__ import annotations
import numpy as np
import pytest
from minigrad import Device, GlobalCounters, Tensor, TinyJit, dtypes, nn
from minigrad.engine import jit as jit_module, realize
from minigrad.engine.jit import JitError
from minigrad.nn.state import get_parameters, get_state_dict

RNG = np.random.default_rng(0)


def rand(*shape: int) -> np.ndarray: return RNG.standard_normal(shape).astype(np.float32)


class Counted:
  """Wraps a function and counts how often its Python body really runs."""
  def __init__(self, fn):
    self.fn, self.calls = fn, 0
  def __call__(self, *args, **kwargs):
    self.calls += 1
    return self.fn(*args, **kwargs)


# ---------------------------------------------------------------- plain functions

def test_replay_matches_numpy_and_skips_the_python_body():
  body = Counted(lambda x, y: (x * 2 + y).relu().sum(1))
  f = TinyJit(body)
  for _ in range(6):
    xn, yn = rand(4, 8), rand(4, 8)
    np.testing.assert_allclose(f(Tensor(xn), Tensor(yn)).numpy(), np.maximum(xn * 2 + yn, 0).sum(1), rtol=1e-5, atol=1e-6)
  assert body.calls == 2 and len(f.captured) == 1   # two recordings agreed, the other four calls were replays


def test_replay_skips_scheduling_and_codegen(monkeypatch):
  f = TinyJit(lambda x: (x.exp() + 1).sum() * x.max())
  for _ in range(2): f(Tensor(rand(16)))
  kernels = len(f.captured[0].launches)

  def refuse(*args, **kwargs): raise AssertionError("a replay must not schedule or compile")
  monkeypatch.setattr("minigrad.tensor.tensor.create_schedule", refuse)
  monkeypatch.setattr(realize, "get_kernel", refuse)
  xn = rand(16)
  x = Tensor(xn)
  GlobalCounters.reset()
  out = f(x)
  assert GlobalCounters.kernel_count == kernels
  monkeypatch.undo()
  np.testing.assert_allclose(out.numpy(), (np.exp(xn) + 1).sum() * xn.max(), rtol=1e-5)


def test_returned_tensors_are_never_overwritten_by_later_calls():
  f = TinyJit(lambda x: (x + 1, (x * 3).T))
  inputs = [rand(3, 5) for _ in range(6)]
  results = [f(Tensor(xn)) for xn in inputs]
  for xn, (plus, times) in zip(inputs, results):
    np.testing.assert_allclose(plus.numpy(), xn + 1, rtol=1e-6)
    np.testing.assert_allclose(times.numpy(), (xn * 3).T, rtol=1e-6)
    assert times.shape == (5, 3)


def test_result_structures_and_returning_an_argument():
  f = TinyJit(lambda x, y: {"sum": x + y, "pair": [x, None, (y * 2,)]})
  for _ in range(4):
    xn, yn = rand(2, 2), rand(2, 2)
    x, y = Tensor(xn), Tensor(yn)
    out = f(x, y)
    assert set(out) == {"sum", "pair"} and isinstance(out["pair"], list) and out["pair"][1] is None
    assert out["pair"][0] is x   # an argument returned as is comes back as the same tensor, as in an eager call
    np.testing.assert_allclose(out["sum"].numpy(), xn + yn, rtol=1e-6)
    np.testing.assert_allclose(out["pair"][2][0].numpy(), yn * 2, rtol=1e-6)


def test_keyword_and_positional_tensor_arguments():
  f = TinyJit(lambda a, b, *, c: a * 10 + b - c)
  for _ in range(4):
    an, bn, cn = rand(3), rand(3), rand(3)
    np.testing.assert_allclose(f(Tensor(an), b=Tensor(bn), c=Tensor(cn)).numpy(), an * 10 + bn - cn, rtol=1e-5)
  for _ in range(3):   # b positional: another signature, captured on its own, still right
    an, bn, cn = rand(3), rand(3), rand(3)
    np.testing.assert_allclose(f(Tensor(an), Tensor(bn), c=Tensor(cn)).numpy(), an * 10 + bn - cn, rtol=1e-5)


def test_lazy_and_strided_arguments_are_realized_first():
  f = TinyJit(lambda x: x * 2)
  for _ in range(4):
    xn = rand(4, 6)
    np.testing.assert_allclose(f((Tensor(xn) + 1)).numpy(), (xn + 1) * 2, rtol=1e-6)       # lazy
    np.testing.assert_allclose(f(Tensor(xn).T).numpy(), xn.T * 2, rtol=1e-6)               # a view: copied contiguous
    np.testing.assert_allclose(f(Tensor(xn)[:, 1:5]).numpy(), xn[:, 1:5] * 2, rtol=1e-6)


def test_the_same_tensor_twice_is_its_own_signature():
  f = TinyJit(lambda a, b: a * 2 + b)
  for _ in range(3):
    xn = rand(5)
    x = Tensor(xn)
    np.testing.assert_allclose(f(x, x).numpy(), xn * 3, rtol=1e-6)
  for _ in range(3):
    an, bn = rand(5), rand(5)
    np.testing.assert_allclose(f(Tensor(an), Tensor(bn)).numpy(), an * 2 + bn, rtol=1e-6)


def test_changed_non_tensor_argument_is_captured_again():
  body = Counted(lambda x, scale, mode="add": x * scale + 1 if mode == "add" else x * scale - 1)
  f = TinyJit(body)
  xn = rand(4)
  for scale, mode in [(2.0, "add"), (2.0, "add"), (2.0, "add"), (3.0, "add"), (3.0, "add"), (3.0, "add"), (2.0, "sub"), (2.0, "add")]:
    expected = xn * scale + 1 if mode == "add" else xn * scale - 1
    np.testing.assert_allclose(f(Tensor(xn), scale, mode=mode).numpy(), expected, rtol=1e-6)
  assert body.calls == 2 + 2 + 1   # scale 2 and 3 were each recorded twice; ("sub") once; the last call replayed


def test_changed_shape_and_dtype_are_captured_again():
  f = TinyJit(lambda x: (x * 2).sum(0))
  for shape in [(4, 3), (4, 3), (4, 3), (7, 2), (7, 2), (7, 2), (4, 3)]:
    xn = rand(*shape)
    np.testing.assert_allclose(f(Tensor(xn)).numpy(), (xn * 2).sum(0), rtol=1e-5)
  for _ in range(3):
    xi = RNG.integers(-5, 5, (4, 3)).astype(np.int32)
    out = f(Tensor(xi))
    assert out.dtype == (Tensor(xi) * 2).sum(0).dtype and dtypes.is_int(out.dtype)
    np.testing.assert_array_equal(out.numpy(), (xi * 2).sum(0))
  assert len(f.captured) == 3


def test_changed_device_is_another_signature():
  f = TinyJit(lambda x: x + 1)
  x = Tensor(rand(3))
  key = jit_module._signature([("0", x)], [x])
  original = Device.DEFAULT
  try:
    Device.DEFAULT = "PYTHON" if original != "PYTHON" else "CPU"   # the default device is part of the key (graphs built inside use it)
    assert jit_module._signature([("0", x)], [x]) != key
  finally: Device.DEFAULT = original
  assert f(x).device == x.device


def test_jit_off_runs_the_function_every_time(monkeypatch):
  monkeypatch.setattr(jit_module.JIT, "value", 0)
  body = Counted(lambda x: x + 1)
  f = TinyJit(body)
  for _ in range(5): f(Tensor(rand(3)))
  assert body.calls == 5 and not f.captured


def test_method_decorator_and_nested_jits():
  class Model:
    def __init__(self): self.w = Tensor(rand(3, 3))
    @TinyJit
    def __call__(self, x): return inner(x @ self.w)
  inner = TinyJit(lambda y: y.relu() + 1)
  model = Model()
  for _ in range(4):
    xn = rand(2, 3)
    np.testing.assert_allclose(model(Tensor(xn)).numpy(), np.maximum(xn @ model.w.numpy(), 0) + 1, rtol=1e-5, atol=1e-6)
  assert not inner.captured   # called inside the recording of the outer function, it just ran


# ---------------------------------------------------------------- carried state

def _mlp(seed: int, batchnorm: bool = False):
  Tensor.manual_seed(seed)
  layers = [nn.Linear(12, 16), nn.BatchNorm1d(16), nn.Linear(16, 4)] if batchnorm else [nn.Linear(12, 16), nn.Linear(16, 4)]
  def forward(x: Tensor) -> Tensor:
    x = layers[0](x)
    if batchnorm: x = layers[1](x)
    return layers[-1](x.relu())
  return layers, forward


def _train(optimizer_class, jitted: bool, steps: int = 7, batchnorm: bool = False, scheduler: bool = False, **options):
  layers, forward = _mlp(1, batchnorm)
  optimizer = optimizer_class(get_parameters(layers), **options)
  schedule = nn.optim.StepLR(optimizer, step_size=2, gamma=0.5) if scheduler else None
  def step(x: Tensor, y: Tensor) -> Tensor:
    with Tensor.train():
      loss = nn.functional.cross_entropy(forward(x), y)
      optimizer.zero_grad()
      loss.backward()
      optimizer.step()
    return loss
  run = TinyJit(step) if jitted else step
  data = np.random.default_rng(5)
  losses = []
  for _ in range(steps):
    losses.append(run(Tensor(data.standard_normal((8, 12)).astype(np.float32)), Tensor(data.integers(0, 4, 8).astype(np.int32))).item())
    if schedule is not None: schedule.step()
  if jitted: assert len(run.captured) == 1
  return losses, {name: t.numpy() for name, t in get_state_dict(layers).items()}


@pytest.mark.parametrize("optimizer_class, options", [
  (nn.optim.SGD, {"lr": 0.1}),
  (nn.optim.SGD, {"lr": 0.05, "momentum": 0.9, "nesterov": True, "weight_decay": 1e-3}),
  (nn.optim.Adam, {"lr": 1e-2}),
  (nn.optim.AdamW, {"lr": 1e-2, "weight_decay": 0.1}),
], ids=["sgd", "sgd-nesterov", "adam", "adamw"])
def test_jitted_training_steps_match_eager_steps(optimizer_class, options):
  eager_losses, eager_state = _train(optimizer_class, False, **options)
  jit_losses, jit_state = _train(optimizer_class, True, **options)
  np.testing.assert_allclose(jit_losses, eager_losses, rtol=1e-5)
  for name in eager_state: np.testing.assert_allclose(jit_state[name], eager_state[name], rtol=1e-5, atol=1e-6, err_msg=name)
  initial = {name: t.numpy() for name, t in get_state_dict(_mlp(1)[0]).items()}
  assert all(np.abs(jit_state[name] - initial[name]).max() > 1e-4 for name in initial)   # every weight moved


def test_learning_rate_schedule_reaches_the_replays():
  eager_losses, eager_state = _train(nn.optim.Adam, False, scheduler=True, lr=1e-2)
  jit_losses, jit_state = _train(nn.optim.Adam, True, scheduler=True, lr=1e-2)
  np.testing.assert_allclose(jit_losses, eager_losses, rtol=1e-5)
  for name in eager_state: np.testing.assert_allclose(jit_state[name], eager_state[name], rtol=1e-5, atol=1e-6, err_msg=name)


def test_batchnorm_running_stats_follow_the_eager_run():
  eager_losses, eager_state = _train(nn.optim.SGD, False, batchnorm=True, lr=0.1)
  jit_losses, jit_state = _train(nn.optim.SGD, True, batchnorm=True, lr=0.1)
  np.testing.assert_allclose(jit_losses, eager_losses, rtol=1e-5)
  assert {"1.running_mean", "1.running_var", "1.num_batches_tracked"} <= set(jit_state)
  for name in eager_state: np.testing.assert_allclose(jit_state[name], eager_state[name], rtol=1e-5, atol=1e-6, err_msg=name)
  assert jit_state["1.num_batches_tracked"] == 7


def test_carried_tensor_taken_earlier_keeps_its_old_value():
  total = Tensor(np.zeros(3, np.float32))
  @TinyJit
  def accumulate(x: Tensor) -> Tensor:
    total.assign(total + x)
    return total * 1
  running = np.zeros(3, np.float32)
  snapshots = []
  for _ in range(6):
    xn = rand(3)
    snapshots.append((total.detach(), running.copy()))
    running += xn
    np.testing.assert_allclose(accumulate(Tensor(xn)).numpy(), running, rtol=1e-5)
    np.testing.assert_allclose(total.numpy(), running, rtol=1e-5)
  for before, expected in snapshots: np.testing.assert_allclose(before.numpy(), expected, rtol=1e-5, atol=1e-7)


def test_carried_tensor_changed_between_replays_is_read_where_it_is_now():
  counter = Tensor(np.zeros(2, np.float32))
  @TinyJit
  def bump(x: Tensor) -> Tensor:
    counter.assign(counter + 1)
    return counter * x
  for _ in range(3): bump(Tensor(np.ones(2, np.float32)))
  counter.assign(Tensor(np.full(2, 100, np.float32)) * 2)   # a lazy value, from outside
  np.testing.assert_allclose(bump(Tensor(np.ones(2, np.float32))).numpy(), [201, 201])
  counter[0] = 5.0                                          # setitem is an assign too
  np.testing.assert_allclose(bump(Tensor(np.full(2, 2, np.float32))).numpy(), [12, 404])
  np.testing.assert_allclose(counter.numpy(), [6, 202])


def test_setitem_inside_the_function_updates_carried_state():
  history = Tensor(np.zeros(4, np.float32))
  @TinyJit
  def record(x: Tensor) -> Tensor:
    history[1:3] = history[1:3] + x
    return history.sum()
  expected = np.zeros(4, np.float32)
  for _ in range(5):
    xn = rand(2)
    expected[1:3] += xn
    np.testing.assert_allclose(record(Tensor(xn)).item(), expected.sum(), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(history.numpy(), expected, rtol=1e-5, atol=1e-6)


def test_constants_assigned_later_are_seen_by_recording_again():
  weight = Tensor(rand(4, 4))
  predict = Counted(lambda x: x @ weight)
  f = TinyJit(predict)
  for _ in range(4):
    xn = rand(2, 4)
    np.testing.assert_allclose(f(Tensor(xn)).numpy(), xn @ weight.numpy(), rtol=1e-5, atol=1e-6)
  assert predict.calls == 2
  weight.assign(weight * 2 + 1)   # as a training step or load_state_dict would
  for _ in range(4):
    xn = rand(2, 4)
    np.testing.assert_allclose(f(Tensor(xn)).numpy(), xn @ weight.numpy(), rtol=1e-5, atol=1e-6)
  assert predict.calls == 4


def test_eval_function_follows_weights_trained_by_another_jitted_step():
  layers, forward = _mlp(3)
  optimizer = nn.optim.SGD(get_parameters(layers), lr=0.5)
  @TinyJit
  def train_step(x: Tensor, y: Tensor) -> Tensor:
    with Tensor.train():
      loss = nn.functional.cross_entropy(forward(x), y)
      optimizer.zero_grad()
      loss.backward()
      optimizer.step()
    return loss
  evaluate = TinyJit(lambda x: forward(x))
  xn = rand(8, 12)
  for i in range(5):
    train_step(Tensor(rand(8, 12)), Tensor(RNG.integers(0, 4, 8).astype(np.int32)))
    for _ in range(3):
      w0, b0, w1, b1 = (p.numpy() for p in get_parameters(layers))
      expected = np.maximum(xn @ w0.T + b0, 0) @ w1.T + b1
      np.testing.assert_allclose(evaluate(Tensor(xn)).numpy(), expected, rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------- random numbers

def test_dropout_draws_new_numbers_on_each_replay_and_the_eager_ones():
  def masked(x: Tensor) -> Tensor:
    with Tensor.train(): return nn.functional.dropout(x, 0.5)
  x = np.ones((64,), np.float32)
  Tensor.manual_seed(7)
  eager = [masked(Tensor(x)).numpy() for _ in range(6)]
  Tensor.manual_seed(7)
  f = TinyJit(masked)
  jitted = [f(Tensor(x)).numpy() for _ in range(6)]
  assert len(f.captured) == 1
  for a, b in zip(eager, jitted): np.testing.assert_array_equal(a, b)   # the same numbers as the eager calls
  assert len({m.tobytes() for m in jitted}) == 6                          # a different mask every call
  assert all(set(np.unique(m)) <= {0.0, 2.0} for m in jitted)


def test_rand_inside_a_replay_advances_the_generator_like_an_eager_call():
  f = TinyJit(lambda x: x + Tensor.rand(5) + Tensor.randn(5))
  Tensor.manual_seed(11)
  jitted = [f(Tensor(np.zeros(5, np.float32))).numpy() for _ in range(5)]
  after_jit = Tensor.rand(3).numpy()
  Tensor.manual_seed(11)
  eager = [(Tensor.rand(5) + Tensor.randn(5)).numpy() for _ in range(5)]
  np.testing.assert_allclose(jitted, eager, rtol=1e-6)
  np.testing.assert_array_equal(after_jit, Tensor.rand(3).numpy())


# ---------------------------------------------------------------- refusals

def test_python_number_baked_into_kernels_is_refused():
  step = {"count": 0}
  def body(x: Tensor) -> Tensor:
    step["count"] += 1
    return x * step["count"]
  f = TinyJit(body)
  xn = rand(3)
  for i in range(1, 4): np.testing.assert_allclose(f(Tensor(xn)).numpy(), xn * i, rtol=1e-6)
  with pytest.raises(JitError, match="kernel 0 differs"): f(Tensor(xn))


def test_reading_what_the_previous_call_computed_without_assign_is_refused():
  state = {"value": Tensor(np.zeros(3, np.float32))}
  def body(x: Tensor) -> Tensor:
    state["value"] = (state["value"] + x).realize()   # a Python rebinding, invisible to a replay
    return state["value"] * 1
  f = TinyJit(body)
  for _ in range(3): f(Tensor(rand(3)))
  with pytest.raises(JitError, match="computed by the previous call"): f(Tensor(rand(3)))


def test_python_data_that_changes_is_refused():
  step = {"count": 0}
  def body(x: Tensor) -> Tensor:
    step["count"] += 1
    return x + Tensor(np.full(3, step["count"], np.float32))
  f = TinyJit(body)
  for _ in range(3): f(Tensor(rand(3)))
  with pytest.raises(JitError, match="Python data that changes"): f(Tensor(rand(3)))


def test_constant_python_data_inside_is_fine():
  f = TinyJit(lambda x: x * Tensor([1.0, 2.0, 3.0]))
  for _ in range(5):
    xn = rand(3)
    np.testing.assert_allclose(f(Tensor(xn)).numpy(), xn * [1, 2, 3], rtol=1e-6)
  assert len(f.captured) == 1


def test_bad_results_and_arguments_are_clear_errors():
  with pytest.raises(TypeError, match="returned a float"): TinyJit(lambda x: (x, 1.5))(Tensor(rand(2)))
  with pytest.raises(TypeError, match="holding Tensors"): TinyJit(lambda xs: xs[0])([Tensor(rand(2))])
  with pytest.raises(TypeError, match="not hashable"): TinyJit(lambda x, opts: x)(Tensor(rand(2)), {"a": 1})
  with pytest.raises(TypeError, match="wraps a function"): TinyJit(3)
  def assigns_argument(x: Tensor) -> None: x.assign(x + 1)
  f = TinyJit(assigns_argument)
  with pytest.raises(JitError, match="assigns its argument 0"):
    for _ in range(3): f(Tensor(rand(2)))


def test_an_error_inside_the_function_leaves_the_jit_usable():
  def body(x: Tensor, fail: bool) -> Tensor:
    if fail: raise ValueError("boom")
    return x + 1
  f = TinyJit(body)
  with pytest.raises(ValueError, match="boom"): f(Tensor(rand(2)), True)
  assert realize.launch_recorder is None and realize.assign_recorder is None
  for _ in range(4):
    xn = rand(2)
    np.testing.assert_allclose(f(Tensor(xn), False).numpy(), xn + 1, rtol=1e-6)


# ---------------------------------------------------------------- memory of the capture

def test_capture_intermediates_share_memory_and_stay_correct():
  def chain(x: Tensor) -> Tensor:
    for _ in range(6): x = ((x * 1.5).sum(1, keepdim=True) / 8 + x).contiguous()
    return x
  f = TinyJit(chain)
  def expected(xn: np.ndarray) -> np.ndarray:
    for _ in range(6): xn = (xn * 1.5).sum(1, keepdims=True) / 8 + xn
    return xn
  for _ in range(5):
    xn = rand(8, 8)
    np.testing.assert_allclose(f(Tensor(xn)).numpy(), expected(xn), rtol=1e-4, atol=1e-5)
  memory = f.captured[0].memory
  assert memory.planned_bytes < memory.unplanned_bytes and len(memory.blocks) < len(memory.buffers)


def test_replays_reuse_result_buffers_nobody_holds():
  f = TinyJit(lambda x: x * 2)
  for _ in range(3): f(Tensor(rand(1000)))
  fresh = f.captured[0].fresh[0][1]
  for _ in range(10): f(Tensor(rand(1000))).numpy()   # each result dropped at once
  assert len(fresh.generations) <= 2
  kept = [f(Tensor(xn)) for xn in (rand(1000), rand(1000), rand(1000))]
  assert len({id(realize.buffer_of(t.uop.base)) for t in kept}) == 3


def test_carried_tensor_alternates_between_two_buffers_unless_an_old_value_is_held():
  w = Tensor(np.zeros((4, 4), np.float32))
  @TinyJit
  def step(x: Tensor) -> Tensor:
    w.assign(w + x)
    return w.sum()
  value = np.zeros((4, 4), np.float32)
  held = []
  for i in range(12):
    if i >= 6 and i % 2 == 0:   # lazy graphs and views of the value before the call, built and not realized
      held.append(([w * 1, w.reshape(16), w.T, w[1:3], w.detach()], value.copy()))
    xn = rand(4, 4)
    value += xn
    np.testing.assert_allclose(step(Tensor(xn)).numpy(), value.sum(), rtol=1e-5)
    np.testing.assert_allclose(w.numpy(), value, rtol=1e-5)
    if i == 5: assert all(len(fresh.generations) <= 2 for _, fresh in step.captured[0].fresh)   # nothing held: two buffers take turns
  for graphs, expected in held:   # each kept the value it was built on, though the slot's buffers were reused meanwhile
    np.testing.assert_allclose(graphs[0].numpy(), expected, rtol=1e-5)
    np.testing.assert_allclose(graphs[1].numpy(), expected.reshape(16), rtol=1e-5)
    np.testing.assert_allclose(graphs[2].numpy(), expected.T, rtol=1e-5)
    np.testing.assert_allclose(graphs[3].numpy(), expected[1:3], rtol=1e-5)
    np.testing.assert_allclose(graphs[4].numpy(), expected, rtol=1e-5)


def test_carried_tensors_that_shared_memory_at_capture_and_no_longer_do():
  a, b = Tensor(np.ones(3, np.float32)), Tensor(np.ones(3, np.float32))
  @TinyJit
  def mix(x: Tensor) -> Tensor:
    new = (a * 2 + b + x).realize()
    a.assign(new)
    b.assign(new)   # both hold the same buffer after each call: the capture reads it once
    return new * 1
  expected_a = expected_b = np.ones(3, np.float32)
  for i in range(6):
    if i == 4: b.assign(Tensor(np.full(3, 10, np.float32)))   # now they differ
    if i == 4: expected_b = np.full(3, 10, np.float32)
    xn = rand(3)
    expected_a = expected_b = expected_a * 2 + expected_b + xn
    np.testing.assert_allclose(mix(Tensor(xn)).numpy(), expected_a, rtol=1e-5)
  np.testing.assert_allclose(b.numpy(), expected_b, rtol=1e-5)


def test_a_carried_tensor_first_made_by_a_later_call_is_not_missed():
  holder: dict[str, Tensor] = {}
  calls = {"n": 0}
  def body(x: Tensor) -> Tensor:
    calls["n"] += 1
    y = (x * 2).realize()
    if calls["n"] == 2: holder["last"] = Tensor.zeros(3)
    if "last" in holder: holder["last"].assign(y)   # write-only state, first made by the second call
    return y
  f = TinyJit(body)
  for _ in range(7):
    xn = rand(3)
    np.testing.assert_allclose(f(Tensor(xn)).numpy(), xn * 2, rtol=1e-6)
    if calls["n"] >= 2: np.testing.assert_allclose(holder["last"].numpy(), xn * 2, rtol=1e-6)


def test_namedtuple_results():
  from collections import namedtuple
  Pair = namedtuple("Pair", "total scaled")
  f = TinyJit(lambda x: Pair(x.sum(), x * 3))
  for _ in range(4):
    xn = rand(4)
    out = f(Tensor(xn))
    assert isinstance(out, Pair)
    np.testing.assert_allclose(out.total.numpy(), xn.sum(), rtol=1e-5)
    np.testing.assert_allclose(out.scaled.numpy(), xn * 3, rtol=1e-6)
