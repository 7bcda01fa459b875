"""End-to-end tests of the examples: XOR converges, the MNIST MLP learns the real t10k split, the CNN runs,
and without MNIST both fall back to scikit-learn's digits in one announced line and write loadable checkpoints.

Input: examples/*.py, the real t10k files in ../shared/datasets/mnist when present (else those tests skip).
Output: pass/fail. The whole file takes about a minute or two on 2 cores (most of it the MLP's 2 epochs).
"""
from __future__ import annotations
from pathlib import Path
import os
import re
import subprocess
import sys
import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
MNIST_DIR = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "mnist"
HAVE_T10K = (MNIST_DIR / "t10k-images-idx3-ubyte.gz").exists() and (MNIST_DIR / "t10k-labels-idx1-ubyte.gz").exists()
needs_t10k = pytest.mark.skipif(not HAVE_T10K, reason=f"the real MNIST t10k files are not in {MNIST_DIR}")

sys.path.insert(0, str(EXAMPLES))   # the examples import their shared helpers as `training`
import mnist_cnn  # noqa: E402
import mnist_mlp  # noqa: E402
import training  # noqa: E402
from minigrad import Tensor  # noqa: E402
import xor  # noqa: E402


def example_env(tmp_path: Path, mnist_dir: Path | None = None) -> dict[str, str]:
  """Environment for an example run in a subprocess in which MNIST can't be found: $MNIST_DIR is an empty folder,
  HOME is a fresh folder (so ~/.cache/minigrad/mnist is empty) and downloads go to a dead proxy, so they fail
  at once even on a machine with network. Compiled kernels keep their usual cache."""
  env = dict(os.environ)
  empty = tmp_path / "no_mnist"
  empty.mkdir(exist_ok=True)
  (tmp_path / "home").mkdir(exist_ok=True)
  env.update(MNIST_DIR=str(mnist_dir or empty), HOME=str(tmp_path / "home"), https_proxy="http://127.0.0.1:9",
             http_proxy="http://127.0.0.1:9", HTTPS_PROXY="http://127.0.0.1:9", HTTP_PROXY="http://127.0.0.1:9", no_proxy="",
             NO_PROXY="", MINIGRAD_CACHE=os.environ.get("MINIGRAD_CACHE") or str(Path.home() / ".cache" / "minigrad"))
  return env


def run_example(script: str, args: list[str], env: dict[str, str], timeout: float = 150) -> subprocess.CompletedProcess:
  result = subprocess.run([sys.executable, str(EXAMPLES / script), *args], env=env, cwd=env["HOME"], capture_output=True,
                          text=True, timeout=timeout)
  assert result.returncode == 0, f"{script} exited with {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr[-3000:]}"
  assert "Traceback" not in result.stderr, result.stderr
  return result


def final_accuracy(stdout: str) -> float:
  match = re.search(r"final test accuracy ([\d.]+)%", stdout)
  assert match, f"no final accuracy line in:\n{stdout}"
  return float(match.group(1)) / 100


def test_xor_converges(capsys: pytest.CaptureFixture[str]) -> None:
  assert xor.main([]) == 0
  output = capsys.readouterr().out
  assert "converged after" in output and "accuracy 100%" in output


def test_xor_reports_failure_when_out_of_steps(capsys: pytest.CaptureFixture[str]) -> None:
  assert xor.main(["--steps", "2"]) == 1
  assert "did not converge" in capsys.readouterr().out


@needs_t10k
def test_mlp_learns_t10k_split(tmp_path: Path) -> None:
  """2 epochs on the first 8,000 t10k images: >= 90% on the last 2,000; the checkpoint reproduces the accuracy."""
  checkpoint = tmp_path / "mlp.safetensors"
  result = mnist_mlp.run(["--t10k-split", "--mnist-dir", str(MNIST_DIR), "--epochs", "2", "--checkpoint", str(checkpoint)])
  assert result.dataset.startswith("MNIST t10k split")
  assert len(result.test_accuracies) == 2 and result.epoch_losses[1] < result.epoch_losses[0]
  assert result.test_accuracy >= 0.90, f"test accuracy {result.test_accuracy:.2%} after 2 epochs"

  from minigrad.nn.datasets import mnist
  from minigrad.nn.state import load_state_dict, safe_load, safe_metadata
  metadata = safe_metadata(checkpoint)
  assert metadata["model"] == "mnist_mlp" and metadata["input_shape"] == "1x28x28"
  model = mnist_mlp.MLP(784)
  load_state_dict(model, safe_load(checkpoint))
  data = mnist(MNIST_DIR, t10k_split=True)
  x_test = training.normalize(data.x_test, float(metadata["normalize_mean"]), float(metadata["normalize_std"]))
  assert training.evaluate(model, x_test, data.y_test) == pytest.approx(result.test_accuracy, abs=1e-9)


