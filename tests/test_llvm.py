"""The LLVM backend: LLVM IR from the renderer, compiled by llvmlite for this CPU, checked against numpy and torch.

Every tensor here lives on "LLVM" (the default device is switched for the module). The whole op suite also runs on
this backend with `DEV=LLVM python -m pytest tests/test_ops*.py tests/test_dtypes.py ...`.
"""
from __future__ import annotations
import os
import re
import subprocess
import sys
import numpy as np
import pytest

pytest.importorskip("llvmlite")
import torch  # noqa: E402
from minigrad import Tensor, dtypes, nn  # noqa: E402
from minigrad.dtype import ALL_DTYPES, DType, to_numpy, truncate  # noqa: E402
from minigrad.engine.realize import get_kernel  # noqa: E402
from minigrad.runtime import ops_cpu  # noqa: E402
from minigrad.runtime.device import Buffer, CompileError, Device  # noqa: E402
from minigrad.uop.ops import UOp, Ops  # noqa: E402
from minigrad.target import cpu_target  # noqa: E402

LANES = cpu_target().vector_bytes // 4   # float32 lanes of the CPU devices' kernels (the Target: CPU_TARGET)

TORCH_DTYPES = {dtypes.bool: torch.bool, dtypes.int8: torch.int8, dtypes.uint8: torch.uint8, dtypes.int16: torch.int16,
                dtypes.uint16: torch.uint16, dtypes.int32: torch.int32, dtypes.uint32: torch.uint32, dtypes.int64: torch.int64,
                dtypes.uint64: torch.uint64, dtypes.float16: torch.float16, dtypes.bfloat16: torch.bfloat16,
                dtypes.float32: torch.float32, dtypes.float64: torch.float64}


@pytest.fixture(autouse=True, scope="module")
def on_llvm():
  saved = Device.DEFAULT
  Device.DEFAULT = "LLVM"
  yield
  Device.DEFAULT = saved


def to_torch(t: Tensor) -> torch.Tensor:
  """A minigrad tensor's values as torch holds them in its dtype (bfloat16 comes out of numpy as float32)."""
  return torch.from_numpy(np.ascontiguousarray(t.numpy())).to(TORCH_DTYPES[t.dtype])


def assert_matches(mine: Tensor, expected: torch.Tensor, rtol: float = 1e-6, atol: float = 1e-6) -> None:
  assert mine.device == "LLVM" and mine.shape == tuple(expected.shape) and TORCH_DTYPES[mine.dtype] == expected.dtype
  got, want = mine.numpy(), expected.to(torch.float32 if expected.dtype == torch.bfloat16 else expected.dtype).numpy()
  if want.dtype.kind in "biu": np.testing.assert_array_equal(got, want)
  else: np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol, equal_nan=True)


def kernel_source(t: Tensor) -> str:
  """The LLVM IR of the (last) kernel computing `t`."""
  items = t.schedule()
  return get_kernel(items[-1].ast, "LLVM").source


# ---------------------------------------------------------------- elementwise, every dtype

VALUES = [-100, -7, -3, -1, 0, 1, 2, 5, 9, 100]


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: d.name)
def test_arithmetic_and_comparisons_in_every_dtype(dtype: DType):
  a_vals = [v % 2 for v in VALUES] if dtype == dtypes.bool else [abs(v) for v in VALUES] if dtypes.is_unsigned(dtype) else VALUES
  b_vals = list(reversed(a_vals))
  native = TORCH_DTYPES[dtype]
  limited = dtype in (dtypes.uint16, dtypes.uint32, dtypes.uint64)   # torch has no arithmetic for these: use int64, then wrap
  ta, tb = (torch.tensor(v).to(torch.int64 if limited else native) for v in (a_vals, b_vals))
  a, b = (Tensor(t.float().numpy(), dtype=dtype) if dtype == dtypes.bfloat16 else Tensor(t.to(native).numpy()) for t in (ta, tb))
  assert a.dtype == dtype
  assert_matches(a < b, ta < tb)
  assert_matches(a != b, ta != tb)
  assert_matches(a.maximum(b), torch.maximum(ta, tb).to(native))
  assert_matches((a < b).where(a, b), torch.where(ta < tb, ta, tb).to(native))
  if dtype == dtypes.bool:
    assert_matches(a & b, ta & tb)
    assert_matches(a | b, ta | tb)
    assert_matches(a ^ b, ta ^ tb)
    assert_matches(a.logical_not(), ta.logical_not())
    return
  tol = {dtypes.float16: 1e-3, dtypes.bfloat16: 1e-2}.get(dtype, 1e-6)
  assert_matches(a + b, (ta + tb).to(native), rtol=tol)
  assert_matches(a * b, (ta * tb).to(native), rtol=tol)
  assert_matches(a - b, (ta - tb).to(native), rtol=tol)
  assert_matches(-a, (-ta).to(native))
  if dtypes.is_float(dtype): assert_matches(a / b, ta / tb, rtol=tol)
  else: assert_matches(a ^ b, (ta ^ tb).to(native))


