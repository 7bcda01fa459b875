"""quantize(): a model with its Linear and Conv2d layers replaced by int8 ones, calibrated on sample batches.

Input: any callable model holding nn.Linear / nn.Conv2d layers in attributes, lists, tuples and dicts (the places
nn.state.get_state_dict looks), and calibration batches (what the model is called with). Output: a copy of the model
(the float model is left as it is) with the same call interface, each layer replaced by its quantized twin
(minigrad.quantize.layers). Layers are named by their state-dict path ("layers.0", "conv1") in messages and files.

Static calibration runs the batches through a copy of the model whose layers are Observers (they record the range
of each layer's input, in float, with the float layers), then sets each input scale from max |x| or a percentile.
"""
from __future__ import annotations
from typing import Any, Callable, Iterable
import copy
import types
import numpy as np
from minigrad.tensor import Tensor
from minigrad.quantize.layers import Observer, QUANTIZED_LAYERS, REPLACEMENTS, replacement_for

MODES = ("static", "dynamic", "weight")
PERCENTILE_SAMPLES = 1 << 20   # |x| values an observer keeps per layer for a percentile


def _is_walkable(obj: Any) -> bool:
  return hasattr(obj, "__dict__") and not isinstance(obj, (type, types.ModuleType, types.FunctionType, types.MethodType,
                                                            types.BuiltinFunctionType, Tensor))


def replace_layers(obj: Any, replace: Callable[[str, Any], Any | None], prefix: str = "", memo: dict[int, Any] | None = None) -> Any:
  """`obj` with every object for which `replace(path, obj)` returns something replaced by that. Containers and objects
  on the way to a replaced one are copied (shallow: copy.copy); the rest, Tensors included, are shared with `obj`.
  An object reached twice is replaced once (tied layers stay tied); a reference cycle is followed once."""
  memo = {} if memo is None else memo
  if id(obj) in memo: return memo[id(obj)]
  path = prefix.rstrip(".")
  if (new := replace(path, obj)) is not None:
    memo[id(obj)] = new
    return new
  if isinstance(obj, (list, tuple, dict)) or _is_walkable(obj):
    memo[id(obj)] = obj   # while walking its children (cycles)
    if isinstance(obj, (list, tuple)): children = list(enumerate(obj))
    elif isinstance(obj, dict): children = list(obj.items())
    else: children = list(vars(obj).items())
    changed = {key: new for key, child in children if (new := replace_layers(child, replace, f"{prefix}{key}.", memo)) is not child}
    if not changed: return obj
    if isinstance(obj, list): result: Any = [changed.get(i, v) for i, v in children]
    elif isinstance(obj, tuple): result = type(obj)(*[changed.get(i, v) for i, v in children]) if hasattr(obj, "_fields") else tuple(changed.get(i, v) for i, v in children)
    elif isinstance(obj, dict): result = type(obj)({k: changed.get(k, v) for k, v in children})
    else:
      result = copy.copy(obj)
      for key, value in changed.items(): setattr(result, key, value)
    memo[id(obj)] = result
    return result
  return obj


def _unsupported(layers: Iterable[type]) -> None:
  for kind in layers:
    if not isinstance(kind, type) or not any(base in REPLACEMENTS for base in kind.__mro__):
      name = getattr(kind, "__name__", repr(kind))
      raise TypeError(f"quantize: can't quantize {name} layers; supported: {', '.join(t.__name__ for t in REPLACEMENTS)}")


def _call(model: Any, batch: Any) -> Any:
  """Call the model on one batch: a tuple or list is the positional arguments, a numpy array becomes a Tensor."""
  args = batch if isinstance(batch, (tuple, list)) else (batch,)
  return model(*[Tensor(a) if isinstance(a, np.ndarray) else a for a in args])


def quantize(model: Any, calibration_batches: Iterable[Any] | None = None, mode: str = "static",
             percentile: float | None = None, layers: Iterable[type] = tuple(REPLACEMENTS)) -> Any:
  """Post-training int8 quantization of `model`'s layers of the types in `layers` (nn.Linear, nn.Conv2d).

  Weights: symmetric int8, one scale per output channel. Activations, by `mode`:
    "static"   one scale per layer input, from the calibration batches: max |x| / 127, or the `percentile`-th
               percentile of |x| / 127 (e.g. 99.99: a few outliers clipped, the rest finer)
    "dynamic"  each batch's own max |x| / 127, computed as the model runs (as torch's quantize_dynamic); needs no
               calibration batches
    "weight"   weight-only: activations stay float32 and the int8 weight is cast inside the matmul (for memory-bound
               decoding); needs no calibration batches
  Returns a copy of the model with the same call interface; the float model is unchanged.

  Errors: a type in `layers` that can't be quantized (TypeError naming it); no layer to quantize, static mode
  without calibration batches, NaN in a weight or in a layer's input during calibration (ValueError naming the
  layer and batch); a percentile outside (0, 100]."""
  if mode not in MODES: raise ValueError(f"quantize: mode must be one of {MODES}, got {mode!r}")
  layers = tuple(layers)
  _unsupported(layers)
  if percentile is not None:
    if mode != "static": raise ValueError(f"quantize: percentile calibration is for mode='static', not {mode!r}")
    if not 0 < percentile <= 100: raise ValueError(f"quantize: percentile must be in (0, 100], got {percentile}")
  found: list[str] = []

  def is_target(obj: Any) -> bool: return isinstance(obj, layers) and not isinstance(obj, QUANTIZED_LAYERS)

  def collect(path: str, obj: Any) -> None:
    if is_target(obj): found.append(path)
    return None
  replace_layers(model, collect)
  if not found:
    raise ValueError(f"quantize: found no {' or '.join(t.__name__ for t in layers)} layer in {type(model).__name__} to quantize")

  scales: dict[str, float] = {}
  if mode == "static": scales = calibrate(model, calibration_batches, is_target, percentile)

  def quantized(path: str, obj: Any) -> Any | None:
    if not is_target(obj): return None
    return replacement_for(obj, mode).from_float(obj, path, mode, scales.get(path))
  return replace_layers(model, quantized)


def calibrate(model: Any, batches: Iterable[Any] | None, is_target: Callable[[Any], bool],
              percentile: float | None = None) -> dict[str, float]:
  """Run `batches` through a copy of the model whose target layers are Observers; {layer path: input scale}."""
  if batches is None: raise ValueError("quantize: static quantization needs calibration batches (or use mode='dynamic')")
  observers: dict[str, Observer] = {}

  def observe(path: str, obj: Any) -> Any | None:
    if not is_target(obj): return None
    observers[path] = Observer(obj, path, PERCENTILE_SAMPLES if percentile is not None else 0)
    return observers[path]
  observed = replace_layers(model, observe)
  count = 0
  with Tensor.no_grad(), Tensor.train(False):
    for index, batch in enumerate(batches):
      if isinstance(batch, np.ndarray) and batch.dtype.kind == "f" and np.isnan(batch).any():
        raise ValueError(f"quantize: calibration batch {index} contains NaN")
      for observer in observers.values(): observer.batch_index = index
      out = _call(observed, batch)
      if isinstance(out, Tensor): out.realize()
      count += 1
  if count == 0: raise ValueError("quantize: calibration_batches is empty: static quantization needs at least one batch")
  return {path: observer.scale(percentile) for path, observer in observers.items()}
