"""Tests for the runtime stage: Buffers, the CPU device (C compiler, ctypes programs), the compile cache, Device."""
from __future__ import annotations
import stat
import struct
import time
import numpy as np
import pytest
from minigrad.dtype import ALL_DTYPES, DType, dtypes, to_numpy
import minigrad.runtime.device as device_module
from minigrad.runtime.device import Buffer, CompileError, Compiled, Device, default_device_from_env
from minigrad.runtime.ops_cpu import CCompiler, CPUProgram, find_c_compiler

ADD_SRC = """void add(float* restrict out, const float* restrict a, const float* restrict b, int n) {
  for (int i = 0; i < n; i++) out[i] = a[i] + b[i];
}"""


@pytest.fixture(autouse=True)
def isolated_cache(monkeypatch, tmp_path):
  """Every test gets its own empty compile cache, and the cache is on unless a test turns it off."""
  monkeypatch.setenv("MINIGRAD_CACHE", str(tmp_path / "cache"))
  monkeypatch.delenv("DISABLE_COMPILER_CACHE", raising=False)
  return tmp_path / "cache"


def cpu() -> Compiled: return Device["CPU"]


def buffer_of(array: np.ndarray, dtype: DType | None = None) -> Buffer:
  dtype = dtype or {np.dtype(np.float32): dtypes.float32, np.dtype(np.int32): dtypes.int32}[array.dtype]
  return Buffer("CPU", array.size, dtype).copyin(array)


def compile_program(name: str, src: str) -> CPUProgram:
  return cpu().program(name, cpu().compiler.compile_cached(src))


# ---------------------------------------------------------------- running kernels

def test_add_kernel_matches_numpy():
  rng = np.random.default_rng(0)
  a, b = rng.standard_normal(1000).astype(np.float32), rng.standard_normal(1000).astype(np.float32)
  out, a_buf, b_buf = Buffer("CPU", 1000, dtypes.float32).allocate(), buffer_of(a), buffer_of(b)
  add = compile_program("add", ADD_SRC)
  assert add(out.opaque, a_buf.opaque, b_buf.opaque, vals=(1000,)) is None
  np.testing.assert_array_equal(out.numpy(), a + b)


def test_wait_returns_elapsed_seconds():
  out, a = Buffer("CPU", 8, dtypes.float32).allocate(), buffer_of(np.ones(8, np.float32))
  elapsed = compile_program("add", ADD_SRC)(out.opaque, a.opaque, a.opaque, vals=(8,), wait=True)
  assert isinstance(elapsed, float) and 0 <= elapsed < 1
  np.testing.assert_array_equal(out.numpy(), np.full(8, 2, np.float32))


def test_vals_are_int32_after_buffers_in_order():
  store = compile_program("store", "void store(int* out, int first, int second) { out[0] = first; out[1] = second; }")
  out = Buffer("CPU", 2, dtypes.int32).allocate()
  store(out.opaque, vals=(-7, 2**31 - 1))
  np.testing.assert_array_equal(out.numpy(), np.array([-7, 2**31 - 1], np.int32))
  with pytest.raises(OverflowError, match="2147483648"): store(out.opaque, vals=(0, 2**31))


def test_multiply_add_fuses_into_one_rounding():
  """-ffp-contract=fast: a*b+c becomes one fused multiply-add (one rounding, as torch's GEMMs do): the result
  is the exactly rounded a*b+c (computed here in float64), not numpy's twice-rounded float32."""
  src = """void muladd(float* restrict out, const float* restrict a, const float* restrict b, const float* restrict c, int n) {
  for (int i = 0; i < n; i++) out[i] = a[i] * b[i] + c[i];
}"""
  rng = np.random.default_rng(1)
  a, b, c = (rng.standard_normal(4096).astype(np.float32) for _ in range(3))
  out, inputs = Buffer("CPU", 4096, dtypes.float32).allocate(), [buffer_of(x) for x in (a, b, c)]   # kept alive
  compile_program("muladd", src)(out.opaque, *(buf.opaque for buf in inputs), vals=(4096,))
  exact = (a.astype(np.float64) * b + c).astype(np.float32)
  np.testing.assert_array_max_ulp(out.numpy(), exact, maxulp=1)
  assert np.mean(out.numpy() == exact) > 0.999


def test_wrong_argument_count_is_rejected():
  add = compile_program("add", ADD_SRC)
  out = Buffer("CPU", 1, dtypes.float32).allocate()
  add(out.opaque, out.opaque, out.opaque, vals=(1,))
  with pytest.raises(TypeError, match="3 buffers and 1 int values, got 2 and 1"): add(out.opaque, out.opaque, vals=(1,))