def test_unary_math_on_vectors_and_scalars_with_inf_and_nan():
  x = np.array([-np.inf, -100, -2.5, -1, -0.0, 0, 1e-30, 0.3, 1, 2, 10, 88, 200, np.inf, np.nan] * 4 + [0.5] * 4, np.float32)
  t, tt = Tensor(x), torch.from_numpy(x)
  with np.errstate(all="ignore"):
    assert_matches(t.exp2(), torch.exp2(tt), rtol=4e-6)
    assert_matches(t.log2(), torch.log2(tt), rtol=4e-6)
    assert_matches(t.sqrt(), torch.sqrt(tt))
    assert_matches(t.trunc(), torch.trunc(tt))
    finite = np.clip(np.nan_to_num(x, posinf=50, neginf=-50), -50, 50)
    assert_matches(Tensor(finite).sin(), torch.sin(torch.from_numpy(finite)), atol=1e-6)
    assert_matches(t.reciprocal(), torch.reciprocal(tt))
    # float64 stays scalar: LLVM's intrinsics
    x64 = x.astype(np.float64)
    assert_matches(Tensor(x64).exp2(), torch.exp2(torch.from_numpy(x64)), rtol=1e-12)
    assert_matches(Tensor(x64).sqrt(), torch.sqrt(torch.from_numpy(x64)), rtol=1e-15)


def built_code(ir: str, tmp_path) -> str:
  """The instructions LLVM built `ir` into for this CPU (the linked kernel library, disassembled)."""
  from test_codegen import disassembly
  return disassembly(Device["LLVM"].compiler.compile_cached(ir), tmp_path)


def test_vector_math_is_inline_or_calls_the_simd_library(tmp_path):
  x = np.linspace(-5, 5, 256, dtype=np.float32)
  compiler = Device["LLVM"].compiler
  exp2, log2 = Tensor(x).exp2(), Tensor(x + 6).log2()
  exp2_ir, log2_ir = kernel_source(exp2), kernel_source(log2)
  exp2_code, log2_code = built_code(exp2_ir, tmp_path), built_code(log2_ir, tmp_path)
  # compiler.avx512: LLVM's features for this CPU include avx512f (on x86-64). Then exp2 is inline, ending in vscalefps;
  # else glibc's exp2f on the Target's lanes where the C library has it for this CPU, else LLVM's exp2 intrinsic
  if compiler.avx512:
    assert "@llvm.x86.avx512.mask.scalef.ps.512" in exp2_ir and "_ZGV" not in exp2_ir
    assert re.search(r"vscalefps\s[^\n]*%zmm", exp2_code) and "exp2f" not in exp2_code
  else:
    assert "avx512" not in exp2_ir and "vscalefps" not in exp2_code
    simd = f"_ZGV{compiler.libmvec_widths.get(LANES)}N{LANES}v"
    assert (f"@{simd}_exp2f(<{LANES} x float>" if LANES in compiler.libmvec_widths else f"@llvm.exp2.v{LANES}f32(") in exp2_ir, exp2_ir
  if LANES in compiler.libmvec_widths:
    simd = f"_ZGV{compiler.libmvec_widths[LANES]}N{LANES}v"
    assert f"@{simd}_log2f(<{LANES} x float>" in log2_ir and f"{simd}_log2f" in log2_code
  else: assert ("@llvm.log2.v" in log2_ir or "@llvm.log2.f32" in log2_ir) and "_ZGV" not in log2_code
  np.testing.assert_allclose(exp2.numpy(), np.exp2(x), rtol=4e-6)
  np.testing.assert_allclose(log2.numpy(), np.log2(x + 6), rtol=4e-6)


