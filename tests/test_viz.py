"""Seeing inside: kernel boundary reasons (DEBUG>=3), source-line capture, the PROFILE=1 trace and the VIZ=1 report,
checked on real graphs (softmax, matmul + relu, a reduce read twice, a user's realize, a packed matmul operand)."""
import html.parser
import inspect
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import numpy as np
import pytest
from minigrad import Tensor, viz
from minigrad.engine import search
from minigrad.engine.realize import compiled_kernels
from minigrad.helpers import BEAM, DEBUG
from minigrad.runtime import ops_cpu
from minigrad.runtime.device import DEVICE_NAMES, Device
from minigrad.schedule import reuse
from minigrad.uop.ops import Ops
from minigrad.schedule.scheduler import create_schedule
from minigrad.viz import boundaries, report, source, trace
from minigrad.viz.peaks import cpu_peaks

rng = np.random.default_rng(23)


def fresh(*shape: int, device: str = "CPU") -> Tensor:
  """Random data on the CPU by default: where kernels end depends on the device's kernel shape (CPU kernels keep side
  reduces and pack matmul operands, GPU-shaped ones do not), and the reasons below are the CPU's."""
  return Tensor(rng.standard_normal(shape).astype(np.float32), device=device)


def here() -> str:
  """'test_viz.py:<line>' of the caller, as the reasons and reports name it."""
  return f"test_viz.py:{inspect.currentframe().f_back.f_lineno}"


@pytest.fixture(autouse=True)
def viz_state(monkeypatch):
  """Every test starts with recording off and ends with the flags as they were (written at exit: never)."""
  for name in ("profiling", "reporting", "observing", "capturing"): monkeypatch.setattr(viz, name, False)
  monkeypatch.setattr(reuse, "recipes", {})   # every graph is scheduled, not replayed from another test's
  trace.reset()
  report.reset()
  yield
  trace.reset()
  report.reset()


def capture_on(): viz.enable(capturing=True, write_at_exit=False)


# ---------------------------------------------------------------- kernel boundary reasons

def test_softmax_is_one_kernel_realized_by_the_user():
  capture_on()
  (item,) = fresh(64, 32).softmax(-1).schedule(); line = here()
  assert item.reasons == (f"output: realized by the user: .schedule() at {line} (item,) = fresh(64, 32).softmax(-1).schedule(); line = here()",
                          "input data1: a buffer the user gave or an earlier schedule wrote")


def test_matmul_relu_is_one_kernel_reading_two_inputs():
  (item,) = (fresh(64, 32) @ fresh(32, 16)).relu().schedule()
  assert item.reasons == ("output: realized by the user (Tensor.realize, .numpy(), .item(), .to(device) ...)",
                          "input data1: a buffer the user gave or an earlier schedule wrote",
                          "input data2: a buffer the user gave or an earlier schedule wrote")


def test_reduce_read_twice():
  x = fresh(64, 32)
  row_sums = x.sum(1, keepdim=True)
  items = ((x / row_sums) + row_sums.T.sum()).schedule()
  assert [item.reasons[0] for item in items] == [
    "output: a reduce read by 2 ops: stored once",
    "output: a reduce read through a view that neither reshapes it nor broadcasts it back along its reduced axes over the outermost loops",
    "output: realized by the user (Tensor.realize, .numpy(), .item(), .to(device) ...)"]
  assert items[1].reasons[1:] == ("input data1: written by kernel 1 of this schedule",)
  assert set(items[2].reasons[1:]) == {"input data1: written by kernel 2 of this schedule", "input data2: written by kernel 1 of this schedule",
                                       "input data3: a buffer the user gave or an earlier schedule wrote"}


def test_gpu_shaped_kernels_say_why_softmax_splits():
  items = fresh(64, 32, device="PYTHON").softmax(-1).schedule()
  assert [item.reasons[0] for item in items] == 2 * ["output: a reduce read through a view that is not a reshape (PYTHON kernels have no side reduces)"] + [
    "output: realized by the user (Tensor.realize, .numpy(), .item(), .to(device) ...)"]
  assert items[2].reasons[1:3] == ("input data1: written by kernel 2 of this schedule", "input data2: written by kernel 1 of this schedule")


