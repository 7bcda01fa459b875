"""The dtype system vs torch: every dtype end to end (numpy in, compute, numpy out), casts between every pair,
bitcasts, bfloat16 rounding, dtype names, settable defaults, and type promotion for tensor op tensor, tensor
op 0-d tensor and tensor op Python number, including the promotions torch refuses (uint16/32/64).
Also the dtype lowering rules (float16/bfloat16 compute in float32) and a renderer bug they route around.
"""
from __future__ import annotations
import itertools
import math
import numpy as np
import pytest
import torch
from minigrad import Tensor, dtypes
from minigrad.dtype import DTypeError, ALL_DTYPES, to_dtype, promote_types, result_type

NAMES = ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "float16", "bfloat16", "float32", "float64"]
TORCH = {n: getattr(torch, n) for n in NAMES}
MG = {n: to_dtype(n) for n in NAMES}
NUMPY = {n: (np.float32 if n == "bfloat16" else np.bool_ if n == "bool" else np.dtype(n).type) for n in NAMES}


def torch_name(dt: torch.dtype) -> str: return str(dt).removeprefix("torch.")


def sample(name: str) -> list:
  """Values every dtype can hold exactly, plus each dtype's own extremes."""
  if name == "bool": return [True, False, True, True]
  if name in ("float16", "bfloat16", "float32", "float64"): return [0.0, -0.0, 1.5, -2.5, 100.0, 0.3, -7.75, 1e4]
  info = np.iinfo(name)
  return [0, 1, 2, 100, info.max, info.min, info.max - 1, 7] if info.min < 0 else [0, 1, 2, 100, info.max, info.max - 1, 7, 3]


def torch_tensor(values: list, name: str) -> torch.Tensor:
  if name.startswith("uint") and name != "uint8": return torch.from_numpy(np.array(values, dtype=name))
  return torch.tensor(values, dtype=TORCH[name])


def as_float64(t: torch.Tensor) -> np.ndarray:
  return t.numpy().astype(np.float64) if t.dtype in (torch.uint16, torch.uint32, torch.uint64) else t.double().numpy()


# ---------------------------------------------------------------- end to end

@pytest.mark.parametrize("name", NAMES)
def test_numpy_and_list_round_trip(name):
  values = sample(name)
  t = Tensor(values, dtype=name)
  assert t.dtype == MG[name] and t.shape == (len(values),)
  out = t.numpy()
  assert out.dtype == NUMPY[name]
  expected = torch_tensor(values, name).float().numpy() if name == "bfloat16" else np.array(values, dtype=NUMPY[name])   # bf16 rounds
  np.testing.assert_array_equal(out, expected)
  if name != "bfloat16":
    arr = np.array(values, dtype=NUMPY[name]).reshape(2, -1)
    back = Tensor(arr)
    assert back.dtype == MG[name] and back.numpy().dtype == arr.dtype
    np.testing.assert_array_equal(back.numpy(), arr)
    np.testing.assert_array_equal(Tensor(arr.T).numpy(), arr.T)   # non-contiguous numpy input
    assert Tensor(arr[0, 0]).shape == () and Tensor(arr[0, 0]).dtype == MG[name]   # numpy scalar -> 0-d
  assert t.tolist() == expected.tolist()