@pytest.mark.parametrize("name", ["exp2", "exp", "relu", "clamp", "floor"])
def test_simd_idioms_give_the_c_backends_bits(name, tmp_path):
  """floor, max/min selects, x * 2**n and AVX-512 exp2 are spelled as single instructions, as the C renderer
  does (whose exp2 and exp are checked for accuracy in test_codegen.py): the same bits, NaN/inf/subnormals included."""
  x = np.concatenate([np.linspace(-160, 140, 4004), [np.inf, -np.inf, np.nan, 0, -0.0, 127.5, 128, -126.2, -149, -149.5, -151, 1e-30]])   # 16 * 251
  x = x.astype(np.float32)
  fn = {"exp2": Tensor.exp2, "exp": Tensor.exp, "relu": Tensor.relu, "clamp": lambda t: t.clamp(-3, 5), "floor": Tensor.floor}[name]
  mine, c_backend = fn(Tensor(x)), fn(Tensor(x, device="CPU")).numpy()
  source = kernel_source(mine)
  if name in ("exp", "floor") and LANES in (8, 16): assert f"@llvm.floor.v{LANES}f32" in source, source
  if name in ("exp", "exp2"):   # x * 2**n: vscalefps where LLVM's features for this CPU include avx512f, else the exponent bits
    code = built_code(source, tmp_path)
    if Device["LLVM"].compiler.avx512:
      assert "@llvm.x86.avx512.mask.scalef.ps.512" in source and re.search(r"vscalefps\s[^\n]*%zmm", code), source
    else:
      assert "avx512" not in source and "vscalefps" not in code, source
      if name == "exp" and LANES in (8, 16): assert f"shl <{LANES} x i32>" in source, source
  np.testing.assert_array_equal(mine.numpy().view(np.uint32), c_backend.view(np.uint32))


def test_exp_without_avx512_scales_by_exponent_bits(monkeypatch, tmp_path):
  from minigrad.engine import realize
  monkeypatch.setattr(Device["LLVM"].renderer, "avx512", False)   # as on a CPU without AVX-512
  monkeypatch.setattr(realize, "compiled_kernels", {})
  x = np.linspace(-80, 80, 1024, dtype=np.float32)
  t = Tensor(x).exp()
  assert "avx512" not in kernel_source(t) and f"shl <{LANES} x i32>" in kernel_source(t)
  assert "vscalefps" not in built_code(kernel_source(t), tmp_path)   # nor does LLVM put it back on an AVX-512 CPU
  np.testing.assert_allclose(t.numpy(), np.exp(x), rtol=2e-6)


@pytest.mark.parametrize("target_name, vectors", [("avx512", 4), ("avx2", 2)])
def test_prefetches_as_the_c_backend(target_name, vectors, monkeypatch):
  """The packed matmul panel and a softmax's next row are prefetched (codegen.cpu_patterns decides for both
  backends); a plain row sum is left to the hardware. The matmul's prefetches are checked for hand-built Targets
  (tests/cpu_targets.py): one per vector of the tile in a trip, 4 of 16 floats with AVX-512, 2 of 8 with AVX2."""
  from cpu_targets import TARGETS, decide, pin_policy_target, render
  target = TARGETS[target_name]
  rng = np.random.default_rng(3)
  a, b = rng.standard_normal((128, 512)).astype(np.float32), rng.standard_normal((512, 512)).astype(np.float32)
  with monkeypatch.context() as patched:
    pin_policy_target(patched, target)
    pack, product_item = (Tensor(a) @ Tensor(b)).schedule()
  source = render(decide(product_item.ast, target), "LLVM")
  assert source.count("call void @llvm.prefetch.p0(") == vectors, source
  product = Tensor(a) @ Tensor(b)   # the host's Target
  np.testing.assert_allclose(product.numpy(), a @ b, rtol=1e-4, atol=2e-3)
  x = rng.standard_normal((64, 1024)).astype(np.float32)
  softmax = Tensor(x).softmax(-1)
  assert "@llvm.prefetch" in kernel_source(softmax) and "@llvm.prefetch" not in kernel_source(Tensor(x).sum(1))
  np.testing.assert_array_equal(softmax.numpy(), Tensor(x, device="CPU").softmax(-1).numpy())


def test_accumulator_chains_are_interleaved():
  """A 3x3 convolution's reduce loop updates its accumulators (16 with AVX-512) with 9 multiply-adds each. The IR takes the chains'
  steps in turns (every accumulator is read before any is written back), so no multiply-add waits on the one before
  it; the result is unchanged (the same bits as the C backend)."""
  rng = np.random.default_rng(4)
  x, w = rng.standard_normal((2, 16, 8, 16)).astype(np.float32), rng.standard_normal((16, 16, 3, 3)).astype(np.float32)
  out = Tensor(x).conv2d(Tensor(w), padding=1)
  source = kernel_source(out)
  vec = f"<{LANES} x float>"
  accumulators = set(re.findall(rf"store {vec} zeroinitializer, ptr (%acc\d+)", source))
  loop = source[source.rindex(f"store {vec} zeroinitializer, ptr %acc"):]   # after the accumulators' zeroing
  first_write = loop.index(f"store {vec} %v")   # the loop body's first write back to an accumulator
  assert len(accumulators) >= 4 and len(re.findall(rf"load {vec}, ptr %acc", loop[:first_write])) == len(accumulators), source
  np.testing.assert_array_equal(out.numpy(), Tensor(x, device="CPU").conv2d(Tensor(w, device="CPU"), padding=1).numpy())


