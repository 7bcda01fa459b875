"""The OpenCL device: buffers, compiler and kernel launches through pyopencl (any OpenCL platform; `pip install -e .[opencl]`
brings pocl, a real OpenCL runtime for x86 CPUs).

Input: OpenCL C source from minigrad.codegen.cl_renderer. Output: `create_device()` -> a `Compiled` whose compiler
builds a program binary for the first OpenCL device and whose program class launches it on (workgroups, threads).
"""
from __future__ import annotations
from typing import Any
import time
from minigrad.runtime.device import Allocator, Compiled, CompileError, Compiler, numbered_source

try: import pyopencl as cl
except ImportError as e: raise RuntimeError("the CL device needs pyopencl: pip install -e '.[opencl]' (pyopencl[pocl])") from e


class CLAllocator(Allocator):
  def __init__(self, context: Any, queue: Any):
    self.context, self.queue = context, queue

  def _alloc(self, nbytes: int) -> Any: return cl.Buffer(self.context, cl.mem_flags.READ_WRITE, max(nbytes, 1))
  def _free(self, opaque: Any) -> None: opaque.release()
  def copyin(self, dest: Any, src: memoryview) -> None:
    if src.nbytes: cl.enqueue_copy(self.queue, dest, src, is_blocking=True)
  def copyout(self, dest: memoryview, src: Any) -> None:
    if dest.nbytes: cl.enqueue_copy(self.queue, dest, src, is_blocking=True)


class CLCompiler(Compiler):
  def __init__(self, context: Any, device: Any):
    self.context, self.device = context, device
    super().__init__(f"opencl {device.platform.name} {device.name} {device.driver_version}")

  def compile(self, src: str) -> bytes:
    program = cl.Program(self.context, src)
    try: program.build(devices=[self.device])
    except cl.RuntimeError as e:
      raise CompileError(f"OpenCL build failed: {e}\n--- source ---\n{numbered_source(src)}") from None
    return program.get_info(cl.program_info.BINARIES)[0]


class CLProgram:
  def __init__(self, device: CLDevice, name: str, binary: bytes):
    self.name, self.device = name, device
    self.program = cl.Program(device.context, [device.cl_device], [binary]).build()
    self.kernel = getattr(self.program, name)

  def __call__(self, *buffers: Any, global_size: tuple[int, ...] = (1, 1, 1), local_size: tuple[int, ...] = (1, 1, 1),
               vals: tuple[int, ...] = (), wait: bool = False) -> float | None:
    for i, b in enumerate(buffers): self.kernel.set_arg(i, b)
    threads = tuple(g * l for g, l in zip(global_size, local_size))
    event = cl.enqueue_nd_range_kernel(self.device.queue, self.kernel, threads, tuple(local_size))
    if not wait: return None
    event.wait()
    return (event.profile.end - event.profile.start) * 1e-9


class CLDevice(Compiled):
  def __init__(self) -> None:
    platforms = cl.get_platforms()
    devices = [d for p in platforms for d in p.get_devices()]
    if not devices: raise RuntimeError("the CL device found no OpenCL devices: pip install -e '.[opencl]' installs pocl (a CPU OpenCL)")
    self.cl_device = devices[0]
    self.context = cl.Context([self.cl_device])
    self.queue = cl.CommandQueue(self.context, properties=cl.command_queue_properties.PROFILING_ENABLE)
    from minigrad.codegen.cl_renderer import OpenCLRenderer
    super().__init__("CL", CLAllocator(self.context, self.queue), CLCompiler(self.context, self.cl_device), OpenCLRenderer(),
                     lambda name, binary: CLProgram(self, name, binary))

  def synchronize(self) -> None: self.queue.finish()


def create_device() -> Compiled: return CLDevice()
