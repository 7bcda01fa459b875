"""The C thread pool of the CPU devices (minigrad/runtime/cpu_pool.c): lists of launches run in order, split into
parts over the threads, from several Python threads at once, and in a forked child."""
import ctypes
import multiprocessing
import os
import subprocess
import sys
import threading
import time
import numpy as np
import pytest
from minigrad import Tensor
from minigrad.engine.realize import get_kernel
from minigrad.runtime import ops_cpu
from minigrad.runtime.cpu_pool import MAX_LAUNCHES, LaunchList
from minigrad.runtime.device import Buffer

N = 1 << 17   # elements: enough work (> PARALLEL_MIN_WORK) for the launches to be split


def plus_one(device: str = "CPU"):
  """The compiled `x + 1` kernel for float32 vectors of N elements."""
  (item,) = (Tensor.empty(N, device=device) + 1).schedule()
  return get_kernel(item.ast, device)


def buffer(values: np.ndarray, device: str = "CPU") -> Buffer:
  buf = Buffer(device, values.size, Tensor(values).dtype).allocate()
  buf.copyin(memoryview(np.ascontiguousarray(values)).cast("B"))
  return buf


def ping_pong(kernel, a: Buffer, b: Buffer, count: int) -> LaunchList:
  """`count` launches, each reading what the one before wrote: a -> b, b -> a, ..."""
  assert kernel.program.parts(kernel.outer_loop, N) > 1
  pairs = [(b, a) if i % 2 == 0 else (a, b) for i in range(count)]
  return LaunchList([kernel.program.launch((out.opaque, src.opaque), kernel.outer_loop, N) for out, src in pairs])


@pytest.mark.parametrize("device", ["CPU", "LLVM"])
@pytest.mark.parametrize("count", [1, 2, 7, MAX_LAUNCHES + 3])
def test_a_list_runs_in_order_and_whole(device, count):
  x = np.random.default_rng(count).standard_normal(N).astype(np.float32)
  a, b = buffer(x, device), buffer(np.zeros(N, np.float32), device)
  ping_pong(plus_one(device), a, b, count).run()
  np.testing.assert_allclose((b if count % 2 else a).numpy(), x + count, rtol=1e-5)


def test_one_thread_runs_everything_on_the_caller(monkeypatch):
  monkeypatch.setattr(ops_cpu, "cpu_threads", lambda: 1)
  kernel = plus_one()
  assert kernel.program.parts(kernel.outer_loop, N) == 1
  x = np.arange(N, dtype=np.float32)
  out, source = buffer(np.zeros(N, np.float32)), buffer(x)
  kernel.program(out.opaque, source.opaque, outer_loop=kernel.outer_loop, work=N)
  np.testing.assert_array_equal(out.numpy(), x + 1)


def test_lists_from_several_python_threads_at_once():
  kernel = plus_one()
  xs = [np.random.default_rng(i).standard_normal(N).astype(np.float32) for i in range(4)]
  pairs = [(buffer(x), buffer(np.zeros(N, np.float32))) for x in xs]
  lists = [ping_pong(kernel, a, b, 40) for a, b in pairs]
  threads = [threading.Thread(target=lambda launches=launches: [launches.run() for _ in range(5)]) for launches in lists]
  for t in threads: t.start()
  for t in threads: t.join()
  for x, (a, _) in zip(xs, pairs): np.testing.assert_allclose(a.numpy(), x + 200, rtol=1e-5)


WHO_RAN = r"""
#include <pthread.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
void who_ran(long *restrict out, int start, int end) {   /* each iteration: 50 us of work, then the thread's id */
  for (int i = start; i < end; i++) { double until = now() + 50e-6; while (now() < until) {} out[i] = (long)pthread_self(); }
}
void who_ran_entry(void *const *bufs, int start, int end) { who_ran((long *)bufs[0], start, end); }
"""


@pytest.mark.skipif(ops_cpu.cpu_threads() != 2, reason="the shares below are those of two threads")
def test_each_thread_takes_the_same_share_of_consecutive_launches():
  # Two launches cut the same way into 8 parts: each thread runs its half (parts 0-3 or 4-7) of both, so a kernel
  # finds what the one before wrote in its own core's cache. (Parts taken first come, first served alternate
  # between the threads.) A thread held up by the system leaves its parts to the other one: most runs, not all.
  program = ops_cpu.CPUProgram("who_ran", ops_cpu.CCompiler().compile(WHO_RAN))
  first, second = np.zeros(8, np.int64), np.zeros(8, np.int64)
  launches = LaunchList([(program.entry, [ids.ctypes.data], 8, 8) for ids in (first, second)])
  halves = 0
  for _ in range(20):
    launches.run()
    halves += bool((first == second).all() and (first[:4] == first[0]).all() and (first[4:] == first[4]).all())
  assert halves >= 10, f"the threads ran the same halves of both launches in only {halves} of 20 runs"


@pytest.fixture
def profiling(monkeypatch):
  """PROFILE=1 as far as the pool is concerned: runs note when and where each part ran."""
  from minigrad import viz
  monkeypatch.setattr(viz, "profiling", True)