def test_comparisons_with_nan_are_ordered_less_and_unordered_not_equal():
  a = np.array([np.nan, 1, np.nan, 2, -np.inf, 0.0] * 8, np.float32)
  b = np.array([1, np.nan, np.nan, 2, np.inf, -0.0] * 8, np.float32)
  ta, tb = torch.from_numpy(a), torch.from_numpy(b)
  for mine, theirs in (((Tensor(a) < Tensor(b)), ta < tb), ((Tensor(a) != Tensor(b)), ta != tb), ((Tensor(a) == Tensor(b)), ta == tb),
                       ((Tensor(a) >= Tensor(b)), ta >= tb), ((Tensor(a) < Tensor(b)).where(Tensor(a), -5.0), torch.where(ta < tb, ta, -5.0))):
    assert_matches(mine, theirs)


def test_max_propagates_nan_from_either_side():
  a = np.array([np.nan, 1, -np.inf, np.nan, 3, -0.0] * 8, np.float32)
  b = np.array([1, np.nan, np.nan, np.nan, 2, 0.0] * 8, np.float32)
  assert_matches(Tensor(a).maximum(Tensor(b)), torch.maximum(torch.from_numpy(a), torch.from_numpy(b)))
  assert_matches(Tensor(a).relu(), torch.relu(torch.from_numpy(a)))
  rows = np.arange(64, dtype=np.float32).reshape(4, 16)
  rows[1, 5] = np.nan
  assert_matches(Tensor(rows).max(1), torch.from_numpy(rows).max(1).values)


# ---------------------------------------------------------------- casts and bitcasts

CAST_VALUES = [-200.0, -129.5, -3.7, -1.0, -0.0, 0.0, 0.4, 1.0, 2.9, 127.0, 200.6, 40000.0]


@pytest.mark.parametrize("source", ALL_DTYPES, ids=lambda d: d.name)
def test_casts_between_all_dtypes_match_torch(source: DType):
  base = torch.tensor(CAST_VALUES, dtype=torch.float64)
  if not dtypes.is_float(source):   # start from values the source dtype holds
    base = base.clamp(float(dtypes.min(source)), float(dtypes.max(source))).trunc()
  start = base.to(TORCH_DTYPES[source])
  t = Tensor(start.float().numpy() if source == dtypes.bfloat16 else start.numpy(), dtype=source)
  for target in ALL_DTYPES:
    expected = start.to(TORCH_DTYPES[target])
    if dtypes.is_float(source) and not dtypes.is_float(target) and target != dtypes.bool:
      # float -> int is only defined for values the int type holds (C, LLVM and torch differ outside)
      keep = (start.double().trunc() >= float(dtypes.min(target))) & (start.double().trunc() <= float(dtypes.max(target)))
      got = t.cast(target).numpy()[keep.numpy()]
      np.testing.assert_array_equal(got, expected[keep].to(torch.int64 if target != dtypes.uint64 else torch.uint64).numpy(), err_msg=f"{source} -> {target}")
      continue
    assert_matches(t.cast(target), expected, rtol=1e-3 if target in (dtypes.float16, dtypes.bfloat16) else 1e-7)


def test_bitcasts_reinterpret_the_bits():
  x = np.array([1.0, -2.5, np.inf, np.nan, 0.1, -0.0] * 4, np.float32)
  np.testing.assert_array_equal(Tensor(x).bitcast(dtypes.int32).numpy(), x.view(np.int32))
  np.testing.assert_array_equal(Tensor(x).bitcast(dtypes.uint32).numpy(), x.view(np.uint32))
  ints = np.array([0, 1, -1, 0x3F800000, 0x7F800000] * 4, np.int32)
  np.testing.assert_array_equal(Tensor(ints).bitcast(dtypes.float32).numpy().view(np.int32), ints)
  h = np.array([1.0, -2.0, 65504, 6e-8], np.float16)
  np.testing.assert_array_equal(Tensor(h).bitcast(dtypes.int16).numpy(), h.view(np.int16))
  bf = Tensor(np.array([1.0, -2.0, 3.5], np.float32), dtype=dtypes.bfloat16)
  np.testing.assert_array_equal(bf.bitcast(dtypes.uint16).numpy(), np.array([0x3F80, 0xC000, 0x4060], np.uint16))


