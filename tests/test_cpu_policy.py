"""The CPU optimizer's policy per Target (DESIGN.md, decision 7), for hand-built Targets of CPUs the tests may not run
on (tests/cpu_targets.py): AVX-512, AVX2 (x86-64-v3), the SSE2 baseline (x86-64), AVX-512 on a CPU that runs wide
vectors as two halves, and aarch64 NEON.

Checked per Target: the machine facts the policy reads (minigrad.opt.heuristics, minigrad.schedule.packing,
minigrad.tensor.conv), and the decisions it makes: the lanes of an elementwise kernel and of a row sum, a 1024x1024
matmul's register tile (its accumulators fit the Target's registers, its lanes fill a vector), a convolution's rows
widened to whole vectors, the packed panels' width, and that every kernel renders. Decided kernels are rendered, not
compiled or run; where a decision changes the schedule (packing, widened rows) the schedule is run on the host's own
Target and compared with numpy, since it must compute the same numbers on any CPU.
"""
from __future__ import annotations
import re
import numpy as np
import pytest
from minigrad import Tensor, dtypes
from minigrad.opt import heuristics
from minigrad.codegen.kernel import Opt
from minigrad.opt.cpu_policy import conv_row_width as _lane_width
from minigrad.runtime.device import available_devices
from minigrad.engine.realize import buffer_of, get_kernel
from minigrad.opt import cpu_policy
from cpu_targets import AVX2, AVX512, AVX512_HALVED, NEON, SSE2, TARGETS, body, decide, float_lanes, pin_policy_target, \
  render, tile_of, widest_float_vector

rng = np.random.default_rng(11)


def arr(*shape: int) -> np.ndarray: return rng.standard_normal(shape).astype(np.float32)


def by_target(table: dict) -> list:
  """pytest parameters (target, expected) from {target name: expected}, named by the Target."""
  return [pytest.param(TARGETS[name], expected, id=name) for name, expected in table.items()]


TARGET_PARAMS = [pytest.param(target, id=name) for name, target in TARGETS.items()]
SIXTEEN_REGISTER_TILES = ("minigrad.opt.cpu_policy.panel_widths gives Targets with 16 vector registers (AVX2, SSE2) panels of "
                          "4 vectors while their matmul register tiles are 2 vectors wide (6 rows x 2 vectors: 12 accumulators), so "
                          "each tile reads half of every panel row, a div/mod per tile in the index")


# ---------------------------------------------------------------- what the policy reads from a Target

@pytest.mark.parametrize("target, expected", by_target({
  #                  vector bytes, registers, float32 lanes, float64 lanes, accumulators, streamed bytes, panels
  "avx512":        (64, 32, [16, 8, 4, 2], [8, 4, 2], 24, 64, (64, 32)),
  "avx2":          (32, 16, [8, 4, 2], [4, 2], 12, 32, (32, 16)),
  "sse2":          (16, 16, [4, 2], [2], 12, 16, (16, 8)),
  "avx512_halved": (64, 32, [16, 8, 4, 2], [8, 4, 2], 24, 32, (64, 32)),
  "neon":          (16, 32, [4, 2], [2], 24, 16, (16, 8)),
}))
def test_what_the_policy_reads_from_each_target(target, expected):
  assert (target.vector_bytes, target.vector_registers, cpu_policy.lane_widths(target, 4, heuristics.LANES), cpu_policy.lane_widths(target, 8, heuristics.LANES),
          cpu_policy.max_accumulators(target), cpu_policy.streamed_vector_bytes(target), cpu_policy.panel_widths(target)) == expected
  # cache-fit thresholds follow the caches: half of L2 stays in cache, two thirds of L1d are resident
  assert cpu_policy.cached_bytes(target) == cpu_policy.min_packed_bytes(target) == target.l2_bytes // 2
  assert cpu_policy.l1_resident_bytes(target) == target.l1d_bytes * 2 // 3
  assert cpu_policy.line_elements(target) == 16
  assert cpu_policy.min_paired_row_elements(target) == 32   # rows of two cache lines stream: two per trip


