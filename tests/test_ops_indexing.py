"""Movement and indexing ops vs PyTorch, forward and backward: __getitem__ (basic, advanced, masks), __setitem__,
gather/scatter/scatter_reduce, masked_fill, cat/stack/split/chunk, repeat/repeat_interleave, roll,
squeeze/unsqueeze/flatten/unflatten, flip, expand, pad modes. Edge shapes (0-d, zero-size, size-1 broadcasting,
non-contiguous inputs), errors (same exception class as torch, messages naming shapes/indices) and fusion
(kernel counts).
"""
from __future__ import annotations
from typing import Any, Callable
import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from minigrad import Tensor, GlobalCounters, dtypes

TORCH_TO_MG = {torch.float32: dtypes.float32, torch.float64: dtypes.float64, torch.int32: dtypes.int32, torch.int64: dtypes.int64,
               torch.bool: dtypes.bool, torch.uint8: dtypes.uint8, torch.int8: dtypes.int8, torch.int16: dtypes.int16}


class MG:
  """The minigrad spelling of the few calls that differ from a method call."""
  is_torch = False
  @staticmethod
  def i(values: Any) -> Tensor: return Tensor(np.asarray(values, dtype=np.int64 if np.asarray(values).dtype != np.bool_ else np.bool_))
  cat, stack = Tensor.cat, Tensor.stack
  @staticmethod
  def pad(x: Tensor, pad: tuple, mode: str = "constant", value: float | None = None) -> Tensor: return x.pad(pad, mode, value)


class TH:
  is_torch = True
  @staticmethod
  def i(values: Any) -> torch.Tensor: return torch.from_numpy(np.asarray(values, dtype=np.int64 if np.asarray(values).dtype != np.bool_ else np.bool_))
  cat, stack = torch.cat, torch.stack
  @staticmethod
  def pad(x: torch.Tensor, pad: tuple, mode: str = "constant", value: float | None = None) -> torch.Tensor: return TF.pad(x, pad, mode, value)


def randn(*shape: int, seed: int = 0) -> np.ndarray: return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def compare(fn: Callable, *arrays: np.ndarray, grad: bool = True, atol: float = 1e-5, rtol: float = 1e-4) -> None:
  """fn(lib, *inputs) with minigrad and with torch: same dtype, shape and values; then the gradients of every
  float input for a random upstream gradient (float32: atol 1e-5 forward, 1e-4 backward)."""
  wants = [grad and a.dtype.kind == "f" for a in arrays]
  ours = [Tensor(a, requires_grad=w or None) for a, w in zip(arrays, wants)]
  theirs = [torch.from_numpy(a.copy()).requires_grad_(w) for a, w in zip(arrays, wants)]
  out, ref = fn(MG, *ours), fn(TH, *theirs)
  outs, refs = (list(out), list(ref)) if isinstance(ref, (tuple, list)) else ([out], [ref])
  assert len(outs) == len(refs)
  for o, r in zip(outs, refs):
    assert o.shape == tuple(r.shape), f"shape {o.shape} != {tuple(r.shape)}"
    assert o.dtype == TORCH_TO_MG[r.dtype], f"dtype {o.dtype} != {r.dtype}"
    np.testing.assert_allclose(o.numpy(), r.detach().numpy(), atol=atol, rtol=rtol)
  if not any(wants): return
  rng = np.random.default_rng(7)
  weights = [rng.standard_normal(tuple(r.shape)).astype(np.float32) for r in refs]
  keep = [i for i, r in enumerate(refs) if r.dtype.is_floating_point and r.requires_grad]   # zero-size ones too: zero gradients
  if not keep: return
  loss = sum(((outs[i] * Tensor(weights[i])).sum() for i in keep[1:]), (outs[keep[0]] * Tensor(weights[keep[0]])).sum())
  ref_loss = sum((refs[i] * torch.from_numpy(weights[i])).sum() for i in keep)
  loss.backward()
  ref_loss.backward()
  for o, t, w in zip(ours, theirs, wants):
    if not w: continue
    expected = t.grad.numpy() if t.grad is not None else np.zeros(t.shape, np.float32)
    got = o.grad.numpy() if o.grad is not None else np.zeros(o.shape, np.float32)
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, atol=1e-4, rtol=1e-4)


def kernels(*tensors: Tensor) -> int:
  GlobalCounters.reset()
  Tensor.realize(*tensors)
  return GlobalCounters.kernel_count


# the non-contiguous forms every op is also tried on: each gives a (4, 5, 6) tensor from its input
LAYOUTS = {
  "contiguous": ((4, 5, 6), lambda x: x),
  "transposed": ((6, 5, 4), lambda x: x.permute(2, 1, 0)),
  "sliced": ((5, 7, 6), lambda x: x[1:, 1:6, :]),
  "expanded": ((4, 1, 6), lambda x: x.expand(4, 5, 6)),
}

# ---------------------------------------------------------------- getitem

