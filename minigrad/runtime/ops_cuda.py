"""The CUDA device: NVRTC compiles CUDA C to PTX, the CUDA driver API (through cuda-python) loads and launches it.

Input: CUDA C source from minigrad.codegen.cuda_renderer. Output: `create_device()` -> a `Compiled` whose compiler
makes PTX for the GPU's compute capability (`compute_XY`, which the driver turns into machine code on load), whose
allocator holds device memory (cuMemAlloc, cuMemcpyHtoD/DtoH) and whose programs launch with grid = workgroups and
block = threads per workgroup, timed with CUDA events. `pip install -e .[cuda]` installs cuda-python and NVRTC;
launching also needs an NVIDIA GPU and its driver (libcuda). `CUDA_DEVICE=<n>` picks the n-th GPU.

Compile-only mode, for machines without a GPU: with `CUDA_COMPILE_ONLY=1` the program runs on its usual device
(CPU by default) and every kernel that minigrad/engine/realize.py::get_kernel builds is ALSO rendered for CUDA
(the same AST as a GPU-shaped Kernel with the hand-coded GPU choices) and compiled by NVRTC for sm_80, without
launching it. A kernel NVRTC rejects raises CompileError (source and NVRTC's log), so a test run checks that every
kernel it uses compiles for CUDA:
    CUDA_COMPILE_ONLY=1 python -m pytest -q tests/test_ops.py
`compile_only(ast)` is the function behind it (`render_for_cuda(ast)` gives the source it compiles);
`compile_only_count` counts the kernels it compiled in this process.
"""
from __future__ import annotations
from typing import Any
import ctypes
import os
import pathlib
import tempfile
import numpy as np
from minigrad import cache
from minigrad.helpers import DEBUG, NOOPT, prod
from minigrad.runtime.device import Allocator, Compiled, CompileError, Compiler, numbered_source

INSTALL_HINT = "pip install -e '.[cuda]' (installs cuda-python and nvidia-cuda-nvrtc)"
NO_GPU_HINT = "without a GPU, CUDA_COMPILE_ONLY=1 renders and compiles every kernel for CUDA with NVRTC, without launching it"
try: from cuda.bindings import driver, nvrtc
except ImportError as e: raise RuntimeError(f"the CUDA device needs the cuda-python package, which is not installed: {INSTALL_HINT}") from e

COMPILE_ONLY_ARCH = "sm_80"


# ---------------------------------------------------------------- NVRTC

def _nvrtc_check(result: Any, what: str) -> Any:
  status, *values = result if isinstance(result, tuple) else (result,)
  if status != nvrtc.nvrtcResult.NVRTC_SUCCESS: raise RuntimeError(f"NVRTC {what} failed: {status.name}")
  return values[0] if len(values) == 1 else values


def _nvrtc_header_dirs() -> list[str]:
  """Where cuda_fp16.h is: the headers bundled in NVRTC itself (extracted once into the cache directory), else a CUDA
  toolkit's include directory ($CUDA_HOME, /usr/local/cuda)."""
  if hasattr(nvrtc, "nvrtcInstallBundledHeaders"):
    major, minor = _nvrtc_check(nvrtc.nvrtcVersion(), "version")
    try: target = cache.folder(f"nvrtc_headers_{major}.{minor}")
    except OSError: target = pathlib.Path(tempfile.mkdtemp(prefix="minigrad_nvrtc_headers_"))   # no trusted cache folder
    if not (target / "cuda_fp16.h").exists():
      _nvrtc_check(nvrtc.nvrtcInstallBundledHeaders(str(target).encode(), nvrtc.NVRTC_INSTALL_HEADERS_SKIP_IF_EXISTS), "header install")
    return [str(target)]
  toolkits = [os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "", "/usr/local/cuda"]
  return [str(pathlib.Path(t) / "include") for t in toolkits if t and (pathlib.Path(t) / "include" / "cuda_fp16.h").exists()][:1]


