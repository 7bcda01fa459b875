"""The PYTHON device (minigrad/runtime/ops_python.py), which interprets GPU-shaped kernels with numpy: grouped
reductions, LOCAL workgroups and explicit (BEAM-style) actions against numpy; every dtype and the C semantics of the
ALU table against the CPU device, bit for bit where the math is exact; the fused multiply-add emulation; the checks
a real GPU can't do (out of bounds, races, conflicting stores, unwritten local memory) on hand-built bad kernels;
the program text (renderer, parser, DEBUG=4)."""
from __future__ import annotations
import math
import os
import subprocess
import sys
from fractions import Fraction
import numpy as np
import pytest
from minigrad import Tensor, dtypes
from minigrad.codegen.kernel import Opt
from minigrad.codegen.python_renderer import PythonRenderer, parse_program
from minigrad.dtype import ALL_DTYPES, DType, to_numpy
from minigrad.engine.realize import buffer_of, get_kernel
from minigrad.runtime.device import Buffer, CompileError, Device
from minigrad.runtime.ops_python import KernelCheckError, PythonCompiler, PythonProgram, fused_multiply_adds, decode_program
from minigrad.runtime.python_alu import alu_function, cast_function, fma
from minigrad.uop.ops import UOp, Ops, toposort

rng = np.random.default_rng(6)


def floats(*shape: int) -> np.ndarray: return rng.standard_normal(shape).astype(np.float32)


def on(device: str, x: np.ndarray, dtype: DType | None = None) -> Tensor: return Tensor(x, device=device, dtype=dtype)


def single_kernel(t: Tensor):
  """The compiled PYTHON kernel of a tensor that is one kernel away from its (realized) inputs."""
  (item,) = t.schedule()
  return item, get_kernel(item.ast, "PYTHON")


def run_item(item, opts: list[Opt] | None) -> np.ndarray:
  program = get_kernel(item.ast, "PYTHON", opts)
  buffers = [buffer_of(b).allocate() for b in item.bufs]
  program(buffers)
  return buffers[0].numpy().copy()


# ---------------------------------------------------------------- GPU-shaped kernels vs numpy

@pytest.mark.parametrize("shape", [(3, 8192), (5, 1000), (1, 4096 * 3)])
def test_grouped_row_sum_and_max(shape):
  x = floats(*shape)
  x[0, 17] = np.nan   # max propagates NaN, only in its row
  item, program = single_kernel(on("PYTHON", x).max(1))
  assert any(o.op in ("GROUP", "GROUPTOP") for o in program.kernel.applied_opts), program.kernel.applied_opts
  assert program.launch_dims[1][0] > 1 and "BARRIER" in program.source and "DEFINE_LOCAL" in program.source
  np.testing.assert_array_equal(on("PYTHON", x).max(1).numpy(), x.max(1))
  np.testing.assert_allclose(on("PYTHON", x).sum(1).numpy(), x.sum(1, dtype=np.float64), rtol=1e-5, atol=1e-3)


def test_grouped_full_sum_of_a_large_vector():
  x = floats(1 << 17)
  t = on("PYTHON", x).sum()
  _, program = single_kernel(t)
  assert any(o.op in ("GROUP", "GROUPTOP") for o in program.kernel.applied_opts)
  assert abs(t.item() - x.sum(dtype=np.float64)) < 1e-2


