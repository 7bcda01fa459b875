"""The disk cache trusts only its owner (minigrad/cache/): ownership (really another user's, as root) and permission
checks on the folder, its subfolders and its entries, each said in one line; no symlinks followed out of the folder;
no pickle read, and crafted JSON rejected; damaged entries made anew; the size cap with least-recently-used eviction,
measured once per eighth of the cap written; the report CLI (sizes, kinds, hit rates, --clear); processes racing on
one key; keys naming the ISA, compiler, version, flags and minigrad. Each case uses a cache folder of its own, most
with a real kernel, and checks that the results stay right."""
import json
import multiprocessing
import os
import pathlib
import pickle
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
import numpy as np
import pytest
from minigrad import Tensor, cache, target
from minigrad.engine import kernel_cache, realize, search
from minigrad.engine.realize import new_kernel
from minigrad.runtime import ops_cpu
from minigrad.runtime.device import Device

OTHER_UID = 54321   # a user id nobody on these machines has: "someone else"
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user takes root")


@pytest.fixture
def folder(tmp_path, monkeypatch):
  """An empty cache folder of this test's own, with nothing remembered in memory (hits, warnings, bytes written)."""
  path = tmp_path / "cache"
  monkeypatch.setenv("MINIGRAD_CACHE", str(path))
  monkeypatch.delenv("DISABLE_COMPILER_CACHE", raising=False)
  monkeypatch.delenv("MINIGRAD_CACHE_MB", raising=False)
  monkeypatch.setattr(realize, "compiled_kernels", {})
  for name, value in (("hits", Counter()), ("misses", Counter()), ("_warned", set()), ("_written", 0)): monkeypatch.setattr(cache, name, value)
  cache._checked_root.cache_clear()
  yield path
  cache._checked_root.cache_clear()


def warnings(capfd) -> list[str]:
  """The lines the cache said on stderr since the last call."""
  return [line for line in capfd.readouterr().err.splitlines() if line.startswith("minigrad: not using the cache")]


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


@pytest.mark.parametrize("problem", ["group_writable", "other_owner", pytest.param("chowned", marks=as_root), "symlink", "open_parent",
                                     "not_a_folder"])
def test_an_untrusted_folder_turns_the_cache_off_with_one_line(problem, folder, tmp_path, monkeypatch, capfd):
  real = tmp_path / "real"
  real.mkdir(mode=0o700)
  if problem == "group_writable":
    folder.mkdir(mode=0o700)
    folder.chmod(0o770)
  elif problem == "other_owner":
    folder.mkdir(mode=0o700)
    monkeypatch.setattr(cache, "_uid", lambda: os.geteuid() + 1)   # as if another user had made it
  elif problem == "chowned":   # really another user's (0700 for its owner)
    folder.mkdir(mode=0o700)
    os.chown(folder, OTHER_UID, OTHER_UID)
  elif problem == "open_parent":   # someone else could swap the cache folder for their own
    folder.parent.chmod(0o777)
    folder.mkdir(mode=0o700)
  elif problem == "not_a_folder": folder.write_bytes(b"")
  else: folder.symlink_to(real, target_is_directory=True)
  assert not cache.usable() and not cache.enabled()
  product()   # runs without the cache, with the right numbers
  (line,) = warnings(capfd)   # one line, naming the path and the fix
  assert str(folder) in line and ("chmod go-w" in line or "MINIGRAD_CACHE" in line), line
  assert not any(real.iterdir()) and (not folder.is_dir() or problem == "symlink" or not any(folder.iterdir()))


@pytest.mark.parametrize("kind", ["kernels", "compiled", "tmp"])
@pytest.mark.parametrize("problem", ["group_writable", pytest.param("chowned", marks=as_root), "symlink"])
def test_an_untrusted_subfolder_is_not_used(kind, problem, folder, tmp_path, capfd):
  """A kind's folder someone else could write: its entries are neither read nor written (one line says so), the rest
  of the cache works, and the results are right. ("tmp" holds kernel libraries to load when /tmp is noexec.)"""
  product()
  outside = tmp_path / "outside"
  shutil.copytree(folder / "kernels", outside)   # real entries, out of the cache folder
  sub = folder / kind
  if sub.exists(): shutil.rmtree(sub)
  if problem == "symlink": sub.symlink_to(outside, target_is_directory=True)
  else:
    sub.mkdir(mode=0o700)
    if problem == "group_writable": sub.chmod(0o770)
    else: os.chown(sub, OTHER_UID, OTHER_UID)
  before = sorted(os.listdir(sub))
  hits = Counter(cache.hits)
  realize.compiled_kernels.clear()
  product()
  (line,) = warnings(capfd)
  assert str(sub) in line and ("chmod go-w" in line or "MINIGRAD_CACHE" in line or "symlink" in line), line
  assert sorted(os.listdir(sub)) == before   # nothing written there (nor through the symlink)
  looked_up = {"kernels": "kernel", "compiled": "compiler"}.get(kind)
  if looked_up: assert cache.hits[looked_up] == hits[looked_up]   # nothing read from it
  others = {"kernels": "compiler", "compiled": "kernel", "tmp": "kernel"}[kind]
  assert cache.hits[others] > hits[others]   # the other kinds still work
  realize.compiled_kernels.clear()
  product()
  assert warnings(capfd) == []   # said once


