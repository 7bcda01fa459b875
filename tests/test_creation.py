"""Tensor creation vs torch (arange, linspace, eye, full/zeros/ones/*_like, empty, tril/triu) and the in-kernel
counter-based random generator: determinism, statistics (moments, chi-square, Kolmogorov-Smirnov), independence
of elements and of consecutive calls, integer ranges, and torch's initializer formulas.
"""
from __future__ import annotations
import math
import numpy as np
import pytest
import torch
from minigrad import Tensor, dtypes
from minigrad.dtype import DTypeError, to_dtype, from_numpy as dtype_of_numpy

# ---------------------------------------------------------------- deterministic creation

ARANGE_CASES = [(5,), (-3, 7), (10, 0, -3), (0, 10, 3), (0.5, 5.2, 0.7), (1, 2.5, 0.25), (0, 1, 0.1), (-2.5, 3, 0.3), (0,), (3, 3), (0, 1e4, 1)]


@pytest.mark.parametrize("args", ARANGE_CASES)
def test_arange_matches_torch(args):
  got, expected = Tensor.arange(*args), torch.arange(*args)
  assert got.shape == tuple(expected.shape)
  if expected.dtype.is_floating_point:
    assert got.dtype == dtypes.float32
    # torch forms start + i*step in double; minigrad in float32 (tensor.py), so allow one float32 ulp
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1.2e-7, atol=1.2e-7)
  else:
    assert got.dtype == dtypes.default_int   # torch: int64; minigrad follows tinygrad's default int
    np.testing.assert_array_equal(got.numpy(), expected.numpy())


def test_arange_dtypes():
  for dt in ("int8", "int64", "float16", "bfloat16", "float64", "uint8"):
    got = Tensor.arange(1, 9, 2, dtype=dt)
    assert got.dtype == to_dtype(dt)
    np.testing.assert_array_equal(got.numpy().astype(np.float64), torch.arange(1, 9, 2, dtype=getattr(torch, dt)).double().numpy())


LINSPACE_CASES = [(0, 1, 5, None), (-3, 10, 7, "int64"), (-1.3, 2.7, 50, None), (0, 10, 4, "int32"), (3, 5, 1, None), (0, 1, 0, None),
                  (0, 1, 9, "float16"), (0, 1, 9, "bfloat16"), (1e-3, 1e3, 13, "float64"), (5, -5, 11, None), (-7, 7, 2, "int8"), (0, 1, 1000, None)]


@pytest.mark.parametrize("start, end, steps, dtype", LINSPACE_CASES)
def test_linspace_matches_torch(start, end, steps, dtype):
  got = Tensor.linspace(start, end, steps, dtype=dtype)
  expected = torch.linspace(start, end, steps, dtype=getattr(torch, dtype) if dtype else None)
  assert got.shape == (steps,) and got.dtype == (to_dtype(dtype) if dtype else dtypes.float32)
  # both ends exact; inside, one ulp (minigrad may fuse the multiply-add)
  np.testing.assert_allclose(got.numpy().astype(np.float64), expected.double().numpy(), rtol=1.2e-7 if dtype != "float64" else 1e-15, atol=1e-7)
  if steps: assert got.numpy()[0] == expected.double().numpy()[0] and got.numpy()[-1] == expected.double().numpy()[-1]


def test_linspace_errors():
  with pytest.raises(RuntimeError, match="non-negative"): Tensor.linspace(0, 1, -1)
  with pytest.raises(TypeError): Tensor.linspace(0, 1, 2.5)


@pytest.mark.parametrize("n, m, dtype", [(3, None, None), (2, 5, "int32"), (4, 1, "bool"), (0, 3, None), (1, 1, "float16")])
def test_eye_matches_torch(n, m, dtype):
  expected = torch.eye(n, m if m is not None else n, dtype=getattr(torch, dtype) if dtype else None)
  got = Tensor.eye(n, m, dtype=dtype)
  assert got.dtype == (to_dtype(dtype) if dtype else dtypes.float32)
  np.testing.assert_array_equal(got.numpy(), expected.float().numpy() if dtype == "float16" else expected.numpy())
  with pytest.raises(RuntimeError): Tensor.eye(-1)


