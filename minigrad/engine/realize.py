"""Realize: run a schedule on its devices.

Input: ScheduleItems from the scheduler. Output: filled runtime Buffers, and DEBUG output / GlobalCounters.
Each kernel AST is compiled once per device (Kernel -> lower -> linearize -> render -> compile) and kept in
`compiled_kernels` (the MAX_COMPILED_KERNELS most recently used); the rendered kernels (minigrad/engine/kernel_cache.py) and the device compiler's binaries are
also kept on disk.

`buffers` maps each BUFFER node of the tensor graph to its runtime Buffer. It is a documented cache kept on the
nodes (a NodeTable): when no graph mentions a BUFFER node any more, its memory is freed. Intermediates of a schedule that no
graph mentions after it share memory (minigrad/engine/memory.py). A schedule that ran before (the same kernels in the
same order: an eager training loop's step) runs as one call into the CPU thread pool (minigrad/engine/batched.py).
With PROFILE=1 or VIZ=1 (minigrad/viz/) every launch
is timed (it waits for the device) and recorded, and rendering, compiling and BEAM search are traced; while source lines
are captured, the source shown (DEBUG>=4, the report) carries comments naming each block's op (`commented`). An error
while compiling or running a kernel gets a note naming its ops and the user's lines (minigrad/viz/errors.py). TinyJit's
hooks close the file.
"""
from __future__ import annotations
from dataclasses import dataclass, field
from typing import Any, Sequence
from operator import attrgetter
import atexit
import functools
import time
import weakref
from minigrad.helpers import BEAM, DEBUG, NOOPT, GlobalCounters, colored, getenv, prod
from minigrad.uop.ops import UOp, Ops, GroupOp, NodeTable, pretty
from minigrad.schedule.scheduler import ScheduleItem, mark_realized
from minigrad.codegen.kernel import Kernel, Opt
from minigrad.opt.heuristics import hand_coded_optimizations
from minigrad.codegen.linearizer import linearize_for
from minigrad.runtime.device import Buffer, Device, disk_cache_enabled
from minigrad.engine.memory import MemoryPlan, plan_memory
from minigrad.engine import batched, kernel_cache
from minigrad import viz
from minigrad.viz import boundaries, errors, kernel_comments, trace

buffers = NodeTable("runtime_buffer")   # BUFFER node -> its runtime Buffer
failed_buffers = NodeTable("failed")    # outputs of a schedule that failed before writing them -> True


def buffer_of(node: UOp) -> Buffer:
  """The runtime Buffer behind a BUFFER node (created, not yet allocated, on first use). Called for every buffer of
  every launch: it reads both tables' entries from the node's __dict__ (where NodeTable keeps them) directly."""
  values = node.__dict__
  if failed_buffers.ever and failed_buffers.key in values:
    raise RuntimeError("this tensor has no value: the kernels that should have computed it failed (see the earlier error)")
  if (buf := values.get(buffers.key)) is None:   # only BUFFER nodes get one
    if node.op is not Ops.BUFFER: raise ValueError(f"expected a BUFFER node, got {node.op}")
    buf = buffers[node] = Buffer(node.device, node.arg[1], node.dtype)
  return buf


