"""Multi-output kernels: elementwise kernels over the same elements that read the same data become one kernel.

Input: the scheduler's ScheduleItems in run order. Output: the same work in fewer items; a merged item stores
several outputs (`outputs` of them, its first buffers) in one loop nest.

Adam's update of one parameter is the example: new_m = f(g, m), new_v = f(g, v) and new_w = f(w, new_m, new_v)
were three kernels, each reading g or the new moments back from memory. Merged, one kernel reads g, m, v and w
once and writes m, v and w: new_w uses the values of new_m and new_v it just computed instead of loading them.

When an item joins a group:
  - both are elementwise (no reduce), store one output through the same contiguous view (so element i of every
    output is computed in the same loop trip) with the same dtype, on the same device;
  - the item reads something the group reads or writes (merging unrelated kernels saves no memory traffic);
  - an output of the group that the item reads is read through that same view (then it is the value itself).
A merged group runs where its last member ran. That is only valid if no item in between reads one of its
outputs: such a reader closes the group (nothing joins it later). Every item writes a fresh buffer, so moving
a member later never changes what it reads.
"""
from __future__ import annotations
from typing import Callable
from minigrad.uop.ops import UOp, Ops

MAX_OUTPUTS = 8   # a bigger kernel mostly adds register pressure and compile time
MAX_BUFFERS = 16


class _Group:
  def __init__(self, item) -> None:
    self.items, self.closed = [item], False
    self.outputs = {item.bufs[0]}
    self.touched = set(item.bufs)

  def can_take(self, item) -> bool:
    if self.closed or len(self.items) >= MAX_OUTPUTS or len(self.touched | set(item.bufs)) > MAX_BUFFERS: return False
    if not self.touched & set(item.bufs[1:]): return False
    view = _store(self.items[0]).src[1]
    return all(load.src[1] is view for load in _loads(item) if item.bufs[load.src[0].arg] in self.outputs)

  def add(self, item) -> None:
    self.items.append(item)
    self.outputs.add(item.bufs[0])
    self.touched |= set(item.bufs)


def _store(item) -> UOp: return item.ast.src[0]
def _loads(item) -> list[UOp]: return [n for n in item.ast.toposort if n.op is Ops.LOAD]


def _merge_key(item) -> tuple | None:
  """What items must share to be merged, or None if the item can't be merged at all."""
  if len(item.ast.src) != 1 or item.outputs != 1: return None
  store = _store(item)
  if not store.src[1].arg.contiguous or any(n.op in (Ops.REDUCE_AXIS, Ops.SORT) for n in item.ast.toposort): return None
  return (item.device, store.src[1], store.src[2].dtype)


def merge_elementwise(items: list, make_item: Callable) -> list:
  """Items in run order -> items in run order with mergeable neighbours merged (see the module docstring).
  `make_item(ast, bufs, outputs)` builds a ScheduleItem."""
  groups: list[_Group] = []
  open_group: dict[tuple, _Group] = {}
  writer: dict[UOp, _Group] = {}   # output buffer -> the group writing it
  for item in items:
    key = _merge_key(item)
    group = open_group.get(key) if key is not None else None
    if group is not None and group.can_take(item): group.add(item)
    else:
      group = _Group(item)
      groups.append(group)
      if key is not None: open_group[key] = group
    for buf in item.bufs[1:]:   # whoever reads a group's output runs after it: the group can't move past it
      if (source := writer.get(buf)) is not None and source is not group: source.closed = True
    for buf in item.bufs[:item.outputs]: writer[buf] = group
  last_position = {id(item): i for i, item in enumerate(items)}
  groups.sort(key=lambda g: last_position[id(g.items[-1])])
  return [g.items[0] if len(g.items) == 1 else _merged(g, make_item) for g in groups]


def _merged(group: _Group, make_item: Callable):
  """One item storing every member's output: outputs first, then the inputs no member writes."""
  outputs = [item.bufs[0] for item in group.items]
  inputs = list(dict.fromkeys(b for item in group.items for b in item.bufs[1:] if b not in outputs))
  position = {buf: i for i, buf in enumerate(outputs + inputs)}
  values: dict[UOp, UOp] = {}   # output buffer -> the value its member stores (with the merged kernel's globals)
  stores = []
  for item in group.items:
    replace: dict[UOp, UOp] = {}
    for node in item.ast.toposort:
      if node.op is Ops.DEFINE_GLOBAL: replace[node] = node.replace(arg=position[item.bufs[node.arg]])
      elif node.op is Ops.LOAD and (buf := item.bufs[node.src[0].arg]) in values: replace[node] = values[buf]
    store = _store(item).substitute(replace)
    values[item.bufs[0]] = store.src[2]
    stores.append(store)
  return make_item(UOp(Ops.SINK, group.items[0].ast.dtype, tuple(stores)), tuple(outputs + inputs), len(outputs))
