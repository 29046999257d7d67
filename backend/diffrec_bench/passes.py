"""Time diffrec's two passes on one config: milliseconds per iteration of pass 1 (the surface)
and pass 2 (mesh + textures), peak memory, whole-run wall time and held-out PSNR.

Runs ``diffrec optimize``'s own path (the config read as ``--config`` reads it, targets made or
loaded by ``load_inputs``) with the iterations per pass and the engines given, and prints one
markdown row; ``--json`` appends the figures as one JSON line. Time per iteration is measured
between progress reports after the first one, so start-up work (kernel compilation, caches)
is left out; reports read the loss from the device, so each one waits for the work before it.
On CUDA it also says between which two progress reports the run's peak memory was reached.

    scripts/bench_passes.py CONFIG [--iterations 100] [--engine fast|torch] [--device cuda]
                            [--set NAME=VALUE ...] [--out DIR] [--json FILE] [--profile FILE]
                            [--memory FILE]

``--engine fast`` asks for nvdiffrast and tiny-cuda-nn (an error names what is missing);
``torch`` for the pure-torch engines. ``--set NAME=VALUE`` overrides a setting of the config
(VALUE read as JSON, else as a string; e.g. ``--set hash_grid_precision=float32``).
``--profile FILE`` writes the torch profiler's table of the costliest operations over a tenth
of each pass, from its middle, and the Python lines that made the host wait for the device,
with how often (on CUDA as torch's sync debug mode reports them; elsewhere the calls that
would wait on a GPU, ``diffrec.device_waits``). Counting the waits slows the whole run (on an
H200, 147 against 46 ms an iteration): a profiled run's row says so, and its times are not
figures to report. ``--memory FILE`` (CUDA) records the allocator's history and writes which
lines of diffrec allocated the memory alive at the run's peak (``peak_memory``); it slows
the run too.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import platform
import shutil
import sys
import time
import warnings
from pathlib import Path

import torch

from diffrec import raster
from diffrec.commands.optimize import TerminalReporter, checkpoint_store
from diffrec.device_waits import DeviceWaits
from diffrec.devices import resolve_device
from diffrec.engines import NEURAL, RASTER
from diffrec.pipeline.config import build_config, read_config_reading
from diffrec.pipeline.inputs import load_inputs
from diffrec.pipeline.outputs import write_result
from diffrec.pipeline.reporter import Progress
from diffrec.pipeline.run import optimize
from diffrec.protocol.events import PassName
from diffrec_bench import peak_memory

ENGINES = {"fast": {RASTER: RASTER.accelerated, NEURAL: NEURAL.accelerated},
           "torch": {RASTER: "torch", NEURAL: "torch"}}


class TimingReporter(TerminalReporter):
    """Keeps each progress report's (iteration, elapsed seconds) per pass, and on CUDA the
    peak GPU memory so far at each report (``peaks``: (where, MiB)). With ``profile``
    (a path), the torch profiler records each pass from its first report past the middle to
    the next one and appends the costliest operations to that file, with the host syncs
    counted so far in ``syncs`` (``host_syncs_counted``; then cleared)."""

    def __init__(self, out_dir: str, profile: Path | None = None,
                 syncs: collections.Counter | None = None):
        super().__init__(out_dir, stream=None)
        self.reports: dict[str, list[tuple[int, float]]] = {}
        self.peaks: list[tuple[str, float]] = []
        self.profile = profile
        self.syncs = syncs
        self._profiler = None
        self._profiled: set[str] = set()

    def progress(self, progress: Progress) -> None:
        self.reports.setdefault(progress.pass_name, []).append(
            (progress.iteration, progress.elapsed_s))
        self.note_peak(f"{progress.pass_name} iteration {progress.iteration}")
        if self.profile is None:
            return
        if self._profiler is not None:
            self._write_profile(progress)
        elif (progress.pass_name not in self._profiled and progress.iteration < progress.iterations
              and 2 * progress.iteration >= progress.iterations):
            self._profiled.add(progress.pass_name)
            self._profiler = _profiler()
            self._profiler.start()
            self._since = progress.iteration

    def _write_profile(self, progress: Progress) -> None:
        self._profiler.stop()
        sort_key = "cuda_time_total" if torch.cuda.is_available() else "cpu_time_total"
        table = self._profiler.key_averages().table(sort_by=sort_key, row_limit=30)
        with self.profile.open("a") as out:
            out.write(f"## {progress.pass_name}: iterations {self._since} to "
                      f"{progress.iteration}\n\n{table}\n\n")
        self._profiler = None
        if self.syncs:  # written as each pass is profiled, in case the run is cut short
            write_host_syncs(self.profile, self.syncs, f"up to {progress.pass_name}, iteration "
                                                       f"{progress.iteration}")
            self.syncs.clear()

    def note_peak(self, where: str) -> None:
        """Record the peak GPU memory allocated so far (CUDA only), to tell which part of the
        run reached the final peak."""
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            self.peaks.append((where, torch.cuda.max_memory_allocated() / 2**20))

    def peak_reached(self) -> str | None:
        """Between which recorded points the run's peak memory was reached."""
        if not self.peaks:
            return None
        final = self.peaks[-1][1]
        at = next(i for i, (_, mib) in enumerate(self.peaks) if mib >= final)
        before = self.peaks[at - 1][0] if at else "the start"
        return f"{final:,.0f} MiB, reached between {before} and {self.peaks[at][0]}"

    def ms_per_iteration(self, pass_name: str) -> float | None:
        """Mean milliseconds per iteration after the pass's first report (None: too few)."""
        reports = self.reports.get(pass_name, [])
        if len(reports) < 2:
            return None
        (first, t0), (last, t1) = reports[0], reports[-1]
        return 1000.0 * (t1 - t0) / (last - first)


