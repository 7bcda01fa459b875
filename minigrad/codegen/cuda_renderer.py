"""The CUDA C renderer: linearized GPU-shaped UOps -> one `extern "C" __global__` function. It owns spelling only.

Input: the linearizer's list of GPU-shaped UOps (SPECIAL workgroup/thread ids, DEFINE_LOCAL, BARRIER) and a kernel
name. Output: CUDA C++ source for NVRTC. It is the shared GPU table (codegen/gpu_renderer.py) with CUDA's names:
workgroup ids are blockIdx, thread ids threadIdx, workgroup memory is `__shared__`, the barrier is `__syncthreads()`,
pointers are `__restrict__`. float16 words convert with cuda_fp16.h's __half2float / __float2half_rn (the header is
included only by kernels that convert); bfloat16 is 16-bit words with the conversions written out in the kernel
(codegen/dtype_rules.py), so it needs no cuda_bf16.h. NVRTC has no <math.h>: NAN and INFINITY are defined here.
"""
from __future__ import annotations
from minigrad.dtype import dtypes
from minigrad.uop.ops import UOp, Ops
from minigrad.codegen.c_renderer import CRenderer
from minigrad.codegen.gpu_renderer import GPURenderer, HALF_TO_FLOAT, FLOAT_TO_HALF

REINTERPRET = "reinterpret_bits"


class CUDARenderer(GPURenderer):
  device = "CUDA"
  kernel_prefix = 'extern "C" __global__ '
  local_qualifier = "__shared__"
  restrict = "__restrict__"
  barrier = "__syncthreads();"
  includes = ["#ifndef INFINITY", "#define INFINITY (__int_as_float(0x7f800000))", "#endif",
              "#ifndef NAN", "#define NAN (__int_as_float(0x7fc00000))", "#endif"]
  type_names = {**CRenderer.type_names, dtypes.bool: "bool", dtypes.float16: "unsigned short"}   # float16 lives as words

  def render_special(self, u: UOp) -> str:
    kind = "blockIdx" if u.arg[0].startswith("gidx") else "threadIdx"
    return f"((int){kind}.{'xyz'[int(u.arg[0][-1])]})"

  def prelude(self, uops: list[UOp]) -> list[str]:
    reinterpret = [f"template <typename To, typename From> __device__ __forceinline__ To {REINTERPRET}(From x) "
                   "{ union { From from; To to; } both; both.from = x; return both.to; }"] if any(u.op is Ops.BITCAST for u in uops) else []
    prelude = super().prelude(uops) + reinterpret
    return sorted(prelude, key=lambda line: not line.startswith("#include"))   # headers first: NAN/INFINITY only if they lack them

  def render_reinterpret(self, x: str, target: str) -> str: return f"{REINTERPRET}<{target}>({x})"

  def half_conversions(self) -> list[str]:
    return ["#include <cuda_fp16.h>",
            f"__device__ __forceinline__ float {HALF_TO_FLOAT}(unsigned short word) {{ return __half2float(__ushort_as_half(word)); }}",
            f"__device__ __forceinline__ unsigned short {FLOAT_TO_HALF}(float x) {{ return __half_as_ushort(__float2half_rn(x)); }}"]
