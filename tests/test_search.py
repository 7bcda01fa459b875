"""BEAM search: the kernel it picks gives the default kernel's numbers; its disk cache; failing, slow and wrong
candidates are skipped; DEBUG output; the user's buffers are never used. Small kernels, a small beam."""
from __future__ import annotations
import json
import os
import subprocess
import sys
import time
from pathlib import Path
import numpy as np
import pytest
from minigrad import Tensor, cache
import minigrad.engine.search as search
from minigrad.opt.heuristics import hand_coded_optimizations
from minigrad.codegen.kernel import OPT_KINDS, Kernel
from minigrad.opt.search_space import MAX_UNROLLED, actions, ast_key, child_kernels, kernel_signature, unrolled_size
from minigrad.engine.realize import CompiledKernel, buffer_of, get_kernel, new_kernel
from minigrad.helpers import BEAM, DEBUG
from minigrad.runtime.device import CompileError, Device

ROOT = Path(__file__).resolve().parents[1]
rng = np.random.default_rng(7)


def arr(*shape: int) -> np.ndarray: return rng.standard_normal(shape).astype(np.float32)


@pytest.fixture(autouse=True)
def small_search(monkeypatch, tmp_path):
  """An empty cache directory, no answers remembered from other tests, and a small, quick search."""
  monkeypatch.setenv("MINIGRAD_CACHE", str(tmp_path / "cache"))
  monkeypatch.delenv("DISABLE_COMPILER_CACHE", raising=False)
  monkeypatch.setattr(search, "chosen_opts", {})
  monkeypatch.setattr(search, "MAX_CANDIDATES", 6)
  monkeypatch.setattr(search, "MAX_DEPTH", 2)
  monkeypatch.setattr(search, "MIN_KERNEL_S", 0.0)   # these kernels are tiny: search them anyway
  monkeypatch.setattr(BEAM, "value", 0)


def only_item(t: Tensor):
  (item,) = t.schedule()
  return item


def run_item(item, opts=None) -> np.ndarray:
  program = get_kernel(item.ast, item.device, opts)
  buffers = [buffer_of(b).allocate() for b in item.bufs]
  program(buffers)
  return buffers[0].numpy().copy()


# ---------------------------------------------------------------- the chosen kernel computes the same numbers