def _profiler():
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    return profile(activities=activities)


@contextlib.contextmanager
def host_syncs_counted(enabled: bool, device: torch.device):
    """Yields a Counter of ``"file:line"`` -> how often an operation asked from that Python
    line made the host wait for the device, filled while the context runs when ``enabled``:
    on CUDA as torch's sync debug mode reports them (other warnings are shown as usual),
    elsewhere the calls that would wait on a GPU (``diffrec.device_waits``)."""
    counts: collections.Counter = collections.Counter()
    if not enabled:
        yield counts
        return
    if device.type != "cuda":
        with DeviceWaits(counts):
            yield counts
        return
    with warnings.catch_warnings():
        warnings.filterwarnings("always", message=".*synchronizing CUDA operation")
        shown = warnings.showwarning

        def count(message, category, filename, lineno, file=None, line=None):
            if "synchronizing CUDA operation" in str(message):
                counts[f"{filename}:{lineno}"] += 1
            else:
                shown(message, category, filename, lineno, file, line)

        warnings.showwarning = count
        torch.cuda.set_sync_debug_mode("warn")
        try:
            yield counts
        finally:
            torch.cuda.set_sync_debug_mode("default")


def write_host_syncs(path: Path, counts: collections.Counter, span: str) -> None:
    """Append the lines that made the host wait most (``span``: since when) to ``path``."""
    with path.open("a") as out:
        out.write(f"## host syncs, {span} ({sum(counts.values())} in all)\n\n"
                  "| count | asked from |\n| --- | --- |\n")
        for where, count in counts.most_common(30):
            out.write(f"| {count} | {where} |\n")
        out.write("\n")


