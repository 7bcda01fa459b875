"""The MPI world: who this process is among the ranks, and collectives that give up after a timeout.

Input: the environment an MPI launcher (`mpirun`/`mpiexec` of Open MPI or MPICH, `srun`) sets, and mpi4py.
Output: a `World` (rank, world size, local rank and size on this host), a `Communicator` whose collectives
(allreduce, broadcast, allgather, barrier) end the job after a timeout instead of hanging, and an exception hook
that turns an uncaught error on one rank into MPI_Abort of the whole job, naming that rank.

Outside a launcher `init()` is a no-op: world size 1, mpi4py is not even imported. Under a launcher without
mpi4py it raises, saying how to install it (`pip install -e ".[mpi]"`).

Faults
  * A rank that raises: `init()` wraps sys.excepthook; the error is printed with "rank R of N" and the job is
    aborted (MPI_Abort), so the other ranks stop at once instead of waiting for it.
  * A rank that dies (killed, segfault, os._exit): the launcher notices and ends the job, naming the rank.
  * A rank that hangs or skips a collective: the collectives are MPI's blocking ones (its tuned algorithms; a
    nonblocking one polled from Python was slower), each watched by a thread: when one outlasts `timeout` (default
    $MINIGRAD_DIST_TIMEOUT, else 300 s) the waiting ranks print the collective, its number and (with two ranks)
    the other rank, and abort the job. A timeout can't be caught: the rank is stuck inside MPI. The waits of the
    shared-memory reduction (shared.py) are bounded by the same timeout and raise DistributedError naming the
    ranks that did not arrive (an uncaught error: the job is aborted, as above).

Ranks on one host: the Communicator keeps a communicator of the ranks that share memory (`node`) and, with several
hosts, one joining each rank to the ranks of the same local rank elsewhere (`cross`); gradients.py reduces through
a shared-memory window over them (minigrad/distributed/shared.py) when every host runs the same number (> 1) of
ranks. MINIGRAD_DIST_SHARED=0 turns that off (one MPI allreduce per bucket, as across hosts with one rank each);
MINIGRAD_DIST_NODE_SIZE=k pretends every k consecutive ranks are a host (the path across hosts, tried on one).

Open MPI: init() sets OMPI_MCA_mpi_yield_when_idle=1 (a waiting rank yields its core instead of spinning) and
OMPI_MCA_osc=^ucx (see init) unless the environment says otherwise.

Global state: the one `World` and `Communicator` of this process (`init()` makes them once), and `CommCounters`
(calls, bytes and seconds spent in collectives, for benchmarks), as `GlobalCounters` counts kernels.
"""
from __future__ import annotations
from dataclasses import dataclass
from typing import Any, Iterator, Sequence
import contextlib
import os
import pickle
import socket
import sys
import threading
import time
import traceback
import numpy as np

# variables that MPI launchers set in every rank's environment (Open MPI, PMIx, MPICH/Hydra and Intel MPI, MVAPICH)
LAUNCHER_VARIABLES = ("OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK", "MPI_LOCALNRANKS", "MV2_COMM_WORLD_SIZE")
DEFAULT_TIMEOUT_S = 300.0
OPS = ("sum", "mean", "max", "min")


class DistributedError(RuntimeError):
  """A collective can't go on: ranks disagree (shapes, dtypes, calls), or MPI is missing."""


class CommCounters:
  """What the collectives of this process cost since the last reset(): calls, bytes sent per rank, seconds
  (including the time spent waiting for slower ranks; allreduce_gradients counts the whole of its host launch:
  packing, also counted alone in pack_seconds, and setting up); pack_bytes: gradient bytes it copied into buckets
  or shared memory)."""
  calls = 0
  nbytes = 0
  seconds = 0.0
  pack_seconds = 0.0
  pack_bytes = 0

  @staticmethod
  def reset() -> None:
    CommCounters.calls, CommCounters.nbytes, CommCounters.seconds, CommCounters.pack_seconds, CommCounters.pack_bytes = 0, 0, 0.0, 0.0, 0


@dataclass(frozen=True)
class World:
  """This process among the ranks of the job. `launched` is False when no MPI launcher started it (size 1)."""
  rank: int = 0
  size: int = 1
  local_rank: int = 0
  local_size: int = 1
  launched: bool = False
  host: str = ""

  @property
  def is_main(self) -> bool:
    """True on rank 0: the rank that logs, shows progress and writes checkpoints."""
    return self.rank == 0