def test_local_workgroups_in_a_matmul():
  a, b = floats(64, 48), floats(48, 80)
  t = on("PYTHON", a) @ on("PYTHON", b)
  _, program = single_kernel(t)
  assert any(o.op == "LOCAL" for o in program.kernel.applied_opts)
  assert math.prod(program.launch_dims[1]) > 1 and math.prod(program.launch_dims[0]) > 1
  np.testing.assert_allclose(t.numpy(), a @ b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("opts", [
  [Opt("GROUP", 0, 16), Opt("LOCAL", 0, 4)],
  [Opt("GROUPTOP", 0, 8), Opt("LOCAL", 0, 2), Opt("LOCAL", 1, 4)],
  [Opt("LOCAL", 0, 4), Opt("LOCAL", 1, 8), Opt("UPCAST", 1, 2), Opt("UNROLL", 0, 4)],
  [Opt("GROUP", 0, 4), Opt("UPCAST", 1, 4), Opt("UNROLL", 0, 2)],
  [Opt("PADTO", 0, 5), Opt("LOCAL", 0, 5), Opt("GROUP", 0, 8)],
  [Opt("SWAP", 0, 1), Opt("LOCAL", 1, 2), Opt("GROUPTOP", 0, 2)],
])
def test_explicit_opts_on_a_matmul(opts):
  a, b = floats(12, 64), floats(64, 16)
  (item,) = (on("PYTHON", a) @ on("PYTHON", b)).schedule()
  program = get_kernel(item.ast, "PYTHON", opts)
  assert program.kernel.applied_opts == opts
  np.testing.assert_allclose(run_item(item, opts), (a @ b).reshape(-1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("opts", [[Opt("GROUP", 0, 16)], [Opt("GROUPTOP", 0, 32), Opt("LOCAL", 0, 2)], [Opt("GROUP", 0, 8), Opt("UNROLL", 0, 4)]])
def test_explicit_opts_on_row_reductions(opts):
  x = floats(6, 256)
  for reduced, expected in ((on("PYTHON", x).max(1), x.max(1)), (on("PYTHON", x).exp().sum(1), np.exp(x).sum(1))):
    (item,) = reduced.schedule()
    np.testing.assert_allclose(run_item(item, opts), expected, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- every dtype, against the CPU device

def values_of(dt: DType, count: int) -> np.ndarray:
  if dt == dtypes.bool: return rng.integers(0, 2, count).astype(bool)
  if dtypes.is_float(dt): return (rng.standard_normal(count) * 10).astype(np.float32 if dt == dtypes.bfloat16 else to_numpy(dt))
  info = np.iinfo(to_numpy(dt))
  return rng.integers(info.min, info.max, count, dtype=to_numpy(dt), endpoint=True)


def both_devices(make, *arrays: np.ndarray, dtype: DType) -> tuple[np.ndarray, np.ndarray]:
  return tuple(make(*(on(device, x, dtype) for x in arrays)).numpy() for device in ("PYTHON", "CPU"))


@pytest.mark.parametrize("dt", ALL_DTYPES, ids=lambda d: d.name)
def test_every_dtype_elementwise_matches_cpu_bit_for_bit(dt):
  x, y = values_of(dt, 300), values_of(dt, 300)
  if dt == dtypes.bool: operations = [lambda a, b: a & b, lambda a, b: a | b, lambda a, b: a ^ b, lambda a, b: ~a]
  else:
    operations = [lambda a, b: a + b, lambda a, b: a * b, lambda a, b: a.maximum(b), lambda a, b: (a < b).where(a, b * 3)]
    operations.append((lambda a, b: a * b + a) if dtypes.is_float(dt) else (lambda a, b: a - b))
  operations.append(lambda a, b: a.ne(b) | (a == b))
  for make in operations:
    got, expected = both_devices(make, x, y, dtype=dt)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("dt", ALL_DTYPES, ids=lambda d: d.name)
def test_every_dtype_reduces_like_cpu(dt):
  x = values_of(dt, (8 * 512)).reshape(8, 512)
  got, expected = both_devices(lambda a: a.max(1), x, dtype=dt)
  np.testing.assert_array_equal(got, expected)
  if dt != dtypes.bool:
    got, expected = both_devices(lambda a: a.sum(1), x, dtype=dt)
    if dtypes.is_float(dt): np.testing.assert_allclose(got.astype(np.float64), expected.astype(np.float64), rtol=1e-2 if dt in (dtypes.float16, dtypes.bfloat16) else 1e-5)
    else: np.testing.assert_array_equal(got, expected)   # integer sums wrap the same in any order


@pytest.mark.parametrize("source", ALL_DTYPES, ids=lambda d: d.name)
def test_casts_match_cpu(source):
  x = values_of(source, 200)
  for target in ALL_DTYPES:
    if dtypes.is_float(source) and dtypes.is_int(target): x = np.clip(x, 0 if dtypes.is_unsigned(target) else -100, 100)   # in range: defined in C
    got, expected = both_devices(lambda a: a.cast(target), x, dtype=source)
    np.testing.assert_array_equal(got, expected, err_msg=f"{source} -> {target}")


@pytest.mark.parametrize("name, make", [
  ("sqrt", lambda a: a.abs().sqrt()), ("exp", lambda a: a.exp()), ("log", lambda a: a.abs().log()), ("sin", lambda a: a.sin()),
  ("trunc", lambda a: a.trunc()), ("reciprocal", lambda a: a.reciprocal()), ("div", lambda a: a / (a - 0.5)),
])
@pytest.mark.parametrize("dt", [dtypes.float32, dtypes.float64], ids=lambda d: d.name)
def test_float_math_matches_numpy(name, make, dt):
  x = np.concatenate([floats(300) * 5, [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30]]).astype(to_numpy(dt))
  got = make(on("PYTHON", x)).numpy()
  with np.errstate(all="ignore"):
    expected = {"sqrt": np.sqrt(np.abs(x)), "exp": np.exp(x), "log": np.log(np.abs(x)), "sin": np.sin(x), "trunc": np.trunc(x),
                "reciprocal": 1 / x, "div": x / (x - 0.5)}[name]
  np.testing.assert_allclose(got, expected, rtol=2e-6 if dt == dtypes.float32 else 1e-14, atol=0)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")   # a launch silences numpy's overflow warnings; these calls are bare
def test_c_integer_semantics_of_the_alu_table():
  a, b = np.array([-7, 7, -7, 7, -2**31], np.int32), np.array([2, -2, -2, 2, -1], np.int32)
  np.testing.assert_array_equal(alu_function(Ops.IDIV, dtypes.int32, dtypes.int32)(a, b), [-3, -3, 3, 3, -2**31])   # toward zero, wraps
  np.testing.assert_array_equal(alu_function(Ops.MOD, dtypes.int32, dtypes.int32)(a, b), [-1, 1, -1, 1, 0])   # dividend's sign
  assert alu_function(Ops.ADD, dtypes.int32, dtypes.int32)(np.int32(2**31 - 1), np.int32(1)) == -2**31
  assert alu_function(Ops.MUL, dtypes.uint8, dtypes.uint8)(np.uint8(200), np.uint8(2)) == 144
  assert alu_function(Ops.ADD, dtypes.int8, dtypes.int8)(np.int8(127), np.int8(1)) == -128
  assert alu_function(Ops.SHR, dtypes.int8, dtypes.int8)(np.int8(-128), np.int8(1)) == -64
  assert alu_function(Ops.IDIV, dtypes.uint32, dtypes.uint32)(np.uint32(7), np.uint32(0)) == 0   # no crash on x / 0


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_c_float_semantics_of_the_alu_table():
  nan = np.float32(np.nan)
  maximum = alu_function(Ops.MAX, dtypes.float32, dtypes.float32)
  assert np.isnan(maximum(nan, np.float32(1))) and np.isnan(maximum(np.float32(1), nan))
  assert alu_function(Ops.CMPNE, dtypes.bool, dtypes.float32)(nan, nan)
  assert not alu_function(Ops.CMPLT, dtypes.bool, dtypes.float32)(nan, np.float32(1))
  to_int = cast_function(dtypes.float32, dtypes.int32)(np.array([-2.7, 2.7, -0.5], np.float32))
  np.testing.assert_array_equal(to_int, [-2, 2, 0])
  assert cast_function(dtypes.float32, dtypes.bool)(nan) and not cast_function(dtypes.float32, dtypes.bool)(np.float32(-0.0))
  assert alu_function(Ops.ADD, dtypes.float32, dtypes.float32)(np.float32(1), np.float32(1e-8)).dtype == np.float32
  words = cast_function(dtypes.float32, dtypes.bfloat16)(np.array([1.0, np.nan, 3.0e38 * 10], np.float32))
  np.testing.assert_array_equal(cast_function(dtypes.bfloat16, dtypes.float32)(words)[[0, 2]], [1.0, np.inf])


@pytest.mark.parametrize("npdt", [np.float32, np.float64])
def test_fused_multiply_add_rounds_once(npdt):
  a, b = rng.standard_normal(2000).astype(npdt), rng.standard_normal(2000).astype(npdt)
  c = (-(a * b) * (1 + rng.standard_normal(2000) * 1e-4)).astype(npdt)   # near-cancellation: where double rounding shows
  got = fma(a, b, c, np.dtype(npdt))
  assert got.dtype == npdt
  for i in range(0, 2000, 13):
    exact = Fraction(float(a[i])) * Fraction(float(b[i])) + Fraction(float(c[i]))
    nearest = npdt(float(exact))   # float() rounds correctly to float64; for float32 check both neighbours
    candidates = [np.nextafter(nearest, npdt(-np.inf)), nearest, np.nextafter(nearest, npdt(np.inf))]
    best = min(abs(Fraction(float(v)) - exact) for v in candidates)
    assert abs(Fraction(float(got[i])) - exact) == best, (a[i], b[i], c[i])


def test_fused_multiply_add_of_a_float32_halfway_product():
  a, b = np.float32(2**23 + 1), np.float32(3)   # a * b = 3 * 2**23 + 3 lies halfway between two float32
  assert fma(a, b, np.float32(-2.0**-30), np.dtype(np.float32)) == np.float32(3 * 2**23 + 2)   # the tiny c decides
  assert fma(a, b, np.float32(2.0**-30), np.dtype(np.float32)) == np.float32(3 * 2**23 + 4)
  assert fma(np.float32(2.0**-70), np.float32(2.0**-70), np.float32(0), np.dtype(np.float32)) == np.float32(2.0**-140)   # subnormal


def test_fmod_is_exact_thanks_to_fused_multiply_add():
  x, y = floats(500).astype(np.float64) * 10, floats(500).astype(np.float64) + 3
  np.testing.assert_array_equal(on("PYTHON", x).fmod(on("PYTHON", y)).numpy(), np.fmod(x, y))


# ---------------------------------------------------------------- hand-built kernels: the checks

FLOAT_PTR, LOCAL_PTR = dtypes.float32.ptr(), dtypes.float32.ptr(local=True)
data0, data1 = UOp(Ops.DEFINE_GLOBAL, FLOAT_PTR, (), 0), UOp(Ops.DEFINE_GLOBAL, FLOAT_PTR, (), 1)
thread = UOp(Ops.SPECIAL, dtypes.int32, (), ("lidx0", 8))
temp = UOp(Ops.DEFINE_LOCAL, LOCAL_PTR, (), ("temp0", 8))


def index(buffer: UOp, i: UOp | int, gate: UOp | None = None) -> UOp:
  i = i if isinstance(i, UOp) else UOp.const(dtypes.int32, i)
  return UOp(Ops.INDEX, buffer.dtype, (buffer, i) + ((gate,) if gate is not None else ()))


def load(pointer: UOp, *after: UOp) -> UOp: return UOp(Ops.LOAD, dtypes.float32, (pointer,) + after)
def store(pointer: UOp, value: UOp) -> UOp: return UOp(Ops.STORE, dtypes.void, (pointer, value))


def run_uops(stores: list[UOp], inputs: np.ndarray, output_size: int = 8, local_size: int = 8) -> np.ndarray:
  """Render the kernel ending in `stores`, compile it, and run one workgroup of `local_size` threads."""
  uops = toposort(stores)
  binary = PythonCompiler().compile(PythonRenderer().render("hand_built", uops))
  allocator = Device["PYTHON"].allocator
  out, source = allocator.alloc(output_size * 4), allocator.alloc(inputs.nbytes)
  allocator.copyin(source, memoryview(inputs.astype(np.float32)).cast("B"))
  program = PythonProgram("hand_built", binary)
  program(*[{0: out, 1: source}[arg] for arg in program.global_args], global_size=(1, 1, 1), local_size=(local_size, 1, 1))
  return out.view(np.float32).copy()


def rotate_through_local_memory(with_barrier: bool) -> list[UOp]:
  """Each thread writes its element to local memory, then reads its neighbour's."""
  written = store(index(temp, thread), load(index(data1, thread)))
  neighbour = (thread + 1) % 8
  after = (UOp(Ops.BARRIER, dtypes.void, (written,)),) if with_barrier else ()
  return [written, store(index(data0, thread), load(index(temp, neighbour), *after))]


def test_a_barrier_orders_local_memory():
  x = np.arange(8, dtype=np.float32)
  np.testing.assert_array_equal(run_uops(rotate_through_local_memory(True), x), np.roll(x, -1))


def test_reading_local_memory_another_thread_wrote_without_a_barrier_is_a_race():
  with pytest.raises(KernelCheckError, match=r"hand_built: LOAD %\d+ races on temp0\[1\]: workgroup \(0, 0, 0\) thread \(0, 0, 0\) reads what "
                                             r"was written by workgroup \(0, 0, 0\) thread \(1, 0, 0\) since the last barrier"):
    run_uops(rotate_through_local_memory(False), np.arange(8, dtype=np.float32))


def test_overwriting_local_memory_others_read_without_a_barrier_is_a_race():
  written = store(index(temp, thread), load(index(data1, thread)))
  barrier = UOp(Ops.BARRIER, dtypes.void, (written,))
  neighbour_value = load(index(temp, (thread + 1) % 8), barrier)
  overwrite = store(index(temp, thread), neighbour_value * 2)   # thread 1 overwrites temp0[1] that thread 0 read
  with pytest.raises(KernelCheckError, match=r"STORE %\d+ races on temp0\[\d\]: .* overwrites what was read by"):
    run_uops([written, overwrite], np.arange(8, dtype=np.float32))


def test_reading_global_memory_another_thread_wrote_is_a_race():
  first = store(index(data0, thread), load(index(data1, thread)))
  second = store(index(data0, thread), load(index(data0, (thread + 1) % 8)) + 1.0)
  with pytest.raises(KernelCheckError, match=r"races on data0\[1\]: .* reads what was written by .* in this launch"):
    run_uops([first, second], np.arange(8, dtype=np.float32))


def test_reading_local_memory_no_thread_wrote_is_refused():
  half = store(index(temp, thread, thread < 4), load(index(data1, thread)))
  barrier = UOp(Ops.BARRIER, dtypes.void, (half,))
  with pytest.raises(KernelCheckError, match=r"reads temp0\[4\] before any thread of the workgroup wrote it"):
    run_uops([half, store(index(data0, thread), load(index(temp, thread), barrier))], np.arange(8, dtype=np.float32))


def test_out_of_bounds_accesses_are_refused():
  shifted = store(index(data0, thread), load(index(data1, thread + 3)))
  with pytest.raises(KernelCheckError, match=r"kernel hand_built: LOAD %\d+ indexes data1 at 8..10 but it has 8 elements \(first: workgroup "
                                             r"\(0, 0, 0\) thread \(5, 0, 0\) at index 8\)"):
    run_uops([shifted], np.arange(8, dtype=np.float32))
  with pytest.raises(KernelCheckError, match=r"STORE %\d+ indexes data0 at -1..-1 but it has 8 elements"):
    run_uops([store(index(data0, thread - 1), load(index(data1, thread)))], np.arange(8, dtype=np.float32))
  with pytest.raises(KernelCheckError, match=r"indexes temp0 at 8..9 but it has 8 elements per workgroup"):
    run_uops([store(index(temp, thread + 2), load(index(data1, thread)))], np.arange(8, dtype=np.float32))
  gated = store(index(data0, thread), load(index(data1, thread + 3, thread < 5)))   # masked lanes may point anywhere
  np.testing.assert_array_equal(run_uops([gated], np.arange(8, dtype=np.float32)), [3, 4, 5, 6, 7, 0, 0, 0])


def test_threads_storing_different_values_to_one_address_is_refused():
  with pytest.raises(KernelCheckError, match=r"writes data0\[0\] from two threads with different values: workgroup \(0, 0, 0\) thread "
                                             r"\(0, 0, 0\) writes 5.0, workgroup \(0, 0, 0\) thread \(1, 0, 0\) writes 6.0"):
    run_uops([store(index(data0, 0), load(index(data1, thread)))], np.arange(5, 13, dtype=np.float32))
  same = store(index(data0, 0), load(index(data1, 2)))   # every thread writes the same value: fine
  assert run_uops([same], np.arange(8, dtype=np.float32))[0] == 2


def test_a_launch_that_does_not_match_the_kernels_ids_is_refused():
  with pytest.raises(KernelCheckError, match="lidx0 counts 8 but the launch has 4 threads per workgroup along x"):
    run_uops([store(index(data0, thread), load(index(data1, thread)))], np.arange(8, dtype=np.float32), local_size=4)


# ---------------------------------------------------------------- the program text

def test_program_text_round_trips_through_the_parser():
  x = floats(4, 64)
  _, program = single_kernel(on("PYTHON", x).exp().sum(1))
  instructions = parse_program(program.source)
  assert [(i.op, i.dtype, i.arg) for i in instructions] == [(u.op, u.dtype, u.arg) for u in program.uops]
  assert decode_program(PythonCompiler().compile(program.source)) == instructions
  assert program.source.startswith(f"# kernel {program.name}\n# data0: float* (written), data1: float*\n")


def test_fused_multiply_adds_follow_the_compilers_rule():
  instructions = parse_program("\n".join([
    "%0 = CONST float 2.0", "%1 = CONST float 3.0",
    "%2 = MUL float (%0, %1)", "%3 = ADD float (%2, %0)",                           # the only use: fused
    "%4 = MUL float (%0, %0)", "%5 = ADD float (%4, %1)", "%6 = MAX float (%4, %1)",  # used by a MAX too: not fused
    "%7 = MUL float (%1, %1)", "%8 = NEG float (%7)", "%9 = ADD float (%0, %8)",    # through a NEG: fused
  ]))
  assert fused_multiply_adds(instructions) == {3: (2, False), 9: (7, True)}


@pytest.mark.parametrize("text, message", [
  ("%0 = CONST float 1.0\n%1 = ADD float (%0, %2)", "not defined before its use"),
  ("%0 = FROB float 1.0", "unknown op FROB"),
  ("%0 = CONST floaty 1.0", "unknown dtype 'floaty'"),
  ("%0 = CONST int 0\n%1 = CONST int 4\n%2 = RANGE int (%0, %1) [0, \"reduce\"]", "RANGE %2 is never closed"),
  ("%0 = CONST int 0\n%1 = LOAD float (%0)", "LOAD needs an INDEX"),
  ("%0 = CONST float 1.0\n%2 = CONST float 1.0", "numbered in order"),
])
def test_bad_program_text_is_a_compile_error(text, message):
  with pytest.raises(CompileError, match=message): PythonCompiler().compile(text)


def test_debug_4_prints_the_readable_program():
  code = ("import numpy as np; from minigrad import Tensor; x = np.arange(4096, dtype=np.float32).reshape(2, 2048); "
          "print('result', Tensor(x).sum(1).tolist())")
  env = {**os.environ, "DEV": "PYTHON", "DEBUG": "4"}
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300, check=True).stdout
  assert "# kernel r_" in out and "= SPECIAL int [\"lidx0\"" in out and "= DEFINE_LOCAL float*local [\"temp0\"" in out
  assert "= BARRIER void (%" in out and "= RANGE int (%" in out and "*** PYTHON" in out
  expected = np.arange(4096, dtype=np.float64).reshape(2, 2048).sum(1).tolist()
  assert f"result {expected}" in out


def test_buffers_live_in_host_memory():
  buf = Buffer("PYTHON", 5, dtypes.int16).copyin(np.arange(5, dtype=np.int16))
  assert isinstance(buf.opaque, np.ndarray) and buf.opaque.nbytes == 10
  np.testing.assert_array_equal(buf.numpy(), np.arange(5))