GETITEM = {
  "int": lambda L: 1, "neg_int": lambda L: (-1, 2), "slice_step": lambda L: (slice(None, None, 2), slice(1, 4)),
  "none_ellipsis": lambda L: (None, Ellipsis, None, 1), "ellipsis_mid": lambda L: (0, ..., 3),
  "list": lambda L: L.i([0, 2, 2, 3]), "neg_list": lambda L: L.i([-1, 0, -4]), "2d_index": lambda L: L.i([[0, 1], [3, 3]]),
  "two_adjacent": lambda L: (slice(None), L.i([0, 4]), L.i([1, 5])), "two_split": lambda L: (L.i([0, 3]), slice(None), L.i([1, 2])),
  "broadcast": lambda L: (L.i([[0], [2], [3]]), L.i([1, 4])), "three": lambda L: (L.i([0, 1]), L.i([2, 3]), L.i([5, 0])),
  "int_then_adv": lambda L: (0, slice(None), L.i([1, 2])),   # torch: int is a select, so the adv dims stay in place
  "adv_int": lambda L: (L.i([3, 1]), 2), "adv_slice_int": lambda L: (L.i([3, 1]), slice(1, 4), 2),
  "none_between": lambda L: (L.i([0, 1]), None, L.i([1, 2])), "ellipsis_adv": lambda L: (..., L.i([0, -1])),
  "adv_with_step_slice": lambda L: (slice(None, None, 3), L.i([4, 0]), slice(1, None, 2)),
  "dup": lambda L: (L.i([1, 1, 1]), slice(None), L.i([2, 2, 2])),
  "mask_full": lambda L: L.i(np.arange(120).reshape(4, 5, 6) % 7 == 0), "mask_lead": lambda L: L.i([True, False, True, True]),
  "mask_2d_slice": lambda L: (L.i(np.arange(20).reshape(4, 5) % 3 == 1), slice(1, 3)),
  "slice_mask": lambda L: (slice(None), L.i([False, True, False, True, True])), "bool_true": lambda L: True,
  "empty_list": lambda L: L.i(np.zeros(0, np.int64)), "scalar_tensor": lambda L: (slice(None), L.i(2)),
  "mask_none": lambda L: (L.i(np.zeros(4, np.bool_)), 0),
}


@pytest.mark.parametrize("name", list(GETITEM))
def test_getitem_vs_torch(name):
  compare(lambda L, x: x[GETITEM[name](L)], randn(4, 5, 6))


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("name", ["slice_step", "two_split", "int_then_adv", "mask_2d_slice", "broadcast"])
def test_getitem_non_contiguous(name, layout):
  shape, make = LAYOUTS[layout]
  compare(lambda L, x: make(x)[GETITEM[name](L)], randn(*shape, seed=3))


NEG_STEP = [(slice(None, None, -1),), (slice(None), slice(4, 0, -2), [0, 5]), ([3, 0], slice(None, None, -3)),
            (slice(-1, None, -2), 2, slice(None, 1, -1)), (None, slice(3, -5, -1), [[1], [0]])]


@pytest.mark.parametrize("idx", NEG_STEP, ids=[str(i) for i in NEG_STEP])
def test_getitem_negative_steps_vs_numpy(idx):
  """torch has no negative steps: numpy is the reference (np.add.at gives the gradient)."""
  x = randn(4, 5, 6, seed=4)
  t = Tensor(x, requires_grad=True)
  out = t[idx]
  expected = x[idx]
  assert out.shape == expected.shape
  np.testing.assert_allclose(out.numpy(), expected)
  w = randn(*expected.shape, seed=5)
  (out * Tensor(w)).sum().backward()
  g = np.zeros_like(x)
  np.add.at(g, idx, w)
  np.testing.assert_allclose(t.grad.numpy(), g, atol=1e-5)


def test_getitem_lists_numpy_arrays_and_dtypes():
  x = randn(4, 5, 6)
  ref = torch.from_numpy(x)
  np.testing.assert_allclose(Tensor(x)[[0, 2], :, [1, 1]].numpy(), ref[torch.tensor([0, 2]), :, torch.tensor([1, 1])].numpy())
  np.testing.assert_allclose(Tensor(x)[np.array([[3], [1]])].numpy(), x[np.array([[3], [1]])])
  np.testing.assert_allclose(Tensor(x)[[[0, 1], [2, 3]]].numpy(), x[np.array([[0, 1], [2, 3]])])   # nested list: one 2-d index
  np.testing.assert_allclose(Tensor(x)[Tensor([1, 0], dtype=dtypes.int32)].numpy(), x[[1, 0]])
  np.testing.assert_allclose(Tensor(x)[Tensor([3, 1], dtype=dtypes.uint8)].numpy(), x[[3, 1]])
  np.testing.assert_allclose(Tensor(x)[[True, False, False, True]].numpy(), x[[True, False, False, True]])
  np.testing.assert_allclose(Tensor(x)[Tensor(x) > 0.5].numpy(), x[x > 0.5])
  assert Tensor(x)[False].shape == (0, 4, 5, 6) and Tensor(x)[None, False].shape == (1, 0, 4, 5, 6)
  for dt in (dtypes.int32, dtypes.bool, dtypes.uint8):
    data = (np.arange(24).reshape(4, 6) % 5).astype(np.int32)
    t = Tensor(data).cast(dt)
    np.testing.assert_array_equal(t[[2, 0], 1:].numpy(), data.astype(t.numpy().dtype)[[2, 0], 1:])
    assert t[[2, 0]].dtype == dt


def test_getitem_edge_shapes():
  scalar = Tensor(3.5)
  assert scalar[()].item() == 3.5 and scalar[...].shape == () and scalar[None].shape == (1,) and scalar[True].shape == (1,)
  compare(lambda L, x: x[L.i([0, 0, 0])], np.array([2.5], np.float32))                  # size-1 source
  compare(lambda L, x: x[L.i(np.zeros((2, 0), np.int64))], randn(3, 4))                  # empty index
  compare(lambda L, x: x[:, L.i([2, 0])], np.zeros((0, 3), np.float32))                  # zero-size dim kept
  compare(lambda L, x: x[L.i([1, 0]), 1:1], randn(2, 3))                                 # empty slice next to adv
  compare(lambda L, x: x[L.i([[0], [1]]), L.i([[0, 1, 2]])], randn(2, 3))                # size-1 broadcasting of indices
  compare(lambda L, x: x[L.i(0)], randn(3))                                              # 0-d index tensor
  t = Tensor(np.arange(6, dtype=np.float32))
  np.testing.assert_array_equal(t[Tensor([5, 0]) + 0].numpy(), [5.0, 0.0])                 # computed (lazy) index


