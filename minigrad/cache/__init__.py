"""The disk cache: compiled kernels, rendered kernels, BEAM results and compiler probes kept between processes.

Input: entries to store and keys to look up, from the compilers (minigrad/runtime), the kernel cache and BEAM
(minigrad/engine) and the Target probe. Output: the bytes stored before, or None.

What is read from the cache runs: compiled kernels are loaded with dlopen, so whoever can write into the cache
folder runs code in every process that reads it. The cache therefore trusts only its owner, as ssh does with its
keys: the folder ($MINIGRAD_CACHE, else ~/.cache/minigrad) and each of its subfolders must be a real folder (not a
symlink) owned by the current user and not writable by group or others, the folders above it writable by no one
else (or sticky, as /tmp), and each entry a regular file owned by the user and writable by no one else, opened
without following symlinks. If the folder fails the check, minigrad says so once, in one line naming the path and the
fix, and runs with the cache off; a subfolder or an entry that fails it is said the same way (once per path) and
not used (an entry is then written anew over it). Folders it creates are 0700, entries 0600. Nothing read from the
cache is unpickled: entries are bytes (binaries) or JSON. Keys of compiled binaries and BEAM results include
`minigrad_version()`; rendered kernels the digest of minigrad's source (minigrad/engine/kernel_cache.py).

Each entry starts with a magic word and the sha256 of its payload (damage is detected and the entry deleted), and
is written to a temp file and renamed into place, so a reader never sees half an entry and two processes racing
on one key both succeed. The cache is bounded: MINIGRAD_CACHE_MB (default 1024) megabytes; after every eighth of
that written (by one process, or by several, counted in the stats file at exit), the folder is measured and the
least recently used entries (a hit refreshes an entry's time) are deleted down to 90 % of the cap, with temp files
a killed writer left behind over an hour ago. `python -m minigrad.cache` prints the folder's size, entries
by kind and the hit rates of the last runs; `--clear` empties it. DISABLE_COMPILER_CACHE=1 turns it off.
"""
from __future__ import annotations
from collections import Counter
import argparse
import atexit
import errno
import functools
import hashlib
import importlib.metadata
import json
import os
import pathlib
import shutil
import stat
import sys
import tempfile
import time
from minigrad.helpers import DEBUG

MAGIC = b"minigrad-cache-1\n"
DIGEST_SIZE = 32
STATS_FILE = "stats.json"   # the hit counts of the last STATS_RUNS processes
STATS_RUNS = 20
STALE_TEMP_SECONDS = 3600   # a temp file this old was left by a writer that died: evict deletes it


class UntrustedCache(OSError):
  """The cache folder (or a folder or entry in it) could be written by someone else: not used."""


def enabled() -> bool:
  """Are compiled and rendered kernels cached? Not with DISABLE_COMPILER_CACHE=1 or an untrusted folder."""
  return os.environ.get("DISABLE_COMPILER_CACHE", "0") in ("", "0") and usable()


def usable() -> bool:
  """Is the cache folder there and trusted? (BEAM results use it even with DISABLE_COMPILER_CACHE=1.)"""
  try: root()
  except OSError: return False
  return True


def root() -> pathlib.Path:
  """The cache folder, created 0700 if missing; UntrustedCache (an OSError) if it fails the ownership check."""
  checked = _checked_root(os.environ.get("MINIGRAD_CACHE") or str(pathlib.Path.home() / ".cache" / "minigrad"))
  if isinstance(checked, OSError): raise checked
  return checked


@functools.lru_cache(maxsize=None)
def minigrad_version() -> str:
  """minigrad's release (its package metadata), for keys of entries that don't depend on its source otherwise."""
  try: return importlib.metadata.version("minigrad")
  except importlib.metadata.PackageNotFoundError: return "unknown"


_warned: set[str] = set()   # paths already said to be untrusted in this process


