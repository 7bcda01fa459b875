"""Data-parallel training on MPI (minigrad/distributed/): the sampler, bucketing, the gradient allreduce inside and
outside TinyJit (in-process, with a stand-in communicator), and real jobs under mpirun: the same parameters as one
rank with the whole batch after 20 steps of SGD and of Adam on MNIST (2 ranks through shared memory, 2 ranks as 2 hosts
over MPI alone, 4 ranks as 2 hosts of 2), a rank that raises, dies or hangs stops the
job with an error naming it, mismatched models are refused, and the MNIST and GPT examples run with --distributed (the
GPT's 2 ranks follow 1 rank with the double batch).

Input: minigrad.distributed, tests/distributed_worker.py, examples/mnist_mlp.py and gpt.py, the t10k files in
../shared/datasets/mnist. The mpirun tests skip, saying why, without mpi4py, mpirun or the t10k files
(MINIGRAD_REQUIRE_MPI=1, set by .ci/run-distributed, turns the skips for a missing mpi4py or mpirun into failures),
and on a default device other than CPU (what they test is the same on every device; the in-process tests cover the
devices without host memory). About two minutes on 2 busy cores with a warm kernel cache.
Output: pass/fail.
"""
from __future__ import annotations
from pathlib import Path
import functools
import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import numpy as np
import pytest
from minigrad import Device, Tensor, TinyJit, nn
from minigrad import distributed as dist
from minigrad.distributed import shared
from minigrad.distributed.comm import launched_under_mpi
from minigrad.dtype import dtypes
from minigrad.nn.state import get_parameters, get_state_dict, safe_save

REPO = Path(__file__).resolve().parents[1]
MNIST_DIR = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "mnist"
HAVE_T10K = (MNIST_DIR / "t10k-images-idx3-ubyte.gz").exists() and (MNIST_DIR / "t10k-labels-idx1-ubyte.gz").exists()
sys.path.insert(0, str(Path(__file__).resolve().parent))
import distributed_worker as worker  # noqa: E402


# ---------------------------------------------------------------- the sampler

def test_sampler_shards_cover_each_epoch_once_and_repeat_across_runs() -> None:
  shards = [dist.DistributedSampler(1000, world_size=3, rank=r, seed=5) for r in range(3)]
  for s in shards: s.set_epoch(2)
  indices = [s.indices() for s in shards]
  assert all(len(i) == len(shards[0]) == 334 for i in indices)   # 1000 among 3: padded to 1002
  assert set(np.concatenate(indices).tolist()) == set(range(1000))
  again = dist.DistributedSampler(1000, world_size=3, rank=1, seed=5)
  np.testing.assert_array_equal(again.indices(epoch=2), indices[1])          # the same shards on every run
  assert not np.array_equal(again.indices(epoch=3), indices[1])             # another epoch, another order
  assert not np.array_equal(dist.DistributedSampler(1000, 3, 1, seed=6).indices(epoch=2), indices[1])
  dropped = [dist.DistributedSampler(1000, 3, r, seed=5, drop_last=True).indices(2) for r in range(3)]
  assert all(len(d) == 333 for d in dropped) and len(set(np.concatenate(dropped).tolist())) == 999


def test_sampler_batches_of_all_ranks_are_the_single_process_batches() -> None:
  """Batch k of every rank together = batch k of one process with the world's batch: why the runs agree."""
  single = dist.DistributedSampler(96, world_size=1, rank=0, seed=1).batches(16, epoch=0)
  ranks = [dist.DistributedSampler(96, world_size=2, rank=r, seed=1).batches(8, epoch=0) for r in range(2)]
  assert len(single) == len(ranks[0]) == len(ranks[1]) == 6
  for k, batch in enumerate(single): assert sorted(batch.tolist()) == sorted(np.concatenate([ranks[0][k], ranks[1][k]]).tolist())
  assert [len(b) for b in dist.DistributedSampler(10, 1, 0).batches(4)] == [4, 4, 2]
  assert [len(b) for b in dist.DistributedSampler(10, 1, 0).batches(4, drop_last=True)] == [4, 4]


