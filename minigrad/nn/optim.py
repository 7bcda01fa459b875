"""Optimizers (SGD, Adam, AdamW), learning-rate schedules and gradient clipping, with torch's update formulas.

Input: the parameter Tensors (requires_grad=True) whose `.grad` backward() filled. Output: `step()` rebinds
each parameter (and the optimizer's state) to its updated value.

How a step runs: every new parameter and state tensor is first built lazily (under Tensor.no_grad), then all of
them are realized in ONE `Tensor.realize(...)` call, so the scheduler sees the whole update at once, and only
then are the tensors rebound (`assign`). The learning rate and the Adam bias-correction powers live in small
realized tensors rather than Python floats baked into the graph, so step N runs the very same kernels as step
N-1 even while a schedule changes the learning rate.
"""
from __future__ import annotations
from typing import Iterable, Sequence
import math
import numpy as np
import minigrad.tensor.function as F
from minigrad.tensor import Tensor
from minigrad.nn.state import assign
from minigrad.engine.realize import buffer_of


def _scalar_tensor(value: float) -> Tensor:
  """A realized 1-element float32 tensor (a buffer, so kernels load it instead of baking the value in)."""
  return Tensor(np.array([value], dtype=np.float32)).reshape(())


class Optimizer:
  """Holds the parameters and the learning rate. `zero_grad()` drops the gradients; `step()` applies one update."""
  def __init__(self, params: Iterable[Tensor], lr: float):
    params = list(params)
    if not params: raise ValueError("optimizer got an empty parameter list")
    unique: dict[int, Tensor] = {}
    for i, p in enumerate(params):
      if not isinstance(p, Tensor): raise TypeError(f"optimizer params must be Tensors, item {i} is a {type(p).__name__}")
      if not p.requires_grad:
        raise ValueError(f"optimizer param {i} (shape {p.shape}) does not require grad: create it with requires_grad=True")
      if not p.is_leaf: raise ValueError(f"can't optimize a non-leaf Tensor (param {i}, shape {p.shape})")
      unique.setdefault(id(p), p)
    self.params: list[Tensor] = list(unique.values())
    self.lr = lr

  @property
  def lr(self) -> float:
    """The learning rate as a Python float. Setting it writes the value into `lr_tensor`'s buffer in place (no
    kernel, no recompile), as tinygrad's assign would: a TinyJit-captured step reads the new rate on its next replay.
    step() realizes its updates at once, so no lazy graph is left that could see the change."""
    return self._lr
  @lr.setter
  def lr(self, value: float | Tensor) -> None:
    value = float(value.item()) if isinstance(value, Tensor) else float(value)
    if value < 0: raise ValueError(f"Invalid learning rate: {value}")
    self._lr = value
    if not hasattr(self, "lr_tensor"): self.lr_tensor = _scalar_tensor(value)
    else: buffer_of(self.lr_tensor.uop.base).copyin(np.array([value], dtype=np.float32))

  def zero_grad(self) -> None:
    for p in self.params: p.grad = None

  def step(self) -> None:
    """Build every update lazily, realize them all in one call, then rebind params and state."""
    with Tensor.no_grad():
      updates: list[tuple[Tensor, Tensor]] = []
      for i, p in enumerate(self.params):
        if p.grad is None: continue
        if p.grad.shape != p.shape: raise RuntimeError(f"param {i} has shape {p.shape} but its grad has shape {p.grad.shape}")
        updates.extend(self._update(i, p, p.grad.detach().cast(p.dtype)))
      updates.extend(self._shared_updates(bool(updates)))
      if not updates: return
      news = [new.cast(target.dtype) for target, new in updates]
      Tensor.realize(*news)
      for (target, _), new in zip(updates, news): assign(target, new)

  def _update(self, index: int, param: Tensor, grad: Tensor) -> list[tuple[Tensor, Tensor]]:
    """(tensor to rebind, its new lazy value) pairs for one parameter; the param's pair is one of them."""
    raise NotImplementedError
  def _shared_updates(self, any_param: bool) -> list[tuple[Tensor, Tensor]]:
    """State shared by all params (step counters), advanced once per step."""
    return []

  def _lr_like(self, like: Tensor) -> Tensor: return self.lr_tensor.cast(like.dtype)