def test_full_zeros_ones_and_like_match_torch():
  base = Tensor(np.zeros((2, 3), np.int16))
  cases = [(Tensor.full((2, 3), 7), torch.full((2, 3), 7, dtype=torch.int32)), (Tensor.full((2,), 2.5, dtype="float16"), torch.full((2,), 2.5, dtype=torch.float16)),
           (Tensor.full((), True), torch.full((), True)), (Tensor.zeros(2, 0), torch.zeros(2, 0)), (Tensor.ones((3,), dtype="bfloat16"), torch.ones(3, dtype=torch.bfloat16)),
           (base.full_like(-4), torch.full((2, 3), -4, dtype=torch.int16)), (base.zeros_like(), torch.zeros(2, 3, dtype=torch.int16)),
           (base.ones_like(dtype="float64"), torch.ones(2, 3, dtype=torch.float64)), (base.full_like(2.7), torch.full_like(torch.zeros(2, 3, dtype=torch.int16), 2.7)),
           (Tensor.full((2,), 300, dtype="uint8"), torch.tensor([44, 44], dtype=torch.uint8))]
  for got, expected in cases:
    assert got.shape == tuple(expected.shape) and got.dtype == to_dtype(str(expected.dtype)[6:])
    np.testing.assert_array_equal(got.numpy().astype(np.float64), expected.double().numpy())


def test_empty_and_empty_like():
  e = Tensor.empty(3, 4, dtype="int8")
  assert e.shape == (3, 4) and e.dtype == dtypes.int8 and e.numpy().shape == (3, 4)
  like = Tensor([[1.5, 2.0]]).empty_like()
  assert like.shape == (1, 2) and like.dtype == dtypes.float32
  assert Tensor.empty(0).numpy().shape == (0,)


@pytest.mark.parametrize("shape", [(4, 4), (3, 5), (5, 2), (2, 3, 4), (2, 1, 3, 3), (0, 3), (3, 0)])
def test_tril_triu_match_torch(shape):
  x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) + 1
  for k in (-2, 0, 1):
    np.testing.assert_array_equal(Tensor(x).tril(k).numpy(), torch.from_numpy(x).tril(k).numpy())
    np.testing.assert_array_equal(Tensor(x).triu(k).numpy(), torch.from_numpy(x).triu(k).numpy())


def test_tril_triu_keep_dtype_work_on_views_and_differentiate():
  b = np.random.default_rng(0).integers(0, 2, (3, 4)).astype(bool)
  assert Tensor(b).tril().dtype == dtypes.bool
  np.testing.assert_array_equal(Tensor(b).triu(1).numpy(), torch.from_numpy(b).triu(1).numpy())
  i = np.arange(12, dtype=np.int64).reshape(3, 4)
  np.testing.assert_array_equal(Tensor(i).T.tril().numpy(), torch.from_numpy(i).T.tril().numpy())
  x = Tensor(np.ones((3, 3), np.float32), requires_grad=True)
  (x.triu(1) * Tensor(np.arange(9, dtype=np.float32).reshape(3, 3))).sum().backward()
  np.testing.assert_array_equal(x.grad.numpy(), np.triu(np.arange(9, dtype=np.float32).reshape(3, 3), 1))
  with pytest.raises(RuntimeError, match="at least 2 dimensions"): Tensor([1.0, 2.0]).tril()


# ---------------------------------------------------------------- the random generator

N = 200_000


def test_same_seed_same_numbers_and_calls_differ():
  Tensor.manual_seed(7)
  a, b, c = Tensor.rand(1000).numpy(), Tensor.randn(10).numpy(), Tensor.randint(50, high=1000).numpy()
  Tensor.manual_seed(7)
  np.testing.assert_array_equal(Tensor.rand(1000).numpy(), a)
  np.testing.assert_array_equal(Tensor.randn(10).numpy(), b)
  np.testing.assert_array_equal(Tensor.randint(50, high=1000).numpy(), c)
  Tensor.manual_seed(7)
  first, second = Tensor.rand(1000).numpy(), Tensor.rand(1000).numpy()
  assert not np.array_equal(first, second)
  Tensor.manual_seed(8)
  assert not np.array_equal(Tensor.rand(1000).numpy(), first)


