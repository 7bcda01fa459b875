"""What the CPU renderers (C and LLVM) look for in a kernel's uops before they spell it.

Input: the linearizer's list of UOps. Output: facts about it that the renderers turn into better instructions:
  - `simd_idioms`: multi-op float32 vector patterns x86 does in one instruction (floor, max/min selects, x * 2**n);
  - `prefetches`: vector loads that should also prefetch data ahead (the next row of a fused softmax, the rest of a
    packed matmul panel);
  - `EXP2_POLY`: the polynomial of the renderers' inline AVX-512 exp2.
Both renderers use the same facts, so a kernel gives the same bits on either backend.
"""
from __future__ import annotations
from minigrad.dtype import dtypes
from minigrad.uop.ops import UOp, Ops
from minigrad.uop.symbolic import split_terms, _coefficient

# 2**f on [-0.5, 0.5]: a degree-6 polynomial fitted for relative error (1.9e-9), under 1 ulp in float32 with FMAs;
# highest power first
EXP2_POLY = (1.534732e-04, 1.3400154e-03, 9.618484e-03, 5.550328e-02, 2.4022646e-01, 6.931472e-01, 1.0)


# ---- idioms: multi-op float32 vector patterns that x86 does in one instruction (the spelling of what they compute) ----
IDIOM_DTYPES = (dtypes.float32.vec(8), dtypes.float32.vec(16))   # AVX and AVX-512 vectors

def _const_value(u: UOp) -> float | int | None:
  if u.op is Ops.CONST: return u.arg
  if u.op is Ops.VECTORIZE and all(s is u.src[0] for s in u.src) and u.src[0].op is Ops.CONST: return u.src[0].arg
  return None


def _floor_of(u: UOp) -> UOp | None:
  """y when u is floor(y) written as trunc(y) - (y < trunc(y)) (the Tensor API's floor)."""
  if u.op is not Ops.ADD or u.dtype not in IDIOM_DTYPES: return None
  for t, minus in (u.src, u.src[::-1]):
    if t.op is Ops.TRUNC and minus.op is Ops.NEG and minus.src[0].op is Ops.CAST and minus.src[0].src[0].op is Ops.CMPLT \
       and minus.src[0].src[0].src == (t.src[0], t): return t.src[0]
  return None


def _power_of_two_exponent(u: UOp) -> UOp | None:
  """n when u is 2**n built from the bits of the int32 n + 127 shifted into a float32's exponent."""
  if u.op is not Ops.BITCAST or u.dtype not in IDIOM_DTYPES: return None
  shl = u.src[0]
  if shl.op is not Ops.SHL or _const_value(shl.src[1]) != 23 or shl.src[0].op is not Ops.ADD: return None
  for cast, bias in (shl.src[0].src, shl.src[0].src[::-1]):
    if cast.op is Ops.CAST and _const_value(bias) == 127 and cast.src[0].dtype == u.dtype: return cast.src[0]
  return None


def simd_idioms(uops: list[UOp]) -> dict[UOp, tuple[str, tuple[UOp, ...]]]:
  """On 8 and 16 float32 lanes (`_v8`, `_v16`): floor(y) -> floorf_v16(y) (vrndscaleps; AVX: vroundps), x * 2**n for
  an integral n (exp's scaling) -> scalef_v16(x, n) (vscalefps), where(p < q, q, p) -> maxps_v16(q, p) and
  where(p < q, p, q) -> minps_v16(p, q): node -> (idiom, its arguments). The uops an idiom replaces are left unused.
  Renderers fall back to the plain spelling where the target lacks the instruction."""
  idioms: dict[UOp, tuple[str, tuple[UOp, ...]]] = {}
  integral: dict[UOp, bool] = {}

  def is_integral(u: UOp) -> bool:
    if u not in integral:
      value = _const_value(u)
      integral[u] = (u.op is Ops.TRUNC or u in idioms and idioms[u][0].startswith("floorf_v") or value is not None and float(value).is_integer()
                     or u.op in (Ops.ADD, Ops.NEG) and all(is_integral(s) for s in u.src)
                     or u.op is Ops.WHERE and is_integral(u.src[1]) and is_integral(u.src[2]))
    return integral[u]
  for u in uops:
    lanes = u.dtype.count
    if (y := _floor_of(u)) is not None: idioms[u] = (f"floorf_v{lanes}", (y,))
    elif u.op is Ops.WHERE and u.dtype in IDIOM_DTYPES and u.src[0].op is Ops.CMPLT:
      # x86's max is (a > b) ? a : b and min (a < b) ? a : b, NaNs and signed zeros included: clamp's selects
      p, q = u.src[0].src
      if u.src[1:] == (q, p): idioms[u] = (f"maxps_v{lanes}", (q, p))
      elif u.src[1:] == (p, q): idioms[u] = (f"minps_v{lanes}", (p, q))
    elif u.op is Ops.MUL and u.dtype in IDIOM_DTYPES:
      for x, power in (u.src, u.src[::-1]):
        if (n := _power_of_two_exponent(power)) is not None and is_integral(n):
          idioms[u] = (f"scalef_v{lanes}", (x, n))
          break
  return idioms