def test_float16_and_bfloat16_compute_like_torch():
  x = np.random.default_rng(0).standard_normal(100).astype(np.float32) * 10
  for dtype in (dtypes.float16, dtypes.bfloat16):
    t, tt = Tensor(x).cast(dtype), torch.from_numpy(x).to(TORCH_DTYPES[dtype])
    assert_matches(t * 3 + 1, tt * 3 + 1, rtol=0, atol=0)   # one rounding per op, as torch
    assert_matches((t / 7).exp(), (tt / 7).exp(), rtol=1e-2)
    assert_matches(t.sum(), tt.sum(), rtol=1e-2, atol=0.5)
    assert_matches(t.max(), tt.max())


# ---------------------------------------------------------------- integer semantics

def test_integer_wraparound_at_every_width():
  for dtype, np_dtype in ((dtypes.int8, np.int8), (dtypes.uint8, np.uint8), (dtypes.int16, np.int16), (dtypes.int32, np.int32), (dtypes.int64, np.int64)):
    info = np.iinfo(np_dtype)
    x = np.array([info.max, info.min, info.max - 1, 0] * 4, np_dtype)
    with np.errstate(over="ignore"):
      np.testing.assert_array_equal((Tensor(x) + 1).numpy(), x + np_dtype(1), err_msg=str(dtype))
      np.testing.assert_array_equal((Tensor(x) * 3).numpy(), x * np_dtype(3), err_msg=str(dtype))
      np.testing.assert_array_equal((-Tensor(x)).numpy(), -x, err_msg=str(dtype))


