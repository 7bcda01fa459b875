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
set of entries. Entries live in the "kernels" folder of minigrad.cache (trusted folders only, bounded, checksummed);
DISABLE_COMPILER_CACHE=1 turns this cache off with the compiler's.

An entry is JSON, never a pickle (a pickle runs code when read): the opts applied, the linearized uops (op, dtype,
sources, arg: None, bools, ints, strings, floats as hex, tuples, ops and dtypes by name) and the source. Loading
applies the opts to a fresh Kernel of the AST; an entry that doesn't parse or whose opts don't apply is made anew.
"""
from __future__ import annotations
from typing import Any, Callable
import functools
import hashlib
import json
import pathlib
from minigrad import cache
from minigrad.helpers import DEBUG, NOOPT
from minigrad.dtype import ALL_DTYPES, DType, PtrDType, dtypes
from minigrad.uop.ops import UOp, Ops
from minigrad.opt import heuristics
from minigrad.codegen.kernel import Kernel, Opt
from minigrad.opt.search_space import ast_key
from minigrad.runtime.device import Device

CACHE_VERSION = 2
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
  """The renderer's settings as text that is the same in every process: dicts sorted, a Target by its tuning key (its
  repr holds sets, whose order changes with each process's string hashing)."""
  def stable(value: Any) -> Any:
    if isinstance(value, dict): return sorted(value.items())
    return value.tuning_key if hasattr(value, "tuning_key") else value
  return type(renderer).__name__ + repr(sorted((name, stable(value)) for name, value in vars(renderer).items()))


def target_key(device: str) -> str:
  """What the device's Target says, for keys: "" for devices without one (GPUs, PYTHON)."""
  target = getattr(Device[device].compiler, "target", None)
  return "" if target is None else target.tuning_key


def entry_path(ast: UOp, device: str, opts: list[Opt] | None) -> pathlib.Path | None:
  """Where the rendered kernel is kept (None: no usable cache)."""
  dev = Device[device]
  text = "\0".join((f"kernels v{CACHE_VERSION}", package_version(), ast_key(ast), device, repr(opts), str(NOOPT.value),
                    str(heuristics.cpu_threads()), _renderer_settings(dev.renderer), getattr(dev.compiler, "cache_key", ""),
                    target_key(device)))
  return cache.entry("kernels", hashlib.sha256(text.encode()).hexdigest())


def load(path: pathlib.Path, fresh_kernel: Callable[[], Kernel]) -> Rendered | None:
  """The entry at `path`: `fresh_kernel()` (the AST's Kernel, no opts yet) with the stored opts applied, the uops and
  the source; None when there is none, or it is unreadable or stale."""
  if (payload := cache.read(path, "kernel")) is None: return None
  try:
    entry = json.loads(payload)
    if entry["version"] != CACHE_VERSION: raise ValueError(f"version {entry['version']}")
    kernel = fresh_kernel()
    for op, axis, amount in entry["opts"]: kernel.apply_opt(Opt(str(op), int(axis), int(amount)))
    return kernel, decode_uops(entry["uops"]), str(entry["source"])
  except Exception as e:   # written by another version, damaged inside its checksum, or crafted: made anew
    if DEBUG >= 1: print(f"kernel cache: unusable entry {path} ({type(e).__name__}: {e}), made anew")
    return None


def store(path: pathlib.Path, rendered: Rendered) -> None:
  kernel, uops, source = rendered
  try: uop_list = encode_uops(uops)
  except TypeError: return   # an arg this format doesn't spell: made anew each time
  entry = {"version": CACHE_VERSION, "opts": [[o.op, o.axis, o.amount] for o in kernel.applied_opts], "uops": uop_list, "source": source}
  cache.write(path, json.dumps(entry).encode(), "kernel")


# ---------------------------------------------------------------- linearized uops as JSON

_DTYPES_BY_NAME = {dt.name: dt for dt in ALL_DTYPES + (dtypes.void,)}


def encode_uops(uops: list[UOp]) -> list[list]:
  """Each uop as [op name, dtype, [source positions], arg]; sources come before their users."""
  position = {u: i for i, u in enumerate(uops)}
  return [[u.op.name, _encode_dtype(u.dtype), [position[s] for s in u.src], _encode_arg(u.arg)] for u in uops]


def decode_uops(rows: list) -> list[UOp]:
  uops: list[UOp] = []
  for op, dt, srcs, arg in rows:
    if any(not isinstance(i, int) or not 0 <= i < len(uops) for i in srcs): raise ValueError(f"bad sources {srcs}")
    uops.append(UOp(Ops[op], _decode_dtype(dt), tuple(uops[i] for i in srcs), _decode_arg(arg)))
  return uops


def _encode_dtype(dt: DType) -> Any:
  if isinstance(dt, PtrDType): return {"ptr": _encode_dtype(dt.base), "local": dt.local}
  return dt.name if dt.count == 1 else [dt.scalar().name, dt.count]


def _decode_dtype(value: Any) -> DType:
  if isinstance(value, dict): return _decode_dtype(value["ptr"]).ptr(local=bool(value["local"]))
  if isinstance(value, list): return _DTYPES_BY_NAME[value[0]].vec(int(value[1]))
  return _DTYPES_BY_NAME[value]


def _encode_arg(arg: Any) -> Any:
  if arg is None or isinstance(arg, (bool, str)): return arg
  if isinstance(arg, int): return arg
  if isinstance(arg, float): return {"f": float(arg).hex()}
  if isinstance(arg, tuple): return {"t": [_encode_arg(a) for a in arg]}
  if isinstance(arg, Ops): return {"op": arg.name}
  if isinstance(arg, DType): return {"dt": _encode_dtype(arg)}
  raise TypeError(f"a uop arg of type {type(arg).__name__} has no JSON form")


def _decode_arg(value: Any) -> Any:
  if value is None or isinstance(value, (bool, int, str)): return value
  if isinstance(value, dict) and len(value) == 1:
    (tag, inner), = value.items()
    if tag == "f": return float.fromhex(inner)
    if tag == "t": return tuple(_decode_arg(a) for a in inner)
    if tag == "op": return Ops[inner]
    if tag == "dt": return _decode_dtype(inner)
  raise ValueError(f"not a uop arg: {value!r}")
