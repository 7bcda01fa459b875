"""The benchmarks of `python -m minigrad.bench`: one function per line of its table (see cli.py), each returning the rates
of minigrad (a TinyJit-style replay), minigrad eager, numpy and torch for the same work.

Input: a random generator and the number of timed runs per block. Output: Rates (name -> (rate, unit)); lines to print
under a row go to `detail_lines`. BENCHMARKS names them in the order the table shows them.
"""
from __future__ import annotations
from typing import Callable
import math
import statistics
import time
import numpy as np
from minigrad import Tensor
from minigrad.runtime.device import Device
from minigrad.bench.harness import Rates, Runners, _bench_module, _rates, _step_rates, _torch, median_seconds, minigrad_runners


# ---------------------------------------------------------------- the benchmarks

def bench_matmul(rng: np.random.Generator, runs: int) -> Rates:
  """1024x1024 float32 product, GFLOPS."""
  n = 1024
  a, b = rng.standard_normal((n, n)).astype(np.float32), rng.standard_normal((n, n)).astype(np.float32)
  ta, tb = Tensor(a), Tensor(b)
  runners: Runners = {**minigrad_runners(lambda: ta @ tb), "numpy": lambda: a @ b}
  if torch := _torch():
    xa, xb = torch.from_numpy(a), torch.from_numpy(b)
    runners["torch"] = lambda: xa @ xb
  return _rates(runners, 2 * n ** 3, "GFLOPS", runs)


def bench_elementwise(rng: np.random.Generator, runs: int) -> Rates:
  """A fused chain of elementwise ops on 16M floats, GB/s."""
  x = rng.standard_normal(16 * 1024 * 1024).astype(np.float32)
  tx = Tensor(x)
  runners: Runners = {**minigrad_runners(lambda: (tx.relu() * 2 + 1).exp()), "numpy": lambda: np.exp(np.maximum(x, 0) * 2 + 1)}
  if torch := _torch():
    xt = torch.from_numpy(x)
    runners["torch"] = lambda: (xt.relu() * 2 + 1).exp()
  return _rates(runners, 2 * x.nbytes, "GB/s", runs)


def bench_rowsum(rng: np.random.Generator, runs: int) -> Rates:
  """Sum of each row of a 4096x4096 matrix, GB/s."""
  x = rng.standard_normal((4096, 4096)).astype(np.float32)
  tx = Tensor(x)
  runners: Runners = {**minigrad_runners(lambda: tx.sum(1)), "numpy": lambda: x.sum(1)}
  if torch := _torch():
    xt = torch.from_numpy(x)
    runners["torch"] = lambda: xt.sum(1)
  return _rates(runners, x.nbytes + 4096 * 4, "GB/s", runs)


def bench_softmax(rng: np.random.Generator, runs: int) -> Rates:
  """Softmax over the rows of 4096x1024, GB/s."""
  x = rng.standard_normal((4096, 1024)).astype(np.float32)
  tx = Tensor(x)

  def np_softmax() -> np.ndarray:
    e = np.exp(x - x.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)
  runners: Runners = {**minigrad_runners(lambda: tx.softmax(-1)), "numpy": np_softmax}
  if torch := _torch():
    xt = torch.from_numpy(x)
    runners["torch"] = lambda: xt.softmax(-1)
  return _rates(runners, 2 * x.nbytes, "GB/s", runs)


def bench_conv(rng: np.random.Generator, runs: int) -> Rates:
  """3x3 convolution, 64 -> 64 channels, 32x32 images, batch 32, GFLOPS."""
  x = rng.standard_normal((32, 64, 32, 32)).astype(np.float32)
  w = rng.standard_normal((64, 64, 3, 3)).astype(np.float32)
  tx, tw = Tensor(x), Tensor(w)
  runners: Runners = {**minigrad_runners(lambda: tx.conv2d(tw, padding=1))}
  if torch := _torch():
    xt, wt = torch.from_numpy(x), torch.from_numpy(w)
    runners["torch"] = lambda: torch.nn.functional.conv2d(xt, wt, padding=1)
  return _rates(runners, 2 * 32 * 64 * 32 * 32 * 64 * 9, "GFLOPS", runs)


