"""minigrad's speed, side by side with numpy and torch, in one process.

  python -m minigrad.bench                     # all benchmarks
  python -m minigrad.bench matmul softmax      # some of them
  python -m minigrad.bench --runs 15           # more timed runs each

Input: nothing but the machine. Output: one line per benchmark with the median rate of minigrad, numpy and torch
and minigrad's ratios to them. Each figure is the median of 3 blocks of >= 7 timed runs after warm-up; each
library runs each block on its own, after a pause (numpy's and torch's threads spin for a while after a call and
would slow the next library down), and the libraries take turns block by block. The header shows the load
average: on a busy machine the figures are unreliable. minigrad runs are synchronized (the result is realized)
and the compile happens during warm-up: the graph is scheduled once and its kernels run each time, as a
captured (JIT) step would. Rates count what the op must do at least: GFLOPS for
matmul/conv (2*M*N*K), GB/s as one read of each input plus one write of the output. The MLP training step comes
from bench/mlp_train.py (its TinyJit runner).
"""
from __future__ import annotations
import argparse
import os
import platform
import statistics
import sys
import time
from typing import Callable
import numpy as np
from minigrad import Tensor
from minigrad.helpers import cpu_model
from minigrad.schedule.scheduler import create_schedule
from minigrad.engine.realize import run_schedule

Runners = dict[str, Callable[[], object]]   # name (minigrad, numpy, torch) -> one run


def _torch():
  try: import torch
  except ImportError: return None
  torch.set_num_threads(os.cpu_count() or 1)
  return torch


def machine() -> str:
  torch = _torch()
  try: load = f"load average {os.getloadavg()[0]:.2f}"
  except OSError: load = "load average unknown"
  return f"{cpu_model()}, {os.cpu_count()} cores, Python {platform.python_version()}, numpy {np.__version__}" + \
         (f", torch {torch.__version__} ({torch.get_num_threads()} threads)" if torch else "") + f"; {load}"


def minigrad_run(build: Callable[[], Tensor]) -> Callable[[], object]:
  """Schedule the graph once; each call runs its kernels (compile time and Python scheduling are not in the figure)."""
  items, _, _ = create_schedule([build().uop])
  return lambda: run_schedule(items)


IDLE_SECONDS = 0.5   # between two libraries' runs: numpy's and torch's worker threads spin a while after a call
ROUNDS = 3           # each library's block of runs comes back this many times, the libraries taking turns


def median_seconds(runners: Runners, runs: int, warmup: int = 2) -> dict[str, float]:
  """Median seconds of each runner over ROUNDS blocks of `runs` runs, after `warmup` ones. Each runner runs its
  block alone (the threads of BLAS/OpenMP libraries keep spinning after a call, and would slow whatever runs
  next), and the blocks take turns, so a busy moment on a shared machine falls on one block of one library,
  not on all of its runs."""
  times: dict[str, list[float]] = {name: [] for name in runners}
  for round_ in range(ROUNDS):
    for name, run in runners.items():
      time.sleep(IDLE_SECONDS)
      for _ in range(warmup if round_ == 0 else 1): run()
      for _ in range(runs):
        start = time.perf_counter()
        run()
        times[name].append(time.perf_counter() - start)
  return {name: statistics.median(samples) for name, samples in times.items()}


def _rates(runners: Runners, work: float, unit: str, runs: int) -> dict[str, tuple[float, str]]:
  return {name: (work / seconds / 1e9, unit) for name, seconds in median_seconds(runners, runs).items()}


def bench_matmul(rng: np.random.Generator, runs: int) -> dict[str, tuple[float, str]]:
  n = 1024
  a, b = rng.standard_normal((n, n)).astype(np.float32), rng.standard_normal((n, n)).astype(np.float32)
  ta, tb = Tensor(a), Tensor(b)
  runners: Runners = {"minigrad": minigrad_run(lambda: ta @ tb), "numpy": lambda: a @ b}
  if torch := _torch():
    xa, xb = torch.from_numpy(a), torch.from_numpy(b)
    runners["torch"] = lambda: xa @ xb
  return _rates(runners, 2 * n ** 3, "GFLOPS", runs)


def bench_elementwise(rng: np.random.Generator, runs: int) -> dict[str, tuple[float, str]]:
  x = rng.standard_normal(16 * 1024 * 1024).astype(np.float32)
  tx = Tensor(x)
  runners: Runners = {"minigrad": minigrad_run(lambda: (tx.relu() * 2 + 1).exp()), "numpy": lambda: np.exp(np.maximum(x, 0) * 2 + 1)}
  if torch := _torch():
    xt = torch.from_numpy(x)
    runners["torch"] = lambda: (xt.relu() * 2 + 1).exp()
  return _rates(runners, 2 * x.nbytes, "GB/s", runs)


