"""Bad input to the Tensor API gives a clear Python error, raised early (before any kernel is built or run),
with a message naming the shapes, axes or devices involved, as PyTorch does.

"""
from __future__ import annotations
import re
import numpy as np
import pytest
from minigrad import Tensor, dtypes
from minigrad.helpers import GlobalCounters


@pytest.fixture
def t23() -> Tensor: return Tensor(np.arange(6, dtype=np.float32).reshape(2, 3))


def _names(message: str, *shapes: tuple[int, ...]) -> bool:
  return all(str(s) in message for s in shapes)


# ---------------------------------------------------------------- broadcasting

@pytest.mark.parametrize("sa, sb", [((2, 3), (4,)), ((2, 3, 4), (3, 3, 4)), ((5,), (2, 4)), ((3, 1), (2, 4))])
@pytest.mark.parametrize("op", ["add", "mul", "lt", "maximum", "where"])
def test_broadcast_mismatch_names_both_shapes(sa, sb, op):
  a, b = Tensor.ones(*sa), Tensor.ones(*sb)
  fn = {"add": lambda: a + b, "mul": lambda: a * b, "lt": lambda: a < b, "maximum": lambda: a.maximum(b),
        "where": lambda: (a > 0).where(b, 0.0)}[op]
  with pytest.raises((ValueError, RuntimeError)) as info:
    fn()
  assert _names(str(info.value), sa, sb), str(info.value)


def test_broadcast_error_is_raised_before_any_kernel_runs():
  GlobalCounters.reset()
  with pytest.raises((ValueError, RuntimeError)):
    (Tensor.ones(2, 3).exp() + Tensor.ones(4)).realize()
  assert GlobalCounters.kernel_count == 0


def test_expand_mismatch():
  with pytest.raises(RuntimeError, match=r"\(2, 3\)"):
    Tensor.ones(2, 3).expand(4, 3)
  with pytest.raises(RuntimeError):
    Tensor.ones(2, 3).expand(3)


# ---------------------------------------------------------------- axes

BAD_AXIS_CALLS = {
  "sum": lambda t: t.sum(2), "sum_neg": lambda t: t.sum(-3), "sum_tuple": lambda t: t.sum((0, 5)),
  "max": lambda t: t.max(7), "min": lambda t: t.min(-4), "mean": lambda t: t.mean(2),
  "softmax": lambda t: t.softmax(2), "log_softmax": lambda t: t.log_softmax(-3),
  "unsqueeze": lambda t: t.unsqueeze(4), "unsqueeze_neg": lambda t: t.unsqueeze(-4), "squeeze": lambda t: t.squeeze(2),
  "transpose": lambda t: t.transpose(0, 2), "flatten": lambda t: t.flatten(3), "flatten_end": lambda t: t.flatten(0, 5),
  "flip": lambda t: t.flip(2), "size": lambda t: t.size(2), "permute_out_of_range": lambda t: t.permute(0, 2),
}


@pytest.mark.parametrize("call", list(BAD_AXIS_CALLS))
def test_bad_axis_is_index_error(t23, call):
  with pytest.raises(IndexError, match=r"out of range|Dimension") as info:
    BAD_AXIS_CALLS[call](t23)
  assert re.search(r"-?\d", str(info.value))   # names the axis / range


def test_bad_axis_message_names_range_and_axis(t23):
  with pytest.raises(IndexError) as info:
    t23.sum(5)
  assert "5" in str(info.value) and "-2" in str(info.value) and "1" in str(info.value)


@pytest.mark.parametrize("call", [
  pytest.param(lambda t: t.flip("x"), id="flip_str"),
  pytest.param(lambda t: t.flip(1.5), id="flip_float"),
  pytest.param(lambda t: t.permute("x", 0), id="permute_str"),
  pytest.param(lambda t: t.permute(1.0, 0), id="permute_float"),
  pytest.param(lambda t: t.unsqueeze(1.5), id="unsqueeze_float"),
  pytest.param(lambda t: t.sum("x"), id="sum_str"),
  pytest.param(lambda t: t.transpose("a", 0), id="transpose_str"),
])
def test_non_int_axis_is_type_error(t23, call):
  with pytest.raises(TypeError, match="axis|dim"):
    call(t23)


