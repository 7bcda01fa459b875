"""Shared pieces of the MNIST examples: command line, data (with the digits fallback), batching, the training
loop, evaluation, checkpoint and plot.

Input: an argparse namespace made by `add_training_args` and a function building the model from the input
shape (C, H, W) and the number of classes. Output: a trained model, a safetensors checkpoint, one log line per
epoch (train loss, test accuracy, time), an optional PNG of the curves, and a `TrainingResult` for callers
(the tests call `train` in-process).

The examples import this module as `training` (python puts the script's folder, examples/, on sys.path).
"""
from __future__ import annotations
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator
import argparse
import math
import os
import pathlib
import re
import sys
import time
import numpy as np
from tqdm import tqdm
from minigrad import Device, Tensor, TinyJit, nn
from minigrad.nn.datasets import MNIST_FILES, Dataset, mnist, mnist_dirs, sklearn_digits
from minigrad.nn.state import get_parameters, get_state_dict, safe_save

EVAL_BATCH_SIZE = 1000
ModelBuilder = Callable[[tuple[int, ...], int], Any]   # (input shape (C, H, W), classes) -> model


# ---------------------------------------------------------------- command line

def positive_int(text: str) -> int:
  value = int(text)
  if value < 1: raise argparse.ArgumentTypeError(f"expected a positive integer, got {text}")
  return value


def positive_float(text: str) -> float:
  value = float(text)
  if not value > 0: raise argparse.ArgumentTypeError(f"expected a positive number, got {text}")
  return value


def add_training_args(parser: argparse.ArgumentParser, epochs: int, batch_size: int, lr: float, checkpoint: str) -> None:
  """The options both MNIST examples share, with the example's own defaults."""
  parser.add_argument("--epochs", type=positive_int, default=epochs, help=f"passes over the training set (default {epochs})")
  parser.add_argument("--batch-size", type=positive_int, default=batch_size, help=f"training batch size (default {batch_size})")
  parser.add_argument("--lr", type=positive_float, default=lr, help=f"Adam learning rate (default {lr})")
  parser.add_argument("--t10k-split", action="store_true",
                      help="train on the first 8,000 t10k images and test on the last 2,000 (needs only the two t10k files)")
  parser.add_argument("--mnist-dir", default=None,
                      help="folder with the MNIST IDX .gz files (else $MNIST_DIR, else ~/.cache/minigrad/mnist, else download)")
  parser.add_argument("--limit-train", type=positive_int, default=None, metavar="N", help="train on the first N training images only")
  parser.add_argument("--checkpoint", default=checkpoint, metavar="PATH",
                      help=f"where to save the trained weights as safetensors (default {checkpoint}; '' to skip)")
  parser.add_argument("--plot", default=None, metavar="PATH.png", help="save loss / accuracy curves (needs matplotlib)")
  parser.add_argument("--seed", type=int, default=0, help="seed for the initial weights and the shuffling (default 0)")


# ---------------------------------------------------------------- data

def load_dataset(mnist_dir: str | None, t10k_split: bool) -> Dataset:
  """MNIST when its files are found (or downloaded); otherwise scikit-learn's 8x8 digits, announced in one line."""
  try: return mnist(mnist_dir, download=True, t10k_split=t10k_split)
  except (FileNotFoundError, ValueError) as error:   # missing files with no network, or a corrupt file
    print(f"MNIST not available ({_why_unavailable(error, mnist_dir, t10k_split)}); training on scikit-learn's 8x8 digits instead")
    return sklearn_digits()


def _why_unavailable(error: Exception, mnist_dir: str | None, t10k_split: bool) -> str:
  """A short reason for the fallback line: which file is missing where, not the whole mirror-by-mirror story."""
  message = str(error).replace("\n", " ")
  missing = re.match(r"MNIST file (\S+) not found", message)
  if missing is None: return message if len(message) <= 200 else message[:197] + "..."
  reason = f"{missing.group(1)} not in {', '.join(str(d) for d in mnist_dirs(mnist_dir))}"
  if "download failed" in message: reason += "; download failed"
  if not t10k_split and _t10k_files_present(mnist_dir): reason += "; the t10k files are there: --t10k-split uses only them"
  return reason


def _t10k_files_present(mnist_dir: str | None) -> bool:
  names = (MNIST_FILES["test_images"], MNIST_FILES["test_labels"])
  return any(all((d / n).exists() or (d / n.removesuffix(".gz")).exists() for n in names) for d in mnist_dirs(mnist_dir))


