"""Matrix products and convolutions on the CPU through the paths the heuristics and the operand packing choose
(register tiles, packed and prefetched panels, loop order), against numpy: odd sizes, transposed operands, batches,
fused epilogues, padded and strided convolutions, and a window's products added one fused multiply-add at a time.
Also the C renderer's 64-bit index math (loop counters and int32 variables are `long`), which must still wrap
int32 arithmetic as int32.

The numbers are computed on the host's own Target; which path a product takes (packing copies, tiles, prefetches) is
checked for hand-built Targets (tests/cpu_targets.py), rendered but not run."""
from __future__ import annotations
import re
import numpy as np
import pytest
from minigrad import Tensor, dtypes
from minigrad.codegen.linearizer import product_terms
from minigrad.engine.realize import get_kernel
from minigrad.schedule.packing import PACKED_DEVICES
from minigrad.uop.ops import UOp, Ops
from cpu_targets import AVX2, AVX512, NEON, SSE2, body, decide, float_lanes, pin_policy_target, render, tile_of

X86_TARGETS = [pytest.param(AVX512, id="avx512"), pytest.param(AVX2, id="avx2")]
ALL_TARGETS = X86_TARGETS + [pytest.param(SSE2, id="sse2"), pytest.param(NEON, id="neon")]

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


# ---- matrix products: packed and unpacked operands ----

def matmul_cases():
  a, b = arr(128, 512), arr(512, 512)
  big_t = arr(512, 512)
  batch, shared = arr(2, 64, 512), arr(512, 512)
  yield "packed", Tensor(a) @ Tensor(b), a @ b
  yield "transposed operand, few rows (dot products, no copy)", Tensor(a) @ Tensor(big_t).T, a @ big_t.T
  yield "packed, transposed first operand", Tensor(big_t).T[:128] @ Tensor(b), big_t.T[:128] @ b
  yield "packed, batched rows", Tensor(batch) @ Tensor(shared), batch @ shared
  c = arr(512, 544)   # 544 columns: 32-column panels (17 of them)
  yield "packed, 32-column panels", Tensor(a) @ Tensor(c), a @ c
  tokens, grads = arr(4, 256, 128), arr(4, 256, 512)   # a weight gradient over a batch's tokens: two reduce dims, read as one
  yield "packed, reduce over batch and tokens", (Tensor(tokens).reshape(4, 256, 128, 1) * Tensor(grads).reshape(4, 256, 1, 512)).sum((0, 1)), \
    np.einsum("btm,btn->mn", tokens, grads)
  bias = arr(512)
  yield "packed, bias and relu", ((Tensor(a) @ Tensor(b)) + Tensor(bias)).relu(), np.maximum(a @ b + bias, 0)
  x, y = arr(100, 300), arr(300, 70)
  yield "odd sizes", Tensor(x) @ Tensor(y), x @ y
  v, m = arr(1, 1024), arr(1024, 1024)
  yield "vector times matrix", Tensor(v) @ Tensor(m), v @ m
  p, q = arr(3, 40, 33), arr(3, 33, 48)
  yield "batched operands", Tensor(p) @ Tensor(q), p @ q
  w = arr(256, 784)
  s = arr(128, 784)
  yield "x @ w.T (MLP forward)", Tensor(s) @ Tensor(w).T, s @ w.T
  tok, lw = arr(8, 64, 128), arr(384, 128)   # a Linear over a batch's tokens: 8 x 64 rows reuse the transposed weight
  yield "packed, x @ w.T over tokens", Tensor(tok) @ Tensor(lw).T, tok @ lw.T
  qh, kh = arr(2, 3, 64, 32), arr(2, 3, 64, 32)   # attention's scores: k transposed per head, a short k of 32
  yield "packed, q @ k.T per head over 32 dims", Tensor(qh) @ Tensor(kh).transpose(-1, -2), qh @ kh.transpose(0, 1, 3, 2)
  g, h = arr(128, 784), arr(128, 256)
  yield "x.T @ dy (weight gradient)", Tensor(g).T @ Tensor(h), g.T @ h
  yield "dy.T @ x (nn.Linear's weight gradient)", Tensor(h).T @ Tensor(g), h.T @ g