def test_known_values_are_stable_across_runs_and_machines():
  """The generator is pure integer arithmetic on (seed, call counter, index): these numbers never change."""
  Tensor.manual_seed(1234)
  np.testing.assert_array_equal(Tensor.rand(4).numpy(), np.array([0.6229607462882996, 0.2103714942932129, 0.3875907063484192, 0.017340481281280518], np.float32))
  np.testing.assert_allclose(Tensor.randn(3).numpy(), [-0.16944018006324768, -1.0040769577026367, -0.6665967702865601], rtol=1e-6)
  np.testing.assert_array_equal(Tensor.randint(5, low=0, high=100).numpy(), [38, 31, 12, 6, 96])


def test_random_numbers_are_computed_in_the_kernel():
  """One kernel, whose only input is the small key buffer (3 uint32 words per stream; element indices come from an
  ARANGE leaf): no random data is made on the host."""
  Tensor.manual_seed(0)
  for t in (Tensor.rand(64, 64), Tensor.randn(100), Tensor.randint(10, high=5)):
    items = t.schedule()
    assert len(items) == 1 and len(items[0].bufs) == 2
    assert items[0].bufs[1].dtype == dtypes.uint32 and items[0].bufs[1].arg[1] in (3, 6)
  Tensor.rand(2, 2).realize()


def test_a_lazy_random_tensor_has_one_value_however_it_is_used():
  Tensor.manual_seed(3)
  r = Tensor.rand(100)
  a, b = (r + 1).numpy(), (r * 2).numpy()    # two separate kernels recompute r from the same key
  np.testing.assert_allclose(a - 1, b / 2, atol=1.2e-7)


def _chi_square(samples: np.ndarray, bins: int, low: float, high: float) -> float:
  counts, _ = np.histogram(samples, bins=bins, range=(low, high))
  expected = len(samples) / bins
  return float(((counts - expected) ** 2 / expected).sum())


CHI2_99_AT_0_001, KS_AT_0_001 = 148.23, 1.95   # chi-square critical value (99 dof) and the KS constant, p = 0.001


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_rand_is_uniform_on_zero_one(dtype):
  Tensor.manual_seed(11)
  x = Tensor.rand(N, dtype=dtype)
  assert x.dtype == to_dtype(dtype)
  v = x.numpy().astype(np.float64)
  assert v.min() >= 0.0 and v.max() < 1.0
  assert abs(v.mean() - 0.5) < 0.004 and abs(v.var() - 1 / 12) < 0.002
  bins = 100 if dtype in ("float32", "float64") else 64    # half-type draws are multiples of 2**-11 / 2**-8: bins must align
  assert _chi_square(v, bins, 0.0, 1.0) < (CHI2_99_AT_0_001 if bins == 100 else 103.4)
  if dtype in ("float32", "float64"):
    ecdf_gap = np.abs(np.sort(v) - (np.arange(N) + 0.5) / N).max()
    assert ecdf_gap * math.sqrt(N) < KS_AT_0_001


def test_random_streams_are_independent():
  Tensor.manual_seed(5)
  a, b = Tensor.rand(N).numpy().astype(np.float64), Tensor.rand(N).numpy().astype(np.float64)
  limit = 4 / math.sqrt(N)   # ~4 standard errors of a correlation coefficient
  assert abs(np.corrcoef(a, b)[0, 1]) < limit                # consecutive calls
  assert abs(np.corrcoef(a[:-1], a[1:])[0, 1]) < limit       # neighbouring elements
  assert abs(np.corrcoef(a[::2], a[1::2])[0, 1]) < limit     # even vs odd indices
  pairs = (np.floor(a[:-1] * 10) * 10 + np.floor(a[1:] * 10)).astype(int)   # joint distribution of neighbours
  counts = np.bincount(pairs, minlength=100)
  assert (((counts - len(pairs) / 100) ** 2) / (len(pairs) / 100)).sum() < CHI2_99_AT_0_001
  Tensor.manual_seed(6)
  assert abs(np.corrcoef(a, Tensor.rand(N).numpy())[0, 1]) < limit   # other seed


