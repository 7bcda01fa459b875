"""The one IR: `UOp(op, dtype, src, arg)`, immutable and hash-consed.

The same node type describes the lazy tensor graph (BUFFER, CONST, VIEW, REDUCE_AXIS, ALU ops), kernel ASTs
(SINK, STORE, LOAD, DEFINE_GLOBAL) and lowered loop code (RANGE, REDUCE, INDEX, DEFINE_ACC, ASSIGN, ...).
Building the same node twice returns the same object, so equality is identity and graphs are DAGs.

Input: nothing but dtypes. Output: `Ops`, `GroupOp`, `UOp`, `toposort`, `python_alu` (the reference meaning
of every ALU op, used for constant folding and by interpreters).
"""
from __future__ import annotations
from enum import Enum, auto
from typing import Any, Callable
import functools
import itertools
import math
import operator
import weakref
from minigrad.dtype import DType, dtypes, truncate
from minigrad.helpers import cached_property


class Ops(Enum):
  # tensor graph
  BUFFER = auto(); DEVICE = auto(); COPY = auto(); CONTIGUOUS = auto()
  # output arg[1] of a graph built once and copied, arg[0] (minigrad/tensor/function.py's Template), applied to src:
  # one node in the tensor graph for what would be dozens; the scheduler copies the graph in (Template.on)
  CALL = auto()
  # movement: a VIEW carries a ShapeTracker in arg (tensor graph: applied to src[0]; kernel AST: describes a load)
  VIEW = auto()
  # kernel AST
  SINK = auto(); DEFINE_GLOBAL = auto(); LOAD = auto(); STORE = auto(); REDUCE_AXIS = auto()
  VALID = auto()   # bool: is this kernel coordinate inside the VIEW's mask (from pad)
  # lowered loop code
  RANGE = auto(); REDUCE = auto(); INDEX = auto(); DEFINE_ACC = auto(); ASSIGN = auto(); ENDRANGE = auto()
  SPECIAL = auto(); DEFINE_VAR = auto(); VECTORIZE = auto(); GEP = auto(); IF = auto(); ENDIF = auto()
  DEFINE_LOCAL = auto(); BARRIER = auto()
  BIND = auto()     # a DEFINE_VAR given its value for one call: BIND(DEFINE_VAR, CONST value) (symbolic shapes)
  # values
  CONST = auto(); CAST = auto(); BITCAST = auto()
  ARANGE = auto()   # a leaf whose element i is i: arange, RNG counters and index tricks, computed in the kernel
  SORT = auto()     # uint64 words of each row (last axis) sorted by their high 32 bits, stably: a kernel of its own
  # unary ALU
  NEG = auto(); EXP2 = auto(); LOG2 = auto(); SIN = auto(); SQRT = auto(); RECIP = auto(); TRUNC = auto()
  # binary ALU
  ADD = auto(); MUL = auto(); IDIV = auto(); MOD = auto(); FDIV = auto(); MAX = auto()
  CMPLT = auto(); CMPNE = auto(); AND = auto(); OR = auto(); XOR = auto(); SHL = auto(); SHR = auto()
  # ternary ALU
  WHERE = auto(); MULACC = auto()

  def __repr__(self) -> str: return f"Ops.{self.name}"
  __hash__ = object.__hash__   # members are singletons: identity hashing, instead of Enum's hash of the name in Python


class GroupOp:
  Unary = {Ops.NEG, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIP, Ops.TRUNC}
  Binary = {Ops.ADD, Ops.MUL, Ops.IDIV, Ops.MOD, Ops.FDIV, Ops.MAX, Ops.CMPLT, Ops.CMPNE,
            Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR}
  Ternary = {Ops.WHERE, Ops.MULACC}
  ALU = Unary | Binary | Ternary
  Elementwise = ALU | {Ops.CAST, Ops.BITCAST}
  Commutative = {Ops.ADD, Ops.MUL, Ops.MAX, Ops.CMPNE, Ops.AND, Ops.OR, Ops.XOR}
  Comparison = {Ops.CMPLT, Ops.CMPNE}
  # reduce ops allowed as REDUCE_AXIS / REDUCE args, with their identity element
  Reduce = {Ops.ADD, Ops.MAX, Ops.MUL}


