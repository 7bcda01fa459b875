"""See inside: why each kernel boundary exists (DEBUG>=3), a profiler trace (PROFILE=1), an HTML report (VIZ=1),
kernels whose source names their ops, and errors that point at the user's line.

Input: what the other stages tell it through small guarded hooks: the scheduler's fusion decisions
(`boundaries`), the user's source line of each tensor op (`source`, from Function.apply), and the engine's
scheduling, rendering, compiling, BEAM search, kernel launches (with the CPU pool's per-thread part times,
minigrad/runtime/cpu_pool.py), TinyJit replays and errors. Output: `kernel boundary:`
lines at DEBUG>=3, comments in the shown source naming each block's op and line (`kernel_comments`), notes on errors
(`errors`), a Chrome trace-event JSON (`trace`) and one self-contained HTML file (`report`, with `peaks`), written at exit.

The flags below are plain module-level bools, read once per hook on the hot paths (a kernel launch, a Tensor op),
so none of this costs anything when it is off. `enable()` turns parts on at run time (tests, notebooks).
"""
from __future__ import annotations
from typing import Any
import atexit
from minigrad.helpers import DEBUG, PROFILE, VIZ

profiling = bool(PROFILE)                       # record a trace (minigrad/viz/trace.py)
reporting = bool(VIZ)                           # record the HTML report (minigrad/viz/report.py)
observing = profiling or reporting              # kernel launches are timed and recorded
capturing = observing or DEBUG >= 3             # Function.apply notes the user's source line of each op (source.py)
_written_at_exit: set[str] = set()


def enable(profiling: bool | None = None, reporting: bool | None = None, capturing: bool | None = None,
           write_at_exit: bool = True) -> None:
  """Turn recording on or off at run time (None: leave it as it is); capturing stays on while either record is on.
  With `write_at_exit`, the trace and report are written when the process ends, as with PROFILE=1 and VIZ=1."""
  state = globals()
  for name, value in (("profiling", profiling), ("reporting", reporting), ("capturing", capturing)):
    if value is not None: state[name] = value
  state["observing"] = state["profiling"] or state["reporting"]
  state["capturing"] = state["capturing"] or state["observing"]
  if write_at_exit: _write_at_exit()


def _write_at_exit() -> None:
  from minigrad.viz import report, trace
  for what, on, write in (("trace", profiling, trace.write), ("report", reporting, report.write)):
    if on and what not in _written_at_exit:
      _written_at_exit.add(what)
      atexit.register(lambda what=what, write=write: print(f"minigrad: {what} written to {write()}"))


def launched(kernel: Any, nbytes: int, start: float, seconds: float | None) -> None:
  """A kernel launch (a CompiledKernel of minigrad/engine/realize.py) that began at `start` (time.perf_counter())
  and ran `seconds` (None: the device did not say; then until now)."""
  from minigrad.viz import report, trace
  end = trace.now() if seconds is None else start + seconds
  if profiling:
    args = {"flops": kernel.flops, "bytes": nbytes}
    if (parts := getattr(kernel.program, "parts", None)) is not None: args["cpu_pool_parts"] = parts(kernel.outer_loop, kernel.work)
    pool_run = None
    if (entry := getattr(kernel.program, "entry", None)) is not None:   # a CPU kernel: the pool timed its parts
      from minigrad.runtime.cpu_pool import take_part_times
      pool_run = take_part_times(entry, start)
    # the launch span covers the pool call it made (`seconds` is timed from a little later than `start`)
    trace.complete(kernel.name, "launch", start, end if pool_run is None else max(end, pool_run[1]), track=f"{kernel.device} queue", **args)
    if pool_run is not None: trace.pool_parts(kernel.name, pool_run[2])
  if reporting: report.launched(kernel, nbytes, end - start)


def beam_candidate(ast: Any, opts: list, seconds: float, note: str = "") -> None:
  """A kernel BEAM timed for `ast` (the report lists them under the kernel)."""
  from minigrad.viz import report
  report.beam_candidates.setdefault(ast, []).append((str(opts), seconds, note))


if observing: _write_at_exit()
