"""Device-independent runtime: buffers, allocators, the compiler base with its disk cache, and the device registry.

Input: a device name ("CPU", "cpu", "CPU:0"), host data (numpy arrays, bytes, memoryviews) and kernel source text.
Output: `Buffer`s living on a device, compiled binaries (bytes, cached on disk in the "compiled" folder of
minigrad.cache), and `Compiled` devices from the `Device` registry, each bundling
an allocator, a compiler, a renderer and a program class. Backends live in `ops_<name>.py` next to this file.
"""
from __future__ import annotations
from typing import Any, Mapping
import hashlib
import importlib
import os
import pathlib
import threading
import numpy as np
from minigrad.dtype import DType, dtypes, to_numpy
from minigrad import cache
from minigrad.helpers import DEBUG
from minigrad.runtime import cpu_pool

DEVICE_NAMES: tuple[str, ...] = ("CPU", "LLVM", "CL", "CUDA", "PYTHON")


class CompileError(RuntimeError):
  """A kernel failed to compile. The message holds the compiler's diagnostics and the numbered source."""


def numbered_source(src: str) -> str:
  """`src` with 1-based line numbers, so compiler diagnostics ("<stdin>:12:5") can be matched by eye."""
  lines = src.splitlines()
  width = len(str(len(lines)))
  return "\n".join(f"{i:>{width}} | {line}" for i, line in enumerate(lines, start=1))


# ---------------------------------------------------------------- bfloat16 <-> float32 on the host

