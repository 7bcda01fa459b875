"""The BEAM check: how far the default (hand-coded) kernel choices are from what `BEAM=N` finds, per benchmark workload.

  python -m minigrad.bench --beam-check                      # every workload of the benchmark, BEAM=3
  python -m minigrad.bench --beam-check mlp conv --beam 3    # some of them
  python -m minigrad.bench --beam-check --target x86-64-v3   # for the AVX2 Target

Input: the workloads of `python -m minigrad.bench` (matmul, elementwise, rowsum, softmax, conv, attention, mlp, gpt),
the Target and the beam width. Output: the host and Target, then per workload: the ratio heuristics / BEAM (the goal:
at most 1.2 on every workload) from the sum of its kernels' times, the time and rate of one run (a step, for the
training steps) replayed with the hand-coded kernels and with BEAM's, BEAM's search wall time cold (an empty cache
folder: every candidate compiled; with the CPU time it used, the compilers' included, which a busy machine doesn't
inflate as it does the wall time) and cached (a second search, answered from the disk cache), and the kernels where
the time goes: each one's share of the run, both times, the ratio and, where BEAM is over 20 % faster, the actions
each chose.

Method: one run of the workload is recorded (the launches: kernel and buffers, as a TinyJit capture does), after a
warm-up run. Each distinct kernel (AST) is searched with `beam_search` with the cache folder ($MINIGRAD_CACHE)
pointed at a new temporary folder; then searched again from memory cleared, which reads the disk. Each kernel is
then timed with both choices on its recorded buffers, the two taking turns run by run (ROUNDS * `runs` runs each;
medians), so a busy moment on a shared machine hits both; where BEAM kept the hand-coded code, one program stands for
both. The ratio is judged from these: replays of a whole run (timed the same way, shown too) swing more on a busy
machine. Replays launch kernels one by one in both cases (no thread-pool batching).
"""
from __future__ import annotations
from dataclasses import dataclass, field
from typing import Callable
import contextlib
import math
import os
import statistics
import tempfile
import time
import numpy as np
from minigrad import Tensor
from minigrad.engine import realize
from minigrad.engine.realize import CompiledKernel, get_kernel
from minigrad.helpers import BEAM
from minigrad.runtime.device import Buffer, Device

ROUNDS = 5           # the two choices take turns this many times
GOAL_RATIO = 1.2     # heuristics may be this much slower than BEAM
SHOWN_KERNELS = 6    # kernels listed per workload (the biggest share of the run first; all those over the goal)
Launch = tuple[CompiledKernel, list[Buffer], "dict[str, int] | None"]


@dataclass
class Workload:
  """One run of a benchmark workload (`run`), and the work it does for the rate (`work` in `unit` per run)."""
  run: Callable[[], object]
  work: float
  unit: str


def _tensor_workload(build: Callable[[], Tensor], work: float, unit: str) -> Workload:
  from minigrad.bench.harness import minigrad_runners
  return Workload(minigrad_runners(build)["minigrad"], work, unit)


def workloads(rng: np.random.Generator) -> dict[str, Callable[[], Workload]]:
  """The benchmark's workloads, with the same shapes as minigrad/bench/sections.py's benchmarks."""
  from minigrad.bench.harness import _bench_module
  from minigrad.bench.sections import ATTENTION_SHAPE

  def matmul() -> Workload:
    a, b = (Tensor(rng.standard_normal((1024, 1024)).astype(np.float32)).realize() for _ in range(2))
    return _tensor_workload(lambda: a @ b, 2 * 1024 ** 3 / 1e9, "GFLOPS")

  def elementwise() -> Workload:
    x = Tensor(rng.standard_normal(16 * 1024 * 1024).astype(np.float32)).realize()
    return _tensor_workload(lambda: (x.relu() * 2 + 1).exp(), 2 * 4 * 16 * 1024 * 1024 / 1e9, "GB/s")

  def rowsum() -> Workload:
    x = Tensor(rng.standard_normal((4096, 4096)).astype(np.float32)).realize()
    return _tensor_workload(lambda: x.sum(1), (4096 * 4096 + 4096) * 4 / 1e9, "GB/s")

  def softmax() -> Workload:
    x = Tensor(rng.standard_normal((4096, 1024)).astype(np.float32)).realize()
    return _tensor_workload(lambda: x.softmax(-1), 2 * 4 * 4096 * 1024 / 1e9, "GB/s")

  def conv() -> Workload:
    x = Tensor(rng.standard_normal((32, 64, 32, 32)).astype(np.float32)).realize()
    w = Tensor(rng.standard_normal((64, 64, 3, 3)).astype(np.float32)).realize()
    return _tensor_workload(lambda: x.conv2d(w, padding=1), 2 * 32 * 64 * 32 * 32 * 64 * 9 / 1e9, "GFLOPS")

  def attention() -> Workload:
    batch, heads, tokens, size = ATTENTION_SHAPE
    q, k, v = (Tensor(rng.standard_normal(ATTENTION_SHAPE).astype(np.float32)).realize() for _ in range(3))
    return _tensor_workload(lambda: q.scaled_dot_product_attention(k, v, is_causal=True), 2 * batch * heads * tokens * tokens * size / 1e9, "GFLOPS")

  def mlp() -> Workload:
    mlp_train = _bench_module("mlp_train")
    step = mlp_train.minigrad_runner(mlp_train.random_batches(8, 128), 1e-3, jit=True)
    return Workload(lambda: step(1), 1, "steps/s")

  def gpt() -> Workload:
    model_steps = _bench_module("model_steps")
    step = model_steps.minigrad_runner("gpt", model_steps.gpt_batches())
    return Workload(lambda: step(1), 1, "steps/s")
  return {"matmul": matmul, "elementwise": elementwise, "rowsum": rowsum, "softmax": softmax, "conv": conv,
          "attention": attention, "mlp": mlp, "gpt": gpt}


