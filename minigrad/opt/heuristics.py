"""Hand-written optimization choices: which dims of a kernel to upcast (SIMD lanes, register tiles) or unroll,
and in which order the loops run.

Input: a fresh `Kernel`. Output: the same kernel with `apply_opt` called for the actions chosen here.
`NOOPT=1` skips this; `BEAM=N` searches instead.

The rules, in figures for a CPU with 32 SIMD registers of 16 floats and two FMA units (AVX-512); the machine facts
they use come from the kernel's Target through minigrad/opt/cpu_policy.py (AVX2: 16 registers of 8 floats):
  1. lanes: the output dim that is contiguous in memory becomes 16 (or 8, 4, 2) SIMD lanes, when every buffer
     reads the new lane dim contiguously or not at all. In a reduce kernel, a dim no width divides is padded to
     whole vectors, by up to MAX_LANE_PAD_WASTE (a product over a vocabulary of 65: 5 vectors of 16), and an input
     that only the code after the reduce loop reads may read the lanes another way, lane by lane (a tied weight's
     gradient adding the embedding's, stored transposed). Elementwise kernels keep such dims scalar: their math (exp,
     log) would change from the scalar to the vector formulas. Padding is fine: a load whose validity changes
     across the lanes becomes a masked vector load. An elementwise kernel that transposes takes its lanes along
     the input's contiguous dim instead, and moves a square block per trip (stored by shuffles) or writes its lanes
     one by one. An elementwise kernel with divisions or square roots (an Adam update) takes 2 vectors per trip.
  2. register tile, in a reduce kernel with lanes: up to 24 accumulators (of 32 registers; 8 or more keep both FMA
     units busy through their 4-cycle latency) from more vectors along the lane dim, rows of a dim the vector loads
     don't depend on (a matmul's rows, a convolution's output channels) and another output dim (a convolution's
     output rows); the accumulators and the operands the tile's statements keep live must fit the registers (AVX2's
     16 hold 6 rows x 2 vectors, not 3 x 4). Rows may pad their dim by up to MAX_PAD_WASTE: a 1024-row matmul takes
     6 rows x 4 vectors on 1026 rows, 10 loads per 24 multiply-adds against 8 per 16 for 4 x 4 (the padded rows'
     loads read row 0 instead of branching, see Kernel.padding_only); the vectors along the lanes' dim may pad its
     rest by up to MAX_LANE_TILE_PAD_WASTE when they are whole cache lines (a weight gradient over 784 inputs: 49
     vectors of 16 padded to 50 for 5 vectors x 4 rows). Of the candidates, the one with the fewest
     loads per multiply-add in a trip of the reduce loop wins; loads whose indices coincide count once, so a 3x3
     window's overlapping input rows are shared between output rows, masked loads (padding) count 3, and loads of
     an input that stays in cache from one tile to the next count RESIDENT_LOAD_COST (a convolution's weights,
     each broadcast inside its FMA: no cache miss, but a load slot), so a convolution's tile balances weights and
     input vectors (32 output rows of 64 channels: 8 channels x 2 rows with AVX-512, 4 x 2 with AVX2). A tile with
     an unrolled window pads no dim.
     A tile that would fetch MAX_STREAMED_LINES cache lines or more from L2 per multiply-add is passed over
     for the next best one: a weight gradient dy.T @ x (256x784 over a batch of 128) with 7 vectors x 2 rows
     reads 7 new lines of x per 14 multiply-adds and runs at half the speed of 1 vector x 16 rows, whose 16
     weights per trip come from one cache line that stays in L1.
  3. short reduce dims (a 3x3 window) are unrolled whole when a longer reduce loop remains: more independent
     work per loop trip, shared loads, and the masks of padded loads stop depending on the loop.
     3a. a tile's reduce loop along which an input's index isn't affine (rows gathered from parts, as the gradient
     of q, k and v per head read as one matrix) takes GATHERED_UNROLL trips per loop trip, so the index's
     divisions and remainders are computed once for them.
  4. loop order, in a matrix product: the output dim the biggest per-tile input doesn't depend on runs
     innermost, so that input stays in cache while the tiles sweep along it (a matmul's packed column panel,
     see minigrad.schedule.packing), when the other dim has enough tiles to share out to the threads.
  5. row reductions (no lanes on the output): lanes from a contiguous reduce dim, summed across at the end;
     4 vectors per loop trip, so a max (a compare and a blend per vector) isn't waiting on the previous one.
     Without a register tile the rows only stream through: on CPUs that run 64-byte vectors as two halves
     (AMD Zen 3/4, Target.halves_wide_vectors) they take 32-byte vectors, which stream faster there, each vector
     with its own accumulator (lowerer._row_lanes).
  6. kernels with several reduces (see minigrad.schedule.scheduler.KernelPlan): lanes of one width on the
     output's contiguous dim and on every contiguous reduce dim (without any, short reduce loops unrolled whole);
     two rows per outer loop trip when there are many and they span two cache lines or more.
  7. the threads split the outermost loop: a short one that doesn't divide among them trades places with a
     bigger global dim.
  8. a one-hot sum over a reduce loop (an embedding's gradient: over the tokens, (id == v) * grad for each
     vocabulary row v): no rows in the tile, all the row's vectors under the one branch the linearizer puts
     around them.
"""
from __future__ import annotations
import functools
import itertools
import math
from minigrad.codegen.kernel import Kernel, Opt, KernelOptError
from minigrad.opt.gpu_heuristics import gpu_optimizations
from minigrad.codegen.lowerer import VECTOR_WIDTHS
from minigrad.codegen.vectorize import vector_ok
from minigrad.helpers import cpu_threads, prod
from minigrad.opt.cpu_policy import (cached_bytes, l1_resident_bytes, lane_widths, line_elements, max_accumulators, min_paired_row_elements,
                                     row_by_row_accumulators, streamed_vector_bytes)
