"""INT8 post-training quantization (minigrad.quantize), side by side in one run: accuracy and speed.

  python bench/quantize.py                     # everything
  python bench/quantize.py --skip-accuracy     # speed only
  python bench/quantize.py --mnist-dir ../shared/datasets/mnist --epochs 2

Input: the host, the MNIST t10k files (--mnist-dir; only t10k is needed: its first 8,000 images train, the last
2,000 test, as the examples' --t10k-split), torch (optional). Output, after the host/Target/torch header:
  accuracy  the MNIST MLP (784-256-128-10) and CNN (examples/) trained briefly in float32, then quantized: test
            accuracy in float32, int8 static (max calibration on 4 training batches), int8 static with the 99.99th
            percentile, int8 dynamic; the CNN's BatchNorm stays float (it follows each Conv2d)
  speed     median times of: a 1024x1024 Linear on 1024 rows and the MLP's inference at batch 128, minigrad float32
            vs minigrad int8 (static and dynamic) vs torch float32 vs torch.ao.quantization.quantize_dynamic of the same
            layer/model; ratios are computed within this run only (the machine is shared: absolute times are noisy)
  GPT       examples/gpt.py's Generator: decode tokens/s, float32 vs weight-only int8 Linears; and the validation
            loss of its default model trained --gpt-steps steps, float32 vs weight-only int8
  kernels   the x86 instructions clang/gcc emitted for the int8 matmul kernel: integer dot products (vpdpbusd,
            vpdpwssd, vpmaddwd, vpmaddubsw) against plain 32-bit multiplies (vpmulld)
minigrad runs are "scheduled once, kernels replayed" (as a TinyJit step) and also "eager" (graph built each call).
"""
from __future__ import annotations
from typing import Any, Callable
import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "examples"))
from minigrad import Tensor, nn  # noqa: E402
from minigrad.bench.harness import _torch, configure_or_exit, header_lines, median_seconds, minigrad_runners, add_target_arguments  # noqa: E402
from minigrad.engine.realize import get_kernel  # noqa: E402
from minigrad.nn.datasets import mnist  # noqa: E402
from minigrad.quantize import quantize  # noqa: E402
from minigrad.runtime.device import Device  # noqa: E402
from minigrad.schedule.scheduler import create_schedule  # noqa: E402

DOT_INSTRUCTIONS = ("vpdpbusd", "vpdpbusds", "vpdpwssd", "vpmaddwd", "vpmaddubsw", "sdot", "vpmulld")


# ---------------------------------------------------------------- accuracy

def train_float(model: Any, images: np.ndarray, labels: np.ndarray, epochs: int, seed: int = 0) -> None:
  from training import batch_indices, make_train_step
  step = make_train_step(model, nn.optim.Adam(nn.state.get_parameters(model), lr=1e-3))
  generator = np.random.default_rng(seed)
  for _ in range(epochs):
    for index in batch_indices(len(images), 128, generator):
      if len(index) == 128: step(Tensor(images[index]), Tensor(labels[index].astype(np.int32)))


def accuracy_rows(mnist_dir: str | None, epochs: int) -> None:
  from training import evaluate, normalize
  from mnist_cnn import CNN
  from mnist_mlp import MLP
  data = mnist(mnist_dir, download=False, t10k_split=True)
  mean, std = 0.1307, 0.3081
  x_train, x_test = (normalize(x, mean, std).reshape(len(x), 1, 28, 28) for x in (data.x_train, data.x_test))
  calibration = [x_train[i:i + 128] for i in range(0, 4 * 128, 128)]
  print(f"accuracy: MNIST t10k split ({len(x_train)} train / {len(x_test)} test images), float32 trained {epochs} epoch(s), batch 128, Adam 1e-3")
  for name, model in (("MLP 784-256-128-10", MLP(784)), ("CNN (examples/mnist_cnn.py)", CNN((1, 28, 28)))):
    Tensor.manual_seed(0)
    start = time.perf_counter()
    train_float(model, x_train, data.y_train, epochs)
    trained = time.perf_counter() - start
    with Tensor.train(False):
      variants = {"float32": model, "int8 static": quantize(model, calibration),
                  "int8 static p99.99": quantize(model, calibration, percentile=99.99), "int8 dynamic": quantize(model, mode="dynamic")}
    scores = {label: evaluate(variant, x_test, data.y_test) for label, variant in variants.items()}
    base = scores["float32"]
    cells = ", ".join(f"{label} {100 * s:.2f}%" + ("" if label == "float32" else f" ({100 * (s - base):+.2f})") for label, s in scores.items())
    print(f"  {name:28s} {cells}   [trained in {trained:.0f} s]", flush=True)


