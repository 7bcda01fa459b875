"""Benchmark: milliseconds per training step of two small models, minigrad (TinyJit) vs torch on the CPU, side by
side in one process.

  python bench/model_steps.py                    # both models, 7 timed runs of 20 steps each
  python bench/model_steps.py cnn --runs 9       # one of them

The models, the same in both libraries (shapes, layers, Adam, cross-entropy):
  cnn: the MNIST CNN of examples/mnist_cnn.py (conv 3x3 1->16, BatchNorm, ReLU, 2x2 max pool, conv 16->32, BatchNorm,
       ReLU, pool, linear), batch 64 of 1x28x28 images;
  gpt: two pre-norm transformer blocks (causal attention with 4 heads, a 4x GELU MLP), width 128, 64 tokens,
       vocabulary 256, token and position embeddings, batch 16.
Random batches, a pool of 4 per model. minigrad's step is the examples' TinyJit step (it replays captured kernels
after the first two calls); each timed block ends by reading the loss. The runners alternate block by block, so a
busy moment on the machine hits both. Printed: the host, the Target minigrad compiles for and the ISA torch uses
(`--target`, `--torch-isa`: see `python -m minigrad.bench --help`), each model's median ms per step for both
libraries (with the range over the runs) and minigrad's speed relative to torch's.

  python bench/model_steps.py gpt --target x86-64-v3   # minigrad compiled for AVX2, torch limited to AVX2
"""
from __future__ import annotations
from typing import Callable
import argparse
import itertools
import os
import pathlib
import statistics
import sys
import time
import numpy as np
from minigrad.bench.harness import add_target_arguments, configure_or_exit, header_lines
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "examples"))

Runner = Callable[[int], float]   # run n training steps, return the last loss
BATCHES = 4
CNN_BATCH = 64
GPT = dict(batch=16, tokens=64, width=128, heads=4, blocks=2, vocabulary=256)


def cnn_batches() -> list[tuple[np.ndarray, np.ndarray]]:
  rng = np.random.default_rng(0)
  return [(rng.standard_normal((CNN_BATCH, 1, 28, 28), dtype=np.float32), rng.integers(0, 10, CNN_BATCH).astype(np.int32))
          for _ in range(BATCHES)]


def gpt_batches() -> list[tuple[np.ndarray, np.ndarray]]:
  rng = np.random.default_rng(0)
  text = [rng.integers(0, GPT["vocabulary"], (GPT["batch"], GPT["tokens"] + 1)).astype(np.int32) for _ in range(BATCHES)]
  return [(t[:, :-1].copy(), t[:, 1:].reshape(-1)) for t in text]   # inputs, and each one's next token


# ---------------------------------------------------------------- minigrad

