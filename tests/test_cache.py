"""The disk cache trusts only its owner (minigrad/cache/): ownership and permission checks on the folder and its
entries, no symlinks followed, no pickle read, damaged entries made anew, the size cap with least-recently-used
eviction, the report CLI, and two processes racing on one key. Each case runs a real kernel through the cache in a
folder of its own."""
import os
import pickle
import subprocess
import sys
import numpy as np
import pytest
from minigrad import Tensor, cache
from minigrad.engine import kernel_cache, realize
from minigrad.engine.realize import new_kernel


@pytest.fixture
def folder(tmp_path, monkeypatch):
  """An empty cache folder of this test's own, with nothing remembered in memory."""
  path = tmp_path / "cache"
  monkeypatch.setenv("MINIGRAD_CACHE", str(path))
  monkeypatch.delenv("DISABLE_COMPILER_CACHE", raising=False)
  monkeypatch.setattr(realize, "compiled_kernels", {})
  cache._checked_root.cache_clear()
  yield path
  cache._checked_root.cache_clear()


def product(seed: int = 0) -> np.ndarray:
  rng = np.random.default_rng(seed)
  a, b = rng.standard_normal((8, 24)).astype(np.float32), rng.standard_normal((24, 5)).astype(np.float32)
  np.testing.assert_allclose((Tensor(a) @ Tensor(b)).relu().numpy(), np.maximum(a @ b, 0), rtol=1e-5, atol=1e-5)
  return a


def test_folders_are_private_and_entries_are_not_pickles(folder):
  product()
  assert folder.stat().st_mode & 0o777 == 0o700
  kinds = {p.name for p in folder.iterdir() if p.is_dir()}
  assert {"compiled", "kernels"} <= kinds
  for kind in kinds: assert (folder / kind).stat().st_mode & 0o077 == 0, kind
  entries = list((folder / "kernels").iterdir())
  assert entries and all(p.stat().st_mode & 0o077 == 0 for p in entries)
  payload = cache.read(entries[0], "kernel")
  assert payload.startswith(b"{")   # JSON, not a pickle


@pytest.mark.parametrize("problem", ["group_writable", "other_owner", "symlink", "open_parent"])
def test_an_untrusted_folder_turns_the_cache_off_with_one_line(problem, folder, tmp_path, monkeypatch, capfd):
  real = tmp_path / "real"
  real.mkdir(mode=0o700)
  if problem == "group_writable":
    folder.mkdir(mode=0o700)
    folder.chmod(0o770)
  elif problem == "other_owner":
    folder.mkdir(mode=0o700)
    monkeypatch.setattr(cache, "_uid", lambda: os.geteuid() + 1)   # as if another user had made it
  elif problem == "open_parent":   # someone else could swap the cache folder for their own
    folder.parent.chmod(0o777)
    folder.mkdir(mode=0o700)
  else: folder.symlink_to(real, target_is_directory=True)
  assert not cache.usable() and not cache.enabled()
  err = capfd.readouterr().err
  assert err.count("not using the cache folder") == 1 and str(folder) in err
  product()   # runs without the cache
  assert not any(real.iterdir()) and (problem == "symlink" or not any(folder.iterdir()))


def test_entries_that_are_symlinks_or_someone_elses_are_not_read(folder, tmp_path, monkeypatch):
  product()
  entry = next((folder / "kernels").iterdir())
  elsewhere = tmp_path / "elsewhere"
  elsewhere.write_bytes(entry.read_bytes())
  entry.unlink()
  entry.symlink_to(elsewhere)
  assert cache.read(entry, "kernel") is None and elsewhere.exists()   # not followed, not deleted
  entry.unlink()
  entry.write_bytes(elsewhere.read_bytes())
  entry.chmod(0o666)
  assert cache.read(entry, "kernel") is None                          # writable by others
  entry.chmod(0o600)
  assert cache.read(entry, "kernel") is not None


