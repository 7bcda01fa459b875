"""The user's source line behind each tensor op, captured only when someone will read it.

Input: the tensor-graph node each `Function.apply` builds (while `minigrad.viz.capturing` is on: VIZ=1, PROFILE=1 or
DEBUG>=3). Output: for a node, the first frame outside the minigrad package that asked for it: (file, line, code,
the minigrad call it made, e.g. "softmax", and the innermost public Tensor method on the way, e.g. "max" inside
softmax). The table has weak keys: an entry dies with its node. `op_name` spells a SourceLine as the op it names in
generated kernels and errors ("softmax: max", "@", "exp").
"""
from __future__ import annotations
from typing import NamedTuple
import linecache
import os
import sys
import weakref
from minigrad.uop.ops import UOp

PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


class SourceLine(NamedTuple):
  file: str
  line: int
  code: str
  call: str   # the minigrad function the user's line called (the outermost minigrad frame): "softmax", "__add__"
  inner: str = ""   # the innermost public Tensor method on the way (a softmax's "max", "sum"), "" when it is `call`
  gradient_of: str = ""   # in a backward pass: the op whose derivative is being built ("Relu", "Mul": minigrad/tensor/function.py)

  def __str__(self) -> str: return f"{os.path.basename(self.file)}:{self.line} {self.code}"

  @property
  def place(self) -> str: return f"{os.path.basename(self.file)}:{self.line}"


created_at: weakref.WeakKeyDictionary[UOp, SourceLine] = weakref.WeakKeyDictionary()


TENSOR_FILES = PACKAGE_DIR + "tensor" + os.sep   # the Tensor API package: minigrad/tensor/
FUNCTION_FILE = PACKAGE_DIR + "tensor/function.py"   # the differentiable primitives, whose `backward` builds gradients
# how the Tensor methods behind Python's operators are named in kernels and errors
OPERATORS = {"add": "+", "sub": "-", "mul": "*", "truediv": "/", "floordiv": "//", "matmul": "@", "pow": "**", "mod": "%",
             "neg": "neg", "lt": "<", "gt": ">", "le": "<=", "ge": ">=", "eq": "==", "ne": "!=", "and": "&", "or": "|",
             "xor": "^", "invert": "~", "lshift": "<<", "rshift": ">>", "getitem": "[]", "setitem": "[]="}


def _tensor_method(code) -> bool:
  """A public method of the Tensor class or a mixin of it (not a helper like `_reduce`, nor a function inside one,
  nor a method of another class of the package, such as Function.apply)."""
  qualname = getattr(code, "co_qualname", None)   # Python 3.11+; before it, the bare name (a local `fn` may pass)
  owner, _, name = qualname.partition(".") if qualname is not None else ("Tensor", "", code.co_name)
  return (owner == "Tensor" or owner.endswith("Mixin")) and "." not in name and name.isidentifier() and (not name.startswith("_") or (name.startswith("__") and name.endswith("__")))


def user_line() -> SourceLine | None:
  """The innermost frame of the call stack outside the minigrad package (None when there is none)."""
  frame, call, inner, gradient_of = sys._getframe(1), "", "", ""
  while frame is not None:
    filename = frame.f_code.co_filename
    if not filename.startswith(PACKAGE_DIR):
      return SourceLine(filename, frame.f_lineno, linecache.getline(filename, frame.f_lineno).strip(), call,
                        "" if inner == call else inner, gradient_of)
    call = frame.f_code.co_name
    if not inner and filename.startswith(TENSOR_FILES) and _tensor_method(frame.f_code): inner = call
    if not gradient_of and call == "backward" and filename == FUNCTION_FILE:
      gradient_of = getattr(frame.f_code, "co_qualname", "").partition(".")[0]
    frame = frame.f_back
  return None


def _spelled(name: str) -> str:
  """`__radd__` -> `+`; other names as they are."""
  if name.startswith("__") and name.endswith("__"):
    bare = name[2:-2]
    return OPERATORS.get(bare, OPERATORS.get(bare[1:] if bare.startswith(("r", "i")) else bare, bare))
  return name


def op_name(where: SourceLine) -> str:
  """The op a captured line names: "softmax: max" (max inside softmax), "@", "exp", "relu backward: where" (relu's
  derivative, built by loss.backward()); "" when the call is unknown."""
  outer, inner = _spelled(where.call), _spelled(where.inner)
  if where.gradient_of and where.gradient_of != "Composite": outer = f"{where.gradient_of.lower()} backward"
  if _spelled(f"__{where.inner}__") == outer: inner = ""   # `a * b` calls mul: "*", not "*: mul"
  return f"{outer}: {inner}" if inner and outer else outer


def note(node: UOp) -> None:
  """Remember the user's line that built `node` (the first one, when hash-consing hands out an existing node)."""
  if node not in created_at and (where := user_line()) is not None: created_at[node] = where


def carry(old: UOp, new: UOp) -> None:
  """`new` is `old` rebuilt over other sources (the scheduler swaps earlier results for their buffers): same line."""
  if (where := created_at.get(old)) is not None and new not in created_at: created_at[new] = where


def lines_of(nodes) -> list[SourceLine]:
  """The distinct source lines that built `nodes`, in file and line order; `call` lists the calls made on each."""
  calls: dict[tuple[str, int, str], set[str]] = {}
  for n in nodes:
    if (where := created_at.get(n)) is not None: calls.setdefault(where[:3], set()).add(where.call)
  return [SourceLine(*key, ", ".join(sorted(c for c in names if c))) for key, names in sorted(calls.items())]
