"""Matrix products and convolutions on the CPU through the paths the heuristics and the operand packing choose
(register tiles, packed panels, loop blocking), against numpy: odd sizes, transposed operands, batches, fused
epilogues, padded and strided convolutions. Also the C renderer's 64-bit index math (loop counters and int32
variables are `long`), which must still wrap int32 arithmetic as int32."""
import numpy as np
import pytest
from minigrad import Tensor, dtypes
from minigrad.engine.realize import get_kernel

rng = np.random.default_rng(7)


def arr(*shape: int) -> np.ndarray: return rng.standard_normal(shape).astype(np.float32)


def sources(t: Tensor) -> list[str]:
  return [get_kernel(item.ast, "CPU").source for item in t.schedule()]


# ---- 64-bit index math in C kernels ----

def test_loop_counters_are_64_bit():
  src = "".join(sources(Tensor(arr(64, 64), device="CPU") @ Tensor(arr(64, 64), device="CPU")))
  assert "for (long ridx0" in src and "for (int " not in src


def test_int32_arithmetic_still_wraps():
  x = np.array([0, 1, 7, 2**31 - 1, -2**31, 123456789, -5, 3] * 8, dtype=np.int32)
  tx = Tensor(x, device="CPU")
  position = np.arange(64, dtype=np.int32)
  with np.errstate(over="ignore"):
    np.testing.assert_array_equal((tx * 100000000 + Tensor.arange(64, dtype=dtypes.int32, device="CPU")).numpy(), x * np.int32(100000000) + position)
    np.testing.assert_array_equal((tx * 3 + 2**30).numpy(), x * np.int32(3) + np.int32(2**30))
    np.testing.assert_array_equal((-tx).numpy(), -x)
    # data times a (64-bit) position: the wrapped product, then ops that see the difference (division, float)
    # (7 elements: scalar code, not int vectors, which wrap anyway)
    wrapped = x[:7] * position[:7] * np.int32(50000000)
    product = Tensor(x[:7], device="CPU") * Tensor.arange(7, dtype=dtypes.int32, device="CPU") * 50000000
    np.testing.assert_array_equal((product // 7).numpy(), wrapped // 7)
    np.testing.assert_array_equal(product.float().numpy(), wrapped.astype(np.float32))
    np.testing.assert_array_equal(((tx * 65536) // 3).numpy(), (x * np.int32(65536)) // 3)   # floor division of the wrapped product
  # an int32 column broadcast against a vector of lanes (a 64-bit scalar is narrowed before it fills the lanes)
  col = Tensor(x[:4].reshape(4, 1), device="CPU")
  np.testing.assert_array_equal((col * Tensor(np.arange(16, dtype=np.int32), device="CPU")).numpy(), x[:4].reshape(4, 1) * np.arange(16, dtype=np.int32))
