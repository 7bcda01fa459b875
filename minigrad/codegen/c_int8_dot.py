"""The C spelling of the int8 dot-product idiom (codegen.cpu_patterns.int8_dots) for the C renderer.

Input: the Int8Dot facts of a kernel (which instruction, on how many int32 lanes). Output: C helper functions
`dot_<instruction>_v<lanes>(acc, a, b)`, each acc + the dot product of the words in every int32 lane (of "bytes"
words: unsigned byte of a * signed byte of b over 4 bytes; of "bytes7" words: the same with a's bytes & 127; of
"pairs" words: over their 2 int16 halves), spelled with the instruction's intrinsic under the macro the compiler
predefines for it (the Target's features are those macros), else with the plain shifts and multiplies (the same
numbers; int32 lanes wrap).
"""
from __future__ import annotations
from typing import Callable
from minigrad.codegen.cpu_patterns import Int8Dot
from minigrad.uop.ops import UOp

# instruction -> (lanes, the C condition it needs, the body's lines: `acc`, `a`, `b` are int_v<lanes>)
_FLIP = "int8x16_t flip = vdupq_n_s8(-128);   /* a byte ^ 0x80 is the unsigned byte - 128, as signed */"
SPELLINGS: dict[str, tuple[int, str, tuple[str, ...]]] = {
  "vpdpbusd512": (16, "defined(__AVX512VNNI__) && defined(__AVX512F__)",
                  ("return (int_v16)_mm512_dpbusd_epi32((__m512i)acc, (__m512i)a, (__m512i)b);",)),
  "vpdpbusd256": (8, "defined(__AVX512VNNI__) && defined(__AVX512VL__)",
                  ("return (int_v8)_mm256_dpbusd_epi32((__m256i)acc, (__m256i)a, (__m256i)b);",)),
  "vpdpbusd256vex": (8, "defined(__AVXVNNI__)", ("return (int_v8)_mm256_dpbusd_avx_epi32((__m256i)acc, (__m256i)a, (__m256i)b);",)),
  "vpdpbusd128": (4, "defined(__AVX512VNNI__) && defined(__AVX512VL__)",
                  ("return (int_v4)_mm_dpbusd_epi32((__m128i)acc, (__m128i)a, (__m128i)b);",)),
  "vpdpbusd128vex": (4, "defined(__AVXVNNI__)", ("return (int_v4)_mm_dpbusd_avx_epi32((__m128i)acc, (__m128i)a, (__m128i)b);",)),
  # bytes 0 and 2 (even) and 1 and 3 (odd) of each lane as int16 pairs; pmaddwd multiplies the pairs and adds them
  "bytes_pmaddwd256": (8, "defined(__AVX2__)", (
    "__m256i a_even = _mm256_and_si256((__m256i)a, _mm256_set1_epi16(255)), a_odd = _mm256_srli_epi16((__m256i)a, 8);",
    "__m256i b_even = _mm256_srai_epi16(_mm256_slli_epi16((__m256i)b, 8), 8), b_odd = _mm256_srai_epi16((__m256i)b, 8);",
    "return acc + (int_v8)_mm256_add_epi32(_mm256_madd_epi16(a_even, b_even), _mm256_madd_epi16(a_odd, b_odd));")),
  "bytes_pmaddwd128": (4, "defined(__SSE2__)", (
    "__m128i a_even = _mm_and_si128((__m128i)a, _mm_set1_epi16(255)), a_odd = _mm_srli_epi16((__m128i)a, 8);",
    "__m128i b_even = _mm_srai_epi16(_mm_slli_epi16((__m128i)b, 8), 8), b_odd = _mm_srai_epi16((__m128i)b, 8);",
    "return acc + (int_v4)_mm_add_epi32(_mm_madd_epi16(a_even, b_even), _mm_madd_epi16(a_odd, b_odd));")),
  "usdot": (4, "defined(__aarch64__) && defined(__ARM_FEATURE_MATMUL_INT8)", (
    "return (int_v4)vusdotq_s32((int32x4_t)acc, vreinterpretq_u8_s32((int32x4_t)a), vreinterpretq_s8_s32((int32x4_t)b));",)),
  # sdot is signed x signed: sum((a - 128) * b) + 128 * sum(b), and sdot(0, -128, b) is -128 * sum(b)
  "sdot": (4, "defined(__aarch64__) && defined(__ARM_FEATURE_DOTPROD)", (
    _FLIP, "int8x16_t signed_b = vreinterpretq_s8_s32((int32x4_t)b);",
    "int32x4_t corrected = vsubq_s32((int32x4_t)acc, vdotq_s32(vdupq_n_s32(0), flip, signed_b));",
    "return (int_v4)vdotq_s32(corrected, veorq_s8(vreinterpretq_s8_s32((int32x4_t)a), flip), signed_b);")),
  # "bytes7" words: a's bytes & 127 (so pmaddubsw's int16 pair sums can't saturate, see opt.cpu_policy), pairs summed
  # into int32 by pmaddwd with ones
  "pmaddubsw512": (16, "defined(__AVX512BW__)", (
    "__m512i pairs = _mm512_maddubs_epi16(_mm512_and_si512((__m512i)a, _mm512_set1_epi8(127)), (__m512i)b);",
    "return acc + (int_v16)_mm512_madd_epi16(pairs, _mm512_set1_epi16(1));")),
  "pmaddubsw256": (8, "defined(__AVX2__)", (
    "__m256i pairs = _mm256_maddubs_epi16(_mm256_and_si256((__m256i)a, _mm256_set1_epi8(127)), (__m256i)b);",
    "return acc + (int_v8)_mm256_madd_epi16(pairs, _mm256_set1_epi16(1));")),
  "pmaddubsw128": (4, "defined(__SSSE3__)", (
    "__m128i pairs = _mm_maddubs_epi16(_mm_and_si128((__m128i)a, _mm_set1_epi8(127)), (__m128i)b);",
    "return acc + (int_v4)_mm_madd_epi16(pairs, _mm_set1_epi16(1));")),
  # "pairs" words: 2 signed int16 halves
  "vpdpwssd512": (16, "defined(__AVX512VNNI__) && defined(__AVX512F__)",
                  ("return (int_v16)_mm512_dpwssd_epi32((__m512i)acc, (__m512i)a, (__m512i)b);",)),
  "pmaddwd512": (16, "defined(__AVX512BW__)", ("return acc + (int_v16)_mm512_madd_epi16((__m512i)a, (__m512i)b);",)),
  "pmaddwd256": (8, "defined(__AVX2__)", ("return acc + (int_v8)_mm256_madd_epi16((__m256i)a, (__m256i)b);",)),
  "pmaddwd128": (4, "defined(__SSE2__)", ("return acc + (int_v4)_mm_madd_epi16((__m128i)a, (__m128i)b);",)),
}
PAIRS = ("vpdpwssd512", "pmaddwd512", "pmaddwd256", "pmaddwd128")
BYTES7 = ("pmaddubsw512", "pmaddubsw256", "pmaddubsw128")
PLAIN_PAIRS = ("return acc + ((a << 16) >> 16) * ((b << 16) >> 16) + (a >> 16) * (b >> 16);",)
PLAIN = ("return acc + (a & 255) * ((b << 24) >> 24) + ((a >> 8) & 255) * ((b << 16) >> 24)",
         "           + ((a >> 16) & 255) * ((b << 8) >> 24) + ((a >> 24) & 255) * (b >> 24);")