def test_the_avx512_xeon_gives_the_figures_the_heuristics_were_tuned_with():
  # 48 KB L1d, 2 MB L2: an input part of 32 KB stays in L1, 1 MB in L2, and operands from 1 MB on are packed
  assert cpu_policy.l1_resident_bytes(AVX512) == 32 << 10
  assert cpu_policy.cached_bytes(AVX512) == cpu_policy.min_packed_bytes(AVX512) == 1 << 20


# ---------------------------------------------------------------- lanes

@pytest.mark.parametrize("target", TARGET_PARAMS)
@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float64])
def test_elementwise_lanes_fill_one_vector(target, dtype):
  # a vector register's worth of elements, wide vectors or not (halves only matter for rows that stream)
  t = (Tensor(arr(8, 64)).cast(dtype).relu() * 2 + 1).exp()
  kernel = decide(t.schedule()[-1].ast, target)
  lanes = target.vector_bytes // dtype.itemsize
  assert kernel.applied_opts == [Opt("UPCAST", 0, lanes)]
  name = "float" if dtype == dtypes.float32 else "double"
  assert set(re.findall(rf"\b{name}_v(\d+)\b", body(render(kernel)))) == {str(lanes)}


@pytest.mark.parametrize("target, lanes", by_target({"avx512": 16, "avx2": 8, "sse2": 4, "avx512_halved": 8, "neon": 4}))
def test_row_sum_streams_vectors_of_the_target(target, lanes):
  # lanes from the contiguous reduce dim, 4 vectors per trip; 32-byte vectors on a CPU that runs 64-byte ones in halves
  x = arr(8, 1024)
  t = Tensor(x).sum(1)
  kernel = decide(t.schedule()[-1].ast, target)
  assert kernel.applied_opts == [Opt("UNROLL", 0, lanes), Opt("UNROLL", 0, 4)]
  assert lanes * 4 == cpu_policy.streamed_vector_bytes(target)
  source = render(kernel)
  assert f"float_v{lanes} acc" in source and widest_float_vector(source) == lanes
  np.testing.assert_allclose(t.numpy(), x.sum(1), rtol=1e-5, atol=1e-4)


# ---------------------------------------------------------------- register tiles

MATMUL_1024_TILES = {
  # 6 rows (1024 padded to 1026) x 4 vectors of 16: 24 accumulators of AVX-512's 32 registers
  "avx512": [Opt("UPCAST", 1, 16), Opt("PADTO", 0, 6), Opt("UPCAST", 0, 6), Opt("UPCAST", 1, 4), Opt("SWAP", 0, 1)],
  # 6 rows x 2 vectors of 8: 12 accumulators of 16 registers (the 6x16 tile of BLIS's Haswell kernel), row by row
  "avx2": [Opt("UPCAST", 1, 8), Opt("PADTO", 0, 6), Opt("UPCAST", 0, 6), Opt("UPCAST", 1, 2), Opt("SWAP", 0, 1)],
  "sse2": [Opt("UPCAST", 1, 4), Opt("PADTO", 0, 6), Opt("UPCAST", 0, 6), Opt("UPCAST", 1, 2), Opt("SWAP", 0, 1)],
  "avx512_halved": [Opt("UPCAST", 1, 16), Opt("PADTO", 0, 6), Opt("UPCAST", 0, 6), Opt("UPCAST", 1, 4), Opt("SWAP", 0, 1)],
  # NEON's 32 registers of 4 floats: 6 rows x 4 vectors
  "neon": [Opt("UPCAST", 1, 4), Opt("PADTO", 0, 6), Opt("UPCAST", 0, 6), Opt("UPCAST", 1, 4), Opt("SWAP", 0, 1)],
}