def test_part_times_are_off_unless_profiling(monkeypatch):
  from minigrad import viz
  from minigrad.runtime.cpu_pool import take_part_times
  monkeypatch.setattr(viz, "profiling", False)
  program = ops_cpu.CPUProgram("who_ran", ops_cpu.CCompiler().compile(WHO_RAN))
  ids = np.zeros(8, np.int64)
  LaunchList([(program.entry, [ids.ctypes.data], 8, 8)]).run()
  assert take_part_times(program.entry, 0.0) is None and (ids != 0).all()


def test_the_pool_clock_is_perf_counters():
  # the parts' times are placed on the trace's clock (time.perf_counter) by an offset measured once
  from minigrad.runtime.cpu_pool import clock_offset_ns, pool
  offset = clock_offset_ns()
  for _ in range(5):
    before = time.perf_counter_ns(); c = pool().mg_pool_now_ns(); after = time.perf_counter_ns()
    assert before - 1000 <= c + offset <= after + 1000   # within a microsecond of the Python reads around it


def test_timed_parts_name_the_thread_that_ran_them(profiling):
  # Each part's slot says which pool thread ran it: the kernel writes its OS thread into every iteration, so every
  # iteration of a part has the same writer, one pool thread number is one OS thread, and 0 is the caller.
  from minigrad.runtime.cpu_pool import take_part_times
  program = ops_cpu.CPUProgram("who_ran", ops_cpu.CCompiler().compile(WHO_RAN))
  libc = ctypes.CDLL(None)
  libc.pthread_self.restype = ctypes.c_ulong
  caller = ctypes.c_long(libc.pthread_self()).value
  first, second = np.zeros(8, np.int64), np.zeros(6, np.int64)
  launches = LaunchList([(program.entry, [first.ctypes.data], 8, 8), (program.entry, [second.ctypes.data], 6, 3)])
  os_thread: dict[int, int] = {}
  for _ in range(3):
    since = time.perf_counter()
    launches.run()
    began, ended, parts = take_part_times(program.entry, since)
    assert since <= began <= ended and take_part_times(program.entry, since) is None   # taken once
    # 8 and 3 parts with a worker; each launch whole, on the caller, in a pool of one thread (a 1-core host)
    split = ops_cpu.cpu_threads() > 1
    assert sorted((p.launch, p.part) for p in parts) == ([(0, j) for j in range(8)] + [(1, j) for j in range(3)] if split else [(0, 0), (1, 0)])
    for launch, outer in ((0, 8), (1, 6)):   # the parts of a launch run its outer loop once
      spans = sorted((p.loop_start, p.loop_end) for p in parts if p.launch == launch)
      assert spans[0][0] == 0 and spans[-1][1] == outer and all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
      assert all(p.parts == len(spans) for p in parts if p.launch == launch)
    for p in parts:
      ids = (first if p.launch == 0 else second)[p.loop_start:p.loop_end]
      assert (ids == ids[0]).all() and os_thread.setdefault(p.thread, int(ids[0])) == ids[0]
      assert began <= p.start <= p.end <= ended and p.caller == threading.current_thread().name
    by_thread = {}   # a thread runs one part at a time; a launch starts once the one before it is done
    for p in parts: by_thread.setdefault(p.thread, []).append((p.start, p.end))
    assert all(a[1] <= b[0] for spans in by_thread.values() for a, b in zip(sorted(spans), sorted(spans)[1:]))
    assert max(p.end for p in parts if p.launch == 0) <= min(p.start for p in parts if p.launch == 1)
  assert os_thread.get(0, caller) == caller and len(set(os_thread.values())) == len(os_thread)
  assert set(os_thread) <= set(range(ops_cpu.cpu_threads()))


def test_a_launch_run_whole_is_timed_as_one_part(profiling):
  # a list none of whose launches is split runs on the caller, each launch whole: one part each, on thread 0
  from minigrad.runtime.cpu_pool import take_part_times
  program = ops_cpu.CPUProgram("who_ran", ops_cpu.CCompiler().compile(WHO_RAN))
  ids = np.zeros(5, np.int64)
  since = time.perf_counter()
  LaunchList([(program.entry, [ids.ctypes.data], 5, 1), (program.entry, [ids.ctypes.data], 3, 1)]).run()
  _, _, parts = take_part_times(program.entry, since)
  assert [(p.launch, p.part, p.parts, p.thread, p.loop_start, p.loop_end) for p in parts] == [(0, 0, 1, 0, 0, 5), (1, 0, 1, 0, 0, 3)]


WHERE_RAN = r"""
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
void where_ran(long *restrict out, int start, int end) {   /* each iteration: 100 us of work, then the thread and its CPU */
  for (int i = start; i < end; i++) {
    double until = now() + 100e-6; while (now() < until) {}
    out[2 * i] = (long)pthread_self(); out[2 * i + 1] = sched_getcpu();
  }
}
void where_ran_entry(void *const *bufs, int start, int end) { where_ran((long *)bufs[0], start, end); }
"""


