"""Tests of the int8 dot-product kernels (minigrad.quantize.int8_dot, codegen.cpu_patterns.int8_dots, the C spelling in
codegen.c_int8_dot, the rules in opt.cpu_policy): the int8 matmul is exact against numpy's integer product on the
default device (DEV=CPU|LLVM|CL|PYTHON), for every word layout, odd shapes, k not a multiple of 4 and the edge values
-128 and 127 (-64 and 63 for the activations of "bytes7" words); each hand-built Target gets the instruction it has;
the kernels decided and spelled for each x86 Target whose instructions this host has compute the same numbers; BEAM's
actions keep them exact.

Input: random int8 matrices. Output: pass/fail. Targets this host can't run are only rendered, not run.
"""
from __future__ import annotations
import dataclasses
import shutil
import numpy as np
import pytest
from minigrad import Tensor, dtypes
from minigrad.codegen.kernel import Opt
from minigrad.engine import realize
from minigrad.codegen.llvm_int8_dot import ACCUMULATING, PMADDUBSW, PMADDWD
from minigrad.engine.realize import buffer_of, get_kernel
from minigrad.opt.cpu_policy import int7_dot_instruction, int8_dot_instruction, int8_dot_layout, int16_pair_instruction
from minigrad.quantize import int8_matmul
from minigrad.quantize.int8_dot import LAYOUTS, activation_words, pack_weight, word_count, word_matmul
from minigrad.runtime.device import Device, available_devices
from minigrad.target import cpu_target
from minigrad.uop.ops import Ops
from cpu_targets import AVX2, AVX2_FEATURES, AVX512, AVX512_FEATURES, NEON, SSE2, decide, render

rng = np.random.default_rng(27)

AVX512_VNNI = dataclasses.replace(AVX512, march="icelake-server", features=AVX512_FEATURES | {"avx512vnni"}, model="AVX-512 VNNI")
AVX_VNNI = dataclasses.replace(AVX2, march="alderlake", features=AVX2_FEATURES | {"avxvnni"}, model="AVX-VNNI, no AVX-512")
NEON_DOTPROD = dataclasses.replace(NEON, march="armv8.2-a+dotprod", features=frozenset({"neon", "dotprod"}), model="Armv8.2 dotprod")
NEON_I8MM = dataclasses.replace(NEON, march="armv8.6-a+i8mm", features=frozenset({"neon", "dotprod", "i8mm"}), model="Armv8.6 i8mm")
INT8_TARGETS = {"avx512_vnni": AVX512_VNNI, "avx512": AVX512, "avx_vnni": AVX_VNNI, "avx2": AVX2, "sse2": SSE2, "neon": NEON,
                "neon_dotprod": NEON_DOTPROD, "neon_i8mm": NEON_I8MM}


def int8(*shape: int) -> np.ndarray: return rng.integers(-128, 128, shape).astype(np.int8)


def activations(layout: str, *shape: int) -> np.ndarray:
  """Random activations in `layout`'s range: all of int8, or [-64, 63] for "bytes7"."""
  low = -128 if layout != "bytes7" else -64
  return rng.integers(low, -low, shape).astype(np.int8)


def numpy_matmul(a: np.ndarray, w: np.ndarray) -> np.ndarray: return a.astype(np.int64) @ w.astype(np.int64).T


def product(x: Tensor, w: np.ndarray, layout: str) -> Tensor:
  """x (int8) @ w.T in `layout`'s words: int8_matmul, or for "bytes7" (whose activations are 7-bit, which int8_matmul
  refuses) the words built as a quantized layer builds them."""
  if layout != "bytes7": return int8_matmul(x, Tensor(w), layout=layout)
  return word_matmul(activation_words(x.cast(dtypes.int32), layout), pack_weight(Tensor(w), layout))


# ---------------------------------------------------------------- exact on the default device

