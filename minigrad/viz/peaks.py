"""The CPU's peak FLOPS and memory bandwidth, measured by two short C micro-benchmarks, for the VIZ report's "% of peak".

Input: the CPU device's C compiler and its Target (vector width, cores). Output: `cpu_peaks()`, a `Peaks` of
  - FLOPS: every thread of the pool's size runs independent chains of vector multiply-adds, ACCUMULATORS at a time
    (enough to hide the FMA latency on every x86 and aarch64 core): 2 FLOPs per lane per multiply-add;
  - bytes per second: every thread runs a STREAM triad `a[i] = b[i] + s * c[i]` over arrays far larger than the
    caches; counted as minigrad counts a kernel's bytes (each buffer once: 3 x 4 bytes per element).
Each is the best of a few runs (about a second in all). They are measured once per host: kept in the disk cache
(minigrad/cache/, folder "peaks") under a key of the CPU model, the Target's ISA, the thread count and the compiler,
so a later process (on the same machine, or a machine with the same CPU) reads them back; a host whose cache folder
can't be used measures once per process.
"""
from __future__ import annotations
from typing import NamedTuple
import ctypes
import datetime
import functools
import hashlib
import json
import threading
import time
from minigrad import cache
from minigrad.helpers import cpu_threads

ACCUMULATORS = 12
FMA_TRIPS = 2_000_000          # per thread and run: 12 vectors x 2 x lanes FLOPs each trip
STREAM_ELEMENTS = 16 << 20     # per array: 64 MB of floats, three arrays
RUNS = 5                       # the best run counts: other work on the machine only slows a run down
CACHE_VERSION = 1


class Peaks(NamedTuple):
  flops: float            # FLOPs per second, all threads
  bytes_per_second: float
  how: str                # what was measured, for the page


def _source(lanes: int) -> str:
  chains = range(ACCUMULATORS)
  return f"""typedef float vf __attribute__((vector_size({lanes * 4})));
float fma_chains(long trips) {{
  vf m = (vf){{0}} + 0.999999f, c = (vf){{0}} + 1e-7f;
  {' '.join(f'vf a{i} = (vf){{0}} + {i + 1}.0f;' for i in chains)}
  for (long t = 0; t < trips; t++) {{
    {' '.join(f'a{i} = a{i} * m + c;' for i in chains)}
  }}
  vf s = {' + '.join(f'a{i}' for i in chains)};
  return s[0];
}}
void triad(float *a, const float *b, const float *c, long n) {{
  for (long i = 0; i < n; i++) a[i] = b[i] + 3.0f * c[i];
}}
"""


def _on_threads(threads: int, work) -> float:
  """Seconds until `work(i)` finished on every thread i (ctypes calls release the GIL, so they run in parallel)."""
  workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
  start = time.perf_counter()
  for w in workers: w.start()
  for w in workers: w.join()
  return time.perf_counter() - start


@functools.cache
def cpu_peaks() -> Peaks:
  """This host's peaks: from the disk cache when they were measured before, else measured now (and kept)."""
  from minigrad.runtime.device import Device
  from minigrad.target import cpu_model
  compiler = Device["CPU"].compiler
  key = f"peaks v{CACHE_VERSION}|{cpu_model()}|{compiler.target.key}|threads={cpu_threads()}|{compiler.cache_key}"
  path = cache.entry("peaks", hashlib.sha256(key.encode()).hexdigest()) if cache.usable() else None
  if path is not None and (payload := cache.read(path, "peaks")) is not None:
    try:
      stored = json.loads(payload)
      return Peaks(float(stored["flops"]), float(stored["bytes_per_second"]), str(stored["how"]))
    except (ValueError, KeyError, TypeError): pass   # an entry of another layout: measured anew
  peaks = measure(compiler)
  if path is not None: cache.write(path, json.dumps(peaks._asdict()).encode(), "peaks")
  return peaks


def measure(compiler) -> Peaks:
  """Run the two micro-benchmarks with `compiler` (a CPU device compiler) on every thread."""
  from minigrad.runtime.ops_cpu import load_library
  lanes = compiler.target.vector_bytes // 4
  library = load_library(compiler.compile_cached(_source(lanes)))
  library.fma_chains.argtypes, library.fma_chains.restype = [ctypes.c_long], ctypes.c_float
  library.triad.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_long]
  threads = cpu_threads()
  fma_seconds = min(_on_threads(threads, lambda i: library.fma_chains(FMA_TRIPS)) for _ in range(RUNS))
  flops = threads * FMA_TRIPS * ACCUMULATORS * lanes * 2 / fma_seconds
  part = STREAM_ELEMENTS // threads
  arrays = [(ctypes.c_float * (part * threads))() for _ in range(3)]
  def triad(i: int) -> None: library.triad(*(ctypes.addressof(a) + i * part * 4 for a in arrays), part)
  _on_threads(threads, triad)   # the first run maps the pages
  stream_seconds = min(_on_threads(threads, triad) for _ in range(RUNS))
  return Peaks(flops, 3 * 4 * part * threads / stream_seconds,
               f"measured {datetime.datetime.now():%Y-%m-%d %H:%M} on {threads} threads: {ACCUMULATORS} chains of "
               f"{lanes}-lane multiply-adds each; a STREAM triad over 3 x {STREAM_ELEMENTS * 4 >> 20} MB")
