"""Cross-compilation: every CPU/LLVM kernel also optimized, rendered and compiled for another CPU (issue #21).

Input: a kernel AST and the opts the host device was told to apply (None: its own choice), from
minigrad/engine/realize.py::get_kernel; $CROSS_CC, the cross C compiler's command (`aarch64-linux-gnu-gcc`, or
`clang --target=aarch64-linux-gnu`); $CROSS_TARGET, its -march (default by the compiler's architecture, see
DEFAULT_MARCHES: armv8.2-a+fp16+dotprod on aarch64).
Output: `cross_compile(ast, opts)` -> a `CrossKernel`: the kernel optimized for the cross compiler's Target (a fresh
Kernel with the hand-coded choices, or the given opts where they fit that Target), rendered by a C renderer
configured from that compiler's capabilities (as the CPU device configures its own) and compiled to a relocatable
object file (-c: not linked, never run) with the CPU device's flags and the Target's -march. A kernel the compiler
rejects raises CompileError with its diagnostics and the numbered source, as the CPU device does.

With CROSS_CC set, get_kernel calls `cross_compile` for each kernel it builds for the CPU and LLVM devices, while the
program runs (and its numbers are checked) on the host, the way CUDA_COMPILE_ONLY works for CUDA:
    CROSS_CC=aarch64-linux-gnu-gcc python -m pytest -q tests/test_ops.py
(on Debian/Ubuntu: apt-get install gcc-aarch64-linux-gnu libc6-dev-arm64-cross).

Documented caches: `_toolchains` (the cross compiler, its Target and renderer by (CROSS_CC, march)) and `_compiled`
(the CrossKernel of each (toolchain, AST, opts): each kernel is cross-compiled once per process); the object files
are also kept in the compiler disk cache (Compiler.compile_cached). `cross_compile_count` counts the kernels compiled.
"""
from __future__ import annotations
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence
import os
import re
import shlex
import subprocess
import threading
from minigrad.helpers import DEBUG, NOOPT
from minigrad.target import EXAMPLE_MARCHES, Target, cpu_target
from minigrad.runtime.device import Compiler, CompileError
from minigrad.runtime.ops_cpu import CCompiler, configure_renderer, find_c_compiler
if TYPE_CHECKING:   # codegen/ comes before runtime/ in the data flow: imported inside the functions that use it
  from minigrad.codegen.kernel import Kernel, Opt
  from minigrad.uop.ops import UOp

CROSS_DEVICES = ("CPU", "LLVM")   # the devices whose kernels are C-compatible CPU kernels, also built for the cross Target
# the -march a cross compiler builds for when CROSS_TARGET is not set, by its architecture (`<cc> -dumpmachine`)
DEFAULT_MARCHES = {"aarch64": "armv8.2-a+fp16+dotprod", "x86_64": "x86-64"}
INSTALL_HINT = "apt-get install gcc-aarch64-linux-gnu libc6-dev-arm64-cross"
EM_AARCH64, EM_X86_64 = 183, 62   # ELF e_machine values
# one tiny translation unit that needs the C library's headers: a compiler without them fails here, not in every probe
SANITY_SOURCE = "#include <math.h>\n#include <stdint.h>\nfloat cross_sanity(float x) { return sqrtf(x) + (float)(uintptr_t)0; }\n"


class CrossCompilerMissing(RuntimeError):
  """$CROSS_CC names a compiler that is not installed or doesn't run."""


# -c: an object file, nothing linked. A call to a function nothing declares (an x86 intrinsic that slipped out of its
# `#if defined(__x86_64__)` guard) is an error, as loading the kernel would be on the machine (gcc 12 only warns)
OBJECT_FLAGS = ("-c", "-Werror=implicit-function-declaration")


class CrossCompiler(CCompiler):
  """C source -> a relocatable object file (bytes) for `target`: the CPU device's compiler flags (CFLAGS, and gcc's)
  with OBJECT_FLAGS and the Target's -march, no libraries. Its capability probe compiles objects too, so a cross
  compiler without a C library to link against still tells what it accepts."""

  def __init__(self, cc: str, target: Target, timeout_s: float = 120.0):
    super().__init__(cc, timeout_s, extra_flags=OBJECT_FLAGS, target=target)
    self.flags, self.libraries = tuple(f for f in self.flags if f != "-shared"), []   # nothing is linked
    Compiler.__init__(self, f"{shlex.join(self.argv)} [{self.version}] {' '.join(self.flags)} target={self.target.key} object")

  @property
  def description(self) -> str: return f"{shlex.join(self.argv)} ({self.version}) for {self.target.arch} -march={self.target.march}"

  output_name = "kernel.o"

  def failure(self) -> str: return f"{self.argv[0]} failed for {self.target.arch} -march={self.target.march}"