def test_sampler_rejects_bad_arguments() -> None:
  with pytest.raises(ValueError, match="rank 2 is not in a world of 2"): dist.DistributedSampler(10, world_size=2, rank=2)
  with pytest.raises(ValueError, match="world_size"): dist.DistributedSampler(10, world_size=0, rank=0)
  with pytest.raises(ValueError, match="batch_size"): dist.DistributedSampler(10, 1, 0).batches(0)


# ---------------------------------------------------------------- the world outside MPI, bucketing

def test_outside_mpi_init_is_a_no_op() -> None:
  assert launched_under_mpi({"OMPI_COMM_WORLD_SIZE": "2"}) and launched_under_mpi({"PMI_SIZE": "4"})
  assert not launched_under_mpi({"HOME": "/root"})
  if launched_under_mpi(): pytest.skip("this test process itself runs under an MPI launcher")
  world = dist.init()
  assert (world.rank, world.size, world.local_rank, world.launched, world.is_main) == (0, 1, 0, False, True)
  assert dist.communicator() is None
  dist.barrier()
  np.testing.assert_array_equal(dist.allreduce(np.array([1.0, 2.0]), "mean"), [1.0, 2.0])
  p = Tensor([1.0, 2.0], requires_grad=True)
  (p * 3).sum().backward()
  grad = p.grad
  dist.allreduce_gradients([p])          # world size 1: nothing to reduce, .grad untouched
  dist.broadcast_parameters([p])
  assert p.grad is grad and p.grad.numpy().tolist() == [3.0, 3.0]


def test_buckets_group_by_dtype_and_respect_the_size_limit() -> None:
  f32, f64 = dtypes.float32, dtypes.float64
  layout = (((256,), f32, "CPU"), ((256,), f32, "CPU"), ((8,), f64, "CPU"), ((512,), f32, "CPU"), ((4,), f64, "CPU"))
  assert dist.plan_buckets(layout, 2048) == [[0, 1], [2, 4], [3]]
  assert dist.plan_buckets(layout, 1024) == [[0], [1], [2, 4], [3]]       # a gradient larger than the limit: its own bucket
  assert dist.plan_buckets(layout, 1 << 20) == [[0, 1, 3], [2, 4]]


@pytest.mark.parametrize("size, parts, itemsize", [(235146, 2, 4), (10, 2, 4), (0, 3, 8), (1000, 3, 8), (17, 4, 4)])
def test_shared_memory_chunks_cover_a_bucket_once_on_cache_line_starts(size: int, parts: int, itemsize: int) -> None:
  from minigrad.distributed.shared import chunk_bounds
  bounds = chunk_bounds(size, parts, itemsize)
  assert len(bounds) == parts + 1 and bounds[0] == 0 and bounds[-1] == size and bounds == sorted(bounds)
  assert all(b * itemsize % 64 == 0 for b in bounds[:-1] if b < size)   # no two ranks write one cache line
  if size >= 64 * parts: assert max(b - a for a, b in zip(bounds, bounds[1:])) - min(b - a for a, b in zip(bounds, bounds[1:])) <= 64


# ---------------------------------------------------------------- the gradient allreduce in-process

class StandInCommunicator:
  """Rank 0 of `size` ranks that all computed the same gradients: a sum multiplies by size, a mean changes nothing.
  `others` replaces what the other ranks say in allgathers (to provoke mismatches)."""
  def __init__(self, size: int = 2, others: object = None):
    self.rank, self.size, self.others, self.calls = 0, size, others, 0

  def allreduce_(self, arrays: list[np.ndarray], op: str = "sum", what: str = "") -> None:
    self.calls += 1
    for a in arrays:
      assert a.flags.c_contiguous
      if op == "sum": a *= self.size

  def allgather_object(self, value: object, what: str = "") -> list[object]:
    return [value] + [value if self.others is None else self.others] * (self.size - 1)

  def broadcast_(self, arrays: list[np.ndarray], root: int = 0, what: str = "") -> None: pass


class SmallMLP:
  def __init__(self) -> None: self.layers = [nn.Linear(12, 10), nn.Linear(10, 3)]
  def __call__(self, x: Tensor) -> Tensor: return self.layers[1](self.layers[0](x).relu())