def test_user_realize_makes_a_buffer_for_the_next_schedule():
  capture_on()
  x = fresh(16, 16)
  total = x.sum(1, keepdim=True)
  total.realize(); line = here()
  (item,) = (x / total).schedule()
  assert set(item.reasons[1:]) == {"input data1: a buffer the user gave or an earlier schedule wrote",
                                   "input data2: a buffer the user gave or an earlier schedule wrote"}
  (reasons,) = [boundaries.reasons_of(ast) for ast in boundaries.kernel_reasons if any(line in r for r in boundaries.reasons_of(ast))]
  assert reasons[0] == f"output: realized by the user: .realize() at {line} total.realize(); line = here()"


def test_contiguous_recomputed_input_and_packed_operand():
  transposed = (fresh(64, 32).T.contiguous() * 2).sum().schedule()
  assert transposed[0].reasons[0] == "output: CONTIGUOUS: .contiguous() asks for a buffer of its own"
  expensive = ((fresh(64, 32).exp() / (fresh(64, 32) + 1).sqrt()) @ fresh(32, 16)).schedule()
  assert expensive[0].reasons[0] == "output: an elementwise input a reduce would compute 16 times per element: a kernel of its own"
  packed = (fresh(512, 512) @ fresh(512, 512)).schedule()
  assert [item.reasons[0] for item in packed] == ["output: a packed copy of a matmul operand, laid out in panels for the next kernel",
                                                  "output: realized by the user (Tensor.realize, .numpy(), .item(), .to(device) ...)"]
  assert packed[1].reasons[-1] == "input data3: written by kernel 1 of this schedule"


def test_merged_kernel_says_so_once():
  a = fresh(64, 64)
  (item,) = Tensor.schedule(a + 1, a * 2)
  assert item.outputs == 2
  assert item.reasons[:2] == ("2 elementwise kernels over the same elements merged into one with 2 outputs",
                              "output: realized by the user (Tensor.realize, .numpy(), .item(), .to(device) ...)")


def test_reasons_survive_a_replayed_schedule():
  def build(): return fresh(32, 48).softmax(-1) * fresh(32, 1)
  first, _, _ = create_schedule([build().uop])
  recipes_before = sum(recipe.uses[0] for recipe in reuse.recipes.values())
  second, _, _ = create_schedule([build().uop])
  assert sum(recipe.uses[0] for recipe in reuse.recipes.values()) == recipes_before + 1   # replayed, not scheduled
  assert [item.reasons for item in second] == [item.reasons for item in first] and first[0].reasons


def test_debug_3_prints_boundaries_and_source_lines(monkeypatch, capsys):
  monkeypatch.setattr(DEBUG, "value", 3)
  capture_on()
  x = fresh(16, 8)
  y = (x * 1.2345).softmax(-1); line = here()   # a constant no other test uses: the kernel is compiled here
  compiled_kernels.clear()
  y.realize()
  out = capsys.readouterr().out
  assert "kernel boundary: output: realized by the user: .realize() at test_viz.py" in out
  assert f"from: {line} y = (x * 1.2345).softmax(-1); line = here()" in out


# ---------------------------------------------------------------- source lines

def test_source_lines_are_captured_only_when_asked():
  off = fresh(4, 4) + 1
  assert off.uop not in source.created_at
  capture_on()
  on = fresh(4, 4) - 3; line = here()
  assert str(source.created_at[on.uop]) == f"{line} on = fresh(4, 4) - 3; line = here()"
  assert source.created_at[on.uop].call == "__sub__"


# ---------------------------------------------------------------- PROFILE=1

