"""BEAM search, the device half: compile and time candidate kernels, keep the fastest, remember the choice on disk.

Input: a kernel AST, a device name and a beam width N (`BEAM=N`). Output: the list of actions (`Opt`) whose kernel
ran fastest; `get_kernel` applies them. The search:
  1. starts from the hand-coded choice and the shorter prefixes of its actions (so alternatives to its later
     choices are tried too); the hand-coded kernel is timed first and is the one to beat; one that runs in less than
     BEAM_MIN_KERNEL_US microseconds is kept without a search (no choice could save more than a launch costs);
  2. at each depth makes every child of the beam's kernels (one more action, minigrad/opt/search_space.py; at most
     BEAM_MAX_CANDIDATES, a seeded sample), renders them in this process and compiles them in parallel: the
     compiler runs as one worker process per candidate, started from a thread pool with a thread per core, and a
     compile that fails or outlives BEAM_COMPILE_TIMEOUT seconds is skipped. Then it times them one after
     another, with no compile running, on scratch buffers of the kernel's sizes (fastest of TIMING_RUNS runs;
     a candidate whose first run is CUT_FACTOR times slower than the best so far is not run again);
  3. keeps the N fastest as the next beam, and stops when a depth gains less than MIN_GAIN (the gain must hold
     when the depth's best and the best so far are timed in turns, CONFIRM_RUNS each: rendering the candidates is
     most of a search's time, so no depth is spent on a load spike), after BEAM_MAX_DEPTH depths, or once
     BEAM_TIME_LIMIT seconds have passed (no candidate is rendered or timed past it; the best so far is kept);
  4. times the winner and the hand-coded kernel in turns and keeps the winner only if it is still faster, so a
     load spike on a shared machine can't make BEAM worse than the default.
Every timed candidate must give the hand-coded kernel's numbers on the same random inputs (bit for bit, or for
floats to a tolerance: sums may be added up in another order), else it is dropped, so a wrong kernel is never
chosen. A candidate that fails (render, compile, bounds check, run, wrong output) is skipped with a DEBUG>=2 line;
the search never crashes on a candidate. It never reads or writes the user's buffers.

Results are kept on disk in the "beam" folder of minigrad.cache: one JSON entry per (kernel AST, device, compiler, the CPU and
LLVM devices' Target ISA (`Target.key`: actions tuned for AVX-512 are not reused on an AVX2 CPU), beam width, minigrad's release),
named by a sha256 of those and holding the actions and the AST printout; writes are atomic. An entry that can't be
read, is for another AST or whose actions don't apply any more is ignored and searched again. `chosen_opts` keeps
this process's answers in memory.

DEBUG>=2 prints one line per searched kernel (kernels timed, search time, hand-coded vs chosen time and GFLOPS) and
the skipped candidates; DEBUG>=3 also the chosen actions (and the cached ones when the disk cache answers).
"""
from __future__ import annotations
import concurrent.futures
import copy
import hashlib
import json
import os
import pathlib
import random
import sys
import time
import numpy as np
from tqdm import tqdm
from minigrad.opt.heuristics import hand_coded_optimizations
from minigrad.codegen.kernel import Kernel, Opt
from minigrad.opt.search_space import ast_key, child_kernels, kernel_signature
from minigrad.dtype import DType, dtypes, to_numpy
from minigrad.engine.realize import CompiledKernel, load_kernel, new_kernel, render_kernel
from minigrad import cache
from minigrad.helpers import DEBUG, getenv
from minigrad.runtime.device import Buffer, Device
from minigrad.uop.ops import UOp, Ops
from minigrad import viz
from minigrad.viz import trace

CACHE_VERSION = 1
TIMING_RUNS = 3          # runs per candidate; its time is the fastest
CONFIRM_RUNS = 5         # runs of each of two kernels timed in turns to confirm that one is faster
CUT_FACTOR = 2.0         # a candidate whose first run is this much slower than the best so far isn't run again
MIN_GAIN = 0.01          # a depth must beat the best time by 1 % for the search to go on
MAX_DEPTH = getenv("BEAM_MAX_DEPTH", 8)                 # actions added on top of the starting kernels
MAX_CANDIDATES = getenv("BEAM_MAX_CANDIDATES", 64)      # timed per depth (a seeded random sample if more)
COMPILE_TIMEOUT_S = getenv("BEAM_COMPILE_TIMEOUT", 20.0)
TIME_LIMIT_S = getenv("BEAM_TIME_LIMIT", 30.0)       # per kernel: past it, no new candidate is rendered or timed
# a hand-coded kernel faster than this is kept without a search: what any choice could save is below the time of a launch
MIN_KERNEL_S = getenv("BEAM_MIN_KERNEL_US", 20.0) / 1e6
COMPILE_WORKERS = max(1, os.cpu_count() or 1)

