"""The CPU thread pool, from Python: compile minigrad/runtime/cpu_pool.c once, then hand it lists of launches.

Input: compiled CPU kernels (their `<name>_entry` functions), buffer addresses, and how each kernel's outermost
loop is split. Output: the kernels have run, in order, split over the pool's threads (one ctypes call per list,
which releases the GIL while the kernels run).

`LaunchList` holds the C array of launches and of their buffer addresses; it is built once and run many times
(TinyJit replays a captured step as one list; a single kernel launch is a list of one). `addresses[i][arg]` can be
written in place, so a replay only writes the addresses that differ from the last one.

`LaunchList.submit` starts a list on the pool's workers and returns at once, so Python goes on (building the next
step's graph) while the kernels run. Until `wait()` the list is "in flight": it keeps alive the Buffers it uses
(their memory can't be freed and handed out again), and the host must not touch that memory. Buffer.copyin of an
address in `in_flight_addresses`, Buffer.copyout and Buffer.opaque (any raw access) wait first
(minigrad/runtime/device.py), and so does every other run of the pool (in C).

While PROFILE=1 records a trace (`minigrad.viz.profiling`, read once per run), each run also notes which pool
thread ran each part of each launch and when (`PartTime`, on time.perf_counter's clock); the trace takes them with
`take_part_times` right after the launch (minigrad/viz/trace.py). Otherwise nothing is timed.
"""
from __future__ import annotations
from dataclasses import dataclass
import atexit
import ctypes
import threading
import time
from importlib import resources
from minigrad import viz
from minigrad.helpers import cpu_threads

MAX_LAUNCHES = 4096   # per call into the pool (MAX_LAUNCHES in cpu_pool.c); longer lists are run in pieces
ENTRY_SUFFIX = "_entry"   # every CPU kernel exports `void <name>_entry(void *const *bufs, int core_start, int core_end)`


class Launch(ctypes.Structure):
  _fields_ = [("fn", ctypes.c_void_p), ("bufs", ctypes.c_void_p), ("outer", ctypes.c_int32), ("parts", ctypes.c_int32)]


class _PartSlot(ctypes.Structure):
  """mg_part_time of cpu_pool.c: when and where one part of a launch ran."""
  _fields_ = [("launch", ctypes.c_int32), ("part", ctypes.c_int32), ("parts", ctypes.c_int32), ("thread", ctypes.c_int32),
              ("loop_start", ctypes.c_int32), ("loop_end", ctypes.c_int32), ("start_ns", ctypes.c_int64), ("end_ns", ctypes.c_int64)]


MAX_PARTS = 0xffff   # cpu_pool.c clamps a launch's parts to 1..MAX_PARTS


@dataclass(frozen=True)
class PartTime:
  """One part of a timed launch: iterations [loop_start, loop_end) of its outer loop, run by pool thread `thread`
  (0: the thread that called the pool, named `caller`; 1..: the workers) from `start` to `end` (perf_counter seconds)."""
  entry: int         # the kernel's entry function address (CPUProgram.entry)
  launch: int        # its place in the LaunchList
  part: int
  parts: int
  thread: int
  caller: str        # the Python thread that ran the list (threading.current_thread().name)
  loop_start: int
  loop_end: int
  start: float
  end: float


_library: ctypes.CDLL | None = None
_library_lock = threading.Lock()


def pool() -> ctypes.CDLL:
  """The compiled pool, built (and cached on disk) on first use with the CPU device's C compiler."""
  global _library
  with _library_lock:
    if _library is None:
      from minigrad.runtime.ops_cpu import CCompiler, load_library   # the pool is built like a kernel
      source = resources.files("minigrad.runtime").joinpath("cpu_pool.c").read_text()
      library = load_library(CCompiler(extra_flags=("-pthread",)).compile_cached(source))
      library.mg_pool_run.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
      library.mg_pool_run.restype = ctypes.c_int
      library.mg_pool_submit.argtypes = [ctypes.c_void_p, ctypes.c_int]
      library.mg_pool_submit.restype = ctypes.c_int
      library.mg_pool_wait.argtypes = []
      library.mg_pool_wait.restype = None
      library.mg_pool_now_ns.argtypes = []
      library.mg_pool_now_ns.restype = ctypes.c_int64
      library.mg_pool_threads.argtypes = [ctypes.c_int]
      library.mg_pool_threads.restype = ctypes.c_int
      library.mg_pool_threads(cpu_threads())
      _library = library
    return _library


# the list submitted last, while it may still run: (the LaunchList, what it keeps alive); and the addresses of the
# memory it reads and writes (empty when nothing is in flight)
_in_flight: tuple | None = None
in_flight_addresses: frozenset[int] = frozenset()