@pytest.mark.parametrize("problem", ["symlink", "writable_by_others", pytest.param("chowned", marks=as_root), "fifo"])
def test_entries_that_are_symlinks_or_someone_elses_are_not_read(problem, folder, tmp_path, capfd):
  product()
  entry = next((folder / "kernels").iterdir())
  good = entry.read_bytes()
  elsewhere = tmp_path / "elsewhere"
  elsewhere.write_bytes(good)
  elsewhere.chmod(0o600)
  entry.unlink()
  if problem == "symlink": entry.symlink_to(elsewhere)   # a symlink out of the cache folder, to a valid entry
  elif problem == "fifo": os.mkfifo(entry, 0o600)         # opening it would block a reader
  else:
    entry.write_bytes(good)
    if problem == "writable_by_others": entry.chmod(0o666)
    else: os.chown(entry, OTHER_UID, OTHER_UID)
  assert cache.read(entry, "kernel") is None and cache.read(entry, "kernel") is None   # (a FIFO: without waiting for a writer)
  (line,) = warnings(capfd)   # said once for two reads
  assert str(entry) in line and "made anew" in line
  assert elsewhere.read_bytes() == good   # not followed, not deleted, not written through
  realize.compiled_kernels.clear()
  product()   # the kernel is made anew and its entry written over the bad one: a regular file of this user's, 0600
  info = os.lstat(entry)
  assert info.st_uid == os.geteuid() and info.st_mode & 0o777 == 0o600 and cache.read(entry, "kernel") is not None


CRAFTED = {
  "pickle": None,   # made in the test: a pickle that creates a file when loaded
  "not JSON": b"{'version': 2, opts: [",
  "a JSON list": b"[1, 2, 3]",
  "truncated JSON": None,   # the real entry cut in the middle
  "unknown op": json.dumps({"version": 2, "opts": [], "uops": [["__import__", "void", [], "os"]], "source": ""}).encode(),
  "sources out of range": json.dumps({"version": 2, "opts": [], "uops": [["SINK", "void", [7], None]], "source": ""}).encode(),
}


@pytest.mark.parametrize("crafted", list(CRAFTED))
def test_a_crafted_kernel_entry_is_rejected_without_running_code(crafted, folder, tmp_path):
  """A crafted entry with a valid checksum where a rendered kernel belongs: nothing in it runs (a pickle that would
  create a file stays bytes), the kernel is made anew with the same numbers and its entry written again."""
  product()
  marker = tmp_path / "pwned"

  class Payload:
    def __reduce__(self): return (open, (str(marker), "w"))
  entries = list((folder / "kernels").iterdir())
  good = {entry: entry.read_bytes() for entry in entries}
  for entry in entries:
    payload = {"pickle": pickle.dumps(Payload()), "truncated JSON": cache.read(entry, "check")[:-40]}.get(crafted) or CRAFTED[crafted]
    cache.write(entry, payload, "kernel")
  realize.compiled_kernels.clear()
  hits = cache.hits["kernel"]
  product()
  assert not marker.exists()
  assert cache.hits["kernel"] == hits + len(entries)   # each crafted entry was read, and rejected:
  assert {entry: entry.read_bytes() for entry in entries} == good   # made anew and written again


def test_crafted_entries_of_other_kinds_are_rejected(folder, tmp_path, monkeypatch):
  """BEAM results, compiler probes and CPU targets are JSON too: a pickle in their place is never loaded and the
  answer is found anew."""
  marker = tmp_path / "pwned"

  class Payload:
    def __reduce__(self): return (open, (str(marker), "w"))
  (item,) = (Tensor(np.ones((8, 16), np.float32)).sum(1)).schedule()
  monkeypatch.setattr(search, "MAX_CANDIDATES", 3)
  monkeypatch.setattr(search, "MAX_DEPTH", 1)
  opts = search.beam_search(item.ast, "CPU", 1)
  argv = ops_cpu.find_c_compiler()[0]
  isa = target._isa(tuple(argv), "native")
  monkeypatch.setattr(ops_cpu, "_probed", {})
  capabilities = ops_cpu.CCompiler().capabilities
  for kind in ("beam", "compiler_probes", "cpu_targets"):
    entries = list((folder / kind).iterdir())
    assert entries, kind
    for entry in entries: cache.write(entry, pickle.dumps(Payload()), "crafted")
  assert search.read_cached(search.cache_path(item.ast, "CPU", 1), item.ast, "CPU") is None
  assert target._isa(tuple(argv), "native") == isa
  monkeypatch.setattr(ops_cpu, "_probed", {})
  assert ops_cpu.CCompiler().capabilities == capabilities
  for entry in (folder / "compiler_probes").iterdir(): cache.write(entry, b"[1]", "crafted")   # JSON, not an object
  monkeypatch.setattr(ops_cpu, "_probed", {})
  assert ops_cpu.CCompiler().capabilities == capabilities
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


