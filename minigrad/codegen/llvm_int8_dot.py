"""The LLVM IR spelling of the int8 dot-product idiom (codegen.cpu_patterns.int8_dots) for the LLVM renderer.

Input: an Int8Dot and the renderer's function writer (its operands' registers, its `temp` helper values). Output: the
Target's instruction as the LLVM intrinsic clang emits for it (vpdpbusd, vpdpwssd, pmaddubsw, pmaddwd, sdot, usdot):
the same numbers as the C renderer's helpers (codegen.c_int8_dot).
"""
from __future__ import annotations
from minigrad.codegen.cpu_patterns import Int8Dot
from minigrad.uop.ops import UOp

# instruction -> intrinsic that adds the dot products to an accumulator: (acc, a, b) all <lanes x i32>
ACCUMULATING = {"vpdpbusd512": "@llvm.x86.avx512.vpdpbusd.512", "vpdpbusd256": "@llvm.x86.avx512.vpdpbusd.256",
                "vpdpbusd256vex": "@llvm.x86.avx512.vpdpbusd.256", "vpdpbusd128": "@llvm.x86.avx512.vpdpbusd.128",
                "vpdpbusd128vex": "@llvm.x86.avx512.vpdpbusd.128", "vpdpwssd512": "@llvm.x86.avx512.vpdpwssd.512"}
# pmaddwd by int32 lanes: int16 pairs multiplied and summed into int32
PMADDWD = {16: "@llvm.x86.avx512.pmaddw.d.512", 8: "@llvm.x86.avx2.pmadd.wd", 4: "@llvm.x86.sse2.pmadd.wd"}
# pmaddubsw by int32 lanes: unsigned x signed bytes, pairs summed into int16 (saturating: "bytes7" words never do)
PMADDUBSW = {16: "@llvm.x86.avx512.pmaddubs.w.512", 8: "@llvm.x86.avx2.pmadd.ub.sw", 4: "@llvm.x86.ssse3.pmadd.ub.sw.128"}
NEON_DOTS = {"sdot": "@llvm.aarch64.neon.sdot.v4i32.v16i8", "usdot": "@llvm.aarch64.neon.usdot.v4i32.v16i8"}


def render_int8_dot(writer, u: UOp, dot: Int8Dot) -> str:
  """The register holding `dot` (the value of uop `u`), written with `writer` (llvm_renderer._FunctionWriter)."""
  lanes = u.dtype.count
  ints, shorts, bytes_ = f"<{lanes} x i32>", f"<{2 * lanes} x i16>", f"<{4 * lanes} x i8>"
  temp = lambda text: writer.temp(u, text)
  splat = lambda value, ty=ints: f"splat ({ty.split(' x ')[1][:-1]} {value})"

  def vector(word: UOp) -> str:
    value = writer.value(word, u)
    if word.dtype.count > 1: return value
    first = temp(f"insertelement {ints} poison, i32 {value}, i32 0")
    return temp(f"shufflevector {ints} {first}, {ints} poison, <{lanes} x i32> zeroinitializer")

  def call(function: str, result: str, *args: tuple[str, str]) -> str:
    writer.declarations.add(f"declare {result} {function}({', '.join(ty for ty, _ in args)})")
    return temp(f"call {result} {function}({', '.join(f'{ty} {value}' for ty, value in args)})")

  def pmaddwd(a: str, b: str) -> str:   # a, b: <lanes x i32> holding int16 pairs
    return call(PMADDWD[lanes], ints, (shorts, temp(f"bitcast {ints} {a} to {shorts}")), (shorts, temp(f"bitcast {ints} {b} to {shorts}")))

  acc = "zeroinitializer"
  for i, term in enumerate(dot.rest): acc = writer.value(term, u) if i == 0 else temp(f"add {ints} {acc}, {writer.value(term, u)}")
  for instruction, a_word, b_word in dot.steps:
    a, b = vector(a_word), vector(b_word)
    if instruction in ACCUMULATING: acc = call(ACCUMULATING[instruction], ints, (ints, acc), (ints, a), (ints, b))
    elif instruction.startswith("pmaddwd"): acc = temp(f"add {ints} {acc}, {pmaddwd(a, b)}")
    elif instruction.startswith("pmaddubsw"):   # "bytes7": a's bytes & 127, int16 pair sums, pmaddwd with ones
      # freeze: LLVM's instruction selection (llvmlite's LLVM, 512-bit vectors) loops forever on the masked operand
      masked = temp(f"freeze {ints} {temp(f'and {ints} {a}, {splat(0x7F7F7F7F)}')}")
      a7 = temp(f"bitcast {ints} {masked} to {bytes_}")
      pairs = call(PMADDUBSW[lanes], shorts, (bytes_, a7), (bytes_, temp(f"bitcast {ints} {b} to {bytes_}")))
      acc = temp(f"add {ints} {acc}, {call(PMADDWD[lanes], ints, (shorts, pairs), (shorts, splat(1, shorts)))}")
    elif instruction.startswith("bytes_pmaddwd"):   # even and odd bytes widened to int16 pairs (see c_int8_dot)
      low_bytes, eight, eight16 = splat(0x00FF00FF), splat(8), splat(8, shorts)
      a_even = temp(f"and {ints} {a}, {low_bytes}")
      a_shifted = temp(f"lshr {ints} {a}, {eight}")
      a_odd = temp(f"and {ints} {a_shifted}, {low_bytes}")
      b16 = temp(f"bitcast {ints} {b} to {shorts}")
      b_up = temp(f"shl {shorts} {b16}, {eight16}")
      b_even = temp(f"bitcast {shorts} {temp(f'ashr {shorts} {b_up}, {eight16}')} to {ints}")
      b_odd = temp(f"bitcast {shorts} {temp(f'ashr {shorts} {b16}, {eight16}')} to {ints}")
      products = temp(f"add {ints} {pmaddwd(a_even, b_even)}, {pmaddwd(a_odd, b_odd)}")
      acc = temp(f"add {ints} {acc}, {products}")
    elif instruction == "usdot":
      acc = call(NEON_DOTS["usdot"], ints, (ints, acc), (bytes_, temp(f"bitcast {ints} {a} to {bytes_}")), (bytes_, temp(f"bitcast {ints} {b} to {bytes_}")))
    elif instruction == "sdot":   # signed x signed: (a - 128) * b, plus 128 * sum(b) = minus sdot(-128, b)
      b8 = temp(f"bitcast {ints} {b} to {bytes_}")
      flip_bits = splat(-2139062144)   # 0x80808080
      flipped = temp(f"bitcast {ints} {temp(f'xor {ints} {a}, {flip_bits}')} to {bytes_}")
      correction = call(NEON_DOTS["sdot"], ints, (ints, "zeroinitializer"), (bytes_, splat(-128, bytes_)), (bytes_, b8))
      acc = call(NEON_DOTS["sdot"], ints, (ints, temp(f"sub {ints} {acc}, {correction}")), (bytes_, flipped), (bytes_, b8))
    else: raise NotImplementedError(f"LLVMRenderer has no spelling for the int8 dot product {instruction}")
  return writer.emit(u, f"add {ints} {acc}, zeroinitializer")
