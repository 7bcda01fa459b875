"""Kernel optimization actions (UPCAST/UNROLL/LOCAL/GROUP/PADTO/SWAP), SIMD lanes and the default heuristics: every
choice must give the same numbers as the plain loops, and bad actions must be refused with a clear error. GPU-shaped
choices (workgroups, grouped reductions in local memory) run on the GPU-shaped devices that open here.

The heuristics' decisions are checked for hand-built Targets (tests/cpu_targets.py: AVX-512, where the figures in the
comments were measured, and AVX2), rendered but not run; the numbers are checked on the host's own Target, and the
actions decided for another Target are applied on the host's Target to check that they compute the same numbers."""
from __future__ import annotations
import itertools
import re
import numpy as np
import pytest
from minigrad import Tensor, Device
from minigrad.codegen.kernel import Kernel, Opt, KernelOptError
from minigrad.uop.ops import Ops
from minigrad.engine.realize import get_kernel, buffer_of
from minigrad.runtime.device import available_devices
from minigrad.helpers import prod
from cpu_targets import AVX2, AVX512, AVX512_HALVED, SSE2, body, decide, float_lanes, pin_policy_target, render, tile_of

rng = np.random.default_rng(3)


def arr(*shape):
  return rng.standard_normal(shape).astype(np.float32)


def run_with(t: Tensor, opts, device: str = "CPU"):
  (item,) = t.schedule()
  program = get_kernel(item.ast, device, opts)
  bufs = [buffer_of(b).allocate() for b in item.bufs]
  program(bufs)
  return bufs[0].numpy().copy(), program


PROGRAMS = {
  "matmul": lambda: Tensor(arr(8, 12)) @ Tensor(arr(12, 16)),
  "matmul_relu_bias": lambda: (Tensor(arr(8, 12)) @ Tensor(arr(12, 16))).relu() + Tensor(arr(16)),
  "elementwise": lambda: (Tensor(arr(8, 16)).relu() * 2 + 1).exp(),
  "row_sum": lambda: Tensor(arr(8, 16)).sum(1),
  "column_max": lambda: Tensor(arr(16, 8)).max(0),
  "transpose": lambda: Tensor(arr(8, 16)).T + 1,
  "padded": lambda: Tensor(arr(8, 16)).pad(((1, 3), (2, 2))).exp(),
  "where_compare": lambda: (Tensor(arr(16, 16)) > 0).where(Tensor(arr(16, 16)), 0.5) * 3,
  "math": lambda: Tensor(arr(4, 16)).abs().sqrt().log() + Tensor(arr(4, 16)).sin(),
  "arange": lambda: Tensor.arange(64).reshape(4, 16).float() * 0.5,
}
CANDIDATES = [Opt(op, axis, amount) for op in ("UPCAST", "UNROLL", "LOCAL", "PADTO") for axis in range(3) for amount in (2, 4, 8, 16)] + \
  [Opt("PADTO", axis, amount) for axis in range(3) for amount in (3, 5, 7)] + [Opt("SWAP", 0, 1)]


def valid_sequences(t: Tensor, length: int, candidates=CANDIDATES, has_local: bool = False):
  (item,) = t.schedule()
  for opts in itertools.product(candidates, repeat=length):
    kernel = Kernel(item.ast, has_local=has_local)
    try:
      for opt in opts: kernel.apply_opt(opt)
    except KernelOptError: continue
    yield list(opts)


@pytest.fixture(autouse=True)
def on_cpu():
  """Tensors are built on the CPU whatever DEV is: the tests here are about CPU kernels, except the GPU ones, which
  name their device."""
  saved, Device.DEFAULT = Device.DEFAULT, "CPU"
  yield
  Device.DEFAULT = saved


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_every_single_opt_matches_plain_loops(name):
  t = PROGRAMS[name]()
  expected, _ = run_with(t, [])
  sequences = list(valid_sequences(t, 1))
  assert sequences, "no opt applies: the test would check nothing"
  for opts in sequences:
    out, _ = run_with(t, opts)
    np.testing.assert_allclose(out, expected, rtol=2e-5, atol=2e-5, err_msg=str(opts))


@pytest.mark.parametrize("name", ["matmul", "matmul_relu_bias", "row_sum", "padded", "where_compare"])
def test_pairs_of_opts_match_plain_loops(name):
  t = PROGRAMS[name]()
  expected, _ = run_with(t, [])
  sequences = list(valid_sequences(t, 2))
  assert sequences, "no pair of opts applies: the test would check nothing"
  for opts in sequences[::3]:   # a third of the pairs keeps the test quick and still covers every kind
    out, _ = run_with(t, opts)
    np.testing.assert_allclose(out, expected, rtol=2e-5, atol=2e-5, err_msg=str(opts))


GPU_DEVICES = [d for d in ("CL", "PYTHON") if d in available_devices()]
GPU_CANDIDATES = [Opt(op, axis, amount) for op in ("GROUP", "GROUPTOP", "LOCAL", "UPCAST") for axis in range(2) for amount in (2, 4, 8)] + \
  [Opt("PADTO", 0, 3), Opt("PADTO", 1, 5)]


@pytest.mark.parametrize("device", GPU_DEVICES)
@pytest.mark.parametrize("name", ["matmul_relu_bias", "row_sum", "column_max", "padded", "arange"])
def test_gpu_opt_pairs_match_plain_loops(device, name):
  saved, Device.DEFAULT = Device.DEFAULT, device
  try: t = PROGRAMS[name]()
  finally: Device.DEFAULT = saved
  expected, _ = run_with(t, [], device)
  np.testing.assert_allclose(t.to("CPU").numpy().reshape(-1), expected, rtol=2e-5, atol=2e-5)   # default opts agree too
  sequences = list(valid_sequences(t, 2, GPU_CANDIDATES, has_local=True))
  assert sequences
  for opts in sequences[::4]:
    out, _ = run_with(t, opts, device)
    np.testing.assert_allclose(out, expected, rtol=2e-5, atol=2e-5, err_msg=f"{device} {opts}")


def test_padding_output_rows_gates_only_the_loads_that_move_along_them():
  # PADTO 6 on a matmul's rows: a's row loads are gated (rows 64, 65 don't exist), b's loads read the same element
  # for every row and stay ungated (a gate per vector load in the inner loop), the stores drop rows 64, 65
  a, b = arr(64, 32), arr(32, 48)
  (item,) = (Tensor(a) @ Tensor(b)).schedule()
  kernel = Kernel(item.ast)
  kernel.apply_opt(Opt("PADTO", 0, 6))
  loads = [n for n in item.ast.toposort if n.op is Ops.LOAD]
  masked = {load.src[0].arg: kernel.st_of(load.src[1]).views[-1].mask is not None for load in loads}
  store = next(n for n in item.ast.toposort if n.op is Ops.STORE)
  assert sorted(masked.values()) == [False, True] and kernel.st_of(store.src[1]).views[-1].mask is not None
  out, _ = run_with(Tensor(a) @ Tensor(b), [Opt("PADTO", 0, 6), Opt("UPCAST", 1, 16), Opt("UPCAST", 0, 6)])
  np.testing.assert_allclose(out.reshape(64, 48), a @ b, rtol=1e-5, atol=1e-5)