class SGD(Optimizer):
  """torch.optim.SGD: grad += wd*p; buf = momentum*buf + (1-dampening)*grad (buf = grad at the first step);
  grad = grad + momentum*buf if nesterov else buf; p -= lr*grad."""
  def __init__(self, params: Iterable[Tensor], lr: float = 1e-3, momentum: float = 0.0, dampening: float = 0.0,
               weight_decay: float = 0.0, nesterov: bool = False):
    if momentum < 0: raise ValueError(f"Invalid momentum value: {momentum}")
    if weight_decay < 0: raise ValueError(f"Invalid weight_decay value: {weight_decay}")
    if nesterov and (momentum <= 0 or dampening != 0): raise ValueError("Nesterov momentum requires a momentum and zero dampening")
    super().__init__(params, lr)
    self.momentum, self.dampening, self.weight_decay, self.nesterov = momentum, dampening, weight_decay, nesterov
    self.momentum_buffers: list[Tensor | None] = [None] * len(self.params)

  def _update(self, index: int, param: Tensor, grad: Tensor) -> list[tuple[Tensor, Tensor]]:
    if self.weight_decay: grad = grad + param * self.weight_decay
    pairs: list[tuple[Tensor, Tensor]] = []
    if self.momentum:
      buf = self.momentum_buffers[index]
      if buf is None:   # first step: the buffer starts as the gradient itself (no dampening), as in torch
        buf, new_buf = Tensor.zeros(*param.shape, dtype=param.dtype, device=param.device), grad
        self.momentum_buffers[index] = buf
      else: new_buf = buf * self.momentum + grad * (1 - self.dampening)
      pairs.append((buf, new_buf))
      grad = grad + new_buf * self.momentum if self.nesterov else new_buf
    return [(param, param - self._lr_like(param) * grad)] + pairs


