"""Random tensor programs for the differential fuzzer (tests/test_fuzz.py): a hypothesis strategy that draws them,
and one interpreter that runs a program on minigrad, torch or numpy.

A program is a list of steps, each making a new value from earlier ones; its last value is the output. Inputs are
steps too (seeded random arrays), so a binary op can bring a new operand of a shape that broadcasts. While drawing,
each step is run on torch over zeros (the sizes are at most 5), which gives every value's shape and dtype by torch's
own rules. A program's repr is the minigrad code that runs it (dead steps left out), so hypothesis
prints a failing, shrunk program as code to paste.
"""
from __future__ import annotations
from dataclasses import dataclass
from typing import Any, Callable
import numpy as np
import torch
import torch.nn.functional as torch_F
from hypothesis import strategies as st

FLOAT_UNARY = ("relu", "neg", "abs", "sin", "tanh", "sigmoid", "exp", "log1p_abs", "sqrt1p_abs", "square", "recip1p_abs")
INT_UNARY = ("neg", "abs", "square")
ARITHMETIC = ("add", "sub", "mul", "maximum", "minimum", "div")
COMPARISONS = ("lt", "eq")
CAST_TO = ("float32", "int32", "bool", "float16")
TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16, "int32": torch.int32, "int64": torch.int64, "bool": torch.bool}
DTYPE_NAMES = {v: k for k, v in TORCH_DTYPES.items()}
MAX_DIM = 5
INPUT_DTYPE = {"float16": "float32", "int64": "int32"}   # inputs are float32, int32 or bool; other dtypes come from casts and sums


@dataclass(frozen=True)
class Step:
  op: str
  args: tuple[int, ...]   # indices of earlier steps
  params: tuple = ()


class Program:
  """A plain class, not a dataclass, so that hypothesis prints a falsifying program with its repr: the code."""
  def __init__(self, steps: tuple[Step, ...]): self.steps = steps

  def live(self) -> list[int]:
    """The steps the output depends on, in order."""
    needed, stack = set(), [len(self.steps) - 1]
    while stack:
      i = stack.pop()
      if i in needed: continue
      needed.add(i)
      stack.extend(self.steps[i].args)
    return sorted(needed)

  def __repr__(self) -> str:
    lines = ["from minigrad import Tensor, dtypes", "from fuzz_programs import input_array   # in tests/"]
    lines += [f"v{i} = {_source(self.steps[i])}" for i in self.live()]
    return "\n" + "\n".join(lines) + f"\n# output: v{len(self.steps) - 1}\n"


def _source(step: Step) -> str:
  """The minigrad code of one step."""
  a = [f"v{i}" for i in step.args]
  p = step.params
  if step.op == "input": return f"Tensor(input_array({p[0]}, {p[1]!r}, seed={p[2]}), requires_grad={p[1] == 'float32'})"
  if step.op == "unary": return {"neg": f"-{a[0]}", "log1p_abs": f"({a[0]}.abs()+1).log()", "sqrt1p_abs": f"({a[0]}.abs()+1).sqrt()",
                                 "recip1p_abs": f"({a[0]}.abs()+1).reciprocal()", "not": f"{a[0]}.logical_not()"}.get(p[0], f"{a[0]}.{p[0]}()")
  if step.op == "binary":
    if p[0] == "div": return f"{a[0]} / ({a[1]}.abs()+1)"
    return f"{a[0]}.{p[0]}({a[1]})"
  if step.op == "where": return f"{a[0]}.where({a[1]}, {a[2]})"
  if step.op == "reduce": return f"{a[0]}.{p[0]}(axis={p[1]}, keepdim={p[2]})"
  if step.op == "slice": return f"{a[0]}[{', '.join(f'{s}:{e}:{k}' for s, e, k in p[0])}]"
  if step.op == "pad": return f"{a[0]}.pad({p[0]}, value={p[1]})"
  if step.op == "matmul": return f"{a[0]} @ {a[1]}"
  if step.op == "cat": return f"{a[0]}.cat({a[1]}, dim={p[0]})"
  if step.op == "cast": return f"{a[0]}.cast(dtypes.{p[0]})" if p[0] != "int32" else f"{a[0]}.clip(-1000, 1000).cast(dtypes.int32)"
  if step.op == "contiguous": return f"{a[0]}.contiguous()"
  return f"{a[0]}.{step.op}({p[0]})"


