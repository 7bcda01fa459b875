"""Seeing inside: kernel boundary reasons (DEBUG>=3), source-line capture, the PROFILE=1 trace and the VIZ=1 report,
checked on real graphs (softmax, matmul + relu, a reduce read twice, a user's realize, a packed matmul operand)."""
import html.parser
import inspect
import json
import shutil
import sys
import numpy as np
import pytest
from minigrad import Tensor, viz
from minigrad.engine import search
from minigrad.engine.realize import compiled_kernels
from minigrad.helpers import BEAM, DEBUG
from minigrad.runtime.device import Device
from minigrad.schedule import reuse
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
  assert set(tracks) == {trace.HOST_TRACK, queue}
  for launch in by_category["launch"]:
    assert launch["tid"] == tracks[queue] and launch["dur"] > 0
    assert launch["args"]["flops"] > 0 and launch["args"]["bytes"] > 0
    assert launch["args"]["cpu_pool_parts"] >= 1 if out.device in ("CPU", "LLVM") else "cpu_pool_parts" not in launch["args"]
  assert any(e["name"].startswith("compile r_") for e in by_category["compile"])
  assert all(e["tid"] == tracks[trace.HOST_TRACK] for c in ("schedule", "render", "compile") for e in by_category[c])


def test_profile_trace_has_beam_search(monkeypatch, tmp_path):
  monkeypatch.setenv("MINIGRAD_CACHE", str(tmp_path / "cache"))
  monkeypatch.setattr(search, "chosen_opts", {})
  monkeypatch.setattr(search, "MAX_CANDIDATES", 3)
  monkeypatch.setattr(search, "MAX_DEPTH", 1)
  monkeypatch.setattr(BEAM, "value", 1)
  viz.enable(profiling=True, reporting=True, write_at_exit=False)
  (fresh(8, 16) @ fresh(16, 8) * 5.4321).numpy()
  names = [e["name"] for e in trace.document()["traceEvents"] if e.get("cat") == "beam"]
  assert "BEAM search" in names and any(n.startswith("BEAM ") and n.endswith(" candidates") for n in names)
  (candidates,) = report.beam_candidates.values()
  assert candidates[0][2] == "hand-coded" and all(seconds > 0 for _, seconds, _ in candidates)


# ---------------------------------------------------------------- VIZ=1

def test_cpu_peaks_are_plausible():
  peaks = cpu_peaks()
  assert 1e9 < peaks.flops < 1e14 and 5e8 < peaks.bytes_per_second < 1e13   # any CPU from one core to a server
  assert cpu_peaks() is peaks   # measured once per process


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
