"""The CPU device: host memory, a C compiler run as a subprocess, and kernels loaded with ctypes.

Input: C source text from minigrad.codegen.c_renderer (one exported `void name(...)` function per kernel).
Output: `create_device()` -> a `Compiled` whose compiler turns source into shared-library bytes and whose
program class loads those bytes and calls the kernel on buffer addresses plus int32 values.

The compiler builds for a Target (minigrad/target.py: -march=native, or $CPU_TARGET), and its binaries are keyed by
the Target's ISA (`Target.key`), the compiler and its flags, never by the CPU's model name: a cache carried to another
CPU finds binaries only when that CPU's code may assume the same instructions.
"""
from __future__ import annotations
from dataclasses import dataclass, asdict
from typing import Any
import ctypes
import _ctypes
import functools
import hashlib
import json
import os
import platform
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import numpy as np
from minigrad import cache
from minigrad.helpers import DEBUG, cpu_threads
from minigrad.target import X86_ARCHS, Target, cpu_target, ensure_runnable, march_flag_candidates
from minigrad.runtime.device import Allocator, Compiled, CompileError, Compiler, numbered_source
from minigrad.runtime.cpu_pool import ENTRY_SUFFIX, LaunchList

PARALLEL_MIN_WORK = 1 << 16   # loop iterations below which a second thread costs more than it saves
PARTS_PER_THREAD = 4          # a split kernel's outer loop is cut into this many parts per thread, taken in turn
ALIGNMENT = 64   # bytes; a cache line, and enough for AVX-512 aligned loads


class SharedHostArrays(Allocator):
  """Buffers sharing the memory of numpy arrays (Tensor.from_numpy): the opaque handle is the array's address,
  and `free` drops the reference that kept the array alive. One array may back several buffers."""

  shares_host_arrays = True

  def __init__(self) -> None:
    self._arrays: dict[int, list[np.ndarray]] = {}   # address -> uint8 views of the arrays shared at that address

  def share(self, array: np.ndarray) -> tuple[Allocator, int]:
    view = array.reshape(-1).view(np.uint8)   # C-contiguous: a view, not a copy
    address = view.__array_interface__["data"][0]
    self._arrays.setdefault(address, []).append(view)
    return self, address

  def _alloc(self, nbytes: int) -> int: raise RuntimeError("internal error: shared host arrays are not allocated")

  def _free(self, opaque: int) -> None:
    arrays = self._arrays[opaque]
    arrays.pop()
    if not arrays: del self._arrays[opaque]

  def copyin(self, dest: int, src: memoryview) -> None: self._arrays[dest][-1][:] = np.frombuffer(src, dtype=np.uint8)
  def copyout(self, dest: memoryview, src: int) -> None: np.frombuffer(dest, dtype=np.uint8)[:] = self._arrays[src][-1]


SPARE_MIN_BYTES, SPARE_BYTES = 64 << 10, 256 << 20