def gpt_loss_row(iterations: int) -> None:
  """examples/gpt.py's default model (4 blocks, width 128, context 64) trained `iterations` steps on Tiny Shakespeare
  (batch 12, AdamW 1e-3), then its validation loss (20 batches) in float32 and with weight-only int8 Linears."""
  import gpt
  Tensor.manual_seed(0)
  text = gpt.load_text(None, download=False)
  tokens = text.encode(text.text)
  split = int(len(tokens) * 0.9)
  train_tokens, val_tokens = tokens[:split], tokens[split:]
  model = gpt.GPT(gpt.GPTConfig(len(text.chars), 64, 4, 4, 128), seed=0)
  step, rng = gpt.make_train_step(model, gpt.make_optimizer(model, 1e-3)), np.random.default_rng(0)
  start = time.perf_counter()
  for _ in range(iterations):
    inputs, targets = gpt.random_batch(train_tokens, 12, 64, rng)
    step(Tensor(inputs), Tensor(targets))
  trained = time.perf_counter() - start
  losses = {label: gpt.evaluate(variant, val_tokens, 12, 64, 20) for label, variant in
            (("float32", model), ("int8 weight-only", quantize(model, mode="weight")))}
  print(f"  GPT (examples/gpt.py defaults, {text.source}, {iterations} steps in {trained:.0f} s): validation loss "
        + ", ".join(f"{label} {loss:.4f}" for label, loss in losses.items())
        + f" ({losses['int8 weight-only'] - losses['float32']:+.4f})", flush=True)


# ---------------------------------------------------------------- speed

def _torch_quantized(torch, module):
  return torch.ao.quantization.quantize_dynamic(module, {torch.nn.Linear}, dtype=torch.qint8)


def speed_rows(runs: int) -> None:
  torch = _torch()
  rng = np.random.default_rng(0)
  print("speed: median ms (lower is better); ratios = other / minigrad int8 static (>1: minigrad int8 faster)")

  def report(title: str, runners: dict[str, Callable[[], object]]) -> None:
    seconds = median_seconds(runners, runs)
    mine = seconds["mg int8 static"]
    cells = ", ".join(f"{name} {1e3 * s:.2f}" for name, s in seconds.items())
    ratios = ", ".join(f"{seconds[name] / mine:.2f}x vs {name}" for name in seconds if name != "mg int8 static")
    print(f"  {title}\n    {cells}\n    int8 static: {ratios}", flush=True)

  # one Linear 1024 -> 1024 on 1024 rows: the matmul 1024^3
  n = 1024
  x_np = rng.standard_normal((n, n)).astype(np.float32)
  Tensor.manual_seed(0)
  layer = nn.Linear(n, n)
  x = Tensor(x_np).realize()
  static, dynamic = quantize(layer, [x_np[:128]]), quantize(layer, mode="dynamic")
  runners: dict[str, Callable[[], object]] = {}
  for label, module in (("f32", layer), ("int8 static", static), ("int8 dynamic", dynamic)):
    built = minigrad_runners(lambda module=module: module(x))
    runners[f"mg {label}"], runners[f"mg {label} eager"] = built["minigrad"], built["eager"]
  if torch is not None:
    t_layer = torch.nn.Linear(n, n)
    t_x = torch.from_numpy(x_np)
    t_q = _torch_quantized(torch, t_layer)
    runners["torch f32"] = lambda: t_layer(t_x)
    runners["torch qdynamic"] = lambda: t_q(t_x)
  with Tensor.no_grad(): report("Linear 1024x1024, 1024 rows (int8 matmul 1024^3)", runners)

  # the MNIST MLP's inference at batch 128
  from mnist_mlp import MLP
  Tensor.manual_seed(0)
  model = MLP(784)
  batch = rng.standard_normal((128, 784)).astype(np.float32)
  xb = Tensor(batch).realize()
  static, dynamic = quantize(model, [batch]), quantize(model, mode="dynamic")
  runners = {}
  for label, variant in (("f32", model), ("int8 static", static), ("int8 dynamic", dynamic)):
    built = minigrad_runners(lambda variant=variant: variant(xb))
    runners[f"mg {label}"], runners[f"mg {label} eager"] = built["minigrad"], built["eager"]
  if torch is not None:
    t_model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    t_q = _torch_quantized(torch, t_model)
    t_batch = torch.from_numpy(batch)
    runners["torch f32"] = lambda: t_model(t_batch)
    runners["torch qdynamic"] = lambda: t_q(t_batch)
  with Tensor.no_grad(): report("MLP 784-256-128-10 inference, batch 128", runners)