def reduce_identity(op: Ops, dtype: DType) -> Any:
  if op is Ops.ADD: return truncate(0, dtype)
  if op is Ops.MUL: return truncate(1, dtype)
  if op is Ops.MAX: return dtypes.min(dtype)
  raise ValueError(f"{op} is not a reduce op")


def _c_div(a: int, b: int) -> int:
  """C integer division: rounds toward zero."""
  if b == 0: return 0
  q = abs(a) // abs(b)
  return q if (a < 0) == (b < 0) else -q


def _c_mod(a: int | float, b: int | float) -> int | float:
  """C remainder (fmod for floats): takes the dividend's sign."""
  if isinstance(a, float) or isinstance(b, float): return math.fmod(a, b) if b != 0 and not math.isinf(a) else math.nan
  return a - _c_div(a, b) * b if b != 0 else 0


def _safe_log2(x: float) -> float:
  return -math.inf if x == 0 else math.nan if x < 0 or math.isnan(x) else math.log2(x)


def _safe_exp2(x: float) -> float:
  try: return 2.0 ** x
  except OverflowError: return math.inf


def _safe_sin(x: float) -> float: return math.nan if math.isinf(x) else math.sin(x)


def _fdiv(a: float, b: float) -> float:
  if b == 0: return math.nan if a == 0 or math.isnan(a) else math.copysign(math.inf, a) * math.copysign(1, b)
  return a / b


# The meaning of each ALU op on Python numbers (C semantics for integers). Results are truncated to the dtype.
python_alu: dict[Ops, Callable[..., Any]] = {
  Ops.NEG: lambda x: (not x) if isinstance(x, bool) else -x,
  Ops.EXP2: _safe_exp2, Ops.LOG2: _safe_log2, Ops.SIN: _safe_sin,
  Ops.SQRT: lambda x: math.sqrt(x) if x >= 0 else math.nan,
  Ops.RECIP: lambda x: _fdiv(1.0, x), Ops.TRUNC: lambda x: x if math.isinf(x) or math.isnan(x) else math.trunc(x),
  Ops.ADD: operator.add, Ops.MUL: operator.mul, Ops.IDIV: _c_div, Ops.MOD: _c_mod, Ops.FDIV: _fdiv,
  Ops.MAX: max, Ops.CMPLT: operator.lt, Ops.CMPNE: operator.ne,
  Ops.AND: operator.and_, Ops.OR: operator.or_, Ops.XOR: operator.xor,
  Ops.SHL: lambda x, y: x << y, Ops.SHR: lambda x, y: x >> y,
  Ops.WHERE: lambda c, x, y: x if c else y, Ops.MULACC: lambda x, y, z: x * y + z,
}


def exec_alu(op: Ops, dtype: DType, operands: tuple) -> Any:
  return truncate(python_alu[op](*operands), dtype)


_buffer_ids = itertools.count()   # the one global counter: ids of BUFFER nodes
_device_nodes: dict[str, UOp] = {}   # device name -> its DEVICE node, kept: new BUFFERs and constants have one as source


def device_node(name: str) -> UOp:
  """The DEVICE node of a device name (made once, kept)."""
  if (node := _device_nodes.get(name)) is None: node = _device_nodes[name] = UOp(Ops.DEVICE, arg=name)
  return node


# the live nodes by (op, dtype, src, arg, tag): weak references that remove their entry when the node dies. (A plain
# dict of weak references whose callback knows the key: weakref.WeakValueDictionary does the same in Python code,
# and so does weakref.KeyedRef's constructor, at about the cost of a node's creation.)
_live: dict[tuple, weakref.ref] = {}


def _forget(key: tuple, ref: weakref.ref) -> None:
  if _live.get(key) is ref: del _live[key]   # a node made since under the same key keeps its entry