class NVRTCCompiler(Compiler):
  """CUDA C -> PTX for `arch` ("sm_80"): PTX for the virtual architecture compute_80, loadable on that GPU and newer."""

  def __init__(self, arch: str):
    self.arch = arch
    self.options = [f"--gpu-architecture={arch.replace('sm_', 'compute_')}"]
    major, minor = _nvrtc_check(nvrtc.nvrtcVersion(), "version")
    super().__init__(f"nvrtc {major}.{minor} {' '.join(self.options)}")

  def compile(self, src: str) -> bytes:
    headers = _nvrtc_header_dirs() if "#include <cuda_fp16.h>" in src else []
    if "#include <cuda_fp16.h>" in src and not headers:
      raise CompileError("cuda_fp16.h not found: NVRTC 13+ bundles it (pip install -e '.[cuda]'), or set CUDA_HOME to a CUDA toolkit\n"
                         f"--- source ---\n{numbered_source(src)}")
    options = self.options + [f"-I{d}" for d in headers]
    program = _nvrtc_check(nvrtc.nvrtcCreateProgram(src.encode(), b"kernel.cu", 0, [], []), "create program")
    try:
      status, = nvrtc.nvrtcCompileProgram(program, len(options), [o.encode() for o in options])
      if status != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        log = _read_nvrtc(program, nvrtc.nvrtcGetProgramLogSize, nvrtc.nvrtcGetProgramLog).decode(errors="replace").strip("\0\n ")
        raise CompileError(f"NVRTC failed to compile for {self.arch} ({status.name}):\n{log}\n--- source ---\n{numbered_source(src)}")
      return _read_nvrtc(program, nvrtc.nvrtcGetPTXSize, nvrtc.nvrtcGetPTX)   # ends in the NUL byte cuModuleLoadData needs
    finally: nvrtc.nvrtcDestroyProgram(program)


def _read_nvrtc(program: Any, get_size: Any, get: Any) -> bytes:
  size = _nvrtc_check(get_size(program), get.__name__)
  out = b" " * size
  _nvrtc_check(get(program, out), get.__name__)
  return out


# ---------------------------------------------------------------- compile-only mode

compile_only_count = 0   # kernels compiled by compile_only in this process
_compile_only_seen: set[Any] = set()   # ASTs already compiled (get_kernel asks again for other opts of the same AST)
_compile_only_compiler: NVRTCCompiler | None = None


def render_for_cuda(ast: Any) -> str:
  """The CUDA source of the kernel AST `ast`: a GPU-shaped Kernel with the hand-coded GPU choices (none with NOOPT=1)."""
  return _render_for_cuda(ast)[1]


def _render_for_cuda(ast: Any) -> tuple[str, str]:
  from minigrad.codegen.kernel import Kernel
  from minigrad.opt.heuristics import hand_coded_optimizations
  from minigrad.codegen.linearizer import linearize_for
  from minigrad.codegen.cuda_renderer import CUDARenderer
  kernel, renderer = Kernel(ast, has_local=True), CUDARenderer()
  if not NOOPT: hand_coded_optimizations(kernel)
  return kernel.name, renderer.render(kernel.name, linearize_for(kernel, renderer))


def compile_only(ast: Any) -> None:
  """Render the kernel AST `ast` for CUDA and compile it with NVRTC for sm_80, without launching it (once per AST);
  CompileError if NVRTC rejects it."""
  global compile_only_count, _compile_only_compiler
  if ast in _compile_only_seen: return
  name, source = _render_for_cuda(ast)
  if _compile_only_compiler is None: _compile_only_compiler = NVRTCCompiler(COMPILE_ONLY_ARCH)
  _compile_only_compiler.compile_cached(source)
  _compile_only_seen.add(ast)
  compile_only_count += 1
  if DEBUG >= 2: print(f"CUDA compile-only: {name} compiled for {COMPILE_ONLY_ARCH}")


# ---------------------------------------------------------------- the driver API

def _check(result: Any, what: str) -> Any:
  status, *values = result
  if status != driver.CUresult.CUDA_SUCCESS:
    _, message = driver.cuGetErrorString(status)
    raise RuntimeError(f"CUDA {what} failed: {status.name} ({message.decode() if message else 'no description'})")
  return values[0] if len(values) == 1 else values


class CUDAAllocator(Allocator):
  def __init__(self, device: CUDADevice):
    self.device = device

  def _alloc(self, nbytes: int) -> Any:
    self.device.make_current()
    status, pointer = driver.cuMemAlloc(max(nbytes, 1))
    if status == driver.CUresult.CUDA_ERROR_OUT_OF_MEMORY: raise MemoryError(f"the CUDA device is out of memory allocating {nbytes} bytes")
    return _check((status, pointer), "cuMemAlloc")

  def _free(self, opaque: Any) -> None: _check(driver.cuMemFree(opaque), "cuMemFree")

  def copyin(self, dest: Any, src: memoryview) -> None:
    if not src.nbytes: return
    self.device.make_current()
    host = np.frombuffer(src, dtype=np.uint8)
    _check(driver.cuMemcpyHtoD(dest, host.ctypes.data, src.nbytes), "cuMemcpyHtoD")

  def copyout(self, dest: memoryview, src: Any) -> None:
    if not dest.nbytes: return
    self.device.make_current()   # synchronous, and after every kernel launched before it on the default stream
    _check(driver.cuMemcpyDtoH(np.frombuffer(dest, dtype=np.uint8).ctypes.data, src, dest.nbytes), "cuMemcpyDtoH")