@pytest.mark.parametrize("dtype", [dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.uint8], ids=lambda d: d.name)
def test_division_and_remainder_of_negatives(dtype: DType):
  """Against Python's exact integers, wrapped to the dtype (torch itself traps on INT_MIN // -1); x / 0 gives 0."""
  lo, hi = int(dtypes.min(dtype)), int(dtypes.max(dtype))
  pairs = [(7, 2), (-7, 2), (7, -2), (-7, -2), (0, 3), (1, 0), (lo, -1), (lo, 1), (hi, -1), (5, -3), (lo, 7), (-1, lo)]
  if dtype == dtypes.uint8: pairs = [(abs(a) % 256, abs(b) % 256) for a, b in pairs]
  a = Tensor(np.array([p[0] for p in pairs], to_numpy(dtype)))
  b = Tensor(np.array([p[1] for p in pairs], to_numpy(dtype)))

  def trunc_div(x: int, y: int) -> int: return abs(x) // abs(y) * (1 if (x < 0) == (y < 0) else -1)
  references = {"trunc": (a.div(b, rounding_mode="trunc"), trunc_div), "floor": (a // b, lambda x, y: x // y),
                "remainder": (a % b, lambda x, y: x % y), "fmod": (a.fmod(b), lambda x, y: x - trunc_div(x, y) * y)}
  for name, (mine, exact) in references.items():
    expected = [truncate(exact(x, y), dtype) if y != 0 else 0 for x, y in pairs]
    np.testing.assert_array_equal(mine.numpy(), np.array(expected, to_numpy(dtype)), err_msg=f"{name} {dtype}")


def test_shifts_are_arithmetic_or_logical_by_signedness():
  x = np.array([-128, -5, -1, 0, 1, 5, 127, 64], np.int8)
  s = np.array([0, 1, 2, 3, 7, 8, 1, 9], np.int8)
  assert_matches(Tensor(x) >> Tensor(s), torch.from_numpy(x) >> torch.from_numpy(s))
  assert_matches(Tensor(x) << Tensor(s), torch.from_numpy(x) << torch.from_numpy(s))
  u = x.view(np.uint8)
  np.testing.assert_array_equal((Tensor(u) >> Tensor(s.view(np.uint8))).numpy(), np.where(s < 8, u >> np.minimum(s, 7).astype(np.uint8), 0))
  big = np.array([-(2**31), 2**31 - 1, -3, 12345] * 4, np.int32)
  np.testing.assert_array_equal((Tensor(big) >> 3).numpy(), big >> 3)
  np.testing.assert_array_equal((Tensor(big) << 4).numpy(), big << 4)


# ---------------------------------------------------------------- reductions, matmul, masked loads, nn

def test_reductions_sum_max_prod():
  x = np.random.default_rng(1).standard_normal((33, 64)).astype(np.float32)
  tx = torch.from_numpy(x)
  assert_matches(Tensor(x).sum(1), tx.sum(1), rtol=1e-5, atol=1e-5)
  assert_matches(Tensor(x).sum(0), tx.sum(0), rtol=1e-5, atol=1e-5)
  assert_matches(Tensor(x).max(0), tx.max(0).values)
  assert_matches(Tensor(x).min(1), tx.min(1).values)
  assert_matches((Tensor(x) * 0.1 + 1).prod(1), (tx * 0.1 + 1).prod(1), rtol=1e-5)
  ints = np.arange(-50, 50, dtype=np.int32).reshape(10, 10)
  assert_matches(Tensor(ints).sum(0), torch.from_numpy(ints).sum(0))


def test_row_sums_use_vector_lanes():
  x = np.random.default_rng(2).standard_normal((256, 512)).astype(np.float32)
  t = Tensor(x).sum(1)
  src = kernel_source(t)
  assert "x float>" in src, src
  np.testing.assert_allclose(t.numpy(), x.sum(1, dtype=np.float64), rtol=1e-4, atol=1e-4)


def test_matmul_with_default_heuristics_is_a_vectorized_register_tile():
  rng = np.random.default_rng(3)
  a, b = rng.standard_normal((96, 128)).astype(np.float32), rng.standard_normal((128, 80)).astype(np.float32)
  t = Tensor(a) @ Tensor(b)
  src = kernel_source(t)
  assert src.count("alloca <") >= 2 and "fmul contract <" in src and "fadd contract <" in src, src   # vector accumulators, FMA allowed
  np.testing.assert_allclose(t.numpy(), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


def test_padded_op_reads_zeros_outside_without_touching_memory():
  x = np.arange(1, 13, dtype=np.float32).reshape(3, 4)
  t = Tensor(x).pad((2, 1, 1, 3)) * 2 + 1
  assert "select i1" in kernel_source(t) and "@zeros" in kernel_source(t)   # gated loads
  np.testing.assert_array_equal(t.numpy(), np.pad(x, ((1, 3), (2, 1))) * 2 + 1)
  shifted = Tensor(x)[:, 1:].pad((0, 1)) + Tensor(x)
  np.testing.assert_array_equal(shifted.numpy(), np.pad(x[:, 1:], ((0, 0), (0, 1))) + x)


def test_conv2d_matches_torch():
  rng = np.random.default_rng(4)
  x, w, b = rng.standard_normal((2, 3, 11, 9)).astype(np.float32), rng.standard_normal((8, 3, 3, 3)).astype(np.float32), rng.standard_normal(8).astype(np.float32)
  out = Tensor(x).conv2d(Tensor(w), Tensor(b), stride=(1, 2), padding=1)
  assert_matches(out, torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b), stride=(1, 2), padding=1), rtol=1e-4, atol=1e-4)


def test_softmax_matches_torch():
  x = np.random.default_rng(5).standard_normal((37, 100)).astype(np.float32) * 5
  x[3, :] = -np.inf
  x[3, 7] = 0
  assert_matches(Tensor(x).softmax(-1), torch.from_numpy(x).softmax(-1), rtol=1e-5, atol=1e-7)
  assert_matches(Tensor(x).log_softmax(0), torch.from_numpy(x).log_softmax(0), rtol=1e-5, atol=1e-5)