@pytest.mark.parametrize("name,result,expected", list(matmul_cases()), ids=[c[0] for c in matmul_cases()])
def test_matmul_paths_match_numpy(name, result, expected):
  np.testing.assert_allclose(result.numpy(), expected, rtol=1e-4, atol=2e-3)


@pytest.mark.parametrize("target", ALL_TARGETS)
def test_matmul_cases_take_the_packed_path_on_every_target(target, monkeypatch):
  # the "packed" cases get the packing copy, then the product; the others are one kernel
  pin_policy_target(monkeypatch, target)
  cases = list(matmul_cases())
  assert sum(name.startswith("packed") for name, _, _ in cases) >= 8
  for name, result, _ in cases:
    items = result.schedule()
    assert len(items) == (2 if name.startswith("packed") and result.device in PACKED_DEVICES else 1), (name, len(items))


def target_sources(t: Tensor, target) -> list[str]:
  """The C sources of `t`'s kernels as decided for `target` (not compiled)."""
  return [render(decide(item.ast, target)) for item in t.schedule()]


@pytest.mark.parametrize("target, vectors", [pytest.param(AVX512, 4, id="avx512"), pytest.param(AVX2, 2, id="avx2")])
def test_packed_panel_is_prefetched_and_row_sums_are_not(target, vectors, monkeypatch):
  # one prefetch per vector load of the panel in a trip: the tile's 4 vectors of 16 (AVX2: 2 of 8)
  pin_policy_target(monkeypatch, target)
  a, b = Tensor(arr(128, 512), device="CPU"), Tensor(arr(512, 512), device="CPU")
  *pack, product = target_sources(a @ b, target)
  assert len(pack) == 1 and "__builtin_prefetch" not in pack[0]   # the packing copy, then the product
  lanes = float_lanes(target)
  vector_loads = re.findall(rf"float_v{lanes} val\d+ = \(\*\(\(float_v{lanes}_unaligned\*\)&data", product)
  assert product.count("__builtin_prefetch(") == len(vector_loads) == vectors, product
  assert "__builtin_prefetch" not in "".join(target_sources(Tensor(arr(64, 1024), device="CPU").sum(1), target))


@pytest.mark.parametrize("target", X86_TARGETS)
def test_transposed_weight_is_packed_only_for_many_rows(target, monkeypatch):
  # x @ w.T reads w's columns a row apart. Packed, the product gets vector tiles along w's rows (no horizontal sums)
  pin_policy_target(monkeypatch, target)
  w_np, x_np = arr(512, 128), arr(1024, 128)
  w = Tensor(w_np, device="CPU")
  *pack, product = target_sources(Tensor(x_np, device="CPU") @ w.T, target)
  assert len(pack) == 1 and "= acc0;" in product   # accumulators stored whole, not summed across their lanes first
  assert len((Tensor(arr(128, 128), device="CPU") @ w.T).schedule()) == 1   # few rows: dot products along k, no copy
  monkeypatch.undo()   # the numbers on the host's own Target
  np.testing.assert_allclose((Tensor(x_np) @ Tensor(w_np).T).numpy(), x_np @ w_np.T, rtol=1e-4, atol=2e-3)