ATTENTION_SHAPE = (8, 8, 256, 64)   # batch, heads, tokens, head size


def bench_attention(rng: np.random.Generator, runs: int) -> Rates:
  """Causal scaled dot-product attention forward, q, k, v of shape ATTENTION_SHAPE (B, H, T, D), in GFLOPS counting
  2*B*H*T*T*D: the half of the two products' 4*B*H*T*T*D that the causal mask leaves (softmax not counted)."""
  batch, heads, tokens, size = ATTENTION_SHAPE
  q, k, v = (rng.standard_normal(ATTENTION_SHAPE).astype(np.float32) for _ in range(3))
  tq, tk, tv = Tensor(q), Tensor(k), Tensor(v)
  allowed = np.tril(np.ones((tokens, tokens), dtype=bool))   # query i may attend to keys j <= i

  def np_attention() -> np.ndarray:
    scores = np.where(allowed, (q @ k.swapaxes(-1, -2)) * np.float32(1 / math.sqrt(size)), np.float32(-np.inf))
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    return (weights / weights.sum(-1, keepdims=True)) @ v
  runners: Runners = {**minigrad_runners(lambda: tq.scaled_dot_product_attention(tk, tv, is_causal=True)), "numpy": np_attention}
  if torch := _torch():
    xq, xk, xv = torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(v)
    runners["torch"] = lambda: torch.nn.functional.scaled_dot_product_attention(xq, xk, xv, is_causal=True)
  return _rates(runners, 2 * batch * heads * tokens * tokens * size, "GFLOPS", runs)


def bench_mlp(rng: np.random.Generator, runs: int) -> Rates:
  """Training steps of the MLP in bench/mlp_train.py (its TinyJit runner), 20 steps per timed run."""
  mlp_train = _bench_module("mlp_train")
  batches = mlp_train.random_batches(8, 128)
  steppers = {"minigrad": mlp_train.minigrad_runner(batches, 1e-3, jit=True), "eager": mlp_train.minigrad_runner(batches, 1e-3, jit=False)}
  if _torch(): steppers["torch"] = mlp_train.torch_runner(batches, 1e-3)
  return _step_rates(steppers, 20, runs)


def bench_gpt(rng: np.random.Generator, runs: int) -> Rates:
  """Training steps of the small GPT in bench/model_steps.py (minigrad's TinyJit step), 10 steps per timed run."""
  model_steps = _bench_module("model_steps")
  batches = model_steps.gpt_batches()
  steppers = {"minigrad": model_steps.minigrad_runner("gpt", batches), "eager": model_steps.minigrad_runner("gpt", batches, jit=False)}
  if _torch(): steppers["torch"] = model_steps.torch_runner("gpt", batches)
  return _step_rates(steppers, 10, runs)


def bench_small(rng: np.random.Generator, runs: int) -> Rates:
  """Plain calls of small ops, where Python overhead is all there is: add, matmul and softmax of 64x64, an MLP
  784-128-10 forward at batch 32 and .numpy() of a 64x64 product, each 100 calls per timed run. The rate is the
  geometric mean of each case's calls per second; `small_cases` says what each took."""
  a, b = rng.standard_normal((64, 64)).astype(np.float32), rng.standard_normal((64, 64)).astype(np.float32)
  x = rng.standard_normal((32, 784)).astype(np.float32)
  w1, w2 = rng.standard_normal((128, 784)).astype(np.float32) * 0.03, rng.standard_normal((10, 128)).astype(np.float32) * 0.1
  ta, tb, tx, tw1, tw2 = (Tensor(v).realize() for v in (a, b, x, w1, w2))
  cases: dict[str, Runners] = {
    "add": {"eager": lambda: (ta + tb).realize()}, "matmul": {"eager": lambda: (ta @ tb).realize()},
    "softmax": {"eager": lambda: ta.softmax(-1).realize()}, "mlp forward": {"eager": lambda: (tx @ tw1.T).relu().matmul(tw2.T).realize()},
    ".numpy()": {"eager": lambda: (ta * tb).numpy()}}
  if torch := _torch():
    xa, xb, xx, xw1, xw2 = (torch.from_numpy(v) for v in (a, b, x, w1, w2))
    for name, fn in {"add": lambda: xa + xb, "matmul": lambda: xa @ xb, "softmax": lambda: xa.softmax(-1),
                     "mlp forward": lambda: (xx @ xw1.T).relu() @ xw2.T, ".numpy()": lambda: (xa * xb).numpy()}.items():
      cases[name]["torch"] = fn
  calls = 100
  small_cases.clear()
  for name, runners in cases.items():
    def repeated(fn: Callable[[], object]) -> Callable[[], None]:
      def run() -> None:
        for _ in range(calls): fn()
      return run
    seconds = median_seconds({lib: repeated(fn) for lib, fn in runners.items()}, runs)
    small_cases[name] = {lib: s / calls for lib, s in seconds.items()}
  return {lib: (math.exp(statistics.fmean(math.log(1 / case[lib]) for case in small_cases.values())) / 1e3, "kcall/s")
          for lib in next(iter(small_cases.values()))}