@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("m, k, n", [(1, 1, 1), (3, 5, 7), (2, 67, 9), (17, 33, 19), (5, 130, 3), (64, 256, 48)])
def test_int8_matmul_is_exact(layout: str, m: int, k: int, n: int) -> None:
  a, w = activations(layout, m, k), int8(n, k)
  out = product(Tensor(a), w, layout)
  assert out.dtype == dtypes.int32 and out.shape == (m, n)
  np.testing.assert_array_equal(out.numpy(), numpy_matmul(a, w))


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("a_value, w_value", [(-128, -128), (127, -128), (-128, 127), (127, 127)])
def test_edge_values(layout: str, a_value: int, w_value: int) -> None:
  """The extremes everywhere (the largest sums an int32 holds for this k), and mixed with their opposites."""
  k = 1001
  if layout == "bytes7": a_value = -64 if a_value < 0 else 63
  a = np.full((3, k), a_value, np.int8)
  w = np.full((5, k), w_value, np.int8)
  w[1, ::2] = 127 if w_value == -128 else -128
  a[2, 1::3] = 0
  np.testing.assert_array_equal(product(Tensor(a), w, layout).numpy(), numpy_matmul(a, w))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_batch_dims_and_a_lazy_input(layout: str) -> None:
  a, w = activations(layout, 2, 3, 45), int8(6, 45)
  x = (Tensor(a.astype(np.int32)) * 1).cast(dtypes.int8)   # not realized: the words kernel computes it
  np.testing.assert_array_equal(product(x, w, layout).numpy(), numpy_matmul(a.reshape(6, 45), w).reshape(2, 3, 6))


def test_packed_weight_words() -> None:
  """k-major words for 16 outputs or more, n-major for fewer; word j of "pairs" holds k = j (low half) and j + K/2."""
  for n, k_major in ((20, True), (5, False)):
    w = int8(n, 10)
    bytes_, pairs = pack_weight(Tensor(w), "bytes"), pack_weight(Tensor(w), "pairs")
    assert bytes_.k_major == pairs.k_major == k_major and pairs.correction is None
    assert bytes_.words.shape == ((3, n) if k_major else (n, 3)) and pairs.words.shape == ((5, n) if k_major else (n, 5))
    np.testing.assert_array_equal(bytes_.correction.numpy(), -128 * w.astype(np.int64).sum(1))
    words = pairs.words.numpy() if k_major else pairs.words.numpy().T
    np.testing.assert_array_equal(((words << 16) >> 16).T, w[:, :5])
    np.testing.assert_array_equal((words >> 16).T, w[:, 5:])
  assert word_count(784, "bytes") == 200 and word_count(784, "bytes7") == 200 and word_count(784, "pairs") == 392
  assert word_count(67, "bytes") == 17 and word_count(124, "bytes") == 31 and word_count(132, "bytes") == 40


@pytest.mark.parametrize("m, k, n", [(5, 67, 9), (33, 300, 40)])
def test_bytes7_words_read_7_bits_whatever_their_bytes(m: int, k: int, n: int) -> None:
  """"bytes7" words are defined as byte & 127 times the signed byte, whatever the words hold: activations outside
  [-64, 63] (bytes 128..255 after +64) give that, never a saturated pmaddubsw sum."""
  a, w = int8(m, k), int8(n, k)
  a[0], w[0] = 127, -128    # bytes 191 (read as 63) against -128, and the pair sums that would saturate int16
  out = word_matmul(activation_words(Tensor(a).cast(dtypes.int32), "bytes7"), pack_weight(Tensor(w), "bytes7")).numpy()
  expected = ((a.astype(np.int64) + 64) & 127) @ w.astype(np.int64).T - 64 * w.astype(np.int64).sum(1)
  np.testing.assert_array_equal(out, expected)


def test_bad_input_says_what() -> None:
  with pytest.raises(TypeError, match="int8"): int8_matmul(Tensor(np.zeros((2, 3), np.float32)), Tensor(int8(4, 3)))
  with pytest.raises(ValueError, match=r"\(2, 3\).*\(4, 5\)"): int8_matmul(Tensor(int8(2, 3)), Tensor(int8(4, 5)))
  with pytest.raises(ValueError, match="layout"): int8_matmul(Tensor(int8(2, 3)), Tensor(int8(4, 3)), layout="nibbles")
  with pytest.raises(ValueError, match="bytes7"): int8_matmul(Tensor(int8(2, 3)), Tensor(int8(4, 3)), layout="bytes7")
  with pytest.raises(ValueError, match="overflow"): int8_matmul(Tensor(int8(1, 140_000)), Tensor(int8(1, 140_000)))