def test_getitem_chained_and_computed():
  compare(lambda L, x: (x * 2).exp()[L.i([1, 0])][:, L.i([2, 2])][::2], randn(3, 4, 5))
  compare(lambda L, x: x[x.sum(1) > 0], randn(6, 3, seed=2))                            # mask computed from the input


def test_getitem_fuses():
  x = Tensor(randn(8, 16))
  assert kernels(x[[1, 5, 5]].relu()) == 1
  assert kernels(x[[0, 2], ::2] * 2 + 1) == 1
  assert kernels(x[2:, ::-3].exp()) == 1


@pytest.mark.parametrize("idx, exc, words", [
  (5, IndexError, ["5", "size 4"]), ((0, -6), IndexError, ["-6", "size 5"]), ([0, 7], IndexError, ["7", "dimension 0", "size 4"]),
  ((slice(None), [-6]), IndexError, ["-6", "dimension 1", "size 5"]), ((0, 0, 0, 0), IndexError, ["too many", "(4, 5, 6)"]),
  (([0, 1], [0, 1, 2]), IndexError, ["[2]", "[3]"]), ([True, False], IndexError, ["[2]", "[4, 5, 6]"]),
  ((..., ...), IndexError, ["ellipsis"]), (slice(None, None, 0), ValueError, ["zero"]), ("a", TypeError, ["str"]),
  (1.5, TypeError, ["float"]), ([0.5], IndexError, ["float"]), ((slice(0.5, 2),), TypeError, ["0.5"]),
  ("float_tensor", IndexError, ["float"]),
])
def test_getitem_errors(idx, exc, words):
  with pytest.raises(exc) as info:
    Tensor(randn(4, 5, 6))[Tensor([0.0, 1.0]) if idx == "float_tensor" else idx]
  for w in words: assert w in str(info.value), str(info.value)


# ---------------------------------------------------------------- setitem

SETITEM = {
  "int": (lambda L: 1, (6,)), "slice": (lambda L: (slice(1, 3), slice(None, None, 2)), (3, 1)),
  "ellipsis": (lambda L: (..., 0), ()), "all": (lambda L: (slice(None),), (5, 6)), "none": (lambda L: (None, 2, 1), (1, 6)),
  "list": (lambda L: L.i([0, 3]), (5, 6)), "two_adv": (lambda L: (L.i([0, 3]), slice(None), L.i([1, 5])), (2, 5)),
  "int_adv": (lambda L: (2, slice(1, 3), L.i([[0], [4]])), (2, 1)), "adv_split": (lambda L: (L.i([1, 2]), 0, L.i([1, 2])), (2,)),
  "mask": (lambda L: L.i(np.arange(120).reshape(4, 5, 6) % 4 == 0), ()), "mask_lead": (lambda L: L.i([True, False, True, False]), (6,)),
  "mask_2d_values": (lambda L: L.i(np.arange(20).reshape(4, 5) % 3 == 0), (7, 6)),
}


@pytest.mark.parametrize("name", list(SETITEM))
def test_setitem_vs_torch(name):
  """Assign into a computed (non-leaf) tensor; gradients reach the kept part of x and all of the value."""
  make_index, value_shape = SETITEM[name]
  def fn(L, x, v):
    h = x * 2
    h[make_index(L)] = v
    return h * 1
  compare(fn, randn(4, 5, 6), randn(*value_shape, seed=1))


@pytest.mark.parametrize("value", [7, -2.5, True])
def test_setitem_scalar_values_and_dtypes(value):
  for dtype, npdtype in ((dtypes.float32, np.float32), (dtypes.int32, np.int32), (dtypes.bool, np.bool_)):
    data = (np.arange(12).reshape(3, 4) % 3).astype(npdtype)
    t, ref = Tensor(data), torch.from_numpy(data.copy())
    t[1, 1:] = value
    t[[0, 2], 0] = value
    t[t.cast(dtypes.float32) > 1.5] = value
    ref[1, 1:] = value
    ref[torch.tensor([0, 2]), 0] = value
    ref[ref.float() > 1.5] = value
    assert t.dtype == dtype
    np.testing.assert_array_equal(t.numpy(), ref.numpy())


def test_setitem_on_non_contiguous_and_broadcast_values():
  x = randn(6, 5)
  t, ref = Tensor(x).T, torch.from_numpy(x.copy()).T            # (5, 6) transposed view
  t[1:4, ::2] = Tensor(randn(3, 1, seed=2))                      # size-1 broadcasting
  ref[1:4, ::2] = torch.from_numpy(randn(3, 1, seed=2))
  t[[0, 4]] = Tensor(randn(1, 1, 6, seed=3))                    # extra leading 1-dims are dropped, as torch
  ref[torch.tensor([0, 4])] = torch.from_numpy(randn(1, 1, 6, seed=3))
  t[:, -1] = Tensor([1.0, 2, 3, 4, 5]).expand(5)
  ref[:, -1] = torch.tensor([1.0, 2, 3, 4, 5])
  t[::-2, 2] = Tensor([9.0, 8.0, 7.0])                           # negative step (not in torch: flip to compare)
  ref[torch.tensor([4, 2, 0]), 2] = torch.tensor([9.0, 8.0, 7.0])
  np.testing.assert_allclose(t.numpy(), ref.numpy())
  e = Tensor.zeros(0, 3)
  e[[]] = 1.0
  e[:, 1] = 2.0
  assert e.shape == (0, 3)
  s = Tensor(1.5)
  s[...] = 4
  s[()] = s + 1
  assert s.item() == 5.0