class _UOpCache(type):
  """Hash-consing: UOp(...) with the same (op, dtype, src, arg) returns the existing node while it is alive."""
  def __call__(cls, op: Ops, dtype: DType = dtypes.void, src: tuple[UOp, ...] = (), arg: Any = None) -> UOp:
    # the arg's tag tells apart args Python calls equal but that are different values: -0.0 vs 0.0, True vs 1 vs 1.0
    key = (op, dtype, src, arg, (float, math.copysign(1.0, arg)) if isinstance(arg, float) else type(arg))
    if (ref := _live.get(key)) is not None and (found := ref()) is not None: return found
    node = cls.__new__(cls)   # the fields directly: type.__call__ and __init__ cost as much as the lookup
    node.op, node.dtype, node.src, node.arg = op, dtype, src, arg
    _live[key] = weakref.ref(node, functools.partial(_forget, key))
    return node


class NodeTable:
  """A map from graph nodes to values that keeps each value on its node (in the node's __dict__): an entry lives
  exactly as long as its node, as in a weak-keyed dict, and a lookup costs no weak reference (the scheduler and
  the runtime look nodes up on every call). `bool(table)`: whether an entry was ever set."""
  __slots__ = ("key", "ever")
  def __init__(self, name: str): self.key, self.ever = f"_{name}", False
  def get(self, node: UOp, default: Any = None) -> Any: return node.__dict__.get(self.key, default)
  def __getitem__(self, node: UOp) -> Any: return node.__dict__[self.key]
  def __setitem__(self, node: UOp, value: Any) -> None:
    node.__dict__[self.key] = value
    self.ever = True
  def __contains__(self, node: UOp) -> bool: return self.key in node.__dict__
  def __bool__(self) -> bool: return self.ever
  def update(self, values: dict[UOp, Any]) -> None:
    for node, value in values.items(): self[node] = value