def test_loads_on_padded_output_rows_read_in_bounds_instead_of_branching():
  # PADTO 6 on 64 rows: a's loads for rows 64, 65 only feed outputs that are never stored, so they read row 0's
  # element instead of being gated (a select hoisted out of the reduce loop, no branch in it); the stores stay gated
  a, b = arr(64, 32), arr(32, 48)
  out, program = run_with(Tensor(a) @ Tensor(b), [Opt("PADTO", 0, 6), Opt("UPCAST", 1, 16), Opt("UPCAST", 0, 6)])
  np.testing.assert_allclose(out.reshape(64, 48), a @ b, rtol=1e-5, atol=1e-5)
  a_loads = [u.src[0] for u in program.uops if u.op is Ops.LOAD and u.dtype.count == 1]   # b's are vectors
  assert a_loads and all(len(index.src) == 2 for index in a_loads)
  assert any(n.op is Ops.WHERE for index in a_loads for n in index.src[1].toposort)
  assert any(len(u.src[0].src) == 3 for u in program.uops if u.op is Ops.STORE)
  # an input with a mask of its own (zero padding along the reduce dim) keeps its gate: its zeros count
  padded = Tensor(a).pad(((0, 0), (0, 8))) @ Tensor(arr(40, 48))
  (item,) = padded.schedule()
  kernel = Kernel(item.ast)
  kernel.apply_opt(Opt("PADTO", 0, 6))
  assert not kernel.padding_only
  out, program = run_with(padded, [Opt("PADTO", 0, 6), Opt("UPCAST", 1, 16), Opt("UPCAST", 0, 6)])
  np.testing.assert_allclose(out.reshape(64, 48), padded.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("target, opts", [
  # AVX-512: 16 lanes, 4 vectors of columns x 4 rows: 16 accumulators, 8 loads per 16 multiply-adds; the 8 column
  # tiles outermost (shared by the threads), the row tiles sweep each
  (AVX512, [Opt("UPCAST", 1, 16), Opt("UPCAST", 1, 4), Opt("UPCAST", 0, 4), Opt("SWAP", 0, 1)]),
  # AVX2 (16 registers, 12 accumulators at most): 8 lanes, 2 vectors x 4 rows, 6 loads per 8 multiply-adds (6 rows
  # would pad 64 rows by 3%); the 32 column tiles outermost
  (AVX2, [Opt("UPCAST", 1, 8), Opt("UPCAST", 1, 2), Opt("UPCAST", 0, 4), Opt("SWAP", 0, 1)]),
], ids=["avx512", "avx2"])
def test_matmul_heuristics_give_a_simd_register_tile(target, opts):
  a, b = arr(64, 32), arr(32, 512)
  t = Tensor(a) @ Tensor(b)
  (item,) = t.schedule()
  kernel = decide(item.ast, target)
  assert kernel.applied_opts == opts
  lanes, accumulators = tile_of(kernel)
  source = render(kernel)
  assert f"float_v{lanes} acc{accumulators - 1} " in source and f"acc{accumulators}" not in source
  out, _ = run_with(t, kernel.applied_opts)   # the decided actions on the host's Target
  np.testing.assert_allclose(out.reshape(64, 512), a @ b, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(t.numpy(), a @ b, rtol=1e-4, atol=1e-4)


def test_matmul_tile_fits_odd_shapes():
  a, b = arr(36, 32), arr(32, 48)   # 36 rows: a 6-row tile; 48 columns: three vectors
  t = Tensor(a) @ Tensor(b)
  (item,) = t.schedule()
  # AVX-512: 18 accumulators, 6 rows x 3 vectors of 16. AVX2: 8 lanes and 12 accumulators at most: 48 columns are
  # six vectors, three of them x 4 rows. Past half the vector registers in accumulators (16 of 32, 8 of 16) the
  # statements go row by row, each row's broadcast used by its three vectors in turn
  for target, lanes, rows in ((AVX512, 16, 6), (AVX2, 8, 4)):
    kernel = decide(item.ast, target)
    assert kernel.applied_opts[:3] == [Opt("UPCAST", 1, lanes), Opt("UPCAST", 0, rows), Opt("UPCAST", 1, 3)]
    updates = [line.split("*")[0].strip() for line in render(kernel).splitlines() if " = acc" in line][:3]
    assert updates == [f"acc{i} = acc{i}+((val0-(float_v{lanes}){{0}})" for i in range(3)], updates
    out, _ = run_with(t, kernel.applied_opts)
    np.testing.assert_allclose(out.reshape(36, 48), a @ b, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(t.numpy(), a @ b, rtol=1e-4, atol=1e-4)
  # 20 rows: a 6-row tile would pad them by 20%, so 4 rows it is
  (item,) = (Tensor(arr(20, 32)) @ Tensor(b)).schedule()
  assert decide(item.ast, AVX512).applied_opts[:3] == [Opt("UPCAST", 1, 16), Opt("UPCAST", 1, 3), Opt("UPCAST", 0, 4)]
  assert decide(item.ast, AVX2).applied_opts[:3] == [Opt("UPCAST", 1, 8), Opt("UPCAST", 0, 4), Opt("UPCAST", 1, 3)]


PANEL_NOT_TILE = ("minigrad.opt.cpu_policy.panel_widths gives 16-register Targets panels of 4 vectors (AVX2: 32 columns) "
                  "while their register tiles are 2 vectors wide (6 x 2 x 8 lanes): each tile reads half of every panel row")


@pytest.mark.parametrize("target", [AVX512, pytest.param(AVX2, marks=pytest.mark.xfail(strict=True, reason=PANEL_NOT_TILE))],
                         ids=["avx512", "avx2"])
@pytest.mark.parametrize("transposed", [False, True])
def test_big_matmul_reads_a_packed_copy_of_its_columns(transposed, target, monkeypatch):
  from minigrad.opt.cpu_policy import panel_widths
  width = next(w for w in panel_widths(target) if 1024 % w == 0)
  # b: 1 MB, reused by 64 rows; a transposed b (see MIN_ROWS_TRANSPOSED) by 256
  a, b = arr(256 if transposed else 64, 256), arr(256, 1024)
  as_tensor = (lambda x: Tensor(np.ascontiguousarray(x.T)).T) if transposed else Tensor
  with monkeypatch.context() as patched:
    pin_policy_target(patched, target)
    pack, product = (Tensor(a) @ as_tensor(b)).schedule()
    small = Tensor(a[:64]) @ as_tensor(b[:, :256])   # 256 KB stays in the cache as it is
    assert len(small.schedule()) == 1
  assert pack.bufs[0].arg[1] == b.size and pack.bufs[0] in product.bufs
  np.testing.assert_allclose((Tensor(a) @ as_tensor(b)).numpy(), a @ b, rtol=1e-4, atol=1e-4)   # the host's Target
  kernel = decide(product.ast, target)
  lanes, _ = tile_of(kernel)
  # each tile reads one whole panel of `width` columns per k: its vectors `lanes` floats apart, the next k `width`
  # further (AVX-512: 4 vectors of 16, 64 columns)
  assert width == lanes * prod(o.amount for o in kernel.applied_opts[1:] if o.op == "UPCAST" and o.axis == 1), (width, kernel.applied_opts)
  source = render(kernel)
  assert f"(ridx0*{width})]" in source and f"(ridx0*{width}))+{lanes}]" in source, source


@pytest.mark.parametrize("target", [AVX512, AVX2], ids=["avx512", "avx2"])
@pytest.mark.parametrize("padding", [0, 1, 2])
def test_conv_is_simd_with_masked_loads_for_the_padding(padding, target, monkeypatch):
  # 16 (AVX2: 8) lanes along the output rows; the padding's zeros are masked lanes of the vector loads
  import torch
  x, w = arr(2, 8, 18 - 2 * padding, 18 - 2 * padding), arr(16, 8, 3, 3)   # 16x16 outputs
  with monkeypatch.context() as patched:
    pin_policy_target(patched, target)
    (item,) = Tensor(x).conv2d(Tensor(w), padding=padding).schedule()
  kernel = decide(item.ast, target)
  lanes = float_lanes(target)
  source = render(kernel)
  assert Opt("UPCAST", 3, lanes) in kernel.applied_opts and f"float_v{lanes} acc" in source
  assert (f"load_float_v{lanes}_masked(" in source) == (padding > 0), source
  expected = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), padding=padding).numpy()
  out, _ = run_with(Tensor(x).conv2d(Tensor(w), padding=padding), kernel.applied_opts)
  np.testing.assert_allclose(out.reshape(expected.shape), expected, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(Tensor(x).conv2d(Tensor(w), padding=padding).numpy(), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target, opts", [
  (AVX512, [Opt("UNROLL", 0, 16)]),
  # a CPU that runs 64-byte vectors as two halves streams rows in 32-byte vectors, 4 per trip
  (AVX512_HALVED, [Opt("UNROLL", 0, 8), Opt("UNROLL", 0, 4)]),
  (AVX2, [Opt("UNROLL", 0, 8), Opt("UNROLL", 0, 4)]),
  (SSE2, [Opt("UNROLL", 0, 4), Opt("UNROLL", 0, 4)]),
], ids=["avx512", "avx512_halved", "avx2", "sse2"])
def test_row_sum_takes_lanes_from_the_reduce_dim(target, opts):
  x = arr(8, 64)
  t = Tensor(x).sum(1)
  (item,) = t.schedule()
  kernel = decide(item.ast, target)
  assert kernel.applied_opts == opts
  assert f"float_v{opts[0].amount} acc" in render(kernel)
  out, _ = run_with(t, kernel.applied_opts)
  np.testing.assert_allclose(out, x.sum(1), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(t.numpy(), x.sum(1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("lanes", [8, 16])
def test_row_sum_keeps_an_accumulator_per_vector_of_a_trip(lanes):
  # 4 vectors per trip, 4 accumulators (then combined, then their lanes: a fifth): independent chains, and 4 x 8
  # partial sums of 2^17 float32 values (one 8-lane accumulator was 4e-6 off here)
  x = np.arange(1 << 17, dtype=np.float32)
  t = ((Tensor(x) + 1) * 2).reshape(1, -1).sum(1)
  (item,) = t.schedule()
  program = get_kernel(item.ast, "CPU", [Opt("UNROLL", 0, lanes), Opt("UNROLL", 0, 4)])
  assert sum(u.op is Ops.DEFINE_ACC for u in program.uops) == 5
  buffers = [buffer_of(b).allocate() for b in item.bufs]
  program(buffers)
  np.testing.assert_allclose(buffers[0].numpy().view(np.float32), ((x.astype(np.float64) + 1) * 2).sum(keepdims=True), rtol=1e-6)


@pytest.mark.parametrize("target", [AVX512, AVX512_HALVED], ids=["avx512", "avx512_halved"])
def test_dot_products_keep_wide_lanes_on_every_cpu(target):
  # x @ w.T reads both operands along the reduce dim: its register tile shares each loaded vector, not a stream, so
  # it keeps 64-byte vectors on a CPU that streams rows in 32-byte ones
  a, w = arr(32, 256), arr(64, 256)
  t = Tensor(a) @ Tensor(w).T
  (item,) = t.schedule()
  kernel = decide(item.ast, target)
  assert kernel.applied_opts == [Opt("UNROLL", 0, 16), Opt("UPCAST", 0, 4), Opt("UPCAST", 1, 4)], kernel.applied_opts
  out, _ = run_with(t, kernel.applied_opts)
  np.testing.assert_allclose(out.reshape(32, 64), a @ w.T, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("opt, message", [
  (Opt("UPCAST", 5, 2), "axis 5 out of range"),
  (Opt("UPCAST", 0, 3), "doesn't divide"),
  (Opt("UNROLL", 1, 2), "axis 1 out of range"),
  (Opt("TILE", 0, 2), "unknown optimization"),
  (Opt("LOCAL", 2, 2), "axis 2 out of range"),
  (Opt("GROUP", 0, 2), "needs a device with workgroups"),
  (Opt("PADTO", 0, 4), "already a multiple"),
  (Opt("PADTO", 3, 4), "out of range"),
  (Opt("SWAP", 0, 0), "two different global dims"),
])
def test_bad_opts_are_refused(opt, message):
  (item,) = (Tensor(arr(8, 12)) @ Tensor(arr(12, 16))).schedule()
  with pytest.raises(KernelOptError, match=message):
    Kernel(item.ast).apply_opt(opt)


def test_threads_split_the_outer_loop(monkeypatch):
  from minigrad.runtime import ops_cpu
  a, b = arr(256, 64), arr(64, 128)
  results = []
  for threads in (1, 2, 3):
    monkeypatch.setattr(ops_cpu, "cpu_threads", lambda threads=threads: threads)
    results.append((Tensor(a) @ Tensor(b)).numpy())   # fresh buffers: computed again, split differently
  for out in results: np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target", [AVX512, AVX2], ids=["avx512", "avx2"])
def test_short_outer_loop_trades_places_for_the_threads(monkeypatch, target):
  # the threads split the outermost loop: 3 trips (a 3x3 weight gradient's taps) or 1 (a batch of one) don't
  # share out over two threads, so the biggest global dim runs outermost instead; with one thread nothing moves
  from minigrad.opt import heuristics
  import torch
  pin_policy_target(monkeypatch, target)   # the rows widened to whole vectors of the Target's lanes
  x, w = arr(1, 16, 14, 14), arr(32, 16, 3, 3)
  tx, tw = Tensor(x, requires_grad=True, device="CPU"), Tensor(w, requires_grad=True, device="CPU")
  out = tx.conv2d(tw, padding=1)
  out.sum().backward()
  items = out.schedule(tw.grad)
  opts = {}
  for threads in (1, 2):
    monkeypatch.setattr(heuristics, "cpu_threads", lambda threads=threads: threads)
    kernels = [decide(item.ast, target) for item in items]
    opts[threads] = [k.applied_opts for k in kernels]
    outer = [k.full_shape[k.axes_of("global")[0]] for k in kernels if k.axes_of("global")]
    if threads == 2: assert outer and all(trips >= 8 or trips % 2 == 0 for trips in outer), outer
  moved = [two[-1] for one, two in zip(opts[1], opts[2]) if one != two]
  assert moved and all(two[:-1] == one for one, two in zip(opts[1], opts[2]) if one != two), opts
  assert all(opt.op == "SWAP" and opt.axis == 0 for opt in moved), moved
  tx_, tw_ = torch.from_numpy(x), torch.from_numpy(w).requires_grad_()
  expected = torch.nn.functional.conv2d(tx_, tw_, padding=1)
  expected.sum().backward()
  np.testing.assert_allclose(out.numpy(), expected.detach().numpy(), rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(tw.grad.numpy(), tw_.grad.numpy(), rtol=1e-4, atol=1e-3)


def test_fused_softmax_with_every_reduce_loop_unrolled_and_two_rows():
  # both rows' max and sum reduce over the same (vector) range once every loop is unrolled: each row's sum needs
  # its own max, so the linearizer may not put the other row's max and sum into one loop (it recursed forever)
  x = arr(64, 256)
  opts = [Opt("UNROLL", 1, 16), Opt("UNROLL", 1, 4), Opt("UNROLL", 0, 16), Opt("UNROLL", 0, 4), Opt("UPCAST", 1, 16),
          Opt("UNROLL", 1, 4), Opt("UNROLL", 0, 4), Opt("UPCAST", 0, 2)]
  out, program = run_with(Tensor(x).softmax(-1), opts)
  assert "for (long ridx" not in program.source
  e = np.exp(x - x.max(1, keepdims=True))
  np.testing.assert_allclose(out.reshape(64, 256), e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("target", [AVX512, AVX2, SSE2], ids=["avx512", "avx2", "sse2"])
def test_fused_softmax_is_one_simd_kernel_with_the_row_reduces_hoisted(target):
  x = arr(64, 256)
  (item,) = Tensor(x).softmax(-1).schedule()
  kernel = decide(item.ast, target)
  lanes = float_lanes(target)
  # lanes of one width on the output and both reduces, 4 vectors per trip of each reduce, two rows per outer trip
  assert kernel.applied_opts == [Opt("UNROLL", 1, lanes), Opt("UNROLL", 1, 4), Opt("UNROLL", 0, lanes), Opt("UNROLL", 0, 4),
                                 Opt("UPCAST", 1, lanes), Opt("UPCAST", 0, 2)], kernel.applied_opts
  source = body(render(kernel))
  # per row: the max loop and the sum loop (vector accumulators), then the loop over the row's outputs
  rows, max_loop, sum_loop, outputs = (source.index(s) for s in ("for (long gidx0", "for (long ridx0", "for (long ridx1", "for (long gidx1"))
  assert rows < max_loop < sum_loop < outputs, source
  # the row max's accumulators are combined across their lanes before the sum loop
  assert f"float_v{lanes} acc0" in source and f"float_v{lanes} acc1" in source
  assert "__builtin_shufflevector(acc0, acc1" in source.split("for (long ridx1")[0]
  out, _ = run_with(Tensor(x).softmax(-1), kernel.applied_opts)
  e = np.exp(x - x.max(-1, keepdims=True))
  np.testing.assert_allclose(out.reshape(64, 256), e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("target", [AVX512, AVX2, SSE2], ids=["avx512", "avx2", "sse2"])
@pytest.mark.parametrize("classes, paired", [(10, False), (16, False), (32, True), (64, True)])
def test_fused_row_reduces_pair_rows_only_when_the_rows_stream(target, classes, paired):
  # a loss over 10 classes (log-softmax of a batch of 128): two rows per trip doubled the code of a row of a few
  # vectors and ran slower; rows of two cache lines (32 float32) or more stream, and two of them at once help
  x = arr(128, classes)
  (item,) = Tensor(x).log_softmax(-1).schedule()
  kernel = decide(item.ast, target)
  assert (Opt("UPCAST", 0, 2) in kernel.applied_opts) == paired, kernel.applied_opts
  out, _ = run_with(Tensor(x).log_softmax(-1), kernel.applied_opts)
  shifted = x - x.max(-1, keepdims=True)
  np.testing.assert_allclose(out.reshape(128, classes), shifted - np.log(np.exp(shifted).sum(-1, keepdims=True)), rtol=1e-5, atol=1e-5)


def test_fused_softmax_scales_exp_with_the_targets_helper(tmp_path):
  # exp's scaling by 2**n is a helper on the host Target's lanes: vscalefps where the compiler targets AVX-512, the
  # exponent-bits fallback otherwise (none without wide vectors)
  from test_codegen import assert_helpers_built_for_the_target
  x = arr(64, 256)
  t = Tensor(x).softmax(-1)
  (item,) = t.schedule()
  program = get_kernel(item.ast, "CPU")
  assert_helpers_built_for_the_target(program.source, Device["CPU"].compiler, ["scalef"], tmp_path)
  e = np.exp(x - x.max(-1, keepdims=True))
  np.testing.assert_allclose(t.numpy(), e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("target, x_rows, w_rows, opts", [
  # AVX-512: lanes along the reduce dim, a 4x4 tile of outputs shares each loaded vector: 16 vector accumulators
  (AVX512, 64, 32, [Opt("UNROLL", 0, 16), Opt("UPCAST", 0, 4), Opt("UPCAST", 1, 4)]),
  # AVX2: 8 lanes, 4 rows of w x 3 of x: 12 accumulators, 7 loads per 12 multiply-adds; w's rows come first, one
  # at a time, so only x's 3 vectors stay live beside the accumulators (2 x 6 the other way round spilled them)
  (AVX2, 48, 96, [Opt("UNROLL", 0, 8), Opt("UPCAST", 1, 4), Opt("UPCAST", 0, 3), Opt("SWAP", 0, 1)]),
], ids=["avx512", "avx2"])
def test_dot_product_kernels_get_a_register_tile(target, x_rows, w_rows, opts):
  x, w = arr(x_rows, 96), arr(w_rows, 96)   # x @ w.T: both operands contiguous along the reduce dim (nn.Linear's forward)
  t = Tensor(x) @ Tensor(w).T
  (item,) = t.schedule()
  kernel = decide(item.ast, target)
  assert kernel.applied_opts == opts, kernel.applied_opts
  lanes, accumulators = tile_of(kernel)
  source = render(kernel)
  assert f"float_v{lanes} acc{accumulators - 1} " in source and f"acc{accumulators}" not in source
  out, _ = run_with(t, kernel.applied_opts)
  np.testing.assert_allclose(out.reshape(x_rows, w_rows), x @ w.T, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(t.numpy(), x @ w.T, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("rows,cols,reduce", [(2, 1, "sum"), (2, 2, "sum"), (2, 4, "sum"), (4, 4, "sum"), (4, 3, "sum"), (4, 4, "max"), (2, 2, "max")])
def test_lanes_of_several_accumulators_are_combined_together(rows, cols, reduce):
  # a tile of dot products over 16-lane vectors: rows*cols accumulators, whose lanes are summed (or maxed) in rounds
  # that shuffle two of them into one vector (12 = 8 + 4); NaN and -inf must come through a max
  x, w = arr(8, 64), arr(12, 64)
  x[1, 5], x[2, 40], w[3, 7] = np.nan, -np.inf, np.inf
  product = Tensor(x).reshape(8, 1, 64) * Tensor(w).reshape(1, 12, 64)
  t = product.sum(2) if reduce == "sum" else product.max(2)
  out, program = run_with(t, [Opt("UNROLL", 0, 16), Opt("UPCAST", 0, rows)] + ([Opt("UPCAST", 1, cols)] if cols > 1 else []))
  assert "__builtin_shufflevector(acc0, acc1" in program.source
  with np.errstate(invalid="ignore"):
    expected = x[:, None, :] * w[None, :, :]
    expected = expected.sum(2) if reduce == "sum" else expected.max(2)
  np.testing.assert_allclose(out.reshape(8, 12), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target", [AVX512, AVX2, SSE2], ids=["avx512", "avx2", "sse2"])
def test_reduces_of_different_ops_in_one_loop_combine_their_lanes_apart(target):
  x = arr(64, 256)
  x[3, 7] = np.nan
  t = Tensor(x).max(1) + Tensor(x).sum(1) * Tensor(x).min(1)   # one loop with max, sum and min accumulators
  (item,) = t.schedule()
  kernel = decide(item.ast, target)
  lanes = float_lanes(target)
  assert kernel.applied_opts[:2] == [Opt("UNROLL", 2, lanes), Opt("UNROLL", 2, 4)], kernel.applied_opts
  assert "__builtin_shufflevector" in render(kernel)
  expected = x.max(1) + x.sum(1) * x.min(1)
  out, _ = run_with(t, kernel.applied_opts)
  np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-3)
  np.testing.assert_allclose(t.numpy(), expected, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("target", [AVX512, AVX2], ids=["avx512", "avx2"])
def test_widest_lanes_win_over_more_contiguous_buffers(target):
  g, h, x, b = arr(32, 16), arr(32, 16), arr(32, 48), arr(16)
  t = ((Tensor(g) * (Tensor(h) + Tensor(b) > 0)).T @ Tensor(x))   # a fused relu backward feeding a weight gradient
  (item,) = t.schedule()
  kernel = decide(item.ast, target)
  lanes = float_lanes(target)
  source = render(kernel)
  assert kernel.applied_opts[0] == Opt("UPCAST", 1, lanes) and f"float_v{lanes} acc" in source and "float_v2" not in source
  expected = (g * (h + b > 0)).T @ x
  out, _ = run_with(t, kernel.applied_opts)
  np.testing.assert_allclose(out.reshape(16, 48), expected, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(t.numpy(), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target", [AVX512, AVX2], ids=["avx512", "avx2"])
def test_transposing_copy_takes_lanes_along_the_contiguous_input(target):
  # output contiguous along x's rows: lanes along the output would gather their loads. Lanes along x's rows, and as
  # many of the output's rows per trip: a 16x16 (AVX2: 8x8) block per trip, transposed by shuffles and stored as vectors
  lanes = float_lanes(target)
  x = arr(48, 64)
  t = (Tensor(x).T * 1.0).contiguous()
  (item,) = t.schedule()
  kernel = decide(item.ast, target)
  source = body(render(kernel))
  assert kernel.applied_opts == [Opt("UPCAST", 1, lanes), Opt("UPCAST", 0, lanes)], kernel.applied_opts
  assert source.count(f"float_v{lanes} val") == lanes and "__builtin_shufflevector" in source and f"[{lanes - 1}]" not in source
  out, _ = run_with(t, kernel.applied_opts)
  np.testing.assert_array_equal(out.reshape(64, 48), x.T)
  np.testing.assert_array_equal(t.numpy(), x.T)
  # 20 output rows don't make whole blocks: vector loads, stores lane by lane
  y = arr(20, 64)
  t = (Tensor(y).T * 1.0).contiguous()
  kernel = decide(t.schedule()[0].ast, target)
  source = body(render(kernel))
  assert kernel.applied_opts == [Opt("UPCAST", 0, lanes)], kernel.applied_opts
  assert f"float_v{lanes} val" in source and f"[{lanes - 1}]" in source and "__builtin_shufflevector" not in source
  out, _ = run_with(t, kernel.applied_opts)
  np.testing.assert_array_equal(out.reshape(64, 20), y.T)
  np.testing.assert_array_equal(t.numpy(), y.T)


@pytest.mark.parametrize("target", [AVX512, AVX2], ids=["avx512", "avx2"])
def test_cat_with_a_transposed_part_gets_lanes(target):
  # the gradient of q, k, v split from one projection: a cat whose v part reads its input transposed. The lanes run
  # along the output; q's and k's parts load whole vectors, v's part lane by lane
  lanes = float_lanes(target)
  q, k, v = arr(64, 32), arr(64, 32), arr(32, 64)
  t = Tensor(q).cat(Tensor(k), Tensor(v).T, dim=1)
  (item,) = t.schedule()
  kernel = decide(item.ast, target)
  source = body(render(kernel))
  assert kernel.applied_opts == [Opt("UPCAST", 1, lanes)] and source.count(f"float_v{lanes} val") == 2 and "float val" in source
  out, _ = run_with(t, kernel.applied_opts)
  np.testing.assert_array_equal(out.reshape(64, 96), np.concatenate([q, k, v.T], 1))
  np.testing.assert_array_equal(t.numpy(), np.concatenate([q, k, v.T], 1))
  # every part transposed: a transposing copy, in blocks of lanes x lanes
  t = Tensor(q).T.cat(Tensor(k).T, dim=1)
  (item,) = t.schedule()
  kernel = decide(item.ast, target)
  assert kernel.applied_opts == [Opt("UPCAST", 1, lanes), Opt("UPCAST", 0, lanes)], kernel.applied_opts
  assert "__builtin_shufflevector" in render(kernel)
  np.testing.assert_array_equal(t.numpy(), np.concatenate([q.T, k.T], 1))


CPU_SHAPED = [d for d in ("CPU", "LLVM") if d in available_devices()]


@pytest.mark.parametrize("device", CPU_SHAPED)
def test_embedding_gradient_adds_each_token_under_one_branch(device):
  # the gradient of an embedding sums over the tokens t (id[t] == v) * grad[t] into each vocabulary row v: the
  # condition holds for one row per token, so the row's vectors are added under one branch per token and row,
  # rather than multiplied by 0 or 1 and added for every row
  from minigrad import nn
  vocab, width, tokens = 300, 96, 200
  ids = rng.integers(0, vocab, tokens).astype(np.int32)
  ids[:6] = 7   # repeated ids add up
  g = arr(tokens, width)
  emb = nn.Embedding(vocab, width)
  emb.weight = Tensor(arr(vocab, width), device=device, requires_grad=True)
  (emb(Tensor(ids, device=device)) * Tensor(g, device=device)).sum().backward()
  item = emb.weight.grad.schedule()[-1]
  for target in (AVX512, AVX2):
    lanes = float_lanes(target)
    kernel = decide(item.ast, target)
    assert kernel.applied_opts == [Opt("UPCAST", 1, lanes), Opt("UPCAST", 1, width // lanes)], kernel.applied_opts
    source = render(kernel, device)
    if device == "CPU":   # 6 vectors of 16 (AVX2: 12 of 8) under the one branch
      assert source.count("if (") == 1 and len(re.findall(r"acc\d+ = acc\d+\+", source)) == width // lanes, source
    else: assert source.count("br i1") == 3 and source.count(".then:") == 1   # the loops over rows and tokens, and the branch
  expected = np.zeros((vocab, width), np.float32)
  np.add.at(expected, ids, g)
  np.testing.assert_allclose(emb.weight.grad.numpy(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("device", CPU_SHAPED)
def test_one_hot_where_sum_branches_too(device):
  # the same sum written where(id == v, grad, 0)
  from minigrad import dtypes
  vocab, width, tokens = 300, 96, 200
  ids, g = rng.integers(0, vocab, tokens).astype(np.int32), arr(tokens, width)
  hot = Tensor(ids, device=device).reshape(tokens, 1, 1) == Tensor.arange(vocab, dtype=dtypes.int32, device=device).reshape(1, vocab, 1)
  out = hot.where(Tensor(g, device=device).reshape(tokens, 1, width), 0.0).sum(0)
  source = get_kernel(out.schedule()[-1].ast, device).source
  assert source.count("if (" if device == "CPU" else ".then:") == 1
  expected = np.zeros((vocab, width), np.float32)
  np.add.at(expected, ids, g)
  np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-5)


def test_float_equality_in_a_reduce_is_not_a_branch():
  # max pooling's backward sums (x == max) * grad: true for one of 4, and float, so no branch on it
  x = Tensor(arr(2, 3, 8, 8), requires_grad=True)
  x.max_pool2d(2).sum().backward()
  assert all("if (" not in get_kernel(item.ast, "CPU").source for item in x.grad.schedule())
  torch = pytest.importorskip("torch")
  tx = torch.tensor(x.numpy(), requires_grad=True)
  torch.nn.functional.max_pool2d(tx, 2).sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy())


@pytest.mark.parametrize("target, opts", [
  # AVX-512: 6 rows (512 padded to 516) x 4 vectors: one 64-column panel per tile; the 16 panels outermost, all row
  # tiles under each
  (AVX512, [Opt("UPCAST", 1, 16), Opt("PADTO", 0, 6), Opt("UPCAST", 0, 6), Opt("UPCAST", 1, 4), Opt("SWAP", 0, 1)]),
  # AVX2: 6 rows x 2 vectors of 8 (12 accumulators, their statements row by row); the 64 column tiles outermost
  (AVX2, [Opt("UPCAST", 1, 8), Opt("PADTO", 0, 6), Opt("UPCAST", 0, 6), Opt("UPCAST", 1, 2), Opt("SWAP", 0, 1)]),
], ids=["avx512", "avx2"])
def test_big_matmul_sweeps_the_rows_under_each_panel(target, opts, monkeypatch):
  a, b = arr(512, 512), arr(512, 1024)
  tile_columns = 4 * 16 if target is AVX512 else 2 * 8
  with monkeypatch.context() as patched:
    pin_policy_target(patched, target)
    pack, product = (Tensor(a) @ Tensor(b)).schedule()
    # 4 column tiles: too few to share out, rows stay outermost
    narrow = Tensor(arr(512, 1024)) @ Tensor(arr(1024, 4 * tile_columns))
    narrow_product = narrow.schedule()[-1]
  kernel = decide(product.ast, target)
  assert kernel.applied_opts == opts, kernel.applied_opts
  assert Opt("SWAP", 0, 1) not in decide(narrow_product.ast, target).applied_opts
  np.testing.assert_allclose((Tensor(a) @ Tensor(b)).numpy(), a @ b, rtol=1e-4, atol=1e-4)


def test_conv_gradients_run_as_vectorized_contractions(monkeypatch):
  from minigrad.opt import cpu_policy, heuristics
  # the MNIST CNN's second conv: d x is a transposed convolution (a forward conv kernel, 16 lanes), d w a sum along
  # rows widened from 14 to 16 (lanes) with a register tile of output x input channels; neither writes a
  # (N, C, positions, taps) gradient of the windows first, as autograd through the window view did
  import torch
  x_np, w_np, dy = arr(4, 16, 14, 14), arr(32, 16, 3, 3), arr(4, 32, 14, 14)
  for target in (AVX512, AVX2):   # lanes of 16 (AVX2: 8), the rows widened to 16 for both
    lanes = float_lanes(target)
    with monkeypatch.context() as patched:
      pin_policy_target(patched, target)
      x, w = Tensor(x_np, requires_grad=True, device="CPU"), Tensor(w_np, requires_grad=True, device="CPU")
      (x.conv2d(w, padding=1) * Tensor(dy, device="CPU")).sum().backward()
      items = x.grad.schedule(w.grad)
    kernels = [decide(item.ast, target) for item in items]
    reduces = [k for k in kernels if k.reduce_axes]
    assert len(reduces) == 2
    assert all(k.applied_opts[0].amount == lanes for k in reduces), [k.applied_opts for k in reduces]
    assert any(sum(o.op == "UPCAST" for o in k.applied_opts) == 2 for k in reduces)   # d w: the channel tile
    assert all(tile_of(k)[1] <= cpu_policy.max_accumulators(target) for k in reduces)
  x, w = Tensor(x_np, requires_grad=True, device="CPU"), Tensor(w_np, requires_grad=True, device="CPU")   # the host's Target
  (x.conv2d(w, padding=1) * Tensor(dy, device="CPU")).sum().backward()
  tx, tw = torch.from_numpy(x_np).requires_grad_(), torch.from_numpy(w_np).requires_grad_()
  (torch.nn.functional.conv2d(tx, tw, padding=1) * torch.from_numpy(dy)).sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-4, atol=1e-3)


def test_conv_on_narrow_rows_computes_whole_vectors(monkeypatch):
  # rows of 14 outputs (the MNIST CNN's conv2) are computed 16 wide on an input copied with its padding, so the
  # loads need no masks and the kernel gets 16 lanes (it had 2-lane vectors: 5 ms against 0.5 ms); the two extra
  # outputs per row are dropped by a copy
  # AVX2: rows of 14 and 5 are computed 16 and 8 wide, both as 8-lane vectors
  import torch
  for width, stride in ((14, 1), (5, 1), (14, 2)):
    x, w = arr(2, 16, 14, width), arr(32, 16, 3, 3)
    for target in (AVX512, AVX2):
      with monkeypatch.context() as patched:
        pin_policy_target(patched, target)
        items = Tensor(x, device="CPU").conv2d(Tensor(w, device="CPU"), padding=1, stride=stride).schedule()
      kernels = [decide(item.ast, target) for item in items]
      (conv,) = [k for k in kernels if k.reduce_axes]
      if stride == 1:
        lanes = min(float_lanes(target), {14: 16, 5: 8}[width])
        assert Opt("UPCAST", 3, lanes) in conv.applied_opts, conv.applied_opts
        assert len(kernels) == 3   # the padded copy, the conv, the copy without the extra outputs
      else: assert len(kernels) == 1   # strided rows aren't widened
    t = Tensor(x, device="CPU").conv2d(Tensor(w, device="CPU"), padding=1, stride=stride)   # the host's Target
    expected = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), padding=1, stride=stride).numpy()
    np.testing.assert_allclose(t.numpy(), expected, rtol=1e-4, atol=1e-4)


def test_pooling_windows_without_lanes_are_unrolled():
  # max pooling with gradients on the generic path (padding): one kernel computes the window max, the first
  # maximum and the selection, each a reduce over the 2x2 window; without SIMD lanes those loops are unrolled whole
  import torch
  x = arr(2, 3, 6, 6)
  t = Tensor(x, requires_grad=True).max_pool2d(2, padding=1)
  kernels = [get_kernel(item.ast, "CPU") for item in t.schedule()]
  pooled = next(k for k in kernels if k.kernel.reduce_axes)
  assert "for (long ridx" not in pooled.source and not pooled.kernel.axes_of("reduce"), pooled.source
  np.testing.assert_allclose(t.numpy(), torch.nn.functional.max_pool2d(torch.from_numpy(x), 2, padding=1).numpy())


@pytest.mark.parametrize("target, opts", [
  # 16 lanes along x, the window unrolled; the weights of a tile of channels stay in cache while the output rows
  # sweep them, so their broadcasts count a third of a load: 8 output channels x 2 rows load 4 rows x 3 shifts
  # (the shifted ones masked) and 72 weights per 144 multiply-adds, fewer than 16 x 1 (3 rows, 144 weights)
  (AVX512, [Opt("UPCAST", 3, 16), Opt("UPCAST", 1, 8), Opt("UPCAST", 2, 2), Opt("UNROLL", 2, 3), Opt("UNROLL", 1, 3)]),
  # AVX2: 8 lanes, 4 output channels x 2 rows (12 accumulators at most): 4 rows x 3 shifts and 36 weights per 72
  (AVX2, [Opt("UPCAST", 3, 8), Opt("UPCAST", 1, 4), Opt("UPCAST", 2, 2), Opt("UNROLL", 2, 3), Opt("UNROLL", 1, 3)]),
], ids=["avx512", "avx2"])
def test_conv_tile_keeps_the_weights_in_cache(target, opts, monkeypatch):
  x, w = arr(2, 16, 16, 16), arr(16, 16, 3, 3)
  with monkeypatch.context() as patched:
    pin_policy_target(patched, target)
    (item,) = Tensor(x).conv2d(Tensor(w), padding=1).schedule()
  kernel = decide(item.ast, target)
  assert kernel.applied_opts == opts, kernel.applied_opts
  import torch
  expected = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), padding=1).numpy()
  out, _ = run_with(Tensor(x).conv2d(Tensor(w), padding=1), kernel.applied_opts)
  np.testing.assert_allclose(out.reshape(expected.shape), expected, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(Tensor(x).conv2d(Tensor(w), padding=1).numpy(), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target", [AVX512, AVX2], ids=["avx512", "avx2"])
def test_conv_tile_pads_no_channels(target, monkeypatch):
  # 256 output channels: a tile of 3 or 6 channels would pad them to 258, and each weight broadcast would then be
  # gated; a window tile takes whole channels instead
  x, w = arr(1, 256, 8, 8), arr(256, 256, 3, 3)
  with monkeypatch.context() as patched:
    pin_policy_target(patched, target)
    (item,) = Tensor(x).conv2d(Tensor(w), padding=1).schedule()
  kernel = decide(item.ast, target)
  opts = kernel.applied_opts
  assert not any(o.op == "PADTO" for o in opts) and any(o.op == "UNROLL" for o in opts), opts
  import torch
  expected = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), padding=1).numpy()
  out, _ = run_with(Tensor(x).conv2d(Tensor(w), padding=1), kernel.applied_opts)
  np.testing.assert_allclose(out.reshape(expected.shape), expected, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("target", [AVX512, AVX2, SSE2], ids=["avx512", "avx2", "sse2"])
def test_tile_unrolls_a_reduce_gathered_from_parts(target):
  # rows of a gathered from per-head parts (the gradient of q, k and v, (3, heads, tokens, head size), read as a
  # (tokens, 3 * heads * head size) matrix): a's index along k isn't affine, so the tile's reduce loop takes 4 trips
  # per loop trip and computes the index's divisions once for them
  a_np, w_np = arr(3, 4, 64, 32), arr(384, 128)
  build = lambda: Tensor(a_np).permute(2, 0, 1, 3).reshape(64, 384) @ Tensor(w_np)
  (item,) = build().schedule()
  kernel = decide(item.ast, target)
  assert Opt("UNROLL", 0, 4) in kernel.applied_opts and kernel.axis_kinds.count("upcast") >= 2, kernel.applied_opts
  out, _ = run_with(build(), kernel.applied_opts)
  expected = a_np.transpose(2, 0, 1, 3).reshape(64, 384) @ w_np
  np.testing.assert_allclose(out.reshape(64, 128), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target, width", [(AVX512, 16), (AVX2, 8), (SSE2, 4)], ids=["avx512", "avx2", "sse2"])
def test_lanes_pad_an_output_dim_no_width_divides(target, width):
  # x.T @ g with 65 outputs per row (a vocabulary of 65: the GPT example's tied output layer's gradient): no width
  # divides 65, so the lanes pad it to whole vectors (masked loads and stores) instead of leaving the kernel scalar
  x_np, g_np = arr(96, 128), arr(96, 65)
  build = lambda: Tensor(x_np).T @ Tensor(g_np)
  (item,) = build().schedule()
  kernel = decide(item.ast, target)
  padded = -(-65 // width) * width
  assert Opt("PADTO", 1, padded) in kernel.applied_opts and Opt("UPCAST", 1, width) in kernel.applied_opts, kernel.applied_opts
  out, _ = run_with(build(), kernel.applied_opts)
  np.testing.assert_allclose(out.reshape(128, 65), x_np.T @ g_np, rtol=1e-4, atol=1e-4)


def test_lanes_leave_a_short_dim_no_width_divides_scalar():
  # 5 outputs per row would make fewer than MIN_PADDED_LANE_VECTORS vectors of any width: no padding
  (item,) = (Tensor(arr(3, 4)) @ Tensor(arr(4, 5))).schedule()
  assert not any(o.op == "PADTO" and o.axis == 1 for o in decide(item.ast, AVX512).applied_opts)


@pytest.mark.parametrize("target, width", [(AVX512, 16), (AVX2, 8), (SSE2, 4)], ids=["avx512", "avx2", "sse2"])
def test_lanes_load_an_input_read_after_the_reduce_loop_lane_by_lane(target, width):
  # a.T @ b + c.T (a tied weight's gradient plus the embedding's, stored transposed): c reads the output's lanes with
  # a stride of 65, but only after the reduce loop, so the lanes stay on the output's contiguous dim
  a_np, b_np, c_np = arr(96, 65), arr(96, 128), arr(128, 65)
  build = lambda: Tensor(a_np).T @ Tensor(b_np) + Tensor(c_np).T
  (item,) = build().schedule()
  kernel = decide(item.ast, target)
  assert Opt("UPCAST", 1, width) in kernel.applied_opts, kernel.applied_opts
  out, _ = run_with(build(), kernel.applied_opts)
  np.testing.assert_allclose(out.reshape(65, 128), a_np.T @ b_np + c_np.T, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target", [AVX512, AVX2], ids=["avx512", "avx2"])
def test_weight_gradient_tile_pads_its_vectors_to_whole_tiles(target):
  # dy.T @ x over 784 inputs (an MNIST Linear's weight gradient): 49 vectors of 16, which only 7 divides. With AVX-512
  # the tile pads them to 50 (2%) for 5 vectors x 4 rows instead of 1 vector x 16 rows (17 loads per 16
  # multiply-adds); AVX2's 98 vectors of 8 take 2 of them (a whole cache line) x 6 rows, padded only along the rows
  dy_np, x_np = arr(128, 256), arr(128, 784)
  build = lambda: Tensor(dy_np).T @ Tensor(x_np)
  (item,) = build().schedule()
  kernel = decide(item.ast, target)
  lanes = float_lanes(target)
  if target is AVX512:
    assert kernel.applied_opts[:2] == [Opt("UPCAST", 1, lanes), Opt("PADTO", 1, 5)], kernel.applied_opts
  else:
    assert not any(o.op == "PADTO" and o.axis == 1 for o in kernel.applied_opts), kernel.applied_opts
  out, _ = run_with(build(), kernel.applied_opts)
  np.testing.assert_allclose(out.reshape(256, 784), dy_np.T @ x_np, rtol=1e-4, atol=1e-4)


def test_tile_vectors_that_straddle_cache_lines_pad_nothing():
  # 3 vectors of AVX2's 8 lanes are 96 bytes: padding 98 vectors to 99 for them measured slower than 2 x 6
  from minigrad.opt.heuristics import _lane_vectors_fit
  (item,) = (Tensor(arr(128, 256)).T @ Tensor(arr(128, 784))).schedule()
  kernel = Kernel(item.ast, target=AVX2)
  kernel.apply_opt(Opt("UPCAST", 1, 8))
  assert _lane_vectors_fit(kernel, 1, 2) and not _lane_vectors_fit(kernel, 1, 3) and _lane_vectors_fit(kernel, 1, 7)


@pytest.mark.parametrize("target", [AVX512, AVX2, SSE2], ids=["avx512", "avx2", "sse2"])
def test_elementwise_division_takes_two_vectors_per_trip(target):
  # an Adam-like update (a square root and two divisions per element) takes 2 vectors per loop trip; plain
  # arithmetic keeps one
  p_np, m_np, v_np = arr(4096), arr(4096), np.abs(arr(4096))
  build = lambda: Tensor(p_np) - Tensor(m_np) / (Tensor(v_np).sqrt() / 0.9 + 1e-8)
  (item,) = build().schedule()
  lanes = float_lanes(target)
  kernel = decide(item.ast, target)
  assert kernel.applied_opts == [Opt("UPCAST", 0, lanes), Opt("UPCAST", 0, 2)], kernel.applied_opts
  out, _ = run_with(build(), kernel.applied_opts)
  np.testing.assert_allclose(out, p_np - m_np / (np.sqrt(v_np) / 0.9 + 1e-8), rtol=1e-5, atol=1e-5)
  (plain,) = (Tensor(p_np) * 2 + Tensor(m_np)).schedule()
  assert decide(plain.ast, target).applied_opts == [Opt("UPCAST", 0, lanes)]