def test_setitem_repeated_indices_last_wins():
  t = Tensor.zeros(5)
  t[[1, 3, 1, 1]] = Tensor([5.0, 6.0, 7.0, 8.0])
  np.testing.assert_array_equal(t.numpy(), [0, 8, 0, 6, 0])


def test_setitem_value_requires_grad_into_plain_tensor():
  v = Tensor(randn(2, 3), requires_grad=True)
  vt = torch.from_numpy(randn(2, 3)).requires_grad_(True)
  out, ref = Tensor.zeros(4, 3), torch.zeros(4, 3)
  out[[3, 0]] = v
  ref[[3, 0]] = vt
  assert out.requires_grad and not out.is_leaf
  (out * Tensor(randn(4, 3, seed=9))).sum().backward()
  (ref * torch.from_numpy(randn(4, 3, seed=9))).sum().backward()
  np.testing.assert_allclose(v.grad.numpy(), vt.grad.numpy(), atol=1e-6)


def test_setitem_mask_with_scalar_stays_lazy():
  x = Tensor(randn(4, 6))
  y = x.exp() - 1
  GlobalCounters.reset()
  y[y > 0.5] = 0.0
  y[x.sum(1) < -100] = Tensor([1.0, 2, 3, 4, 5, 6])                 # a row value for a mask over the leading dim
  assert GlobalCounters.kernel_count == 0
  expected = np.exp(randn(4, 6)) - 1
  expected[expected > 0.5] = 0.0
  np.testing.assert_allclose(y.numpy(), expected, rtol=1e-5, atol=1e-6)
  assert kernels(y.contiguous()) <= 1


def test_setitem_semantics_no_aliasing():
  t = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
  before, view = t + 0, t[1]
  t[1, 1] = 50.0
  np.testing.assert_array_equal(view.numpy(), [3, 4, 5])              # earlier views keep the old values
  np.testing.assert_array_equal(before.numpy()[1], [3, 4, 5])
  np.testing.assert_array_equal(t.numpy()[1], [3, 50, 5])
  with pytest.raises(RuntimeError, match="basic indexing"):
    t[0][1] = 5.0                                                      # would silently not change t
  copy = t[0] + 0
  copy[1] = 7.0
  np.testing.assert_array_equal(copy.numpy(), [0, 7, 2])
  with pytest.raises(RuntimeError, match="split"):
    t.split(1)[0][0, 0] = 1.0
  whole = t[:]                                                         # a full slice is t itself: assigning changes t
  whole[0, 0] = -1.0
  assert t.numpy()[0, 0] == -1.0


def test_setitem_augmented_assignment():
  x = randn(3, 4)
  t, ref = Tensor(x), torch.from_numpy(x.copy())
  t[1:, ::2] += 1.0
  t[[0, 2]] *= 2
  ref[1:, ::2] += 1.0
  ref[[0, 2]] *= 2
  np.testing.assert_allclose(t.numpy(), ref.numpy(), rtol=1e-6)


def test_setitem_after_earlier_use_keeps_earlier_gradient():
  x = Tensor(np.ones(3, np.float32), requires_grad=True)
  h = x * 2
  before = h.sum()           # uses h's old value
  h[0] = 0.0
  (before + h.sum()).backward()
  np.testing.assert_allclose(x.grad.numpy(), [2, 4, 4])   # torch: [2., 4., 4.]


def test_setitem_errors():
  w = Tensor(randn(3), requires_grad=True)
  with pytest.raises(RuntimeError, match="leaf"):
    w[0] = 1.0
  with Tensor.no_grad():
    w[0] = 1.0                                                         # allowed without grad tracking, stays a leaf
  assert w.is_leaf and w.numpy()[0] == 1.0
  t = Tensor.zeros(3, 4)
  with pytest.raises(RuntimeError, match=r"\[3\].*\[4\]"):
    t[0] = Tensor.ones(3)
  with pytest.raises(RuntimeError, match=r"\[2, 1, 4\]"):
    t[0] = Tensor.ones(2, 1, 4)
  with pytest.raises(RuntimeError, match=r"\[5\].*\[6\]"):
    Tensor.zeros(2, 3)[Tensor.ones(2, 3).cast(dtypes.bool)] = Tensor.ones(5)
  with pytest.raises(IndexError, match="out of bounds"):
    t[[0, 3]] = 1.0
  with pytest.raises(IndexError, match="out of bounds"):
    t[3] = 1.0
  with pytest.raises(TypeError):
    t[0] = "x"


# ---------------------------------------------------------------- gather / scatter

def _index(shape: tuple[int, ...], high: int, seed: int = 0) -> np.ndarray:
  return np.random.default_rng(seed).integers(0, high, shape).astype(np.int64)


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_gather(dim, layout):
  shape, make = LAYOUTS[layout]
  sizes = (4, 5, 6)
  idx_shape = tuple(3 if d == dim % 3 else s - 1 for d, s in enumerate(sizes))   # smaller than self apart from dim
  index = _index(idx_shape, sizes[dim], seed=dim + 3)
  compare(lambda L, x: make(x).gather(dim, L.i(index)), randn(*shape))