class UOp(metaclass=_UOpCache):
  """One node of the IR. Never mutate one: build a new node (`replace`) instead."""
  __slots__ = ("op", "dtype", "src", "arg", "__weakref__", "__dict__")

  def __init__(self, op: Ops, dtype: DType = dtypes.void, src: tuple[UOp, ...] = (), arg: Any = None):
    self.op, self.dtype, self.src, self.arg = op, dtype, src, arg

  def __reduce__(self): return (UOp, (self.op, self.dtype, self.src, self.arg))

  def replace(self, **kwargs: Any) -> UOp:
    return UOp(kwargs.get("op", self.op), kwargs.get("dtype", self.dtype), tuple(kwargs["src"]) if "src" in kwargs else self.src,
               kwargs.get("arg", self.arg))

  def __repr__(self) -> str: return pretty(self)

  def substitute(self, replace: dict[UOp, UOp]) -> UOp:
    """This graph with the nodes in `replace` swapped for their values (and everything above them rebuilt)."""
    built: dict[UOp, UOp] = {}
    for node in self.toposort:
      built[node] = replace.get(node) or (node.replace(src=tuple(built[s] for s in node.src)) if node.src else node)
    return built[self]

  # ---- graph walking ----
  @cached_property
  def toposort(self) -> list[UOp]:
    """Every node this one depends on, itself last, each after all of its sources."""
    return toposort([self])

  # ---- tensor graph and kernel AST facts ----
  @cached_property
  def shape(self) -> tuple[int, ...]:
    """The shape of a tensor-graph or kernel-AST node (lowered loop code has no shapes)."""
    if self.op is Ops.BUFFER: return (self.arg[1],)
    if self.op is Ops.VIEW: return self.arg.shape
    if self.op in (Ops.CONST, Ops.VALID, Ops.LOAD, Ops.STORE, Ops.ARANGE):
      views = [s for s in self.src if s.op is Ops.VIEW]
      return views[0].arg.shape if views else (self.arg,) if self.op is Ops.ARANGE else ()
    if self.op is Ops.REDUCE_AXIS:
      axes = self.arg[1]
      return tuple(1 if i in axes else d for i, d in enumerate(self.src[0].shape))
    if self.op is Ops.SINK: return ()
    if self.op is Ops.CALL: return self.arg[0].outputs[self.arg[1]].shape
    return self.src[0].shape

  @property
  def size(self) -> int: return math.prod(self.shape)

  @cached_property
  def device(self) -> str:
    if self.op is Ops.DEVICE: return self.arg
    if self.op in (Ops.BUFFER, Ops.CONST, Ops.ARANGE): return self.src[0].arg
    if self.op is Ops.COPY: return self.src[1].arg
    return self.src[0].device

  @property
  def base(self) -> UOp:
    """The node a chain of tensor-graph VIEWs looks at."""
    return self.src[0].base if self.op is Ops.VIEW and self.src else self

  @staticmethod
  def new_buffer(device: str, size: int, dtype: DType) -> UOp:
    """A fresh BUFFER node (a unique id makes each one distinct)."""
    return UOp(Ops.BUFFER, dtype, (device_node(device),), (next(_buffer_ids), size))

  # ---- constructors ----
  @staticmethod
  def const(dtype: DType, value: Any) -> UOp:
    return UOp(Ops.CONST, dtype, (), truncate(value, dtype.scalar()) if dtype.count == 1 else value)

  def const_like(self, value: Any) -> UOp: return UOp.const(self.dtype, value)

  @staticmethod
  def variable(name: str, min_value: int, max_value: int, dtype: DType = dtypes.int32) -> UOp:
    """A named integer with known bounds (used for symbolic tests and, later, symbolic shapes)."""
    return UOp(Ops.DEFINE_VAR, dtype, (), (name, min_value, max_value))

  def alu(self, op: Ops, *others: UOp) -> UOp:
    srcs = (self,) + others
    out_dtype = dtypes.bool if op in GroupOp.Comparison else srcs[-1].dtype if op is Ops.WHERE else self.dtype
    return UOp(op, out_dtype, srcs)

  def _operand(self, x: Any) -> UOp: return x if isinstance(x, UOp) else self.const_like(x)

  def cast(self, dtype: DType) -> UOp: return self if self.dtype == dtype else UOp(Ops.CAST, dtype, (self,))
  def where(self, x: Any, y: Any) -> UOp:
    xu = x if isinstance(x, UOp) else (y.const_like(x) if isinstance(y, UOp) else UOp.const(dtypes.int32, x))
    return self.alu(Ops.WHERE, xu, xu._operand(y))
  def maximum(self, x: Any) -> UOp: return self.alu(Ops.MAX, self._operand(x))
  def ne(self, x: Any) -> UOp: return self.alu(Ops.CMPNE, self._operand(x))
  def eq(self, x: Any) -> UOp: return self.ne(x).logical_not()
  def logical_not(self) -> UOp: return self.ne(True)

  def __neg__(self) -> UOp: return self.alu(Ops.NEG)
  def __add__(self, x: Any) -> UOp: return self.alu(Ops.ADD, self._operand(x))
  def __radd__(self, x: Any) -> UOp: return self._operand(x).alu(Ops.ADD, self)
  def __sub__(self, x: Any) -> UOp: return self + (-self._operand(x))
  def __rsub__(self, x: Any) -> UOp: return self._operand(x) + (-self)
  def __mul__(self, x: Any) -> UOp: return self.alu(Ops.MUL, self._operand(x))
  def __rmul__(self, x: Any) -> UOp: return self._operand(x).alu(Ops.MUL, self)
  def __floordiv__(self, x: Any) -> UOp: return self.alu(Ops.IDIV, self._operand(x))
  def __mod__(self, x: Any) -> UOp: return self.alu(Ops.MOD, self._operand(x))
  def __truediv__(self, x: Any) -> UOp: return self.alu(Ops.FDIV, self._operand(x))
  def __lt__(self, x: Any) -> UOp: return self.alu(Ops.CMPLT, self._operand(x))
  def __gt__(self, x: Any) -> UOp: return self._operand(x).alu(Ops.CMPLT, self)
  def __ge__(self, x: Any) -> UOp: return (self < x).logical_not()
  def __le__(self, x: Any) -> UOp: return (self > x).logical_not()
  def __and__(self, x: Any) -> UOp: return self.alu(Ops.AND, self._operand(x))
  def __or__(self, x: Any) -> UOp: return self.alu(Ops.OR, self._operand(x))
  def __xor__(self, x: Any) -> UOp: return self.alu(Ops.XOR, self._operand(x))
  # identity semantics: hash-consing makes structural equality the same as `is`
  __eq__ = object.__eq__
  __hash__ = object.__hash__

  # ---- value bounds, for symbolic simplification ----
  @cached_property
  def _bounds(self) -> tuple[Any, Any]: return _compute_bounds(self)
  @property
  def vmin(self) -> Any: return self._bounds[0]
  @property
  def vmax(self) -> Any: return self._bounds[1]

  def simplify(self) -> UOp:
    from minigrad.uop.symbolic import symbolic  # the simplifier's rules live beside the IR
    from minigrad.uop.rewrite import graph_rewrite
    return graph_rewrite(self, symbolic)

  def evaluate(self, variables: dict[str, int] | None = None) -> Any:
    """Compute a scalar expression of CONST, DEFINE_VAR and ALU nodes in Python (for tests and folding)."""
    values: dict[UOp, Any] = {}
    for node in self.toposort:
      if node.op is Ops.CONST: values[node] = node.arg
      elif node.op is Ops.DEFINE_VAR:
        if variables is None or node.arg[0] not in variables: raise ValueError(f"no value for variable {node.arg[0]}")
        values[node] = variables[node.arg[0]]
      elif node.op in GroupOp.ALU: values[node] = exec_alu(node.op, node.dtype, tuple(values[s] for s in node.src))
      elif node.op is Ops.CAST: values[node] = truncate(values[node.src[0]], node.dtype)
      else: raise ValueError(f"can't evaluate {node.op} in Python")
    return values[self]


