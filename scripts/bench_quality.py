"""diffrec's multi-scene quality benchmark (issue 12): procedural scenes built with the bpy
wheel, targets rendered by Cycles in the NeRF-synthetic layout, ``diffrec optimize`` on each,
the imported result judged by Cycles on held-out views (as ``scripts/demo`` judges) and its
geometry measured against the true mesh.

Run through ``scripts/bench_quality`` (which sets up the environment), or with the test
environment's Python: ``python scripts/bench_quality.py --scenes ring,mug --res 64``.
Outputs in ``--out``: ``bench_quality.json`` (settings, machine, every scene's record, the
summary against issue 12's targets) and per scene ``<mode>/<scene>/`` (the result folder in
``asset/``, ``optimize.log``, ``comparison.png``, ``result.json``). Scenes' targets are cached
in ``--cache`` by a content hash, so a rerun only optimizes and judges. ``--relight`` adds the
relit judging of ``diffrec_bench.quality.relight`` (its targets cached beside the scene's; a
scene's ``relit.png`` shows its first held-out view under each light and as base colour);
``--albedo`` its base-colour comparison alone.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import functools
import json
import multiprocessing
import os
import shlex
import sys
import time
from pathlib import Path

from diffrec_bench.quality import remote, table
from diffrec_bench.quality.job import SceneJob
from diffrec_bench.quality.recipes import RECIPES
from diffrec_bench.quality.run import run_scene
from diffrec_bench.runs import machine, names

MODES = ("materials", "reconstruct")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="scripts/bench_quality",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenes", default="all", type=lambda t: names(t, RECIPES, "scene"),
                        help=f"comma-separated, or 'all' (default): {', '.join(RECIPES)}")
    parser.add_argument("--mode", default="materials", type=lambda t: names(t, MODES, "mode"),
                        help="materials (default; the true mesh is the start), reconstruct, or "
                             "both comma-separated")
    parser.add_argument("--preset", choices=("preview", "standard", "high"), default="preview")
    parser.add_argument("--res", type=int, default=128, help="image size in pixels (targets, "
                                                             "training and judging; default 128)")
    parser.add_argument("--views", type=int, default=24, help="training cameras (default 24)")
    parser.add_argument("--holdout", type=int, default=8, help="held-out cameras (default 8)")
    parser.add_argument("--samples", type=int, default=128, help="Cycles samples per pixel")
    parser.add_argument("--iterations", type=int, help="iterations per pass (default: preset's)")
    parser.add_argument("--config", type=Path, help="a settings file (TOML or JSON) every "
                        "scene's `diffrec optimize --config` reads: to compare settings on "
                        "the suite (the flags above still win)")
    parser.add_argument("--light", choices=("fixed", "learn"), default="fixed",
                        help="fixed (default): each scene's HDRI given as the light; learn: the "
                             "fit learns the light without it (as from photos)")
    parser.add_argument("--jobs", type=int, default=1, help="scenes run at once (each optimize "
                                                            "gets cores / jobs torch threads)")
    parser.add_argument("--device", help="backend device (default: the backend's choice)")
    parser.add_argument("--relight", action="store_true",
                        help="also judge each result under two other HDRIs and a sun, and its "
                             "base colour against the true albedo (targets cached)")
    parser.add_argument("--albedo", action="store_true",
                        help="judge each result's base colour against the true albedo (the "
                             "relit judging's comparison without its lights; targets cached)")
    parser.add_argument("--peer", choices=("mitsuba",),
                        help="fit each scene with a peer instead of diffrec optimize: "
                             "mitsuba, Mitsuba 3's own inverse rendering "
                             "(scripts/bench_mitsuba_peer.py; materials mode)")
    parser.add_argument("--export-fits", type=Path, metavar="DIR",
                        help="fit nothing: write each scene's targets, HDRI and its diffrec "
                             "optimize command (DIR/fit.sh) for another machine, e.g. a GPU box "
                             "without Blender (diffrec_bench/quality/remote.py)")
    parser.add_argument("--fitted", type=Path, metavar="RESULTS",
                        help="judge the fits that DIR/fit.sh left in RESULTS instead of fitting "
                             "(same scenes, mode, preset and sizes as the export)")
    parser.add_argument("--out", type=Path, default=Path("out/bench_quality"))
    parser.add_argument("--cache", type=Path, default=Path("out/bench_quality_scenes"),
                        help="where scenes' targets are kept between runs")
    args = parser.parse_args(argv)
    if args.peer and args.mode != ["materials"]:
        parser.error("--peer fits materials only: --mode materials")
    if args.peer and args.light != "fixed":
        parser.error("--peer fits under the given HDRI: --light fixed")
    if args.peer and (args.export_fits or args.fitted):
        parser.error("--peer runs here: not with --export-fits or --fitted")
    if args.export_fits and args.fitted:
        parser.error("--export-fits writes the fits that --fitted judges later: one at a time")
    if args.res < 16 or args.views < 2 or args.holdout < 1 or args.jobs < 1:
        parser.error("--res must be at least 16, --views at least 2, --holdout and --jobs at "
                     "least 1")
    return args


def jobs_for(args) -> list[SceneJob]:
    threads = max(1, (os.cpu_count() or 1) // args.jobs) if args.jobs > 1 else None
    return [SceneJob(name, args.out / mode / name, args.cache, mode, args.preset, args.res,
                     args.views, args.holdout, args.samples, args.iterations, args.device,
                     threads, args.config and args.config.resolve(), args.relight,
                     args.albedo, args.peer, args.fitted and args.fitted.resolve(),
                     args.light)
            for mode in args.mode for name in args.scenes]


def run_all(jobs: list[SceneJob], workers: int) -> list[dict]:
    """Each scene in a fresh process (bpy holds one session per process), ``workers`` at a
    time; records in the order of ``jobs``. A scene that raises gives a record with
    ``error``."""
    context = multiprocessing.get_context("spawn")
    records = {}
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=context,
                                                max_tasks_per_child=1) as pool:
        futures = {pool.submit(run_scene, job): job for job in jobs}
        for future in concurrent.futures.as_completed(futures):
            job = futures[future]
            try:
                record = future.result()
            except Exception as exc:
                record = {"scene": job.name, "mode": job.mode, "error": repr(exc)}
            records[job] = record
            print(f"   {job.mode} {job.name}: " + ("FAILED " + record["error"][-300:]
                                                   if "error" in record else
                                                   " | ".join(table.row(record)[2:])),
                  flush=True)
    return [records[job] for job in jobs]


def export_fits(jobs: list[SceneJob], dest: Path) -> Path:
    """Each job's inputs and command under ``dest`` (one scene per process: bpy), and
    ``dest/fit.sh`` to run them."""
    dest.mkdir(parents=True, exist_ok=True)
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=context,
                                                max_tasks_per_child=1) as pool:
        lines = list(pool.map(functools.partial(remote.export_job, dest=dest), jobs))
    return remote.write_fit_script(dest, lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    jobs = jobs_for(args)
    if args.export_fits:
        script = export_fits(jobs, args.export_fits)
        print(f"bench_quality: {len(jobs)} fits exported; on the other machine run "
              f"`bash {script} RESULTS`, bring RESULTS back, then rerun this command with "
              f"--fitted RESULTS in place of --export-fits")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    started = datetime.datetime.now(datetime.UTC)
    print(f"bench_quality: {len(args.scenes)} scenes x {', '.join(args.mode)}, preset "
          f"{args.preset}, {args.res} px, {args.views} views + {args.holdout} held out, "
          f"Cycles {args.samples} spp, {args.jobs} at a time", flush=True)
    clock = time.monotonic()
    records = run_all(jobs, args.jobs)
    stats = table.summary(records)
    report = {
        "command": shlex.join(["scripts/bench_quality", *(argv or sys.argv[1:])]),
        "date": started.strftime("%Y-%m-%d %H:%M UTC"), "machine": machine(),
        "settings": {key: (str(value) if isinstance(value, Path) else value)
                     for key, value in vars(args).items()},
        "total_s": round(time.monotonic() - clock, 1), "summary": stats, "scenes": records,
    }
    (args.out / "bench_quality.json").write_text(json.dumps(report, indent=2))
    print()
    print(table.markdown(records))
    if args.relight:
        print()
        print(table.relit_markdown(records))
    print()
    print("\n".join(table.summary_lines(stats)))
    print(f"\ntotal {report['total_s']:.0f} s; every figure in {args.out / 'bench_quality.json'}")
    return 1 if any("error" in record for record in records) else 0


if __name__ == "__main__":
    sys.exit(main())