from minigrad.uop.ops import Ops, UOp, one_hot_pick
from minigrad.uop.shapetracker import ShapeTracker
from minigrad.uop.symbolic import split_terms

LANES = tuple(sorted(VECTOR_WIDTHS, reverse=True))
TILE_ROWS = (1, 2, 3, 4, 6, 8, 16)   # register tile rows tried (3 x 4 dot products fill AVX2's 12 accumulators)
MAX_PAD_WASTE = 1 / 64     # a tile's rows may pad their dim (PADTO) by up to this fraction
MAX_LANE_TILE_PAD_WASTE = 1 / 48  # ... and a register tile's vectors along the lanes (rule 2) pad the rest by up to this
MAX_LANE_PAD_WASTE = 1 / 4  # lanes on an output dim no width divides may pad it by up to this fraction (rule 1)
MIN_PADDED_LANE_VECTORS = 4  # ... when that makes at least this many vectors (a dim of 5 stays scalar)
MAX_ONE_HOT_VECTORS = 64   # vectors added under one IF by a one-hot sum (rule 8)
MAX_UNROLLED_REDUCE = 4    # reduce dims up to this size are unrolled whole
ROW_UNROLL = 4             # vectors per loop trip in a row reduction: a shorter chain through the accumulator
DIVIDING_UNROLL = 2        # vectors per loop trip in an elementwise kernel with divisions or square roots (rule 1c)
MIN_DIVIDING_TRIPS = 8     # ... when the loop keeps this many trips
GATHERED_UNROLL = 4        # trips per loop trip of a tile's reduce loop along which an input's index isn't affine
MASKED_LOAD_COST = 3       # a padded vector load: its lane mask and the masked load (measured: conv tiles rank right)
RESIDENT_LOAD_COST = 1 / 3  # a load of an input that stays in cache (a convolution's weights, broadcast into their FMAs)
MIN_OUTER_TRIPS = 8        # a matrix product's column tiles run outermost (shared by the threads) from this many on
FUSED_MIN_ROWS = 64        # a fused-reduce kernel with this many rows takes two per outer loop trip
MIN_REUSE_TILES = 8        # an input part that stays in cache (see cached_bytes) when this many consecutive tiles read it
MAX_STREAMED_LINES = 1 / 3  # cache lines from L2 per multiply-add a tile must stay under (a 4x4 tile on a packed panel: 0.27)
MAX_STREAM_CHECKS = 8      # the best tiles by loads per multiply-add that are checked for it


def index_strides(st: ShapeTracker) -> tuple[int | None, ...]:
  """Per dim the buffer stride if the index is affine in that dim (None if not). Unlike `real_strides`,
  validity (padding) may depend on the dim."""
  if len(st.views) == 1: return st.views[0].strides
  variables = [UOp.variable(f"idx{d}", 0, max(size - 1, 0)) for d, size in enumerate(st.shape)]
  dim_of = {variable: d for d, variable in enumerate(variables)}
  index, _ = st.to_indexed_uops(variables)
  strides: list[int | None] = [0] * len(st.shape)
  for term in split_terms(index):
    scaled = term.op is Ops.MUL and term.src[1].op is Ops.CONST
    base, coefficient = (term.src[0], term.src[1].arg) if scaled else (term, 1)
    if base in dim_of and strides[dim_of[base]] == 0: strides[dim_of[base]] = coefficient
    else:
      for node in term.toposort:
        if node in dim_of: strides[dim_of[node]] = None
  return tuple(strides)


def _strides(k: Kernel, axis: int) -> list[int | None]: return [index_strides(st)[axis] for st in k.sts]


def _trial(k: Kernel, opt: Opt | None) -> Kernel | None:
  """A copy of `k` with `opt` applied (if any), or None if it doesn't apply."""
  trial = k.copy()
  try:
    if opt is not None: trial.apply_opt(opt)
  except KernelOptError: return None
  return trial


def _lanes_fit(k: Kernel, opt: Opt, scattered_output: bool = False, gathered_parts: bool = False,
               gathered_epilogue: bool = False) -> bool:
  """After `opt`, is the new (last) dim read contiguously or not at all by every buffer (with `scattered_output`:
  by every input, one of them contiguously; the output is then written lane by lane)? With `gathered_parts`, padded
  inputs (the parts of a cat) may read it another way, lane by lane, when the output and another input are
  contiguous along it. With `gathered_epilogue`, so may inputs that the reduce loop doesn't read (loaded once per
  output vector, after the loop)."""
  trial = _trial(k, opt)
  if trial is None: return False
  strides = [(st is trial.output_st, stride) for st, stride in zip(trial.sts, _strides(trial, trial.shape_len - 1))]
  if gathered_epilogue:
    in_loop = {id(st) for st in _loop_loads(trial)}
    return all(stride in (0, 1) or (not is_output and id(st) not in in_loop) for st, (is_output, stride) in zip(trial.sts, strides))
  if gathered_parts:
    padded = [st.views[-1].mask is not None for st in trial.sts]
    return all(stride in (0, 1) or is_padded for (_, stride), is_padded in zip(strides, padded)) and \
      sum(stride == 1 for _, stride in strides) >= 2 and any(is_output and stride == 1 for is_output, stride in strides)
  if not scattered_output: return all(stride in (0, 1) for _, stride in strides)
  inputs = [stride for is_output, stride in strides if not is_output]
  return all(stride in (0, 1) for stride in inputs) and 1 in inputs