# ---------------------------------------------------------------- reshape and other movement ops

@pytest.mark.parametrize("new", [(4, 2), (7,), (2, 2, 2), (6, 2)])
def test_reshape_element_count_names_both_shapes(t23, new):
  with pytest.raises(RuntimeError) as info:
    t23.reshape(new)
  assert _names(str(info.value), (2, 3), new) or (_names(str(info.value), (2, 3)) and str(list(new)) in str(info.value)), str(info.value)


@pytest.mark.parametrize("new", [(4, -1), (-1, 4), (0, -1), (-1, -1), (-2, -3), (5, -1, 2)])
def test_reshape_bad_minus_one_and_negative(t23, new):
  with pytest.raises(RuntimeError) as info:
    t23.reshape(new)
  assert str(new).replace(" ", "") in str(info.value).replace(" ", "") or str(list(new)).replace(" ", "") in str(info.value).replace(" ", "")


@pytest.mark.parametrize("order", [(0, 0), (0,), (1, 1), (0, 1, 2), (1, 0, 1)])
def test_permute_non_permutation(t23, order):
  with pytest.raises((RuntimeError, IndexError, ValueError)) as info:
    t23.permute(order)
  assert re.search(r"\d", str(info.value))
  assert "(2, 3)" in str(info.value) or "range" in str(info.value)


@pytest.mark.parametrize("bounds", [((0, 3), None), ((2, 1), None), (None, (-1, 2)), ((0, 1),), ((0, 1), (0, 1), (0, 1))])
def test_shrink_out_of_range(t23, bounds):
  with pytest.raises(ValueError, match=r"\(2, 3\)"):
    t23.shrink(bounds)


@pytest.mark.parametrize("padding", [((1, 1),), ((1, 1), (1, 1), (1, 1)), (1, 1, 1), (1, 1, 1, 1, 1, 1)])
def test_pad_wrong_length(t23, padding):
  with pytest.raises(ValueError):
    t23.pad(padding)


# ---------------------------------------------------------------- scalars, matmul

@pytest.mark.parametrize("shape", [(2, 3), (2,), (0,), (1, 2)])
def test_item_on_non_scalar(shape):
  with pytest.raises(RuntimeError, match=re.escape(str(shape))):
    Tensor.ones(*shape).item()


def test_len_of_0d():
  with pytest.raises(TypeError):
    len(Tensor(1.0))


@pytest.mark.parametrize("sa, sb", [((2, 3), (4, 2)), ((3,), (4,)), ((3,), (4, 2)), ((2, 3), (2,)), ((5, 2, 3), (5, 4, 2))])
def test_matmul_shape_mismatch_names_both_shapes(sa, sb):
  with pytest.raises(RuntimeError) as info:
    Tensor.ones(*sa) @ Tensor.ones(*sb)
  assert _names(str(info.value), sa, sb), str(info.value)


def test_matmul_batch_mismatch_names_operand_shapes():
  with pytest.raises((RuntimeError, ValueError)) as info:
    Tensor.ones(2, 3, 4) @ Tensor.ones(3, 4, 5)
  assert _names(str(info.value), (2, 3, 4), (3, 4, 5)), str(info.value)


def test_matmul_batch_mismatch_raises():
  with pytest.raises((RuntimeError, ValueError)):
    Tensor.ones(2, 3, 4) @ Tensor.ones(3, 4, 5)


def test_matmul_0d_and_non_tensor():
  with pytest.raises(RuntimeError, match=r"\(\)"):
    Tensor(2.0) @ Tensor.ones(3)
  with pytest.raises(RuntimeError):
    Tensor.ones(3).matmul(Tensor(2.0))
  with pytest.raises(TypeError):
    Tensor.ones(3, 2).matmul(np.ones((2, 2)))


# ---------------------------------------------------------------- devices