def _warn_once(what: str, path: pathlib.Path, problem: OSError, then: str) -> None:
  """One line on stderr naming the `what` ("folder", "entry") at `path`, what is wrong and the fix (the message of
  `problem` carries it) and what minigrad does `then`; once per path."""
  if str(path) in _warned: return
  _warned.add(str(path))
  print(f"minigrad: not using the cache {what} {path}: {problem}; {then}", file=sys.stderr)


@functools.lru_cache(maxsize=8)
def _checked_root(path_text: str) -> pathlib.Path | OSError:
  """The folder, or why it can't be used (said once per process, on stderr)."""
  path = pathlib.Path(path_text)
  try:
    path.parent.mkdir(parents=True, exist_ok=True)
    try: path.mkdir(mode=0o700)
    except FileExistsError: pass   # a folder, or something _check_folder names
    _check_folder(path)
    _check_ancestors(path)
  except OSError as e:
    _warned.discard(str(path))   # a new check (after cache_clear) says it again
    _warn_once("folder", path, e, "running without a disk cache")
    return e
  return path


def folder(kind: str) -> pathlib.Path:
  """The subfolder for one kind of entry ("compiled", "kernels", "beam" ...), created 0700 and checked; raises
  OSError (UntrustedCache when it fails the check)."""
  path = root() / kind
  try: path.mkdir(mode=0o700)
  except FileExistsError: pass
  _check_folder(path)
  return path


def trusted_folder(kind: str) -> pathlib.Path | None:
  """`folder(kind)`, or None when it can't be used (an untrusted one said once, on stderr)."""
  try: return folder(kind)
  except UntrustedCache as e:
    if usable(): _warn_once("folder", root() / kind, e, f"running without caching {kind}")   # (an untrusted root was said already)
    return None
  except OSError: return None


def entry(kind: str, name: str) -> pathlib.Path | None:
  """Where the entry `name` of `kind` lives, or None when its folder can't be used."""
  found = trusted_folder(kind)
  return None if found is None else found / name


def _uid() -> int: return os.geteuid()


def _check_folder(path: pathlib.Path) -> None:
  info = os.lstat(path)
  if stat.S_ISLNK(info.st_mode): raise UntrustedCache(f"{path} is a symlink (set MINIGRAD_CACHE to the real folder)")
  if not stat.S_ISDIR(info.st_mode): raise UntrustedCache(f"{path} is not a folder (remove it, or set MINIGRAD_CACHE elsewhere)")
  _check_owner(path, info)


def _check_ancestors(path: pathlib.Path) -> None:
  """Whoever can write a folder above the cache can swap the cache folder for one of their own: each must belong to
  this user or root and be writable by nobody else, unless it is sticky (/tmp: others can't rename what is ours)."""
  for parent in path.resolve().parents:
    info = os.stat(parent)
    if info.st_uid not in (0, _uid()): raise UntrustedCache(f"{parent}, a folder above it, belongs to user id {info.st_uid}; set MINIGRAD_CACHE to a folder of your own")
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not info.st_mode & stat.S_ISVTX:
      raise UntrustedCache(f"{parent}, a folder above it, is writable by group or others (fix: chmod go-w {parent}, or set MINIGRAD_CACHE elsewhere)")


def _check_owner(path: pathlib.Path, info: os.stat_result) -> None:
  if info.st_uid != _uid():
    raise UntrustedCache(f"{path} belongs to user id {info.st_uid}, not to this user ({_uid()}); set MINIGRAD_CACHE to a folder of your own")
  if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
    raise UntrustedCache(f"{path} is writable by group or others (fix: chmod go-w {path})")


# ---------------------------------------------------------------- entries

hits: Counter[str] = Counter()     # per kind of entry, in this process
misses: Counter[str] = Counter()