# Documented cache: (kernel AST, device, beam width) -> the actions the search chose, for this process.
chosen_opts: dict[tuple[UOp, str, int], list[Opt]] = {}


def beam_search(ast: UOp, device: str, width: int) -> list[Opt]:
  """The actions to apply to `ast` on `device`: from memory, from the disk cache, or found by a beam search."""
  if width < 1: raise ValueError(f"the beam width must be >= 1, got {width}")
  if any(n.op is Ops.SORT for n in ast.toposort): return []   # a sort kernel calls the row sort once per row: nothing to search
  key = (ast, device, width)
  if (found := chosen_opts.get(key)) is not None: return found
  path = cache_path(ast, device, width)   # None: no usable cache folder, search every time
  opts = None if path is None else read_cached(path, ast, device)
  if opts is not None:
    if DEBUG >= 3: print(f"BEAM {new_kernel(ast, device).name}: cached actions {opts}")
  else:
    opts = _Search(ast, device, width).run()
    if path is not None: write_cached(path, ast, opts)
  chosen_opts[key] = opts
  return opts


# ---------------------------------------------------------------- the disk cache

def cache_path(ast: UOp, device: str, width: int) -> pathlib.Path | None:
  compiler = Device[device].compiler
  target = getattr(compiler, "target", None)   # CPU and LLVM: what the code may assume
  text = "\0".join((f"beam v{CACHE_VERSION}", f"minigrad {cache.minigrad_version()}", ast_key(ast), device, compiler.cache_key,
                    target.key if target else "", str(width)))
  return cache.entry("beam", f"{hashlib.sha256(text.encode()).hexdigest()}.json")


def read_cached(path: pathlib.Path, ast: UOp, device: str) -> list[Opt] | None:
  """The cached actions, or None when there are none or the entry is unreadable, for another AST, or stale."""
  if (payload := cache.read(path, "BEAM")) is None: return None
  try:
    entry = json.loads(payload)
    if entry["ast"] != ast_key(ast): raise ValueError("the entry is for another kernel")
    opts = [Opt(str(op), int(axis), int(amount)) for op, axis, amount in entry["opts"]]
    kernel = new_kernel(ast, device)
    for opt in opts: kernel.apply_opt(opt)   # actions that no longer apply make the entry stale
    return opts
  except Exception as e:
    if DEBUG >= 2: print(f"BEAM cache: ignoring damaged or stale entry {path} ({type(e).__name__}: {e}); searching again")
    return None


def write_cached(path: pathlib.Path, ast: UOp, opts: list[Opt]) -> None:
  """Write atomically (a temp file in the same directory, then os.replace). Failing to cache is not an error."""
  entry = {"version": CACHE_VERSION, "opts": [[o.op, o.axis, o.amount] for o in opts], "ast": ast_key(ast)}
  cache.write(path, json.dumps(entry).encode(), "BEAM")


# ---------------------------------------------------------------- scratch buffers

class WrongOutput(RuntimeError):
  """A candidate's output differs from the hand-coded kernel's on the same inputs."""


def _random_contents(dtype: DType, size: int, rng: np.random.Generator) -> np.ndarray:
  if dtypes.is_float(dtype): return rng.standard_normal(size).astype(to_numpy(dtype))
  if dtype == dtypes.bool: return rng.integers(0, 2, size).astype(np.bool_)
  return rng.integers(1, 8, size).astype(to_numpy(dtype))   # small and nonzero: safe as divisors and shifts


