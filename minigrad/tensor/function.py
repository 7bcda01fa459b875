"""Differentiable primitives: each op's forward (on UOps) and its derivative (on Tensors) stand together.

Input: Tensors. Output: a Tensor whose lazy UOp graph is the forward, remembering (when gradients are on)
the Function that made it so `backward()` can apply the chain rule. Every other Tensor op is built from
these, so its gradient comes for free; gradients are Tensor ops too, so backward kernels fuse like forward.
"""
from __future__ import annotations
from typing import Any, TYPE_CHECKING
import functools
import math
import operator
from minigrad.dtype import DType, dtypes, truncate
from minigrad.uop.ops import UOp, Ops, device_node, toposort
from minigrad.uop.shapetracker import ShapeTracker, view_uop
from minigrad.uop.variable import state as variables, extents_of, symbolic_shape, user_shape, from_uop
from minigrad import viz
from minigrad.viz import source
if TYPE_CHECKING: from minigrad.tensor.tensor import Tensor


_ctx_of, _requires_grad_of, _uop_of = operator.attrgetter("_ctx"), operator.attrgetter("requires_grad"), operator.attrgetter("uop")


class Function:
  def __init__(self, *inputs: Tensor):
    self.inputs = inputs
    # the op that made each input, as it was now: `t[i] = v` later rebinds t, but this graph keeps the old t
    self.input_ctxs = tuple(map(_ctx_of, inputs))
    self.needs_grad = list(map(bool, map(_requires_grad_of, inputs)))

  @staticmethod
  def tensor(u: UOp) -> Tensor:
    """Wrap a saved forward value as a Tensor (for use in a backward formula)."""
    from minigrad.tensor.tensor import Tensor
    return Tensor(u)

  def forward(self, *args: UOp, **kwargs: Any) -> UOp: raise NotImplementedError
  def backward(self, grad: Tensor) -> Tensor | None | tuple[Tensor | None, ...]: raise NotImplementedError

  @classmethod
  def apply(cls, *inputs: Tensor, **kwargs: Any) -> Tensor:
    Tensor = type(inputs[0])
    fn = cls(*inputs)
    out = Tensor(fn.forward(*map(_uop_of, inputs), **kwargs))
    if viz.capturing: source.note(out.uop)   # VIZ, PROFILE or DEBUG>=3: the user's line that asked for this op
    if Tensor.grad_enabled and any(fn.needs_grad):
      out.requires_grad, out._ctx = True, fn
    return out


# ---- devices ----
class Copy(Function):
  """A copy to another device. The source is realized and its bytes go through host memory (the devices here
  share no memory), so `.to()` runs the kernels the source still needs."""
  def forward(self, x: UOp, device: str) -> UOp:
    from minigrad.tensor.tensor import Tensor
    self.source_device = x.device
    return Tensor(self.inputs[0].numpy(), dtype=x.dtype, device=device).uop
  def backward(self, grad: Tensor) -> Tensor: return grad.to(self.source_device)


# ---- unary ----
class Cast(Function):
  def forward(self, x: UOp, dtype: DType) -> UOp:
    self.input_dtype = x.dtype
    return x.cast(dtype)
  def backward(self, grad: Tensor) -> Tensor: return grad.cast(self.input_dtype)

class Neg(Function):
  def forward(self, x: UOp) -> UOp: return x.alu(Ops.NEG)
  def backward(self, grad: Tensor) -> Tensor: return -grad

class Reciprocal(Function):
  def forward(self, x: UOp) -> UOp:
    self.ret = x.alu(Ops.RECIP)
    return self.ret
  def backward(self, grad: Tensor) -> Tensor:
    r = self.tensor(self.ret)
    return -grad * r * r

class Sin(Function):
  def forward(self, x: UOp) -> UOp:
    self.x = x
    return x.alu(Ops.SIN)
  def backward(self, grad: Tensor) -> Tensor: return grad * (math.pi / 2 - self.tensor(self.x)).sin()

