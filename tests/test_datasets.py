"""Datasets: IDX parsing on generated files, the real MNIST t10k set when present, the digits fallback."""
import gzip
import pathlib
import numpy as np
import pytest
from minigrad.nn.datasets import read_idx, write_idx, mnist, sklearn_digits, MNIST_FILES

SHARED_MNIST = pathlib.Path(__file__).resolve().parents[2] / "shared" / "datasets" / "mnist"


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
  data = mnist(tmp_path, download=False)
  assert data.x_train.shape == (50, 1, 28, 28) and data.x_test.shape == (20, 1, 28, 28)
  np.testing.assert_array_equal(data.x_train[:, 0], arrays["train_images"])
  np.testing.assert_array_equal(data.y_test, arrays["test_labels"])
  assert data.y_train.dtype == np.int32
  monkeypatch.setenv("MNIST_DIR", str(tmp_path))
  assert mnist(download=False).x_train.shape == (50, 1, 28, 28)


def test_t10k_split_on_generated_files(tmp_path):
  make_mnist(tmp_path, n_test=100)
  data = mnist(tmp_path, download=False, t10k_split=True)
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
    mnist(tmp_path, download=False)
  path.write_bytes(b"not gzip at all")
  with pytest.raises(ValueError, match="not a readable IDX file"):
    read_idx(path)


@pytest.mark.skipif(not (SHARED_MNIST / MNIST_FILES["test_images"]).exists(), reason="shared MNIST t10k set not present")
def test_real_mnist_t10k():
  data = mnist(SHARED_MNIST, download=False, t10k_split=True)
  assert data.x_train.shape == (8000, 1, 28, 28) and data.x_test.shape == (2000, 1, 28, 28)
  assert data.y_train[:5].tolist() == [7, 2, 1, 0, 4]       # the well-known first t10k labels
  assert data.num_classes == 10 and 100 < data.x_train.mean() * 10 < 400


def test_sklearn_digits_fallback():
  data = sklearn_digits()
  assert data.x_train.shape[1:] == (1, 8, 8) and len(data.x_train) + len(data.x_test) == 1797
  assert data.x_train.dtype == np.uint8 and data.x_train.max() == 255 and data.num_classes == 10
