"""Benchmark peers for examples/gpt.py: the same character-level GPT in torch, generating with a hand-written KV-cache
and training with the same loop, side by side with minigrad in one process.

  python bench/gpt_generate.py                      # generation (tokens/s, time to first token) and training steps
  python bench/gpt_generate.py generate --tokens 256
  python bench/gpt_generate.py train --steps 100

Input: examples/gpt.py (its GPT, Generator, train step and sampler) and torch. Output: the host, the Target and torch's
ISA, then per library: tokens/s for --tokens new tokens at batch 1 after a 16-token prompt, the time to the first
token after warm-up, and the milliseconds per training step of nanoGPT's "baby GPT on CPU" (4 layers, 4 heads, width
128, context 64, batch 12, no dropout, AdamW). `python -m minigrad.bench gpt_generate baby_gpt` prints the same
figures in the benchmark table.

The torch model has the minigrad model's weights and structure (pre-LayerNorm blocks, causal attention, GELU MLP,
weight tying). Its generation keeps a (1, heads, context, head size) key and value cache per block: the prompt fills
the first rows in one forward, each new token writes its row `cache[:, :, pos] = k` and attends to `cache[:, :, :pos+1]`
(torch.inference_mode). When the cache is full, both libraries process the last half of the context again as a new
prompt; both sample on the host with examples/gpt.py's `sample` (numpy, seeded), so they generate the same tokens up to
float rounding.
"""
from __future__ import annotations
from typing import Callable, Sequence
import argparse
import math
import pathlib
import statistics
import sys
import time
import numpy as np
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "examples"))
import gpt  # noqa: E402

BABY_GPT = dict(vocab_size=65, context=64, layers=4, heads=4, width=128)   # nanoGPT's shakespeare_char on CPU
TRAIN_BATCH = 12
PROMPT = 16   # tokens before generation starts


def baby_model(seed: int = 0) -> gpt.GPT:
  return gpt.GPT(gpt.GPTConfig(**BABY_GPT), seed=seed)


def torch_gpt(model: gpt.GPT):
  """The same GPT in torch, with the minigrad model's weights: `forward(tokens)` for training, `prefill` and `decode`
  for generation with a KV-cache."""
  import torch
  config = model.config
  heads, head_size = config.heads, config.width // config.heads

  class Block(torch.nn.Module):
    def __init__(self):
      super().__init__()
      self.norm1, self.norm2 = torch.nn.LayerNorm(config.width), torch.nn.LayerNorm(config.width)
      self.qkv, self.proj = torch.nn.Linear(config.width, 3 * config.width), torch.nn.Linear(config.width, config.width)
      self.up, self.down = torch.nn.Linear(config.width, 4 * config.width), torch.nn.Linear(4 * config.width, config.width)

    def _qkv(self, x):
      batch, length, _ = x.shape
      return self.qkv(self.norm1(x)).reshape(batch, length, 3, heads, head_size).permute(2, 0, 3, 1, 4)

    def _finish(self, x, attended):
      batch, _, length, _ = attended.shape
      x = x + self.proj(attended.permute(0, 2, 1, 3).reshape(batch, length, config.width))
      return x + self.down(torch.nn.functional.gelu(self.up(self.norm2(x))))

    def forward(self, x, cache=None):
      q, k, v = self._qkv(x)
      if cache is not None: cache[0][:, :, :x.shape[1]], cache[1][:, :, :x.shape[1]] = k, v
      return self._finish(x, torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True))

    def decode(self, x, cache, pos: int):
      q, k, v = self._qkv(x)
      cache[0][:, :, pos:pos + 1], cache[1][:, :, pos:pos + 1] = k, v   # the new row, in place
      return self._finish(x, torch.nn.functional.scaled_dot_product_attention(q, cache[0][:, :, :pos + 1], cache[1][:, :, :pos + 1]))

  class TorchGPT(torch.nn.Module):
    def __init__(self):
      super().__init__()
      self.token_embedding = torch.nn.Embedding(config.vocab_size, config.width)
      self.position_embedding = torch.nn.Embedding(config.context, config.width)
      self.blocks = torch.nn.ModuleList([Block() for _ in range(config.layers)])
      self.norm = torch.nn.LayerNorm(config.width)
      self.caches = [(torch.zeros(1, heads, config.context, head_size), torch.zeros(1, heads, config.context, head_size))
                     for _ in range(config.layers)]

    def _logits(self, x): return self.norm(x) @ self.token_embedding.weight.T

    def forward(self, tokens):
      x = self.token_embedding(tokens) + self.position_embedding(torch.arange(tokens.shape[1]))
      for block in self.blocks: x = block(x)
      return self._logits(x)

    def prefill(self, prompt: Sequence[int]) -> np.ndarray:
      tokens = torch.tensor([list(prompt)], dtype=torch.long)
      x = self.token_embedding(tokens) + self.position_embedding.weight[:len(prompt)]
      for block, cache in zip(self.blocks, self.caches): x = block(x, cache)
      return self._logits(x[:, -1]).numpy()[0]

    def decode(self, token: int, pos: int) -> np.ndarray:
      x = self.token_embedding.weight[token].reshape(1, 1, -1) + self.position_embedding.weight[pos]
      for block, cache in zip(self.blocks, self.caches): x = block.decode(x, cache, pos)
      return self._logits(x[:, -1]).numpy()[0]

    def generate(self, prompt: Sequence[int], count: int, temperature: float = 1.0, seed: int = 0) -> list[int]:
      """examples/gpt.py's Generator.generate, on this model: the same refill of a full cache, the same sampler."""
      rng, context = np.random.default_rng(seed), config.context
      tokens = list(prompt)
      with torch.inference_mode():
        logits = self.prefill(tokens[-context:])
        position = min(len(tokens), context)
        for index in range(count):
          tokens.append(gpt.sample(logits, temperature, None, rng))
          if index == count - 1: break
          if position == context:
            window = tokens[-gpt.refill_length(context):]
            logits, position = self.prefill(window), len(window)
          else:
            logits = self.decode(tokens[-1], position)
            position += 1
      return tokens[len(prompt):]

  reference = TorchGPT()
  state = {name: torch.from_numpy(tensor.numpy().copy()) for name, tensor in gpt.get_state_dict(model).items()}
  reference.load_state_dict(state)
  return reference


