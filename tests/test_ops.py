"""Tests for the Tensor API (forward only): construction, elementwise math, dtype promotion, reductions,
movement ops and indexing, matmul, realize semantics. Results are checked against numpy, and against torch
where the question is one of semantics (dtypes, padding forms, softmax).

"""
from __future__ import annotations
import math
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from minigrad import Tensor, dtypes

# ---------------------------------------------------------------- helpers

NP_TO_MG = {np.dtype(np.float32): dtypes.float32, np.dtype(np.float64): dtypes.float64, np.dtype(np.float16): dtypes.float16,
            np.dtype(np.int8): dtypes.int8, np.dtype(np.int16): dtypes.int16, np.dtype(np.int32): dtypes.int32,
            np.dtype(np.int64): dtypes.int64, np.dtype(np.uint8): dtypes.uint8, np.dtype(np.uint16): dtypes.uint16,
            np.dtype(np.uint32): dtypes.uint32, np.dtype(np.bool_): dtypes.bool}
TORCH_TO_MG = {torch.float32: dtypes.float32, torch.float64: dtypes.float64, torch.float16: dtypes.float16,
               torch.int8: dtypes.int8, torch.int16: dtypes.int16, torch.int32: dtypes.int32, torch.int64: dtypes.int64,
               torch.uint8: dtypes.uint8, torch.bool: dtypes.bool}
MG_TO_TORCH = {v: k for k, v in TORCH_TO_MG.items()}
MG_TO_NP = {v: k for k, v in NP_TO_MG.items()}


def randn(*shape: int, seed: int = 0) -> np.ndarray:
  return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def randint(*shape: int, low: int = -5, high: int = 6, dtype=np.int32, seed: int = 0) -> np.ndarray:
  return np.random.default_rng(seed).integers(low, high, shape).astype(dtype)


def check(t: Tensor, expected: np.ndarray | float | int | bool, rtol: float = 1e-5, atol: float = 1e-6, dtype=None) -> None:
  """t's realized values equal `expected` (shape exact, values to tolerance, dtype exact if given)."""
  expected = np.asarray(expected)
  out = t.numpy()
  assert isinstance(out, np.ndarray)
  assert t.shape == expected.shape, f"shape {t.shape} != {expected.shape}"
  assert out.shape == expected.shape
  if dtype is not None:
    assert t.dtype == dtype, f"dtype {t.dtype} != {dtype}"
    assert out.dtype == MG_TO_NP[dtype]
  if out.dtype.kind in "biu" and expected.dtype.kind in "biu": np.testing.assert_array_equal(out, expected)
  else: np.testing.assert_allclose(out.astype(np.float64), expected.astype(np.float64), rtol=rtol, atol=atol, equal_nan=True)


def check_torch(t: Tensor, expected: torch.Tensor, rtol: float = 1e-5, atol: float = 1e-6) -> None:
  """t matches a torch result in dtype, shape and values."""
  check(t, expected.numpy(), rtol, atol, dtype=TORCH_TO_MG[expected.dtype])


# ---------------------------------------------------------------- construction

@pytest.mark.parametrize("data, dtype", [
  ([1.5, 2.0, -3.25], dtypes.float32),
  ([[1.0, 2.0], [3.0, 4.0]], dtypes.float32),
  ([1, 2.5], dtypes.float32),                 # mixed int/float -> float
  ([1, 2, 3], dtypes.default_int),
  ([[[1], [2]], [[3], [4]]], dtypes.default_int),
  ([True, False, True], dtypes.bool),
  ((1.0, 2.0), dtypes.float32),               # tuples like lists
])
def test_from_python_list(data, dtype):
  t = Tensor(data)
  assert t.dtype == dtype
  expected = np.array(data, dtype=MG_TO_NP[dtype])
  assert t.shape == expected.shape
  check(t, expected, dtype=dtype)
  assert t.tolist() == expected.tolist()


@pytest.mark.parametrize("value, dtype", [(3, dtypes.default_int), (-2.5, dtypes.float32), (True, dtypes.bool), (0, dtypes.default_int)])
def test_from_python_scalar_is_0d(value, dtype):
  t = Tensor(value)
  assert t.shape == () and t.ndim == 0 and t.numel() == 1 and t.dtype == dtype
  assert t.item() == value and type(t.item()) is type(value)
  assert t.numpy().shape == ()


@pytest.mark.parametrize("npdtype", [np.float32, np.float64, np.float16, np.int8, np.int16, np.int32, np.int64,
                                     np.uint8, np.uint16, np.uint32, np.bool_])
def test_from_numpy_keeps_dtype_and_values(npdtype):
  arr = (randn(3, 5) * 50).astype(npdtype) if npdtype is not np.bool_ else randn(3, 5) > 0
  if np.dtype(npdtype).kind == "u": arr = np.abs(randn(3, 5) * 50).astype(npdtype)
  t = Tensor(arr)
  assert t.dtype == NP_TO_MG[np.dtype(npdtype)]
  out = t.numpy()
  assert out.dtype == arr.dtype and out.shape == arr.shape
  np.testing.assert_array_equal(out, arr)


def test_from_numpy_with_explicit_dtype_converts():
  arr = np.array([[1, 2], [3, 4]], dtype=np.int64)
  check(Tensor(arr, dtype=dtypes.float64), arr.astype(np.float64), dtype=dtypes.float64)
  check(Tensor([1.7, -1.7, 0.2], dtype=dtypes.int32), np.array([1, -1, 0], dtype=np.int32), dtype=dtypes.int32)
  check(Tensor([0, 2, 0], dtype=dtypes.bool), np.array([False, True, False]), dtype=dtypes.bool)


@pytest.mark.parametrize("make", [lambda a: a.T, lambda a: a[::2, ::-1], lambda a: a[:, 1:3], lambda a: np.broadcast_to(a[:1], (4, 6))],
                         ids=["T", "strided", "slice", "broadcast"])
def test_from_non_contiguous_numpy(make):
  arr = make(randn(4, 6))
  check(Tensor(arr), arr.copy(), dtype=dtypes.float32)


def test_from_numpy_copies_the_data():
  arr = randn(3)
  t = Tensor(arr)
  expected = arr.copy()
  arr[0] = 1000.0
  check(t, expected)


@pytest.mark.parametrize("value", [np.float64(2.5), np.int64(7), np.float32(-1.25), np.bool_(True), np.int8(-3)])
def test_from_numpy_scalar(value):
  t = Tensor(value)
  assert t.shape == () and t.dtype == NP_TO_MG[np.dtype(type(value))]
  assert t.item() == value


@pytest.mark.parametrize("make", [lambda: Tensor(np.array(4.5, dtype=np.float64)), lambda: Tensor(Tensor(np.float64(4.5))),
                                  lambda: Tensor.rand((), dtype=dtypes.float64) * 0 + 4.5], ids=["ndarray", "tensor", "rand"])
def test_from_0d_array_is_0d(make):
  t = make()
  assert t.shape == () and t.dtype == dtypes.float64 and t.item() == 4.5


@pytest.mark.parametrize("data, shape", [([], (0,)), ([[]], (1, 0)), (np.zeros((2, 0, 3), np.float32), (2, 0, 3)),
                                         (np.zeros((0,), np.int64), (0,))])
def test_zero_size_tensors(data, shape):
  t = Tensor(data)
  assert t.shape == shape and t.numel() == 0
  out = t.numpy()
  assert out.shape == shape and out.size == 0
  assert t.tolist() == np.zeros(shape).tolist()
  # ops on empty tensors keep the shape
  assert (t + 1).numpy().shape == shape
  assert (t * t).shape == shape


def test_from_tensor_copies_values():
  a = Tensor([[1.0, 2.0], [3.0, 4.0]])
  b = Tensor(a.T)
  check(b, np.array([[1.0, 3.0], [2.0, 4.0]], np.float32), dtype=dtypes.float32)


def test_from_bytes_is_uint8():
  t = Tensor(b"\x01\x02\xff")
  check(t, np.array([1, 2, 255], np.uint8), dtype=dtypes.uint8)


def test_tensor_facts():
  t = Tensor(np.zeros((2, 3, 4), np.float32))
  assert t.shape == (2, 3, 4) and t.ndim == 3 and t.numel() == 24 and len(t) == 2
  assert t.size() == (2, 3, 4) and t.size(1) == 3 and t.size(-1) == 4
  from minigrad.runtime.device import Device
  assert t.device == Device.DEFAULT   # "CPU" unless DEV=... picks another default
  assert Tensor([1.0], device="cpu").device == "CPU"
  assert Tensor([1.0], device="CPU:0").device == "CPU"


