"""Writes docs/how-it-works.md: a matmul + bias + relu and a softmax followed through every stage of minigrad.

  python docs/how_it_works.py > docs/how-it-works.md

Everything printed is real output of the stages, made so that it is the same on every host: the kernels are optimized
for a CPU described by hand (an x86-64-v3 CPU: AVX2, 8 float lanes, 16 vector registers, 2 cores) and spelled by the
plain C renderer (not the one the CPU device set up for this host's compiler); the GPU-shaped view is the PYTHON
device's program text, which depends on nothing of the host. The programs then run on this host's CPU, and only
whether they match numpy is printed (no times). tests/test_viz.py runs this script and checks that the document is what
it prints today, so the document can't drift from the code.
"""
from __future__ import annotations
import os
import re
import sys
os.environ["CPU_THREADS"] = "2"   # the heuristics split loops for this many threads: fixed, as the Target below
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import numpy as np
from minigrad import Tensor, viz
from minigrad.codegen.c_renderer import CRenderer
from minigrad.codegen.kernel import Kernel
from minigrad.codegen.linearizer import linearize_for
from minigrad.codegen.python_renderer import PythonRenderer
from minigrad.engine.realize import count_flops
from minigrad.opt.heuristics import hand_coded_optimizations
from minigrad.target import Target
from minigrad.uop.ops import UOp, Ops, pretty
from minigrad.viz import kernel_comments

AVX2 = frozenset({"sse", "sse2", "sse3", "ssse3", "sse4.1", "sse4.2", "popcnt", "cx16", "sahf", "avx", "avx2", "bmi", "bmi2",
                  "f16c", "fma", "lzcnt", "movbe", "xsave"})
TARGET = Target("x86_64", "x86-64-v3", AVX2, cores=2, model="a hand-described x86-64-v3 CPU")
MAX_UOP_LINES = 60
out: list[str] = []


def say(*lines: str) -> None: out.extend(lines)


def block(text: str, language: str = "") -> None: say(f"```{language}", text.rstrip("\n"), "```", "")


def numbered_buffers(text: str) -> str:
  """A listing with each BUFFER's unique id replaced by its order of appearance (ids depend on what ran before)."""
  ids: dict[str, int] = {}
  return re.sub(r"BUFFER (\w+) \((%\d+)\) \((\d+), ", lambda m: f"BUFFER {m[1]} ({m[2]}) (b{ids.setdefault(m[3], len(ids))}, ", text)


def op_counts(root: UOp) -> str:
  counts: dict[str, int] = {}
  for node in root.toposort: counts[node.op.name] = counts.get(node.op.name, 0) + 1
  return ", ".join(f"{n} {name}" for name, n in sorted(counts.items(), key=lambda c: (-c[1], c[0])))


def cpu_stages(item, number: int) -> None:
  kernel = Kernel(item.ast, target=TARGET)
  hand_coded_optimizations(kernel)
  renderer = CRenderer()
  uops = linearize_for(kernel, renderer)
  plain = renderer.render(kernel.name, uops)
  source = kernel_comments.commented_source(item.ast, renderer, kernel.name, uops, plain)
  say(f"#### Kernel {number}: `{kernel.name}`", "", "Why it starts and ends where it does (what `DEBUG=3` prints as `kernel boundary:` lines):", "")
  block("\n".join(item.reasons))
  say("Its AST: the STORE of the output, the ops, and a LOAD per input buffer, each with the view (ShapeTracker) it",
      "is read through. Movement ops have disappeared into those views.", "")
  block(pretty(item.ast))
  say(f"The optimizer's choice for {TARGET.summary()}:", "")
  block(f"full shape {kernel.full_shape} ({', '.join(kernel.axis_kinds)})\napplied opts {kernel.applied_opts}")
  number = {u: i for i, u in enumerate(uops)}
  listing = [f"%{i} = {u.op.name} {u.dtype.name}" + (f" ({', '.join(f'%{number[s]}' for s in u.src)})" if u.src else "") +
             ("" if u.arg is None else f" {u.arg!r}") for i, u in enumerate(uops)]
  more = f"\n... {len(listing) - MAX_UOP_LINES} more" if len(listing) > MAX_UOP_LINES else ""
  say(f"Lowered to loops (RANGE ... ENDRANGE), vectorized (`float8`: 8 lanes) and linearized: {len(uops)} uops, in the order",
      f"the code runs them (`DEBUG=5` prints them too), {count_flops(uops)} FLOPs per run:", "")
  block("\n".join(listing[:MAX_UOP_LINES]) + more)
  say("The C it becomes (the kernel function; the typedefs and helpers before it are left out). The comments name the",
      "tensor op and the line of the script each block computes: minigrad writes them while it captures source lines",
      "(`DEBUG>=3`, `VIZ=1`, `PROFILE=1`); the source it compiles and caches has none.", "")
  body = source[source.index(f"void {kernel.name}("):]
  block(body[:body.index(f"void {kernel.name}_entry")].rstrip(), "c")


