"""The OpenCL device: buffers, compiler and kernel launches through pyopencl (any OpenCL platform; `pip install -e .[opencl]`
brings pocl, a real OpenCL runtime for x86 CPUs).

Input: OpenCL C source from minigrad.codegen.cl_renderer. Output: `create_device()` -> a `Compiled` whose compiler
builds a program binary for one OpenCL device and whose program class launches it on (workgroups, threads per
workgroup).

Which device: vendor runtimes first, in the order OpenCL lists them, then pocl platforms, newest pocl first; the first
device that builds and runs a trivial kernel is used (one probe per device and process, stopping at the first that
works). `CL_DEVICE=<n>` picks the n-th of all devices instead, unprobed (`python -c "import pyopencl as cl;
print(cl.get_platforms())"` lists them). The probe matters on CPUs newer than a pocl's LLVM: the pocl of pip's
pyopencl[pocl] (3.0-rc2, LLVM 14) hands clang the CPU name LLVM detects, 'generic' on e.g. AMD Zen 5, which clang
rejects ("unknown target CPU 'generic'"), and it has no setting to override that name (POCL_LLVM_CPU_NAME is read
only by pocl >= 5.0 and Debian's 3.1, and not for x86 CPU devices). Debian's pocl 3.1 and pocl >= 5.0 name the CPU
from its ISA features (AVX-512 -> skylake-avx512) and work; `.ci/install-system-packages` installs Debian's. If no
device works, the error lists each device's failure and the fix.
"""
from __future__ import annotations
from typing import Any
import os
import re
import warnings
import numpy as np
from minigrad.helpers import DEBUG, prod
from minigrad.target import cpu_model
from minigrad.runtime.device import Allocator, Compiled, CompileError, Compiler, numbered_source

INSTALL_HINT = "pip install -e '.[opencl]' (installs pyopencl with pocl, an OpenCL runtime for any x86 CPU)"
NEWER_POCL_HINT = ("install a newer pocl: run .ci/install-system-packages as root (on Debian/Ubuntu it runs apt-get install "
                   "pocl-opencl-icd: pocl 3.1 with LLVM 15), which the CL device then prefers")
try: import pyopencl as cl
except ImportError as e: raise RuntimeError(f"the CL device needs the pyopencl package, which is not installed: {INSTALL_HINT}") from e

# float division and sqrt rounded exactly, as on the CPU (OpenCL otherwise allows 2.5-3 ulp)
BUILD_OPTIONS = ("-cl-fp32-correctly-rounded-divide-sqrt",)


class CLAllocator(Allocator):
  def __init__(self, context: Any, queue: Any):
    self.context, self.queue = context, queue

  def _alloc(self, nbytes: int) -> Any:
    try: return cl.Buffer(self.context, cl.mem_flags.READ_WRITE, max(nbytes, 1))   # OpenCL has no empty buffers
    except cl.Error as e: raise MemoryError(f"the CL device could not allocate {nbytes} bytes: {e}") from None

  def _free(self, opaque: Any) -> None: opaque.release()

  def copyin(self, dest: Any, src: memoryview) -> None:
    if src.nbytes: cl.enqueue_copy(self.queue, dest, src, is_blocking=True)

  def copyout(self, dest: memoryview, src: Any) -> None:
    if dest.nbytes: cl.enqueue_copy(self.queue, dest, src, is_blocking=True)   # in-order queue: after every kernel


class CLCompiler(Compiler):
  def __init__(self, context: Any, device: Any):
    self.context, self.device = context, device
    super().__init__(f"opencl {device.platform.name} {device.name} {device.driver_version} {' '.join(BUILD_OPTIONS)}")

  def compile(self, src: str) -> bytes:
    if "double" in src and "cl_khr_fp64" not in self.device.extensions:
      raise CompileError(f"the OpenCL device {self.device.name} has no float64 (cl_khr_fp64)\n--- source ---\n{numbered_source(src)}")
    program = cl.Program(self.context, src)
    with warnings.catch_warnings(record=True) as caught:   # pyopencl warns on any build log; DEBUG>=6 shows it
      warnings.simplefilter("always")
      try: program.build(options=list(BUILD_OPTIONS), devices=[self.device])
      except cl.RuntimeError as e:
        log = _build_log(program, self.device) or str(e)
        raise CompileError(f"OpenCL build failed on {self.device.name}:\n{log}\n{unknown_cpu_advice(self.device, log)}"
                           f"--- source ---\n{numbered_source(src)}") from None
    if DEBUG >= 6 and caught: print(_build_log(program, self.device))
    return program.get_info(cl.program_info.BINARIES)[0]