@pytest.mark.parametrize("fn, shape, value, dtype", [
  (lambda: Tensor.zeros(2, 3), (2, 3), 0.0, dtypes.float32),
  (lambda: Tensor.zeros((2, 3)), (2, 3), 0.0, dtypes.float32),
  (lambda: Tensor.ones(4), (4,), 1.0, dtypes.float32),
  (lambda: Tensor.ones(2, 2, dtype=dtypes.int32), (2, 2), 1, dtypes.int32),
  (lambda: Tensor.zeros(3, dtype=dtypes.bool), (3,), False, dtypes.bool),
  (lambda: Tensor.full((2, 3), 7.5), (2, 3), 7.5, dtypes.float32),
  (lambda: Tensor.full((2, 3), 7), (2, 3), 7, dtypes.default_int),
  (lambda: Tensor.full(3, True), (3,), True, dtypes.bool),
  (lambda: Tensor.full((), -2.0), (), -2.0, dtypes.float32),
  (lambda: Tensor.full((2,), 3, dtype=dtypes.float64), (2,), 3.0, dtypes.float64),
  (lambda: Tensor.zeros(0, 3), (0, 3), 0.0, dtypes.float32),
  (lambda: Tensor.zeros_like(Tensor(randint(2, 3))), (2, 3), 0, dtypes.int32),
  (lambda: Tensor.ones_like(Tensor(randn(2, 3))), (2, 3), 1.0, dtypes.float32),
  (lambda: Tensor(randn(4)).full_like(2.5), (4,), 2.5, dtypes.float32),
  (lambda: Tensor(randn(4)).zeros_like(dtype=dtypes.int64), (4,), 0, dtypes.int64),
])
def test_creation_helpers(fn, shape, value, dtype):
  t = fn()
  check(t, np.full(shape, value, dtype=MG_TO_NP[dtype]), dtype=dtype)


def test_const_tensors_work_in_expressions():
  check(Tensor.ones(2, 3) * 2 + Tensor.full((3,), 0.5), np.full((2, 3), 2.5, np.float32))
  check(Tensor.ones(2, 3).sum(), np.float32(6.0))
  check(Tensor.full((2, 3), 3.0)[1, 1:], np.full((2,), 3.0, np.float32))


def test_empty_has_shape_and_dtype():
  t = Tensor.empty(3, 4)
  assert t.shape == (3, 4) and t.dtype == dtypes.float32
  assert t.numpy().shape == (3, 4)
  t = Tensor.empty((2,), dtype=dtypes.int64)
  assert t.shape == (2,) and t.dtype == dtypes.int64 and t.numpy().dtype == np.int64


@pytest.mark.parametrize("args, kwargs", [((5,), {}), ((2, 10, 3), {}), ((5, 0, -1), {}), ((-3, 3), {}), ((0,), {}),
                                          ((0.0, 1.0, 0.25), {}), ((1, 2.5, 0.5), {}), ((4,), {"dtype": dtypes.float32}),
                                          ((10, 0, -3), {}), ((3, 3), {})])
def test_arange_matches_torch(args, kwargs):
  t = Tensor.arange(*args, **kwargs)
  expected = torch.arange(*args, dtype=MG_TO_TORCH[kwargs["dtype"]] if "dtype" in kwargs else None)
  if expected.dtype == torch.int64: expected = expected.to(MG_TO_TORCH[dtypes.default_int])  # minigrad's default int
  check_torch(t, expected)


# ---------------------------------------------------------------- random numbers

def test_rand_same_seed_same_numbers():
  Tensor.manual_seed(1234)
  a, b = Tensor.rand(50).numpy(), Tensor.randn(3, 4).numpy()
  Tensor.manual_seed(1234)
  a2, b2 = Tensor.rand(50).numpy(), Tensor.randn(3, 4).numpy()
  np.testing.assert_array_equal(a, a2)
  np.testing.assert_array_equal(b, b2)


def test_rand_different_seeds_and_calls_differ():
  Tensor.manual_seed(1)
  a, a_next = Tensor.rand(100).numpy(), Tensor.rand(100).numpy()
  Tensor.manual_seed(2)
  b = Tensor.rand(100).numpy()
  assert not np.array_equal(a, b)
  assert not np.array_equal(a, a_next)
  assert len(np.unique(a)) == 100


def test_rand_range_and_dtype():
  Tensor.manual_seed(0)
  t = Tensor.rand(200, 50)
  assert t.shape == (200, 50) and t.dtype == dtypes.float32
  x = t.numpy()
  assert x.min() >= 0.0 and x.max() < 1.0
  assert abs(x.mean() - 0.5) < 0.02
  assert Tensor.rand((2, 3)).shape == (2, 3)
  assert Tensor.rand(4, dtype=dtypes.float64).numpy().dtype == np.float64


def test_randn_statistics():
  Tensor.manual_seed(42)
  x = Tensor.randn(100_000).numpy()
  assert x.dtype == np.float32
  assert abs(x.mean()) < 0.02 and abs(x.std() - 1.0) < 0.02
  assert (x < 0).any() and (x > 2).any()


def test_uniform_range():
  Tensor.manual_seed(3)
  x = Tensor.uniform(1000, low=-2.0, high=3.0).numpy()
  assert x.min() >= -2.0 and x.max() < 3.0 and x.min() < -1.5 and x.max() > 2.5


# ---------------------------------------------------------------- unary elementwise

UNARY = [
  ("neg", lambda t: -t, lambda x: -x, None),
  ("exp", Tensor.exp, np.exp, None),
  ("log", Tensor.log, np.log, "pos"),
  ("log2", Tensor.log2, np.log2, "pos"),
  ("exp2", Tensor.exp2, np.exp2, None),
  ("sqrt", Tensor.sqrt, np.sqrt, "pos"),
  ("rsqrt", Tensor.rsqrt, lambda x: 1 / np.sqrt(x), "pos"),
  ("sin", Tensor.sin, np.sin, None),
  ("cos", Tensor.cos, np.cos, None),
  ("relu", Tensor.relu, lambda x: np.maximum(x, 0), None),
  ("sigmoid", Tensor.sigmoid, lambda x: 1 / (1 + np.exp(-x)), None),
  ("tanh", Tensor.tanh, np.tanh, None),
  ("abs", Tensor.abs, np.abs, None),
  ("square", Tensor.square, np.square, None),
  ("reciprocal", Tensor.reciprocal, lambda x: 1 / x, "nonzero"),
]


def _unary_input(domain: str | None, shape=(4, 5), seed=0) -> np.ndarray:
  x = randn(*shape, seed=seed) * 2
  if domain == "pos": return np.abs(x) + 0.1
  if domain == "nonzero": return np.where(np.abs(x) < 0.1, 0.5, x).astype(np.float32)
  return x


@pytest.mark.parametrize("name, fn, npfn, domain", UNARY, ids=[u[0] for u in UNARY])
def test_unary_float(name, fn, npfn, domain):
  x = _unary_input(domain)
  check(fn(Tensor(x)), npfn(x.astype(np.float64)).astype(np.float32), rtol=1e-5, atol=1e-6, dtype=dtypes.float32)


@pytest.mark.parametrize("name, fn, npfn, domain", UNARY, ids=[u[0] for u in UNARY])
def test_unary_on_non_contiguous_view(name, fn, npfn, domain):
  x = _unary_input(domain, (5, 6), seed=1)
  t = Tensor(x).T[1:, ::-2]
  check(fn(t), npfn(x.T[1:, ::-2].astype(np.float64)).astype(np.float32), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name, fn, npfn, domain", [u for u in UNARY if u[0] in ("exp", "sqrt", "sin", "log", "sigmoid", "reciprocal")],
                         ids=["exp", "log", "sqrt", "sin", "sigmoid", "reciprocal"])
def test_unary_float_math_on_int_gives_float32(name, fn, npfn, domain):
  x = np.array([1, 2, 3, 4], np.int32)
  check(fn(Tensor(x)), npfn(x.astype(np.float64)).astype(np.float32), dtype=dtypes.float32)


def test_unary_float64_precision():
  x = randn(10).astype(np.float64) * 3
  check(Tensor(x).exp(), np.exp(x), rtol=1e-12, atol=0, dtype=dtypes.float64)
  check(Tensor(np.abs(x) + 0.1).log(), np.log(np.abs(x) + 0.1), rtol=1e-12, atol=1e-15, dtype=dtypes.float64)


def test_unary_special_values():
  x = np.array([0.0, -1.0, np.inf, -np.inf, np.nan], np.float32)
  with np.errstate(all="ignore"):
    check(Tensor(x).exp(), np.exp(x))
    check(Tensor(x).log(), np.log(x))
    check(Tensor(x).sqrt(), np.sqrt(x))
    check(Tensor(x).relu(), np.array([0, 0, np.inf, 0, np.nan], np.float32))
  check(Tensor([-100.0, 100.0]).sigmoid(), np.array([0.0, 1.0], np.float32))
  check(Tensor([-50.0, 50.0]).tanh(), np.array([-1.0, 1.0], np.float32))
  check(Tensor([1.0, -1.0, 0.0]) / 0.0, np.array([np.inf, -np.inf, np.nan], np.float32))


@pytest.mark.parametrize("npdtype", [np.int32, np.int64, np.int8])
def test_int_unary_keeps_dtype(npdtype):
  x = randint(3, 4, dtype=npdtype)
  t = Tensor(x)
  check(-t, -x, dtype=t.dtype)
  check(t.abs(), np.abs(x), dtype=t.dtype)
  check(t.relu(), np.maximum(x, 0), dtype=t.dtype)
  check(t.square(), x * x, dtype=t.dtype)


