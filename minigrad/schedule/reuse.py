"""Schedule reuse: a graph of a structure scheduled before is not scheduled again.

A training loop builds the same graph every step: the same ops, shapes, dtypes and devices over new buffers
(this step's batch, last step's weights). The scheduler's decisions depend only on that structure, so the second
time a structure comes, its schedule is the first one's with the buffers swapped.

Input: the targets of a realize, with the results earlier schedules computed (each read from its buffer). Output: a
`Structure` (the graph's nodes in a fixed walk order and a key that is equal for two graphs exactly when they have
the same structure), and, for a key seen before, the schedule rebuilt on this graph's buffers.

The key lists every node once, in the order a depth-first walk first reaches it: its op, dtype, arg and the
positions of its sources. A BUFFER is a parameter: its device, size and dtype, not its identity. Two nodes that
are one node in one graph (the same sub-expression built twice over the same inputs) must be one node in the
other: positions say so. Constants are part of the key (they are compiled into the kernels); values that change
every step (a learning rate, Adam's bias corrections) live in buffers.

A recorded schedule (`Recipe`) holds no node of any tensor graph, only positions in the walk and the shapes of
the buffers the scheduler created, so it keeps no user's memory alive. The MAX_RECIPES most recently used are kept.
"""
from __future__ import annotations
from dataclasses import dataclass, field
from typing import Any, Callable
from itertools import chain, compress, repeat
from operator import attrgetter, is_
import math
import time
from minigrad.helpers import DEBUG
from minigrad.uop.ops import UOp, Ops
from minigrad.uop.variable import state as variables

MAX_RECIPES = 256
_op, _dtype, _arg, _src = attrgetter("op"), attrgetter("dtype"), attrgetter("arg"), attrgetter("src")


class Structure:
  """The nodes reachable from `roots` (down to the BUFFERs and their DEVICEs) in a fixed walk order (depth-first,
  each node numbered when first reached), and the key of the graph. With `realized` (scheduler.realized, a NodeTable: node -> the
  buffer view holding its value), each node found there stands for that view, as if the graph had been rebuilt on
  it: `nodes` lists the view, and its position is the node's too."""
  def __init__(self, roots: list[UOp], realized: Any = None):
    index: dict[UOp, int] = {}
    nodes: list[UOp] = []
    buffers_at: list[int] = []   # positions of the BUFFER nodes
    value_key = realized.key if realized else "_nothing_realized"   # the attribute holding a node's realized value
    BUFFER = Ops.BUFFER
    stack = list(reversed(roots))
    pop, push_all = stack.pop, stack.extend
    while stack:   # number the nodes
      node = pop()
      if node in index: continue
      if (value := getattr(node, value_key, None)) is not None and node.op is not BUFFER:
        if value not in index:
          index[value] = len(nodes)
          if value.op is BUFFER: buffers_at.append(len(nodes))
          push_all(value.src)
          nodes.append(value)
        index[node] = index[value]
        continue
      index[node] = len(nodes)
      if node.op is BUFFER: buffers_at.append(len(nodes))
      push_all(node.src)
      nodes.append(node)
    # the key's columns, each built by C loops (map, compress) rather than a Python loop per node: ops, dtypes,
    # args, the args' types (True, 1 and 1.0 are equal in Python), the signs of float args (so are 0.0 and -0.0),
    # and the sources' positions (flat, with each node's count). A BUFFER is a parameter: its arg (a unique id and
    # the size) counts as the size (its source, a DEVICE, is in the walk).
    args = list(map(_arg, nodes))
    for at in buffers_at: args[at] = args[at][1]
    if variables["in_use"]: args = list(map(_unbound, args))   # so is the value a Variable is bound to (symbolic shapes)
    arg_types = tuple(map(type, args))
    float_signs = tuple(map(math.copysign, repeat(1.0), compress(args, map(is_, arg_types, repeat(float))))) if float in arg_types else ()
    sources = list(map(_src, nodes))   # all nodes' source positions in one tuple, and how many each node has
    entries = (tuple(map(_op, nodes)), tuple(map(_dtype, nodes)), tuple(args), arg_types, float_signs,
               tuple(map(len, sources)), tuple(map(index.__getitem__, chain.from_iterable(sources))))
    self.index, self.nodes = index, nodes
    self.key = _Key((tuple(map(index.__getitem__, roots)), entries))


def _unbound(arg: Any) -> Any:
  """A symbolic VIEW's ShapeTracker over unbound Variables (minigrad/uop/variable.py): graphs that differ only in the
  values their Variables are bound to share a structure; the scheduler rebinds a replay's views to this call's."""
  return arg.unbind() if getattr(arg, "symbolic", False) else arg


