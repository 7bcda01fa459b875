"""The LLVM device: host memory, LLVM IR compiled in-process with llvmlite for this CPU, kernels run with ctypes.

Input: LLVM IR text from minigrad.codegen.llvm_renderer (one exported `void @name(ptr..., i32...)` per kernel).
Output: `create_device()` -> a `Compiled` whose compiler optimizes the IR for the CPU device's Target
(minigrad/target.py): with -march=native, the host CPU's name and features as LLVM sees them (so AVX-512 is used where
present); with CPU_TARGET=<march>, that CPU name and the Target's features. It emits an object file and links it into
a shared library (bytes, cached on disk by the Compiler base, keyed by the Target's ISA among the rest). The library
is loaded and launched exactly as the CPU backend's: the same allocator, thread pool and outer-loop splitting
(minigrad.runtime.ops_cpu).

Linking with the system's C compiler driver (`cc -shared ... -lm -lmvec`) lets the dynamic loader resolve the libm
functions LLVM calls for exp2/log2/sin (and glibc's SIMD variants the renderer calls on vectors), and unloading a
kernel is an ordinary dlclose.
"""
from __future__ import annotations
import functools
import os
import subprocess
import tempfile
import threading
from minigrad.helpers import DEBUG
from minigrad.target import Target, cpu_target
from minigrad.runtime.device import Compiled, CompileError, Compiler, numbered_source
from minigrad.runtime.ops_cpu import CPUAllocator, CPUProgram, find_c_compiler, has_libmvec
from minigrad.codegen.llvm_renderer import LLVMRenderer

try:
  import llvmlite
  import llvmlite.binding as llvm
except ModuleNotFoundError as e:
  raise RuntimeError("the LLVM backend needs llvmlite, which is not installed: pip install -e .[llvm] "
                     "(or pip install 'llvmlite>=0.45')") from e
if llvm.llvm_version_info < (20,):   # older LLVMs in llvmlite can't parse the opaque `ptr` type the renderer writes
  raise RuntimeError(f"the LLVM backend needs llvmlite >= 0.45 (LLVM 20+), found llvmlite {llvmlite.__version__} "
                     f"with LLVM {'.'.join(map(str, llvm.llvm_version_info))}: pip install -e .[llvm]")

OPT_LEVEL = 2
# glibc's SIMD math library: vector width -> (ISA letter in the function names, the CPU feature it needs)
LIBMVEC_VARIANTS = {4: ("b", "sse2"), 8: ("d", "avx2"), 16: ("e", "avx512f")}
_llvm_lock = threading.Lock()   # LLVM's global context is not thread-safe


def llvm_cpu(target: Target) -> tuple[str, str]:
  """(CPU name, features string) for LLVM's target machine: the host's own for -march=native, else the march as the
  CPU name and the Target's features ("+avx2,+fma,..."), which also hold where LLVM doesn't know the name."""
  if target.march == "native": return llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()
  return target.march, ",".join(f"+{feature}" for feature in sorted(target.features))


class LLVMCompiler(Compiler):
  """LLVM IR text -> optimized object code for the Target (default: minigrad.target.cpu_target() as the linking C
  compiler sees it) -> a shared library (bytes)."""

  def __init__(self, opt_level: int = OPT_LEVEL, link_timeout_s: float = 60.0, target: Target | None = None):
    llvm.initialize_native_target()   # llvmlite >= 0.45 initializes the rest of LLVM itself
    llvm.initialize_native_asmprinter()
    self.opt_level, self.link_timeout_s = opt_level, link_timeout_s
    self.linker, linker_version = find_c_compiler(purpose="to link LLVM kernels into shared libraries")
    self.target = target if target is not None else cpu_target(self.linker)
    self.cpu_name, self.features = llvm_cpu(self.target)
    self.target_machine = llvm.Target.from_default_triple().create_target_machine(
      cpu=self.cpu_name, features=self.features, opt=opt_level, reloc="pic", codemodel="default")
    enabled = {f[1:] for f in self.features.split(",") if f.startswith("+")}
    self.libmvec_widths = {width: letter for width, (letter, feature) in LIBMVEC_VARIANTS.items()
                           if feature in enabled} if has_libmvec() else {}
    self.avx512 = "avx512f" in enabled and self.target_machine.triple.startswith("x86_64")
    self.libraries = ["-lm"] + (["-lmvec"] if self.libmvec_widths else [])
    super().__init__(f"llvmlite {llvmlite.__version__} LLVM {'.'.join(map(str, llvm.llvm_version_info))} O{opt_level} "
                     f"triple={self.target_machine.triple} cpu={self.cpu_name} features={self.features} "
                     f"linker={self.linker[0]} [{linker_version}] {' '.join(self.libraries)} target={self.target.key}")

  def compile(self, src: str) -> bytes:
    return self.link(self.compile_object(src))

  def compile_object(self, src: str) -> bytes:
    """Parse, verify and optimize the IR, then emit an object file for the host CPU."""
    with _llvm_lock:
      try:
        module = llvm.parse_assembly(src)
        module.verify()
      except RuntimeError as e:
        raise CompileError(f"LLVM rejected the kernel IR: {str(e).strip()}\n--- source ---\n{numbered_source(src)}") from None
      module.triple = self.target_machine.triple
      module.data_layout = str(self.target_machine.target_data)
      tuning = llvm.create_pipeline_tuning_options(speed_level=self.opt_level)
      tuning.loop_vectorization = tuning.slp_vectorization = True
      passes = llvm.create_pass_builder(self.target_machine, tuning)
      passes.getModulePassManager().run(module, passes)
      if DEBUG >= 6: print(str(module))
      return self.target_machine.emit_object(module)

  def link(self, obj: bytes) -> bytes:
    """Link an object file into a shared library with the system's compiler driver."""
    with tempfile.TemporaryDirectory(prefix="minigrad_llvm_") as workdir:
      obj_path, lib_path = os.path.join(workdir, "kernel.o"), os.path.join(workdir, "kernel.so")
      with open(obj_path, "wb") as f: f.write(obj)
      command = [*self.linker, "-shared", "-o", lib_path, obj_path, *self.libraries]
      try: result = subprocess.run(command, capture_output=True, text=True, timeout=self.link_timeout_s)
      except subprocess.TimeoutExpired: raise CompileError(f"linking the kernel took over {self.link_timeout_s} s: {' '.join(command)}") from None
      if result.returncode != 0:
        raise CompileError(f"linking the kernel failed (exit code {result.returncode}): {' '.join(command)}\n{(result.stderr + result.stdout).strip()}")
      with open(lib_path, "rb") as f: return f.read()


class LLVMProgram(CPUProgram):
  """A kernel compiled by LLVM: the same shared-library calling convention as CPU kernels, so the same launcher
  (`program(*buffer_addresses, vals=(), wait=False, outer_loop=None, work=0)`, outer loop split over threads)."""

  def __repr__(self) -> str: return f"<LLVMProgram {self.name}>"


def create_device() -> Compiled:
  compiler = LLVMCompiler()
  # the renderer may call the SIMD math functions this CPU and C library have
  renderer = LLVMRenderer(libmvec_widths=compiler.libmvec_widths, avx512=compiler.avx512, target=compiler.target)
  return Compiled("LLVM", CPUAllocator(), compiler, renderer, functools.partial(LLVMProgram, target=compiler.target))