class CPUAllocator(Allocator):
  """Host memory from numpy, aligned to 64 bytes. The opaque handle is the int address of the first byte;
  the allocator keeps the backing array alive until `free`. Numpy arrays can also be shared (see SharedHostArrays)."""

  def __init__(self) -> None:
    self._memory: dict[int, np.ndarray] = {}   # address -> uint8 view of exactly nbytes at that address
    self._shared = SharedHostArrays()
    # freed allocations of SPARE_MIN_BYTES or more, by size, kept for the next allocation of that size (up to
    # SPARE_BYTES in all): an eager training loop frees and allocates the same sizes every step, and fresh memory
    # costs a page fault per 4 KiB on its first write
    self._spare: dict[int, list[tuple[int, np.ndarray]]] = {}
    self._spare_bytes = 0

  def share(self, array: np.ndarray) -> tuple[Allocator, int]: return self._shared.share(array)

  def _alloc(self, nbytes: int) -> int:
    if spares := self._spare.get(nbytes):
      address, view = spares.pop()
      self._spare_bytes -= nbytes
    else:
      raw = np.empty(nbytes + ALIGNMENT, dtype=np.uint8)   # the extra bytes also give size-0 buffers a unique address
      base = raw.__array_interface__["data"][0]   # (arr.ctypes builds a Python object per call)
      start = -base % ALIGNMENT
      view = raw[start:start + nbytes]
      address = base + start
    self._memory[address] = view
    return address

  def _free(self, opaque: int) -> None:
    if (view := self._memory.pop(opaque, None)) is None: raise ValueError(f"double free or foreign address {opaque:#x}")
    if view.nbytes >= SPARE_MIN_BYTES and self._spare_bytes + view.nbytes <= SPARE_BYTES:
      self._spare.setdefault(view.nbytes, []).append((opaque, view))
      self._spare_bytes += view.nbytes

  def as_numpy(self, opaque: int) -> np.ndarray:
    """The allocation as a writable uint8 numpy array sharing its memory (no copy)."""
    return self._memory[opaque]

  def copyin(self, dest: int, src: memoryview) -> None:
    self._memory[dest][:] = np.frombuffer(src, dtype=np.uint8)

  def copyout(self, dest: memoryview, src: int) -> None:
    np.frombuffer(dest, dtype=np.uint8)[:] = self._memory[src]


# ---------------------------------------------------------------- the C compiler

COMPILER_CANDIDATES = ("clang", "gcc", "cc")
# -ffp-contract=fast: a*b+c may become one fused multiply-add (one rounding, as in torch's GEMMs). No -ffast-math:
# NaN/inf semantics and the order of float additions stay as written.
# -fwrapv: signed integer overflow wraps around (as in torch/numpy) instead of being undefined behaviour.
# -fno-math-errno only stops sqrtf & co. from setting errno, which lets them become single instructions.
# -march=native stands for the flag by which the compiler takes the Target's instructions (see target_flag_candidates).
CFLAGS = ("-shared", "-O2", "-march=native", "-fPIC", "-ffp-contract=fast", "-fno-math-errno", "-fwrapv")
# gcc only: at -O2 gcc vectorizes a loop only when that costs nothing extra. Scalar kernels (the lanes are a small
# dim, e.g. a 2x2 pooling window) then keep their selects as branches, which mispredict on data (a max pooling's
# gradient spread ran five times slower). Kernels written with vector types compile to the same code either way.
# -fno-predictive-commoning: gcc 12 runs predictive commoning at -O2, and its "store-stores chains" break our threads.
# When a store of outer iteration g may hit the address of a store in iteration g+3 (out[16*g + 48*row]: g+3, row-1),
# it loads those later elements when the part starts and stores the loaded (stale) values back when it ends, over
# what another thread's part wrote meanwhile: a gather lost whole rows of its output now and then.
GCC_FLAGS = ("-fvect-cost-model=dynamic", "-fno-predictive-commoning")


def _probe_compiler(argv: list[str]) -> str | None:
  """The first line of `argv --version` if the compiler exists and runs, else None."""
  if shutil.which(argv[0]) is None: return None
  try: result = subprocess.run([*argv, "--version"], capture_output=True, text=True, timeout=30)
  except (OSError, subprocess.TimeoutExpired): return None
  if result.returncode != 0: return None
  return (result.stdout.strip().splitlines() or [argv[0]])[0]


def find_c_compiler(cc: str | None = None, purpose: str = "for the CPU device") -> tuple[list[str], str]:
  """(argv, version line) of the C compiler to use: `cc` or $CC if given (no fallback), else clang, gcc, cc.
  `purpose` completes the error message when there is none ("no working C compiler <purpose>")."""
  requested = cc if cc is not None else os.environ.get("CC") or None
  candidates = [requested] if requested else list(COMPILER_CANDIDATES)
  for candidate in candidates:
    argv = shlex.split(candidate)
    version = _probe_compiler(argv) if argv else None
    if version is not None: return argv, version
  tried = ", ".join(repr(c) for c in candidates)
  hint = (f"CC={requested!r} is set; point CC at a working C compiler or unset it" if requested else
          "install one (apt-get install gcc, or apt-get install clang) or set CC to a C compiler")
  raise RuntimeError(f"no working C compiler {purpose} (tried {tried}): {hint}")


