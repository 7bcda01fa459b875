"""minigrad's speed, side by side with numpy and torch, in one process, for one CPU Target.

  python -m minigrad.bench                          # all benchmarks, compiled for this CPU (-march=native)
  python -m minigrad.bench matmul attention         # some of them
  python -m minigrad.bench --target x86-64-v3       # minigrad compiled for AVX2, torch limited to AVX2
  python -m minigrad.bench --runs 15                # more timed runs each

Input: the machine, the Target (--target, else $CPU_TARGET, else native) and the ISA torch may use (--torch-isa,
else $ATEN_CPU_CAPABILITY, else the one matching the Target). Output: a header naming the host (CPU model, cores,
ISA flags, load average), the Target minigrad compiles for and the ISA torch reports using, then one line per
benchmark with the median rate of minigrad (scheduled once, as a TinyJit replay), minigrad eager (each call builds,
schedules and runs the graph, as a plain call does), numpy and torch, and minigrad's ratios to them.

torch is limited to the Target's ISA before it is imported: ATEN_CPU_CAPABILITY (its own kernels: elementwise,
reductions, softmax, attention) is avx512 for a Target with AVX-512 F/BW/VL/DQ, avx2 for one with AVX2 and FMA, else
default; when that is narrower than the host's, MKL (matmul) and oneDNN (conv) get the same limit
(MKL_ENABLE_INSTRUCTIONS, ONEDNN_MAX_CPU_ISA). Variables the user set already are kept (an explicit --torch-isa
replaces $ATEN_CPU_CAPABILITY). The header prints what torch, MKL and oneDNN report they use. numpy is not limited:
it is imported with minigrad, and its SIMD dispatch and OpenBLAS pick the host's ISA.

Method: each figure is the median of 3 blocks of >= 7 timed runs after warm-up; each library runs each block on its
own, after a pause (numpy's and torch's threads spin for a while after a call and would slow the next library down),
and the libraries take turns block by block. On a busy machine (see the load average) the figures are unreliable.
minigrad runs are synchronized (the result is realized) and the compile happens during warm-up: the graph is
scheduled once and its kernels run each time, as a captured (TinyJit) step would. Rates count what the op must do at
least: GFLOPS for matmul/conv (2*M*N*K) and for causal attention (2*B*H*T*T*D: half of the 4*B*H*T*T*D of its two
products, the half a causal mask leaves; softmax not counted), GB/s as one read of each input plus one write of the
output. The training steps (MLP of bench/mlp_train.py, GPT of bench/model_steps.py, from a source checkout) run
minigrad's TinyJit step and the same step in a plain loop (eager); a timed run is a number of steps ending with the
loss read back. "small" times plain calls of small ops, where the Python work is the cost (see bench_small).
"""
from __future__ import annotations
from dataclasses import dataclass
from typing import Callable, Mapping
import argparse
import ctypes
import importlib
import math
import os
import platform
import re
import statistics
import sys
import tempfile
import time
import numpy as np
from minigrad import Tensor
from minigrad.engine.realize import run_schedule
from minigrad.runtime.device import Device
from minigrad.schedule.scheduler import create_schedule
from minigrad.target import X86_ARCHS, Target, cpu_model, cpu_target, ensure_runnable, host_cores, host_features

Runners = dict[str, Callable[[], object]]   # name (minigrad, numpy, torch) -> one run
Rates = dict[str, tuple[float, str]]        # name -> (rate, unit)

# ---------------------------------------------------------------- the Target, and torch's ISA to match it

