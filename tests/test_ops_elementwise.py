"""Elementwise ops vs torch: forward values (with NaN, inf, -0, tiny and huge inputs) for float32, float64,
float16 and bfloat16, backward for the differentiable ones (including the corner points where torch picks a
one-sided derivative), integer semantics (wrapping, floor division, shifts), bad inputs and edge shapes.

Each distinct kernel costs a C compile, so inputs are packed: one array holds the special values and a spread
of ordinary ones, and one kernel checks them all.
"""
from __future__ import annotations
import math
import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from minigrad import Tensor, dtypes
from torch_compare import fuses_multiply_add

FLOATS = ["float32", "float64", "float16", "bfloat16"]
TORCH_DTYPE = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16, "bfloat16": torch.bfloat16,
               "int8": torch.int8, "uint8": torch.uint8, "int16": torch.int16, "int32": torch.int32, "int64": torch.int64, "bool": torch.bool}
SPECIAL = [0.0, -0.0, 1e-30, -1e-8, 1e-4, 0.5, -0.5, 1.5, -2.5, 3.0, -3.0, 6.0, 20.0, -20.0, 88.5, -103.0, 700.0, -740.0,
           math.inf, -math.inf, math.nan]


def _inputs(domain: str | None = None, n: int = 300, seed: int = 0) -> np.ndarray:
  rng = np.random.default_rng(seed)
  x = np.concatenate([np.array(SPECIAL), rng.standard_normal(n) * 3, rng.uniform(-30, 30, n // 3)])
  if domain == "positive": x = np.abs(x)
  if domain == "unit": x = np.clip(x / 30, -1, 1)
  return x


def to_torch(x: np.ndarray, dtype: str) -> torch.Tensor: return torch.tensor(x).to(TORCH_DTYPE[dtype])


def to_minigrad(p: torch.Tensor, dtype: str, requires_grad: bool | None = None) -> Tensor:
  """The same values torch holds (bfloat16 passes through float32 exactly)."""
  return Tensor(p.detach().float().numpy() if dtype == "bfloat16" else p.detach().numpy(), dtype=dtype, requires_grad=requires_grad)


def ulp(values: np.ndarray, dtype: str) -> np.ndarray:
  """The spacing of dtype's floats at each value (at least the smallest normal's)."""
  mantissa, tiny = {"float32": (24, 2.0 ** -126), "float64": (53, 2.0 ** -1022), "float16": (11, 2.0 ** -14), "bfloat16": (8, 2.0 ** -126)}[dtype]
  magnitude = np.maximum(np.abs(np.nan_to_num(values, posinf=0, neginf=0)), tiny)
  return 2.0 ** (np.floor(np.log2(magnitude)) - (mantissa - 1))


def assert_matches(got: np.ndarray, expected: np.ndarray, dtype: str, max_ulp: float = 2, atol: float = 0.0, what: str = "") -> None:
  """Same NaN positions, same infinities, finite values within max_ulp ulps (or atol)."""
  got, expected = np.asarray(got, np.float64), np.asarray(expected, np.float64)
  assert got.shape == expected.shape, f"{what}: shape {got.shape} != {expected.shape}"
  same = (got == expected) | (np.isnan(got) & np.isnan(expected))
  smallest_normal = {"float32": 2.0 ** -126, "float64": 2.0 ** -1022, "float16": 2.0 ** -14, "bfloat16": 2.0 ** -126}[dtype]
  with np.errstate(invalid="ignore"):   # subnormal results: torch sometimes flushes them to zero
    close = np.abs(got - expected) <= max_ulp * ulp(expected, dtype) + max(atol, smallest_normal)
  bad = ~(same | (close & np.isfinite(got) & np.isfinite(expected)))
  assert not bad.any(), f"{what}: {bad.sum()} mismatches, e.g. got {got[bad][:4]} expected {expected[bad][:4]} at {np.nonzero(bad)[0][:4]}"


# ---------------------------------------------------------------- forward, every float dtype

# name: (minigrad, torch, input domain, max ulp (float32/64), absolute slack where torch itself cancels). A composite
# of libm calls (tan = sin/cos, softplus = log1p(exp)) gets 3 ulp: each call is within 1 ulp in glibc and in OpenCL's
# builtins, but not at the same inputs
UNARY = {
  "exp": (Tensor.exp, torch.exp, None, 1, 0), "exp2": (Tensor.exp2, torch.exp2, None, 1, 0),
  "expm1": (Tensor.expm1, torch.expm1, None, 3, 0), "log": (Tensor.log, torch.log, "positive", 1, 0),
  "log2": (Tensor.log2, torch.log2, "positive", 1, 0), "log10": (Tensor.log10, torch.log10, "positive", 2, 0),
  "log1p": (Tensor.log1p, torch.log1p, "positive", 2, 0), "sqrt": (Tensor.sqrt, torch.sqrt, "positive", 1, 0),
  "rsqrt": (Tensor.rsqrt, torch.rsqrt, "positive", 1, 0), "reciprocal": (Tensor.reciprocal, torch.reciprocal, None, 0, 0),
  "sin": (Tensor.sin, torch.sin, None, 1, 0), "cos": (Tensor.cos, torch.cos, None, 2, 0), "tan": (Tensor.tan, torch.tan, None, 3, 0),
  "tanh": (Tensor.tanh, torch.tanh, None, 4, 0), "sigmoid": (Tensor.sigmoid, torch.sigmoid, None, 2, 0),
  "erf": (Tensor.erf, torch.erf, None, 2, 0), "abs": (Tensor.abs, torch.abs, None, 0, 0), "neg": (Tensor.__neg__, torch.neg, None, 0, 0),
  "sign": (Tensor.sign, torch.sign, None, 0, 0), "floor": (Tensor.floor, torch.floor, None, 0, 0), "ceil": (Tensor.ceil, torch.ceil, None, 0, 0),
  "trunc": (Tensor.trunc, torch.trunc, None, 0, 0), "round": (Tensor.round, torch.round, None, 0, 0),
  "relu": (Tensor.relu, torch.relu, None, 0, 0), "relu6": (Tensor.relu6, TF.relu6, None, 0, 0),
  "hardsigmoid": (Tensor.hardsigmoid, TF.hardsigmoid, None, 1, 0), "hardswish": (Tensor.hardswish, TF.hardswish, None, 1, 0),
  "silu": (Tensor.silu, TF.silu, None, 3, 0), "softplus": (Tensor.softplus, TF.softplus, None, 3, 0),
  "mish": (Tensor.mish, TF.mish, None, 4, 0), "elu": (Tensor.elu, TF.elu, None, 3, 0), "selu": (Tensor.selu, TF.selu, None, 3, 0),
  "celu": (lambda t: t.celu(0.7), lambda p: TF.celu(p, 0.7), None, 3, 0),
  "leaky_relu": (lambda t: t.leaky_relu(0.2), lambda p: TF.leaky_relu(p, 0.2), None, 0, 0),
  "logsigmoid": (Tensor.logsigmoid, TF.logsigmoid, None, 3, 0), "square": (Tensor.square, torch.square, None, 0, 0),
  # 0.5 * x * (1 + erf(x/sqrt 2)) cancels for x << 0: torch's float32 gelu(-3) is off by 5e-7 (minigrad's by
  # 1e-9), so the tail is compared absolutely
  "gelu": (Tensor.gelu, TF.gelu, None, 3, 1e-6), "gelu_tanh": (lambda t: t.gelu("tanh"), lambda p: TF.gelu(p, approximate="tanh"), None, 4, 2e-7),
  "softplus_beta": (lambda t: t.softplus(beta=2.0, threshold=5.0), lambda p: TF.softplus(p, beta=2.0, threshold=5.0), None, 4, 0),
  "hardtanh": (lambda t: t.hardtanh(-2.0, 1.5), lambda p: TF.hardtanh(p, -2.0, 1.5), None, 0, 0),
}


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", list(UNARY))
def test_unary_forward_matches_torch(name, dtype):
  fn, torch_fn, domain, max_ulp, atol = UNARY[name]
  p = to_torch(_inputs(domain), dtype)
  if name in ("gelu", "gelu_tanh"): p = p[torch.isfinite(p)]   # torch: gelu(inf) = nan, minigrad: inf
  # half types: torch's float32 result rounded once (torch's bfloat16 erf flushes tiny values to 0)
  expected = (torch_fn(p) if dtype in ("float32", "float64") else torch_fn(p.float()).to(p.dtype)).double().numpy()
  got = fn(to_minigrad(p, dtype)).numpy()
  assert fn(to_minigrad(p, dtype)).dtype == dtypes.from_name(dtype)
  # half types compute in float32 and round once, like torch: allow one ulp where torch's float32 result differs
  assert_matches(got, expected, dtype, max_ulp if dtype in ("float32", "float64") else 1, atol=atol * (1 if dtype != "float16" else 50), what=f"{name} {dtype}")


def test_erf_accuracy_against_mpmath_reference():
  """erf is a polynomial fit: within 1e-6 (float32 goal) everywhere, and close to float64 precision."""
  x = np.linspace(-7, 7, 20001)
  reference = np.array([math.erf(v) for v in x])
  assert np.abs(Tensor(x.astype(np.float32)).erf().numpy() - reference).max() < 1e-6
  assert np.abs(Tensor(x).erf().numpy() - reference).max() < 1e-15


def test_float32_erf_is_about_one_ulp_from_exact():
  # float32 has its own, cheaper fit (ERF32_SMALL below |x| = 1, ERF32_LARGE up to 4, then 1): about one ulp from the
  # exact value, on both sides of each switch and through the tails, and NaN/inf/-0 pass as they should
  x = np.concatenate([np.linspace(-5, 5, 100001), np.linspace(0.999, 1.001, 2001), np.linspace(3.99, 4.01, 2001),
                      np.geomspace(1e-38, 1e-2, 2001)]).astype(np.float32)
  exact = np.array([math.erf(float(v)) for v in x])
  got = Tensor(x).erf().numpy()
  assert got.dtype == np.float32
  ulps = np.abs(got - exact) / np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)
  assert ulps.max() <= 1.25, f"{ulps.max():.2f} ulp at x = {x[ulps.argmax()]}"   # 1.05 on OpenCL: fewer fused multiply-adds
  special = Tensor(np.array([np.nan, np.inf, -np.inf, -0.0], dtype=np.float32)).erf().numpy()
  assert np.isnan(special[0]) and special[1] == 1 and special[2] == -1 and special[3] == 0 and np.signbit(special[3])


def test_float32_tanh_is_within_one_ulp_and_keeps_the_sign_of_zero():
  # float32 has its own tanh (TANH32_SMALL below 0.875, then 1 - 2 / (exp(2a) + 1) on a clamped to 10): within one
  # ulp of the exact value on both sides of the switch, where it reaches 1.0 (9.01) and in the tails; -0 stays -0
  x = np.concatenate([np.linspace(-12, 12, 100001), np.linspace(0.874, 0.876, 2001), np.linspace(9.0, 9.03, 301),
                      np.geomspace(1e-38, 1e-2, 2001), -np.geomspace(1e-38, 1e-2, 2001), [1e30, -1e30]]).astype(np.float32)
  exact = np.array([math.tanh(float(v)) for v in x])
  got = Tensor(x).tanh().numpy()
  assert got.dtype == np.float32
  ulps = np.abs(got - exact) / np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)
  bound = 1.0 if fuses_multiply_add() else 1.2   # the polynomials' documented error without FMA
  assert ulps.max() <= bound, f"{ulps.max():.2f} ulp at x = {x[ulps.argmax()]}"
  special = Tensor(np.array([np.nan, np.inf, -np.inf, -0.0, 0.0], dtype=np.float32)).tanh().numpy()
  assert np.isnan(special[0]) and special[1] == 1 and special[2] == -1
  assert special[3] == 0 and np.signbit(special[3]) and not np.signbit(special[4])


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "uint8", "bool"])
def test_float_functions_of_integers_give_default_float(dtype):
  x = np.array([0, 1, 2, 3], dtype=np.bool_ if dtype == "bool" else dtype)
  p = torch.from_numpy(x)
  for fn, torch_fn in [(Tensor.exp, torch.exp), (Tensor.sqrt, torch.sqrt), (Tensor.sigmoid, torch.sigmoid), (Tensor.log1p, torch.log1p)]:
    out = fn(Tensor(x))
    assert out.dtype == dtypes.float32
    assert_matches(out.numpy(), torch_fn(p).double().numpy(), "float32", 2)


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "uint8"])
def test_integer_rounding_sign_abs_keep_dtype(dtype):
  x = np.array([-5, 0, 3, 100] if dtype != "uint8" else [0, 3, 100, 255], dtype=dtype)
  p = torch.from_numpy(x)
  for fn, torch_fn in [(Tensor.floor, torch.floor), (Tensor.ceil, torch.ceil), (Tensor.round, torch.round), (Tensor.trunc, torch.trunc),
                       (Tensor.sign, torch.sign), (Tensor.abs, torch.abs), (Tensor.square, torch.square)]:
    out = fn(Tensor(x))
    assert out.dtype == dtypes.from_name(dtype), fn
    np.testing.assert_array_equal(out.numpy(), torch_fn(p).numpy())