# ---------------------------------------------------------------- what the compiler accepts (probed once)

# the compiler defines one of these when the target computes in half precision itself (AVX512-FP16, Armv8.2 FP16). Then
# gcc 12 and clang 14 turn float32 arithmetic between two roundings to _Float16 into half arithmetic and, under
# -ffp-contract=fast, fuse a half multiply and add into one FMA: a*b is never rounded to half, as torch rounds it
HALF_ARITHMETIC_MACROS = ("__AVX512FP16__", "__ARM_FEATURE_FP16_SCALAR_ARITHMETIC")
F16C_MACRO = "__F16C__"

# one small C source per feature; their names don't collide, so they also compile together as one source
FEATURE_PROBES: dict[str, str] = {
  # vector types: lanes, a scalar with a vector, comparisons giving masks, reinterpreting bits, lane-wise conversion
  "vector_extensions": """typedef float probe_f4 __attribute__((vector_size(16)));
typedef int probe_i4 __attribute__((vector_size(16)));
probe_f4 probe_vectors(probe_f4 a, probe_i4 m) {
  probe_f4 b = __builtin_convertvector(m, probe_f4) + a[0];
  probe_i4 keep = a > b;
  return (probe_f4)(((probe_i4)a & keep) | ((probe_i4)b & ~keep));
}
""",
  "shufflevector": """typedef float probe_s4 __attribute__((vector_size(16)));
probe_s4 probe_shuffle(probe_s4 a, probe_s4 b) { return __builtin_shufflevector(a, b, 0, 4, 1, 5); }
""",
  # _Float16 in memory, converted from and to float, double and ints, and in arithmetic
  "float16": """_Float16 probe_float16(_Float16* p, float f, int i, double d) {
  p[2] = (_Float16)f + (_Float16)i;
  return (_Float16)((float)p[0] * (float)p[1] + (float)(long long)p[2]) + (_Float16)(float)((double)p[1] * d);
}
""",
}


def _half_conversion_probe(mode: str) -> str:
  """The float16 word conversions the C renderer writes in `mode`, renamed so both modes compile in one source."""
  from minigrad.codegen.c_renderer import half_conversions
  names = f"#define half_to_float probe_{mode}_half_to_float\n#define float_to_half probe_{mode}_float_to_half\n"
  use = f"float probe_{mode}(float f) {{ return half_to_float(float_to_half(f)); }}\n"
  return names + "\n".join(half_conversions(mode)) + "\n" + use + "#undef half_to_float\n#undef float_to_half\n"


@dataclass(frozen=True)
class CompilerCapabilities:
  """What a C compiler accepts with the flags the CPU device compiles with (`CCompiler.probe`). The defaults are what
  minigrad assumes of a compiler it could not ask (the probe timed out)."""
  target_flags: tuple[str, ...] = ("-march=native",)   # the entry of target_flag_candidates the compiler takes
  vector_extensions: bool = True   # GCC/clang vector types (see FEATURE_PROBES)
  shufflevector: bool = True       # __builtin_shufflevector (clang; gcc 12 and newer)
  float16: bool = True             # _Float16 (gcc 12+ on x86-64; clang 15+ on x86-64, older clang only with AVX512-FP16)
  half_arithmetic: bool = False    # the target computes in half precision itself (HALF_ARITHMETIC_MACROS)
  f16c: bool = False               # the target has F16C (x86) and the F16C float16 conversions compile
  half_bits: bool = True           # the portable float16 conversions (integer code) compile
  errors: tuple[str, ...] = ()     # "feature: the compiler's first error line" for each feature it rejected