@dataclass
class CompiledKernel:
  name: str
  device: str
  source: str
  uops: list[UOp]
  kernel: Kernel
  program: object
  flops: int
  outer_loop: int | None   # size of the outermost loop when the program can split it across threads
  buffer_args: list[int]   # which of the schedule item's buffers the compiled code takes (unread ones are dropped)
  launch_dims: tuple[tuple[int, ...], tuple[int, ...]] | None = None   # GPU: (workgroups, threads per workgroup), x/y/z
  commented_source: str = ""   # `source` with comments naming its ops, when source lines were captured (minigrad/viz/)
  checked_sizes: set[tuple[int, ...]] = field(default_factory=set)
  # (name, min, max) of the Variables the kernel takes as int arguments, in its argument order (symbolic shapes)
  variables: tuple[tuple[str, int, int], ...] = ()

  def variable_values(self, var_vals: dict[str, int] | None) -> tuple[int, ...]:
    """The kernel's int arguments from the bound values; a clear error for an unbound or out-of-range one."""
    if not self.variables: return ()
    values = []
    for name, lo, hi in self.variables:
      if var_vals is None or name not in var_vals:
        raise RuntimeError(f"kernel {self.name} needs a value for Variable {name!r}, which is not bound: bind it (Variable.bind) "
                           "before using it in a shape")
      if not lo <= (value := var_vals[name]) <= hi: raise ValueError(f"Variable {name}: value {value} is outside its range [{lo}, {hi}]")
      values.append(value)
    return tuple(values)

  def check_bounds(self, buffers: list[Buffer]) -> None:
    """Refuse to launch when an ungated index can leave its buffer (a bug upstream, never a segfault). A select
    `valid.where(i, j)` in an index (a load on padding, see lowerer.index_on_padding) gates i: j is checked."""
    for u in self.uops:
      if u.op not in (Ops.LOAD, Ops.STORE) or len(u.src[0].src) != 2: continue
      buf, index = u.src[0].src
      if buf.op is not Ops.DEFINE_GLOBAL: continue   # local memory: sized by the kernel itself
      if selects := {w: w.src[2] for w in index.toposort if w.op is Ops.WHERE}: index = index.substitute(selects)
      width = (u.dtype if u.op is Ops.LOAD else u.src[1].dtype).count   # a vector access spans `width` elements
      lo, hi, size = index.vmin, index.vmax + width - 1, buffers[buf.arg].size
      if lo < 0 or hi >= size:
        raise RuntimeError(f"internal error: kernel {self.name} indexes data{buf.arg} in [{lo}, {hi}] but the buffer has {size} elements")

  @property
  def outputs(self) -> int: return len(self.kernel.ast.src)   # the first buffers, each stored by one STORE of the SINK

  @functools.cached_property
  def work(self) -> int: return prod(self.kernel.full_shape)   # loop iterations in all: is a second thread worth it

  def _check_once(self, buffers: list[Buffer]) -> None:
    if (sizes := tuple(b.size for b in buffers)) not in self.checked_sizes:
      self.check_bounds(buffers)
      self.checked_sizes.add(sizes)

  def pool_launch(self, buffers: list[Buffer], var_vals: dict[str, int] | None = None) -> tuple | None:
    """This launch as an entry of a CPU thread-pool LaunchList (minigrad/runtime/cpu_pool.py), or None when the
    device launches kernels its own way (GPUs, the PYTHON interpreter). `buffers` must be allocated. The values of
    the kernel's Variables follow the buffer addresses (the entry function reads them from there)."""
    if getattr(self.program, "entry", None) is None: return None
    self._check_once(buffers)
    addresses = tuple(buffers[i].opaque for i in self.buffer_args) + self.variable_values(var_vals)
    return self.program.launch(addresses, self.outer_loop, self.work)

  def __call__(self, buffers: list[Buffer], wait: bool = False, var_vals: dict[str, int] | None = None) -> float | None:
    self._check_once(buffers)
    extra: dict = {} if self.outer_loop is None else {"outer_loop": self.outer_loop, "work": self.work}
    if self.launch_dims is not None: extra = {"global_size": self.launch_dims[0], "local_size": self.launch_dims[1]}
    addresses = [buffers[i].opaque for i in self.buffer_args]
    if self.variables:   # CPU entry functions read the values after the buffer addresses; other devices take them apart
      if getattr(self.program, "entry", None) is not None: addresses += self.variable_values(var_vals)
      else: extra["vals"] = self.variable_values(var_vals)
    return self.program(*addresses, wait=wait, **extra)