def read(path: pathlib.Path, what: str) -> bytes | None:
  """The payload of the entry at `path`, or None: missing, damaged (deleted), or not trusted (a symlink, someone
  else's file, writable by others: left alone, said once on stderr; the caller's next write replaces it)."""
  try:
    # no symlinks followed; no waiting for a writer when the entry is a FIFO (fstat below rejects it)
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
  except OSError as e:   # missing, or a symlink (ELOOP): never followed
    if e.errno == errno.ELOOP: _warn_once("entry", path, UntrustedCache(f"{path} is a symlink (fix: remove it)"), "it is made anew")
    misses[what] += 1
    return None
  try:
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode): raise UntrustedCache(f"{path} is not a regular file (fix: remove it)")
    _check_owner(path, info)
    with os.fdopen(fd, "rb", closefd=False) as f: blob = f.read()
    payload = blob[len(MAGIC) + DIGEST_SIZE:]
    if blob[:len(MAGIC)] != MAGIC or blob[len(MAGIC):len(MAGIC) + DIGEST_SIZE] != hashlib.sha256(payload).digest():
      if DEBUG >= 1: print(f"{what} cache: damaged entry {path}, made anew")
      _unlink(path)
      misses[what] += 1
      return None
    try: os.utime(fd)   # most recently used: the last to be evicted
    except OSError: pass
  except UntrustedCache as e:
    _warn_once("entry", path, e, "it is made anew")
    misses[what] += 1
    return None
  finally: os.close(fd)
  hits[what] += 1
  return payload


def write(path: pathlib.Path, payload: bytes, what: str) -> None:
  """Store `payload` at `path` (in a cache folder) with its checksum: a temp file (0600) renamed into place.
  Failing to write is not an error (at DEBUG>=1 it says so)."""
  data = MAGIC + hashlib.sha256(payload).digest() + payload
  try:
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
      with os.fdopen(fd, "wb") as f: f.write(data)
      os.replace(tmp_name, path)
    except BaseException:
      _unlink(pathlib.Path(tmp_name))
      raise
  except OSError as e:
    if DEBUG >= 1: print(f"{what} cache: could not write {path}: {e}")
    return
  _note_written(len(data))


def _unlink(path: pathlib.Path) -> None:
  try: path.unlink()
  except OSError: pass


# ---------------------------------------------------------------- the size cap

_written = 0   # bytes this process wrote since it last measured the folder


def cap_bytes() -> int: return int(float(os.environ.get("MINIGRAD_CACHE_MB", "1024")) * 1024 * 1024)


def _note_written(nbytes: int) -> None:
  """Count what was written; a process that writes an eighth of the cap measures the folder (and evicts) at once.
  Smaller writers add their bytes to a shared count at exit (see _save_stats): the one that takes it past an
  eighth of the cap measures then. No process measures more often than that."""
  global _written
  _written += nbytes
  if _written >= cap_bytes() // 8:
    _written = 0
    evict(cap_bytes())


# the folders of entries, the ones the cap evicts from (others, like NVRTC's headers, are left whole)
ENTRY_KINDS = ("compiled", "kernels", "beam", "compiler_probes", "cpu_targets", "peaks")


def entries(base: pathlib.Path, kinds: tuple[str, ...] = ENTRY_KINDS) -> list[tuple[pathlib.Path, os.stat_result]]:
  """The entry files in the folders `kinds` of `base` (temp files left out), with their stat."""
  found = []
  for directory, _, files in (walked for kind in kinds for walked in os.walk(base / kind)):
    for name in files:
      if name.startswith("."): continue
      path = pathlib.Path(directory) / name
      try: found.append((path, path.lstat()))
      except OSError: pass
  return found


def stale_temp_files(base: pathlib.Path, kinds: tuple[str, ...] = ENTRY_KINDS) -> list[pathlib.Path]:
  """Temp files (".<name>.<random>.tmp", see `write`) older than STALE_TEMP_SECONDS: their writer died."""
  found, oldest = [], time.time() - STALE_TEMP_SECONDS
  for directory, _, files in (walked for kind in kinds for walked in os.walk(base / kind)):
    for name in files:
      if not (name.startswith(".") and name.endswith(".tmp")): continue
      path = pathlib.Path(directory) / name
      try:
        if path.lstat().st_mtime < oldest: found.append(path)
      except OSError: pass
  return found