def _needed_sizes(ast: UOp, default: CompiledKernel) -> dict[int, int]:
  """Elements each buffer needs: what its views read, and what the hand-coded kernel's ungated indices can reach
  (the user's buffers pass that kernel's bounds check, so they are at least this big)."""
  sizes: dict[int, int] = {}
  for node in ast.toposort:
    if node.op in (Ops.LOAD, Ops.STORE) and node.src[0].op is Ops.DEFINE_GLOBAL:
      number = node.src[0].arg
      sizes[number] = max(sizes.get(number, 1), node.src[1].arg.real_size())
  for u in default.uops:
    if u.op in (Ops.LOAD, Ops.STORE) and len(u.src[0].src) == 2:
      buf, index = u.src[0].src
      width = (u.dtype if u.op is Ops.LOAD else u.src[1].dtype).count
      sizes[buf.arg] = max(sizes.get(buf.arg, 1), index.vmax + width)
  return sizes


class Scratch:
  """Buffers of the kernel's sizes owned by the search: random inputs, outputs refilled with a marker byte before
  each checked run, so a candidate that skips an element can't pass as correct."""
  MARKER = 0xA5

  def __init__(self, ast: UOp, device: str, default: CompiledKernel, rng: np.random.Generator):
    dtype_of = {n.arg: n.dtype.base for n in ast.toposort if n.op is Ops.DEFINE_GLOBAL}
    self.outputs = sorted({n.src[0].arg for n in ast.toposort if n.op is Ops.STORE})
    sizes = _needed_sizes(ast, default)
    self.buffers = [Buffer(device, sizes.get(i, 1), dtype_of.get(i, dtypes.uint8)).allocate() for i in range(max(dtype_of) + 1)]
    for i, buf in enumerate(self.buffers):
      if i not in self.outputs: buf.copyin(_random_contents(buf.dtype, buf.size, rng))
    self.reference: list[np.ndarray] | None = None
    self.tolerances: list[tuple[float | None, float]] = []

  def mark_outputs(self) -> None:
    for i in self.outputs: self.buffers[i].copyin(np.full(self.buffers[i].nbytes, self.MARKER, dtype=np.uint8))

  def check_outputs(self) -> None:
    """Keep the first outputs seen as the reference (the hand-coded kernel runs first); compare later ones to it."""
    outputs = [self.buffers[i].numpy() for i in self.outputs]
    if self.reference is None:
      self.reference = outputs
      self.tolerances = [_tolerance(want, self.buffers[i].dtype) for i, want in zip(self.outputs, outputs)]
      return
    for i, got, want, (rtol, atol) in zip(self.outputs, outputs, self.reference, self.tolerances):
      if np.array_equal(got.view(np.uint8), want.view(np.uint8)): continue   # the same bits: the common case
      if rtol is None or not np.isclose(got, want, rtol=rtol, atol=atol, equal_nan=True).all():
        raise WrongOutput(f"output data{i} differs from the hand-coded kernel's")


def _tolerance(want: np.ndarray, dtype: DType) -> tuple[float | None, float]:
  """(rtol, atol) for comparing float outputs (sums may be added up in another order); (None, 0) asks for equal bits."""
  if not dtypes.is_float(dtype): return None, 0.0
  rtol = 1e-3 if dtype.itemsize >= 4 else 3e-2
  finite = np.abs(want[np.isfinite(want)])
  return rtol, rtol * (float(finite.mean()) if finite.size else 1.0) + 1e-30


# ---------------------------------------------------------------- the search

def _log(line: str) -> None: tqdm.write(line, file=sys.stdout)   # a line above the progress bar, not through it


def _first_line(error: BaseException) -> str:
  return f"{type(error).__name__}: {(str(error).strip().splitlines() or [''])[0]}"


