"""minigrad's speed, side by side with numpy and torch, in one process.

  python bench/run.py                 # all benchmarks
  python bench/run.py matmul softmax  # some of them

Each figure is the median of >= 7 timed runs after warm-up; minigrad runs are synchronized (the result is
realized) and the compile happens during warm-up. Rates count what the op must touch at least: GFLOPS for
matmul/conv (2*M*N*K), GB/s as one read of each input plus one write of the output.
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

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from minigrad import Tensor  # noqa: E402
from minigrad.helpers import cpu_model  # noqa: E402
from minigrad.schedule.scheduler import create_schedule  # noqa: E402
from minigrad.engine.realize import run_schedule  # noqa: E402

try:
  import torch
  torch.set_num_threads(os.cpu_count() or 1)
except ImportError:
  torch = None


def median_seconds(fn: Callable[[], object], runs: int = 7, warmup: int = 2) -> float:
  for _ in range(warmup): fn()
  times = []
  for _ in range(runs):
    start = time.perf_counter()
    fn()
    times.append(time.perf_counter() - start)
  return statistics.median(times)


def machine() -> str:
  return f"{cpu_model()}, {os.cpu_count()} cores, Python {platform.python_version()}, numpy {np.__version__}" + \
         (f", torch {torch.__version__} ({torch.get_num_threads()} threads)" if torch else "")


def minigrad_fn(build: Callable[[], Tensor]) -> Callable[[], object]:
  """Schedule the graph once, then each call runs its kernels (what a captured/JIT step does): compile time
  and Python scheduling are not in the figure; launch overhead is."""
  items, _, _ = create_schedule([build().uop])
  return lambda: run_schedule(items)


def bench_matmul(rng: np.random.Generator) -> dict[str, tuple[float, str]]:
  n = 1024
  a, b = rng.standard_normal((n, n)).astype(np.float32), rng.standard_normal((n, n)).astype(np.float32)
  ta, tb = Tensor(a), Tensor(b)
  flops = 2 * n ** 3
  out = {"minigrad": flops / median_seconds(minigrad_fn(lambda: ta @ tb)) / 1e9,
         "numpy": flops / median_seconds(lambda: a @ b) / 1e9}
  if torch:
    xa, xb = torch.from_numpy(a), torch.from_numpy(b)
    out["torch"] = flops / median_seconds(lambda: xa @ xb) / 1e9
  return {k: (v, "GFLOPS") for k, v in out.items()}


def bench_elementwise(rng: np.random.Generator) -> dict[str, tuple[float, str]]:
  n = 16 * 1024 * 1024
  x = rng.standard_normal(n).astype(np.float32)
  tx = Tensor(x)
  nbytes = 2 * 4 * n
  out = {"minigrad": nbytes / median_seconds(minigrad_fn(lambda: (tx.relu() * 2 + 1).exp())) / 1e9,
         "numpy": nbytes / median_seconds(lambda: np.exp(np.maximum(x, 0) * 2 + 1)) / 1e9}
  if torch:
    xt = torch.from_numpy(x)
    out["torch"] = nbytes / median_seconds(lambda: (xt.relu() * 2 + 1).exp()) / 1e9
  return {k: (v, "GB/s") for k, v in out.items()}


def bench_rowsum(rng: np.random.Generator) -> dict[str, tuple[float, str]]:
  x = rng.standard_normal((4096, 4096)).astype(np.float32)
  tx = Tensor(x)
  nbytes = x.nbytes + 4096 * 4
  out = {"minigrad": nbytes / median_seconds(minigrad_fn(lambda: tx.sum(1))) / 1e9,
         "numpy": nbytes / median_seconds(lambda: x.sum(1)) / 1e9}
  if torch:
    xt = torch.from_numpy(x)
    out["torch"] = nbytes / median_seconds(lambda: xt.sum(1)) / 1e9
  return {k: (v, "GB/s") for k, v in out.items()}


def bench_softmax(rng: np.random.Generator) -> dict[str, tuple[float, str]]:
  x = rng.standard_normal((4096, 1024)).astype(np.float32)
  tx = Tensor(x)
  nbytes = 2 * x.nbytes

  def np_softmax() -> np.ndarray:
    e = np.exp(x - x.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)
  out = {"minigrad": nbytes / median_seconds(minigrad_fn(lambda: tx.softmax(-1))) / 1e9,
         "numpy": nbytes / median_seconds(np_softmax) / 1e9}
  if torch:
    xt = torch.from_numpy(x)
    out["torch"] = nbytes / median_seconds(lambda: xt.softmax(-1)) / 1e9
  return {k: (v, "GB/s") for k, v in out.items()}


def bench_conv(rng: np.random.Generator) -> dict[str, tuple[float, str]]:
  x = rng.standard_normal((32, 64, 32, 32)).astype(np.float32)
  w = rng.standard_normal((64, 64, 3, 3)).astype(np.float32)
  tx, tw = Tensor(x), Tensor(w)
  flops = 2 * 32 * 64 * 32 * 32 * 64 * 9
  out = {"minigrad": flops / median_seconds(minigrad_fn(lambda: tx.conv2d(tw, padding=1)), runs=3, warmup=1) / 1e9}
  if torch:
    xt, wt = torch.from_numpy(x), torch.from_numpy(w)
    out["torch"] = flops / median_seconds(lambda: torch.nn.functional.conv2d(xt, wt, padding=1)) / 1e9
  return {k: (v, "GFLOPS") for k, v in out.items()}


def bench_mlp(rng: np.random.Generator) -> dict[str, tuple[float, str]]:
  from mlp_train import minigrad_runner, torch_runner, random_batches, timed   # bench/mlp_train.py
  batches = random_batches(8, 128)
  runners = {"minigrad": minigrad_runner(batches, 1e-3)} | ({"torch": torch_runner(batches, 1e-3)} if torch else {})
  out = {}
  for name, run in runners.items():
    run(5)   # warm-up: compile, allocate
    out[name] = statistics.median(timed(run, 20) for _ in range(7))
  return {k: (v, "steps/s") for k, v in out.items()}


BENCHMARKS = {"matmul": ("matmul 1024x1024 f32", bench_matmul), "elementwise": ("(x.relu()*2+1).exp() 16M f32", bench_elementwise),
              "rowsum": ("row sum 4096x4096", bench_rowsum), "softmax": ("softmax 4096x1024", bench_softmax),
              "conv": ("conv2d 32x64x32x32, 64 3x3 filters, pad 1", bench_conv), "mlp": ("MLP 784-256-128-10 train step, batch 128, Adam", bench_mlp)}


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("names", nargs="*", help=f"benchmarks to run: {', '.join(BENCHMARKS)} (default: all)")
  args = parser.parse_args()
  if unknown := [n for n in args.names if n not in BENCHMARKS]: parser.error(f"unknown benchmark(s) {unknown}; choose from {list(BENCHMARKS)}")
  sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
  rng = np.random.default_rng(0)
  print(f"machine: {machine()}")
  print(f"{'benchmark':48s} {'minigrad':>14s} {'numpy':>14s} {'torch':>14s}   ratios")
  for name in args.names or BENCHMARKS:
    title, fn = BENCHMARKS[name]
    results = fn(rng)
    unit = next(iter(results.values()))[1]
    cells = [f"{results[k][0]:9.2f} {unit:>4s}" if k in results else f"{'-':>14s}" for k in ("minigrad", "numpy", "torch")]
    ratios = ", ".join(f"{results['minigrad'][0] / results[k][0]:.2f}x {k}" for k in ("numpy", "torch") if k in results)
    print(f"{title:48s} {cells[0]:>14s} {cells[1]:>14s} {cells[2]:>14s}   {ratios}", flush=True)


if __name__ == "__main__":
  main()
