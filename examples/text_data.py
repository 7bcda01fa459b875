"""Tiny Shakespeare for the character-level GPT (examples/gpt.py): where the text comes from, its character
vocabulary, and random training windows.

Input: --data (any text file), $TINYSHAKESPEARE, ../shared/datasets/tinyshakespeare/input.txt, the cached copy in
~/.cache/minigrad, or a download into that cache (md5 checked). Output: a `Text` (the text, where it came from, its
characters) and batches of (inputs, targets) token windows. Offline without the file it says so in one line and
gives a built-in sample of public-domain lines.
"""
from __future__ import annotations
from dataclasses import dataclass
from typing import Sequence
import hashlib
import os
import pathlib
import urllib.request
import numpy as np

TINYSHAKESPEARE_URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
TINYSHAKESPEARE_MD5 = "6fb458f1232090904fb40fe944165e91"
SHARED_COPY = pathlib.Path(__file__).resolve().parents[2] / "shared" / "datasets" / "tinyshakespeare" / "input.txt"
CACHED_COPY = pathlib.Path.home() / ".cache" / "minigrad" / "tinyshakespeare" / "input.txt"
# the offline fallback: public-domain lines (Sonnet 18 and Hamlet's soliloquy), repeated to make a few KB of text
SAMPLE_TEXT = """Shall I compare thee to a summer's day?
Thou art more lovely and more temperate:
Rough winds do shake the darling buds of May,
And summer's lease hath all too short a date;
Sometime too hot the eye of heaven shines,
And often is his gold complexion dimm'd;
And every fair from fair sometime declines,
By chance or nature's changing course untrimm'd;
But thy eternal summer shall not fade,
Nor lose possession of that fair thou ow'st;
Nor shall death brag thou wander'st in his shade,
When in eternal lines to time thou grow'st:
So long as men can breathe or eyes can see,
So long lives this, and this gives life to thee.

HAMLET:
To be, or not to be, that is the question:
Whether 'tis nobler in the mind to suffer
The slings and arrows of outrageous fortune,
Or to take arms against a sea of troubles
And by opposing end them. To die: to sleep;
No more; and by a sleep to say we end
The heart-ache and the thousand natural shocks
That flesh is heir to, 'tis a consummation
Devoutly to be wish'd.
"""


@dataclass
class Text:
  """The training text, where it came from, and its character vocabulary."""
  text: str
  source: str
  chars: str = ""

  def __post_init__(self) -> None:
    if not self.chars: self.chars = "".join(sorted(set(self.text)))

  def encode(self, text: str) -> np.ndarray:
    index = {c: i for i, c in enumerate(self.chars)}
    unknown = sorted(set(text) - set(index))
    if unknown: raise ValueError(f"characters {''.join(unknown)!r} are not in the model's vocabulary of {len(self.chars)} characters")
    return np.array([index[c] for c in text], dtype=np.int32)

  def decode(self, tokens: Sequence[int]) -> str: return "".join(self.chars[int(t)] for t in tokens)


def _md5(data: bytes) -> str: return hashlib.md5(data).hexdigest()


def load_text(path: str | None = None, download: bool = True) -> Text:
  """--data (any text file), $TINYSHAKESPEARE, the shared copy, the cached copy, a download into the cache (md5
  checked), else the built-in sample, announced in one line."""
  if path is not None:
    if not pathlib.Path(path).is_file(): raise FileNotFoundError(f"--data: no such file {path}")
    return Text(pathlib.Path(path).read_text(encoding="utf-8"), str(path))
  candidates = [pathlib.Path(p) for p in (os.environ.get("TINYSHAKESPEARE"),) if p] + [SHARED_COPY, CACHED_COPY]
  for candidate in candidates:
    if candidate.is_file():
      data = candidate.read_bytes()
      if _md5(data) != TINYSHAKESPEARE_MD5:
        print(f"warning: {candidate} is not the usual Tiny Shakespeare (md5 {_md5(data)}); using it anyway")
      return Text(data.decode("utf-8"), f"Tiny Shakespeare ({candidate})")
  reason = f"not in {', '.join(map(str, candidates))}"
  if download:
    try:
      with urllib.request.urlopen(TINYSHAKESPEARE_URL, timeout=10) as response: data = response.read()
      if _md5(data) != TINYSHAKESPEARE_MD5: raise ValueError(f"downloaded file has md5 {_md5(data)}, expected {TINYSHAKESPEARE_MD5}")
      CACHED_COPY.parent.mkdir(parents=True, exist_ok=True)
      partial = CACHED_COPY.with_suffix(".part")
      partial.write_bytes(data)
      partial.replace(CACHED_COPY)   # atomic: a broken download never looks like the file
      return Text(data.decode("utf-8"), f"Tiny Shakespeare (downloaded to {CACHED_COPY})")
    except (OSError, ValueError) as error: reason += f"; download failed: {str(error).splitlines()[0][:120]}"
  print(f"Tiny Shakespeare not available ({reason}); training on the built-in sample text instead")
  return Text(SAMPLE_TEXT * 8, "built-in sample text")


def random_batch(tokens: np.ndarray, batch_size: int, context: int, rng: np.random.Generator, rank: int = 0,
                 world_size: int = 1) -> tuple[np.ndarray, np.ndarray]:
  """batch_size random windows of context tokens (inputs) and the same windows one token later (targets). With
  world_size > 1: the start positions of batch_size * world_size windows are drawn (the same on every rank, from the
  same seeded rng) and rank `rank` gets its slice of batch_size of them."""
  if len(tokens) <= context: raise ValueError(f"the text has {len(tokens)} tokens: need more than --context={context}")
  starts = rng.integers(0, len(tokens) - context, batch_size * world_size)[rank * batch_size:(rank + 1) * batch_size]
  windows = np.stack([tokens[s:s + context + 1] for s in starts])
  return windows[:, :-1].copy(), windows[:, 1:].copy()
