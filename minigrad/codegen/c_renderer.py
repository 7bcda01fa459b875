"""The C renderer: linearized UOps -> C source text. It owns spelling only.

Input: the linearizer's list of UOps and a kernel name. Output: the source of one C function
`void name(T* restrict data0, const T* restrict data1, ...)`. Values used once are inlined into the
expression that uses them; LOADs, accumulators and values used more than once get named variables.
A renderer is a table from op to text plus a function header, so other C-like languages (OpenCL, CUDA)
subclass it and change the table.
"""
from __future__ import annotations
from typing import Callable
import math
import numpy as np
from minigrad.dtype import DType, dtypes, PtrDType, bfloat16_bits
from minigrad.uop.ops import UOp, Ops, GroupOp
from minigrad.codegen.sort_kernel import sort_call, sort_helpers
from minigrad.uop.symbolic import split_terms, _coefficient
from minigrad.codegen.cpu_patterns import prefetches, simd_idioms, int8_dots, unused_after
from minigrad.codegen.c_int8_dot import int8_dot_call, int8_dot_helpers
from minigrad.codegen.c_intrinsics import half_conversions, exp2_avx512, VECTOR_MATH, LIBMVEC, X86_INCLUDE, X86_STREAM, X86_MASKED_LOAD, X86_SQRT, X86_TRUNC, idiom_helpers


def _render_mod(a: str, b: str, dt: DType) -> str:
  """Integers: C's %. Floats: fmod, exact (the remainder of a float division is representable)."""
  if not dtypes.is_float(dt): return f"({a}%{b})"
  return f"{'fmod' if dt == dtypes.float64 else 'fmodf'}({a},{b})"