def evict(cap: int) -> int:
  """Delete the least recently used entries until the cache holds at most 90 % of `cap` bytes, if it holds more
  than `cap` (and temp files left by dead writers). Returns the bytes of entries deleted."""
  try: base = root()
  except OSError: return 0
  for path in stale_temp_files(base): _unlink(path)
  files = entries(base)
  total = sum(info.st_size for _, info in files)
  if total <= cap: return 0
  deleted = 0
  for path, info in sorted(files, key=lambda f: f[1].st_mtime_ns):
    if total - deleted <= cap * 0.9: break
    _unlink(path)
    deleted += info.st_size
  return deleted


# ---------------------------------------------------------------- hit rates of the last runs

@atexit.register
def _save_stats() -> None:
  """At exit: this run's hit counts join the last runs', and its bytes written the shared count (measuring the
  folder when that passes an eighth of the cap)."""
  global _written
  if not (hits or misses or _written) or not usable(): return
  run = {"time": time.time(), "hits": dict(hits), "misses": dict(misses)}
  path = root() / STATS_FILE
  stats = _load_stats(path)
  written, _written = stats["written"] + _written, 0
  if written >= cap_bytes() // 8:
    evict(cap_bytes())
    written = 0
  stats = {"runs": stats["runs"][-(STATS_RUNS - 1):] + [run], "written": written}
  write(path, json.dumps(stats).encode(), "stats")


def _load_stats(path: pathlib.Path) -> dict:
  """{"runs": the last runs' hit counts, "written": bytes written since the folder was last measured}."""
  payload = read(path, "stats")
  try: stats = json.loads(payload) if payload else {}
  except ValueError: stats = {}
  if not isinstance(stats, dict) or not isinstance(stats.get("runs"), list) or not isinstance(stats.get("written"), int):
    return {"runs": [], "written": 0}
  return stats


def _kind(base: pathlib.Path, path: pathlib.Path) -> str:
  parts = path.relative_to(base).parts
  return parts[0] if len(parts) > 1 else "(top)"


def main(argv: list[str] | None = None) -> None:
  parser = argparse.ArgumentParser(prog="python -m minigrad.cache", description="minigrad's disk cache: size, entries, hit rates")
  parser.add_argument("--clear", action="store_true", help="delete every entry")
  args = parser.parse_args(argv)
  try: base = root()
  except OSError as e: raise SystemExit(f"the cache is not in use: {e}") from None
  if args.clear:
    for path in base.iterdir():
      if path.is_dir() and not path.is_symlink(): shutil.rmtree(path)
      else: _unlink(path)
    print(f"cleared {base}")
    return
  files = entries(base)
  total = sum(info.st_size for _, info in files)
  print(f"{base}: {total / 1e6:.1f} MB in {len(files)} entries (cap {cap_bytes() / 1e6:.0f} MB, MINIGRAD_CACHE_MB)")
  counts: Counter[str] = Counter()
  sizes: Counter[str] = Counter()
  for path, info in files:
    counts[_kind(base, path)] += 1
    sizes[_kind(base, path)] += info.st_size
  for kind, count in sorted(counts.items()): print(f"  {kind:16s} {count:7d} entries {sizes[kind] / 1e6:9.1f} MB")
  hit_sum: Counter[str] = Counter()
  miss_sum: Counter[str] = Counter()
  runs = _load_stats(base / STATS_FILE)["runs"]
  for run in runs:
    hit_sum.update(run.get("hits", {}))
    miss_sum.update(run.get("misses", {}))
  if runs: print(f"hit rates over the last {len(runs)} runs:")
  for kind in sorted(set(hit_sum) | set(miss_sum)):
    looked = hit_sum[kind] + miss_sum[kind]
    print(f"  {kind:16s} {hit_sum[kind]:7d} of {looked:7d} lookups ({100 * hit_sum[kind] / max(looked, 1):.0f}%)")