def test_gather_edges():
  compare(lambda L, x: x.gather(0, L.i(np.zeros((0, 2), np.int64))), randn(3, 2))
  compare(lambda L, x: x.gather(0, L.i(np.array(0))), np.array(1.5, np.float32))                 # 0-d self and index
  compare(lambda L, x: x.gather(1, L.i([[0, 0, 0], [1, 1, 0]])), randn(2, 2))                      # repeated picks add up in backward
  ints = (np.arange(12).reshape(3, 4) * 7 % 5).astype(np.int32)
  compare(lambda L, x: x.gather(1, L.i([[3], [0], [2]])), ints)
  assert kernels(Tensor(randn(5, 8)).gather(1, Tensor(_index((5, 3), 8))).relu()) == 1


@pytest.mark.parametrize("dim", [0, 1])
@pytest.mark.parametrize("scalar", [False, True])
def test_scatter(dim, scalar):
  index = np.array([[0, 2, 1], [2, 1, 0]]) if dim == 0 else np.array([[3, 0, 1], [4, 2, 3]])   # no repeated targets
  if scalar: compare(lambda L, x: (x * 1).scatter(dim, L.i(index), 2.5), randn(3, 5))
  else: compare(lambda L, x, s: x.T.scatter(dim, L.i(index), s.T), randn(5, 3), randn(3, 2, seed=2))   # non-contiguous


def test_scatter_src_larger_than_index():
  """Only the first index.shape elements of src are used (torch's backward can't do this case: forward only)."""
  index, src = np.array([[0, 2, 1], [2, 1, 0]]), randn(2, 4, seed=2)
  compare(lambda L, x, s: x.scatter(0, L.i(index), s), randn(3, 5), src, grad=False)


def test_scatter_repeated_targets_last_wins_and_int():
  index = np.array([[1, 1, 1, 0]])
  out = Tensor.zeros(1, 3).scatter(1, Tensor(index), Tensor([[5.0, 6.0, 7.0, 8.0]]))
  np.testing.assert_array_equal(out.numpy(), [[8, 7, 0]])
  ints = np.arange(12, dtype=np.int32).reshape(3, 4)
  compare(lambda L, x: x.scatter(0, L.i([[2, 0, 1, 1]]), L.i([[9, 8, 7, 6]]).int()), ints)


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce(reduce, include_self):
  index = np.array([[0, 1, 0, 2], [0, 0, 1, 2], [2, 2, 2, 0]])     # repeated targets on purpose
  compare(lambda L, x, s: (x * 1).scatter_reduce(0, L.i(index), s, reduce, include_self=include_self), randn(3, 5), randn(3, 4, seed=1))


@pytest.mark.parametrize("reduce", ["sum", "prod", "amax", "amin"])
def test_scatter_reduce_int(reduce):
  ints = (np.arange(12).reshape(3, 4) % 5 - 2).astype(np.int32)
  compare(lambda L, x, s: x.scatter_reduce(1, L.i([[0, 0, 3], [1, 1, 1], [2, 0, 2]]), s, reduce), ints, ints[:, :3] + 3)


def test_scatter_reduce_amax_ties_share_gradient():
  x = Tensor([[1.0, 0.0]], requires_grad=True)
  s = Tensor([[1.0, 1.0]], requires_grad=True)
  xt, st = torch.tensor([[1.0, 0.0]], requires_grad=True), torch.tensor([[1.0, 1.0]], requires_grad=True)
  x.scatter_reduce(1, Tensor([[0, 0]]), s, "amax").sum().backward()
  xt.scatter_reduce(1, torch.tensor([[0, 0]]), st, "amax").sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy())
  np.testing.assert_allclose(s.grad.numpy(), st.grad.numpy())


@pytest.mark.parametrize("call, words", [
  (lambda x: x.gather(0, Tensor([[9]])), ["9", "size 3"]), (lambda x: x.gather(1, Tensor([[-1]])), ["-1", "size 4"]),
  (lambda x: x.gather(0, Tensor([1])), ["same number of dimensions"]), (lambda x: x.gather(0, Tensor([[0, 0, 0, 0, 0]])), ["[1, 5]", "[3, 4]"]),
  (lambda x: x.gather(0, Tensor([[0.0]])), ["int"]), (lambda x: x.scatter(0, Tensor([[3]]), 1.0), ["3", "size 3"]),
  (lambda x: x.scatter(0, Tensor([[0, 1]]), Tensor([[1.0]])), ["[1, 2]", "[1, 1]"]),
  (lambda x: x.scatter_reduce(0, Tensor([[0]]), Tensor([[1.0]]), "median"), ["median"]),
  (lambda x: x.masked_fill(Tensor.ones(3, 4), 1.0), ["bool"]), (lambda x: x.masked_fill(x > 0, Tensor([1.0, 2.0])), ["0-dimensional"]),
])
def test_gather_scatter_errors_are_runtime_errors(call, words):
  with pytest.raises(RuntimeError) as info:
    call(Tensor(randn(3, 4)))
  for w in words: assert w in str(info.value), str(info.value)


def test_gather_dim_out_of_range_is_index_error():
  with pytest.raises(IndexError):
    Tensor(randn(3, 4)).gather(2, Tensor([[0]]))


# ---------------------------------------------------------------- masked_fill, index_select

