"""A character-level GPT trained on Tiny Shakespeare, and sampling from it with a KV-cache.

  python examples/gpt.py                                      # train (baby-GPT size), evaluate, save, sample 200 chars
  python examples/gpt.py --iters 300 --layers 2 --width 64    # a quick run
  python examples/gpt.py --iters 0 --resume gpt.safetensors --generate 500 --prompt "ROMEO:" --temperature 0.8 --top-k 20
  mpirun -n 2 python examples/gpt.py --distributed            # data-parallel over 2 ranks (pip install -e ".[mpi]")
  DEBUG=1 python examples/gpt.py --iters 0 --resume gpt.safetensors --generate 100   # compiled kernels per token

The model: token + position embeddings, pre-LayerNorm transformer blocks (causal self-attention, a 4x GELU MLP),
a final LayerNorm and an output layer that shares its weights with the token embedding (weight tying). Training
uses AdamW on random windows of the text; the step runs under TinyJit (its kernels are replayed from the third
step on). The loss on a held-out 10% of the text is logged every --eval-interval iterations.

Data-parallel (`--distributed`, under mpirun): --batch-size stays the global batch. Every rank draws the same seeded
start positions of the global batch's windows and takes its own slice of them (rank r: windows r*B..(r+1)*B-1 of
B = batch / ranks), so the ranks train on disjoint shards and, with the mean gradient allreduce between backward and
the AdamW step, follow the single-process run with the same global batch window for window. Validation batches are
shared out among the ranks; the logged losses are means over all ranks. Only rank 0 prints, shows progress, saves the
checkpoint and samples; every rank reads --resume (rank 0's weights are then broadcast, shapes checked).

Input text: --data FILE, else $TINYSHAKESPEARE, else ../shared/datasets/tinyshakespeare/input.txt next to the
repository, else the cached copy ~/.cache/minigrad/tinyshakespeare/input.txt, else a download (md5 checked). Offline
and without the file, one line says so and the model trains on a short sample of text built into
examples/text_data.py (which loads the text).

Generation (`--generate N`): the keys and values of every block sit in one preallocated cache tensor, (layers, 2,
batch, heads, context, head size). The prompt, padded to a quarter, half or all of --context (the first that holds
it; one kernel set each), fills the cache in one pass; then one token per step. A step gets its token and position as
bound Variables (symbolic shapes: nothing is copied in): the embeddings are rows of their tables at them, each block's
new key and value replace the cache row `pos` (`where(row == pos, new, cache)`), and attention reads the rows
`[:pos+1]` only (a symbolic length), so one compiled kernel set serves every token and position
(`Generator(model, symbolic=False)` takes them as tensors and masks all the rows instead). The updated cache is
stored by one kernel per step (tensors don't alias: it writes the cache's next buffer). Both run under TinyJit, so
after the first tokens no kernel is compiled any more (DEBUG>=1 prints the count of compiled kernels after each
token). At generation's small sizes the LayerNorms take their mean and variance from one reduction and the GELU gets
a kernel of its own (training keeps the plain layers). When the cache is full, the last half of the context is
processed again as a new prompt (the position embeddings only go up to --context).
Sampling is seeded (--seed) and happens on the host, with --temperature and --top-k.
"""
from __future__ import annotations
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence
import argparse
import contextlib
import io
import json
import math
import pathlib
import sys
import time
import numpy as np
from tqdm import tqdm
from minigrad import Device, Tensor, TinyJit, Variable, nn
from minigrad import distributed as dist
from minigrad.engine import realize
from minigrad.helpers import DEBUG
from minigrad.nn.state import get_parameters, get_state_dict, load_state_dict, safe_load, safe_metadata, safe_save

import text_data   # the training text: Tiny Shakespeare or the built-in sample (examples/text_data.py)
from text_data import SAMPLE_TEXT, Text, load_text, random_batch  # noqa: F401 (SAMPLE_TEXT: for the tests)


# ---------------------------------------------------------------- model

