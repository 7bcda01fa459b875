"""VIZ=1: one self-contained HTML page of every schedule and kernel, written at exit (no server, no network).

Input: each schedule the scheduler builds (not the ones replayed for a structure seen before: those repeat a
recorded one), with the tensor-graph nodes fused into each kernel; each kernel launch (minigrad/engine/realize.py)
and each BEAM candidate timed (minigrad/engine/search.py). Output: `write(path)`, a page with, per schedule, the
tensor graph as a picture (ops grouped and colored by the kernel they ended up in; laid out by Graphviz `dot`
through the `graphviz` package when both are installed, else a table of the same nodes) and its kernels in run
order; per kernel: why it starts and ends where it does, the user's source lines of its ops, its AST, the opts
applied (and BEAM's candidates with their times), the generated source (with comments naming each block's op and
line: minigrad/viz/kernel_comments.py), launch dimensions, launches, time, GFLOPS, GB/s and % of the CPU's peaks
(minigrad/viz/peaks.py). TinyJit replays launch their kernels one by one while recording, so they are counted too.
"""
from __future__ import annotations
from dataclasses import dataclass, field
from typing import Any
import datetime
import html
import os
import pathlib
import sys
import tempfile
from minigrad.helpers import getenv
from minigrad.uop.ops import UOp, Ops, pretty
from minigrad.viz import boundaries, source
from minigrad.viz.peaks import Peaks, cpu_peaks

MAX_SCHEDULES = 200        # schedules recorded; later ones are only counted
MAX_GRAPH_NODES = 1500     # a schedule with more tensor-graph nodes is listed, not drawn
PEAK_DEVICES = ("CPU", "LLVM")   # kernels whose rates are compared with the CPU's measured peaks (minigrad/viz/peaks.py)
PALETTE = ["#8dd3c7", "#ffffb3", "#bebada", "#fb8072", "#80b1d3", "#fdb462", "#b3de69", "#fccde5", "#d9d9d9", "#bc80bd",
           "#ccebc5", "#ffed6f"]


@dataclass
class GraphNode:
  label: str
  kernel: int | None        # the index of the kernel it is computed in (None: a buffer read from memory)
  where: str = ""           # the user's source line that built it


@dataclass
class ScheduleRecord:
  kernels: list[UOp]                                   # the kernel ASTs in run order
  reasons: list[tuple[str, ...]]                       # per kernel, its boundary reasons when it was scheduled
  nodes: dict[int, GraphNode] = field(default_factory=dict)
  edges: list[tuple[int, int]] = field(default_factory=list)
  replays: int = 0                                     # how often a graph of the same structure got this schedule again
  not_drawn: str = ""                                  # why the graph is not drawn ("": it is)


@dataclass
class KernelStats:
  compiled: Any             # the CompiledKernel (engine/realize.py) of its first launch
  launches: int = 0
  seconds: float = 0.0
  nbytes: int = 0


schedules: list[ScheduleRecord] = []
schedules_skipped = 0
kernel_stats: dict[UOp, KernelStats] = {}
beam_candidates: dict[UOp, list[tuple[str, float, str]]] = {}   # kernel AST -> (opts, seconds, note) per candidate timed


def _label(node: UOp) -> str:
  if node.op is Ops.REDUCE_AXIS: return f"{node.arg[0].name} over axes {node.arg[1]}\n{node.shape}"
  if node.op is Ops.CONST: return f"CONST {node.arg}"
  if node.op is Ops.VIEW and node.src[0].op is Ops.CONST: return f"CONST {node.src[0].arg}\n{node.shape}"
  if node.op is Ops.BUFFER: return f"buffer {node.dtype.name}[{node.arg[1]}]"
  return f"{node.op.name} {node.shape}" if node.op is Ops.VIEW else f"{node.op.name}\n{node.dtype.name} {node.shape}"