def gpu_stages(items) -> None:
  say("On a GPU-shaped device (CL, CUDA, PYTHON) the same graph is cut differently (such kernels have no side reduces:",
      "a reduce read through a broadcast gets a kernel of its own). The PYTHON device's program of each kernel, one uop a",
      "line, with the same comments:", "")
  for number, item in enumerate(items, start=1):
    kernel = Kernel(item.ast, has_local=True)
    hand_coded_optimizations(kernel)
    renderer = PythonRenderer()
    uops = linearize_for(kernel, renderer)
    plain = renderer.render(kernel.name, uops)
    say(f"Kernel {number} `{kernel.name}`: {item.reasons[0]}", "")
    block(kernel_comments.commented_source(item.ast, renderer, kernel.name, uops, plain))


def main() -> None:
  viz.enable(capturing=True, write_at_exit=False)
  rng = np.random.default_rng(0)
  x_np, w_np, b_np = (rng.standard_normal(s).astype(np.float32) for s in ((16, 32), (32, 8), (8,)))
  say("# How minigrad works: two programs through every stage", "",
      "This page is written by `python docs/how_it_works.py > docs/how-it-works.md`, and `tests/test_viz.py` checks that",
      "it is what the script prints today. The kernels are optimized for a CPU described by hand (an x86-64-v3 CPU: AVX2,",
      "8 float lanes, 16 vector registers, 2 cores) and spelled by the plain C renderer, so the page is the same on every",
      "host; the programs then run on the host's CPU and are compared with numpy. `DEBUG=3`/`4`/`5` print the same",
      "stages for any script, `VIZ=1` draws them (see the README), and [env.md](env.md) lists every environment variable.", "",
      "The stages: the Tensor API builds a lazy graph of `UOp`s (`minigrad/tensor/tensor.py`); the scheduler cuts it into kernels",
      "(`minigrad/schedule/`); each kernel's AST is optimized for a Target (`minigrad/opt/`), lowered to loops, vectorized",
      "and linearized (`minigrad/codegen/`), rendered to source, compiled and launched (`minigrad/runtime/`,",
      "`minigrad/engine/`).", "")

  # ---------------------------------------------------------------- program 1
  say("## 1. `(x @ w + b).relu()`", "")
  block("x, w, b = Tensor(x_np, device='CPU'), Tensor(w_np, device='CPU'), Tensor(b_np, device='CPU')   # (16, 32), (32, 8), (8,)\n"
        "y = (x @ w + b).relu()", "python")
  x, w, b = Tensor(x_np, device="CPU"), Tensor(w_np, device="CPU"), Tensor(b_np, device="CPU")
  y = (x @ w + b).relu()
  say("### The lazy tensor graph", "",
      "Nothing has run. `y` is a graph of `UOp`s: the matmul is a broadcast multiply (`VIEW`s that reshape and expand `x`",
      "and `w`, which cost no memory) and a `REDUCE_AXIS` that sums over the shared axis; `+ b` broadcasts `b`; `relu` is",
      "a `MAX` with 0. Each `BUFFER` is the memory of an input:", "")
  block(numbered_buffers(pretty(y.uop)))
  items = y.schedule()
  say("### The schedule", "", f"The scheduler fuses all of it into {len(items)} kernel: the multiply, the sum, the bias and the relu",
      "run in one loop nest, and nothing in between is stored.", "")
  for number, item in enumerate(items, start=1): cpu_stages(item, number)
  result = y.numpy()
  say("### Running it", "", "`y.numpy()` compiles the kernel for this host's CPU and runs it:", "")
  block(f"matches numpy: {np.allclose(result, np.maximum(x_np @ w_np + b_np, 0), rtol=1e-5, atol=1e-5)}; shape {result.shape}")

  # ---------------------------------------------------------------- program 2
  say("## 2. `x.softmax(-1)`", "")
  block("x = Tensor(x_np, device='CPU')   # (16, 32)\np = x.softmax(-1)", "python")
  x = Tensor(x_np, device="CPU")
  p = x.softmax(-1)
  say("### The lazy tensor graph", "",
      "softmax is `exp(x - max) / sum(exp(x - max))` over each row. `exp` is a polynomial of ALU ops, written once as a",
      f"Tensor function and copied onto its input, so the graph is larger: {len(p.uop.toposort)} nodes ({op_counts(p.uop)}).", "")
  items = p.schedule()
  say("### The schedule", "", f"On the CPU it is {len(items)} kernel: the row max and the row sum are *side reduces*, computed once per",
      "row inside the loop over rows that also writes the output.", "")
  for number, item in enumerate(items, start=1): cpu_stages(item, number)
  result = p.numpy()
  expected = np.exp(x_np - x_np.max(-1, keepdims=True))
  say("### Running it", "")
  block(f"matches numpy: {np.allclose(result, expected / expected.sum(-1, keepdims=True), rtol=1e-5, atol=1e-6)}; rows sum to 1: "
        f"{np.allclose(result.sum(-1), 1, atol=1e-5)}")
  say("### On a GPU-shaped device", "")
  gpu_stages(Tensor(x_np, device="PYTHON").softmax(-1).schedule())
  print("\n".join(out).rstrip("\n"))


if __name__ == "__main__": main()