def gpt_decode_row(runs: int) -> None:
  """Tokens/s of examples/gpt.py's Generator (TinyJit decode steps, batch 1, KV-cache) for a GPT of width 512 and 4
  blocks, float32 vs weight-only int8 Linears (the embeddings and the tied output layer stay float32)."""
  import gpt
  config = gpt.GPTConfig(vocab_size=65, context=128, layers=4, heads=8, width=512)
  model = gpt.GPT(config, seed=0)
  steps = 32
  runners = {}
  for label, variant in (("f32", model), ("int8 weight-only", quantize(model, mode="weight"))):
    generator = gpt.Generator(variant)
    generator.prefill([1, 2, 3])

    def decode(generator=generator) -> None:
      for position in range(3, 3 + steps): generator.decode(5, position)
    runners[label] = decode
  seconds = median_seconds(runners, runs)
  rates = {label: steps / s for label, s in seconds.items()}
  print(f"  GPT decode (width 512, 4 blocks, context 128, batch 1): " + ", ".join(f"{label} {r:.0f} tokens/s" for label, r in rates.items())
        + f"; int8 weight-only {rates['int8 weight-only'] / rates['f32']:.2f}x f32", flush=True)


# ---------------------------------------------------------------- what the compiler emitted

def instruction_census() -> None:
  """Compile the int8 matmul kernel of a quantized 1024x1024 Linear (the device's compiler and flags) and count the
  dot-product instructions objdump shows in it."""
  device = Device.DEFAULT
  if device not in ("CPU",) or shutil.which("objdump") is None:
    print(f"kernels: instruction census needs DEV=CPU and objdump (device {device})")
    return
  Tensor.manual_seed(0)
  layer = quantize(nn.Linear(1024, 1024), mode="dynamic")
  items, _, _ = create_schedule([layer(Tensor.ones(64, 1024)).uop])
  compiler = Device[device].compiler
  for item in items:
    kernel = get_kernel(item.ast, device)
    if not kernel.name.startswith("r_") or "const int* restrict" not in kernel.source: continue   # the matmul of int32 words
    with tempfile.TemporaryDirectory() as folder:
      path = os.path.join(folder, "kernel.so")
      with open(path, "wb") as f: f.write(compiler.compile(kernel.source))
      listing = subprocess.run(["objdump", "-d", "--no-show-raw-insn", path], capture_output=True, text=True).stdout
    counts = collections.Counter(m.group(1) for m in re.finditer(r"\t(\w+)\s", listing) if m.group(1) in DOT_INSTRUCTIONS)
    found = ", ".join(f"{name} {counts[name]}" for name in DOT_INSTRUCTIONS)
    print(f"kernels: {kernel.name} ({' '.join(compiler.argv)} {' '.join(compiler.flags)}): {found}")


def main(argv: list[str] | None = None) -> None:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--mnist-dir", default=os.path.join(ROOT, "..", "shared", "datasets", "mnist"))
  parser.add_argument("--epochs", type=int, default=1, help="float32 training epochs before quantizing (default 1)")
  parser.add_argument("--runs", type=int, default=7, help="timed runs per block (3 blocks, median)")
  parser.add_argument("--skip-accuracy", action="store_true")
  parser.add_argument("--skip-speed", action="store_true")
  parser.add_argument("--gpt-steps", type=int, default=300, help="GPT training steps before its loss is compared (0: skip)")
  add_target_arguments(parser)
  args = parser.parse_args(argv)
  setup = configure_or_exit("bench/quantize.py", args.target, args.torch_isa)
  for line in header_lines(setup, _torch()): print(line)
  instruction_census()
  if not args.skip_speed:
    speed_rows(args.runs)
    gpt_decode_row(args.runs)
  if not args.skip_accuracy:
    accuracy_rows(args.mnist_dir, args.epochs)
    if args.gpt_steps: gpt_loss_row(args.gpt_steps)


if __name__ == "__main__":
  main()