def bench_sort(rng: np.random.Generator, runs: int) -> Rates:
  """Stable ascending sort of 1M float32 (values), M elements/s; numpy's np.sort (its default, unstable quicksort:
  what the issue compares with) and torch.sort(stable=True)."""
  x = rng.standard_normal(1 << 20).astype(np.float32)
  tx = Tensor(x).realize()
  runners: Runners = {**minigrad_runners(lambda: tx.sort().values), "numpy": lambda: np.sort(x)}
  if torch := _torch():
    xt = torch.from_numpy(x)
    runners["torch"] = lambda: torch.sort(xt, stable=True)
  return _rates(runners, x.size * 1e3, "Melem/s", runs)


# ---- int8 quantization (minigrad.quantize): int8 figures beside minigrad's float32 ones, timed in the same blocks

def bench_int8_matmul(rng: np.random.Generator, runs: int) -> Rates:
  """1024x1024 int8 x int8 -> int32 product x_q @ w_q.T, GOPS: w_q packed once (as a quantized layer packs its weight),
  x_q's words built on each run (minigrad.quantize.int8_dot) in the layout a quantized layer uses (x_q in its activation
  range: 7 bits for "bytes7"); torch._int_mm. Minigrad's float32 a @ b of the matmul row is timed in the same blocks:
  the detail line gives int8 over float32."""
  from minigrad import dtypes
  from minigrad.quantize.int8_dot import activation_max, activation_words, layout_for, pack_weight, word_matmul
  n, layout = 1024, layout_for(Device.DEFAULT)
  qmax = activation_max(layout)
  x_q, w_q = rng.integers(-qmax, qmax + 1, (n, n)).astype(np.int8), rng.integers(-128, 128, (n, n)).astype(np.int8)
  tx, packed = Tensor(x_q).realize(), pack_weight(Tensor(w_q), layout)
  a, b = Tensor(rng.standard_normal((n, n)).astype(np.float32)).realize(), Tensor(rng.standard_normal((n, n)).astype(np.float32)).realize()
  runners: Runners = {**minigrad_runners(lambda: word_matmul(activation_words(tx.cast(dtypes.int32), packed.layout), packed)),
                      "float32": minigrad_runners(lambda: a @ b)["minigrad"]}
  if torch := _torch():
    xt, wt = torch.from_numpy(x_q), torch.from_numpy(np.ascontiguousarray(w_q.T))
    runners["torch"] = lambda: torch._int_mm(xt, wt)
  rates = _rates(runners, 2 * n ** 3, "GOPS", runs)
  f32 = rates.pop("float32")[0]
  detail_lines["int8_matmul"] = [f"  {'minigrad float32 a @ b, same blocks':46s} {f32:.2f} GFLOPS: int8 {rates['minigrad'][0] / f32:.2f}x, "
                                 f"eager int8 {rates['eager'][0] / f32:.2f}x ({packed.layout} words)"]
  return rates