class Exp2(Function):
  def forward(self, x: UOp) -> UOp:
    self.ret = x.alu(Ops.EXP2)
    return self.ret
  def backward(self, grad: Tensor) -> Tensor: return grad * self.tensor(self.ret) * math.log(2)

class Log2(Function):
  def forward(self, x: UOp) -> UOp:
    self.x = x
    return x.alu(Ops.LOG2)
  def backward(self, grad: Tensor) -> Tensor: return grad / (self.tensor(self.x) * math.log(2))

class Sqrt(Function):
  def forward(self, x: UOp) -> UOp:
    self.ret = x.alu(Ops.SQRT)
    return self.ret
  def backward(self, grad: Tensor) -> Tensor: return grad / (self.tensor(self.ret) * 2)

class Relu(Function):
  def forward(self, x: UOp) -> UOp:
    self.x = x
    return x.alu(Ops.MAX, const_uop(0, x.dtype, x.device, symbolic_shape(x)))
  def backward(self, grad: Tensor) -> Tensor: return (self.tensor(self.x) > 0).where(grad, 0.0)

# ---- binary ----
class Add(Function):
  def forward(self, x: UOp, y: UOp) -> UOp: return x.alu(Ops.ADD, y)
  def backward(self, grad: Tensor) -> tuple[Tensor, Tensor]: return grad, grad

class Mul(Function):
  def forward(self, x: UOp, y: UOp) -> UOp:
    self.x, self.y = x, y
    return x.alu(Ops.MUL, y)
  def backward(self, grad: Tensor) -> tuple[Tensor | None, Tensor | None]:
    return (grad * self.tensor(self.y) if self.needs_grad[0] else None, grad * self.tensor(self.x) if self.needs_grad[1] else None)

class Div(Function):
  def forward(self, x: UOp, y: UOp) -> UOp:
    self.x, self.y = x, y
    return x.alu(Ops.FDIV, y)
  def backward(self, grad: Tensor) -> tuple[Tensor | None, Tensor | None]:
    y = self.tensor(self.y)
    return (grad / y if self.needs_grad[0] else None, -grad * self.tensor(self.x) / (y * y) if self.needs_grad[1] else None)

class Maximum(Function):
  """Elementwise max; at ties the gradient is split in half between the two inputs (as torch does)."""
  def forward(self, x: UOp, y: UOp) -> UOp:
    self.x, self.y = x, y
    return x.alu(Ops.MAX, y)
  def backward(self, grad: Tensor) -> tuple[Tensor, Tensor]:
    x, y = self.tensor(self.x), self.tensor(self.y)
    share = (x > y).where(1.0, (x.eq(y)).where(0.5, 0.0)).cast(grad.dtype)
    return grad * share, grad * (1 - share)

class Where(Function):
  def forward(self, cond: UOp, x: UOp, y: UOp) -> UOp:
    self.cond = cond
    return cond.alu(Ops.WHERE, x, y)
  def backward(self, grad: Tensor) -> tuple[None, Tensor, Tensor]:
    cond = self.tensor(self.cond)
    return None, cond.where(grad, 0.0), cond.where(0.0, grad)

# ---- reduce ----
class Sum(Function):
  def forward(self, x: UOp, axes: tuple[int, ...]) -> UOp:
    self.input_shape = user_shape(x) if variables["in_use"] else x.shape   # Variables: the gradient has them too
    return UOp(Ops.REDUCE_AXIS, x.dtype, (x,), (Ops.ADD, axes))
  def backward(self, grad: Tensor) -> Tensor: return grad.expand(self.input_shape)