class CRenderer:
  device = "CPU"
  kernel_prefix = ""
  buffer_prefix = ""
  type_names: dict[DType, str] = {
    dtypes.bool: "_Bool", dtypes.int8: "signed char", dtypes.uint8: "unsigned char", dtypes.int16: "short",
    dtypes.uint16: "unsigned short", dtypes.int32: "int", dtypes.uint32: "unsigned int", dtypes.int64: "long long",
    dtypes.uint64: "unsigned long long", dtypes.float32: "float", dtypes.float64: "double", dtypes.float16: "_Float16",
    dtypes.bfloat16: "unsigned short",   # stored as 16-bit words; codegen.dtype_rules does bf16 math in float32
  }
  # op -> text from the rendered operands (and dtype of the result)
  code_for_op: dict[Ops, Callable[..., str]] = {
    Ops.NEG: lambda x, dt: f"(!{x})" if dt == dtypes.bool else f"(-{x})",
    Ops.SQRT: lambda x, dt: f"{'sqrt' if dt == dtypes.float64 else 'sqrtf'}({x})",
    Ops.EXP2: lambda x, dt: f"{'exp2' if dt == dtypes.float64 else 'exp2f'}({x})",
    Ops.LOG2: lambda x, dt: f"{'log2' if dt == dtypes.float64 else 'log2f'}({x})",
    Ops.SIN: lambda x, dt: f"{'sin' if dt == dtypes.float64 else 'sinf'}({x})",
    Ops.TRUNC: lambda x, dt: f"{'trunc' if dt == dtypes.float64 else 'truncf'}({x})",
    Ops.RECIP: lambda x, dt: f"(1.0{'' if dt == dtypes.float64 else 'f'}/{x})",
    Ops.ADD: lambda a, b, dt: f"({a}+{b})", Ops.MUL: lambda a, b, dt: f"({a}*{b})",
    Ops.IDIV: lambda a, b, dt: f"({a}/{b})", Ops.MOD: _render_mod, Ops.FDIV: lambda a, b, dt: f"({a}/{b})",
    # max propagates NaN (as torch does): a wins if it is NaN or bigger, else b (which may be NaN)
    Ops.MAX: lambda a, b, dt: f"((({a}!={a})|({a}>{b}))?{a}:{b})" if dtypes.is_float(dt) else f"(({a}<{b})?{b}:{a})",
    Ops.CMPLT: lambda a, b, dt: f"({a}<{b})", Ops.CMPNE: lambda a, b, dt: f"({a}!={b})",
    Ops.AND: lambda a, b, dt: f"({a}&{b})", Ops.OR: lambda a, b, dt: f"({a}|{b})", Ops.XOR: lambda a, b, dt: f"({a}^{b})",
    Ops.SHL: lambda a, b, dt: f"({a}<<{b})", Ops.SHR: lambda a, b, dt: f"({a}>>{b})",
    Ops.WHERE: lambda c, a, b, dt: f"({c}?{a}:{b})", Ops.MULACC: lambda a, b, c, dt: f"(({a}*{b})+{c})",
  }
  includes = ["#include <math.h>"]
  # CPU kernels take `core_start, core_end` for their outermost loop, so the runtime can split it over threads
  threaded_outer_loop = True
  # the innermost upcast dim becomes SIMD lanes (GCC/clang vector extensions)
  vector_lanes = True
  target = None   # the compiler's Target (the CPU device sets it): which int8 dot-product instruction it has
  # the compiler has __builtin_shufflevector (gcc 12+, clang; the CPU device asks it): vectors built from the
  # lanes of one or two others are shuffles, blocks of them transposed; without it lanes are gathered one by one
  shufflevector = True
  # how float16 is spelled; the CPU device decides it from what its compiler accepts (minigrad/runtime/ops_cpu.py):
  # "native" is C's _Float16; "f16c" and "bits" hold float16 as its 16-bit word (unsigned short), which only casts
  # convert, through float: with the F16C instructions, or with portable bit code (see half_conversions)
  float16_mode = "native"
  # set when the compiler can't compile float16 at all: why, naming the compiler (raised when a kernel uses float16)
  float16_unavailable = ""
  # a reduce's one-hot terms are added under an `if` (an embedding's gradient: one vocabulary row in V per token)
  gated_reduces = True
  repeats_operands = {Ops.MAX}
  max_inline_nesting = 12
  # loop counters and scalar int32 variables are 64-bit: under -fwrapv the compiler can't fold int index arithmetic
  # into addresses (it sign-extends every `base + ridx0 + 1024` anew: 15 of a matmul inner loop's 45 instructions).
  # int32 arithmetic that may overflow is cast back to int (render_alu), so results still wrap as int32's do
  index_type = "long"

  def type_name(self, dt: DType) -> str:
    if isinstance(dt, PtrDType): return self.type_name(dt.base) + "*"
    if dt.count > 1 and dt.scalar() == dtypes.bool: return f"mask_v{dt.count}"   # int32 lanes of -1 (true) / 0
    if dt.count > 1: return f"{self.type_name(dt.scalar()).replace(' ', '_')}_v{dt.count}"   # typedef'd by vector_typedefs
    if dt == dtypes.float16 and self.float16_unavailable: raise NotImplementedError(self.float16_unavailable)
    if dt == dtypes.float16 and self.float16_mode != "native": return "unsigned short"   # the 16-bit word
    if dt not in self.type_names: raise NotImplementedError(f"{type(self).__name__} can't render dtype {dt}")
    return self.type_names[dt]

  # Ops.SORT (a row of uint64 words sorted by their high 32 bits) is spelled as a call to a C helper (sort_kernel.py)
  sorts_rows = True
  # GPU-shaped kernels (workgroup/thread ids, local memory, barriers): spelled by the OpenCL/CUDA subclasses
  has_local = False
  barrier = ""

  def render_special(self, u: UOp) -> str: raise NotImplementedError(f"{type(self).__name__} has no workgroups ({u.arg[0]})")
  def render_local(self, name: str, dt: DType, size: int) -> str: raise NotImplementedError(f"{type(self).__name__} has no local memory")

  def render_const(self, value: float | int | bool, dt: DType) -> str:
    if dtypes.is_bool(dt): return "1" if value else "0"
    if dt == dtypes.bfloat16: return f"(({self.type_name(dt)}){bfloat16_bits(value):#06x})"   # the 16-bit word
    if dt == dtypes.float16 and self.float16_mode != "native": return f"(({self.type_name(dt)}){float16_bits(value):#06x})"
    if dtypes.is_float(dt):
      if math.isnan(value): return "NAN"
      if math.isinf(value): return ("-" if value < 0 else "") + "INFINITY"
      if dt == dtypes.float64: return repr(float(value))
      text = str(np.float32(value))
      if "e" not in text and "." not in text and "n" not in text: text += ".0"
      return f"{text}f" if dt == dtypes.float32 else f"(({self.type_name(dt)}){text}f)"
    if dt == dtypes.int64 and value == dtypes.min(dtypes.int64): return "(-9223372036854775807ll-1)"
    if dt in (dtypes.int64,): return f"{int(value)}ll"
    if dt in (dtypes.uint64,): return f"{int(value)}ull"
    if dt in (dtypes.uint32,): return f"{int(value)}u"
    if dt == dtypes.int32 and value == dtypes.min(dtypes.int32): return "(-2147483647-1)"
    return str(int(value))

  def render_alu(self, u: UOp, src: list[str]) -> str:
    """An ALU op on the rendered operands `src`."""
    expr = self.code_for_op[u.op](*src, u.src[0].dtype if u.op in GroupOp.Comparison else u.dtype)
    # C computes char/short arithmetic in int: wrap the result back to its width at once
    if u.dtype in SMALL_INTS and u.op not in GroupOp.Comparison: expr = self.render_cast(expr, u.dtype)
    # int32 operands may be 64-bit (index_type): wrap a result that may leave int32's range as int32 arithmetic does
    elif u.dtype == dtypes.int32 and self.index_type != "int" and (u.op is Ops.MULACC or u.op in (Ops.ADD, Ops.MUL, Ops.NEG, Ops.SHL) and _may_overflow(u)):
      expr = self.render_cast(expr, u.dtype)
    return expr

  def render_cast(self, x: str, dt: DType, from_dt: DType | None = None) -> str:
    if self.float16_mode != "native" and dtypes.float16 in (dt, from_dt) and dt != from_dt:   # float16 words convert through float
      if from_dt == dtypes.float16:
        x, from_dt = f"half_to_float({x})", dtypes.float32
        if dt == dtypes.float32: return x
      if dt == dtypes.float16: return f"float_to_half({x if from_dt == dtypes.float32 else self.render_cast(x, dtypes.float32)})"
    return f"(({self.type_name(dt)})({x}))"

  def render_bitcast(self, x: str, from_dt: DType, to_dt: DType) -> str:
    """Reinterpret the bits of `x` (same size) through a union, which C defines for this."""
    source, target = self.type_name(from_dt), self.type_name(to_dt)
    if source == target: return x
    return f"((union {{ {source} from; {target} to; }}){{.from = {x}}}.to)"

  def kernel_header(self, name: str, globals_: list[UOp], written: set[int], variables: list[UOp]) -> str:
    params = []
    for g in globals_:
      const = "" if g.arg in written else "const "
      params.append(f"{const}{self.type_name(g.dtype.base)}* restrict {self.buffer_prefix}data{g.arg}")
    params += [f"const int {v.arg[0]}" for v in variables]
    return f"{self.kernel_prefix}void {name}({', '.join(params)})"

  def render(self, name: str, uops: list[UOp], notes: dict[UOp, str] | None = None) -> str:
    """The kernel's source. `notes` (uop -> text; minigrad/viz/kernel_comments.py) adds a comment line naming the ops
    before the lines that compute them, those inlined into the line included."""
    uses: dict[UOp, int] = {}
    for u in uops:
      for s in u.src: uses[s] = uses.get(s, 0) + 1
    # operands an op's text repeats (max is `a<b?b:a`) get a variable, or nested maxes grow exponentially
    repeated = {s for u in uops if u.op in self.repeats_operands or (u.op is Ops.WHERE and u.dtype.count > 1) for s in u.src}
    nesting: dict[UOp, int] = {}   # depth of an inlined expression; deep ones get a variable
    names: dict[UOp, str] = {}
    counters: dict[str, int] = {}
    lines: list[str] = []
    depth = 1
    globals_ = sorted((u for u in uops if u.op is Ops.DEFINE_GLOBAL), key=lambda u: u.arg)
    written = {u.src[0].src[0].arg for u in uops if u.op is Ops.STORE}
    streamed = self.streamed_stores(uops)
    prefetched = prefetches(uops, self.threaded_outer_loop) if self.vector_lanes else {}
    idioms = simd_idioms(uops) if self.vector_lanes else {}
    dots = int8_dots(uops, self.target) if self.vector_lanes else {}
    unused = unused_after(uops, dots)   # what the dot products replace
    transposes = transposed_rows(uops) if self.vector_lanes and self.shufflevector else {}
    transposed: dict[tuple[UOp, ...], list[str]] = {}
    blended = self.blended_maxes(uops)

    def fresh(prefix: str) -> str:
      counters[prefix] = counters.get(prefix, 0) + 1
      return f"{prefix}{counters[prefix] - 1}"

    def line(text: str) -> None: lines.append("  " * depth + text)

    inlined_notes: dict[UOp, tuple[str, ...]] = {}   # with notes: those of an expression not yet on a line of its own
    last_note: list[tuple[str, ...]] = [()]

    def comment(u: UOp, first_line: int) -> None:
      """Before the lines `u` added (from `first_line` on), the notes of `u` and of the operands inlined into them."""
      here = tuple(dict.fromkeys([n for s in u.src for n in inlined_notes.get(s, ())] + ([notes[u]] if u in notes else [])))
      if len(lines) == first_line:
        if here: inlined_notes[u] = here
      elif here and here != last_note[0]:
        indent = lines[first_line][:len(lines[first_line]) - len(lines[first_line].lstrip())]
        lines.insert(first_line, f"{indent}/* {'; '.join(here).replace('*/', '* /')} */")
        last_note[0] = here

    for u in uops:
      if u in unused: continue
      first_line = len(lines)
      src = [names.get(s, "") for s in u.src]
      if u.op is Ops.DEFINE_GLOBAL: names[u] = f"{self.buffer_prefix}data{u.arg}"
      elif u.op is Ops.DEFINE_VAR: names[u] = u.arg[0]
      elif u.op is Ops.SPECIAL: names[u] = self.render_special(u)
      elif u.op is Ops.DEFINE_LOCAL:
        names[u] = u.arg[0]
        line(self.render_local(u.arg[0], u.dtype.base, u.arg[1]))
      elif u.op is Ops.BARRIER: line(self.barrier)
      elif u.op is Ops.CONST: names[u] = self.render_vector_const(u.arg, u.dtype)
      elif u.op is Ops.RANGE:
        var = fresh("ridx" if u.arg[1] == "reduce" else "gidx")
        names[u] = var
        line(f"for ({self.index_type} {var} = {src[0]}; {var} < {src[1]}; {var}++) {{")
        depth += 1
      elif u.op is Ops.ENDRANGE or u.op is Ops.ENDIF:
        depth -= 1
        line("}")
      elif u.op is Ops.IF:
        line(f"if ({_strip(src[0])}) {{")
        depth += 1
      elif u.op is Ops.INDEX: names[u] = f"{src[0]}[{_strip(src[1])}]"
      elif u.op is Ops.LOAD:
        index = u.src[0]
        memory = self.vector_access(names[index], u.dtype) if u.dtype.count > 1 else names[index]
        expr = f"({names[index.src[2]]}?{memory}:{self.render_vector_const(0, u.dtype)})" if len(index.src) > 2 else memory
        if len(index.src) > 2 and index.src[2].dtype.count > 1: expr = f"load_{self.type_name(u.dtype)}_masked(&{names[index]}, {names[index.src[2]]})"
        names[u] = fresh("val")
        line(f"{self.type_name(u.dtype)} {names[u]} = {expr};")
        if u in prefetched: line(f"__builtin_prefetch(&{names[index]} + {prefetched[u]});")
      elif u.op is Ops.SORT: names[u] = ""   # spelled by the STORE of its row (minigrad/codegen/sort_kernel.py)
      elif u.op is Ops.STORE and u.src[1].op is Ops.SORT: line(sort_call(names[u.src[0]], names[u.src[1].src[0].src[0]], u.src[1].arg))
      elif u.op is Ops.STORE:
        index, value = u.src
        memory = self.vector_access(names[index], value.dtype) if value.dtype.count > 1 else names[index]
        store = f"{memory} = {_strip(src[1])};"
        if u in streamed: store = f"stream_{self.type_name(value.dtype)}(&{names[index]}, {_strip(src[1])});"
        line(f"if ({names[index.src[2]]}) {store}" if len(index.src) > 2 else store)
      elif u.op is Ops.VECTORIZE and u in transposes:   # a row of a block of vectors transposed by shuffles
        block, row = transposes[u]
        if block not in transposed: transposed[block] = self.render_transpose([names[v] for v in block], block[0].dtype, fresh, line)
        names[u] = transposed[block][row]
      elif u.op is Ops.VECTORIZE and self.vector_lanes and self.shufflevector and (picked := shuffled_lanes(u)) is not None:   # of 1-2 vectors
        sources, lanes = picked
        names[u] = fresh("vec")
        line(f"{self.type_name(u.dtype)} {names[u]} = __builtin_shufflevector({names[sources[0]]}, {names[sources[-1]]}, {', '.join(map(str, lanes))});")
      elif u.op is Ops.VECTORIZE:   # bools go into masks as -1/0
        if all(x is u.src[0] for x in u.src): names[u] = self.render_broadcast(src[0], u.dtype)
        else:   # lanes gathered one by one: a variable, so the gather is written once
          names[u] = fresh("vec")
          lanes = ', '.join(f'-({x})' if u.dtype.scalar() == dtypes.bool else _strip(x) for x in src)
          line(f"{self.type_name(u.dtype)} {names[u]} = (({self.type_name(u.dtype)}){{{lanes}}});")
      elif u.op is Ops.GEP: names[u] = f"({src[0]}[{u.arg}]!=0)" if u.dtype == dtypes.bool else f"{src[0]}[{u.arg}]"

      elif u.op is Ops.DEFINE_ACC:
        names[u] = fresh("acc")
        line(f"{self.type_name(u.dtype)} {names[u]} = {src[0]};")
      elif u.op is Ops.ASSIGN:
        line(f"{src[0]} = {_strip(src[1])};")
        names[u] = src[0]
      else:
        if u in dots: expr = int8_dot_call(dots[u], names, lambda x: self.render_broadcast(x, u.dtype), self.render_vector_const(0, u.dtype))
        elif u in idioms: expr = f"{idioms[u][0]}({', '.join(names[a] for a in idioms[u][1])})"
        elif u.op is Ops.CAST and u.dtype.count > 1: expr = self.render_vector_cast(src[0], u.src[0].dtype, u.dtype)
        elif u.op is Ops.CAST: expr = self.render_cast(src[0], u.dtype, u.src[0].dtype)
        elif u.op is Ops.BITCAST and u.dtype.count > 1: expr = f"(({self.type_name(u.dtype)})({src[0]}))"   # same-size vectors reinterpret
        elif u.op is Ops.BITCAST: expr = self.render_bitcast(src[0], u.src[0].dtype, u.dtype)
        elif u.op is Ops.NEG and u.dtype.count > 1 and u.dtype.scalar() == dtypes.bool: expr = f"(~{src[0]})"   # masks are -1/0
        elif u.op in (Ops.MAX, Ops.WHERE) and u.dtype.count > 1: expr = self.render_vector_select(u, src)
        elif u in blended and u.op is Ops.MAX: expr = f"max_{self.type_name(u.dtype)}({src[0]}, {src[1]})"
        elif u in blended: expr = f"where_{self.type_name(u.dtype)}({src[0]}, {src[1]}, {src[2]})"
        elif u.op in VECTOR_MATH and u.dtype.count > 1: expr = f"{VECTOR_MATH[u.op]}_v{u.dtype.count}({src[0]})"
        elif u.op in GroupOp.ALU: expr = self.render_alu(u, src)
        else: raise NotImplementedError(f"{type(self).__name__} can't render {u.op}")
        nesting[u] = 1 + max((nesting.get(s, 0) for s in u.src), default=0)
        # short index expressions are inlined wherever used (`data1[gidx0*4+1]` reads well); anything else used
        # more than once gets a variable, so repeated use can never grow the source exponentially
        short_index = u.dtype == dtypes.index and _is_index_math(u) and len(expr) <= 40
        # an index select (a load on padding) gets a variable where it is computed: inlined into a load in an inner
        # loop, gcc branches on it there
        index_select = u.op is Ops.WHERE and u.dtype == dtypes.index
        if (uses.get(u, 0) <= 1 or short_index) and u not in repeated and not index_select and nesting[u] <= self.max_inline_nesting: names[u] = expr
        else:
          nesting[u] = 0
          names[u] = fresh("alu")
          line(f"{self.index_type if u.dtype == dtypes.int32 else self.type_name(u.dtype)} {names[u]} = {_strip(expr)};")
      if notes: comment(u, first_line)
    header = self.kernel_header(name, globals_, written, [u for u in uops if u.op is Ops.DEFINE_VAR])
    if streamed: lines += ["#if defined(__x86_64__)", "  _mm_sfence();   /* streaming stores are visible to other threads once the kernel returns */", "#endif"]
    return "\n".join(self.prelude(uops) + [header + " {"] + lines + ["}"] + self.entry_point(name, globals_, written, uops)) + "\n"

  def entry_point(self, name: str, globals_: list[UOp], written: set[int], uops: list[UOp]) -> list[str]:
    """`<name>_entry(bufs, core_start, core_end)`: the one signature the CPU thread pool calls every kernel by
    (minigrad/runtime/cpu_pool.c); the buffers come as an array of addresses, in the order of the kernel's."""
    if not self.threaded_outer_loop: return []
    args = [f"({'' if g.arg in written else 'const '}{self.type_name(g.dtype.base)}*)bufs[{i}]" for i, g in enumerate(globals_)]
    # the values of Variables (symbolic shapes) follow the buffers in the array, one int per slot, in argument order
    user_vars = [u.arg[0] for u in uops if u.op is Ops.DEFINE_VAR and u.arg[0] not in ("core_start", "core_end")]
    values = {name: f"(int)(__INTPTR_TYPE__)bufs[{len(globals_) + j}]" for j, name in enumerate(user_vars)}
    args += [values.get(u.arg[0], u.arg[0]) for u in uops if u.op is Ops.DEFINE_VAR]
    return [f"void {name}_entry(void *const *bufs, const int core_start, const int core_end) {{",
            *(["  (void)bufs;"] if not globals_ else []), f"  {name}({', '.join(args)});", "}"]

  def prelude(self, uops: list[UOp]) -> list[str]:
    """What the source needs before the kernel function: includes, type definitions, helper functions."""
    return self.includes + self.vector_typedefs(uops) + self.vector_math(uops) + self.stream_helpers(self.streamed_stores(uops)) + \
      self.masked_load_helpers(uops) + (idiom_helpers(simd_idioms(uops)) if self.vector_lanes else []) + \
      (int8_dot_helpers({step[0] for d in int8_dots(uops, self.target).values() for step in d.steps}) if self.vector_lanes else []) + self.max_helpers(uops) + \
      (half_conversions(self.float16_mode) if self.float16_mode != "native" and any(
        u.op is Ops.CAST and dtypes.float16 in (u.dtype, u.src[0].dtype) for u in uops) else []) + sort_helpers(uops)

  # ---- scalar max and where without a branch ----
  def blended_maxes(self, uops: list[UOp]) -> set[UOp]:
    """Scalar float maxes and selects spelled by helpers that blend instead of branching: gcc turns
    `(a!=a|a>b)?a:b` into jumps, and clang `c?x:0.0f` when x is a load it can sink into the branch; both mispredict
    on data (relu, the last step of a max over vector lanes: a 2x2 max pooling ran 2.5x slower; a weight gradient
    through a relu ran at a fifth of its speed). A running max (an accumulator's update) keeps the branch, which it
    predicts well."""
    if not self.vector_lanes: return set()
    running = {u.src[1] for u in uops if u.op is Ops.ASSIGN}
    return {u for u in uops if u.op in (Ops.MAX, Ops.WHERE) and u.dtype in (dtypes.float32, dtypes.float64) and u not in running}

  def max_helpers(self, uops: list[UOp]) -> list[str]:
    lines = []
    for op, dt in sorted({(u.op, u.dtype) for u in self.blended_maxes(uops)}, key=lambda x: (x[0].value, x[1].itemsize)):
      name, mask = self.type_name(dt), "int" if dt == dtypes.float32 else "long long"
      types = f"  typedef {name} v __attribute__((vector_size(16))); typedef {mask} m __attribute__((vector_size(16)));"
      if op is Ops.MAX:
        lines += [f"static inline {name} max_{name}({name} a, {name} b) {{   /* a if it is NaN or bigger, else b */", types,
                  "  v x = {a}, y = {b}; m keep = (x != x) | (x > y);", "  return ((v)(((m)x & keep) | ((m)y & ~keep)))[0];", "}"]
      else:
        lines += [f"static inline {name} where_{name}(_Bool c, {name} a, {name} b) {{   /* c ? a : b */", types,
                  f"  v x = {{a}}, y = {{b}}; m keep = {{-({mask})c}};", "  return ((v)(((m)x & keep) | ((m)y & ~keep)))[0];", "}"]
    return lines

  # ---- SIMD vectors (GCC/clang vector extensions) ----
  def vector_typedefs(self, uops: list[UOp]) -> list[str]:
    """A vector type and an unaligned twin (for loads/stores at any element offset) per vector dtype used."""
    used = {u.dtype for u in uops if u.dtype.count > 1 and not isinstance(u.dtype, PtrDType)}
    used |= {dtypes.bool.vec(d.count) for d in used if d.scalar() in (dtypes.float32, dtypes.int32, dtypes.uint32)}   # masks for vector max/where
    vector_dtypes = sorted(used, key=lambda d: (d.name, d.count))
    lines = []
    for dt in vector_dtypes:
      if dt.scalar() == dtypes.bool:   # comparison masks of float32 vectors
        lines.append(f"typedef int {self.type_name(dt)} __attribute__((vector_size({4 * dt.count})));")
        continue
      scalar, name = self.type_name(dt.scalar()), self.type_name(dt)
      lines.append(f"typedef {scalar} {name} __attribute__((vector_size({dt.itemsize})));")
      lines.append(f"typedef {scalar} {name}_unaligned __attribute__((vector_size({dt.itemsize}), aligned({dt.scalar().itemsize})));")
    return lines

  def vector_math(self, uops: list[UOp]) -> list[str]:
    """exp2/log2/sin/sqrt/trunc on float32 vectors: glibc's libmvec SIMD versions (sqrt, trunc: one x86
    instruction) where the CPU has them, else a loop over the lanes (clang 14 leaves its square roots scalar)."""
    lines = []
    used = sorted({(u.op, u.dtype.count) for u in uops if u.op in VECTOR_MATH and u.dtype.count > 1}, key=lambda x: (x[0].value, x[1]))
    if any(op in (Ops.TRUNC, Ops.EXP2, Ops.SQRT) for op, _ in used): lines += X86_INCLUDE
    for op, width in used:
      name, vec = VECTOR_MATH[op], self.type_name(dtypes.float32.vec(width))
      lines.append(f"static inline {vec} {name}_v{width}({vec} x) {{")
      fast = None
      if op is Ops.TRUNC and width in X86_TRUNC: fast = (X86_TRUNC[width][0], [f"  return {X86_TRUNC[width][1]};"])
      elif op is Ops.SQRT and width in X86_SQRT: fast = (X86_SQRT[width][0], [f"  return {X86_SQRT[width][1]};"])
      elif op is Ops.EXP2 and width == 16: fast = ("__AVX512F__", exp2_avx512(vec))
      elif op is not Ops.SQRT and op is not Ops.TRUNC and width in LIBMVEC:
        letter, feature = LIBMVEC[width]
        fast = (feature, [f"  {vec} _ZGV{letter}N{width}v_{name}({vec});", f"  return _ZGV{letter}N{width}v_{name}(x);"])
      if fast: lines += [f"#if defined(__x86_64__) && defined({fast[0]})", *fast[1], "#else"]
      lines += [f"  {vec} out;", f"  for (int i = 0; i < {width}; i++) out[i] = {name}(x[i]);", "  return out;"]
      if fast: lines.append("#endif")
      lines.append("}")
    return lines

  # ---- streaming (non-temporal) stores ----
  # an output at least this big doesn't fit the caches: full-vector stores to it go straight to memory, which
  # saves reading each cache line before overwriting it (a third of the memory traffic of a streaming kernel)
  streaming_store_bytes = 32 << 20

  def streamed_stores(self, uops: list[UOp]) -> set[UOp]:
    """Whole-vector stores of 32/64 bytes at a multiple of their width, into an output of streaming size."""
    def streams(store: UOp) -> bool:
      index, value = store.src
      width = value.dtype.count
      if width == 1 or value.dtype.itemsize not in X86_STREAM or len(index.src) != 2: return False
      if any(_coefficient(term)[1] % width for term in split_terms(index.src[1])): return False
      return (index.src[1].vmax + width) * value.dtype.scalar().itemsize >= self.streaming_store_bytes
    return {u for u in uops if u.op is Ops.STORE and streams(u)}

  def stream_helpers(self, streamed: set[UOp]) -> list[str]:
    lines = [*X86_INCLUDE, "#include <stdint.h>"] if streamed else []
    for dt in sorted({u.src[1].dtype for u in streamed}, key=lambda d: (d.name, d.count)):
      vec, scalar = self.type_name(dt), self.type_name(dt.scalar())
      feature, bits = X86_STREAM[dt.itemsize]
      kind = {dtypes.float32: "ps", dtypes.float64: "pd"}.get(dt.scalar())
      call = f"_mm{bits}_stream_{kind}(p, x)" if kind else f"_mm{bits}_stream_si{bits}((void*)p, (__m{bits}i)x)"
      lines += [f"static inline void stream_{vec}({scalar}* p, {vec} x) {{",
                f"#if defined(__x86_64__) && defined({feature})",   # aligned addresses only: checked here
                f"  if (((uintptr_t)p & {dt.itemsize - 1}) == 0) {{ {call}; return; }}", "#endif",
                f"  *(({vec}_unaligned*)p) = x;", "}"]
    return lines

  def masked_load_helpers(self, uops: list[UOp]) -> list[str]:
    """Vector loads whose lanes are valid or not one by one (padding): masked-off lanes read nothing (so they may
    lie outside the buffer) and give 0. One masked load instruction on x86, else a loop over the lanes."""
    lines: list[str] = []
    masked = sorted({u.dtype for u in uops if u.op is Ops.LOAD and len(u.src[0].src) > 2 and u.src[0].src[2].dtype.count > 1},
                    key=lambda d: (d.name, d.count))
    if masked: lines += X86_INCLUDE
    for dt in masked:
      vec, scalar, mask = self.type_name(dt), self.type_name(dt.scalar()), self.type_name(dtypes.bool.vec(dt.count))
      lines.append(f"static inline {vec} load_{vec}_masked(const {scalar}* p, {mask} m) {{")
      fast = X86_MASKED_LOAD.get((dt.scalar(), dt.count))
      if fast: lines += [f"#if defined(__x86_64__) && defined({fast[0]})", f"  return ({vec}){fast[1]};", "#else"]
      lines += [f"  {vec} out;", f"  for (int i = 0; i < {dt.count}; i++) out[i] = m[i] ? p[i] : 0;", "  return out;"]
      if fast: lines.append("#endif")
      lines.append("}")
    return lines

  def render_vector_cast(self, x: str, source: DType, target: DType) -> str:
    """Lane-wise conversion; a mask (-1/0 lanes) converts as the bools it holds (true -> 1), and a value
    becomes a mask by comparing with zero."""
    if source.scalar() == dtypes.bool and target.scalar() == dtypes.float32:   # the bits of 1.0f where true: one AND
      return f"(({self.type_name(target)})(({x})&(({self.type_name(source)}){{0}}+0x3f800000)))"
    if self.float16_mode != "native" and dtypes.float16 in (source.scalar(), target.scalar()):   # words would convert as integers
      raise NotImplementedError(f"{type(self).__name__} holds float16 as 16-bit words and has no vector conversion for {source} -> {target}")
    if source.scalar() == dtypes.bool: return f"__builtin_convertvector(-({x}), {self.type_name(target)})"
    if target.scalar() == dtypes.bool: return f"({x}!={self.render_vector_const(0, source)})"
    return f"__builtin_convertvector({x}, {self.type_name(target)})"

  def vector_access(self, element: str, dt: DType) -> str:
    """The dt-wide vector in memory starting at `element` (e.g. data1[i])."""
    return f"(*(({self.type_name(dt)}_unaligned*)&{element}))"

  def render_vector_select(self, u: UOp, src: list[str]) -> str:
    """where(mask, a, b) on vectors is a bitwise blend; max(a, b) blends on (a is NaN or a > b), like the scalar."""
    mask_type, vec_type = self.type_name(dtypes.bool.vec(u.dtype.count)), self.type_name(u.dtype)
    if u.op is Ops.WHERE: mask, a, b = src
    else: mask, a, b = (f"(({src[0]}!={src[0]})|({src[0]}>{src[1]}))" if dtypes.is_float(u.dtype) else f"({src[0]}>{src[1]})"), src[0], src[1]
    return f"(({vec_type})(((({mask_type}){a})&{mask})|((({mask_type}){b})&~{mask})))"

  def render_vector_const(self, value: float | int | bool, dt: DType) -> str:
    if dt.count == 1: return self.render_const(value, dt)
    return self.render_broadcast(self.render_const(value, dt.scalar()), dt)

  def render_transpose(self, vectors: list[str], dt: DType, fresh: Callable[[str], str], line: Callable[[str], None]) -> list[str]:
    """Rows of the W x W block whose rows are `vectors` (W lanes each, W a power of two) transposed, in log2(W)
    rounds of two-vector shuffles: round b pairs rows r and r+b and swaps the b-lane blocks between them
    (16x16 floats: 64 shuffles, where storing lane by lane takes 256 scalar stores)."""
    width, rows, step = len(vectors), list(vectors), 1
    while step < width:
      for r in (r for r in range(width) if not r & step):
        low = [j if not j & step else width + j - step for j in range(width)]
        high = [j + step if not j & step else width + j for j in range(width)]
        pair = f"{rows[r]}, {rows[r + step]}"
        for target, lanes in ((r, low), (r + step, high)):
          rows[target] = fresh("tr")
          line(f"{self.type_name(dt)} {rows[target]} = __builtin_shufflevector({pair}, {', '.join(map(str, lanes))});")
      step *= 2
    return rows

  def render_broadcast(self, scalar: str, dt: DType) -> str:
    """One value in every lane: GCC/clang broadcast a scalar combined with a zero vector. Floats subtract +0, which
    the compiler drops (x - 0.0 is x even for -0.0; x + 0.0 is not, so it would stay an addition before the
    broadcast); masks subtract the bool from zero (true -> -1)."""
    if dt.scalar() == dtypes.bool: return f"(({self.type_name(dt)}){{0}}-(int)({scalar}))"   # GCC won't mix _Bool and vectors
    if dtypes.is_float(dt.scalar()): return f"({scalar}-({self.type_name(dt)}){{0}})"
    if dt.scalar() == dtypes.int32 and self.index_type != "int": scalar = f"(int)({scalar})"   # a 64-bit index_type value
    return f"(({self.type_name(dt)}){{0}}+{scalar})"


