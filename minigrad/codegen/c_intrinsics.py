"""How the C renderer spells what C can't say portably: x86 intrinsics (each behind the C macro of the ISA it needs,
with a plain-C spelling beside it), libmvec's vector math names, and float16 conversions.

Input: vector widths and the idioms minigrad.codegen.cpu_patterns found. Output: C source lines and tables the C
renderer (minigrad/codegen/c_renderer.py) puts into kernels. Which code runs is decided by the Target through the
compiler's macros (__AVX2__, __AVX512F__, ...), so one source is right on every x86 level and on other CPUs.
"""
from __future__ import annotations
from minigrad.dtype import dtypes
from minigrad.uop.ops import UOp, Ops
from minigrad.codegen.cpu_patterns import EXP2_POLY


def half_conversions(mode: str) -> list[str]:
  """C for `float half_to_float(unsigned short word)` (exact) and `unsigned short float_to_half(float)` (to nearest,
  ties to even; past 65504 to inf; a NaN stays a quiet NaN with its sign and the top of its payload, as F16C does).
  mode "f16c": the F16C instructions (vcvtph2ps/vcvtps2ph); "bits": integer code that needs nothing of the target
  and nothing of the floating-point environment (flush-to-zero set by other code can't change its subnormals)."""
  if mode == "f16c":
    return ["#include <immintrin.h>",
            "static inline float half_to_float(unsigned short h) { return _cvtsh_ss(h); }",
            "static inline unsigned short float_to_half(float f) { return (unsigned short)_cvtss_sh(f, 0); }   /* 0: to nearest even */"]
  if mode != "bits": raise ValueError(f"no float16 conversions for mode {mode!r}")
  return [
    "static inline float half_to_float(unsigned short h) {",
    "  unsigned int sign = (unsigned int)(h & 0x8000) << 16, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;",
    "  if (exponent == 0) { float f = (float)mantissa * 5.9604644775390625e-8f; return sign ? -f : f; }   /* 0, subnormal: m * 2^-24 */",
    "  union { unsigned int u; float f; } out;",
    "  out.u = sign | (mantissa << 13) | (exponent == 31 ? 0x7f800000u | (mantissa ? 0x400000u : 0) : (exponent + 112) << 23);",
    "  return out.f;",
    "}",
    "static inline unsigned short float_to_half(float f) {",
    "  union { float f; unsigned int u; } in = {f};",
    "  unsigned int sign = (in.u >> 16) & 0x8000, a = in.u & 0x7fffffffu;",
    "  if (a > 0x7f800000u) return (unsigned short)(sign | 0x7e00 | ((a >> 13) & 0x3ff));   /* NaN */",
    "  if (a >= 0x477ff000u) return (unsigned short)(sign | 0x7c00);   /* inf, and what rounds past 65504 (from 65520 on) */",
    "  if (a >= 0x38800000u) return (unsigned short)(sign | ((a - 0x38000000u + 0xfffu + ((a >> 13) & 1)) >> 13));   /* normal */",
    "  if (a <= 0x33000000u) return (unsigned short)sign;   /* up to 2^-25, half the smallest subnormal: to (even) zero */",
    "  unsigned int shift = 126 - (a >> 23), m = (a & 0x7fffffu) | 0x800000u;   /* subnormal: round m * 2^-shift to an integer */",
    "  unsigned int q = m >> shift, rest = m & ((1u << shift) - 1), tie = 1u << (shift - 1);",
    "  return (unsigned short)(sign | (q + ((rest > tie) | ((rest == tie) & (q & 1)))));",
    "}"]


def exp2_avx512(vec: str) -> list[str]:
  """exp2 inline on AVX-512: x = n + f with n = round(x), the polynomial for 2**f, then vscalefps multiplies by
  2**n with the right overflow to inf, underflow through the subnormals to 0 and NaN. Where x is an integer
  (or +-inf) f is 0, so +-inf give inf and 0 rather than inf - inf."""
  lines = ["  __m512 n = _mm512_roundscale_ps(x, 8);   /* to nearest, no exceptions */",
           f"  {vec} f = x - ({vec})n;", f"  f = ({vec})(_mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, n, _CMP_EQ_OQ), f, _mm512_setzero_ps()));",
           f"  {vec} p = {EXP2_POLY[0]!r}f - ({vec}){{0}};"]
  lines += [f"  p = p * f + {c!r}f;" for c in EXP2_POLY[1:]]
  return lines + ["  return _mm512_scalef_ps(p, n);"]