def matmul_product(target, monkeypatch, m: int, k: int, n: int):
  """The product kernel's ScheduleItem of an (m, k) @ (k, n) matmul scheduled for `target` (after its packing copy)."""
  with monkeypatch.context() as patched:
    pin_policy_target(patched, target)
    return (Tensor(arr(m, k)) @ Tensor(arr(k, n))).schedule()[-1]


def tile_columns(kernel) -> int:
  """Output columns one register tile covers: its lanes times its vectors along the columns (global dim 1)."""
  lanes, _ = tile_of(kernel)
  return lanes * int(np.prod([o.amount for o in kernel.applied_opts[1:] if o.op == "UPCAST" and o.axis == 1]))


@pytest.mark.parametrize("target, opts", by_target(MATMUL_1024_TILES))
def test_matmul_1024_register_tile_fits_the_registers(target, opts, monkeypatch):
  item = matmul_product(target, monkeypatch, 1024, 1024, 1024)
  kernel = decide(item.ast, target)
  assert kernel.applied_opts == opts, kernel.applied_opts
  lanes, accumulators = tile_of(kernel)
  # lanes fill a vector; the accumulators fit in the registers the tile may use, and at least 8 of them keep two
  # FMA units busy through their latency
  assert lanes == float_lanes(target) and 8 <= accumulators <= cpu_policy.max_accumulators(target)
  # a tile never straddles two packed panels
  panel = next(w for w in cpu_policy.panel_widths(target) if 1024 % w == 0)
  assert panel % tile_columns(kernel) == 0
  source = render(kernel)
  assert f"float_v{lanes} acc{accumulators - 1} " in source and f"acc{accumulators} " not in source
  assert widest_float_vector(source) == lanes


@pytest.mark.parametrize("target", TARGET_PARAMS)
@pytest.mark.parametrize("shape", [(64, 32, 512), (36, 32, 48), (20, 32, 48), (128, 512, 512), (100, 300, 70)])
def test_every_matmul_tile_fits_the_registers(target, shape, monkeypatch):
  kernel = decide(matmul_product(target, monkeypatch, *shape).ast, target)
  lanes, accumulators = tile_of(kernel)
  assert lanes <= float_lanes(target) and 1 <= accumulators <= cpu_policy.max_accumulators(target), kernel.applied_opts
  assert widest_float_vector(render(kernel)) == lanes


@pytest.mark.parametrize("target", [pytest.param(AVX512, id="avx512"), pytest.param(NEON, id="neon"),
                                    pytest.param(AVX2, id="avx2", marks=pytest.mark.xfail(strict=True, reason=SIXTEEN_REGISTER_TILES)),
                                    pytest.param(SSE2, id="sse2", marks=pytest.mark.xfail(strict=True, reason=SIXTEEN_REGISTER_TILES))])
def test_matmul_tile_reads_exactly_one_panel(target, monkeypatch):
  # minigrad.schedule.packing: "the heuristics give such a kernel output tiles of W columns, so each tile
  # reads exactly one panel"
  kernel = decide(matmul_product(target, monkeypatch, 1024, 1024, 1024).ast, target)
  panel = next(w for w in cpu_policy.panel_widths(target) if 1024 % w == 0)
  assert tile_columns(kernel) == panel, (kernel.applied_opts, cpu_policy.panel_widths(target))


@pytest.mark.parametrize("target", TARGET_PARAMS)
def test_dot_products_share_their_loads_in_a_register_tile(target):
  # x @ w.T (nn.Linear's forward with few rows, unpacked): a tile of outputs shares each loaded vector. Without a
  # tile, each multiply-add loads two vectors
  (item,) = (Tensor(arr(64, 96)) @ Tensor(arr(32, 96)).T).schedule()
  kernel = decide(item.ast, target)
  lanes, accumulators = tile_of(kernel)
  assert kernel.applied_opts[0] == Opt("UNROLL", 0, float_lanes(target)) and accumulators > 1, kernel.applied_opts
  assert accumulators <= cpu_policy.max_accumulators(target)