TARGET_HELP = "native, x86-64-v4, x86-64-v3, x86-64, or any -march name the C compiler accepts"
TORCH_ISAS = ("default", "avx2", "avx512", "sve256")   # values of ATEN_CPU_CAPABILITY
X86_TORCH_LEVELS = ("default", "avx2", "avx512")       # narrowest first
TORCH_AVX512_FEATURES = frozenset({"avx512f", "avx512bw", "avx512vl", "avx512dq", "fma"})   # what ATen's avx512 needs
TORCH_AVX2_FEATURES = frozenset({"avx2", "fma"})
# the limits for the libraries torch calls, at each ATen level: MKL (matmul) and oneDNN (conv)
LIBRARY_LIMITS = {"default": {"MKL_ENABLE_INSTRUCTIONS": "SSE4_2", "ONEDNN_MAX_CPU_ISA": "SSE41"},
                  "avx2": {"MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
                  "avx512": {"MKL_ENABLE_INSTRUCTIONS": "AVX512", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE"}}
# the host's ISA features a report shows (the rest of Target.features are details)
REPORTED_FEATURES = ("sse4.2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512vnni",
                     "avx512bf16", "avx512fp16", "avxvnni", "amx-tile", "neon", "fullfp16", "dotprod", "i8mm", "bf16",
                     "sve", "sve2")


def torch_capability_for(target: Target) -> str:
  """The ATEN_CPU_CAPABILITY that lets torch's kernels use what `target`'s code may use, and no more: "avx512" with
  AVX-512 F, BW, VL, DQ (and FMA), "avx2" with AVX2 and FMA, "sve256" on aarch64 with SVE, else "default"."""
  if target.arch in X86_ARCHS:
    if TORCH_AVX512_FEATURES <= target.features: return "avx512"
    if TORCH_AVX2_FEATURES <= target.features: return "avx2"
    return "default"
  return "sve256" if target.arch == "aarch64" and "sve" in target.features else "default"


@dataclass(frozen=True)
class TorchIsa:
  """The ISA torch is limited to: `capability` (ATEN_CPU_CAPABILITY), why it was chosen, and the environment
  variables to set before torch is imported (ATen's, and MKL's and oneDNN's when the limit is below the host)."""
  capability: str
  reason: str
  environment: tuple[tuple[str, str], ...]


def choose_torch_isa(target: Target, host: Target, override: str | None = None,
                     environ: Mapping[str, str] | None = None) -> TorchIsa:
  """torch's ISA for a run of minigrad compiled for `target` on `host`: `override` (--torch-isa), else the user's
  $ATEN_CPU_CAPABILITY, else `torch_capability_for(target)`. MKL and oneDNN are limited too when that level is below
  the host's (x86 only); their variables already in `environ` (default: os.environ) are kept, and listed."""
  environ = os.environ if environ is None else environ
  if override: capability, reason = override.strip().lower(), "--torch-isa"
  elif environ.get("ATEN_CPU_CAPABILITY", "").strip():
    capability, reason = environ["ATEN_CPU_CAPABILITY"].strip().lower(), "set in the environment"
  else: capability, reason = torch_capability_for(target), f"matches -march={target.march}"
  settings = {"ATEN_CPU_CAPABILITY": capability}
  host_level = torch_capability_for(host)
  if host.arch in X86_ARCHS and capability in X86_TORCH_LEVELS and host_level in X86_TORCH_LEVELS and \
     X86_TORCH_LEVELS.index(capability) < X86_TORCH_LEVELS.index(host_level):
    settings.update(LIBRARY_LIMITS[capability])
  for name in LIBRARY_LIMITS["default"]:   # the user's own limits for MKL and oneDNN stay (and are shown)
    if environ.get(name, "").strip(): settings[name] = environ[name].strip()
  return TorchIsa(capability, reason, tuple(settings.items()))


def limit_torch(isa: TorchIsa) -> None:
  """Set `isa`'s environment variables; torch reads them when it is imported, so it must not be imported yet."""
  if "torch" in sys.modules:
    raise RuntimeError("torch was imported before its ISA was chosen: ATEN_CPU_CAPABILITY would have no effect")
  os.environ.update(dict(isa.environment))


def select_target(name: str | None) -> Target:
  """Make minigrad compile for the march `name` (sets $CPU_TARGET; None keeps $CPU_TARGET, else native) and return
  the Target its default device compiles for. ValueError for a march the C compiler doesn't know, RuntimeError for
  one this CPU can't run, or when the device was opened for another march before."""
  if name is not None:
    if not name.strip(): raise ValueError(f"--target needs a name: {TARGET_HELP}")
    os.environ["CPU_TARGET"] = name.strip()
  target = cpu_target()
  ensure_runnable(target)
  compiled_for = getattr(Device[Device.DEFAULT].compiler, "target", None)   # CPU and LLVM compile for a Target
  if compiled_for is not None and compiled_for.march != target.march:
    raise RuntimeError(f"the {Device.DEFAULT} device compiles for -march={compiled_for.march}, not {target.march}: it was "
                       f"opened before the target was chosen")
  return compiled_for or target


@dataclass(frozen=True)
class BenchSetup:
  """What a benchmark run compares: minigrad compiled for `target`, torch limited to `torch_isa`."""
  target: Target
  torch_isa: TorchIsa


def configure(target_name: str | None = None, torch_isa: str | None = None) -> BenchSetup:
  """Choose the Target and torch's ISA before anything compiles or torch is imported (see `select_target`,
  `choose_torch_isa`)."""
  target = select_target(target_name)
  isa = choose_torch_isa(target, Target(platform.machine(), "native", host_features()), torch_isa)
  limit_torch(isa)
  return BenchSetup(target, isa)


def configure_or_exit(prog: str, target_name: str | None = None, torch_isa: str | None = None) -> BenchSetup:
  """`configure`, or exit with a one-line message naming the problem (an unknown march, a CPU that can't run it)."""
  try: return configure(target_name, torch_isa)
  except (ValueError, RuntimeError) as e: sys.exit(f"{prog}: error: {e}")


def add_target_arguments(parser: argparse.ArgumentParser) -> None:
  """--target and --torch-isa, as every benchmark script takes them."""
  parser.add_argument("--target", metavar="MARCH", default=None,
                      help=f"the CPU Target minigrad compiles for: {TARGET_HELP} (default: $CPU_TARGET, else native)")
  parser.add_argument("--torch-isa", choices=TORCH_ISAS, default=None,
                      help="torch's ATEN_CPU_CAPABILITY (default: $ATEN_CPU_CAPABILITY, else the one matching the Target)")


# ---------------------------------------------------------------- the header: host, Target, torch

def _torch():
  try: import torch
  except ImportError: return None
  torch.set_num_threads(os.cpu_count() or 1)
  return torch


def load_note() -> str:
  """The 1-minute load average, with a warning when other processes keep the cores busy."""
  try: load = os.getloadavg()[0]
  except OSError: return "load average unknown"
  return f"load average {load:.2f}" + (" (busy machine: the figures are unreliable)" if load > 0.5 * (os.cpu_count() or 1) else "")


def host_line() -> str:
  """The host: CPU model, cores, the ISA features that matter for speed, load average."""
  features = host_features()
  isa = " ".join(name for name in REPORTED_FEATURES if name in features) or "baseline"
  return f"host:   {cpu_model()} ({platform.machine()}), {host_cores()} cores; ISA {isa}; {load_note()}"


def _captured_stdout(action: Callable[[], object]) -> str:
  """What `action` prints on the process's standard output (file descriptor 1, where C libraries write)."""
  sys.stdout.flush()
  libc = ctypes.CDLL(None)
  with tempfile.TemporaryFile(mode="w+") as capture:
    saved = os.dup(1)
    os.dup2(capture.fileno(), 1)
    try: action()
    finally:
      libc.fflush(None)
      os.dup2(saved, 1)
      os.close(saved)
    capture.seek(0)
    return capture.read()


def library_isas(torch) -> str:
  """The ISA MKL and oneDNN say they use (their verbose lines, from one small matmul and conv), e.g. "MKL AVX2,
  oneDNN Intel AVX2"; "unknown" where a library doesn't say."""
  def matmul() -> None:
    with torch.backends.mkl.verbose(torch.backends.mkl.VERBOSE_ON): torch.ones(64, 64) @ torch.ones(64, 64)

  def conv() -> None:
    with torch.no_grad(), torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON):
      torch.nn.functional.conv2d(torch.ones(1, 64, 32, 32), torch.ones(64, 64, 3, 3), padding=1)
  found = []
  for name, action, pattern in (("MKL", matmul, r"architecture .*?\(Intel\(R\) ([^)]+)\)"), ("oneDNN", conv, r"isa:([^,\n]+)")):
    try: match = re.search(pattern, _captured_stdout(action))
    except (AttributeError, AssertionError, RuntimeError): match = None   # no such library in this build
    found.append(f"{name} {match.group(1).strip() if match else 'unknown'}")
  return ", ".join(found)


def torch_line(torch, isa: TorchIsa) -> str:
  """torch's version, threads and the ISA it reports using (ATen, MKL, oneDNN), against what was asked."""
  if torch is None: return "torch:  not installed"
  reported = torch.backends.cpu.get_cpu_capability()
  asked = ", ".join(f"{name}={value}" for name, value in isa.environment)
  took = "" if reported.lower() == isa.capability else f" -- NOT the {isa.capability} asked for (torch can't or won't use it here)"
  return (f"torch:  {torch.__version__} ({torch.get_num_threads()} threads): ATen {reported}{took}, {library_isas(torch)}; "
          f"{asked} ({isa.reason})")


def header_lines(setup: BenchSetup, torch=None) -> list[str]:
  """The lines every benchmark prints first: host, Target, torch (the `torch` module, None when not installed), versions."""
  device = Device.DEFAULT
  applies = "" if device in ("CPU", "LLVM") else f" (not used: the {device} device doesn't compile for a CPU Target)"
  numpy_isa = "the host's ISA" + ("" if setup.target.march == "native" else ": not limited to the Target's")
  return [host_line(), f"target: {setup.target.summary()}; device {device}{applies}", torch_line(torch, setup.torch_isa),
          f"python: {platform.python_version()}, numpy {np.__version__} ({numpy_isa})"]


# ---------------------------------------------------------------- timing

def minigrad_runners(build: Callable[[], Tensor]) -> Runners:
  """"minigrad": the graph scheduled once, each call runs its kernels (as a TinyJit replay: no Python graph work in the
  figure); "eager": each call builds the graph and realizes it, as a plain call in a user's script does."""
  items, _, _ = create_schedule([build().uop])
  return {"minigrad": lambda: run_schedule(items), "eager": lambda: build().realize()}


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


def _rates(runners: Runners, work: float, unit: str, runs: int) -> Rates:
  return {name: (work / seconds / 1e9, unit) for name, seconds in median_seconds(runners, runs).items()}


def _step_rates(steppers: dict[str, Callable[[int], float]], steps: int, runs: int) -> Rates:
  """Training steps per second: each timed run is `steps` steps ending with the loss read back (which must be finite)."""
  def block(name: str, run: Callable[[int], float]) -> Callable[[], float]:
    def steps_run() -> float:
      loss = run(steps)
      if not math.isfinite(loss): raise RuntimeError(f"{name}'s loss became {loss}")
      return loss
    return steps_run
  seconds = median_seconds({name: block(name, run) for name, run in steppers.items()}, runs)
  return {name: (steps / s, "steps/s") for name, s in seconds.items()}


def _bench_module(name: str):
  """A module of bench/ (next to the package in a source checkout), imported."""
  bench_dir = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench")
  if not os.path.exists(os.path.join(bench_dir, f"{name}.py")):
    raise FileNotFoundError(f"this benchmark needs bench/{name}.py from a source checkout (looked in {bench_dir})")
  if bench_dir not in sys.path: sys.path.insert(0, bench_dir)
  return importlib.import_module(name)


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


small_cases: dict[str, dict[str, float]] = {}   # the last bench_small: case -> library -> seconds per call


BENCHMARKS = {"matmul": ("matmul 1024x1024 f32", bench_matmul), "elementwise": ("(x.relu()*2+1).exp() 16M f32", bench_elementwise),
              "rowsum": ("row sum 4096x4096", bench_rowsum), "softmax": ("softmax 4096x1024", bench_softmax),
              "conv": ("conv2d 32x64x32x32, 64 3x3 filters, pad 1", bench_conv),
              "attention": ("causal attention B8 H8 T256 D64, forward", bench_attention),
              "mlp": ("MLP 784-256-128-10 train step, batch 128, Adam", bench_mlp),
              "gpt": ("GPT (2 blocks, width 128) T64 B16 train step", bench_gpt),
              "small": ("small ops, plain calls (geometric mean of 5)", bench_small),
              "sort": ("sort 1M f32, stable", bench_sort)}


def main(argv: list[str] | None = None) -> None:
  """Parse the command line, choose the Target and torch's ISA, print the header and one line per benchmark."""
  parser = argparse.ArgumentParser(prog="python -m minigrad.bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("names", nargs="*", help=f"benchmarks to run: {', '.join(BENCHMARKS)} (default: all)")
  parser.add_argument("--runs", type=int, default=7, help=f"timed runs per block, {ROUNDS} blocks per library (the median is shown; at least 7)")
  add_target_arguments(parser)
  args = parser.parse_args(argv)
  if unknown := [n for n in args.names if n not in BENCHMARKS]: parser.error(f"unknown benchmark(s) {unknown}; choose from {list(BENCHMARKS)}")
  if args.runs < 7: parser.error(f"--runs must be at least 7, got {args.runs}")
  setup = configure_or_exit(parser.prog, args.target, args.torch_isa)   # before anything compiles or imports torch
  for line in header_lines(setup, _torch()): print(line)
  rng = np.random.default_rng(0)
  libraries = ("minigrad", "eager", "numpy", "torch")
  print(f"{'benchmark':48s} " + " ".join(f"{name:>16s}" for name in libraries) + "   ratios")
  for name in args.names or BENCHMARKS:
    title, fn = BENCHMARKS[name]
    results = fn(rng, args.runs)
    unit = next(iter(results.values()))[1]
    cells = [f"{results[k][0]:9.2f} {unit:>6s}" if k in results else "-" for k in libraries]
    ratios = [f"{results[mine][0] / results[k][0]:.2f}x {k}" if mine == "minigrad" else f"eager {results[mine][0] / results[k][0]:.2f}x {k}"
              for mine in ("minigrad", "eager") if mine in results for k in ("numpy", "torch") if k in results]
    print(f"{title:48s} " + " ".join(f"{c:>16s}" for c in cells) + "   " + ", ".join(ratios), flush=True)
    if name == "small":
      for case, seconds in small_cases.items():
        print(f"  {case:46s} " + ", ".join(f"{lib} {s * 1e6:.1f} us" for lib, s in seconds.items()))


if __name__ == "__main__":
  main()