def float16_mode(capabilities: CompilerCapabilities) -> str | None:
  """How the CPU kernels spell float16 for a compiler (see CRenderer.float16_mode): C's _Float16 where the compiler has
  it and the target converts through float32, so every cast to _Float16 rounds; else the 16-bit words, converted with
  F16C where the target has it, else with integer code; None when none of these compiles."""
  if capabilities.float16 and not capabilities.half_arithmetic: return "native"
  if capabilities.f16c: return "f16c"
  if capabilities.half_bits: return "bits"
  return None


# probe answers by _probe_key: the documented in-process cache of CCompiler.probe (also kept on disk, see there)
_probed: dict[str, CompilerCapabilities] = {}


class CompileTimeout(CompileError):
  """The compiler did not finish within its time limit."""


def has_libmvec() -> bool:
  import ctypes.util
  return platform.machine() == "x86_64" and ctypes.util.find_library("mvec") is not None


def target_flag_candidates(target: Target) -> tuple[tuple[str, ...], ...]:
  """The flags that may stand for -march=native in CFLAGS when compiling for `target`, in order of preference. On
  x86 each comes first with -mprefer-vector-width set to the Target's vectors: clang (and gcc for some CPUs) tunes
  Intel's AVX-512 server CPUs for 256-bit vectors, splits the kernels' 64-byte vector types into halves and spills
  a register tile's 24 accumulators (a 1024^2 matmul ran at 0.4x the speed gcc's 512-bit code has)."""
  candidates = march_flag_candidates(target.march)
  if target.arch not in X86_ARCHS: return candidates
  prefer = f"-mprefer-vector-width={8 * target.vector_bytes}"
  return tuple(c for flags in candidates for c in (((*flags, prefer), flags) if flags else (flags,)))


