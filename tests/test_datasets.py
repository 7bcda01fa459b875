"""Datasets: IDX parsing on generated files, MNIST's checksums (files on disk and downloads), the real MNIST t10k set
when present, the digits fallback."""
import gzip
import hashlib
import io
import re
import pathlib
import shutil
import urllib.request
import numpy as np
import pytest
from minigrad.nn import datasets
from minigrad.nn.datasets import (read_idx, write_idx, mnist, sklearn_digits, verify_mnist_file, ChecksumError, MNIST_FILES,
                                  MNIST_MIRRORS, MNIST_SHA256)

SHARED_MNIST = pathlib.Path(__file__).resolve().parents[2] / "shared" / "datasets" / "mnist"
T10K = [MNIST_FILES["test_images"], MNIST_FILES["test_labels"]]
needs_shared_t10k = pytest.mark.skipif(not all((SHARED_MNIST / name).exists() for name in T10K),
                                       reason=f"the real MNIST t10k files are not in {SHARED_MNIST}")


def make_mnist(folder, n_train=50, n_test=20, seed=0):
  rng = np.random.default_rng(seed)
  arrays = {"train_images": rng.integers(0, 256, (n_train, 28, 28)), "train_labels": rng.integers(0, 10, n_train),
            "test_images": rng.integers(0, 256, (n_test, 28, 28)), "test_labels": rng.integers(0, 10, n_test)}
  for key, arr in arrays.items(): write_idx(folder / MNIST_FILES[key], arr)
  return arrays


def test_idx_round_trip(tmp_path):
  arr = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
  write_idx(tmp_path / "x.gz", arr)
  np.testing.assert_array_equal(read_idx(tmp_path / "x.gz"), arr)


def test_mnist_from_directory_and_env(tmp_path, monkeypatch):
  arrays = make_mnist(tmp_path)
  data = mnist(tmp_path, download=False, verify=False)   # generated files under MNIST's names
  assert data.x_train.shape == (50, 1, 28, 28) and data.x_test.shape == (20, 1, 28, 28)
  np.testing.assert_array_equal(data.x_train[:, 0], arrays["train_images"])
  np.testing.assert_array_equal(data.y_test, arrays["test_labels"])
  assert data.y_train.dtype == np.int32
  monkeypatch.setenv("MNIST_DIR", str(tmp_path))
  assert mnist(download=False, verify=False).x_train.shape == (50, 1, 28, 28)


def test_t10k_split_on_generated_files(tmp_path):
  make_mnist(tmp_path, n_test=100)
  data = mnist(tmp_path, download=False, t10k_split=True, verify=False)
  assert len(data.x_train) == 80 and len(data.x_test) == 20


def test_missing_files_say_where_to_put_them(tmp_path, monkeypatch):
  monkeypatch.setenv("MNIST_DIR", str(tmp_path / "nowhere"))
  monkeypatch.setenv("HOME", str(tmp_path))   # no ~/.cache/minigrad/mnist either
  with pytest.raises(FileNotFoundError, match="MNIST_DIR"):
    mnist(tmp_path / "empty", download=False)


def test_corrupt_file_is_a_clear_error(tmp_path):
  make_mnist(tmp_path)
  path = tmp_path / MNIST_FILES["test_images"]
  with gzip.open(path, "rb") as f: data = f.read()
  with gzip.open(path, "wb") as f: f.write(data[:1000])
  with pytest.raises(ValueError, match="header says"):
    mnist(tmp_path, download=False, verify=False)
  path.write_bytes(b"not gzip at all")
  with pytest.raises(ValueError, match="not a readable IDX file"):
    read_idx(path)


@needs_shared_t10k
def test_real_mnist_t10k():
  data = mnist(SHARED_MNIST, download=False, t10k_split=True)   # checked against MNIST_SHA256 first
  assert data.x_train.shape == (8000, 1, 28, 28) and data.x_test.shape == (2000, 1, 28, 28)
  assert data.y_train[:5].tolist() == [7, 2, 1, 0, 4]       # the well-known first t10k labels
  assert data.num_classes == 10 and 100 < data.x_train.mean() * 10 < 400


def test_sklearn_digits_fallback():
  data = sklearn_digits()
  assert data.x_train.shape[1:] == (1, 8, 8) and len(data.x_train) + len(data.x_test) == 1797
  assert data.x_train.dtype == np.uint8 and data.x_train.max() == 255 and data.num_classes == 10


# ---------------------------------------------------------------- checksums of files on disk

def test_every_mnist_file_has_a_published_digest():
  for name in MNIST_FILES.values():
    for stored_as in (name, name.removesuffix(".gz")):
      assert re.fullmatch(r"[0-9a-f]{64}", MNIST_SHA256[stored_as]), stored_as


@needs_shared_t10k
def test_real_t10k_files_pass_verification_gzipped_and_gunzipped(tmp_path):
  for name in T10K:
    assert verify_mnist_file(SHARED_MNIST / name) == SHARED_MNIST / name
    raw = tmp_path / name.removesuffix(".gz")   # the loader also reads MNIST stored uncompressed
    with gzip.open(SHARED_MNIST / name, "rb") as f: raw.write_bytes(f.read())
    assert verify_mnist_file(raw) == raw
  data = mnist(tmp_path, download=False, t10k_split=True)
  assert data.y_train[:5].tolist() == [7, 2, 1, 0, 4]