def test_randn_is_standard_normal():
  Tensor.manual_seed(21)
  z = Tensor.randn(N).numpy().astype(np.float64)
  assert z.dtype == np.float64 and np.isfinite(z).all()
  assert abs(z.mean()) < 0.01 and abs(z.std() - 1) < 0.01
  assert abs((z ** 3).mean()) < 0.03 and abs((z ** 4).mean() - 3) < 0.06           # skewness, kurtosis
  assert abs((np.abs(z) < 1).mean() - 0.682689) < 0.005 and abs((np.abs(z) < 2).mean() - 0.954500) < 0.003
  cdf = np.array([0.5 * (1 + math.erf(v / math.sqrt(2))) for v in np.sort(z[:20000])])
  assert np.abs(cdf - (np.arange(20000) + 0.5) / 20000).max() * math.sqrt(20000) < KS_AT_0_001
  for dtype in ("float64", "float16", "bfloat16"):
    w = Tensor.randn(20000, dtype=dtype)
    assert w.dtype == to_dtype(dtype)
    values = w.numpy().astype(np.float64)
    assert abs(values.mean()) < 0.03 and abs(values.std() - 1) < 0.03


def test_randint_range_and_uniformity():
  Tensor.manual_seed(31)
  r = Tensor.randint(N, low=-5, high=5)
  assert r.dtype == dtypes.int32
  v = r.numpy()
  assert v.min() == -5 and v.max() == 4
  counts = np.bincount(v + 5, minlength=10)
  assert (((counts - N / 10) ** 2) / (N / 10)).sum() < 27.88   # chi-square, 9 dof, p = 0.001
  big = Tensor.randint(1000, low=0, high=2 ** 32, dtype="int64").numpy()
  assert big.min() >= 0 and big.max() < 2 ** 32 and big.max() > 2 ** 31
  assert Tensor.randint(3, 4, high=2, dtype="uint8").dtype == dtypes.uint8
  with pytest.raises(RuntimeError, match="from"): Tensor.randint(3, low=5, high=5)
  with pytest.raises(RuntimeError, match=dtypes.int8.name): Tensor.randint(3, low=0, high=1000, dtype="int8")


def test_uniform_and_normal_parameters():
  Tensor.manual_seed(41)
  u = Tensor.uniform(N, low=-2.0, high=3.0).numpy()
  assert u.min() >= -2.0 and u.max() < 3.0 and abs(u.mean() - 0.5) < 0.02 and abs(u.var() - 25 / 12) < 0.03
  n = Tensor.normal(N, mean=3.0, std=0.5).numpy()
  assert abs(n.mean() - 3.0) < 0.01 and abs(n.std() - 0.5) < 0.005


@pytest.mark.parametrize("shape", [(64, 32), (16, 8, 3, 3)])
def test_initializers_follow_torch_formulas(shape):
  Tensor.manual_seed(51)
  fan_in, fan_out = shape[1] * int(np.prod(shape[2:])), shape[0] * int(np.prod(shape[2:]))
  ku = Tensor.kaiming_uniform(*shape, a=math.sqrt(5)).numpy()
  bound = math.sqrt(3) * math.sqrt(2 / (1 + 5)) / math.sqrt(fan_in)    # torch's default nn.Linear init
  assert np.abs(ku).max() <= bound and np.abs(ku).max() > 0.95 * bound and abs(ku.std() - bound / math.sqrt(3)) < 0.1 * bound
  kn = Tensor.kaiming_normal(*shape, mode="fan_out", nonlinearity="relu").numpy()
  assert abs(kn.std() - math.sqrt(2) / math.sqrt(fan_out)) < 0.1 * math.sqrt(2) / math.sqrt(fan_out)
  gu = Tensor.glorot_uniform(*shape).numpy()
  g_bound = math.sqrt(6 / (fan_in + fan_out))
  assert np.abs(gu).max() <= g_bound and np.abs(gu).max() > 0.95 * g_bound
  xn = Tensor.xavier_normal(*shape, gain=2.0).numpy()
  assert abs(xn.std() - 2 * math.sqrt(2 / (fan_in + fan_out))) < 0.1 * 2 * math.sqrt(2 / (fan_in + fan_out))
  with pytest.raises(ValueError, match="fewer than 2"): Tensor.kaiming_uniform(5)