# ---------------------------------------------------------------- recording and replaying a run

@contextlib.contextmanager
def beam_width(width: int):
  """BEAM set to `width` inside the block (0: the hand-coded choices)."""
  saved = BEAM.value
  BEAM.value = width
  try: yield
  finally: BEAM.value = saved


def record(run: Callable[[], object]) -> list[Launch]:
  """The kernel launches of one call of `run`, in order (host launches of other kinds are left out)."""
  launches: list = []
  realize.launch_recorder = launches
  try: run()
  finally: realize.launch_recorder = None
  return [(entry[0], entry[2], entry[3] if len(entry) > 3 else None) for entry in launches if isinstance(entry[0], CompiledKernel)]


def replay(launches: list[Launch]) -> float:
  """Seconds to launch `launches` one after another and wait for the devices."""
  start = time.perf_counter()
  for kernel, buffers, var_vals in launches: kernel(buffers, var_vals=var_vals)
  for device in {kernel.device for kernel, _, _ in launches}: Device[device].synchronize()
  return time.perf_counter() - start


@dataclass(frozen=True)
class Timing:
  """Seconds of two things timed in turns: the medians, and the fastest runs (less moved by a busy machine)."""
  first: float
  second: float
  first_fastest: float
  second_fastest: float


def interleaved(first: Callable[[], float], second: Callable[[], float], runs: int) -> Timing:
  """`first` and `second` over ROUNDS * `runs` runs each, after a warm-up run, taking turns run by run (on a shared
  machine the load changes within a block of runs)."""
  first(), second()
  times: tuple[list[float], list[float]] = ([], [])
  for _ in range(ROUNDS * runs):
    times[0].append(first())
    times[1].append(second())
  return Timing(statistics.median(times[0]), statistics.median(times[1]), min(times[0]), min(times[1]))


# ---------------------------------------------------------------- the check

@dataclass
class KernelResult:
  name: str
  launches: int
  default: CompiledKernel
  beamed: CompiledKernel
  search_cold_s: float
  search_cold_cpu_s: float
  search_cached_s: float
  default_s: float = 0.0
  beamed_s: float = 0.0

  @property
  def same(self) -> bool: return self.beamed is self.default

  @property
  def ratio(self) -> float: return 1.0 if self.same else self.default_s / max(self.beamed_s, 1e-12)


@dataclass
class WorkloadResult:
  name: str
  work: float
  unit: str
  default_s: float
  beamed_s: float
  fastest_ratio: float   # the ratio of the fastest runs
  kernels: list[KernelResult] = field(default_factory=list)

  @property
  def replay_ratio(self) -> float: return self.default_s / max(self.beamed_s, 1e-12)

  @property
  def ratio(self) -> float:
    """heuristics / BEAM from the kernels' times (each timed in turns with its rival; the same kernel counts alike):
    the replays of a whole run swing more on a busy machine."""
    default = sum(k.default_s * k.launches for k in self.kernels)
    return default / max(sum(k.beamed_s * k.launches for k in self.kernels), 1e-12) if self.kernels else self.replay_ratio

  def rate(self, seconds: float) -> float: return self.work / seconds


@contextlib.contextmanager
def cache_folder(path: str):
  """$MINIGRAD_CACHE pointed at `path` inside the block."""
  saved = os.environ.get("MINIGRAD_CACHE")
  os.environ["MINIGRAD_CACHE"] = path
  try: yield
  finally:
    if saved is None: del os.environ["MINIGRAD_CACHE"]
    else: os.environ["MINIGRAD_CACHE"] = saved


def _cpu_seconds() -> float:
  """CPU time this process and its finished child processes (the compilers) have used."""
  t = os.times()
  return t.user + t.system + t.children_user + t.children_system


def _timed_search(ast, device: str, width: int) -> tuple[list, float, float]:
  """The actions `beam_search` gives, its wall time and the CPU time it used (with the compilers')."""
  from minigrad.engine.search import beam_search, chosen_opts
  chosen_opts.pop((ast, device, width), None)   # from the disk cache or a search, not from this process's memory
  start, cpu_start = time.perf_counter(), _cpu_seconds()
  opts = beam_search(ast, device, width)
  return opts, time.perf_counter() - start, _cpu_seconds() - cpu_start