@pytest.mark.parametrize("name", NAMES)
def test_compute_end_to_end_matches_torch(name):
  """One fused kernel per dtype: arithmetic, comparison, where, max; a sum; a cast to float64."""
  values = sample(name)
  t, p = Tensor(values, dtype=name), torch_tensor(values, name)
  if name == "bool": got, expected = (t | ~t[:1]) & t.maximum(t[:1]), (p | ~p[:1]) & torch.maximum(p, p[:1])
  elif name in ("uint16", "uint32", "uint64"):   # torch implements no arithmetic on these: numpy is the reference
    a = np.array(values, dtype=name)
    got, expected = (t * 3 + t).maximum(t[1:2] * 5) - 1, torch.from_numpy(np.maximum(a * np.array(3, name) + a, a[1:2] * np.array(5, name)) - np.array(1, name))
  else: got, expected = (t * 3 + t).maximum(t[1:2] * 2) - 1, (p * 3 + p).maximum(p[1:2] * 2) - 1
  assert torch_name(expected.dtype) == got.dtype.name or to_dtype(torch_name(expected.dtype)) == got.dtype
  np.testing.assert_array_equal(got.numpy().astype(np.float64), as_float64(expected))
  lt = t < t[2:3]
  np.testing.assert_array_equal(lt.numpy(), np.array(values, dtype=NUMPY[name]) < np.array(values, dtype=NUMPY[name])[2])
  np.testing.assert_array_equal(lt.where(t, t[0:1]).numpy().astype(np.float64), np.where(lt.numpy(), t.numpy(), t.numpy()[0]).astype(np.float64))
  if name not in ("uint16", "uint32", "uint64"):
    total = t.sum()
    assert total.dtype == to_dtype(torch_name(p.sum().dtype))
    np.testing.assert_allclose(float(total.item()), float(p.sum().item()), rtol=1e-3 if name in ("float16", "bfloat16") else 1e-12)
  np.testing.assert_array_equal(t.cast("float64").numpy(), as_float64(p.to(torch.float64)))


# ---------------------------------------------------------------- casts

def _cast_values(src: str, dst: str) -> list:
  """Values whose conversion src -> dst is defined in C and torch (no negative floats to unsigned, no float
  beyond the target's range)."""
  if src == "bool": return [True, False]
  if src in ("float16", "bfloat16", "float32", "float64"):
    values = [0.0, 1.0, 2.5, 0.3, 100.7, 7.0, -0.0]
    if dst not in ("uint8", "uint16", "uint32", "uint64"): values += [-1.0, -2.5, -100.7]
    if dst in ("float16", "bfloat16", "float32", "float64"): values += [math.inf, -math.inf, 1e4, 3.140625]
    return values
  return sample(src)


@pytest.mark.parametrize("src", NAMES)
def test_cast_to_every_dtype_matches_torch(src):
  """src -> every dst, checked in one kernel (each cast widened to float64, which holds every value used
  exactly except the 64-bit extremes, and those round the same way on both sides)."""
  got, expected = [], []
  for dst in NAMES:
    values = (_cast_values(src, dst) * 2)[:10]
    p = torch_tensor(values, src)
    t = Tensor(p.float().numpy() if src == "bfloat16" else p.numpy(), dtype=src)
    assert t.cast(dst).dtype == MG[dst]
    got.append(t.cast(dst).cast("float64"))
    expected.append(as_float64(p.to(TORCH[dst])))
  result = Tensor.stack(*got).numpy()
  for dst, row, want in zip(NAMES, result, expected): np.testing.assert_array_equal(row, want, err_msg=f"{src} -> {dst}")


def test_cast_nan_to_float_types_and_bool():
  t = Tensor([math.nan, 1.0])
  for dst in ("float16", "bfloat16", "float64"): assert math.isnan(t.cast(dst).numpy()[0])
  np.testing.assert_array_equal(t.cast("bool").numpy(), [True, True])   # NaN is truthy, as in torch


def test_cast_accepts_names_numpy_and_torch_dtypes():
  t = Tensor([1.5, -2.0])
  for spec, expected in [("float16", dtypes.float16), ("half", dtypes.float16), ("bfloat16", dtypes.bfloat16), (np.int32, dtypes.int32),
                         (np.dtype("float64"), dtypes.float64), (torch.int8, dtypes.int8), (dtypes.uint8, dtypes.uint8), ("bool", dtypes.bool)]:
    assert t.cast(spec).dtype == expected
  assert t.half().dtype == dtypes.float16 and t.double().dtype == dtypes.float64 and t.long().dtype == dtypes.int64
  assert t.bfloat16().dtype == dtypes.bfloat16 and t.byte().dtype == dtypes.uint8 and t.char().dtype == dtypes.int8


@pytest.mark.parametrize("bad", ["floaty", "float128", "complex64", 3, None, object()])
def test_unknown_dtype_raises_type_error_naming_it(bad):
  with pytest.raises(TypeError, match=repr(bad) if isinstance(bad, str) else None):
    Tensor([1.0]).cast(bad)
  if isinstance(bad, str):
    with pytest.raises(TypeError, match="float32"):   # the message lists the known names
      Tensor([1.0], dtype=bad)


