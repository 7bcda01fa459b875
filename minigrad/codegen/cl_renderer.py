"""The OpenCL C renderer: linearized UOps -> one `__kernel` function. It owns spelling only.

Input: the linearizer's list of GPU-shaped UOps (SPECIAL workgroup/thread ids, DEFINE_LOCAL, BARRIER) and a kernel
name. Output: OpenCL C source. It is the C renderer's table with OpenCL's names for types, math, ids and memory.
"""
from __future__ import annotations
from minigrad.dtype import DType, dtypes
from minigrad.uop.ops import UOp, Ops
from minigrad.codegen.c_renderer import CRenderer


class OpenCLRenderer(CRenderer):
  device = "CL"
  kernel_prefix = "__kernel "
  threaded_outer_loop = False
  vector_lanes = False
  has_local = True
  barrier = "barrier(CLK_LOCAL_MEM_FENCE);"
  includes = ["#pragma OPENCL EXTENSION cl_khr_fp64 : enable", "#pragma OPENCL EXTENSION cl_khr_fp16 : enable"]
  type_names = {**CRenderer.type_names, dtypes.bool: "bool", dtypes.int64: "long", dtypes.uint64: "ulong", dtypes.float16: "half"}
  code_for_op = {**CRenderer.code_for_op,
                 Ops.SQRT: lambda x, dt: f"sqrt({x})", Ops.EXP2: lambda x, dt: f"exp2({x})", Ops.LOG2: lambda x, dt: f"log2({x})",
                 Ops.SIN: lambda x, dt: f"sin({x})", Ops.TRUNC: lambda x, dt: f"trunc({x})"}

  def render_special(self, u: UOp) -> str:
    kind = "get_group_id" if u.arg[0].startswith("gidx") else "get_local_id"
    return f"((int){kind}({u.arg[0][-1]}))"

  def render_local(self, name: str, dt: DType, size: int) -> str: return f"__local {self.type_name(dt)} {name}[{size}];"

  def kernel_header(self, name: str, globals_: list[UOp], written: set[int], variables: list[UOp]) -> str:
    params = [f"__global {'' if g.arg in written else 'const '}{self.type_name(g.dtype.base)}* restrict data{g.arg}" for g in globals_]
    params += [f"const int {v.arg[0]}" for v in variables]
    return f"__kernel void {name}({', '.join(params)})"