# x (1024 x 128, 512 KB) is packed too where half of L2 is no more than that (the 1 MB L2 a Target not of the host assumes)
@pytest.mark.parametrize("target, x_packed", [pytest.param(AVX512, False, id="avx512"), pytest.param(AVX2, True, id="avx2")])
def test_weight_gradient_copies_dy_row_major_when_its_rows_alias(target, x_packed, monkeypatch):
  # dy.T @ x over 1024 tokens: dy's rows are read along k, one element per token, rows 2 KB apart (512 floats) all in
  # the same L1 cache sets. dy gets a row-major copy (blocks of lanes x lanes transposed by shuffles), then the product.
  from minigrad.opt.cpu_policy import min_packed_bytes
  assert x_packed == (1024 * 128 * 4 >= min_packed_bytes(target))
  dy, x = arr(1024, 512), arr(1024, 128)
  dyb, xb = dy.reshape(16, 64, 512), x.reshape(16, 64, 128)
  batched = lambda: (Tensor(dyb, device="CPU").reshape(16, 64, 512, 1) * Tensor(xb, device="CPU").reshape(16, 64, 1, 128)).sum((0, 1))
  with monkeypatch.context() as patched:
    pin_policy_target(patched, target)
    *copies, product = target_sources(Tensor(dy, device="CPU").T @ Tensor(x, device="CPU"), target)
    assert len(copies) == 1 + x_packed and "__builtin_shufflevector" in copies[0]
    # over a batch's tokens (two reduce dims read as one), as in a transformer's Linear layers
    assert len(batched().schedule()) == 2 + x_packed
    # rows 1.5 KB apart don't alias (and run as fast unpacked): no copy
    assert len((Tensor(arr(1024, 384), device="CPU").T @ Tensor(x, device="CPU")).schedule()) == 1 + x_packed
  np.testing.assert_allclose((Tensor(dy).T @ Tensor(x)).numpy(), dy.T @ x, rtol=1e-4, atol=2e-3)
  np.testing.assert_allclose(batched().numpy(), dy.T @ x, rtol=1e-4, atol=2e-3)


def test_weight_gradient_tile_keeps_its_operands_in_l1():
  # dy.T @ x: 256x784 over a batch of 128. With AVX-512, 784 = 49 vectors: a tile of 7 of them has a 57 KB column
  # panel that doesn't stay in L1 (7 cache lines from L2 per 14 multiply-adds; per 21 with 3 rows, still too many).
  # 49 vectors padded to 50 (2 % waste) take 5 vectors x 4 rows: 0.3 lines from L2 per multiply-add, 20 accumulators
  # (measured 1.3x faster than 16 rows x 1 vector on aligned inputs).
  from minigrad.opt.heuristics import _streamed_lines, MAX_STREAMED_LINES
  from minigrad.opt.cpu_policy import max_accumulators
  from minigrad.codegen.kernel import Kernel, Opt
  a, b = arr(128, 256), arr(128, 784)
  item = (Tensor(a, device="CPU").T @ Tensor(b, device="CPU")).schedule()[-1]
  chosen = decide(item.ast, AVX512)
  assert chosen.full_shape[-3:] == (16, 4, 5) and tile_of(chosen) == (16, 20) and _streamed_lines(chosen) < MAX_STREAMED_LINES
  wide = Kernel(item.ast, target=AVX512)
  for opt in (Opt("UPCAST", 1, 16), Opt("UPCAST", 1, 7), Opt("UPCAST", 0, 2)): wide.apply_opt(opt)
  assert _streamed_lines(wide) == 0.5
  three_rows = Kernel(item.ast, target=AVX512)
  for opt in (Opt("UPCAST", 1, 16), Opt("UPCAST", 1, 7), Opt("PADTO", 0, 3), Opt("UPCAST", 0, 3)): three_rows.apply_opt(opt)
  assert _streamed_lines(three_rows) == pytest.approx(MAX_STREAMED_LINES)   # not under it
  # AVX2: 16 rows don't fit in 12 accumulators; 6 rows (256 padded to 258) x 2 vectors of 8, one line of x per 12
  chosen = decide(item.ast, AVX2)
  assert chosen.full_shape[-3:] == (8, 6, 2) and tile_of(chosen) == (8, 12) <= (8, max_accumulators(AVX2)), chosen.applied_opts
  assert _streamed_lines(chosen) < MAX_STREAMED_LINES
  np.testing.assert_allclose((Tensor(a).T @ Tensor(b)).numpy(), a.T @ b, rtol=1e-4, atol=2e-3)