# float32 math on vectors: name of the libm function; libmvec variants by width: (ISA letter, the C macro it needs)
VECTOR_MATH = {Ops.EXP2: "exp2f", Ops.LOG2: "log2f", Ops.SIN: "sinf", Ops.SQRT: "sqrtf", Ops.TRUNC: "truncf"}
LIBMVEC = {4: ("b", "__SSE2__"), 8: ("d", "__AVX2__"), 16: ("e", "__AVX512F__")}
X86_INCLUDE = ("#if defined(__x86_64__)", "#include <immintrin.h>", "#endif")
# non-temporal vector stores by vector bytes: (C macro, bits)
X86_STREAM = {32: ("__AVX__", 256), 64: ("__AVX512F__", 512)}
# masked vector loads by (lane dtype, lanes): (C macro, the call on p and the -1/0 mask m)
X86_MASKED_LOAD = {
  (dtypes.float32, 16): ("__AVX512F__", "_mm512_maskz_loadu_ps(_mm512_test_epi32_mask((__m512i)m, (__m512i)m), p)"),
  (dtypes.int32, 16): ("__AVX512F__", "_mm512_maskz_loadu_epi32(_mm512_test_epi32_mask((__m512i)m, (__m512i)m), p)"),
  (dtypes.float32, 8): ("__AVX2__", "_mm256_maskload_ps(p, (__m256i)m)"),
  (dtypes.float32, 4): ("__AVX2__", "_mm_maskload_ps(p, (__m128i)m)"),
}
# correctly rounded square roots (as sqrtf's) by vector width: (C macro, call)
X86_SQRT = {4: ("__SSE__", "_mm_sqrt_ps(x)"), 8: ("__AVX__", "_mm256_sqrt_ps(x)"), 16: ("__AVX512F__", "_mm512_sqrt_ps(x)")}
# round toward zero (immediate 11 = _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC), by vector width: (C macro, call)
X86_TRUNC = {4: ("__SSE4_1__", "_mm_round_ps(x, 11)"), 8: ("__AVX__", "_mm256_round_ps(x, 11)"), 16: ("__AVX512F__", "_mm512_roundscale_ps(x, 11)")}


# the x86 instructions of the idioms (minigrad.codegen.cpu_patterns.simd_idioms), by float32 lanes: the C macro
# they need, then floor, max, min, and x * 2**n (None: AVX has no scalef; the exponent bits are built instead)
X86_IDIOMS = {16: ("__AVX512F__", "_mm512_roundscale_ps(x, 9)", "_mm512_max_ps(a, b)", "_mm512_min_ps(a, b)", "_mm512_scalef_ps(x, n)"),
              8: ("__AVX__", "_mm256_round_ps(x, 9)", "_mm256_max_ps(a, b)", "_mm256_min_ps(a, b)", None)}


def idiom_helpers(idioms: dict[UOp, tuple[str, tuple[UOp, ...]]]) -> list[str]:
  """The idioms' functions: their x86 instruction (rounding immediate 9: toward -inf, no exceptions) where the
  compiler's target has it, else the plain spelling of what they compute."""
  used = {name for name, _ in idioms.values()}
  lines = list(X86_INCLUDE) if used else []

  def helper(signature: str, fast: str | None, portable: list[str], width: int) -> list[str]:
    if fast is None: return [f"static inline {signature} {{", *portable, "}"]
    return [f"static inline {signature} {{", f"#if defined(__x86_64__) && defined({X86_IDIOMS[width][0]})", f"  return {fast};",
            "#else", *portable, "#endif", "}"]
  for name in sorted(used):
    kind, width = name.rsplit("_v", 1)[0], int(name.rsplit("_v", 1)[1])
    _, floor, maximum, minimum, scalef = X86_IDIOMS[width]
    vec, mask, ints = f"float_v{width}", f"mask_v{width}", f"int_v{width}"
    if kind == "floorf":
      lines += helper(f"{vec} {name}({vec} x)", floor, [f"  {vec} out;", f"  for (int i = 0; i < {width}; i++) out[i] = floorf(x[i]);",
                                                       "  return out;"], width)
    elif kind in ("maxps", "minps"):
      compare = ">" if kind == "maxps" else "<"
      lines += helper(f"{vec} {name}({vec} a, {vec} b)", maximum if kind == "maxps" else minimum,
                      [f"  {mask} m = a {compare} b;   /* (a {compare} b) ? a : b */", f"  return ({vec})(((({mask})a) & m) | ((({mask})b) & ~m));"], width)
    elif kind == "scalef":   # x * 2**n, n integral
      lines += helper(f"{vec} {name}({vec} x, {vec} n)", scalef,
                      [f"  return x * ({vec})((__builtin_convertvector(n, {ints}) + 127) << 23);"], width)
  return lines