def test_writes_past_the_cap_evict_without_scanning_on_every_write(folder, monkeypatch):
  """A cap of 64 KiB: the folder is measured once per eighth of the cap written, not per write, and stays near the
  cap; the newest entries and one read often stay, the oldest go."""
  monkeypatch.setenv("MINIGRAD_CACHE_MB", str(64 / 1024))
  cap = cache.cap_bytes()
  assert cap == 64 * 1024
  scans = []
  real_entries = cache.entries
  monkeypatch.setattr(cache, "entries", lambda *a, **k: scans.append(1) or real_entries(*a, **k))
  kernels = cache.folder("kernels")
  payload_bytes = 2000
  entry_bytes = len(cache.MAGIC) + cache.DIGEST_SIZE + payload_bytes
  for i in range(100):
    cache.write(kernels / f"entry{i:03d}", bytes([i]) * payload_bytes, "test")
    assert cache.read(kernels / "entry000", "test") == bytes([0]) * payload_bytes   # read after every write: kept
    size = sum(p.stat().st_size for p in kernels.iterdir())
    assert size <= cap + cap // 8 + entry_bytes   # never far past the cap
  written = 100 * entry_bytes
  assert 0 < len(scans) <= written // (cap // 8) + 1 < 100   # one scan per eighth of the cap written, not one per write
  left = sorted(p.name for p in kernels.iterdir())
  assert "entry000" in left and "entry099" in left and "entry001" not in left
  assert all(cache.read(kernels / name, "test") == bytes([int(name[5:])]) * payload_bytes for name in left)   # whole