def input_array(shape: tuple[int, ...], dtype: str, seed: int) -> np.ndarray:
  rng = np.random.default_rng(seed)
  if dtype == "float32": return rng.standard_normal(shape).astype(np.float32)
  if dtype == "int32": return rng.integers(-5, 6, shape).astype(np.int32)
  return rng.random(shape) < 0.5


# ---- the interpreter: one op table per library ----

class TorchOps:
  """torch tensors; with `zeros`, inputs are zeros (shapes and dtypes are all a drawer needs)."""
  def __init__(self, zeros: bool = False): self.zeros = zeros
  def input(self, shape, dtype, seed):
    if self.zeros: return torch.zeros(shape, dtype=TORCH_DTYPES[dtype])
    return torch.tensor(input_array(shape, dtype, seed), requires_grad=dtype == "float32")
  def unary(self, x, name):
    special = {"log1p_abs": lambda: (x.abs() + 1).log(), "sqrt1p_abs": lambda: (x.abs() + 1).sqrt(), "recip1p_abs": lambda: (x.abs() + 1).reciprocal(),
               "not": lambda: x.logical_not(), "relu": lambda: torch.relu(x), "sigmoid": lambda: torch.sigmoid(x)}
    return special[name]() if name in special else getattr(x, name)()
  def binary(self, a, b, name):
    if name == "div": return a / (b.abs() + 1)
    return getattr(torch, name)(a, b)
  def where(self, c, a, b): return torch.where(c, a, b)
  def reduce(self, x, kind, axes, keepdim):
    dims = tuple(range(x.ndim)) if axes is None else axes
    if kind in ("max", "min"): return (torch.amax if kind == "max" else torch.amin)(x, dim=dims, keepdim=keepdim)
    return getattr(x, kind)(dim=dims, keepdim=keepdim)
  def permute(self, x, order): return x.permute(order)
  def reshape(self, x, shape): return x.reshape(shape)
  def expand(self, x, shape): return x.expand(shape)
  def pad(self, x, pairs, value): return torch_F.pad(x, [n for pair in reversed(pairs) for n in pair], value=value)
  def shrink(self, x, bounds): return x[tuple(slice(s, e) for s, e in bounds)]
  def flip(self, x, axes): return x.flip(axes)
  def slice(self, x, slices): return x[tuple(slice(*s) for s in slices)]
  def matmul(self, a, b): return a @ b
  def cat(self, a, b, dim): return torch.cat([a, b], dim)
  def cast(self, x, dtype): return (x.clip(-1000, 1000) if dtype == "int32" and x.is_floating_point() else x).to(TORCH_DTYPES[dtype])
  def contiguous(self, x): return x.contiguous()


class MinigradOps:
  def __init__(self):
    from minigrad import Tensor, dtypes
    self.Tensor, self.dtypes = Tensor, dtypes
  def input(self, shape, dtype, seed): return self.Tensor(input_array(shape, dtype, seed), requires_grad=dtype == "float32")
  def unary(self, x, name):
    special = {"log1p_abs": lambda: (x.abs() + 1).log(), "sqrt1p_abs": lambda: (x.abs() + 1).sqrt(), "recip1p_abs": lambda: (x.abs() + 1).reciprocal(),
               "not": lambda: x.logical_not(), "neg": lambda: -x}
    return special[name]() if name in special else getattr(x, name)()
  def binary(self, a, b, name):
    if name == "div": return a / (b.abs() + 1)
    return {"add": a.add, "sub": a.sub, "mul": a.mul, "maximum": a.maximum, "minimum": a.minimum, "lt": a.lt, "eq": a.eq,
            "logical_and": a.logical_and, "logical_or": a.logical_or}[name](b)
  def where(self, c, a, b): return c.where(a, b)
  def reduce(self, x, kind, axes, keepdim): return getattr(x, kind)(axis=axes, keepdim=keepdim)
  def permute(self, x, order): return x.permute(order)
  def reshape(self, x, shape): return x.reshape(shape)
  def expand(self, x, shape): return x.expand(shape)
  def pad(self, x, pairs, value): return x.pad(pairs, value=value)
  def shrink(self, x, bounds): return x.shrink(bounds)
  def flip(self, x, axes): return x.flip(axes)
  def slice(self, x, slices): return x[tuple(slice(*s) for s in slices)]
  def matmul(self, a, b): return a @ b
  def cat(self, a, b, dim): return a.cat(b, dim=dim)
  def cast(self, x, dtype): return (x.clip(-1000, 1000) if dtype == "int32" and x.dtype in (self.dtypes.float32, self.dtypes.float16) else x).cast(getattr(self.dtypes, dtype))
  def contiguous(self, x): return x.contiguous()


