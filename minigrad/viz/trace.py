"""PROFILE=1: a Chrome trace-event JSON of what minigrad spent its time on (opens in Perfetto and chrome://tracing).

Input: spans the engine reports while `minigrad.viz.profiling` is on: scheduling, rendering, compiling, BEAM search and
TinyJit's recorded calls and replays on the host track, and each kernel launch (a replay's too) on its device's queue
track, with its name, FLOPs, bytes and (CPU) the number of parts the thread pool split it into; and for a CPU kernel,
each part on the track of the pool thread that ran it (`pool_parts`, timed in minigrad/runtime/cpu_pool.c), inside
the launch's span. Output: `write(path)`, a {"traceEvents": [...]} file of complete
("X") events in microseconds, with metadata ("M") events naming the process and the tracks.

Format: the Trace Event Format (Chromium's catapult docs): X events carry ts and dur in microseconds, pid and tid
pick the track, args are shown in the event's details.
"""
from __future__ import annotations
from typing import Any
import json
import os
import pathlib
import tempfile
import time
from minigrad.helpers import getenv

HOST_TRACK = "host: schedule, render, compile, BEAM, TinyJit"
MAX_EVENTS = 1_000_000   # a long run keeps its first million spans (about 300 MB of JSON), then counts the rest
events: list[dict[str, Any]] = []
dropped = 0
tracks: dict[str, int] = {HOST_TRACK: 0}   # track name -> tid
_origin = time.perf_counter()


def now() -> float: return time.perf_counter()


def complete(name: str, category: str, start: float, end: float | None = None, track: str = HOST_TRACK, **args: Any) -> None:
  """Record a span from `start` to `end` (time.perf_counter() seconds; end defaults to now) on `track`."""
  global dropped
  if len(events) >= MAX_EVENTS:
    dropped += 1
    return
  end = now() if end is None else end
  tid = tracks.setdefault(track, len(tracks))
  events.append({"name": name, "cat": category, "ph": "X", "ts": round((start - _origin) * 1e6, 3),
                 "dur": round(max(end - start, 0.0) * 1e6, 3), "pid": os.getpid(), "tid": tid, "args": args})


def pool_track(thread: int, caller: str) -> str:
  """The track of CPU pool thread `thread`: 0 is whichever Python thread called the pool, the others are workers."""
  return f"CPU pool thread 0 (caller: {caller})" if thread == 0 else f"CPU pool thread {thread}"


def pool_parts(name: str, parts: list) -> None:
  """The parts (cpu_pool.PartTime) of one launch of kernel `name`, each on its pool thread's track."""
  for p in parts:
    complete(name, "pool", p.start, p.end, track=pool_track(p.thread, p.caller), part=p.part, parts=p.parts,
             iterations=f"{p.loop_start}..{p.loop_end}")


def default_path() -> pathlib.Path:
  return pathlib.Path(getenv("PROFILE_PATH", "") or pathlib.Path(tempfile.gettempdir()) / f"minigrad-profile-{os.getpid()}.json")


def document() -> dict[str, Any]:
  """The trace as the Trace Event Format's JSON object."""
  pid = os.getpid()
  name = f"minigrad ({dropped} later spans dropped)" if dropped else "minigrad"
  metadata = [{"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": name}}]
  metadata += [{"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}} for name, tid in tracks.items()]
  metadata += [{"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid, "args": {"sort_index": tid}} for tid in tracks.values()]
  return {"traceEvents": metadata + events, "displayTimeUnit": "ms"}


def write(path: str | os.PathLike | None = None) -> pathlib.Path:
  """Write the trace so far (PROFILE_PATH, else minigrad-profile-<pid>.json in the temp directory) and return its path."""
  target = pathlib.Path(path) if path is not None else default_path()
  target.write_text(json.dumps(document()))
  return target


def reset() -> None:
  """Forget the events and device tracks recorded so far."""
  global dropped
  events.clear()
  dropped = 0
  for name in [name for name in tracks if name != HOST_TRACK]: del tracks[name]
