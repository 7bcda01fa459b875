"""The OpenCL device: buffers, compiler and kernel launches through pyopencl (any OpenCL platform; `pip install -e .[opencl]`
brings pocl, a real OpenCL runtime for x86 CPUs).

Input: OpenCL C source from minigrad.codegen.cl_renderer. Output: `create_device()` -> a `Compiled` whose compiler
builds a program binary for one OpenCL device and whose program class launches it on (workgroups, threads per
workgroup). The device is the first one of the first platform that has one; `CL_DEVICE=<n>` picks the n-th of all
devices instead (`python -c "import pyopencl as cl; print(cl.get_platforms())"` lists them).
"""
from __future__ import annotations
from typing import Any
import os
import warnings
import numpy as np
from minigrad.helpers import DEBUG, prod
from minigrad.runtime.device import Allocator, Compiled, CompileError, Compiler, numbered_source

INSTALL_HINT = "pip install -e '.[opencl]' (installs pyopencl with pocl, an OpenCL runtime for any x86 CPU)"
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
        raise CompileError(f"OpenCL build failed on {self.device.name}:\n{_build_log(program, self.device) or e}\n"
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


class CLDevice(Compiled):
  def __init__(self) -> None:
    devices = _opencl_devices()
    if not devices: raise RuntimeError(f"the CL device found no OpenCL platform with a device: {INSTALL_HINT}")
    index = int(os.environ.get("CL_DEVICE", "0"))
    if not 0 <= index < len(devices):
      raise RuntimeError(f"CL_DEVICE={index}, but there are only {len(devices)} OpenCL devices: {', '.join(d.name for d in devices)}")
    self.cl_device = devices[index]
    self.max_threads = self.cl_device.max_work_group_size
    self.context = cl.Context([self.cl_device])
    self.queue = cl.CommandQueue(self.context, properties=cl.command_queue_properties.PROFILING_ENABLE)
    from minigrad.codegen.cl_renderer import OpenCLRenderer
    super().__init__("CL", CLAllocator(self.context, self.queue), CLCompiler(self.context, self.cl_device), OpenCLRenderer(),
                     lambda name, binary: CLProgram(self, name, binary))

  def synchronize(self) -> None: self.queue.finish()


def create_device() -> Compiled: return CLDevice()
