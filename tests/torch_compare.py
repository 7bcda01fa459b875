"""Helpers shared by the op tests that compare minigrad with torch: seeded inputs and a value+dtype check."""
from __future__ import annotations
from typing import Any
import numpy as np
import torch
from minigrad import Tensor, dtypes

TORCH_TO_MG = {torch.float32: dtypes.float32, torch.float64: dtypes.float64, torch.float16: dtypes.float16,
               torch.int8: dtypes.int8, torch.int16: dtypes.int16, torch.int32: dtypes.int32, torch.int64: dtypes.int64,
               torch.uint8: dtypes.uint8, torch.bool: dtypes.bool}


def randn(*shape: int, seed: int = 0) -> np.ndarray:
  return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def randint(*shape: int, low: int = -3, high: int = 4, dtype: Any = np.int32, seed: int = 0) -> np.ndarray:
  return np.random.default_rng(seed).integers(low, high, shape).astype(dtype)


def assert_same(mine: Tensor, theirs: torch.Tensor, atol: float = 1e-4, rtol: float = 1e-4) -> None:
  """Same shape, same dtype (torch's), same values (exact for ints and bools, NaN where torch has NaN)."""
  assert mine.shape == tuple(theirs.shape), f"shape {mine.shape} != torch's {tuple(theirs.shape)}"
  assert mine.dtype == TORCH_TO_MG[theirs.dtype], f"dtype {mine.dtype} != torch's {theirs.dtype}"
  got, expected = mine.numpy(), theirs.detach().numpy()
  if expected.dtype.kind in "biu": np.testing.assert_array_equal(got, expected)
  else: np.testing.assert_allclose(got.astype(np.float64), expected.astype(np.float64), atol=atol, rtol=rtol, equal_nan=True)


def fuses_multiply_add() -> bool:
  """Does the device under test compute a*b+c with one rounding? Not the CPU devices compiling for an x86 Target
  without FMA (CPU_TARGET=x86-64: CPUs before 2013): there float32 exp and tanh are within 1.2 ulp rather than 1
  (minigrad/tensor/unary_ops.py)."""
  from minigrad.runtime.device import Device
  from minigrad.target import X86_ARCHS, cpu_target
  if Device.DEFAULT not in ("CPU", "LLVM"): return True
  target = cpu_target()
  return target.arch not in X86_ARCHS or "fma" in target.features
