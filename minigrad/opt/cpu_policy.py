"""The CPU optimizer's machine facts: what each policy decision reads from the Target (minigrad/target.py).

Input: a `Target` (vector bytes and registers, cache sizes, cache line, whether wide vectors run as halves). Output:
the numbers the policies use: SIMD lane widths and register budgets for the kernel heuristics (opt/heuristics.py),
cache-fit thresholds, panel widths for operand packing (schedule/packing.py) and the row width convolutions compute
(tensor/conv.py). Adding a CPU means describing it as a Target; these rules then give its decisions.
"""
from __future__ import annotations
from typing import Sequence
from minigrad.target import Target


def lane_widths(target: Target, dtype_bytes: int, candidates: Sequence[int]) -> list[int]:
  """The `candidates` (SIMD lane counts the lowerer handles), widest first, whose vector of `dtype_bytes` elements
  fits one of the Target's vector registers (16 float32 with AVX-512, 8 with AVX2, 4 with SSE or NEON)."""
  return [w for w in sorted(candidates, reverse=True) if w * dtype_bytes <= target.vector_bytes]


def max_accumulators(target: Target) -> int:
  """Vector accumulators a register tile may keep: three quarters of the vector registers (24 of AVX-512's 32, 12 of
  AVX2's 16); the rest hold a trip's vector loads and a broadcast."""
  return target.vector_registers * 3 // 4


def row_by_row_accumulators(target: Target) -> int:
  """Past this many accumulators a tile's statements go row by row (one row's broadcast live at a time): half the
  vector registers."""
  return target.vector_registers // 2


def streamed_vector_bytes(target: Target) -> int:
  """Vector bytes for rows that only stream through (a row reduction): 32 on CPUs that run 64-byte vectors as two
  halves, which stream faster there as 32-byte vectors."""
  return min(target.vector_bytes, 32) if target.halves_wide_vectors else target.vector_bytes


def cached_bytes(target: Target) -> int:
  """An input part a tile reads over its whole reduce loop stays in cache up to this size: half of L2."""
  return target.l2_bytes // 2


def l1_resident_bytes(target: Target) -> int:
  """An input part a tile reads over its reduce loop stays in L1 up to this size: two thirds of L1d (32 of 48 KB)."""
  return target.l1d_bytes * 2 // 3


def line_elements(target: Target) -> int:
  """float32 elements per cache line."""
  return target.cache_line_bytes // 4