def _build_log(program: Any, device: Any) -> str:
  try: return program.get_build_info(device, cl.program_build_info.LOG).strip()
  except cl.Error: return ""


class CLProgram:
  """A built kernel: `program(*cl_buffers, global_size=workgroups, local_size=threads, wait=True)` runs it and returns
  its seconds (from OpenCL's profiling events) when `wait`."""

  def __init__(self, device: CLDevice, name: str, binary: bytes):
    self.name, self.device = name, device
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      self.program = cl.Program(device.context, [device.cl_device], [binary]).build()
    self.kernel = getattr(self.program, name)

  def __call__(self, *buffers: Any, global_size: tuple[int, ...] = (1, 1, 1), local_size: tuple[int, ...] = (1, 1, 1),
               vals: tuple[int, ...] = (), wait: bool = False) -> float | None:
    if prod(local_size) > self.device.max_threads:
      raise RuntimeError(f"kernel {self.name}: {prod(local_size)} threads per workgroup {tuple(local_size)}, but the CL device "
                         f"{self.device.cl_device.name} allows at most {self.device.max_threads}")
    for i, b in enumerate(buffers): self.kernel.set_arg(i, b)
    for i, value in enumerate(vals, start=len(buffers)): self.kernel.set_arg(i, np.int32(value))
    threads = tuple(g * l for g, l in zip(global_size, local_size))
    event = cl.enqueue_nd_range_kernel(self.device.queue, self.kernel, threads, tuple(local_size))
    if not wait: return None
    event.wait()
    return (event.profile.end - event.profile.start) * 1e-9

  def __repr__(self) -> str: return f"<CLProgram {self.name}>"


def _opencl_devices() -> list[Any]:
  try: platforms = cl.get_platforms()
  except cl.Error: platforms = []   # no OpenCL driver (ICD) registered at all
  return [d for p in platforms for d in p.get_devices()]


# ---------------------------------------------------------------- which device: probe, rank, explain

PROBE_SOURCE = "__kernel void probe(__global int *out) { int i = get_global_id(0); out[i] = 7 * i + 1; }"
PROBE_EXPECTED = [1, 8, 15, 22]
_probe_results: dict[Any, str] = {}   # per process: device -> "" if the probe kernel built and ran, else what failed


def pocl_version(platform_version: str) -> tuple[int, ...] | None:
  """(major, minor, patch, final) of a pocl platform from its version string ("OpenCL 3.0 PoCL 3.1+debian  Linux, ...",
  "... PoCL 3.0-rc2 ..."): final is 0 for release candidates and pre-releases, 1 otherwise. None for other platforms."""
  m = re.search(r"\bpocl\s+(\d+)\.(\d+)(?:\.(\d+))?([-~]?(?:rc|pre|alpha|beta))?", platform_version, re.IGNORECASE)
  return None if m is None else (int(m[1]), int(m[2]), int(m[3] or 0), 0 if m[4] else 1)


def _llvm_version(platform_version: str) -> str:
  m = re.search(r"LLVM\s+([\d.]+)", platform_version)
  return f" with LLVM {m[1]}" if m else ""


def _describe(device: Any) -> str: return f"{device.name} ({' '.join(device.platform.version.split())})"


def _first_error_line(error: str) -> str:
  lines = [line.strip() for line in error.strip().splitlines() if line.strip()] or ["failed"]
  return next((line for line in lines if line.startswith("error")), lines[0])


def unknown_cpu_advice(device: Any, error: str) -> str:
  """Why `device` failed with `error` and the fix, when the failure is pocl's LLVM not knowing the host CPU; else ""."""
  m = re.search(r"unknown target CPU '([^']*)'", error)
  if m is None: return ""
  version = device.platform.version
  pocl = pocl_version(version)
  name = (f"pocl {'.'.join(map(str, pocl[:2]))}{'' if pocl[3] else ' (pre-release)'}" if pocl else device.platform.name)
  return (f"{name}{_llvm_version(version)} does not know the host CPU ({cpu_model()}): its LLVM calls it '{m[1]}', "
          f"which clang refuses as a target CPU. This pocl has no setting to override the CPU name (only pocl "
          f">= 5.0 and Debian's 3.1 read POCL_LLVM_CPU_NAME, and not for x86 CPU devices), so: {NEWER_POCL_HINT}.\n")