def _train_small(comm: StandInCommunicator | None, jit: bool, lr: float, bucket_mb: float = 25.0, steps: int = 6, op: str = "sum") -> list[np.ndarray]:
  Tensor.manual_seed(3)
  model = SmallMLP()
  params = get_parameters(model)
  optimizer = nn.optim.SGD(params, lr=lr, momentum=0.5)

  def step(x: Tensor, y: Tensor) -> Tensor:
    with Tensor.train():
      loss = nn.functional.cross_entropy(model(x), y)
      optimizer.zero_grad()
      loss.backward()
      if comm is not None: dist.allreduce_gradients(params, op=op, bucket_mb=bucket_mb, realize_with=[loss], comm=comm)
      optimizer.step()
    return loss
  run = TinyJit(step) if jit else step
  rng = np.random.default_rng(0)
  for _ in range(steps):
    run(Tensor(rng.standard_normal((8, 12)).astype(np.float32)), Tensor(rng.integers(0, 3, 8).astype(np.int32))).item()
  if jit and comm is not None: assert run.captured, "the step with the allreduce was never captured"
  return [p.numpy() for p in params]


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "TinyJit"])
def test_allreduce_gradients_runs_every_step_eager_and_jitted(jit: bool) -> None:
  """A sum over 2 ranks that computed the same gradients doubles them: the same as lr * 2 without communication.
  Under TinyJit the captured step must still call the allreduce at every replay."""
  reference = _train_small(None, False, lr=0.2)
  comm = StandInCommunicator(2)
  got = _train_small(comm, jit, lr=0.1)
  assert comm.calls == 6
  for a, b in zip(reference, got): np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)


def test_mean_of_identical_gradients_changes_nothing() -> None:
  """op="mean" sums in MPI and scales the gradient views by 1/size (fused into the optimizer's kernels)."""
  reference = _train_small(None, False, lr=0.1, steps=4)
  for a, b in zip(reference, _train_small(StandInCommunicator(4), True, lr=0.1, steps=4, op="mean")):
    np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)


def test_jitted_replay_stays_one_thread_pool_call(monkeypatch: pytest.MonkeyPatch) -> None:
  """On CPU and LLVM a replay runs the allreduce as a callback entry of the pool's launch list (not kernel by kernel)."""
  if Device.DEFAULT not in ("CPU", "LLVM"): pytest.skip(f"{Device.DEFAULT} has no CPU thread pool")
  calls = {"pool": 0, "alone": 0}
  pool_entry, alone = dist.gradients.AllreduceLaunch._pool_entry, dist.gradients.AllreduceLaunch.__call__
  def counted_pool_entry(self, *args):
    calls["pool"] += 1
    return pool_entry(self, *args)
  def counted_alone(self, *args, **kwargs):
    calls["alone"] += 1
    return alone(self, *args, **kwargs)
  monkeypatch.setattr(dist.gradients.AllreduceLaunch, "_pool_entry", counted_pool_entry)
  monkeypatch.setattr(dist.gradients.AllreduceLaunch, "__call__", counted_alone)
  reference = _train_small(None, False, lr=0.2)
  got = _train_small(StandInCommunicator(2), True, lr=0.1)
  assert calls["pool"] >= 3 and calls["pool"] + calls["alone"] == 6, calls
  for a, b in zip(reference, got): np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)


def test_an_error_inside_a_replayed_allreduce_ends_the_process(tmp_path: Path) -> None:
  """The pool can't pass a Python error back: the callback prints it and the process exits (under MPI: the job aborts)."""
  if Device.DEFAULT not in ("CPU", "LLVM"): pytest.skip(f"{Device.DEFAULT} has no CPU thread pool")
  script = tmp_path / "failing.py"
  script.write_text(f"""import sys
sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})
import test_distributed as t
class Failing(t.StandInCommunicator):
  def allreduce_(self, arrays, op="sum", what=""):
    super().allreduce_(arrays, op, what)
    if self.calls == 5: raise RuntimeError("the network went away")
t._train_small(Failing(2), True, lr=0.1)
print("finished")
""")
  done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=REPO)
  assert done.returncode == 1 and "finished" not in done.stdout, done.stdout + done.stderr
  assert "RuntimeError: the network went away" in done.stderr and "rank 0 of 2: the allreduce of 4 gradients in 1 bucket of a TinyJit replay failed" in done.stderr, done.stderr