def test_bfloat16_rounds_to_nearest_even_like_torch():
  rng = np.random.default_rng(0)
  special = np.array([1.00390625, 1.01171875, -1.00390625, 3.3895314e38, 3.4e38, -3.4e38, 1e-40, -1e-40, 0.0, -0.0, math.inf, -math.inf,
                      1.0 + 2 ** -8 + 2 ** -20, 65504.0, 1e-30], np.float32)
  x = np.concatenate([special, rng.standard_normal(2000).astype(np.float32) * 1e3])
  expected_bits = torch.from_numpy(x).to(torch.bfloat16).view(torch.int16).numpy()
  from_float32 = Tensor(x).cast("bfloat16")                     # rounded inside a kernel
  np.testing.assert_array_equal(from_float32.bitcast("int16").numpy(), expected_bits)
  np.testing.assert_array_equal(Tensor(x, dtype="bfloat16").bitcast("int16").numpy(), expected_bits)   # rounded on copy-in
  from_float64 = Tensor(x.astype(np.float64)).cast("bfloat16")
  np.testing.assert_array_equal(from_float64.bitcast("int16").numpy(), torch.from_numpy(x.astype(np.float64)).to(torch.bfloat16).view(torch.int16).numpy())
  np.testing.assert_array_equal(Tensor.full((3,), 1.7, dtype="bfloat16").numpy(), torch.full((3,), 1.7, dtype=torch.bfloat16).float().numpy())


def test_float16_casts_round_like_torch():
  x = np.concatenate([np.array([65504.0, 65520.0, 1e-8, 6e-8, 2049.0, 1 + 2 ** -11, 1 + 3 * 2 ** -11], np.float64),
                      np.random.default_rng(1).standard_normal(500) * 100])
  for src in ("float32", "float64"):
    got = Tensor(x.astype(src)).cast("float16").bitcast("int16").numpy()
    np.testing.assert_array_equal(got, torch.from_numpy(x.astype(src)).to(torch.float16).view(torch.int16).numpy(), err_msg=src)


# ---------------------------------------------------------------- bitcast

BITCAST_PAIRS = [("float32", "int32"), ("float32", "uint32"), ("int32", "float32"), ("float16", "int16"), ("bfloat16", "int16"),
                 ("float16", "bfloat16"), ("bfloat16", "float16"), ("float64", "int64"), ("int64", "float64"), ("uint8", "int8"),
                 ("int16", "bfloat16"), ("uint32", "float32")]


@pytest.mark.parametrize("src, dst", BITCAST_PAIRS)
def test_bitcast_matches_torch_view(src, dst):
  values = [1.0, -2.5, 0.1, 65504.0, -0.0, 3.0e-5] if src.startswith(("float", "bfloat")) else sample(src)[:6]
  p = torch_tensor(values, src)
  t = Tensor(p.float().numpy() if src == "bfloat16" else p.numpy(), dtype=src)
  got, expected = t.bitcast(dst), p.view(TORCH[dst])
  assert got.dtype == MG[dst]
  np.testing.assert_array_equal(got.numpy().astype(np.float64), as_float64(expected))
  np.testing.assert_array_equal(t.bitcast(dst).bitcast(src).numpy(), t.numpy())   # a round trip is the identity


def test_bitcast_of_computed_and_strided_values():
  x = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
  got = (x.T[1:] * 2).bitcast("int32")
  np.testing.assert_array_equal(got.numpy(), (torch.arange(12, dtype=torch.float32).reshape(3, 4).T[1:] * 2).contiguous().view(torch.int32).numpy())
  assert Tensor.full((2,), 1.0).bitcast(dtypes.int32).tolist() == [1065353216, 1065353216]


