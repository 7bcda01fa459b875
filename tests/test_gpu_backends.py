"""The GPU backends: OpenCL (runs here on pocl) and CUDA (NVRTC compiles here; launching needs a GPU and its driver).

CL: grouped reductions through __local memory, every dtype against numpy, copies, compile errors, missing packages.
CUDA: the rendered source, NVRTC compiling kernels of every dtype for sm_80, compile errors, the compile-only mode,
the message when there is no driver, and the runtime's driver calls against a stand-in for the driver API.
"""
import ctypes
import os
import subprocess
import sys
import numpy as np
import pytest
from minigrad import Tensor, dtypes
from minigrad.dtype import DType
from minigrad.runtime.device import Buffer, CompileError, Device, _DeviceRegistry
from minigrad.engine.realize import get_kernel, buffer_of

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALL_DTYPES = [dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32, dtypes.int64,
              dtypes.uint64, dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64]
rng = np.random.default_rng(7)


def sample(dt: DType, n: int) -> np.ndarray:
  """n values of dtype dt (bfloat16 as float32 values that bfloat16 holds exactly)."""
  if dt == dtypes.bool: return rng.random(n) > 0.5
  if dtypes.is_int(dt):
    info = np.iinfo({1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}[dt.itemsize] if not dtypes.is_unsigned(dt) else
                    {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[dt.itemsize])
    return rng.integers(info.min, info.max, n, dtype=info.dtype, endpoint=True)
  values = (rng.standard_normal(n) * 100).astype(np.float32)
  if dt == dtypes.bfloat16: return (values.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)
  return values.astype({dtypes.float16: np.float16, dtypes.float32: np.float32, dtypes.float64: np.float64}[dt])


def run_program(t: Tensor, device: str):
  """Compile the one kernel of `t` for `device` and run it: (output numpy array, the CompiledKernel)."""
  (item,) = t.schedule()
  program = get_kernel(item.ast, device)
  bufs = [buffer_of(b).allocate() for b in item.bufs]
  program(bufs)
  return bufs[0].numpy(), program


def missing_module_message(monkeypatch, device: str, *hidden: str) -> str:
  """The error opening `device` gives when the modules `hidden` can't be imported."""
  for name in hidden: monkeypatch.setitem(sys.modules, name, None)
  monkeypatch.delitem(sys.modules, f"minigrad.runtime.ops_{device.lower()}", raising=False)
  with pytest.raises(RuntimeError) as error: _DeviceRegistry._create(device)
  return str(error.value)


# ---------------------------------------------------------------- OpenCL

def cl_device():
  pytest.importorskip("pyopencl")
  try: return Device["CL"]
  except RuntimeError as e: pytest.skip(f"no OpenCL device: {e}")


def test_cl_grouped_reduce_uses_local_memory_and_barrier():
  cl_device()
  x = rng.standard_normal((1000, 37)).astype(np.float32)
  out, program = run_program(Tensor(x, device="CL").sum(), "CL")
  assert "__local" in program.source and "barrier(CLK_LOCAL_MEM_FENCE)" in program.source
  assert "get_local_id" in program.source and any(opt.op == "GROUP" for opt in program.kernel.applied_opts)
  np.testing.assert_allclose(out[0], x.sum(dtype=np.float64), rtol=1e-5)


@pytest.mark.parametrize("dt", ALL_DTYPES, ids=lambda dt: dt.name)
def test_cl_every_dtype_matches_cpu(dt):
  cl_device()
  a, b = sample(dt, 40), sample(dt, 40)
  def program(device):
    x, y = Tensor(a, device=device, dtype=dt), Tensor(b, device=device, dtype=dt)
    mixed = (x < y).where(x, y)   # compare + select; a bitwise op or an add per kind
    combined = (mixed | y) if dt == dtypes.bool else (mixed ^ y) if dtypes.is_int(dt) else (mixed + y)
    return combined.cast(dtypes.float32).numpy(), x.sum().cast(dtypes.float64).numpy()
  with np.errstate(over="ignore"):
    (cl_mixed, cl_sum), (cpu_mixed, cpu_sum) = program("CL"), program("CPU")
  np.testing.assert_array_equal(cl_mixed, cpu_mixed)
  if dtypes.is_float(dt): np.testing.assert_allclose(cl_sum, cpu_sum, rtol=1e-2 if dt.itemsize == 2 else 1e-6)   # summed in another order
  else: np.testing.assert_array_equal(cl_sum, cpu_sum)


def test_cl_special_values_and_int64_constants():
  cl_device()
  big = np.array([2**62 + 5, -2**63, 7], dtype=np.int64)
  got = (Tensor(big, device="CL") + (2**40 + 1)).numpy()
  np.testing.assert_array_equal(got, big + (2**40 + 1))
  x = Tensor(np.array([1.0, -1.0, 0.0, np.nan], dtype=np.float32), device="CL")
  np.testing.assert_array_equal((x / 0).numpy(), np.array([np.inf, -np.inf, np.nan, np.nan], dtype=np.float32))
  np.testing.assert_array_equal((Tensor([-7, 7, -8], device="CL") % 3).numpy(), np.array([2, 1, 1]))   # floor mod, as torch
  np.testing.assert_array_equal(Tensor([1.5, -2.0], device="CL").bitcast(dtypes.int32).numpy(), np.array([1.5, -2.0], np.float32).view(np.int32))


@pytest.mark.parametrize("dt", [dtypes.bool, dtypes.int8, dtypes.float16, dtypes.bfloat16, dtypes.int64, dtypes.float64], ids=lambda dt: dt.name)
def test_cl_copies_round_trip(dt):
  cl_device()
  values = sample(dt, 257)
  np.testing.assert_array_equal(Buffer("CL", 257, dt).copyin(values).numpy(), values.astype(np.float32) if dt == dtypes.bfloat16 else values)
  assert Buffer("CL", 0, dt).allocate().numpy().size == 0
  moved = Tensor(values, dtype=dt).to("CL")
  assert moved.device == "CL"
  np.testing.assert_array_equal(moved.to("CPU").numpy(), Tensor(values, dtype=dt).numpy())


def test_cl_compile_error_shows_source_and_compiler_message():
  device = cl_device()
  source = "__kernel void broken(__global float* data0) {\n  data0[0] = undefined_name;\n}\n"
  with pytest.raises(CompileError) as error: device.compiler.compile(source)
  message = str(error.value)
  assert "undefined_name" in message and "undeclared" in message   # clang's diagnostic, through pocl
  assert "2 |   data0[0] = undefined_name;" in message             # the numbered source


def test_cl_refuses_too_many_threads_per_workgroup():
  device = cl_device()
  program = device.program("copy", device.compiler.compile("__kernel void copy(__global float* data0) { data0[0] = 1.0f; }"))
  buf = Buffer("CL", 1, dtypes.float32).allocate()
  with pytest.raises(RuntimeError, match="threads per workgroup"): program(buf.opaque, local_size=(device.max_threads + 1, 1, 1))


def test_cl_without_an_opencl_platform_says_how_to_get_one(monkeypatch):
  cl_device()
  from minigrad.runtime import ops_cl
  monkeypatch.setattr(ops_cl.cl, "get_platforms", lambda: [])
  with pytest.raises(RuntimeError, match="no OpenCL platform.*pocl"): ops_cl.CLDevice()


def test_cl_without_pyopencl_names_the_package_and_the_install(monkeypatch):
  message = missing_module_message(monkeypatch, "CL", "pyopencl")
  assert "pyopencl" in message and "pip install -e '.[opencl]'" in message


# ---------------------------------------------------------------- CUDA

def cuda_modules():
  pytest.importorskip("cuda.bindings.nvrtc")
  from minigrad.runtime import ops_cuda
  return ops_cuda


def test_cuda_grouped_reduce_source():
  ops_cuda = cuda_modules()
  (item,) = Tensor(rng.standard_normal((1000, 37)).astype(np.float32)).sum().schedule()
  source = ops_cuda.render_for_cuda(item.ast)
  assert source.count('extern "C" __global__ void') == 1
  for spelling in ("__shared__ float", "__syncthreads();", "threadIdx.x", "__restrict__"): assert spelling in source
  elementwise = Tensor(rng.standard_normal((64, 64)).astype(np.float32)).exp().schedule()[0].ast
  assert "blockIdx.x" in ops_cuda.render_for_cuda(elementwise)


def test_workgroup_dims_past_the_y_limit_fold_into_x():
  """70000 rows don't fit gridDim.y (at most 65535 on CUDA): they share x with the 3 columns. Run on the GPU-shaped
  PYTHON device, without opts, so the rows stay one grid dim."""
  from minigrad.codegen.lowerer import MAX_GRID_YZ
  a, b = rng.standard_normal((70000, 3)).astype(np.float32), rng.standard_normal((3, 70000)).astype(np.float32)
  (item,) = (Tensor(a, device="PYTHON") + Tensor(b, device="PYTHON").T).schedule()
  program = get_kernel(item.ast, "PYTHON", [])
  assert program.kernel.full_shape == (70000, 3) and program.launch_dims[0] == (210000, 1, 1)
  assert all(size <= MAX_GRID_YZ for size in program.launch_dims[0][1:])
  bufs = [buffer_of(buf).allocate() for buf in item.bufs]
  program(bufs)
  np.testing.assert_array_equal(bufs[0].numpy().reshape(70000, 3), a + b.T)


@pytest.mark.parametrize("dt", ALL_DTYPES, ids=lambda dt: dt.name)
def test_nvrtc_compiles_every_dtype_for_sm80(dt):
  ops_cuda = cuda_modules()
  a, b = Tensor(sample(dt, 16), dtype=dt), Tensor(sample(dt, 16), dtype=dt)
  programs = [(a < b).where(a, b), a.sum(), a.cast(dtypes.float32), Tensor(sample(dtypes.float32, 16)).cast(dt)]
  if dt != dtypes.bool: programs += [a * b, a.maximum(b), a.bitcast({1: dtypes.uint8, 2: dtypes.int16, 4: dtypes.int32, 8: dtypes.int64}[dt.itemsize])]
  for t in programs:
    for item in t.schedule():
      source = ops_cuda.render_for_cuda(item.ast)
      ptx = ops_cuda.NVRTCCompiler("sm_80").compile_cached(source)
      assert b".target sm_80" in ptx and ptx.endswith(b"\0")
      if dt == dtypes.float16 and "half_to_float(" in source: assert "#include <cuda_fp16.h>" in source


def test_nvrtc_compile_error_shows_log_and_source():
  ops_cuda = cuda_modules()
  source = 'extern "C" __global__ void broken(float* data0) {\n  data0[0] = undefined_name;\n}\n'
  with pytest.raises(CompileError) as error: ops_cuda.NVRTCCompiler("sm_80").compile(source)
  message = str(error.value)
  assert 'identifier "undefined_name" is undefined' in message   # NVRTC's log
  assert "2 |   data0[0] = undefined_name;" in message and "sm_80" in message


def _has_cuda_driver() -> bool:
  from cuda.bindings import driver
  try: return driver.cuInit(0)[0] == driver.CUresult.CUDA_SUCCESS
  except Exception: return False


def test_cuda_device_without_driver_says_what_is_missing():
  cuda_modules()
  if _has_cuda_driver(): pytest.skip("this machine has an NVIDIA driver and GPU")
  with pytest.raises(RuntimeError) as error: _DeviceRegistry._create("CUDA")
  message = str(error.value)
  assert ("NVIDIA driver" in message or "no NVIDIA GPU" in message) and "CUDA_COMPILE_ONLY=1" in message


def test_cuda_without_cuda_python_names_the_install(monkeypatch):
  message = missing_module_message(monkeypatch, "CUDA", "cuda.bindings", "cuda.bindings.driver", "cuda.bindings.nvrtc")
  assert "cuda-python" in message and "pip install -e '.[cuda]'" in message


COMPILE_ONLY_SCRIPT = """
import sys
import numpy as np
from minigrad import Tensor
from minigrad.runtime import ops_cuda
from minigrad.codegen.cuda_renderer import CUDARenderer
if sys.argv[1] == "broken": CUDARenderer.barrier = "__syncthreads_misspelled();"
x = np.arange(4096, dtype=np.float32)
print(Tensor(x).sum().item(), (Tensor(x).reshape(64, 64) * 2).exp2().max().item(), ops_cuda.compile_only_count)
"""


@pytest.mark.parametrize("variant", ["good", "broken"])
def test_cuda_compile_only_mode(variant):
  cuda_modules()
  env = {**os.environ, "CUDA_COMPILE_ONLY": "1", "DEV": "CPU"}
  result = subprocess.run([sys.executable, "-c", COMPILE_ONLY_SCRIPT, variant], capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
  if variant == "good":
    assert result.returncode == 0, result.stderr
    total, biggest, compiled = result.stdout.split()
    assert float(total) == 4096 * 4095 / 2 and int(compiled) >= 2   # ran on the CPU, and every kernel went through NVRTC
  else:   # a kernel NVRTC rejects fails the run, with NVRTC's message and the source
    assert result.returncode != 0 and "CompileError" in result.stderr and "__syncthreads_misspelled" in result.stderr


# ---------------------------------------------------------------- the CUDA runtime against a stand-in driver

class FakeDriver:
  """The few driver API calls ops_cuda makes, on host memory: allocations are real (ctypes), copies are real, a
  launch records its grid, block and decoded pointer arguments."""

  class CUresult:
    CUDA_SUCCESS, CUDA_ERROR_NO_DEVICE, CUDA_ERROR_OUT_OF_MEMORY = 0, 100, 2

  class CUdevice_attribute:
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = "major", "minor"
    CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK = "threads"
    CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z = "x", "y", "z"

  def __init__(self):
    self.memory, self.launches, self.loaded = {}, [], []

  def cuInit(self, flags): return (0,)
  def cuDeviceGetCount(self): return (0, 1)
  def cuDeviceGet(self, index): return (0, index)
  def cuDeviceGetAttribute(self, attribute, device):
    return (0, {"major": 8, "minor": 6, "threads": 1024, "x": 2**31 - 1, "y": 65535, "z": 65535}[attribute])
  def cuDevicePrimaryCtxRetain(self, device): return (0, "context")
  def cuCtxSetCurrent(self, context): return (0,)
  def cuCtxSynchronize(self): return (0,)
  def cuMemAlloc(self, nbytes):
    block = ctypes.create_string_buffer(nbytes)
    self.memory[ctypes.addressof(block)] = block
    return (0, ctypes.addressof(block))
  def cuMemFree(self, pointer):
    del self.memory[pointer]
    return (0,)
  def cuMemcpyHtoD(self, dest, src, nbytes):
    ctypes.memmove(dest, src, nbytes)
    return (0,)
  def cuMemcpyDtoH(self, dest, src, nbytes):
    ctypes.memmove(dest, src, nbytes)
    return (0,)
  def cuModuleLoadData(self, ptx):
    self.loaded.append(ptx)
    return (0, "module")
  def cuModuleGetFunction(self, module, name): return (0, name)
  def cuModuleUnload(self, module): return (0,)
  def cuLaunchKernel(self, function, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
    pointers = ctypes.cast(params, ctypes.POINTER(ctypes.c_void_p))
    args = [ctypes.cast(pointers[i], ctypes.POINTER(ctypes.c_void_p))[0] for i in range(2)]
    self.launches.append((function, (gx, gy, gz), (bx, by, bz), args))
    return (0,)
  def cuEventCreate(self, flags): return (0, object())
  def cuEventRecord(self, event, stream): return (0,)
  def cuEventSynchronize(self, event): return (0,)
  def cuEventElapsedTime(self, start, end): return (0, 2.5)
  def cuEventDestroy(self, event): return (0,)
  def cuGetErrorString(self, status): return (0, b"fake")


def test_cuda_runtime_calls_with_a_stand_in_driver(monkeypatch):
  ops_cuda = cuda_modules()
  fake = FakeDriver()
  monkeypatch.setattr(ops_cuda, "driver", fake)
  device = ops_cuda.CUDADevice()
  assert device.arch == "sm_86" and device.compiler.options == ["--gpu-architecture=compute_86"]
  values = np.arange(10, dtype=np.float32)
  a, b = device.allocator.alloc(40), device.allocator.alloc(40)
  device.allocator.copyin(a, memoryview(values).cast("B"))
  out = np.zeros(10, dtype=np.float32)
  device.allocator.copyout(memoryview(out).cast("B"), a)
  np.testing.assert_array_equal(out, values)
  program = device.program("E_10", b"ptx\0")
  assert fake.loaded == [b"ptx\0"]
  assert program(b, a, global_size=(5, 1, 1), local_size=(2, 1, 1), wait=True) == pytest.approx(2.5e-3)
  assert fake.launches == [(b"E_10", (5, 1, 1), (2, 1, 1), [b, a])]
  with pytest.raises(RuntimeError, match="at most 1024"): program(a, b, global_size=(1, 1, 1), local_size=(2048, 1, 1))
  with pytest.raises(RuntimeError, match="along y"): program(a, b, global_size=(1, 70000, 1), local_size=(1, 1, 1))
  device.allocator.free(a)
  device.allocator.free(b)
  assert fake.memory == {}
