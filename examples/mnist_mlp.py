"""Train a 784-256-128-10 ReLU MLP on MNIST with Adam (batch 128), log train loss and test accuracy per epoch,
save the weights as safetensors.

  python examples/mnist_mlp.py                                                        # full MNIST if found/downloadable
  python examples/mnist_mlp.py --t10k-split --mnist-dir ../shared/datasets/mnist     # 8,000 / 2,000 t10k split
  python examples/mnist_mlp.py --t10k-split --epochs 2 --limit-train 2000 --plot mlp.png
  mpirun -n 2 python examples/mnist_mlp.py --distributed --t10k-split   # data-parallel over 2 ranks (pip install -e ".[mpi]")
  mpirun -n 2 python examples/mnist_mlp.py --distributed --t10k-split --resume mnist_mlp.safetensors

Without MNIST (no files, no network) it says so in one line and trains on scikit-learn's 8x8 digits: the
input layer then takes 64 features instead of 784.
"""
from __future__ import annotations
from typing import Sequence
import argparse
import contextlib
import io
import math
import sys
import time
import numpy as np
from tqdm import tqdm
from minigrad import Device, Tensor, TinyJit, nn
from minigrad.nn.state import get_parameters, get_state_dict, load_state_dict, safe_load
from training import TrainingResult, add_training_args, evaluate, load_dataset, main_for, normalize, plot_history, save_checkpoint, train


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
  parser.add_argument("--distributed", action="store_true",
                      help="data-parallel training over the ranks of an MPI job (mpirun -n 2 python examples/mnist_mlp.py --distributed): "
                           "--batch-size is the global batch, split among the ranks; only rank 0 logs and saves")
  parser.add_argument("--resume", default=None, metavar="PATH",
                      help="start from the weights of a checkpoint this example saved (every rank reads it; rank 0's copy is broadcast)")
  return parser.parse_args(argv)


def run(argv: Sequence[str] | None = None) -> TrainingResult:
  args = parse_args(argv)
  if args.distributed or args.resume: return train_distributed(args)
  return train(args, build_model, "mnist_mlp")


def train_distributed(args: argparse.Namespace) -> TrainingResult:
  """The training loop of examples/training.py, data-parallel: each rank takes its shard of every epoch
  (DistributedSampler) and batch_size / ranks examples per step, the ranks average their gradients between backward
  and the Adam step (inside the TinyJit step), test accuracy is counted on a shard per rank and summed. Outside an
  MPI launcher it runs as one rank."""
  from minigrad import distributed as dist
  world = dist.init()
  log = print if world.is_main else (lambda *_, **__: None)
  if args.batch_size % world.size: raise SystemExit(f"--batch-size {args.batch_size} doesn't divide among {world.size} ranks")
  Tensor.manual_seed(args.seed)
  with contextlib.redirect_stdout(sys.stdout if world.is_main else io.StringIO()): data = load_dataset(args.mnist_dir, args.t10k_split)
  raw_train, y_train = data.x_train[:args.limit_train], data.y_train[:args.limit_train]
  mean, std = float(raw_train.mean() / 255.0), float(raw_train.std() / 255.0) or 1.0
  x_train, x_test = normalize(raw_train, mean, std), normalize(data.x_test, mean, std)
  model = build_model(x_train.shape[1:], data.num_classes)
  if args.resume:
    load_state_dict(model, safe_load(args.resume))
    log(f"resumed from {args.resume}")
  dist.broadcast_parameters(get_state_dict(model))   # the same start everywhere (and the same model: shapes are checked)
  params = get_parameters(model)
  optimizer = nn.optim.Adam(params, lr=args.lr)
  log(f"mnist_mlp: {data.source}: {len(x_train)} training / {len(x_test)} test images; {sum(math.prod(p.shape) for p in params):,} "
      f"parameters; {args.epochs} epoch(s), batch {args.batch_size} = {world.size} rank(s) x {args.batch_size // world.size}, "
      f"Adam lr {args.lr}, device {Device.DEFAULT}")

  @TinyJit
  def train_step(images: Tensor, labels: Tensor) -> Tensor:
    with Tensor.train():
      loss = nn.functional.cross_entropy(model(images), labels)
      optimizer.zero_grad()
      loss.backward()
      dist.allreduce_gradients(params, realize_with=[loss])   # the mean over the ranks; replayed with the step
      optimizer.step()
    return loss

  sampler = dist.DistributedSampler(len(x_train), seed=args.seed)
  result = TrainingResult(dataset=data.source, model=model)
  started = time.perf_counter()
  for epoch in range(1, args.epochs + 1):
    epoch_start = time.perf_counter()
    sampler.set_epoch(epoch)
    losses: list[float] = []
    with tqdm(sampler.batches(args.batch_size // world.size), desc=f"epoch {epoch}/{args.epochs}", unit="batch", leave=False,
              dynamic_ncols=True, disable=not world.is_main, mininterval=0.1 if sys.stderr.isatty() else 10.0) as bar:
      for index in bar:
        losses.append(float(train_step(Tensor(x_train[index]), Tensor(y_train[index])).item()))
        bar.set_postfix(loss=f"{losses[-1]:.4f}", refresh=False)
    shard = np.arange(world.rank, len(x_test), world.size)
    correct = evaluate(model, x_test[shard], data.y_test[shard]) * len(shard)
    result.step_losses.extend(dist.allreduce(np.array(losses), "mean").tolist())
    result.epoch_losses.append(float(np.mean(result.step_losses[-len(losses):])))
    result.test_accuracies.append(float(dist.allreduce(round(correct), "sum")) / len(x_test))
    result.epoch_seconds.append(time.perf_counter() - epoch_start)
    log(f"epoch {epoch}/{args.epochs}: train loss {result.epoch_losses[-1]:.4f}, test accuracy {result.test_accuracy:.2%} "
        f"({result.epoch_seconds[-1]:.1f} s, {world.size} rank(s))", flush=True)
  if args.checkpoint and world.is_main:
    save_checkpoint(model, args.checkpoint, {"model": "mnist_mlp", "input_shape": "x".join(map(str, x_train.shape[1:])),
                                             "normalize_mean": repr(mean), "normalize_std": repr(std), "dataset": data.source,
                                             "test_accuracy": f"{result.test_accuracy:.4f}"})
    result.checkpoint = args.checkpoint
  if args.plot and world.is_main:
    try: plot_history(result, args.plot, f"mnist_mlp on {data.source}, {world.size} rank(s)")
    except ImportError: print("--plot: matplotlib is not installed (pip install matplotlib); no plot was written")
  dist.barrier()   # the checkpoint is complete before any rank goes on (e.g. to resume from it)
  log(f"final test accuracy {result.test_accuracy:.2%} after {args.epochs} epoch(s) in {time.perf_counter() - started:.1f} s"
      f"{'; saved ' + args.checkpoint if result.checkpoint else ''}")
  return result


main = main_for(run)


if __name__ == "__main__": sys.exit(main())
