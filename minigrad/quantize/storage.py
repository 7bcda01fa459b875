"""Save and load quantized models as safetensors files.

Input: a quantized model (from quantize()) and a path; for loading, the float model's structure (a freshly built,
untrained model of the same architecture). Output: a .safetensors file holding every Tensor of the model by its
state-dict name ("layers.0.weight" int8, "layers.0.weight_scale", "layers.0.input_scale", "layers.0.bias", and the
float Tensors of the layers left as they were), plus metadata "minigrad.quantize": JSON {layer path: {"class": ...,
"kind": ...}}, which says which layers to replace when loading. The file is a plain safetensors file: torch's
safetensors reads it (int8 weights as I8).
"""
from __future__ import annotations
from typing import Any
import json
import os
from minigrad.tensor import Tensor
from minigrad.runtime.device import Device
from minigrad.nn.state import get_state_dict, load_state_dict, safe_load, safe_metadata, safe_save
from minigrad.quantize.convert import replace_layers
from minigrad.quantize.layers import QUANTIZED_LAYERS, QuantizedConv2d, QuantizedLinear, WeightOnlyConv2d, WeightOnlyLinear

METADATA_KEY = "minigrad.quantize"
CLASSES = {cls.__name__: cls for cls in (QuantizedLinear, QuantizedConv2d, WeightOnlyLinear, WeightOnlyConv2d)}


def save_quantized(model: Any, path: str | os.PathLike) -> None:
  """Write the quantized `model`'s Tensors and which layers are quantized (and how) to a safetensors file."""
  layers: dict[str, dict[str, str]] = {}

  def note(layer_path: str, obj: Any) -> None:
    if isinstance(obj, QUANTIZED_LAYERS): layers[layer_path] = {"class": type(obj).__name__, "kind": obj.kind}
    return None
  replace_layers(model, note)
  if not layers: raise ValueError(f"save_quantized: {type(model).__name__} has no quantized layer (quantize it first)")
  safe_save(get_state_dict(model), path, metadata={METADATA_KEY: json.dumps(layers, sort_keys=True)})


def load_quantized(model: Any, path: str | os.PathLike) -> Any:
  """A quantized copy of the float `model` (same architecture as the one saved) holding the file's Tensors: the
  layers the file names are replaced by their quantized classes, then every Tensor is loaded (strictly: a missing
  or unexpected name, or a shape that differs, is a RuntimeError naming it). The float model is unchanged."""
  metadata = safe_metadata(path)
  if METADATA_KEY not in metadata:
    raise ValueError(f"load_quantized: {os.fspath(path)!r} has no {METADATA_KEY!r} metadata: not written by save_quantized")
  layers: dict[str, dict[str, str]] = json.loads(metadata[METADATA_KEY])
  tensors = safe_load(path)
  device = Device.DEFAULT

  taken: set[str] = set()   # names whose file Tensor a rebuilt layer holds

  def tensor(name: str) -> Tensor | None:
    if name not in tensors: return None
    taken.add(name)
    return tensors[name].to(device)

  def rebuilt(layer_path: str, obj: Any) -> Any | None:
    if layer_path not in layers: return None
    entry = layers[layer_path]
    cls = CLASSES.get(entry["class"])
    if cls is None: raise ValueError(f"load_quantized: unknown quantized layer class {entry['class']!r} for {layer_path}")
    prefix = f"{layer_path}." if layer_path else ""
    if f"{prefix}weight" not in tensors: raise RuntimeError(f"load_quantized: the file has no {prefix}weight for {layer_path}")
    if tensors[f"{prefix}weight"].shape != obj.weight.shape:
      raise RuntimeError(f"load_quantized: size mismatch for {prefix}weight: {tensors[f'{prefix}weight'].shape} in the file, "
                         f"{obj.weight.shape} in the model")
    parts = (tensor(f"{prefix}weight"), tensor(f"{prefix}weight_scale"), tensor(f"{prefix}bias"), tensor(f"{prefix}input_scale"), entry["kind"])
    if issubclass(cls, QuantizedConv2d): return cls(*parts, obj.stride, obj.padding, obj.dilation, obj.groups)
    return cls(*parts)
  quantized = replace_layers(model, rebuilt)
  missing = sorted(set(layers) - _quantized_paths(quantized))
  if missing: raise RuntimeError(f"load_quantized: {type(model).__name__} has no layer at {', '.join(missing)} (a different architecture?)")
  # the quantized layers hold the file's Tensors already; the rest are loaded into the model's own Tensors
  own = get_state_dict(quantized)
  problems = [f"missing {name!r}" for name in own if name not in tensors] + [f"unexpected {name!r}" for name in tensors if name not in own]
  if problems: raise RuntimeError(f"load_quantized: {os.fspath(path)!r} doesn't match {type(model).__name__}: {', '.join(problems)}")
  load_state_dict(quantized, {name: t for name, t in tensors.items() if name not in taken}, strict=False)
  return quantized


def _quantized_paths(model: Any) -> set[str]:
  paths: set[str] = set()

  def note(layer_path: str, obj: Any) -> None:
    if isinstance(obj, QUANTIZED_LAYERS): paths.add(layer_path)
    return None
  replace_layers(model, note)
  return paths
