"""The fast paths of exp and softmax keep their accuracy: float32 exp (a fitted polynomial after Cody-Waite reduction)
over the whole float range, the exp softmax uses for x - max (no upper clamp, a constant split of 2**n), and
softmax/log_softmax on rows whose values underflow to subnormals or zero, with inf/NaN entries, against torch.
Also that a fused softmax multiplies by the reciprocal of the row sum rather than dividing every element.

Runs on whatever device DEV selects (CPU, LLVM, CL, PYTHON). The C renderer's prefetches are checked for hand-built
Targets (tests/cpu_targets.py), rendered but not run.
"""
from __future__ import annotations
import re
import numpy as np
import pytest
import torch
from minigrad import Tensor
from minigrad.uop.ops import Ops
from torch_compare import fuses_multiply_add

SPECIAL = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30, -1e-30, 0.5, -0.5, 1.0, -1.0, 88.72283, 88.72284, 88.7229, 89.0, 100.0,
           -87.33654, -87.34, -100.0, -103.27893, -103.97208, -103.98, -104.0, -104.5, -150.0, -1e30, 1e30]


def _float32_inputs(n: int, seed: int, low: float, high: float) -> np.ndarray:
  """Random bit patterns (every exponent, subnormals, inf, NaN), a uniform spread over [low, high] and the specials."""
  rng = np.random.default_rng(seed)
  bits = rng.integers(0, 2 ** 32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)
  return np.concatenate([bits, rng.uniform(low, high, n).astype(np.float32), np.array(SPECIAL, np.float32)])


def _ulps_from_reference(got: np.ndarray, x: np.ndarray) -> np.ndarray:
  """|got - exp(x)| in float32 ulps of the correctly rounded result (the subnormals' spacing 2**-149 below the
  normals); 0 where both are the same inf or both NaN, inf where only one is."""
  with np.errstate(over="ignore", invalid="ignore"):
    reference = np.exp(x.astype(np.float64))
    rounded = reference.astype(np.float32)
  same = (got == rounded) | (np.isnan(got) & np.isnan(rounded))
  spacing = np.spacing(np.maximum(np.abs(rounded), np.float32(2 ** -149))).astype(np.float64)
  with np.errstate(invalid="ignore"): error = np.abs(got.astype(np.float64) - reference) / spacing
  return np.where(same, 0.0, np.where(np.isfinite(got) & np.isfinite(rounded), error, np.inf))


def test_exp_float32_within_one_ulp_everywhere():
  x = _float32_inputs(100_000, seed=1, low=-110, high=90)
  error = _ulps_from_reference(Tensor(x).exp().numpy(), x)
  bound = 1.0 if fuses_multiply_add() else 1.2   # exp's documented error without FMA (minigrad/tensor/unary_ops.py)
  assert error.max() <= bound, f"{(error > bound).sum()} inputs off by more than {bound} ulp, e.g. {x[error > bound][:4]}"
  in_range = (x > -87) & (x < 88)
  assert error[in_range].mean() < 0.25   # mostly the correctly rounded float (the error's mean is 0.17 ulp)


def test_exp_special_values():
  x = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 89.0, 1e30, -104.0, -1e30, -103.972, -87.33654], np.float32)
  got = Tensor(x).exp().numpy()
  assert np.isposinf(got[0]) and got[1] == 0 and np.isnan(got[2]) and got[3] == 1 and got[4] == 1
  assert np.isposinf(got[5]) and np.isposinf(got[6]) and got[7] == 0 and got[8] == 0
  assert got[9] == np.float32(2 ** -149) and got[10] == np.exp(np.float64(x[10])).astype(np.float32)   # smallest subnormal, smallest-ish normal


def test_exp_of_nonpositive_values_used_by_softmax():
  x = -np.abs(_float32_inputs(100_000, seed=2, low=-110, high=0))
  error = _ulps_from_reference(Tensor(x)._exp_at_most_zero().numpy(), x)
  bound = 1.0 if fuses_multiply_add() else 1.2   # exp's documented error without FMA (minigrad/tensor/unary_ops.py)
  assert error.max() <= bound, f"{(error > bound).sum()} inputs off by more than {bound} ulp, e.g. {x[error > bound][:4]}"