def bench_rowsum(rng: np.random.Generator, runs: int) -> dict[str, tuple[float, str]]:
  x = rng.standard_normal((4096, 4096)).astype(np.float32)
  tx = Tensor(x)
  runners: Runners = {"minigrad": minigrad_run(lambda: tx.sum(1)), "numpy": lambda: x.sum(1)}
  if torch := _torch():
    xt = torch.from_numpy(x)
    runners["torch"] = lambda: xt.sum(1)
  return _rates(runners, x.nbytes + 4096 * 4, "GB/s", runs)


def bench_softmax(rng: np.random.Generator, runs: int) -> dict[str, tuple[float, str]]:
  x = rng.standard_normal((4096, 1024)).astype(np.float32)
  tx = Tensor(x)

  def np_softmax() -> np.ndarray:
    e = np.exp(x - x.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)
  runners: Runners = {"minigrad": minigrad_run(lambda: tx.softmax(-1)), "numpy": np_softmax}
  if torch := _torch():
    xt = torch.from_numpy(x)
    runners["torch"] = lambda: xt.softmax(-1)
  return _rates(runners, 2 * x.nbytes, "GB/s", runs)


def bench_conv(rng: np.random.Generator, runs: int) -> dict[str, tuple[float, str]]:
  x = rng.standard_normal((32, 64, 32, 32)).astype(np.float32)
  w = rng.standard_normal((64, 64, 3, 3)).astype(np.float32)
  tx, tw = Tensor(x), Tensor(w)
  runners: Runners = {"minigrad": minigrad_run(lambda: tx.conv2d(tw, padding=1))}
  if torch := _torch():
    xt, wt = torch.from_numpy(x), torch.from_numpy(w)
    runners["torch"] = lambda: torch.nn.functional.conv2d(xt, wt, padding=1)
  return _rates(runners, 2 * 32 * 64 * 32 * 32 * 64 * 9, "GFLOPS", runs)


def bench_mlp(rng: np.random.Generator, runs: int) -> dict[str, tuple[float, str]]:
  """Training steps of the MLP in bench/mlp_train.py (next to the package in a source checkout)."""
  bench_dir = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench")
  if not os.path.exists(os.path.join(bench_dir, "mlp_train.py")):
    raise FileNotFoundError(f"the MLP benchmark needs bench/mlp_train.py from a source checkout (looked in {bench_dir})")
  sys.path.insert(0, bench_dir)
  from mlp_train import minigrad_runner, torch_runner, random_batches, timed
  batches = random_batches(8, 128)
  steppers = {"minigrad": minigrad_runner(batches, 1e-3, jit=True)} | ({"torch": torch_runner(batches, 1e-3)} if _torch() else {})
  for run in steppers.values(): run(5)   # warm-up: compile, capture, allocate
  rates: dict[str, list[float]] = {name: [] for name in steppers}
  for _ in range(runs):
    for name, run in steppers.items(): rates[name].append(timed(run, 20))
  return {name: (statistics.median(r), "steps/s") for name, r in rates.items()}


BENCHMARKS = {"matmul": ("matmul 1024x1024 f32", bench_matmul), "elementwise": ("(x.relu()*2+1).exp() 16M f32", bench_elementwise),
              "rowsum": ("row sum 4096x4096", bench_rowsum), "softmax": ("softmax 4096x1024", bench_softmax),
              "conv": ("conv2d 32x64x32x32, 64 3x3 filters, pad 1", bench_conv), "mlp": ("MLP 784-256-128-10 train step, batch 128, Adam", bench_mlp)}


def main(argv: list[str] | None = None) -> None:
  parser = argparse.ArgumentParser(prog="python -m minigrad.bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("names", nargs="*", help=f"benchmarks to run: {', '.join(BENCHMARKS)} (default: all)")
  parser.add_argument("--runs", type=int, default=7, help=f"timed runs per block, {ROUNDS} blocks per library (the median is shown; at least 7)")
  args = parser.parse_args(argv)
  if unknown := [n for n in args.names if n not in BENCHMARKS]: parser.error(f"unknown benchmark(s) {unknown}; choose from {list(BENCHMARKS)}")
  if args.runs < 7: parser.error(f"--runs must be at least 7, got {args.runs}")
  rng = np.random.default_rng(0)
  print(f"machine: {machine()}")
  print(f"{'benchmark':48s} {'minigrad':>14s} {'numpy':>14s} {'torch':>14s}   ratios")
  for name in args.names or BENCHMARKS:
    title, fn = BENCHMARKS[name]
    results = fn(rng, args.runs)
    unit = next(iter(results.values()))[1]
    cells = [f"{results[k][0]:9.2f} {unit:>4s}" if k in results else f"{'-':>14s}" for k in ("minigrad", "numpy", "torch")]
    ratios = ", ".join(f"{results['minigrad'][0] / results[k][0]:.2f}x {k}" for k in ("numpy", "torch") if k in results)
    print(f"{title:48s} {cells[0]:>14s} {cells[1]:>14s} {cells[2]:>14s}   {ratios}", flush=True)


if __name__ == "__main__":
  main()