@dataclass(frozen=True)
class GPTConfig:
  vocab_size: int
  context: int = 64      # the most positions the model sees (and the size of the KV-cache)
  layers: int = 4
  heads: int = 4
  width: int = 128

  def __post_init__(self) -> None:
    for name in ("vocab_size", "context", "layers", "heads", "width"):
      if getattr(self, name) < 1: raise ValueError(f"GPTConfig: {name} must be positive, got {getattr(self, name)}")
    if self.width % self.heads: raise ValueError(f"GPTConfig: width {self.width} must be a multiple of heads {self.heads}")


def _normal(rng: np.random.Generator, shape: tuple[int, ...], std: float) -> Tensor:
  return Tensor((rng.standard_normal(shape) * std).astype(np.float32), requires_grad=True)


def _zeros(shape: tuple[int, ...]) -> Tensor: return Tensor(np.zeros(shape, np.float32), requires_grad=True)


def _linear(rng: np.random.Generator, fan_in: int, fan_out: int, std: float = 0.02) -> nn.Linear:
  """A Linear with GPT-2's initialization: weights ~ N(0, std), bias 0."""
  layer = nn.Linear(fan_in, fan_out)
  layer.weight, layer.bias = _normal(rng, (fan_out, fan_in), std), _zeros((fan_out,))
  return layer


def layer_norm_in_two_kernels(norm: nn.LayerNorm, x: Tensor) -> Tensor:
  """norm(x) over the last axis, with the mean and the variance from one reduction (a kernel) and the normalization in
  a second, where nn.LayerNorm takes four at a decode step's size. The sums are of x minus its row's first element (the
  shifted-data variance: no cancellation when the mean is large next to the spread)."""
  size = x.shape[-1]
  shifted = x - x[..., :1]
  moments = Tensor.stack([shifted, shifted * shifted], -2).sum(-1, keepdim=True) * (1 / size)   # (..., 2, 1)
  mean, mean_square = moments[..., 0, :], moments[..., 1, :]
  normed = (shifted - mean) * (mean_square - mean * mean + norm.eps).rsqrt()
  if norm.weight is not None: normed = normed * norm.weight
  return normed + norm.bias if norm.bias is not None else normed


class Block:
  """x + attention(LayerNorm(x)), then x + MLP(LayerNorm(x)). `__call__` sees the whole sequence; `prefill` also
  returns its keys and values for the cache; `decode` handles one new token against the cache."""
  def __init__(self, config: GPTConfig, rng: np.random.Generator):
    self.heads, self.head_size = config.heads, config.width // config.heads
    residual_std = 0.02 / math.sqrt(2 * config.layers)   # GPT-2: residual projections scaled by depth
    self.norm1, self.norm2 = nn.LayerNorm(config.width), nn.LayerNorm(config.width)
    self.qkv, self.proj = _linear(rng, config.width, 3 * config.width), _linear(rng, config.width, config.width, residual_std)
    self.up, self.down = _linear(rng, config.width, 4 * config.width), _linear(rng, 4 * config.width, config.width, residual_std)

  def _qkv(self, x: Tensor, generating: bool = False) -> tuple[Tensor, Tensor]:
    """(queries (batch, heads, length, head_size), keys and values (2, batch, heads, length, head_size)): views of one
    product. generating: fewer kernels for generation's small sizes (see _finish and layer_norm_in_two_kernels)."""
    batch, length, _ = x.shape
    normed = layer_norm_in_two_kernels(self.norm1, x) if generating else self.norm1(x)
    qkv = self.qkv(normed).reshape(batch, length, 3, self.heads, self.head_size).permute(2, 0, 3, 1, 4)
    return qkv[0], qkv[1:]

  def _finish(self, x: Tensor, attended: Tensor, generating: bool = False) -> Tensor:
    """The attention's projection and the MLP, each added to x. generating: the LayerNorm's statistics in one
    reduction, and the GELU in a kernel of its own between the MLP's two products, where its erf is computed on whole
    vectors (fused after a product it runs one output at a time, and costs more than the product at generation's
    sizes)."""
    batch, _, length, _ = attended.shape
    x = x + self.proj(attended.permute(0, 2, 1, 3).reshape(batch, length, self.heads * self.head_size))
    hidden = self.up(layer_norm_in_two_kernels(self.norm2, x) if generating else self.norm2(x))
    hidden = hidden.contiguous().gelu().contiguous() if generating else hidden.gelu()
    return x + self.down(hidden)

  def __call__(self, x: Tensor) -> Tensor:
    q, kv = self._qkv(x)
    return self._finish(x, q.scaled_dot_product_attention(kv[0], kv[1], is_causal=True))

  def prefill(self, x: Tensor) -> tuple[Tensor, Tensor]:
    """The whole-sequence forward of x (batch, context, width), and its keys and values (2, batch, heads, context,
    head_size): this block's cache."""
    q, kv = self._qkv(x, generating=True)
    return self._finish(x, q.scaled_dot_product_attention(kv[0], kv[1], is_causal=True), generating=True), kv

  def decode(self, x: Tensor, cache: Tensor, new_row: Tensor, visible: Tensor | None = None, end: Variable | None = None) -> tuple[Tensor, Tensor]:
    """One token x (batch, 1, width) against this block's cache (2, batch, heads, context, head_size): its key and value
    go into the row where new_row (context, 1) is True, and it attends to the rows where visible (1, context) is True
    or, given a bound Variable `end`, to the rows [0, end) only (a symbolic length: the attention kernels loop only
    that far, one kernel set for every position). Returns (the output, the cache with the new row)."""
    q, kv = self._qkv(x, generating=True)
    kv = new_row.where(kv, cache)   # the new row (2, batch, heads, 1, size) broadcast over the rows
    keys, values = (kv[0], kv[1]) if end is None else (kv[0][:, :, :end], kv[1][:, :, :end])
    return self._finish(x, q.scaled_dot_product_attention(keys, values, attn_mask=visible), generating=True), kv