def test_mlp_training_step_matches_torch():
  rng = np.random.default_rng(6)
  x, y = rng.standard_normal((32, 20)).astype(np.float32), rng.integers(0, 5, 32)
  l1, l2 = nn.Linear(20, 16), nn.Linear(16, 5)
  t1, t2 = torch.nn.Linear(20, 16), torch.nn.Linear(16, 5)
  with torch.no_grad():
    for mine, theirs in ((l1, t1), (l2, t2)):
      theirs.weight.copy_(torch.from_numpy(mine.weight.numpy()))
      theirs.bias.copy_(torch.from_numpy(mine.bias.numpy()))
  params = [l1.weight, l1.bias, l2.weight, l2.bias]
  opt, topt = nn.optim.SGD(params, lr=0.1, momentum=0.9), torch.optim.SGD(list(t1.parameters()) + list(t2.parameters()), lr=0.1, momentum=0.9)
  with Tensor.train():
    for _ in range(2):
      opt.zero_grad()
      loss = l2(l1(Tensor(x)).relu()).sparse_categorical_crossentropy(Tensor(y.astype(np.int32)))
      loss.backward()
      opt.step()
      topt.zero_grad()
      tloss = torch.nn.functional.cross_entropy(t2(t1(torch.from_numpy(x)).relu()), torch.from_numpy(y))
      tloss.backward()
      topt.step()
      np.testing.assert_allclose(loss.item(), tloss.item(), rtol=1e-5)
  for mine, theirs in ((l1.weight, t1.weight), (l1.bias, t1.bias), (l2.weight, t2.weight), (l2.bias, t2.bias)):
    assert mine.device == "LLVM"
    np.testing.assert_allclose(mine.numpy(), theirs.detach().numpy(), rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------- runtime: threads, gated stores, errors

def test_big_kernel_splits_its_outer_loop_over_threads(monkeypatch):
  monkeypatch.setattr(ops_cpu, "cpu_threads", lambda: 3)   # 12 parts that don't divide the loop evenly
  lists: list[list] = []
  real_list = ops_cpu.LaunchList
  monkeypatch.setattr(ops_cpu, "LaunchList", lambda launches: lists.append(launches) or real_list(launches))
  x = np.random.default_rng(7).standard_normal((1000, 131)).astype(np.float32)   # 131000 > PARALLEL_MIN_WORK iterations
  t = (Tensor(x) * 2).exp() + Tensor(x).T.sum(0).reshape(1000, 1)
  np.testing.assert_allclose(t.numpy(), np.exp(x * 2) + x.sum(1, keepdims=True), rtol=1e-5, atol=1e-5)
  assert 3 * ops_cpu.PARTS_PER_THREAD in [parts for launches in lists for _, _, _, parts in launches]


def _program(name: str, uops: list[UOp]):
  dev = Device["LLVM"]
  return dev.program(name, dev.compiler.compile(dev.renderer.render(name, uops)))


def test_gated_store_writes_only_where_the_gate_holds():
  """out[i] = i * 1.5 for even i only: hand-built uops, since CPU kernels rarely gate a store."""
  index = dtypes.int32
  out = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(), (), 0)
  i = UOp(Ops.RANGE, index, (UOp.const(index, 0), UOp.const(index, 10)), (0, "global"))
  even = (i % 2).ne(1)
  value = i.cast(dtypes.float32) * 1.5
  store = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, out.dtype, (out, i, even)), value))
  uops = [out, i.src[0], i.src[1], i, UOp.const(index, 2), i % 2, UOp.const(index, 1), even, i.cast(dtypes.float32),
          UOp.const(dtypes.float32, 1.5), value, store.src[0], store, UOp(Ops.ENDRANGE, dtypes.void, (i,))]
  buf = Buffer("LLVM", 10, dtypes.float32).copyin(np.full(10, -1, np.float32))
  _program("gated_store", uops)(buf.opaque)
  np.testing.assert_array_equal(buf.numpy(), np.where(np.arange(10) % 2 == 0, np.arange(10) * 1.5, -1))


def test_vector_gates_load_and_store_lane_by_lane():
  """A per-lane gate is a masked load (off lanes read nothing, give 0) or a masked store (off lanes keep memory)."""
  out, src = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(), (), 0), UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(), (), 1)
  zero = UOp.const(dtypes.int32, 0)
  load_mask, store_mask = UOp.const(dtypes.bool.vec(4), (True, False, True, True)), UOp.const(dtypes.bool.vec(4), (True, True, False, True))
  load = UOp(Ops.LOAD, dtypes.float32.vec(4), (UOp(Ops.INDEX, src.dtype, (src, zero, load_mask)),))
  store = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, out.dtype, (out, zero, store_mask)), load))
  uops = [out, src, zero, load_mask, load.src[0], load, store_mask, store.src[0], store]
  source = Device["LLVM"].renderer.render("masked", uops)
  assert "@llvm.masked.load.v4f32.p0" in source and "@llvm.masked.store.v4f32.p0" in source, source
  dst, inp = Buffer("LLVM", 4, dtypes.float32).copyin(np.full(4, -1, np.float32)), Buffer("LLVM", 4, dtypes.float32).copyin(np.array([1, 2, 3, 4], np.float32))
  _program("masked", uops)(dst.opaque, inp.opaque)
  np.testing.assert_array_equal(dst.numpy(), [1, 0, -1, 4])


def test_wrong_argument_count_is_an_error_not_a_crash():
  t = Tensor(np.ones(8, np.float32)) + 1
  kernel = get_kernel(t.schedule()[-1].ast, "LLVM")
  buf = Buffer("LLVM", 8, dtypes.float32).allocate()
  kernel.program(buf.opaque, buf.opaque, vals=(0, 1))
  with pytest.raises(TypeError, match="takes 2 buffers"): kernel.program(buf.opaque, vals=(0, 1))


