"""The LLVM renderer: linearized UOps -> LLVM IR text. It owns spelling only.

Input: the linearizer's list of UOps and a kernel name (the same list the C renderer gets). Output: the text of an
LLVM IR module with one function `void @name(ptr %data0, ptr %data1, ..., i32 %core_start, i32 %core_end)`.

How the uops are spelled:
  - every value is an SSA register named after the uop's position (`%v12`); constants are written inline;
  - a RANGE is a loop with a phi counter (header / body / latch / exit blocks), ENDRANGE closes it; IF / ENDIF
    (a reduce's one-hot term) is a conditional block; a uop the linearizer emits again inside another such block
    gets a new register;
  - accumulators (DEFINE_ACC / ASSIGN) live in stack slots (`alloca` in the entry block) that LLVM's
    optimizer turns back into registers;
  - a gated LOAD reads from a zero-filled constant instead of its address when the gate is false (no branch,
    never out of bounds); a gated STORE branches around the store;
  - vector dtypes are LLVM vectors (`<16 x float>`), masks are `<16 x i1>`; bool is `i1` in registers and a
    byte in memory; bfloat16 is carried as its 16-bit word (`i16`), since minigrad.codegen.dtype_rules
    has already turned its arithmetic into float32 math and bit operations;
  - what minigrad.codegen.cpu_patterns finds, the C renderer's way too: floor, max/min selects and x * 2**n as one
    AVX-512 instruction each, exp2 of 16 floats inline, prefetches ahead of packed panels and a softmax's next row;
  - ALU ops mean what they mean in the C renderer (which compiles with -fwrapv -ffp-contract=fast): integers
    wrap, floats may fuse a*b+c (the `contract` flag) but keep their NaN/inf semantics (no `nnan`/`ninf`).
"""
from __future__ import annotations
import re
import numpy as np
from minigrad.dtype import DType, dtypes, PtrDType, bfloat16_bits, truncate
from minigrad.uop.ops import UOp, Ops, GroupOp
from minigrad.codegen.cpu_patterns import EXP2_POLY, prefetches, simd_idioms, int8_dots, unused_after
from minigrad.codegen.llvm_int8_dot import render_int8_dot

SCALAR_TYPES: dict[DType, str] = {
  dtypes.bool: "i1", dtypes.int8: "i8", dtypes.uint8: "i8", dtypes.int16: "i16", dtypes.uint16: "i16",
  dtypes.int32: "i32", dtypes.uint32: "i32", dtypes.int64: "i64", dtypes.uint64: "i64",
  dtypes.float16: "half", dtypes.bfloat16: "i16", dtypes.float32: "float", dtypes.float64: "double",
}
FLOAT_TYPES = (dtypes.float16, dtypes.float32, dtypes.float64)   # bfloat16 is an i16 word here
SMALL_INTS = (dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16)
# float ops: the `contract` flag lets a multiply and an add become one fused multiply-add, like -ffp-contract=fast
FLOAT_BINARY = {Ops.ADD: "fadd", Ops.MUL: "fmul", Ops.FDIV: "fdiv", Ops.MOD: "frem"}   # frem is C's fmod


def contract(u: UOp) -> str:
  """The `contract` flag, except on float16 math: torch rounds it to half after each op. Half ops are computed in
  float32 between an fpext and an fptrunc; LLVM narrows such an op back to half (exact), and on a CPU with half
  arithmetic (AVX512-FP16) two contracted ones became one half FMA without the rounding in between."""
  if u.dtype.scalar() == dtypes.float16 or any(s.op is Ops.CAST and s.src[0].dtype.scalar() == dtypes.float16 for s in u.src): return ""
  return " contract"
INT_BINARY = {Ops.ADD: "add", Ops.MUL: "mul", Ops.AND: "and", Ops.OR: "or", Ops.XOR: "xor", Ops.SHL: "shl"}
BOOL_BINARY = {Ops.ADD: "or", Ops.MUL: "and", Ops.MAX: "or", Ops.AND: "and", Ops.OR: "or", Ops.XOR: "xor"}
INTRINSICS = {Ops.EXP2: "exp2", Ops.LOG2: "log2", Ops.SIN: "sin", Ops.SQRT: "sqrt", Ops.TRUNC: "trunc"}
# float32 vector math glibc's libmvec has (LLVM would otherwise split a vector exp2 into one exp2f call per lane)
LIBMVEC_FUNCTIONS = {Ops.EXP2: "exp2f", Ops.LOG2: "log2f", Ops.SIN: "sinf"}


def llvm_type(dt: DType) -> str:
  """The LLVM type of a value of dtype `dt` in registers (`float`, `<16 x float>`, `i1` for bool, `ptr`)."""
  if isinstance(dt, PtrDType): return "ptr"
  if dt.scalar() not in SCALAR_TYPES: raise NotImplementedError(f"LLVMRenderer can't render dtype {dt}")
  scalar = SCALAR_TYPES[dt.scalar()]
  return f"<{dt.count} x {scalar}>" if dt.count > 1 else scalar


