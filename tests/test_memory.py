"""Memory planning: intermediates with disjoint lifetimes share memory, nothing still needed is ever shared, and
results stay equal to numpy.

Input: minigrad.engine.memory.plan_memory on synthetic launch lists, and realize() on tensor chains and random
graphs. Output: pass/fail.
"""
from __future__ import annotations
import numpy as np
import pytest
from minigrad import Tensor, dtypes
from minigrad.engine import realize
from minigrad.engine.memory import PooledBuffer, plan_memory
from minigrad.engine.realize import buffer_of, run_schedule
from minigrad.schedule.scheduler import create_schedule

F32 = dtypes.float32


def lifetimes(launches, keys):
  spans = {}
  for i, launch in enumerate(launches):
    for key in launch:
      if key in keys: spans[key] = (spans.get(key, (i, i))[0], i)
  return spans


def assert_no_overlap(plan, launches, intermediates):
  """Two intermediates in one block never live at the same time (touching launches count as overlapping)."""
  spans = lifetimes(launches, intermediates)
  by_block: dict[int, list] = {}
  for key, buf in plan.buffers.items():
    assert buf.nbytes <= buf.block.nbytes and buf.device == intermediates[key][0]
    by_block.setdefault(id(buf.block), []).append(key)
  for members in by_block.values():
    for i, a in enumerate(members):
      for b in members[i + 1:]:
        (sa, ea), (sb, eb) = spans[a], spans[b]
        assert ea < sb or eb < sa, f"{a} {spans[a]} and {b} {spans[b]} share memory while both alive"


# ---------------------------------------------------------------- the planner

def test_chain_alternates_between_two_blocks():
  launches = [("a", "x"), ("b", "a"), ("c", "b"), ("d", "c"), ("out", "d")]
  intermediates = {k: ("CPU", 100, F32) for k in "abcd"}
  plan = plan_memory(launches, intermediates)
  assert len(plan.blocks) == 2 and plan.planned_bytes == 800 and plan.unplanned_bytes == 1600
  assert plan.buffers["a"].block is plan.buffers["c"].block and plan.buffers["b"].block is plan.buffers["d"].block
  assert_no_overlap(plan, launches, intermediates)


def test_a_kernel_never_reads_and_writes_the_same_memory():
  launches = [("a", "x"), ("b", "a")]   # a's last read is the launch that writes b
  plan = plan_memory(launches, {"a": ("CPU", 10, F32), "b": ("CPU", 10, F32)})
  assert plan.buffers["a"].block is not plan.buffers["b"].block


def test_devices_never_share_and_keys_not_listed_are_left_alone():
  launches = [("a", "x"), ("b", "y"), ("c", "z")]
  plan = plan_memory(launches, {"a": ("CPU", 10, F32), "c": ("PYTHON", 10, F32)})
  assert set(plan.buffers) == {"a", "c"} and plan.buffers["a"].block is not plan.buffers["c"].block
  assert plan.buffers["c"].device == "PYTHON"


def test_best_fit_block_and_growth():
  # small and big die early; the next buffer takes the smallest block that fits, the last one grows a block
  launches = [("small", "x"), ("big", "x"), ("user", "small", "big"), ("mid", "user"), ("huge", "mid"), ("end", "huge")]
  sizes = {"small": 10, "big": 100, "user": 1, "mid": 50, "huge": 400}
  intermediates = {k: ("CPU", n, F32) for k, n in sizes.items()}
  plan = plan_memory(launches, intermediates)
  assert plan.buffers["mid"].block is plan.buffers["big"].block          # 50 fits in 100, not in 10
  assert plan.buffers["huge"].block.nbytes == 1600                        # a block grew to the biggest member
  assert all(buf.nbytes <= buf.block.nbytes for buf in plan.buffers.values())
  assert_no_overlap(plan, launches, intermediates)


def test_dtypes_of_different_widths_share_bytes():
  launches = [("a", "x"), ("b", "a"), ("c", "b"), ("out", "c")]
  intermediates = {"a": ("CPU", 8, dtypes.float64), "b": ("CPU", 8, dtypes.uint8), "c": ("CPU", 16, dtypes.float32)}
  plan = plan_memory(launches, intermediates)
  assert plan.buffers["a"].block is plan.buffers["c"].block and plan.buffers["a"].block.nbytes == 64
  assert plan.buffers["c"].dtype == dtypes.float32 and plan.buffers["c"].size == 16