# ---------------------------------------------------------------- generation

def prompt_tokens() -> list[int]:
  return [int(t) for t in np.random.default_rng(7).integers(0, BABY_GPT["vocab_size"], PROMPT)]


def generation_runners(count: int) -> tuple[dict[str, Callable[[], list[int]]], dict[str, Callable[[], float]]]:
  """(library -> generate `count` tokens after the prompt, library -> seconds to the first token), for minigrad
  (Generator with the token and position as Variables) and torch (hand-written KV-cache). Both warm up first."""
  model, prompt = baby_model(), prompt_tokens()
  generator = gpt.Generator(model, symbolic=True)
  runs: dict[str, Callable[[], list[int]]] = {"minigrad": lambda: generator.generate(prompt, count, seed=0)}
  firsts: dict[str, Callable[[], float]] = {"minigrad": lambda: _first_token_seconds(generator.prefill, prompt)}
  try:
    import torch
    torch_model = torch_gpt(model).eval()
    runs["torch"] = lambda: torch_model.generate(prompt, count, seed=0)
    runs["torch-1t"] = one_thread(torch, lambda: torch_model.generate(prompt, count, seed=0))
    def torch_first() -> float:
      with torch.inference_mode(): return _first_token_seconds(torch_model.prefill, prompt)
    firsts["torch"], firsts["torch-1t"] = torch_first, one_thread(torch, torch_first)
  except ImportError: pass
  for run in runs.values(): run()   # warm-up: compiles and captures minigrad's kernels
  return runs, firsts


def one_thread(torch, run: Callable) -> Callable:
  """`run` with torch on one thread (at batch 1 its thread pool costs more than it gives, worst on a busy machine)."""
  def single(*args: object) -> object:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try: return run(*args)
    finally: torch.set_num_threads(threads)
  return single


def _first_token_seconds(prefill: Callable[[Sequence[int]], np.ndarray], prompt: list[int]) -> float:
  start = time.perf_counter()
  gpt.sample(prefill(prompt), 1.0, None, np.random.default_rng(0))
  return time.perf_counter() - start


def median_interleaved(runners: dict[str, Callable[[], object]], rounds: int) -> dict[str, float]:
  """Median seconds of each runner over `rounds` rounds in which the runners take turns."""
  times: dict[str, list[float]] = {name: [] for name in runners}
  for _ in range(rounds):
    for name, run in runners.items():
      time.sleep(0.2)   # torch's threads spin a while after a call
      start = time.perf_counter()
      out = run()
      times[name].append(out if isinstance(out, float) else time.perf_counter() - start)
  return {name: statistics.median(samples) for name, samples in times.items()}