def test_masked_fill():
  mask = randn(3, 4, seed=5) > 0
  compare(lambda L, x: x.masked_fill(L.i(mask), -1.5), randn(3, 4))
  compare(lambda L, x: x.masked_fill(L.i(mask[:1]), 2.0), randn(3, 4))                 # broadcast mask
  compare(lambda L, x: x.masked_fill(L.i(mask), 9.0), randn(3, 1))                  # broadcast self
  compare(lambda L, x, v: x.T.masked_fill(L.i(mask.T), v), randn(3, 4), np.array(3.0, np.float32))   # 0-d tensor value, non-contiguous
  compare(lambda L, x: x.masked_fill(L.i(mask[0]), 2.7), np.arange(4, dtype=np.int32))  # value cast to int


def test_index_select():
  compare(lambda L, x: x.index_select(1, L.i([2, 0, 2])), randn(3, 4))
  compare(lambda L, x: x.index_select(0, L.i(1)), randn(3, 4))


# ---------------------------------------------------------------- cat / stack / split / chunk

@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cat(dim):
  shapes = [(2, 3, 4), (2, 3, 4), (2, 3, 4)]
  shapes = [tuple(n if d == dim % 3 else s for d, s in enumerate(shp)) for shp, n in zip(shapes, (1, 3, 2))]
  compare(lambda L, a, b, c: L.cat([a, b.exp(), c], dim=dim), *[randn(*s, seed=i) for i, s in enumerate(shapes)])


def test_cat_forms_dtypes_and_edges():
  compare(lambda L, a, b: L.cat([a.T, b[:, ::2]], dim=1), randn(3, 2), randn(2, 6))                  # non-contiguous pieces
  compare(lambda L, a, b: L.cat([a.expand(2, 3), b], dim=0), randn(1, 3), randn(4, 3))              # expanded piece
  compare(lambda L, a, b: L.cat([a, b], dim=0), randn(0, 3), randn(2, 3))                           # zero-size piece
  compare(lambda L, a, b: L.cat([a, b], dim=0), randn(0), randn(2, 3))                              # legacy 1-d empty is skipped
  compare(lambda L, a, b: L.cat([a, b], dim=1), randn(0, 2), randn(0, 3))                           # all empty
  compare(lambda L, a: L.cat([a], dim=0), randn(3))
  ints, floats = np.arange(4, dtype=np.int32), randn(4)
  compare(lambda L, a, b: L.cat([a, b]), ints, floats)                                             # int32 + float32 -> float32
  compare(lambda L, a, b: L.cat([a, b]), ints, np.arange(3, dtype=np.int64))                       # -> int64
  compare(lambda L, a, b: L.cat([a, b]), np.array([True, False]), np.array([False, True, True]))   # bool stays bool
  a, b = Tensor(randn(2, 3)), Tensor(randn(2, 5))
  np.testing.assert_allclose(a.cat(b, dim=1).numpy(), Tensor.cat(a, b, dim=1).numpy())
  np.testing.assert_allclose(a.cat(b, dim=1).numpy(), Tensor.cat([a, b], 1).numpy())
  assert Tensor.cat([a]) is not a


def test_cat_and_pad_modes_fuse():
  a, b = Tensor(randn(3, 4)), Tensor(randn(3, 5))
  assert kernels(a.cat(b, dim=1).relu()) == 1
  assert kernels(Tensor.stack([a, a * 2, a + 1], dim=1).sum(1)) == 1
  assert kernels(Tensor(randn(1, 2, 5, 6)).pad((2, 2, 1, 1), "reflect").relu()) == 1
  assert kernels(a.roll((1, 2), (0, 1)) * 3) == 1


def test_stack():
  compare(lambda L, a, b: L.stack([a, b.T], dim=1), randn(3, 4), randn(4, 3))
  compare(lambda L, a, b: L.stack([a, b], dim=-1), randn(2), randn(2, seed=1))
  compare(lambda L, a, b: L.stack([a, b]), np.array(1.0, np.float32), np.array(2.0, np.float32))   # 0-d -> (2,)
  compare(lambda L, a: L.stack([a, a]), randn(0, 3))


@pytest.mark.parametrize("sizes, dim", [(2, 0), (3, 1), (10, 1), ([1, 3, 0, 1], 1), ([5], -1), (1, -1)])
def test_split(sizes, dim):
  compare(lambda L, x: x.split(sizes, dim), randn(3, 5))


@pytest.mark.parametrize("chunks, size", [(3, 5), (4, 5), (4, 6), (1, 4), (6, 3), (3, 0)])
def test_chunk(chunks, size):
  compare(lambda L, x: x.chunk(chunks, 1), randn(2, size))


@pytest.mark.parametrize("call, exc, words", [
  (lambda: Tensor.cat([Tensor.ones(2, 3), Tensor.ones(2, 4)]), RuntimeError, ["dimension 0", "size 3", "size 4", "tensor number 1"]),
  (lambda: Tensor.cat([Tensor.ones(2, 3), Tensor.ones(3)]), RuntimeError, ["same number of dimensions", "2 and 1"]),
  (lambda: Tensor.cat([]), ValueError, ["non-empty"]),
  (lambda: Tensor.cat([Tensor(1.0), Tensor(2.0)]), RuntimeError, ["zero-dimensional", "position 0"]),
  (lambda: Tensor.cat([Tensor.ones(2, 3), Tensor.ones(2, 3)], dim=2), IndexError, ["2"]),
  (lambda: Tensor.stack([Tensor.ones(2, 3), Tensor.ones(2, 4)]), RuntimeError, ["[2, 3]", "[2, 4]", "entry 1"]),
  (lambda: Tensor.stack([]), RuntimeError, ["non-empty"]),
  (lambda: Tensor.ones(3).split([1, 1]), RuntimeError, ["sum exactly to 3", "[1, 1]"]),
  (lambda: Tensor.ones(3).split(0), RuntimeError, ["split_size can only be 0", "3"]),
  (lambda: Tensor.ones(3).split(-1), RuntimeError, ["non-negative", "-1"]),
  (lambda: Tensor.ones(3).split([4, -1]), RuntimeError, ["non-negative", "[4, -1]"]),
  (lambda: Tensor(1.0).split(1), RuntimeError, ["1-dimensional"]),
  (lambda: Tensor.ones(3).chunk(0), RuntimeError, ["greater than 0", "0"]),
])
def test_join_split_errors(call, exc, words):
  with pytest.raises(exc) as info:
    call()
  for w in words: assert w in str(info.value), str(info.value)