def launched_under_mpi(environ: Any = None) -> bool:
  """True when an MPI launcher started this process (one of LAUNCHER_VARIABLES is set)."""
  environ = os.environ if environ is None else environ
  return any(name in environ for name in LAUNCHER_VARIABLES)


def _mpi() -> Any:
  """The mpi4py.MPI module (importing it initializes MPI), or DistributedError saying how to install it."""
  try:
    from mpi4py import MPI
  except ImportError as error:
    launcher = next((f"{n}={os.environ[n]}" for n in LAUNCHER_VARIABLES if n in os.environ), "no launcher variable")
    raise DistributedError(f"this process was started by an MPI launcher ({launcher}) but mpi4py can't be imported ({error}): "
                           "pip install -e \".[mpi]\" (mpi4py with Open MPI from PyPI), or pip install mpi4py against your "
                           "system's MPI") from None
  return MPI


class Communicator:
  """A duplicate of MPI_COMM_WORLD (minigrad's messages never meet the program's own) whose collectives are MPI's
  blocking ones (its tuned algorithms, at full speed), each watched by a `Watchdog` when `timeout` is set."""

  def __init__(self, comm: Any, timeout: float | None, node: Any = None):
    self.MPI = _mpi()
    self.comm, self.timeout = comm, timeout
    self.rank, self.size = comm.Get_rank(), comm.Get_size()
    self.sequence = 0   # collectives started so far: named in timeouts, the same on every rank while they agree
    self.watchdog = Watchdog(self) if timeout else None
    # the ranks of this host (`node`) reduce through shared memory when there are several of them on every host, the
    # same number on each (then `cross` joins this rank to the ranks of the same local rank on the other hosts)
    self.node, self.cross, self.shared = node, None, False
    if node is not None and self.size > 1 and os.environ.get("MINIGRAD_DIST_SHARED", "1") != "0":
      local_sizes = comm.allgather(node.Get_size())
      self.shared = local_sizes[0] > 1 and all(n == local_sizes[0] for n in local_sizes)
      if self.shared and local_sizes[0] < self.size: self.cross = comm.Split(node.Get_rank(), self.rank)

  def node_exchange(self, buckets: Sequence[tuple[int, Any]]) -> Any:
    """A NodeExchange (minigrad/distributed/shared.py) for buckets of these (sizes, numpy dtypes), or None when
    this job doesn't reduce through shared memory. Collective over the ranks of this host."""
    if not self.shared: return None
    from minigrad.distributed.shared import NodeExchange
    return NodeExchange(self.MPI, self.node, self.cross, buckets, self.timeout)

  def _count(self, nbytes: int) -> float:
    """Count one collective of `nbytes` per rank in CommCounters; returns its start (perf_counter seconds)."""
    self.sequence += 1
    CommCounters.calls += 1
    CommCounters.nbytes += nbytes
    return time.perf_counter()

  @contextlib.contextmanager
  def _collective(self, what: str, nbytes: int) -> Iterator[None]:
    start = self._count(nbytes)
    if self.watchdog is not None: self.watchdog.watch(what, self.sequence)
    try: yield
    finally:
      if self.watchdog is not None: self.watchdog.watch(None, self.sequence)
      CommCounters.seconds += time.perf_counter() - start

  # ---------------------------------------------------------------- collectives on numpy arrays (in place)
  def mpi_op(self, op: str) -> Any:
    if op not in OPS: raise ValueError(f"unknown reduction {op!r}: expected one of {', '.join(OPS)}")
    return {"sum": self.MPI.SUM, "mean": self.MPI.SUM, "max": self.MPI.MAX, "min": self.MPI.MIN}[op]

  def allreduce_(self, arrays: Sequence[np.ndarray], op: str = "sum", what: str = "allreduce") -> None:
    """Reduce each C-contiguous array in place across ranks; "mean" divides by the world size afterwards (float
    arrays only)."""
    if op == "mean" and any(a.dtype.kind != "f" for a in arrays):
      raise TypeError(f"allreduce op='mean' needs float arrays, got {[str(a.dtype) for a in arrays]}")
    mpi_op = self.mpi_op(op)
    with self._collective(what, sum(a.nbytes for a in arrays)):
      for a in arrays: self.comm.Allreduce(self.MPI.IN_PLACE, a, op=mpi_op)
      if op == "mean":
        for a in arrays: np.multiply(a, a.dtype.type(1.0 / self.size), out=a)

  def shared_allreduce_(self, exchange: Any, plan: Any, what: str = "allreduce") -> None:
    """Sum-allreduce gradients through a NodeExchange (see node_exchange; its ReductionPlan, packed first) into its
    result, counted like the other collectives. Its waits in shared memory have their own timeout; only the MPI
    calls across hosts need the watchdog (this runs every training step: nothing more is done around it)."""
    if exchange.cross is not None:
      with self._collective(what, plan.nbytes): exchange.allreduce(plan, what)
      return
    start = self._count(plan.nbytes)
    exchange.allreduce(plan, what)
    CommCounters.seconds += time.perf_counter() - start

  def broadcast_(self, arrays: Sequence[np.ndarray], root: int = 0, what: str = "broadcast") -> None:
    """Overwrite each array with root's, in place."""
    with self._collective(what, sum(a.nbytes for a in arrays)):
      for a in arrays: self.comm.Bcast(a, root=root)

  def allgather_object(self, value: Any, what: str = "allgather") -> list[Any]:
    """Every rank's picklable `value`, in rank order (two allgathers: sizes, then bytes)."""
    data = np.frombuffer(pickle.dumps(value), dtype=np.uint8)
    sizes = np.zeros(self.size, dtype=np.int64)
    sizes[self.rank] = data.size
    with self._collective(what, data.nbytes):
      self.comm.Allgather(self.MPI.IN_PLACE, sizes)
      gathered = np.empty(int(sizes.sum()), dtype=np.uint8)
      offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
      self.comm.Allgatherv(data, [gathered, (sizes.tolist(), offsets.tolist()), self.MPI.BYTE])
    return [pickle.loads(gathered[o:o + n].tobytes()) for o, n in zip(offsets.tolist(), sizes.tolist())]

  def barrier(self, what: str = "barrier") -> None:
    with self._collective(what, 0): self.comm.Barrier()

  def abort(self, code: int = 1) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    self.comm.Abort(code)