def test_a_crafted_pickle_entry_is_never_unpickled(folder, tmp_path, monkeypatch):
  """A pickle that would create a file when loaded, with a valid checksum, where a rendered kernel belongs: the
  kernel is made anew (same numbers), the file never appears."""
  product()
  marker = tmp_path / "pwned"

  class Payload:
    def __reduce__(self): return (open, (str(marker), "w"))
  for entry in (folder / "kernels").iterdir(): cache.write(entry, pickle.dumps(Payload()), "kernel")
  monkeypatch.setattr(realize, "compiled_kernels", {})
  product()
  assert not marker.exists()


def test_damaged_entries_are_made_anew(folder, monkeypatch):
  product()
  for kind in ("kernels", "compiled"):
    for entry in (folder / kind).iterdir(): entry.write_bytes(entry.read_bytes()[:-5])   # truncated
  monkeypatch.setattr(realize, "compiled_kernels", {})
  product(1)
  for kind in ("kernels", "compiled"):
    assert all(cache.read(entry, "check") is not None for entry in (folder / kind).iterdir())


def test_kernel_entries_round_trip_the_uops(folder):
  """A rendered kernel read back from its JSON entry is the same uops (hash-consed: the same objects) and source."""
  product()
  (ast, device, opts), compiled = next(iter(realize.compiled_kernels.items()))
  path = kernel_cache.entry_path(ast, device, opts)
  kernel, uops, source = kernel_cache.load(path, lambda: new_kernel(ast, device))
  assert source == compiled.source and kernel.applied_opts == compiled.kernel.applied_opts
  assert len(uops) == len(compiled.uops) and all(a is b for a, b in zip(uops, compiled.uops))


def test_the_cap_evicts_the_least_recently_used(folder, monkeypatch):
  kernels = cache.folder("kernels")
  for i in range(10):
    path = kernels / f"entry{i}"
    cache.write(path, bytes(1000), "test")
    os.utime(path, (i, i))   # entry0 the oldest
  cache.read(kernels / "entry0", "test")   # a hit makes it the most recently used
  headers = cache.folder("nvrtc_headers_test") / "cuda_fp16.h"   # not an entry: never evicted
  headers.write_bytes(bytes(5000))
  os.utime(headers, (0, 0))
  deleted = cache.evict(8 * 1000)
  left = sorted(p.name for p in kernels.iterdir())
  assert deleted > 0 and "entry0" in left and "entry1" not in left and "entry9" in left and headers.exists()
  assert sum(p.stat().st_size for p in kernels.iterdir()) <= 0.9 * 8 * 1000


def test_the_report_and_clear(folder):
  product()
  env = {**os.environ, "MINIGRAD_CACHE": str(folder)}
  shown = subprocess.run([sys.executable, "-m", "minigrad.cache"], env=env, capture_output=True, text=True, check=True)
  report = shown.stdout
  assert str(folder) in report and "kernels" in report and "compiled" in report
  assert shown.stderr == ""   # no warnings (runpy warns when `-m` runs a module the package already imported)
  subprocess.run([sys.executable, "-m", "minigrad.cache", "--clear"], env=env, check=True, capture_output=True)
  assert not any(folder.iterdir())


def test_two_processes_racing_on_one_key_both_succeed(folder):
  script = ("import numpy as np\nfrom minigrad import Tensor\n"
            "a = np.arange(96, dtype=np.float32).reshape(8, 12)\n"
            "assert np.allclose((Tensor(a) @ Tensor(a.T)).exp2().sum().numpy(), np.exp2(a @ a.T).sum(), rtol=1e-4)\n")
  env = {**os.environ, "MINIGRAD_CACHE": str(folder)}
  runs = [subprocess.Popen([sys.executable, "-c", script], env=env, stderr=subprocess.PIPE, text=True) for _ in range(2)]
  for run in runs: assert run.wait(timeout=300) == 0, run.stderr.read()
  assert all(cache.read(p, "check") is not None for p in (folder / "kernels").iterdir())