def bench_int8_mlp(rng: np.random.Generator, runs: int) -> Rates:
  """Inference of the MLP 784-256-128-10 (ReLUs) at batch 128 with int8 dynamic quantization (minigrad.quantize
  mode="dynamic"; torch.ao.quantization.quantize_dynamic), K samples/s. The detail line, same blocks: minigrad's
  float32 inference and its int8 static one (scales calibrated on the batch), torch's float32, torch's int8 dynamic
  on one thread."""
  from minigrad import nn
  from minigrad.quantize import quantize
  Tensor.manual_seed(0)
  layers = [nn.Linear(784, 256), nn.Linear(256, 128), nn.Linear(128, 10)]
  def model(x: Tensor, layers: list = layers) -> Tensor: return layers[2](layers[1](layers[0](x).relu()).relu())
  class MLP:   # the layers quantize() replaces, called as `model` calls them
    def __init__(self): self.layers = layers
    def __call__(self, x: Tensor) -> Tensor: return model(x, self.layers)
  float_model = MLP()
  batch = rng.standard_normal((128, 784)).astype(np.float32)
  xb = Tensor(batch).realize()
  dynamic, static = quantize(float_model, mode="dynamic"), quantize(float_model, [batch])
  runners: Runners = {**minigrad_runners(lambda: dynamic(xb)), "float32": minigrad_runners(lambda: float_model(xb))["minigrad"],
                      "int8 static": minigrad_runners(lambda: static(xb))["minigrad"]}
  if torch := _torch():
    t_model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)).eval()
    t_quantized = torch.ao.quantization.quantize_dynamic(t_model, {torch.nn.Linear}, dtype=torch.qint8)
    t_batch = torch.from_numpy(batch)
    runners["torch"] = lambda: t_quantized(t_batch)
    runners["torch float32"] = lambda: t_model(t_batch)
    threads = torch.get_num_threads()
    def one_thread(model) -> Callable[[], object]:   # torch's threads spin and stall on a busy 2-core machine
      def run() -> object:
        torch.set_num_threads(1)
        try: return model(t_batch)
        finally: torch.set_num_threads(threads)
      return run
    runners["torch 1 thread"] = one_thread(t_quantized)
  with Tensor.no_grad():
    rates = {name: (rate * 1e6, "Ks/s") for name, (rate, _) in _rates(runners, 128, "", runs).items()}   # 1e3 samples/s
  extra = {name: rates.pop(name)[0] for name in ("float32", "int8 static", "torch float32", "torch 1 thread") if name in rates}
  mine = rates["minigrad"][0]
  detail_lines["int8_mlp"] = [f"  {'minigrad float32, same blocks':46s} {extra['float32']:.2f} Ks/s: int8 dynamic {mine / extra['float32']:.2f}x, "
                              f"int8 static {extra['int8 static']:.2f} Ks/s ({extra['int8 static'] / extra['float32']:.2f}x)"
                              + (f"; torch float32 {extra['torch float32']:.2f} Ks/s" if "torch float32" in extra else "")
                              + (f"; torch int8 dynamic on 1 thread {extra['torch 1 thread']:.2f} Ks/s: minigrad {mine / extra['torch 1 thread']:.2f}x"
                                 if "torch 1 thread" in extra else "")]
  return rates


def bench_topk(k: int) -> Callable[[np.random.Generator, int], Rates]:
  """The k largest of 1M float32 (values, sorted), M input elements/s; numpy: np.partition then np.sort of the k,
  torch.topk. np.sort of the whole input is timed in the same blocks: `topk_vs_sort` keeps minigrad's time over it."""
  def bench(rng: np.random.Generator, runs: int) -> Rates:
    x = rng.standard_normal(1 << 20).astype(np.float32)
    tx = Tensor(x).realize()
    runners: Runners = {**minigrad_runners(lambda: tx.topk(k).values),
                        "numpy": lambda: np.sort(np.partition(x, x.size - k)[x.size - k:])[::-1], "np.sort": lambda: np.sort(x)}
    if torch := _torch():
      xt = torch.from_numpy(x)
      runners["torch"] = lambda: torch.topk(xt, k)
    rates = _rates(runners, x.size * 1e3, "Melem/s", runs)
    sort_rate = rates.pop("np.sort")[0]
    topk_vs_sort.clear()
    topk_vs_sort.update({name: sort_rate / rates[name][0] for name in ("minigrad", "eager")})
    return rates
  return bench