def hand_coded_optimizations(k: Kernel) -> None:
  if k.symbolic:
    # variable-length loops (symbolic shapes) can't be split: when the heuristics reach for one, the kernel keeps
    # the actions chosen on a copy up to then
    trial = k.copy()
    try: _choose_optimizations(trial)
    except KernelOptError: pass
    for opt in trial.applied_opts: k.apply_opt(opt)
    return
  _choose_optimizations(k)


def _choose_optimizations(k: Kernel) -> None:
  if any(n.op is Ops.SORT for n in k.ast.toposort): return   # one sort call per row: nothing to split or upcast
  if k.has_local: return gpu_optimizations(k)
  if not k.full_shape: return
  _cpu_optimizations(k)
  _outer_loop_for_threads(k)


def _outer_loop_for_threads(k: Kernel) -> None:
  """7. the threads share the outermost loop: when it has fewer than MIN_OUTER_TRIPS trips that don't divide
  among the threads, the biggest global dim runs outermost instead if it shares out better (a conv weight
  gradient's (3, 3, 8, 4) tiles: 3 trips over two threads left one idle for a third of the time; 8 don't)."""
  globals_, threads = k.axes_of("global"), cpu_threads()
  if not globals_ or k.full_shape[globals_[0]] >= MIN_OUTER_TRIPS or k.full_shape[globals_[0]] % threads == 0: return
  biggest = max(globals_[1:], key=lambda a: k.full_shape[a], default=None)
  if biggest is not None and (k.full_shape[biggest] >= MIN_OUTER_TRIPS or k.full_shape[biggest] % threads == 0):
    k.apply_opt(Opt("SWAP", 0, globals_.index(biggest)))


def _cpu_optimizations(k: Kernel) -> None:
  stored = [n.src[2].dtype for n in k.ast.toposort if n.op is Ops.STORE]
  if any(not vector_ok(dt, 2) for dt in stored): return   # SIMD lanes for float32/float64/int32 outputs
  dtype_bytes = max((n.dtype.itemsize for n in k.ast.toposort if n.op in (Ops.LOAD, Ops.CONST, Ops.ARANGE)), default=4)
  widths = lane_widths(k.target, dtype_bytes, LANES)
  out_strides = index_strides(k.output_st)
  globals_ = k.axes_of("global")
  has_reduce = bool(k.axes_of("reduce"))
  if sum(1 for n in k.ast.toposort if n.op is Ops.REDUCE_AXIS) > 1: return _fused_reduces(k, widths, out_strides)
  # 1. lanes on the output's contiguous dim (in a reduce kernel, padded to whole vectors when no width divides it)
  for axis in reversed(globals_):
    if out_strides[axis] != 1: continue
    width = next((w for w in widths if _lanes_fit(k, Opt("UPCAST", globals_.index(axis), w))), None)
    if width is None and has_reduce and (padded := _padded_lanes(k, globals_.index(axis), widths)) is not None:
      k.apply_opt(Opt("PADTO", globals_.index(axis), padded))
      width = next(w for w in widths if padded % w == 0)
    if width is None and has_reduce:   # an input read after the reduce loop, across the lanes, is loaded lane by lane
      width = next((w for w in widths if _lanes_fit(k, Opt("UPCAST", globals_.index(axis), w), gathered_epilogue=True)), None)
    if width is None: continue
    size = k.full_shape[axis]
    k.apply_opt(Opt("UPCAST", globals_.index(axis), width))
    remainder = axis if size > width else None   # the rest of the split dim stays at `axis`
    if has_reduce: (_one_hot_tile if _sums_one_hot_rows(k) else _register_tile)(k, remainder)
    elif remainder is not None: _unroll_dividing(k, remainder)
    return
  # 1a. a cat whose parts don't all run along the output (the gradient of q, k, v split from one projection, v's
  #     transposed): lanes on the output's contiguous dim anyway, those parts' lanes loaded one by one
  for axis in reversed(globals_ if not has_reduce else []):
    if out_strides[axis] != 1: continue
    width = next((w for w in widths if _lanes_fit(k, Opt("UPCAST", globals_.index(axis), w), gathered_parts=True)), None)
    if width is not None: return k.apply_opt(Opt("UPCAST", globals_.index(axis), width))
  # 1b. a transposing copy: lanes along the dim the input reads contiguously, and as many rows of the output's
  #     contiguous dim per trip when it has whole blocks of them: each trip moves a square block, whose stores the
  #     vectorizer transposes by shuffles (vectorize.transposed_stores), several times faster than writing the
  #     output lane by lane, which is what happens otherwise
  if not has_reduce and (lanes := _scattered_lanes(k, widths)) is not None:
    rows = next((a for a in globals_ if out_strides[a] == 1 and a != lanes[0] and k.full_shape[a] % lanes[1] == 0), None)
    if rows is not None:
      k.apply_opt(Opt("UPCAST", globals_.index(rows), lanes[1]))
      lanes = _scattered_lanes(k, [lanes[1]])
    if lanes is not None: k.apply_opt(Opt("UPCAST", k.axes_of("global").index(lanes[0]), lanes[1]))
    return
  # 5. row reductions: lanes from a contiguous reduce dim, summed across at the end; 4 vectors per loop trip
  reduces = k.axes_of("reduce")
  for axis in reversed(reduces):
    fitting = [w for w in widths if _lanes_fit(k, Opt("UNROLL", reduces.index(axis), w))]
    if not fitting: continue
    # dot products (x @ w.T): a tile of outputs shares the loaded vectors, when it saves at least an eighth of them
    # (a matrix-vector product, whose rows share one vector of w, never does: it streams)
    tiled = k.copy()
    tiled.apply_opt(Opt("UNROLL", reduces.index(axis), fitting[0]))
    if _register_tile(tiled, None, min_reuse=1 / 8):
      for opt in tiled.applied_opts[len(k.applied_opts):]: k.apply_opt(opt)
      return
    # else independent vectors per trip, streamed
    stream_bytes = streamed_vector_bytes(k.target)
    width = next((w for w in fitting if w * dtype_bytes <= stream_bytes), fitting[0])
    size = k.full_shape[axis]
    k.apply_opt(Opt("UNROLL", reduces.index(axis), width))
    if size > width: _unroll_rows(k, axis)
    return


