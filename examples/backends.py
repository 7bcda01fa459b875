"""One fused kernel, four languages: render it for C, LLVM IR, OpenCL C and CUDA C side by side, then run it on
every device that opens on this machine and compare the results with numpy.

  python examples/backends.py               # sources + results
  python examples/backends.py --no-source   # just run on every device

The kernel is `(x.relu() * 2 + 1).exp().sum(1)`: elementwise work fused into a row reduction. On CPU-shaped
targets (C, LLVM) it is loops with SIMD lanes; on GPU-shaped ones (OpenCL, CUDA, PYTHON) the few rows leave the
threads idle, so the heuristics GROUP the reduction: a workgroup's threads each sum part of a row and meet in
local memory behind a barrier.
"""
import argparse
import importlib
import time
import numpy as np
from minigrad import Tensor, Device
from minigrad.runtime.device import DEVICE_NAMES
from minigrad.codegen.kernel import Kernel
from minigrad.opt.heuristics import hand_coded_optimizations
from minigrad.codegen.linearizer import linearize_for

# the renderer of each device, importable even where the device can't open (CUDA without a GPU)
RENDERERS = {"CPU": ("minigrad.codegen.c_renderer", "CRenderer"), "LLVM": ("minigrad.codegen.llvm_renderer", "LLVMRenderer"),
             "CL": ("minigrad.codegen.cl_renderer", "OpenCLRenderer"), "CUDA": ("minigrad.codegen.cuda_renderer", "CUDARenderer")}


def render(ast, renderer) -> str:
  """The source `renderer` gets for `ast` with the default optimizations of its kind of device."""
  kernel = Kernel(ast, has_local=getattr(renderer, "has_local", False))
  hand_coded_optimizations(kernel)
  uops = linearize_for(kernel, renderer)
  return f"// {kernel.name}: dims {kernel.full_shape} ({', '.join(kernel.axis_kinds)}), opts {kernel.applied_opts}\n" + \
         renderer.render(kernel.name, uops)


def program(x: Tensor) -> Tensor: return (x.relu() * 2 + 1).exp().sum(1)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--rows", type=int, default=16)
  parser.add_argument("--cols", type=int, default=1024)
  parser.add_argument("--no-source", action="store_true", help="don't print the rendered sources")
  args = parser.parse_args()
  x = np.random.default_rng(0).uniform(-1, 1, (args.rows, args.cols)).astype(np.float32)
  expected = np.exp(np.maximum(x, 0) * 2 + 1).sum(1)

  if not args.no_source:
    (item,) = program(Tensor(x)).schedule()
    for name, (module, cls) in RENDERERS.items():
      print(f"\n===== {name} " + "=" * 60)
      try: renderer = getattr(importlib.import_module(module), cls)()
      except Exception as e: print(f"(no {name} renderer here: {e})"); continue   # noqa: E702
      print(render(item.ast, renderer))

  print("\n===== running on every device " + "=" * 40)
  for name in DEVICE_NAMES:
    try: Device[name]
    except Exception as e:   # a missing package or driver: say which, go on with the others
      print(f"{name:7s} not available: {str(e).splitlines()[0]}")
      continue
    out = program(Tensor(x, device=name))
    start = time.perf_counter()
    result = out.numpy()
    seconds = time.perf_counter() - start
    error = np.abs(result - expected).max() / np.abs(expected).max()
    print(f"{name:7s} max relative error {error:.1e}  ({seconds * 1e3:.1f} ms incl. compile)  {'OK' if error < 1e-5 else 'MISMATCH'}")
    assert error < 1e-5, f"{name} disagrees with numpy"


if __name__ == "__main__":
  main()