SMALL_INTS = (dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16)


def float16_bits(value: float) -> int:
  """The 16-bit word of the float16 nearest to `value`."""
  with np.errstate(over="ignore"): return int(np.array(value, dtype=np.float16).view(np.uint16))


def shuffled_lanes(u: UOp) -> tuple[tuple[UOp, ...], list[int]] | None:
  """A VECTORIZE whose lanes are GEPs of one or two vectors of one (non-bool) type: (the vectors, the lane numbers
  for __builtin_shufflevector, counting the second vector's lanes after the first's), else None."""
  if any(s.op is not Ops.GEP for s in u.src): return None
  sources = tuple(dict.fromkeys(s.src[0] for s in u.src))
  if len(sources) > 2 or any(v.dtype != sources[0].dtype for v in sources) or sources[0].dtype.scalar() == dtypes.bool: return None
  return sources, [s.arg + sources.index(s.src[0]) * sources[0].dtype.count for s in u.src]


def transposed_rows(uops: list[UOp]) -> dict[UOp, tuple[tuple[UOp, ...], int]]:
  """VECTORIZE rows of a transposed block (see minigrad.codegen.vectorize.transposed_stores): row l gathers lane
  l of each of W vectors of W lanes -> (the W vectors, l), for blocks whose W rows are all there."""
  rows: dict[tuple[UOp, ...], dict[int, UOp]] = {}
  for u in uops:
    width = len(u.src)
    if u.op is not Ops.VECTORIZE or width < 2 or width & (width - 1) or any(s.op is not Ops.GEP or s.arg != u.src[0].arg for s in u.src): continue
    block = tuple(s.src[0] for s in u.src)
    if len(set(block)) == width and all(v.dtype == u.dtype for v in block): rows.setdefault(block, {})[u.src[0].arg] = u
  return {u: (block, row) for block, found in rows.items() if len(found) == len(block) for row, u in found.items()}