@pytest.mark.parametrize("seed", range(20))
def test_random_launch_lists_never_overlap(seed):
  rng = np.random.default_rng(seed)
  keys = [f"t{i}" for i in range(30)]
  launches = []
  for i, key in enumerate(keys):
    reads = list(rng.choice(keys[:i], size=min(i, int(rng.integers(0, 4))), replace=False)) if i else ["input"]
    launches.append((key, *reads))
  intermediates = {k: ("CPU", int(rng.integers(1, 200)), [dtypes.float32, dtypes.float16, dtypes.int64][int(rng.integers(0, 3))])
                   for k in keys if rng.random() < 0.8}
  plan = plan_memory(launches, intermediates)
  assert set(plan.buffers) == set(intermediates)
  assert_no_overlap(plan, launches, intermediates)
  assert plan.planned_bytes <= plan.unplanned_bytes


def test_pooled_buffer_reads_and_writes_its_own_bytes():
  launches = [("a", "x"), ("b", "a"), ("c", "b")]
  plan = plan_memory(launches, {"a": ("CPU", 16, F32), "c": ("CPU", 4, dtypes.int32)})
  big, small = plan.buffers["a"], plan.buffers["c"]
  big.copyin(np.arange(16, dtype=np.float32))
  np.testing.assert_array_equal(big.numpy(), np.arange(16, dtype=np.float32))
  small.copyin(np.array([7, 8, 9, 10], dtype=np.int32))   # the same memory: the first 16 bytes of `a` change
  np.testing.assert_array_equal(small.numpy(), [7, 8, 9, 10])
  np.testing.assert_array_equal(big.numpy()[4:], np.arange(4, 16, dtype=np.float32))
  with pytest.raises(ValueError, match="doesn't fit"): PooledBuffer(big.block, 100, F32)


# ---------------------------------------------------------------- schedules

def chain(x: Tensor, steps: int) -> Tensor:
  # two kernels a step: the row sum is its own kernel (on the CPU it would otherwise fuse into the next one)
  for _ in range(steps): x = ((x * 1.01 + 0.5).sum(1, keepdim=True).contiguous() / 32 + x).contiguous()
  return x


def chain_numpy(x: np.ndarray, steps: int) -> np.ndarray:
  for _ in range(steps): x = (x * 1.01 + 0.5).sum(1, keepdims=True) / 32 + x
  return x


def realize_with_plan(t: Tensor):
  """What Tensor.realize does, returning the memory plan."""
  items, becomes, stored = create_schedule([t.uop])
  t.uop = becomes[t.uop]
  del becomes
  return run_schedule(items, stored, keep=[t.uop])


def test_chain_of_intermediates_takes_less_memory_and_gives_the_same_numbers():
  xn = np.random.default_rng(1).random((32, 32), dtype=np.float32)
  y = chain(Tensor(xn), 10)
  plan = realize_with_plan(y)
  assert len(plan.buffers) >= 15 and len(plan.blocks) <= 3
  assert plan.planned_bytes * 3 < plan.unplanned_bytes
  np.testing.assert_allclose(y.numpy(), chain_numpy(xn, 10), rtol=1e-5)


def test_debug_2_prints_the_peak_memory(capsys, monkeypatch):
  monkeypatch.setattr(realize.DEBUG, "value", 2)
  chain(Tensor(np.ones((32, 32), np.float32)), 6).realize()
  monkeypatch.setattr(realize.DEBUG, "value", 0)
  lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("memory:")]
  assert len(lines) == 1 and "peak" in lines[0] and "without reuse" in lines[0]


def test_requested_tensors_are_never_shared():
  xn = np.random.default_rng(2).random((16, 16), dtype=np.float32)
  x = Tensor(xn)
  a = chain(x, 3)
  b = chain(a * 2, 3)
  c = chain(b - 1, 3)
  Tensor.realize(a, c, b)
  for t in (a, b, c): assert not isinstance(buffer_of(t.uop.base), PooledBuffer)
  expected_a = chain_numpy(xn, 3)
  expected_b = chain_numpy(expected_a * 2, 3)
  np.testing.assert_allclose(a.numpy(), expected_a, rtol=1e-5)
  np.testing.assert_allclose(b.numpy(), expected_b, rtol=1e-5)
  np.testing.assert_allclose(c.numpy(), chain_numpy(expected_b - 1, 3), rtol=1e-5)


