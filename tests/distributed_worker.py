"""One rank of the data-parallel tests (tests/test_distributed.py starts it with mpirun), and the training loop the
single-process reference runs in-process.

Input: a mode and options on the command line; MNIST t10k IDX files in --mnist-dir. Output: per rank an .npz of the
final parameters of each configuration (`train`), or a failure the test expects (`raise`, `die`, `hang`,
`mismatch`): the test checks how the job ended and what it printed.

  mpirun -n 2 python tests/distributed_worker.py train --mnist-dir ../shared/datasets/mnist --out /tmp/params
"""
from __future__ import annotations
import argparse
import os
import signal
import sys
import time
import numpy as np
from minigrad import Tensor, TinyJit, nn
from minigrad import distributed as dist
from minigrad.nn.datasets import mnist
from minigrad.nn.state import get_parameters, get_state_dict

HIDDEN = 96   # without shared memory the first weight's gradient (294 KB) is reduced in its own buffer, the others packed in a bucket
CONFIGS = [(optimizer, jit) for optimizer in ("sgd", "adam") for jit in (False, True)]


class MLP:
  def __init__(self, hidden: int = HIDDEN):
    self.layers = [nn.Linear(784, hidden), nn.Linear(hidden, 10)]

  def __call__(self, x: Tensor) -> Tensor: return self.layers[1](self.layers[0](x.flatten(1)).relu())


def load_images(mnist_dir: str, count: int) -> tuple[np.ndarray, np.ndarray]:
  data = mnist(mnist_dir, download=False, t10k_split=True)
  images = (data.x_train[:count].astype(np.float32) / 255.0 - 0.13) / 0.31
  return images.astype(np.float32), data.y_train[:count].astype(np.int32)


def train(images: np.ndarray, labels: np.ndarray, optimizer_name: str, jit: bool, steps: int, batch: int,
          world_size: int, rank: int, fail: str = "", fail_step: int = 3) -> list[np.ndarray]:
  """`steps` steps with this rank's batch of `batch` from the seeded sampler; the final parameters."""
  Tensor.manual_seed(rank)   # each rank draws different initial weights: broadcast_parameters must fix that
  model = MLP(HIDDEN + 16 if fail == "mismatch" and rank == 1 else HIDDEN)
  dist.broadcast_parameters(get_state_dict(model))
  params = get_parameters(model)
  optimizer = nn.optim.SGD(params, lr=0.05, momentum=0.9) if optimizer_name == "sgd" else nn.optim.Adam(params, lr=2e-3)

  def step(x: Tensor, y: Tensor) -> Tensor:
    with Tensor.train():
      loss = nn.functional.cross_entropy(model(x), y)
      optimizer.zero_grad()
      loss.backward()
      dist.allreduce_gradients(params, realize_with=[loss])
      optimizer.step()
    return loss
  run = TinyJit(step) if jit else step
  sampler = dist.DistributedSampler(len(images), world_size=world_size, rank=rank, seed=7)
  done, epoch = 0, 0
  while done < steps:
    sampler.set_epoch(epoch)
    for index in sampler.batches(batch, drop_last=True):
      if done == steps: break
      if done == fail_step and rank == 1: inject(fail)
      packed = dist.CommCounters.pack_bytes
      run(Tensor(images[index]), Tensor(labels[index])).item()
      last_step_packed[0] = dist.CommCounters.pack_bytes - packed
      done += 1
    epoch += 1
  if jit: assert run.captured, "the jitted step was never captured"
  return [p.numpy() for p in params]


last_step_packed = [0]   # gradient bytes the allreduce of train's last step copied (CommCounters.pack_bytes)


def inject(fail: str) -> None:
  """The fault a test asked rank 1 for."""
  sys.stdout.flush()
  if fail == "raise": raise RuntimeError("injected failure on rank 1")
  if fail == "die": os.kill(os.getpid(), signal.SIGKILL)
  if fail == "hang": time.sleep(120)


def main() -> None:
  parser = argparse.ArgumentParser()
  parser.add_argument("mode", choices=["train", "raise", "die", "hang", "mismatch"])
  parser.add_argument("--mnist-dir", required=True)
  parser.add_argument("--out", default="")
  parser.add_argument("--steps", type=int, default=20)
  parser.add_argument("--batch", type=int, default=32, help="per-rank batch")
  parser.add_argument("--examples", type=int, default=2048)
  args = parser.parse_args()
  world = dist.init()
  images, labels = load_images(args.mnist_dir, args.examples)
  if args.mode != "train":
    train(images, labels, "sgd", True, args.steps, args.batch, world.size, world.rank, fail=args.mode)
    print(f"rank {world.rank}: finished without the expected failure", flush=True)
    return
  results = {}
  for optimizer_name, jit in CONFIGS:
    params = train(images, labels, optimizer_name, jit, args.steps, args.batch, world.size, world.rank)
    for i, p in enumerate(params): results[f"{optimizer_name}_{'jit' if jit else 'eager'}_{i}"] = p
    if dist.communicator().shared:   # a TinyJit replay's backward writes the gradients into shared memory, eager steps copy them
      assert (last_step_packed[0] == 0) == jit, f"{optimizer_name} {'jit' if jit else 'eager'}: the last step packed {last_step_packed[0]} bytes"
  launches = list(dist.gradients._launches.values())
  if dist.communicator().shared:   # ranks on one host: every launch reduces through the shared-memory window
    assert launches and all(launch.exchange is not None for launch in launches), "the gradients were not reduced in shared memory"
  else:
    assert launches and all(any(launch.in_place) for launch in launches), "the first weight's gradient was not reduced in its own buffer"
  np.savez(f"{args.out}.rank{world.rank}.npz", **results)
  dist.barrier()
  comm = dist.communicator()
  path = ("shared memory" if comm.shared else "MPI only") + (" and MPI across hosts" if comm.cross is not None else "")
  print(f"rank {world.rank} of {world.size}: saved {len(results)} arrays, {dist.CommCounters.calls} collectives, {path}", flush=True)


if __name__ == "__main__": main()
