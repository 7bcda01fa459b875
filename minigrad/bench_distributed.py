"""Data-parallel training speed on one host: the gradient allreduce's share of a training step, and the step rate of
2 ranks x 1 thread against 1 rank x 2 threads at the same global batch.

  python -m minigrad.bench_distributed                 # MLP and GPT, 2 ranks (needs mpi4py and mpirun: pip install -e ".[mpi]")
  python -m minigrad.bench_distributed mlp --steps 50  # one model, more steps per timed block

Input: the models of bench/mlp_train.py (MLP 784-256-128-10, Adam, global batch 128) and bench/model_steps.py (the small
GPT: 2 blocks, width 128, 64 tokens, global batch 16), from a source checkout.
Output: the host and Target lines, then per model:
  * 2 ranks x 1 thread (`mpirun -n 2`, CPU_THREADS=1, half the batch per rank): global steps/s, the time per step
    spent in allreduce_gradients' host launch (setting up, packing - none in a TinyJit replay through shared memory -,
    the reduction - through shared memory on one host, see minigrad/distributed/shared.py - and waiting for the
    other rank) as a fraction of the step, the same at the
    fastest block (on a busy host the least disturbed one), and the same gradient allreduce timed alone (no compute
    around it: the transfer itself), next to one MPI_Allreduce of the gradients' size;
  * 1 rank x 2 threads (a plain process, CPU_THREADS=2, the whole batch): global steps/s;
  * 1 rank x 1 thread, for scale, and the same with allreduce_gradients on a loopback communicator (it packs the
    buckets and puts its host launch, a Python callback, into the TinyJit replay, but sends nothing);
  and the ratio of the 2-rank rate to the 1-rank x 2-thread rate.
Every run is the TinyJit step with `distributed.allreduce_gradients` between backward and the optimizer step (a no-op
at one rank). Each runs in its own processes: a warm-up, then `--runs` blocks of `--steps` steps, each ending with the
loss read back; the median block is shown. On a busy machine (see the load average) the figures are unreliable.

Under mpirun the module is the worker (`--worker MODEL`): rank 0 prints one `RESULT {json}` line.
"""
from __future__ import annotations
from typing import Any, Callable
import argparse
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import numpy as np

MODELS = {"mlp": "MLP 784-256-128-10, Adam, global batch 128", "gpt": "GPT (2 blocks, width 128) T64, Adam, global batch 16"}
DEFAULT_STEPS = {"mlp": 40, "gpt": 4}
GOAL = 0.10   # issue #28: allreduce <= 10 % of the MLP step at 2 ranks


# ---------------------------------------------------------------- the worker (one rank, or the single process)