def setting_override(text: str) -> tuple[str, object]:
    """``"NAME=VALUE"`` -> (NAME, VALUE read as JSON, or the string itself)."""
    name, equals, value = text.partition("=")
    if not (name and equals):
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    try:
        return name, json.loads(value)
    except json.JSONDecodeError:
        return name, value


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", help="a diffrec or reference-system (nvdiffrec) config file")
    parser.add_argument("--iterations", type=int, default=100, help="iterations per pass")
    parser.add_argument("--engine", choices=sorted(ENGINES), default="fast")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--out", default="out/bench_passes",
                        help="the run's output folder (emptied first: no resuming)")
    parser.add_argument("--json", type=Path, help="append the figures as a JSON line here")
    parser.add_argument("--profile", type=Path, help="write the profiler's tables here")
    parser.add_argument("--memory", type=Path,
                        help="CUDA: write what holds the GPU memory at the run's peak here")
    parser.add_argument("--set", dest="settings", action="append", default=[],
                        type=setting_override, metavar="NAME=VALUE",
                        help="override a setting (VALUE as JSON, else a string); repeatable")
    args = parser.parse_args(argv)
    if args.iterations < 20:
        parser.error("--iterations must be at least 20 (reports every tenth of a pass)")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    for family, engine in ENGINES[args.engine].items():
        os.environ[family.env_var] = engine
    reading = read_config_reading(args.config)
    config = build_config({**reading.values(), "log_every": args.iterations // 10},
                          {**dict(args.settings), "iterations": args.iterations,
                           "device": args.device, "out_dir": args.out})
    shutil.rmtree(config.out_dir, ignore_errors=True)  # a checkpoint there would be resumed
    device = resolve_device(config.device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    started = time.monotonic()
    with (host_syncs_counted(bool(args.profile), device) as syncs,
          peak_memory.recorded(bool(args.memory), device) as memory_trace):
        reporter = TimingReporter(config.out_dir, args.profile, syncs)
        inputs = load_inputs(config, raster.RasterContext(device))
        reporter.note_peak("the targets rendered")
        result = optimize(config.settings, inputs, reporter,
                          checkpoints=checkpoint_store(config.out_dir), device=config.device)
        reporter.note_peak("the run's end (after the last bake and the validation)")
        if args.memory:
            peak_memory.write_report(args.memory, memory_trace())
    write_result(Path(config.out_dir), result, export_obj=False)
    wall = time.monotonic() - started
    if syncs:
        write_host_syncs(args.profile, syncs, "to the end of the run")

    metrics = result.metrics
    figures = {
        "engine": args.engine, "raster": metrics["engine"], "neural": NEURAL.resolve(device),
        "device": (torch.cuda.get_device_name(device) if device.type == "cuda"
                   else f"{platform.machine()} CPU, {torch.get_num_threads()} threads"),
        "torch": torch.__version__, "config": str(args.config), "iterations": args.iterations,
        "batch": config.settings.size.batch, "train_res": config.settings.size.train_res,
        "pass1_ms": reporter.ms_per_iteration(PassName.SURFACE),
        "pass2_ms": reporter.ms_per_iteration(PassName.TEXTURES),
        "peak_memory_mb": metrics["peak_memory_mb"], "wall_s": wall,
        "time_s": metrics["time_s"], "psnr": metrics["psnr_mean"],
        "overrides": dict(args.settings), "profiled": bool(args.profile or args.memory),
        "peak_reached": reporter.peak_reached(),
    }
    overridden = "".join(f", {name}={value}" for name, value in args.settings)
    overridden += ", profiled: times not comparable" if args.profile else ""
    overridden += ", memory recorded: times not comparable" if args.memory else ""
    print("| engine | device | pass 1 ms/it | pass 2 ms/it | peak MiB | wall s | PSNR dB |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    print(f"| diffrec {args.engine} ({figures['raster']} + {figures['neural']}{overridden}) | "
          f"{figures['device']} | {_number(figures['pass1_ms'])} | "
          f"{_number(figures['pass2_ms'])} | {_number(figures['peak_memory_mb'])} | "
          f"{wall:.1f} | {_number(figures['psnr'], 2)} |")
    if figures["peak_reached"]:
        print(f"peak GPU memory: {figures['peak_reached']}")
    if args.json:
        with args.json.open("a") as out:
            out.write(json.dumps(figures) + "\n")
    return 0


def _number(value, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


if __name__ == "__main__":
    sys.exit(main())