def test_abs_unsigned():
  x = np.array([0, 5, 200], np.uint8)
  check(Tensor(x).abs(), x, dtype=dtypes.uint8)


def test_bool_ops():
  a, b = np.array([True, True, False, False]), np.array([True, False, True, False])
  ta, tb = Tensor(a), Tensor(b)
  check(ta & tb, a & b, dtype=dtypes.bool)
  check(ta | tb, a | b, dtype=dtypes.bool)
  check(ta ^ tb, a ^ b, dtype=dtypes.bool)
  check(ta.logical_not(), ~a, dtype=dtypes.bool)
  check(-ta, ~a, dtype=dtypes.bool)
  check(Tensor(np.array([0.0, 2.0, -1.0], np.float32)).logical_not(), np.array([True, False, False]), dtype=dtypes.bool)


def test_int_bitwise_ops():
  a, b = np.array([12, 10, -1], np.int32), np.array([10, 6, 7], np.int32)
  check(Tensor(a) & Tensor(b), a & b, dtype=dtypes.int32)
  check(Tensor(a) | Tensor(b), a | b, dtype=dtypes.int32)
  check(Tensor(a) ^ Tensor(b), a ^ b, dtype=dtypes.int32)


@pytest.mark.parametrize("src, dst, data", [
  (np.float32, dtypes.int32, [-2.7, -0.5, 0.0, 0.5, 2.7, 100.9]),
  (np.float32, dtypes.bool, [0.0, 0.5, -1.0, 0.0]),
  (np.int32, dtypes.float32, [-3, 0, 7, 1 << 20]),
  (np.int32, dtypes.bool, [0, 1, -2, 0]),
  (np.bool_, dtypes.float32, [True, False]),
  (np.bool_, dtypes.int32, [True, False]),
  (np.int32, dtypes.int8, [1, 127, 128, 300, -129]),
  (np.float64, dtypes.float32, [1.0 / 3.0, 1e10, -2.5]),
  (np.int64, dtypes.int32, [1 << 33 | 5, -1, 42]),
  (np.uint8, dtypes.int32, [0, 255, 128]),
])
def test_cast_matches_torch(src, dst, data):
  x = np.array(data, dtype=src)
  check_torch(Tensor(x).cast(dst), torch.from_numpy(x).to(MG_TO_TORCH[dst]))


def test_cast_shorthands():
  t = Tensor([1.5, -2.5, 0.0])
  assert t.int().dtype == dtypes.int32 and t.float().dtype == dtypes.float32 and t.bool().dtype == dtypes.bool
  check(t.int(), np.array([1, -2, 0], np.int32))
  check(t.bool(), np.array([True, True, False]))
  assert t.cast(dtypes.float32) is t


# ---------------------------------------------------------------- binary elementwise and broadcasting

BINARY = [
  ("add", lambda a, b: a + b, np.add),
  ("sub", lambda a, b: a - b, np.subtract),
  ("mul", lambda a, b: a * b, np.multiply),
  ("div", lambda a, b: a / b, np.divide),
  ("maximum", lambda a, b: a.maximum(b) if isinstance(a, Tensor) else b.maximum(a), np.maximum),
  ("minimum", lambda a, b: a.minimum(b) if isinstance(a, Tensor) else b.minimum(a), np.minimum),
  ("lt", lambda a, b: a < b, np.less),
  ("gt", lambda a, b: a > b, np.greater),
  ("le", lambda a, b: a <= b, np.less_equal),
  ("ge", lambda a, b: a >= b, np.greater_equal),
  ("eq", lambda a, b: a == b, np.equal),
  ("ne", lambda a, b: a != b, np.not_equal),
]
BROADCAST_SHAPES = [((3, 4), (3, 4)), ((3, 4), (4,)), ((3, 1), (1, 4)), ((2, 3, 4), (3, 1)), ((1,), (5,)),
                    ((), (2, 3)), ((2, 1, 4), (3, 1)), ((4, 1, 1), (1, 1, 5)), ((0, 3), (3,)), ((5,), ())]


def _binary_inputs(sa, sb, seed=0):
  # small integer-valued floats so ==, <= etc. have true and false cases; b avoids 0 for division
  a = randint(*sa, seed=seed).astype(np.float32)
  b = randint(*sb, seed=seed + 1).astype(np.float32)
  b[b == 0] = 2.0
  return a, b


# every op meets three broadcast shapes and every shape pair meets several ops (each kernel costs a compile)
BINARY_CASES = [(op, BROADCAST_SHAPES[(i + k) % len(BROADCAST_SHAPES)]) for i, op in enumerate(BINARY) for k in (0, 3, 7)]


@pytest.mark.parametrize("op, shapes", BINARY_CASES, ids=[f"{op[0]}-{sa}-{sb}" for op, (sa, sb) in BINARY_CASES])
def test_binary_broadcast(op, shapes):
  (name, fn, npfn), (sa, sb) = op, shapes
  a, b = _binary_inputs(sa, sb)
  with np.errstate(divide="ignore", invalid="ignore"):
    expected, expected_rev = npfn(a, b), npfn(b, a)
  check(fn(Tensor(a), Tensor(b)), expected, dtype=NP_TO_MG[expected.dtype])
  check(fn(Tensor(b), Tensor(a)), expected_rev, dtype=NP_TO_MG[expected_rev.dtype])


@pytest.mark.parametrize("sa, sb", BROADCAST_SHAPES, ids=[f"{a}-{b}" for a, b in BROADCAST_SHAPES])
def test_broadcast_shape_matches_numpy(sa, sb):
  a, b = _binary_inputs(sa, sb)
  assert (Tensor(a) + Tensor(b)).shape == np.broadcast_shapes(sa, sb)
  assert (Tensor(b) < Tensor(a)).shape == np.broadcast_shapes(sa, sb)
  assert Tensor(a).expand(np.broadcast_shapes(sa, sb)).shape == np.broadcast_shapes(sa, sb)


@pytest.mark.parametrize("name, fn, npfn", BINARY, ids=[b[0] for b in BINARY])
@pytest.mark.parametrize("scalar", [2, -1.5])
def test_binary_with_scalar_both_sides(name, fn, npfn, scalar):
  a = randint(3, 4).astype(np.float32) / 2
  a[a == 0] = 1.0
  s = np.float32(scalar)
  check(fn(Tensor(a), scalar), npfn(a, s), dtype=NP_TO_MG[npfn(a, s).dtype])
  check(fn(scalar, Tensor(a)), npfn(s, a), dtype=NP_TO_MG[npfn(s, a).dtype])


@pytest.mark.parametrize("name, fn, npfn", BINARY, ids=[b[0] for b in BINARY])
def test_binary_on_non_contiguous_views(name, fn, npfn):
  a, b = _binary_inputs((4, 6), (6, 4), seed=3)
  ta, tb = Tensor(a), Tensor(b)
  # transposed + flipped, sliced with step, and an expanded row
  check(fn(ta[:, ::-1], tb.T), npfn(a[:, ::-1], b.T))
  check(fn(ta[::2, 1::2], tb[1::2, ::2].T), npfn(a[::2, 1::2], b[1::2, ::2].T))
  check(fn(ta[1:2].expand(4, 6), tb.T.flip(0)), npfn(np.broadcast_to(a[1:2], (4, 6)), b.T[::-1]))


def test_binary_int_ops():
  a, b = randint(3, 4, seed=5), randint(3, 4, low=1, high=7, seed=6)
  ta, tb = Tensor(a), Tensor(b)
  check(ta + tb, a + b, dtype=dtypes.int32)
  check(ta - tb, a - b, dtype=dtypes.int32)
  check(ta * tb, a * b, dtype=dtypes.int32)
  check(ta.maximum(tb), np.maximum(a, b), dtype=dtypes.int32)
  check(ta.minimum(tb), np.minimum(a, b), dtype=dtypes.int32)
  check(ta < tb, a < b, dtype=dtypes.bool)
  check(ta == tb, a == b, dtype=dtypes.bool)


def test_minimum_unsigned():
  a, b = np.array([0, 5, 200, 7], np.uint8), np.array([5, 0, 100, 7], np.uint8)
  check(Tensor(a).minimum(Tensor(b)), np.minimum(a, b), dtype=dtypes.uint8)


def test_minimum_int_min_value():
  a, b = np.array([-128, 3], np.int8), np.array([5, -128], np.int8)
  check(Tensor(a).minimum(Tensor(b)), np.minimum(a, b), dtype=dtypes.int8)


def test_bool_minimum_maximum():
  a, b = np.array([True, True, False, False]), np.array([True, False, True, False])
  check(Tensor(a).maximum(Tensor(b)), np.maximum(a, b), dtype=dtypes.bool)
  check(Tensor(a).minimum(Tensor(b)), np.minimum(a, b), dtype=dtypes.bool)