def panel_widths(target: Target) -> tuple[int, ...]:
  """Columns per packed matmul panel, widest first: 4 or 2 float32 vectors (64 or 32 with AVX-512, 32 or 16 with AVX2)."""
  return tuple(n * target.vector_bytes // 4 for n in (4, 2))


def min_packed_bytes(target: Target) -> int:
  """Matmul operands smaller than this (half of L2) stay in the L2 cache as they are: no packed copy."""
  return target.l2_bytes // 2


def conv_row_width(width: int, target: Target) -> int:
  """The row width a stride-1 convolution computes for rows of `width` outputs: a power of two below the Target's
  float32 lanes, else a multiple of its lanes (16 with AVX-512, 8 with AVX2), so that the row runs as whole SIMD
  vectors."""
  lanes = target.vector_bytes // 4
  return next((w for w in (1, 2, 4, 8, 16) if w >= width and w < lanes), -(-width // lanes) * lanes)


def min_paired_row_elements(target: Target) -> int:
  """A kernel of row reductions (a softmax) takes two rows per outer loop trip, two streams for the memory system,
  when its rows have at least this many float32 elements: two cache lines. Shorter rows (a loss over 10 classes) are
  a few vectors each: a second row only doubles the code."""
  return 2 * line_elements(target)



# ---- int8 dot products (minigrad.quantize packs int8 values into int32 words; codegen.cpu_patterns.int8_dots finds
# their products) ----
# "bytes" words hold 4 consecutive k: the sum over a word of unsigned byte * signed byte. vpdpbusd does it in one
# instruction (AVX-512 VNNI; AVX-VNNI on 8 or 4 lanes), usdot (Armv8.6 i8mm) too; sdot (Armv8.2 dotprod) is signed x
# signed, made unsigned x signed by flipping the top bit of the unsigned bytes and adding 128 times the signed bytes'
# sum; bytes_pmaddwd widens the even and the odd bytes to int16 pairs for pmaddwd (vpmaddubsw would saturate:
# 2 * 255 * 127 > 32767). By int32 lanes: (instruction, the Target features it needs), best first.
INT8_DOT_INSTRUCTIONS: dict[str, dict[int, tuple[tuple[str, frozenset[str]], ...]]] = {
  "x86_64": {16: (("vpdpbusd512", frozenset({"avx512f", "avx512vnni"})),),
             8: (("vpdpbusd256", frozenset({"avx512vnni", "avx512vl"})), ("vpdpbusd256vex", frozenset({"avxvnni"})),
                 ("bytes_pmaddwd256", frozenset({"avx2"}))),
             4: (("vpdpbusd128", frozenset({"avx512vnni", "avx512vl"})), ("vpdpbusd128vex", frozenset({"avxvnni"})),
                 ("bytes_pmaddwd128", frozenset({"sse2"})))},
  "aarch64": {4: (("usdot", frozenset({"neon", "i8mm"})), ("sdot", frozenset({"neon", "dotprod"})))},
}
# "bytes7" words are "bytes" words whose unsigned bytes are read as 7-bit (byte & 127: quantized activations kept in
# [0, 127]). pmaddubsw multiplies unsigned by signed bytes into int16 pair sums, saturating; with the unsigned side
# below 128 a pair sum lies in [2 * 127 * -128, 2 * 127 * 127] = [-32512, 32258], inside int16, so it never saturates;
# pmaddwd with ones then sums the pairs into int32 (two instructions per 4 k, where "pairs" words take two per 4 k
# and twice the loads)
INT7_DOT_INSTRUCTIONS: dict[str, dict[int, tuple[tuple[str, frozenset[str]], ...]]] = {
  "x86_64": {16: (("pmaddubsw512", frozenset({"avx512bw"})),), 8: (("pmaddubsw256", frozenset({"avx2"})),),
             4: (("pmaddubsw128", frozenset({"ssse3"})),)},
}
# "pairs" words hold 2 consecutive k as signed int16 halves: the sum over a word of the halves' products, which pmaddwd
# computes with nothing to unpack (vpdpwssd with AVX-512 VNNI also adds it to the accumulator)
INT16_PAIR_INSTRUCTIONS: dict[str, dict[int, tuple[tuple[str, frozenset[str]], ...]]] = {
  "x86_64": {16: (("vpdpwssd512", frozenset({"avx512f", "avx512vnni"})), ("pmaddwd512", frozenset({"avx512bw"}))),
             8: (("pmaddwd256", frozenset({"avx2"})),), 4: (("pmaddwd128", frozenset({"sse2"})),)},
}
# the byte dot products that are one instruction (bytes_pmaddwd takes five: "pairs" words need one)
SINGLE_BYTE_DOTS = ("vpdpbusd512", "vpdpbusd256", "vpdpbusd256vex", "vpdpbusd128", "vpdpbusd128vex", "usdot", "sdot")
# the activation values each layout holds: "bytes7" words keep activations in [-63, 63] (+64: 7 unsigned bits)
ACTIVATION_MAX = {"bytes": 127, "bytes7": 63, "pairs": 127}


def _instruction(table: dict, target: Target, lanes: int) -> str | None:
  return next((name for name, needs in table.get(target.arch, {}).get(lanes, ()) if needs <= target.features), None)


def int8_dot_instruction(target: Target, lanes: int) -> str | None:
  """The instruction for the dot product of "bytes" words on `lanes` int32 lanes, or None (the plain C arithmetic:
  the bytes shifted out, multiplied and added)."""
  return _instruction(INT8_DOT_INSTRUCTIONS, target, lanes)


def int7_dot_instruction(target: Target, lanes: int) -> str | None:
  """The instruction for the dot product of "bytes7" words on `lanes` int32 lanes, or None (plain C)."""
  return _instruction(INT7_DOT_INSTRUCTIONS, target, lanes)


def int16_pair_instruction(target: Target, lanes: int) -> str | None:
  """The instruction for the dot product of "pairs" words on `lanes` int32 lanes, or None (plain C)."""
  return _instruction(INT16_PAIR_INSTRUCTIONS, target, lanes)


def int8_dot_layout(target: Target, full_range: bool = False) -> str:
  """How int8 matmul operands are packed into int32 words for `target`: "bytes" (4 k per word, a quarter of float32's
  bytes) where one instruction sums a word's products on the widest vectors, else "bytes7" (4 k per word, activations
  in 7 bits) where pmaddubsw does without saturating, unless both operands need all 8 bits (`full_range`: an exact
  int8 x int8 product), else "pairs" (2 k per word, as int16) where pmaddwd does, else "bytes" (plain C either way:
  the fewer bytes)."""
  lanes = target.vector_bytes // 4
  if int8_dot_instruction(target, lanes) in SINGLE_BYTE_DOTS: return "bytes"
  if not full_range and int7_dot_instruction(target, lanes) is not None: return "bytes7"
  return "pairs" if int16_pair_instruction(target, lanes) is not None else "bytes"