# ---------------------------------------------------------------- repeat / repeat_interleave / roll

@pytest.mark.parametrize("reps", [(2, 3), (1, 1), (2, 1, 3), (0, 2), (3, 1, 1, 2)])
def test_repeat(reps):
  compare(lambda L, x: x.repeat(*reps), randn(2, 3))
  compare(lambda L, x: x.T.repeat(*reps), randn(3, 2))


def test_repeat_edges():
  compare(lambda L, x: x.repeat(3, 2), np.array(1.5, np.float32))
  compare(lambda L, x: x.repeat((2, 2)), randn(0, 3))
  with pytest.raises(RuntimeError, match="can not be smaller"):
    Tensor.ones(2, 3).repeat(2)


@pytest.mark.parametrize("case", ["int_dim0", "int_dim1", "int_flat", "tensor_dim1", "tensor_flat", "zero", "0d", "one_elem_tensor"])
def test_repeat_interleave(case):
  fns = {
    "int_dim0": lambda L, x: x.repeat_interleave(2, dim=0), "int_dim1": lambda L, x: x.T.repeat_interleave(3, dim=1),
    "int_flat": lambda L, x: x.repeat_interleave(2), "tensor_dim1": lambda L, x: x.repeat_interleave(L.i([1, 0, 3]), dim=1),
    "tensor_flat": lambda L, x: x.repeat_interleave(L.i([1, 2, 0, 1, 1, 2])), "zero": lambda L, x: x.repeat_interleave(0, dim=1),
    "0d": lambda L, x: x[0, 0].repeat_interleave(3), "one_elem_tensor": lambda L, x: x.repeat_interleave(L.i([2]), dim=0),
  }
  compare(fns[case], randn(2, 3) if case != "int_dim1" else randn(3, 2))


def test_repeat_interleave_errors():
  with pytest.raises(RuntimeError, match="non-negative"):
    Tensor.ones(3).repeat_interleave(-1)
  with pytest.raises(RuntimeError, match="repeats.size"):
    Tensor.ones(3).repeat_interleave(Tensor([1, 2]))


@pytest.mark.parametrize("shifts, dims", [(1, 0), (-2, 1), (7, 1), ((1, 2), (0, 1)), ((1, -1), (1, 1)), (3, None), (0, 0)])
def test_roll(shifts, dims):
  compare(lambda L, x: x.roll(shifts, dims), randn(3, 4))
  compare(lambda L, x: x.T.roll(shifts, dims), randn(4, 3))


def test_roll_edges_and_errors():
  compare(lambda L, x: x.roll(2, 0), randn(0, 4))
  compare(lambda L, x: x.roll(1), np.array(2.0, np.float32))
  with pytest.raises(RuntimeError, match="align"):
    Tensor.ones(3, 4).roll((1, 2), 0)
  with pytest.raises(RuntimeError, match="align"):
    Tensor.ones(3, 4).roll((1, 2))
  with pytest.raises(IndexError, match="no dimensions"):
    Tensor(1.0).roll(1, 0)


# ---------------------------------------------------------------- squeeze / unsqueeze / flatten / unflatten / flip / expand

SHAPE_OPS = {
  "squeeze": lambda L, x: x.squeeze(), "squeeze_dim": lambda L, x: x.squeeze(0), "squeeze_noop": lambda L, x: x.squeeze(1),
  "squeeze_tuple": lambda L, x: x.squeeze((0, 2, 1)), "squeeze_neg": lambda L, x: x.squeeze(-1),
  "unsqueeze": lambda L, x: x.unsqueeze(1), "unsqueeze_end": lambda L, x: x.unsqueeze(-1), "unsqueeze_neg": lambda L, x: x.unsqueeze(-3),
  "flatten": lambda L, x: x.flatten(), "flatten_mid": lambda L, x: x.flatten(1, 2), "flatten_same": lambda L, x: x.flatten(1, 1),
  "unflatten": lambda L, x: x.unflatten(1, (2, 2)), "unflatten_-1": lambda L, x: x.unflatten(-1, (-1, 1)),
  "flip": lambda L, x: x.flip(0, 2), "flip_neg": lambda L, x: x.flip(-1), "expand": lambda L, x: x.expand(2, 3, 4, 5),
  "expand_-1": lambda L, x: x.expand(3, -1, -1, 5), "broadcast_to": lambda L, x: x.broadcast_to((2, 1, 4, 5)),
  "transposed_flatten": lambda L, x: x.permute(1, 2, 0).flatten(0, 1),
}


@pytest.mark.parametrize("name", list(SHAPE_OPS))
def test_shape_ops(name):
  compare(SHAPE_OPS[name], randn(1, 4, 1))


def test_flip_0d():
  assert Tensor(1.5).flip(0).item() == 1.5