@pytest.mark.skipif(not sys.platform.startswith("linux") or ops_cpu.cpu_threads() != 2 or len(os.sched_getaffinity(0)) < 2,
                    reason="a worker and the caller on two of the CPUs of Linux")
def test_a_woken_worker_leaves_the_callers_cpu():
  # After a pause the worker sleeps, and Linux tends to wake it on the CPU of the thread that wakes it: the caller's.
  # The two then shared one core while the other idled (a 64 MB row sum at 20-30 instead of 35-40 GB/s); the
  # worker now moves to another CPU. The caller is held on one CPU here, so whatever the worker ran ran beside it.
  program = ops_cpu.CPUProgram("where_ran", ops_cpu.CCompiler().compile(WHERE_RAN))
  log = np.zeros(16, np.int64)
  launches = LaunchList([(program.entry, [log.ctypes.data], 8, 8)])
  libc = ctypes.CDLL(None)
  libc.pthread_self.restype = ctypes.c_ulong
  caller, allowed = ctypes.c_long(libc.pthread_self()).value, os.sched_getaffinity(0)
  cpu = min(allowed)
  launches.run()   # the worker starts with this thread's affinity: all the CPUs
  os.sched_setaffinity(0, {cpu})   # this thread only
  try:
    shared = []
    for run in range(20):
      time.sleep(0.02)   # longer than the worker spins before it sleeps
      launches.run()
      shared += [run for thread, on in zip(log[0::2], log[1::2]) if thread != caller and on == cpu]
  finally: os.sched_setaffinity(0, allowed)
  assert not shared, f"the worker ran parts on the caller's CPU in runs {sorted(set(shared))} of 20"


def _in_child(queue) -> None:
  x = np.arange(N, dtype=np.float32)
  queue.put(float(((Tensor(x, device="CPU") + 1) * 2).sum().item()))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_starts_its_own_threads():
  (Tensor(np.ones(N, np.float32), device="CPU") * 3).realize()   # the parent's pool is running
  context = multiprocessing.get_context("fork")
  queue = context.Queue()
  child = context.Process(target=_in_child, args=(queue,))
  child.start()
  child.join(timeout=120)
  if child.exitcode is None: child.kill()
  assert child.exitcode == 0
  x = np.arange(N, dtype=np.float64)
  assert queue.get(timeout=10) == pytest.approx(((x + 1) * 2).sum(), rel=1e-6)


def test_kernels_without_an_entry_point_are_called_directly():
  lib = ops_cpu.CCompiler().compile("void fill(float *restrict out, const int n) { for (int i = 0; i < n; i++) out[i] = i; }")
  program = ops_cpu.CPUProgram("fill", lib)
  assert program.entry is None
  out = buffer(np.zeros(8, np.float32))
  program(out.opaque, vals=(8,))
  np.testing.assert_array_equal(out.numpy(), np.arange(8, dtype=np.float32))
  with pytest.raises(RuntimeError, match="fill_entry"): program.launch((out.opaque,), None, 0)


# Each part of a threaded kernel may store only into its own iterations' elements: a store into another part's,
# even of the value that was there, can undo what that part's thread wrote meanwhile. Part g of this kernel owns the
# pages g, g+3, g+6...; the others are made read-only, so a stray store is a segfault, in a child process.
# gcc 12 at -O2 did store there: iteration g+3's row r-1 is iteration g's row r, and predictive commoning kept
# such elements in registers from the part's start and stored them at its end (see GCC_FLAGS in ops_cpu).
STORES_ONLY_ITS_OWN_PART = r"""
import ctypes, mmap, sys
import numpy as np
from minigrad.runtime import ops_cpu
part, page = int(sys.argv[1]), mmap.PAGESIZE
width = page // 4   # floats per page
rows = "\n".join(f"    out[g*{width} + {3 * row * width}] = in[g*{width} + {3 * row * width}] * 2.0f;" for row in range(16))
source = f"void rows(float *restrict out, const float *restrict in, int start, int end) {{\n  for (long g = start; g < end; g++) {{\n{rows}\n  }}\n}}\n"
function = ops_cpu.load_library(ops_cpu.CCompiler().compile(source)).rows
function.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
memory = mmap.mmap(-1, 48 * page)
out, data = np.frombuffer(memory, np.float32), np.arange(48 * width, dtype=np.float32)
libc = ctypes.CDLL(None)
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
for other in (p for p in range(48) if p % 3 != part):
  assert libc.mprotect(out.ctypes.data + other * page, page, mmap.PROT_READ) == 0
function(out.ctypes.data, data.ctypes.data, part, part + 1)
mine = slice(part * width, None, 3 * width)
assert (out[mine] == data[mine] * 2).all()
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mprotect through ctypes, as on Linux")
@pytest.mark.parametrize("part", [0, 1, 2])
def test_a_part_stores_only_into_its_own_elements(part):
  child = subprocess.run([sys.executable, "-c", STORES_ONLY_ITS_OWN_PART, str(part)], capture_output=True, text=True, timeout=120)
  assert child.returncode == 0, f"part {part} stored outside its elements (exit {child.returncode}): {child.stderr[-2000:]}"
