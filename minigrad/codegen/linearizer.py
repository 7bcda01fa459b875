"""Linearization: lowered loop code (a graph) -> a flat list of UOps in execution order.

Input: the lowerer's SINK. Output: a list of UOps where RANGE opens a loop and ENDRANGE closes it, and each
REDUCE has become DEFINE_ACC (before its loops) + ASSIGN (inside) with users reading the accumulator after
the loops close. Every node is emitted after its sources and inside exactly the loops it depends on.

A one-hot term (value * (a == b) for integers, see one_hot_term) is added under IF / ENDIF instead, on renderers
that ask for it (`gated_reduces`): the value is computed only where the condition holds.

Placement rule: the global loops open first, outermost first. A node goes where it is first needed; before
a reduce opens its loops, everything the reduce's body needs that does not depend on those loops is
emitted outside them, so loop-invariant values are computed once and stay in scope after the loop.
"""
from __future__ import annotations
from typing import Any, TYPE_CHECKING
from minigrad.dtype import DType, dtypes
from minigrad.uop.ops import UOp, Ops, int_equality, reduce_identity, toposort
if TYPE_CHECKING: from minigrad.codegen.kernel import Kernel


def _ranges_of(sink: UOp) -> dict[UOp, frozenset[UOp]]:
  """For each node, the loops it must be inside: the RANGEs it depends on, minus those its REDUCEs close."""
  inside: dict[UOp, frozenset[UOp]] = {}
  for node in sink.toposort:
    deps = frozenset().union(*(inside[s] for s in node.src)) if node.src else frozenset()
    if node.op is Ops.RANGE: deps = deps | {node}
    elif node.op is Ops.REDUCE: deps = frozenset(inside[node.src[0]]) - set(node.src[1:])
    inside[node] = deps
  return inside


def _body_order(value: UOp) -> list[UOp]:
  """Post-order of `value`'s graph without entering REDUCE bodies (a nested reduce is one step)."""
  return toposort([value], enter=lambda node: node.op is not Ops.REDUCE)


CHAINED_ACCUMULATORS = 8   # two FMA units times a 4-cycle latency: independent chains that keep both busy


def product_terms(reduce: UOp) -> list[UOp]:
  """What one trip of `reduce`'s loops adds to its accumulator, as the terms to add one after the other. A sum of
  products (m0 + m1) + m2 ... (an unrolled reduce: a 3x3 window's nine) is added product by product, so each becomes
  one fused multiply-add into the accumulator, rather than a separate sum added at the end (one multiply-add fewer per
  trip and a live temporary less per accumulator: conv2d 3x3 kernel +11% on one core). Anything else is added whole.
  The emitter uses these terms only when the loop has at least CHAINED_ACCUMULATORS accumulators (else the chain
  through one would be its critical path)."""
  head, terms = reduce.src[0], []
  if reduce.arg is not Ops.ADD: return [head]
  while head.op is Ops.ADD and head.src[1].op is Ops.MUL:
    terms.append(head.src[1])
    head = head.src[0]
  return [head] + terms[::-1] if terms and head.op is Ops.MUL else [reduce.src[0]]


def one_hot_term(term: UOp) -> tuple[UOp, UOp] | None:
  """(condition, value) when `term`, what a reduce adds per trip, is value * (a == b) or where(a == b, value, 0) for
  integers a and b, the condition the same for every lane: a one-hot product, as an embedding's gradient sums a
  token's gradient row into the row of its id (sum over tokens t of (id[t] == v) * grad[t]). The condition is true
  for one v in the vocabulary."""
  if term.op is Ops.MUL: pairs = [term.src, term.src[::-1]]
  elif term.op is Ops.WHERE and (zero := _one_lane(term.src[2])).op is Ops.CONST and zero.arg == 0: pairs = [term.src[:2]]
  else: return None
  for indicator, value in pairs:
    if (condition := int_equality(_one_lane(indicator))) is not None and condition.dtype.count == 1: return condition, value
  return None


