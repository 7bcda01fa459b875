"""Vectorization: turn the kernel's "vector" range (the innermost upcast dim) into SIMD lanes.

Input: lowered loop code (a SINK) with at most one RANGE whose kind is "vector", of width W. Output: the same
code without that range, where every value that depended on it is either
  - a vector op (dtype float32.vec(W), int32.vec(W) ...): contiguous LOADs/STOREs (a load whose lanes are valid
    one by one, padding, becomes a masked load), arithmetic, int32 bit ops, compares giving masks, selects,
    casts, bitcasts, trunc and math functions, ADD/MUL/MAX reduces, or
  - W scalar copies, one per lane (the lane index substituted as a constant), gathered with VECTORIZE when a
    vector is needed and read back with GEP when a scalar is.
Which one is decided per node, so a matmul's inner loop becomes one vector load and W-wide multiply-adds
into vector accumulators, while index math and ops C can't spell on vectors stay per lane.
"""
from __future__ import annotations
from minigrad.dtype import DType, dtypes
from minigrad.uop.ops import UOp, Ops
from minigrad.uop.rewrite import graph_rewrite, PatternMatcher, UPat
from minigrad.uop.symbolic import symbolic, split_terms

VECTOR_OPS = {Ops.ADD, Ops.MUL, Ops.FDIV, Ops.NEG, Ops.RECIP}   # what C vector extensions spell directly
INT_VECTOR_OPS = {Ops.ADD, Ops.MUL, Ops.NEG, Ops.SHL, Ops.SHR, Ops.AND, Ops.OR, Ops.XOR}
VECTOR_REDUCES = {Ops.ADD, Ops.MUL, Ops.MAX}                # MAX only on 4-byte lanes (it blends with a mask)
MAX_VECTOR_BYTES = 64                                      # an AVX-512 register
VECTOR_DTYPES = (dtypes.float32, dtypes.float64, dtypes.int32, dtypes.uint32)
LANE32_DTYPES = (dtypes.float32, dtypes.int32, dtypes.uint32)   # 4-byte lanes: the same width as a mask's lanes


def vector_ok(dtype: DType, width: int) -> bool:
  return dtype in VECTOR_DTYPES and dtype.itemsize * width <= MAX_VECTOR_BYTES


def vectorize(sink: UOp) -> UOp:
  lanes_range = next((u for u in sink.toposort if u.op is Ops.RANGE and u.arg[1] == "vector"), None)
  if lanes_range is None: return sink
  return _Vectorizer(sink, lanes_range).run()