def test_int_abs_and_neg_wrap_at_min():
  x = np.array([-128, 127, 0], np.int8)
  np.testing.assert_array_equal(Tensor(x).abs().numpy(), torch.from_numpy(x).abs().numpy())
  np.testing.assert_array_equal((-Tensor(x)).numpy(), (-torch.from_numpy(x)).numpy())


def test_round_half_to_even_and_large_values():
  x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999997, 8388609.0, -8388609.0, 1e30, 3.5, -3.5], np.float32)
  np.testing.assert_array_equal(Tensor(x).round().numpy(), torch.from_numpy(x).round().numpy())


# ---------------------------------------------------------------- binary ops, every float dtype

BINARY = {
  "add": (lambda a, b: a + b, lambda a, b: a + b), "sub": (lambda a, b: a - b, lambda a, b: a - b),
  "mul": (lambda a, b: a * b, lambda a, b: a * b), "div": (lambda a, b: a / b, lambda a, b: a / b),
  "maximum": (Tensor.maximum, torch.maximum), "minimum": (Tensor.minimum, torch.minimum),
  "floordiv": (lambda a, b: a // b, lambda a, b: a // b), "remainder": (lambda a, b: a % b, lambda a, b: a % b),
  "fmod": (Tensor.fmod, torch.fmod), "trunc_div": (lambda a, b: a.div(b, rounding_mode="trunc"), lambda a, b: torch.div(a, b, rounding_mode="trunc")),
}


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", list(BINARY))
def test_binary_forward_matches_torch(name, dtype):
  fn, torch_fn = BINARY[name]
  rng = np.random.default_rng(1)
  specials = np.array([0.0, -0.0, 1.0, -1.0, 2.5, math.inf, -math.inf, math.nan, 3.0, -7.0, 0.3, 1e3])
  a = np.concatenate([np.repeat(specials, len(specials)), rng.standard_normal(400) * 50])
  b = np.concatenate([np.tile(specials, len(specials)), rng.standard_normal(400)])
  pa, pb = to_torch(a, dtype), to_torch(b, dtype)
  got = fn(to_minigrad(pa, dtype), to_minigrad(pb, dtype))
  assert got.dtype == dtypes.from_name(dtype)
  if name in ("floordiv", "remainder", "fmod", "trunc_div") and dtype in ("float16", "bfloat16"):
    # torch's vectorized half floor division rounds differently from its own scalar path; the reference is
    # the float32 result rounded once, which is what torch's scalar path and minigrad compute
    expected = torch_fn(pa.float(), pb.float()).to(pa.dtype)
  else: expected = torch_fn(pa, pb)
  assert_matches(got.numpy(), expected.double().numpy(), dtype, 0, what=f"{name} {dtype}")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_remainders_of_huge_quotients_are_exact(dtype):
  """fmod, % and // where x/y is far past 2**53 (fmod(1e20, 7) is 3: x - trunc(x/y)*y in float64 gave -2048), and
  the gradients torch gives: -trunc(x/y) and -floor(x/y) for the divisor."""
  a, b = np.array([1e30, -3.0, 1e20, 123456789.0, -1e25, 5.0]), np.array([3.0, 0.3, 7.0, 0.1, 0.7, -1e-20])
  for fn in (Tensor.fmod, Tensor.remainder, Tensor.floor_divide):
    x, y = (Tensor(v.astype(dtype), requires_grad=fn is not Tensor.floor_divide) for v in (a, b))
    px, py = (torch.tensor(v.astype(dtype), requires_grad=fn is not Tensor.floor_divide) for v in (a, b))
    got, expected = fn(x, y), getattr(torch, fn.__name__)(px, py)
    assert_matches(got.numpy(), expected.detach().double().numpy(), dtype, 0, what=f"{fn.__name__} {dtype}")
    if fn is Tensor.floor_divide: continue
    got.sum().backward()
    expected.sum().backward()
    for mine, theirs in ((x, px), (y, py)): np.testing.assert_array_equal(mine.grad.numpy(), theirs.grad.numpy(), err_msg=fn.__name__)


def test_half_arithmetic_rounds_after_every_op_like_torch():
  """(a*b + c) / d in float16/bfloat16: each op rounds (a C compiler would keep float32 between them)."""
  rng = np.random.default_rng(2)
  a, b, c, d = (rng.standard_normal(500) * 10 for _ in range(4))
  for dtype in ("float16", "bfloat16"):
    pa, pb, pc, pd = (to_torch(v, dtype) for v in (a, b, c, d))
    ta, tb, tc, td = (to_minigrad(p, dtype) for p in (pa, pb, pc, pd))
    assert_matches(((ta * tb + tc) / td).numpy(), ((pa * pb + pc) / pd).double().numpy(), dtype, 0, what=dtype)
    assert_matches((ta.sum() * 1).numpy(), pa.sum().double().numpy(), dtype, 1, what=f"sum {dtype}")
    assert_matches((ta.reshape(20, 25) @ tb.reshape(25, 20)).numpy(), (pa.reshape(20, 25) @ pb.reshape(25, 20)).double().numpy(), dtype, 1, atol=1e-2,
                   what=f"matmul {dtype}")


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "int32", "int64"])
def test_integer_division_and_remainder_match_torch(dtype):
  info = np.iinfo(dtype)
  values = sorted(v for v in {info.min, info.min + 1, -7, -3, -1, 0, 1, 2, 3, 7, 100, info.max} if info.min <= v <= info.max)
  a = np.array([x for x in values for _ in values], dtype=dtype)
  b = np.array([y for _ in values for y in values], dtype=dtype)
  keep = (b != 0) & ~((a == info.min) & (b == -1))   # torch raises on x // 0; its trunc division traps on MIN / -1
  a, b = a[keep], b[keep]
  ta, tb, pa, pb = Tensor(a), Tensor(b), torch.from_numpy(a), torch.from_numpy(b)
  for got, expected in [(ta // tb, pa // pb), (ta % tb, pa % pb), (ta.fmod(tb), torch.fmod(pa, pb)),
                        (ta.div(tb, rounding_mode="trunc"), torch.div(pa, pb, rounding_mode="trunc")), (ta // 3, pa // 3), (-7 % tb, -7 % pb)]:
    assert got.dtype == dtypes.from_name(dtype)
    np.testing.assert_array_equal(got.numpy(), expected.numpy())


def test_integer_division_by_zero_gives_zero_not_a_crash():
  a, b = Tensor([7, -7, 0], dtype="int32"), Tensor([0, 0, 0], dtype="int32")
  np.testing.assert_array_equal((a // b).numpy(), [0, 0, 0])
  np.testing.assert_array_equal((a % b).numpy(), [0, 0, 0])


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_min_divided_by_minus_one_wraps_without_a_trap(dtype):
  """x86 raises SIGFPE for INT_MIN / -1 (torch's trunc division crashes the process on it)."""
  low = np.iinfo(dtype).min
  a, b = Tensor(np.array([low, low, 9], dtype)), Tensor(np.array([-1, -1, -1], dtype))
  for got, expected in [(a // b, [low, low, -9]), (a.div(b, rounding_mode="trunc"), [low, low, -9]), (a % b, [0, 0, 0]), (a.fmod(b), [0, 0, 0])]:
    np.testing.assert_array_equal(got.numpy(), np.array(expected, dtype))


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int32", "int64"])
def test_integer_overflow_wraps_like_torch(dtype):
  info = np.iinfo(dtype)
  x = np.array([info.max, info.min, info.max // 2 + 3], dtype=dtype)
  t, p = Tensor(x), torch.from_numpy(x)
  for got, expected in [(t + 1, p + 1), (t * 3, p * 3), (t - 5, p - 5), (t * t, p * p)]:
    np.testing.assert_array_equal(got.numpy(), expected.numpy())


# ---------------------------------------------------------------- pow

def test_pow_float_special_values_match_torch():
  bases = np.array([0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, math.inf, -math.inf, math.nan, 3.0, -8.0])
  exps = np.array([0.0, 1.0, 2.0, 3.0, -1.0, -2.0, 0.5, -0.5, 1.5, math.inf, -math.inf, math.nan, 1 / 3])
  a, b = np.repeat(bases, len(exps)), np.tile(exps, len(bases))
  for dtype in ("float32", "float64"):
    pa, pb = to_torch(a, dtype), to_torch(b, dtype)
    got, expected = to_minigrad(pa, dtype) ** to_minigrad(pb, dtype), pa ** pb
    # float32 is computed in float64 and rounded once; float64's exp2(e * log2|b|) may be off by an ulp or two
    assert_matches(got.numpy(), expected.double().numpy(), dtype, 0 if dtype == "float32" else 2, what=dtype)
    numbers = ~np.isnan(expected.numpy())
    np.testing.assert_array_equal(np.signbit(got.numpy())[numbers], np.signbit(expected.numpy())[numbers])   # -0.0 ** -1 = -inf, as C


@pytest.mark.parametrize("exponent", [0, 1, 2, 3, 5, -1, -2, 0.5, -0.5, 1.5, 2.0, -3.0, 7.3, 100])
def test_pow_scalar_exponent(exponent):
  x = np.array([-3.0, -1.5, -1.0, -0.25, 0.0, 0.3, 1.0, 2.0, 10.0, math.nan], np.float32)
  got, expected = Tensor(x) ** exponent, torch.from_numpy(x) ** exponent
  assert_matches(got.numpy(), expected.double().numpy(), "float32", 4, what=str(exponent))


def test_pow_integers_match_torch():
  base = np.array([3, -3, 2, 0, 1, -1, 7, -2, 5], np.int32)
  exponent = np.array([40, 41, 33, 0, 100, 77, 3, 31, 13], np.int32)
  np.testing.assert_array_equal((Tensor(base) ** Tensor(exponent)).numpy(), (torch.from_numpy(base) ** torch.from_numpy(exponent)).numpy())
  negative = np.array([-1, -1, -2, -1, -2, -3], np.int32)
  bases = np.array([2, -1, 1, 0, -1, 5], np.int32)
  np.testing.assert_array_equal((Tensor(bases) ** Tensor(negative)).numpy(), (torch.from_numpy(bases) ** torch.from_numpy(negative)).numpy())
  small = np.array([3, -3, 2], np.int8)
  np.testing.assert_array_equal((Tensor(small) ** 9).numpy(), (torch.from_numpy(small) ** 9).numpy())
  np.testing.assert_array_equal((2 ** Tensor(np.array([0, 3, 10], np.int32))).numpy(), (2 ** torch.tensor([0, 3, 10], dtype=torch.int32)).numpy())
  assert (2.5 ** Tensor(np.array([1, 2], np.int32))).dtype == dtypes.float32
  with pytest.raises(RuntimeError, match="negative integer powers"): Tensor([2, 3]) ** -1


def test_pow_mixed_dtypes_follow_promotion():
  assert (Tensor([1, 2]) ** 2.0).dtype == dtypes.float32
  assert (Tensor([1.0, 2.0], dtype="float16") ** Tensor([2], dtype="int64")).dtype == dtypes.float16
  assert (Tensor([1, 2], dtype="int8") ** Tensor([2, 3], dtype="int32")).dtype == dtypes.int32


# ---------------------------------------------------------------- backward vs torch

GRAD_UNARY = {
  "exp": (Tensor.exp, torch.exp, None), "expm1": (Tensor.expm1, torch.expm1, None), "log": (Tensor.log, torch.log, "positive"),
  "log1p": (Tensor.log1p, torch.log1p, "positive"), "log2": (Tensor.log2, torch.log2, "positive"), "log10": (Tensor.log10, torch.log10, "positive"),
  "sqrt": (Tensor.sqrt, torch.sqrt, "positive"), "rsqrt": (Tensor.rsqrt, torch.rsqrt, "positive"), "exp2": (Tensor.exp2, torch.exp2, None),
  "sin": (Tensor.sin, torch.sin, None), "cos": (Tensor.cos, torch.cos, None), "tan": (Tensor.tan, torch.tan, "unit"),
  "tanh": (Tensor.tanh, torch.tanh, None), "sigmoid": (Tensor.sigmoid, torch.sigmoid, None), "erf": (Tensor.erf, torch.erf, None),
  "abs": (Tensor.abs, torch.abs, None), "relu": (Tensor.relu, torch.relu, None), "relu6": (Tensor.relu6, TF.relu6, None),
  "hardtanh": (lambda t: t.hardtanh(-1.0, 2.0), lambda p: TF.hardtanh(p, -1.0, 2.0), None),
  "leaky_relu": (lambda t: t.leaky_relu(0.1), lambda p: TF.leaky_relu(p, 0.1), None), "elu": (lambda t: t.elu(0.5), lambda p: TF.elu(p, 0.5), None),
  "selu": (Tensor.selu, TF.selu, None), "celu": (Tensor.celu, TF.celu, None), "gelu": (Tensor.gelu, TF.gelu, None),
  "gelu_tanh": (lambda t: t.gelu("tanh"), lambda p: TF.gelu(p, approximate="tanh"), None), "silu": (Tensor.silu, TF.silu, None),
  "softplus": (lambda t: t.softplus(2.0, 3.0), lambda p: TF.softplus(p, 2.0, 3.0), None), "mish": (Tensor.mish, TF.mish, None),
  "hardswish": (Tensor.hardswish, TF.hardswish, None), "hardsigmoid": (Tensor.hardsigmoid, TF.hardsigmoid, None),
  "logsigmoid": (Tensor.logsigmoid, TF.logsigmoid, None), "sign": (Tensor.sign, torch.sign, None), "floor": (Tensor.floor, torch.floor, None),
  "round": (Tensor.round, torch.round, None), "square": (Tensor.square, torch.square, None), "reciprocal": (Tensor.reciprocal, torch.reciprocal, "positive"),
  "clamp": (lambda t: t.clamp(-1.0, 1.5), lambda p: p.clamp(-1.0, 1.5), None), "pow3": (lambda t: t ** 3, lambda p: p ** 3, None),
  "pow_frac": (lambda t: t ** 1.7, lambda p: p ** 1.7, "positive"),
}
# the corners: relu6 at 0 and 6, hardtanh/clamp at their bounds, hardswish at -3 and 3, leaky_relu/elu/abs at 0
CORNERS = [0.0, 6.0, -1.0, 2.0, 1.5, -3.0, 3.0, 0.3, -0.7, 4.0, -5.0, 25.0, -25.0, 2.5, -2.5]


@pytest.mark.parametrize("name", list(GRAD_UNARY))
def test_unary_backward_matches_torch(name):
  fn, torch_fn, domain = GRAD_UNARY[name]
  x = np.concatenate([np.array(CORNERS), np.random.default_rng(3).standard_normal(40) * 2])
  if domain == "positive": x = np.abs(x) + 0.1
  if domain == "unit": x = np.clip(x, -1.2, 1.2)
  weights = np.random.default_rng(4).standard_normal(x.shape)   # a non-uniform upstream gradient
  p = torch.tensor(x, dtype=torch.float32, requires_grad=True)
  (torch_fn(p) * torch.tensor(weights, dtype=torch.float32)).sum().backward()
  t = Tensor(x.astype(np.float32), requires_grad=True)
  (fn(t) * Tensor(weights.astype(np.float32))).sum().backward()
  assert t.grad is not None
  # gelu_tanh: 1 - tanh**2 near tanh = -1 is quantized in float32 (torch's too), so allow a little more
  np.testing.assert_allclose(t.grad.numpy(), p.grad.numpy(), rtol=2e-5, atol=5e-6 if name == "gelu_tanh" else 2e-6, err_msg=name)


@pytest.mark.parametrize("name", ["maximum", "minimum", "pow", "lerp", "div", "remainder", "clamp_tensor", "where"])
def test_binary_backward_matches_torch(name):
  rng = np.random.default_rng(5)
  a = np.concatenate([[1.0, 2.0, 0.5, -1.0], rng.standard_normal(20)]).astype(np.float32)
  b = np.concatenate([[1.0, 3.0, 0.5, 2.0], rng.standard_normal(20)]).astype(np.float32)   # ties first
  c = rng.standard_normal(24).astype(np.float32)
  if name == "pow": a = np.abs(a) + 0.1
  ops = {
    "maximum": (lambda x, y, z: x.maximum(y), lambda x, y, z: torch.maximum(x, y)),
    "minimum": (lambda x, y, z: x.minimum(y), lambda x, y, z: torch.minimum(x, y)),
    "pow": (lambda x, y, z: x ** y, lambda x, y, z: x ** y),
    "lerp": (lambda x, y, z: x.lerp(y, z.sigmoid()), lambda x, y, z: torch.lerp(x, y, z.sigmoid())),
    "div": (lambda x, y, z: x / y, lambda x, y, z: x / y),
    "remainder": (lambda x, y, z: x % (y.abs() + 0.5), lambda x, y, z: x % (y.abs() + 0.5)),
    "clamp_tensor": (lambda x, y, z: x.clamp(y - 1, y + 1), lambda x, y, z: x.clamp(y - 1, y + 1)),
    "where": (lambda x, y, z: (z > 0).where(x, y), lambda x, y, z: torch.where(z > 0, x, y)),
  }
  fn, torch_fn = ops[name]
  ts = [Tensor(v, requires_grad=True) for v in (a, b, c)]
  ps = [torch.tensor(v, requires_grad=True) for v in (a, b, c)]
  fn(*ts).sum().backward()
  torch_fn(*ps).sum().backward()
  for t, p in zip(ts, ps):
    expected = p.grad.numpy() if p.grad is not None else np.zeros_like(a)
    got = t.grad.numpy() if t.grad is not None else np.zeros_like(a)
    np.testing.assert_allclose(got, expected, rtol=2e-5, atol=2e-6, err_msg=name)


def test_pow_gradient_at_zero_base_is_finite():
  x = Tensor([0.0, 1.0, 2.0], requires_grad=True)
  (x ** Tensor([2.0, 2.0, 2.0])).sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), [0.0, 2.0, 4.0])


def test_half_gradients_are_close_to_torch():
  x = np.linspace(-3, 3, 25)
  for dtype in ("float16", "bfloat16"):
    p = to_torch(x, dtype).requires_grad_()
    (torch.tanh(p) * TF.gelu(p)).sum().backward()
    t = to_minigrad(p, dtype, requires_grad=True)
    (t.tanh() * t.gelu()).sum().backward()
    assert t.grad.dtype == dtypes.from_name(dtype)
    np.testing.assert_allclose(t.grad.numpy().astype(np.float64), p.grad.double().numpy(), rtol=2e-2, atol=2e-2)


# ---------------------------------------------------------------- clamp, lerp, where, classification

def test_clamp_scalar_tensor_nan_and_crossed_bounds():
  x = np.array([-2.0, -0.5, 0.0, 0.5, 2.0, math.nan], np.float32)
  t, p = Tensor(x), torch.from_numpy(x)
  lo, hi = np.array([-1.0, 0.0, 1.0, -1.0, 0.0, 0.0], np.float32), np.array([1.0, 0.2, 2.0, 0.0, 1.0, 1.0], np.float32)
  cases = [(t.clamp(-1, 1), p.clamp(-1, 1)), (t.clamp(min=0.1), p.clamp(min=0.1)), (t.clip(max_=0.3), p.clip(max=0.3)),
           (t.clamp(Tensor(lo), Tensor(hi)), p.clamp(torch.from_numpy(lo), torch.from_numpy(hi))),
           (t.clamp(2.0, 1.0), p.clamp(2.0, 1.0)), (t.clamp(min=math.nan), p.clamp(min=math.nan))]
  for got, expected in cases: assert_matches(got.numpy(), expected.double().numpy(), "float32", 0)
  xi = np.array([-5, 0, 7], np.int32)
  got, expected = Tensor(xi).clamp(min=0.5), torch.from_numpy(xi).clamp(min=0.5)
  assert got.dtype == dtypes.float32 and expected.dtype == torch.float32
  np.testing.assert_array_equal(got.numpy(), expected.numpy())
  np.testing.assert_array_equal(Tensor(xi).clamp(-1, 3).numpy(), torch.from_numpy(xi).clamp(-1, 3).numpy())
  with pytest.raises(RuntimeError, match="At least one"): t.clamp()


def test_lerp_scalar_and_tensor_weight():
  rng = np.random.default_rng(6)
  a, b, w = (rng.standard_normal(50).astype(np.float32) for _ in range(3))
  for weight, torch_weight in [(0.3, 0.3), (0.8, 0.8), (Tensor(w), torch.from_numpy(w))]:
    got = Tensor(a).lerp(Tensor(b), weight)
    np.testing.assert_allclose(got.numpy(), torch.lerp(torch.from_numpy(a), torch.from_numpy(b), torch_weight).numpy(), rtol=1e-6, atol=1e-6)


def test_where_promotion_and_broadcasting():
  cond = np.array([[True], [False]])
  xi, xf = np.array([1, 2, 3], np.int8), np.array([0.5], np.float64)
  for x, y in [(xi, xf), (xi, 2.5), (3, xi), (xi, True)]:
    tx = Tensor(x) if isinstance(x, np.ndarray) else x
    ty = Tensor(y) if isinstance(y, np.ndarray) else y
    px = torch.from_numpy(x) if isinstance(x, np.ndarray) else x
    py = torch.from_numpy(y) if isinstance(y, np.ndarray) else y
    got, expected = Tensor(cond).where(tx, ty), torch.where(torch.from_numpy(cond), px, py)
    assert got.dtype.name == dtypes.from_name(str(expected.dtype)[6:]).name
    np.testing.assert_array_equal(got.numpy(), expected.numpy())


def test_isnan_isinf_isfinite_and_comparisons_with_nan():
  x = np.array([0.0, -1.5, math.inf, -math.inf, math.nan, 1e38], np.float32)
  y = np.array([0.0, math.nan, math.inf, 1.0, math.nan, -1e38], np.float32)
  t, u, p, q = Tensor(x), Tensor(y), torch.from_numpy(x), torch.from_numpy(y)
  for got, expected in [(t.isnan(), p.isnan()), (t.isinf(), p.isinf()), (t.isfinite(), p.isfinite()), (t.isposinf(), p.isposinf()),
                        (t.isneginf(), p.isneginf()), (t < u, p < q), (t <= u, p <= q), (t > u, p > q), (t >= u, p >= q),
                        (t == u, p == q), (t != u, p != q)]:
    assert got.dtype == dtypes.bool
    np.testing.assert_array_equal(got.numpy(), expected.numpy())
  np.testing.assert_array_equal(Tensor([1, 2], dtype="int8").isnan().numpy(), [False, False])
  np.testing.assert_array_equal(Tensor([1, 2], dtype="int8").isfinite().numpy(), [True, True])


# ---------------------------------------------------------------- logical, bitwise, shifts

def test_logical_ops_take_truthiness_of_any_dtype():
  a, b = np.array([0.0, 1.5, -2.0, 0.0], np.float32), np.array([0, 0, 3, 7], np.int32)
  ta, tb, pa, pb = Tensor(a), Tensor(b), torch.from_numpy(a), torch.from_numpy(b)
  for got, expected in [(ta.logical_and(tb), torch.logical_and(pa, pb)), (ta.logical_or(tb), torch.logical_or(pa, pb)),
                        (ta.logical_xor(tb), torch.logical_xor(pa, pb)), (ta.logical_not(), torch.logical_not(pa)), (tb.logical_and(True), torch.logical_and(pb, torch.tensor(True)))]:
    assert got.dtype == dtypes.bool
    np.testing.assert_array_equal(got.numpy(), expected.numpy())


@pytest.mark.parametrize("dtype", ["bool", "int8", "uint8", "int16", "int32", "int64"])
def test_bitwise_ops_match_torch(dtype):
  rng = np.random.default_rng(7)
  if dtype == "bool": a, b = rng.integers(0, 2, 16).astype(bool), rng.integers(0, 2, 16).astype(bool)
  else:
    info = np.iinfo(dtype)
    a, b = rng.integers(info.min, info.max, 16, endpoint=True).astype(dtype), rng.integers(info.min, info.max, 16, endpoint=True).astype(dtype)
  ta, tb, pa, pb = Tensor(a), Tensor(b), torch.from_numpy(a), torch.from_numpy(b)
  for got, expected in [(ta & tb, pa & pb), (ta | tb, pa | pb), (ta ^ tb, pa ^ pb), (~ta, ~pa), (ta & 5, pa & 5), (6 | ta, 6 | pa), (ta ^ True, pa ^ True)]:
    assert got.dtype == dtypes.from_name(str(expected.dtype)[6:]), (got.dtype, expected.dtype)
    np.testing.assert_array_equal(got.numpy(), expected.numpy())


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "int32", "int64"])
def test_shifts_match_torch_for_every_amount(dtype):
  bits = np.dtype(dtype).itemsize * 8
  values = [1, 5, 100, -1, -100, np.iinfo(dtype).max, np.iinfo(dtype).min] if dtype != "uint8" else [1, 5, 100, 200, 255, 0]
  amounts = [0, 1, 3, bits - 1, bits, bits + 1, 63, 64, 100] + ([-1] if dtype != "uint8" else [])
  a = np.array([v for v in values for _ in amounts], dtype=dtype)
  s = np.array([k for _ in values for k in amounts if k < 2 ** (bits - 1) or dtype == "uint8"][:len(a)], dtype=dtype) if bits > 8 else \
      np.array([k for _ in values for k in amounts], dtype=np.int64).astype(dtype)
  ta, ts, pa, ps = Tensor(a), Tensor(s), torch.from_numpy(a), torch.from_numpy(s)
  for got, expected in [(ta << ts, pa << ps), (ta >> ts, pa >> ps), (ta << 3, pa << 3), (ta >> 2, pa >> 2)]:
    assert got.dtype == dtypes.from_name(dtype)
    np.testing.assert_array_equal(got.numpy(), expected.numpy())


def test_bitwise_and_shifts_on_floats_raise_like_torch():
  f, i = Tensor([1.0, 2.0]), Tensor([1, 2])
  for bad in (lambda: f & i, lambda: f | 1, lambda: i ^ 1.5, lambda: f << 1, lambda: i >> f, lambda: ~f, lambda: f.bitwise_not()):
    with pytest.raises(NotImplementedError, match="float") as info: bad()
    assert isinstance(info.value, (TypeError, RuntimeError))
  with pytest.raises(TypeError): ~f          # torch raises TypeError for ~ on floats
  with pytest.raises(RuntimeError): i << f   # and NotImplementedError (a RuntimeError) for shifts
  for bad_sub in (lambda: Tensor([True]) - Tensor([False]), lambda: Tensor([1, 2]) - True, lambda: 1 - Tensor([True]), lambda: Tensor([1.5]) - Tensor([True])):
    with pytest.raises(RuntimeError, match="bool"): bad_sub()   # as torch: any bool operand


# ---------------------------------------------------------------- edge shapes

EDGE_OPS = [
  ("exp", lambda t: t.exp(), torch.exp), ("gelu", lambda t: t.gelu(), TF.gelu), ("round", lambda t: t.round(), torch.round),
  ("add_bcast", lambda t: t + Tensor(np.float32([[1.5]])), lambda p: p + torch.tensor([[1.5]])),
  ("max_self", lambda t: t.maximum(t * 0.5), lambda p: torch.maximum(p, p * 0.5)), ("pow", lambda t: t.abs() ** 1.5, lambda p: p.abs() ** 1.5),
  ("floordiv", lambda t: t // 0.7, lambda p: p // 0.7), ("where", lambda t: (t > 0).where(t, -t * 2), lambda p: torch.where(p > 0, p, -p * 2)),
]
SHAPES = {
  "zero_size": lambda: np.zeros((0, 3), np.float32), "zero_d": lambda: np.array(-1.25, np.float32),
  "size_one": lambda: np.random.default_rng(8).standard_normal((1, 4)).astype(np.float32),
  "transposed": lambda: np.random.default_rng(9).standard_normal((5, 3)).astype(np.float32),
  "sliced": lambda: np.random.default_rng(10).standard_normal((6, 8)).astype(np.float32),
  "expanded": lambda: np.random.default_rng(11).standard_normal((3, 1)).astype(np.float32),
}
VIEWS = {"zero_size": (lambda t: t, lambda a: a), "zero_d": (lambda t: t, lambda a: a), "size_one": (lambda t: t, lambda a: a),
         "transposed": (lambda t: t.T, lambda a: a.T), "sliced": (lambda t: t[1:5, ::-3], lambda a: a[1:5, ::-3]),
         "expanded": (lambda t: t.expand(3, 4), lambda a: np.broadcast_to(a, (3, 4)))}


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("op", EDGE_OPS, ids=[o[0] for o in EDGE_OPS])
def test_edge_shapes(op, shape):
  _, fn, torch_fn = op
  data = SHAPES[shape]()
  view, np_view = VIEWS[shape]
  got = fn(view(Tensor(data)))
  expected = torch_fn(torch.from_numpy(np_view(data).copy()))
  assert got.shape == tuple(expected.shape)
  np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=2e-6, atol=1e-6)


def test_edge_shape_gradients():
  x = Tensor(np.float32([[0.5, -1.0, 2.0]]), requires_grad=True)
  (x.T.expand(3, 4).tanh() * Tensor(np.arange(12, dtype=np.float32).reshape(3, 4))).sum().backward()
  p = torch.tensor([[0.5, -1.0, 2.0]], requires_grad=True)
  (p.T.expand(3, 4).tanh() * torch.arange(12, dtype=torch.float32).reshape(3, 4)).sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), p.grad.numpy(), rtol=1e-5)
  z = Tensor(np.zeros((0, 2), np.float32), requires_grad=True)
  z.exp().sum().backward()
  assert z.grad is not None and z.grad.shape == (0, 2)