@pytest.mark.parametrize("src, dst", [("float32", "float16"), ("int8", "int32"), ("float64", "float32"), ("bool", "int16")])
def test_bitcast_size_mismatch_raises_naming_both_dtypes(src, dst):
  t = Tensor([1, 0], dtype=src)
  with pytest.raises(RuntimeError, match=f"{MG[src].name}.*{MG[dst].name}") as info:
    t.bitcast(dst)
  assert isinstance(info.value, TypeError) and "itemsize" in str(info.value)


# ---------------------------------------------------------------- defaults

def test_default_float_and_int_are_settable():
  old_float, old_int = dtypes.default_float, dtypes.default_int
  try:
    dtypes.default_float, dtypes.default_int = dtypes.float64, dtypes.int64
    assert Tensor([1.5]).dtype == dtypes.float64 and Tensor([1, 2]).dtype == dtypes.int64
    assert (Tensor([1, 2], dtype="int32") / 2).dtype == dtypes.float64
    assert (Tensor([1, 2], dtype="int32") * 0.5).dtype == dtypes.float64
    assert Tensor([1, 2]).exp().dtype == dtypes.float64
    assert Tensor.rand(3).dtype == dtypes.float64 and Tensor.zeros(2).dtype == dtypes.float64
    assert Tensor.arange(3).dtype == dtypes.int64
    np.testing.assert_allclose(Tensor([1, 2]).sqrt().numpy(), np.sqrt([1.0, 2.0]), rtol=1e-15)
  finally: dtypes.default_float, dtypes.default_int = old_float, old_int
  assert Tensor([1.5]).dtype == dtypes.float32 and Tensor([1]).dtype == dtypes.int32


# ---------------------------------------------------------------- promotion

def _torch_promotion(a: str, b: str) -> str | type[Exception]:
  try: return torch_name(torch.promote_types(TORCH[a], TORCH[b]))
  except RuntimeError: return RuntimeError


@pytest.mark.parametrize("a", NAMES)
def test_promote_types_matrix_matches_torch(a):
  for b in NAMES:
    expected = _torch_promotion(a, b)
    if expected is RuntimeError:
      with pytest.raises(RuntimeError, match="uint16, uint32, uint64"): promote_types(MG[a], MG[b])
      with pytest.raises(TypeError): Tensor([1], dtype=a) + Tensor([1], dtype=b)   # also a TypeError for Python code
      with pytest.raises(RuntimeError, match=f"{MG[a].name} and {MG[b].name}"): Tensor([1], dtype=a) * Tensor([1], dtype=b)
    else:
      assert promote_types(MG[a], MG[b]) == MG[expected], (a, b)
      x, y = Tensor([1, 0], dtype=a), Tensor([1, 1], dtype=b)
      for op in (lambda u, v: u + v, lambda u, v: u * v, lambda u, v: u.maximum(v)):
        assert op(x, y).dtype == MG[expected], (a, b)
      assert (x / y).dtype == (MG[expected] if dtypes.is_float(MG[expected]) else dtypes.float32)
      assert (x < y).dtype == dtypes.bool and (x == y).dtype == dtypes.bool


PROMOTION_VALUE_PAIRS = [("int8", "uint8"), ("bool", "int16"), ("uint8", "float16"), ("int64", "bfloat16"), ("float16", "bfloat16"),
                         ("int32", "float64"), ("bool", "bool"), ("int16", "int32"), ("float32", "float64"), ("uint8", "bool"),
                         ("bfloat16", "float32"), ("int8", "float16"), ("uint16", "float32"), ("uint64", "float64")]


@pytest.mark.parametrize("a, b", PROMOTION_VALUE_PAIRS)
def test_promoted_values_match_torch(a, b):
  va, vb = (sample(a) * 2)[:4], (sample(b) * 2)[1:5]
  pa, pb = torch_tensor(va, a).reshape(4, 1), torch_tensor(vb, b).reshape(1, 4)
  ta = Tensor(pa.float().numpy() if a == "bfloat16" else pa.numpy(), dtype=a)
  tb = Tensor(pb.float().numpy() if b == "bfloat16" else pb.numpy(), dtype=b)
  cases = [(ta * tb, pa * pb), (ta < tb, pa < pb), (ta == tb, pa == pb)]
  if a != "bool" or b != "bool": cases += [(ta + tb, pa + pb)]
  if not (a.startswith("uint") and a != "uint8") and not (b.startswith("uint") and b != "uint8") or "float" in a + b:
    cases += [(ta / (tb + 7), pa / (pb + 7))]
  for got, expected in cases:
    assert got.dtype == to_dtype(torch_name(expected.dtype))
    np.testing.assert_allclose(got.numpy().astype(np.float64), as_float64(expected), rtol=1e-6 if "16" not in got.dtype.name and "half" not in got.dtype.name else 0)


