"""The PYTHON device: runs GPU-shaped kernels in a numpy interpreter, checking what real GPU hardware would get wrong.

Input: program text from minigrad.codegen.python_renderer (one uop per line). Output: `create_device()` -> a
`Compiled` whose allocator keeps buffers in host memory (numpy byte arrays), whose compiler checks and encodes the
program (the encoding is the "binary", kept in the compiler's disk cache like any other), and whose program class
interprets a launch of (workgroups x threads per workgroup).

A launch runs SIMT-style, all threads in lockstep: every value is a numpy array with one entry per thread of the
launch (thread t is thread t % L of workgroup t // L, with L threads per workgroup), or a numpy scalar when it is
the same for every thread (constants, loop counters). RANGE loops are uniform, so they run as Python loops; gated
loads and stores are masks; local memory holds one row per workgroup; a BARRIER is a point every thread reaches
together. The numbers follow the C renderer's table (minigrad/codegen/c_renderer.py); the ALU semantics are in
minigrad/runtime/python_alu.py. A float ADD of a MUL rounds once, as a fused multiply-add, where the C compilers
contract it (`fused_multiply_adds`): the CPU device's numbers (and torch's exact fmod) depend on it.

The interpreter refuses (KernelCheckError, naming the kernel, the uop, the buffer, the indices and a thread) what
a GPU would do silently wrong:
  - a load or store outside its buffer (global memory) or outside its workgroup's array (local memory);
  - a read of local memory that no thread of the workgroup wrote;
  - a race: a thread reading memory that another thread wrote, or writing memory that another thread read or
    wrote, with no barrier in between (local memory: since the last barrier; global memory: in the whole launch,
    since barriers don't order global memory across workgroups);
  - two threads writing different values to the same address in one store.
"""
from __future__ import annotations
from typing import Any, Callable
import json
import math
import time
import numpy as np
from minigrad.dtype import DType, PtrDType, dtypes
from minigrad.uop.ops import Ops, GroupOp
from minigrad.codegen.python_renderer import Instruction, ProgramError, PythonRenderer, arg_from_json, dtype_text, parse_dtype, parse_program
from minigrad.runtime.device import Allocator, Compiled, CompileError, Compiler, numbered_source
from minigrad.runtime.python_alu import alu_function, cast_function, bitcast_function, fma, numpy_dtype, scalar_of

PROGRAM_FORMAT = 1   # bump when the encoded program changes meaning


class KernelCheckError(RuntimeError):
  """The PYTHON device caught a kernel doing what GPU hardware would get wrong (out of bounds, race, conflict)."""


class PythonAllocator(Allocator):
  """Host memory: the opaque handle is a uint8 numpy array of exactly the buffer's bytes."""

  def _alloc(self, nbytes: int) -> np.ndarray: return np.zeros(nbytes, dtype=np.uint8)
  def _free(self, opaque: np.ndarray) -> None: pass
  def copyin(self, dest: np.ndarray, src: memoryview) -> None: dest[:] = np.frombuffer(src, dtype=np.uint8)
  def copyout(self, dest: memoryview, src: np.ndarray) -> None: np.frombuffer(dest, dtype=np.uint8)[:] = src


class PythonCompiler(Compiler):
  """Checks the program text (minigrad.codegen.python_renderer.parse_program) and encodes its instructions as JSON."""

  def __init__(self) -> None: super().__init__(f"python-interpreter format {PROGRAM_FORMAT}")

  def compile(self, src: str) -> bytes:
    try: program = parse_program(src)
    except ProgramError as e: raise CompileError(f"bad PYTHON program: {e}\n--- source ---\n{numbered_source(src)}") from None
    return json.dumps([[ins.op.name, dtype_text(ins.dtype), list(ins.srcs), ins.arg] for ins in program]).encode()


def decode_program(binary: bytes) -> list[Instruction]:
  """The instructions a PythonCompiler binary holds."""
  return [Instruction(Ops[op], parse_dtype(dt), tuple(srcs), arg_from_json(arg)) for op, dt, srcs, arg in json.loads(binary)]


# ---------------------------------------------------------------- memory and its checks

NO_THREAD = -1


