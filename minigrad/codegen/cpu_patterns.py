"""What the CPU renderers (C and LLVM) look for in a kernel's uops before they spell it.

Input: the linearizer's list of UOps. Output: facts about it that the renderers turn into better instructions:
  - `simd_idioms`: multi-op float32 vector patterns x86 does in one instruction (floor, max/min selects, x * 2**n);
  - `prefetches`: vector loads that should also prefetch data ahead (the next row of a fused softmax, the rest of a
    packed matmul panel);
  - `int8_dots`: sums of the products of int8 values packed into int32 words (4 bytes, or 2 int16 halves) that the
    Target's dot-product instruction computes (vpdpbusd, pmaddubsw, pmaddwd, sdot ...; opt.cpu_policy decides which);
  - `EXP2_POLY`: the polynomial of the renderers' inline AVX-512 exp2.
Both renderers use the same facts, so a kernel gives the same bits on either backend.
"""
from __future__ import annotations
from typing import NamedTuple
from minigrad.dtype import dtypes
from minigrad.uop.ops import UOp, Ops, GroupOp
from minigrad.uop.symbolic import split_terms, _coefficient
from minigrad.opt.cpu_policy import int7_dot_instruction, int8_dot_instruction, int16_pair_instruction
from minigrad.target import Target

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



# ---- int8 dot products: the products of int8 values packed into int32 words, in one instruction where the Target has it ----
INT8_DOT_DTYPES = tuple(dtypes.int32.vec(w) for w in (4, 8, 16))


class Int8Dot(NamedTuple):
  """The sum of `rest` (terms added as they are; none: 0) and, for each (instruction, a, b) of `steps`, the dot
  product of the int32 words a and b: "bytes" words (opt.cpu_policy.INT8_DOT_INSTRUCTIONS) sum unsigned byte of a *
  signed byte of b over their 4 bytes, "bytes7" words (INT7_DOT_INSTRUCTIONS) the same with a's bytes & 127, "pairs"
  words (INT16_PAIR_INSTRUCTIONS) the products of their 2 int16 halves.
  A word that is a scalar is the same in every lane."""
  rest: tuple[UOp, ...]
  steps: tuple[tuple[str, UOp, UOp], ...]


