"""The OpenCL C renderer: linearized GPU-shaped UOps -> one `__kernel` function. It owns spelling only.

Input: the linearizer's list of GPU-shaped UOps (SPECIAL workgroup/thread ids, DEFINE_LOCAL, BARRIER) and a kernel
name. Output: OpenCL C source. It is the shared GPU table (codegen/gpu_renderer.py) with OpenCL's names: the ids are
get_group_id/get_local_id, workgroup memory is `__local`, the barrier is `barrier(CLK_LOCAL_MEM_FENCE)`, math
functions are overloaded by type, a bitcast is `as_<type>(x)`, and bool buffers hold uchar (OpenCL kernels may
not take bool pointers). float16 words convert with vload_half/vstore_half_rte, core OpenCL that needs no
cl_khr_fp16 (pocl lacks it).
"""
from __future__ import annotations
from minigrad.dtype import DType, dtypes
from minigrad.uop.ops import UOp, Ops
from minigrad.codegen.gpu_renderer import GPURenderer, HALF_TO_FLOAT, FLOAT_TO_HALF


class OpenCLRenderer(GPURenderer):
  device = "CL"
  kernel_prefix = "__kernel "
  global_qualifier = "__global "
  local_qualifier = "__local"
  barrier = "barrier(CLK_LOCAL_MEM_FENCE);"
  includes = ["#pragma OPENCL EXTENSION cl_khr_fp64 : enable"]
  type_names = {dtypes.bool: "bool", dtypes.int8: "char", dtypes.uint8: "uchar", dtypes.int16: "short", dtypes.uint16: "ushort",
                dtypes.int32: "int", dtypes.uint32: "uint", dtypes.int64: "long", dtypes.uint64: "ulong", dtypes.float32: "float",
                dtypes.float64: "double", dtypes.float16: "ushort", dtypes.bfloat16: "ushort"}   # 16-bit floats are words
  memory_type_names = {dtypes.bool: "uchar"}
  code_for_op = {**GPURenderer.code_for_op,
                 Ops.SQRT: lambda x, dt: f"sqrt({x})", Ops.EXP2: lambda x, dt: f"exp2({x})", Ops.LOG2: lambda x, dt: f"log2({x})",
                 Ops.SIN: lambda x, dt: f"sin({x})", Ops.TRUNC: lambda x, dt: f"trunc({x})",
                 Ops.MOD: lambda a, b, dt: f"fmod({a},{b})" if dtypes.is_float(dt) else f"({a}%{b})"}

  def render_special(self, u: UOp) -> str:
    kind = "get_group_id" if u.arg[0].startswith("gidx") else "get_local_id"
    return f"((int){kind}({u.arg[0][-1]}))"

  def render_const(self, value: float | int | bool, dt: DType) -> str:
    if dt == dtypes.int64 and value == dtypes.min(dtypes.int64): return "(-9223372036854775807L-1)"
    if dt == dtypes.int64: return f"{int(value)}L"
    if dt == dtypes.uint64: return f"{int(value)}UL"
    return super().render_const(value, dt)

  def render_reinterpret(self, x: str, target: str) -> str: return f"as_{target}({x})"

  def half_conversions(self) -> list[str]:
    return [f"inline float {HALF_TO_FLOAT}(ushort word) {{ return vload_half(0, (const __private half*)&word); }}",
            f"inline ushort {FLOAT_TO_HALF}(float x) {{ ushort word; vstore_half_rte(x, 0, (__private half*)&word); return word; }}"]
