"""diffrec against Blender's own route (issue 50): a heavy asset made real-time at a triangle
budget by Decimate + Smart UV Project + a Cycles bake Selected to Active, and by diffrec's
refine from that same bake; the decimated mesh with the asset's own procedural material as a
baseline. Each result is judged by Cycles on held-out views under the fitted HDRI, another
HDRI and a sun against the asset's own renders, with the truth rendered again with another
seed as the noise ceiling.

Run with the test environment's Python: ``python scripts/bench_bake_peer.py --quick``
(one asset, one budget, 64 px, a few iterations: minutes) or the full matrix
``python scripts/bench_bake_peer.py`` (five assets x 1 % and 5 %). Outputs in ``--out``:
``bench_bake_peer.json`` (command, commit, machine, settings, every run's record, the summary
against issue 50's targets) and per run ``<asset>-<percent>pc/`` (``start.glb``, the baked
maps, ``diffrec/`` (the result folder), ``optimize.log``, each route's ``<route>.png``,
``result.json``); ``--pictures`` the per-asset strips (``--quick`` keeps both apart from the
full run's, under ``out/bench_bake_peer_quick``). The truth is cached in ``--cache`` by a
content key (``diffrec_bench.bake_peer.truth``), so a rerun only bakes, fits and judges.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import json
import multiprocessing
import shlex
import sys
import time
from pathlib import Path

from diffrec_bench.bake_peer import picture, table
from diffrec_bench.bake_peer.catalogue import ASSETS, BUDGETS
from diffrec_bench.bake_peer.jobs import PeerJob, checkout_commit
from diffrec_bench.bake_peer.lights import ROLES
from diffrec_bench.checkout import REPO
from diffrec_bench.quality.judging import JUDGE_SEED
from diffrec_bench.runs import machine, names

QUICK = {"assets": ["sculpt"], "budgets": [0.01], "res": 64, "views": 12, "holdout": 3,
         "samples": 16, "judge_samples": 16, "texture_res": 256, "iterations": 40}
"""``--quick``: the smallest case that runs end to end (any of these given explicitly wins)."""


def _budgets(text: str) -> list[float]:
    try:
        values = [float(part) / 100 for part in text.split(",") if part.strip()]
    except ValueError:
        values = []
    if not values or not all(0 < value <= 1 for value in values):
        raise argparse.ArgumentTypeError(f"budgets are percents in (0, 100], e.g. 1,5: {text!r}")
    return values


def _setting(text: str) -> tuple[str, object]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"a setting is NAME=VALUE, e.g. start_prior=3: {text!r}")
    try:
        return name, json.loads(value)
    except json.JSONDecodeError:
        return name, value  # a plain string


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="scripts/bench_bake_peer.py",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--assets", type=lambda t: names(t, ASSETS, "asset"),
                        help=f"comma-separated, or 'all' (default): {', '.join(ASSETS)}")
    parser.add_argument("--budgets", type=_budgets, help="triangle budgets in percent of the "
                        "asset's, comma-separated (default: "
                        f"{','.join(f'{100 * b:g}' for b in BUDGETS)})")
    parser.add_argument("--lights", type=lambda t: tuple(names(t, ROLES, "light")),
                        default=ROLES, help="judging lights, comma-separated, or 'all' "
                        f"(default): {', '.join(ROLES)}")
    parser.add_argument("--res", type=int, help="image size in pixels (default 128)")
    parser.add_argument("--views", type=int, help="training cameras (default 24)")
    parser.add_argument("--holdout", type=int, help="held-out cameras (default 8)")
    parser.add_argument("--samples", type=int, help="Cycles samples of the training targets "
                                                    "(default 16)")
    parser.add_argument("--judge-samples", dest="judge_samples", type=int,
                        help="Cycles samples of the held-out truth, its noise ceiling and the "
                             "judging renders (default 64: at 16 the bake sits at the judge's "
                             "noise ceiling)")
    parser.add_argument("--judge-seed", dest="judge_seed", type=int, default=JUDGE_SEED,
                        help=f"Cycles' seed of the judging renders alone (default {JUDGE_SEED}; "
                             "runs that differ only in it measure the judge's own spread)")
    parser.add_argument("--texture-res", dest="texture_res", type=int,
                        help="texture size of both routes (default 512)")
    parser.add_argument("--bake-samples", dest="bake_samples", type=int, default=16,
                        help="Cycles samples per baked map (default 16)")
    parser.add_argument("--preset", choices=("preview", "standard", "high"), default="preview")
    parser.add_argument("--iterations", type=int, help="diffrec's iterations (default: the "
                                                       "preset's)")
    parser.add_argument("--mode", choices=("refine", "materials"), default="refine",
                        help="diffrec's mode (default refine: the vertices move too)")
    parser.add_argument("--set", dest="settings", type=_setting, action="append", default=[],
                        metavar="NAME=VALUE", help="one more diffrec setting (JSON value), "
                                                   "e.g. start_prior=3; repeatable")
    parser.add_argument("--no-start-renders", dest="start_renders", action="store_false",
                        help="do not give diffrec the start rendered by Cycles from the "
                             "training cameras (its fit then takes Cycles' differences from "
                             "its rasterizer for the reference's)")
    parser.add_argument("--threads", type=int, help="torch threads of the optimize child")
    parser.add_argument("--device", help="backend device (default: the backend's choice)")
    parser.add_argument("--quick", action="store_true", help="the smallest case: "
                        + ", ".join(f"{key} {value}" for key, value in QUICK.items()))
    parser.add_argument("--out", type=Path, help="default out/bench_bake_peer (--quick: "
                        "out/bench_bake_peer_quick)")
    parser.add_argument("--cache", type=Path, default=Path("out/bench_bake_peer_truth"),
                        help="where the assets' truth renders are kept between runs")
    parser.add_argument("--pictures", type=Path,
                        help="where each asset's truth | bake | diffrec strip goes "
                             "(bake_peer_<asset>.png; default docs/images, --quick: "
                             "<out>/pictures)")
    parser.add_argument("--report", type=Path, metavar="JSON",
                        help="run nothing: print the table and the summary of the runs an "
                             "earlier bench_bake_peer.json holds (finished or not)")
    args = parser.parse_args(argv)
    defaults = {"assets": list(ASSETS), "budgets": list(BUDGETS), "res": 128, "views": 24,
                "holdout": 8, "samples": 16, "judge_samples": 64, "texture_res": 512,
                "iterations": None}
    for key, value in (QUICK if args.quick else defaults).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.out = args.out or Path("out/bench_bake_peer_quick" if args.quick else
                                "out/bench_bake_peer")
    args.pictures = args.pictures or (args.out / "pictures" if args.quick else
                                      Path("docs/images"))
    if args.res < 16 or args.views < 2 or args.holdout < 1 or args.texture_res < 16:
        parser.error("--res and --texture-res must be at least 16, --views at least 2, "
                     "--holdout at least 1")
    if args.samples < 1 or args.judge_samples < 1 or args.bake_samples < 1:
        parser.error("--samples, --judge-samples and --bake-samples must be at least 1")
    return args


def jobs_for(args) -> list[PeerJob]:
    """Every asset at the first budget, then at the next (the smaller budgets finish first)."""
    revision = checkout_commit(REPO)
    return [PeerJob(asset, fraction, args.out.resolve(), args.cache.resolve(), size=args.res,
                    views=args.views, holdout=args.holdout, samples=args.samples,
                    judge_samples=args.judge_samples, judge_seed=args.judge_seed,
                    texture_res=args.texture_res,
                    bake_samples=args.bake_samples, preset=args.preset,
                    iterations=args.iterations, roles=tuple(args.lights),
                    threads=args.threads, device=args.device, commit=revision,
                    mode=args.mode, settings=tuple(args.settings),
                    start_renders=args.start_renders)
            for fraction in args.budgets for asset in args.assets]


def _run(job: PeerJob) -> dict:
    from diffrec_bench.bake_peer.routes import run_budget

    return run_budget(job)


def write_picture(jobs: list[PeerJob], asset: str, folder: Path) -> None:
    """Asset ``asset``'s strip from the runs of ``jobs`` done so far."""
    strip = picture.write_strip(folder / f"bake_peer_{asset}.png",
                                [(f"{100 * job.fraction:g} %", job.out / job.label)
                                 for job in jobs if job.asset == asset])
    if strip:
        print(f"   picture: {strip}", flush=True)


