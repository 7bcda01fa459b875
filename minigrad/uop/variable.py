"""Symbolic sizes: `Variable(name, min, max)`, bound to a value for one call with `.bind(value)`.

Input: names, bounds and values from the user; UOp expressions over DEFINE_VAR / BIND. Output: `Variable` (the
user-facing symbolic integer that shapes may hold), and helpers the other stages share: `to_uop` / `from_uop`
(between a shape entry and its UOp expression), `unbind` (the expression over DEFINE_VAR only, what kernels see) and
`bound_values` (name -> value of the BIND nodes in expressions).

How a symbolic size is represented. In the IR a shape entry that is a variable length is a scalar int UOp expression
over BIND(DEFINE_VAR, CONST value) nodes: `pos`, `pos + 1`, `pos * 64`. A ShapeTracker keeps the integer part of
every dim at its largest possible value (the expression's `vmax`: buffers are allocated for the longest case and the
index math is the same for every value) and, in `extents`, the expression for the dims whose length varies. Kernel
ASTs hold the expressions unbound (DEFINE_VAR only), so one AST - one compiled kernel - serves every value; the
values travel beside the schedule and reach the kernel as int arguments.

A `Variable` wraps such an expression for the Tensor API: `Tensor.shape` shows it, `x.shrink(((0, v), None))`,
`x[:, :v]`, `x.reshape(v, -1)`, `Tensor.arange(v)` take it. It has no truth value and no int value (`int(v)`,
`bool(v)`, `range(v)` raise): code that needs a concrete number must ask for `v.val` explicitly, so a symbolic size
never turns silently into the number it had when a kernel was built.
"""
from __future__ import annotations
from typing import Any
import operator
from minigrad.dtype import dtypes
from minigrad.uop.ops import UOp, Ops, NodeTable, toposort

# set once the first Variable is made: until then nothing in the tensor graph can be symbolic, and the stages skip
# looking for variables (the eager paths stay as fast as before)
state = {"in_use": False}


# names a Variable can't take: it becomes a parameter of C, LLVM, OpenCL and CUDA kernels, next to these
RESERVED_NAMES = frozenset("""core_start core_end bufs auto break case char const continue default do double else enum extern
float for goto if inline int long register restrict return short signed sizeof static struct switch typedef union unsigned
void volatile while bool half uint uchar ushort ulong size_t kernel global local constant private sqrt exp log sin cos tan
pow fmax fmin max min abs fabs trunc floor ceil round select mad fma true false NULL nan inf""".split())


