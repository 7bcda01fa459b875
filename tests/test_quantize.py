"""Tests of minigrad.quantize: the int8 matmul is exact against numpy's integer product; quantized layers and models
(static, percentile, dynamic, weight-only) stay close to their float models; the dequantization and a following
ReLU run in the matmul's kernel; quantized models round-trip through safetensors; every error names its cause.

Input: minigrad.quantize, examples/mnist_mlp.py's MLP and examples/gpt.py's GPT (imported, not edited). Output:
pass/fail on the default device (DEV=CPU|LLVM|CL|PYTHON). Small shapes so the file runs in a few seconds.
"""
from __future__ import annotations
from pathlib import Path
import sys
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import gpt  # noqa: E402
from mnist_mlp import MLP  # noqa: E402
from minigrad import Tensor, dtypes, nn  # noqa: E402
from minigrad.schedule.scheduler import create_schedule  # noqa: E402
from minigrad.uop.ops import Ops  # noqa: E402
from minigrad.quantize import (QMAX, QuantizedConv2d, QuantizedLinear, WeightOnlyLinear, int8_matmul, load_quantized,  # noqa: E402
                               quantize, quantize_weight, replace_layers, save_quantized)
from minigrad.quantize.kernels import PEAK_PARTS, int8_linear  # noqa: E402
from minigrad.quantize.int8_dot import LAYOUTS, activation_max, layout_for, pack_weight  # noqa: E402


def rng(seed: int = 0) -> np.random.Generator: return np.random.default_rng(seed)


def batches(count: int, shape: tuple[int, ...], seed: int = 1) -> list[np.ndarray]:
  generator = rng(seed)
  return [generator.standard_normal(shape).astype(np.float32) for _ in range(count)]


def relative_error(got: np.ndarray, want: np.ndarray) -> float:
  return float(np.abs(got - want).max() / np.abs(want).max())


class SmallCNN:
  """Conv2d -> ReLU -> Conv2d (stride 2, groups 2) -> ReLU -> flatten -> Linear: both conv layouts a model uses."""
  def __init__(self):
    Tensor.manual_seed(3)
    self.conv1 = nn.Conv2d(2, 4, 3, padding=1)
    self.conv2 = nn.Conv2d(4, 4, 3, stride=2, groups=2, bias=False)
    self.head = nn.Linear(4 * 2 * 2, 5)

  def __call__(self, x: Tensor) -> Tensor:
    x = self.conv2(self.conv1(x).relu()).relu()
    return self.head(x.flatten(1))


def mlp() -> MLP:
  Tensor.manual_seed(0)
  return MLP(24, (32, 16), num_classes=5)


# ---------------------------------------------------------------- kernels

def test_int8_matmul_is_exact() -> None:
  """int8 x int8 -> int32, the whole int8 range (-128 too), an odd K and a batch dim: numpy's integer product."""
  a = rng().integers(-128, 128, (2, 5, 67)).astype(np.int8)
  w = rng(1).integers(-128, 128, (9, 67)).astype(np.int8)
  out = int8_matmul(Tensor(a), Tensor(w))
  assert out.dtype == dtypes.int32
  np.testing.assert_array_equal(out.numpy(), a.astype(np.int32) @ w.astype(np.int32).T)


@pytest.mark.parametrize("layout", (None, *LAYOUTS))
def test_int8_linear_matches_numpy_with_relu(layout: str | None) -> None:
  """quantize x with a fixed scale, integer matmul, scale, bias, ReLU: numpy doing the same steps, in the device's
  word layout (None) and each layout (the activations of "bytes7" words in [-63, 63], the scale times 127 / 63)."""
  x = rng().standard_normal((6, 40)).astype(np.float32)
  w_q = rng(1).integers(-127, 128, (7, 40)).astype(np.int8)
  w_scale = (rng(2).random(7) * 0.01 + 0.001).astype(np.float32)
  bias = rng(3).standard_normal(7).astype(np.float32)
  saved_scale = np.float32(np.abs(x).max() / QMAX)
  packed = pack_weight(Tensor(w_q), layout) if layout else None
  out = int8_linear(Tensor(x), Tensor(w_q), Tensor(w_scale), Tensor(bias), Tensor(np.array([saved_scale])), packed).relu().numpy()
  qmax = activation_max(layout or layout_for(Tensor(w_q).device))
  x_scale = saved_scale * np.float32(QMAX / qmax) if qmax != QMAX else saved_scale
  scaled = np.clip(x / x_scale, -qmax, qmax)
  x_q = np.floor(scaled + 0.5).astype(np.int32)   # half up
  want = np.maximum((x_q @ w_q.astype(np.int32).T).astype(np.float32) * (x_scale * w_scale) + bias, 0)
  np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("layout", (None, *LAYOUTS))