def run_all(jobs: list[PeerJob], report: dict, path: Path, pictures: Path) -> list[dict]:
    """Each job in a fresh process (bpy holds one session per process), one at a time (the
    optimize child takes every core); ``report`` with the records so far is rewritten to
    ``path`` and the asset's picture redrawn after each. A job that raises gives a record
    with ``error``."""
    context = multiprocessing.get_context("spawn")
    records = []
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=context,
                                                max_tasks_per_child=1) as pool:
        futures = [(job, pool.submit(_run, job)) for job in jobs]
        for job, future in futures:
            try:
                record = future.result()
            except Exception as exc:
                record = {"asset": job.asset, "fraction": job.fraction, "commit": job.commit,
                          "error": repr(exc)}
            records.append(record)
            report["runs"] = records
            path.write_text(json.dumps(report, indent=2))
            status = ("FAILED " + record["error"][-300:]) if "error" in record else "done"
            print(f"   {job.label}: {status}", flush=True)
            if "lights" in record:
                print(table.markdown([record]), flush=True)
            write_picture(jobs, job.asset, pictures)
    return records


def print_summary(records: list[dict], stats: dict) -> None:
    print()
    print(table.markdown(records))
    print()
    print(table.albedo_markdown(records))
    print()
    print("\n".join(table.summary_lines(stats)))


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.report:
        report = json.loads(args.report.read_text())
        print(f"{report['command']}\ncommit {report['commit']}, {report['date']}")
        print_summary(report.get("runs", []), table.summary(report.get("runs", [])))
        return 0
    jobs = jobs_for(args)
    args.out.mkdir(parents=True, exist_ok=True)
    started = datetime.datetime.now(datetime.UTC)
    print(f"bench_bake_peer: {', '.join(args.assets)} at "
          f"{', '.join(f'{100 * b:g} %' for b in args.budgets)}, {args.res} px, {args.views} "
          f"views + {args.holdout} held out, Cycles {args.samples} spp (judged at "
          f"{args.judge_samples}, seed {args.judge_seed}), textures "
          f"{args.texture_res}, diffrec {args.preset}"
          + (f" {args.iterations} iterations" if args.iterations else ""), flush=True)
    report = {"command": shlex.join(["python", "scripts/bench_bake_peer.py",
                                     *(sys.argv[1:] if argv is None else argv)]),
              "commit": jobs[0].commit, "date": started.strftime("%Y-%m-%d %H:%M UTC"),
              "machine": machine(),
              "settings": {key: (str(value) if isinstance(value, Path) else value)
                           for key, value in vars(args).items()}}
    clock = time.monotonic()
    path = args.out / "bench_bake_peer.json"
    records = run_all(jobs, report, path, args.pictures)
    report["summary"] = table.summary(records)
    report["total_s"] = round(time.monotonic() - clock, 1)
    path.write_text(json.dumps(report, indent=2))
    print_summary(records, report["summary"])
    print(f"\ntotal {report['total_s']:.0f} s; every figure in {path}")
    return 1 if any("error" in record for record in records) else 0


if __name__ == "__main__":
    sys.exit(main())