class Max(Function):
  """Reduce max; the gradient is shared evenly between tied maxima (as torch's amax does)."""
  def forward(self, x: UOp, axes: tuple[int, ...]) -> UOp:
    self.x, self.axes = x, axes
    self.ret = UOp(Ops.REDUCE_AXIS, x.dtype, (x,), (Ops.MAX, axes))
    return self.ret
  def backward(self, grad: Tensor) -> Tensor:
    x = self.tensor(self.x)
    is_max = x.eq(self.tensor(self.ret).expand(x.shape)).cast(grad.dtype)
    count = is_max.sum(self.axes, keepdim=True).cast(grad.dtype)
    return (is_max / count.expand(x.shape)) * grad.expand(x.shape)

# ---- movement ----
class Reshape(Function):
  def forward(self, x: UOp, shape: tuple[int, ...]) -> UOp:
    self.input_shape = user_shape(x) if variables["in_use"] else x.shape
    return view_uop(x, lambda st: st.reshape(shape))
  def backward(self, grad: Tensor) -> Tensor: return grad.reshape(self.input_shape)

class Permute(Function):
  def forward(self, x: UOp, order: tuple[int, ...]) -> UOp:
    self.order = order
    return view_uop(x, lambda st: st.permute(order))
  def backward(self, grad: Tensor) -> Tensor:
    inverse = [0] * len(self.order)
    for i, o in enumerate(self.order): inverse[o] = i
    return grad.permute(tuple(inverse))

class Expand(Function):
  def forward(self, x: UOp, shape: tuple[int, ...]) -> UOp:
    self.axes = tuple(i for i, (old, new) in enumerate(zip(symbolic_shape(x), shape)) if old != new)
    return view_uop(x, lambda st: st.expand(shape))
  def backward(self, grad: Tensor) -> Tensor: return grad.sum(self.axes, keepdim=True)

class Broadcast(Function):
  """Reshape to the shape's rank (leading 1s) and expand to it, in one op: a binary op's operand."""
  def forward(self, x: UOp, shape: tuple[int, ...]) -> UOp:
    self.input_shape = x.shape
    ranked = (1,) * (len(shape) - len(x.shape)) + x.shape
    self.axes = tuple(i for i, (old, new) in enumerate(zip(ranked, shape)) if old != new)
    return view_uop(x, lambda st: st.reshape(ranked).expand(shape) if ranked != x.shape else st.expand(shape))
  def backward(self, grad: Tensor) -> Tensor: return grad.sum(self.axes, keepdim=True).reshape(self.input_shape)

class Pad(Function):
  def forward(self, x: UOp, padding: tuple[tuple[int, int], ...]) -> UOp:
    self.region = tuple((before, before + s) for (before, _), s in zip(padding, user_shape(x) if variables["in_use"] else x.shape))
    return view_uop(x, lambda st: st.pad(padding))
  def backward(self, grad: Tensor) -> Tensor: return grad.shrink(self.region)

class Shrink(Function):
  def forward(self, x: UOp, bounds: tuple[tuple[int, int], ...]) -> UOp:
    self.padding = tuple((start, s - end) for (start, end), s in zip(bounds, x.shape))
    # symbolic bounds (Variables): the gradient goes back into the region through a mask (symbolic_shapes.unshrink)
    self.symbolic = variables["in_use"] and any(isinstance(b, UOp) for pair in bounds for b in pair)
    if self.symbolic: self.bounds, self.input_shape = tuple(tuple(from_uop(b) for b in pair) for pair in bounds), user_shape(x)
    return view_uop(x, lambda st: st.shrink(bounds))
  def backward(self, grad: Tensor) -> Tensor:
    if self.symbolic:
      from minigrad.tensor.symbolic_shapes import unshrink
      return unshrink(grad, self.bounds, self.input_shape)
    return grad.pad(self.padding)

class Flip(Function):
  def forward(self, x: UOp, axes: tuple[int, ...]) -> UOp:
    self.axes = axes
    return view_uop(x, lambda st: st.flip(axes))
  def backward(self, grad: Tensor) -> Tensor: return grad.flip(self.axes)

class Contiguous(Function):
  def forward(self, x: UOp) -> UOp: return UOp(Ops.CONTIGUOUS, x.dtype, (x,))
  def backward(self, grad: Tensor) -> Tensor: return grad