def test_int_divided_by_int_is_float():
  a, b = np.array([7, -7, 1, 0], np.int32), np.array([2, 2, 3, 5], np.int32)
  check_torch(Tensor(a) / Tensor(b), torch.from_numpy(a) / torch.from_numpy(b))
  check_torch(Tensor(a) / 2, torch.from_numpy(a) / 2)
  check_torch(10 / Tensor(b), 10 / torch.from_numpy(b))


def test_comparison_dtypes_and_mixed_types():
  a = np.array([1, 2, 3], np.int32)
  check(Tensor(a) < 2.5, a < 2.5, dtype=dtypes.bool)
  check(Tensor(a) == Tensor(np.array([1.0, 2.5, 3.0], np.float32)), np.array([True, False, True]), dtype=dtypes.bool)
  check(2 < Tensor(a), 2 < a, dtype=dtypes.bool)
  check(2 >= Tensor(a), 2 >= a, dtype=dtypes.bool)
  check(Tensor([True, False]) == Tensor([True, True]), np.array([True, False]), dtype=dtypes.bool)


def test_comparisons_with_nan_match_numpy():
  a = np.array([np.nan, 1.0, np.nan], np.float32)
  b = np.array([np.nan, np.nan, 1.0], np.float32)
  for fn, npfn in [(lambda x, y: x < y, np.less), (lambda x, y: x > y, np.greater), (lambda x, y: x == y, np.equal),
                   (lambda x, y: x != y, np.not_equal)]:
    check(fn(Tensor(a), Tensor(b)), npfn(a, b))


def test_le_ge_with_nan_are_false():
  a = np.array([np.nan, 1.0, np.nan], np.float32)
  b = np.array([np.nan, np.nan, 1.0], np.float32)
  check(Tensor(a) <= Tensor(b), np.less_equal(a, b))
  check(Tensor(a) >= Tensor(b), np.greater_equal(a, b))


# dtype promotion: tensor op tensor, torch is the reference
PROMOTION_PAIRS = [(np.float32, np.int32), (np.int32, np.int64), (np.bool_, np.int32), (np.bool_, np.float32),
                   (np.uint8, np.int8), (np.uint8, np.int32), (np.int8, np.int16), (np.float16, np.float32),
                   (np.float64, np.float32), (np.int64, np.float16), (np.bool_, np.bool_), (np.uint8, np.bool_),
                   (np.int32, np.float64)]


@pytest.mark.parametrize("da, db", PROMOTION_PAIRS, ids=[f"{np.dtype(a).name}-{np.dtype(b).name}" for a, b in PROMOTION_PAIRS])
@pytest.mark.parametrize("op", ["add", "mul", "maximum", "lt"])
def test_promotion_tensor_tensor_matches_torch(da, db, op):
  """Both operand orders for add; one order for the others (each distinct kernel costs a compile)."""
  rng = np.random.default_rng(7)
  a, b = rng.integers(0, 5, (2, 3)).astype(da), rng.integers(0, 5, (3,)).astype(db)
  ta, tb = Tensor(a), Tensor(b)
  pa, pb = torch.from_numpy(a), torch.from_numpy(b)
  fn = {"add": lambda x, y: x + y, "mul": lambda x, y: x * y, "lt": lambda x, y: x < y,
        "maximum": lambda x, y: x.maximum(y) if isinstance(x, Tensor) else torch.maximum(x, y)}[op]
  check_torch(fn(ta, tb), fn(pa, pb), rtol=1e-3)
  if op == "add": check_torch(fn(tb, ta), fn(pb, pa), rtol=1e-3)


SCALAR_CASES = [(np.int32, 2.5), (np.int32, 2), (np.int32, True), (np.bool_, 2), (np.bool_, 2.5), (np.bool_, True),
                (np.uint8, 3), (np.float16, 2.5), (np.float64, 2), (np.int64, 1.5), (np.int8, 3), (np.float32, True)]


@pytest.mark.parametrize("npdtype, scalar", SCALAR_CASES, ids=[f"{np.dtype(d).name}-{s!r}" for d, s in SCALAR_CASES])
def test_promotion_tensor_scalar_matches_torch(npdtype, scalar):
  x = np.array([0, 1, 3, 4], dtype=npdtype)
  t, p = Tensor(x), torch.from_numpy(x)
  check_torch(t + scalar, p + scalar, rtol=1e-3)
  check_torch(scalar + t, scalar + p, rtol=1e-3)
  check_torch(t * scalar, p * scalar, rtol=1e-3)
  if npdtype is not np.bool_ and not isinstance(scalar, bool):
    check_torch(t - scalar, p - scalar, rtol=1e-3)
    check_torch(scalar - t, scalar - p, rtol=1e-3)
  check_torch(t / scalar, p / scalar, rtol=1e-3)


def test_int_arithmetic_wraps_like_torch():
  x = np.array([120, -120], np.int8)
  check_torch(Tensor(x) + 10, torch.from_numpy(x) + 10)
  check_torch(Tensor(x) * 3 - 7, torch.from_numpy(x) * 3 - 7)
  y = np.array([2**31 - 1], np.int32)
  check_torch(Tensor(y) + 1, torch.from_numpy(y) + 1)
  u = np.array([0, 5], np.uint8)
  check_torch(Tensor(u) - 1, torch.from_numpy(u) - 1)


@pytest.mark.parametrize("use", ["compare", "cast", "sum"])
def test_small_int_overflow_wraps_before_use(use):
  x = np.array([120, -120, 5], np.int8)
  t, p = Tensor(x) + 10, torch.from_numpy(x) + 10
  if use == "compare": check_torch(t > 0, p > 0)
  if use == "cast": check_torch(t.float(), p.float())
  if use == "sum": check_torch(t.sum(), p.sum())


def test_int32_overflow_wraps_before_compare():
  y = np.array([2**31 - 1, 5], np.int32)
  check_torch((Tensor(y) + 1) > Tensor(y), (torch.from_numpy(y) + 1) > torch.from_numpy(y))


# where / clip / pow

@pytest.mark.parametrize("cshape, xshape, yshape", [((3, 4), (3, 4), (3, 4)), ((3, 1), (4,), (3, 4)), ((4,), (3, 1), ()),
                                                    ((2, 1, 4), (3, 1), (1,))])
def test_where_broadcast(cshape, xshape, yshape):
  rng = np.random.default_rng(11)
  c = rng.random(cshape) > 0.5
  x, y = randn(*xshape, seed=1), randn(*yshape, seed=2)
  check(Tensor(c).where(Tensor(x), Tensor(y)), np.where(c, x, y), dtype=dtypes.float32)


@pytest.mark.parametrize("x, y", [(1.5, -2.0), (1, 2), (1, 2.5), (2.5, 1), (True, False), (True, 2), (False, 2.5),
                                  (2, True)])
def test_where_scalars_matches_torch(x, y):
  c = np.array([True, False, True])
  expected = torch.where(torch.from_numpy(c), x, y)
  # a Python int makes a default_int tensor in minigrad (int32, as in tinygrad) where torch uses int64
  if expected.dtype == torch.int64: expected = expected.to(MG_TO_TORCH[dtypes.default_int])
  check_torch(Tensor(c).where(x, y), expected)


def test_where_mixed_matches_torch():
  c = np.array([[True, False, True], [False, False, True]])
  xi = np.array([1, 2, 3], np.int32)
  xf = randn(2, 3)
  pc = torch.from_numpy(c)
  check_torch(Tensor(c).where(Tensor(xi), 1.5), torch.where(pc, torch.from_numpy(xi), 1.5))
  check_torch(Tensor(c).where(0, Tensor(xf)), torch.where(pc, 0, torch.from_numpy(xf)))
  check_torch(Tensor(c).where(Tensor(xi), Tensor(xf)), torch.where(pc, torch.from_numpy(xi), torch.from_numpy(xf)))
  # a non-bool condition is truthiness
  cf = np.array([0.0, 2.0, -1.0], np.float32)
  check(Tensor(cf).where(1.0, 0.0), np.array([0.0, 1.0, 1.0], np.float32))


@pytest.mark.parametrize("lo, hi", [(-0.5, 0.5), (0.0, None), (None, 1.0), (-1, 1)])
def test_clip(lo, hi):
  x = randn(4, 5) * 2
  t = Tensor(x)
  check(t.clip(lo, hi), np.clip(x, lo, hi), dtype=dtypes.float32)
  check(t.clamp(lo, hi), np.clip(x, lo, hi))


def test_clip_int():
  x = randint(10, low=-10, high=10)
  check(Tensor(x).clip(-3, 4), np.clip(x, -3, 4), dtype=dtypes.int32)


@pytest.mark.parametrize("exponent", [2, 3, 0.5, -1, 1.5, -0.5, 1, 2.0, 10])
def test_pow_positive_base(exponent):
  x = np.abs(randn(3, 4)) + 0.5
  check(Tensor(x) ** exponent, (x.astype(np.float64) ** exponent).astype(np.float32), rtol=2e-5, dtype=dtypes.float32)
  check(Tensor(x).pow(exponent), (x.astype(np.float64) ** exponent).astype(np.float32), rtol=2e-5)


def test_pow_tensor_exponent():
  x, e = np.abs(randn(3, 4)) + 0.5, randn(4, seed=1)
  check(Tensor(x) ** Tensor(e), (x.astype(np.float64) ** e).astype(np.float32), rtol=2e-5)


