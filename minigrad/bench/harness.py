"""The benchmark's harness: which Target minigrad compiles for and which ISA torch may use, the header naming the host,
and the timing of runners side by side (medians of blocks that take turns).

Input: the command line's --target/--torch-isa (or $CPU_TARGET, $ATEN_CPU_CAPABILITY), and runners (name -> one run).
Output: a BenchSetup, header lines, and rates. The benchmarks themselves are in sections.py, the command line in
cli.py (`python -m minigrad.bench`, whose --help explains the method); bench/*.py scripts use this module too.
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
# the limits for the libraries torch calls, at each ATen level: MKL (matmul), oneDNN (conv) and fbgemm (quantized
# Linear: its "AVX512" excludes VNNI; it has no level below AVX2)
LIBRARY_LIMITS = {"default": {"MKL_ENABLE_INSTRUCTIONS": "SSE4_2", "ONEDNN_MAX_CPU_ISA": "SSE41"},
                  "avx2": {"MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2", "FBGEMM_ENABLE_INSTRUCTIONS": "AVX2"},
                  "avx512": {"MKL_ENABLE_INSTRUCTIONS": "AVX512", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE", "FBGEMM_ENABLE_INSTRUCTIONS": "AVX512"}}
LIBRARY_LIMIT_NAMES = tuple(dict.fromkeys(name for limits in LIBRARY_LIMITS.values() for name in limits))
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
  for name in LIBRARY_LIMIT_NAMES:   # the user's own limits for MKL, oneDNN and fbgemm stay (and are shown)
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
  bench_dir = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "bench")
  if not os.path.exists(os.path.join(bench_dir, f"{name}.py")):
    raise FileNotFoundError(f"this benchmark needs bench/{name}.py from a source checkout (looked in {bench_dir})")
  if bench_dir not in sys.path: sys.path.insert(0, bench_dir)
  return importlib.import_module(name)