class _Key:
  """A structure's key, hashed once (a training step's key has thousands of entries; a dict lookup, a pop and a
  store would hash it three times)."""
  __slots__ = ("entries", "hash")
  def __init__(self, entries: tuple): self.entries, self.hash = entries, hash(entries)
  def __hash__(self) -> int: return self.hash
  def __eq__(self, other: object) -> bool: return isinstance(other, _Key) and self.hash == other.hash and self.entries == other.entries


# A slot names a node of a replayed graph: a slot >= 0 is a position in the walk (a BUFFER of the graph, or any node
# for a value), a slot < 0 a buffer the scheduler created (-1 - its index in Recipe.new_buffers). Replay lays them
# out in one list, the walk's nodes followed by the created buffers in reverse, so that a slot is its index there.
# A value of the schedule's results is a slot, or (slot, dtype, ShapeTracker) for a VIEW of a buffer.
Value = int | tuple


@dataclass(frozen=True)
class Recipe:
  items: tuple[tuple[UOp, tuple[int, ...], int], ...]   # per kernel: its AST, the slots of its buffers, outputs
  new_buffers: tuple[tuple[str, int, Any], ...]         # (device, size, dtype) of each buffer the scheduler created
  becomes: tuple[Value, ...]                            # per target: what it becomes
  stored: tuple[tuple[int, Value], ...]                 # (walk position of a computed node, the buffer view holding it)
  seconds: float                                        # what scheduling the structure took the first time
  uses: list[int]                                       # how often it was reused (one counter, mutable)
  run: list = field(default_factory=lambda: [None], compare=False)   # the engine's plan for running it (engine/eager.py)


recipes: dict[_Key, Recipe] = {}


def record(structure: Structure, items: list, becomes: list[UOp], stored: dict[UOp, UOp], seconds: float) -> None:
  """Remember a schedule of `structure`: its items (ScheduleItems), the value each target becomes and the stored
  nodes. A schedule whose values can't be said in terms of positions and slots is not kept."""
  new_slots: dict[UOp, int] = {}
  new_buffers: list[tuple[str, int, Any]] = []

  def slot(buffer: UOp) -> int:
    if (position := structure.index.get(buffer)) is not None: return position
    if buffer not in new_slots:
      new_slots[buffer] = -1 - len(new_buffers)
      new_buffers.append((buffer.device, buffer.arg[1], buffer.dtype))
    return new_slots[buffer]

  def value(u: UOp) -> Value | None:
    if u in structure.index: return structure.index[u]
    if u.op is Ops.BUFFER: return slot(u)
    if u.op is Ops.VIEW and u.src[0].op is Ops.BUFFER: return (slot(u.src[0]), u.dtype, u.arg)
    return None

  recipe_items = tuple((item.ast, tuple(slot(b) for b in item.bufs), item.outputs) for item in items)
  becomes_values = tuple(value(u) for u in becomes)
  stored_values = tuple((structure.index.get(node, -1), value(view)) for node, view in stored.items())
  if None in becomes_values or any(p < 0 or v is None for p, v in stored_values): return
  recipes[structure.key] = Recipe(recipe_items, tuple(new_buffers), becomes_values, stored_values, seconds, [0])
  while len(recipes) > MAX_RECIPES: del recipes[next(iter(recipes))]


def find(structure: Structure) -> Recipe | None:
  """The schedule recorded for this structure (now the most recently used), or None."""
  if (recipe := recipes.pop(structure.key, None)) is not None: recipes[structure.key] = recipe
  return recipe


def replay(structure: Structure, make_item: Callable[..., Any]) -> tuple[list, list[UOp], dict[UOp, UOp]] | None:
  """The schedule recorded for this structure, on this graph's buffers: (items, what each target becomes, stored
  nodes), with new buffers for what the scheduler created; None if the structure wasn't seen (or was forgotten)."""
  if (recipe := find(structure)) is None: return None
  start = time.perf_counter()
  nodes = structure.nodes
  slots = nodes + [UOp.new_buffer(device, size, dtype) for device, size, dtype in reversed(recipe.new_buffers)]
  node_at = slots.__getitem__

  def value(v: Value) -> UOp: return slots[v] if v.__class__ is int else UOp(Ops.VIEW, v[1], (slots[v[0]],), v[2])

  items = [make_item(ast, tuple(map(node_at, buffers)), outputs) for ast, buffers, outputs in recipe.items]
  becomes = [value(v) for v in recipe.becomes]
  stored = {nodes[position]: value(v) for position, v in recipe.stored}
  recipe.uses[0] += 1
  if DEBUG >= 2:
    print(f"schedule: reused a structure of {len(nodes)} nodes, {len(items)} kernels (use {recipe.uses[0] + 1}): "
          f"{(time.perf_counter() - start) * 1e3:.2f} ms, first built in {recipe.seconds * 1e3:.2f} ms")
  return items, becomes, stored