class GPT:
  def __init__(self, config: GPTConfig, seed: int = 0):
    rng = np.random.default_rng(seed)
    self.config = config
    self.token_embedding = nn.Embedding(config.vocab_size, config.width)
    self.token_embedding.weight = _normal(rng, (config.vocab_size, config.width), 0.02)
    self.position_embedding = nn.Embedding(config.context, config.width)
    self.position_embedding.weight = _normal(rng, (config.context, config.width), 0.02)
    self.blocks = [Block(config, rng) for _ in range(config.layers)]
    self.norm = nn.LayerNorm(config.width)

  def _logits(self, x: Tensor, generating: bool = False) -> Tensor:
    normed = layer_norm_in_two_kernels(self.norm, x) if generating else self.norm(x)
    return normed @ self.token_embedding.weight.T   # weight tying: the output layer is the token embedding

  def _check_tokens(self, tokens: Tensor) -> None:
    if tokens.ndim != 2 or not 1 <= tokens.shape[1] <= self.config.context:
      raise ValueError(f"GPT: tokens must be (batch, length) with 1 <= length <= context={self.config.context}, got shape {tokens.shape}")

  def __call__(self, tokens: Tensor) -> Tensor:
    """tokens (batch, length) -> logits (batch, length, vocab_size), each position seeing itself and those before."""
    self._check_tokens(tokens)
    x = self.token_embedding(tokens) + self.position_embedding(Tensor.arange(tokens.shape[1]))
    for block in self.blocks: x = block(x)
    return self._logits(x)

  # ---- generation with a KV-cache
  def new_cache(self, batch: int = 1) -> Tensor:
    """The keys and values of every block, (layers, 2, batch, heads, context, head_size), in one tensor (written by one
    kernel per step); rows past the position are garbage."""
    config = self.config
    return Tensor.zeros(config.layers, 2, batch, config.heads, config.context, config.width // config.heads).contiguous().realize()

  def prefill(self, tokens: Tensor, length: Tensor, cache: Tensor) -> Tensor:
    """The forward of a padded prompt, tokens (batch, size) with size <= context, whose first `length` (a 1-element
    int tensor) are real; it fills the cache's first `size` rows (the rows past the prompt are overwritten by the
    later tokens before they are visible). Logits of position length-1 (batch, vocab). One kernel set serves every
    prompt length up to `size`."""
    size, context = tokens.shape[1], self.config.context
    if tokens.ndim != 2 or not 1 <= size <= context:
      raise ValueError(f"GPT.prefill: tokens must be (batch, size) with 1 <= size <= context={context}, padded; got shape {tokens.shape}")
    x, rows = self.token_embedding(tokens) + self.position_embedding.weight[:size], []
    for block in self.blocks:
      x, kv = block.prefill(x)
      rows.append(kv.pad(((0, 0),) * 3 + ((0, context - size), (0, 0))))
    cache.assign(Tensor.stack(rows))
    last = Tensor.arange(size).eq(length - 1).reshape(1, -1, 1)
    return self._logits(last.where(x, 0.0).sum(1), generating=True)

  def decode(self, token: Tensor, position: Tensor, cache: Tensor) -> Tensor:
    """token (batch, 1) at position (a 1-element int tensor) -> its logits (batch, vocab); the cache gains its rows."""
    rows = Tensor.arange(self.config.context)
    new_row, visible = rows.eq(position).reshape(-1, 1), (rows <= position).reshape(1, -1)
    x = self.token_embedding(token) + self.position_embedding(position.reshape(1, 1))
    return self._decode_blocks(x, cache, new_row, visible=visible).reshape(token.shape[0], -1)

  def decode_at(self, token: Variable, position: Variable, cache: Tensor) -> Tensor:
    """decode with the token and its position as bound Variables (batch 1; nothing is copied in): the embeddings are
    rows of their tables at those Variables (windows at a symbolic start), each block writes its cache row at
    `position` and attends to the rows up to it (a symbolic length), so one kernel set serves every token and
    position, with no mask. Logits (1, vocab)."""
    if cache.shape[2] != 1: raise ValueError(f"GPT.decode_at: the cache must be of batch 1, got shape {cache.shape}")
    x = self.token_embedding.weight[token:token + 1] + self.position_embedding.weight[position:position + 1]
    new_row = _row_mask(position, self.config.context).reshape(-1, 1)
    return self._decode_blocks(x.reshape(1, 1, -1), cache, new_row, end=position + 1).reshape(1, -1)

  def _decode_blocks(self, x: Tensor, cache: Tensor, new_row: Tensor, **attend: Any) -> Tensor:
    rows = []
    for index, block in enumerate(self.blocks):
      x, kv = block.decode(x, cache[index], new_row, **attend)
      rows.append(kv)
    cache.assign(Tensor.stack(rows))
    return self._logits(x, generating=True)


def _row_mask(position: Variable, context: int) -> Tensor:
  """The bool tensor (context,) that is True at `position` only, a bound Variable in [0, context): the window of an
  arange starting at context - position holds i + context - position at i, equal to context exactly at i = position."""
  return Tensor.arange(2 * context)[context - position:2 * context - position].eq(context)


class Generator:
  """Samples from a GPT, batch 1: the prompt in one pass, then one token per step against the KV-cache. Both run
  under TinyJit with fixed shapes (the prompt padded to one of `prefill_sizes`), so after the first few tokens they
  only replay kernels. With `symbolic`, a decode step gets its token and position as Variables (symbolic shapes: the same
  kernels for every position, no tensor copied in): it writes the cache row at that position and attends to the rows
  up to it, instead of rewriting the cache with a mask from a position tensor and attending to all of it."""
  def __init__(self, model: GPT, symbolic: bool = False):
    self.model, self.cache, self.symbolic = model, model.new_cache(1), symbolic
    # the token and position of a symbolic decode step (made only when used: the first Variable turns symbolic checks on)
    if symbolic: self.token, self.position = Variable("token", 0, model.config.vocab_size - 1), Variable("pos", 0, model.config.context - 1)
    # prompts are padded to the first of these sizes that holds them (a capture of prefill_step each): a short prompt
    # runs kernels a quarter of the context's size
    context = model.config.context
    self.prefill_sizes, self.sizes_run = sorted({max(1, context // 4), max(1, context // 2), context}), set()
    self.prefill_step = TinyJit(lambda tokens, length: model.prefill(tokens, length, self.cache).realize())
    if symbolic: self.decode_step = TinyJit(lambda token, position: model.decode_at(token, position, self.cache).realize())
    else: self.decode_step = TinyJit(lambda token, position: model.decode(token, position, self.cache).realize())
    self.kernel_counts: list[int] = []   # len(compiled_kernels) after each generated token
    self.token_times: list[float] = []   # time.perf_counter() when each token was sampled

  def prefill(self, prompt: Sequence[int]) -> np.ndarray:
    """Fill the cache with a prompt of 1..context tokens; the logits after its last token (vocab,)."""
    context = self.model.config.context
    if not 1 <= len(prompt) <= context: raise ValueError(f"prefill: the prompt must have 1 to {context} tokens, got {len(prompt)}")
    size = next(size for size in self.prefill_sizes if size >= len(prompt))
    refill = next(size for size in self.prefill_sizes if size >= refill_length(context))
    if refill not in self.sizes_run:   # compile the size of generate's refills now, not mid-generation
      self.sizes_run.add(refill)
      if size != refill: self.prefill_step(Tensor(np.zeros((1, refill), np.int32)), Tensor(np.array([1], np.int32)))
    padded = np.zeros((1, size), np.int32)
    padded[0, :len(prompt)] = prompt
    return self.prefill_step(Tensor(padded), Tensor(np.array([len(prompt)], np.int32))).numpy()[0]

  def decode(self, token: int, position: int) -> np.ndarray:
    """Process `token` at `position` (the cache holds the tokens before it); its logits (vocab,)."""
    if self.symbolic: return self.decode_step(self.token.bind(int(token)), self.position.bind(position)).numpy()[0]
    return self.decode_step(Tensor(np.array([[token]], np.int32)), Tensor(np.array([position], np.int32))).numpy()[0]

  def logits_for(self, tokens: Sequence[int], prompt_length: int = 1) -> list[np.ndarray]:
    """The logits after each token from the prompt's last on: the prompt in one prefill, the rest one decode step
    each. The tests compare them with the no-cache forward."""
    out = [self.prefill(tokens[:prompt_length])]
    for position in range(prompt_length, len(tokens)): out.append(self.decode(tokens[position], position))
    return out

  def generate(self, prompt: Sequence[int], count: int, temperature: float = 1.0, top_k: int | None = None,
               seed: int = 0, progress: bool = False) -> list[int]:
    """`count` new tokens after `prompt` (a nonempty list of token ids), sampled with numpy's seeded generator."""
    if not prompt: raise ValueError("generate: the prompt must have at least one token")
    rng, context = np.random.default_rng(seed), self.model.config.context
    tokens = list(prompt)
    logits = self.prefill(tokens[-context:])
    position = min(len(tokens), context)
    for index in tqdm(range(count), desc="generating", unit="token", disable=not progress, leave=False):
      tokens.append(sample(logits, temperature, top_k, rng))
      self.token_times.append(time.perf_counter())
      self.kernel_counts.append(len(realize.compiled_kernels))
      if DEBUG >= 1: print(f"token {index + 1}/{count}: {self.kernel_counts[-1]} compiled kernels")
      if index == count - 1: break
      if position == context:   # the cache is full: the last half of the context becomes a new prompt
        window = tokens[-refill_length(context):]
        logits, position = self.prefill(window), len(window)
      else:
        logits = self.decode(tokens[-1], position)
        position += 1
    return tokens[len(prompt):]


def refill_length(context: int) -> int:
  """The tokens generate keeps as the new prompt when the cache is full: the last half of the context."""
  return max(1, context // 2)


def sample(logits: np.ndarray, temperature: float, top_k: int | None, rng: np.random.Generator) -> int:
  """One token id from logits (vocab,): argmax at temperature 0, else softmax(logits / temperature) over the top_k."""
  if temperature == 0: return int(np.argmax(logits))
  scaled = logits.astype(np.float64) / temperature
  if top_k is not None and top_k < len(scaled): scaled[scaled < np.sort(scaled)[-top_k]] = -np.inf
  probabilities = np.exp(scaled - scaled.max())
  return int(rng.choice(len(scaled), p=probabilities / probabilities.sum()))


# ---------------------------------------------------------------- training

def make_optimizer(model: GPT, lr: float, weight_decay: float = 0.1) -> nn.optim.Optimizer:
  return nn.optim.AdamW(get_parameters(model), lr=lr, betas=(0.9, 0.99), weight_decay=weight_decay)


def loss_of(model: GPT, inputs: Tensor, targets: Tensor) -> Tensor:
  logits = model(inputs)
  return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def make_train_step(model: GPT, optimizer: nn.optim.Optimizer, jit: bool = True, allreduce: bool = False):
  """step(inputs, targets) -> the batch's loss before the update; TinyJit replays its kernels from the third call on.
  allreduce: average the gradients over the ranks of the MPI job before the update (minigrad.distributed)."""
  def step(inputs: Tensor, targets: Tensor) -> Tensor:
    with Tensor.train():
      loss = loss_of(model, inputs, targets)
      optimizer.zero_grad()
      loss.backward()
      if allreduce: dist.allreduce_gradients(optimizer.params, realize_with=[loss])   # realizes like the line below, then the mean
      else: Tensor.realize(loss, *[p.grad for p in optimizer.params if p.grad is not None])   # one schedule for forward and backward
      optimizer.step()
    return loss
  return TinyJit(step) if jit else step


def evaluate(model: GPT, tokens: np.ndarray, batch_size: int, context: int, batches: int, seed: int = 1234,
             world: dist.World = dist.World()) -> float:
  """Mean loss over `batches` random windows of `tokens` (the same windows at every call), without gradients. In a
  data-parallel run rank r computes batches r, r + ranks, ... and the sum is reduced over the ranks."""
  rng = np.random.default_rng(seed)
  with Tensor.no_grad():
    windows = [random_batch(tokens, batch_size, context, rng) for _ in range(batches)]   # all drawn: the same rng stream
    losses = [loss_of(model, *(Tensor(a) for a in batch)).item() for batch in windows[world.rank::world.size]]
  return float(dist.allreduce(float(np.sum(losses)), "sum")) / batches if world.launched else float(np.mean(losses))


@dataclass
class RunResult:
  text: Text
  model: GPT
  train_losses: list[float] = field(default_factory=list)
  val_losses: list[tuple[int, float]] = field(default_factory=list)   # (iteration, loss)
  train_seconds: float = 0.0
  sample: str = ""
  tokens_per_second: float = 0.0
  kernel_counts: list[int] = field(default_factory=list)


# ---------------------------------------------------------------- command line

def positive_int(text: str) -> int:
  value = int(text)
  if value < 1: raise argparse.ArgumentTypeError(f"expected a positive integer, got {text}")
  return value


def non_negative_int(text: str) -> int:
  value = int(text)
  if value < 0: raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text}")
  return value


def non_negative_float(text: str) -> float:
  value = float(text)
  if not value >= 0: raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text}")
  return value


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--data", default=None, metavar="FILE", help="train on this text file (default: Tiny Shakespeare, see above)")
  parser.add_argument("--iters", type=non_negative_int, default=2000, help="training iterations (default 2000; 0 with --resume to only sample)")
  parser.add_argument("--batch-size", type=positive_int, default=12, help="windows per batch (default 12)")
  parser.add_argument("--context", type=positive_int, default=64, help="tokens per window, and the KV-cache size (default 64)")
  parser.add_argument("--layers", type=positive_int, default=4, help="transformer blocks (default 4)")
  parser.add_argument("--heads", type=positive_int, default=4, help="attention heads (default 4)")
  parser.add_argument("--width", type=positive_int, default=128, help="embedding width (default 128)")
  parser.add_argument("--lr", type=non_negative_float, default=1e-3, help="AdamW learning rate (default 1e-3)")
  parser.add_argument("--weight-decay", type=non_negative_float, default=0.1, help="AdamW weight decay (default 0.1)")
  parser.add_argument("--eval-interval", type=positive_int, default=250, help="iterations between validation losses (default 250)")
  parser.add_argument("--eval-batches", type=positive_int, default=20, help="batches per validation loss (default 20)")
  parser.add_argument("--seed", type=int, default=0, help="seed of the initial weights, the batches and the sampling (default 0)")
  parser.add_argument("--checkpoint", default="gpt.safetensors", metavar="PATH", help="save the trained model here ('' to skip; default gpt.safetensors)")
  parser.add_argument("--resume", default=None, metavar="PATH", help="start from a checkpoint this example saved (its sizes and vocabulary win)")
  parser.add_argument("--generate", "--sample-tokens", dest="generate", type=non_negative_int, default=200, metavar="N",
                      help="characters to sample after training (default 200; 0 for none)")
  parser.add_argument("--prompt", default="\n", help="text the sample starts from (default a newline)")
  parser.add_argument("--temperature", type=non_negative_float, default=1.0, help="sampling temperature, 0 for the most likely token (default 1)")
  parser.add_argument("--top-k", type=positive_int, default=None, help="sample among the k most likely tokens only")
  parser.add_argument("--plot", default=None, metavar="PATH.png", help="save the loss curves (needs matplotlib)")
  parser.add_argument("--no-download", action="store_true", help="never download the text")
  parser.add_argument("--distributed", action="store_true",
                      help="data-parallel training over the ranks of an MPI job (mpirun -n 2 python examples/gpt.py --distributed): "
                           "--batch-size is the global batch, split among the ranks; only rank 0 logs, saves and samples")
  args = parser.parse_args(argv)
  if args.width % args.heads: parser.error(f"--width {args.width} must be a multiple of --heads {args.heads}")
  if args.resume and not pathlib.Path(args.resume).is_file(): parser.error(f"--resume: no such file {args.resume}")
  if args.iters == 0 and not args.resume: print("note: --iters 0 without --resume samples from an untrained model")
  return args


def load_checkpoint(path: str) -> tuple[GPT, str]:
  """A model and its vocabulary from a checkpoint written by save_checkpoint."""
  metadata = safe_metadata(path)
  if "gpt_config" not in metadata: raise ValueError(f"{path} is not a checkpoint of examples/gpt.py (no gpt_config in its metadata)")
  model = GPT(GPTConfig(**json.loads(metadata["gpt_config"])))
  load_state_dict(model, safe_load(path))
  return model, json.loads(metadata["vocabulary"])


def save_checkpoint(model: GPT, text: Text, path: str, extra: dict[str, str]) -> None:
  pathlib.Path(path).parent.mkdir(parents=True, exist_ok=True)
  safe_save(get_state_dict(model), path, {"model": "gpt", "gpt_config": json.dumps(asdict(model.config)),
                                          "vocabulary": json.dumps(text.chars), "dataset": text.source, **extra})


def run(argv: Sequence[str] | None = None) -> RunResult:
  args = parse_args(argv)
  world = dist.init() if args.distributed else dist.World()   # World(): one process, MPI untouched
  if args.batch_size % world.size: raise ValueError(f"--batch-size {args.batch_size} doesn't divide among {world.size} ranks")
  if world.is_main: return train_and_sample(args, world)
  args.generate, args.plot = 0, None   # rank 0 samples and plots; the other ranks' prints are dropped
  with contextlib.redirect_stdout(io.StringIO()): return train_and_sample(args, world)


def train_and_sample(args: argparse.Namespace, world: dist.World) -> RunResult:
  if args.plot and not _matplotlib_available():
    print("--plot: matplotlib is not installed (pip install matplotlib); no plot will be written")
    args.plot = None
  Tensor.manual_seed(args.seed)
  text = load_text(args.data, download=not args.no_download)
  if args.resume:
    model, chars = load_checkpoint(args.resume)
    text = Text(text.text, text.source, chars)
    print(f"resumed {args.resume}: {model.config}")
  else: model = GPT(GPTConfig(len(text.chars), args.context, args.layers, args.heads, args.width), seed=args.seed)
  if world.launched: dist.broadcast_parameters(get_state_dict(model))   # rank 0's weights everywhere, shapes checked
  config = model.config
  tokens = text.encode(text.text)
  split = int(len(tokens) * 0.9)
  train_tokens, val_tokens = tokens[:split], tokens[split:]
  parameters = sum(math.prod(p.shape) for p in get_parameters(model))
  print(f"gpt: {text.source}: {len(train_tokens):,} training / {len(val_tokens):,} validation characters, vocabulary {config.vocab_size}; "
        f"{config.layers} layers, {config.heads} heads, width {config.width}, context {config.context}: {parameters:,} parameters; "
        f"device {Device.DEFAULT}" + (f"; batch {args.batch_size} = {world.size} ranks x {args.batch_size // world.size}" if world.launched else ""))
  result = RunResult(text, model)

  if args.iters:
    eval_context = min(config.context, len(val_tokens) - 1)
    optimizer = make_optimizer(model, args.lr, args.weight_decay)
    step, rng = make_train_step(model, optimizer, allreduce=world.launched), np.random.default_rng(args.seed)
    started, reduced = time.perf_counter(), 0   # train_losses[:reduced] are means over the ranks already
    with tqdm(range(1, args.iters + 1), desc="training", unit="iter", dynamic_ncols=True, disable=not world.is_main,
              mininterval=0.1 if sys.stderr.isatty() else 10.0) as bar:
      for iteration in bar:
        inputs, targets = random_batch(train_tokens, args.batch_size // world.size, config.context, rng, world.rank, world.size)
        result.train_losses.append(float(step(Tensor(inputs), Tensor(targets)).item()))
        bar.set_postfix(loss=f"{result.train_losses[-1]:.4f}", refresh=False)   # this rank's shard's loss
        if iteration % args.eval_interval == 0 or iteration == args.iters:
          if world.launched: result.train_losses[reduced:] = dist.allreduce(result.train_losses[reduced:], "mean").tolist()
          reduced = len(result.train_losses)
          result.val_losses.append((iteration, evaluate(model, val_tokens, args.batch_size, eval_context, args.eval_batches, world=world)))
          recent = float(np.mean(result.train_losses[-args.eval_interval:]))
          tqdm.write(f"iter {iteration}: train loss {recent:.4f}, val loss {result.val_losses[-1][1]:.4f} "
                     f"({time.perf_counter() - started:.1f} s)")
    result.train_seconds = time.perf_counter() - started
    print(f"trained {args.iters} iterations of batch {args.batch_size} in {result.train_seconds:.1f} s: "
          f"loss {result.train_losses[0]:.4f} -> val {result.val_losses[-1][1]:.4f}")
    if args.checkpoint and world.is_main:
      save_checkpoint(model, text, args.checkpoint, {"val_loss": f"{result.val_losses[-1][1]:.4f}", "iterations": str(args.iters)})
      print(f"saved {args.checkpoint}")
    if world.launched: dist.barrier()   # the checkpoint is complete before any rank goes on (e.g. to resume from it)
    if args.plot: plot_losses(result, args.plot)

  if args.generate:
    generator = Generator(model, symbolic=True)   # attention over the cache rows up to the position (symbolic shapes)
    prompt = list(text.encode(args.prompt)) or [0]
    started = time.perf_counter()
    new_tokens = generator.generate(prompt, args.generate, args.temperature, args.top_k, args.seed, progress=True)
    times, counts = generator.token_times, generator.kernel_counts
    result.sample, result.kernel_counts = text.decode(new_tokens), counts
    print(f"--- sample ({len(new_tokens)} characters, temperature {args.temperature}, top-k {args.top_k}, seed {args.seed}) ---")
    print(args.prompt + result.sample)
    line = f"--- first token after {times[0] - started:.2f} s (compiling included)"
    if len(times) > 4:   # the decode step is captured by its second call: time the tokens after the third
      result.tokens_per_second = (len(times) - 3) / (times[-1] - times[2])
      line += f"; then {result.tokens_per_second:.0f} tokens/s"
    print(f"{line}; compiled kernels: {counts[0]} after the first token, {counts[min(2, len(counts) - 1)]} after the third, "
          f"{counts[-1]} after the last")
  return result


def _matplotlib_available() -> bool:
  try: import matplotlib  # noqa: F401
  except ImportError: return False
  return True


def plot_losses(result: RunResult, path: str) -> None:
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  figure, axes = plt.subplots(figsize=(6, 4))
  axes.plot(range(1, len(result.train_losses) + 1), result.train_losses, alpha=0.5, label="train (per batch)")
  axes.plot(*zip(*result.val_losses), marker="o", label="validation")
  axes.set(xlabel="iteration", ylabel="cross-entropy", title=f"gpt on {result.text.source}")
  axes.legend()
  figure.tight_layout()
  pathlib.Path(path).parent.mkdir(parents=True, exist_ok=True)
  figure.savefig(path, dpi=100)
  plt.close(figure)
  print(f"saved the curves to {path}")


def main(argv: Sequence[str] | None = None) -> int:
  try: run(argv)
  except (ValueError, FileNotFoundError) as error:
    print(f"error: {error}", file=sys.stderr)
    return 2
  return 0


if __name__ == "__main__": sys.exit(main())