class Variable:
  """A named integer in [min, max] used as a size: `pos = Variable("pos", 1, 64).bind(5)`. Arithmetic with ints
  (`pos + 1`, `pos * 8`, `pos - 2`) gives symbolic sizes too. Two sizes are equal when they are the same expression
  with the same bound values."""
  __slots__ = ("uop",)

  def __init__(self, name: str, min: int, max: int):   # noqa: A002 (min/max: the names users expect, as in tinygrad)
    if not isinstance(name, str) or not name.isidentifier():
      raise ValueError(f"Variable name must be an identifier (it names a kernel argument), got {name!r}")
    if name in RESERVED_NAMES or name.startswith("__"):
      raise ValueError(f"Variable name {name!r} is reserved (a keyword, type or function of the kernel languages, or a name kernels use)")
    if name[-1].isdigit():   # generated kernel names are a prefix and a number (alu0, data1, gidx0): never clash with them
      raise ValueError(f"Variable name {name!r} must not end with a digit (kernels name their values <prefix><number>)")
    for what, value in (("min", min), ("max", max)):
      if not isinstance(value, int) or isinstance(value, bool): raise TypeError(f"Variable {name}: {what} must be an int, got {value!r}")
    if not 0 <= min <= max: raise ValueError(f"Variable {name}: need 0 <= min <= max, got min={min}, max={max}")
    if max >= 2**31: raise ValueError(f"Variable {name}: max {max} does not fit a 32-bit kernel argument")
    state["in_use"] = True
    self.uop = UOp.variable(name, min, max)

  @staticmethod
  def wrap(uop: UOp) -> Variable:
    """A Variable for an existing expression (no checks)."""
    out = Variable.__new__(Variable)
    out.uop = uop
    return out

  # ---- facts ----
  @property
  def name(self) -> str:
    leaf = self._leaf("name")
    return leaf.arg[0]
  @property
  def min(self) -> int: return int(self.uop.vmin)
  @property
  def max(self) -> int: return int(self.uop.vmax)
  @property
  def bound(self) -> bool:
    """Every variable in the expression has a value."""
    nodes = self.uop.toposort
    return {n for n in nodes if n.op is Ops.DEFINE_VAR} <= {n.src[0] for n in nodes if n.op is Ops.BIND}

  @property
  def val(self) -> int:
    """The value of the expression with the bound values; ValueError when a variable is unbound."""
    return value_of(self.uop)

  def _leaf(self, what: str) -> UOp:
    u = self.uop.src[0] if self.uop.op is Ops.BIND else self.uop
    if u.op is not Ops.DEFINE_VAR: raise AttributeError(f"{what}: {self} is an expression, not a single Variable")
    return u

  # ---- binding ----
  def bind(self, value: int) -> Variable:
    """This variable with a value for one call (checked against [min, max])."""
    var = self._leaf("bind")
    name, lo, hi = var.arg
    if not isinstance(value, int) or isinstance(value, bool):
      try: value = operator.index(value)
      except TypeError: raise TypeError(f"Variable {name}: bind takes an int, got {value!r}") from None
    if not lo <= value <= hi: raise ValueError(f"Variable {name}: value {value} is outside its range [{lo}, {hi}]")
    return Variable.wrap(UOp(Ops.BIND, dtypes.int32, (var, UOp.const(dtypes.int32, value))))

  def unbind(self) -> tuple[Variable, int]:
    """(the unbound variable, its value), as tinygrad's."""
    if self.uop.op is not Ops.BIND: raise ValueError(f"{self} is not a bound variable")
    return Variable.wrap(self.uop.src[0]), self.uop.src[1].arg

  # ---- arithmetic: symbolic sizes ----
  def _other(self, x: Any, op: str) -> UOp:
    if isinstance(x, Variable): return x.uop
    if isinstance(x, int) and not isinstance(x, bool): return UOp.const(dtypes.int32, x)
    raise TypeError(f"unsupported operand for symbolic size {self} {op} {x!r}: only ints and Variables")
  def __add__(self, x: Any) -> Variable: return Variable.wrap((self.uop + self._other(x, "+")).simplify())
  def __radd__(self, x: Any) -> Variable: return Variable.wrap((self._other(x, "+") + self.uop).simplify())
  def __sub__(self, x: Any) -> Variable: return Variable.wrap((self.uop - self._other(x, "-")).simplify())
  def __rsub__(self, x: Any) -> Variable: return Variable.wrap((self._other(x, "-") - self.uop).simplify())
  def __mul__(self, x: Any) -> Variable: return Variable.wrap((self.uop * self._other(x, "*")).simplify())
  def __rmul__(self, x: Any) -> Variable: return Variable.wrap((self._other(x, "*") * self.uop).simplify())
  def __floordiv__(self, x: Any) -> Variable:
    if not isinstance(x, int) or x <= 0: raise TypeError(f"symbolic size {self} // {x!r}: only a positive int divisor")
    return Variable.wrap((self.uop // x).simplify())
  def __neg__(self) -> Variable: raise TypeError(f"a symbolic size can't be negated ({self})")

  # ---- no silent concretization ----
  def __bool__(self) -> bool: raise TypeError(f"the symbolic size {self} has no truth value; use .val for the bound value")
  def __index__(self) -> int: raise TypeError(f"the symbolic size {self} is not an int; use .val for the bound value")
  def __int__(self) -> int: raise TypeError(f"the symbolic size {self} is not an int; use .val for the bound value")
  def __float__(self) -> float: raise TypeError(f"the symbolic size {self} is not a number; use .val for the bound value")

  def __eq__(self, other: object) -> bool:
    if isinstance(other, Variable): return self.uop is other.uop
    return False   # never equal to an int: a variable length is not the number it happens to have now
  def __ne__(self, other: object) -> bool: return not self == other
  def __hash__(self) -> int: return hash(self.uop)

  def _compare(self, other: Any, op: str) -> bool:
    """Comparisons the bounds decide; anything else is an error (not a guess)."""
    lo, hi = self.min, self.max
    olo, ohi = (other.min, other.max) if isinstance(other, Variable) else (other, other)
    decided = {"<": (hi < olo, lo >= ohi), "<=": (hi <= olo, lo > ohi), ">": (lo > ohi, hi <= olo), ">=": (lo >= ohi, hi < olo)}[op]
    if decided[0]: return True
    if decided[1]: return False
    raise TypeError(f"can't decide {self} {op} {other!r} for every value of the symbolic size (range [{lo}, {hi}])")
  def __lt__(self, other: Any) -> bool: return self._compare(other, "<")
  def __le__(self, other: Any) -> bool: return self._compare(other, "<=")
  def __gt__(self, other: Any) -> bool: return self._compare(other, ">")
  def __ge__(self, other: Any) -> bool: return self._compare(other, ">=")

  def __repr__(self) -> str: return render(self.uop)


def render(u: UOp) -> str:
  """A short readable form of a size expression: `pos`, `pos=5`, `(pos*64)`."""
  if u.op is Ops.CONST: return str(u.arg)
  if u.op is Ops.DEFINE_VAR: return f"{u.arg[0]}[{u.arg[1]}-{u.arg[2]}]"
  if u.op is Ops.BIND: return f"{u.src[0].arg[0]}={u.src[1].arg}"
  symbol = {Ops.ADD: "+", Ops.MUL: "*", Ops.IDIV: "//", Ops.MOD: "%", Ops.MAX: " max "}.get(u.op)
  if symbol is None or len(u.src) != 2: return f"<{u.op.name}>"
  return f"({render(u.src[0])}{symbol}{render(u.src[1])})"


# ---------------------------------------------------------------------------------------------------------------
# helpers the stages share

def is_symbolic(x: Any) -> bool: return isinstance(x, (Variable, UOp))


def to_uop(x: Any) -> Any:
  """A shape entry for the IR: a Variable becomes its UOp expression; ints (and UOps) stay."""
  return x.uop if isinstance(x, Variable) else x


def from_uop(x: Any) -> Any:
  """A shape entry for the user: a UOp expression becomes a Variable (a constant one becomes its int)."""
  if isinstance(x, UOp): return x.arg if x.op is Ops.CONST else Variable.wrap(x)
  return x


def max_size(x: Any) -> int:
  """The integer part of a shape entry: the entry itself, or a symbolic size's largest value (what is allocated)."""
  if isinstance(x, Variable): x = x.uop
  return int(x.vmax) if isinstance(x, UOp) else x


_unbound = NodeTable("unbound")


def unbind(u: UOp) -> UOp:
  """The expression with each BIND replaced by its variable: what a kernel AST holds."""
  if (found := _unbound.get(u)) is not None: return found
  binds = {n: n.src[0] for n in u.toposort if n.op is Ops.BIND}
  _unbound[u] = out = u.substitute(binds) if binds else u
  return out


def bound_values(u: UOp, into: dict[str, int] | None = None) -> dict[str, int]:
  """name -> value of every BIND in `u` (added to `into`); two different values for one name is an error."""
  values = {} if into is None else into
  for n in u.toposort:
    if n.op is not Ops.BIND: continue
    name, value = n.src[0].arg[0], n.src[1].arg
    if values.setdefault(name, value) != value:
      raise ValueError(f"Variable {name} is bound to two values ({values[name]} and {value}) in one computation "
                       "(realize a result made with one value before using it with another)")
  return values


def rebind(u: UOp, values: dict[str, int]) -> UOp:
  """The expression with the Variables named in `values` bound to those values (bound or not before)."""
  u = unbind(u)
  binds = {n: UOp(Ops.BIND, n.dtype, (n, UOp.const(dtypes.int32, values[n.arg[0]]))) for n in u.toposort if n.op is Ops.DEFINE_VAR and n.arg[0] in values}
  return u.substitute(binds) if binds else u


def value_of(u: UOp) -> int:
  """The value of a size expression with its bound values; ValueError naming an unbound variable."""
  values = bound_values(u)
  return u.src[1].arg if u.op is Ops.BIND else unbind(u).evaluate(values)


# ---------------------------------------------------------------------------------------------------------------
# symbolic shapes of tensor-graph nodes

_extents = NodeTable("extents")
_NONE = object()


def extents_of(node: UOp) -> tuple | None:
  """Per dim of a tensor-graph node the size expression (bound) of a variable-length dim, or None for a fixed one;
  None when every dim is fixed. A VIEW says it in its ShapeTracker; other nodes take their sources' (a reduce drops
  the axes it reduces)."""
  if not state["in_use"]: return None
  if node.op is Ops.VIEW: return node.arg.extents
  if (found := _extents.get(node, _NONE)) is not _NONE: return found
  for n in toposort([node], enter=lambda n: n.op is not Ops.VIEW and n not in _extents):
    if n.op is Ops.VIEW or n in _extents: continue
    result = None
    if n.op not in (Ops.BUFFER, Ops.CONST, Ops.ARANGE, Ops.DEVICE, Ops.DEFINE_VAR, Ops.BIND):
      sources = n.src[:1] if n.op is Ops.COPY else [s for s in n.src if s.op is not Ops.DEVICE]
      found = [s.arg.extents if s.op is Ops.VIEW else _extents.get(s) for s in sources]
      result = next((e for e in found if e is not None), None)
      if result is not None and any(e != result for e in found):   # the Tensor API checks this; never guess a length
        raise ValueError(f"{n.op.name}: operands of symbolic shapes {[symbolic_shape(s) for s in sources]} disagree on a variable length")
      if result is not None and n.op is Ops.REDUCE_AXIS:
        result = tuple(None if axis in n.arg[1] else e for axis, e in enumerate(result))
        if all(e is None for e in result): result = None
    _extents[n] = result
  return _extents[node]


def symbolic_shape(node: UOp, bound: bool = True) -> tuple:
  """The node's shape with size expressions (UOps) for its variable-length dims; `bound=False`: over DEFINE_VARs.
  Read by every movement op: until a Variable exists it is the plain shape, with no further call."""
  if not state["in_use"]: return node.shape
  extents = extents_of(node)
  if extents is None: return node.shape
  return tuple(s if e is None else (e if bound else unbind(e)) for s, e in zip(node.shape, extents))


def user_shape(node: UOp) -> tuple:
  """Tensor.shape: ints, and Variables for the variable-length dims."""
  extents = extents_of(node)
  if extents is None: return node.shape
  return tuple(s if e is None else Variable.wrap(e) for s, e in zip(node.shape, extents))
