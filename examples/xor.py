"""XOR, as in micrograd: a tiny MLP (2 -> 8 tanh -> 1) learns the four points with full-batch Adam.

  python examples/xor.py                     # prints the loss as it trains; exit code 0 once all 4 points are right
  python examples/xor.py --hidden 16 --activation relu --lr 0.05

Converged means: every point on the right side of 0 (100% accuracy) and the mean binary cross-entropy below
--target-loss. The exit code is 0 only then (1 if --steps run out first).
"""
from __future__ import annotations
from typing import Sequence
import argparse
import sys
import numpy as np
from minigrad import Tensor, nn
from minigrad.nn.functional import binary_crossentropy_logits
from minigrad.nn.state import get_parameters

POINTS = np.array([[0, 0], [0, 1], [1, 0], [1, 1]], dtype=np.float32)
LABELS = np.array([0, 1, 1, 0], dtype=np.float32)


class TinyMLP:
  """2 inputs -> `hidden` units (tanh or relu) -> 1 logit."""
  def __init__(self, hidden: int = 8, activation: str = "tanh"):
    self.hidden_layer, self.output_layer, self.activation = nn.Linear(2, hidden), nn.Linear(hidden, 1), activation

  def __call__(self, x: Tensor) -> Tensor:
    hidden = self.hidden_layer(x)
    hidden = hidden.tanh() if self.activation == "tanh" else hidden.relu()
    return self.output_layer(hidden).reshape(-1)


def positive_int(text: str) -> int:
  value = int(text)
  if value < 1: raise argparse.ArgumentTypeError(f"expected a positive integer, got {text}")
  return value


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--hidden", type=positive_int, default=8, help="hidden units (default 8)")
  parser.add_argument("--activation", choices=("tanh", "relu"), default="tanh", help="hidden activation (default tanh)")
  parser.add_argument("--lr", type=float, default=0.05, help="Adam learning rate (default 0.05)")
  parser.add_argument("--steps", type=positive_int, default=500, help="give up after this many steps (default 500)")
  parser.add_argument("--target-loss", type=float, default=0.05, help="loss below which training stops (default 0.05)")
  parser.add_argument("--log-every", type=positive_int, default=25, help="print the loss every N steps (default 25)")
  parser.add_argument("--seed", type=int, default=0, help="seed for the initial weights (default 0)")
  return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
  args = parse_args(argv)
  Tensor.manual_seed(args.seed)
  model = TinyMLP(args.hidden, args.activation)
  optimizer = nn.optim.Adam(get_parameters(model), lr=args.lr)
  x, y = Tensor(POINTS), Tensor(LABELS)
  for step in range(1, args.steps + 1):
    logits = model(x)
    loss = binary_crossentropy_logits(logits, y)
    optimizer.zero_grad()
    loss.backward()
    Tensor.realize(loss, logits)   # this step's loss and outputs (the weights they came from), read below
    optimizer.step()
    outputs = logits.numpy()
    loss_value, accuracy = float(loss.item()), float(((outputs > 0) == (LABELS > 0.5)).mean())
    converged = accuracy == 1.0 and loss_value < args.target_loss
    if step == 1 or step % args.log_every == 0 or converged:
      print(f"step {step:4d}  loss {loss_value:.4f}  accuracy {accuracy:.0%}")
    if converged:
      probabilities = [round(float(p), 3) for p in 1 / (1 + np.exp(-outputs))]
      print(f"converged after {step} steps: outputs {probabilities} for targets {LABELS.astype(int).tolist()}")
      return 0
  print(f"did not converge in {args.steps} steps (loss {loss_value:.4f}, accuracy {accuracy:.0%})")
  return 1


if __name__ == "__main__": sys.exit(main())