class Watchdog:
  """A daemon thread that ends the job when one collective outlasts the timeout. The rank waiting in it is inside
  MPI (mpi4py lets go of the GIL there) and can't raise; the watchdog prints which collective timed out and which
  rank this is, then calls MPI_Abort (MPI_THREAD_MULTIPLE, mpi4py's default), which stops every rank. It looks
  every quarter of a second (at most a tenth of the timeout): a collective costs it two attribute writes."""

  def __init__(self, communicator: Communicator):
    self.communicator = communicator
    self.what: str | None = None
    self.sequence = 0
    self.started = 0.0
    self.thread: threading.Thread | None = None

  def watch(self, what: str | None, sequence: int) -> None:
    """Start watching collective number `sequence` (`what` names it), or stop (what None)."""
    if what is not None:
      self.started, self.sequence = time.monotonic(), sequence
      if self.thread is None:
        self.thread = threading.Thread(target=self._run, name="minigrad.distributed watchdog", daemon=True)
        self.thread.start()
    self.what = what

  def _run(self) -> None:
    timeout = self.communicator.timeout or 0.0
    while True:
      time.sleep(min(0.25, timeout / 10))
      what, sequence, started = self.what, self.sequence, self.started
      if what is not None and time.monotonic() - started > timeout and self.what is not None and self.sequence == sequence:
        self._fire(what, sequence, timeout)

  def _fire(self, what: str, sequence: int, timeout: float) -> None:
    comm = self.communicator
    other = f" (rank {1 - comm.rank})" if comm.size == 2 else ""
    sys.stderr.write(f"minigrad.distributed: rank {comm.rank} of {comm.size} on {socket.gethostname()}: {what} (collective #{sequence}) "
                     f"did not complete within {timeout:g} s: another rank{other} died, hung or did not make the same call; aborting "
                     "all ranks (MINIGRAD_DIST_TIMEOUT sets the limit)\n")
    comm.abort(1)


# ---------------------------------------------------------------- the process's world

_world: World | None = None
_communicator: Communicator | None = None