def test_allreduce_gradients_with_several_buckets() -> None:
  reference = _train_small(None, False, lr=0.3, steps=4)
  comm = StandInCommunicator(3)
  got = _train_small(comm, True, lr=0.1, bucket_mb=100 / 2**20, steps=4)   # 100-byte buckets: one per tensor
  launch = next(l for key, l in dist.gradients._launches.items() if key[3] == id(comm))
  assert launch.buckets == [[0], [1], [2], [3]]
  for a, b in zip(reference, got): np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "TinyJit"])
def test_large_fresh_gradients_are_reduced_in_their_own_buffers(jit: bool, monkeypatch: pytest.MonkeyPatch) -> None:
  """Gradients of IN_PLACE_BYTES or more that the call's realize computed are reduced where they are, each its own
  bucket; the small ones still share one. A gradient realized before the call is copied, never changed."""
  monkeypatch.setattr(dist.gradients, "IN_PLACE_BYTES", 100)   # the two weights (480 and 120 bytes), not the biases
  reference = _train_small(None, False, lr=0.2)
  comm = StandInCommunicator(2)
  got = _train_small(comm, jit, lr=0.1)
  launch = next(l for key, l in dist.gradients._launches.items() if key[3] == id(comm))
  assert launch.buckets == [[0], [1, 3], [2]] and launch.in_place == [True, False, True]
  for a, b in zip(reference, got): np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
  p = Tensor(np.ones((40, 10), np.float32), requires_grad=True)
  (p * 3).sum().backward()
  held = p.grad.realize()   # type: ignore[union-attr]
  dist.allreduce_gradients([p], op="sum", comm=StandInCommunicator(2))
  np.testing.assert_array_equal(held.numpy(), np.full((40, 10), 3, np.float32))
  np.testing.assert_array_equal(p.grad.numpy(), np.full((40, 10), 6, np.float32))   # type: ignore[union-attr]


class LoopbackExchange(shared.NodeExchange):
  """A shared-memory window of `size` local ranks in this process's memory, this process being rank 0 and the other
  ranks computing the same gradients: at the first barrier of an allreduce their segments get this rank's gradients,
  at the second their chunks of the result are summed (what they would have done)."""
  def __init__(self, buckets: list[tuple[int, np.dtype]], size: int):
    self.MPI = self.node = self.cross = self.timeout = None
    self.rank, self.size, self.count = 0, size, 0
    self.segments = [[np.full(n, np.nan, d) for n, d in buckets] for _ in range(size)]
    self.result = [np.full(n, np.nan, d) for n, d in buckets]
    self.chunks = [shared.chunk_bounds(n, size, np.dtype(d).itemsize) for n, d in buckets]

  def plan(self, gradients):   # type: ignore[no-untyped-def]
    self.gradients = gradients
    return super().plan(gradients)

  def barrier(self, what: str = "barrier") -> None:
    self.count += 1
    for k, members in enumerate(self.gradients):
      for r in range(1, self.size):
        if self.count % 2:
          for offset, gradient in members: self.segments[r][k][offset:offset + gradient.size] = gradient
        else:
          lo, hi = self.chunks[k][r], self.chunks[k][r + 1]
          self.result[k][lo:hi] = self.segments[0][k][lo:hi]
          for q in range(1, self.size): self.result[k][lo:hi] += self.segments[q][k][lo:hi]


class SharedStandInCommunicator(StandInCommunicator):
  """StandInCommunicator whose ranks share this host: gradients are reduced through a LoopbackExchange. `packed`:
  the gradient bytes each allreduce copied into shared memory."""
  shared = True
  def __init__(self, size: int = 2):
    super().__init__(size)
    self.packed: list[int] = []

  def node_exchange(self, buckets: list[tuple[int, np.dtype]]) -> LoopbackExchange: return LoopbackExchange(buckets, self.size)

  def shared_allreduce_(self, exchange: LoopbackExchange, plan: object, what: str = "") -> None:
    self.calls += 1
    self.packed.append(dist.CommCounters.pack_bytes - sum(self.packed))
    exchange.allreduce(plan, what)   # type: ignore[arg-type]


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "TinyJit"])
def test_shared_memory_reduction_in_process(jit: bool) -> None:
  """Through a shared-memory window (a stand-in of 2 local ranks with the same gradients: a sum doubles them) eager
  steps pack the gradients, and a TinyJit replay's backward kernels write them into the window themselves
  (realize.homes), so the replays pack nothing; either way the same weights as lr * 2 without communication."""
  if Device.DEFAULT not in ("CPU", "LLVM"): pytest.skip(f"{Device.DEFAULT} keeps buffers outside host memory: no shared-memory window")
  reference = _train_small(None, False, lr=0.2)
  comm = SharedStandInCommunicator(2)
  dist.CommCounters.reset()
  got = _train_small(comm, jit, lr=0.1)
  assert comm.calls == 6 and all(packed > 0 for packed in comm.packed[:2]), comm.packed
  assert (comm.packed[-1] == 0) == jit, comm.packed   # recordings pack, replays don't
  for a, b in zip(reference, got): np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)


