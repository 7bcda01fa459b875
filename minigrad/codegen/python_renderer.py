"""The PYTHON renderer: linearized UOps -> a readable program text that the PYTHON device interprets.

Input: the linearizer's list of GPU-shaped UOps (SPECIAL workgroup/thread ids, DEFINE_LOCAL, BARRIER, scalar
dtypes only) and a kernel name. Output: program text, one line per uop, each uop numbered by its position:

  %7 = DEFINE_LOCAL float*local ["temp0", 4]
  %14 = RANGE int (%1, %11) [1, "reduce"]
  %19 = ADD float (%13, %18)

that is `%<number> = <op> <dtype> (<sources>) <arg as JSON>`; the sources and the arg are left out when there are
none. Pointer dtypes are spelled `float*` (global memory) and `float*local` (workgroup memory). Lines starting with
`#` are comments (the header names the kernel and its buffers). `parse_program` reads the text back into
`Instruction`s, checking that it is well formed; the PYTHON device's compiler stores those as its binary.
"""
from __future__ import annotations
from dataclasses import dataclass
from typing import Any
import json
import re
from minigrad.dtype import ALL_DTYPES, DType, PtrDType, dtypes
from minigrad.uop.ops import UOp, Ops, GroupOp

# the ops a PYTHON program may hold; everything else (vectors, IF) is refused when rendering
PROGRAM_OPS = GroupOp.ALU | {Ops.DEFINE_GLOBAL, Ops.DEFINE_VAR, Ops.DEFINE_LOCAL, Ops.SPECIAL, Ops.CONST, Ops.RANGE,
                             Ops.ENDRANGE, Ops.INDEX, Ops.LOAD, Ops.STORE, Ops.BARRIER, Ops.DEFINE_ACC, Ops.ASSIGN,
                             Ops.CAST, Ops.BITCAST}
# how many sources each op takes: (fewest, most)
SOURCE_COUNTS: dict[Ops, tuple[int, int]] = {
  **{op: (1, 1) for op in GroupOp.Unary}, **{op: (2, 2) for op in GroupOp.Binary}, **{op: (3, 3) for op in GroupOp.Ternary},
  Ops.DEFINE_GLOBAL: (0, 0), Ops.DEFINE_VAR: (0, 0), Ops.DEFINE_LOCAL: (0, 0), Ops.SPECIAL: (0, 0), Ops.CONST: (0, 0),
  Ops.RANGE: (2, 2), Ops.ENDRANGE: (1, 1), Ops.INDEX: (2, 3), Ops.LOAD: (1, 2), Ops.STORE: (2, 2), Ops.BARRIER: (0, 99),
  Ops.DEFINE_ACC: (1, 1), Ops.ASSIGN: (2, 2), Ops.CAST: (1, 1), Ops.BITCAST: (1, 1),
}
SCALAR_DTYPES: dict[str, DType] = {dt.name: dt for dt in (dtypes.void,) + ALL_DTYPES}
_LINE = re.compile(r"%(\d+) = ([A-Z_0-9]+) (\S+)(?: \(([^)]*)\))?(?: (.+))?$")


@dataclass(frozen=True)
class Instruction:
  """One uop of a program: `srcs` are the numbers of earlier instructions."""
  op: Ops
  dtype: DType
  srcs: tuple[int, ...]
  arg: Any


class ProgramError(ValueError):
  """A PYTHON program text that is not well formed (unknown op or dtype, a source used before it is defined ...)."""


def dtype_text(dt: DType) -> str:
  if isinstance(dt, PtrDType): return f"{dtype_text(dt.base)}*{'local' if dt.local else ''}"
  if dt.count != 1: raise NotImplementedError(f"the PYTHON device has no vector dtypes ({dt})")
  return dt.name


def parse_dtype(text: str) -> DType:
  if text.endswith("*") or text.endswith("*local"):
    base, _, where = text.partition("*")
    return parse_dtype(base).ptr(local=where == "local")
  if text not in SCALAR_DTYPES: raise ProgramError(f"unknown dtype {text!r}; known: {', '.join(SCALAR_DTYPES)}")
  return SCALAR_DTYPES[text]


def arg_from_json(value: Any) -> Any:
  """A uop arg as JSON gave it back: lists become the tuples they were."""
  return tuple(arg_from_json(v) for v in value) if isinstance(value, list) else value