class _Memory:
  """One global buffer, or one local array (a row of `row_size` elements per workgroup, rows one after another), with
  the race bookkeeping of its elements when `tracked`: the lowest and highest thread that wrote (read) each one since
  the last barrier, kept from the first store (load) on. Untouched elements hold (`none`, NO_THREAD)."""

  def __init__(self, name: str, data: np.ndarray, row_size: int, tracked: bool, local: bool, threads: int):
    self.name, self.data, self.row_size, self.tracked, self.local = name, data, row_size, tracked, local
    self.written_ever = np.zeros(len(data), dtype=bool) if local else None
    self.none = threads   # above every thread id, so np.minimum keeps the real ones
    self.writers: tuple[np.ndarray, np.ndarray] | None = None
    self.readers: tuple[np.ndarray, np.ndarray] | None = None

  def _fresh(self) -> tuple[np.ndarray, np.ndarray]:
    return np.full(len(self.data), self.none, np.int64), np.full(len(self.data), NO_THREAD, np.int64)

  def note(self, kind: str, threads: np.ndarray, addresses: np.ndarray, unique: bool) -> None:
    """Record that `threads` wrote (kind "writers") or read ("readers") `addresses`."""
    if getattr(self, kind) is None: setattr(self, kind, self._fresh())
    low, high = getattr(self, kind)
    if unique: low[addresses] = high[addresses] = threads
    else:
      np.minimum.at(low, addresses, threads)
      np.maximum.at(high, addresses, threads)

  def barrier(self) -> None: self.writers = self.readers = None