class _Search:
  def __init__(self, ast: UOp, device: str, width: int):
    self.ast, self.device, self.width = ast, device, width
    self.compiler = copy.copy(Device[device].compiler)
    if hasattr(self.compiler, "timeout_s"): self.compiler.timeout_s = min(self.compiler.timeout_s, COMPILE_TIMEOUT_S)
    self.timed: dict[str, float] = {}      # source -> seconds, so equal code is timed once
    self.seen: set[tuple] = set()          # kernel signatures already made
    self.best_seconds = float("inf")
    self.rng = random.Random(0)
    self.said_out_of_time = False

  def run(self) -> list[Opt]:
    start_time = time.perf_counter()
    self.deadline = start_time + TIME_LIMIT_S
    default = new_kernel(self.ast, self.device)
    hand_coded_optimizations(default)
    # start from the hand-coded kernel and the prefixes of its actions (alternatives to its later choices)
    starts = [default] + [self._replay(default.applied_opts[:n]) for n in range(len(default.applied_opts) - 1, 0, -1)]
    self.seen.update(kernel_signature(k) for k in starts)
    self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=COMPILE_WORKERS, thread_name_prefix="minigrad-beam")
    try:
      with tqdm(total=1, desc=f"BEAM {default.name}", unit="kernel", file=sys.stderr, leave=False, dynamic_ncols=True) as self.bar:
        default_program, default_seconds = self._default(default)
        best, best_program, best_seconds, depth = default, default_program, default_seconds, 0
        # nothing to choose from (a scalar kernel, say), or too small to matter
        children = self._children(starts) if default_seconds >= MIN_KERNEL_S else []
        while children and depth < MAX_DEPTH and not self._out_of_time():
          timed = sorted(self._evaluate(children), key=lambda entry: entry[0])
          if not timed or timed[0][0] >= best_seconds * (1 - MIN_GAIN): break
          # a depth's gain is confirmed (timed in turns with the best so far) before it buys another depth: on a
          # shared machine a load spike during the best's runs would otherwise send the search on for nothing
          best_again, found_again = self._confirm(best_program, timed[0][2])
          if found_again >= best_again * (1 - MIN_GAIN): break
          best_seconds, best, best_program = timed[0]
          depth += 1
          children = self._children([kernel for _, kernel, _ in timed[:self.width]])
        if best is not default:
          default_seconds, best_seconds = self._confirm(default_program, best_program)
          if best_seconds >= default_seconds * (1 - MIN_GAIN): best, best_seconds = default, default_seconds
    finally: self.pool.shutdown(wait=False, cancel_futures=True)   # a compile past its time limit isn't waited for
    self._report(default, default_program, default_seconds, best, best_seconds, time.perf_counter() - start_time)
    return list(best.applied_opts)

  def _out_of_time(self) -> bool:
    if time.perf_counter() < self.deadline: return False
    if DEBUG >= 2 and not self.said_out_of_time: _log(f"BEAM: time limit of {TIME_LIMIT_S} s reached (BEAM_TIME_LIMIT), keeping the best so far")
    self.said_out_of_time = True
    return True

  def _confirm(self, default_program: CompiledKernel, best_program: CompiledKernel) -> tuple[float, float]:
    """Time the hand-coded and the best kernel in turns, so a load spike on a shared machine favours neither."""
    default_times, best_times = [], []
    for _ in range(CONFIRM_RUNS):
      default_times.append(self._run(default_program, self.scratch.buffers))
      best_times.append(self._run(best_program, self.scratch.buffers))
    return min(default_times), min(best_times)

  def _replay(self, opts: list[Opt]) -> Kernel:
    kernel = new_kernel(self.ast, self.device)
    for opt in opts: kernel.apply_opt(opt)
    return kernel

  def _children(self, parents: list[Kernel]) -> list[Kernel]:
    children = []
    for parent in parents:
      for child in child_kernels(parent):
        if (signature := kernel_signature(child)) not in self.seen:
          self.seen.add(signature)
          children.append(child)
    if len(children) > MAX_CANDIDATES: children = self.rng.sample(children, MAX_CANDIDATES)
    return children

  def _default(self, kernel: Kernel) -> tuple[CompiledKernel, float]:
    """Compile and time the hand-coded kernel; its outputs become the reference. Its failures are the user's
    errors (they happen without BEAM too), so they are raised."""
    uops, source = render_kernel(kernel, self.device, verbose=False)
    program = load_kernel(kernel, self.device, uops, source, self.compiler.compile_cached(source))
    self.scratch = Scratch(self.ast, self.device, program, np.random.default_rng(0))
    self.timed[source] = seconds = self._time(program)
    if viz.reporting: viz.beam_candidate(self.ast, kernel.applied_opts, seconds, "hand-coded")
    self.bar.update(1)
    return program, seconds

  def _evaluate(self, kernels: list[Kernel]) -> list[tuple[float, Kernel, CompiledKernel]]:
    """Render, compile and time `kernels`: (seconds, kernel, program) for those that ran right. Each source goes
    to the compile pool as soon as it is rendered, so compiles overlap the rendering of the next kernels; timing
    starts once every compile is done, so no compiler competes with the kernels for the cores."""
    start = time.perf_counter()
    self.bar.total += len(kernels)
    self.bar.refresh()
    pending: dict[str, tuple[Kernel, list[UOp], concurrent.futures.Future]] = {}
    for kernel in kernels:
      if self._out_of_time():
        self.bar.update(1)
        continue
      try: uops, source = render_kernel(kernel, self.device, verbose=False)
      except Exception as e:
        self._skip(kernel, "render", e)
        continue
      if source in self.timed or source in pending: self.bar.update(1)   # the same code as a kernel seen before
      else: pending[source] = (kernel, uops, self.pool.submit(self.compiler.compile_cached, source))
    self.bar.set_postfix_str(f"compiling {len(pending)}")
    # compilers with their own time limit (the C compiler) stop themselves; this bounds the others
    concurrent.futures.wait([future for _, _, future in pending.values()], timeout=COMPILE_TIMEOUT_S * (len(pending) / COMPILE_WORKERS + 1))
    results = []
    for source, (kernel, uops, future) in pending.items():
      if self._out_of_time():
        future.cancel()
        self.bar.update(1)
        continue
      if not future.done():
        future.cancel()
        self._skip(kernel, "compile", TimeoutError(f"not compiled within {COMPILE_TIMEOUT_S} s"))
        continue
      try: program = load_kernel(kernel, self.device, uops, source, future.result())
      except Exception as e:
        self._skip(kernel, "compile", e)
        continue
      try: self.timed[source] = seconds = self._time(program)
      except Exception as e:
        self._skip(kernel, "run", e)
        continue
      if viz.reporting: viz.beam_candidate(self.ast, kernel.applied_opts, seconds)
      self.bar.update(1)
      self.bar.set_postfix_str(f"best {self.best_seconds * 1e6:.1f} us")
      results.append((seconds, kernel, program))
    if viz.profiling: trace.complete(f"BEAM {len(kernels)} candidates", "beam", start, compiled=len(pending), timed=len(results))
    return results

  def _time(self, program: CompiledKernel) -> float:
    """The fastest of TIMING_RUNS runs; the first run's outputs are checked. A candidate much slower than the best
    so far is run once only."""
    buffers = self.scratch.buffers
    self.scratch.mark_outputs()
    times = [self._run(program, buffers)]
    self.scratch.check_outputs()
    if times[0] <= CUT_FACTOR * self.best_seconds:
      times += [self._run(program, buffers) for _ in range(TIMING_RUNS - 1)]
    self.best_seconds = min(self.best_seconds, min(times))
    return min(times)

  def _run(self, program: CompiledKernel, buffers: list[Buffer]) -> float:
    start = time.perf_counter()
    # a kernel of symbolic shape is tuned at the largest value of each Variable: the lengths its buffers are laid out for
    largest = {name: hi for name, _, hi in program.variables}
    seconds = program(buffers, wait=True, **({"var_vals": largest} if largest else {}))
    if seconds is None:   # a program that doesn't time itself: wall-clock time after waiting for the device
      Device[self.device].synchronize()
      seconds = time.perf_counter() - start
    return seconds

  def _skip(self, kernel: Kernel, stage: str, error: BaseException) -> None:
    self.bar.update(1)
    if DEBUG >= 2: _log(f"BEAM {kernel.name}: skipped {kernel.applied_opts} ({stage} failed: {_first_line(error)})")

  def _report(self, default: Kernel, program: CompiledKernel, default_seconds: float, best: Kernel, best_seconds: float,
              elapsed: float) -> None:
    if DEBUG >= 2:
      def rate(seconds: float) -> str: return f"{seconds * 1e6:.1f} us ({program.flops / max(seconds, 1e-12) / 1e9:.2f} GFLOPS)"
      print(f"BEAM {default.name}: {len(self.timed)} kernels timed in {elapsed:.2f} s; hand-coded {rate(default_seconds)} -> "
            f"chosen {best.name} {rate(best_seconds)}, {default_seconds / max(best_seconds, 1e-12):.2f}x")
    if DEBUG >= 3: print(f"BEAM {default.name}: chosen actions {best.applied_opts} (hand-coded {default.applied_opts})")