def test_compile_errors_show_llvm_message_and_source():
  compiler = Device["LLVM"].compiler
  with pytest.raises(CompileError) as err:
    compiler.compile("define void @broken(ptr %data0) {\nentry:\n  %v1 = fadd float %nope, 1.0\n  ret void\n}\n")
  message = str(err.value)
  assert "LLVM rejected the kernel IR" in message and "%nope" in message and "3 |   %v1 = fadd" in message
  with pytest.raises(CompileError, match="type"):   # parses, but the verifier / type checker rejects it
    compiler.compile("define void @f(ptr %p) {\nentry:\n  store i32 1.5, ptr %p\n  ret void\n}\n")


def test_cache_key_names_llvm_target_and_cpu():
  compiler = Device["LLVM"].compiler
  import llvmlite.binding as llvm
  assert f"LLVM {llvm.llvm_version_info[0]}" in compiler.cache_key and "O2" in compiler.cache_key
  cpu = llvm.get_host_cpu_name() if compiler.target.march == "native" else compiler.target.march   # CPU_TARGET
  assert f"cpu={cpu} " in compiler.cache_key and compiler.target_machine.triple in compiler.cache_key


def test_renderer_declines_what_it_cannot_spell():
  from minigrad.codegen.llvm_renderer import LLVMRenderer
  special = UOp(Ops.SPECIAL, dtypes.int32, (), ("gidx0", 4))
  with pytest.raises(NotImplementedError, match="SPECIAL"): LLVMRenderer().render("k", [special])


def _run(script: str, env: dict[str, str], tmp_path) -> subprocess.CompletedProcess:
  env = {**os.environ, "MINIGRAD_CACHE": str(tmp_path), **env}
  return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)


def test_debug4_prints_the_llvm_ir(tmp_path):
  script = "import numpy as np\nfrom minigrad import Tensor\nprint('RESULT', (Tensor(np.arange(12, dtype=np.float32).reshape(3, 4)).exp2() + 1).sum(1).numpy())"
  out = _run(script, {"DEBUG": "4", "DEV": "LLVM"}, tmp_path)
  assert out.returncode == 0, out.stderr
  assert "define void @r_3_4(ptr noalias %data0, ptr noalias readonly %data1" in out.stdout, out.stdout
  assert "phi i32" in out.stdout and "*** LLVM" in out.stdout
  assert "RESULT [  19.  244. 3844.]" in out.stdout
  assert _run(script, {"LLVM": "1"}, tmp_path).stdout == "RESULT [  19.  244. 3844.]\n"


def test_missing_llvmlite_names_the_install_command(tmp_path):
  script = ("import sys\nsys.modules['llvmlite'] = None\nfrom minigrad.runtime.device import Device\n"
            "try: Device['LLVM']\nexcept RuntimeError as e: print('ERROR', e)")
  out = _run(script, {}, tmp_path)
  assert "ERROR the LLVM backend needs llvmlite" in out.stdout and "pip install -e .[llvm]" in out.stdout, out.stdout + out.stderr


def test_dtypes_map_to_llvm_types():
  from minigrad.codegen.llvm_renderer import llvm_type, memory_type
  expected = {dtypes.bool: "i1", dtypes.uint8: "i8", dtypes.int16: "i16", dtypes.uint32: "i32", dtypes.int64: "i64",
              dtypes.float16: "half", dtypes.bfloat16: "i16", dtypes.float32: "float", dtypes.float64: "double"}
  for dt, name in expected.items(): assert llvm_type(dt) == name, dt
  assert llvm_type(dtypes.float32.vec(16)) == "<16 x float>" and llvm_type(dtypes.bool.vec(8)) == "<8 x i1>"
  assert memory_type(dtypes.bool) == "i8" and memory_type(dtypes.bool.vec(4)) == "<4 x i8>"   # numpy's bool bytes
  assert llvm_type(dtypes.float32.ptr()) == "ptr"
  assert all(llvm_type(dt) for dt in ALL_DTYPES)


def test_llvm_without_a_c_compiler_says_it_links_with_one(monkeypatch, tmp_path):
  from minigrad.runtime.ops_llvm import LLVMCompiler
  monkeypatch.delenv("CC", raising=False)
  monkeypatch.setenv("PATH", str(tmp_path))
  with pytest.raises(RuntimeError, match="no working C compiler to link LLVM kernels.*apt-get install"): LLVMCompiler()