# ---- prefetching ----

def prefetches(uops: list[UOp], threaded_outer_loop: bool) -> dict[UOp, int]:
  """Vector loads that also prefetch -> how many elements ahead (see row_prefetches and panel_prefetches)."""
  return {**(row_prefetches(uops) if threaded_outer_loop else {}), **panel_prefetches(uops)}


# rows up to this size: the hardware's stream prefetch stops at page boundaries (4 KB), so each such row would start
# with a cache miss per line, while longer rows stream
PREFETCH_ROW_BYTES = 16 << 10


def row_prefetches(uops: list[UOp]) -> dict[UOp, int]:
  """Vector loads in the first inner loop that reads a buffer again within one trip of the threaded outer loop (a
  fused softmax's sum pass over a row the max pass just brought into L1): each also prefetches its element one outer
  trip ahead, so the next row arrives while this one computes. load -> elements ahead (the outer loop's stride)."""
  outer = next((u for u in uops if u.op is Ops.RANGE), None)
  if outer is None: return {}
  loop_of: dict[UOp, int] = {}   # inner loop (counted in order) -> index; loads belong to the loop directly inside `outer`
  open_loops: list[UOp] = []
  reads: dict[UOp, list[int]] = {}   # buffer -> the inner loops that read it
  candidates: list[UOp] = []
  for u in uops:
    if u.op is Ops.RANGE and u is not outer:
      if not open_loops: loop_of[u] = len(loop_of)
      open_loops.append(u)
    elif u.op is Ops.ENDRANGE and open_loops: open_loops.pop()
    elif u.op is Ops.LOAD and open_loops and u.dtype.count > 1 and len(u.src[0].src) == 2:
      loop, buffer = loop_of[open_loops[0]], u.src[0].src[0]
      if loop not in reads.setdefault(buffer, []): reads[buffer].append(loop)
      if len(reads[buffer]) == 2 and reads[buffer][1] == loop: candidates.append(u)
  prefetched: dict[UOp, int] = {}
  for load in candidates:
    terms = [_coefficient(term) for term in split_terms(load.src[0].src[1])]
    strides = [coefficient for base, coefficient in terms if base is outer]
    if len(strides) != 1 or any(base is not outer and base is not None and outer in base.toposort for base, _ in terms): continue
    if 0 < strides[0] * load.dtype.scalar().itemsize <= PREFETCH_ROW_BYTES: prefetched[load] = strides[0]
  return prefetched


# a vector load that feeds a register tile (used by several multiply-adds) and whose index moves this many bytes
# per trip of its reduce loop reads a panel of a few vectors side by side per trip (a matmul operand packed by
# minigrad.schedule.packing). The loop is compute-bound and the hardware brings the panel from L2 into L1 too late:
# each such load also prefetches PREFETCH_AHEAD_BYTES ahead.
# Streams a whole row apart per trip (an unpacked operand, a convolution's input planes) and loads used once
# (a row reduction, bound by memory) are left to the hardware.
PANEL_STEP_BYTES = (128, 256)
PANEL_MIN_USES = 4
PREFETCH_AHEAD_BYTES = 2048


def panel_prefetches(uops: list[UOp]) -> dict[UOp, int]:
  """Vector loads of packed panels (see above) -> elements ahead to prefetch."""
  uses: dict[UOp, int] = {}
  for u in uops:
    for s in u.src: uses[s] = uses.get(s, 0) + 1
  prefetched: dict[UOp, int] = {}
  open_loops: list[UOp] = []
  for u in uops:
    if u.op is Ops.RANGE: open_loops.append(u)
    elif u.op is Ops.ENDRANGE and open_loops: open_loops.pop()
    elif u.op is Ops.LOAD and open_loops and open_loops[-1].arg[1] == "reduce" and u.dtype.count > 1 and len(u.src[0].src) == 2 \
        and uses.get(u, 0) >= PANEL_MIN_USES:
      strides = [coefficient for base, coefficient in map(_coefficient, split_terms(u.src[0].src[1])) if base is open_loops[-1]]
      step = strides[0] * u.dtype.scalar().itemsize if len(strides) == 1 else 0
      if PANEL_STEP_BYTES[0] <= step <= PANEL_STEP_BYTES[1]: prefetched[u] = strides[0] * (PREFETCH_AHEAD_BYTES // step)
  return prefetched