class _Vectorizer:
  def __init__(self, sink: UOp, lane: UOp):
    self.sink, self.lane, self.width = sink, lane, lane.src[1].arg
    self.dependent: set[UOp] = set()
    for node in sink.toposort:
      if node.op is Ops.REDUCE and lane in node.src[1:]: continue   # a reduce over the lanes doesn't vary by lane
      if node is lane or any(s in self.dependent for s in node.src): self.dependent.add(node)
    self.scalar: dict[UOp, UOp] = {}               # lane-independent node -> rebuilt node
    self.vector: dict[UOp, UOp] = {}               # lane-dependent node -> its W-wide vector
    self.lanes: dict[UOp, list[UOp]] = {}          # lane-dependent node -> one scalar per lane

  # ---- the two views of a lane-dependent value ----
  def lane_values(self, node: UOp) -> list[UOp]:
    if node not in self.dependent: return [self.scalar[node]] * self.width
    if node not in self.lanes:
      vec = self.vector[node]
      self.lanes[node] = [UOp(Ops.GEP, node.dtype, (vec,), lane) for lane in range(self.width)]
    return self.lanes[node]

  def vector_of(self, node: UOp) -> UOp:
    if node not in self.dependent:
      value = self.scalar[node]
      return UOp(Ops.VECTORIZE, value.dtype.vec(self.width), (value,) * self.width)
    if node not in self.vector:
      lanes = self.lanes[node]
      self.vector[node] = UOp(Ops.VECTORIZE, node.dtype.vec(self.width), tuple(lanes))
    return self.vector[node]

  def vector_op(self, node: UOp) -> bool:
    """Can this op run on whole vectors? Arithmetic and casts on float and int32 vectors, int32 bit ops; on
    4-byte lanes also compares (giving masks, int32 lanes of -1/0), masks compared, combined with & | ^ and
    negated, casts from and to masks, bitcasts, trunc, and selects on masks (max, where)."""
    dtype, width = node.dtype, self.width
    if node.op in VECTOR_OPS and dtypes.is_float(dtype) and vector_ok(dtype, width): return True
    if node.op in INT_VECTOR_OPS and dtype in (dtypes.int32, dtypes.uint32) and vector_ok(dtype, width): return True
    masks_ok = width * 4 <= MAX_VECTOR_BYTES
    lanes32 = masks_ok and dtype in LANE32_DTYPES
    if node.op is Ops.CAST:
      source = node.src[0].dtype
      if vector_ok(dtype, width) and vector_ok(source, width): return True
      return masks_ok and (source == dtypes.bool and dtype in LANE32_DTYPES or dtype == dtypes.bool and source in LANE32_DTYPES)
    if node.op is Ops.BITCAST: return lanes32 and node.src[0].dtype in LANE32_DTYPES
    if node.op is Ops.CMPNE and node.src[0].dtype == dtypes.bool: return masks_ok   # masks differ: their XOR (not <: true is -1)
    if node.op in (Ops.CMPLT, Ops.CMPNE): return masks_ok and all(s.dtype in LANE32_DTYPES for s in node.src)
    if node.op in (Ops.AND, Ops.OR, Ops.XOR, Ops.NEG):
      return dtype == dtypes.bool and masks_ok and all(s in self.vector or s not in self.dependent for s in node.src)
    if node.op is Ops.MAX: return lanes32   # blends with a mask
    if node.op is Ops.TRUNC: return dtype == dtypes.float32 and masks_ok
    if node.op in (Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT): return dtype == dtypes.float32 and masks_ok   # SIMD math library
    if node.op is Ops.WHERE: return lanes32   # the condition as a mask: a vector, broadcast, or gathered lane by lane
    return False

  def vector_reduce(self, reduce: UOp) -> bool:
    dtype = reduce.src[0].dtype
    return vector_ok(dtype, self.width) and reduce.arg in VECTOR_REDUCES and (reduce.arg is not Ops.MAX or dtype in LANE32_DTYPES)

  # ---- analysis of per-lane index expressions ----
  def contiguous(self, index: UOp) -> bool:
    """Is lane l's index exactly lane 0's index + l?"""
    lane_terms = [t for t in split_terms(index) if t in self.dependent]
    if lane_terms == [self.lane]: return True    # the common case, read off the sum: base + lane
    lanes = self.lane_values(index)
    return all(graph_rewrite(lanes[l] + lanes[0] * -1, symbolic) is UOp.const(index.dtype, l) for l in range(1, self.width))

  def uniform(self, node: UOp) -> bool:
    if node not in self.dependent: return True
    lanes = [graph_rewrite(x, symbolic) for x in self.lane_values(node)]
    return all(x is lanes[0] for x in lanes)

  def index_vectors(self, nodes: tuple[UOp, ...]) -> tuple[UOp, ...] | None:
    """Index values compared (a causal mask: column <= row) as int32 vectors, when each is the same in every lane
    or lane 0's value + the lane, and all fit int32; else None (compared lane by lane)."""
    if self.width * 4 > MAX_VECTOR_BYTES or nodes[0].dtype != dtypes.index or not any(n in self.dependent for n in nodes): return None
    vectors = []
    for node in nodes:
      if node.vmin < dtypes.min(dtypes.int32) or node.vmax + self.width > dtypes.max(dtypes.int32): return None
      if node not in self.dependent: vectors.append(self.vector_of_int32(self.scalar[node]))
      elif self.contiguous(node):
        steps = UOp(Ops.VECTORIZE, dtypes.int32.vec(self.width), tuple(UOp.const(dtypes.int32, lane) for lane in range(self.width)))
        vectors.append(UOp(Ops.ADD, steps.dtype, (self.vector_of_int32(self.lane_values(node)[0]), steps)))
      else: return None
    return tuple(vectors)

  def vector_of_int32(self, value: UOp) -> UOp:
    scalar = UOp(Ops.CAST, dtypes.int32, (value,))
    return UOp(Ops.VECTORIZE, dtypes.int32.vec(self.width), (scalar,) * self.width)

  # ---- per node ----
  def visit(self, node: UOp) -> None:
    if node not in self.dependent:
      if node.op is Ops.REDUCE and self.lane in node.src[1:]: self.scalar[node] = self.reduce_over_lanes(node)
      else: self.scalar[node] = node.replace(src=tuple(self.scalar[s] for s in node.src)) if node.src else node
      return
    if node is self.lane:
      self.lanes[node] = [UOp.const(node.dtype, lane) for lane in range(self.width)]
      return
    if node.op is Ops.LOAD: return self.visit_load(node)
    if node.op is Ops.INDEX: return   # handled by its LOAD/STORE
    if node.op is Ops.STORE: return
    if node.op is Ops.REDUCE and self.vector_reduce(node) and node.src[0] in self.vector:
      self.vector[node] = UOp(Ops.REDUCE, node.dtype.vec(self.width), (self.vector[node.src[0]],) + tuple(self.scalar[s] for s in node.src[1:]), node.arg)
      return
    if node.op is Ops.REDUCE:
      self.lanes[node] = [UOp(Ops.REDUCE, node.dtype, (value,) + tuple(self.scalar[s] for s in node.src[1:]), node.arg)
                          for value in self.lane_values(node.src[0])]
      return
    if node.op in (Ops.CMPLT, Ops.CMPNE) and (compared := self.index_vectors(node.src)) is not None:
      self.vector[node] = UOp(node.op, dtypes.bool.vec(self.width), compared)
      return
    if self.vector_op(node) and any(s in self.vector for s in node.src):
      self.vector[node] = UOp(node.op, node.dtype.vec(self.width), tuple(self.vector_of(s) for s in node.src), node.arg)
      return
    per_lane = [self.lane_values(s) for s in node.src]
    self.lanes[node] = [node.replace(src=tuple(values[lane] for values in per_lane)) for lane in range(self.width)]

  def visit_load(self, load: UOp) -> None:
    index = load.src[0]
    buf, idx, gate = index.src[0], index.src[1], index.src[2:]
    if vector_ok(load.dtype, self.width) and self.contiguous(idx):
      if all(self.uniform(g) for g in gate):
        first = (buf, self.lane_values(idx)[0]) + tuple(self.lane_values(g)[0] for g in gate)
        self.vector[load] = UOp(Ops.LOAD, load.dtype.vec(self.width), (UOp(Ops.INDEX, index.dtype, first),))
        return
      if load.dtype in LANE32_DTYPES and self.width * 4 <= MAX_VECTOR_BYTES:
        # lanes valid one by one (padding): a masked vector load, masked-off lanes read nothing and give 0
        mask = self.vector_of(gate[0])
        for g in gate[1:]: mask = UOp(Ops.AND, mask.dtype, (mask, self.vector_of(g)))
        self.vector[load] = UOp(Ops.LOAD, load.dtype.vec(self.width), (UOp(Ops.INDEX, index.dtype, (buf, self.lane_values(idx)[0], mask)),))
        return
    self.lanes[load] = [UOp(Ops.LOAD, load.dtype, (UOp(Ops.INDEX, index.dtype, (buf, self.lane_values(idx)[lane]) +
                                                      tuple(self.lane_values(g)[lane] for g in gate)),)) for lane in range(self.width)]

  def stores(self, store: UOp) -> list[UOp]:
    if store not in self.dependent: return [self.scalar[store]]
    index, value = store.src
    buf, idx, gate = index.src[0], index.src[1], index.src[2:]
    if store.src[1] in self.vector and vector_ok(value.dtype, self.width) and self.contiguous(idx) and all(self.uniform(g) for g in gate):
      first = (buf, self.lane_values(idx)[0]) + tuple(self.lane_values(g)[0] for g in gate)
      return [UOp(Ops.STORE, store.dtype, (UOp(Ops.INDEX, index.dtype, first), self.vector_of(value)))]
    return [UOp(Ops.STORE, store.dtype, (UOp(Ops.INDEX, index.dtype, (buf, self.lane_values(idx)[lane]) + tuple(self.lane_values(g)[lane] for g in gate)),
                                         self.lane_values(value)[lane])) for lane in range(self.width)]

  def reduce_over_lanes(self, reduce: UOp) -> UOp:
    """A REDUCE whose loops include the lanes: accumulate a vector (or W lanes combined) over the other loops."""
    value, loops = reduce.src[0], tuple(self.scalar[s] for s in reduce.src[1:] if s is not self.lane)
    if self.vector_reduce(reduce) and value in self.vector:
      return UOp(Ops.REDUCE, reduce.dtype, (self.vector[value],) + loops, reduce.arg)
    lanes = self.lane_values(value)
    combined = lanes[0]
    for lane in lanes[1:]: combined = combined.alu(reduce.arg, lane)
    return UOp(Ops.REDUCE, reduce.dtype, (combined,) + loops, reduce.arg) if loops else combined

  def run(self) -> UOp:
    for node in self.sink.toposort:
      if node is not self.sink: self.visit(node)
    stores = [s for store in self.sink.src for s in self.stores(store)]
    out = graph_rewrite(UOp(Ops.SINK, self.sink.dtype, tuple(dict.fromkeys(stores))), symbolic + lane_folding)
    if any(u is self.lane for u in out.toposort): raise RuntimeError("internal error: the vector range survived vectorization")
    return out.replace(src=tuple(transposed_stores(list(out.src), self.width)))