# ---------------------------------------------------------------- what each Target gets

@pytest.mark.parametrize("name, layout, full_range_layout, instructions", [
  ("avx512_vnni", "bytes", "bytes", {16: "vpdpbusd512", 8: "vpdpbusd256", 4: "vpdpbusd128"}),
  ("avx512", "bytes7", "pairs", {16: None, 8: "bytes_pmaddwd256", 4: "bytes_pmaddwd128"}),
  ("avx_vnni", "bytes", "bytes", {16: None, 8: "vpdpbusd256vex", 4: "vpdpbusd128vex"}),
  ("avx2", "bytes7", "pairs", {16: None, 8: "bytes_pmaddwd256", 4: "bytes_pmaddwd128"}),
  ("sse2", "pairs", "pairs", {16: None, 8: None, 4: "bytes_pmaddwd128"}),
  ("neon", "bytes", "bytes", {16: None, 8: None, 4: None}),
  ("neon_dotprod", "bytes", "bytes", {16: None, 8: None, 4: "sdot"}),
  ("neon_i8mm", "bytes", "bytes", {16: None, 8: None, 4: "usdot"}),
])
def test_instruction_by_target(name: str, layout: str, full_range_layout: str, instructions: dict[int, str | None]) -> None:
  target = INT8_TARGETS[name]
  assert int8_dot_layout(target) == layout and int8_dot_layout(target, full_range=True) == full_range_layout
  assert {lanes: int8_dot_instruction(target, lanes) for lanes in instructions} == instructions
  sevens = {16: "pmaddubsw512" if "avx512bw" in target.features else None, 8: "pmaddubsw256" if "avx2" in target.features else None,
            4: "pmaddubsw128" if "ssse3" in target.features else None}
  assert {lanes: int7_dot_instruction(target, lanes) for lanes in sevens} == sevens
  pairs = {16: "pmaddwd512" if "avx512bw" in target.features else None, 8: "pmaddwd256" if "avx2" in target.features else None,
           4: "pmaddwd128" if "sse2" in target.features else None}
  if "avx512vnni" in target.features: pairs[16] = "vpdpwssd512"
  assert {lanes: int16_pair_instruction(target, lanes) for lanes in pairs} == pairs


on_cpu = pytest.mark.skipif(Device.DEFAULT != "CPU", reason="kernels decided for CPU Targets run on the CPU device")


def matmul_item(layout: str, m: int = 48, k: int = 200, n: int = 64):
  """(the CPU schedule item of the int8 matmul of words, its numpy result): its inputs realized, so it runs alone."""
  a, w = activations(layout, m, k), int8(n, k)
  packed = pack_weight(Tensor(w, device="CPU"), layout)
  words = activation_words(Tensor(a, device="CPU").cast(dtypes.int32), layout).realize()
  items = word_matmul(words, packed).schedule()
  item = next(i for i in items if any(n.op is Ops.REDUCE_AXIS for n in i.ast.toposort))
  for other in items:
    if other is not item: raise AssertionError(f"the matmul needs another kernel first: {other.ast}")
  return item, numpy_matmul(a, w)