def scheduled(items: list, order: list[UOp], buffers: dict[UOp, UOp], fused: dict[UOp, list[UOp]]) -> None:
  """Record a schedule: its kernels and the graph of the nodes fused into each (`fused`: realized node -> its nodes)."""
  global schedules_skipped
  if len(schedules) >= MAX_SCHEDULES:
    schedules_skipped += 1
    return
  kernel_of_buffer = {b: i for i, item in enumerate(items) for b in item.bufs[:item.outputs]}
  record = ScheduleRecord([item.ast for item in items], [boundaries.reasons_of(item.ast) for item in items])
  schedules.append(record)
  if sum(len(nodes) for nodes in fused.values()) > MAX_GRAPH_NODES:
    record.not_drawn = f"more than {MAX_GRAPH_NODES} nodes"
    return
  ids: dict[UOp, int] = {}
  def node_id(node: UOp, kernel: int | None) -> int:
    if node not in ids:
      ids[node] = len(ids)
      where = source.created_at.get(node)
      record.nodes[ids[node]] = GraphNode(_label(node), kernel, "" if where is None else str(where))
    return ids[node]
  for root in order:   # constants are drawn as the VIEW that broadcasts them
    kernel = kernel_of_buffer.get(buffers[root])
    for node in fused[root]:
      if node.op is not Ops.CONST: node_id(node, kernel)
  for root in order:
    kernel = kernel_of_buffer.get(buffers[root])
    for node in fused[root]:
      if node.op is Ops.CONST: continue
      for src in node.src:
        if src.op is Ops.DEVICE or (src.op is Ops.CONST and node.op is Ops.VIEW): continue
        # a realized node of this schedule is drawn in its own kernel; what is left is a buffer read (or a bare constant)
        source_id = ids[src] if src in ids else node_id(src, kernel if src.op is Ops.CONST else None)
        record.edges.append((source_id, ids[node]))


def replayed(items: list) -> None:
  """A schedule replayed for a graph of a structure seen before (minigrad/schedule/reuse.py): counted under the
  schedule recorded for it, or recorded without its graph when it was first built before recording began."""
  global schedules_skipped
  kernels = [item.ast for item in items]
  if (record := next((r for r in schedules if r.kernels == kernels), None)) is not None: record.replays += 1
  elif len(schedules) >= MAX_SCHEDULES: schedules_skipped += 1
  else:
    why = "this schedule was first built before the report began recording"
    schedules.append(ScheduleRecord(kernels, [boundaries.reasons_of(ast) for ast in kernels], replays=1, not_drawn=why))


def launched(kernel: Any, nbytes: int, seconds: float) -> None:
  """A launch of a CompiledKernel (engine/realize.py), counted under its AST."""
  ast = kernel.kernel.ast
  if (stats := kernel_stats.get(ast)) is None: stats = kernel_stats[ast] = KernelStats(kernel)
  stats.launches += 1
  stats.seconds += seconds
  stats.nbytes += nbytes


def default_path() -> pathlib.Path:
  return pathlib.Path(getenv("VIZ_PATH", "") or pathlib.Path(tempfile.gettempdir()) / f"minigrad-viz-{os.getpid()}.html")


def write(path: str | os.PathLike | None = None) -> pathlib.Path:
  """Write the report (VIZ_PATH, else minigrad-viz-<pid>.html in the temp directory) and return its path."""
  target = pathlib.Path(path) if path is not None else default_path()
  target.write_text(render())
  return target


def reset() -> None:
  global schedules_skipped
  schedules.clear()
  kernel_stats.clear()
  beam_candidates.clear()
  schedules_skipped = 0


# ---------------------------------------------------------------- the page

def render() -> str:
  """The report as one HTML document."""
  kernel_ids: dict[UOp, int] = {}
  for record in schedules:
    for ast in record.kernels: kernel_ids.setdefault(ast, len(kernel_ids))
  for ast in kernel_stats: kernel_ids.setdefault(ast, len(kernel_ids))
  peaks, peaks_note = _peaks()
  parts = [_HEAD, f"<h1>minigrad report</h1><p>{html.escape(' '.join(sys.argv))} &middot; {datetime.datetime.now():%Y-%m-%d %H:%M:%S}"
           f" &middot; {len(schedules)} schedules{f' (+{schedules_skipped} not recorded)' if schedules_skipped else ''},"
           f" {len(kernel_ids)} kernels.</p>"]
  for number, record in enumerate(schedules, start=1): parts.append(_schedule_section(number, record, kernel_ids))
  parts.append(f"<h2>Kernels</h2><p>{html.escape(peaks_note)}</p>")
  parts.extend(_kernel_section(ast, index, peaks) for ast, index in kernel_ids.items())
  parts.append("</body></html>")
  return "\n".join(parts)


def _kernel_name(ast: UOp, index: int) -> str:
  stats = kernel_stats.get(ast)
  return f"k{index} {stats.compiled.name}" if stats is not None else f"k{index} (not launched)"