@pytest.mark.parametrize("a", NAMES)
def test_zero_dim_tensors_promote_like_torch(a):
  """A 0-d tensor only decides the dtype when it is of a higher category (bool < int < float) than the others."""
  for b in NAMES:
    x, z = Tensor([1, 1], dtype=a), Tensor(1, dtype=b)
    try: expected = torch_name(torch.result_type(torch.ones(2, dtype=TORCH[a]), torch.ones((), dtype=TORCH[b])))
    except RuntimeError:
      with pytest.raises(RuntimeError): x + z
      continue
    assert (x + z).dtype == MG[expected], (a, b)
    assert (z * x).dtype == MG[expected], (b, a)
    if (both := _torch_promotion(a, b)) is RuntimeError:
      with pytest.raises(DTypeError): result_type((MG[b], 0), (MG[a], 0))
    else: assert result_type((MG[b], 0), (MG[a], 0)) == MG[both], (a, b)


SCALARS = [True, False, 2, -3, 2.5, -0.5, 300]


@pytest.mark.parametrize("a", NAMES)
def test_python_scalars_promote_like_torch(a):
  t = Tensor(sample(a)[:4], dtype=a)
  for s in SCALARS:
    expected = torch_name(torch.result_type(torch.ones(2, dtype=TORCH[a]), s))
    for got in (t + s, s * t, t.maximum(s), t.where(t, s) if a != "bool" else t | s if isinstance(s, (bool, int)) else t + s):
      if a == "bool" and not isinstance(s, bool) and got.dtype == dtypes.bool: continue
      assert got.dtype == MG[expected], (a, s, got.dtype)
    assert (t < s).dtype == dtypes.bool


@pytest.mark.parametrize("a", ["bool", "int8", "uint8", "int32", "int64", "float16", "bfloat16", "float32", "float64"])
def test_python_scalar_values_match_torch(a):
  values = sample(a)[:4]
  t, p = Tensor(values, dtype=a), torch_tensor(values, a)
  t = Tensor(p.float().numpy() if a == "bfloat16" else p.numpy(), dtype=a)
  for s in (-2.5, 300) if a != "bool" else (True, 300):
    cases = [(t * s, p * s), (s + t, s + p) if a == "bool" or isinstance(s, bool) else (s - t, s - p), (t < s, p < s), (t / s, p / s),
             (t.maximum(s), torch.maximum(p, torch.tensor(s).to(torch.result_type(p, s))))]
    for got, expected in cases:
      assert got.dtype == to_dtype(torch_name(expected.dtype)), (a, s)
      np.testing.assert_allclose(got.numpy().astype(np.float64), as_float64(expected), rtol=1e-6)


def test_result_type_and_promote_types_helpers():
  assert result_type((dtypes.int32, 1), 2.5) == dtypes.float32
  assert result_type((dtypes.float16, 1), (dtypes.float64, 0)) == dtypes.float16
  assert result_type((dtypes.int8, 1), (dtypes.int64, 0)) == dtypes.int8
  assert result_type((dtypes.bool, 1), (dtypes.uint8, 0)) == dtypes.uint8
  assert result_type((dtypes.bool, 1), 7) == dtypes.int64
  assert result_type(2, 3.5) == dtypes.float32 and result_type((dtypes.uint8, 0), (dtypes.int8, 0)) == dtypes.int16
  assert promote_types(dtypes.float16, dtypes.bfloat16) == dtypes.float32
  for a, b in itertools.product(ALL_DTYPES, repeat=2):   # symmetric, in its results and in what it refuses
    try: ab = promote_types(a, b)
    except DTypeError:
      with pytest.raises(DTypeError): promote_types(b, a)
      continue
    assert promote_types(b, a) == ab