def _compute_bounds(u: UOp) -> tuple[Any, Any]:
  """(vmin, vmax) of an integer/bool expression from its sources' bounds; dtype limits when unknown."""
  lo, hi = dtypes.min(u.dtype), dtypes.max(u.dtype)
  if u.op is Ops.CONST and u.dtype.count == 1: return u.arg, u.arg
  if u.op is Ops.DEFINE_VAR: return u.arg[1], u.arg[2]
  if u.op is Ops.BIND: return u.src[0].arg[1], u.src[0].arg[2]   # the variable's range, not its value: one kernel for all
  if u.op is Ops.RANGE: return u.src[0].vmin, u.src[1].vmax - 1
  if u.op is Ops.SPECIAL: return 0, u.arg[1] - 1
  if not (dtypes.is_int(u.dtype) or dtypes.is_bool(u.dtype)) or u.dtype.count != 1: return lo, hi
  if u.op is Ops.CAST and (dtypes.is_int(u.src[0].dtype) or dtypes.is_bool(u.src[0].dtype)):
    s = u.src[0]
    if lo <= s.vmin and s.vmax <= hi: return int(s.vmin), int(s.vmax)
    return lo, hi
  if u.op not in GroupOp.ALU: return lo, hi
  s = u.src
  if u.op is Ops.WHERE: return min(s[1].vmin, s[2].vmin), max(s[1].vmax, s[2].vmax)
  a_lo, a_hi = s[0].vmin, s[0].vmax
  if u.op is Ops.NEG: return (-a_hi, -a_lo) if dtypes.is_int(u.dtype) else (lo, hi)
  if len(s) < 2: return lo, hi
  b_lo, b_hi = s[1].vmin, s[1].vmax
  if u.op is Ops.ADD: return _clamp(a_lo + b_lo, a_hi + b_hi, lo, hi)
  if u.op is Ops.MUL:
    products = [a_lo * b_lo, a_lo * b_hi, a_hi * b_lo, a_hi * b_hi]
    return _clamp(min(products), max(products), lo, hi)
  if u.op is Ops.MAX: return max(a_lo, b_lo), max(a_hi, b_hi)
  # a dividend at the dtype's limits may stand for a sum that overflowed (a multi-view ShapeTracker's flat position
  # can pass 2**31 while the buffer index doesn't): its quotient is unknown too, or a mask check would be dropped
  if u.op is Ops.IDIV and b_lo > 0 and lo < a_lo and a_hi < hi:
    # C division truncates toward zero; for a positive divisor it is monotonic in the dividend
    return _c_div(a_lo, b_hi if a_lo >= 0 else b_lo), _c_div(a_hi, b_lo if a_hi >= 0 else b_hi)
  if u.op is Ops.MOD and b_lo > 0:
    if a_lo >= 0: return (a_lo, a_hi) if a_hi < b_lo else (0, b_hi - 1)
    return -(b_hi - 1), b_hi - 1
  if u.op is Ops.CMPLT:
    if a_hi < b_lo: return True, True
    if a_lo >= b_hi: return False, False
    return False, True
  if u.op is Ops.CMPNE:
    if a_hi < b_lo or a_lo > b_hi: return True, True
    if a_lo == a_hi == b_lo == b_hi: return False, False
    return False, True
  if u.op is Ops.AND and dtypes.is_bool(u.dtype): return a_lo and b_lo, a_hi and b_hi
  if u.op is Ops.OR and dtypes.is_bool(u.dtype): return a_lo or b_lo, a_hi or b_hi
  return lo, hi