@needs_shared_t10k
@pytest.mark.parametrize("damage", ["flipped_byte", "truncated"])
def test_corrupted_real_file_on_disk_is_rejected(tmp_path, monkeypatch, damage):
  monkeypatch.setenv("HOME", str(tmp_path / "home"))   # no ~/.cache/minigrad/mnist to fall back on
  monkeypatch.delenv("MNIST_DIR", raising=False)
  for name in T10K: shutil.copy(SHARED_MNIST / name, tmp_path / name)
  path = tmp_path / MNIST_FILES["test_images"]
  data = bytearray(path.read_bytes())
  if damage == "flipped_byte": data[len(data) // 2] ^= 0x01   # still a valid gzip stream header; the bytes differ
  else: data = data[:len(data) - 100]
  path.write_bytes(bytes(data))
  actual = hashlib.sha256(bytes(data)).hexdigest()
  with pytest.raises(ChecksumError) as info:
    mnist(tmp_path, download=False, t10k_split=True)
  message = str(info.value)
  assert str(path) in message and MNIST_SHA256[path.name] in message and actual in message, message
  assert isinstance(info.value, ValueError)   # callers that catch a corrupt file's ValueError keep working


def test_generated_file_under_an_mnist_name_is_rejected_unless_unverified(tmp_path, monkeypatch):
  monkeypatch.setenv("HOME", str(tmp_path / "home"))
  monkeypatch.delenv("MNIST_DIR", raising=False)
  make_mnist(tmp_path, n_test=10)
  labels = tmp_path / MNIST_FILES["test_labels"]
  with pytest.raises(ChecksumError, match=f"{labels}.*{MNIST_SHA256[labels.name]}") as info:
    verify_mnist_file(labels)
  assert hashlib.sha256(labels.read_bytes()).hexdigest() in str(info.value)
  with pytest.raises(ChecksumError, match=str(tmp_path / MNIST_FILES["test_images"])):
    mnist(tmp_path, download=False, t10k_split=True)
  assert len(mnist(tmp_path, download=False, t10k_split=True, verify=False).x_test) == 2


# ---------------------------------------------------------------- checksums of downloads (no network: urlopen is faked)

def serve(monkeypatch, responses):
  """urllib.request.urlopen answers each URL with responses(url): bytes, or an exception to raise. Returns the URLs asked."""
  asked = []
  def urlopen(url, timeout=None):
    asked.append(url)
    answer = responses(url)
    if isinstance(answer, Exception): raise answer
    return io.BytesIO(answer)
  monkeypatch.setattr(urllib.request, "urlopen", urlopen)
  return asked


@pytest.fixture
def empty_cache(tmp_path, monkeypatch) -> pathlib.Path:
  """No MNIST anywhere on disk; downloads go to the returned (fresh) ~/.cache/minigrad/mnist."""
  monkeypatch.setenv("HOME", str(tmp_path / "home"))
  monkeypatch.delenv("MNIST_DIR", raising=False)
  return tmp_path / "home" / ".cache" / "minigrad" / "mnist"


def test_download_with_the_wrong_digest_is_deleted_and_named(tmp_path, empty_cache, monkeypatch):
  payload = b"\x1f\x8b not the MNIST images"
  asked = serve(monkeypatch, lambda url: payload)
  name = MNIST_FILES["test_images"]   # the first file mnist() looks for
  with pytest.raises(ChecksumError) as info:
    mnist(tmp_path / "nowhere", t10k_split=True)
  message = str(info.value)
  assert name in message and MNIST_SHA256[name] in message and hashlib.sha256(payload).hexdigest() in message, message
  assert "deleted" in message
  assert len(asked) == len(MNIST_MIRRORS)   # every mirror was tried before giving up
  assert list(empty_cache.iterdir()) == []   # neither the file nor a .part of it was kept


def test_download_interrupted_midway_leaves_nothing(tmp_path, empty_cache, monkeypatch):
  class Interrupted(io.BytesIO):
    def read(self, size=-1):
      if self.tell() > 0: raise ConnectionResetError("connection reset by peer")
      return super().read(4)
  monkeypatch.setattr(urllib.request, "urlopen", lambda url, timeout=None: Interrupted(b"0123456789"))
  with pytest.raises(FileNotFoundError, match="download failed.*connection reset"):
    mnist(tmp_path / "nowhere", t10k_split=True)
  assert list(empty_cache.iterdir()) == []


@needs_shared_t10k
def test_download_takes_the_first_mirror_with_the_right_digest(tmp_path, empty_cache, monkeypatch):
  first, second = MNIST_MIRRORS[0], MNIST_MIRRORS[1]
  def responses(url):
    if url.startswith(first): return b"a damaged copy"
    return (SHARED_MNIST / url.removeprefix(second)).read_bytes()
  asked = serve(monkeypatch, responses)
  data = mnist(tmp_path / "nowhere", t10k_split=True)
  assert data.y_train[:5].tolist() == [7, 2, 1, 0, 4]
  assert asked == [mirror + name for name in T10K for mirror in (first, second)]
  assert sorted(p.name for p in empty_cache.iterdir()) == sorted(T10K)   # only the verified files, no .part
  for name in T10K: assert hashlib.sha256((empty_cache / name).read_bytes()).hexdigest() == MNIST_SHA256[name]
  asked.clear()
  mnist(tmp_path / "nowhere", t10k_split=True)   # found in the cache now (and verified there): no download
  assert asked == []