def _strip(expr: str) -> str:
  """Drop one pair of redundant outer parentheses: `(a+b)` -> `a+b` (not `(a)+(b)`)."""
  if not (expr.startswith("(") and expr.endswith(")")): return expr
  depth = 0
  for i, ch in enumerate(expr):
    depth += ch == "("
    depth -= ch == ")"
    if depth == 0 and i != len(expr) - 1: return expr
  return expr[1:-1]


def _may_overflow(u: UOp) -> bool:
  """Can the signed result of `u` leave its dtype's range, judging by its operands' value bounds?"""
  lo, hi = dtypes.min(u.dtype), dtypes.max(u.dtype)
  bounds = [(s.vmin, s.vmax) for s in u.src]
  if u.op is Ops.NEG: return bounds[0][0] == lo
  if u.op is Ops.SHL: return bounds[0][0] < 0 or bounds[1][1] >= 8 * u.dtype.itemsize or bounds[0][1] << max(bounds[1][1], 0) > hi
  (a_lo, a_hi), (b_lo, b_hi) = bounds
  results = [a_lo + b_lo, a_hi + b_hi] if u.op is Ops.ADD else [a_lo * b_lo, a_lo * b_hi, a_hi * b_lo, a_hi * b_hi]
  return min(results) < lo or max(results) > hi


def _is_index_math(u: UOp) -> bool:
  return all(s.op in (Ops.CONST, Ops.RANGE, Ops.SPECIAL) or s.op in GroupOp.ALU for s in u.src)