class CCompiler(Compiler):
  """Compiles C source to a shared library (bytes) with clang/gcc in a subprocess, never for longer than
  `timeout_s` seconds, for `target` (default: minigrad.target.cpu_target() as this compiler sees it)."""

  def __init__(self, cc: str | None = None, timeout_s: float = 120.0, extra_flags: tuple[str, ...] = (),
               target: Target | None = None):
    self.argv, self.version = find_c_compiler(cc)
    self.target = target if target is not None else cpu_target(self.argv)
    # libm, and glibc's SIMD math library (libmvec) when it is there: kernels call its vector exp2f/log2f/sinf
    self.libraries = ["-lm"] + (["-lmvec"] if has_libmvec() else [])
    self.timeout_s = timeout_s
    flags = CFLAGS + (() if "clang" in self.version.lower() else GCC_FLAGS) + extra_flags
    self.capabilities = self.probe(flags)
    self.flags = _with_target(flags, self.capabilities.target_flags)
    super().__init__(f"{shlex.join(self.argv)} [{self.version}] {' '.join(self.flags + tuple(self.libraries))} "
                     f"target={self.target.key}")

  @property
  def description(self) -> str: return f"{shlex.join(self.argv)} ({self.version})"

  def has_shufflevector(self) -> bool:
    """Does the compiler know __builtin_shufflevector (clang, gcc 12 and newer)? See `probe`."""
    return self.capabilities.shufflevector

  def probe(self, flags: tuple[str, ...]) -> CompilerCapabilities:
    """What this compiler accepts with `flags` (CFLAGS and the rest; -march=native is tried as each entry of
    target_flag_candidates): which target flag, vector extensions, __builtin_shufflevector, _Float16, F16C, and whether
    the target computes in half precision itself. Asked once per compiler executable, version, flags and Target: kept
    in this process and on disk next to the compiled binaries (unless DISABLE_COMPILER_CACHE). Costs one preprocessor
    run and one tiny compile; a compiler that rejects that compile gets one compile per feature, to tell which it lacks."""
    key = _probe_key(self.argv, self.version, flags, self.target)
    if key in _probed: return _probed[key]
    path = cache.entry("compiler_probes", hashlib.sha256(key.encode()).hexdigest()) if cache.enabled() else None
    cached = cache.read(path, "compiler probe") if path is not None else None
    try: capabilities = CompilerCapabilities(**{k: tuple(v) if isinstance(v, list) else v for k, v in json.loads(cached).items()}) if cached else None
    except (ValueError, TypeError, AttributeError): capabilities = None   # another version's entry, or not a JSON object: asked again
    if capabilities is None:
      try: capabilities = self._ask(flags)
      except CompileTimeout:   # a compiler this slow gets what minigrad assumed before it asked; asked again next time
        if DEBUG >= 1: print(f"C compiler {self.description}: its probe did not finish within {self.timeout_s} s")
        return CompilerCapabilities(target_flags=target_flag_candidates(self.target)[0])
      if DEBUG >= 2: print(f"C compiler {self.description}: {capabilities}")
      if path is not None: cache.write(path, json.dumps(asdict(capabilities)).encode(), "compiler probe")
    _probed[key] = capabilities
    return capabilities

  def _ask(self, flags: tuple[str, ...]) -> CompilerCapabilities:
    macros: set[str] | None = None
    for target in target_flag_candidates(self.target):   # the first target flag the compiler takes, and its macros then
      self.flags = _with_target(flags, target)
      returncode, output = self._run([*self.argv, *self.flags, "-dM", "-E", "-x", "c", "-"], "")
      if returncode == 0:
        macros = {line.split()[1].split("(")[0] for line in output.splitlines() if line.startswith("#define ") and len(line.split()) > 1}
        break
    if macros is None: macros = set()   # it takes none of them, not even no flag: the compiles below fail and say why
    probes = dict(FEATURE_PROBES, half_bits=_half_conversion_probe("bits"))
    if F16C_MACRO in macros: probes["f16c"] = _half_conversion_probe("f16c")
    accepted = {name: True for name in probes}
    errors = []
    try: self.compile("".join(probes.values()))
    except CompileTimeout: raise
    except CompileError:   # one of them is missing: which?
      for name, source in probes.items():
        try: self.compile(source)
        except CompileTimeout: raise
        except CompileError as e:
          accepted[name] = False
          errors.append(f"{name}: {next((line.strip() for line in str(e).splitlines() if 'error' in line), str(e).splitlines()[0])}")
    return CompilerCapabilities(target, accepted["vector_extensions"], accepted["shufflevector"], accepted["float16"],
                                any(m in macros for m in HALF_ARITHMETIC_MACROS), accepted.get("f16c", False), accepted["half_bits"], tuple(errors))

  output_name = "kernel.so"   # what `compile` builds (a subclass may build an object file instead)

  def failure(self) -> str:
    """How a failed compile is introduced in its CompileError."""
    return f"{self.argv[0]} failed"

  def compile(self, src: str) -> bytes:
    with tempfile.TemporaryDirectory(prefix="minigrad_cc_") as workdir:
      output = os.path.join(workdir, self.output_name)
      command = [*self.argv, *self.flags, "-x", "c", "-", "-o", output, *self.libraries]
      if DEBUG >= 6: print("compiling:", shlex.join(command))
      returncode, stderr = self._run(command, src)
      if returncode != 0:
        raise CompileError(f"{self.failure()} (exit code {returncode}):\n{stderr.strip()}\n--- source ---\n{numbered_source(src)}")
      with open(output, "rb") as f: return f.read()

  def _run(self, command: list[str], src: str) -> tuple[int, str]:
    """Run the compiler in its own process group, so a timeout can stop it and every child it started."""
    process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, start_new_session=True)
    try: stdout, stderr = process.communicate(src, timeout=self.timeout_s)
    except subprocess.TimeoutExpired:
      try: os.killpg(process.pid, signal.SIGKILL)
      except OSError: pass
      process.communicate()
      raise CompileTimeout(f"{self.argv[0]} did not finish within {self.timeout_s} s\n"
                         f"--- source ---\n{numbered_source(src)}") from None
    return process.returncode, (stderr or "") + (stdout or "")