def generation_figures(count: int = 256, rounds: int = 5) -> dict[str, tuple[float, float]]:
  """library -> (tokens/s over `count` new tokens, seconds to the first token), medians of interleaved rounds."""
  runs, firsts = generation_runners(count)
  rates = {name: count / s for name, s in median_interleaved(runs, rounds).items()}
  first = median_interleaved(firsts, 3 * rounds)
  return {name: (rates[name], first[name]) for name in runs}


# ---------------------------------------------------------------- training steps

def training_runners(seed: int = 0) -> dict[str, Callable[[int], float]]:
  """library -> run n training steps of the baby GPT on random windows of a fixed token stream, return the last loss.
  minigrad: examples/gpt.py's TinyJit step (AdamW); torch: the same model, AdamW with the same settings."""
  from minigrad import Tensor
  tokens = np.random.default_rng(seed).integers(0, BABY_GPT["vocab_size"], 20000).astype(np.int32)
  model = baby_model(seed)
  step = gpt.make_train_step(model, gpt.make_optimizer(model, lr=1e-3, weight_decay=0.1))
  rng_minigrad = np.random.default_rng(1)
  def minigrad_steps(n: int) -> float:
    loss = None
    for _ in range(n): loss = step(*(Tensor(a) for a in gpt.random_batch(tokens, TRAIN_BATCH, BABY_GPT["context"], rng_minigrad)))
    return float(loss.item())
  runners: dict[str, Callable[[int], float]] = {"minigrad": minigrad_steps}
  try:
    import torch
    reference = torch_gpt(model)
    optimizer = torch.optim.AdamW(reference.parameters(), lr=1e-3, betas=(0.9, 0.99), weight_decay=0.1)
    rng_torch = np.random.default_rng(1)
    def torch_steps(n: int) -> float:
      for _ in range(n):
        inputs, targets = gpt.random_batch(tokens, TRAIN_BATCH, BABY_GPT["context"], rng_torch)
        optimizer.zero_grad(set_to_none=True)
        logits = reference(torch.from_numpy(inputs).long())
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, BABY_GPT["vocab_size"]), torch.from_numpy(targets).long().reshape(-1))
        loss.backward()
        optimizer.step()
      return float(loss.item())
    runners["torch"] = torch_steps
    runners["torch-1t"] = one_thread(torch, torch_steps)
  except ImportError: pass
  for run in runners.values(): run(3)   # warm-up: minigrad's step is captured by the third call
  return runners


def training_ms_per_step(steps: int = 20, rounds: int = 5) -> dict[str, float]:
  runners = training_runners()
  seconds = median_interleaved({name: (lambda run=run: run(steps) and None) for name, run in runners.items()}, rounds)
  return {name: s / steps * 1e3 for name, s in seconds.items()}


def main() -> None:
  from minigrad.bench.harness import add_target_arguments, configure_or_exit, header_lines
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("parts", nargs="*", default=["generate", "train"], help="generate, train or both (default)")
  parser.add_argument("--tokens", type=int, default=256, help="new tokens per generation (default 256)")
  parser.add_argument("--steps", type=int, default=20, help="training steps per timed run (default 20)")
  parser.add_argument("--rounds", type=int, default=5, help="timed rounds per library, interleaved (default 5)")
  add_target_arguments(parser)
  args = parser.parse_args()
  setup = configure_or_exit("bench/gpt_generate.py", args.target, args.torch_isa)
  import torch
  for line in header_lines(setup, torch): print(line)
  if "generate" in args.parts:
    figures = generation_figures(args.tokens, args.rounds)
    for name, (rate, first) in figures.items(): print(f"generate {args.tokens} tokens, batch 1: {name:8s} {rate:8.1f} tokens/s, first token {first * 1e3:6.2f} ms")
    for peer in ("torch", "torch-1t"):
      if peer in figures:
        print(f"  minigrad/{peer}: {figures['minigrad'][0] / figures[peer][0]:.2f}x tokens/s, first token {figures['minigrad'][1] / figures[peer][1]:.2f}x its time")
  if "train" in args.parts:
    ms = training_ms_per_step(args.steps, args.rounds)
    for name, value in ms.items(): print(f"baby GPT train step (batch {TRAIN_BATCH}): {name:8s} {value:8.2f} ms/step")
    for peer in ("torch", "torch-1t"):
      if peer in ms: print(f"  minigrad/{peer}: {ms[peer] / ms['minigrad']:.2f}x its speed")


if __name__ == "__main__":
  main()