def normalize(images: np.ndarray, mean: float, std: float) -> np.ndarray:
  """uint8 images -> float32 (x/255 - mean) / std."""
  return ((images.astype(np.float32) / 255.0 - mean) / std).astype(np.float32)


def batch_indices(count: int, batch_size: int, rng: np.random.Generator | None = None) -> Iterator[np.ndarray]:
  """Index arrays of consecutive batches, over a fresh random permutation when rng is given (the last one may be short)."""
  order = rng.permutation(count) if rng is not None else np.arange(count)
  for start in range(0, count, batch_size): yield order[start:start + batch_size]


# ---------------------------------------------------------------- training and evaluation

def make_train_step(model: Any, optimizer: nn.optim.Optimizer, jit: bool = True) -> Callable[[Tensor, Tensor], Tensor]:
  """`step(images, labels)`: one optimizer step on one batch (cross-entropy loss, train mode), returning the batch's
  loss. With `jit`, TinyJit captures the step's kernels: from the third batch of a shape on, a step only replays
  them (the weights, Adam's moments and BatchNorm's running stats are the carried state it updates); without, each
  step is a plain call (its schedule reused from the first step's, minigrad/schedule/reuse.py)."""
  state = [t for t in get_state_dict(model).values() if not t.requires_grad]   # BatchNorm's running stats
  def train_step(images: Tensor, labels: Tensor) -> Tensor:
    with Tensor.train():
      loss = nn.functional.cross_entropy(model(images), labels)
      optimizer.zero_grad()
      loss.backward()
      # the loss, the gradients and BatchNorm's running-stat updates in one schedule, so the forward pass runs once
      # (optimizer.step() realizes only the updates: reading the loss after it, or the running stats at the next
      # step, would compute the forward pass again)
      Tensor.realize(loss, *[p.grad for p in optimizer.params if p.grad is not None], *state)
      optimizer.step()
    return loss
  return TinyJit(train_step) if jit else train_step


def evaluate(model: Any, images: np.ndarray, labels: np.ndarray, batch_size: int = EVAL_BATCH_SIZE) -> float:
  """Accuracy of model on (normalized) images, in batches, without gradients and in eval mode (BatchNorm's running stats)."""
  # BatchNorm leaves its last running-stat update lazy, and in eval mode it doesn't realize it: realize the model's
  # state once here, or every eval batch would recompute the last training batch's statistics
  Tensor.realize(*get_state_dict(model).values())
  correct = 0
  with Tensor.no_grad(), Tensor.train(False):
    for index in batch_indices(len(images), batch_size):
      logits = model(Tensor(images[index])).numpy()
      correct += int((logits.argmax(axis=-1) == labels[index]).sum())
  return correct / len(images)


@dataclass
class TrainingResult:
  """What a run measured: per-step and per-epoch losses, per-epoch test accuracy, times, and where things went."""
  dataset: str
  step_losses: list[float] = field(default_factory=list)
  epoch_losses: list[float] = field(default_factory=list)
  test_accuracies: list[float] = field(default_factory=list)
  epoch_seconds: list[float] = field(default_factory=list)
  checkpoint: str | None = None
  model: Any = None

  @property
  def test_accuracy(self) -> float: return self.test_accuracies[-1]