def const_uop(value: Any, dtype: DType, device: str, shape: tuple[int, ...]) -> UOp:
  """A constant tensor-graph node of `shape`: one CONST, expanded by a VIEW (no memory)."""
  const = UOp(Ops.CONST, dtype, (device_node(device),), truncate(value, dtype.scalar()) if dtype.count == 1 else value)   # UOp.const's arg
  if not shape: return const
  return UOp(Ops.VIEW, dtype, (const,), _broadcast_scalar(shape))


@functools.lru_cache(maxsize=4096)
def _broadcast_scalar(shape: tuple[int, ...]) -> ShapeTracker:
  """The view that shows one value at every position of `shape`."""
  return ShapeTracker.from_shape(()).reshape((1,) * len(shape)).expand(shape)


def backpropagate(root: Tensor, root_grad: Tensor) -> dict[int, Tensor]:
  """The chain rule over the recorded ops, last op first. Returns {id(tensor): d root / d tensor} for every
  tensor (as it is now) on a path from a tensor that requires grad to root.

  A node of the walk is a tensor *state*: the tensor together with the op that made it at the time it was used,
  so a tensor reassigned later (`t[i] = v`) still differentiates as the value the earlier ops saw."""
  from minigrad.tensor.tensor import Tensor
  # a node: (its key, the tensor, the Function that made this state of it or None for a leaf); the key is the
  # Function's id, or the tensor's for a leaf
  def node(t: Tensor, fn: Function | None) -> tuple[int, Tensor, Function | None]: return (id(t) if fn is None else id(fn), t, fn)
  order: list[tuple] = []
  visited: set[int] = set()
  stack: list[tuple[tuple, bool]] = [(node(root, root._ctx), False)]
  while stack:   # iterative post-order: long chains of ops don't hit the recursion limit
    entry, inputs_done = stack.pop()
    if inputs_done:
      order.append(entry)
      continue
    if entry[0] in visited: continue
    visited.add(entry[0])
    stack.append((entry, True))
    if (fn := entry[2]) is not None:
      for child in map(node, fn.inputs, fn.input_ctxs):
        if child[0] not in visited: stack.append((child, False))
  grads: dict[int, Tensor] = {order[-1][0]: root_grad}
  with Tensor.no_grad():
    for key, _, fn in reversed(order):
      if fn is None or (grad_out := grads.get(key)) is None: continue
      input_grads = fn.backward(grad_out)
      if not isinstance(input_grads, tuple): input_grads = (input_grads,)
      for t, ctx, grad, needed in zip(fn.inputs, fn.input_ctxs, input_grads, fn.needs_grad):
        if grad is None or not needed: continue
        if grad.shape != t.shape: raise RuntimeError(f"{type(fn).__name__} gave a gradient of shape {grad.shape} for an input of shape {t.shape}")
        child = id(t) if ctx is None else id(ctx)
        grads[child] = grad if (earlier := grads.get(child)) is None else earlier + grad
  # report by tensor, for the states the tensors are in now
  return {id(t): grads[key] for key, t, fn in order if t._ctx is fn and key in grads}


# ---- reduce (appended: product) ----
class Prod(Function):
  """Reduce product. d prod / d x_i is the product of the other elements of x_i's group, computed so zeros work:
  no zero in the group -> prod / x_i (as torch); exactly one zero -> the product of the non-zeros at the zero and
  0 elsewhere; two or more zeros -> 0 everywhere."""
  def forward(self, x: UOp, axes: tuple[int, ...]) -> UOp:
    self.x, self.axes = x, axes
    self.ret = UOp(Ops.REDUCE_AXIS, x.dtype, (x,), (Ops.MUL, axes))
    return self.ret
  def backward(self, grad: Tensor) -> Tensor:
    x = self.tensor(self.x)
    is_zero = x.eq(0)
    zero_count = is_zero.sum(self.axes, keepdim=True).expand(x.shape)
    product_of_nonzeros = is_zero.where(1, x).prod(self.axes, keepdim=True).expand(x.shape)
    without_zeros = self.tensor(self.ret).expand(x.shape) / is_zero.where(1, x)
    others = zero_count.eq(0).where(without_zeros, (zero_count.eq(1) & is_zero).where(product_of_nonzeros, 0))
    return grad.expand(x.shape) * others.cast(grad.dtype)