def check(name: str, workload: Workload, width: int, runs: int) -> WorkloadResult:
  """Record one run of `workload`, BEAM-search each of its kernels cold then cached, and time both choices."""
  with beam_width(0):
    workload.run()                    # warm-up: lazy weights realized, the hand-coded kernels compiled
    launches = record(workload.run)
  distinct: dict[tuple, list[int]] = {}
  for i, (kernel, _, _) in enumerate(launches): distinct.setdefault((kernel.kernel.ast, kernel.device), []).append(i)
  kernels: dict[tuple, KernelResult] = {}
  with tempfile.TemporaryDirectory(prefix="minigrad-beam-check-") as folder:
    os.chmod(folder, 0o700)
    with cache_folder(folder):
      found = {key: _timed_search(*key, width) for key in distinct}      # cold: an empty cache folder
      cached = {key: _timed_search(*key, width)[1] for key in distinct}  # the same searches, answered from disk
  for key, positions in distinct.items():
    opts, cold_s, cold_cpu_s = found[key]
    default = launches[positions[0]][0]
    beamed = get_kernel(*key, opts=opts)
    if beamed.source == default.source: beamed = default   # the same code: one program, so only noise could differ
    kernels[key] = KernelResult(default.name, len(positions), default, beamed, cold_s, cold_cpu_s, cached[key])
  beamed_launches = [(kernels[(k.kernel.ast, k.device)].beamed, bufs, vv) for k, bufs, vv in launches]
  timing = interleaved(lambda: replay(launches), lambda: replay(beamed_launches), runs)
  result = WorkloadResult(name, workload.work, workload.unit, timing.first, timing.second,
                          timing.first_fastest / max(timing.second_fastest, 1e-12), list(kernels.values()))
  for key, k in kernels.items():
    _, buffers, var_vals = launches[distinct[key][0]]
    timing = interleaved(lambda: replay([(k.default, buffers, var_vals)]), lambda: replay([(k.beamed, buffers, var_vals)]), runs)
    k.default_s, k.beamed_s = timing.first, (timing.first if k.same else timing.second)
  return result


def report(result: WorkloadResult, title: str) -> list[str]:
  cold, cached = sum(k.search_cold_s for k in result.kernels), sum(k.search_cached_s for k in result.kernels)
  cold_cpu = sum(k.search_cold_cpu_s for k in result.kernels)
  verdict = "ok" if result.ratio <= GOAL_RATIO else f"OVER the {GOAL_RATIO:.1f} goal"
  lines = [f"{title}: heuristics/BEAM {result.ratio:.2f}x by kernel times ({verdict}); replays: heuristics "
           f"{result.default_s * 1e3:.3f} ms ({result.rate(result.default_s):.2f} {result.unit}), BEAM {result.beamed_s * 1e3:.3f} ms "
           f"({result.rate(result.beamed_s):.2f} {result.unit}), {result.replay_ratio:.2f}x (fastest runs {result.fastest_ratio:.2f}x); "
           f"{len(result.kernels)} kernels, search {cold:.1f} s cold ({cold_cpu:.1f} CPU s), {cached:.2f} s cached"]
  total = sum(k.default_s * k.launches for k in result.kernels) or 1.0
  ranked = sorted(result.kernels, key=lambda k: -k.default_s * k.launches)
  shown = [k for i, k in enumerate(ranked) if i < SHOWN_KERNELS or k.ratio > GOAL_RATIO]
  for k in shown:
    line = (f"  {k.name:28s} x{k.launches:<2d} {100 * k.default_s * k.launches / total:5.1f}%  heuristics {k.default_s * 1e6:9.1f} us"
            f"  BEAM {k.beamed_s * 1e6:9.1f} us  {k.ratio:5.2f}x  search {k.search_cold_s:5.1f} s" + ("  (the same kernel)" if k.same else ""))
    lines.append(line)
    if k.ratio > GOAL_RATIO:
      lines.append(f"      heuristics {k.default.kernel.applied_opts}")
      lines.append(f"      BEAM       {k.beamed.kernel.applied_opts}")
  return lines


def main(names: list[str], width: int, runs: int, titles: dict[str, str]) -> list[WorkloadResult]:
  """Check each workload in `names` (all when empty) with BEAM=`width`, printing as it goes."""
  rng = np.random.default_rng(0)
  builders = workloads(rng)
  if unknown := [n for n in names if n not in builders]:
    raise ValueError(f"the BEAM check has no workload {unknown}; choose from {list(builders)}")
  print(f"BEAM check: heuristics against BEAM={width}, median of {ROUNDS * runs} replays each, taking turns run by run; goal heuristics/BEAM "
        f"<= {GOAL_RATIO}")
  results = []
  for name in names or builders:
    result = check(name, builders[name](), width, runs)
    for line in report(result, titles.get(name, name)): print(line, flush=True)
    results.append(result)
  if results:
    worst = max(results, key=lambda r: r.ratio)
    print(f"worst: {worst.name} {worst.ratio:.2f}x; geometric mean heuristics/BEAM "
          f"{math.exp(statistics.fmean(math.log(r.ratio) for r in results)):.2f}x")
  return results
