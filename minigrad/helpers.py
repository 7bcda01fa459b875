"""Small shared utilities: environment flags (DEBUG, BEAM, NOOPT ...), GlobalCounters.

Input: the process environment. Output: flag values, counters and helpers every stage may use.
"""
from __future__ import annotations
from typing import Any, Iterable
import functools
import gc
import math
import os


@functools.cache
def getenv(key: str, default: Any = 0) -> Any:
  """An environment variable converted to the type of `default` (read once, then cached)."""
  value = os.environ.get(key)
  if value is None: return default
  return type(default)(value)


@functools.cache
def cpu_threads() -> int:
  """How many threads CPU kernels use: $CPU_THREADS, else one per core (read once: os.cpu_count() reads a file)."""
  return max(1, getenv("CPU_THREADS", os.cpu_count() or 1))


class ContextVar:
  """A flag read from the environment once, that tests and code may change at run time (`DEBUG.value = 4`)."""
  def __init__(self, key: str, default: int):
    self.key = key
    self.value = int(os.environ.get(key, default))
  def __bool__(self) -> bool: return bool(self.value)
  def __ge__(self, other: int) -> bool: return self.value >= other
  def __gt__(self, other: int) -> bool: return self.value > other
  def __lt__(self, other: int) -> bool: return self.value < other
  def __le__(self, other: int) -> bool: return self.value <= other
  def __repr__(self) -> str: return f"{self.key}={self.value}"


DEBUG, BEAM, NOOPT = ContextVar("DEBUG", 0), ContextVar("BEAM", 0), ContextVar("NOOPT", 0)
# VIZ=1: an HTML report of every schedule and kernel; PROFILE=1: a Chrome trace-event JSON (minigrad/viz/)
VIZ, PROFILE = ContextVar("VIZ", 0), ContextVar("PROFILE", 0)
# LAUNCH_BLOCKING=1: a realize returns only once its kernels ran (as CUDA_LAUNCH_BLOCKING; see minigrad/engine/eager.py)
LAUNCH_BLOCKING = ContextVar("LAUNCH_BLOCKING", 0)


class GlobalCounters:
  """Totals since the last reset(): kernels launched, FLOPs, bytes moved and kernel seconds (as in tinygrad)."""
  kernel_count: int = 0
  global_ops: int = 0
  global_mem: int = 0
  time_sum_s: float = 0.0

  @staticmethod
  def reset() -> None:
    GlobalCounters.kernel_count, GlobalCounters.global_ops, GlobalCounters.global_mem, GlobalCounters.time_sum_s = 0, 0, 0, 0.0


# Python's default first garbage-collection threshold: a collection of the youngest objects every 700 allocations
PYTHON_GC_THRESHOLD = 700


def tune_garbage_collection() -> None:
  """Collect the youngest objects every MINIGRAD_GC_THRESHOLD allocations (default 10,000; 0 leaves Python's 700)
  unless the program set its own threshold. An eager training step makes tens of thousands of short-lived objects
  (graph nodes, tensors, ops) beside a long-lived heap (compiled kernels, cached graphs): collected every 700, each
  step's graph lives long enough to reach the oldest generation, and the collector then walks the whole heap every
  few steps, a fifth of a plain GPT step's time. A step's graph dies by reference counting (it has no cycles), so
  collecting less often frees the same memory as soon."""
  threshold = getenv("MINIGRAD_GC_THRESHOLD", 10000)
  first, *older = gc.get_threshold()
  if threshold > 0 and first == PYTHON_GC_THRESHOLD: gc.set_threshold(threshold, *older)


def prod(xs: Iterable[int]) -> int: return math.prod(xs)


def cached_hash(cls: type) -> type:
  """Class decorator for a frozen dataclass used as a dict key on hot paths (dtypes, views, shape trackers): its
  generated __hash__ rehashes every field on every call; this one does it once per object. The cached value is
  left out of pickles (string hashes differ between processes)."""
  field_hash = cls.__hash__

  def __hash__(self: Any) -> int:
    try: return self.__dict__["_hash"]
    except KeyError:
      value = self.__dict__["_hash"] = field_hash(self)
      return value

  def __getstate__(self: Any) -> dict: return {k: v for k, v in self.__dict__.items() if k != "_hash"}
  cls.__hash__, cls.__getstate__ = __hash__, __getstate__   # type: ignore[method-assign]
  return cls


class cached_property:
  """A property computed on first use and stored in the instance's __dict__ (read from there afterwards, without a
  call). functools.cached_property does the same but takes a lock on every first use (Python < 3.12): graph nodes
  compute their shape and device once each, hundreds of times per training step, always on one thread."""
  def __init__(self, compute: Any):
    self.compute, self.name, self.__doc__ = compute, compute.__name__, compute.__doc__
  def __set_name__(self, owner: type, name: str) -> None: self.name = name
  def __get__(self, instance: Any, owner: type | None = None) -> Any:
    if instance is None: return self
    value = instance.__dict__[self.name] = self.compute(instance)
    return value


def colored(text: str, color: str | None) -> str:
  codes = {"red": 31, "green": 32, "yellow": 33, "blue": 34, "magenta": 35, "cyan": 36, "white": 37}
  return f"\u001b[{codes[color]}m{text}\u001b[0m" if color else text


def to_tuple(shape: Any) -> tuple[int, ...]:
  if isinstance(shape, int): return (shape,)
  return tuple(int(s) for s in shape)