@pytest.mark.parametrize("target, expected", by_target({
  #                 g @ w: (rows, vectors)   relu(h + b) @ w.T: (rows of h, rows of w)
  "avx512":        ((4, 4), (3, 8)),
  "avx2":          ((4, 2), (3, 3)),
  "sse2":          ((4, 2), (3, 3)),
  "avx512_halved": ((4, 4), (3, 8)),
  "neon":          ((4, 4), (3, 8)),
}))
def test_register_tiles_leave_registers_for_their_operands(target, expected):
  # beside its accumulators a tile keeps the operands its statements reuse live: row by row a row's vectors, in a
  # dot-product tile the vectors of the dim with fewer rows, and relu's zero. An MLP's second layer, 128x128 outputs:
  # with 16 registers 3 rows x 4 vectors (12 + 4 + 1) and 3 x 4 dot products of relu(h + b) (12 + 3 + 1 + 1) made the
  # compilers spill accumulators in every trip of the reduce loop
  g, w, h, b = arr(128, 128), arr(128, 256), arr(128, 256), arr(256)
  product = Tensor(g) @ Tensor(w)
  dots = (Tensor(h) + Tensor(b)).relu() @ Tensor(w).T
  tiles = []
  for t, expected_numbers in ((product, g @ w), (dots, np.maximum(h + b, 0) @ w.T)):
    item = t.schedule()[-1]
    opts = decide(item.ast, target).applied_opts
    upcasts = {o.axis: o.amount for o in opts[1:] if o.op == "UPCAST"}
    tiles.append((upcasts.get(0, 1), upcasts.get(1, 1)))
    program = get_kernel(item.ast, "CPU", opts)   # the decided actions on the host's Target
    bufs = [buffer_of(node).allocate() for node in item.bufs]
    program(bufs)
    np.testing.assert_allclose(bufs[0].numpy().reshape(expected_numbers.shape), expected_numbers, rtol=1e-4, atol=1e-3)
  assert tuple(tiles) == expected


# ---------------------------------------------------------------- convolution rows, packed panels

@pytest.mark.parametrize("target, widths", by_target({
  # rows up to half a vector's lanes are a power of two; longer ones whole vectors
  "avx512": {1: 1, 2: 2, 3: 4, 5: 8, 8: 8, 9: 16, 14: 16, 16: 16, 17: 32, 28: 32},
  "avx2": {1: 1, 2: 2, 3: 4, 5: 8, 8: 8, 9: 16, 14: 16, 16: 16, 17: 24, 28: 32},
  "sse2": {1: 1, 2: 2, 3: 4, 5: 8, 8: 8, 9: 12, 14: 16, 16: 16, 17: 20, 28: 28},
  "avx512_halved": {3: 4, 5: 8, 9: 16, 14: 16, 17: 32},
  "neon": {1: 1, 2: 2, 3: 4, 5: 8, 8: 8, 9: 12, 14: 16, 16: 16, 17: 20, 28: 28},
}))
def test_conv_rows_widen_to_whole_vectors(target, widths):
  assert {width: _lane_width(width, target) for width in widths} == widths
  lanes = float_lanes(target)
  for width in range(1, 70):
    widened = _lane_width(width, target)
    whole = widened % lanes == 0 or (widened < lanes and widened & (widened - 1) == 0)
    assert widened >= width and whole, (width, widened)
    assert not any(w % lanes == 0 or (w < lanes and w & (w - 1) == 0) for w in range(width, widened)), (width, widened)