def _schedule_section(number: int, record: ScheduleRecord, kernel_ids: dict[UOp, int]) -> str:
  names = [_kernel_name(ast, kernel_ids[ast]) for ast in record.kernels]
  rows = "".join(f"<li><a href='#kernel-{kernel_ids[ast]}'><span class='swatch' style='background:{PALETTE[i % len(PALETTE)]}'></span>"
                 f"{html.escape(name)}</a><ul>{''.join(f'<li>{html.escape(r)}</li>' for r in reasons)}</ul></li>"
                 for i, (ast, name, reasons) in enumerate(zip(record.kernels, names, record.reasons)))
  replays = f", replayed {record.replays}x for graphs of the same structure" if record.replays else ""
  return (f"<section class='schedule' id='schedule-{number}'><h2>Schedule {number}: {len(record.kernels)} kernels{replays}</h2>"
          f"<div class='graph'>{_graph(record, names)}</div><ol>{rows}</ol></section>")


def _graph(record: ScheduleRecord, names: list[str]) -> str:
  """The tensor graph as inline SVG (Graphviz), or as a table when Graphviz is missing or the graph is too big."""
  if record.not_drawn: return f"<p class='note'>graph not drawn: {record.not_drawn}</p>"
  try:
    import graphviz
    return _strip_xml_header(_dot(graphviz, record, names).pipe(format="svg").decode())
  except Exception as error:   # graphviz package or its `dot` program missing: list the nodes instead
    why = "the graphviz package is not installed (pip install -e '.[viz]')" if isinstance(error, ImportError) else \
          f"Graphviz could not lay it out ({type(error).__name__}: {error})"
    rows = "".join(f"<tr><td>{node_id}</td><td>{html.escape(node.label)}</td><td>{html.escape(names[node.kernel]) if node.kernel is not None else 'buffer'}</td>"
                   f"<td>{', '.join(str(s) for s, d in record.edges if d == node_id)}</td><td>{html.escape(node.where)}</td></tr>"
                   for node_id, node in record.nodes.items())
    return (f"<p class='note'>graph not drawn: {html.escape(why)}</p><table class='nodes'><tr><th>node</th><th>op</th>"
            f"<th>kernel</th><th>reads nodes</th><th>source</th></tr>{rows}</table>")


def _dot(graphviz: Any, record: ScheduleRecord, names: list[str]) -> Any:
  graph = graphviz.Digraph(graph_attr={"rankdir": "TB", "fontname": "Helvetica", "fontsize": "10"},
                           node_attr={"shape": "box", "style": "rounded,filled", "fontname": "Helvetica", "fontsize": "9"})
  clusters: dict[int | None, list[tuple[int, GraphNode]]] = {}
  for node_id, node in record.nodes.items(): clusters.setdefault(node.kernel, []).append((node_id, node))
  for kernel, members in clusters.items():
    if kernel is None:
      for node_id, node in members: graph.node(str(node_id), _dot_text(node.label), fillcolor="#eeeeee", shape="cylinder", tooltip=_dot_text(node.where))
      continue
    with graph.subgraph(name=f"cluster_{kernel}") as cluster:
      cluster.attr(label=_dot_text(names[kernel]), style="rounded", color=PALETTE[kernel % len(PALETTE)], penwidth="2")
      for node_id, node in members:
        cluster.node(str(node_id), _dot_text(node.label), fillcolor=PALETTE[kernel % len(PALETTE)], tooltip=_dot_text(node.where))
  for src, dst in dict.fromkeys(record.edges): graph.edge(str(src), str(dst))
  return graph


def _dot_text(text: str) -> str: return text.replace("\\", "\\\\").replace("\n", "\\n")


def _strip_xml_header(svg: str) -> str: return svg[svg.index("<svg"):] if "<svg" in svg else svg


def _peaks() -> tuple[Peaks | None, str]:
  """The CPU's peaks when a CPU kernel ran, and a sentence saying what they are (or why there are none)."""
  if not any(stats.compiled.device in PEAK_DEVICES for stats in kernel_stats.values()): return None, ""
  try: peaks = cpu_peaks()
  except Exception as error:   # no C compiler that builds the micro-benchmark: the page goes without percentages
    return None, f"peak FLOPS and bandwidth not measured: {type(error).__name__}: {error}"
  return peaks, (f"% of peak: of this CPU's {peaks.flops / 1e9:.0f} GFLOPS and {peaks.bytes_per_second / 1e9:.1f} GB/s, "
                 f"{peaks.how} (the best of a few runs, lower on a busy machine; kept per host in the disk cache). "
                 f"Small kernels run from the caches and can pass the memory bandwidth.")