@needs_t10k
def test_cnn_smoke_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
  """One epoch on 256 real images (8 steps of 32): completes, writes a checkpoint (with BatchNorm stats) and a plot."""
  checkpoint, plot = tmp_path / "cnn.safetensors", tmp_path / "cnn.png"
  result = mnist_cnn.run(["--t10k-split", "--mnist-dir", str(MNIST_DIR), "--epochs", "1", "--limit-train", "256",
                          "--batch-size", "32", "--checkpoint", str(checkpoint), "--plot", str(plot)])
  output = capsys.readouterr().out
  assert "256 training / 2000 test images of 1x28x28" in output and len(result.step_losses) == 8
  from safetensors.numpy import load_file
  state = load_file(str(checkpoint))
  assert state["conv1.weight"].shape == (16, 1, 3, 3) and state["conv2.weight"].shape == (32, 16, 3, 3)
  assert state["head.weight"].shape == (10, 32 * 7 * 7) and state["norm2.running_var"].shape == (32,)
  assert int(state["norm1.num_batches_tracked"]) == 8
  assert result.test_accuracy > 0.3, f"{result.test_accuracy:.2%} after 8 steps (chance is 10%)"
  try: import matplotlib  # noqa: F401
  except ImportError: assert "matplotlib is not installed" in output
  else: assert plot.stat().st_size > 0


def test_cnn_train_step_runs_each_kernel_once() -> None:
  """The captured training step realizes the loss, the gradients and BatchNorm's running stats in one schedule,
  so no kernel runs twice on the same inputs (realized at the next step, the running stats computed the forward
  pass up to each BatchNorm a second time)."""
  from minigrad import nn
  from minigrad.nn.state import get_parameters
  model = mnist_cnn.CNN((1, 12, 12))
  step = training.make_train_step(model, nn.optim.Adam(get_parameters(model), lr=1e-3))
  rng = np.random.default_rng(0)
  for _ in range(3): step(Tensor(rng.standard_normal((8, 1, 12, 12), dtype=np.float32)), Tensor(rng.integers(0, 10, 8).astype(np.int32)))
  (captured,) = step.captured
  computed = [(kernel.kernel.ast, slots[kernel.outputs:]) for kernel, slots in captured.launches]
  assert len(computed) == len(set(computed)), [kernel.name for kernel, _ in captured.launches]


@pytest.mark.parametrize("script, input_weight, shape", [("mnist_mlp.py", "layers.0.weight", (256, 64)),
                                                          ("mnist_cnn.py", "head.weight", (10, 32 * 2 * 2))])
def test_digits_fallback(tmp_path: Path, script: str, input_weight: str, shape: tuple[int, ...]) -> None:
  """No MNIST anywhere and no network: one line says so, training runs on the 8x8 digits, the checkpoint loads."""
  pytest.importorskip("sklearn")
  checkpoint = tmp_path / "digits.safetensors"
  result = run_example(script, ["--epochs", "1", "--checkpoint", str(checkpoint)], example_env(tmp_path))
  notices = [line for line in result.stdout.splitlines() if "MNIST not available" in line]
  assert len(notices) == 1, result.stdout
  assert notices[0].startswith("MNIST not available (") and notices[0].endswith("; training on scikit-learn's 8x8 digits instead")
  assert "1437 training / 360 test images of 1x8x8" in result.stdout
  from safetensors.numpy import load_file
  state = load_file(str(checkpoint))
  assert state[input_weight].shape == shape and all(np.isfinite(v).all() for v in state.values())
  assert final_accuracy(result.stdout) > 0.5   # one short epoch on 1,437 images (chance is 10%)


def test_backends_example_renders_every_language_and_agrees_everywhere(tmp_path: Path) -> None:
  from minigrad.runtime.device import available_devices
  result = run_example("backends.py", ["--rows", "8", "--cols", "512"], example_env(tmp_path))
  out = result.stdout
  assert "void r_8_" in out and "define void @r_8_" in out                      # C and LLVM IR
  assert "__kernel void" in out and "__local float" in out and "barrier(" in out  # OpenCL with a grouped reduction
  assert "__global__" in out and "__syncthreads()" in out                        # CUDA
  for device in available_devices():
    assert re.search(rf"^{device}\s+max relative error \S+ .* OK$", out, re.M), out
  assert "MISMATCH" not in out