def _with_target(flags: tuple[str, ...], target: tuple[str, ...]) -> tuple[str, ...]:
  """`flags` with its -march=native replaced by `target` (an entry of target_flag_candidates)."""
  return tuple(flag for f in flags for flag in (target if f == "-march=native" else (f,)))


def _probe_key(argv: list[str], version: str, flags: tuple[str, ...], target: Target) -> str:
  """Names the compiler's answers: its command, the executable (path, size, time: a reinstall is asked anew), its
  version, the flags, the Target's ISA (-march=native means another target on another CPU) and the probes' sources."""
  executable = os.path.realpath(shutil.which(argv[0]) or argv[0])
  try: stat = os.stat(executable)
  except OSError: stat = None
  from minigrad.codegen.c_renderer import half_conversions
  probes = hashlib.sha256(repr((FEATURE_PROBES, target_flag_candidates(target), HALF_ARITHMETIC_MACROS, half_conversions("bits"),
                                half_conversions("f16c"), list(CompilerCapabilities.__dataclass_fields__))).encode()).hexdigest()
  return json.dumps([argv, executable, stat and stat.st_size, stat and stat.st_mtime_ns, version, flags, target.key, probes])


# ---------------------------------------------------------------- running compiled kernels

def load_library(lib: bytes) -> ctypes.CDLL:
  """dlopen the shared-library bytes. The file is deleted once loaded (the mapping keeps the code alive).
  Falls back to the cache directory when the temp directory is mounted noexec."""
  directories = [tempfile.gettempdir()] + ([str(tmp)] if cache.enabled() and (tmp := cache.trusted_folder("tmp")) else [])
  error: OSError | None = None
  for directory in directories:
    try:
      os.makedirs(directory, exist_ok=True)
      fd, path = tempfile.mkstemp(dir=directory, prefix="minigrad_kernel_", suffix=".so")
    except OSError as e:
      error = e
      continue
    try:
      with os.fdopen(fd, "wb") as f: f.write(lib)
      return ctypes.CDLL(path)
    except OSError as e: error = e
    finally: os.unlink(path)
  raise RuntimeError(f"could not load the compiled kernel library: {error}")