def test_missing_symbol_names_it():
  lib = cpu().compiler.compile_cached(ADD_SRC)
  with pytest.raises(RuntimeError, match="'sub'"): CPUProgram("sub", lib)


def test_zero_size_kernel_launch():
  empty = Buffer("CPU", 0, dtypes.float32).allocate()
  compile_program("add", ADD_SRC)(empty.opaque, empty.opaque, empty.opaque, vals=(0,))
  assert empty.numpy().shape == (0,)


# ---------------------------------------------------------------- buffers

@pytest.mark.parametrize("dtype", [d for d in ALL_DTYPES if d != dtypes.bfloat16], ids=lambda d: d.name)
def test_buffer_round_trip(dtype: DType):
  rng = np.random.default_rng(2)
  if dtypes.is_bool(dtype): data = rng.integers(0, 2, 37).astype(bool)
  elif dtypes.is_int(dtype): data = rng.integers(dtypes.min(dtype), dtypes.max(dtype), 37, dtype=to_numpy(dtype), endpoint=True)
  else: data = (rng.standard_normal(37) * 100).astype(to_numpy(dtype))
  buf = Buffer("CPU", 37, dtype).copyin(data)
  result = buf.numpy()
  assert result.dtype == to_numpy(dtype) and result.shape == (37,)
  np.testing.assert_array_equal(result, data)
  data[0] = data[1]   # numpy() copied: changing the source doesn't change the buffer, and vice versa
  result[:] = result[0]
  np.testing.assert_array_equal(buf.numpy()[2:], data[2:])


def test_int64_extremes_round_trip():
  data = np.array([np.iinfo(np.int64).min, -1, 0, 1, np.iinfo(np.int64).max], np.int64)
  np.testing.assert_array_equal(Buffer("CPU", 5, dtypes.int64).copyin(data).numpy(), data)


def test_copyin_bytes_and_memoryview():
  raw = struct.pack("<3i", 1, -2, 3)
  np.testing.assert_array_equal(Buffer("cpu", 3, dtypes.int32).copyin(raw).numpy(), [1, -2, 3])
  np.testing.assert_array_equal(Buffer("CPU", 3, dtypes.int32).copyin(memoryview(bytearray(raw))).numpy(), [1, -2, 3])


def reference_bfloat16(values: np.ndarray) -> np.ndarray:
  """Round each float32 to bfloat16, nearest with ties to even, by comparing the two neighbouring bf16 values
  in float64 (exact for these numbers). Returns the rounded values as float32."""
  out = []
  for x in values.astype(np.float32):
    if np.isnan(x) or np.isinf(x): out.append(x); continue
    bits = int(np.array(x).view(np.uint32))
    low_bits = bits & 0xFFFF0000                               # truncation toward zero
    low = float(np.array(low_bits, np.uint32).view(np.float32))
    high = float(np.array(low_bits + 0x10000, np.uint32).view(np.float32))   # next bf16 away from zero (maybe inf)
    distance_low, distance_high = abs(float(x) - low), abs(high - float(x)) if np.isfinite(high) else np.inf
    if np.isinf(high):   # the gap to infinity counts as one more bf16 step (IEEE overflow rule)
      distance_high = abs(low + (low - float(np.array(low_bits - 0x10000, np.uint32).view(np.float32))) - float(x))
    pick_high = distance_high < distance_low or (distance_high == distance_low and (low_bits >> 16) & 1)
    out.append(np.float32(high if pick_high else low))
  return np.array(out, np.float32)


def test_bfloat16_rounds_to_nearest_even():
  bf16_max = np.array(0x7F7F0000, np.uint32).view(np.float32)
  special = np.array([0, -0.0, 1, -1, 1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-8 + 2**-20, 1 - 2**-10, 3.14159, -2.71828,
                      65504, 1e-40, -1e-40, 1e-45, np.inf, -np.inf, float(bf16_max), 3.39e38, 3.4e38,
                      np.finfo(np.float32).max, -np.finfo(np.float32).max], np.float32)
  rng = np.random.default_rng(3)
  random_bits = rng.integers(0, 2**32, 3000, dtype=np.uint64).astype(np.uint32).view(np.float32)
  ties = (rng.integers(0, 2**16, 200, dtype=np.uint32) << 16 | 0x8000).view(np.float32)   # exactly halfway
  values = np.concatenate([special, random_bits[np.isfinite(random_bits)], ties[np.isfinite(ties)]])
  result = Buffer("CPU", values.size, dtypes.bfloat16).copyin(values).numpy()
  assert result.dtype == np.float32
  np.testing.assert_array_equal(result, reference_bfloat16(values))
  assert result[4] == 1 and result[5] == 1 + 2**-6 and result[6] == 1 + 2**-7   # tie down, tie up, above half up
  assert np.isinf(result[list(special).index(np.float32(3.4e38))])


