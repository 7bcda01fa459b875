"""Datasets: MNIST from IDX files (downloaded when possible) and scikit-learn's bundled 8x8 digits.

Input: a directory of IDX (.gz) files, or the network, or the `sklearn` package. Output: numpy arrays
(images as uint8 N x 1 x H x W, labels as int32), ready to batch and wrap in Tensors.

Where MNIST is looked for, in order: the `directory` argument, $MNIST_DIR, ~/.cache/minigrad/mnist. Every MNIST file
is checked against its published SHA-256 (MNIST_SHA256): a download before it is kept, a file found on disk before
it is read.
"""
from __future__ import annotations
from dataclasses import dataclass
import gzip
import hashlib
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
# SHA-256 of the original MNIST files (yann.lecun.com/exdb/mnist, which the mirrors copy byte for byte), as downloaded
# (.gz) and uncompressed (the loader also reads files stored gunzipped). The t10k digests are those of the files in
# the project's shared dataset folder; the training files' are the values published with the dataset by many
# independent loaders, which agree with each other and with these t10k digests.
MNIST_SHA256 = {
  "train-images-idx3-ubyte.gz": "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",
  "train-labels-idx1-ubyte.gz": "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",
  "t10k-images-idx3-ubyte.gz": "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",
  "t10k-labels-idx1-ubyte.gz": "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6",
  "train-images-idx3-ubyte": "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db",
  "train-labels-idx1-ubyte": "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5",
  "t10k-images-idx3-ubyte": "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7",
  "t10k-labels-idx1-ubyte": "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2",
}


class ChecksumError(ValueError):
  """A dataset file (on disk or just downloaded) whose SHA-256 is not the published one."""


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


def sha256_of(path: str | os.PathLike) -> str:
  digest = hashlib.sha256()
  with open(path, "rb") as f:
    while chunk := f.read(1 << 20): digest.update(chunk)
  return digest.hexdigest()


def verify_mnist_file(path: str | os.PathLike) -> pathlib.Path:
  """`path` if its SHA-256 is the published one for its file name (MNIST_SHA256), else ChecksumError naming it."""
  path = pathlib.Path(path)
  expected = MNIST_SHA256.get(path.name)
  if expected is None:
    raise ChecksumError(f"{path}: no published SHA-256 for a file named {path.name!r} (known: {', '.join(MNIST_SHA256)})")
  actual = sha256_of(path)
  if actual != expected:
    raise ChecksumError(f"{path}: SHA-256 {actual} is not MNIST's {expected} for {path.name}: the file is damaged or is not "
                        f"the original MNIST file. Delete it (mnist() downloads it again) or pass verify=False to read it anyway.")
  return path


def _download(name: str, timeout_s: float = 20.0) -> pathlib.Path:
  """Fetch `name` from the first mirror that serves it with the published SHA-256 into ~/.cache/minigrad/mnist. Bytes
  go to a .part file that is renamed only once its digest matches, and deleted otherwise. A file no mirror served
  intact: ChecksumError (a mirror answered with other bytes) or ConnectionError (none answered)."""
  target_dir = mnist_dirs()[-1]
  target_dir.mkdir(parents=True, exist_ok=True)
  expected = MNIST_SHA256[name]
  errors, mismatches = [], []
  for mirror in MNIST_MIRRORS:
    url, tmp = mirror + name, None
    try:
      fd, tmp = tempfile.mkstemp(dir=target_dir, prefix=f"{name}.", suffix=".part")
      digest = hashlib.sha256()
      with os.fdopen(fd, "wb") as f, urllib.request.urlopen(url, timeout=timeout_s) as response:
        while chunk := response.read(1 << 20):
          digest.update(chunk)
          f.write(chunk)
      if (actual := digest.hexdigest()) != expected:
        mismatches.append(f"{url} gave SHA-256 {actual}")
        continue
      os.replace(tmp, target_dir / name)
      return target_dir / name
    except Exception as e:  # network errors, HTTP errors, a full disk: try the next mirror
      errors.append(f"{url}: {e}")
    finally:
      if tmp is not None and os.path.exists(tmp): os.unlink(tmp)   # a partial or mismatching download is never left behind
  if mismatches:
    raise ChecksumError(f"download of MNIST file {name}: expected SHA-256 {expected}, but {'; '.join(mismatches)}"
                        f"{'; ' + '; '.join(errors) if errors else ''}. Nothing was saved (the partial download was deleted).")
  raise ConnectionError("; ".join(errors))


def mnist(directory: str | os.PathLike | None = None, download: bool = True, t10k_split: bool = False, verify: bool = True) -> Dataset:
  """Full MNIST (60,000 train / 10,000 test), or with `t10k_split` only the t10k files: the first 8,000 images
  for training and the last 2,000 for testing. Files found on disk must have MNIST's SHA-256 (ChecksumError naming the
  file otherwise) unless `verify` is False (files of your own under MNIST's names); downloads are always checked."""
  needed = ["test_images", "test_labels"] if t10k_split else list(MNIST_FILES)
  paths: dict[str, pathlib.Path] = {}
  for key in needed:
    name = MNIST_FILES[key]
    found = _find(name, directory)
    if found is not None and verify: verify_mnist_file(found)
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