def _kernel_section(ast: UOp, index: int, peaks: Peaks | None) -> str:
  stats = kernel_stats.get(ast)
  reasons = "".join(f"<li>{html.escape(r)}</li>" for r in boundaries.reasons_of(ast))
  lines = "".join(f"<li><code>{html.escape(os.path.relpath(line.file) if not line.file.startswith('<') else line.file)}:{line.line}</code> "
                  f"<code>{html.escape(line.code)}</code></li>" for line in boundaries.lines_of(ast)) or "<li>not captured</li>"
  parts = [f"<section class='kernel' id='kernel-{index}'><h3>{html.escape(_kernel_name(ast, index))}</h3>",
           f"<h4>Kernel boundary</h4><ul>{reasons or '<li>not recorded</li>'}</ul><h4>Source lines</h4><ul>{lines}</ul>"]
  if stats is not None:
    kernel = stats.compiled
    seconds = max(stats.seconds, 1e-12)
    dims = f"{kernel.launch_dims[0]} workgroups x {kernel.launch_dims[1]} threads" if kernel.launch_dims else \
           f"full shape {kernel.kernel.full_shape} ({', '.join(kernel.kernel.axis_kinds)})" + \
           (f"; outer loop of {kernel.outer_loop} split over the thread pool" if kernel.outer_loop else "")
    flops, bandwidth = kernel.flops * stats.launches / seconds, stats.nbytes / seconds
    of_peak = ["", ""] if peaks is None or kernel.device not in PEAK_DEVICES else \
              [f" ({flops / peaks.flops:.1%} of peak)", f" ({bandwidth / peaks.bytes_per_second:.1%} of peak)"]
    parts.append(f"<table class='stats'><tr><th>device</th><th>launches</th><th>time</th><th>per launch</th><th>GFLOPS</th><th>GB/s</th></tr>"
                 f"<tr><td>{kernel.device}</td><td>{stats.launches}</td><td>{stats.seconds * 1e6:.1f} us</td>"
                 f"<td>{stats.seconds / stats.launches * 1e6:.1f} us</td><td>{flops / 1e9:.2f}{of_peak[0]}</td>"
                 f"<td>{bandwidth / 1e9:.2f}{of_peak[1]}</td></tr></table>"
                 f"<p>launch: {html.escape(dims)}<br>applied opts: <code>{html.escape(str(kernel.kernel.applied_opts))}</code></p>")
  if candidates := beam_candidates.get(ast):
    rows = "".join(f"<tr><td><code>{html.escape(opts)}</code></td><td>{seconds * 1e6:.1f} us</td><td>{html.escape(note)}</td></tr>"
                   for opts, seconds, note in sorted(candidates, key=lambda c: c[1]))
    parts.append(f"<details><summary>BEAM: {len(candidates)} candidates timed</summary><table><tr><th>opts</th><th>time</th><th></th></tr>{rows}</table></details>")
  parts.append(f"<details><summary>AST</summary><pre>{html.escape(pretty(ast))}</pre></details>")
  if stats is not None:   # with comments naming each block's op and line when it was compiled while recording
    parts.append(f"<details><summary>generated source</summary><pre>{html.escape(stats.compiled.commented_source or stats.compiled.source)}</pre></details>")
  parts.append("</section>")
  return "".join(parts)


_HEAD = """<!DOCTYPE html><html><head><meta charset="utf-8"><title>minigrad report</title><style>
body { font-family: sans-serif; margin: 1.5em; max-width: 1400px; }
section { border-top: 1px solid #ccc; padding: 0.5em 0; }
.graph { overflow: auto; max-height: 80vh; border: 1px solid #eee; }
.swatch { display: inline-block; width: 0.9em; height: 0.9em; margin-right: 0.4em; vertical-align: middle; border: 1px solid #999; }
pre { background: #f6f6f6; padding: 0.5em; overflow: auto; max-height: 40em; }
table { border-collapse: collapse; } td, th { border: 1px solid #ddd; padding: 2px 6px; text-align: left; }
.note { color: #a40; }
</style></head><body>"""