@pytest.mark.parametrize("k", (40, 300))
def test_dynamic_int8_linear_matches_numpy(layout: str | None, k: int) -> None:
  """Dynamic quantization (the batch's own scale, max |x| / qmax, taken in parts; no clip, since |x| / scale can't
  pass qmax) then the int8 matmul: numpy doing the same steps, with the clip. K = 300 is padded to whole words (the
  float input padded with zeros before it is quantized); the batch holds its max |x| negated, which must give -qmax.
  An all-zero batch gives the bias."""
  x = rng().standard_normal((6, k)).astype(np.float32)
  x[2, 7] = -np.abs(x).max() * 1.5
  w_q = rng(1).integers(-127, 128, (7, k)).astype(np.int8)
  w_scale = (rng(2).random(7) * 0.01 + 0.001).astype(np.float32)
  bias = rng(3).standard_normal(7).astype(np.float32)
  packed = pack_weight(Tensor(w_q), layout) if layout else None
  qmax = activation_max(layout or layout_for(Tensor(w_q).device))
  for batch in (x, np.zeros_like(x)):
    out = int8_linear(Tensor(batch), Tensor(w_q), Tensor(w_scale), Tensor(bias), None, packed).numpy()
    scale = np.float32(max(np.abs(batch).max(), np.float32(1e-30))) * np.float32(1 / qmax)
    x_q = np.floor(np.clip(batch * (np.float32(1) / scale), -qmax, qmax) + 0.5).astype(np.int32)   # half up
    if batch is x: assert x_q[2, 7] == -qmax
    want = (x_q @ w_q.astype(np.int32).T).astype(np.float32) * (scale * w_scale) + bias
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("stride, padding, dilation", [(1, 1, 1), (2, 0, 1), ((2, 1), (1, 0), (1, 2))])
def test_int8_conv2d_matches_numpy(stride, padding, dilation) -> None:
  """A dynamic QuantizedConv2d (a word matmul over the input's windows): numpy's integer convolution of the same
  quantized input, dequantized."""
  x = rng().standard_normal((2, 5, 11, 10)).astype(np.float32)
  conv = nn.Conv2d(5, 6, (3, 2), stride=stride, padding=padding, dilation=dilation)
  layer = QuantizedConv2d.from_float(conv, "conv", "dynamic")
  out = layer(Tensor(x)).numpy()
  qmax = activation_max(layer.packed_weight().layout)
  scale = np.float32(np.abs(x).max()) * np.float32(1 / qmax)
  x_q = np.clip(np.floor(x * (1 / scale) + 0.5), -qmax, qmax).astype(np.int64)
  (sh, sw), (ph, pw), (dh, dw) = ((v, v) if isinstance(v, int) else v for v in (stride, padding, dilation))
  padded = np.pad(x_q, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
  windows = np.lib.stride_tricks.sliding_window_view(padded, (dh * 2 + 1, dw * 1 + 1), axis=(2, 3))[:, :, ::sh, ::sw, ::dh, ::dw]
  sums = np.einsum("ncyxij,ocij->noyx", windows, layer.weight.numpy().astype(np.int64))
  want = sums * (scale * layer.weight_scale.numpy())[None, :, None, None] + conv.bias.numpy()[None, :, None, None]
  assert out.shape == want.shape
  np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


def test_weight_quantization_is_per_output_channel() -> None:
  w = rng().standard_normal((4, 10)).astype(np.float32) * np.array([[1], [10], [0.01], [0]], np.float32)
  w_q, scales = quantize_weight(w)
  assert w_q.dtype == np.int8 and scales.shape == (4,)
  np.testing.assert_allclose(scales[:3], np.abs(w[:3]).max(axis=1) / QMAX, rtol=1e-6)
  assert scales[3] == 1.0 and not w_q[3].any()   # an all-zero channel
  assert (np.abs(w_q[:3]).max(axis=1) == QMAX).all()
  assert (np.abs(w_q * scales[:, None] - w) <= scales[:, None] / 2 + 1e-7).all()



def test_dequantized_weight_is_within_half_a_step_of_the_float_weight() -> None:
  # QuantizedLinear/Conv2d.dequantized_weight(): the float32 weight the layer computes with, per output channel
  layers = [nn.Linear(10, 4), nn.Conv2d(3, 5, 3)]
  for layer in layers:
    (quantized,) = quantize([layer], mode="dynamic")
    w, scales = layer.weight.numpy(), quantized.weight_scale.numpy()
    got = quantized.dequantized_weight()
    assert got.dtype == np.float32 and got.shape == w.shape
    step = scales.reshape((-1,) + (1,) * (w.ndim - 1))
    assert (np.abs(got - w) <= step / 2 + 1e-7).all() and np.abs(got - w).max() > 0


def test_dequantize_and_relu_fuse_into_the_matmul_kernel() -> None:
  """A static quantized Linear is two kernels (quantize the input; int8 matmul with its float epilogue), with or
  without a ReLU after it: the ReLU adds no kernel."""
  model = mlp()
  layer = quantize(model, batches(2, (4, 24)))
  x = Tensor(batches(1, (4, 24), seed=5)[0])
  first = layer.layers[0]
  plain, _, _ = create_schedule([first(x).uop])
  with_relu, _, _ = create_schedule([first(x).relu().uop])
  assert len(plain) == len(with_relu) == 2


def test_static_mlp_is_two_kernels_per_layer() -> None:
  """examples/mnist_mlp.py's MLP (784-256-128-10, batch 128), static: 2 kernels per layer, the quantization of its
  input packed into words (quantize.int8_dot), then the matmul ending with its dequantization and the ReLU; the
  weights' packing is done once, when the layers are built. Only scheduled, not run; the input scales are set by
  hand instead of calibrated."""
  Tensor.manual_seed(0)
  model = MLP(784)
  quantized = replace_layers(model, lambda path, obj: QuantizedLinear.from_float(obj, path, "static", 0.05) if isinstance(obj, nn.Linear) else None)
  for layer in quantized.layers: layer.packed_weight()
  items, _, _ = create_schedule([quantized(Tensor.ones(128, 784)).uop])
  assert len(items) == 2 * len(model.layers)
  assert sum(any(n.op is Ops.REDUCE_AXIS for n in item.ast.toposort) for item in items) == len(model.layers)


def test_dynamic_mlp_is_three_kernels_per_layer() -> None:
  """examples/mnist_mlp.py's MLP (784-256-128-10, batch 128), dynamic: 3 kernels per layer, max |x| in PEAK_PARTS
  parts (a kernel the threads share; the largest part is taken where the scale is read: no kernel of one element),
  the quantization into words, then the matmul, whose kernel also stores the layer's float output (with the ReLU) for
  the next layer's max and quantization. Only scheduled, not run."""
  Tensor.manual_seed(0)
  model = MLP(784)
  quantized = quantize(model, mode="dynamic")
  for layer in quantized.layers: layer.packed_weight()
  items, _, _ = create_schedule([quantized(Tensor.ones(128, 784).contiguous().realize()).uop])
  assert len(items) == 3 * len(model.layers)
  assert sorted(item.bufs[0].arg[1] for item in items)[0] == PEAK_PARTS
  assert sum(any(n.op is Ops.REDUCE_AXIS for n in item.ast.toposort) for item in items) == 2 * len(model.layers)


# ---------------------------------------------------------------- models

@pytest.mark.parametrize("mode, percentile", [("static", None), ("static", 99.9), ("dynamic", None), ("weight", None)])
def test_quantized_mlp_is_close_to_float(mode: str, percentile: float | None) -> None:
  model = mlp()
  quantized = quantize(model, batches(3, (16, 24)) if mode == "static" else None, mode=mode, percentile=percentile)
  x = batches(1, (8, 24), seed=7)[0]
  want = model(Tensor(x)).numpy()
  assert relative_error(quantized(Tensor(x)).numpy(), want) < 0.05
  expected = WeightOnlyLinear if mode == "weight" else QuantizedLinear
  assert all(type(layer) is expected for layer in quantized.layers)
  assert all(type(layer) is nn.Linear for layer in model.layers)   # the float model is left as it was
  if mode == "static": assert quantized.layers[0].input_scale.shape == (1,)


def test_percentile_scale_is_below_the_max_scale() -> None:
  model = mlp()
  data = batches(2, (32, 24))
  by_max, by_percentile = quantize(model, data), quantize(model, data, percentile=99.0)
  assert by_percentile.layers[0].input_scale.item() < by_max.layers[0].input_scale.item()
  np.testing.assert_allclose(by_max.layers[0].input_scale.item(), max(np.abs(b).max() for b in data) / QMAX, rtol=1e-6)


@pytest.mark.parametrize("mode", ["static", "dynamic", "weight"])
def test_quantized_cnn_is_close_to_float(mode: str) -> None:
  model = SmallCNN()
  quantized = quantize(model, batches(2, (3, 2, 6, 6)) if mode == "static" else None, mode=mode)
  assert isinstance(quantized.conv2, QuantizedConv2d) and quantized.conv2.groups == 2
  x = batches(1, (2, 2, 6, 6), seed=9)[0]
  assert relative_error(quantized(Tensor(x)).numpy(), model(Tensor(x)).numpy()) < 0.05


def test_weight_only_gpt_logits_stay_close() -> None:
  """examples/gpt.py's model with weight-only int8 Linears: the embeddings (and the tied output) stay float."""
  model = gpt.GPT(gpt.GPTConfig(vocab_size=11, context=8, layers=2, heads=2, width=16), seed=0)
  quantized = quantize(model, mode="weight")
  assert all(isinstance(getattr(b, name), WeightOnlyLinear) for b in quantized.blocks for name in ("qkv", "proj", "up", "down"))
  assert quantized.token_embedding is model.token_embedding
  tokens = Tensor(rng().integers(0, 11, (2, 8)).astype(np.int32))
  want = model(tokens).numpy()
  assert relative_error(quantized(tokens).numpy(), want) < 0.02


# ---------------------------------------------------------------- saving and loading

@pytest.mark.parametrize("mode", ["static", "weight"])
def test_save_and_load_round_trip(tmp_path: Path, mode: str) -> None:
  from safetensors.numpy import load_file
  model = SmallCNN()
  quantized = quantize(model, batches(2, (3, 2, 6, 6)) if mode == "static" else None, mode=mode)
  path = tmp_path / "cnn.safetensors"
  save_quantized(quantized, path)
  stored = load_file(str(path))
  assert stored["conv1.weight"].dtype == np.int8 and stored["head.weight_scale"].shape == (5,)
  assert ("conv1.input_scale" in stored) == (mode == "static")
  loaded = load_quantized(SmallCNN(), path)
  x = Tensor(batches(1, (2, 2, 6, 6), seed=9)[0])
  np.testing.assert_array_equal(loaded(x).numpy(), quantized(x).numpy())


def test_load_into_another_architecture_fails(tmp_path: Path) -> None:
  path = tmp_path / "mlp.safetensors"
  save_quantized(quantize(mlp(), mode="dynamic"), path)
  with pytest.raises(RuntimeError, match="size mismatch|missing|unexpected|no layer"):
    load_quantized(MLP(24, (8,), num_classes=5), path)


# ---------------------------------------------------------------- errors

def test_unsupported_layer_is_named() -> None:
  with pytest.raises(TypeError, match="Embedding"):
    quantize(mlp(), batches(1, (4, 24)), layers=(nn.Linear, nn.Embedding))


def test_model_without_layers_is_refused() -> None:
  with pytest.raises(ValueError, match="found no Linear or Conv2d"):
    quantize(nn.LayerNorm(4), mode="dynamic")


@pytest.mark.parametrize("calibration", [None, []])
def test_static_mode_needs_calibration_batches(calibration) -> None:
  with pytest.raises(ValueError, match="calibration"):
    quantize(mlp(), calibration)


def test_nan_in_calibration_batch_is_named() -> None:
  data = batches(3, (4, 24))
  data[2][1, 3] = np.nan
  with pytest.raises(ValueError, match="batch 2 contains NaN"):
    quantize(mlp(), data)


def test_nan_inside_the_model_names_the_layer() -> None:
  model = mlp()
  model.layers[1].bias = Tensor(np.full(16, np.nan, np.float32))   # layers.2 sees NaN during calibration
  with pytest.raises(ValueError, match="layers.2"):
    quantize(model, batches(1, (4, 24)))


def test_nan_in_weight_names_the_layer() -> None:
  model = mlp()
  weight = model.layers[0].weight.numpy()
  weight[0, 0] = np.nan
  model.layers[0].weight = Tensor(weight)
  with pytest.raises(ValueError, match=r"layers\.0.*NaN"):
    quantize(model, mode="weight")


@pytest.mark.parametrize("kwargs, message", [(dict(mode="int4"), "mode"), (dict(percentile=0), "percentile"),
                                             (dict(mode="dynamic", percentile=99.0), "percentile")])
def test_bad_arguments(kwargs: dict, message: str) -> None:
  with pytest.raises(ValueError, match=message):
    quantize(mlp(), batches(1, (4, 24)), **kwargs)


def test_packed_weight_stays_out_of_the_state_dict() -> None:
  """A quantized Linear packs its weight into words once, at its first call (quantize.int8_dot); the state dict (and
  so a saved file) keeps the int8 weight only, and a replaced weight is packed again."""
  from minigrad.nn.state import get_state_dict
  layer = quantize(nn.Linear(8, 20), mode="dynamic")
  x = Tensor(batches(1, (3, 8))[0])
  before = sorted(get_state_dict(layer))
  first = layer(x).numpy()
  packed = layer.packed_weight()
  assert sorted(get_state_dict(layer)) == before == ["bias", "weight", "weight_scale"]
  assert layer.packed_weight() is packed
  layer.weight = Tensor(-layer.weight.numpy())
  assert layer.packed_weight() is not packed
  np.testing.assert_allclose(layer(x).numpy() - layer.bias.numpy(), -(first - layer.bias.numpy()), rtol=1e-5, atol=1e-5)