def test_bfloat16_matches_torch():
  torch = pytest.importorskip("torch")
  values = np.random.default_rng(4).standard_normal(2000).astype(np.float32) * 1000
  result = Buffer("CPU", values.size, dtypes.bfloat16).copyin(values).numpy()
  np.testing.assert_array_equal(result, torch.from_numpy(values).to(torch.bfloat16).float().numpy())


def test_bfloat16_storage_is_two_byte_words():
  buf = Buffer("CPU", 3, dtypes.bfloat16).copyin(np.array([1.0, -2.0, np.nan], np.float32))
  assert buf.nbytes == 6
  words = np.empty(3, np.uint16)
  buf.copyout(memoryview(words))
  assert words[0] == 0x3F80 and words[1] == 0xC000 and (words[2] & 0x7FFF) > 0x7F80   # NaN stays NaN
  again = Buffer("CPU", 3, dtypes.bfloat16).copyin(words)   # uint16 arrays are taken as bf16 words
  np.testing.assert_array_equal(again.numpy()[:2], [1.0, -2.0])
  assert np.isnan(again.numpy()[2])


def test_zero_size_buffers():
  for dtype in (dtypes.float32, dtypes.bool, dtypes.bfloat16):
    buf = Buffer("CPU", 0, dtype)
    assert buf.nbytes == 0 and not buf.is_allocated
    buf.copyin(np.empty(0, to_numpy(dtype)))
    assert buf.is_allocated and isinstance(buf.opaque, int)
    assert buf.numpy().shape == (0,) and buf.numpy().dtype == to_numpy(dtype)
  assert Buffer("CPU", 0, dtypes.int8).allocate().opaque != Buffer("CPU", 0, dtypes.int8).allocate().opaque


def test_size_mismatch_names_both_sizes():
  buf = Buffer("CPU", 4, dtypes.float32)
  with pytest.raises(ValueError, match=r"12 bytes.*16 bytes"): buf.copyin(np.zeros(3, np.float32))
  with pytest.raises(ValueError, match=r"20 bytes.*16 bytes"): buf.copyin(b"\0" * 20)
  with pytest.raises(ValueError, match=r"16 bytes.*8 bytes"): buf.allocate().copyout(memoryview(bytearray(8)))
  with pytest.raises(TypeError, match="float64"): buf.copyin(np.zeros(4, np.float64))   # would reinterpret bytes


def test_allocation_state_alignment_and_free():
  buf = Buffer("CPU:0", 10, dtypes.float64)
  assert buf.device == "CPU" and buf.nbytes == 80 and not buf.is_allocated
  with pytest.raises(RuntimeError, match="not allocated"): buf.opaque
  address = buf.allocate().opaque
  assert buf.allocate().opaque == address and address % 64 == 0
  allocator = cpu().allocator
  held = len(allocator._memory)
  del buf
  assert len(allocator._memory) == held - 1   # garbage collection returned the memory


def test_freed_large_allocations_are_reused_by_size_up_to_a_limit(monkeypatch):
  from minigrad.runtime import ops_cpu
  allocator = ops_cpu.CPUAllocator()
  monkeypatch.setattr(ops_cpu, "SPARE_BYTES", 3 * ops_cpu.SPARE_MIN_BYTES)
  big, small = ops_cpu.SPARE_MIN_BYTES, ops_cpu.SPARE_MIN_BYTES // 2
  first = allocator.alloc(big)
  allocator.free(first)
  assert allocator.alloc(big) == first                    # the same size again: the freed memory
  assert allocator.alloc(big) != first                    # in use: a new allocation
  other = allocator.alloc(small)
  allocator.free(other)
  assert not allocator._spare.get(small)                  # small allocations are left to malloc
  blocks = [allocator.alloc(2 * big) for _ in range(2)]
  for b in blocks: allocator.free(b)
  assert allocator._spare_bytes <= 3 * big                # one of the two didn't fit the limit
  with pytest.raises(ValueError, match="double free"): allocator.free(blocks[0])
  assert allocator.alloc(2 * big) % 64 == 0


# ---------------------------------------------------------------- compiler and cache