class _Launch:
  """The state of one launch: thread ids, values of the uops, memories."""

  def __init__(self, program: PythonProgram, buffers: tuple[np.ndarray, ...], global_size: tuple[int, ...],
               local_size: tuple[int, ...], vals: tuple[int, ...]):
    self.program = program
    self.global_size = tuple(global_size) + (1,) * (3 - len(global_size))
    self.local_size = tuple(local_size) + (1,) * (3 - len(local_size))
    if any(d < 1 for d in self.global_size + self.local_size):
      raise ValueError(f"kernel {program.name}: launch sizes must be >= 1, got {self.global_size} workgroups x {self.local_size} threads")
    self.group_threads = math.prod(self.local_size)
    self.threads = math.prod(self.global_size) * self.group_threads
    self.thread_id = np.arange(self.threads, dtype=np.int64)
    self.workgroup = self.thread_id // self.group_threads
    if len(buffers) != len(program.global_args):
      raise TypeError(f"kernel {program.name} takes {len(program.global_args)} buffers, got {len(buffers)}")
    if len(vals) != len(program.variables):
      raise TypeError(f"kernel {program.name} takes {len(program.variables)} int values {program.variables}, got {len(vals)}")
    self.buffers = dict(zip(program.global_args, buffers))
    self.vals = dict(zip(program.variables, vals))
    self.stored_memory = {id(self.buffers[arg]) for arg in program.stored_args}   # tracked for races, aliases included
    self.memories: dict[tuple[int, DType], _Memory] = {}
    self.local_memories: list[_Memory] = []

  # ---- ids and thread descriptions ----
  def special(self, name: str, size: int) -> np.ndarray:
    kind, dim = name[:4], int(name[4:])
    dims = self.global_size if kind == "gidx" else self.local_size
    if dims[dim] != size:
      what = "workgroups" if kind == "gidx" else "threads per workgroup"
      raise KernelCheckError(f"kernel {self.program.name}: {name} counts {size} but the launch has {dims[dim]} {what} along {'xyz'[dim]}")
    number = self.workgroup if kind == "gidx" else self.thread_id % self.group_threads
    below = math.prod(dims[:dim])
    return ((number // below) % size).astype(np.int32)

  def describe_thread(self, thread: int) -> str:
    def coords(number: int, dims: tuple[int, ...]) -> tuple[int, ...]:
      return (number % dims[0], number // dims[0] % dims[1], number // (dims[0] * dims[1]))
    return f"workgroup {coords(thread // self.group_threads, self.global_size)} thread {coords(thread % self.group_threads, self.local_size)}"

  # ---- memories ----
  def global_memory(self, arg: int, dtype: DType) -> _Memory:
    raw = self.buffers[arg]
    key = (id(raw), dtype)
    if key not in self.memories:
      npdt = numpy_dtype(dtype)
      if len(raw) % npdt.itemsize: raise TypeError(f"kernel {self.program.name}: data{arg} holds {len(raw)} bytes, not a whole number of {dtype.name}")
      self.memories[key] = _Memory(f"data{arg}", raw.view(npdt), len(raw) // npdt.itemsize, id(raw) in self.stored_memory, False, self.threads)
    return self.memories[key]

  def local_memory(self, name: str, dtype: DType, size: int) -> _Memory:
    rows = self.threads // self.group_threads
    memory = _Memory(name, np.zeros(rows * size, dtype=numpy_dtype(dtype)), size, True, True, self.threads)
    self.local_memories.append(memory)
    return memory

  def barrier(self) -> None:
    for memory in self.local_memories: memory.barrier()

  def _accesses(self, position: int, memory: _Memory, index: Any, gate: Any) -> tuple[np.ndarray | None, np.ndarray, np.ndarray]:
    """The threads that access (None: all), their element indices in the buffer, checked against its bounds."""
    active = None if gate is None or (np.ndim(gate) == 0 and gate) else np.flatnonzero(np.broadcast_to(gate, (self.threads,)))
    elements = np.broadcast_to(index, (self.threads,))
    if active is not None: elements = elements[active]
    if len(elements) and (elements.min() < 0 or elements.max() >= memory.row_size):
      bad = np.flatnonzero((elements < 0) | (elements >= memory.row_size))
      thread = int(bad[0] if active is None else active[bad[0]])
      where = f"{memory.row_size} elements per workgroup" if memory.local else f"{memory.row_size} elements"
      self.fail(position, f"indexes {memory.name} at {int(elements[bad].min())}..{int(elements[bad].max())} but it has {where} "
                          f"(first: {self.describe_thread(thread)} at index {int(elements[bad[0]])})")
    threads = self.thread_id if active is None else active
    addresses = self.workgroup[threads] * memory.row_size + elements if memory.local else elements
    return active, threads, addresses

  def fail(self, position: int, message: str) -> None:
    op = self.program.instructions[position].op.name
    raise KernelCheckError(f"kernel {self.program.name}: {op} %{position} {message}")

  def _race(self, position: int, memory: _Memory, threads: np.ndarray, addresses: np.ndarray, kind: str, what: str) -> None:
    """Fail if an address was written (kind "writers") or read ("readers") by a thread other than the accessing one."""
    if (bookkeeping := getattr(memory, kind)) is None: return
    low, high = bookkeeping
    other = (high[addresses] != NO_THREAD) & ((low[addresses] != threads) | (high[addresses] != threads))
    if other.any():
      first = int(np.flatnonzero(other)[0])
      address, thread = int(addresses[first]), int(threads[first])
      culprit = int(low[address]) if low[address] != thread else int(high[address])
      since = "since the last barrier" if memory.local else "in this launch (GPUs don't order global memory between threads)"
      element = address % memory.row_size if memory.local else address
      self.fail(position, f"races on {memory.name}[{element}]: {self.describe_thread(thread)} {what} {self.describe_thread(culprit)} {since}")

  def load(self, position: int, memory: _Memory, index: Any, gate: Any) -> Any:
    dtype = memory.data.dtype
    if gate is not None and np.ndim(gate) == 0 and not gate: return dtype.type(0)
    if not memory.tracked and gate is None and np.ndim(index) == 0:   # one uniform element: no per-thread work
      if not 0 <= index < memory.row_size: self._accesses(position, memory, index, gate)
      return memory.data[index]
    active, threads, addresses = self._accesses(position, memory, index, gate)
    if memory.local:
      unwritten = ~memory.written_ever[addresses]
      if unwritten.any():
        first = int(np.flatnonzero(unwritten)[0])
        self.fail(position, f"reads {memory.name}[{int(addresses[first]) % memory.row_size}] before any thread of the workgroup wrote it "
                            f"({self.describe_thread(int(threads[first]))})")
    if memory.tracked:
      self._race(position, memory, threads, addresses, "writers", "reads what was written by")
      memory.note("readers", threads, addresses, unique=False)
    if active is None: return memory.data[addresses]
    out = np.zeros(self.threads, dtype=dtype)
    out[active] = memory.data[addresses]
    return out

  def store(self, position: int, memory: _Memory, index: Any, gate: Any, value: Any) -> None:
    if gate is not None and np.ndim(gate) == 0 and not gate: return
    active, threads, addresses = self._accesses(position, memory, index, gate)
    values = np.broadcast_to(np.asarray(value, dtype=memory.data.dtype), (self.threads,))
    if active is not None: values = values[active]
    duplicated = len(addresses) > 1 and np.bincount(addresses, minlength=1).max() > 1
    if duplicated: self._check_same_values(position, memory, threads, addresses, values)
    if memory.tracked:
      self._race(position, memory, threads, addresses, "readers", "overwrites what was read by")
      self._race(position, memory, threads, addresses, "writers", "overwrites what was written by")
      memory.note("writers", threads, addresses, unique=not duplicated)
    if memory.local: memory.written_ever[addresses] = True
    memory.data[addresses] = values

  def _check_same_values(self, position: int, memory: _Memory, threads: np.ndarray, addresses: np.ndarray, values: np.ndarray) -> None:
    order = np.argsort(addresses, kind="stable")
    sorted_addresses, bits = addresses[order], values.view(f"u{values.dtype.itemsize}")[order]
    clash = (sorted_addresses[1:] == sorted_addresses[:-1]) & (bits[1:] != bits[:-1])
    if clash.any():
      first = int(np.flatnonzero(clash)[0])
      a, b = int(order[first]), int(order[first + 1])
      address = int(addresses[a])
      element = address % memory.row_size if memory.local else address
      self.fail(position, f"writes {memory.name}[{element}] from two threads with different values: "
                          f"{self.describe_thread(int(threads[a]))} writes {values[a].item()!r}, {self.describe_thread(int(threads[b]))} writes {values[b].item()!r}")

  # ---- execution ----
  def run(self) -> None:
    program, instructions = self.program, self.program.instructions
    values: list[Any] = [None] * len(instructions)
    loop_end: dict[int, int] = {}
    pc = 0
    while pc < len(instructions):
      ins = instructions[pc]
      if ins.op is Ops.RANGE:
        start, end = (self.uniform_int(pc, values[s]) for s in ins.srcs)
        if start >= end:
          pc = program.range_close[pc] + 1
          continue
        values[pc], loop_end[pc] = np.int32(start), end
      elif ins.op is Ops.ENDRANGE:
        loop = ins.srcs[0]
        following = values[loop] + np.int32(1)
        if following < loop_end[loop]:
          values[loop] = following
          pc = loop + 1
          continue
      else: values[pc] = program.steps[pc](self, values)
      pc += 1

  def uniform_int(self, position: int, value: Any) -> int:
    if np.ndim(value) != 0: self.fail(position, "has a loop bound that differs between threads; RANGE bounds must be uniform")
    return int(value)


# ---------------------------------------------------------------- turning instructions into steps

Step = Callable[[_Launch, list], Any]


def _make_step(position: int, ins: Instruction, program: list[Instruction]) -> Step | None:
  """The function that computes instruction `position` from the values of earlier ones (None: RANGE/ENDRANGE,
  which the run loop handles)."""
  op, dtype, srcs, arg = ins.op, ins.dtype, ins.srcs, ins.arg
  if op in (Ops.RANGE, Ops.ENDRANGE): return None
  if op is Ops.CONST:
    constant = scalar_of(arg, dtype)
    return lambda launch, values: constant
  if op is Ops.DEFINE_GLOBAL:
    assert isinstance(dtype, PtrDType) and dtype.base is not None
    base = dtype.base
    return lambda launch, values: launch.global_memory(arg, base)
  if op is Ops.DEFINE_LOCAL:
    assert isinstance(dtype, PtrDType) and dtype.base is not None
    name, size, base = arg[0], arg[1], dtype.base
    return lambda launch, values: launch.local_memory(name, base, size)
  if op is Ops.DEFINE_VAR: return lambda launch, values: np.int32(launch.vals[arg[0]])
  if op is Ops.SPECIAL: return lambda launch, values: launch.special(arg[0], arg[1])
  if op is Ops.BARRIER: return lambda launch, values: launch.barrier()
  if op is Ops.INDEX:
    if len(srcs) == 2: return lambda launch, values: (values[srcs[0]], values[srcs[1]], None)
    return lambda launch, values: (values[srcs[0]], values[srcs[1]], values[srcs[2]])
  if op is Ops.LOAD: return lambda launch, values: launch.load(position, *values[srcs[0]])
  if op is Ops.STORE: return lambda launch, values: launch.store(position, *values[srcs[0]], values[srcs[1]])
  if op is Ops.DEFINE_ACC: return lambda launch, values: values[srcs[0]]
  if op is Ops.ASSIGN:
    accumulator, new = srcs
    def assign(launch: _Launch, values: list) -> Any:
      values[accumulator] = values[new]
      return values[new]
    return assign
  if op is Ops.CAST:
    cast = cast_function(program[srcs[0]].dtype, dtype)
    return lambda launch, values: cast(values[srcs[0]])
  if op is Ops.BITCAST:
    bitcast = bitcast_function(program[srcs[0]].dtype, dtype)
    return lambda launch, values: bitcast(values[srcs[0]])
  if op in GroupOp.ALU:
    compute = alu_function(op, dtype, program[srcs[0]].dtype if op is not Ops.WHERE else program[srcs[1]].dtype)
    if len(srcs) == 1: return lambda launch, values: compute(values[srcs[0]])
    if len(srcs) == 2: return lambda launch, values: compute(values[srcs[0]], values[srcs[1]])
    return lambda launch, values: compute(values[srcs[0]], values[srcs[1]], values[srcs[2]])
  raise NotImplementedError(f"the PYTHON device can't run {op}")


FUSABLE = (dtypes.float32, dtypes.float64)


def fused_multiply_adds(program: list[Instruction]) -> dict[int, tuple[int, bool]]:
  """The float ADDs that compute as one fused multiply-add, as the C compilers contract them: ADD position ->
  (its MUL operand, whether that is negated through a NEG). As gcc does, a MUL is fused when all of its uses are
  ADDs (directly or through a NEG) in the same block (no loop start or end in between); an ADD takes the first
  such MUL among its operands."""
  uses: dict[int, list[int]] = {}
  block, blocks = 0, []
  for i, ins in enumerate(program):
    for s in ins.srcs: uses.setdefault(s, []).append(i)
    block += ins.op in (Ops.RANGE, Ops.ENDRANGE)
    blocks.append(block)
  fused: dict[int, tuple[int, bool]] = {}
  def fusable_add(position: int, dtype: DType, mul: int) -> bool:
    ins = program[position]
    return ins.op is Ops.ADD and ins.dtype == dtype and blocks[position] == blocks[mul] and position not in fused and ins.srcs[0] != ins.srcs[1]
  for m, ins in enumerate(program):
    if ins.op is not Ops.MUL or ins.dtype not in FUSABLE or m not in uses: continue
    targets: list[tuple[int, bool]] = []
    for user in uses[m]:
      if fusable_add(user, ins.dtype, m): targets.append((user, False))
      elif program[user].op is Ops.NEG and user in uses and all(fusable_add(a, ins.dtype, m) for a in uses[user]):
        targets += [(a, True) for a in uses[user]]
      else: break
    else: fused.update((add, (m, negated)) for add, negated in targets)
  return fused


def _fused_step(add: Instruction, program: list[Instruction], mul: int, negated: bool) -> Step:
  first, second = program[mul].srcs
  addend = next(s for s in add.srcs if s != mul and not (negated and program[s].op is Ops.NEG and program[s].srcs[0] == mul))
  npdt = numpy_dtype(add.dtype)
  if negated: return lambda launch, values: fma(np.negative(values[first]), values[second], values[addend], npdt)
  return lambda launch, values: fma(values[first], values[second], values[addend], npdt)


class PythonProgram:
  """A kernel ready to interpret: `program(*buffers, global_size=, local_size=, vals=, wait=)` runs one launch
  (buffers are the allocator's byte arrays, in the order of the kernel's data numbers)."""

  def __init__(self, name: str, binary: bytes):
    self.name = name
    self.instructions = decode_program(binary)
    self.global_args = sorted(ins.arg for ins in self.instructions if ins.op is Ops.DEFINE_GLOBAL)
    self.variables = [ins.arg[0] for ins in self.instructions if ins.op is Ops.DEFINE_VAR]
    self.stored_args = {self.instructions[self.instructions[ins.srcs[0]].srcs[0]].arg for ins in self.instructions
                        if ins.op is Ops.STORE and self.instructions[self.instructions[ins.srcs[0]].srcs[0]].op is Ops.DEFINE_GLOBAL}
    self.range_close = {ins.srcs[0]: i for i, ins in enumerate(self.instructions) if ins.op is Ops.ENDRANGE}
    self.steps = [_make_step(i, ins, self.instructions) for i, ins in enumerate(self.instructions)]
    for add, (mul, negated) in fused_multiply_adds(self.instructions).items():
      self.steps[add] = _fused_step(self.instructions[add], self.instructions, mul, negated)

  def __call__(self, *buffers: np.ndarray, global_size: tuple[int, ...] = (1, 1, 1), local_size: tuple[int, ...] = (1, 1, 1),
               vals: tuple[int, ...] = (), wait: bool = False) -> float | None:
    start = time.perf_counter()
    launch = _Launch(self, buffers, global_size, local_size, vals)
    with np.errstate(all="ignore"): launch.run()
    return time.perf_counter() - start if wait else None

  def __repr__(self) -> str: return f"<PythonProgram {self.name}>"


def create_device() -> Compiled:
  return Compiled("PYTHON", PythonAllocator(), PythonCompiler(), PythonRenderer(), PythonProgram)
