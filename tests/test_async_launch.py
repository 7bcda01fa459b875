"""Launches that don't wait (minigrad/engine/eager.py, minigrad/runtime/cpu_pool.py): a structure realized before
starts its kernels on the CPU thread pool and realize returns while they run. Whatever the host does next (read a
result, write a buffer, change a numpy array it shared, drop tensors, fork, exit, use another thread) must see the
values a waiting launch would give; checked against numpy and against LAUNCH_BLOCKING=1."""
import os
import subprocess
import sys
import threading
import numpy as np
import pytest
from minigrad import Tensor, TinyJit, nn
from minigrad.engine import eager
from minigrad.engine.realize import buffer_of
from minigrad.helpers import LAUNCH_BLOCKING, cpu_threads
from minigrad.nn.state import get_parameters
from minigrad.runtime import cpu_pool

host_memory = Tensor(0).device in ("CPU", "LLVM")   # devices whose buffers are host memory (Tensor.from_numpy shares)
pool_device = host_memory and cpu_threads() > 1
needs_pool = pytest.mark.skipif(not pool_device, reason="launches wait unless the CPU thread pool has workers")
needs_host_memory = pytest.mark.skipif(not host_memory, reason="Tensor.from_numpy shares host memory on CPU and LLVM only")


def data(*shape, seed=0):
  return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def heavy(x: Tensor, w: Tensor) -> Tensor:
  """Some milliseconds of kernels, so the host's next steps come while they still run."""
  return ((x @ w).relu() @ w).tanh()


def expected(x: np.ndarray, w: np.ndarray) -> np.ndarray: return np.tanh(np.maximum(x @ w, 0) @ w)


@needs_host_memory
def test_a_shared_numpy_array_may_change_once_realize_returns():
  w = Tensor(data(384, 384, seed=1) * 0.05).realize()
  for step in range(5):
    x = data(384, 384, seed=step)
    want = expected(x, w.numpy())
    out = heavy(Tensor.from_numpy(x), w).realize()
    if step >= 2 and pool_device:   # the kernels still run, on a copy of x: not on the array the user holds
      assert cpu_pool.in_flight_addresses and x.__array_interface__["data"][0] not in cpu_pool.in_flight_addresses
    x[:] = 1e6
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-5)


@needs_pool
def test_large_shared_arrays_make_the_call_wait(monkeypatch):
  monkeypatch.setattr(eager, "ASYNC_COPY_MAX_BYTES", 1024)
  w = Tensor(data(128, 128, seed=1) * 0.05).realize()
  for step in range(4):
    x = data(128, 128, seed=step)
    out = heavy(Tensor.from_numpy(x), w).realize()
    assert cpu_pool.in_flight_addresses == frozenset()
    np.testing.assert_allclose(out.numpy(), expected(x, w.numpy()), rtol=1e-4, atol=1e-5)


def test_writing_a_buffer_waits_for_the_kernels_that_read_it():
  w = Tensor(data(384, 384, seed=1) * 0.05).realize()
  x = Tensor(data(384, 384, seed=2)).realize()
  for step in range(5):
    before = x.numpy()
    out = heavy(x, w).realize()
    if step >= 2 and pool_device: assert buffer_of(x.uop.base).opaque is not None
    buffer_of(x.uop.base).copyin(data(384, 384, seed=10 + step))   # as an optimizer's new learning rate is written
    np.testing.assert_allclose(out.numpy(), expected(before, w.numpy()), rtol=1e-4, atol=1e-5)


@needs_pool
def test_launch_blocking_waits(monkeypatch):
  monkeypatch.setattr(LAUNCH_BLOCKING, "value", 1)
  w = Tensor(data(64, 64, seed=1)).realize()
  for step in range(4):
    heavy(Tensor(data(64, 64, seed=step)), w).realize()
    assert cpu_pool.in_flight_addresses == frozenset()


@needs_pool
def test_kernels_in_flight_after_the_third_call_unless_they_are_tiny():
  w = Tensor(data(128, 128, seed=1)).realize()
  in_flight, tiny_in_flight = [], []
  for step in range(4):
    heavy(Tensor(data(128, 128, seed=step)), w).realize()
    in_flight.append(bool(cpu_pool.in_flight_addresses))
    (Tensor(data(8, 8, seed=step)) + 1).realize()   # less work than handing it over costs: waited for
    tiny_in_flight.append(bool(cpu_pool.in_flight_addresses))
  assert in_flight[2:] == [True, True] and not any(tiny_in_flight), (in_flight, tiny_in_flight)


