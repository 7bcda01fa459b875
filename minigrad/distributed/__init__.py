"""Data-parallel training across processes and hosts on MPI (mpi4py; `pip install -e ".[mpi]"`).

Input: the same training script started once per rank by an MPI launcher (`mpirun -n 2 python train.py`, or across
hosts `mpirun -n 4 --hostfile hosts python train.py`). Output: every rank trains on its own shard of each epoch and
the ranks average their gradients every step, so all of them hold the same weights, as one process with the whole
global batch would.

    from minigrad import Tensor, TinyJit, nn, distributed as dist
    world = dist.init()                                   # rank, size, local rank; world size 1 outside MPI
    model = Model()
    params = nn.state.get_parameters(model)
    dist.broadcast_parameters(nn.state.get_state_dict(model))   # rank 0's initial weights everywhere (shapes checked)
    optimizer = nn.optim.Adam(params, lr=1e-3)

    @TinyJit
    def step(x: Tensor, y: Tensor) -> Tensor:
      with Tensor.train():
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        dist.allreduce_gradients(params)                  # mean over ranks; replayed by TinyJit every call
        optimizer.step()
      return loss

    sampler = dist.DistributedSampler(len(x_train), seed=0)
    for epoch in range(epochs):
      sampler.set_epoch(epoch)
      for index in sampler.batches(batch_size // world.size): step(Tensor(x_train[index]), Tensor(y_train[index]))

Pieces: comm.py (the World, collectives with timeouts, aborting the job when a rank fails), gradients.py (bucketed
gradient allreduce, parameter broadcast), shared.py (the reduction among the ranks of one host through a shared-memory
window, then across hosts over MPI), sampler.py (each rank's shard of an epoch).
"""
from minigrad.distributed.comm import (World, Communicator, CommCounters, DistributedError, init, world,
                                       communicator, barrier, allreduce, launched_under_mpi)
from minigrad.distributed.gradients import allreduce_gradients, broadcast_parameters, plan_buckets
from minigrad.distributed.sampler import DistributedSampler

__all__ = ["World", "Communicator", "CommCounters", "DistributedError", "init", "world", "communicator",
           "barrier", "allreduce", "launched_under_mpi", "allreduce_gradients", "broadcast_parameters", "plan_buckets",
           "DistributedSampler"]