PLAIN7 = tuple(line.replace("& 255)", "& 127)") for line in PLAIN)
INCLUDES = ("#if defined(__x86_64__)", "#include <immintrin.h>", "#elif defined(__aarch64__)", "#include <arm_neon.h>", "#endif")


def helper_name(instruction: str) -> str:
  return f"dot_{instruction}_v{SPELLINGS[instruction][0]}"


def int8_dot_call(dot: Int8Dot, names: dict[UOp, str], broadcast: Callable[[str], str], zero: str) -> str:
  """The expression of an Int8Dot: its instruction's helper once per pair of words, the first taking `rest` (or
  `zero`); `names` are the rendered operands, `broadcast` spells a scalar word in every lane."""
  vector = lambda word: names[word] if word.dtype.count > 1 else broadcast(names[word])
  expr = "+".join(names[t] for t in dot.rest) or zero
  for instruction, a, b in dot.steps: expr = f"{helper_name(instruction)}({expr}, {vector(a)}, {vector(b)})"
  return expr


def _plain(instruction: str) -> tuple[str, ...]:
  return PLAIN_PAIRS if instruction in PAIRS else PLAIN7 if instruction in BYTES7 else PLAIN


def int8_dot_helpers(instructions: set[str]) -> list[str]:
  """The helper functions of the instructions a kernel uses (after the vector typedefs)."""
  lines = list(INCLUDES) if instructions else []
  for instruction in sorted(instructions):
    lanes, condition, body = SPELLINGS[instruction]
    vec = f"int_v{lanes}"
    lines += [f"static inline {vec} {helper_name(instruction)}({vec} acc, {vec} a, {vec} b) {{", f"#if {condition}",
              *(f"  {text}" for text in body), "#else", *(f"  {text}" for text in _plain(instruction)), "#endif", "}"]
  return lines