@dataclass(frozen=True)
class Toolchain:
  """A cross compiler, the Target it builds for and a C renderer configured for it."""
  compiler: CrossCompiler
  target: Target
  renderer: Any   # a minigrad.codegen.c_renderer.CRenderer


@dataclass(frozen=True)
class CrossKernel:
  """One kernel built for the cross Target: its name, the Target, the opts applied for it, its C source and the
  relocatable object file the cross compiler made of it."""
  name: str
  target: Target
  opts: tuple[Opt, ...]
  source: str
  obj: bytes


_lock = threading.Lock()
_toolchains: dict[tuple[str, str | None], Toolchain] = {}
_compiled: dict[tuple[str, UOp, tuple[Opt, ...] | None], CrossKernel] = {}
cross_compile_count = 0   # kernels cross-compiled in this process


def requested_compiler() -> str:
  """$CROSS_CC, stripped ("" when unset)."""
  return os.environ.get("CROSS_CC", "").strip()


def _architecture(argv: list[str]) -> str:
  """The architecture a compiler builds for, from `<cc> -dumpmachine` (aarch64-linux-gnu -> aarch64)."""
  try: result = subprocess.run([*argv, "-dumpmachine"], capture_output=True, text=True, timeout=60)
  except (OSError, subprocess.TimeoutExpired) as e: raise CrossCompilerMissing(f"CROSS_CC={shlex.join(argv)!r} did not run: {e}") from None
  machine = result.stdout.strip().split("-")[0] if result.returncode == 0 else ""
  return {"arm64": "aarch64", "amd64": "x86_64"}.get(machine, machine)


def toolchain(cc: str | None = None, march: str | None = None) -> Toolchain:
  """The cross toolchain for the compiler command `cc` (default $CROSS_CC) and `march` (default $CROSS_TARGET, else
  DEFAULT_MARCHES for the compiler's architecture). A compiler that is missing raises CrossCompilerMissing naming it
  and how to install it; one that can't compile C with <math.h> (no C library headers for its target) raises too."""
  cc = cc if cc is not None else requested_compiler()
  march = march if march is not None else (os.environ.get("CROSS_TARGET", "").strip() or None)
  if not cc: raise ValueError("no cross compiler: set CROSS_CC to its command (e.g. CROSS_CC=aarch64-linux-gnu-gcc)")
  with _lock:
    if (found := _toolchains.get((cc, march))) is not None: return found
    try: argv, _ = find_c_compiler(cc, purpose="for cross-compiling")
    except RuntimeError:
      raise CrossCompilerMissing(f"CROSS_CC={cc!r}: no such C compiler ({shlex.split(cc)[0] if shlex.split(cc) else 'empty command'} is "
                                 f"not installed or doesn't run); install the aarch64 cross compiler ({INSTALL_HINT}) or unset CROSS_CC") from None
    arch = _architecture(argv)
    if march is None:
      if arch not in DEFAULT_MARCHES:
        raise ValueError(f"CROSS_CC={cc!r} builds for {arch or 'an unknown architecture'}: set CROSS_TARGET to a -march name it accepts")
      march = DEFAULT_MARCHES[arch]
    try: target = cpu_target(argv, march)
    except ValueError as e:   # its message speaks of CPU_TARGET and the host's marches
      said = re.search(r"knows \((.*)\); valid examples", str(e))
      examples = EXAMPLE_MARCHES.get(arch, "a -march name the compiler accepts").removeprefix("native, ")
      raise ValueError(f"CROSS_TARGET={march!r} is not a -march {cc} accepts ({said.group(1) if said else e}); "
                       f"valid examples: {examples}") from None
    compiler = CrossCompiler(cc, target)
    try: compiler.compile(SANITY_SOURCE)
    except CompileError as e:
      raise CrossCompilerMissing(f"CROSS_CC={cc!r} can't compile C for {target.arch} (are its C library headers installed? "
                                 f"{INSTALL_HINT}):\n{e}") from None
    renderer = configure_renderer(_c_renderer(), compiler)
    if DEBUG >= 2: print(f"cross target: {target.summary()}; {compiler.description}; float16 as {renderer.float16_mode}")
    _toolchains[(cc, march)] = found = Toolchain(compiler, target, renderer)
    return found