class PythonRenderer:
  """Renders linearized GPU-shaped UOps as PYTHON program text (see the module docstring)."""
  device = "PYTHON"
  has_local = True
  vector_lanes = False
  threaded_outer_loop = False

  def render(self, name: str, uops: list[UOp], notes: dict[UOp, str] | None = None) -> str:
    """The program text. `notes` (uop -> text; minigrad/viz/kernel_comments.py) adds a `# text` line before a uop
    whose note differs from the last one written."""
    last_note = ""
    number = {u: i for i, u in enumerate(uops)}
    written = {u.src[0].src[0].arg for u in uops if u.op is Ops.STORE and u.src[0].src[0].op is Ops.DEFINE_GLOBAL}
    buffers = ", ".join(f"data{u.arg}: {dtype_text(u.dtype)}{' (written)' if u.arg in written else ''}"
                        for u in sorted((u for u in uops if u.op is Ops.DEFINE_GLOBAL), key=lambda u: u.arg))
    lines = [f"# kernel {name}", f"# {buffers}"]
    for i, u in enumerate(uops):
      if u.op not in PROGRAM_OPS: raise NotImplementedError(f"the PYTHON renderer can't render {u.op} (uop {i} of kernel {name})")
      missing = [s for s in u.src if s not in number or number[s] >= i]
      if missing: raise ValueError(f"kernel {name}: uop {i} ({u.op.name}) uses a uop that is not listed before it: {missing[0].op.name}")
      text = f"%{i} = {u.op.name} {dtype_text(u.dtype)}"
      if u.src: text += " (" + ", ".join(f"%{number[s]}" for s in u.src) + ")"
      if u.arg is not None: text += " " + json.dumps(u.arg)
      if notes and (note := notes.get(u, "")) and note != last_note:
        lines.append(f"# {note}")
        last_note = note
      lines.append(text)
    return "\n".join(lines) + "\n"


def parse_program(text: str) -> list[Instruction]:
  """The instructions of a program text, checked: known ops and dtypes, the right number of sources, each source
  an earlier instruction, RANGE/ENDRANGE balanced, loads and stores through an INDEX."""
  program: list[Instruction] = []
  open_ranges: list[int] = []
  for line_number, line in enumerate(text.splitlines(), start=1):
    if not line.strip() or line.lstrip().startswith("#"): continue
    def fail(message: str) -> ProgramError: return ProgramError(f"line {line_number} ({line.strip()!r}): {message}")
    match = _LINE.match(line.strip())
    if match is None: raise fail("expected `%<n> = <OP> <dtype> [(<sources>)] [<arg>]`")
    if int(match[1]) != len(program): raise fail(f"instructions must be numbered in order, expected %{len(program)}")
    op = getattr(Ops, match[2], None)
    if op not in PROGRAM_OPS: raise fail(f"unknown op {match[2]}")
    try: dtype = parse_dtype(match[3])
    except ProgramError as e: raise fail(str(e)) from None
    srcs = tuple(int(s.strip().lstrip("%")) for s in match[4].split(",")) if match[4] else ()
    if any(s >= len(program) for s in srcs): raise fail("a source is not defined before its use")
    fewest, most = SOURCE_COUNTS[op]
    if not fewest <= len(srcs) <= most: raise fail(f"{op.name} takes {fewest}..{most} sources, got {len(srcs)}")
    try: arg = arg_from_json(json.loads(match[5])) if match[5] else None
    except json.JSONDecodeError as e: raise fail(f"bad arg: {e}") from None
    if op in (Ops.LOAD, Ops.STORE) and program[srcs[0]].op is not Ops.INDEX: raise fail(f"{op.name} needs an INDEX as its first source")
    if op is Ops.INDEX and program[srcs[0]].op not in (Ops.DEFINE_GLOBAL, Ops.DEFINE_LOCAL): raise fail("INDEX needs a buffer as its first source")
    if op is Ops.RANGE: open_ranges.append(len(program))
    if op is Ops.ENDRANGE:
      if not open_ranges or open_ranges[-1] != srcs[0]: raise fail("ENDRANGE doesn't close the innermost open RANGE")
      open_ranges.pop()
    program.append(Instruction(op, dtype, srcs, arg))
  if open_ranges: raise ProgramError(f"RANGE %{open_ranges[-1]} is never closed")
  return program
