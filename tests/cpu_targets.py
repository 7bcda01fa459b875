"""Hand-built CPU Targets for the tests that check the optimizer's decisions for CPUs they may not run on (DESIGN.md,
decision 7), and the helpers those tests share.

Input: kernel ASTs (from `Tensor.schedule()`) and a Target. Output: the decisions the policy makes for that Target
(`decide`: a Kernel with the hand-coded actions applied), their source without compiling or running it (`render`),
and the schedule-time policy (operand packing, convolution row widening) pinned to a Target (`pin_policy_target`).

A kernel decided for a Target the host may lack is only rendered, never run. Tests that check numbers run on the
host's own Target; to check that a decision made for another Target computes the right numbers, they apply its
actions on the host's Target (`get_kernel(ast, "CPU", kernel.applied_opts)`): actions are loop transformations,
valid on every CPU.
"""
from __future__ import annotations
import dataclasses
import re
from minigrad.opt import heuristics
from minigrad.codegen.kernel import Kernel
from minigrad.engine.realize import render_kernel
from minigrad.helpers import prod
from minigrad.target import Target
from minigrad.uop.ops import UOp

# the ISA features gcc's -march=<level> predefines (gcc -march=x86-64-v3 -dM -E), as Target features
SSE2_FEATURES = frozenset({"sse", "sse2"})
AVX2_FEATURES = SSE2_FEATURES | {"cx16", "sahf", "popcnt", "sse3", "sse4.1", "sse4.2", "ssse3", "avx", "avx2", "bmi", "bmi2",
                                 "f16c", "fma", "lzcnt", "movbe", "xsave"}
AVX512_FEATURES = AVX2_FEATURES | {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}

# the Xeon the heuristics' figures were measured on (48 KB L1d, 2 MB L2): AVX-512, 32 vector registers
AVX512 = Target("x86_64", "x86-64-v4", AVX512_FEATURES, l1d_bytes=48 << 10, l2_bytes=2 << 20, l3_bytes=32 << 20, cores=2,
                model="Xeon (AVX-512)")
# the same CPU as one that runs 64-byte vectors as two 32-byte halves (AMD Zen 4): only that fact differs
AVX512_HALVED = dataclasses.replace(AVX512, march="znver4", halves_wide_vectors=True, model="Zen 4 (AVX-512 in halves)")
# what CPU_TARGET=x86-64-v3 and x86-64 give (a Target not of the host: the default caches)
AVX2 = Target("x86_64", "x86-64-v3", AVX2_FEATURES, cores=2, model="x86-64-v3 (AVX2)")
SSE2 = Target("x86_64", "x86-64", SSE2_FEATURES, cores=2, model="x86-64 (SSE2)")
NEON = Target("aarch64", "armv8-a", frozenset({"neon"}), cores=2, model="Armv8-A (NEON)")

TARGETS = {"avx512": AVX512, "avx2": AVX2, "sse2": SSE2, "avx512_halved": AVX512_HALVED, "neon": NEON}


def float_lanes(target: Target) -> int:
  """float32 elements per vector register of `target`."""
  return target.vector_bytes // 4


def decide(ast: UOp, target: Target) -> Kernel:
  """The kernel for `ast` with the actions the hand-coded policy picks for `target`."""
  kernel = Kernel(ast, target=target)
  heuristics.hand_coded_optimizations(kernel)
  return kernel


def render(kernel: Kernel, device: str = "CPU") -> str:
  """The source `device`'s renderer writes for `kernel` (not compiled, not run)."""
  return render_kernel(kernel, device, verbose=False)[1]


def body(source: str) -> str:
  """The kernel function of a C source, without the helpers and typedefs before it."""
  return source[source.index("void "):]


def widest_float_vector(source: str) -> int:
  """The most float lanes a vector in the kernel function of `source` has (1 without vectors)."""
  return max((int(n) for n in re.findall(r"\bfloat_v(\d+)\b", body(source))), default=1)


def tile_of(kernel: Kernel) -> tuple[int, int]:
  """(lanes, vector accumulators) of a kernel whose first action gives the lanes (UPCAST on the output, or UNROLL on
  a reduce dim) and whose later UPCASTs make the register tile."""
  opts = kernel.applied_opts
  assert opts and opts[0].op in ("UPCAST", "UNROLL"), opts
  return opts[0].amount, prod(o.amount for o in opts[1:] if o.op == "UPCAST")


def pin_policy_target(monkeypatch, target: Target) -> None:
  """Make the schedule-time policy (minigrad.schedule.packing, minigrad.tensor.conv) read `target` instead of the CPU
  device's Target; schedules recorded for another Target are not reused meanwhile."""
  import minigrad.tensor.conv as conv
  import minigrad.schedule.packing as packing
  import minigrad.schedule.reuse as reuse
  monkeypatch.setattr(reuse, "recipes", {})
  monkeypatch.setattr(packing, "cpu_target", lambda *args, **kwargs: target)
  monkeypatch.setattr(conv, "cpu_target", lambda *args, **kwargs: target)