class CPUProgram:
  """A compiled kernel: `program(*buffer_addresses, wait=True, outer_loop=n, work=w)` runs it. Given the `target` it
  was compiled for, it refuses to load code this CPU can't run (minigrad.target.ensure_runnable).

  Kernels rendered by minigrad also export `<name>_entry(void *const *bufs, int core_start, int core_end)`: they
  run through the C thread pool (minigrad/runtime/cpu_pool.c), which cuts the outermost loop into parts the
  threads take in turn. Other code (a hand-written kernel, or `vals=(n, ...)` int arguments after the buffers)
  is called directly with ctypes, on the calling thread."""

  def __init__(self, name: str, lib: bytes, target: Target | None = None):
    if target is not None: ensure_runnable(target)
    self.name = name
    self.lib = load_library(lib)
    try: self.function = getattr(self.lib, name)
    except AttributeError: raise RuntimeError(f"the compiled library has no function named {name!r}") from None
    self.function.restype = None
    entry = getattr(self.lib, name + ENTRY_SUFFIX, None)
    self.entry: int | None = ctypes.cast(entry, ctypes.c_void_p).value if entry is not None else None
    self._arg_counts: tuple[int, int] | None = None   # (buffers, vals) of the first call, fixed after it
    self._single, self._single_list = threading.Lock(), None

  def _set_signature(self, num_buffers: int, num_vals: int) -> None:
    if self._arg_counts is None:
      self.function.argtypes = [ctypes.c_void_p] * num_buffers + [ctypes.c_int32] * num_vals
      self._arg_counts = (num_buffers, num_vals)
    elif self._arg_counts != (num_buffers, num_vals):
      raise TypeError(f"kernel {self.name} takes {self._arg_counts[0]} buffers and {self._arg_counts[1]} int values, "
                      f"got {num_buffers} and {num_vals}")

  def parts(self, outer_loop: int | None, work: int) -> int:
    """Into how many parts a launch cuts its outer loop: PARTS_PER_THREAD per thread when the kernel's `work`
    (loop iterations in all) pays for the other threads, else 1."""
    if outer_loop is None or work < PARALLEL_MIN_WORK: return 1
    threads = cpu_threads()
    return 1 if threads == 1 else min(outer_loop, threads * PARTS_PER_THREAD)

  def launch(self, buffers: tuple[int, ...], outer_loop: int | None, work: int) -> tuple[int, list[int], int, int]:
    """This kernel as one entry of a LaunchList (see minigrad/runtime/cpu_pool.py)."""
    if self.entry is None: raise RuntimeError(f"kernel {self.name} has no {self.name}{ENTRY_SUFFIX} function for the thread pool")
    return (self.entry, list(buffers), outer_loop or 0, self.parts(outer_loop, work))

  def __call__(self, *buffers: Any, vals: tuple[int, ...] = (), wait: bool = False, outer_loop: int | None = None,
               work: int = 0) -> float | None:
    """Run the kernel. With `outer_loop=n` the kernel takes (core_start, core_end) and its n outer iterations may be
    split over the threads (see `parts`)."""
    start = time.perf_counter()
    if self.entry is not None and not vals:
      launch = self.launch(buffers, outer_loop, work)
      if self._single.acquire(blocking=False):   # the list of one launch kept for this kernel (unless another thread uses it)
        try:
          if self._single_list is None: self._single_list = LaunchList([launch])
          else: self._single_list.set_launch(*launch[1:])
          self._single_list.run()
        finally: self._single.release()
      else: LaunchList([launch]).run()
    else:
      loop = () if outer_loop is None else (0, outer_loop)
      self._set_signature(len(buffers), len(vals) + len(loop))
      for value in vals:
        if not -2**31 <= value < 2**31: raise OverflowError(f"kernel {self.name}: value {value} does not fit a C int")
      self.function(*buffers, *vals, *loop)
    return time.perf_counter() - start if wait else None

  def __del__(self) -> None:
    # unload the library, so long searches that compile thousands of kernels don't keep them all mapped
    handle = getattr(getattr(self, "lib", None), "_handle", None)
    if handle is not None and hasattr(_ctypes, "dlclose"):
      try: _ctypes.dlclose(handle)
      except Exception: pass

  def __repr__(self) -> str: return f"<CPUProgram {self.name}>"


def create_device() -> Compiled:
  compiler = CCompiler()
  try:
    from minigrad.codegen.c_renderer import CRenderer
    renderer: Any = configure_renderer(CRenderer(), compiler)
  except ImportError:
    renderer = None
  return Compiled("CPU", CPUAllocator(), compiler, renderer, functools.partial(CPUProgram, target=compiler.target))


def configure_renderer(renderer: Any, compiler: CCompiler) -> Any:
  """Tell the C renderer what the compiler's answers decided (see CCompiler.probe): it only spells the decisions."""
  capabilities = compiler.capabilities
  renderer.vector_lanes = capabilities.vector_extensions   # without vector types, kernels stay scalar C
  renderer.shufflevector = capabilities.shufflevector
  renderer.target = compiler.target   # the instructions the compiler's -march has (the int8 dot product's)
  mode = float16_mode(capabilities)
  renderer.float16_mode = mode or "bits"
  renderer.float16_unavailable = "" if mode else (
    f"the CPU device can't compile float16 (half) kernels with {compiler.description}: it accepts neither _Float16 nor "
    f"the conversions of float16 words through float ({'; '.join(capabilities.errors) or 'no error given'}); set CC to "
    f"a C compiler that has _Float16 (gcc 12 or newer, clang 15 or newer)")
  return renderer
