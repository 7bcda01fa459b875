"""The user's source line behind each tensor op, captured only when someone will read it.

Input: the tensor-graph node each `Function.apply` builds (while `minigrad.viz.capturing` is on: VIZ=1, PROFILE=1 or
DEBUG>=3). Output: for a node, the first frame outside the minigrad package that asked for it: (file, line, code,
the minigrad call it made, e.g. "softmax"). The table has weak keys: an entry dies with its node.
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

  def __str__(self) -> str: return f"{os.path.basename(self.file)}:{self.line} {self.code}"


created_at: weakref.WeakKeyDictionary[UOp, SourceLine] = weakref.WeakKeyDictionary()


def user_line() -> SourceLine | None:
  """The innermost frame of the call stack outside the minigrad package (None when there is none)."""
  frame, call = sys._getframe(1), ""
  while frame is not None:
    filename = frame.f_code.co_filename
    if not filename.startswith(PACKAGE_DIR):
      return SourceLine(filename, frame.f_lineno, linecache.getline(filename, frame.f_lineno).strip(), call)
    call = frame.f_code.co_name
    frame = frame.f_back
  return None


def note(node: UOp) -> None:
  """Remember the user's line that built `node` (the first one, when hash-consing hands out an existing node)."""
  if node not in created_at and (where := user_line()) is not None: created_at[node] = where


def lines_of(nodes) -> list[SourceLine]:
  """The distinct source lines that built `nodes`, in file and line order; `call` lists the calls made on each."""
  calls: dict[tuple[str, int, str], set[str]] = {}
  for n in nodes:
    if (where := created_at.get(n)) is not None: calls.setdefault(where[:3], set()).add(where.call)
  return [SourceLine(*key, ", ".join(sorted(c for c in names if c))) for key, names in sorted(calls.items())]