def _try_kernel(device: Any) -> str:
  """Build and run PROBE_SOURCE on `device`: "" when it computes PROBE_EXPECTED, else what went wrong."""
  try:
    context = cl.Context([device])
    queue = cl.CommandQueue(context)
    program = cl.Program(context, PROBE_SOURCE)
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      try: program.build(options=list(BUILD_OPTIONS), devices=[device])
      except cl.RuntimeError as e: return _build_log(program, device) or str(e)
    out = np.zeros(len(PROBE_EXPECTED), np.int32)
    buf = cl.Buffer(context, cl.mem_flags.WRITE_ONLY, out.nbytes)
    program.probe(queue, out.shape, None, buf)
    cl.enqueue_copy(queue, out, buf, is_blocking=True)
    return "" if out.tolist() == PROBE_EXPECTED else f"the probe kernel computed {out.tolist()}, not {PROBE_EXPECTED}"
  except Exception as e: return f"{type(e).__name__}: {e}".strip()   # e.g. no context or queue on this device


def probe(device: Any) -> str:
  """"" if `device` builds and runs a trivial kernel, else the reason; tried once per device and process."""
  key = getattr(device, "int_ptr", None) or id(device)
  if key not in _probe_results: _probe_results[key] = _try_kernel(device)
  return _probe_results[key]


def preference(device: Any, index: int) -> tuple:
  """Sort key, best first: vendor runtimes in listing order, then pocl platforms newest pocl first."""
  version = pocl_version(device.platform.version)
  return (version is not None, tuple(-v for v in version or ()), index)


def select_device(devices: list[Any], cl_device: str | None = None, probe: Any = probe) -> Any:
  """The OpenCL device to use among `devices` (all devices of all platforms, in listing order). `cl_device` (the value
  of CL_DEVICE) picks one by index, unprobed; else the most preferred device whose `probe(device)` returns ""."""
  if not devices: raise RuntimeError(f"the CL device found no OpenCL platform with a device: {INSTALL_HINT}")
  if cl_device is not None and cl_device.strip():
    try: index = int(cl_device)
    except ValueError: raise RuntimeError(f"CL_DEVICE={cl_device!r} is not a device number") from None
    if not 0 <= index < len(devices):
      raise RuntimeError(f"CL_DEVICE={index}, but there are only {len(devices)} OpenCL devices: {', '.join(d.name for d in devices)}")
    return devices[index]
  failures = []
  for _, device in sorted(enumerate(devices), key=lambda item: preference(item[1], item[0])):
    if not (error := probe(device)): return device
    failures.append((device, error))
  lines = "\n".join(f"  {_describe(d)}: {_first_error_line(error)}" for d, error in failures)
  advice = next((a for d, error in failures if (a := unknown_cpu_advice(d, error))), f"Fix: {NEWER_POCL_HINT}.\n")
  raise RuntimeError(f"the CL device found no OpenCL device that can build and run a kernel on this host:\n{lines}\n{advice}")


class CLDevice(Compiled):
  def __init__(self) -> None:
    self.cl_device = select_device(_opencl_devices(), os.environ.get("CL_DEVICE"))
    if DEBUG >= 1: print(f"CL: {_describe(self.cl_device)}")
    self.max_threads = self.cl_device.max_work_group_size
    self.context = cl.Context([self.cl_device])
    self.queue = cl.CommandQueue(self.context, properties=cl.command_queue_properties.PROFILING_ENABLE)
    from minigrad.codegen.cl_renderer import OpenCLRenderer
    super().__init__("CL", CLAllocator(self.context, self.queue), CLCompiler(self.context, self.cl_device), OpenCLRenderer(),
                     lambda name, binary: CLProgram(self, name, binary))

  def synchronize(self) -> None: self.queue.finish()


def create_device() -> Compiled: return CLDevice()