def memory_type(dt: DType) -> str:
  """The LLVM type of `dt` in memory: bools are bytes (as numpy stores them)."""
  return llvm_type(dtypes.uint8.vec(dt.count) if dt.scalar() == dtypes.bool else dt)


def _is_float(dt: DType) -> bool: return dt.scalar() in FLOAT_TYPES


def _float_text(value: float, dt: DType) -> str:
  """A float or double constant: the shortest decimal that reads back as exactly the value (LLVM rejects a
  decimal it would have to round), with a '.' as LLVM wants it; inf and NaN as the 64-bit pattern of the double."""
  with np.errstate(over="ignore", invalid="ignore"):
    exact = np.array(value, dtype=np.float32 if dt == dtypes.float32 else np.float64).astype(np.float64)
  if not np.isfinite(exact): return f"0x{int(exact.view(np.uint64)):016X}"
  text = repr(float(exact))
  return text.replace("e", ".0e", 1) if "." not in text else text


def scalar_const(value: float | int | bool, dt: DType) -> str:
  """A scalar constant as LLVM writes it: `true`, `-7`, `0.5`, `0x7FF0000000000000` (inf), `0xH3C00` (half 1.0)."""
  if dt == dtypes.bool: return "true" if value else "false"
  if dt == dtypes.bfloat16: value, dt = bfloat16_bits(value), dtypes.int16   # the 16-bit word
  if dt == dtypes.float16:
    with np.errstate(over="ignore", invalid="ignore"): return f"0xH{int(np.array(value, dtype=np.float16).view(np.uint16)):04X}"
  if _is_float(dt): return _float_text(value, dt)
  bits = dt.itemsize * 8
  word = int(truncate(value, dt)) & ((1 << bits) - 1)
  return str(word - (1 << bits) if word >= 1 << (bits - 1) else word)   # two's complement, as LLVM prints it


def const_text(value: object, dt: DType) -> str:
  """A constant of any dtype: scalars inline, vectors as `<float 0x..., float 0x...>` (one value or one per lane)."""
  if dt.count == 1: return scalar_const(value, dt)
  lanes = value if isinstance(value, tuple) else (value,) * dt.count
  scalar = llvm_type(dt.scalar())
  texts = [scalar_const(v, dt.scalar()) for v in lanes]
  if all(t in ("0", "0.0", "false", "0xH0000") for t in texts): return "zeroinitializer"
  return "<" + ", ".join(f"{scalar} {t}" for t in texts) + ">"


def _vector_suffix(dt: DType) -> str:
  """How LLVM names a vector type in intrinsic names (in memory: bool lanes are bytes): v16f32, v8i8."""
  scalar = memory_type(dt.scalar())
  return f"v{dt.count}" + {"float": "f32", "double": "f64", "half": "f16"}.get(scalar, scalar)


def _intrinsic_suffix(dt: DType) -> str:
  scalar = {dtypes.float16: "f16", dtypes.float32: "f32", dtypes.float64: "f64"}[dt.scalar()]
  return f"v{dt.count}{scalar}" if dt.count > 1 else scalar


class LLVMRenderer:
  device = "LLVM"
  # the outermost loop runs from `core_start` to `core_end`, so the runtime can split it over threads
  threaded_outer_loop = True
  # the innermost upcast dim becomes LLVM vector lanes
  vector_lanes = True
  # CPU-shaped: loops, no workgroups or local memory
  has_local = False
  # a reduce's one-hot terms are added in a conditional block (see linearizer.one_hot_term)
  gated_reduces = True

  def __init__(self, libmvec_widths: dict[int, str] | None = None, avx512: bool = False, target=None):
    """`libmvec_widths`: vector width -> ISA letter of the libmvec variants the target can call (x86: 4 -> "b"
    with SSE2, 8 -> "d" with AVX2, 16 -> "e" with AVX-512), e.g. `_ZGVeN16v_exp2f`. None: LLVM's intrinsics.
    `avx512`: the target is x86 with AVX-512F, so exp2 of 16 floats is computed inline (as the C renderer does).
    `target`: the compiler's Target, for the int8 dot-product instruction it has (None: the plain arithmetic)."""
    self.libmvec_widths, self.avx512, self.target = dict(libmvec_widths or {}), avx512, target

  def render(self, name: str, uops: list[UOp], notes: dict[UOp, str] | None = None) -> str:
    """The kernel's module. `notes` (uop -> text; minigrad/viz/kernel_comments.py) adds a `; text` line before the
    instructions of a uop whose note differs from the last one written."""
    return _FunctionWriter(name, uops, self.libmvec_widths, self.avx512, self.target).write(notes)


# ops that fix their place: loops, memory writes (a STORE may open a basic block), definitions
_ANCHORS = (Ops.RANGE, Ops.ENDRANGE, Ops.IF, Ops.ENDIF, Ops.STORE, Ops.DEFINE_ACC, Ops.DEFINE_GLOBAL, Ops.DEFINE_VAR, Ops.DEFINE_LOCAL, Ops.SPECIAL, Ops.BARRIER)