topk_vs_sort: dict[str, float] = {}   # the last bench_topk: minigrad's (and eager's) time over np.sort's, same blocks


def bench_gpt_generate(rng: np.random.Generator, runs: int) -> Rates:
  """examples/gpt.py's baby GPT (4 layers, 4 heads, width 128, context 64) generating 256 tokens at batch 1 after a
  16-token prompt, tokens/s: minigrad's Generator (TinyJit, the token and position as Variables, the KV-cache rows
  written at it) against bench/gpt_generate.py's torch model with a hand-written KV-cache, on its default threads
  and on one (`torch-1t`); also the time to the first token after warm-up. Interleaved rounds, medians."""
  gpt_generate = _bench_module("gpt_generate")
  figures = gpt_generate.generation_figures(256, rounds=3)
  details = [f"  {'time to first token (16-token prompt)':46s} " + ", ".join(f"{lib} {first * 1e3:.2f} ms" for lib, (_, first) in figures.items())]
  if "torch-1t" in figures:
    details.append(f"  {'torch on one thread':46s} {figures['torch-1t'][0]:.1f} tokens/s: minigrad {figures['minigrad'][0] / figures['torch-1t'][0]:.2f}x")
  detail_lines["gpt_generate"] = details
  return {lib: (rate, "tok/s") for lib, (rate, _) in figures.items() if lib in ("minigrad", "torch")}


def bench_baby_gpt(rng: np.random.Generator, runs: int) -> Rates:
  """Training steps of nanoGPT's "baby GPT on CPU" (examples/gpt.py: 4 layers, 4 heads, width 128, context 64, batch
  12, AdamW, no dropout): minigrad's TinyJit step against the same model and loop in torch (bench/gpt_generate.py),
  10 steps per timed run."""
  gpt_generate = _bench_module("gpt_generate")
  runners = gpt_generate.training_runners()
  one_thread = runners.pop("torch-1t", None)
  rates = _step_rates(runners, 10, runs)
  if one_thread is not None:
    single = _step_rates({"torch-1t": one_thread}, 10, runs)["torch-1t"][0]
    detail_lines["baby_gpt"] = [f"  {'torch on one thread':46s} {single:.2f} steps/s: minigrad {rates['minigrad'][0] / single:.2f}x"]
  return rates


detail_lines: dict[str, list[str]] = {}   # benchmark -> lines printed under its row (the last run of it)


small_cases: dict[str, dict[str, float]] = {}   # the last bench_small: case -> library -> seconds per call


BENCHMARKS = {"matmul": ("matmul 1024x1024 f32", bench_matmul), "elementwise": ("(x.relu()*2+1).exp() 16M f32", bench_elementwise),
              "rowsum": ("row sum 4096x4096", bench_rowsum), "softmax": ("softmax 4096x1024", bench_softmax),
              "conv": ("conv2d 32x64x32x32, 64 3x3 filters, pad 1", bench_conv),
              "attention": ("causal attention B8 H8 T256 D64, forward", bench_attention),
              "mlp": ("MLP 784-256-128-10 train step, batch 128, Adam", bench_mlp),
              "gpt": ("GPT (2 blocks, width 128) T64 B16 train step", bench_gpt),
              "small": ("small ops, plain calls (geometric mean of 5)", bench_small),
              "sort": ("sort 1M f32, stable", bench_sort),
              "topk10": ("topk k=10 of 1M f32", bench_topk(10)), "topk1000": ("topk k=1000 of 1M f32", bench_topk(1000))}
BENCHMARKS["gpt_generate"] = ("baby GPT generate 256 tokens, batch 1", bench_gpt_generate)
BENCHMARKS["baby_gpt"] = ("baby GPT (4x128, T64) train step, batch 12", bench_baby_gpt)
BENCHMARKS["int8_matmul"] = ("int8 matmul 1024x1024 -> int32 (w packed once)", bench_int8_matmul)
BENCHMARKS["int8_mlp"] = ("MLP 784-256-128-10 int8 dynamic infer, b128", bench_int8_mlp)