class NumpyOps:
  """numpy, each result cast to the dtype torch gives that step (numpy promotes int32 + float32 to float64)."""
  def input(self, shape, dtype, seed): return input_array(shape, dtype, seed)
  def unary(self, x, name):
    with np.errstate(all="ignore"):
      return {"relu": lambda: np.maximum(x, 0).astype(x.dtype), "neg": lambda: -x, "abs": lambda: np.abs(x), "sin": lambda: np.sin(x),
              "tanh": lambda: np.tanh(x), "sigmoid": lambda: 1 / (1 + np.exp(-x.astype(np.float64))), "exp": lambda: np.exp(x),
              "log1p_abs": lambda: np.log(np.abs(x) + 1), "sqrt1p_abs": lambda: np.sqrt(np.abs(x) + 1), "square": lambda: x * x,
              "recip1p_abs": lambda: 1 / (np.abs(x) + 1), "not": lambda: np.logical_not(x)}[name]()
  def binary(self, a, b, name):
    with np.errstate(all="ignore"):
      if name == "div": return a.astype(np.float64) / (np.abs(b.astype(np.float64)) + 1)
      return {"add": np.add, "sub": np.subtract, "mul": np.multiply, "maximum": np.maximum, "minimum": np.minimum, "lt": np.less,
              "eq": np.equal, "logical_and": np.logical_and, "logical_or": np.logical_or}[name](a, b)
  def where(self, c, a, b): return np.where(c, a, b)
  def reduce(self, x, kind, axes, keepdim):
    with np.errstate(all="ignore"):
      if kind == "mean" and x.size == 0: return np.full(np.sum(x, axis=axes, keepdims=keepdim).shape, np.nan)
      return getattr(np, {"max": "amax", "min": "amin"}.get(kind, kind))(x, axis=axes, keepdims=keepdim)
  def permute(self, x, order): return np.transpose(x, order)
  def reshape(self, x, shape): return x.reshape(shape)
  def expand(self, x, shape): return np.broadcast_to(x, shape)
  def pad(self, x, pairs, value):
    crop = tuple(slice(max(0, -b), x.shape[i] - max(0, -a)) for i, (b, a) in enumerate(pairs))
    return np.pad(x[crop], [(max(0, b), max(0, a)) for b, a in pairs], constant_values=value)
  def shrink(self, x, bounds): return x[tuple(slice(s, e) for s, e in bounds)]
  def flip(self, x, axes): return np.flip(x, axes)
  def slice(self, x, slices): return x[tuple(slice(*s) for s in slices)]
  def matmul(self, a, b): return np.matmul(a, b)
  def cat(self, a, b, dim): return np.concatenate([a, b], dim)
  def cast(self, x, dtype):
    if dtype == "int32" and x.dtype.kind == "f": x = np.clip(x, -1000, 1000)
    with np.errstate(all="ignore"): return x.astype(dtype)
  def contiguous(self, x): return x


def run(program: Program, ops: Any, dtypes_of: list[str] | None = None) -> list[Any]:
  """Every step's value on one library. `dtypes_of`: each step's dtype (torch's), which numpy results are cast to."""
  values: list[Any] = []
  for i, step in enumerate(program.steps):
    value = getattr(ops, step.op)(*[values[a] for a in step.args], *step.params)
    if dtypes_of is not None: value = np.asarray(value).astype(np.dtype(dtypes_of[i]) if dtypes_of[i] != "bool" else np.bool_)
    values.append(value)
  return values


# ---- drawing programs ----

def _shape(draw: Callable, rank: int | None = None) -> tuple[int, ...]:
  rank = draw(st.integers(0, 4)) if rank is None else rank
  # mostly small sizes; a size 0 now and then
  return tuple(draw(st.sampled_from((1, 2, 3, 4, 5, 1, 2, 3, 4, 0))) for _ in range(rank))