def count_flops(uops: list[UOp]) -> int:
  """ALU operations executed on data (index math excluded): one per SIMD lane, times the trip counts of their loops
  and, on GPUs, the number of threads (the SPECIAL ids)."""
  index_math: set[UOp] = set()
  trips, total = [1], 0
  for u in uops:
    if u.op is Ops.RANGE:
      trips.append(trips[-1] * (u.vmax - u.vmin + 1))
      index_math.add(u)
    elif u.op is Ops.ENDRANGE: trips.pop()
    elif u.op in (Ops.CONST, Ops.SPECIAL, Ops.DEFINE_VAR): index_math.add(u)
    elif u.op in GroupOp.ALU:
      if all(s in index_math for s in u.src): index_math.add(u)
      else: total += trips[-1] * u.dtype.count
  return total * prod(u.arg[1] for u in uops if u.op is Ops.SPECIAL)


compiled_kernels: dict[tuple[UOp, str, tuple[Opt, ...] | None], CompiledKernel] = {}
# the most compiled kernels kept in `compiled_kernels`, the least recently used dropped first: a process that builds
# many distinct kernels (the fuzzer on pocl: about 1 MB each) would otherwise grow until it runs out of memory
MAX_COMPILED_KERNELS = 4096


def new_kernel(ast: UOp, device: str) -> Kernel:
  """A Kernel for `ast` shaped for `device` (GPU devices have workgroups with local memory; CPU devices compile for
  their compiler's Target)."""
  dev = Device[device]
  return Kernel(ast, has_local=getattr(dev.renderer, "has_local", False), target=getattr(dev.compiler, "target", None))


def get_kernel(ast: UOp, device: str, opts: list[Opt] | None = None) -> CompiledKernel:
  """The compiled program for a kernel AST: with `opts` exactly those actions, else the device's default choice:
  with BEAM=N the actions a beam search found (minigrad/engine/search.py; it wins over NOOPT), with NOOPT=1 none,
  else the hand-coded ones."""
  if opts is None and BEAM >= 1:
    from minigrad.engine.search import beam_search   # search.py builds on this module: import it when used
    start = time.perf_counter()
    opts = beam_search(ast, device, BEAM.value)
    if viz.profiling: trace.complete("BEAM search", "beam", start, opts=str(opts))
  key = (ast, device, None if opts is None else tuple(opts))
  if (found := compiled_kernels.pop(key, None)) is not None:
    compiled_kernels[key] = found   # the most recently used last
    return found
  start = time.perf_counter()
  path = kernel_cache.entry_path(ast, device, opts) if disk_cache_enabled() else None
  if path is not None and (rendered := kernel_cache.load(path, lambda: new_kernel(ast, device))) is not None:
    kernel, uops, source = rendered
    _print_kernel(kernel)
    _print_code(kernel, device, uops, source)
    if viz.profiling: trace.complete(f"render {kernel.name} (disk cache)", "render", start)
  else:
    kernel = new_kernel(ast, device)
    if opts is not None:
      for opt in opts: kernel.apply_opt(opt)
    elif not NOOPT: hand_coded_optimizations(kernel)
    uops, source = render_kernel(kernel, device)
    if path is not None: kernel_cache.store(path, (kernel, uops, source))
    if viz.profiling: trace.complete(f"render {kernel.name}", "render", start, opts=str(kernel.applied_opts))
  start = time.perf_counter()
  binary = Device[device].compiler.compile_cached(source)
  if viz.profiling: trace.complete(f"compile {kernel.name}", "compile", start, device=device)
  compiled_kernels[key] = compiled = load_kernel(kernel, device, uops, source, binary)
  if viz.reporting: compiled.commented_source = commented(kernel, device, uops, source)   # the VIZ report shows it
  while len(compiled_kernels) > MAX_COMPILED_KERNELS: del compiled_kernels[next(iter(compiled_kernels))]
  if getenv("CUDA_COMPILE_ONLY", 0):   # also render and compile the kernel for CUDA, without a GPU (runtime/ops_cuda.py)
    from minigrad.runtime.ops_cuda import compile_only
    compile_only(ast)
  if cross_cc := getenv("CROSS_CC", ""):   # CPU/LLVM kernels also built for another CPU by a cross compiler (runtime/cross_compile.py)
    from minigrad.runtime.cross_compile import cross_compile_for
    cross_compile_for(device, ast, opts, cross_cc)
  return compiled