@pytest.mark.parametrize("make", [lambda d: Tensor([1.0], device=d), lambda d: Tensor.zeros(2, device=d),
                                  lambda d: Tensor.ones(2).to(d), lambda d: Tensor.arange(3, device=d),
                                  lambda d: Tensor.rand(2, device=d), lambda d: Tensor.full((2,), 1.0, device=d)],
                         ids=["ctor", "zeros", "to", "arange", "rand", "full"])
@pytest.mark.parametrize("name", ["TPU", "gpu0", "metal", "CPUX"])
def test_unknown_device_lists_valid_ones(make, name):
  with pytest.raises(ValueError) as info:
    make(name)
  msg = str(info.value)
  assert repr(name) in msg
  assert "CPU" in msg and "CL" in msg and "LLVM" in msg


def test_device_names_are_case_insensitive():
  assert Tensor([1.0], device="cpu").device == "CPU"
  assert Tensor.ones(2).to("Cpu").device == "CPU"


# ---------------------------------------------------------------- construction

@pytest.mark.parametrize("data", [[[1, 2], [3]], [[1, 2], [3, [4, 5]]], [1, [2]], [[[1.0]], [2.0]], [1, None]])
def test_ragged_nested_lists(data):
  with pytest.raises(ValueError):
    Tensor(data)


@pytest.mark.parametrize("data", ["abc", ["a", "b"], {1: 2}, object(), np.array([1j]), np.array([1, "a"], dtype=object)])
def test_unsupported_data(data):
  with pytest.raises(TypeError):
    Tensor(data)


@pytest.mark.parametrize("make", [lambda: Tensor.zeros(-1, 2), lambda: Tensor.full((2, -3), 1.0), lambda: Tensor.rand(-2),
                                  lambda: Tensor.randn(3, -1), lambda: Tensor.empty(-4)])
def test_negative_dimension(make):
  with pytest.raises(ValueError, match="negative"):
    make()


def test_arange_zero_step():
  with pytest.raises(ValueError):
    Tensor.arange(0, 5, 0)


# A dtype argument may be a DType, a name ("float32", as in tinygrad), a numpy dtype or type (as numpy takes), a Python
# type (float -> float64, as torch and numpy take) or a torch dtype (minigrad.dtype.to_dtype). torch itself takes only
# torch dtypes and Python types: cast("float32") and dtype=np.float64 are TypeErrors there. Whatever is accepted gives
# exactly that dtype and numpy's values; anything else is a TypeError naming the dtype and the value given.
DTYPE_SPELLINGS = {
  "cast_str": (lambda: Tensor.ones(2, 3).cast("float32"), dtypes.float32, lambda: np.ones((2, 3), np.float32)),
  "cast_np": (lambda: Tensor.ones(2).cast(np.float64), dtypes.float64, lambda: np.ones(2, np.float64)),
  "ctor_str": (lambda: Tensor([1, 2], dtype="float32"), dtypes.float32, lambda: np.array([1, 2], np.float32)),
  "zeros_np": (lambda: Tensor.zeros(2, dtype=np.float64), dtypes.float64, lambda: np.zeros(2, np.float64)),
  "ctor_np_dtype": (lambda: Tensor([1, 2], dtype=np.dtype("float16")), dtypes.float16, lambda: np.array([1, 2], np.float16)),
  "ctor_python_float": (lambda: Tensor([1, 2], dtype=float), dtypes.float64, lambda: np.array([1, 2], np.float64)),
  "ctor_torch": (lambda: Tensor([1, 2], dtype=__import__("torch").float64), dtypes.float64, lambda: np.array([1, 2], np.float64)),
  "cast_str_truncates": (lambda: Tensor([1.7, -2.5]).cast("int32"), dtypes.int32, lambda: np.array([1.7, -2.5], np.float32).astype(np.int32)),
  "cast_str_wraps": (lambda: Tensor([300, -1]).cast("uint8"), dtypes.uint8, lambda: np.array([300, -1], np.int32).astype(np.uint8)),
  "full_str": (lambda: Tensor.full((2,), 3, dtype="int8"), dtypes.int8, lambda: np.full(2, 3, np.int8)),
}