# ---- matrix product ----
def _product(x: Tensor, y: Tensor) -> Tensor:
  """(..., n, k) @ (..., k, m): a broadcast multiply (..., n, m, k) summed over k, in the inputs' dtype."""
  return (x.unsqueeze(-2) * y.transpose(-1, -2).unsqueeze(-3))._reduce(Ops.ADD, -1, False)

def _sum_to(t: Tensor, shape: tuple[int, ...]) -> Tensor:
  """t summed over the dims `shape` broadcasts (size 1 there, or missing on the left), in t's dtype, as `shape`."""
  padded = (1,) * (t.ndim - len(shape)) + tuple(shape)
  axes = tuple(i for i, (have, want) in enumerate(zip(t.shape, padded)) if want == 1 and have != 1)
  return (t._reduce(Ops.ADD, axes, True) if axes else t).reshape(shape)

def _product_grad_x(grad: Tensor, y: Tensor, x_shape: tuple[int, ...]) -> Tensor:
  """d(x @ y)/dx for the upstream `grad` (..., n, m): grad times y over (..., n, m, k), summed over m (and the
  batch dims x was broadcast along), as the chain rule through _product's multiply would give it."""
  return _sum_to(grad.unsqueeze(-1) * y.transpose(-1, -2).unsqueeze(-3), x_shape[:-1] + (1, x_shape[-1])).reshape(x_shape)

def _product_grad_y(grad: Tensor, x: Tensor, y_shape: tuple[int, ...]) -> Tensor:
  """d(x @ y)/dy: grad times x over (..., n, m, k), summed over n (and y's broadcast batch dims), transposed."""
  y_t = y_shape[:-2] + (y_shape[-1], y_shape[-2])
  return _sum_to(grad.unsqueeze(-1) * x.unsqueeze(-2), y_t[:-2] + (1,) + y_t[-2:]).reshape(y_t).transpose(-1, -2)

class Matmul(Function):
  """x @ y for x (..., n, k) and y (..., k, m), batch dims broadcast. The forward graph is built once per shapes and
  dtypes and copied onto the inputs (a Template), and each gradient is one formula, templated too: a product is
  a dozen view and ALU ops, and differentiating through them op by op costs as many Functions again."""
  def forward(self, x: UOp, y: UOp) -> UOp:
    self.x, self.y = x, y
    # while source lines are captured (VIZ, PROFILE, DEBUG>=3) op by op: kernels then name the product's multiply
    return _build(_product, (x, y))[0] if viz.capturing else _graph("matmul", _product, (x, y))[0]
  def backward(self, grad: Tensor) -> tuple[Tensor | None, Tensor | None]:
    x, y = self.tensor(self.x), self.tensor(self.y)
    dx = dy = None
    if self.needs_grad[0]: (dx,) = templated(("matmul dx", x.shape), lambda g, b: _product_grad_x(g, b, x.shape), grad, y)
    if self.needs_grad[1]: (dy,) = templated(("matmul dy", y.shape), lambda g, a: _product_grad_y(g, a, y.shape), grad, x)
    # mixed dtypes multiply in the wider one: each gradient goes back in its input's dtype
    return (dx if dx is None or dx.dtype == x.dtype else dx.cast(x.dtype)), (dy if dy is None or dy.dtype == y.dtype else dy.cast(y.dtype))