def render_kernel(kernel: Kernel, device: str, verbose: bool = True) -> tuple[list[UOp], str]:
  """Kernel -> lower -> linearize -> render: the linearized uops and the source text. With `verbose`, DEBUG>=3
  prints the AST and the applied opts, DEBUG>=4 the source, DEBUG>=5 the uops."""
  dev = Device[device]
  if verbose: _print_kernel(kernel)
  uops = linearize_for(kernel, dev.renderer)
  source = dev.renderer.render(kernel.name, uops)
  if verbose: _print_code(kernel, device, uops, source)
  return uops, source


def commented(kernel: Kernel, device: str, uops: list[UOp], source: str) -> str:
  """`source` with comments naming the tensor op and the user's line behind each block (minigrad/viz/kernel_comments.py),
  while source lines are captured (VIZ, PROFILE, DEBUG>=3); else `source`. Only shown: what is compiled, cached and
  keyed is always `source`."""
  return kernel_comments.commented_source(kernel.ast, Device[device].renderer, kernel.name, uops, source) if viz.capturing else source


def _print_kernel(kernel: Kernel) -> None:
  """DEBUG>=3: why the kernel starts and ends where it does, the user's lines it computes, the AST and the applied opts."""
  if DEBUG >= 3:
    for reason in boundaries.reasons_of(kernel.ast): print(f"kernel boundary: {reason}")
    for line in boundaries.lines_of(kernel.ast): print(f"from: {line}")
    print(pretty(kernel.ast))
    print(f"{kernel.name}: full shape {kernel.full_shape} ({', '.join(kernel.axis_kinds)}), applied opts {kernel.applied_opts}")


def _print_code(kernel: Kernel, device: str, uops: list[UOp], source: str) -> None:
  """DEBUG>=5: the uops; DEBUG>=4: the source (with comments naming its ops: DEBUG>=3 captures source lines)."""
  if DEBUG >= 5:
    for i, u in enumerate(uops): print(f"{i:4d} {u.op.name:12s} {u.dtype.name:8s} {u.arg if u.op is not Ops.CONST else u.arg!r}")
  if DEBUG >= 4: print(commented(kernel, device, uops, source))


def load_kernel(kernel: Kernel, device: str, uops: list[UOp], source: str, binary: bytes) -> CompiledKernel:
  """The compiled binary of `source` (rendered from `kernel` as `uops`) -> a launchable program."""
  dev = Device[device]
  program = dev.program(kernel.name, binary)
  outer_loop = next((u.arg[2] for u in uops if u.op is Ops.DEFINE_VAR and u.arg[0] == "core_end"), None)   # threads split it
  variables = tuple(u.arg for u in uops if u.op is Ops.DEFINE_VAR and u.arg[0] not in ("core_start", "core_end"))
  return CompiledKernel(kernel.name, device, source, uops, kernel, program, count_flops(uops),
                        outer_loop, sorted(u.arg for u in uops if u.op is Ops.DEFINE_GLOBAL),
                        launch_dims(uops) if getattr(dev.renderer, "has_local", False) else None, variables=variables)


def launch_dims(uops: list[UOp]) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
  """(workgroups, threads per workgroup) along x, y, z from a GPU kernel's SPECIAL ids (gidx0 is x)."""
  specials = [u for u in uops if u.op is Ops.SPECIAL]
  sizes = {"gidx": [1, 1, 1], "lidx": [1, 1, 1]}
  for u in specials: sizes[u.arg[0][:4]][int(u.arg[0][4:])] = u.arg[1]
  return tuple(sizes["gidx"]), tuple(sizes["lidx"])


