"""The int8 matmul as integer dot products of packed words, in the shape the CPU codegen turns into one instruction.

Input: int8 values (activations quantized as int32 Tensors, weights as int8 Tensors). Output: int32 Tensors (lazy).

The products are not summed one int8 per element but over int32 words that pack several k each, the words' parts
taken apart with shifts and masks, multiplied and added: plain integer arithmetic that every device computes, which
codegen.cpu_patterns.int8_dots recognises and the C and LLVM renderers spell as the Target's instruction (vpdpbusd,
pmaddubsw, pmaddwd, sdot ...). Three layouts; opt.cpu_policy.int8_dot_layout picks the one the Target has an
instruction for:
  "bytes": 4 k per word. The activation's bytes are unsigned (q + 128), the weight's signed: the word's dot is
    sum_i ubyte(a, i) * sbyte(w, i) (vpdpbusd's unsigned x signed). The +128 adds 128 * sum_k w[n, k] to output n,
    which `PackedWeight.correction` (computed once per weight) takes off again.
  "bytes7": as "bytes", for activations quantized to [-63, 63] (opt.cpu_policy.ACTIVATION_MAX): the unsigned bytes
    are q + 64, in [1, 127], read as byte & 127, which pmaddubsw (AVX2) multiplies without saturating; the correction
    is -64 * sum_k w[n, k]. Activations lose one bit, as torch's x86 quantized kernels' (reduce_range).
  "pairs": 2 k per word as signed int16 halves, both operands as they are: the word's dot is
    sum_i half(a, i) * half(w, i) (pmaddwd). No correction.
Which k share a word is free (a sum doesn't mind their order): word j takes element j of each of the 4 (or 2)
blocks of the row, so the kernel that packs a row reads whole vectors (see _words). Rows are padded with zeros
(zero weights: any activation times 0 adds nothing).

The weight is packed once (`pack_weight`; a quantized layer keeps it), k-major (word rows of N outputs: the product's
vectors run along n, as a float32 matmul's along its columns); the activation's words are built where it is
quantized, in one elementwise kernel.
"""
from __future__ import annotations
from dataclasses import dataclass
from minigrad.dtype import dtypes
from minigrad.tensor import Tensor
from minigrad.tensor.function import const_uop
from minigrad.uop.ops import Ops, UOp

LAYOUTS = {"bytes": 4, "bytes7": 4, "pairs": 2}   # layout -> k per word
ACTIVATION_OFFSET = {"bytes": 128, "bytes7": 64, "pairs": 0}   # layout -> added to an activation: its unsigned byte
WORD_BLOCK = 8         # a row of 4 times this many words or more is padded to a multiple of it: whole 32-byte vectors
                       # (AVX-512's 64-byte vectors cost less in a tail than 16-word padding costs in the matmul)
MIN_K_MAJOR_N = 16     # weights with fewer rows (outputs) keep them apart (n-major): vectors run along k instead
PACKED_DEVICES = ("CPU", "LLVM")     # the devices whose Target decides the layout (others: "bytes")


def layout_for(device: str, full_range: bool = False) -> str:
  """The word layout for int8 matmuls on `device`: its Target's (opt.cpu_policy.int8_dot_layout) on the CPU devices,
  else "bytes" (GPUs and PYTHON run the plain arithmetic: the fewer bytes the better). `full_range`: activations use
  all of int8 (never "bytes7")."""
  if device.split(":")[0] not in PACKED_DEVICES: return "bytes"
  from minigrad.target import cpu_target
  from minigrad.opt.cpu_policy import int8_dot_layout
  return int8_dot_layout(cpu_target(), full_range)


def activation_max(layout: str) -> int:
  """The largest |activation| `layout` holds: 127, or 63 for "bytes7"."""
  from minigrad.opt.cpu_policy import ACTIVATION_MAX
  return ACTIVATION_MAX[layout]