def float32_to_bfloat16_bits(values: np.ndarray) -> np.ndarray:
  """Round float values to bfloat16 (round to nearest, ties to even) and return the 16-bit words as uint16.

  NaNs stay NaN (a quiet NaN with the input's sign); values past the largest bfloat16 round to +-inf."""
  bits = np.ascontiguousarray(values, dtype=np.float32).reshape(-1).view(np.uint32)
  lower_half_bias = np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))   # ties go to the even word
  rounded = ((bits + lower_half_bias) >> np.uint32(16)).astype(np.uint16)          # uint32 wrap only hits NaNs
  quiet_nan = ((bits >> np.uint32(16)) & np.uint32(0x8000)).astype(np.uint16) | np.uint16(0x7FC0)
  is_nan = (bits & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
  return np.where(is_nan, quiet_nan, rounded).astype(np.uint16)


def bfloat16_bits_to_float32(words: np.ndarray) -> np.ndarray:
  """Widen bfloat16 words (uint16) to float32 exactly: the bf16 word is the top half of the float32."""
  return (np.ascontiguousarray(words, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


# ---------------------------------------------------------------- memory

class Allocator:
  """Hands out device memory as opaque handles. Subclasses implement `_alloc`, `_free`, `copyin` and `copyout`."""

  def alloc(self, nbytes: int) -> Any:
    if nbytes < 0: raise ValueError(f"can't allocate a negative number of bytes ({nbytes})")
    return self._alloc(nbytes)

  def free(self, opaque: Any) -> None: self._free(opaque)

  def _alloc(self, nbytes: int) -> Any: raise NotImplementedError(f"{type(self).__name__} must implement _alloc")
  def _free(self, opaque: Any) -> None: raise NotImplementedError(f"{type(self).__name__} must implement _free")

  def copyin(self, dest: Any, src: memoryview) -> None:
    """Copy host bytes `src` (len(src) == the allocation's nbytes) into the allocation `dest`."""
    raise NotImplementedError(f"{type(self).__name__} must implement copyin")

  def copyout(self, dest: memoryview, src: Any) -> None:
    """Copy the allocation `src` into the writable host memory `dest` (same number of bytes)."""
    raise NotImplementedError(f"{type(self).__name__} must implement copyout")

  shares_host_arrays = False   # True: its memory is the user's numpy arrays (Tensor.from_numpy), which they may change

  def share(self, array: np.ndarray) -> tuple[Allocator, Any]:
    """(the allocator that frees it, an opaque handle) for memory shared with a C-contiguous host array instead of
    copied; only devices that keep buffers in host memory can share."""
    raise NotImplementedError(f"{type(self).__name__} can't share host memory")


def _as_byte_view(data: memoryview | bytes | bytearray) -> memoryview:
  view = memoryview(data)
  if not view.c_contiguous: raise ValueError("copyin needs C-contiguous memory")
  return view.cast("B") if view.format != "B" or view.ndim != 1 else view


class Buffer:
  """`size` elements of `dtype` on `device`. Memory is taken from the device's allocator on `allocate()`
  (or the first `copyin`) and returned when the Buffer is garbage-collected."""

  def __init__(self, device: str, size: int, dtype: DType):
    if size < 0: raise ValueError(f"Buffer size must be >= 0, got {size}")
    self.device, self.size, self.dtype = Device.canonicalize(device), int(size), dtype
    self.nbytes = self.size * dtype.itemsize   # read for every launch (GlobalCounters): kept, not computed
    self._allocator: Allocator | None = None
    self._opaque: Any = None

  @property
  def is_allocated(self) -> bool: return self._allocator is not None

  @property
  def opaque(self) -> Any:
    """The allocator's handle for this memory (on CPU: an int address usable as a C pointer). Whoever takes it may
    touch the memory, so kernels submitted to the CPU thread pool are waited for first."""
    if self._allocator is None: raise RuntimeError(f"{self!r} is not allocated; call .allocate() first")
    if cpu_pool.in_flight_addresses: cpu_pool.wait()
    return self._opaque

  def allocate(self) -> Buffer:
    if self._allocator is None:
      # an opened device is read from the registry's dict directly (no lock: a dict read is atomic; called per buffer)
      allocator = (Device._devices.get(self.device) or Device[self.device]).allocator
      self._opaque = allocator.alloc(self.nbytes)
      self._allocator = allocator
    return self

  @staticmethod
  def of_host_array(device: str, array: np.ndarray, dtype: DType) -> Buffer:
    """A buffer whose memory is that of `array` (C-contiguous, elements of `dtype`), shared, not copied."""
    buffer = Buffer(device, array.size, dtype)
    try: buffer._allocator, buffer._opaque = Device[buffer.device].allocator.share(array)
    except NotImplementedError:
      raise RuntimeError(f"device {buffer.device} keeps buffers in its own memory and can't share a numpy array's; "
                         "Tensor(array, device=...) copies it") from None
    return buffer

  def deallocate(self) -> None:
    """Return the memory now rather than at garbage collection. The Buffer may be allocated again later."""
    if self._allocator is not None:
      allocator, opaque = self._allocator, self._opaque
      self._allocator, self._opaque = None, None
      allocator.free(opaque)

  def __del__(self) -> None:
    try: self.deallocate()
    except Exception: pass   # interpreter shutdown may already have torn the allocator down

  def copyin(self, data: np.ndarray | memoryview | bytes | bytearray) -> Buffer:
    """Copy host data in. numpy arrays must have this buffer's numpy dtype (or be raw uint8 bytes); a bfloat16
    buffer also takes float arrays, rounded to bfloat16 (nearest, ties to even), or uint16 bf16 words."""
    if isinstance(data, np.ndarray): data = self._host_bytes_of(data)
    view = _as_byte_view(data)
    if view.nbytes != self.nbytes:
      raise ValueError(f"copyin of {view.nbytes} bytes into {self!r}, which holds {self.nbytes} bytes")
    self.allocate()
    assert self._allocator is not None
    if cpu_pool.in_flight_addresses and self._opaque.__class__ is int and self._opaque in cpu_pool.in_flight_addresses:
      cpu_pool.wait()   # running kernels may use this memory (opaque is an address only for memory on the host)
    self._allocator.copyin(self._opaque, view)
    return self

  def _host_bytes_of(self, array: np.ndarray) -> memoryview:
    if self.dtype == dtypes.bfloat16 and array.dtype.kind == "f": array = float32_to_bfloat16_bits(array)
    elif self.dtype == dtypes.bfloat16 and array.dtype == np.uint16: pass   # already bf16 words
    elif array.dtype != np.uint8 and array.dtype != to_numpy(self.dtype):
      raise TypeError(f"copyin of a numpy {array.dtype} array into {self!r}; expected {to_numpy(self.dtype)} "
                      f"(convert with .astype first) or raw uint8 bytes")
    return memoryview(np.ascontiguousarray(array).reshape(-1)).cast("B")

  def copyout(self, dest: memoryview) -> None:
    """Copy the device memory into `dest`, writable host memory of exactly `nbytes` bytes."""
    view = memoryview(dest)
    if view.readonly: raise ValueError("copyout needs writable memory")
    if view.nbytes != self.nbytes:
      raise ValueError(f"copyout of {self!r} ({self.nbytes} bytes) into {view.nbytes} bytes of host memory")
    if self._allocator is None: raise RuntimeError(f"can't copy out of {self!r}: it is not allocated")
    if cpu_pool.in_flight_addresses: cpu_pool.wait()   # running kernels may still write it
    self._allocator.copyout(_as_byte_view(view), self._opaque)

  def numpy(self) -> np.ndarray:
    """A 1-D numpy copy of the contents, dtype `minigrad.dtype.to_numpy(self.dtype)` (bfloat16 -> float32)."""
    if self.dtype == dtypes.bfloat16:
      words = np.empty(self.size, dtype=np.uint16)
      self.copyout(memoryview(words).cast("B"))
      return bfloat16_bits_to_float32(words)
    out = np.empty(self.size, dtype=to_numpy(self.dtype))
    self.copyout(memoryview(out).cast("B"))
    return out

  def __repr__(self) -> str:
    state = "" if self.is_allocated else ", not allocated"
    return f"<Buffer {self.device} size={self.size} dtype={self.dtype}{state}>"


# ---------------------------------------------------------------- compilation and its disk cache



class Compiler:
  """Turns source text into a binary (bytes). `cache_key` names the compiler and its flags: two compilers
  with equal keys must produce interchangeable binaries for the same source. Disk entries are keyed by it, the
  source and minigrad's release (minigrad.cache.minigrad_version)."""

  def __init__(self, cache_key: str):
    self.cache_key = cache_key

  def compile(self, src: str) -> bytes:
    raise NotImplementedError(f"{type(self).__name__} must implement compile")

  def cache_path(self, src: str) -> pathlib.Path | None:
    key = f"minigrad {cache.minigrad_version()}\0{self.cache_key}"   # the compiler, its version, flags and Target
    return cache.entry("compiled", hashlib.sha256(f"{len(key)}:{key}".encode() + src.encode()).hexdigest())

  def compile_cached(self, src: str) -> bytes:
    """`compile(src)`, reusing an earlier result from disk (minigrad.cache: trusted folders only). A damaged cache
    entry is deleted and recompiled. DISABLE_COMPILER_CACHE=1 (or no usable cache folder) compiles every time."""
    if not disk_cache_enabled() or (path := self.cache_path(src)) is None: return self.compile(src)
    cached = cache.read(path, "compiler")
    if cached is not None: return cached
    binary = self.compile(src)
    cache.write(path, binary, "compiler")
    return binary


def disk_cache_enabled() -> bool:
  """False when DISABLE_COMPILER_CACHE is set or the cache folder isn't trusted (minigrad.cache): then neither
  compiled binaries nor rendered kernels are cached."""
  return cache.enabled()


# ---------------------------------------------------------------- devices

class Compiled:
  """A device: an allocator for memory, a compiler for source, a renderer that writes the source, and a
  program class (`program(name, binary)` returns a callable that launches the kernel)."""

  def __init__(self, name: str, allocator: Allocator, compiler: Compiler, renderer: Any, program: type):
    self.name, self.allocator, self.compiler, self.renderer, self.program = name, allocator, compiler, renderer, program

  def synchronize(self) -> None:
    """Wait until all launched work is done. Synchronous devices (CPU) need nothing."""

  def __repr__(self) -> str: return f"<Compiled device {self.name}>"


def _is_set(value: str | None) -> bool: return value is not None and value.strip() not in ("", "0")


def default_device_from_env(env: Mapping[str, str]) -> str:
  """The default device named by `env`: DEV=<name>, else one shorthand flag like CPU=1 or CL=1, else "CPU"."""
  if _is_set(env.get("DEV")): return Device.canonicalize(env["DEV"])
  flagged = [name for name in DEVICE_NAMES if _is_set(env.get(name))]
  if len(flagged) > 1:
    raise ValueError(f"conflicting device flags {', '.join(f'{n}={env[n]}' for n in flagged)}; set only one, or use DEV=<name>")
  return flagged[0] if flagged else "CPU"


class _DeviceRegistry:
  """`Device["CPU"]` -> the CPU `Compiled` device, created on first use from minigrad/runtime/ops_cpu.py."""

  def __init__(self) -> None:
    self._devices: dict[str, Compiled] = {}
    self._default: str | None = None
    self._lock = threading.Lock()

  @staticmethod
  def canonicalize(name: str) -> str:
    """"cpu", "CPU", "CPU:0" -> "CPU". Unknown names raise ValueError listing the valid ones."""
    if name in DEVICE_NAMES: return name   # already canonical: the common case, called for every new buffer
    base = name.split(":", 1)[0].strip().upper() if isinstance(name, str) else None
    if base not in DEVICE_NAMES:
      raise ValueError(f"unknown device {name!r}; valid devices are {', '.join(DEVICE_NAMES)}")
    return base

  def __getitem__(self, name: str) -> Compiled:
    canonical = self.canonicalize(name)
    with self._lock:
      if canonical not in self._devices: self._devices[canonical] = self._create(canonical)
      return self._devices[canonical]

  @staticmethod
  def _create(name: str) -> Compiled:
    module_name = f"minigrad.runtime.ops_{name.lower()}"
    try: module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
      if e.name == module_name:
        raise RuntimeError(f"the {name} backend is not available: {module_name} is not implemented") from e
      raise RuntimeError(f"the {name} backend is not available: it needs the missing module {e.name!r}") from e
    device = module.create_device()
    if DEBUG >= 1: print(f"opened device {name}")
    return device

  @property
  def DEFAULT(self) -> str:
    if self._default is None: self._default = default_device_from_env(os.environ)
    return self._default

  @DEFAULT.setter
  def DEFAULT(self, name: str) -> None: self._default = self.canonicalize(name)

  def __repr__(self) -> str: return f"<Device registry default={self.DEFAULT} opened={sorted(self._devices)}>"


Device = _DeviceRegistry()


def available_devices() -> list[str]:
  """The devices that open on this machine (their package, driver and hardware are there)."""
  names = []
  for name in DEVICE_NAMES:
    try: Device[name]
    except Exception: continue   # noqa: BLE001 - any failure to open means "not available here"
    names.append(name)
  return names