def _part_of(u: UOp) -> tuple[UOp, str, int] | None:
  """(int32 word, kind, index) when u is a part of a word: "ubyte" (w >> 8*i) & 255, "u7byte" (w >> 8*i) & 127,
  "sbyte" (w << 24 - 8*i) >> 24, "half" (w << 16) >> 16 or w >> 16 (a shift by 0 left out); on vectors or broadcast
  from a scalar."""
  if u.op is Ops.VECTORIZE and all(s is u.src[0] for s in u.src): u = u.src[0]
  if u.dtype.scalar() != dtypes.int32 or u.op not in (Ops.AND, Ops.SHR): return None
  word, amount = u.src[0], _const_value(u.src[1])
  inner = _const_value(word.src[1]) if word.op in (Ops.SHR, Ops.SHL) else None
  if u.op is Ops.AND and amount in (255, 127):
    kind = "ubyte" if amount == 255 else "u7byte"
    return (word.src[0], kind, inner // 8) if word.op is Ops.SHR and inner in (8, 16, 24) else (word, kind, 0)
  if u.op is Ops.SHR and amount == 24:
    return (word.src[0], "sbyte", (24 - inner) // 8) if word.op is Ops.SHL and inner in (8, 16, 24) else (word, "sbyte", 3)
  if u.op is Ops.SHR and amount == 16:
    return (word.src[0], "half", 0) if word.op is Ops.SHL and inner == 16 else (word, "half", 1)
  return None


def _dot_term(t: UOp, order: dict[UOp, int]) -> tuple[tuple[str, UOp, UOp], int] | None:
  """((layout, a, b), index) when t is one product of a dot of words a and b: ubyte(a, i) * sbyte(b, i) ("bytes"),
  u7byte(a, i) * sbyte(b, i) ("bytes7") or half(a, i) * half(b, i) ("pairs", a the word that comes first in the
  kernel)."""
  if t.op is not Ops.MUL: return None
  x, y = _part_of(t.src[0]), _part_of(t.src[1])
  if x is None or y is None or x[2] != y[2]: return None
  for kind, layout in (("ubyte", "bytes"), ("u7byte", "bytes7")):
    if {x[1], y[1]} == {kind, "sbyte"}:
      unsigned, signed = (x, y) if x[1] == kind else (y, x)
      return (layout, unsigned[0], signed[0]), x[2]
  if x[1] == y[1] == "half":
    a, b = sorted((x[0], y[0]), key=lambda w: order.get(w, -1))
    return ("pairs", a, b), x[2]
  return None


def int8_dots(uops: list[UOp], target: Target | None) -> dict[UOp, Int8Dot]:
  """Sums (trees of int32-vector ADDs) that contain all the products of a dot of two words (4 for "bytes" and
  "bytes7", 2 for "pairs"; minigrad.quantize.int8_dot builds them): the root ADD -> an Int8Dot, for the words whose
  layout has an instruction for the vector's lanes on `target` (opt.cpu_policy decides). The ADDs and products it replaces are
  left unused; without an instruction the plain arithmetic stays."""
  if target is None or not any(u.op is Ops.MUL and u.dtype in INT8_DOT_DTYPES for u in uops): return {}
  uses: dict[UOp, int] = {}
  order = {u: i for i, u in enumerate(uops)}
  for u in uops:
    for s in u.src: uses[s] = uses.get(s, 0) + 1
  inner = {s for u in uops if u.op is Ops.ADD and u.dtype in INT8_DOT_DTYPES for s in u.src
           if s.op is Ops.ADD and s.dtype == u.dtype and uses[s] == 1}
  found: dict[UOp, Int8Dot] = {}
  for root in uops:
    if root.op is not Ops.ADD or root.dtype not in INT8_DOT_DTYPES or root in inner: continue
    lanes = root.dtype.count
    instructions = {"bytes": int8_dot_instruction(target, lanes), "bytes7": int7_dot_instruction(target, lanes),
                    "pairs": int16_pair_instruction(target, lanes)}
    terms, stack = [], [root]
    while stack:
      u = stack.pop()
      if u is root or u in inner and u.op is Ops.ADD and u.dtype == root.dtype: stack.extend(reversed(u.src))
      else: terms.append(u)
    groups: dict[tuple[str, UOp, UOp], dict[int, UOp]] = {}
    for t in terms:
      if (found_term := _dot_term(t, order)) is not None and instructions[found_term[0][0]] is not None:
        groups.setdefault(found_term[0], {}).setdefault(found_term[1], t)
    complete = [key for key, products in groups.items() if len(products) == (2 if key[0] == "pairs" else 4)]
    if not complete: continue
    used = {t for key in complete for t in groups[key].values()}
    found[root] = Int8Dot(tuple(t for t in terms if t not in used), tuple((instructions[layout], a, b) for layout, a, b in complete))
  return found


def unused_after(uops: list[UOp], dots: dict[UOp, Int8Dot]) -> set[UOp]:
  """The arithmetic (ALU ops, broadcasts, lane reads) only the sums that `dots` replace used: the renderer leaves it
  out (the parts of the words, their products, the inner ADDs)."""
  users: dict[UOp, list[UOp]] = {}
  for u in uops:
    sources = dots[u].rest + tuple(w for _, a, b in dots[u].steps for w in (a, b)) if u in dots else u.src
    for s in sources: users.setdefault(s, []).append(u)
  unused: set[UOp] = set()
  for u in reversed(uops):
    if u not in dots and (u.op in GroupOp.ALU or u.op in (Ops.VECTORIZE, Ops.GEP)) and all(user in unused for user in users.get(u, ())):
      unused.add(u)
  return unused if dots else set()