@dataclass(frozen=True, slots=True)   # slots: no __dict__, so nn.state's walk (state dicts, saved files) skips it
class PackedWeight:
  """An int8 weight (N, K) packed for `layout`: `words` int32, (word_count(K), N) (k-major: the output's vectors run
  along n) or, for fewer than MIN_K_MAJOR_N outputs, (N, word_count(K)) (vectors along k, summed across at the end);
  `correction` (N,) int32 to add to each output ("bytes": -128 * the row's sum, "bytes7": -64 * the row's sum;
  "pairs": None). Derived from the int8 weight, never saved."""
  layout: str
  words: Tensor
  correction: Tensor | None
  k: int
  n: int
  k_major: bool


class _Words:
  """int32 arithmetic on tensor-graph nodes of one shape and device, built as UOps: the dot products take a few dozen
  ops per call, which Tensor methods (broadcasting, autograd, guarded shifts) would make the bulk of an eager call's
  Python time. Shifts are plain << and >> (arithmetic), as the codegen's pattern expects them."""
  def __init__(self, shape: tuple[int, ...], device: str): self.shape, self.device, self.consts = shape, device, {}
  def const(self, value: int) -> UOp:
    if value not in self.consts: self.consts[value] = const_uop(value, dtypes.int32, self.device, self.shape)
    return self.consts[value]
  def __call__(self, x: UOp, op: Ops, value: int) -> UOp: return x.alu(op, self.const(value))