def run_schedule(items: list[ScheduleItem], stored: dict[UOp, UOp] | None = None, keep: Sequence[UOp] = ()) -> MemoryPlan | None:
  """Run the kernels of a schedule in order.

  With `stored` (the scheduler's node -> buffer-view map; emptied here), the caller has already pointed its tensors
  at their new buffers (`keep`: those tensors' uops) and dropped the old graphs. An intermediate whose node no graph
  mentions any more can then only be read inside this schedule: those share memory (minigrad/engine/memory.py),
  and the nodes still alive are recorded as realized, for later graphs to load. Returns that memory plan.
  If a kernel fails, the buffers it and the later kernels would have written are marked failed (see buffer_of)."""
  plan, alive_nodes = None, []
  if stored is not None:
    node_refs = [(weakref.ref(node), view) for node, view in stored.items()]
    stored.clear()   # drop the last strong references to graphs nobody else holds
    alive_nodes = [(node, view) for ref, view in node_refs if (node := ref()) is not None]
    kept = {u.base for u in keep} | {view.base for _, view in alive_nodes}
    intermediates = {b: (b.device, b.arg[1], b.dtype) for item in items for b in item.bufs[:item.outputs] if b not in kept}
    plan = plan_memory([item.bufs for item in items], intermediates)
    for node, pooled in plan.buffers.items(): buffers[node] = pooled
    if DEBUG >= 2 and items: _print_memory(items, plan)
  # a schedule of several kernels that ran before runs as one thread-pool call (minigrad/engine/batched.py), unless
  # launches are watched one by one (DEBUG, PROFILE/VIZ, a TinyJit capture) or searched (BEAM)
  batchable = len(items) > 1 and launch_recorder is None and not viz.observing and DEBUG < 1 and BEAM < 1
  key = (tuple(map(_ast_of, items)), tuple(map(_device_of, items))) if batchable else None
  if key is not None and (batch := batched.find(key, compiled_kernels)) is not None:
    try:
      if batch.run([[buffer_of(b).allocate() for b in item.bufs] for item in items]):
        if stored is not None: mark_realized(dict(alive_nodes))
        return plan
    except BaseException:
      failed_buffers.update({b: True for item in items for b in item.bufs[:item.outputs]})
      raise
  kernels, launched = [], []
  for i, item in enumerate(items):
    stage = "compiling"
    try:
      kernel = get_kernel(item.ast, item.device)
      stage = "running"
      bufs = [buffer_of(b).allocate() for b in item.bufs]
      kernels.append(kernel)
      launched.append(bufs)
      var_vals = dict(item.var_vals) if item.var_vals else None
      if launch_recorder is not None: launch_recorder.append((kernel, item.bufs, bufs, var_vals))
      launch(kernel, bufs, var_vals)
    except BaseException as error:
      failed_buffers.update({b: True for later in items[i:] for b in later.bufs[:later.outputs]})
      # the kernel's ops and the user's lines behind them (minigrad/viz/errors.py)
      if isinstance(error, Exception): errors.add_kernel_context(error, item.ast, stage, i, len(items), item.device)
      raise
  if key is not None: batched.keep(key, [(item.ast, item.device, None) for item in items], kernels, launched)
  if stored is not None: mark_realized(dict(alive_nodes))
  return plan


_ast_of, _device_of = attrgetter("ast"), attrgetter("device")


def launch(kernel: CompiledKernel, bufs: list[Buffer], var_vals: dict[str, int] | None = None) -> None:
  """Run one compiled kernel on its buffers (and the values of the Variables it takes), counted in GlobalCounters
  (and printed at DEBUG>=1)."""
  observe = viz.observing   # PROFILE=1 or VIZ=1: every launch is timed and recorded
  start = time.perf_counter() if observe else 0.0
  seconds = kernel(bufs, wait=observe or DEBUG >= 2, var_vals=var_vals) if kernel.variables else kernel(bufs, wait=observe or DEBUG >= 2)
  nbytes = sum(b.nbytes for b in bufs)
  GlobalCounters.kernel_count += 1
  GlobalCounters.global_ops += kernel.flops
  GlobalCounters.global_mem += nbytes
  if seconds is not None: GlobalCounters.time_sum_s += seconds
  if DEBUG >= 1: _print_launch(kernel, len(bufs), nbytes, seconds)
  if observe: viz.launched(kernel, nbytes, start, seconds)