x, y, v = arr(16, 24), arr(24, 32), arr(10, 12)
PROGRAMS = {
  "matmul": (lambda: Tensor(x) @ Tensor(y), lambda: x @ y),
  "row_sum": (lambda: Tensor(x).sum(1), lambda: x.sum(1)),
  "elementwise": (lambda: (Tensor(y) * 2 + 1).exp(), lambda: np.exp(y * 2 + 1)),
  "padded": (lambda: Tensor(v).pad(((1, 3), (2, 2))) * 3, lambda: np.pad(v, ((1, 3), (2, 2))) * 3),
}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_beam_result_equals_default_kernel(name, monkeypatch):
  build, expected = PROGRAMS[name]
  item = only_item(build())
  default_numbers = run_item(item)               # BEAM=0: the hand-coded kernel
  monkeypatch.setattr(BEAM, "value", 2)
  opts = search.beam_search(item.ast, "CPU", 2)
  beam_numbers = run_item(item)                  # BEAM=2: get_kernel applies the search's choice
  assert get_kernel(item.ast, "CPU").kernel.applied_opts == opts
  np.testing.assert_allclose(beam_numbers, default_numbers, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(beam_numbers.reshape(expected().shape), expected(), rtol=1e-4, atol=1e-4)


def test_beam_through_tensor_api(monkeypatch):
  monkeypatch.setattr(BEAM, "value", 1)
  a, b = arr(8, 16), arr(16, 8)
  out = ((Tensor(a) @ Tensor(b)).relu() + 1).numpy()
  np.testing.assert_allclose(out, np.maximum(a @ b, 0) + 1, rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------- the disk cache

class CompileCounter:
  """Counts (and optionally breaks) calls of the CPU compiler, on the class so the search's copy counts too."""
  def __init__(self, monkeypatch, fail=lambda call_number, src: None):
    self.calls = 0
    compiler_class = type(Device["CPU"].compiler)
    original = compiler_class.compile
    def compile(compiler, src: str) -> bytes:
      self.calls += 1
      fail(self.calls, src)
      return original(compiler, src)
    monkeypatch.setattr(compiler_class, "compile", compile)


def test_second_search_is_a_disk_cache_hit(monkeypatch):
  monkeypatch.setenv("DISABLE_COMPILER_CACHE", "1")   # so only the search cache can save compiles
  item = only_item(Tensor(arr(16, 16)) @ Tensor(arr(16, 16)))
  counter = CompileCounter(monkeypatch)
  first = search.beam_search(item.ast, "CPU", 1)
  assert counter.calls > 2, "the first search must compile candidates"
  assert list(search.cache_path(item.ast, "CPU", 1).parent.glob("*.json"))
  monkeypatch.setattr(search, "chosen_opts", {})        # a new process: nothing in memory
  counter.calls = 0
  searches = []
  monkeypatch.setattr(search._Search, "run", lambda self: searches.append(self) or [])
  second = search.beam_search(item.ast, "CPU", 1)
  assert second == first and counter.calls == 0 and searches == []


def test_cache_key_is_a_stable_printout():
  a = Tensor(arr(4, 8)).sum(1) * 2
  b = Tensor(arr(4, 8)).sum(1) * 2
  c = Tensor(arr(4, 8)).sum(1) * 3
  key_a, key_b, key_c = (ast_key(only_item(t).ast) for t in (a, b, c))
  assert key_a == key_b and key_a != key_c
  assert "0x" not in key_a   # no object addresses: equal in every process
  item = only_item(a)
  assert search.cache_path(item.ast, "CPU", 2) != search.cache_path(item.ast, "CPU", 3)


@pytest.mark.parametrize("damage", ["garbage", "truncated", "stale_opts", "other_kernel"])
def test_damaged_cache_entry_is_searched_again(damage, monkeypatch):
  item = only_item(Tensor(arr(8, 16)).sum(1))
  first = search.beam_search(item.ast, "CPU", 1)
  path = search.cache_path(item.ast, "CPU", 1)
  entry = json.loads(cache.read(path, "BEAM"))
  if damage == "garbage": path.write_bytes(b"\x00\xffnot json")
  elif damage == "truncated": path.write_bytes(path.read_bytes()[:30])
  elif damage == "stale_opts": cache.write(path, json.dumps({**entry, "opts": [["UPCAST", 9, 4]]}).encode(), "BEAM")   # a valid entry
  else: cache.write(path, json.dumps({**entry, "ast": "SINK"}).encode(), "BEAM")
  monkeypatch.setattr(search, "chosen_opts", {})
  runs = []
  original_run = search._Search.run
  monkeypatch.setattr(search._Search, "run", lambda self: runs.append(self) or original_run(self))
  again = search.beam_search(item.ast, "CPU", 1)
  assert len(runs) == 1
  assert json.loads(cache.read(path, "BEAM"))["opts"] == [[o.op, o.axis, o.amount] for o in again]   # repaired
  out = run_item(item, again)
  np.testing.assert_allclose(out, run_item(item, first), rtol=1e-5, atol=1e-5)


def test_kernels_too_small_to_matter_keep_the_hand_coded_actions(monkeypatch):
  monkeypatch.setenv("DISABLE_COMPILER_CACHE", "1")
  monkeypatch.setattr(search, "MIN_KERNEL_S", 1.0)      # every kernel here runs in far less than a second
  item = only_item(Tensor(arr(16, 16)) @ Tensor(arr(16, 16)))
  counter = CompileCounter(monkeypatch)
  opts = search.beam_search(item.ast, "CPU", 2)
  default = new_kernel(item.ast, "CPU")
  hand_coded_optimizations(default)
  assert opts == default.applied_opts and counter.calls == 1   # only the hand-coded kernel was compiled (and timed)
  assert list(search.cache_path(item.ast, "CPU", 2).parent.glob("*.json"))   # kept as the answer, like a search's


@pytest.mark.parametrize("gain_holds", [False, True])
def test_a_depth_whose_gain_does_not_hold_ends_the_search(gain_holds, monkeypatch):
  """Before a depth's best buys another depth, it is timed in turns with the best so far; a gain that doesn't hold
  there (a load spike during the other kernel's runs) ends the search with the best so far."""
  monkeypatch.setattr(search, "MAX_DEPTH", 3)
  evaluated, original = [], search._Search._evaluate
  def evaluate(self, kernels):   # every candidate looks twice as fast as the best so far in its own runs
    evaluated.append(len(kernels))
    return [(self.best_seconds / 2, kernel, program) for _, kernel, program in original(self, kernels)]
  monkeypatch.setattr(search._Search, "_evaluate", evaluate)
  monkeypatch.setattr(search._Search, "_confirm", lambda self, best, found: (1.0, 0.5 if gain_holds else 1.0))
  item = only_item(Tensor(arr(16, 32)) @ Tensor(arr(32, 16)))
  opts = search.beam_search(item.ast, "CPU", 1)
  default = new_kernel(item.ast, "CPU")
  hand_coded_optimizations(default)
  if gain_holds: assert len(evaluated) > 1 and opts != default.applied_opts
  else: assert len(evaluated) == 1 and opts == default.applied_opts


# ---------------------------------------------------------------- candidates that fail are skipped

def test_failing_and_slow_compiles_are_skipped(monkeypatch, capsys):
  monkeypatch.setenv("DISABLE_COMPILER_CACHE", "1")
  monkeypatch.setattr(DEBUG, "value", 2)
  monkeypatch.setattr(search, "COMPILE_TIMEOUT_S", 0.3)
  def fail(call_number: int, src: str) -> None:
    if call_number == 2: time.sleep(2.5)      # a compile that hangs past the time limit
    elif call_number > 1 and call_number % 2: raise CompileError("injected compile failure")
  CompileCounter(monkeypatch, fail)
  a, b = arr(16, 16), arr(16, 16)
  item = only_item(Tensor(a) @ Tensor(b))
  opts = search.beam_search(item.ast, "CPU", 2)
  log = capsys.readouterr().out
  assert "injected compile failure" in log and "TimeoutError" in log
  np.testing.assert_allclose(run_item(item, opts).reshape(16, 16), a @ b, rtol=1e-4, atol=1e-4)


def test_wrong_candidate_is_never_chosen(monkeypatch, capsys):
  """A candidate that is fast but leaves the output unwritten must lose to the slower correct default."""
  monkeypatch.setattr(DEBUG, "value", 2)
  original_load = search.load_kernel
  loads = []
  def load_kernel(*args) -> CompiledKernel:
    program = original_load(*args)
    loads.append(program)
    if len(loads) > 1: program.program = lambda *buffers, wait=False, **extra: 1e-9   # writes nothing, "fast"
    return program
  monkeypatch.setattr(search, "load_kernel", load_kernel)
  a = arr(16, 32)
  item = only_item(Tensor(a).sum(1))
  opts = search.beam_search(item.ast, "CPU", 2)
  default = new_kernel(item.ast, "CPU")
  hand_coded_optimizations(default)
  assert len(loads) > 1 and opts == default.applied_opts
  assert "differs from the hand-coded kernel" in capsys.readouterr().out
  np.testing.assert_allclose(run_item(item, opts), a.sum(1), rtol=1e-4, atol=1e-4)


def test_search_never_uses_the_user_buffers(monkeypatch):
  a, b = arr(16, 24), arr(24, 8)
  ta, tb = Tensor(a).realize(), Tensor(b).realize()
  item = only_item(ta @ tb)
  user_buffers = [buffer_of(node).allocate() for node in item.bufs]
  before = [buf.numpy().copy() for buf in user_buffers]
  used = []
  original_call = CompiledKernel.__call__
  def call(program, buffers, wait=False):
    used.extend(buffers)
    return original_call(program, buffers, wait)
  monkeypatch.setattr(CompiledKernel, "__call__", call)
  search.beam_search(item.ast, "CPU", 2)
  assert used and not {id(buf) for buf in used} & {id(buf) for buf in user_buffers}
  for buf, contents in zip(user_buffers, before): assert buf.numpy().tobytes() == contents.tobytes()
  np.testing.assert_allclose((ta @ tb).numpy(), a @ b, rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------- candidate enumeration (codegen half)

@pytest.mark.parametrize("target_name", ["avx512", "avx2", "sse2"])
def test_children_are_valid_distinct_and_bounded(target_name):
  # from the hand-coded kernel for a hand-built Target (tests/cpu_targets.py): 16, 8 or 4 lanes and their tile
  from cpu_targets import TARGETS, decide, float_lanes
  target = TARGETS[target_name]
  kernel = decide(only_item(Tensor(arr(16, 32)) @ Tensor(arr(32, 64))).ast, target)
  assert kernel.applied_opts[0].amount == float_lanes(target)
  parent_signature, parent_opts = kernel_signature(kernel), list(kernel.applied_opts)
  assert {o.op for o in actions(kernel)} == set(OPT_KINDS)   # every kind of action is tried
  children = child_kernels(kernel)
  assert children
  signatures = [kernel_signature(c) for c in children]
  assert len(set(signatures)) == len(signatures)
  for child in children:
    assert child.applied_opts[:-1] == kernel.applied_opts and unrolled_size(child) <= MAX_UNROLLED
    replayed = Kernel(kernel.ast, target=target)
    for opt in child.applied_opts: replayed.apply_opt(opt)
    assert kernel_signature(replayed) == kernel_signature(child)
  assert kernel_signature(kernel) == parent_signature and kernel.applied_opts == parent_opts   # the parent is unchanged


# ---------------------------------------------------------------- BEAM=N from the environment

def test_beam_env_prints_chosen_actions_at_debug3(tmp_path):
  code = ("import numpy as np\nfrom minigrad import Tensor\n"
          "a = np.arange(256, dtype=np.float32).reshape(16, 16) / 256\n"
          "out = (Tensor(a) @ Tensor(a)).numpy()\n"
          "assert np.allclose(out, a @ a, rtol=1e-4, atol=1e-4)\nprint('RESULT OK')\n")
  env = {**os.environ, "BEAM": "1", "DEBUG": "3", "MINIGRAD_CACHE": str(tmp_path / "cache"), "BEAM_MAX_CANDIDATES": "6",
         "BEAM_MAX_DEPTH": "2", "PYTHONPATH": str(ROOT)}
  first = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
  assert first.returncode == 0, first.stderr
  assert "RESULT OK" in first.stdout
  chosen = [line for line in first.stdout.splitlines() if "chosen actions" in line]
  assert len(chosen) == 1 and "Opt(" in chosen[0], first.stdout
  second = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
  assert second.returncode == 0, second.stderr
  cached = [line for line in second.stdout.splitlines() if "cached actions" in line]
  assert len(cached) == 1 and "chosen actions" not in second.stdout, second.stdout
  assert chosen[0].split("chosen actions ")[1].split(" (hand-coded")[0] == cached[0].split("cached actions ")[1]


# ---------------------------------------------------------------- the BEAM check of the benchmark (minigrad/bench/beam.py)

def test_beam_check_records_searches_and_times_a_workload(monkeypatch):
  from minigrad.bench import beam as bench_beam
  from minigrad.bench.harness import minigrad_runners
  monkeypatch.setattr(bench_beam, "ROUNDS", 1)
  a, b = Tensor(arr(16, 24)).realize(), Tensor(arr(24, 32)).realize()
  workload = bench_beam.Workload(minigrad_runners(lambda: (a @ b).relu().sum(0))["minigrad"], 1.0, "runs/s")
  user_cache = os.environ["MINIGRAD_CACHE"]
  result = bench_beam.check("tiny", workload, width=1, runs=2)
  assert os.environ["MINIGRAD_CACHE"] == user_cache   # the cold search's own folder is gone again
  assert len(result.kernels) >= 1 and sum(k.launches for k in result.kernels) >= len(result.kernels)
  assert result.default_s > 0 and result.beamed_s > 0 and result.ratio > 0
  for k in result.kernels:
    assert k.search_cold_s > 0 and k.search_cached_s >= 0 and k.default_s > 0 and k.beamed_s > 0
    assert k.same == (k.beamed.source == k.default.source)
  lines = bench_beam.report(result, "tiny workload")
  assert lines[0].startswith("tiny workload: heuristics") and "heuristics/BEAM" in lines[0] and "cached" in lines[0]
  assert len(lines) >= 1 + len(result.kernels)


def test_beam_check_refuses_unknown_workloads():
  from minigrad.bench import beam as bench_beam
  with pytest.raises(ValueError, match="no workload"):
    bench_beam.main(["sort"], 3, 7, {})