def _model_and_batches(name: str, world_size: int) -> tuple[Callable[[], Any], Any, list[tuple[np.ndarray, np.ndarray]]]:
  """(forward, parameters, batches of this rank's size) for a model of bench/."""
  from minigrad import Tensor, nn
  from minigrad.bench.harness import _bench_module
  from minigrad.nn.state import get_parameters
  Tensor.manual_seed(0)
  if name == "mlp":
    mlp_train = _bench_module("mlp_train")
    layers = [nn.Linear(a, b) for a, b in zip(mlp_train.LAYER_SIZES, mlp_train.LAYER_SIZES[1:])]
    def forward(x: Tensor) -> Tensor:
      for layer in layers[:-1]: x = layer(x).relu()
      return layers[-1](x)
    return forward, get_parameters(layers), mlp_train.random_batches(8, 128 // world_size)
  model_steps = _bench_module("model_steps")
  model_steps.GPT = dict(model_steps.GPT, batch=model_steps.GPT["batch"] // world_size)   # this rank's share of the batch
  model = model_steps.minigrad_gpt()
  return model, get_parameters(model), model_steps.gpt_batches()


class LoopbackCommunicator:
  """One rank that allreduces with itself: allreduce_gradients packs its buckets and TinyJit replays its host launch,
  but nothing is sent (what the allreduce costs a step apart from MPI)."""
  rank, size = 0, 1
  def allreduce_(self, arrays: list[np.ndarray], op: str = "sum", what: str = "") -> None: pass
  def allgather_object(self, value: Any, what: str = "") -> list[Any]: return [value]


def worker(name: str, steps: int, runs: int, loopback: bool = False) -> dict[str, Any]:
  """Time the data-parallel TinyJit step of `name` in this process (one rank of the job, or alone; `loopback`: alone,
  with allreduce_gradients running on a LoopbackCommunicator)."""
  from minigrad import Tensor, TinyJit, nn
  from minigrad import distributed as dist
  world = dist.init()
  comm = LoopbackCommunicator() if loopback else None
  forward, params, batches = _model_and_batches(name, world.size)
  optimizer = nn.optim.Adam(params, lr=1e-3)
  dist.broadcast_parameters(params)

  @TinyJit
  def step(x: Tensor, y: Tensor) -> Tensor:
    with Tensor.train():
      loss = nn.functional.cross_entropy(forward(x), y)
      optimizer.zero_grad()
      loss.backward()
      dist.allreduce_gradients(params, realize_with=[loss], comm=comm)
      optimizer.step()
    return loss
  cycle = itertools.cycle(batches)

  def block(count: int) -> float:
    for _ in range(count):
      x, y = next(cycle)
      loss = step(Tensor.from_numpy(x), Tensor.from_numpy(y))
    return float(loss.item())
  block(5)                                                      # capture and warm up
  dist.barrier()
  seconds: list[float] = []
  comm_seconds: list[float] = []
  pack_seconds: list[float] = []
  for _ in range(runs):
    dist.CommCounters.reset()
    start = time.perf_counter()
    block(steps)
    seconds.append((time.perf_counter() - start) / steps)
    comm_seconds.append(dist.CommCounters.seconds / steps)
    pack_seconds.append(dist.CommCounters.pack_seconds / steps)
  packed_bytes = dist.CommCounters.pack_bytes / steps
  result: dict[str, Any] = {"ranks": world.size, "threads": int(os.environ.get("CPU_THREADS", "0") or 0), "step_s": statistics.median(seconds),
                            "allreduce_s": statistics.median(comm_seconds), "pack_s": statistics.median(pack_seconds),
                            "best_step_s": min(seconds), "best_allreduce_s": comm_seconds[seconds.index(min(seconds))], "pack_bytes": packed_bytes,
                            "gradient_bytes": sum(p.numel() * 4 for p in params)}
  if (comm := dist.communicator()) is not None:                 # the same allreduce with nothing around it
    buffer = np.ones(sum(p.numel() for p in params), dtype=np.float32)
    def mpi() -> None: comm.allreduce_([buffer], "sum")
    exchange = comm.node_exchange([(buffer.size, buffer.dtype)])
    plan = exchange.plan([[(0, buffer)]]) if exchange is not None else None
    def shared() -> None:                                       # packing included, as in an eager step
      exchange.pack(plan)
      comm.shared_allreduce_(exchange, plan)
    result["path"] = "shared memory" if exchange is not None else "MPI"
    for key, reduce in (("allreduce_alone_s", shared if exchange is not None else mpi), ("mpi_alone_s", mpi)):
      comm.barrier()
      start = time.perf_counter()
      for _ in range(steps): reduce()
      result[key] = (time.perf_counter() - start) / steps
  return result


# ---------------------------------------------------------------- the driver

def _mpirun() -> list[str] | None:
  beside = os.path.join(os.path.dirname(sys.executable), "mpirun")
  found = beside if os.path.exists(beside) else shutil.which("mpirun") or shutil.which("mpiexec")
  if found is None: return None
  version = subprocess.run([found, "--version"], capture_output=True, text=True).stdout
  extra = ["--oversubscribe"] + (["--allow-run-as-root"] if os.geteuid() == 0 else []) if "Open MPI" in version else []
  return [found, *extra]


def _run(prefix: list[str], name: str, steps: int, runs: int, threads: int, loopback: bool = False, timeout: float = 600) -> dict[str, Any]:
  env = dict(os.environ, CPU_THREADS=str(threads), OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
  command = prefix + [sys.executable, "-m", "minigrad.bench_distributed", "--worker", name, "--steps", str(steps), "--runs", str(runs)]
  if loopback: command.append("--loopback")
  done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout)
  line = next((l for l in done.stdout.splitlines() if l.startswith("RESULT ")), None)
  if done.returncode != 0 or line is None:
    raise RuntimeError(f"{' '.join(command)} failed (exit status {done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
  return json.loads(line[len("RESULT "):])


def main(argv: list[str] | None = None) -> None:
  parser = argparse.ArgumentParser(prog="python -m minigrad.bench_distributed", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("names", nargs="*", help=f"models: {', '.join(MODELS)} (default: all)")
  parser.add_argument("--steps", type=int, default=None, help=f"steps per timed block (default {DEFAULT_STEPS})")
  parser.add_argument("--runs", type=int, default=3, help="timed blocks per configuration (the median is shown)")
  parser.add_argument("--ranks", type=int, default=2, help="ranks of the data-parallel run (default 2)")
  parser.add_argument("--worker", choices=list(MODELS), help=argparse.SUPPRESS)
  parser.add_argument("--loopback", action="store_true", help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  if args.worker:
    result = worker(args.worker, args.steps or DEFAULT_STEPS[args.worker], args.runs, args.loopback)
    from minigrad import distributed as dist
    if dist.world().is_main: print("RESULT " + json.dumps(result), flush=True)
    return
  if unknown := [n for n in args.names if n not in MODELS]: parser.error(f"unknown model(s) {unknown}; choose from {list(MODELS)}")
  from minigrad.bench.harness import configure_or_exit, header_lines
  setup = configure_or_exit(parser.prog)
  for line in header_lines(setup)[:2]: print(line)
  mpirun = _mpirun()
  try: import mpi4py  # noqa: F401
  except ImportError: mpirun = None
  if mpirun is None: sys.exit(f"{parser.prog}: needs mpi4py and mpirun: pip install -e \".[mpi]\"")
  print(f"mpi: {subprocess.run([mpirun[0], '--version'], capture_output=True, text=True).stdout.splitlines()[0]}; "
        f"{args.ranks} ranks x 1 thread vs 1 rank x {args.ranks} threads at the same global batch")
  for name in args.names or MODELS:
    steps = args.steps or DEFAULT_STEPS[name]
    parallel = _run(mpirun + ["-n", str(args.ranks)], name, steps, args.runs, threads=1)
    threaded = _run([], name, steps, args.runs, threads=args.ranks)
    single = _run([], name, steps, args.runs, threads=1)
    loopback = _run([], name, steps, args.runs, threads=1, loopback=True)
    share = parallel["allreduce_s"] / parallel["step_s"]
    goal = "" if name != "mlp" else f" (goal <= {GOAL:.0%}: {'met' if share <= GOAL else 'not met'})"
    print(f"{MODELS[name]}: {parallel['gradient_bytes'] / 1e6:.2f} MB of gradients")
    print(f"  {args.ranks} ranks x 1 thread:  {1 / parallel['step_s']:8.1f} steps/s, {parallel['step_s'] * 1e3:7.2f} ms/step; allreduce "
          f"{parallel['allreduce_s'] * 1e3:.2f} ms/step = {share:.1%} of the step{goal} (packing {parallel['pack_s'] * 1e3:.2f} ms, "
          f"{parallel['pack_bytes'] / 1e3:.0f} KB); "
          f"the same allreduce alone ({parallel['path']}) {parallel['allreduce_alone_s'] * 1e3:.2f} ms "
          f"({parallel['allreduce_alone_s'] / parallel['step_s']:.1%}), MPI_Allreduce alone {parallel['mpi_alone_s'] * 1e3:.2f} ms")
    print(f"  {'':22}fastest block: {parallel['best_step_s'] * 1e3:.2f} ms/step, allreduce {parallel['best_allreduce_s'] * 1e3:.2f} ms = "
          f"{parallel['best_allreduce_s'] / parallel['best_step_s']:.1%}")
    print(f"  1 rank x {args.ranks} threads:   {1 / threaded['step_s']:8.1f} steps/s, {threaded['step_s'] * 1e3:7.2f} ms/step")
    print(f"  1 rank x 1 thread:    {1 / single['step_s']:8.1f} steps/s, {single['step_s'] * 1e3:7.2f} ms/step; with a loopback "
          f"allreduce (packing and the host launch in the replay, no MPI): {loopback['step_s'] * 1e3:.2f} ms/step")
    print(f"  {args.ranks} ranks x 1 thread / 1 rank x {args.ranks} threads: {threaded['step_s'] / parallel['step_s']:.2f}x", flush=True)


if __name__ == "__main__":
  main()