def test_profile_trace_has_every_stage(tmp_path):
  viz.enable(profiling=True, write_at_exit=False)
  compiled_kernels.clear()
  out = ((fresh(32, 16) @ fresh(16, 8)).relu() * 4.321).sum(1)   # a constant no other test uses: rendered and compiled here
  out.numpy()
  document = json.loads(trace.write(tmp_path / "trace.json").read_text())
  events = document["traceEvents"]
  spans = [e for e in events if e["ph"] == "X"]
  by_category = {category: [e for e in spans if e["cat"] == category] for category in ("schedule", "render", "compile", "launch")}
  assert all(by_category.values()), {k: len(v) for k, v in by_category.items()}
  tracks = {e["args"]["name"]: e["tid"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
  queue = f"{out.device} queue"
  pool = {name for name in tracks if name.startswith("CPU pool thread")} if out.device in ("CPU", "LLVM") else set()
  assert set(tracks) == {trace.HOST_TRACK, queue} | pool
  for launch in by_category["launch"]:
    assert launch["tid"] == tracks[queue] and launch["dur"] > 0
    assert launch["args"]["flops"] > 0 and launch["args"]["bytes"] > 0
    assert launch["args"]["cpu_pool_parts"] >= 1 if out.device in ("CPU", "LLVM") else "cpu_pool_parts" not in launch["args"]
  assert any(e["name"].startswith("compile r_") for e in by_category["compile"])
  assert all(e["tid"] == tracks[trace.HOST_TRACK] for c in ("schedule", "render", "compile") for e in by_category[c])


def test_profile_trace_has_a_track_per_cpu_pool_thread(tmp_path):
  # Each part of a CPU launch is on the track of the pool thread that ran it, inside its launch's span, named like
  # the kernel; the parts of a launch cover its outer loop once. Which threads take parts depends on the host (its
  # cores, how busy it is): there is one track for each pool thread that ran something, whatever their number.
  viz.enable(profiling=True, write_at_exit=False)
  x = fresh(256, 512)
  for _ in range(3): (x * 7.75 + 1).realize()   # 131,072 elements: split over the pool when it has 2+ threads
  document = json.loads(trace.write(tmp_path / "trace.json").read_text())
  events = document["traceEvents"]
  tracks = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
  launches = [e for e in events if e["ph"] == "X" and e["cat"] == "launch"]
  parts = [e for e in events if e["ph"] == "X" and e["cat"] == "pool"]
  assert len(launches) == 3 and parts
  assert {tracks[e["tid"]] for e in parts} == {name for name in tracks.values() if name.startswith("CPU pool thread")}
  names = [re.fullmatch(r"CPU pool thread (0) \(caller: MainThread\)|CPU pool thread ([1-9]\d*)", tracks[e["tid"]]) for e in parts]
  assert all(names) and {int(n.group(1) or n.group(2)) for n in names} <= set(range(ops_cpu.cpu_threads()))
  slack = 0.002   # microseconds: ts and dur are rounded to nanoseconds
  for launch in launches:
    inside = [e for e in parts if launch["ts"] - slack <= e["ts"] and e["ts"] + e["dur"] <= launch["ts"] + launch["dur"] + slack]
    assert inside and all(e["name"] == launch["name"] and e["pid"] == launch["pid"] for e in inside)
    assert sorted(e["args"]["part"] for e in inside) == list(range(launch["args"]["cpu_pool_parts"]))
    assert all(e["args"]["parts"] == launch["args"]["cpu_pool_parts"] for e in inside)
    spans = sorted(tuple(map(int, e["args"]["iterations"].split(".."))) for e in inside)
    assert spans[0][0] == 0 and all(a[1] == b[0] for a, b in zip(spans, spans[1:]))   # the outer loop, once
  assert sum(len([e for e in parts if launch["ts"] - slack <= e["ts"] <= launch["ts"] + launch["dur"]]) for launch in launches) == len(parts)
  if ops_cpu.cpu_threads() > 1: assert all(launch["args"]["cpu_pool_parts"] > 1 for launch in launches)
  for tid in {e["tid"] for e in parts}:   # a thread runs one part at a time: its spans follow each other
    spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in parts if e["tid"] == tid)
    assert all(a[1] <= b[0] + slack for a, b in zip(spans, spans[1:]))


def test_profile_trace_has_beam_search(monkeypatch, tmp_path):
  monkeypatch.setenv("MINIGRAD_CACHE", str(tmp_path / "cache"))
  monkeypatch.setattr(search, "chosen_opts", {})
  monkeypatch.setattr(search, "MAX_CANDIDATES", 3)
  monkeypatch.setattr(search, "MAX_DEPTH", 1)
  monkeypatch.setattr(search, "MIN_KERNEL_S", 0.0)   # search even this tiny kernel
  monkeypatch.setattr(BEAM, "value", 1)
  viz.enable(profiling=True, reporting=True, write_at_exit=False)
  (fresh(8, 16) @ fresh(16, 8) * 5.4321).numpy()
  names = [e["name"] for e in trace.document()["traceEvents"] if e.get("cat") == "beam"]
  assert "BEAM search" in names and any(n.startswith("BEAM ") and n.endswith(" candidates") for n in names)
  (candidates,) = report.beam_candidates.values()
  assert candidates[0][2] == "hand-coded" and all(seconds > 0 for _, seconds, _ in candidates)


# ---------------------------------------------------------------- VIZ=1

def test_cpu_peaks_are_plausible_and_measured_once_per_host(tmp_path, monkeypatch):
  from minigrad.viz import peaks as peaks_module
  monkeypatch.setenv("MINIGRAD_CACHE", str(tmp_path / "cache"))
  cpu_peaks.cache_clear()
  try:
    peaks = cpu_peaks()
    assert 1e9 < peaks.flops < 1e14 and 5e8 < peaks.bytes_per_second < 1e13   # any CPU from one core to a server
    assert cpu_peaks() is peaks   # once per process
    assert len(list((tmp_path / "cache" / "peaks").iterdir())) == 1
    cpu_peaks.cache_clear()   # as a new process on this host: read back from the disk cache, nothing measured
    monkeypatch.setattr(peaks_module, "measure", lambda compiler: pytest.fail("measured again"))
    assert cpu_peaks() == peaks and peaks.how.startswith("measured ")
  finally: cpu_peaks.cache_clear()


class _Page(html.parser.HTMLParser):
  """The ids, <svg> elements and text of a page (parsing fails on a broken document)."""
  def __init__(self, text: str):
    super().__init__()
    self.ids, self.svgs, self.text = set(), 0, []
    self.feed(text)
  def handle_starttag(self, tag, attrs):
    self.ids.update(value for name, value in attrs if name == "id")
    self.svgs += tag == "svg"
  def handle_data(self, data): self.text.append(data)


def _report_program():
  """Two realizes on the device under test (DEV=...): the report covers whatever kernels that device makes."""
  x = fresh(64, 32, device=Device.DEFAULT)
  x.softmax(-1).realize(); softmax_line = here()
  (x @ fresh(32, 16, device=Device.DEFAULT)).relu().realize(); matmul_line = here()
  return softmax_line, matmul_line


def test_report_has_each_schedule_graph_and_kernel(tmp_path):
  pytest.importorskip("graphviz")
  if shutil.which("dot") is None: pytest.skip("Graphviz's dot program is not installed (apt-get install graphviz)")
  viz.enable(reporting=True, write_at_exit=False)
  compiled_kernels.clear()   # compiled while recording: the report shows their source with comments naming the ops
  softmax_line, matmul_line = _report_program()
  kernels = len(report.kernel_stats)
  assert len(report.schedules) == 2 and kernels == len({ast for record in report.schedules for ast in record.kernels}) >= 2
  page = _Page(report.write(tmp_path / "report.html").read_text())
  text = "".join(page.text)
  assert page.svgs == 2 and {"schedule-1", "schedule-2"} | {f"kernel-{i}" for i in range(kernels)} <= page.ids
  for stats in report.kernel_stats.values(): assert stats.compiled.name in text and stats.compiled.source.strip()[:40] in text
  assert softmax_line in text and "x.softmax(-1).realize(); softmax_line = here()" in text
  assert matmul_line in text and "(x @ fresh(32, 16, device=Device.DEFAULT)).relu().realize(); matmul_line = here()" in text
  assert text.count("output: realized by the user: .realize() at") >= 2
  assert f"softmax: max  {softmax_line}" in text and f"relu  {matmul_line}" in text and f"@  {matmul_line}" in text
  assert "GFLOPS" in text and "applied opts" in text
  if all(stats.compiled.device in report.PEAK_DEVICES for stats in report.kernel_stats.values()):
    assert text.count("% of peak)") == 2 * len(report.kernel_stats) and "% of peak: of this CPU's" in text
  _report_program()   # the same structures again: replayed schedules, counted under the recorded ones
  assert [record.replays for record in report.schedules] == [1, 1] and len(report.schedules) == 2
  assert "replayed 1x for graphs of the same structure" in report.render()


def test_report_without_graphviz_lists_the_nodes(tmp_path, monkeypatch):
  monkeypatch.setitem(sys.modules, "graphviz", None)   # import graphviz raises ImportError
  viz.enable(reporting=True, write_at_exit=False)
  _report_program()
  page = _Page(report.write(tmp_path / "report.html").read_text())
  text = "".join(page.text)
  assert page.svgs == 0 and "graph not drawn: the graphviz package is not installed" in text
  assert "MAX over axes (1,)" in text   # the softmax's row max, a node of the table
  assert {"kernel-0", "kernel-1"} <= page.ids


# ---------------------------------------------------------------- kernels that name their ops

def _kernel_sources(ast, renderer, device_shape: str):
  """(plain, commented) source of `ast` for `renderer`, with the default opts of a CPU kernel or none (GPU-shaped)."""
  from minigrad.codegen.kernel import Kernel
  from minigrad.codegen.linearizer import linearize_for
  from minigrad.opt.heuristics import hand_coded_optimizations
  from minigrad.viz import kernel_comments
  kernel = Kernel(ast, has_local=device_shape == "gpu")
  if device_shape == "cpu": hand_coded_optimizations(kernel)
  uops = linearize_for(kernel, renderer)
  plain = renderer.render(kernel.name, uops)
  return plain, kernel_comments.commented_source(ast, renderer, kernel.name, uops, plain)


def _renderers():
  from minigrad.codegen.c_renderer import CRenderer
  from minigrad.codegen.cl_renderer import OpenCLRenderer
  from minigrad.codegen.cuda_renderer import CUDARenderer
  from minigrad.codegen.llvm_renderer import LLVMRenderer
  from minigrad.codegen.python_renderer import PythonRenderer
  return [(CRenderer(), "cpu", "/*"), (LLVMRenderer(), "cpu", ";"), (OpenCLRenderer(), "gpu", "/*"), (CUDARenderer(), "gpu", "/*"),
          (PythonRenderer(), "gpu", "#")]


def _comments(text: str, marker: str) -> list[str]:
  return [line.strip() for line in text.splitlines() if line.strip().startswith(marker) and not line.strip().startswith(("#include", "#if", "#endif", "#else"))]


def test_every_renderer_names_the_ops_and_the_line():
  capture_on()
  (item,) = ((fresh(64, 32) * 3.25).relu().exp() + 1).schedule(); line = here()
  place = line
  for renderer, shape, marker in _renderers():
    plain, commented = _kernel_sources(item.ast, renderer, shape)
    comments = [c for c in _comments(commented, marker) if "test_viz.py" in c]
    assert comments, (type(renderer).__name__, commented)
    text = " ".join(comments)
    for op in ("*", "relu", "exp", "+"): assert f"{op}  {place}" in text, (type(renderer).__name__, op, comments)
    # the comments are lines of their own: without them the source is exactly the one compiled and cached
    assert [l for l in commented.splitlines() if l.strip() not in comments] == plain.splitlines()
    assert not _comments(plain, marker) or all("test_viz.py" not in c for c in _comments(plain, marker))


def test_softmax_and_matmul_kernels_name_their_reduces():
  capture_on()
  (softmax,) = fresh(64, 32).softmax(-1).schedule(); softmax_line = here()
  (linear,) = (fresh(64, 32) @ fresh(32, 16) + fresh(16)).relu().schedule(); linear_line = here()
  from minigrad.codegen.c_renderer import CRenderer
  text = " ".join(_comments(_kernel_sources(softmax.ast, CRenderer(), "cpu")[1], "/*"))
  for op in ("softmax: max", "softmax: sum", "softmax: sub", "softmax: mul"): assert f"{op}  {softmax_line}" in text, (op, text)
  text = " ".join(_comments(_kernel_sources(linear.ast, CRenderer(), "cpu")[1], "/*"))
  for op in ("@", "+", "relu"): assert f"/* {op}  {linear_line} */" in text or f"; {op}  {linear_line}" in text or f"{op}  {linear_line};" in text, (op, text)


def test_commented_sources_compile(tmp_path, monkeypatch):
  monkeypatch.setenv("MINIGRAD_CACHE", str(tmp_path / "cache"))
  capture_on()
  (item,) = (fresh(16, 8).softmax(-1) * 2.75).schedule()
  from minigrad.codegen.c_renderer import CRenderer
  cpu = Device["CPU"]
  plain, commented = _kernel_sources(item.ast, cpu.renderer, "cpu")
  assert commented != plain and cpu.compiler.compile(commented)
  try: llvm = Device["LLVM"]
  except Exception as error: pytest.skip(f"no LLVM device here: {error}")
  plain, commented = _kernel_sources(item.ast, llvm.renderer, "cpu")
  assert commented != plain and llvm.compiler.compile(commented)


def test_comments_cost_nothing_when_capture_is_off(monkeypatch, capsys):
  from minigrad.engine.realize import get_kernel
  from minigrad.viz import kernel_comments
  def build(): return (fresh(16, 16) * 6.125).exp()
  (item,) = build().schedule()
  assert item.ast not in kernel_comments.kernel_labels   # nothing recorded
  compiled_kernels.clear()
  plain = get_kernel(item.ast, "CPU")
  assert "test_viz.py" not in plain.source and plain.commented_source == ""
  viz.enable(capturing=True, reporting=True, write_at_exit=False)
  monkeypatch.setattr(DEBUG, "value", 4)
  monkeypatch.setattr(reuse, "recipes", {})   # scheduled again, not replayed: a replayed schedule has the labels of its first
  (again,) = build().schedule()
  assert again.ast is item.ast   # the same kernel: its compiled and disk-cache entries are keyed by the plain source
  compiled_kernels.clear()
  observed = get_kernel(again.ast, "CPU")
  assert observed.source == plain.source and observed.commented_source != observed.source
  assert "exp  test_viz.py:" in observed.commented_source and "exp  test_viz.py:" in capsys.readouterr().out   # DEBUG=4 shows it


# ---------------------------------------------------------------- errors point at the user's line

def _failing_compiler(monkeypatch, device: str = "CPU"):
  def fail(source: str) -> bytes: raise RuntimeError("the compiler failed")
  monkeypatch.setattr(Device[device].compiler, "compile_cached", fail)
  compiled_kernels.clear()


def test_compile_error_names_the_ops_and_the_lines(monkeypatch):
  capture_on()
  y = (fresh(8, 8) * 7.375).relu().exp(); line = here()
  _failing_compiler(monkeypatch)
  with pytest.raises(RuntimeError, match="the compiler failed") as failure:
    asked = here(); y.realize()
  (note,) = failure.value.__notes__
  assert note.splitlines() == ["minigrad: while compiling kernel 1 of 1 on CPU, which computes:",
                               f"  {line} y = (fresh(8, 8) * 7.375).relu().exp(); line = here()   [*, relu, exp]",
                               f"  asked for at {asked} asked = here(); y.realize()"]


def test_compile_error_without_capture_says_how_to_see_the_lines(monkeypatch):
  y = fresh(8, 8).sum(1) * 8.625
  _failing_compiler(monkeypatch)
  with pytest.raises(RuntimeError) as failure:
    asked = here(); y.numpy()
  (note,) = failure.value.__notes__
  assert note.splitlines() == ["minigrad: while compiling kernel 1 of 1 on CPU, which computes:",
                               "  ADD reduce over axes (1,), MUL into float[8, 1]",
                               "  (run with DEBUG=3 (or VIZ=1) to see the lines of your script that created these ops)",
                               f"  asked for at {asked} asked = here(); y.numpy()"]


def test_scheduling_error_names_the_node_and_its_line():
  from minigrad.viz import errors
  capture_on()
  y = fresh(4, 4).softmax(-1); line = here()
  error = RuntimeError("scheduler can't put this op inside a kernel")
  errors.add_node_context(error, y.uop)
  (note,) = error.__notes__
  assert note.splitlines()[:2] == ["minigrad: while scheduling the kernel of this tensor op:",
                                   f"  softmax: mul ({y.uop.op.name} float (4, 4)), created at {line} y = fresh(4, 4).softmax(-1); line = here()"]


def test_op_names():
  capture_on()
  x, w = fresh(4, 3), fresh(3, 2)
  (matmul,) = [u for u in (x @ w).uop.toposort if u.op is Ops.REDUCE_AXIS]
  assert source.op_name(source.created_at[matmul]) == "@"
  assert source.op_name(source.created_at[(2 - x).uop]) == "-"
  assert source.op_name(source.created_at[x.exp().uop]) == "exp"
  assert {source.op_name(source.created_at[u]) for u in x.softmax(-1).uop.toposort if u in source.created_at} >= \
         {"softmax: max", "softmax: sub", "softmax: sum", "softmax: mul"}
  weights = Tensor(rng.standard_normal((4, 3)).astype(np.float32), device="CPU", requires_grad=True)
  weights.relu().sum().backward(); line = here()
  backward = {source.op_name(w) for u in weights.grad.uop.toposort if (w := source.created_at.get(u)) is not None and w.place == line}
  assert "relu backward: where" in backward and "sum backward: expand" in backward, backward


# ---------------------------------------------------------------- docs that can't drift

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_how_it_works_is_what_the_script_prints_today():
  """docs/how-it-works.md is docs/how_it_works.py's output (regenerate: python docs/how_it_works.py > docs/how-it-works.md).
  The script fixes everything host-dependent itself (a hand-described Target, 2 threads, the plain C renderer)."""
  env = {k: v for k, v in os.environ.items() if k not in ("DEBUG", "VIZ", "PROFILE", "BEAM", "NOOPT", "DEV", *DEVICE_NAMES)}
  printed = subprocess.run([sys.executable, str(ROOT / "docs" / "how_it_works.py")], capture_output=True, text=True, env=env, timeout=300)
  assert printed.returncode == 0, printed.stderr[-3000:]
  document = (ROOT / "docs" / "how-it-works.md").read_text()
  assert printed.stdout.rstrip("\n") == document.rstrip("\n"), \
    "docs/how-it-works.md is out of date: python docs/how_it_works.py > docs/how-it-works.md"
  assert document.count("matches numpy: True") == 2 and "/* relu  how_it_works.py:" in document and "/* softmax: max  how_it_works.py:" in document


READS = [re.compile(r'(?:getenv|ContextVar)\(\s*"([A-Z][A-Z0-9_]*)"'), re.compile(r'\b(?:environ|env)(?:\.get\(|\[)\s*"([A-Z][A-Z0-9_]*)"'),
         re.compile(r'"([A-Z][A-Z0-9_]*)" (?:not )?in (?:os\.)?environ')]
NOT_OURS = {"PYTHONPATH", "HOME"}   # the system's, passed on to subprocesses


def variables_read() -> set[str]:
  """Every environment variable the code reads: by name (getenv, ContextVar, os.environ), and the names it reads in loops."""
  from minigrad.bench.harness import LIBRARY_LIMITS
  found = set(DEVICE_NAMES) | {name for limits in LIBRARY_LIMITS.values() for name in limits}
  try:
    from minigrad.distributed.comm import LAUNCHER_VARIABLES
    found |= set(LAUNCHER_VARIABLES)
  except ImportError: pass
  for folder in ("minigrad", "examples", "bench", "tests"):
    for path in (ROOT / folder).rglob("*.py"):
      text = path.read_text()
      for pattern in READS: found.update(pattern.findall(text))
  return found - NOT_OURS


def test_env_table_lists_every_variable_the_code_reads():
  rows = [line for line in (ROOT / "docs" / "env.md").read_text().splitlines() if line.startswith("| `")]
  documented = {token.split("=")[0] for row in rows for token in re.findall(r"`([^`]+)`", row.split(" | ")[0])}
  read = variables_read()
  assert {"DEBUG", "VIZ", "PROFILE", "MINIGRAD_CACHE", "CPU_TARGET", "CC", "DEV", "CPU"} <= read   # the scan works
  assert read - documented == set(), f"read by the code but not in docs/env.md: {sorted(read - documented)}"
  assert documented - read == set(), f"in docs/env.md but read nowhere: {sorted(documented - read)}"


def test_profile_trace_shows_tinyjit_replays_and_their_kernels():
  from minigrad import TinyJit
  viz.enable(profiling=True, write_at_exit=False)
  @TinyJit
  def step(x: Tensor) -> Tensor: return (x * 9.125 + 1).relu().sum(1)
  for _ in range(4): step(fresh(16, 16, device=Device.DEFAULT)).numpy()
  spans = [e for e in trace.document()["traceEvents"] if e["ph"] == "X"]
  jit = [e["name"] for e in spans if e["cat"] == "jit"]
  assert jit == ["TinyJit record step", "TinyJit record step", "TinyJit replay step", "TinyJit replay step"]
  for replay in (e for e in spans if e["name"] == "TinyJit replay step"):
    inside = [e for e in spans if e["cat"] == "launch" and replay["ts"] <= e["ts"] and e["ts"] + e["dur"] <= replay["ts"] + replay["dur"] + 1]
    assert len(inside) == replay["args"]["kernels"] >= 1 and all(e["args"]["flops"] > 0 for e in inside)


def test_report_renders_in_headless_chromium(tmp_path):
  """The report as a browser builds it: Chromium parses the page and the inline SVG of each graph (`--dump-dom` prints
  the document it rendered), and every schedule and kernel section is there."""
  browser = shutil.which("chromium") or shutil.which("chromium-browser")
  if browser is None: pytest.skip("no chromium here (Debian's `chromium` package; .ci/install-system-packages installs it)")
  pytest.importorskip("graphviz")
  if shutil.which("dot") is None: pytest.skip("Graphviz's dot program is not installed (apt-get install graphviz)")
  viz.enable(reporting=True, write_at_exit=False)
  _report_program()
  path = report.write(tmp_path / "report.html")
  # --no-sandbox: Chromium's sandbox refuses to start as root (CI containers); the page is our own file
  rendered = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path / 'profile'}",
                             "--dump-dom", path.as_uri()], capture_output=True, text=True, timeout=120)
  assert rendered.returncode == 0 and "<body" in rendered.stdout, rendered.stderr[-2000:]
  dom = _Page(rendered.stdout)
  kernels = {f"kernel-{i}" for i in range(len(report.kernel_stats))}
  assert dom.svgs == 2 and {"schedule-1", "schedule-2"} | kernels <= dom.ids
  assert "".join(dom.text).count("Kernel boundary") == len(kernels) == len(report.kernel_stats) >= 2


def test_a_rebuilt_node_keeps_its_line():
  """source.carry: the hook for the scheduler, which rebuilds nodes over earlier results' buffers."""
  capture_on()
  x = fresh(4, 4)
  y = x.exp() * 2; line = here()
  rebuilt = y.uop.replace(src=(fresh(4, 4).uop, y.uop.src[1]))
  assert rebuilt not in source.created_at
  source.carry(y.uop, rebuilt)
  assert source.created_at[rebuilt] == source.created_at[y.uop] and source.created_at[rebuilt].place == line