def test_mismatched_models_are_refused_with_the_rank_and_tensor() -> None:
  model = SmallMLP()
  theirs = [(name, t.shape, "float32") for name, t in get_state_dict(model).items()]
  theirs[2] = ("layers.1.weight", (3, 11), "float32")
  with pytest.raises(dist.DistributedError, match=r"layers.1.weight is \(3, 10\) float32 on rank 0 but rank 1 has \(3, 11\) float32"):
    dist.broadcast_parameters(get_state_dict(model), comm=StandInCommunicator(2, others=theirs))
  with pytest.raises(dist.DistributedError, match="rank 0 has 4 parameters but rank 1 has 3"):
    dist.broadcast_parameters(get_state_dict(model), comm=StandInCommunicator(2, others=theirs[:3]))
  p = Tensor(np.ones((4, 2), np.float32), requires_grad=True)
  p.sum().backward()
  with pytest.raises(dist.DistributedError, match=r"gradient 0 is \(4, 2\) float32 on rank 0 but \(4, 3\) float32 on rank 1"):
    dist.allreduce_gradients([p], comm=StandInCommunicator(2, others=("mean", [((4, 3), "float32")], [])))


# ---------------------------------------------------------------- real jobs under mpirun

@functools.cache
def mpirun_and_reason() -> tuple[str | None, str]:
  if importlib.util.find_spec("mpi4py") is None: return None, "mpi4py is not installed (pip install -e \".[mpi]\")"
  beside_python = Path(sys.executable).parent / "mpirun"
  found = str(beside_python) if beside_python.exists() else shutil.which("mpirun") or shutil.which("mpiexec")
  if found is None: return None, "no mpirun or mpiexec on PATH (pip install -e \".[mpi]\" brings Open MPI's)"
  return found, ""


def _require(ok: bool, reason: str) -> None:
  if ok: return
  if os.environ.get("MINIGRAD_REQUIRE_MPI", "") not in ("", "0"): pytest.fail(f"MINIGRAD_REQUIRE_MPI is set but {reason}")
  pytest.skip(reason)


@pytest.fixture
def mpirun_cpu() -> str:
  found, reason = mpirun_and_reason()
  _require(found is not None, reason)
  if Device.DEFAULT != "CPU": pytest.skip(f"the 2-rank jobs run on the CPU device only (the default here is {Device.DEFAULT}): they test MPI, not devices")
  return found   # type: ignore[return-value]


@pytest.fixture
def mpirun(mpirun_cpu: str) -> str:
  """mpirun, for the jobs that train on MNIST."""
  if not HAVE_T10K: pytest.skip(f"the real MNIST t10k files are not in {MNIST_DIR}")
  return mpirun_cpu