# ---- functions given by a forward graph and a gradient formula (appended: the elementwise op surface) ----
class Composite(Function):
  """A function whose forward is any graph of Tensor ops, built for accuracy (e.g. computed in float64, or
  with cancellation-free formulas), and whose gradient is a formula beside it, so backward never
  differentiates through the forward's internals: `Composite.apply(x, fn=lambda x: ..., gradient=lambda grad,
  y, x: (grad * dy_dx,))`. `gradient(grad, output, *inputs)` returns one gradient (or None) per input.
  With a `key` (any hashable naming what fn computes), the forward graph is built once per key and input
  shapes, dtypes and devices, and then copied onto the inputs (see Template): exp's polynomial costs a copy of
  its nodes instead of dozens of Tensor ops."""
  def forward(self, *xs: UOp, fn: Any, gradient: Any, key: Any = None) -> UOp:
    self.ret = _build(fn, xs)[0] if key is None else _graph(key, fn, xs)[0]
    self.xs, self.gradient = xs, gradient
    return self.ret
  def backward(self, grad: Tensor) -> tuple[Tensor | None, ...]:
    grads = self.gradient(grad, self.tensor(self.ret), *(self.tensor(x) for x in self.xs))
    return tuple(g if needed else None for g, needed in zip(grads, self.needs_grad))


def templated(key: Any, fn: Any, *inputs: Tensor) -> tuple[Tensor, ...]:
  """fn(*inputs) (a Tensor or a tuple of them), without gradients, from a graph built once per `key` (a hashable
  naming what fn computes, with every value it reads besides its inputs) and input shapes, dtypes and devices,
  then copied onto the inputs (see Template). An optimizer's update is a few dozen Tensor ops per parameter."""
  from minigrad.tensor.tensor import Tensor
  xs = tuple(t.uop for t in inputs)
  return tuple(Tensor(u) for u in _graph(key, fn, xs))


def differentiable(key: Any, fn: Any, *inputs: Tensor) -> Tensor:
  """fn(*inputs) (one Tensor, from Tensor ops without randomness) as one Function whose gradient is a template (see
  `templated`): the graph backward would build through fn's ops, made once per key and input signature, so that
  backward copies it instead of differentiating op by op. The forward is built op by op (its nodes are the ones
  later graphs find computed: a template's inner results are not kept for them)."""
  return Composite.apply(*inputs, fn=fn, gradient=lambda grad, y, *xs: templated((key, "gradient"), _chain_rule_of(fn), grad, *xs))


def _chain_rule_of(fn: Any) -> Any:
  """(grad, *xs) -> d fn / d x for each x, times grad: the chain rule through fn's ops on fresh leaves (zeros for
  an input fn doesn't depend on, or that isn't a float)."""
  def gradient(grad: Tensor, *xs: Tensor) -> tuple[Tensor, ...]:
    from minigrad.tensor.tensor import Tensor
    previous, Tensor.grad_enabled = Tensor.grad_enabled, True
    try:
      leaves = [Tensor(x.uop, requires_grad=dtypes.is_float(x.dtype)) for x in xs]
      grads = backpropagate(out, grad) if (out := fn(*leaves)).requires_grad else {}
    finally: Tensor.grad_enabled = previous
    return tuple(g if (g := grads.get(id(t))) is not None else t.zeros_like() for t in leaves)
  return gradient


def _graph(key: Any, fn: Any, xs: tuple[UOp, ...]) -> tuple[UOp, ...]:
  """fn's graph on xs: copied from the template built once per key and input signature; built op by op instead
  when an input has a symbolic shape (a template's stand-ins have fixed sizes, and what it builds on them, a
  constant or a reduce, would have them too)."""
  if variables["in_use"] and any(extents_of(x) is not None for x in xs): return _build(fn, xs)
  # while source lines are captured (VIZ, PROFILE, DEBUG>=3) the copy is made now, so its nodes carry the lines
  return _template(key, fn, xs).on(xs) if viz.capturing or _building[0] else _template(key, fn, xs).call(xs)


