"""Benchmark: training steps per second of the 784-256-128-10 ReLU MLP (batch 128, Adam, cross-entropy),
minigrad vs torch on the CPU, side by side in one process.

  python bench/mlp_train.py                          # 7 timed runs of 20 steps each, after 5 warm-up steps
  python bench/mlp_train.py --runs 9 --steps 50 --torch-threads 2

Each step takes a fresh batch from a pool of random batches (wrapping the numpy arrays, without a copy by
Tensor.from_numpy and torch.from_numpy, is part of the step), runs forward, backward and the Adam update.
minigrad's optimizer.step() realizes the new weights and Adam state, so a step is fully computed when it
returns; each timed block ends by reading loss.item() (for all runners). minigrad runs twice: eagerly (each step
scheduled and its kernels looked up) and with the step wrapped in TinyJit (after the warm-up, each step replays
the captured kernels). The runners alternate, so a slow moment on the machine hits all of them. Printed: the
host, the Target minigrad compiles for and the ISA torch uses (`--target`, `--torch-isa`: see `python -m
minigrad.bench --help`), the median steps/s of each (with the range over the runs) and the ratios to torch.

  python bench/mlp_train.py --target x86-64-v3       # minigrad compiled for AVX2, torch limited to AVX2
"""
from __future__ import annotations
from typing import Callable
import argparse
import itertools
import statistics
import time
import numpy as np
from minigrad.bench.harness import add_target_arguments, configure_or_exit, header_lines

Runner = Callable[[int], float]   # run n training steps, return the last loss (read with .item())
LAYER_SIZES = (784, 256, 128, 10)


def random_batches(count: int, batch_size: int, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
  rng = np.random.default_rng(seed)
  return [(rng.standard_normal((batch_size, LAYER_SIZES[0]), dtype=np.float32), rng.integers(0, LAYER_SIZES[-1], batch_size).astype(np.int32))
          for _ in range(count)]


def minigrad_runner(batches: list[tuple[np.ndarray, np.ndarray]], lr: float, jit: bool) -> Runner:
  from minigrad import Tensor, TinyJit, nn
  from minigrad.nn.state import get_parameters
  Tensor.manual_seed(0)
  layers = [nn.Linear(a, b) for a, b in zip(LAYER_SIZES, LAYER_SIZES[1:])]
  optimizer = nn.optim.Adam(get_parameters(layers), lr=lr)
  cycle = itertools.cycle(batches)

  def forward(x: Tensor) -> Tensor:
    for layer in layers[:-1]: x = layer(x).relu()
    return layers[-1](x)

  def train_step(images: Tensor, labels: Tensor) -> Tensor:
    with Tensor.train():
      loss = nn.functional.cross_entropy(forward(images), labels)
      optimizer.zero_grad()
      loss.backward()
      optimizer.step()   # realizes the new weights and the Adam state
    return loss
  step = TinyJit(train_step) if jit else train_step   # from the 3rd call TinyJit replays the captured kernels

  def run(steps: int) -> float:
    for _ in range(steps):
      images, labels = next(cycle)
      loss = step(Tensor.from_numpy(images), Tensor.from_numpy(labels))   # shares memory, as torch.from_numpy below
    return float(loss.item())
  return run


def torch_runner(batches: list[tuple[np.ndarray, np.ndarray]], lr: float) -> Runner:
  import torch
  torch.manual_seed(0)
  layers: list[torch.nn.Module] = []
  for a, b in zip(LAYER_SIZES, LAYER_SIZES[1:]): layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
  model = torch.nn.Sequential(*layers[:-1])
  optimizer = torch.optim.Adam(model.parameters(), lr=lr)
  cycle = itertools.cycle(batches)

  def run(steps: int) -> float:
    for _ in range(steps):
      images, labels = next(cycle)
      loss = torch.nn.functional.cross_entropy(model(torch.from_numpy(images)), torch.from_numpy(labels).long())
      optimizer.zero_grad()
      loss.backward()
      optimizer.step()
    return float(loss.item())
  return run


def timed(run: Runner, steps: int) -> float:
  """Steps per second of one block of `steps` steps, ending with the loss read back."""
  start = time.perf_counter()
  loss = run(steps)
  elapsed = time.perf_counter() - start
  if not np.isfinite(loss): raise RuntimeError(f"the loss became {loss}")
  return steps / elapsed


def summary(name: str, rates: list[float]) -> str:
  return (f"{name:9s} {statistics.median(rates):8.1f} steps/s  (median of {len(rates)} runs; "
          f"min {min(rates):.1f}, max {max(rates):.1f})")


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--steps", type=int, default=20, help="training steps per timed run (default 20)")
  parser.add_argument("--runs", type=int, default=7, help="timed runs per library; the median is reported (default 7)")
  parser.add_argument("--warmup", type=int, default=5, help="untimed steps first: compiling kernels, allocating (default 5)")
  parser.add_argument("--batch-size", type=int, default=128, help="batch size (default 128)")
  parser.add_argument("--lr", type=float, default=1e-3, help="Adam learning rate (default 1e-3)")
  parser.add_argument("--torch-threads", type=int, default=2, help="torch.set_num_threads (default 2)")
  add_target_arguments(parser)
  args = parser.parse_args()
  if args.runs < 7: parser.error("--runs must be at least 7 (the median of fewer runs is too noisy to report)")
  if min(args.steps, args.warmup + 1, args.batch_size) < 1: parser.error("--steps and --batch-size must be positive, --warmup non-negative")

  setup = configure_or_exit(parser.prog, args.target, args.torch_isa)   # before anything compiles or imports torch
  import torch
  from minigrad.runtime.ops_cpu import cpu_threads
  torch.set_num_threads(args.torch_threads)
  for line in header_lines(setup, torch): print(line)
  print(f"threads: minigrad {cpu_threads()}, torch {torch.get_num_threads()}")
  print(f"task: MLP {'-'.join(map(str, LAYER_SIZES))} ReLU, batch {args.batch_size}, Adam, cross-entropy, random data; "
        f"{args.warmup} warm-up steps, then {args.runs} runs of {args.steps} steps each")

  batches = random_batches(8, args.batch_size)
  runners = {"minigrad": minigrad_runner(batches, args.lr, jit=False), "minigrad+jit": minigrad_runner(batches, args.lr, jit=True),
             "torch": torch_runner(batches, args.lr)}
  for run in runners.values():
    if args.warmup: run(args.warmup)
  rates: dict[str, list[float]] = {name: [] for name in runners}
  for _ in range(args.runs):
    for name, run in runners.items(): rates[name].append(timed(run, args.steps))   # alternate the libraries

  for name in runners: print(summary(name, rates[name]))
  for name in ("minigrad", "minigrad+jit"):
    ratio = statistics.median(rates[name]) / statistics.median(rates["torch"])
    print(f"ratio {name}/torch: {ratio:.3f} (steps/s; torch is {1 / ratio:.1f}x faster)" if ratio < 1 else
          f"ratio {name}/torch: {ratio:.3f} (steps/s; {name} is {ratio:.1f}x faster)")


if __name__ == "__main__": main()