def test_shape_ops_edges():
  compare(lambda L, x: x.squeeze(0), np.array(1.5, np.float32))
  compare(lambda L, x: x.squeeze(), randn(1, 0, 1))
  compare(lambda L, x: x.unsqueeze(0), np.array(1.5, np.float32))
  compare(lambda L, x: x.flatten(), np.array(1.5, np.float32))
  compare(lambda L, x: x.flatten(0, 1), randn(2, 0, 3))
  compare(lambda L, x: x.unflatten(1, (0, 4)), randn(2, 0))
  compare(lambda L, x: x.expand(0, 3), randn(1, 3))
  compare(lambda L, x: x.expand(2, 0, 3), randn(0, 3))
  compare(lambda L, x: x.flip(0)[::2], randn(5, 2))


@pytest.mark.parametrize("call, exc", [
  (lambda t: t.squeeze(3), IndexError), (lambda t: Tensor(1.0).squeeze(1), IndexError), (lambda t: t.unsqueeze(4), IndexError),
  (lambda t: t.flatten(2, 1), RuntimeError), (lambda t: Tensor(1.0).flatten(1), IndexError),
  (lambda t: t.unflatten(1, (2, 3)), RuntimeError), (lambda t: t.unflatten(1, ()), RuntimeError), (lambda t: t.unflatten(1, (-1, -1)), RuntimeError),
  (lambda t: t.expand(-1, 2, 4, 1), RuntimeError), (lambda t: t.expand(3, 3, 1), RuntimeError), (lambda t: t.expand(2, -2, 1), RuntimeError),
  (lambda t: t.flip(3), IndexError),
])
def test_shape_op_errors(call, exc):
  with pytest.raises(exc) as info:
    call(Tensor.ones(2, 4, 1))
  assert any(ch.isdigit() for ch in str(info.value))


# ---------------------------------------------------------------- pad modes

PADS = [(1, 2), (2, 0, 1, 3), (0, 4, 2, 2, 1, 0), (-1, 2, 1, -2), (3, -1), (0, 0)]
PAD_INPUT = {2: (2, 3, 6), 4: (2, 3, 5, 6), 6: (1, 2, 3, 5, 6)}   # the ranks torch supports for each padding length


@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate", "circular"])
@pytest.mark.parametrize("pad", PADS, ids=[str(p) for p in PADS])
def test_pad_modes(mode, pad):
  compare(lambda L, x: L.pad(x, pad, mode), randn(*PAD_INPUT[len(pad)]))


def test_pad_modes_any_rank():
  """minigrad pads any dims in every mode (torch only the last 1-3 of a 2-5 d input): compare dim by dim."""
  x = randn(3, 4, 5)
  for mode in ("reflect", "replicate", "circular"):
    ref = torch.from_numpy(x)
    ref = TF.pad(ref.permute(1, 2, 0), (1, 2), mode).permute(2, 0, 1)   # dim 0 by (1, 2)
    ref = TF.pad(ref, (2, 0, 0, 3), mode)                               # dims 1, 2
    np.testing.assert_allclose(Tensor(x).pad(((1, 2), (0, 3), (2, 0)), mode).numpy(), ref.numpy())
  np.testing.assert_allclose(Tensor(np.arange(5.0, dtype=np.float32)).pad((2, 1), "reflect").numpy(), [2, 1, 0, 1, 2, 3, 4, 3])


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
def test_pad_modes_non_contiguous_and_int(mode):
  compare(lambda L, x: L.pad(x.transpose(-1, -2)[:, :, ::2], (2, 1, 1, 2), mode), randn(1, 1, 6, 5))
  compare(lambda L, x: L.pad(x.expand(2, 3, 4), (1, 2), mode), randn(2, 1, 4))
  compare(lambda L, x: L.pad(x, (2, 2), mode), np.arange(12, dtype=np.int32).reshape(3, 4))
  compare(lambda L, x: L.pad(x, (1, 1), mode), randn(0, 2, 3))              # empty batch dim


def test_pad_value_and_positional_forms():
  x = randn(2, 3)
  compare(lambda L, t: L.pad(t, (1, 2), "constant", -3.0), x)
  np.testing.assert_allclose(Tensor(x).pad((1, 2), -3.0).numpy(), TF.pad(torch.from_numpy(x), (1, 2), value=-3.0).numpy())
  np.testing.assert_allclose(Tensor(x).pad(((0, 1), (2, 0)), mode="reflect").numpy(), TF.pad(torch.from_numpy(x)[None], (2, 0, 0, 1), mode="reflect")[0].numpy())


@pytest.mark.parametrize("mode, pad, shape, exc, words", [
  ("reflect", (5, 0), (2, 5), RuntimeError, ["(5, 0)", "dimension 1", "[2, 5]"]),
  ("reflect", (0, 2), (2, 2), RuntimeError, ["(0, 2)"]),
  ("reflect", (1, 1), (2, 0), RuntimeError, ["dimension 1"]),
  ("reflect", (1, 1, 1), (2, 5), ValueError, ["(1, 1, 1)"]),
  ("circular", (6, 0), (2, 5), RuntimeError, ["wrapping around more than once"]),
  ("circular", (-2, 4), (2, 5), RuntimeError, ["wrapping around more than once"]),
  ("replicate", (1, 0), (2, 0), RuntimeError, ["dimension 1"]),
  ("foo", (1, 1), (2, 5), NotImplementedError, ["foo"]),
])
def test_pad_mode_errors(mode, pad, shape, exc, words):
  with pytest.raises(exc) as info:
    Tensor.ones(*shape).pad(pad, mode)
  for w in words: assert w in str(info.value), str(info.value)


def test_pad_mode_with_value_is_error():
  with pytest.raises(RuntimeError, match="value"):
    Tensor.ones(2, 3).pad((1, 1), mode="reflect", value=1.0)