def init(timeout: float | None = None, threads: int | None = None, abort_on_error: bool = True) -> World:
  """Join the MPI job this process was launched in (once; later calls return the same World).

  timeout: seconds a collective may wait for the other ranks (default $MINIGRAD_DIST_TIMEOUT, else 300; 0: no limit).
  threads: CPU kernel threads per rank (default: $CPU_THREADS, else this rank's share of the cores it may use:
    the cores divided among the ranks on this host, at least 1). It must be settled before the first kernel runs.
  abort_on_error: an uncaught exception on any rank aborts the whole job, naming the rank (see the module docstring).
  Outside an MPI launcher (and with mpi4py.MPI not already imported): World(rank 0, size 1), nothing else happens."""
  global _world, _communicator
  if _world is not None: return _world
  if not launched_under_mpi() and "mpi4py.MPI" not in sys.modules:
    _world = World(host=socket.gethostname())
    return _world
  # Open MPI's ranks spin while they wait in a collective; yielding the core in between costs nothing on an idle
  # host and, on a busy one, leaves the core to the ranks that still compute (spinning ones slow them down)
  os.environ.setdefault("OMPI_MCA_mpi_yield_when_idle", "1")
  # the gradients' shared-memory window is Open MPI's osc/sm; without this its osc/ucx, asked first, prints an error
  # on hosts where UCX finds no network (and the program makes no windows of its own across hosts)
  os.environ.setdefault("OMPI_MCA_osc", "^ucx")
  MPI = _mpi()
  if timeout is None: timeout = float(os.environ.get("MINIGRAD_DIST_TIMEOUT", DEFAULT_TIMEOUT_S))
  comm = MPI.COMM_WORLD.Dup()
  local = _node_communicator(MPI, comm)
  world = World(comm.Get_rank(), comm.Get_size(), local.Get_rank(), local.Get_size(), True, socket.gethostname())
  _set_threads(world, threads)
  _communicator = Communicator(comm, timeout if timeout and timeout > 0 else None, node=local)
  _world = world
  if abort_on_error and world.size > 1: _install_abort_hooks()
  return world


def _node_communicator(MPI: Any, comm: Any) -> Any:
  """The ranks of `comm` that share memory with this one (MPI_COMM_TYPE_SHARED: this host). MINIGRAD_DIST_NODE_SIZE=k
  pretends that every k consecutive ranks are a host of their own (to try the path across hosts on one)."""
  local = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
  if (k := os.environ.get("MINIGRAD_DIST_NODE_SIZE", "")) in ("", "0"): return local
  if not k.isdigit(): raise ValueError(f"MINIGRAD_DIST_NODE_SIZE must be a number of ranks, got {k!r}")
  pretend = local.Split(comm.Get_rank() // int(k), comm.Get_rank())
  local.Free()
  return pretend


def _set_threads(world: World, threads: int | None) -> None:
  """CPU_THREADS for this rank, unless the environment already says (read by minigrad.helpers.cpu_threads)."""
  from minigrad import helpers
  if threads is None and "CPU_THREADS" in os.environ: return
  if threads is None:
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    threads = max(1, min(usable, (os.cpu_count() or 1) // world.local_size))
  os.environ["CPU_THREADS"] = str(threads)
  helpers.cpu_threads.cache_clear()


def world() -> World:
  """The World of this process (init() first if it wasn't called)."""
  return init()


def communicator() -> Communicator | None:
  """The Communicator, or None at world size 1 (nothing to communicate)."""
  init()
  return _communicator if _world is not None and _world.size > 1 else None


def barrier() -> None:
  """Wait until every rank got here (no-op at world size 1)."""
  if (comm := communicator()) is not None: comm.barrier()


def allreduce(value: Any, op: str = "sum") -> np.ndarray:
  """A numpy copy of `value` (array or number) reduced across ranks with op ("sum", "mean", "max", "min"): for
  metrics such as a loss or a count of correct answers. At world size 1 the copy itself."""
  array = np.array(value, copy=True)
  if op == "mean" and array.dtype.kind != "f": array = array.astype(np.float64)
  if (comm := communicator()) is not None: comm.allreduce_([array.reshape(-1) if array.ndim else array.reshape(1)], op, "allreduce of a value")
  elif op not in OPS: raise ValueError(f"unknown reduction {op!r}: expected one of {', '.join(OPS)}")
  return array


# ---------------------------------------------------------------- aborting the job when one rank fails

def _install_abort_hooks() -> None:
  previous = sys.excepthook

  def abort_all_ranks(kind: type, error: BaseException, tb: Any) -> None:
    w = _world
    if w is None or _communicator is None or issubclass(kind, KeyboardInterrupt): return previous(kind, error, tb)
    message = "".join(traceback.format_exception(kind, error, tb))
    sys.stderr.write(f"[rank {w.rank}] {message}"
                     f"minigrad.distributed: rank {w.rank} of {w.size} ({w.host}, pid {os.getpid()}) raised {kind.__name__}: {error}; "
                     "aborting all ranks\n")
    _communicator.abort(1)

  sys.excepthook = abort_all_ranks