def _one_lane(u: UOp) -> UOp:
  """The value in every lane of a VECTORIZE of one value (a broadcast), else `u` itself."""
  return u.src[0] if u.op is Ops.VECTORIZE and all(s is u.src[0] for s in u.src) else u


class _Emitter:
  def __init__(self, sink: UOp, gated: bool = False):
    self.gated = gated                     # one-hot terms are added under an IF (see one_hot_term)
    self.inside = _ranges_of(sink)
    self.out: list[UOp] = []
    self.emitted: dict[UOp, UOp] = {}     # graph node -> the node in `out` that stands for it
    self.scopes: list[list[UOp]] = []      # nodes emitted inside each open reduce loop
    self.acc_count = 0
    self.reduces = [u for u in sink.toposort if u.op is Ops.REDUCE]
    self.ancestors: dict[UOp, set[UOp]] = {}

  def place(self, node: UOp, emitted_node: UOp) -> None:
    self.emitted[node] = emitted_node
    if self.scopes: self.scopes[-1].append(node)

  def emit(self, root: UOp) -> None:
    for node in _body_order(root):
      if node in self.emitted: continue
      if node.op is Ops.REDUCE:
        self.emit_reduce(node)
        continue
      if node.op is Ops.RANGE:   # loops are opened by the kernel (globals) or by their reduce
        raise RuntimeError(f"range {node.arg} used outside its loop")
      rebuilt = node.replace(src=tuple(self.emitted[s] for s in node.src))
      self.out.append(rebuilt)
      self.place(node, rebuilt)

  def emit_reduce(self, reduce: UOp) -> None:
    """Emit `reduce` together with every other pending REDUCE over the same loops that is independent of it:
    one loop nest, one accumulator each (an upcast matmul keeps all its accumulators in one k loop)."""
    loops = reduce.src[1:]
    group = [reduce]
    for r in self.reduces:   # independent of every member, not just of `reduce` (two rows' max and sum: each row's
      # sum needs its own max, so the other row's max and sum can't join together), and inside no loop that `reduce`
      # is not inside (a reduce hoisted out of a global loop can't take along one that reads that loop's index)
      if r not in group and r.src[1:] == loops and r not in self.emitted and self.inside[r] <= self.inside[reduce] and \
         not any(self.depends(r, g) or self.depends(g, r) for g in group):
        group.append(r)
    # what the bodies need from outside these loops comes first, so it stays in scope afterwards
    for member in group:
      for node in _body_order(member.src[0]):
        if node not in self.emitted and not (self.inside[node] & set(loops)) and node.op is not Ops.RANGE: self.emit(node)
    accs = []
    for member in group:
      value_dtype = member.src[0].dtype
      identity = UOp.const(value_dtype, reduce_identity(member.arg, value_dtype.scalar()))
      self.emit(identity)
      accs.append(UOp(Ops.DEFINE_ACC, value_dtype, (self.emitted[identity],), self.acc_count))
      self.acc_count += 1
      self.out.append(accs[-1])
    for rng in loops:
      self.emit_range(rng)
      self.scopes.append([])
    # one-hot terms: each condition's accumulators are updated under an IF, with the values computed only there
    gates = {m: gate for m in group if self.gated and m.arg is Ops.ADD and (gate := one_hot_term(m.src[0])) is not None}
    plain = [(m, acc) for m, acc in zip(group, accs) if m not in gates]
    # a chain of multiply-adds through each accumulator pays off once enough accumulators hide its latency
    terms = {member: product_terms(member) if len(group) >= CHAINED_ACCUMULATORS else [member.src[0]] for member, _ in plain}
    for member, _ in plain:
      for term in terms[member]: self.emit(term)
    for member, acc in plain: self.accumulate(member, acc, terms[member])
    by_condition: dict[UOp, list[tuple[UOp, UOp]]] = {}
    for member, acc in zip(group, accs):
      if member in gates: by_condition.setdefault(gates[member][0], []).append((member, acc))
    for condition, members in by_condition.items():
      self.emit(condition)
      branch = UOp(Ops.IF, dtypes.void, (self.emitted[condition],), len(self.out))   # arg: one IF per place
      self.out.append(branch)
      self.scopes.append([])
      for member, acc in members:
        self.emit(gates[member][1])
        self.accumulate(member, acc, [gates[member][1]])
      self.out.append(UOp(Ops.ENDIF, dtypes.void, (branch,)))
      for node in self.scopes.pop(): del self.emitted[node]   # computed only where the condition held
    for rng in reversed(loops):
      self.out.append(UOp(Ops.ENDRANGE, dtypes.void, (self.emitted[rng],)))
      for node in self.scopes.pop(): del self.emitted[node]   # out of scope once the loop closes
      del self.emitted[rng]
    # vector accumulators over reduce lanes: combine their lanes, several at once where their widths allow
    alike: dict[tuple[Ops, DType, DType], list[tuple[UOp, UOp]]] = {}   # (op, result dtype, accumulator dtype) -> members
    for member, acc in zip(group, accs):
      if acc.dtype.count == member.dtype.count: self.place(member, acc)
      else: alike.setdefault((member.arg, member.dtype, acc.dtype), []).append((member, acc))
    for (op, dtype, acc_dtype), members in alike.items():
      width = acc_dtype.count
      while members:
        count = 1 << (min(len(members), width).bit_length() - 1)   # a power of two of them
        chunk, members = members[:count], members[count:]
        if count == 1 or width & (width - 1) or dtype.count != 1:
          for member, acc in chunk: self.place(member, self.combine_lanes(acc, op))
        else:
          for (member, _), total in zip(chunk, self.combine_lanes_of_many([acc for _, acc in chunk], op)): self.place(member, total)

  def accumulate(self, member: UOp, acc: UOp, terms: list[UOp]) -> None:
    """acc = acc op term, term after term, then the ASSIGN that writes the accumulator."""
    total = acc
    for term in terms:
      total = total.alu(member.arg, self.emitted[term])
      self.out.append(total)
    self.out.append(UOp(Ops.ASSIGN, acc.dtype, (acc, total)))

  def combine_lanes(self, vector: UOp, op: Ops) -> UOp:
    """Combine the lanes of `vector` with `op` as a tree of vector ops: its two halves, then the two halves of
    that... (log2(W) shuffles and ops, where a chain through the lanes takes W - 1 extracts and ops)."""
    while vector.dtype.count > 1:
      half, scalar = vector.dtype.count // 2, vector.dtype.scalar()
      lanes = [UOp(Ops.GEP, scalar, (vector,), lane) for lane in range(vector.dtype.count)]
      self.out.extend(lanes)
      if vector.dtype.count % 2:   # an odd width: one lane after the other
        result = lanes[0]
        for lane in lanes[1:]:
          result = result.alu(op, lane)
          self.out.append(result)
        return result
      low, high = lanes[:half], lanes[half:]
      if half > 1:
        low, high = [UOp(Ops.VECTORIZE, scalar.vec(half), tuple(part)) for part in (low, high)]
        self.out.extend([low, high])
      else: low, high = low[0], high[0]
      vector = low.alu(op, high)
      self.out.append(vector)
    return vector

  def combine_lanes_of_many(self, vectors: list[UOp], op: Ops) -> list[UOp]:
    """Combine the lanes of each of N vectors of W lanes (N <= W, both powers of two): N-1 rounds of a shuffle of
    two vectors and one op give one vector holding W/N partial results of each, then log2(W/N) halvings finish
    them (16 accumulators of 16 lanes: 15 ops and 30 shuffles, where one at a time takes 64 ops and about 100
    shuffles and extracts; nn.Linear's 128x128 forward: -15%). A shuffle is a VECTORIZE of GEPs of two vectors."""
    width, scalar = vectors[0].dtype.count, vectors[0].dtype.scalar()

    def shuffle(a: UOp, b: UOp, picks: list[tuple[int, int]]) -> UOp:   # (0: a / 1: b, lane)
      lanes = [UOp(Ops.GEP, scalar, ((a, b)[which],), lane) for which, lane in picks]
      self.out.extend(lanes)
      vector = UOp(Ops.VECTORIZE, scalar.vec(len(picks)), tuple(lanes))
      self.out.append(vector)
      return vector

    def halves(sources: tuple[UOp, ...], block: int, blocks: int) -> UOp:
      """The low halves of the `blocks` blocks of `block` lanes of each source, op their high halves."""
      low = [(which, k * block + i) for which in range(len(sources)) for k in range(blocks) for i in range(block // 2)]
      high = [(which, lane + block // 2) for which, lane in low]
      combined = shuffle(sources[0], sources[-1], low).alu(op, shuffle(sources[0], sources[-1], high))
      self.out.append(combined)
      return combined

    level, block = list(vectors), width   # the vectors of a round hold blocks of `block` lanes, one per accumulator
    while len(level) > 1:
      level = [halves((a, b), block, width // block) for a, b in zip(level[::2], level[1::2])]
      block //= 2
    result = level[0]
    while block > 1:   # fewer accumulators than lanes: halve the blocks of the one vector left
      result = halves((result,), block, len(vectors))
      block //= 2
    lanes = [UOp(Ops.GEP, scalar, (result,), i) for i in range(len(vectors))]
    self.out.extend(lanes)
    return lanes

  def depends(self, node: UOp, other: UOp) -> bool:
    if node not in self.ancestors: self.ancestors[node] = set(node.toposort)
    return other in self.ancestors[node]

  def emit_range(self, rng: UOp) -> None:
    for bound in rng.src:
      if bound not in self.emitted: self.emit(bound)
    rebuilt = rng.replace(src=tuple(self.emitted[s] for s in rng.src))
    self.out.append(rebuilt)
    self.emitted[rng] = rebuilt


def linearize(sink: UOp, gated: bool = False) -> list[UOp]:
  """Flatten lowered code: the global (output) loops open first, outermost first. A reduce that doesn't depend on
  the inner global loops is computed before they open (a softmax's row sum: once per row, not per element). With
  `gated` (renderers that render IF/ENDIF), one-hot terms are added under an IF (see one_hot_term)."""
  emitter = _Emitter(sink, gated)
  global_ranges = sorted((u for u in emitter.inside[sink] if u.arg[1] == "global"), key=lambda u: u.arg[0])
  opened: set[UOp] = set()
  for rng in global_ranges:
    emitter.emit_range(rng)
    opened.add(rng)
    for reduce in emitter.reduces:
      if reduce not in emitter.emitted and emitter.inside[reduce] <= opened: emitter.emit(reduce)
  for store in sink.src: emitter.emit(store)
  for rng in reversed(global_ranges):
    emitter.out.append(UOp(Ops.ENDRANGE, dtypes.void, (emitter.emitted[rng],)))
  return emitter.out


def linearize_for(kernel: "Kernel", renderer: Any) -> list[UOp]:
  """Lower and linearize `kernel` in the shape `renderer` asks for: CPU loops (threaded outer loop, SIMD lanes) or,
  for renderers with `has_local`, GPU workgroup/thread ids."""
  from minigrad.codegen.lowerer import lower
  return linearize(lower(kernel, threaded=getattr(renderer, "threaded_outer_loop", False),
                         vector_lanes=getattr(renderer, "vector_lanes", False), gpu=getattr(renderer, "has_local", False)),
                   gated=getattr(renderer, "gated_reduces", False))

