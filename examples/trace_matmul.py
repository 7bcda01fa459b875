"""Trace a matmul through every stage of minigrad: tensor graph -> schedule -> kernel AST -> loop uops -> C -> result.

  python examples/trace_matmul.py            # the walk-through, stage by stage
  DEBUG=4 python examples/trace_matmul.py    # plus what the engine itself prints for each kernel it runs
"""
import argparse
import numpy as np
from minigrad import Tensor, Device, GlobalCounters
from minigrad.uop.ops import pretty
from minigrad.codegen.kernel import Kernel
from minigrad.codegen.lowerer import lower
from minigrad.codegen.linearizer import linearize


def heading(text: str) -> None: print(f"\n=== {text} " + "=" * max(0, 70 - len(text)))


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--n", type=int, default=4, help="rows of a")
  parser.add_argument("--k", type=int, default=3, help="columns of a / rows of b")
  parser.add_argument("--m", type=int, default=2, help="columns of b")
  args = parser.parse_args()

  rng = np.random.default_rng(0)
  a_np = rng.standard_normal((args.n, args.k)).astype(np.float32)
  b_np = rng.standard_normal((args.k, args.m)).astype(np.float32)
  a, b = Tensor(a_np), Tensor(b_np)
  c = (a @ b).relu()

  heading("1. the lazy tensor graph (nothing has run yet)")
  print("c = (a @ b).relu() is a graph of UOps: movement ops became VIEWs, the matmul a MUL and a REDUCE_AXIS")
  print(pretty(c.uop))

  heading("2. the schedule: the graph cut into kernels")
  schedule = c.schedule()
  print(f"{len(schedule)} kernel(s); matmul, relu and the reshape fuse into one")
  for i, item in enumerate(schedule):
    print(f"kernel {i}: writes a buffer of {item.bufs[0].arg[1]} elements, reads {len(item.bufs) - 1} buffer(s)")

  item = schedule[0]
  heading("3. the kernel AST: LOADs with ShapeTracker views, ALU ops, a REDUCE_AXIS, one STORE")
  print(pretty(item.ast))

  heading("4. the Kernel: loop dims (global dims, then reduce dims), before any optimization")
  kernel = Kernel(item.ast)
  print(f"name {kernel.name}  full shape {kernel.full_shape}  global dims {kernel.global_dims}  "
        f"reduce axes {sorted(kernel.reduce_axes)}  opts {kernel.applied_opts}")
  for view in kernel.views: print(f"  view {kernel.st_of(view)}")

  heading("5. linearized loop uops")
  uops = linearize(lower(kernel))
  for i, u in enumerate(uops):
    srcs = ",".join(str(uops.index(s)) if s in uops else "-" for s in u.src)
    print(f"{i:3d} {u.op.name:12s} {u.dtype.name:6s} [{srcs}] {'' if u.arg is None else u.arg}")

  heading(f"6. {Device.DEFAULT} source from the renderer")
  print(Device[Device.DEFAULT].renderer.render(kernel.name, uops))

  heading("7. run it and compare with numpy")
  print("before running, the engine optimizes the kernel (UPCAST dims, the innermost as SIMD lanes, threads);")
  print("DEBUG=3 prints the opts it chose and DEBUG=4 that kernel's source; NOOPT=1 runs the plain loops above")
  GlobalCounters.reset()
  result = c.numpy()
  expected = np.maximum(a_np @ b_np, 0)
  print(result)
  print(f"kernels run: {GlobalCounters.kernel_count}; max abs difference vs numpy: {np.abs(result - expected).max():.2e}")
  assert np.allclose(result, expected, atol=1e-5), "minigrad and numpy disagree"


if __name__ == "__main__":
  main()
