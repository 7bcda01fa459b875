"""Datasets: MNIST from IDX files (downloaded when possible) and scikit-learn's bundled 8x8 digits.

Input: a directory of IDX (.gz) files, or the network, or the `sklearn` package. Output: numpy arrays
(images as uint8 N x 1 x H x W, labels as int32), ready to batch and wrap in Tensors.

Where MNIST is looked for, in order: the `directory` argument, $MNIST_DIR, ~/.cache/minigrad/mnist.
"""
from __future__ import annotations
from dataclasses import dataclass
import gzip
import os
import pathlib
import struct
import tempfile
import urllib.request
import numpy as np

MNIST_FILES = {
  "train_images": "train-images-idx3-ubyte.gz", "train_labels": "train-labels-idx1-ubyte.gz",
  "test_images": "t10k-images-idx3-ubyte.gz", "test_labels": "t10k-labels-idx1-ubyte.gz",
}
MNIST_MIRRORS = ("https://storage.googleapis.com/cvdf-datasets/mnist/", "https://ossci-datasets.s3.amazonaws.com/mnist/")


@dataclass
class Dataset:
  """Train and test splits as numpy arrays, plus where they came from (printed by the examples)."""
  x_train: np.ndarray
  y_train: np.ndarray
  x_test: np.ndarray
  y_test: np.ndarray
  source: str

  @property
  def num_classes(self) -> int: return int(max(self.y_train.max(), self.y_test.max())) + 1


def read_idx(path: str | os.PathLike) -> np.ndarray:
  """Parse an IDX file (gzip-compressed or not): uint8 images (N, rows, cols) or labels (N,)."""
  path = pathlib.Path(path)
  opener = gzip.open if path.suffix == ".gz" else open
  try:
    with opener(path, "rb") as f: data = f.read()
  except (OSError, EOFError) as e: raise ValueError(f"{path}: not a readable IDX file ({e})") from e
  if len(data) < 8: raise ValueError(f"{path}: too short to be an IDX file ({len(data)} bytes)")
  zero, dtype_code, ndim = struct.unpack(">HBB", data[:4])
  if zero != 0 or dtype_code != 0x08: raise ValueError(f"{path}: not an unsigned-byte IDX file (magic {data[:4].hex()})")
  dims = struct.unpack(f">{ndim}I", data[4:4 + 4 * ndim])
  body = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
  expected = int(np.prod(dims))
  if body.size != expected: raise ValueError(f"{path}: header says {dims} ({expected} bytes) but the file holds {body.size}")
  return body.reshape(dims)


def write_idx(path: str | os.PathLike, array: np.ndarray) -> None:
  """Write a uint8 array as a gzip IDX file (used by tests to make small datasets)."""
  array = np.ascontiguousarray(array, dtype=np.uint8)
  header = struct.pack(">HBB", 0, 0x08, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
  with gzip.open(path, "wb") as f: f.write(header + array.tobytes())


def mnist_dirs(directory: str | os.PathLike | None = None) -> list[pathlib.Path]:
  candidates = [directory, os.environ.get("MNIST_DIR"), pathlib.Path.home() / ".cache" / "minigrad" / "mnist"]
  return [pathlib.Path(c) for c in candidates if c]


def _find(name: str, directory: str | os.PathLike | None) -> pathlib.Path | None:
  for d in mnist_dirs(directory):
    for candidate in (d / name, d / name.removesuffix(".gz")):
      if candidate.exists(): return candidate
  return None


def _download(name: str, timeout_s: float = 20.0) -> pathlib.Path:
  target_dir = mnist_dirs()[-1]
  target_dir.mkdir(parents=True, exist_ok=True)
  errors = []
  for mirror in MNIST_MIRRORS:
    try:
      with urllib.request.urlopen(mirror + name, timeout=timeout_s) as response: payload = response.read()
      fd, tmp = tempfile.mkstemp(dir=target_dir, suffix=".part")
      with os.fdopen(fd, "wb") as f: f.write(payload)
      read_idx(tmp)   # only a file that parses is kept
      os.replace(tmp, target_dir / name)
      return target_dir / name
    except Exception as e:  # network errors, HTTP errors, corrupt payloads: try the next mirror
      errors.append(f"{mirror}: {e}")
  raise ConnectionError("; ".join(errors))


def mnist(directory: str | os.PathLike | None = None, download: bool = True, t10k_split: bool = False) -> Dataset:
  """Full MNIST (60,000 train / 10,000 test), or with `t10k_split` only the t10k files: the first 8,000 images
  for training and the last 2,000 for testing."""
  needed = ["test_images", "test_labels"] if t10k_split else list(MNIST_FILES)
  paths: dict[str, pathlib.Path] = {}
  for key in needed:
    name = MNIST_FILES[key]
    found = _find(name, directory)
    if found is None and download:
      try: found = _download(name)
      except ConnectionError as e:
        raise FileNotFoundError(f"MNIST file {name} not found in {[str(d) for d in mnist_dirs(directory)]} and the download failed ({e}). "
                                f"Put the four MNIST IDX .gz files in one of those folders or set MNIST_DIR.") from None
    if found is None:
      raise FileNotFoundError(f"MNIST file {name} not found in {[str(d) for d in mnist_dirs(directory)]}: "
                              f"put the MNIST IDX .gz files there or set MNIST_DIR")
    paths[key] = found
  images, labels = read_idx(paths["test_images"]), read_idx(paths["test_labels"])
  if len(images) != len(labels): raise ValueError(f"{paths['test_images']} has {len(images)} images but {paths['test_labels']} has {len(labels)} labels")
  source = str(paths["test_images"].parent)
  if t10k_split:
    cut = len(images) * 4 // 5
    return Dataset(images[:cut, None], labels[:cut].astype(np.int32), images[cut:, None], labels[cut:].astype(np.int32), f"MNIST t10k split from {source}")
  train_images, train_labels = read_idx(paths["train_images"]), read_idx(paths["train_labels"])
  return Dataset(train_images[:, None], train_labels.astype(np.int32), images[:, None], labels.astype(np.int32), f"MNIST from {source}")


def sklearn_digits(test_fraction: float = 0.2, seed: int = 0) -> Dataset:
  """scikit-learn's bundled 8x8 handwritten digits (1,797 images, real data, no download), scaled to 0..255."""
  try: from sklearn.datasets import load_digits
  except ImportError as e: raise ImportError("the digits fallback needs scikit-learn: pip install -e '.[examples]'") from e
  digits = load_digits()
  images = (digits.images * (255.0 / 16.0)).round().astype(np.uint8)[:, None]
  labels = digits.target.astype(np.int32)
  order = np.random.default_rng(seed).permutation(len(images))
  cut = int(len(images) * (1 - test_fraction))
  train, test = order[:cut], order[cut:]
  return Dataset(images[train], labels[train], images[test], labels[test], "scikit-learn 8x8 digits")
