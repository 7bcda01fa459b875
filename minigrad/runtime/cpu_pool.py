"""The CPU thread pool, from Python: compile minigrad/runtime/cpu_pool.c once, then hand it lists of launches.

Input: compiled CPU kernels (their `<name>_entry` functions), buffer addresses, and how each kernel's outermost
loop is split. Output: the kernels have run, in order, split over the pool's threads (one ctypes call per list,
which releases the GIL while the kernels run).

`LaunchList` holds the C array of launches and of their buffer addresses; it is built once and run many times
(TinyJit replays a captured step as one list; a single kernel launch is a list of one). `addresses[i][arg]` can be
written in place, so a replay only writes the addresses that differ from the last one.
"""
from __future__ import annotations
import ctypes
import threading
from importlib import resources
from minigrad.helpers import cpu_threads

MAX_LAUNCHES = 4096   # per call into the pool (MAX_LAUNCHES in cpu_pool.c); longer lists are run in pieces
ENTRY_SUFFIX = "_entry"   # every CPU kernel exports `void <name>_entry(void *const *bufs, int core_start, int core_end)`


class Launch(ctypes.Structure):
  _fields_ = [("fn", ctypes.c_void_p), ("bufs", ctypes.c_void_p), ("outer", ctypes.c_int32), ("parts", ctypes.c_int32)]


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
      library.mg_pool_run.argtypes = [ctypes.c_void_p, ctypes.c_int]
      library.mg_pool_run.restype = ctypes.c_int
      library.mg_pool_threads.argtypes = [ctypes.c_int]
      library.mg_pool_threads.restype = ctypes.c_int
      library.mg_pool_threads(cpu_threads())
      _library = library
    return _library


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
    for first in range(0, self.count, MAX_LAUNCHES):
      address = ctypes.addressof(self.launches) + first * ctypes.sizeof(Launch)
      if self.library.mg_pool_run(address, min(MAX_LAUNCHES, self.count - first)) != 0:
        raise RuntimeError(f"internal error: the CPU thread pool refused a list of {self.count} launches")
