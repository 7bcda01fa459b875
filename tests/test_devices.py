"""Device selection and copies between devices: `.to()`, gradients across a copy, and the errors for bad devices."""
import subprocess
import sys
import numpy as np
import pytest
from minigrad import Tensor, Device, dtypes
from minigrad.runtime.device import available_devices

DEVICES = available_devices()
OTHERS = [d for d in DEVICES if d != Device.DEFAULT]


def test_the_default_device_always_opens():
  assert Device.DEFAULT in DEVICES


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.int32, dtypes.bool, dtypes.float16, dtypes.bfloat16, dtypes.int64, dtypes.uint8])
def test_copy_round_trip(device, dtype):
  data = np.arange(-6, 6).reshape(3, 4) % 5
  t = Tensor(data, dtype=dtype)
  moved = t.to(device)
  assert moved.device == device and moved.dtype == dtype and moved.shape == (3, 4)
  back = (moved + moved).to(Device.DEFAULT) if dtype != dtypes.bool else moved.to(Device.DEFAULT)
  expected = t.numpy() + t.numpy() if dtype != dtypes.bool else t.numpy()
  np.testing.assert_array_equal(back.numpy(), expected)


@pytest.mark.parametrize("device", OTHERS)
def test_gradient_flows_back_through_a_copy(device):
  x = np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32)
  a = Tensor(x, requires_grad=True)
  loss = (a.to(device).exp() * 3).sum()
  loss.backward()
  assert a.grad.device == a.device
  np.testing.assert_allclose(a.grad.numpy(), 3 * np.exp(x), rtol=1e-5)


@pytest.mark.parametrize("device", OTHERS)
def test_mixing_devices_in_one_op_is_an_error(device):
  with pytest.raises(RuntimeError, match="different devices"):
    Tensor([1.0, 2.0]) + Tensor([1.0, 2.0], device=device)
  with pytest.raises(ValueError, match="on"):
    Tensor([1.0, 2.0]).assign(Tensor([1.0, 2.0], device=device))


@pytest.mark.parametrize("device", DEVICES)
def test_the_same_program_gives_the_same_numbers_on_every_device(device):
  rng = np.random.default_rng(1)
  x, w = rng.standard_normal((16, 64)).astype(np.float32), rng.standard_normal((64, 32)).astype(np.float32)
  out = (Tensor(x, device=device) @ Tensor(w, device=device)).relu().softmax(-1).sum(0)
  ref = np.maximum(x @ w, 0)
  ref = np.exp(ref - ref.max(-1, keepdims=True))
  np.testing.assert_allclose(out.numpy(), (ref / ref.sum(-1, keepdims=True)).sum(0), rtol=1e-4, atol=1e-5)


def test_unknown_device_lists_the_valid_ones():
  with pytest.raises(ValueError, match="valid devices are CPU, LLVM, CL, CUDA, PYTHON"):
    Tensor([1.0], device="TPU")
  with pytest.raises(ValueError, match="unknown device"):
    Tensor([1.0]).to("metal")


def test_dev_environment_variable_selects_the_default():
  code = "from minigrad import Tensor, Device; print(Device.DEFAULT, Tensor([1.0]).device)"
  for env, expected in [({"DEV": "PYTHON"}, "PYTHON PYTHON"), ({"PYTHON": "1"}, "PYTHON PYTHON"), ({}, "CPU CPU")]:
    clean = {k: v for k, v in __import__("os").environ.items() if k not in ("DEV", "CPU", "LLVM", "CL", "CUDA", "PYTHON")}
    result = subprocess.run([sys.executable, "-c", code], env={**clean, **env}, capture_output=True, text=True, timeout=120)
    assert result.stdout.split() == expected.split(), result.stderr


@pytest.mark.parametrize("device", DEVICES)
def test_flop_counts_count_every_lane_and_thread(device):
  from minigrad import GlobalCounters
  a, b = Tensor.rand(64, 48, device=device).realize(), Tensor.rand(48, 64, device=device).realize()
  GlobalCounters.reset()
  (a @ b).realize()
  assert GlobalCounters.global_ops == 2 * 64 * 48 * 64   # one multiply and one add per term
  GlobalCounters.reset()
  (a * 2 + 1).realize()
  assert GlobalCounters.global_ops == 2 * 64 * 48