def _factorizations(size: int) -> list[tuple[int, ...]]:
  """Some shapes with `size` elements."""
  if size == 0: return [(0,), (0, 3), (2, 0)]
  divisors = [d for d in range(1, size + 1) if size % d == 0]
  shapes = [(size,), (1, size), (size, 1)] + [(d, size // d) for d in divisors] + [(d, 1, size // d) for d in divisors]
  return shapes + [(a, b, size // (a * b)) for a in divisors for b in divisors if size % (a * b) == 0]


class _Drawer:
  """Draws one program step by step, keeping every value as torch computes it over zeros (its shape and dtype)."""
  def __init__(self, draw: Callable):
    self.draw, self.steps, self.values = draw, [], []
    self.torch_zeros = TorchOps(zeros=True)

  def add(self, step: Step) -> int:
    self.values.append(getattr(self.torch_zeros, step.op)(*[self.values[a] for a in step.args], *step.params))
    self.steps.append(step)
    return len(self.steps) - 1

  def new_input(self, shape: tuple[int, ...], dtype: str) -> int:
    return self.add(Step("input", (), (shape, dtype, self.draw(st.integers(0, 2**16)))))

  def dtype(self, i: int) -> str: return DTYPE_NAMES[self.values[i].dtype]

  def pick(self, accept: Callable[[int], bool] = lambda i: True) -> int | None:
    candidates = [i for i in range(len(self.steps)) if accept(i)]
    return candidates[self.draw(st.integers(0, len(candidates) - 1))] if candidates else None

  def broadcast_partner(self, a: int, dtypes_ok: tuple[str, ...], shape: tuple[int, ...] | None = None) -> int:
    """An earlier value whose shape broadcasts with a's (or with `shape`), or a new input of such a shape."""
    shape = tuple(self.values[a].shape) if shape is None else shape
    def fits(i: int) -> bool:
      other = tuple(self.values[i].shape)
      return self.dtype(i) in dtypes_ok and all(x == y or x == 1 or y == 1 for x, y in zip(shape[::-1], other[::-1]))
    if self.draw(st.booleans()) and (b := self.pick(fits)) is not None: return b
    dims = [1 if self.draw(st.integers(0, 3)) == 0 else s for s in shape]
    dims = dims[self.draw(st.integers(0, len(dims))) if dims and self.draw(st.integers(0, 3)) == 0 else 0:]
    return self.new_input(tuple(dims), self.draw(st.sampled_from([INPUT_DTYPE.get(d, d) for d in dtypes_ok])))

  def step(self) -> None:
    draw = self.draw
    a = self.pick()
    shape, dtype, ndim = tuple(self.values[a].shape), self.dtype(a), self.values[a].ndim
    is_float = dtype in ("float32", "float16")
    op = draw(st.sampled_from(("unary", "binary", "reduce", "movement", "movement", "matmul", "cat", "where", "cast", "contiguous")))
    if op == "unary":
      names = FLOAT_UNARY if is_float else ("not",) if dtype == "bool" else INT_UNARY
      self.add(Step("unary", (a,), (draw(st.sampled_from(names)),)))
    elif op == "binary":
      if dtype == "bool":
        name = draw(st.sampled_from(("logical_and", "logical_or", "eq")))
        b = self.broadcast_partner(a, ("bool",))
      else:
        name = draw(st.sampled_from(ARITHMETIC + COMPARISONS))
        b = self.broadcast_partner(a, ("float32", "int32") if name != "div" else ("float32",))
        if name == "div" and not is_float: a, b = b, a
      self.add(Step("binary", (a, b), (name,)))
    elif op == "where":
      cond = self.add(Step("binary", (a, self.broadcast_partner(a, ("float32", "int32") if dtype != "bool" else ("bool",))),
                           ("lt" if dtype != "bool" else "eq",)))
      x = self.broadcast_partner(cond, ("float32", "int32"))
      both = torch.broadcast_shapes(self.values[cond].shape, self.values[x].shape)
      self.add(Step("where", (cond, x, self.broadcast_partner(x, (self.dtype(x),), tuple(both)))))
    elif op == "reduce":
      kinds = ("sum", "max", "min", "mean") if is_float else ("sum", "max", "min") if dtype != "bool" else ("sum",)
      kind = draw(st.sampled_from(kinds))
      axes = None if ndim == 0 or draw(st.integers(0, 4)) == 0 else tuple(sorted(draw(st.sets(st.integers(0, ndim - 1), min_size=1))))
      reduced = range(ndim) if axes is None else axes
      if kind in ("max", "min") and any(shape[d] == 0 for d in reduced): kind = "sum"   # torch and numpy raise there
      self.add(Step("reduce", (a,), (kind, axes, draw(st.booleans()))))
    elif op == "movement": self.movement(a, shape)
    elif op == "matmul" and dtype == "float32" and ndim >= 1:   # torch refuses float16 @ float32
      k = shape[-1]
      b_shape = (k,) if draw(st.integers(0, 4)) == 0 else (k, draw(st.integers(1, MAX_DIM)))
      if ndim >= 3 and draw(st.booleans()): b_shape = shape[-3:-2] + b_shape if len(b_shape) == 2 else b_shape
      self.add(Step("matmul", (a, self.new_input(b_shape, "float32"))))
    elif op == "cat" and ndim >= 1:
      dim = draw(st.integers(0, ndim - 1))
      other = shape[:dim] + (draw(st.integers(0, 3)),) + shape[dim + 1:]
      b = self.pick(lambda i: tuple(self.values[i].shape) == other and self.dtype(i) != "bool")
      self.add(Step("cat", (a, b if b is not None and dtype != "bool" else self.new_input(other, INPUT_DTYPE.get(dtype, dtype))), (dim,)))
    elif op == "cast": self.add(Step("cast", (a,), (draw(st.sampled_from(CAST_TO)),)))
    elif op == "contiguous": self.add(Step("contiguous", (a,)))
    else: self.add(Step("unary", (a,), ("neg" if dtype != "bool" else "not",)))

  def movement(self, a: int, shape: tuple[int, ...]) -> None:
    draw, ndim = self.draw, len(shape)
    kind = draw(st.sampled_from(("permute", "reshape", "expand", "pad", "shrink", "flip", "slice")))
    if kind == "permute" and ndim >= 2: self.add(Step("permute", (a,), (tuple(draw(st.permutations(range(ndim)))),)))
    elif kind == "reshape": self.add(Step("reshape", (a,), (draw(st.sampled_from(_factorizations(int(np.prod(shape))))),)))
    elif kind == "expand":
      new = tuple(draw(st.integers(0, 4)) if s == 1 else s for s in shape)
      self.add(Step("expand", (a,), ((draw(st.integers(1, 3)),) * draw(st.integers(0, 1)) + new,)))
    elif kind == "pad" and ndim >= 1:
      pairs = tuple((draw(st.integers(-min(s, 2), 2)), 0) if draw(st.booleans()) else (0, draw(st.integers(0, 2))) for s in shape)
      self.add(Step("pad", (a,), (pairs, draw(st.sampled_from((0.0, 0.0, 1.5, -2.0))))))
    elif kind == "shrink" and ndim >= 1:
      bounds = []
      for s in shape:
        start = draw(st.integers(0, s))
        bounds.append((start, draw(st.integers(start, s))))
      self.add(Step("shrink", (a,), (tuple(bounds),)))
    elif kind == "flip" and ndim >= 1: self.add(Step("flip", (a,), (tuple(sorted(draw(st.sets(st.integers(0, ndim - 1), min_size=1)))),)))
    elif kind == "slice" and ndim >= 1:
      slices = tuple((draw(st.integers(0, max(s - 1, 0))), draw(st.integers(0, s)), draw(st.integers(1, 3))) for s in shape)
      self.add(Step("slice", (a,), (slices,)))
    else: self.add(Step("contiguous", (a,)))


@st.composite
def programs(draw: Callable, max_steps: int = 6) -> Program:
  drawer = _Drawer(draw)
  drawer.new_input(_shape(draw), draw(st.sampled_from(("float32", "float32", "float32", "int32", "bool"))))
  for _ in range(draw(st.integers(1, max_steps))): drawer.step()
  return Program(tuple(drawer.steps))


def step_dtypes(program: Program) -> list[str]:
  """Each step's dtype name, by torch's rules."""
  return [DTYPE_NAMES[v.dtype] for v in run(program, TorchOps(zeros=True))]
