"""Model state: find the Tensors inside a model, name them, save and load them as safetensors files.

Input: any Python object holding Tensors in attributes, lists, tuples and dicts (layers, models, optimizers).
Output: `get_parameters` (the trainable Tensors), `get_state_dict` ({"layers.0.weight": Tensor}),
`load_state_dict` (checked, all-or-nothing), `safe_save` / `safe_load` (files torch's safetensors reads), and
`assign`, which rebinds a Tensor to a new value of the same shape and dtype.

bfloat16 tensors can't be saved or loaded here: the safetensors numpy API has no bfloat16.
"""
from __future__ import annotations
from typing import Any, Iterator, Mapping
import os
import types
import numpy as np
from minigrad.tensor import Tensor


def assign(target: Tensor, value: Tensor) -> Tensor:
  """`target.assign(value)`: make target hold value from now on (see Tensor.assign)."""
  return target.assign(value)


# ---------------------------------------------------------------- walking objects

def _children(obj: Any) -> Iterator[tuple[str, Any]]:
  """(name, child) pairs to walk into: list/tuple items by index, dict items by key, object attributes."""
  if isinstance(obj, (list, tuple)): yield from ((str(i), v) for i, v in enumerate(obj))
  elif isinstance(obj, dict): yield from ((str(k), v) for k, v in obj.items())
  elif hasattr(obj, "__dict__") and not isinstance(obj, (type, types.ModuleType, types.FunctionType, types.MethodType)):
    yield from vars(obj).items()


def _walk(obj: Any, prefix: str, path: set[int]) -> Iterator[tuple[str, Tensor]]:
  if isinstance(obj, Tensor):
    yield prefix.rstrip("."), obj
    return
  if id(obj) in path: return   # a reference cycle (e.g. a layer pointing at its parent)
  path.add(id(obj))
  for name, child in _children(obj):
    if isinstance(child, (Tensor, list, tuple, dict)) or hasattr(child, "__dict__"): yield from _walk(child, f"{prefix}{name}.", path)
  path.discard(id(obj))


def get_state_dict(obj: Any, prefix: str = "") -> dict[str, Tensor]:
  """Every Tensor reachable from obj, named by its path: {"layers.0.weight": ..., "bn.running_mean": ...}.
  Includes buffers (BatchNorm running stats); a Tensor reachable by two paths (tied weights) appears under both."""
  return dict(_walk(obj, prefix, set()))


def get_parameters(obj: Any) -> list[Tensor]:
  """The trainable Tensors (requires_grad=True) reachable from obj, each once, in state-dict order. Buffers
  such as BatchNorm running stats are not parameters (as torch's module.parameters())."""
  seen: dict[int, Tensor] = {}
  for _, t in _walk(obj, "", set()):
    if t.requires_grad and id(t) not in seen: seen[id(t)] = t
  return list(seen.values())


def load_state_dict(obj: Any, state: Mapping[str, Tensor | np.ndarray], strict: bool = True) -> None:
  """Assign state's values to obj's tensors of the same names. Raises RuntimeError naming the keys when strict
  and keys are missing or unexpected, or (always) when shapes differ; in that case nothing is assigned.
  Values are cast to the target's dtype (as torch's copy_ does)."""
  own = get_state_dict(obj)
  missing = [k for k in own if k not in state]
  unexpected = [k for k in state if k not in own]
  problems = []
  if strict and missing: problems.append(f"Missing key(s) in state_dict: {', '.join(repr(k) for k in missing)}.")
  if strict and unexpected: problems.append(f"Unexpected key(s) in state_dict: {', '.join(repr(k) for k in unexpected)}.")
  values: dict[str, Tensor] = {}
  for name, target in own.items():
    if name not in state: continue
    value = state[name]
    if isinstance(value, np.ndarray): value = _from_numpy(value)
    if not isinstance(value, Tensor): problems.append(f"value for {name!r} is a {type(value).__name__}, not a Tensor")
    elif value.shape != target.shape:
      problems.append(f"size mismatch for {name}: copying a param with shape {value.shape} from checkpoint, "
                      f"the shape in current model is {target.shape}.")
    else: values[name] = value
  if problems: raise RuntimeError(f"Error(s) in loading state_dict for {type(obj).__name__}:\n\t" + "\n\t".join(problems))
  for name, value in values.items():
    target = own[name]
    assign(target, value.to(target.device).cast(target.dtype))


# ---------------------------------------------------------------- safetensors files

def _from_numpy(array: np.ndarray) -> Tensor:
  # built 1-d then reshaped: Tensor(0-d array) comes out with shape (1,) (see the report / tests)
  return Tensor(np.ascontiguousarray(array).reshape(-1)).reshape(array.shape)


def safe_save(state_dict: Mapping[str, Tensor], path: str | os.PathLike, metadata: Mapping[str, str] | None = None) -> None:
  """Write tensors to a .safetensors file (readable by safetensors.torch.load_file). The file is written to a
  temporary name and renamed, so a crash never leaves a half-written file under `path`."""
  from safetensors.numpy import save_file
  arrays: dict[str, np.ndarray] = {}
  for name, t in state_dict.items():
    if not isinstance(name, str): raise TypeError(f"safe_save: keys must be strings, got {name!r}")
    if not isinstance(t, Tensor): raise TypeError(f"safe_save: value for {name!r} is a {type(t).__name__}, not a Tensor")
    if t.dtype.fmt is None: raise NotImplementedError(f"safe_save: {name!r} has dtype {t.dtype}, which the safetensors numpy API can't store")
    arrays[name] = t.numpy().copy(order="C")   # (np.ascontiguousarray would make 0-d arrays 1-d)
  if metadata is not None and not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
    raise TypeError(f"safe_save: metadata must map str to str, got {dict(metadata)!r}")
  path = os.fspath(path)
  temporary = f"{path}.tmp{os.getpid()}"
  try:
    save_file(arrays, temporary, metadata=dict(metadata) if metadata is not None else None)
    os.replace(temporary, path)
  finally:
    if os.path.exists(temporary): os.remove(temporary)


def safe_load(path: str | os.PathLike) -> dict[str, Tensor]:
  """Read every tensor of a .safetensors file. A missing, truncated or corrupt file raises (FileNotFoundError or
  ValueError naming the file) before any Tensor is made."""
  from safetensors.numpy import load_file
  path = os.fspath(path)
  if not os.path.isfile(path): raise FileNotFoundError(f"safe_load: no such file {path!r}")
  try: arrays = load_file(path)
  except Exception as e:   # SafetensorError (bad header, truncated data), unsupported dtypes, ...
    raise ValueError(f"safe_load: {path!r} is not a valid safetensors file ({type(e).__name__}: {e})") from e
  return {name: _from_numpy(array) for name, array in arrays.items()}


def safe_metadata(path: str | os.PathLike) -> dict[str, str]:
  """The string metadata stored in a .safetensors file header ({} when there is none)."""
  from safetensors import safe_open
  path = os.fspath(path)
  try:
    with safe_open(path, framework="np") as f: return dict(f.metadata() or {})
  except Exception as e: raise ValueError(f"safe_metadata: {path!r} is not a valid safetensors file ({type(e).__name__}: {e})") from e