def _template(key: Any, fn: Any, xs: tuple[UOp, ...]) -> Template:
  signature = (key, tuple((x.shape, x.dtype, x.device) for x in xs))
  if (template := templates.pop(signature, None)) is None: template = Template(fn, xs, key)
  templates[signature] = template   # the most recently used last
  while len(templates) > MAX_TEMPLATES: del templates[next(iter(templates))]
  return template


def _build(fn: Any, xs: tuple[UOp, ...]) -> tuple[UOp, ...]:
  from minigrad.tensor.tensor import Tensor
  with Tensor.no_grad(): out = fn(*(Tensor(x) for x in xs))
  return tuple(t.uop for t in out) if isinstance(out, tuple) else (out.uop,)


class Template:
  """A forward graph built on stand-ins for the inputs (one CONTIGUOUS node of each input's shape over a buffer
  that is never allocated), kept as the nodes that depend on them in topological order. `on(xs)` rebuilds those
  nodes over the real inputs; a VIEW of a stand-in becomes one VIEW of the input's base, as a movement op on
  the input would have made it. `call(xs)` stands for the same outputs with one CALL node each, which the
  scheduler replaces by `on(xs)` the first time it schedules a graph of that structure: a step that is scheduled
  before (minigrad/schedule/reuse.py) never copies the template at all, and its graph has a node per output
  instead of dozens."""
  def __init__(self, fn: Any, xs: tuple[UOp, ...], name: Any = None):
    self.name = name
    self.stand_ins = tuple(UOp(Ops.CONTIGUOUS, x.dtype, (_unallocated(x),)) for x in xs)
    _building[0] += 1   # templates used inside this one are copied in now: a copy never holds a CALL
    try: self.outputs = _build(fn, self.stand_ins)
    finally: _building[0] -= 1
    dependent = set(self.stand_ins)
    self.order: list[UOp] = []
    for node in toposort(list(self.outputs), enter=lambda n: n not in dependent):
      if node not in dependent and any(s in dependent for s in node.src):
        dependent.add(node)
        self.order.append(node)
    # an output that is a stand-in or doesn't depend on the inputs (a constant) is copied, not called
    self.callable = all(out in dependent and out not in self.stand_ins for out in self.outputs)

  def __repr__(self) -> str: return f"Template({_label(self.name)})"

  def call(self, xs: tuple[UOp, ...]) -> tuple[UOp, ...]:
    if not self.callable: return self.on(xs)
    return tuple(UOp(Ops.CALL, out.dtype, xs, (self, i)) for i, out in enumerate(self.outputs))

  def on(self, xs: tuple[UOp, ...]) -> tuple[UOp, ...]:
    built: dict[UOp, UOp] = dict(zip(self.stand_ins, xs))
    get, VIEW = built.get, Ops.VIEW
    for node in self.order:
      src = tuple(map(get, node.src, node.src))
      if node.op is VIEW and src[0].op is VIEW:
        base, st = src[0].src[0], src[0].arg + node.arg
        built[node] = base if st.contiguous and st.shape == base.shape else UOp(VIEW, node.dtype, (base,), st)
      else: built[node] = UOp(node.op, node.dtype, src, node.arg)
    return tuple(built.get(out, out) for out in self.outputs)


def _label(key: Any) -> str:
  """What a template computes, for printing graphs: a function's name, or a key's first string."""
  if callable(key): return getattr(key, "__name__", repr(key))
  if isinstance(key, tuple): return next((_label(k) for k in key if isinstance(k, str) or callable(k)), repr(key))
  return str(key)


def _unallocated(x: UOp) -> UOp:
  buffer = UOp.new_buffer(x.device, math.prod(x.shape), x.dtype)
  return UOp(Ops.VIEW, x.dtype, (buffer,), ShapeTracker.from_shape(x.shape))


templates: dict[tuple, Template] = {}   # (key, input signature) -> Template, the MAX_TEMPLATES most recently used
_building = [0]   # how many Templates are being built (nested) right now
MAX_TEMPLATES = 1024