def test_pow_negative_base_integer_exponent():
  x = np.array([-2.0, -1.5, 3.0], np.float32)
  check_torch(Tensor(x) ** 3, torch.from_numpy(x) ** 3, rtol=2e-5)
  check_torch(Tensor(x) ** -1, torch.from_numpy(x) ** -1, rtol=2e-5)


def test_pow_zero_exponent():
  x = np.array([0.0, 2.0, -3.0], np.float32)
  check_torch(Tensor(x) ** 0, torch.from_numpy(x) ** 0)


def test_rpow_scalar_base():
  x = randn(5)
  check(2 ** Tensor(x), (2.0 ** x.astype(np.float64)).astype(np.float32), rtol=2e-5)


def test_pow_int_tensor_keeps_int():
  x = np.array([1, 2, -3], np.int32)
  check_torch(Tensor(x) ** 3, torch.from_numpy(x) ** 3)


def test_pow_int_tensor_squared():
  x = np.array([1, 2, -3], np.int32)
  check_torch(Tensor(x) ** 2, torch.from_numpy(x) ** 2)


# ---------------------------------------------------------------- reductions

# (axis=() is left out: numpy treats it as "no axes" and torch as "all axes")
AXES = [None, 0, 1, -1, -2, (0, 2), (-1, 0), (0, 1, 2)]


@pytest.mark.parametrize("op", ["sum", "max", "min", "mean"])
@pytest.mark.parametrize("axis", AXES, ids=[str(a) for a in AXES])
@pytest.mark.parametrize("keepdim", [False, True])
def test_reduce_float(op, axis, keepdim):
  x = randn(3, 4, 5, seed=2)
  npfn = {"sum": np.sum, "max": np.max, "min": np.min, "mean": np.mean}[op]
  expected = npfn(x.astype(np.float64), axis=axis, keepdims=keepdim).astype(np.float32)
  check(getattr(Tensor(x), op)(axis, keepdim), expected, rtol=1e-5, atol=1e-5, dtype=dtypes.float32)
  check(getattr(Tensor(x), op)(axis=axis, keepdim=keepdim), expected, rtol=1e-5, atol=1e-5)


REDUCE_INPUTS = {"int32": lambda: randint(3, 4, seed=4), "int64": lambda: randint(3, 4, dtype=np.int64),
                 "uint8": lambda: randint(3, 4, dtype=np.uint8, low=1, high=200), "int8": lambda: randint(3, 4, dtype=np.int8),
                 "bool": lambda: randint(3, 4, seed=1) > 0, "float64": lambda: randn(3, 4).astype(np.float64),
                 "float16": lambda: randn(3, 4).astype(np.float16)}


@pytest.mark.parametrize("op", ["sum", "max", "min", "mean"])
@pytest.mark.parametrize("axis", [None, -1], ids=str)
@pytest.mark.parametrize("kind", list(REDUCE_INPUTS))
def test_reduce_matches_torch_dtype(op, axis, kind):
  x = REDUCE_INPUTS[kind]()
  p = torch.from_numpy(x)
  if op == "mean" and not p.is_floating_point():   # torch refuses; minigrad (like tinygrad) gives the float mean
    check(Tensor(x).mean(axis), np.mean(x.astype(np.float64), axis=axis).astype(np.float32), dtype=dtypes.float32)
    return
  tdim = tuple(range(x.ndim)) if axis is None else axis
  pexp = getattr(p, op if op not in ("max", "min") else "a" + op)(dim=tdim) if op != "mean" else p.mean(dim=tdim)
  check_torch(getattr(Tensor(x), op)(axis), pexp, rtol=1e-3 if kind == "float16" else 1e-5, atol=1e-3 if kind == "float16" else 1e-6)


def test_reduce_all_negative_max_and_all_positive_min():
  x = -np.abs(randn(4, 6)) - 1
  check(Tensor(x).max(), np.max(x))
  check(Tensor(x).max(1), np.max(x, 1))
  check(Tensor(-x).min(0), np.min(-x, 0))
  xi = np.array([[-7, -3], [-9, -100]], np.int32)
  check(Tensor(xi).max(1), np.array([-3, -9], np.int32), dtype=dtypes.int32)


@pytest.mark.parametrize("case", ["max_reduce", "max_reduce_first", "min_reduce", "maximum", "minimum"])
def test_nan_propagates_through_max(case):
  a = np.array([1.0, np.nan, 3.0], np.float32)
  b = np.array([np.nan, 1.0, np.nan], np.float32)
  pa, pb = torch.from_numpy(a), torch.from_numpy(b)
  if case == "max_reduce": check_torch(Tensor(a).max(), pa.max())
  if case == "max_reduce_first": check_torch(Tensor(b).max(), pb.max())
  if case == "min_reduce": check_torch(Tensor(a).min(), pa.min())
  if case == "maximum": check_torch(Tensor(a).maximum(Tensor(b)), torch.maximum(pa, pb))
  if case == "minimum": check_torch(Tensor(a).minimum(Tensor(b)), torch.minimum(pa, pb))


def test_reduce_0d_without_axis():
  check(Tensor(3.0).sum(), np.float32(3.0))
  check(Tensor(3.0).max(), np.float32(3.0))
  check(Tensor(3.0).mean(keepdim=True), np.float32(3.0))


@pytest.mark.parametrize("op", ["sum", "max", "softmax"])
def test_reduce_0d_with_axis(op):
  expected = {"sum": torch.sum, "max": torch.amax, "softmax": torch.softmax}[op](torch.tensor(3.0), 0)
  check_torch(getattr(Tensor(3.0), op)(0), expected)


def test_reduce_special_values():
  x = np.array([[1.0, np.inf], [-np.inf, 2.0], [np.nan, 1.0]], np.float32)
  check(Tensor(x[:2]).max(1), np.array([np.inf, 2.0], np.float32))
  check(Tensor(x[:2]).min(1), np.array([1.0, -np.inf], np.float32))
  check(Tensor(x).sum(1), np.array([np.inf, -np.inf, np.nan], np.float32))


def test_min_unsigned():
  x = np.array([[0, 5, 200], [9, 3, 3]], np.uint8)
  check_torch(Tensor(x).min(), torch.from_numpy(x).min())
  check_torch(Tensor(x).min(1), torch.from_numpy(x).amin(1))


def test_min_int_min_value():
  x = np.array([-128, 5, 3], np.int8)
  check_torch(Tensor(x).min(), torch.from_numpy(x).min())


def test_sum_large_and_exact():
  x = np.ones((1000, 37), np.float32)
  check(Tensor(x).sum(), np.float32(37000))
  xi = np.arange(100_000, dtype=np.int32)
  check(Tensor(xi).sum(), np.int64(xi.astype(np.int64).sum()), dtype=dtypes.int64)   # beyond int32 range? no, but exact
  big = np.full(10, 2**30, np.int32)
  check_torch(Tensor(big).sum(), torch.from_numpy(big).sum())   # 10 * 2**30 overflows int32, fine in int64


def test_bool_reductions():
  b = np.array([[True, False, True], [False, False, True]])
  check_torch(Tensor(b).sum(), torch.from_numpy(b).sum())
  check_torch(Tensor(b).sum(0), torch.from_numpy(b).sum(0))
  check_torch(Tensor(b).max(1), torch.from_numpy(b).amax(1))
  check_torch(Tensor(b).min(0), torch.from_numpy(b).amin(0))


@pytest.mark.filterwarnings("ignore:Mean of empty slice")
@pytest.mark.parametrize("shape, axis", [((0, 3), 0), ((0, 3), 1), ((2, 0), None), ((0,), None)])
def test_sum_and_mean_of_empty(shape, axis):
  x = np.zeros(shape, np.float32)
  check(Tensor(x).sum(axis), np.sum(x, axis=axis))
  with np.errstate(all="ignore"):
    check(Tensor(x).mean(axis), np.mean(x, axis=axis))


@pytest.mark.parametrize("name, make_t, make_np", [
  ("expanded", lambda t: t[:, None, :].expand(3, 4, 5), lambda x: np.broadcast_to(x[:, None, :], (3, 4, 5))),
  ("permuted", lambda t: t.permute(1, 0)[:, None, :].expand(5, 4, 3), lambda x: np.broadcast_to(x.T[:, None, :], (5, 4, 3))),
  ("padded", lambda t: t.pad(((1, 2), (0, 3)))[..., None].expand(6, 8, 2), lambda x: np.broadcast_to(np.pad(x, ((1, 2), (0, 3)))[..., None], (6, 8, 2))),
  ("flipped_strided", lambda t: t[::-1, ::2][None].expand(2, 3, 3), lambda x: np.broadcast_to(x[::-1, ::2][None], (2, 3, 3))),
])
@pytest.mark.parametrize("op", ["sum", "max", "mean"])
@pytest.mark.parametrize("axis", [None, 1, (0, 2)], ids=str)
def test_reduce_non_contiguous(name, make_t, make_np, op, axis):
  x = randn(3, 5, seed=9)
  expected = getattr(np, op)(make_np(x).astype(np.float64), axis=axis).astype(np.float32)
  check(getattr(make_t(Tensor(x)), op)(axis), expected, atol=1e-5)