def counting(compiler: CCompiler, monkeypatch) -> list[str]:
  calls: list[str] = []
  real_compile = compiler.compile
  monkeypatch.setattr(compiler, "compile", lambda src: calls.append(src) or real_compile(src))
  return calls


def test_compile_cache_reuses_binary(monkeypatch, isolated_cache):
  compiler = CCompiler()
  calls = counting(compiler, monkeypatch)
  first = compiler.compile_cached(ADD_SRC)
  second = compiler.compile_cached(ADD_SRC)
  assert len(calls) == 1 and first == second
  assert [p.name for p in (isolated_cache / "compiled").iterdir()] == [compiler.cache_path(ADD_SRC).name]
  compiler.compile_cached(ADD_SRC + "\n")   # different source, different entry
  assert len(calls) == 2
  monkeypatch.setenv("DISABLE_COMPILER_CACHE", "1")
  compiler.compile_cached(ADD_SRC)
  assert len(calls) == 3


@pytest.mark.parametrize("damage", ["truncate", "overwrite", "empty"])
def test_corrupt_cache_entry_is_recompiled(monkeypatch, damage: str):
  compiler = CCompiler()
  calls = counting(compiler, monkeypatch)
  good = compiler.compile_cached(ADD_SRC)
  path = compiler.cache_path(ADD_SRC)
  blob = path.read_bytes()
  if damage == "truncate": path.write_bytes(blob[:len(blob) // 2])
  elif damage == "overwrite": path.write_bytes(blob[:100] + bytes(len(blob) - 100))   # header kept, payload zeroed
  else: path.write_bytes(b"")
  binary = compiler.compile_cached(ADD_SRC)
  assert len(calls) == 2 and binary == good and path.read_bytes() == blob   # recompiled and rewritten
  out, a = Buffer("CPU", 4, dtypes.float32).allocate(), buffer_of(np.arange(4, dtype=np.float32))
  CPUProgram("add", binary)(out.opaque, a.opaque, a.opaque, vals=(4,))
  np.testing.assert_array_equal(out.numpy(), [0, 2, 4, 6])
  assert compiler.compile_cached(ADD_SRC) == good and len(calls) == 2


def test_cache_key_separates_compilers(monkeypatch):
  compiler, other = CCompiler(), CCompiler()
  other.cache_key += " -O3"
  assert compiler.cache_path(ADD_SRC) != other.cache_path(ADD_SRC)


def test_missing_cc_is_named(monkeypatch):
  monkeypatch.setenv("CC", "/nonexistent/cc")
  with pytest.raises(RuntimeError, match="/nonexistent/cc"): CCompiler()


def test_compiler_without_shufflevector_gets_lanes_gathered_one_by_one(monkeypatch, tmp_path):
  # an older gcc (11 and before) has no __builtin_shufflevector: the CPU device asks, and its renderer then gathers
  # lanes one by one instead of shuffling; the kernels give the same numbers
  import shutil
  from minigrad import Tensor
  from minigrad.engine import realize
  real = find_c_compiler()[0][0]
  fake = tmp_path / "oldcc"
  fake.write_text(f'#!/bin/sh\nif [ "$1" = "--version" ]; then exec {shutil.which(real)} --version; fi\nsrc=$(cat)\n'
                  f'case "$src" in *__builtin_shufflevector*) echo "error: unknown builtin" >&2; exit 1;; esac\n'
                  f'printf "%s\\n" "$src" | exec {shutil.which(real)} "$@"\n')
  fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
  assert CCompiler().has_shufflevector() and not CCompiler(str(fake)).has_shufflevector()
  renderer = cpu().renderer
  monkeypatch.setattr(renderer, "shufflevector", False)
  monkeypatch.setattr(realize, "compiled_kernels", {})
  rng = np.random.default_rng(5)
  dh, z, b, x = (rng.standard_normal(shape).astype(np.float32) for shape in ((64, 32), (64, 32), (32,), (64, 48)))
  weight_grad = (Tensor(dh, device="CPU") * ((Tensor(z, device="CPU") + Tensor(b, device="CPU")) > 0)).T @ Tensor(x, device="CPU")
  forward = Tensor(x, device="CPU") @ Tensor(x[:40], device="CPU").T   # a tile of dot products: lanes of 16 accumulators combined
  for t, expected in ((weight_grad, (dh * (z + b > 0)).T @ x), (forward, x @ x[:40].T)):
    assert all("__builtin_shufflevector" not in realize.get_kernel(item.ast, "CPU").source for item in t.schedule())
    np.testing.assert_allclose(t.numpy(), expected, rtol=1e-4, atol=1e-3)


def test_no_compiler_at_all_says_how_to_install(monkeypatch, tmp_path):
  monkeypatch.delenv("CC", raising=False)
  monkeypatch.setenv("PATH", str(tmp_path))
  with pytest.raises(RuntimeError, match="clang.*gcc.*cc.*apt-get install"): find_c_compiler()


def test_syntax_error_reports_source_and_compiler_message():
  src = "void broken(float* out) {\n  out[0] = 1.0f\n}\n"
  with pytest.raises(CompileError) as info: CCompiler().compile(src)
  message = str(info.value)
  assert "error" in message and "expected" in message   # the compiler's diagnostic
  assert "1 | void broken(float* out) {" in message and "2 |   out[0] = 1.0f" in message
  assert isinstance(info.value, RuntimeError)


def test_compile_timeout_raises_instead_of_hanging(tmp_path):
  fake = tmp_path / "slowcc"
  fake.write_text('#!/bin/sh\nif [ "$1" = "--version" ]; then echo "slowcc 1.0"; exit 0; fi\nsleep 30\n')
  fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
  compiler = CCompiler(cc=str(fake), timeout_s=0.5)
  start = time.perf_counter()
  with pytest.raises(CompileError, match="did not finish"): compiler.compile(ADD_SRC)
  assert time.perf_counter() - start < 5


# ---------------------------------------------------------------- the device registry

def test_device_names_are_canonicalized():
  assert Device.canonicalize("cpu") == Device.canonicalize("CPU:0") == "CPU"
  assert Device["cpu"] is Device["CPU"] is Device["CPU:1"]
  assert Device["CPU"].name == "CPU" and isinstance(Device["CPU"].compiler, CCompiler)
  Device["CPU"].synchronize()


def test_unknown_device_lists_valid_names():
  with pytest.raises(ValueError, match="TPU.*CPU, LLVM, CL, CUDA, PYTHON"): Device["TPU"]
  with pytest.raises(ValueError, match="CPU, LLVM, CL, CUDA, PYTHON"): Buffer("GPU", 1, dtypes.float32)


def test_known_device_without_backend_is_not_available(monkeypatch):
  monkeypatch.setattr(device_module, "DEVICE_NAMES", device_module.DEVICE_NAMES + ("NOSUCHBACKEND",))
  with pytest.raises(RuntimeError, match="NOSUCHBACKEND backend is not available"): Device["NoSuchBackend"]


def test_default_device_from_env():
  assert default_device_from_env({}) == "CPU"
  assert default_device_from_env({"DEV": "cl"}) == "CL"
  assert default_device_from_env({"DEV": "CUDA:0"}) == "CUDA"
  assert default_device_from_env({"LLVM": "1"}) == "LLVM"
  assert default_device_from_env({"PYTHON": "1", "CPU": "0"}) == "PYTHON"
  assert default_device_from_env({"CL": "0", "DEV": ""}) == "CPU"
  assert default_device_from_env({"DEV": "llvm", "CUDA": "1"}) == "LLVM"   # DEV wins over shorthands
  with pytest.raises(ValueError, match="CL=1, CUDA=1"): default_device_from_env({"CL": "1", "CUDA": "1"})
  with pytest.raises(ValueError, match="CPU, LLVM, CL, CUDA, PYTHON"): default_device_from_env({"DEV": "TPU"})


def test_default_device_is_settable():
  saved = Device.DEFAULT
  try:
    Device.DEFAULT = "cl"
    assert Device.DEFAULT == "CL"
    with pytest.raises(ValueError): Device.DEFAULT = "TPU"
    assert Device.DEFAULT == "CL"
  finally:
    Device.DEFAULT = saved
  assert Device.DEFAULT == saved


@pytest.mark.parametrize("setup, env, expected", [("", {}, 10000), ("", {"MINIGRAD_GC_THRESHOLD": "0"}, 700),
                                                  ("", {"MINIGRAD_GC_THRESHOLD": "2500"}, 2500),
                                                  ("gc.set_threshold(1234); ", {}, 1234)])
def test_import_collects_young_objects_less_often_unless_told(setup, env, expected):
  # an eager step's short-lived graph objects would otherwise reach the oldest generation (minigrad.helpers)
  import os, subprocess, sys
  program = f"import gc; {setup}import minigrad; print(gc.get_threshold()[0])"
  environment = {k: v for k, v in os.environ.items() if k != "MINIGRAD_GC_THRESHOLD"} | env
  out = subprocess.run([sys.executable, "-c", program], env=environment, capture_output=True, text=True, check=True).stdout
  assert int(out) == expected