def _unroll_dividing(k: Kernel, remainder: int) -> None:
  """1c. an elementwise kernel whose vectors go through a division or a square root (an Adam update: two divisions
  and a square root per vector), long-latency instructions the divider pipelines only partly, takes
  DIVIDING_UNROLL vectors per loop trip, when the loop keeps at least MIN_DIVIDING_TRIPS trips: the next vector's
  division starts while the last one's finishes (AVX2's Adam update on 200704 weights about 1.1x faster; with
  AVX-512 the same speed)."""
  if not any(n.op in (Ops.FDIV, Ops.SQRT) for n in k.ast.toposort): return
  size = k.full_shape[remainder]
  if size % DIVIDING_UNROLL == 0 and size // DIVIDING_UNROLL >= MIN_DIVIDING_TRIPS:
    k.apply_opt(Opt("UPCAST", k.axes_of("global").index(remainder), DIVIDING_UNROLL))


def _padded_lanes(k: Kernel, global_index: int, widths: list[int]) -> int | None:
  """1. the size to pad a contiguous output dim to (PADTO) for lanes of the widest width that wastes at most
  MAX_LANE_PAD_WASTE of them and makes at least MIN_PADDED_LANE_VECTORS vectors, when no width divides it (a
  vocabulary of 65: 5 vectors of 16 with masked loads and stores, instead of 65 scalar outputs per row)."""
  size = k.full_shape[k.axes_of("global")[global_index]]
  for width in widths:
    padded = -(-size // width) * width
    if padded < MIN_PADDED_LANE_VECTORS * width or (padded - size) / padded > MAX_LANE_PAD_WASTE: continue
    if (trial := _trial(k, Opt("PADTO", global_index, padded))) is None: continue
    if _lanes_fit(trial, Opt("UPCAST", global_index, width)): return padded
  return None


def _sums_one_hot_rows(k: Kernel) -> bool:
  """Does the kernel sum (a == arange) * x over a reduce loop along which the arange doesn't run (an embedding's
  gradient: over the tokens t, (id[t] == v) * grad[t] for each vocabulary row v)? The linearizer adds such terms
  under an IF (see linearizer.one_hot_term), which holds for one row v in the vocabulary per token."""
  reduces = [n for n in k.ast.toposort if n.op is Ops.REDUCE_AXIS]
  if len(reduces) != 1 or (pick := one_hot_pick(reduces[0])) is None: return False
  strides = k.st_of(pick[1].src[0]).real_strides()
  return all(strides[a] == 0 for a in k.axes_of("reduce"))


def _one_hot_tile(k: Kernel, lane_remainder: int | None) -> None:
  """8. a one-hot sum's tile: no rows of the dims the condition depends on (each would need an IF of its own, each
  loading the same x), and all the vectors along the lanes' dim (up to MAX_ONE_HOT_VECTORS) under one IF: the trips
  where it doesn't hold, all but one in the vocabulary's size, are a load, a compare and a branch. Accumulators that
  don't fit in registers are only read and written where it holds. (An embedding's gradient as 16-row tiles of
  multiply-adds ran an order of magnitude slower: every row's multiply-adds on every token.)"""
  if lane_remainder is None: return
  size = k.full_shape[lane_remainder]
  vectors = max((n for n in range(2, min(size, MAX_ONE_HOT_VECTORS) + 1) if size % n == 0), default=None)
  if vectors is not None: k.apply_opt(Opt("UPCAST", k.axes_of("global").index(lane_remainder), vectors))


def _scattered_lanes(k: Kernel, widths: list[int]) -> tuple[int, int] | None:
  """(global axis, width) of the first lanes an input reads contiguously, the output being written lane by lane."""
  globals_ = k.axes_of("global")
  for axis in reversed(globals_):
    width = next((w for w in widths if _lanes_fit(k, Opt("UPCAST", globals_.index(axis), w), scattered_output=True)), None)
    if width is not None: return axis, width
  return None


def _unroll_rows(k: Kernel, axis: int) -> None:
  """ROW_UNROLL vectors per trip of reduce loop `axis`, when it stays a loop of at least 2 trips."""
  if k.full_shape[axis] % ROW_UNROLL == 0 and k.full_shape[axis] >= 2 * ROW_UNROLL:
    k.apply_opt(Opt("UNROLL", k.axes_of("reduce").index(axis), ROW_UNROLL))


def _fused_reduces(k: Kernel, widths: list[int], out_strides: tuple[int | None, ...]) -> None:
  """6. a kernel with several reduces (a fused softmax: row max, row sum, output): the output's contiguous dim and
  every contiguous reduce dim get lanes of one width (they share one vector range), reduce dims 4 vectors per
  loop trip, two rows per outer loop trip (two streams for the memory system: softmax 4096x1024 on one core -4%)
  when the rows are long enough to stream (min_paired_row_elements: a cross-entropy's 10 classes are not). No
  register tile and no loop reordering: the reduces are computed once per outer loop trip."""
  row_elements = max((k.full_shape[a] for a in k.axes_of("reduce")), default=0)
  candidates = [("UPCAST", a) for a in reversed(k.axes_of("global")) if out_strides[a] == 1][:1] + [("REDUCE", a) for a in k.axes_of("reduce")]
  width = next((w for w in widths if all(k.full_shape[a] % w == 0 for _, a in candidates)), None)
  laned = False
  for kind, axis in reversed(candidates if width is not None else []):   # highest dims first: splitting one doesn't move the others
    group = k.axes_of("global" if kind == "UPCAST" else "reduce")
    opt = Opt("UPCAST" if kind == "UPCAST" else "UNROLL", group.index(axis), width)
    if not _lanes_fit(k, opt): continue
    size = k.full_shape[axis]
    k.apply_opt(opt)
    laned = True
    if kind == "REDUCE" and size > width: _unroll_rows(k, axis)   # the rest of the split dim stays at `axis`
  # without lanes, short reduce loops (a max pooling's 2x2 window, read by its max, its first maximum and its
  # selection) are unrolled whole: no loop, and their indices fold to constants
  for axis in reversed(k.axes_of("reduce") if not laned else []):
    if k.full_shape[axis] <= MAX_UNROLLED_REDUCE: k.apply_opt(Opt("UNROLL", k.axes_of("reduce").index(axis), k.full_shape[axis]))
  # two rows per outer loop trip: every pass reads two rows at once, two streams for the memory system
  if not (globals_ := k.axes_of("global")): return   # a single output: no rows to pair
  rows = globals_[0]
  if out_strides[rows] != 1 and k.full_shape[rows] % 2 == 0 and k.full_shape[rows] >= FUSED_MIN_ROWS and \
     row_elements >= min_paired_row_elements(k.target):
    k.apply_opt(Opt("UPCAST", 0, 2))


def _register_tile(k: Kernel, lane_remainder: int | None, min_reuse: float = 0.0) -> bool:
  """Choose the register tile (rules 2-4) by counting, for each candidate, the loads one trip of the reduce loop
  needs per multiply-add: loads whose indices coincide (a 3x3 window's overlapping rows) count once. Tiles use
  more vectors along the lane dim (`lane_remainder`, what is left of it as a loop) and up to two other output
  dims: a matmul's rows, a convolution's output channels and rows. Only tiles that need fewer loads per
  multiply-add than no tile count (a plain sum gains nothing), and with `min_reuse` fewer than 1 - `min_reuse`;
  with none left, nothing applies (returns False). Of the best ones, the first that streams less than
  MAX_STREAMED_LINES from L2 per multiply-add wins, else the best."""
  globals_ = k.axes_of("global")
  vector_loads = [st for st in _loop_loads(k) if index_strides(st)[k.shape_len - 1] == 1]
  # rows first (a dim the vector loads don't depend on), then the other dim: the order the tile's statements come in
  axes = sorted([a for a in globals_ if a != lane_remainder][-2:], key=lambda a: any(index_strides(st)[a] != 0 for st in vector_loads))
  reduces = k.axes_of("reduce")
  # 3. short reduce dims (a 3x3 window) are unrolled whole, when a longer reduce loop remains
  unrolled = [a for a in reduces if k.full_shape[a] <= MAX_UNROLLED_REDUCE and any(k.full_shape[b] > MAX_UNROLLED_REDUCE for b in reduces)]
  unrolls = [Opt("UNROLL", reduces.index(a), k.full_shape[a]) for a in reversed(unrolled)]
  candidates: list[tuple[tuple[float, int], list[Opt]]] = []
  for vectors in range(1, 9):
    if vectors > 1 and (lane_remainder is None or not _lane_vectors_fit(k, lane_remainder, vectors)): continue
    for amounts_of_axes in itertools.product(TILE_ROWS, repeat=len(axes)):
      amounts = {a: n for a, n in zip([lane_remainder] + axes, (vectors,) + amounts_of_axes) if a is not None and n > 1}
      if prod(amounts.values()) > max_accumulators(k.target): continue
      pads = {a: -(-k.full_shape[a] // n) * n for a, n in amounts.items() if k.full_shape[a] % n}
      if any(padded > k.full_shape[a] * (1 + (MAX_LANE_TILE_PAD_WASTE if a == lane_remainder else MAX_PAD_WASTE)) for a, padded in pads.items()): continue
      # past half the vector registers in accumulators (16 of AVX-512's 32, 8 of AVX2's 16) the statements go row
      # by row, so one broadcast of a row is live at a time (in the other order gcc and clang keep all of them in
      # registers and spill accumulators)
      order = [lane_remainder] + axes if prod(amounts.values()) <= row_by_row_accumulators(k.target) else axes + [lane_remainder]
      # a dot-product tile (lanes on the reduce dim) loads a vector for every row of both dims: the bigger dim's go
      # first, one at a time, so only the smaller dim's vectors stay live beside the accumulators (AVX2's 2 x 6
      # tile the other way round keeps 6 and spills accumulators)
      if lane_remainder is None: order = sorted(axes, key=lambda a: -amounts.get(a, 1))
      if prod(amounts.values()) + _live_loads(k, amounts, order) > k.target.vector_registers: continue
      shape = tuple(pads.get(a, size) for a, size in enumerate(k.full_shape))
      opts = [Opt("PADTO", a, amounts[a]) for a in pads] + _upcasts(globals_, [(a, amounts[a]) for a in order if a in amounts], shape) + unrolls
      # a tile with an unrolled window (a convolution) pads no dim: 256 output channels padded to 258 for 3 x 4 tiles
      # measured 2.6x slower with AVX2 than 4 x 2 tiles on the 256
      if unrolled and pads: continue
      resident = _resident_inputs(k, amounts) if unrolled else frozenset()
      score = _tile_cost_from_strides(k, amounts, unrolled, resident)
      if score is None or pads:   # an index not affine in a dim before the split, or padding: count on the split kernel
        if (trial := _with_opts(k, opts)) is None: continue
        score = _tile_cost(trial, resident)
      waste = prod(padded / k.full_shape[a] for a, padded in pads.items())
      candidates.append(((score[0] * waste, score[1]), opts))
  untiled = next((score[0] for score, opts in candidates if len(opts) == len(unrolls)), math.inf)
  bound = min(untiled, 1 - min_reuse) if min_reuse else untiled
  candidates = sorted([c for c in candidates if c[0][0] < bound], key=lambda c: c[0])
  tiled = [t for _, opts in candidates[:MAX_STREAM_CHECKS] if (t := _tiled(k, opts)) is not None]
  if not tiled: return False
  chosen = next((t for t in tiled if _streamed_lines(t) < MAX_STREAMED_LINES), tiled[0])
  for opt in chosen.applied_opts[len(k.applied_opts):]: k.apply_opt(opt)
  _unroll_gathered_reduce(k)
  return True


def _lane_vectors_fit(k: Kernel, lane_remainder: int, vectors: int) -> bool:
  """May a register tile take `vectors` vectors along the lanes' dim, whose rest (`lane_remainder`) is left as a loop?
  When they divide it; else padded to whole tiles (the padded vectors' loads read the dim's first vector instead, see
  Kernel.padding_only) by up to MAX_LANE_TILE_PAD_WASTE, when the tile's vectors are whole cache lines (a weight
  gradient over 784 inputs: 49 vectors of 16 padded to 50, 5 vectors x 4 rows instead of 1 x 16). Tiles of vectors
  that straddle lines (AVX2's 3 x 8 lanes) measured slower padded than the unpadded ones."""
  size = k.full_shape[lane_remainder]
  if size % vectors == 0: return True
  element_bytes = max((n.dtype.itemsize for n in k.ast.toposort if n.op in (Ops.LOAD, Ops.CONST, Ops.ARANGE)), default=4)
  tile_bytes = vectors * k.full_shape[k.shape_len - 1] * element_bytes
  return tile_bytes % k.target.cache_line_bytes == 0 and -(-size // vectors) * vectors <= size * (1 + MAX_LANE_TILE_PAD_WASTE)


def _unroll_gathered_reduce(k: Kernel) -> None:
  """3a. a tile's reduce loop along which an input's index isn't affine (its rows gathered from parts: the gradient of
  q, k and v laid out per head, read as one matrix) runs GATHERED_UNROLL trips per loop trip: the index's divisions
  and remainders are computed once for them instead of for each (the GPT's q, k, v input gradient about 1.4x faster
  with AVX2)."""
  reduces = k.axes_of("reduce")
  if len(reduces) != 1 or k.full_shape[reduces[0]] % GATHERED_UNROLL or k.full_shape[reduces[0]] < 2 * GATHERED_UNROLL: return
  if any(index_strides(st)[reduces[0]] is None for st in _loop_loads(k)): k.apply_opt(Opt("UNROLL", 0, GATHERED_UNROLL))


def _live_loads(k: Kernel, amounts: dict[int, int], order: list[int | None]) -> int:
  """Vector registers a tile's loaded values take beside its accumulators, with the statements in `order` (the first
  tile dim outermost): the operands that don't depend on the outermost dim are reused by each of its rows, so all
  of them stay live (a 3 x 4 tile row by row keeps its 4 vectors: with 12 accumulators, 17 of AVX2's 16 registers,
  and the compilers spill accumulators), plus one for the outermost dim's current operand. Loads indexed alike
  make one operand (relu(x + bias) is one value per row of x), so the input with the most distinct loads counts;
  each constant the operands are computed with (relu's zero) takes a register too."""
  outer = next((a for a in order if amounts.get(a, 1) > 1), None)
  inner = {a: n for a, n in amounts.items() if a != outer}
  reused = [st for st in _loop_loads(k) if outer is None or index_strides(st)[outer] == 0]
  constants = {n.arg for r in k.ast.toposort if r.op is Ops.REDUCE_AXIS for n in r.src[0].toposort if n.op is Ops.CONST}
  return max((_count_loads([(index_strides(st)[a], n) for a, n in inner.items()]) for st in reused), default=0) + 1 + len(constants)


def _with_opts(k: Kernel, opts: list[Opt]) -> Kernel | None:
  """A copy of `k` with `opts` applied, or None if one doesn't apply."""
  trial = _trial(k, None)
  try:
    for opt in opts: trial.apply_opt(opt)
  except KernelOptError: return None
  return trial


def _tiled(k: Kernel, opts: list[Opt]) -> Kernel | None:
  """A copy of `k` with a register tile's `opts` applied and its loops ordered (rule 4), or None."""
  if (trial := _with_opts(k, opts)) is not None: _order_loops(trial)
  return trial


def _streamed_lines(k: Kernel) -> float:
  """Cache lines per multiply-add a tiled kernel fetches from L2 (an estimate, counting float32 elements). Per trip
  of the reduce loop an input's tile reads the distinct lines of its loads (a vector is a line; scalars broadcast to
  the lanes share lines when their indices are close); a scalar that walks along the innermost reduce loop needs a
  new line every line_elements trips, a dot product's vector narrower than a line (AVX2's 8 lanes) every
  line_elements / lanes trips. The input comes from L1 instead when the innermost output loop doesn't move it and its
  part over the whole reduce loop fits in l1_resident_bytes."""
  lanes = k.first_upcast
  tile_dims = list(range(lanes + 1, k.shape_len))
  fmas = prod(k.full_shape[d] for d in tile_dims)
  loops = [d for d in range(lanes) if k.axis_kinds[d] == "reduce"]
  trips = prod(k.full_shape[d] for d in loops)
  globals_ = k.axes_of("global")
  lines = 0.0
  for st in _loop_loads(k):
    strides = index_strides(st)
    if any(strides[d] is None for d in tile_dims + loops + globals_[-1:]): continue   # not affine: not counted
    offsets = _tile_offsets([(strides[d], k.full_shape[d]) for d in tile_dims])
    per_trip = len({o // line_elements(k.target) for o in offsets})
    # an input the innermost reduce loop walks contiguously (a scalar per trip, or in a dot product a vector of the
    # lanes) takes a new line only every few trips
    width = k.full_shape[lanes] if strides[lanes] == 1 else 1
    if loops and abs(strides[loops[-1]]) == width < line_elements(k.target): per_trip *= width / line_elements(k.target)
    in_l1 = bool(globals_) and strides[globals_[-1]] == 0 and per_trip * k.target.cache_line_bytes * trips <= l1_resident_bytes(k.target)
    if not in_l1: lines += per_trip
  return lines / fmas


def _loop_loads(k: Kernel) -> list[ShapeTracker]:
  """The inputs read inside the reduce loop (an input that doesn't depend on it is loaded once, before the loop)."""
  reduce_dims = [d for d in range(k.first_reduce, k.shape_len) if k.axis_kinds[d] in ("reduce", "unroll")]
  return [st for st in k.sts if st is not k.output_st and any(index_strides(st)[d] != 0 for d in reduce_dims)]


def _resident_inputs(k: Kernel, amounts: dict[int, int]) -> frozenset[int]:
  """The inputs (indices into k.sts) that stay in cache from one tile to the next, so their loads cost a tile
  only RESIDENT_LOAD_COST: the innermost global dims don't index them for MIN_REUSE_TILES consecutive tiles, and one
  tile's part of them over the whole reduce loop fits in cached_bytes (a convolution's weights for a tile of output channels, which
  the output positions sweep; 3x3 with 64 and 128 channels on both threads: 8 channels x 2 rows beats 16 x 1 row,
  which loads fewer input vectors but more weights, by 15-20% with AVX-512). Used for kernels with an unrolled window
  only: a batched matrix product's rows would pass too, but 16 rows x 1 vector measured 15% slower there than
  4 x 4. In a matrix product (two global dims) rule 4 runs the rows innermost, so neither operand stays."""
  globals_ = k.axes_of("global")
  if len(globals_) <= 2: return frozenset()
  inner = [a for a in range(k.shape_len) if k.axis_kinds[a] not in ("global", "local")]
  resident = set()
  for i, st in enumerate(k.sts):
    if st is k.output_st: continue
    strides = index_strides(st)
    tiles = 1
    for axis in reversed(globals_):
      if strides[axis] != 0: break
      tiles *= k.full_shape[axis] // amounts.get(axis, 1)
    footprint = prod(k.full_shape[a] for a in inner if strides[a] != 0) * prod(n for a, n in amounts.items() if strides[a] != 0) * 4
    if tiles >= MIN_REUSE_TILES and footprint <= cached_bytes(k.target): resident.add(i)
  return frozenset(resident)


def _upcasts(globals_: list[int], splits: list[tuple[int, int]], shape: tuple[int, ...]) -> list[Opt]:
  """UPCAST opts for (dim, amount) splits in this order; a dim used up whole disappears, moving the later ones down."""
  opts, gone = [], []
  for axis, amount in splits:
    opts.append(Opt("UPCAST", globals_.index(axis) - sum(1 for g in gone if g < axis), amount))
    if shape[axis] == amount: gone.append(axis)
  return opts


def _tile_offsets(tile: list[tuple[int, int]]) -> set[int]:
  """The distinct element offsets one buffer reads over the tile dims, given as (stride, size)."""
  offsets = {0}
  for stride, size in tile: offsets = {o + stride * i for o in offsets for i in range(size)}
  return offsets


def _count_loads(tile: list[tuple[int | None, int]]) -> int:
  """Distinct indices one buffer reads over the tile dims, given as (stride, size): strides that overlap (a
  window's rows) give fewer loads than dims."""
  if any(stride is None for stride, _ in tile): return prod(size for _, size in tile)
  return len(_tile_offsets(tile))


def _tile_cost_from_strides(k: Kernel, upcasts: dict[int, int], unrolled: list[int], resident: frozenset[int] = frozenset()) -> tuple[float, int] | None:
  """`_tile_cost` of the kernel with `upcasts` (dim -> amount) and `unrolled` dims, from the strides of the
  unsplit kernel: the inner part of a split dim keeps its stride. None if some index isn't affine there."""
  accumulators = prod(upcasts.values())
  fmas = accumulators * prod(k.full_shape[a] for a in unrolled)
  loads = 0.0
  for st, cost in _loop_load_costs(k, k.shape_len - 1, resident):
    strides = index_strides(st)
    tile = [(strides[a], n) for a, n in upcasts.items()] + [(strides[a], k.full_shape[a]) for a in unrolled]
    if any(stride is None for stride, _ in tile): return None
    loads += _count_loads(tile) * cost
  return (loads / fmas, -accumulators)


def _loop_load_costs(k: Kernel, lane_dim: int, resident: frozenset[int]) -> list[tuple[ShapeTracker, float]]:
  """The inputs read inside the reduce loop, each with what one of its loads costs: a `resident` input's (one that
  stays in cache, see _resident_inputs: a convolution's weights) RESIDENT_LOAD_COST, since a broadcast from L1 still
  takes a load slot, others 1 or MASKED_LOAD_COST (_load_cost)."""
  resident_sts = [k.sts[i] for i in resident]
  return [(st, RESIDENT_LOAD_COST if st in resident_sts else _load_cost(st, lane_dim)) for st in _loop_loads(k)]


def _load_cost(st: ShapeTracker, lane_dim: int) -> int:
  """A vector load whose lanes are valid one by one (padding along the lanes) costs a mask and a masked load."""
  return MASKED_LOAD_COST if lane_dim in valid_dims(st) else 1


@functools.lru_cache(maxsize=4096)
def valid_dims(st: ShapeTracker) -> frozenset[int]:
  """The dims the validity (padding mask) of `st` depends on."""
  if all(view.mask is None for view in st.views): return frozenset()
  variables = [UOp.variable(f"idx{d}", 0, max(size - 1, 0)) for d, size in enumerate(st.shape)]
  _, valid = st.to_indexed_uops(variables)
  nodes = set(valid.toposort)
  return frozenset(d for d, variable in enumerate(variables) if variable in nodes)


def _tile_cost(k: Kernel, resident: frozenset[int] = frozenset()) -> tuple[float, int]:
  """(loads per multiply-add in one reduce-loop trip, -accumulators): smaller is better. The first upcast dim
  is the SIMD lanes; the other upcast dims make accumulators, the unrolled dims multiply-adds per accumulator.
  Loads of the `resident` inputs (indices into k.sts) count RESIDENT_LOAD_COST."""
  lanes = k.first_upcast
  tile_dims = [d for d in range(lanes + 1, k.shape_len)]
  accumulators = prod(k.full_shape[d] for d in tile_dims if k.axis_kinds[d] == "upcast")
  fmas = accumulators * prod(k.full_shape[d] for d in tile_dims if k.axis_kinds[d] == "unroll")
  loads = sum(_count_loads([(index_strides(st)[d], k.full_shape[d]) for d in tile_dims]) * cost for st, cost in _loop_load_costs(k, lanes, resident))
  return (loads / fmas, -accumulators)


def _order_loops(k: Kernel) -> None:
  """4. In a matrix product (two output dims), the dim the biggest per-tile input doesn't depend on (a matmul's
  rows, along which the packed column panel stays the same) runs innermost, so that input stays in L2 while the
  row tiles sweep it and the other input streams by - when the other dim, which then runs outermost and is shared
  out to the threads, has at least MIN_OUTER_TRIPS trips (a narrow product's second operand fits in L2 anyway).
  The rows are not cut into L2-sized blocks: with the panel prefetched (see codegen.cpu_patterns.panel_prefetches)
  that measured slower."""
  globals_ = k.axes_of("global")
  if len(globals_) != 2: return
  inner = [a for a in range(k.shape_len) if k.axis_kinds[a] not in ("global", "local")]

  def tile_bytes(st: ShapeTracker) -> int:
    strides = index_strides(st)
    return prod(k.full_shape[a] for a in inner if strides[a] != 0) * 4   # float32 elements: a size estimate
  inputs = [st for st in k.sts if st is not k.output_st]
  if not inputs: return
  biggest = max(inputs, key=tile_bytes)
  strides = index_strides(biggest)
  candidates = [a for a in globals_ if strides[a] == 0 and k.full_shape[a] > 1]
  if not candidates: return
  rows = candidates[-1]
  outer = next(a for a in globals_ if a != rows)
  if rows != globals_[-1] and k.full_shape[outer] >= MIN_OUTER_TRIPS: k.apply_opt(Opt("SWAP", globals_.index(rows), len(globals_) - 1))