def _print_memory(items: list[ScheduleItem], plan: MemoryPlan) -> None:
  """DEBUG>=2: the memory a schedule's new buffers take (all of it is in use once its last kernel ran)."""
  written = sum(b.arg[1] * b.dtype.itemsize for item in items for b in item.bufs[:item.outputs])
  kept = written - plan.unplanned_bytes
  print(f"memory: {len(items)} kernels, peak {(kept + plan.planned_bytes) / 1e6:.2f} MB of new buffers "
        f"({written / 1e6:.2f} MB without reuse); {plan.summary()}")


def _print_launch(kernel: CompiledKernel, nbufs: int, nbytes: int, seconds: float | None) -> None:
  line = f"*** {kernel.device:5s} {GlobalCounters.kernel_count:4d} {colored(kernel.name, 'cyan' if kernel.kernel.reduce_axes else 'green'):30s} " \
         f"arg {nbufs:2d} mem {GlobalCounters.global_mem / 1e9:7.3f} GB"
  if seconds is not None:
    rate = max(seconds, 1e-9)
    line += f" tm {seconds * 1e6:9.2f}us/{GlobalCounters.time_sum_s * 1e3:9.2f}ms " \
            f"({kernel.flops / rate / 1e9:7.2f} GFLOPS {nbytes / rate / 1e9:6.2f} GB/s)"
  print(line)


def print_totals() -> None:
  """DEBUG>=2 summary: kernels, time and rates since the last GlobalCounters.reset()."""
  seconds = max(GlobalCounters.time_sum_s, 1e-9)
  print(f"total: {GlobalCounters.kernel_count} kernels, {GlobalCounters.time_sum_s * 1e3:.2f} ms, "
        f"{GlobalCounters.global_ops / seconds / 1e9:.2f} GFLOPS, {GlobalCounters.global_mem / seconds / 1e9:.2f} GB/s")


# ---------------------------------------------------------------- what TinyJit (minigrad/engine/jit.py) listens to
# While a TinyJit capture runs, `launch_recorder` collects every launch (kernel, BUFFER nodes, Buffers) and
# `assign_recorder` every Tensor.assign (a weak reference to the tensor, its value before). `replaced_at` notes,
# per BUFFER node, the assignment count at which a tensor holding it (or a lazy graph reading it) was given a new
# value: a captured function that read that buffer as a constant must be captured again. It is kept once a
# capture exists (`watch_assigns`); kept on the nodes, like `buffers`. `homes` names memory that a recorded call's
# intermediate must be written to in every replay instead of memory TinyJit plans (minigrad/distributed/gradients.py
# gives the gradients their places in a shared-memory window).
launch_recorder: list[tuple[CompiledKernel, tuple[UOp, ...], list[Buffer], dict[str, int] | None]] | None = None
assign_recorder: list[tuple[weakref.ref, UOp]] | None = None
homes = NodeTable("home")   # BUFFER node -> the Buffer a capture gives it if it is an intermediate (a window of shared memory)
replaced_at = NodeTable("replaced_at")   # BUFFER node -> the assignment count when its holder got a new value
assign_count = 0
watch_assigns = False


def note_assign(tensor: Any, old: UOp) -> None:
  """Tensor.assign reports each rebinding here: `tensor` held `old` before."""
  global assign_count
  assign_count += 1
  if watch_assigns:
    if (base := old.base).op is Ops.BUFFER: replaced_at[base] = assign_count
    else:
      for leaf in old.toposort:
        if leaf.op is Ops.BUFFER: replaced_at[leaf] = assign_count
  if assign_recorder is not None: assign_recorder.append((weakref.ref(tensor), old))


if DEBUG >= 2: atexit.register(print_totals)