def interleaved(uops: list[UOp]) -> list[UOp]:
  """The uops with each straight run between anchors (see _ANCHORS) sorted by dependency depth, stable. A reduce
  loop that updates several accumulators with chains of multiply-adds (a 3x3 convolution: 16 accumulators, 9
  each) then has the chains' first steps together, then their second steps, and so on: LLVM's x86 backend keeps
  the IR order, and one chain after the other would make each multiply-add wait for the previous one (the C
  compiler reorders by itself). Accumulator slots keep their order: a read of one stays before the ASSIGN that
  writes it, and a read after an ASSIGN stays after it."""
  out: list[UOp] = []
  run: list[UOp] = []

  def flush() -> None:
    depth: dict[UOp, int] = {}
    written_at: dict[UOp, int] = {}   # accumulator -> depth of its last ASSIGN in the run
    read_until: dict[UOp, int] = {}   # accumulator -> deepest read since then
    for u in run:
      d = 1 + max((depth[s] for s in u.src if s in depth), default=-1)
      reads = [a for s in (u.src[1:] if u.op is Ops.ASSIGN else u.src) if (a := s.src[0] if s.op is Ops.ASSIGN else s).op is Ops.DEFINE_ACC]
      for acc in reads: d = max(d, written_at.get(acc, -1) + 1)
      if u.op is Ops.ASSIGN:
        acc = u.src[0]
        d = max(d, read_until.get(acc, -1) + 1, written_at.get(acc, -1) + 1)
        written_at[acc], read_until[acc] = d, -1
      for acc in reads: read_until[acc] = max(read_until.get(acc, -1), d)
      depth[u] = d
    out.extend(sorted(run, key=depth.__getitem__))
    run.clear()
  for u in uops:
    if u.op in _ANCHORS:
      flush()
      out.append(u)
    else: run.append(u)
  flush()
  return out