@pytest.mark.parametrize("target", TARGET_PARAMS)
def test_conv_on_narrow_rows_is_computed_widened(target, monkeypatch):
  # rows of 9 outputs: computed 16 wide with 8- or 16-float vectors, 12 wide with 4-float ones, on an input copied
  # with its padding, then the extra outputs dropped by a copy
  import torch
  x, w = arr(2, 8, 10, 9), arr(16, 8, 3, 3)
  widened, lanes = _lane_width(9, target), float_lanes(target)
  with monkeypatch.context() as patched:
    pin_policy_target(patched, target)
    t = Tensor(x).conv2d(Tensor(w), padding=1)
    items = t.schedule()
    assert len(items) == 3   # the padded copy, the conv, the copy without the extra outputs
    (conv,) = [k for k in (decide(item.ast, target) for item in items) if k.reduce_axes]
    assert widened % lanes == 0 and Opt("UPCAST", 3, lanes) in conv.applied_opts, conv.applied_opts
    assert widest_float_vector(render(conv)) == lanes
    out = t.numpy()   # the schedule for `target`, computed on the host's own Target
  expected = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), padding=1).numpy()
  np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target, width", by_target({"avx512": 64, "avx2": 32, "sse2": 16, "avx512_halved": 64, "neon": 16}))
def test_packed_panels_are_four_vectors_wide(target, width, monkeypatch):
  # b (256 x 1024, 1 MB) reused by 64 rows: copied as panels of `width` columns, read one panel row per k
  a, b = arr(64, 256), arr(256, 1024)
  with monkeypatch.context() as patched:
    pin_policy_target(patched, target)
    t = Tensor(a) @ Tensor(b)
    pack, product = t.schedule()
    out = t.numpy()   # the schedule for `target`, computed on the host's own Target
  assert pack.bufs[0].arg[1] == b.size and pack.bufs[0] in product.bufs
  kernel = decide(product.ast, target)
  source = body(render(kernel))
  assert re.search(rf"\(ridx0\*{width}\)\)?\]", source), source
  assert not re.search(rf"\(ridx0\*(?!{width}\b)\d+\)", source), source   # no other row length of b
  np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------- every kernel renders for every Target

def render_programs() -> dict:
  return {
    "elementwise": lambda: (Tensor(arr(8, 64)).relu() * 2 + 1).exp(),
    "float64 elementwise": lambda: Tensor(arr(8, 64)).cast(dtypes.float64).sqrt() + 1,
    "matmul": lambda: Tensor(arr(64, 32)) @ Tensor(arr(32, 512)),
    "dot products": lambda: Tensor(arr(48, 256)) @ Tensor(arr(96, 256)).T,
    "row sum": lambda: Tensor(arr(8, 1024)).sum(1),
    "row max": lambda: Tensor(arr(8, 1024)).max(1),
    "softmax": lambda: Tensor(arr(64, 256)).softmax(-1),
    "transpose": lambda: (Tensor(arr(48, 64)).T * 1.0).contiguous(),
    "conv": lambda: Tensor(arr(2, 16, 16, 16)).conv2d(Tensor(arr(16, 16, 3, 3)), padding=1),
    "max pool": lambda: Tensor(arr(2, 3, 8, 8)).max_pool2d(2),
    "where": lambda: (Tensor(arr(16, 64)) > 0).where(Tensor(arr(16, 64)), 0.5) * 3,
  }


RENDER_DEVICES = [d for d in ("CPU", "LLVM") if d in available_devices()]


@pytest.mark.parametrize("device", RENDER_DEVICES)
@pytest.mark.parametrize("target", TARGET_PARAMS)
def test_kernels_render_for_every_target(target, device, monkeypatch):
  pin_policy_target(monkeypatch, target)
  lanes = float_lanes(target)
  for name, build in render_programs().items():
    for item in build().schedule():
      kernel = decide(item.ast, target)
      source = render(kernel, device)
      assert kernel.name in source, name
      widths = [int(n) for n in (re.findall(r"\bfloat_v(\d+)\b", body(source)) if device == "CPU" else re.findall(r"<(\d+) x float>", source))]
      assert max(widths, default=1) <= lanes, (name, kernel.applied_opts)   # no vector wider than the Target's
      if name in ("elementwise", "matmul", "softmax", "conv"): assert lanes in widths, (name, kernel.applied_opts)