def wait() -> None:
  """Return once the list submitted last is over (its memory may then be touched)."""
  global _in_flight, in_flight_addresses
  if (current := _in_flight) is None: return
  current[0].library.mg_pool_wait()
  if _in_flight is current: _in_flight, in_flight_addresses = None, frozenset()   # (unless another thread submitted meanwhile)


atexit.register(wait)   # no kernel may still run while the interpreter frees its memory

_clock_offset_ns: int | None = None


def clock_offset_ns() -> int:
  """time.perf_counter_ns() minus the pool's CLOCK_MONOTONIC (mg_pool_now_ns), measured once: the C clock read
  between two Python reads, from the closest pair of 20 tries (on Linux both are CLOCK_MONOTONIC: about 0)."""
  global _clock_offset_ns
  if _clock_offset_ns is None:
    now_ns, best = pool().mg_pool_now_ns, None
    for _ in range(20):
      before = time.perf_counter_ns(); c = now_ns(); after = time.perf_counter_ns()
      if best is None or after - before < best[0]: best = (after - before, (before + after) // 2 - c)
    _clock_offset_ns = best[1]
  return _clock_offset_ns


_recent = threading.local()   # .run: (began, ended, [PartTime]) of this Python thread's last timed run


def take_part_times(entry: int, since: float) -> tuple[float, float, list[PartTime]] | None:
  """The parts of kernel `entry` in this Python thread's last timed run, if that run began at or after `since`
  (perf_counter seconds), with the run's own start and end; None otherwise. Forgets the run either way."""
  run, _recent.run = getattr(_recent, "run", None), None
  if run is None or run[0] < since: return None
  return run[0], run[1], [p for p in run[2] if p.entry == entry]


class LaunchList:
  """Kernels to run back to back: each a (entry function address, buffer addresses, outer loop size, parts)."""

  def __init__(self, launches: list[tuple[int, list[int], int, int]]):
    self.count = len(launches)
    self.launches = (Launch * max(self.count, 1))()
    self.addresses = [(ctypes.c_void_p * max(len(bufs), 1))(*bufs) for _, bufs, _, _ in launches]
    for launch, (fn, _, outer, parts), addresses in zip(self.launches, launches, self.addresses):
      launch.fn, launch.bufs, launch.outer, launch.parts = fn, ctypes.addressof(addresses), outer, parts
    self.library = pool()

  def set_launch(self, buffers: tuple[int, ...], outer: int, parts: int) -> None:
    """Reuse a list of one launch for another call of the same kernel."""
    self.addresses[0][:] = buffers
    self.launches[0].outer, self.launches[0].parts = outer, parts

  def run(self) -> None:
    if viz.profiling: return self._run_timed()
    for first in range(0, self.count, MAX_LAUNCHES):
      address = ctypes.addressof(self.launches) + first * ctypes.sizeof(Launch)
      if self.library.mg_pool_run(address, min(MAX_LAUNCHES, self.count - first), None) != 0:
        raise RuntimeError(f"internal error: the CPU thread pool refused a list of {self.count} launches")

  def submit(self, buffers: list, owner: object) -> None:
    """Start the list on the pool's workers and return without waiting (see the module docstring). `buffers`: the
    Buffers its kernels read or write, kept alive with `owner` (what holds its kernels' code) until it is over. A
    list too long for one call, or one to be timed, runs before this returns."""
    global _in_flight, in_flight_addresses
    wait()
    if self.count > MAX_LAUNCHES or viz.profiling: return self.run()
    if self.library.mg_pool_submit(ctypes.addressof(self.launches), self.count) == 1:   # else it ran in this thread
      # noted once it runs: a wait() in another thread meanwhile, had it seen this, could clear it before it started
      _in_flight, in_flight_addresses = (self, buffers, owner), frozenset(buffer._opaque for buffer in buffers)

  def _run_timed(self) -> None:
    """`run`, noting when and where each part ran (for `take_part_times`)."""
    offset, caller, parts = clock_offset_ns(), threading.current_thread().name, []
    began = time.perf_counter()
    for first in range(0, self.count, MAX_LAUNCHES):
      count = min(MAX_LAUNCHES, self.count - first)
      slots = (_PartSlot * sum(min(max(self.launches[first + i].parts, 1), MAX_PARTS) for i in range(count)))()   # zeroed
      address = ctypes.addressof(self.launches) + first * ctypes.sizeof(Launch)
      if self.library.mg_pool_run(address, count, slots) != 0:
        raise RuntimeError(f"internal error: the CPU thread pool refused a list of {self.count} launches")
      parts += [PartTime(self.launches[first + s.launch].fn, first + s.launch, s.part, s.parts, s.thread, caller, s.loop_start,
                         s.loop_end, (s.start_ns + offset) * 1e-9, (s.end_ns + offset) * 1e-9) for s in slots if s.end_ns]
    _recent.run = (began, time.perf_counter(), parts)