class _FunctionWriter:
  """Writes one function. Registers are `%v<position of the uop>`; helper values get a numbered suffix (`%v12.3`)."""

  def __init__(self, name: str, uops: list[UOp], libmvec_widths: dict[int, str], avx512: bool, target=None):
    self.name, self.uops, self.libmvec_widths, self.avx512 = name, interleaved(uops), libmvec_widths, avx512
    self.idioms = simd_idioms(uops)   # single-instruction patterns: floor, max/min selects, x * 2**n
    self.dots = int8_dots(uops, target)   # int8 dot products, as the Target's instruction
    self.unused = unused_after(uops, self.dots)
    self.prefetched = prefetches(uops, LLVMRenderer.threaded_outer_loop)   # vector loads -> elements ahead to prefetch
    self.position = {u: i for i, u in enumerate(uops)}
    self.names: dict[UOp, str] = {}           # uop -> its register or inline constant
    self.slots: dict[UOp, str] = {}           # DEFINE_ACC -> its stack slot
    self.lines: list[str] = []
    self.entry_lines: list[str] = []          # allocas, which belong at the top of the entry block
    self.declarations: set[str] = set()
    self.block = "entry"                      # the basic block being written (phi nodes name their predecessors)
    self.temporaries = 0
    self.defined: set[str] = set()            # registers written so far
    self.zeros_size = 0                       # bytes of the zero constant gated loads fall back to (0: none)
    self.loop_ids: dict[UOp, str] = {}        # RANGE -> the id of its labels and counter where it was last opened
    self.opened: set[str] = set()             # the loop ids used so far

  # ---- emitting ----
  def emit(self, u: UOp, text: str, suffix: str = "") -> str:
    register = f"%v{self.position[u]}{suffix}"
    if register in self.defined:   # a uop rendered again (in each conditional block that needs it): a new register
      self.temporaries += 1
      register = f"{register}.{self.temporaries}"
    self.defined.add(register)
    self.lines.append(f"  {register} = {text}")
    return register

  def temp(self, u: UOp, text: str) -> str:
    """A helper value of uop `u` (one uop may need several instructions)."""
    self.temporaries += 1
    return self.emit(u, text, f".{self.temporaries}")

  def instruction(self, text: str) -> None: self.lines.append(f"  {text}")

  def label(self, name: str) -> None:
    self.lines.append(f"{name}:")
    self.block = name

  def value(self, u: UOp, user: UOp) -> str:
    """The operand text of `u` as `user` sees it: accumulators are read from their slot at each use."""
    acc = u.src[0] if u.op is Ops.ASSIGN else u
    if acc.op is Ops.DEFINE_ACC: return self.temp(user, f"load {llvm_type(acc.dtype)}, ptr {self.slots[acc]}")
    if u not in self.names: raise RuntimeError(f"internal error: {u.op} used before it was rendered")
    return self.names[u]

  def typed(self, u: UOp, user: UOp) -> str: return f"{llvm_type(u.dtype)} {self.value(u, user)}"

  # ---- the function ----
  def write(self, notes: dict[UOp, str] | None = None) -> str:
    last_note = ""
    for u in self.uops:
      if u in self.unused: continue   # what the int8 dot products replace
      first_line = len(self.lines)
      self.render_uop(u)
      if notes and (note := notes.get(u, "")) and note != last_note and len(self.lines) > first_line:
        self.lines.insert(first_line, f"  ; {note}")
        last_note = note
    params = []
    written = {u.src[0].src[0].arg for u in self.uops if u.op is Ops.STORE}
    for g in sorted((u for u in self.uops if u.op is Ops.DEFINE_GLOBAL), key=lambda u: u.arg):
      params.append(f"ptr noalias {'' if g.arg in written else 'readonly '}%data{g.arg}")   # noalias: C's restrict
    variables = [v.arg[0] for v in self.uops if v.op is Ops.DEFINE_VAR]
    params += [f"i32 %{name}" for name in variables]
    widest = max((u.dtype.itemsize * 8 for u in self.uops if u.dtype.count > 1 and not isinstance(u.dtype, PtrDType)), default=0)
    # without min-legal-vector-width, x86 targets that prefer 256-bit vectors split <16 x float> into halves
    attributes = f'nounwind "min-legal-vector-width"="{widest}" "no-trapping-math"="true"'
    out = []
    if self.zeros_size: out.append(f"@zeros = private unnamed_addr constant [{self.zeros_size} x i8] zeroinitializer, align 64")
    out += sorted(self.declarations)
    out.append(f"define void @{_symbol(self.name)}({', '.join(params)}) #0 {{")
    out += ["entry:"] + self.entry_lines + self.lines + ["  ret void", "}"] + self.entry_point(len(params) - len(variables), variables)
    out.append(f"attributes #0 = {{ {attributes} }}")
    return "\n".join(out) + "\n"

  def entry_point(self, buffers: int, variables: list[str]) -> list[str]:
    """`<name>_entry(bufs, core_start, core_end)`: the one signature the CPU thread pool calls every kernel by
    (minigrad/runtime/cpu_pool.c); the kernel's `buffers` come as an array of addresses, in the kernel's order."""
    lines = [f"define void @{_symbol(self.name + '_entry')}(ptr %bufs, i32 %core_start, i32 %core_end) #0 {{", "entry:"]
    for i in range(buffers): lines += [f"  %slot{i} = getelementptr inbounds ptr, ptr %bufs, i64 {i}", f"  %buf{i} = load ptr, ptr %slot{i}"]
    # the values of Variables (symbolic shapes) follow the buffers in the array, one int per slot, in argument order
    user_vars = [name for name in variables if name not in ("core_start", "core_end")]
    for j, name in enumerate(user_vars):
      lines += [f"  %vslot{j} = getelementptr inbounds ptr, ptr %bufs, i64 {buffers + j}", f"  %vptr{j} = load ptr, ptr %vslot{j}",
                f"  %{name} = ptrtoint ptr %vptr{j} to i32"]
    args = [f"ptr %buf{i}" for i in range(buffers)] + [f"i32 %{name}" for name in variables]
    return lines + [f"  call void @{_symbol(self.name)}({', '.join(args)})", "  ret void", "}"]

  def render_uop(self, u: UOp) -> None:
    op = u.op
    if op is Ops.DEFINE_GLOBAL: self.names[u] = f"%data{u.arg}"
    elif op is Ops.DEFINE_VAR: self.names[u] = f"%{u.arg[0]}"
    elif op is Ops.CONST: self.names[u] = const_text(u.arg, u.dtype)
    elif op is Ops.RANGE: self.open_loop(u)
    elif op is Ops.ENDRANGE: self.close_loop(u.src[0])
    elif op is Ops.IF:
      i = self.position[u]
      self.instruction(f"br i1 {self.value(u.src[0], u)}, label %if{i}.then, label %if{i}.end")
      self.label(f"if{i}.then")
    elif op is Ops.ENDIF:
      i = self.position[u.src[0]]
      self.instruction(f"br label %if{i}.end")
      self.label(f"if{i}.end")
    elif op is Ops.INDEX: self.names[u] = self.address(u)
    elif op is Ops.LOAD: self.names[u] = self.load(u)
    elif op is Ops.STORE: self.store(u)
    elif op is Ops.DEFINE_ACC:
      slot = self.slots[u] = f"%acc{u.arg}"
      self.entry_lines.append(f"  {slot} = alloca {llvm_type(u.dtype)}")
      self.instruction(f"store {self.typed(u.src[0], u)}, ptr {slot}")
    elif op is Ops.ASSIGN:
      self.instruction(f"store {self.typed(u.src[1], u)}, ptr {self.slots[u.src[0]]}")
    elif op is Ops.VECTORIZE: self.names[u] = self.vectorize(u)
    elif op is Ops.GEP: self.names[u] = self.emit(u, f"extractelement {self.typed(u.src[0], u)}, i32 {u.arg}")
    elif op is Ops.CAST: self.names[u] = self.cast(u, self.value(u.src[0], u), u.src[0].dtype, u.dtype)
    elif op is Ops.BITCAST: self.names[u] = self.bitcast(u)
    elif u in self.dots: self.names[u] = render_int8_dot(self, u, self.dots[u])
    elif u in self.idioms: self.names[u] = self.idiom(u, *self.idioms[u])
    elif op in GroupOp.ALU: self.names[u] = self.alu(u)
    else: raise NotImplementedError(f"LLVMRenderer can't render {op}")

  # ---- loops ----
  def open_loop(self, rng: UOp) -> None:
    i = str(self.position[rng])
    if i in self.opened: i = f"{i}.{len(self.opened)}"   # a loop opened again (the same reduce loops, a second nest)
    self.opened.add(i)
    self.loop_ids[rng] = i
    counter = self.names[rng] = f"%{'ridx' if rng.arg[1] == 'reduce' else 'gidx'}{i}"
    start, end = self.value(rng.src[0], rng), self.value(rng.src[1], rng)
    self.instruction(f"br label %loop{i}")
    entered_from = self.block
    self.label(f"loop{i}")
    self.instruction(f"{counter} = phi i32 [ {start}, %{entered_from} ], [ {counter}.next, %loop{i}.latch ]")
    self.instruction(f"{counter}.more = icmp slt i32 {counter}, {end}")
    self.instruction(f"br i1 {counter}.more, label %loop{i}.body, label %loop{i}.exit")
    self.label(f"loop{i}.body")

  def close_loop(self, rng: UOp) -> None:
    i, counter = self.loop_ids[rng], self.names[rng]
    self.instruction(f"br label %loop{i}.latch")
    self.label(f"loop{i}.latch")
    self.instruction(f"{counter}.next = add nsw i32 {counter}, 1")   # counter < end <= INT_MAX: can't overflow
    self.instruction(f"br label %loop{i}")
    self.label(f"loop{i}.exit")

  # ---- memory ----
  def address(self, index: UOp) -> str:
    buffer, offset = index.src[0], index.src[1]
    # ungated indexes are checked to stay inside their buffer before launch; a gated one may point outside
    inbounds = "inbounds " if len(index.src) == 2 else ""
    element = memory_type(buffer.dtype.base)
    return self.emit(index, f"getelementptr {inbounds}{element}, ptr {self.value(buffer, index)}, {self.typed(offset, index)}")

  def load(self, u: UOp) -> str:
    index = u.src[0]
    address, mem_type, align = self.names[index], memory_type(u.dtype), u.dtype.scalar().itemsize
    gate = index.src[2] if len(index.src) > 2 else None
    if gate is not None and gate.dtype.count > 1:   # lanes valid one by one: masked-off lanes read nothing, give 0
      function = f"@llvm.masked.load.{_vector_suffix(u.dtype)}.p0"
      self.declarations.add(f"declare {mem_type} {function}(ptr, i32, {llvm_type(gate.dtype)}, {mem_type})")
      loaded = f"call {mem_type} {function}(ptr {address}, i32 {align}, {self.typed(gate, u)}, {mem_type} zeroinitializer)"
    else:
      if gate is not None:   # one gate for the whole access: read the zero constant instead when it is false
        self.zeros_size = max(self.zeros_size, 64, u.dtype.itemsize)
        address = self.temp(u, f"select {self.typed(gate, u)}, ptr {address}, ptr @zeros")
      loaded = f"load {mem_type}, ptr {address}, align {align}"
    if u in self.prefetched:   # also fetch what a later trip reads (no inbounds: it may be past the end; prefetches never fault)
      ahead = self.temp(u, f"getelementptr {memory_type(u.dtype.scalar())}, ptr {self.names[index]}, i64 {self.prefetched[u]}")
      self.declarations.add("declare void @llvm.prefetch.p0(ptr, i32, i32, i32)")
      self.instruction(f"call void @llvm.prefetch.p0(ptr {ahead}, i32 0, i32 3, i32 1)")   # read, keep in all caches, data
    if u.dtype.scalar() != dtypes.bool: return self.emit(u, loaded)
    return self.emit(u, f"icmp ne {mem_type} {self.temp(u, loaded)}, zeroinitializer" if u.dtype.count > 1 else
                     f"icmp ne {mem_type} {self.temp(u, loaded)}, 0")

  def store(self, u: UOp) -> None:
    index, value = u.src
    text, mem_type, align = self.value(value, u), memory_type(value.dtype), value.dtype.scalar().itemsize
    if value.dtype.scalar() == dtypes.bool: text = self.temp(u, f"zext {llvm_type(value.dtype)} {text} to {mem_type}")
    gate = index.src[2] if len(index.src) > 2 else None
    if gate is not None and gate.dtype.count > 1:   # lanes written one by one
      function = f"@llvm.masked.store.{_vector_suffix(value.dtype)}.p0"
      self.declarations.add(f"declare void {function}({mem_type}, ptr, i32, {llvm_type(gate.dtype)})")
      return self.instruction(f"call void {function}({mem_type} {text}, ptr {self.names[index]}, i32 {align}, {self.typed(gate, u)})")
    store = f"store {mem_type} {text}, ptr {self.names[index]}, align {align}"
    if gate is None: return self.instruction(store)
    i = self.position[u]
    self.instruction(f"br {self.typed(gate, u)}, label %store{i}, label %store{i}.done")
    self.label(f"store{i}")
    self.instruction(store)
    self.instruction(f"br label %store{i}.done")
    self.label(f"store{i}.done")

  # ---- vectors ----
  def vectorize(self, u: UOp) -> str:
    vec_type, scalar_type = llvm_type(u.dtype), llvm_type(u.dtype.scalar())
    if all(s.op is Ops.CONST for s in u.src): return const_text(tuple(s.arg for s in u.src), u.dtype)
    if all(s is u.src[0] for s in u.src):   # one value in every lane: insert it once, then broadcast
      first = self.temp(u, f"insertelement {vec_type} poison, {self.typed(u.src[0], u)}, i32 0")
      return self.emit(u, f"shufflevector {vec_type} {first}, {vec_type} poison, <{u.dtype.count} x i32> zeroinitializer")
    vector = "poison"
    for lane, s in enumerate(u.src):
      vector = self.temp(u, f"insertelement {vec_type} {vector}, {scalar_type} {self.value(s, u)}, i32 {lane}")
    return vector

  # ---- conversions ----
  def cast(self, u: UOp, x: str, src: DType, dst: DType) -> str:
    source, target = llvm_type(src), llvm_type(dst)
    s, d = src.scalar(), dst.scalar()
    if source == target: return x   # e.g. int32 <-> uint32: the same bits
    if d == dtypes.bool:
      zero = const_text(0, src)
      return self.emit(u, f"fcmp une {source} {x}, {zero}" if _is_float(src) else f"icmp ne {source} {x}, {zero}")
    if s == dtypes.bool: return self.emit(u, f"{'uitofp' if _is_float(dst) else 'zext'} {source} {x} to {target}")
    if _is_float(src) and _is_float(dst): return self.emit(u, f"{'fpext' if d.itemsize > s.itemsize else 'fptrunc'} {source} {x} to {target}")
    if _is_float(dst): return self.emit(u, f"{'uitofp' if dtypes.is_unsigned(src) else 'sitofp'} {source} {x} to {target}")
    if _is_float(src):
      # Out-of-range conversions are undefined in C and poison in LLVM: freeze makes them an ordinary value.
      # Small and unsigned 32-bit targets convert through a wider signed int and keep the low bits, as C on x86.
      if d.itemsize < 4 or d == dtypes.uint32:
        wide = dtypes.int32 if d.itemsize < 4 else dtypes.int64
        wide_type = llvm_type(wide.vec(dst.count))
        converted = self.temp(u, f"fptosi {source} {x} to {wide_type}")
        frozen = self.temp(u, f"freeze {wide_type} {converted}")
        return self.emit(u, f"trunc {wide_type} {frozen} to {target}")
      converted = self.temp(u, f"{'fptoui' if dtypes.is_unsigned(dst) else 'fptosi'} {source} {x} to {target}")
      return self.emit(u, f"freeze {target} {converted}")
    if d.itemsize < s.itemsize: return self.emit(u, f"trunc {source} {x} to {target}")
    return self.emit(u, f"{'zext' if dtypes.is_unsigned(src) else 'sext'} {source} {x} to {target}")

  def bitcast(self, u: UOp) -> str:
    src, dst = u.src[0].dtype, u.dtype
    x = self.value(u.src[0], u)
    if src.scalar() == dtypes.bool: x, src = self.temp(u, f"zext {llvm_type(src)} {x} to {memory_type(src)}"), dtypes.uint8.vec(src.count)
    if dst.scalar() == dtypes.bool: return self.emit(u, f"icmp ne {llvm_type(src)} {x}, {const_text(0, src)}")
    if llvm_type(src) == llvm_type(dst): return x
    return self.emit(u, f"bitcast {llvm_type(src)} {x} to {llvm_type(dst)}")

  # ---- arithmetic ----
  def alu(self, u: UOp) -> str:
    op, dt = u.op, u.dtype
    args = [self.value(s, u) for s in u.src]
    ty = llvm_type(dt)
    if op is Ops.WHERE: return self.emit(u, f"select {llvm_type(u.src[0].dtype)} {args[0]}, {ty} {args[1]}, {ty} {args[2]}")
    if op in GroupOp.Comparison: return self.compare(u, args)
    if _is_float(dt): return self.float_alu(u, args)
    if dt.scalar() == dtypes.bool:
      if op is Ops.NEG: return self.emit(u, f"xor {ty} {args[0]}, {const_text(True, dt)}")
      if op in BOOL_BINARY: return self.emit(u, f"{BOOL_BINARY[op]} {ty} {args[0]}, {args[1]}")
      raise NotImplementedError(f"LLVMRenderer can't render {op} on bool")
    return self.int_alu(u, args)

  def compare(self, u: UOp, args: list[str]) -> str:
    operand = u.src[0].dtype
    ty = llvm_type(operand)
    if _is_float(operand):   # as C: a<b is false when either is NaN, a!=b is true when either is NaN
      return self.emit(u, f"fcmp {'olt' if u.op is Ops.CMPLT else 'une'} {ty} {args[0]}, {args[1]}")
    unsigned = dtypes.is_unsigned(operand) or operand.scalar() == dtypes.bool
    predicate = "ne" if u.op is Ops.CMPNE else "ult" if unsigned else "slt"
    return self.emit(u, f"icmp {predicate} {ty} {args[0]}, {args[1]}")

  def float_alu(self, u: UOp, args: list[str]) -> str:
    op, ty = u.op, llvm_type(u.dtype)
    if op in FLOAT_BINARY: return self.emit(u, f"{FLOAT_BINARY[op]}{contract(u) if op in (Ops.ADD, Ops.MUL) else ''} {ty} {args[0]}, {args[1]}")
    if op is Ops.NEG: return self.emit(u, f"fneg {ty} {args[0]}")
    if op is Ops.RECIP: return self.emit(u, f"fdiv {ty} {const_text(1.0, u.dtype)}, {args[0]}")
    if op is Ops.MULACC:
      product = self.temp(u, f"fmul{contract(u)} {ty} {args[0]}, {args[1]}")
      return self.emit(u, f"fadd{contract(u)} {ty} {product}, {args[2]}")
    if op is Ops.MAX:   # as the C renderer: a if a is NaN or a > b, else b (which may be NaN)
      mask = llvm_type(dtypes.bool.vec(u.dtype.count))
      a_is_nan = self.temp(u, f"fcmp uno {ty} {args[0]}, {args[0]}")
      a_bigger = self.temp(u, f"fcmp ogt {ty} {args[0]}, {args[1]}")
      pick_a = self.temp(u, f"or {mask} {a_is_nan}, {a_bigger}")
      return self.emit(u, f"select {mask} {pick_a}, {ty} {args[0]}, {ty} {args[1]}")
    if op is Ops.EXP2 and u.dtype == dtypes.float32.vec(16) and self.avx512: return self.exp2_avx512(u, args[0])
    if op in LIBMVEC_FUNCTIONS and u.dtype.scalar() == dtypes.float32 and u.dtype.count in self.libmvec_widths:
      function = f"@_ZGV{self.libmvec_widths[u.dtype.count]}N{u.dtype.count}v_{LIBMVEC_FUNCTIONS[op]}"
      self.declarations.add(f"declare {ty} {function}({ty})")
      return self.emit(u, f"call {ty} {function}({ty} {args[0]})")
    if op in INTRINSICS:
      function = f"@llvm.{INTRINSICS[op]}.{_intrinsic_suffix(u.dtype)}"
      self.declarations.add(f"declare {ty} {function}({ty})")
      return self.emit(u, f"call {ty} {function}({ty} {args[0]})")
    raise NotImplementedError(f"LLVMRenderer can't render {op} on {u.dtype}")

  def idiom(self, u: UOp, name: str, operands: tuple[UOp, ...]) -> str:
    """A pattern simd_idioms found, spelled so LLVM picks the one x86 instruction (the uops it replaces are left
    unused, and LLVM drops them): floor, (a > b) ? a : b (maxps), (a < b) ? a : b (minps), x * 2**n (vscalefps
    with AVX-512; else the exponent bits, as the graph built them)."""
    kind, lanes = name.rsplit("_v", 1)[0], u.dtype.count
    ty, mask = llvm_type(u.dtype), llvm_type(dtypes.bool.vec(lanes))
    args = [self.value(s, u) for s in operands]
    if kind == "floorf":
      self.declarations.add(f"declare {ty} @llvm.floor.v{lanes}f32({ty})")
      return self.emit(u, f"call {ty} @llvm.floor.v{lanes}f32({ty} {args[0]})")
    if kind in ("maxps", "minps"):
      pick_a = self.temp(u, f"fcmp {'ogt' if kind == 'maxps' else 'olt'} {ty} {args[0]}, {args[1]}")
      return self.emit(u, f"select {mask} {pick_a}, {ty} {args[0]}, {ty} {args[1]}")
    if kind == "scalef" and self.avx512 and lanes == 16: return self.scalef(u, *args)
    if kind == "scalef":   # 2**n built from its exponent bits (n integral and in range, as the C fallback)
      ints = llvm_type(dtypes.int32.vec(lanes))
      biased = self.temp(u, f"add {ints} {self.temp(u, f'fptosi {ty} {args[1]} to {ints}')}, {const_text(127, dtypes.int32.vec(lanes))}")
      power = self.temp(u, f"bitcast {ints} {self.temp(u, f'shl {ints} {biased}, {const_text(23, dtypes.int32.vec(lanes))}')} to {ty}")
      return self.emit(u, f"fmul {ty} {args[0]}, {power}")
    raise NotImplementedError(f"LLVMRenderer has no spelling for the idiom {name}")

  def scalef(self, u: UOp, x: str, n: str) -> str:
    """x * 2**n in one AVX-512 instruction (vscalefps): overflow to inf, underflow through the subnormals to 0."""
    ty = llvm_type(u.dtype)
    function = "@llvm.x86.avx512.mask.scalef.ps.512"
    self.declarations.add(f"declare {ty} {function}({ty}, {ty}, {ty}, i16, i32)")
    # rounding argument 4: the current mode (round to nearest)
    return self.emit(u, f"call {ty} {function}({ty} {x}, {ty} {n}, {ty} zeroinitializer, i16 -1, i32 4)")

  def exp2_avx512(self, u: UOp, x: str) -> str:
    """exp2 of 16 floats inline, as the C renderer's AVX-512 exp2 (the same instructions, so the same bits): x = n + f
    with n = round(x), the polynomial EXP2_POLY for 2**f, then vscalefps multiplies by 2**n (overflow to inf,
    underflow through the subnormals to 0, NaN stays NaN). Where x is an integer (or +-inf) f is 0, not inf - inf."""
    ty, mask = llvm_type(u.dtype), llvm_type(dtypes.bool.vec(16))
    self.declarations.add(f"declare {ty} @llvm.roundeven.v16f32({ty})")
    n = self.temp(u, f"call {ty} @llvm.roundeven.v16f32({ty} {x})")
    is_integer = self.temp(u, f"fcmp oeq {ty} {x}, {n}")
    f = self.temp(u, f"select {mask} {is_integer}, {ty} zeroinitializer, {ty} {self.temp(u, f'fsub {ty} {x}, {n}')}")
    p = const_text(EXP2_POLY[0], u.dtype)
    for c in EXP2_POLY[1:]: p = self.temp(u, f"fadd contract {ty} {self.temp(u, f'fmul contract {ty} {p}, {f}')}, {const_text(c, u.dtype)}")
    return self.scalef(u, p, n)

  def int_alu(self, u: UOp, args: list[str]) -> str:
    op, dt, ty = u.op, u.dtype, llvm_type(u.dtype)
    unsigned = dtypes.is_unsigned(dt)
    if op is Ops.NEG: return self.emit(u, f"sub {ty} 0, {args[0]}")
    if op is Ops.SHR: return self.emit(u, f"{'lshr' if unsigned else 'ashr'} {ty} {args[0]}, {args[1]}")
    if op is Ops.MAX:
      smaller = self.temp(u, f"icmp {'ult' if unsigned else 'slt'} {ty} {args[0]}, {args[1]}")
      return self.emit(u, f"select {llvm_type(dtypes.bool.vec(dt.count))} {smaller}, {ty} {args[1]}, {ty} {args[0]}")
    if op in (Ops.IDIV, Ops.MOD):
      instruction = ("udiv" if unsigned else "sdiv") if op is Ops.IDIV else ("urem" if unsigned else "srem")
      if dt.scalar() not in SMALL_INTS: return self.emit(u, f"{instruction} {ty} {args[0]}, {args[1]}")
      # C divides char/short as int: -128 / -1 is 128 (wrapped to -128), where an i8 division would trap
      wide = llvm_type(dtypes.int32.vec(dt.count))
      extend = "zext" if unsigned else "sext"
      a, b = (self.temp(u, f"{extend} {ty} {x} to {wide}") for x in args)
      return self.emit(u, f"trunc {wide} {self.temp(u, f'{instruction} {wide} {a}, {b}')} to {ty}")
    if op is Ops.MULACC:
      product = self.temp(u, f"mul {ty} {args[0]}, {args[1]}")
      return self.emit(u, f"add {ty} {product}, {args[2]}")
    if op in INT_BINARY:
      flag = " nsw" if op in (Ops.ADD, Ops.MUL) and _cannot_overflow(u) else ""
      return self.emit(u, f"{INT_BINARY[op]}{flag} {ty} {args[0]}, {args[1]}")
    raise NotImplementedError(f"LLVMRenderer can't render {op} on {dt}")


def _cannot_overflow(u: UOp) -> bool:
  """Do the operands' value bounds prove a signed scalar ADD/MUL stays in range? (index math: lets LLVM widen
  it into addresses). Everything else wraps, as C with -fwrapv."""
  if u.dtype.count != 1 or not dtypes.is_int(u.dtype) or dtypes.is_unsigned(u.dtype): return False
  (a_lo, a_hi), (b_lo, b_hi) = ((s.vmin, s.vmax) for s in u.src)
  results = [a_lo + b_lo, a_hi + b_hi] if u.op is Ops.ADD else [a_lo * b_lo, a_lo * b_hi, a_hi * b_lo, a_hi * b_hi]
  return dtypes.min(u.dtype) <= min(results) and max(results) <= dtypes.max(u.dtype)


def _symbol(name: str) -> str:
  return name if re.fullmatch(r"[A-Za-z_.$][A-Za-z0-9_.$]*", name) else '"' + name.replace('"', "") + '"'