def minigrad_gpt():
  from minigrad import Tensor, nn
  B, T, C, H, V = (GPT[k] for k in ("batch", "tokens", "width", "heads", "vocabulary"))

  class Block:
    def __init__(self):
      self.norm1, self.norm2 = nn.LayerNorm(C), nn.LayerNorm(C)
      self.qkv, self.out = nn.Linear(C, 3 * C), nn.Linear(C, C)
      self.up, self.down = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def __call__(self, x: Tensor) -> Tensor:
      q, k, v = self.qkv(self.norm1(x)).reshape(B, T, 3, H, C // H).permute(2, 0, 3, 1, 4)
      attended = q.scaled_dot_product_attention(k, v, is_causal=True).permute(0, 2, 1, 3).reshape(B, T, C)
      x = x + self.out(attended)
      return x + self.down(self.up(self.norm2(x)).gelu())

  class Model:
    def __init__(self):
      self.tokens, self.positions = nn.Embedding(V, C), nn.Embedding(T, C)
      self.blocks = [Block() for _ in range(GPT["blocks"])]
      self.norm, self.head = nn.LayerNorm(C), nn.Linear(C, V)

    def __call__(self, idx: Tensor) -> Tensor:
      x = self.tokens(idx) + self.positions(Tensor.arange(T))
      for block in self.blocks: x = block(x)
      return self.head(self.norm(x)).reshape(B * T, V)
  return Model()


def minigrad_runner(model_name: str, batches: list[tuple[np.ndarray, np.ndarray]], jit: bool = True) -> Runner:
  from minigrad import Tensor, nn
  from minigrad.nn.state import get_parameters
  from mnist_cnn import CNN
  from training import make_train_step
  Tensor.manual_seed(0)
  model = CNN((1, 28, 28)) if model_name == "cnn" else minigrad_gpt()
  step = make_train_step(model, nn.optim.Adam(get_parameters(model), lr=1e-3), jit=jit)
  cycle = itertools.cycle(batches)

  def run(steps: int) -> float:
    for _ in range(steps):
      x, y = next(cycle)
      loss = step(Tensor.from_numpy(x), Tensor.from_numpy(y))
    return float(loss.item())
  return run


# ---------------------------------------------------------------- torch

def torch_models(model_name: str):
  import torch
  if model_name == "cnn":
    nn = torch.nn
    return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(16, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(32 * 7 * 7, 10))
  B, T, C, H, V = (GPT[k] for k in ("batch", "tokens", "width", "heads", "vocabulary"))

  class Block(torch.nn.Module):
    def __init__(self):
      super().__init__()
      self.norm1, self.norm2 = torch.nn.LayerNorm(C), torch.nn.LayerNorm(C)
      self.qkv, self.out = torch.nn.Linear(C, 3 * C), torch.nn.Linear(C, C)
      self.up, self.down = torch.nn.Linear(C, 4 * C), torch.nn.Linear(4 * C, C)

    def forward(self, x):
      q, k, v = self.qkv(self.norm1(x)).reshape(B, T, 3, H, C // H).permute(2, 0, 3, 1, 4)
      attended = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True).permute(0, 2, 1, 3).reshape(B, T, C)
      x = x + self.out(attended)
      return x + self.down(torch.nn.functional.gelu(self.up(self.norm2(x))))

  class Model(torch.nn.Module):
    def __init__(self):
      super().__init__()
      self.tokens, self.positions = torch.nn.Embedding(V, C), torch.nn.Embedding(T, C)
      self.blocks = torch.nn.ModuleList([Block() for _ in range(GPT["blocks"])])
      self.norm, self.head = torch.nn.LayerNorm(C), torch.nn.Linear(C, V)

    def forward(self, idx):
      x = self.tokens(idx) + self.positions(torch.arange(T))
      for block in self.blocks: x = block(x)
      return self.head(self.norm(x)).reshape(B * T, V)
  return Model()


def torch_runner(model_name: str, batches: list[tuple[np.ndarray, np.ndarray]]) -> Runner:
  import torch
  torch.manual_seed(0)
  model = torch_models(model_name)
  optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
  cycle = itertools.cycle(batches)

  def run(steps: int) -> float:
    for _ in range(steps):
      x, y = next(cycle)
      optimizer.zero_grad()
      loss = torch.nn.functional.cross_entropy(model(torch.from_numpy(x).long() if model_name == "gpt" else torch.from_numpy(x)),
                                               torch.from_numpy(y).long())
      loss.backward()
      optimizer.step()
    return float(loss.item())
  return run


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("models", nargs="*", default=["cnn", "gpt"], help="cnn, gpt or both (default)")
  parser.add_argument("--runs", type=int, default=7, help="timed runs per library (default 7)")
  parser.add_argument("--steps", type=int, default=20, help="training steps per run (default 20)")
  parser.add_argument("--torch-threads", type=int, default=None, help="torch's threads (default: one per core)")
  add_target_arguments(parser)
  args = parser.parse_args()
  if unknown := set(args.models) - {"cnn", "gpt"}: parser.error(f"unknown model(s) {', '.join(sorted(unknown))}: choose cnn, gpt")
  setup = configure_or_exit(parser.prog, args.target, args.torch_isa)   # before anything compiles or imports torch
  import torch
  torch.set_num_threads(args.torch_threads or os.cpu_count() or 1)
  for line in header_lines(setup, torch): print(line)
  for model_name in args.models:
    batches = cnn_batches() if model_name == "cnn" else gpt_batches()
    runners = {"minigrad": minigrad_runner(model_name, batches), "torch": torch_runner(model_name, batches)}
    for run in runners.values(): run(5)   # warm-up: minigrad compiles and captures here
    times: dict[str, list[float]] = {name: [] for name in runners}
    for _ in range(args.runs):
      for name, run in runners.items():
        start = time.perf_counter()
        run(args.steps)
        times[name].append((time.perf_counter() - start) / args.steps * 1e3)
    figures = {name: statistics.median(ms) for name, ms in times.items()}
    cells = ", ".join(f"{name} {figures[name]:.1f} ms/step ({min(times[name]):.1f}-{max(times[name]):.1f})" for name in runners)
    print(f"{model_name}: {cells}; minigrad runs at {figures['torch'] / figures['minigrad']:.2f}x torch's speed")


if __name__ == "__main__":
  main()