@pytest.mark.parametrize("name", list(DTYPE_SPELLINGS))
def test_dtype_names_and_numpy_dtypes_give_that_dtype(name):
  make, dtype, expected = DTYPE_SPELLINGS[name]
  out = make()
  assert out.dtype == dtype
  got, want = out.numpy(), expected()
  assert got.dtype == want.dtype
  np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("make, value", [
  (lambda: Tensor([1, 2], dtype="flaot32"), "'flaot32'"),
  (lambda: Tensor.ones(2).cast("nope"), "'nope'"),
  (lambda: Tensor.zeros(2, dtype=3), "3"),
  (lambda: Tensor.ones(2).cast(5), "5"),
  (lambda: Tensor.ones(2).cast(None), "None"),
  (lambda: Tensor([1, 2], dtype=np.complex64), "complex64"),
  (lambda: Tensor.ones(2).cast(object), "object"),
], ids=["ctor_typo", "cast_unknown_name", "zeros_int", "cast_int", "cast_none", "ctor_np_complex", "cast_object"])
def test_bad_dtype_argument_is_type_error(make, value):
  with pytest.raises(TypeError, match="dtype") as info:
    make()
  assert value in str(info.value), str(info.value)


# ---------------------------------------------------------------- indexing

@pytest.mark.parametrize("idx", [2, -3, (0, 3), (0, -4), (slice(None), 5), (Ellipsis, 3)], ids=repr)
def test_index_out_of_range(t23, idx):
  with pytest.raises(IndexError, match="out of bounds|out of range") as info:
    t23[idx]
  assert re.search(r"\d", str(info.value))


@pytest.mark.parametrize("idx", [(0, 0, 0), (0, None, 0, 0), (slice(None),) * 3, (Ellipsis, 0, 0, 0)], ids=repr)
def test_too_many_indices(t23, idx):
  with pytest.raises(IndexError, match="too many"):
    t23[idx]


def test_index_on_0d():
  with pytest.raises(IndexError):
    Tensor(1.0)[0]


def test_two_ellipses(t23):
  with pytest.raises(IndexError, match="ellipsis"):
    t23[..., ...]


@pytest.mark.parametrize("idx", [1.5, "x", (0, 1.0)], ids=repr)
def test_invalid_index_type(t23, idx):
  with pytest.raises(TypeError):
    t23[idx]


@pytest.mark.parametrize("idx", [Tensor([0, 2]), [0, 2]], ids=["tensor", "list"])
def test_advanced_index_out_of_range(t23, idx):
  with pytest.raises(IndexError, match=r"index 2 is out of bounds for dimension 0 with size 2"):
    t23[idx]


def test_zero_slice_step(t23):
  with pytest.raises(ValueError):
    t23[::0]


# ---------------------------------------------------------------- dtypes and operands

@pytest.mark.parametrize("other", ["x", [1, 2, 3], None, {1}])
def test_unsupported_operand(t23, other):
  with pytest.raises(TypeError):
    t23 + other
  with pytest.raises(TypeError):
    t23 * other


def test_bool_subtraction():
  with pytest.raises(TypeError):
    Tensor([True]) - Tensor([False])


def test_unsupported_int_promotion():
  with pytest.raises(TypeError, match="ushort|uint16"):
    Tensor(np.array([1], np.uint16)) + Tensor(np.array([1], np.int8))


@pytest.mark.parametrize("op", ["max", "min"])
@pytest.mark.parametrize("shape, axis", [((0, 3), 0), ((0,), None), ((2, 0), 1)])
def test_max_min_of_empty_dimension(op, shape, axis):
  with pytest.raises(RuntimeError, match=re.escape(str(shape))):
    getattr(Tensor.zeros(*shape), op)(axis)


def test_truth_value_of_tensor():
  assert bool(Tensor([0.0])) is False
  assert bool(Tensor(0.0)) is False
  assert bool(Tensor(3.0)) is True
  with pytest.raises(RuntimeError, match="ambiguous"):
    bool(Tensor([1.0, 2.0]))