def _c_renderer() -> Any:
  from minigrad.codegen.c_renderer import CRenderer
  return CRenderer()


def _fits(uops: list[UOp], target: Target) -> bool:
  """Does every vector of the rendered kernel fit one of the Target's SIMD registers (masks count 4 bytes a lane)?"""
  from minigrad.dtype import PtrDType, dtypes
  for u in uops:
    dt = u.dtype
    if isinstance(dt, PtrDType) or dt.count == 1: continue
    lane_bytes = 4 if dt.scalar() == dtypes.bool else dt.scalar().itemsize
    if lane_bytes * dt.count > target.vector_bytes: return False
  return True


def optimize_and_render(ast: UOp, opts: Sequence[Opt] | None, chain: Toolchain) -> tuple[Kernel, str]:
  """(Kernel, C source) of `ast` for the toolchain's Target: with `opts`, those actions if they apply and their
  vectors fit the Target's registers; otherwise (or with opts None) the hand-coded choices (none with NOOPT=1)."""
  from minigrad.codegen.kernel import Kernel, KernelOptError
  from minigrad.opt.heuristics import hand_coded_optimizations
  from minigrad.codegen.linearizer import linearize_for
  if opts is not None:
    kernel = Kernel(ast, has_local=False, target=chain.target)
    try:
      for opt in opts: kernel.apply_opt(opt)
      uops = linearize_for(kernel, chain.renderer)
      if _fits(uops, chain.target): return kernel, chain.renderer.render(kernel.name, uops)
    except KernelOptError: pass
    if DEBUG >= 3: print(f"cross target: opts {list(opts)} don't fit {chain.target.arch} -march={chain.target.march}; hand-coded instead")
  kernel = Kernel(ast, has_local=False, target=chain.target)
  if opts is not None or not NOOPT: hand_coded_optimizations(kernel)
  return kernel, chain.renderer.render(kernel.name, linearize_for(kernel, chain.renderer))


def cross_compile(ast: UOp, opts: Sequence[Opt] | None = None, cc: str | None = None, march: str | None = None) -> CrossKernel:
  """The kernel AST `ast` optimized for the cross Target (see optimize_and_render), rendered and compiled to an object
  file by the cross compiler `cc`/`march` (default $CROSS_CC/$CROSS_TARGET, see `toolchain`); once per process for
  each (toolchain, ast, opts). CompileError if the compiler rejects the source."""
  global cross_compile_count
  chain = toolchain(cc, march)
  key = (chain.compiler.cache_key, ast, None if opts is None else tuple(opts))
  if (found := _compiled.get(key)) is not None: return found
  kernel, source = optimize_and_render(ast, opts, chain)
  obj = chain.compiler.compile_cached(source)
  built = CrossKernel(kernel.name, chain.target, tuple(kernel.applied_opts), source, obj)
  with _lock:
    _compiled[key] = built
    cross_compile_count += 1
  if DEBUG >= 2: print(f"cross-compiled {kernel.name} for {chain.target.arch} -march={chain.target.march}: {len(obj)} bytes, opts {kernel.applied_opts}")
  if DEBUG >= 4: print(source)
  return built


def cross_compile_for(device: str, ast: UOp, opts: Sequence[Opt] | None, cc: str) -> CrossKernel | None:
  """get_kernel's hook (when $CROSS_CC is set, read once like every flag): a kernel built for a CPU/LLVM device is
  also cross-compiled by `cc`; kernels of other devices are left alone (None)."""
  if device.split(":")[0].upper() not in CROSS_DEVICES: return None
  return cross_compile(ast, opts, cc)


def cross_kernels() -> list[CrossKernel]:
  """Every kernel cross-compiled in this process, in order (tests look at the newest)."""
  return list(_compiled.values())


def elf_machine(obj: bytes) -> int:
  """The e_machine field of an ELF file (183: aarch64, 62: x86-64); ValueError if `obj` is not ELF."""
  if obj[:4] != b"\x7fELF": raise ValueError("not an ELF file")
  return int.from_bytes(obj[18:20], "little" if obj[5] == 1 else "big")