class CUDAProgram:
  """A loaded kernel: `program(*device_pointers, global_size=blocks, local_size=threads, wait=True)` launches it and
  returns its seconds (CUDA events) when `wait`."""

  def __init__(self, device: CUDADevice, name: str, ptx: bytes):
    self.device, self.name = device, name
    device.make_current()
    self.module = _check(driver.cuModuleLoadData(ptx), f"loading the PTX of {name}")
    self.function = _check(driver.cuModuleGetFunction(self.module, name.encode()), f"finding kernel {name}")
    self.events: tuple[Any, Any] | None = None

  def __call__(self, *buffers: Any, global_size: tuple[int, ...] = (1, 1, 1), local_size: tuple[int, ...] = (1, 1, 1),
               vals: tuple[int, ...] = (), wait: bool = False) -> float | None:
    self.device.check_launch(self.name, tuple(global_size), tuple(local_size))
    self.device.make_current()
    args = [ctypes.c_void_p(int(b)) for b in buffers] + [ctypes.c_int32(v) for v in vals]
    pointers = (ctypes.c_void_p * max(len(args), 1))(*[ctypes.addressof(a) for a in args])
    if wait:
      if self.events is None: self.events = (_check(driver.cuEventCreate(0), "cuEventCreate"), _check(driver.cuEventCreate(0), "cuEventCreate"))
      _check(driver.cuEventRecord(self.events[0], 0), "cuEventRecord")
    _check(driver.cuLaunchKernel(self.function, *global_size, *local_size, 0, 0, ctypes.addressof(pointers), 0), f"launching {self.name}")
    if not wait: return None
    assert self.events is not None
    _check(driver.cuEventRecord(self.events[1], 0), "cuEventRecord")
    _check(driver.cuEventSynchronize(self.events[1]), f"running {self.name}")
    return _check(driver.cuEventElapsedTime(self.events[0], self.events[1]), "cuEventElapsedTime") * 1e-3

  def __del__(self) -> None:
    try:
      for event in self.events or (): driver.cuEventDestroy(event)
      driver.cuModuleUnload(self.module)
    except Exception: pass   # the context may be gone at interpreter exit

  def __repr__(self) -> str: return f"<CUDAProgram {self.name}>"


class CUDADevice(Compiled):
  def __init__(self) -> None:
    try: status, = driver.cuInit(0)
    except Exception as e:   # cuda-python could not load libcuda.so
      raise RuntimeError(f"the CUDA device needs an NVIDIA driver (libcuda.so), which was not found ({e}); {NO_GPU_HINT}") from None
    if status == driver.CUresult.CUDA_ERROR_NO_DEVICE: raise RuntimeError(f"the CUDA device found no NVIDIA GPU; {NO_GPU_HINT}")
    _check((status,), "cuInit")
    count = _check(driver.cuDeviceGetCount(), "cuDeviceGetCount")
    index = int(os.environ.get("CUDA_DEVICE", "0"))
    if not 0 <= index < count: raise RuntimeError(f"CUDA_DEVICE={index}, but there are only {count} CUDA devices")
    self.cu_device = _check(driver.cuDeviceGet(index), "cuDeviceGet")
    attribute = lambda name: _check(driver.cuDeviceGetAttribute(getattr(driver.CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_{name}"), self.cu_device), name)
    self.arch = f"sm_{attribute('COMPUTE_CAPABILITY_MAJOR')}{attribute('COMPUTE_CAPABILITY_MINOR')}"
    self.max_threads = attribute("MAX_THREADS_PER_BLOCK")
    self.max_grid = tuple(attribute(f"MAX_GRID_DIM_{axis}") for axis in "XYZ")
    self.context = _check(driver.cuDevicePrimaryCtxRetain(self.cu_device), "cuDevicePrimaryCtxRetain")
    self.make_current()
    from minigrad.codegen.cuda_renderer import CUDARenderer
    super().__init__("CUDA", CUDAAllocator(self), NVRTCCompiler(self.arch), CUDARenderer(), lambda name, ptx: CUDAProgram(self, name, ptx))

  def make_current(self) -> None: _check(driver.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")

  def check_launch(self, name: str, blocks: tuple[int, ...], threads: tuple[int, ...]) -> None:
    if prod(threads) > self.max_threads:
      raise RuntimeError(f"kernel {name}: {prod(threads)} threads per block {threads}, but the GPU allows at most {self.max_threads}")
    for axis, size, limit in zip("xyz", blocks, self.max_grid):
      if size > limit: raise RuntimeError(f"kernel {name}: {size} blocks along {axis}, but the GPU allows at most {limit}")

  def synchronize(self) -> None:
    self.make_current()
    _check(driver.cuCtxSynchronize(), "cuCtxSynchronize")


def create_device() -> Compiled: return CUDADevice()
