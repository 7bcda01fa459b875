"""Post-training int8 quantization of nn.Linear and nn.Conv2d layers (issue 27).

  from minigrad.quantize import quantize, save_quantized, load_quantized
  qmodel = quantize(model, calibration_batches)                 # static: activation scales calibrated (max |x|)
  qmodel = quantize(model, calibration_batches, percentile=99.99)
  qmodel = quantize(model, mode="dynamic")                      # activation scale of each batch, as it runs
  qmodel = quantize(model, mode="weight")                       # weight-only int8 (float activations), for decoding
  save_quantized(qmodel, "model.safetensors"); qmodel = load_quantized(build_float_model(), "model.safetensors")

Input: a model (any callable object holding layers) and sample batches. Output: a copy of the model with the same
call interface whose layers hold int8 weights with per-output-channel scales. Stages: `convert` (walking the model,
calibration), `layers` (the quantized layers), `kernels` (the int8 arithmetic as Tensor ops), `storage` (safetensors).
"""
from __future__ import annotations
from minigrad.quantize.kernels import QMAX, int8_matmul, quantize_activation, quantize_weight, weight_scales
from minigrad.quantize.layers import QuantizedConv2d, QuantizedLinear, WeightOnlyConv2d, WeightOnlyLinear
from minigrad.quantize.convert import MODES, calibrate, quantize, replace_layers
from minigrad.quantize.storage import load_quantized, save_quantized

__all__ = ["quantize", "calibrate", "replace_layers", "save_quantized", "load_quantized", "int8_matmul", "quantize_activation",
           "quantize_weight", "weight_scales", "QMAX", "MODES", "QuantizedLinear", "QuantizedConv2d", "WeightOnlyLinear",
           "WeightOnlyConv2d"]
