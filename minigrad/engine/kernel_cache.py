"""Kernel cache: rendered kernels kept on disk, so a new process skips choosing, lowering and rendering them.

Input: a kernel AST, its device and the opts asked for (None: the device's default choice). Output: the Kernel with
its opts applied, the linearized uops and the source text, as minigrad.engine.realize would make them, or None.

Making them is Python work, about 30 ms per kernel: 3 of the 4 seconds the small GPT of bench/model_steps.py took
for its first two (captured) training steps, every time a script started. Loading them back takes under 1 ms
each. The compiled binary itself is cached by the device compiler (keyed by the source), so a hit compiles nothing
either.

An entry is keyed by everything its result depends on: the AST (as ast_key prints it), the device, the opts, NOOPT,
the thread count the heuristics plan for, the renderer's settings (its instance attributes: the CPU's vector
features found at start-up, say), the device's Target (minigrad/target.py: its ISA `key` and the facts policy reads,
`tuning_key`; CPU and LLVM) and the source of the minigrad package itself, so that an edit to any module starts a new
set of entries. Entries live under cache_dir()/kernels; DISABLE_COMPILER_CACHE=1 turns this cache
off with the compiler's.
"""
from __future__ import annotations
from typing import Any
import functools
import hashlib
import pathlib
import pickle
from minigrad.helpers import DEBUG, NOOPT, cache_dir
from minigrad.uop.ops import UOp
from minigrad.opt import heuristics
from minigrad.codegen.kernel import Kernel, Opt
from minigrad.opt.search_space import ast_key
from minigrad.runtime.device import Device, read_cache_entry, write_cache_entry

CACHE_VERSION = 1
Rendered = tuple[Kernel, list[UOp], str]   # the kernel with its opts, its linearized uops, its source


@functools.cache
def package_version() -> str:
  """A digest of every Python file of the minigrad package: the code that made an entry."""
  root = pathlib.Path(__file__).resolve().parent.parent
  digest = hashlib.sha256()
  for path in sorted(root.rglob("*.py")):
    digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
  return digest.hexdigest()


def _renderer_settings(renderer: Any) -> str:
  settings = {name: sorted(value.items()) if isinstance(value, dict) else value for name, value in vars(renderer).items()}
  return type(renderer).__name__ + repr(sorted(settings.items()))


def target_key(device: str) -> str:
  """What the device's Target says, for keys: "" for devices without one (GPUs, PYTHON)."""
  target = getattr(Device[device].compiler, "target", None)
  return "" if target is None else target.tuning_key


def entry_path(ast: UOp, device: str, opts: list[Opt] | None) -> pathlib.Path:
  dev = Device[device]
  text = "\0".join((f"kernels v{CACHE_VERSION}", package_version(), ast_key(ast), device, repr(opts), str(NOOPT.value),
                    str(heuristics.cpu_threads()), _renderer_settings(dev.renderer), getattr(dev.compiler, "cache_key", ""),
                    target_key(device)))
  return cache_dir() / "kernels" / hashlib.sha256(text.encode()).hexdigest()


def load(path: pathlib.Path) -> Rendered | None:
  if (payload := read_cache_entry(path, "kernel")) is None: return None
  try: return pickle.loads(payload)
  except Exception as e:   # written by an incompatible Python or numpy: make it anew
    if DEBUG >= 1: print(f"kernel cache: unreadable entry {path} ({e}), made anew")
    return None


def store(path: pathlib.Path, rendered: Rendered) -> None:
  try: payload = pickle.dumps(rendered, protocol=pickle.HIGHEST_PROTOCOL)
  except RecursionError: return   # a graph too deep for pickle (thousands of chained ops): made anew each time
  write_cache_entry(path, payload, "kernel")