def _torch_rows() -> np.ndarray:
  """Rows that underflow: spreads over 104 (results in the subnormals and zero), -inf entries, inf, NaN."""
  rng = np.random.default_rng(3)
  rows = rng.standard_normal((6, 48)).astype(np.float32) * 3
  rows[1, :] = np.linspace(-130, 0, 48)                    # exp of everything below -87.3 is subnormal or 0
  rows[2, ::3] = -np.inf
  rows[3, 5] = np.inf
  rows[4, 7] = np.nan
  rows[5, :] = -np.inf
  return rows


def _assert_close_to_torch(got: np.ndarray, expected: np.ndarray, rtol: float, atol: float) -> None:
  same = (got == expected) | (np.isnan(got) & np.isnan(expected))
  with np.errstate(invalid="ignore"): close = np.abs(got.astype(np.float64) - expected) <= rtol * np.abs(expected) + atol
  bad = ~(same | (close & np.isfinite(got)))
  assert not bad.any(), f"{bad.sum()} mismatches, e.g. got {got[bad][:4]} expected {expected[bad][:4]}"


@pytest.mark.parametrize("fn", ["softmax", "log_softmax"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_softmax_rows_that_underflow_match_torch(fn, dtype):
  x = _torch_rows().astype(dtype)
  expected = getattr(torch, fn)(torch.from_numpy(x), dim=-1).numpy()
  got = getattr(Tensor(x), fn)(-1).numpy()
  assert got.dtype == expected.dtype
  # log_softmax subtracts log(sum) (up to ~4 here): its error is absolute, a few ulp of that
  rtol, ulp_of_4 = (4e-7, 2.0 ** -21) if dtype == "float32" else (4e-15, 2.0 ** -50)   # a few ulp: exp, the sum's order
  _assert_close_to_torch(got, expected, rtol, atol=2 * ulp_of_4 if fn == "log_softmax" else 2.0 ** -148)


def test_softmax_subnormal_outputs_are_rounded_once():
  x = np.array([[0.0, -90.0, -100.0, -103.0, -103.9, -120.0]], np.float32)
  got = Tensor(x).softmax(-1).numpy()[0]
  expected = np.exp(x[0].astype(np.float64)) / np.exp(x[0].astype(np.float64)).sum()
  assert np.all(np.abs(got - expected) <= np.spacing(np.maximum(np.abs(expected.astype(np.float32)), np.float32(2 ** -149))) * 1.0), (got, expected)


def test_softmax_multiplies_by_the_reciprocal_of_the_sum():
  items = Tensor(np.zeros((8, 64), np.float32)).softmax(-1).schedule()   # one kernel on the CPU, more on GPU-shaped devices
  ops = [u.op for item in items for u in item.ast.toposort]
  assert ops.count(Ops.REDUCE_AXIS) == 2 and ops.count(Ops.RECIP) == 1 and Ops.FDIV not in ops


def _cpu_source(t: Tensor, target) -> str:
  """The C kernel function of `t`'s one kernel as the policy decides it for `target` (not compiled)."""
  from cpu_targets import body, decide, render
  (item,) = t.schedule()
  return body(render(decide(item.ast, target)))


@pytest.mark.parametrize("target_name", ["avx512", "avx2", "sse2"])
def test_softmax_prefetches_the_next_row_in_its_second_pass(target_name):
  from cpu_targets import TARGETS, float_lanes
  target = TARGETS[target_name]
  lanes = float_lanes(target)
  x = Tensor(np.zeros((64, 1024), np.float32), device="CPU")   # the C renderer's kernels, whatever DEV is
  body = _cpu_source(x.softmax(-1), target)
  passes = body.split("for (long ")[2:]   # the max pass, the sum pass, the output pass (after the outer loop)
  assert len(passes) == 3 and "__builtin_prefetch" not in passes[0] + passes[2]
  stride = int(re.search(r"gidx0\*(\d+)", passes[1]).group(1))   # 1024 floats per row, times the rows per outer trip
  prefetches = re.findall(r"__builtin_prefetch\(.*\+ (\d+)\);", passes[1])
  # per vector load (4 per row and trip, two rows), a trip ahead
  assert len(prefetches) == passes[1].count(f"float_v{lanes}_unaligned*") == 8 and set(prefetches) == {str(stride)}, passes[1]
  assert "__builtin_prefetch" not in _cpu_source(x.sum(1), target)                                     # a single pass streams
  long_rows = _cpu_source(Tensor(np.zeros((4, 8192), np.float32), device="CPU").softmax(-1), target)
  assert long_rows.count("for (long ") == 4 and f"float_v{lanes}" in long_rows and "__builtin_prefetch" not in long_rows   # 32 KB rows stream
