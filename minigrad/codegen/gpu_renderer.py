"""What the GPU renderers (OpenCL C, CUDA C) share: linearized GPU-shaped UOps -> one kernel function.

Input: the linearizer's list of UOps for a device with workgroups (SPECIAL workgroup/thread ids, DEFINE_LOCAL,
BARRIER; no vector dtypes) and a kernel name. Output: the kernel's source text. It is the C renderer's table;
a subclass (cl_renderer.OpenCLRenderer, cuda_renderer.CUDARenderer) only names its language's pieces:
ids, shared memory, the barrier, the buffer parameter, the reinterpreting cast and the float16 conversions.

float16 is kept as 16-bit words, as bfloat16 is: every float16 arithmetic op has already become float32
(codegen/dtype_rules.py), so memory, WHERE and BITCAST move the bits unchanged and only casts convert, through
two small functions each backend defines (`half_to_float` / `float_to_half`, rounding to nearest even). That
needs no native half type: OpenCL devices without cl_khr_fp16 (pocl) have vload_half/vstore_half.
"""
from __future__ import annotations
import numpy as np
from minigrad.dtype import DType, dtypes
from minigrad.uop.ops import UOp, Ops
from minigrad.codegen.c_renderer import CRenderer, _strip, _may_overflow

HALF_TO_FLOAT, FLOAT_TO_HALF = "half_to_float", "float_to_half"   # names of the float16 conversion functions


def _subtract_if_negated(a: str, b: str, dt: DType) -> str:
  """`a+(-x)` is spelled `a-x`: the same number, and OpenCL C compilers fuse `a-y*z` into one multiply-add (as gcc's
  -ffp-contract=fast does on the CPU) only when it is written as a subtraction."""
  return f"({a}-{b[2:-1]})" if b.startswith("(-") and _strip(b) == b[1:-1] else f"({a}+{b})"


class GPURenderer(CRenderer):
  code_for_op = {**CRenderer.code_for_op, Ops.ADD: _subtract_if_negated}
  threaded_outer_loop = False
  vector_lanes = False
  sorts_rows = False             # a row per thread would be slow: sorts take the compare-exchange network (sort_ops)
  gated_reduces = False          # a branch per thread: left to the GPU as selects
  has_local = True
  index_type = "int"             # 32-bit index math is what GPUs do fast
  global_qualifier = ""          # address space of buffer parameters (OpenCL: `__global `)
  local_qualifier = ""           # address space of workgroup memory (OpenCL: __local, CUDA: __shared__)
  restrict = "restrict"
  # the element type of a buffer or of local memory, where it differs from the type of a value (OpenCL has no bool buffers)
  memory_type_names: dict[DType, str] = {}

  # ---- what a backend spells ----
  def half_conversions(self) -> list[str]:
    """Definitions of `half_to_float(word) -> float` and `float_to_half(float) -> word` (round to nearest even)."""
    raise NotImplementedError

  def render_reinterpret(self, x: str, target: str) -> str:
    """The bits of `x` read as a `target` value of the same size."""
    raise NotImplementedError

  # ---- shared ----
  def memory_type(self, dt: DType) -> str: return self.memory_type_names.get(dt, self.type_name(dt))

  def prelude(self, uops: list[UOp]) -> list[str]:
    uses_half = any(u.op is Ops.CAST and dtypes.float16 in (u.dtype, u.src[0].dtype) for u in uops)
    return self.includes + (self.half_conversions() if uses_half else [])

  def render_const(self, value: float | int | bool, dt: DType) -> str:
    if dt == dtypes.float16: return f"(({self.type_name(dt)}){half_bits(value):#06x})"
    return super().render_const(value, dt)

  def render_alu(self, u: UOp, src: list[str]) -> str:
    """Signed int32/int64 arithmetic that may overflow (by the operands' value bounds) goes through the unsigned type,
    which wraps by definition: the CPU's -fwrapv has no OpenCL/NVRTC flag, and their compilers exploit signed
    overflow (`x+1 > x` becomes true). Index math stays as written: its bounds fit."""
    if u.dtype in WRAPPED and u.op in (Ops.ADD, Ops.MUL, Ops.NEG, Ops.SHL) and _may_overflow(u):
      unsigned = self.type_name(WRAPPED[u.dtype])
      a = f"(({unsigned}){src[0]})"
      if u.op is Ops.NEG: wrapped = f"(({unsigned})0-{a})"
      elif u.op is Ops.SHL: wrapped = f"({a}<<{src[1]})"
      else: wrapped = self.code_for_op[u.op](a, f"(({unsigned}){src[1]})", WRAPPED[u.dtype])
      return self.render_cast(wrapped, u.dtype)
    return super().render_alu(u, src)

  def render_cast(self, x: str, dt: DType, from_dt: DType | None = None) -> str:
    if from_dt == dtypes.float16:
      x, from_dt = f"{HALF_TO_FLOAT}({x})", dtypes.float32
      if dt == dtypes.float32: return x
    if dt == dtypes.float16: return f"{FLOAT_TO_HALF}({x if from_dt == dtypes.float32 else super().render_cast(x, dtypes.float32)})"
    return super().render_cast(x, dt)

  def render_bitcast(self, x: str, from_dt: DType, to_dt: DType) -> str:
    target = self.type_name(to_dt)
    return x if self.type_name(from_dt) == target else self.render_reinterpret(x, target)

  def render_local(self, name: str, dt: DType, size: int) -> str: return f"{self.local_qualifier} {self.memory_type(dt)} {name}[{size}];"

  def kernel_header(self, name: str, globals_: list[UOp], written: set[int], variables: list[UOp]) -> str:
    params = [f"{self.global_qualifier}{'' if g.arg in written else 'const '}{self.memory_type(g.dtype.base)}* {self.restrict} data{g.arg}"
              for g in globals_]
    params += [f"const int {v.arg[0]}" for v in variables]
    return f"{self.kernel_prefix}void {name}({', '.join(params)})"


WRAPPED = {dtypes.int32: dtypes.uint32, dtypes.int64: dtypes.uint64}   # signed type -> the unsigned type its math wraps in


def half_bits(value: float) -> int:
  """The 16-bit word of the float16 nearest to `value`."""
  with np.errstate(over="ignore"): return int(np.array(value, dtype=np.float16).view(np.uint16))