def train(args: argparse.Namespace, build_model: ModelBuilder, name: str) -> TrainingResult:
  """Load the data, build the model, train with Adam for args.epochs, evaluate after each epoch, save and plot."""
  if args.plot and not _matplotlib_available():
    print("--plot: matplotlib is not installed (pip install matplotlib, or pip install -e '.[examples]'); no plot will be written")
    args.plot = None
  Tensor.manual_seed(args.seed)
  rng = np.random.default_rng(args.seed)
  data = load_dataset(args.mnist_dir, args.t10k_split)
  raw_train, y_train = data.x_train[:args.limit_train], data.y_train[:args.limit_train]
  mean, std = float(raw_train.mean() / 255.0), float(raw_train.std() / 255.0) or 1.0
  x_train, x_test = normalize(raw_train, mean, std), normalize(data.x_test, mean, std)
  model = build_model(x_train.shape[1:], data.num_classes)
  optimizer = nn.optim.Adam(get_parameters(model), lr=args.lr)
  parameter_count = sum(math.prod(p.shape) for p in get_parameters(model))
  print(f"{name}: {data.source}: {len(x_train)} training / {len(x_test)} test images of {'x'.join(map(str, x_train.shape[1:]))}; "
        f"{parameter_count:,} parameters; {_plural(args.epochs, 'epoch')}, batch {args.batch_size}, Adam lr {args.lr}, device {Device.DEFAULT}")

  train_step = make_train_step(model, optimizer)
  result = TrainingResult(dataset=data.source, model=model)
  started = time.perf_counter()
  for epoch in range(1, args.epochs + 1):
    epoch_start = time.perf_counter()
    batches = list(batch_indices(len(x_train), args.batch_size, rng))
    losses: list[float] = []
    with tqdm(batches, desc=f"epoch {epoch}/{args.epochs}", unit="batch", leave=False, dynamic_ncols=True,
              mininterval=0.1 if sys.stderr.isatty() else 10.0) as bar:   # redirected: an update every 10 s, not a flood
      for index in bar:
        losses.append(float(train_step(Tensor(x_train[index]), Tensor(y_train[index])).item()))
        bar.set_postfix(loss=f"{losses[-1]:.4f}", refresh=False)
    accuracy = evaluate(model, x_test, data.y_test)
    result.step_losses.extend(losses)
    result.epoch_losses.append(float(np.mean(losses)))
    result.test_accuracies.append(accuracy)
    result.epoch_seconds.append(time.perf_counter() - epoch_start)
    print(f"epoch {epoch}/{args.epochs}: train loss {result.epoch_losses[-1]:.4f}, test accuracy {accuracy:.2%} "
          f"({result.epoch_seconds[-1]:.1f} s)", flush=True)
  total = time.perf_counter() - started

  if args.checkpoint:
    metadata = {"model": name, "input_shape": "x".join(map(str, x_train.shape[1:])), "normalize_mean": repr(mean),
                "normalize_std": repr(std), "dataset": data.source, "test_accuracy": f"{result.test_accuracy:.4f}"}
    save_checkpoint(model, args.checkpoint, metadata)
    result.checkpoint = args.checkpoint
  if args.plot: plot_history(result, args.plot, f"{name} on {data.source}")
  saved = f"; saved {args.checkpoint}" if args.checkpoint else ""
  print(f"final test accuracy {result.test_accuracy:.2%} after {_plural(args.epochs, 'epoch')} in {total:.1f} s{saved}")
  return result


def _plural(count: int, noun: str) -> str: return f"{count} {noun}{'' if count == 1 else 's'}"


def save_checkpoint(model: Any, path: str | os.PathLike, metadata: dict[str, str]) -> None:
  """The model's state dict as safetensors; the normalization constants go in the metadata."""
  pathlib.Path(path).parent.mkdir(parents=True, exist_ok=True)
  safe_save(get_state_dict(model), path, metadata)


# ---------------------------------------------------------------- plot

def _matplotlib_available() -> bool:
  try: import matplotlib  # noqa: F401
  except ImportError: return False
  return True


def plot_history(result: TrainingResult, path: str | os.PathLike, title: str) -> None:
  """Two panels: training loss per step (and its per-epoch mean), test accuracy per epoch."""
  import matplotlib
  matplotlib.use("Agg")   # files only, no display needed
  import matplotlib.pyplot as plt
  from matplotlib.ticker import MaxNLocator
  steps_per_epoch = len(result.step_losses) / max(1, len(result.epoch_losses))
  epochs = np.arange(1, len(result.epoch_losses) + 1)
  figure, (loss_axes, accuracy_axes) = plt.subplots(1, 2, figsize=(10, 4))
  loss_axes.plot(np.arange(1, len(result.step_losses) + 1) / steps_per_epoch, result.step_losses, alpha=0.4, label="per step")
  loss_axes.plot(epochs - 0.5, result.epoch_losses, marker="o", label="epoch mean")
  loss_axes.set(xlabel="epoch", ylabel="cross-entropy", title="training loss", yscale="log")
  loss_axes.legend()
  accuracy_axes.plot(epochs, [100 * a for a in result.test_accuracies], marker="o")
  accuracy_axes.set(xlabel="epoch", ylabel="%", title="test accuracy")
  accuracy_axes.xaxis.set_major_locator(MaxNLocator(integer=True))
  figure.suptitle(title)
  figure.tight_layout()
  pathlib.Path(path).parent.mkdir(parents=True, exist_ok=True)
  figure.savefig(path, dpi=100)
  plt.close(figure)
  print(f"saved the curves to {path}")


def main_for(run: Callable[[Any], Any]) -> Callable[..., int]:
  """An example's command-line entry: run it; the digits fallback without scikit-learn becomes a message, exit 2."""
  def main(argv: Any = None) -> int:
    try: run(argv)
    except ImportError as error:
      print(f"error: {error}", file=sys.stderr)
      return 2
    return 0
  return main