def test_reduce_after_elementwise_and_then_elementwise():
  x, y = randn(4, 6), randn(6, seed=1)
  t = ((Tensor(x) * Tensor(y)).exp().sum(1, keepdim=True) + 1).log()
  check(t, np.log(np.exp(x.astype(np.float64) * y).sum(1, keepdims=True) + 1), rtol=1e-5)
  # two reductions in one expression
  t = Tensor(x).sum(0) / Tensor(x).max(0) - Tensor(x).mean()
  check(t, x.sum(0) / x.max(0) - x.mean(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("fn", ["softmax", "log_softmax"])
@pytest.mark.parametrize("shape, axis", [((4, 7), -1), ((4, 7), 0), ((2, 3, 5), 1), ((6,), 0), ((1, 1), -1)])
def test_softmax_matches_torch(fn, shape, axis):
  x = randn(*shape, seed=12) * 3
  expected = getattr(torch, fn)(torch.from_numpy(x), dim=axis)
  check_torch(getattr(Tensor(x), fn)(axis), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("fn", ["softmax", "log_softmax"])
def test_softmax_is_stable_for_large_inputs(fn):
  x = np.array([[1000.0, 1001.0, 1002.0], [-1000.0, -1000.0, -999.0], [0.0, 0.0, 0.0]], np.float32)
  expected = getattr(torch, fn)(torch.from_numpy(x), dim=-1)
  check_torch(getattr(Tensor(x), fn)(), expected, rtol=1e-5, atol=1e-6)


def test_softmax_of_int_tensor_is_float():
  x = np.array([[1, 2, 3], [0, 0, 5]], np.int32)
  expected = torch.softmax(torch.from_numpy(x).float(), dim=-1)
  check_torch(Tensor(x).softmax(), expected)


def test_softmax_on_non_contiguous_input():
  x = randn(5, 4, seed=4)
  check_torch(Tensor(x).T[:, ::-1].softmax(-1), torch.softmax(torch.from_numpy(x.T[:, ::-1].copy()), dim=-1))


# ---------------------------------------------------------------- movement ops

def _arange(*shape: int) -> np.ndarray: return np.arange(math.prod(shape), dtype=np.float32).reshape(shape)


MOVEMENT = [
  ("reshape", lambda t: t.reshape(6, 4), lambda x: x.reshape(6, 4)),
  ("reshape_tuple", lambda t: t.reshape((4, 6)), lambda x: x.reshape(4, 6)),
  ("reshape_-1", lambda t: t.reshape(-1, 3), lambda x: x.reshape(-1, 3)),
  ("reshape_-1_mid", lambda t: t.reshape(2, -1, 2), lambda x: x.reshape(2, -1, 2)),
  ("reshape_flat", lambda t: t.reshape(-1), lambda x: x.reshape(-1)),
  ("reshape_ones", lambda t: t.reshape(1, 2, 1, 12, 1), lambda x: x.reshape(1, 2, 1, 12, 1)),
  ("view", lambda t: t.view(3, 8), lambda x: x.reshape(3, 8)),
  ("permute", lambda t: t.permute(2, 0, 1), lambda x: x.transpose(2, 0, 1)),
  ("permute_tuple", lambda t: t.permute((1, 2, 0)), lambda x: x.transpose(1, 2, 0)),
  ("permute_neg", lambda t: t.permute(-1, -3, -2), lambda x: x.transpose(2, 0, 1)),
  ("transpose", lambda t: t.transpose(0, 2), lambda x: x.swapaxes(0, 2)),
  ("transpose_neg", lambda t: t.transpose(-1, -2), lambda x: x.swapaxes(-1, -2)),
  ("T", lambda t: t.T, lambda x: x.T),
  ("expand", lambda t: t[:, :1, :].expand(2, 5, 4), lambda x: np.broadcast_to(x[:, :1, :], (2, 5, 4))),
  ("expand_newdims", lambda t: t.expand(3, 2, 3, 4), lambda x: np.broadcast_to(x, (3, 2, 3, 4))),
  ("expand_-1", lambda t: t[:1].expand(-1, 3, -1).expand(4, -1, -1, -1), lambda x: np.broadcast_to(x[:1], (4, 1, 3, 4))),
  ("broadcast_to", lambda t: t[:, :, :1].broadcast_to((2, 3, 7)), lambda x: np.broadcast_to(x[:, :, :1], (2, 3, 7))),
  ("shrink", lambda t: t.shrink(((0, 1), (1, 3), (2, 4))), lambda x: x[0:1, 1:3, 2:4]),
  ("shrink_none", lambda t: t.shrink((None, (1, 2), None)), lambda x: x[:, 1:2, :]),
  ("shrink_empty", lambda t: t.shrink(((1, 1), None, None)), lambda x: x[1:1]),
  ("flip0", lambda t: t.flip(0), lambda x: x[::-1]),
  ("flip_multi", lambda t: t.flip(0, 2), lambda x: x[::-1, :, ::-1]),
  ("flip_neg_tuple", lambda t: t.flip((-1, -2)), lambda x: x[:, ::-1, ::-1]),
  ("unsqueeze0", lambda t: t.unsqueeze(0), lambda x: x[None]),
  ("unsqueeze_end", lambda t: t.unsqueeze(3), lambda x: x[..., None]),
  ("unsqueeze_neg", lambda t: t.unsqueeze(-1), lambda x: x[..., None]),
  ("unsqueeze_neg_mid", lambda t: t.unsqueeze(-2), lambda x: x[:, :, None, :]),
  ("squeeze_all", lambda t: t[:1, :, None, :1].squeeze(), lambda x: x[:1, :, None, :1].squeeze()),
  ("squeeze_dim", lambda t: t[:1].squeeze(0), lambda x: x[0]),
  ("squeeze_noop", lambda t: t.squeeze(1), lambda x: x),
  ("flatten", lambda t: t.flatten(), lambda x: x.reshape(-1)),
  ("flatten_1", lambda t: t.flatten(1), lambda x: x.reshape(2, 12)),
  ("flatten_0_1", lambda t: t.flatten(0, 1), lambda x: x.reshape(6, 4)),
  ("flatten_neg", lambda t: t.flatten(-2, -1), lambda x: x.reshape(2, 12)),
  ("pad_pairs", lambda t: t.pad(((1, 0), (0, 2), (3, 1))), lambda x: np.pad(x, ((1, 0), (0, 2), (3, 1)))),
  ("pad_none", lambda t: t.pad((None, (1, 1), None)), lambda x: np.pad(x, ((0, 0), (1, 1), (0, 0)))),
  ("pad_value", lambda t: t.pad(((0, 1), (2, 0), (1, 1)), value=-7.5), lambda x: np.pad(x, ((0, 1), (2, 0), (1, 1)), constant_values=-7.5)),
  ("pad_zero", lambda t: t.pad(((0, 0), (0, 0), (0, 0))), lambda x: x),
  ("permute_reshape", lambda t: t.permute(1, 0, 2).reshape(3, 8), lambda x: x.transpose(1, 0, 2).reshape(3, 8)),
  ("T_reshape_T", lambda t: t.T.reshape(8, 3).T, lambda x: x.T.reshape(8, 3).T),
  ("flip_pad_shrink", lambda t: t.flip(1).pad(((1, 1), (2, 2), (0, 0))).shrink(((0, 3), (1, 6), (1, 3))),
   lambda x: np.pad(x[:, ::-1], ((1, 1), (2, 2), (0, 0)))[0:3, 1:6, 1:3]),
  ("expand_permute_reshape", lambda t: t[:, None].expand(2, 2, 3, 4).permute(3, 1, 0, 2).reshape(8, 6),
   lambda x: np.broadcast_to(x[:, None], (2, 2, 3, 4)).transpose(3, 1, 0, 2).reshape(8, 6)),
  ("pad_reshape", lambda t: t.pad(((0, 0), (1, 0), (0, 0))).reshape(2, 16), lambda x: np.pad(x, ((0, 0), (1, 0), (0, 0))).reshape(2, 16)),
  ("shrink_reshape_permute", lambda t: t.shrink((None, (1, 3), None)).reshape(4, 4).T, lambda x: x[:, 1:3].reshape(4, 4).T),
]


@pytest.mark.parametrize("name, fn, npfn", MOVEMENT, ids=[m[0] for m in MOVEMENT])
def test_movement(name, fn, npfn):
  x = _arange(2, 3, 4)
  out = fn(Tensor(x))
  expected = npfn(x)
  check(out, expected, dtype=dtypes.float32)


@pytest.mark.parametrize("name, fn, npfn", MOVEMENT, ids=[m[0] for m in MOVEMENT])
def test_movement_on_computed_input(name, fn, npfn):
  """The same views applied to the result of a computation rather than to a buffer (they fuse into its kernel)."""
  x = _arange(2, 3, 4)
  check(fn(Tensor(x) * 0.5 - 1), npfn(x * 0.5 - 1))


@pytest.mark.parametrize("name, fn, npfn", MOVEMENT[:20], ids=[m[0] for m in MOVEMENT[:20]])
def test_movement_int_and_bool(name, fn, npfn):
  x = np.arange(24, dtype=np.int32).reshape(2, 3, 4) - 10
  check(fn(Tensor(x)), npfn(x), dtype=dtypes.int32)
  b = x % 3 == 0
  check(fn(Tensor(b)), npfn(b), dtype=dtypes.bool)


@pytest.mark.parametrize("flat, value", [((1, 2), 0.0), ((1, 2, 0, 1), 0.0), ((0, 1, 2, 0, 1, 1), 3.5), ((2, 0), -1.0),
                                         ((-1, 1), 0.0), ((1, -2, -1, 0), 2.0), ((0, 0, 1, 1), 0.0)])
def test_pad_flat_form_matches_torch(flat, value):
  x = randn(2, 3, 4, seed=5)
  check_torch(Tensor(x).pad(flat, value=value), F.pad(torch.from_numpy(x), flat, value=value))


@pytest.mark.parametrize("pairs", [((-1, 0), (0, 0)), ((1, -1), (-2, 3)), ((0, 0), (-1, -1))])
def test_pad_negative_pairs_crop(pairs):
  x = randn(3, 5, seed=6)
  flat = tuple(v for pr in reversed(pairs) for v in pr)
  check_torch(Tensor(x).pad(pairs), F.pad(torch.from_numpy(x), flat))


@pytest.mark.parametrize("value", [0.0, 2.0])
def test_pad_then_op_vs_op_then_pad(value):
  """Padding applies to values: pad(x).exp() has exp(value) in the pad, exp(x).pad() has `value` there."""
  x = randn(3, 4, seed=8)
  pairs = ((1, 2), (2, 1))
  check(Tensor(x).pad(pairs, value=value).exp(), np.exp(np.pad(x, pairs, constant_values=value)))
  check(Tensor(x).exp().pad(pairs, value=value), np.pad(np.exp(x), pairs, constant_values=value))
  # the padded area of pad(x).exp() is exp(0) == 1 for value 0
  if value == 0.0: assert Tensor(x).pad(pairs).exp().numpy()[0, 0] == 1.0
  with np.errstate(divide="ignore", invalid="ignore"):
    expected = np.exp(np.log(np.pad(x, pairs, constant_values=value).astype(np.float64))).astype(np.float32)
  check(Tensor(x).pad(pairs, value=value).log().exp(), expected)   # NaN for x < 0, and log(0) = -inf -> 0 in a zero pad
  check((Tensor(x).pad(pairs, value=value) + 1).sum(0), (np.pad(x, pairs, constant_values=value) + 1).sum(0), atol=1e-5)
  check(Tensor(x).pad(pairs, value=value).sigmoid().pad(((1, 0), (0, 1)), value=-1.0),
        np.pad(1 / (1 + np.exp(-np.pad(x, pairs, constant_values=value))), ((1, 0), (0, 1)), constant_values=-1.0))


def test_pad_of_computed_value():
  x, y = randn(3, 4, seed=1), randn(3, 4, seed=2)
  t = (Tensor(x) + Tensor(y)).pad(((1, 1), (1, 1))) * Tensor(np.ones((5, 6), np.float32) * 2)
  check(t, np.pad(x + y, ((1, 1), (1, 1))) * 2)
  # pad of a reduction
  check(Tensor(x).sum(1).pad(((2, 1),), value=9.0), np.pad(x.sum(1), (2, 1), constant_values=9.0), atol=1e-5)


def test_pad_int_and_bool():
  x = np.arange(6, dtype=np.int32).reshape(2, 3)
  check(Tensor(x).pad(((1, 0), (0, 1)), value=-4), np.pad(x, ((1, 0), (0, 1)), constant_values=-4), dtype=dtypes.int32)
  b = x % 2 == 0
  check(Tensor(b).pad(((1, 1), (0, 0))), np.pad(b, ((1, 1), (0, 0))), dtype=dtypes.bool)


def test_random_movement_chains_vs_numpy():
  """Seeded random chains of movement ops on (a transposed view of) a tensor, each compared with numpy."""
  rng = np.random.default_rng(2024)
  for trial in range(25):
    x = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4) + 1
    t, a = Tensor(x), x
    if trial % 2: t, a = t.permute(2, 0, 1), a.transpose(2, 0, 1)
    for _ in range(4):
      op = rng.choice(["permute", "reshape", "flip", "pad", "shrink", "expand", "slice"])
      if op == "permute":
        order = tuple(int(i) for i in rng.permutation(a.ndim))
        t, a = t.permute(order), a.transpose(order)
      elif op == "reshape" and a.size:
        shape = [int(s) for s in a.shape]
        if len(shape) >= 2 and rng.random() < 0.5: new = (shape[0] * shape[1],) + tuple(shape[2:])
        else: new = tuple(shape) + (1,)
        t, a = t.reshape(new), a.reshape(new)
      elif op == "flip":
        ax = int(rng.integers(a.ndim))
        t, a = t.flip(ax), np.flip(a, ax)
      elif op == "pad" and a.size < 500:
        pairs = tuple((int(rng.integers(0, 3)), int(rng.integers(0, 3))) for _ in range(a.ndim))
        t, a = t.pad(pairs), np.pad(a, pairs)
      elif op == "shrink":
        bounds = []
        for s in a.shape:
          lo = int(rng.integers(0, s)) if s else 0
          bounds.append((lo, int(rng.integers(lo + 1, s + 1)) if s else 0))
        t, a = t.shrink(tuple(bounds)), a[tuple(slice(lo, hi) for lo, hi in bounds)]
      elif op == "expand" and 1 in a.shape and a.size < 200:
        new = tuple(3 if s == 1 else int(s) for s in a.shape)
        t, a = t.expand(new), np.broadcast_to(a, new)
      elif op == "slice":
        idx = tuple(slice(None, None, int(rng.choice([-2, -1, 1, 2]))) for _ in range(a.ndim))
        t, a = t[idx], a[idx]
    check(t, np.ascontiguousarray(a))
    if a.size: check(t.sum(), np.sum(a, dtype=np.float64), rtol=1e-6)


# ---------------------------------------------------------------- indexing

INDICES = [
  1, -1, 0, slice(1, 3), slice(None, None, 2), slice(None, None, -1), slice(None, None, -2), slice(1, -1, 3),
  slice(-2, None), slice(3, 1), slice(10, 20), slice(-100, 100), None, Ellipsis,
  (1, 2), (1, 2, 3), (-1, -1, -1), (slice(None), 1), (Ellipsis, 1), (Ellipsis, slice(None, None, -1), None),
  (None, 1, None, slice(1, 4)), (slice(None), None, 2), (0, Ellipsis, 0), (slice(None, None, -3), slice(4, 0, -2), slice(None, 5, 2)),
  (1, slice(None), slice(None, None, -1)), (None, None), (slice(3, None, -1), 0), (Ellipsis, None), (Ellipsis, 2, slice(1, 2)),
]


@pytest.mark.parametrize("idx", INDICES, ids=[repr(i) for i in INDICES])
def test_getitem_matches_numpy(idx):
  x = _arange(4, 5, 6)
  check(Tensor(x)[idx], x[idx])


@pytest.mark.parametrize("idx", INDICES, ids=[repr(i) for i in INDICES])
def test_getitem_on_non_contiguous(idx):
  x = _arange(6, 5, 4)
  base = x.transpose(2, 1, 0)[:, :, ::-1]   # (4, 5, 6), non-contiguous and flipped
  t = Tensor(x).permute(2, 1, 0).flip(2)
  check(t[idx], base[idx])
  padded = np.pad(x.transpose(2, 1, 0), ((0, 0), (0, 0), (1, 1)), constant_values=-1)[:, :, 1:7]   # shape (4, 5, 6)
  tp = Tensor(x).permute(2, 1, 0).pad(((0, 0), (0, 0), (1, 1)), value=-1.0).shrink((None, None, (1, 7)))
  check(tp[idx], padded[idx])


def test_getitem_0d_result_and_item():
  x = _arange(3, 4)
  t = Tensor(x)[2, -1]
  assert t.shape == () and t.item() == x[2, -1]
  assert Tensor(x)[1].tolist() == x[1].tolist()
  assert Tensor(x)[..., 0][-1].item() == 8.0


def test_getitem_chained_and_then_compute():
  x = _arange(6, 8)
  t = Tensor(x)[1:5][:, ::-3][::2]
  e = x[1:5][:, ::-3][::2]
  check(t, e)
  check(t.exp().sum(0), np.exp(e.astype(np.float64)).sum(0), rtol=1e-5)
  check(Tensor(x)[::2] + Tensor(x)[1::2], x[::2] + x[1::2])


def test_getitem_of_computed_tensor():
  x, y = randn(4, 5, seed=1), randn(5, seed=2)
  check((Tensor(x) * Tensor(y))[::-1, 2:], (x * y)[::-1, 2:])
  check(Tensor(x).sum(0)[1:4], x.sum(0)[1:4], atol=1e-6)
  check(Tensor(x).T[3], x.T[3])


def test_getitem_numpy_int_index():
  x = _arange(4, 3)
  check(Tensor(x)[np.int64(2)], x[2])


# ---------------------------------------------------------------- matmul

MATMUL_SHAPES = [((3, 4), (4, 5)), ((1, 1), (1, 1)), ((4,), (4, 5)), ((3, 4), (4,)), ((4,), (4,)), ((2, 3, 4), (2, 4, 5)),
                 ((2, 3, 4), (4, 5)), ((3, 4), (2, 4, 5)), ((2, 1, 3, 4), (5, 4, 2)), ((7,), (3, 7, 2)), ((2, 3, 7), (7,)),
                 ((17, 33), (33, 9)), ((64, 64), (64, 64)), ((3, 0), (0, 4)), ((0, 3), (3, 2))]


@pytest.mark.parametrize("sa, sb", MATMUL_SHAPES, ids=[f"{a}@{b}" for a, b in MATMUL_SHAPES])
def test_matmul_matches_numpy(sa, sb):
  a, b = randn(*sa, seed=1), randn(*sb, seed=2)
  expected = np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(np.float32)
  check(Tensor(a) @ Tensor(b), expected, rtol=1e-5, atol=1e-5, dtype=dtypes.float32)
  if a.ndim >= 1 and b.ndim >= 1: check(Tensor(a).matmul(Tensor(b)), expected, rtol=1e-5, atol=1e-5)


def test_matmul_non_contiguous_operands():
  a, b = randn(5, 3, seed=3), randn(4, 5, seed=4)
  check(Tensor(a).T @ Tensor(b).T, a.T @ b.T, rtol=1e-5, atol=1e-5)
  check(Tensor(a)[::-1, :2].T @ Tensor(b)[::2, ::-1].T, a[::-1, :2].T @ b[::2, ::-1].T, rtol=1e-5, atol=1e-5)
  col = randn(3, 1, seed=5)
  check(Tensor(col).expand(3, 6).T @ Tensor(a).T, np.broadcast_to(col, (3, 6)).T @ a.T, rtol=1e-5, atol=1e-5)
  check(Tensor(a).pad(((1, 0), (0, 2))) @ Tensor(randn(5, 2, seed=6)), np.pad(a, ((1, 0), (0, 2))) @ randn(5, 2, seed=6), rtol=1e-5, atol=1e-5)


def test_matmul_of_computed_operands_and_chain():
  a, b, c = randn(4, 6, seed=1), randn(6, 5, seed=2), randn(5, 3, seed=3)
  t = (Tensor(a).relu() @ (Tensor(b) * 2)) @ Tensor(c) + 1
  check(t, (np.maximum(a, 0) @ (b * 2)) @ c + 1, rtol=1e-4, atol=1e-5)
  check(Tensor(a).dot(Tensor(b)), a @ b, rtol=1e-5, atol=1e-5)
  check(Tensor(a).linear(Tensor(b), Tensor(c[:, 0])), a @ b + c[:, 0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("da, db", [(np.float64, np.float64), (np.float32, np.float64), (np.int64, np.int64), (np.float32, np.int32)])
def test_matmul_dtypes_match_torch(da, db):
  a, b = randint(3, 4, seed=1).astype(da), randint(4, 2, seed=2).astype(db)
  pa, pb = torch.from_numpy(a), torch.from_numpy(b)
  dt = torch.promote_types(pa.dtype, pb.dtype)   # torch's matmul wants equal dtypes; minigrad promotes like `*`
  check_torch(Tensor(a) @ Tensor(b), pa.to(dt) @ pb.to(dt))


def test_matmul_int32_dtype_matches_torch():
  a, b = randint(3, 4, seed=1), randint(4, 2, seed=2)
  check_torch(Tensor(a) @ Tensor(b), torch.from_numpy(a) @ torch.from_numpy(b))


# ---------------------------------------------------------------- realize semantics

def test_numpy_item_tolist():
  x = randn(2, 3)
  t = Tensor(x) + 1
  out = t.numpy()
  assert isinstance(out, np.ndarray) and out.dtype == np.float32 and out.shape == (2, 3)
  np.testing.assert_allclose(out, x + 1, rtol=1e-6)
  assert t.tolist() == (x + 1).tolist()
  assert isinstance(t.tolist()[0][0], float)
  s = t.sum()
  assert isinstance(s.item(), float) and s.item() == pytest.approx(float((x + 1).sum()), rel=1e-5)
  assert Tensor([[7]]).item() == 7 and type(Tensor([[7]]).item()) is int
  assert type((Tensor([1.0]) > 0).item()) is bool
  assert Tensor([1, 2]).tolist() == [1, 2] and Tensor(3.0).tolist() == 3.0


def test_numpy_result_does_not_alias_tensor():
  for t in [Tensor([1.0, 2.0, 3.0]), Tensor([1.0, 2.0, 3.0]) * 1, Tensor([1.0, 2.0, 3.0]).realize()]:
    out = t.numpy()
    out[0] = 100.0
    check(t, np.array([1.0, 2.0, 3.0], np.float32))
    check(t + 0, np.array([1.0, 2.0, 3.0], np.float32))


def test_realize_returns_self_and_keeps_values():
  x = randn(3, 4)
  t = Tensor(x).exp()
  assert t.realize() is t
  check(t, np.exp(x))
  t.realize()   # realizing twice is fine
  check(t, np.exp(x))
  check(t.realize(), np.exp(x))


def test_realize_multiple_tensors_at_once():
  x = randn(3, 4)
  base = Tensor(x) * 2
  a, b, c = base + 1, base.sum(1), base.T[::-1]
  out = Tensor.realize(a, b, c)
  assert out is a
  check(a, x * 2 + 1)
  check(b, (x * 2).sum(1), atol=1e-5)
  check(c, (x * 2).T[::-1])
  a.realize(b)
  check(a, x * 2 + 1)


def test_realized_tensor_used_in_new_expressions():
  x, y = randn(4, 5, seed=1), randn(4, 5, seed=2)
  a = (Tensor(x) + Tensor(y)).realize()
  b = a * 3
  c = a.T @ a
  d = a[1:, ::2].sum(0)
  check(b, (x + y) * 3)
  check(c, (x + y).T @ (x + y), rtol=1e-5, atol=1e-5)
  check(d, (x + y)[1:, ::2].sum(0), atol=1e-5)
  check(a, x + y)   # still unchanged after being reused
  # and the derived tensors realize again on top of it
  e = (b.realize() + c.sum()).realize()
  check(e, (x + y) * 3 + ((x + y).T @ (x + y)).sum(), rtol=1e-5, atol=1e-4)


def test_shared_subexpression_used_twice():
  x = randn(5)
  a = Tensor(x).exp()
  b, c = a + 1, a * 2
  check(b - c, (np.exp(x) + 1) - np.exp(x) * 2, atol=1e-6)
  check(a, np.exp(x))


def test_lazy_view_of_realized_tensor_sees_old_values_not_later_ones():
  x = randn(2, 3)
  t = Tensor(x)
  v = t.T
  t.realize()
  check(v, x.T)
  t2 = (t * 0).realize()
  check(t, x)
  check(t2, np.zeros((2, 3), np.float32))


def test_detach_and_contiguous():
  x = randn(3, 4)
  t = Tensor(x).T
  check(t.contiguous(), x.T)
  check(t.detach(), x.T)
  c = Tensor(x)
  assert c.contiguous() is c


def test_schedule_lists_kernels_without_running():
  t = Tensor(randn(3)) + 1
  items = t.schedule()
  assert isinstance(items, list) and len(items) >= 1


# ---------------------------------------------------------------- long chains

def test_sum_of_300_tensors_in_a_loop():
  arrays = [randn(8, seed=i) for i in range(300)]
  acc = Tensor.zeros(8)
  for a in arrays: acc = acc + Tensor(a)
  check(acc, np.sum(np.stack(arrays).astype(np.float64), axis=0).astype(np.float32), rtol=1e-4, atol=1e-4)


def test_long_chain_of_unary_and_binary_ops():
  x = randn(16)
  t, e = Tensor(x), x.astype(np.float64)
  for i in range(1000):
    t = t * 0.999 + 0.001 if i % 2 else (t + 0.5).relu() - 0.5
    e = e * 0.999 + 0.001 if i % 2 else np.maximum(e + 0.5, 0) - 0.5
  check(t, e.astype(np.float32), rtol=1e-4, atol=1e-5)


def test_long_chain_of_movement_ops():
  x = _arange(4, 6)
  t, e = Tensor(x), x
  for _ in range(200):
    t, e = t.T.flip(0), e.T[::-1]
    t, e = t.reshape(-1).reshape(e.shape), e.reshape(-1).reshape(e.shape)
  check(t, e)


def test_long_chain_with_intermediate_realizes():
  t = Tensor.ones(4)
  for i in range(50):
    t = (t + 1).realize() if i % 10 == 0 else t + 1
  check(t, np.full(4, 51.0, np.float32))
