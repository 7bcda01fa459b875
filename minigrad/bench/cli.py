"""minigrad's speed, side by side with numpy and torch, in one process, for one CPU Target.

  python -m minigrad.bench                          # all benchmarks, compiled for this CPU (-march=native)
  python -m minigrad.bench matmul attention         # some of them
  python -m minigrad.bench --target x86-64-v3       # minigrad compiled for AVX2, torch limited to AVX2
  python -m minigrad.bench --runs 15                # more timed runs each
  python -m minigrad.bench --beam-check mlp conv    # the default kernel choices against BEAM=3's (minigrad/bench/beam.py)

Input: the machine, the Target (--target, else $CPU_TARGET, else native) and the ISA torch may use (--torch-isa,
else $ATEN_CPU_CAPABILITY, else the one matching the Target). Output: a header naming the host (CPU model, cores,
ISA flags, load average), the Target minigrad compiles for and the ISA torch reports using, then one line per
benchmark with the median rate of minigrad (scheduled once, as a TinyJit replay), minigrad eager (each call builds,
schedules and runs the graph, as a plain call does), numpy and torch, and minigrad's ratios to them.

torch is limited to the Target's ISA before it is imported: ATEN_CPU_CAPABILITY (its own kernels: elementwise,
reductions, softmax, attention) is avx512 for a Target with AVX-512 F/BW/VL/DQ, avx2 for one with AVX2 and FMA, else
default; when that is narrower than the host's, MKL (matmul), oneDNN (conv) and fbgemm (quantized Linear) get the
same limit (MKL_ENABLE_INSTRUCTIONS, ONEDNN_MAX_CPU_ISA, FBGEMM_ENABLE_INSTRUCTIONS). Variables the user set already
are kept (an explicit --torch-isa replaces $ATEN_CPU_CAPABILITY). The header prints what torch, MKL and oneDNN report
they use. numpy is not limited: it is imported with minigrad, and its SIMD dispatch and OpenBLAS pick the host's ISA.

Method: each figure is the median of 3 blocks of >= 7 timed runs after warm-up; each library runs each block on its
own, after a pause (numpy's and torch's threads spin for a while after a call and would slow the next library down),
and the libraries take turns block by block. On a busy machine (see the load average) the figures are unreliable.
minigrad runs are synchronized (the result is realized) and the compile happens during warm-up: the graph is
scheduled once and its kernels run each time, as a captured (TinyJit) step would. Rates count what the op must do at
least: GFLOPS for matmul/conv (2*M*N*K) and for causal attention (2*B*H*T*T*D: half of the 4*B*H*T*T*D of its two
products, the half a causal mask leaves; softmax not counted), GB/s as one read of each input plus one write of the
output. The training steps (MLP of bench/mlp_train.py, GPT of bench/model_steps.py, from a source checkout) run
minigrad's TinyJit step and the same step in a plain loop (eager); a timed run is a number of steps ending with the
loss read back. "small" times plain calls of small ops, where the Python work is the cost (see bench_small).
"gpt_generate" and "baby_gpt" run examples/gpt.py's baby GPT (generation at batch 1 with the KV-cache, and training
steps) against the torch peers of bench/gpt_generate.py, also with torch on one thread (`torch-1t`).
"""
from __future__ import annotations
import argparse
import sys
import time
import numpy as np
from minigrad.target import Target
from minigrad.bench.harness import BenchSetup, ROUNDS, _torch, add_target_arguments, configure_or_exit, header_lines
from minigrad.bench.sections import BENCHMARKS, detail_lines, small_cases, topk_vs_sort


def main(argv: list[str] | None = None) -> None:
  """Parse the command line, choose the Target and torch's ISA, print the header and one line per benchmark."""
  parser = argparse.ArgumentParser(prog="python -m minigrad.bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("names", nargs="*", help=f"benchmarks to run: {', '.join(BENCHMARKS)} (default: all)")
  parser.add_argument("--runs", type=int, default=7, help=f"timed runs per block, {ROUNDS} blocks per library (the median is shown; at least 7)")
  parser.add_argument("--beam-check", action="store_true",
                      help="instead: the default kernel choices against BEAM's on each workload (minigrad/bench/beam.py)")
  parser.add_argument("--beam", type=int, default=3, help="the beam width of --beam-check (default 3)")
  add_target_arguments(parser)
  args = parser.parse_args(argv)
  if unknown := [n for n in args.names if n not in BENCHMARKS]: parser.error(f"unknown benchmark(s) {unknown}; choose from {list(BENCHMARKS)}")
  if args.runs < 7: parser.error(f"--runs must be at least 7, got {args.runs}")
  setup = configure_or_exit(parser.prog, args.target, args.torch_isa)   # before anything compiles or imports torch
  if args.beam_check: return _beam_check(args, setup)
  for line in header_lines(setup, _torch()): print(line)
  rng = np.random.default_rng(0)
  libraries = ("minigrad", "eager", "numpy", "torch")
  print(f"{'benchmark':48s} " + " ".join(f"{name:>16s}" for name in libraries) + "   ratios")
  for name in args.names or BENCHMARKS:
    title, fn = BENCHMARKS[name]
    results = fn(rng, args.runs)
    unit = next(iter(results.values()))[1]
    cells = [f"{results[k][0]:9.2f} {unit:>6s}" if k in results else "-" for k in libraries]
    ratios = [f"{results[mine][0] / results[k][0]:.2f}x {k}" if mine == "minigrad" else f"eager {results[mine][0] / results[k][0]:.2f}x {k}"
              for mine in ("minigrad", "eager") if mine in results for k in ("numpy", "torch") if k in results]
    print(f"{title:48s} " + " ".join(f"{c:>16s}" for c in cells) + "   " + ", ".join(ratios), flush=True)
    if name == "small":
      for case, seconds in small_cases.items():
        print(f"  {case:46s} " + ", ".join(f"{lib} {s * 1e6:.1f} us" for lib, s in seconds.items()))
    if name.startswith("topk"):
      print(f"  {'time over np.sort of the 1M (same blocks)':46s} " + ", ".join(f"{lib} {r:.2f}x" for lib, r in topk_vs_sort.items()))
    for line in detail_lines.pop(name, ()): print(line)


def _beam_check(args: argparse.Namespace, setup: BenchSetup) -> None:
  """--beam-check: the host and Target, then the heuristics against BEAM on each named workload (minigrad/bench/beam.py)."""
  from minigrad.bench import beam as bench_beam
  if args.beam < 1: sys.exit(f"python -m minigrad.bench: error: --beam must be at least 1, got {args.beam}")
  for line in header_lines(setup)[:2]: print(line)
  try: bench_beam.main(args.names, args.beam, args.runs, {name: title for name, (title, _) in BENCHMARKS.items()})
  except ValueError as e: sys.exit(f"python -m minigrad.bench: error: {e}")