class _AdamBase(Optimizer):
  """Adam's moments and bias corrections; AdamW differs only in how weight decay enters."""
  def __init__(self, params: Iterable[Tensor], lr: float, betas: tuple[float, float], eps: float, weight_decay: float):
    if not 0.0 <= betas[0] < 1.0 or not 0.0 <= betas[1] < 1.0: raise ValueError(f"Invalid beta parameters: {betas}")
    if eps < 0: raise ValueError(f"Invalid epsilon value: {eps}")
    if weight_decay < 0: raise ValueError(f"Invalid weight_decay value: {weight_decay}")
    super().__init__(params, lr)
    self.betas, self.eps, self.weight_decay = (float(betas[0]), float(betas[1])), eps, weight_decay
    self.exp_avg = [Tensor.zeros(*p.shape, dtype=p.dtype, device=p.device) for p in self.params]
    self.exp_avg_sq = [Tensor.zeros(*p.shape, dtype=p.dtype, device=p.device) for p in self.params]
    # beta1**t and beta2**t as realized tensors: the step count never appears as a constant in a kernel
    self.beta1_power, self.beta2_power = _scalar_tensor(1.0), _scalar_tensor(1.0)
    self.step_count = 0

  def step(self) -> None:
    self.step_count += 1
    super().step()

  def _shared_updates(self, any_param: bool) -> list[tuple[Tensor, Tensor]]:
    if not any_param: return []
    return [(self.beta1_power, self.beta1_power * self.betas[0]), (self.beta2_power, self.beta2_power * self.betas[1])]

  def _decoupled_decay(self) -> bool: return False

  def _update(self, index: int, param: Tensor, grad: Tensor) -> list[tuple[Tensor, Tensor]]:
    m, v = self.exp_avg[index], self.exp_avg_sq[index]
    # the update's graph is built once per parameter shape and copied (minigrad.tensor.function.templated): the key names
    # every setting _adam_math reads
    key = (type(self), "adam", self.betas, self.eps, self.weight_decay)
    new_param, new_m, new_v = F.templated(key, self._adam_math, param, grad, m, v, self.lr_tensor, self.beta1_power, self.beta2_power)
    return [(self.params[index], new_param), (m, new_m), (v, new_v)]

  def _adam_math(self, param: Tensor, grad: Tensor, m: Tensor, v: Tensor, lr: Tensor, beta1_power: Tensor,
                 beta2_power: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    (beta1, beta2), lr = self.betas, lr.cast(param.dtype)
    if self.weight_decay and self._decoupled_decay(): param = param * (1 - lr * self.weight_decay)   # AdamW
    elif self.weight_decay: grad = grad + param * self.weight_decay                                     # Adam (L2)
    new_m = m + (grad - m) * (1 - beta1)
    new_v = v * beta2 + grad * grad * (1 - beta2)
    bias_correction1 = 1 - (beta1_power * beta1).cast(param.dtype)
    bias_correction2_sqrt = (1 - (beta2_power * beta2).cast(param.dtype)).sqrt()
    denom = new_v.sqrt() / bias_correction2_sqrt + self.eps
    return param - (lr / bias_correction1) * new_m / denom, new_m, new_v


class Adam(_AdamBase):
  """torch.optim.Adam (weight_decay adds wd*p to the gradient)."""
  def __init__(self, params: Iterable[Tensor], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
               eps: float = 1e-8, weight_decay: float = 0.0):
    super().__init__(params, lr, betas, eps, weight_decay)


class AdamW(_AdamBase):
  """torch.optim.AdamW: p *= 1 - lr*wd before the Adam update (decoupled weight decay)."""
  def __init__(self, params: Iterable[Tensor], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
               eps: float = 1e-8, weight_decay: float = 0.01):
    super().__init__(params, lr, betas, eps, weight_decay)
  def _decoupled_decay(self) -> bool: return True


# ---------------------------------------------------------------- gradient clipping

def clip_grad_norm(params: Iterable[Tensor], max_norm: float, norm_type: float = 2.0) -> Tensor:
  """torch.nn.utils.clip_grad_norm_: scale every grad by min(1, max_norm / (total_norm + 1e-6)), where
  total_norm is the norm of all grads together (2-norm, or the max for norm_type=inf). Returns total_norm
  (lazy, 0-d). Params without a grad are skipped."""
  grads = [p for p in params if p.grad is not None]
  with Tensor.no_grad():
    if not grads: return Tensor.zeros(())
    if norm_type == math.inf: total = _stack_scalars([p.grad.abs().max().float() for p in grads]).max()
    elif norm_type == 2.0: total = _stack_scalars([p.grad.float().square().sum() for p in grads]).sum().sqrt()
    else:
      total = _stack_scalars([(p.grad.float().abs() ** norm_type).sum() for p in grads]).sum() ** (1.0 / norm_type)
    scale = (max_norm / (total + 1e-6)).minimum(1.0)
    for p in grads: p.grad = (p.grad * scale.cast(p.grad.dtype)).cast(p.grad.dtype)
  return total


clip_grad_norm_ = clip_grad_norm   # torch's in-place spelling


def _stack_scalars(values: Sequence[Tensor]) -> Tensor:
  """0-d tensors -> one (n,) tensor, with pad + add (no concatenate op needed)."""
  n = len(values)
  out = values[0].reshape(1).pad(((0, n - 1),))
  for i, v in enumerate(values[1:], start=1): out = out + v.reshape(1).pad(((i, n - 1 - i),))
  return out


# ---------------------------------------------------------------- learning-rate schedules

class LRScheduler:
  """Sets optimizer.lr from the step count. Construction applies step 0; each `step()` advances one step
  (call it after optimizer.step(), as in torch). Subclasses give `lr_at(t)` in closed form."""
  def __init__(self, optimizer: Optimizer):
    self.optimizer, self.base_lr, self.last_epoch = optimizer, optimizer.lr, 0
    self.optimizer.lr = self.lr_at(0)

  def lr_at(self, step: int) -> float: raise NotImplementedError

  def step(self) -> None:
    self.last_epoch += 1
    self.optimizer.lr = self.lr_at(self.last_epoch)

  def get_last_lr(self) -> list[float]: return [self.optimizer.lr]


class StepLR(LRScheduler):
  """lr = base_lr * gamma ** (step // step_size)."""
  def __init__(self, optimizer: Optimizer, step_size: int, gamma: float = 0.1):
    if step_size < 1: raise ValueError(f"StepLR: step_size must be positive, got {step_size}")
    self.step_size, self.gamma = step_size, gamma
    super().__init__(optimizer)
  def lr_at(self, step: int) -> float: return self.base_lr * self.gamma ** (step // self.step_size)


class CosineAnnealingLR(LRScheduler):
  """lr = eta_min + (base_lr - eta_min) * (1 + cos(pi * step / T_max)) / 2 (rising again after T_max, as torch)."""
  def __init__(self, optimizer: Optimizer, T_max: int, eta_min: float = 0.0):
    if T_max < 1: raise ValueError(f"CosineAnnealingLR: T_max must be positive, got {T_max}")
    self.T_max, self.eta_min = T_max, eta_min
    super().__init__(optimizer)
  def lr_at(self, step: int) -> float:
    return self.eta_min + (self.base_lr - self.eta_min) * (1 + math.cos(math.pi * step / self.T_max)) / 2


class LinearLR(LRScheduler):
  """torch's LinearLR: the factor goes linearly from start_factor to end_factor over total_iters steps."""
  def __init__(self, optimizer: Optimizer, start_factor: float = 1.0 / 3, end_factor: float = 1.0, total_iters: int = 5):
    if not 0 < start_factor <= 1 or not 0 <= end_factor <= 1:
      raise ValueError(f"LinearLR: start_factor {start_factor} must be in (0, 1] and end_factor {end_factor} in [0, 1]")
    self.start_factor, self.end_factor, self.total_iters = start_factor, end_factor, total_iters
    super().__init__(optimizer)
  def lr_at(self, step: int) -> float:
    progress = min(step, self.total_iters) / self.total_iters if self.total_iters else 1.0
    return self.base_lr * (self.start_factor + (self.end_factor - self.start_factor) * progress)


class LinearWarmup(LRScheduler):
  """Linear warmup from start_factor*base_lr to base_lr over warmup_steps, then hand over to `after` (a schedule
  built on the same optimizer, run from its step 0), or hold base_lr. Same numbers as torch's
  SequentialLR([LinearLR(opt, start_factor, 1.0, warmup_steps), after], milestones=[warmup_steps])."""
  def __init__(self, optimizer: Optimizer, warmup_steps: int, after: LRScheduler | None = None, start_factor: float = 1.0 / 3):
    if warmup_steps < 1: raise ValueError(f"LinearWarmup: warmup_steps must be positive, got {warmup_steps}")
    if after is not None and after.optimizer is not optimizer: raise ValueError("LinearWarmup: `after` must schedule the same optimizer")
    if not 0 < start_factor <= 1: raise ValueError(f"LinearWarmup: start_factor must be in (0, 1], got {start_factor}")
    self.warmup_steps, self.after, self.start_factor = warmup_steps, after, start_factor
    if after is not None: optimizer.lr = after.base_lr   # `after` already moved lr to its step 0
    super().__init__(optimizer)
  def lr_at(self, step: int) -> float:
    if step < self.warmup_steps: return self.base_lr * (self.start_factor + (1 - self.start_factor) * step / self.warmup_steps)
    return self.after.lr_at(step - self.warmup_steps) if self.after is not None else self.base_lr