def test_random_creation_edge_cases_and_errors():
  assert Tensor.rand(0, 3).numpy().shape == (0, 3) and Tensor.randn(()).shape == ()
  assert 0 <= Tensor.rand().item() < 1
  t = Tensor.rand(3, requires_grad=True)
  assert t.requires_grad and t.is_leaf
  (t * 2).sum().backward()
  np.testing.assert_array_equal(t.grad.numpy(), [2, 2, 2])
  assert Tensor.rand_like(Tensor.zeros(2, 2, dtype="float16")).dtype == dtypes.float16
  assert Tensor.randn_like(Tensor.zeros(2, 2, dtype="int32")).dtype == dtypes.float32
  with pytest.raises(DTypeError, match="int"): Tensor.rand(3, dtype="int32")
  with pytest.raises(ValueError, match="negative"): Tensor.randn(3, -1)


def test_dropout_uses_the_generator():
  Tensor.manual_seed(61)
  with Tensor.train():
    kept = (Tensor.ones(N).dropout(0.25).numpy() != 0).mean()
  assert abs(kept - 0.75) < 0.005


# ---------------------------------------------------------------- Tensor.from_numpy: shared memory, as torch.from_numpy

def _shares_host_memory() -> bool:
  from minigrad.runtime.device import Device
  return Device.DEFAULT in ("CPU", "LLVM")


@pytest.mark.skipif(not _shares_host_memory(), reason="only devices with buffers in host memory share a numpy array's")
@pytest.mark.parametrize("npdt", [np.float32, np.float64, np.int32, np.int64, np.uint8, np.bool_])
def test_from_numpy_shares_memory_like_torch(npdt):
  array = (np.arange(24).reshape(2, 3, 4) % 5).astype(npdt)
  t, expected = Tensor.from_numpy(array), torch.from_numpy(array)
  assert t.shape == tuple(expected.shape) and t.dtype == dtype_of_numpy(array.dtype) and t.numpy().dtype == array.dtype
  np.testing.assert_array_equal(t.numpy(), array)
  array[1, 2, 3] = 1   # a change to the array shows in results computed afterwards, as in torch
  np.testing.assert_array_equal((t + t).numpy(), (expected + expected).numpy())
  np.testing.assert_array_equal(array.reshape(-1)[:5], (np.arange(5) % 5).astype(npdt))   # minigrad never wrote into it


@pytest.mark.skipif(not _shares_host_memory(), reason="only devices with buffers in host memory share a numpy array's")
def test_from_numpy_buffer_outlives_dropped_array_and_shared_twice():
  array = np.linspace(-1, 1, 1000, dtype=np.float32)
  first, second = Tensor.from_numpy(array), Tensor.from_numpy(array)   # two buffers at one address
  del array, first   # the tensor keeps the array's memory alive; freeing one buffer leaves the other
  np.testing.assert_allclose(second.exp().numpy(), np.exp(np.linspace(-1, 1, 1000, dtype=np.float32)), rtol=1e-6)
  zero_d = Tensor.from_numpy(np.full((), 2.5))
  assert zero_d.shape == () and zero_d.numpy() == 2.5
  assert Tensor.from_numpy(np.zeros((0, 3), np.float32)).sum(0).numpy().tolist() == [0, 0, 0]


@pytest.mark.skipif(not _shares_host_memory(), reason="only devices with buffers in host memory share a numpy array's")
def test_from_numpy_read_only_array_and_assign():
  array = np.frombuffer(np.arange(4, dtype=np.float32).tobytes(), dtype=np.float32)   # read-only
  t = Tensor.from_numpy(array)
  t.assign(t * 3 + 1)   # rebinds the tensor to new memory: the array is untouched
  np.testing.assert_array_equal(t.numpy(), [1, 4, 7, 10])
  np.testing.assert_array_equal(array, [0, 1, 2, 3])


def test_from_numpy_refuses_what_it_cant_share():
  array = np.arange(12, dtype=np.float32).reshape(3, 4)
  with pytest.raises(ValueError, match="C-contiguous"): Tensor.from_numpy(array.T)
  with pytest.raises(ValueError, match="byte order"): Tensor.from_numpy(array.astype(">f4"))
  with pytest.raises(TypeError, match="numpy array"): Tensor.from_numpy([1.0, 2.0])
  with pytest.raises(TypeError, match="not supported"): Tensor.from_numpy(np.zeros(3, np.complex64))
  with pytest.raises(RuntimeError, match="device PYTHON keeps buffers in its own memory"): Tensor.from_numpy(array, device="PYTHON")
