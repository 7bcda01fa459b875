"""Train a 784-256-128-10 ReLU MLP on MNIST with Adam (batch 128), log train loss and test accuracy per epoch,
save the weights as safetensors.

  python examples/mnist_mlp.py                                                        # full MNIST if found/downloadable
  python examples/mnist_mlp.py --t10k-split --mnist-dir ../shared/datasets/mnist     # 8,000 / 2,000 t10k split
  python examples/mnist_mlp.py --t10k-split --epochs 2 --limit-train 2000 --plot mlp.png

Without MNIST (no files, no network) it says so in one line and trains on scikit-learn's 8x8 digits: the
input layer then takes 64 features instead of 784.
"""
from __future__ import annotations
from typing import Sequence
import argparse
import math
import sys
from minigrad import Tensor, nn
from training import TrainingResult, add_training_args, main_for, train


class MLP:
  """Flattened image -> Linear -> ReLU -> ... -> Linear -> class logits."""
  def __init__(self, in_features: int, hidden: Sequence[int] = (256, 128), num_classes: int = 10):
    sizes = (in_features, *hidden, num_classes)
    self.layers = [nn.Linear(fan_in, fan_out) for fan_in, fan_out in zip(sizes, sizes[1:])]

  def __call__(self, x: Tensor) -> Tensor:
    x = x.flatten(1)
    for layer in self.layers[:-1]: x = layer(x).relu()
    return self.layers[-1](x)


def build_model(input_shape: tuple[int, ...], num_classes: int) -> MLP: return MLP(math.prod(input_shape), num_classes=num_classes)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  add_training_args(parser, epochs=10, batch_size=128, lr=1e-3, checkpoint="mnist_mlp.safetensors")
  return parser.parse_args(argv)


def run(argv: Sequence[str] | None = None) -> TrainingResult: return train(parse_args(argv), build_model, "mnist_mlp")


main = main_for(run)


if __name__ == "__main__": sys.exit(main())