def word_count(k: int, layout: str) -> int:
  """Words per row for `k` int8 values: k / k-per-word rounded up, to a multiple of WORD_BLOCK past WORD_BLOCK * 4 (the
  kernel that packs them then runs on whole vectors)."""
  words = -(-k // LAYOUTS[layout])
  return -(-words // WORD_BLOCK) * WORD_BLOCK if words >= WORD_BLOCK * 4 else words


def _words(values: Tensor, layout: str, seven_bits: bool = False) -> Tensor:
  """int32 values (..., K), each in [-128, 255], packed along the last dim: (..., word_count(K)) int32 words. The row,
  padded with zeros, is split into k-per-word blocks; word j holds element j of each, the first block's lowest. Bytes
  take the low 8 bits of each value; halves the low 16 (the value's sign in int16). Sums of parts shifted into place,
  the last part signed, so no int32 overflows. `seven_bits`: the values are bytes in [0, 127] already ("bytes7"
  activations), summed into place as they are (the top one too: below 2**31)."""
  per_word = LAYOUTS[layout]
  k = values.shape[-1]
  padded = word_count(k, layout) * per_word
  if padded != k: values = values.pad(((0, 0),) * (values.ndim - 1) + ((0, padded - k),))
  parts = values.reshape(*values.shape[:-1], per_word, padded // per_word)
  shape = parts.shape[:-2] + parts.shape[-1:]
  part = lambda i: parts.shrink(tuple((0, s) for s in parts.shape[:-2]) + ((i, i + 1), (0, parts.shape[-1]))).reshape(shape).uop
  op = _Words(shape, values.device)
  if layout == "pairs": return Tensor(op(part(0), Ops.AND, 0xFFFF).alu(Ops.ADD, op(part(1), Ops.MUL, 65536)))
  if seven_bits:
    return Tensor(part(0).alu(Ops.ADD, op(part(1), Ops.MUL, 256)).alu(Ops.ADD, op(part(2), Ops.MUL, 65536))
                  .alu(Ops.ADD, op(part(3), Ops.MUL, 16777216)))
  top = op(op(op(part(3), Ops.AND, 255), Ops.XOR, 128), Ops.ADD, -128)   # the top byte as signed: top * 2**24 fits int32
  low = op(part(0), Ops.AND, 255).alu(Ops.ADD, op(op(part(1), Ops.AND, 255), Ops.MUL, 256)).alu(Ops.ADD, op(op(part(2), Ops.AND, 255), Ops.MUL, 65536))
  return Tensor(low.alu(Ops.ADD, op(top, Ops.MUL, 16777216)))


def pack_weight(weight_q: Tensor, layout: str) -> PackedWeight:
  """Pack an int8 weight (N, K) for `layout` (realized: done once per weight)."""
  if layout not in LAYOUTS: raise ValueError(f"unknown int8 word layout {layout!r}; expected one of {tuple(LAYOUTS)}")
  if weight_q.dtype != dtypes.int8 or weight_q.ndim != 2:
    raise TypeError(f"pack_weight: expected an int8 (N, K) weight, got {weight_q.dtype} {weight_q.shape}")
  values = weight_q.cast(dtypes.int32)
  words = _words(values, layout)
  words = (words.T if weight_q.shape[0] >= MIN_K_MAJOR_N else words).contiguous().realize()
  offset = ACTIVATION_OFFSET[layout]
  correction = (values.sum(1, dtype=dtypes.int32) * -offset).contiguous().realize() if offset else None
  return PackedWeight(layout, words, correction, weight_q.shape[1], weight_q.shape[0], weight_q.shape[0] >= MIN_K_MAJOR_N)


def activation_words(q: Tensor, layout: str, in_range: bool = False) -> Tensor:
  """Quantized activations (..., K) (int32 values in [-128, 127]; for "bytes7" in [-64, 63]) as the words `layout`
  multiplies them in: "bytes" unsigned (q + 128), "bytes7" unsigned (q + 64), "pairs" as they are. `in_range`: the
  caller guarantees q lies in [-64, 63] (it quantized q so), and "bytes7" words are summed from q + 64 without masking
  its bits (without it, a q outside gives a word whose bytes the dot product reads as 7 bits, whatever they hold)."""
  values = q + ACTIVATION_OFFSET[layout] if ACTIVATION_OFFSET[layout] else q
  return _words(values, layout, seven_bits=in_range and layout == "bytes7")


def _dot(a: Tensor, w: Tensor, layout: str) -> Tensor:
  """The dot product of words a and w (same shape), elementwise: the products of their parts, summed."""
  op, total = _Words(a.shape, a.device), None
  for i in range(LAYOUTS[layout]):
    if layout != "pairs":   # "bytes7": the unsigned bytes are 7-bit (& 127), see opt.cpu_policy.INT7_DOT_INSTRUCTIONS
      unsigned = op(op(a.uop, Ops.SHR, 8 * i) if i else a.uop, Ops.AND, 127 if layout == "bytes7" else 255)
      signed = op(op(w.uop, Ops.SHL, 24 - 8 * i), Ops.SHR, 24) if i < 3 else op(w.uop, Ops.SHR, 24)
      product = unsigned.alu(Ops.MUL, signed)
    else:
      halves = [op(op(x.uop, Ops.SHL, 16), Ops.SHR, 16) if i == 0 else op(x.uop, Ops.SHR, 16) for x in (a, w)]
      product = halves[0].alu(Ops.MUL, halves[1])
    total = product if total is None else total.alu(Ops.ADD, product)
  return Tensor(total)


def word_matmul(a_words: Tensor, packed: PackedWeight) -> Tensor:
  """(..., K words) activation words @ the packed weight -> (..., N) int32: the exact int8 x int8 sums."""
  words = packed.words if packed.k_major else packed.words.T
  lead, (kw, n) = a_words.shape[:-1], words.shape
  if a_words.shape[-1] != kw:
    raise ValueError(f"word_matmul: activation words {a_words.shape} and weight words {words.shape} (k-major) don't match")
  a = a_words.reshape(*lead, kw, 1).expand(*lead, kw, n)
  w = words.reshape(*((1,) * len(lead)), kw, n).expand(*lead, kw, n)
  out = _dot(a, w, packed.layout).sum(-2, dtype=dtypes.int32)
  return out + packed.correction if packed.correction is not None else out