def transposed_stores(stores: list[UOp], width: int) -> list[UOp]:
  """Scattered stores, lane by lane, of W vectors whose lanes go W elements apart and which start at W
  consecutive elements (a matmul whose lanes run down the output's columns, its register tile's W rows along
  them) become W vector stores of the block transposed: row l is the VECTORIZE of every vector's lane l, which
  the C renderer writes as shuffles (W*W scalar stores -> W*log2(W) shuffles and W stores)."""
  where: dict[tuple[UOp, tuple[UOp, ...]], dict[UOp, dict[int, tuple[int, UOp]]]] = {}   # (buffer, index base) -> vector -> lane -> (offset, store)
  for store in stores:
    index, value = store.src
    if len(index.src) != 2 or value.op is not Ops.GEP or value.src[0].dtype.count != width or not vector_ok(value.dtype, width): continue
    terms = split_terms(index.src[1])
    offset = sum(t.arg for t in terms if t.op is Ops.CONST)
    where.setdefault((index.src[0], tuple(t for t in terms if t.op is not Ops.CONST)), {}).setdefault(value.src[0], {})[value.arg] = (offset, store)
  replace: dict[UOp, list[UOp]] = {}
  used: set[UOp] = set()
  for vectors in where.values():
    starts: dict[tuple[int, int], UOp] = {}   # (lane stride, offset of lane 0) -> vector
    for vector, lanes in vectors.items():
      if len(lanes) != width: continue
      stride = lanes[1][0] - lanes[0][0]
      if abs(stride) >= width and all(lanes[l][0] == lanes[0][0] + l * stride for l in range(width)): starts[(stride, lanes[0][0])] = vector
    for stride, start in sorted(starts):
      block = [starts.get((stride, start + r)) for r in range(width)]
      if any(v is None or v in used for v in block): continue
      used.update(block)
      scalar, first = block[0].dtype.scalar(), vectors[block[0]]   # row l starts where lane l of the first vector went
      rows = [UOp(Ops.STORE, first[l][1].dtype, (first[l][1].src[0], UOp(Ops.VECTORIZE, scalar.vec(width), tuple(UOp(Ops.GEP, scalar, (v,), l) for v in block))))
              for l in range(width)]
      for vector in block:
        for l in range(width): replace[vectors[vector][l][1]] = []
      replace[first[0][1]] = rows
  if not replace: return stores
  return [new for store in stores for new in replace.get(store, [store])]