@needs_host_memory
def test_a_tinyjit_replay_runs_on_and_copies_shared_arguments():
  w = Tensor(data(384, 384, seed=1) * 0.05).realize()
  step = TinyJit(lambda x: heavy(x, w))
  for call in range(5):
    x = data(384, 384, seed=call)
    want = expected(x, w.numpy())
    out = step(Tensor.from_numpy(x))
    if call >= 3 and pool_device:   # replays: the kernels still run, on a copy of x
      assert cpu_pool.in_flight_addresses and x.__array_interface__["data"][0] not in cpu_pool.in_flight_addresses
    x[:] = 1e6
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-5)


def train(steps: int, blocking: bool, jit: bool = False) -> list[np.ndarray]:
  """An MLP trained in a plain loop (or under TinyJit), with the learning rate changed (written into its buffer) on
  the way."""
  LAUNCH_BLOCKING.value = int(blocking)
  try:
    Tensor.manual_seed(0)
    layers = [nn.Linear(32, 64), nn.Linear(64, 10)]
    optimizer = nn.optim.Adam(get_parameters(layers), lr=1e-2)
    def one_step(x: Tensor, y: Tensor) -> Tensor:
      with Tensor.train():
        loss = nn.functional.cross_entropy(layers[1](layers[0](x).relu()), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
      return loss
    run = TinyJit(one_step) if jit else one_step
    losses = []
    for step in range(steps):
      x = data(16, 32, seed=step)
      losses.append(run(Tensor.from_numpy(x) if host_memory else Tensor(x), Tensor(np.arange(16, dtype=np.int32) % 10)))
      if step == steps // 2: optimizer.lr = 3e-3
    return [l.numpy() for l in losses] + [p.numpy() for p in get_parameters(layers)]
  finally: LAUNCH_BLOCKING.value = 0


@pytest.mark.parametrize("jit", [False, True])
def test_a_training_loop_gives_the_same_bits_as_waiting_launches(jit):
  for got, want in zip(train(8, False, jit), train(8, True, jit)): np.testing.assert_array_equal(got, want)


def test_threads_each_get_their_own_answers():
  w = Tensor(data(128, 128, seed=1) * 0.1).realize()
  errors: list[BaseException] = []

  def loop(seed: int) -> None:
    try:
      for step in range(6):
        x = data(128, 128, seed=seed * 100 + step)
        out = heavy(Tensor(x), w).realize()
        np.testing.assert_allclose(out.numpy(), expected(x, w.numpy()), rtol=1e-4, atol=1e-5)
    except BaseException as error: errors.append(error)

  threads = [threading.Thread(target=loop, args=(seed,)) for seed in range(3)]
  for t in threads: t.start()
  for t in threads: t.join()
  assert not errors, errors


SCRIPT = """
import os, sys, numpy as np
from minigrad import Tensor
w = Tensor(np.full((512, 512), 0.01, np.float32)).realize()
for step in range(4): out = ((Tensor(np.ones((512, 512), np.float32)) @ w).relu() @ w).sqrt().realize()
if sys.argv[1] == "fork":
  pid = os.fork()
  if pid == 0:
    x, w32 = np.ones((512, 512), np.float32), np.full((512, 512), 0.01, np.float32)
    ok = np.allclose(out.numpy(), np.sqrt(np.maximum(x @ w32, 0) @ w32), rtol=1e-4)
    two = (Tensor(np.ones((64, 64), np.float32)) * 2).sum().item()
    os._exit(0 if ok and two == 64 * 64 * 2 else 3)
  _, status = os.waitpid(pid, 0)
  sys.exit(os.waitstatus_to_exitcode(status))
"""


@pytest.mark.parametrize("how", ["exit", "fork"])
def test_exit_and_fork_with_kernels_in_flight(how):
  done = subprocess.run([sys.executable, "-c", SCRIPT, how], capture_output=True, text=True, timeout=120,
                        env={**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.abspath(__file__)))})
  assert done.returncode == 0, done.stderr[-2000:]