@on_cpu
@pytest.mark.parametrize("name", INT8_TARGETS)
def test_kernel_spells_the_targets_instruction(name: str, monkeypatch) -> None:
  """The kernel decided for each Target (its lanes, its tile) and rendered for it calls its instruction's helper;
  where this host has the Target's features, the same actions and spelling run here and give numpy's numbers, and
  so does the LLVM device's spelling (codegen.llvm_int8_dot) of them."""
  target = INT8_TARGETS[name]
  item, expected = matmul_item(int8_dot_layout(target))
  kernel = decide(item.ast, target)
  lanes = kernel.applied_opts[0].amount
  layout = int8_dot_layout(target)
  instruction = {"bytes": int8_dot_instruction, "bytes7": int7_dot_instruction, "pairs": int16_pair_instruction}[layout](target, lanes)
  renderer = Device["CPU"].renderer
  monkeypatch.setattr(renderer, "target", target)
  source = render(kernel)
  if instruction is None: assert "dot_" not in source
  else: assert f"dot_{instruction}_v{lanes}(" in source
  host = cpu_target()
  if target.arch != host.arch or not target.features <= host.features: return
  monkeypatch.setattr(realize, "compiled_kernels", type(realize.compiled_kernels)())   # not the kernel spelled for the host
  program = get_kernel(item.ast, "CPU", kernel.applied_opts)
  assert instruction is None or f"dot_{instruction}_v{lanes}(" in program.source
  bufs = [buffer_of(node).allocate() for node in item.bufs]
  program(bufs)
  np.testing.assert_array_equal(bufs[0].numpy().reshape(expected.shape), expected)
  if "LLVM" not in available_devices(): return
  monkeypatch.setattr(Device["LLVM"].renderer, "target", target)
  program = get_kernel(item.ast, "LLVM", kernel.applied_opts)   # LLVM's kernels read and write the CPU's buffers
  intrinsic = ACCUMULATING.get(instruction, PMADDUBSW[lanes] if layout == "bytes7" and instruction else
                               PMADDWD[lanes] if instruction and "pmaddwd" in instruction else None)
  assert intrinsic is None or f"{intrinsic}(" in program.source
  program(bufs)
  np.testing.assert_array_equal(bufs[0].numpy().reshape(expected.shape), expected)


@on_cpu
@pytest.mark.parametrize("layout", LAYOUTS)
def test_other_actions_stay_exact(layout: str) -> None:
  """Actions BEAM may pick instead (lanes on the reduce dim, 4- and 8-lane vectors, upcast k words) keep the sum exact,
  recognised as a dot product or not."""
  item, expected = matmul_item(layout, m=16, k=96, n=32)
  for opts in ([Opt("UNROLL", 0, 8)], [Opt("UPCAST", 1, 4), Opt("UNROLL", 0, 4)], [Opt("UPCAST", 1, 8), Opt("UPCAST", 0, 2)],
               [Opt("UPCAST", 1, 16), Opt("UNROLL", 0, 2)]):
    program = get_kernel(item.ast, "CPU", opts)
    bufs = [buffer_of(node).allocate() for node in item.bufs]
    program(bufs)
    np.testing.assert_array_equal(bufs[0].numpy().reshape(expected.shape), expected, err_msg=str(opts))


# ---------------------------------------------------------------- aarch64: rendered and cross-compiled

CROSS_CC = "aarch64-linux-gnu-gcc"


@pytest.mark.skipif(shutil.which(CROSS_CC) is None, reason=f"{CROSS_CC} is not installed (apt-get install gcc-aarch64-linux-gnu)")
@pytest.mark.parametrize("march, instruction", [("armv8-a", None), ("armv8.2-a+fp16+dotprod", "sdot"), ("armv8.6-a+i8mm", "usdot")])
def test_aarch64_kernel_cross_compiles(march: str, instruction: str | None) -> None:
  """The int8 matmul built for aarch64 by the cross compiler (tests/test_cross_compile.py): 4-lane vectors, the
  Target's instruction (sdot with dotprod, usdot with i8mm; plain C without), an aarch64 object file."""
  from minigrad.runtime.cross_compile import EM_AARCH64, cross_compile, elf_machine
  item, _ = matmul_item("bytes")
  kernel = cross_compile(item.ast, cc=CROSS_CC, march=march)
  assert elf_machine(kernel.obj) == EM_AARCH64
  if instruction is None: assert "dot_" not in kernel.source
  else: assert f"dot_{instruction}_v4(" in kernel.source and ("vdotq_s32" if instruction == "sdot" else "vusdotq_s32") in kernel.source