def test_an_intermediate_a_tensor_still_holds_keeps_its_values():
  xn = np.random.default_rng(3).random((16, 16), dtype=np.float32)
  h = (Tensor(xn) * 3).contiguous()        # realized inside the next schedule, and still held here
  out = chain(h + 1, 6)
  out.realize()
  more = chain(out, 6).realize()            # more kernels that could have reused h's memory
  items = h.schedule()
  assert items == []                        # h was remembered as realized, not recomputed ...
  np.testing.assert_allclose(h.numpy(), xn * 3, rtol=1e-6)   # ... and its memory was never handed out
  np.testing.assert_allclose(more.numpy(), chain_numpy(chain_numpy(xn * 3 + 1, 6), 6), rtol=1e-4)


def test_a_lazy_graph_built_before_keeps_working():
  xn = np.random.default_rng(4).random((8, 8), dtype=np.float32)
  inner = (Tensor(xn) + 2).contiguous()
  later_user = inner.sum(0)                # built before realize: inner's node stays alive through it
  chain(inner, 4).realize()
  np.testing.assert_allclose(later_user.numpy(), (xn + 2).sum(0), rtol=1e-5)


@pytest.mark.parametrize("seed", range(12))
def test_random_graphs_match_numpy(seed):
  """Random graphs of reductions, elementwise ops and movement ops with forced realizations; some intermediate
  tensors are kept, the rest dropped. Every kept tensor and the result must equal numpy after the realize."""
  rng = np.random.default_rng(100 + seed)
  values = [rng.standard_normal((8, 8)).astype(np.float32) for _ in range(2)]
  tensors = [Tensor(v) for v in values]
  kept: list[tuple[Tensor, np.ndarray]] = []
  for _ in range(14):
    i, j = rng.integers(0, len(values), 2)
    a, b, an, bn = tensors[i], tensors[j], values[i], values[j]
    op = int(rng.integers(0, 6))
    if op == 0: t, v = a + b * 0.5, an + bn * 0.5
    elif op == 1: t, v = (a * b).tanh(), np.tanh(an * bn)
    elif op == 2: t, v = a.sum(1, keepdim=True).expand(8, 8) / 8 - b, np.broadcast_to(an.sum(1, keepdims=True), (8, 8)) / 8 - bn
    elif op == 3: t, v = a.T + b, an.T + bn
    elif op == 4: t, v = a.max(0, keepdim=True) + b.flip(1), an.max(0, keepdims=True) + bn[:, ::-1]
    else: t, v = (a @ b) / 8, (an @ bn) / 8
    if rng.random() < 0.6: t = t.contiguous()
    tensors.append(t)
    values.append(v.astype(np.float32))
    if rng.random() < 0.3: kept.append((t, values[-1]))
  result, expected = tensors[-1] + tensors[-2], values[-1] + values[-2]
  del tensors   # the intermediates no one keeps can share memory now
  result.realize()
  for t, v in kept + [(result, expected)]: np.testing.assert_allclose(t.numpy(), v, rtol=1e-3, atol=1e-3)


# ---------------------------------------------------------------- failures

def test_a_failed_schedule_leaves_no_readable_garbage(monkeypatch):
  x = Tensor(np.ones((4, 4), np.float32))
  y = chain(x, 3)
  calls = {"n": 0}
  original = realize.get_kernel
  def failing(ast, device, *args, **kwargs):
    calls["n"] += 1
    if calls["n"] == 4: raise RuntimeError("compiler exploded")
    return original(ast, device, *args, **kwargs)
  monkeypatch.setattr(realize, "get_kernel", failing)
  with pytest.raises(RuntimeError, match="compiler exploded"): y.realize()
  monkeypatch.undo()
  with pytest.raises(RuntimeError, match="has no value"): y.numpy()
  with pytest.raises(RuntimeError, match="has no value"): (y + 1).numpy()