INT_LANE_VECTORS = tuple(dtypes.int32.vec(w) for w in (2, 4, 8, 16))
# GEP of a VECTORIZE is the element, also through int arithmetic on VECTORIZEs (a lane of row + (0, 1, 2, 3), the
# index of a contiguous load whose lanes other code takes as a vector, folds to a scalar whose bounds are known);
# VECTORIZE of a vector's GEPs in order is the vector
lane_folding = PatternMatcher([
  (UPat(Ops.GEP, src=(UPat(Ops.VECTORIZE, name="vec"),), name="gep"), lambda gep, vec: vec.src[gep.arg]),
  (UPat(Ops.GEP, src=(UPat((Ops.ADD, Ops.MUL), dtype=INT_LANE_VECTORS, src=(UPat(Ops.VECTORIZE), UPat(Ops.VECTORIZE)), name="alu"),), name="gep"),
   lambda gep, alu: UOp(alu.op, gep.dtype, tuple(s.src[gep.arg] for s in alu.src))),
  (UPat(Ops.VECTORIZE, name="vec"), lambda vec: vec.src[0].src[0] if all(s.op is Ops.GEP and s.src[0] is vec.src[0].src[0] and s.arg == i
                                                                          for i, s in enumerate(vec.src)) and vec.src[0].src[0].dtype == vec.dtype else None),
])