def run_mpi(mpirun: str, ranks: int, args: list[str], timeout: float = 150, env: dict[str, str] | None = None,
            cwd: Path = REPO) -> tuple[int, str, float]:
  """(exit status, stdout+stderr, seconds) of `mpirun -n ranks python args...`; the job is killed after timeout."""
  version = subprocess.run([mpirun, "--version"], capture_output=True, text=True).stdout
  command = [mpirun, "-n", str(ranks)]
  if "Open MPI" in version: command += ["--oversubscribe"] + (["--allow-run-as-root"] if os.geteuid() == 0 else [])
  environment = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", CPU_THREADS="1",
                     PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]), **(env or {}))
  start = time.perf_counter()
  process = subprocess.Popen(command + [sys.executable, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=cwd,
                             env=environment, start_new_session=True)
  try: output, _ = process.communicate(timeout=timeout)
  except subprocess.TimeoutExpired:
    os.killpg(process.pid, signal.SIGKILL)   # our own job: mpirun and its ranks
    output, _ = process.communicate()
    pytest.fail(f"mpirun did not finish within {timeout} s:\n{output.decode(errors='replace')[-4000:]}")
  return process.returncode, output.decode(errors="replace"), time.perf_counter() - start


@functools.cache
def one_rank_reference(optimizer_name: str, jit: bool) -> list[np.ndarray]:
  """The final parameters of 1 rank x batch 64 (20 steps), computed once per configuration."""
  images, labels = worker.load_images(str(MNIST_DIR), 2048)
  return worker.train(images, labels, optimizer_name, jit, steps=20, batch=64, world_size=1, rank=0)


@pytest.mark.parametrize("ranks, node_size", [(2, ""), (2, "1"), (4, "2")], ids=["shared-memory", "mpi-only", "two-hosts-of-two"])
def test_ranks_match_one_rank_with_the_whole_batch(mpirun: str, tmp_path: Path, ranks: int, node_size: str) -> None:
  """20 steps on MNIST, SGD (momentum) and Adam, eager and TinyJit: 2 ranks x batch 32 (and 4 x 16) end where 1 rank x
  batch 64 does, with bit-identical parameters on every rank: 2 ranks of this host reducing through shared memory;
  2 ranks pretending to be 2 hosts (MINIGRAD_DIST_NODE_SIZE=1: one MPI allreduce per bucket, large gradients in their
  own buffers); 4 ranks pretending to be 2 hosts of 2 (shared memory on each, then MPI between them)."""
  out = tmp_path / "params"
  status, output, _ = run_mpi(mpirun, ranks, ["tests/distributed_worker.py", "train", "--mnist-dir", str(MNIST_DIR), "--out", str(out),
                                              "--steps", "20", "--batch", str(64 // ranks)], timeout=300,
                              env={"MINIGRAD_DIST_NODE_SIZE": node_size})
  assert status == 0, output[-4000:]
  path = {"": "shared memory", "1": "MPI only", "2": "shared memory and MPI across hosts"}[node_size]
  assert output.count(f"collectives, {path}\n") == ranks, output[-4000:]
  saved = [np.load(f"{out}.rank{r}.npz") for r in range(ranks)]
  for optimizer_name, jit in worker.CONFIGS:
    key = f"{optimizer_name}_{'jit' if jit else 'eager'}"
    reference = one_rank_reference(optimizer_name, jit)
    Tensor.manual_seed(0)
    initial = [p.numpy() for p in get_parameters(worker.MLP())]
    for i, expected in enumerate(reference):
      for r in range(1, ranks):
        np.testing.assert_array_equal(saved[r][f"{key}_{i}"], saved[0][f"{key}_{i}"], err_msg=f"{key}: ranks 0 and {r} differ")
      np.testing.assert_allclose(saved[0][f"{key}_{i}"], expected, rtol=1e-4, atol=2e-6, err_msg=f"{key}: {ranks} ranks vs 1 rank")
      if i == 0: assert not np.allclose(expected, initial[0], atol=1e-3), f"{key}: training did not move the weights"


@pytest.mark.parametrize("fault, expected", [
  ("raise", ["rank 1 of 2", "RuntimeError: injected failure on rank 1", "aborting all ranks"]),
  ("die", ["rank 1"]),
  ("hang", ["rank 0 of 2", "did not complete within 4 s: another rank (rank 1) died, hung", "aborting all ranks"]),
  ("mismatch", ["broadcast_parameters: layers.0.weight is (96, 784) float32 on rank 0 but rank 1 has (112, 784) float32"]),
])
def test_a_failing_rank_stops_the_job_naming_it(mpirun: str, fault: str, expected: list[str]) -> None:
  """Rank 1 raises, is killed, hangs (the others time out after MINIGRAD_DIST_TIMEOUT=4 s) or builds another model:
  the job ends with a non-zero status well before the test's own timeout (rank 1 would hang for 120 s), and the
  output says which rank."""
  status, output, _ = run_mpi(mpirun, 2, ["tests/distributed_worker.py", fault, "--mnist-dir", str(MNIST_DIR), "--examples", "256"],
                              timeout=100, env={"MINIGRAD_DIST_TIMEOUT": "4"} if fault == "hang" else None)
  assert status != 0, f"the job succeeded despite {fault}:\n{output[-4000:]}"
  assert "finished without the expected failure" not in output
  for text in expected: assert text in output, f"{text!r} not in the output of the {fault} job:\n{output[-4000:]}"


def test_mnist_example_distributed_resumes_and_logs_on_rank_zero_only(mpirun: str, tmp_path: Path) -> None:
  """Both ranks resume from a checkpoint, train one short epoch, only rank 0 logs, the new checkpoint is written once."""
  sys.path.insert(0, str(REPO / "examples"))
  import mnist_mlp
  start = tmp_path / "start.safetensors"
  safe_save(get_state_dict(mnist_mlp.build_model((1, 28, 28), 10)), start)
  final = tmp_path / "final.safetensors"
  status, output, _ = run_mpi(mpirun, 2, [str(REPO / "examples" / "mnist_mlp.py"), "--distributed", "--t10k-split", "--mnist-dir", str(MNIST_DIR),
                                          "--limit-train", "256", "--batch-size", "64", "--epochs", "1", "--resume", str(start),
                                          "--checkpoint", str(final)], cwd=tmp_path)
  assert status == 0, output[-4000:]
  assert output.count(f"resumed from {start}") == 1 and output.count("epoch 1/1: train loss") == 1, output
  assert "batch 64 = 2 rank(s) x 32" in output and "Traceback" not in output
  assert final.exists()
  from minigrad.nn.state import safe_load
  assert set(safe_load(final)) == set(get_state_dict(mnist_mlp.build_model((1, 28, 28), 10)))


def test_gpt_example_two_ranks_follow_one_rank_with_the_double_batch(mpirun_cpu: str, tmp_path: Path) -> None:
  """A tiny GPT resumed from a checkpoint, 4 AdamW steps: 2 ranks x 4 windows (each rank its slice of the seeded global
  batch) log the same losses and save the same weights as 1 rank x 8 windows; only rank 0 logs and saves."""
  sys.path.insert(0, str(REPO / "examples"))
  import gpt
  text = tmp_path / "text.txt"
  text.write_text(gpt.SAMPLE_TEXT * 8)
  common = ["--data", str(text), "--batch-size", "8", "--context", "16", "--layers", "1", "--heads", "2", "--width", "32",
            "--eval-interval", "2", "--eval-batches", "3", "--generate", "0", "--no-download", "--seed", "3"]
  start, one, two = tmp_path / "start.safetensors", tmp_path / "one.safetensors", tmp_path / "two.safetensors"
  gpt.run(common + ["--iters", "1", "--checkpoint", str(start)])   # something to resume from
  reference = gpt.run(common + ["--iters", "4", "--resume", str(start), "--checkpoint", str(one)])
  status, output, _ = run_mpi(mpirun_cpu, 2, [str(REPO / "examples" / "gpt.py"), "--distributed", *common, "--iters", "4",
                                              "--resume", str(start), "--checkpoint", str(two)], cwd=tmp_path)
  assert status == 0, output[-4000:]
  assert output.count(f"resumed {start}") == 1 and output.count(f"saved {two}") == 1 and "Traceback" not in output, output[-4000:]
  assert "batch 8 = 2 ranks x 4" in output, output[-4000:]
  logged = [(int(i), float(train), float(val)) for i, train, val in re.findall(r"iter (\d+): train loss ([\d.]+), val loss ([\d.]+)", output)]
  expected = [(i, float(np.mean(reference.train_losses[i - 2:i])), val) for i, val in reference.val_losses]
  assert [i for i, _, _ in logged] == [i for i, _, _ in expected] == [2, 4], output[-4000:]
  np.testing.assert_allclose([x[1:] for x in logged], [x[1:] for x in expected], atol=2e-4)   # printed with 4 decimals
  from minigrad.nn.state import safe_load
  got, want = safe_load(two), safe_load(one)
  assert set(got) == set(want)
  for name in want: np.testing.assert_allclose(got[name].numpy(), want[name].numpy(), rtol=1e-4, atol=1e-5, err_msg=name)