def test_small_writers_add_up_across_processes(folder, monkeypatch):
  """Processes that each write less than an eighth of the cap add their bytes to a count in the folder at exit;
  the one that takes it past an eighth measures the folder and evicts."""
  monkeypatch.setenv("MINIGRAD_CACHE_MB", str(64 / 1024))
  cap = cache.cap_bytes()
  kernels = cache.folder("kernels")
  for i in range(40):   # 80 KB put there by other means (not counted): over the cap
    (kernels / f"old{i:02d}").write_bytes(bytes(2000))
    os.utime(kernels / f"old{i:02d}", (i, i))
  monkeypatch.setattr(cache, "_written", cap // 16)   # this "process" wrote a sixteenth of the cap
  cache._save_stats()
  assert len(list(kernels.iterdir())) == 40   # not measured yet
  monkeypatch.setattr(cache, "_written", cap // 16)   # and the next one another sixteenth: together an eighth
  cache._save_stats()
  assert sum(p.stat().st_size for p in kernels.iterdir()) <= 0.9 * cap
  assert (kernels / "old39").exists() and not (kernels / "old00").exists()


def test_eviction_deletes_temp_files_of_dead_writers_only(folder):
  kernels = cache.folder("kernels")
  stale, fresh = kernels / ".entry.abc123.tmp", kernels / ".entry.def456.tmp"
  for path in (stale, fresh): path.write_bytes(b"half an entry")
  os.utime(stale, (time.time() - 2 * cache.STALE_TEMP_SECONDS,) * 2)
  cache.evict(cache.cap_bytes())
  assert not stale.exists() and fresh.exists()   # a writer may still be renaming the fresh one into place


RUN_TWICE = ("import numpy as np\nfrom minigrad import Tensor\n"
             "a = np.arange(96, dtype=np.float32).reshape(8, 12)\n"
             "assert np.allclose((Tensor(a) @ Tensor(a.T)).exp2().sum().numpy(), np.exp2(a @ a.T).sum(), rtol=1e-4)\n")


def test_the_report_shows_sizes_kinds_hit_rates_and_clear(folder, tmp_path):
  env = {**os.environ, "MINIGRAD_CACHE": str(folder)}
  env.pop("DISABLE_COMPILER_CACHE", None)
  for _ in range(2): subprocess.run([sys.executable, "-c", RUN_TWICE], env=env, check=True, capture_output=True)   # a miss run, a hit run
  shown = subprocess.run([sys.executable, "-m", "minigrad.cache"], env=env, capture_output=True, text=True, check=True)
  report = shown.stdout
  assert shown.stderr == ""   # no warnings (runpy warns when `-m` runs a module the package already imported)
  files = cache.entries(folder)
  assert f"{folder}: " in report and f"in {len(files)} entries" in report
  for kind in ("kernels", "compiled"):
    assert re.search(rf"^  {kind}\s+{len(list((folder / kind).iterdir()))} entries", report, re.M), report
  assert "hit rates over the last 2 runs:" in report
  hits, lookups = map(int, re.search(r"^  kernel\s+(\d+) of\s+(\d+) lookups", report, re.M).groups())
  assert 0 < hits and hits * 2 == lookups   # the second run found every kernel the first one rendered
  # --clear deletes the entries, not what a symlink in the folder points at
  outside = tmp_path / "outside"
  outside.mkdir()
  (outside / "keep").write_bytes(b"not the cache's")
  (folder / "link").symlink_to(outside, target_is_directory=True)
  (folder / "kernels" / "link").symlink_to(outside / "keep")
  subprocess.run([sys.executable, "-m", "minigrad.cache", "--clear"], env=env, check=True, capture_output=True)
  assert not any(folder.iterdir()) and (outside / "keep").read_bytes() == b"not the cache's"
  assert folder.stat().st_mode & 0o777 == 0o700 and cache.usable()


def test_two_processes_racing_on_one_key_both_succeed(folder):
  env = {**os.environ, "MINIGRAD_CACHE": str(folder)}
  env.pop("DISABLE_COMPILER_CACHE", None)
  runs = [subprocess.Popen([sys.executable, "-c", RUN_TWICE], env=env, stderr=subprocess.PIPE, text=True) for _ in range(2)]
  for run in runs: assert run.wait(timeout=300) == 0, run.stderr.read()
  assert all(cache.read(p, "check") is not None for p in (folder / "kernels").iterdir())
  assert not [p for kind in folder.iterdir() if kind.is_dir() for p in kind.iterdir() if p.name.endswith(".tmp")]


PAYLOAD_BYTES = 1 << 18


def _payload(writer: int, round_: int) -> bytes:
  return bytes([writer, round_]) * (PAYLOAD_BYTES // 2)


def _write_one_key(path: str, writer: int, rounds: int) -> None:
  for round_ in range(rounds): cache.write(pathlib.Path(path), _payload(writer, round_), "race")


def test_writers_racing_on_one_key_never_show_half_an_entry(folder):
  """Two processes write the same key over and over (256 KB each time) while this one reads it: every read is
  one whole entry of one writer, or nothing before the first write; both writers finish; no temp file is left."""
  path = cache.folder("kernels") / "contested"
  rounds = 30
  valid = {_payload(w, r) for w in (1, 2) for r in range(rounds)}
  context = multiprocessing.get_context("fork")
  writers = [context.Process(target=_write_one_key, args=(str(path), w, rounds)) for w in (1, 2)]
  for w in writers: w.start()
  seen, reads = 0, 0
  while any(w.is_alive() for w in writers) or reads == 0:
    payload = cache.read(path, "race")
    reads += 1
    if payload is None: assert seen == 0, "an entry that was there vanished: a reader found it damaged"
    else:
      assert payload in valid
      seen += 1
  for w in writers: w.join(timeout=60)
  assert [w.exitcode for w in writers] == [0, 0]
  assert cache.read(path, "race") in {_payload(w, rounds - 1) for w in (1, 2)}
  assert [p.name for p in path.parent.iterdir()] == ["contested"]


def test_keys_name_the_isa_the_compiler_its_version_flags_and_minigrad(folder, monkeypatch):
  """The compiled binary's key holds the compiler's command, version, flags and Target ISA (test_target.py checks
  that two ISAs differ) and minigrad's release; BEAM results the same; rendered kernels minigrad's source digest."""
  compiler = Device["CPU"].compiler
  assert compiler.version in compiler.cache_key and f"target={compiler.target.key}" in compiler.cache_key
  assert all(flag in compiler.cache_key for flag in compiler.flags) and ",".join(sorted(compiler.target.features)) in compiler.cache_key
  source = "void f(float *out) { out[0] = 1; }"
  (item,) = (Tensor(np.ones((4, 4), np.float32)).sum(1)).schedule()
  keys = lambda: (compiler.cache_path(source), search.cache_path(item.ast, "CPU", 2), kernel_cache.entry_path(item.ast, "CPU", None))
  before = keys()
  assert keys() == before
  monkeypatch.setattr(cache, "minigrad_version", lambda: "9.9.9")
  released = keys()
  assert released[0] != before[0] and released[1] != before[1]
  monkeypatch.setattr(kernel_cache, "package_version", lambda: "another source")
  assert keys()[2] != before[2]
  if shutil.which("clang") and shutil.which("gcc"):   # the same source, two compilers: two entries
    assert ops_cpu.CCompiler("gcc").cache_path(source) != ops_cpu.CCompiler("clang").cache_path(source)