# ---------------------------------------------------------------- code generation

def _lowered_uops(t: Tensor) -> list:
  from minigrad.codegen.kernel import Kernel
  from minigrad.codegen.lowerer import lower
  from minigrad.codegen.linearizer import linearize
  (item,) = t.schedule()
  return linearize(lower(Kernel(item.ast)))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_types_compute_in_float32_in_generated_code(dtype):
  from minigrad.uop.ops import Ops, GroupOp
  a, b = Tensor([1.5, 2.0], dtype=dtype), Tensor([0.25, 3.0], dtype=dtype)
  uops = _lowered_uops(((a * b + a).maximum(b) < a).where(a.exp(), b))
  arithmetic = [u for u in uops if u.op in GroupOp.ALU and u.op is not Ops.WHERE]
  assert arithmetic and all(u.dtype not in (dtypes.float16, dtypes.bfloat16) for u in arithmetic)
  assert all(s.dtype not in (dtypes.float16, dtypes.bfloat16) for u in arithmetic if u.op in GroupOp.Comparison for s in u.src)
  if dtype == "bfloat16":   # bfloat16 exists only as 16-bit words: loads, stores, selections and bitcasts
    assert all(u.op in (Ops.LOAD, Ops.WHERE, Ops.BITCAST, Ops.CONST, Ops.DEFINE_GLOBAL, Ops.INDEX) for u in uops if u.dtype.scalar() == dtypes.bfloat16)
    assert not any(u.op is Ops.CAST and dtypes.bfloat16 in (u.dtype, u.src[0].dtype) for u in uops)


def test_bfloat16_reduce_accumulates_in_float32():
  x = np.full(4096, 1.0, np.float32)
  assert Tensor(x, dtype="bfloat16").sum().item() == 4096.0      # a bfloat16 accumulator would stop at 256
  assert Tensor(x, dtype="bfloat16").max().item() == 1.0
  assert Tensor(x, dtype="float16").sum().item() == 4096.0


def test_renderer_int32_chain():
  """An int32 value used twice must get a variable: inlining it would double the source text per squaring
  (24 squarings once rendered ~100 MB of C)."""
  x = Tensor(np.array([3], np.int32)) + 1
  for _ in range(14): x = x * x
  from minigrad.runtime.device import Device
  source = Device["CPU"].renderer.render("k", _lowered_uops(x))
  assert len(source) < 20_000, f"int32 chain of 14 squarings renders {len(source)} characters"


@pytest.mark.parametrize("name", ["bfloat16", "float16", "int8", "uint64", "bool"])
def test_dtypes_on_edge_shapes(name):
  """0-d, 0-size, size-1 broadcast and non-contiguous (transposed, sliced, expanded) inputs of each kind; the
  values are small integers, so a float64 numpy computation is the exact reference."""
  base = np.arange(12).reshape(3, 4) % 5
  if name == "bool": base = base % 2 == 0
  t = Tensor(base.astype(np.float32 if name == "bfloat16" else NUMPY[name]), dtype=name)
  views = [lambda x: x.T, lambda x: x[1:, ::-2], lambda x: x[:1].expand(3, 4) if isinstance(x, Tensor) else np.broadcast_to(x[:1], (3, 4)),
           lambda x: x[0, 0], lambda x: x[:0]]
  for view in views:
    tv, nv = view(t), np.asarray(view(base))
    first_t, first_n = (tv[..., :1], nv[..., :1]) if tv.ndim else (tv, nv)
    if name == "bool": got, expected = tv ^ first_t, nv ^ first_n
    elif name == "uint64": got, expected = tv.maximum(first_t * 3), np.maximum(nv, first_n * 3)
    else: got, expected = tv * 2 + first_t, nv * 2 + first_n
    assert got.shape == expected.shape and got.dtype == MG[name]
    np.testing.assert_array_equal(got.numpy().astype(np.float64), expected.astype(np.float64))
    np.testing.assert_array_equal(tv.cast("float32").numpy(), nv.astype(np.float32))
