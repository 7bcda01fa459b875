"""Multi-output kernels (minigrad/schedule/multi_output.py): elementwise kernels over the same elements that share
data run as one kernel storing several outputs; the values match numpy and the run order stays valid."""
import numpy as np
from minigrad import Tensor, dtypes, nn
from minigrad.helpers import GlobalCounters
from minigrad.schedule.multi_output import MAX_OUTPUTS


def tensors(*arrays):
  return [Tensor(a).realize() for a in arrays]


def kernels_to_realize(*ts: Tensor) -> int:
  GlobalCounters.reset()
  Tensor.realize(*ts)
  return GlobalCounters.kernel_count


def test_adam_like_updates_are_one_kernel_and_the_last_uses_the_first_two():
  rng = np.random.default_rng(0)
  g, m, w = (rng.standard_normal(1000).astype(np.float32) for _ in range(3))
  v = rng.random(1000).astype(np.float32)
  tg, tm, tv, tw = tensors(g, m, v, w)
  new_m, new_v = tm * 0.9 + tg * 0.1, tv * 0.99 + tg * tg * 0.01
  new_w = tw - 0.01 * new_m / (new_v.sqrt() + 1e-8)
  (item,) = new_m.schedule(new_v, new_w)
  assert item.outputs == 3 and len(item.bufs) == 3 + 4   # writes m, v, w; reads g, m, v, w once
  assert kernels_to_realize(new_m, new_v, new_w) == 1
  want_m, want_v = m * 0.9 + g * 0.1, v * 0.99 + g * g * 0.01
  np.testing.assert_allclose(new_m.numpy(), want_m, rtol=1e-6, atol=1e-6)
  np.testing.assert_allclose(new_v.numpy(), want_v, rtol=1e-6, atol=1e-6)
  np.testing.assert_allclose(new_w.numpy(), w - 0.01 * want_m / (np.sqrt(want_v) + 1e-8), rtol=1e-5, atol=1e-6)


def test_kernels_that_share_nothing_stay_apart():
  a, b = tensors(np.arange(64, dtype=np.float32), np.ones(64, np.float32))
  assert kernels_to_realize(a + 1, b * 2) == 2


def test_outputs_of_different_dtypes_stay_apart():
  x = np.arange(64, dtype=np.float32)
  (t,) = tensors(x)
  as_int, doubled = (t * 3).cast(dtypes.int32), t * 2
  assert kernels_to_realize(as_int, doubled) == 2
  np.testing.assert_array_equal(as_int.numpy(), (x * 3).astype(np.int32))
  np.testing.assert_array_equal(doubled.numpy(), x * 2)


def test_an_output_read_through_another_view_is_not_merged():
  x = np.random.default_rng(1).standard_normal((16, 16)).astype(np.float32)
  (t,) = tensors(x)
  a = t + 1
  b = a.T * 2 + t   # reads a's buffer transposed: element (i, j) needs a[j, i], not the value just computed
  assert kernels_to_realize(a, b) == 2
  np.testing.assert_allclose(b.numpy(), (x + 1).T * 2 + x, rtol=1e-6)


def test_a_reader_in_between_keeps_the_order():
  x = np.random.default_rng(2).standard_normal((8, 32)).astype(np.float32)
  (t,) = tensors(x)
  a = t + 1
  total = a.sum(1, keepdim=True)      # reads a: a's kernel must run before it
  b = t * 2 + total                   # shares t with a, but reads what was computed from a
  items = a.schedule(total, b)
  assert [item.outputs for item in items] == [1, 1, 1]
  Tensor.realize(a, total, b)
  np.testing.assert_allclose(b.numpy(), x * 2 + (x + 1).sum(1, keepdims=True), rtol=1e-5)


def test_at_most_max_outputs_per_kernel():
  x = np.arange(128, dtype=np.float32)
  (t,) = tensors(x)
  outs = [t * (i + 1) for i in range(MAX_OUTPUTS + 2)]
  assert kernels_to_realize(*outs) == 2
  for i, out in enumerate(outs): np.testing.assert_array_equal(out.numpy(), x * (i + 1))


def test_adam_steps_match_torch():
  import torch
  rng = np.random.default_rng(3)
  w0, x, y = rng.standard_normal((20, 30)).astype(np.float32), rng.standard_normal((8, 30)).astype(np.float32), rng.standard_normal((8, 20)).astype(np.float32)
  w = Tensor(w0, requires_grad=True)
  optimizer = nn.optim.Adam([w], lr=0.01)
  tw = torch.tensor(w0, requires_grad=True)
  torch_optimizer = torch.optim.Adam([tw], lr=0.01)
  for _ in range(3):
    optimizer.zero_grad()
    ((Tensor(x) @ w.T - Tensor(y)) ** 2).mean().backward()
    optimizer.step()
    torch_optimizer.zero_grad()
    ((torch.from_numpy(x) @ tw.T - torch.from_numpy(y)) ** 2).mean().backward()
    torch_optimizer.step()
  np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=1e-5, atol=1e-6)