def _clamp(a: Any, b: Any, lo: Any, hi: Any) -> tuple[Any, Any]:
  return (a, b) if lo <= a and b <= hi else (lo, hi)


def toposort(roots: list[UOp], enter: Callable[[UOp], bool] = lambda node: True) -> list[UOp]:
  """Iterative post-order walk: each node appears once, after all of its sources (no recursion limit).
  The sources of a node for which `enter(node)` is False are not walked (the node itself is listed)."""
  order: list[UOp] = []
  seen: set[UOp] = set()
  for root in roots:
    stack: list[tuple[UOp, bool]] = [(root, False)]
    while stack:
      node, children_done = stack.pop()
      if node in seen: continue
      if children_done:
        seen.add(node)
        order.append(node)
        continue
      stack.append((node, True))
      if enter(node): stack.extend((s, False) for s in reversed(node.src) if s not in seen)
  return order


def one_hot_pick(reduce: UOp) -> tuple[UOp, UOp, UOp] | None:
  """(a, arange, x) when `reduce` sums (a == arange) * x or where(a == arange, x, 0): a one-hot against an arange
  (an embedding, a gather, indexing by a tensor) that picks one x. The lowerer reads that x directly when the
  arange runs along the reduce loop (codegen.lowerer); the GPU heuristics don't group that loop and the operand
  packing leaves x as it is."""
  if reduce.op is not Ops.REDUCE_AXIS or reduce.arg[0] is not Ops.ADD: return None
  value = reduce.src[0]
  if value.op is Ops.MUL: pairs = [value.src, value.src[::-1]]
  elif value.op is Ops.WHERE and value.src[2].op is Ops.CONST and value.src[2].arg == 0: pairs = [value.src[:2]]
  else: return None
  for hot, x in pairs:
    if (equal := int_equality(hot)) is None: continue
    for a, arange in (equal.src[0].src, equal.src[0].src[::-1]):
      if arange.op is Ops.ARANGE: return a, arange, x
  return None


def int_equality(u: UOp) -> UOp | None:
  """The bool node of `u` (past casts: a 0/1 indicator) when it is a == b for integers a and b, written
  not(a != b); its operands are `.src[0].src`. Else None."""
  while u.op is Ops.CAST: u = u.src[0]
  if u.op is Ops.CMPNE and u.src[1].op is Ops.CONST and u.src[1].arg is True and u.src[0].op is Ops.CMPNE and dtypes.is_int(u.src[0].src[0].dtype):
    return u
  return None


def pretty(root: UOp, max_nodes: int = 200) -> str:
  """A readable listing of a graph: one line per node, sources referred to by number."""
  nodes = root.toposort
  if len(nodes) > max_nodes: return f"<UOp {root.op.name} {root.dtype} ({len(nodes)} nodes)>"
  numbers = {n: i for i, n in enumerate(nodes)}
  lines = []
  for n in nodes:
    arg = "" if n.arg is None else f" {n.arg!r}"
    srcs = f" ({', '.join(f'%{numbers[s]}' for s in n.src)})" if n.src else ""
    lines.append(f"%{numbers[n]} = {n.op.name} {n.dtype.name}{srcs}{arg}")
  return "\n".join(lines)