@pytest.mark.parametrize("target", X86_TARGETS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_weight_gradient_through_relu_stores_whole_vectors(dtype, target):
  # nn.Linear's weight gradient with the relu backward: the mask, which the product would redo for each of x's 784
  # columns, is its own elementwise kernel (see test_schedule.py); the product then takes a register tile with lanes
  # along the output's rows (AVX-512: 16 rows x 1 vector of 16; float64 8 rows x 2 vectors of 8. AVX2: 6 rows x 2
  # vectors, 12 accumulators) and stores its accumulators as whole vectors, never lane by lane
  from minigrad.opt.cpu_policy import max_accumulators
  dh, z, b, x = (rng.standard_normal(shape).astype(dtype) for shape in ((128, 256), (128, 256), (256,), (128, 784)))
  result = (Tensor(dh, device="CPU") * ((Tensor(z, device="CPU") + Tensor(b, device="CPU")) > 0)).T @ Tensor(x, device="CPU")
  mask, product = result.schedule()
  kernel = decide(product.ast, target)
  source = body(render(kernel))
  lanes, accumulators = tile_of(kernel)
  assert lanes * dtype().itemsize == target.vector_bytes and 8 <= accumulators <= max_accumulators(target), kernel.applied_opts
  assert "] = acc" not in source   # no scalar stores of accumulator lanes
  np.testing.assert_allclose(result.numpy(), (dh * (z + b > 0)).T @ x, rtol=1e-4, atol=2e-3)


# ---- convolutions ----

def conv_reference(x: np.ndarray, w: np.ndarray, stride: int, padding: int) -> np.ndarray:
  batch, _, height, width = x.shape
  out_channels, _, kh, kw = w.shape
  padded = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
  out_h, out_w = (height + 2 * padding - kh) // stride + 1, (width + 2 * padding - kw) // stride + 1
  out = np.zeros((batch, out_channels, out_h, out_w), np.float64)
  for i in range(kh):
    for j in range(kw):
      window = padded[:, :, i:i + stride * out_h:stride, j:j + stride * out_w:stride]
      out += np.einsum("bchw,oc->bohw", window, w[:, :, i, j])
  return out


@pytest.mark.parametrize("shape,filters,kernel,stride,padding", [
  ((2, 64, 32, 32), 64, 3, 1, 1),    # the benchmark's shape, smaller batch
  ((2, 16, 17, 19), 8, 3, 1, 1),     # odd sizes: padding masks along the lanes
  ((2, 16, 16, 16), 32, 3, 2, 1),    # strided
  ((1, 8, 12, 12), 4, 3, 1, 0),      # no padding
  ((2, 32, 8, 8), 16, 1, 1, 0),      # 1x1: a matrix product per pixel
  ((1, 3, 20, 20), 5, 5, 1, 2),      # 5x5 window (not unrolled whole)
])
def test_conv2d_paths_match_numpy(shape, filters, kernel, stride, padding):
  x, w = arr(*shape), arr(filters, shape[1], kernel, kernel)
  result = Tensor(x).conv2d(Tensor(w), stride=stride, padding=padding).numpy()
  np.testing.assert_allclose(result, conv_reference(x, w, stride, padding), rtol=1e-4, atol=2e-3)


# ---- accumulating a 3x3 window: one fused multiply-add per product ----

def test_sum_of_products_is_added_product_by_product():
  x, y, z = (UOp.variable(name, 0, 9).cast(dtypes.float32) for name in "xyz")
  loop = UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, 0), UOp.const(dtypes.index, 4)), (0, "reduce"))
  products = x * y + y * z + z * x
  assert product_terms(UOp(Ops.REDUCE, dtypes.float32, (products, loop), Ops.ADD)) == [x * y, y * z, z * x]
  # anything that isn't a pure sum of products is added whole: (1 + x*y) + y*z, a max, a single product
  for value, op in [((x * y + 1.0) + y * z, Ops.ADD), (products, Ops.MAX), (x * y, Ops.ADD)]:
    assert product_terms(UOp(Ops.REDUCE, dtypes.float32, (value, loop), op)) == [value]


@pytest.mark.parametrize("target", ALL_TARGETS)
def test_conv_accumulates_through_fused_multiply_adds(target):
  x, w = Tensor(arr(2, 8, 16, 16), device="CPU"), Tensor(arr(8, 8, 3, 3), device="CPU")
  (src,) = target_sources(x.conv2d(w, padding=1), target)
  update = next(line.strip() for line in src.splitlines() if line.strip().startswith("acc0 = "))
  assert update.count("acc0") == 2 and "(acc0+(val" in update   # acc0 = (((acc0 + v*w) + v*w) ...
