"""The disk cache of rendered kernels (minigrad/engine/kernel_cache.py): a new process reuses them, and any change to
what a kernel depends on makes it anew."""
from __future__ import annotations
import numpy as np
import pytest
from minigrad import Tensor
from minigrad.engine import realize
from minigrad.helpers import NOOPT
from minigrad.runtime.device import Device

RENDER = realize.render_kernel


@pytest.fixture(autouse=True)
def isolated_cache(monkeypatch, tmp_path):
  monkeypatch.setenv("MINIGRAD_CACHE", str(tmp_path / "cache"))
  monkeypatch.delenv("DISABLE_COMPILER_CACHE", raising=False)
  monkeypatch.setattr(realize, "compiled_kernels", {})
  return tmp_path / "cache"


def compute(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  return ((Tensor(a) @ Tensor(b)).relu() + 1).sum(axis=1).numpy()


def renders(monkeypatch) -> list[str]:
  """A new process, as far as kernels go: nothing compiled in memory; the names of the kernels rendered from now on."""
  monkeypatch.setattr(realize, "compiled_kernels", {})
  rendered: list[str] = []
  monkeypatch.setattr(realize, "render_kernel", lambda kernel, device, verbose=True: rendered.append(kernel.name) or RENDER(kernel, device, verbose))
  return rendered


def test_a_new_process_loads_its_kernels_instead_of_rendering_them(monkeypatch, isolated_cache):
  rng = np.random.default_rng(0)
  a, b = rng.standard_normal((64, 96), dtype=np.float32), rng.standard_normal((96, 32), dtype=np.float32)
  expected = (np.maximum(a @ b, 0) + 1).sum(axis=1)
  first = renders(monkeypatch)
  np.testing.assert_allclose(compute(a, b), expected, rtol=1e-4)
  assert first and len(list((isolated_cache / "kernels").iterdir())) == len(first)
  again = renders(monkeypatch)
  a2, b2 = rng.standard_normal((64, 96), dtype=np.float32), rng.standard_normal((96, 32), dtype=np.float32)
  np.testing.assert_allclose(compute(a2, b2), (np.maximum(a2 @ b2, 0) + 1).sum(axis=1), rtol=1e-4)
  assert again == []


@pytest.mark.parametrize("change", ["renderer setting", "NOOPT"])
def test_a_changed_setting_or_disabled_cache_renders_again(monkeypatch, isolated_cache, change):
  a, b = np.ones((16, 8), np.float32), np.ones((8, 4), np.float32)
  renders(monkeypatch)
  compute(a, b)
  count = len(list((isolated_cache / "kernels").iterdir()))
  if change == "NOOPT": monkeypatch.setattr(NOOPT, "value", 1 - NOOPT.value)
  else: monkeypatch.setattr(Device[Device.DEFAULT].renderer, "a_setting_found_at_start_up", 1, raising=False)
  changed = renders(monkeypatch)
  np.testing.assert_allclose(compute(a, b), np.full(16, 36, np.float32))
  assert changed and len(list((isolated_cache / "kernels").iterdir())) == count + len(changed)
  monkeypatch.setenv("DISABLE_COMPILER_CACHE", "1")
  disabled = renders(monkeypatch)
  compute(a, b)
  assert disabled == changed and len(list((isolated_cache / "kernels").iterdir())) == count + len(changed)


def test_a_damaged_entry_is_made_anew(monkeypatch, isolated_cache):
  a, b = np.full((16, 8), 2, np.float32), np.ones((8, 4), np.float32)
  first = renders(monkeypatch)
  compute(a, b)
  for entry in (isolated_cache / "kernels").iterdir(): entry.write_bytes(entry.read_bytes()[:-7])
  again = renders(monkeypatch)
  np.testing.assert_allclose(compute(a, b), np.full(16, 68, np.float32))
  assert again == first
