"""The peer benchmark's summary (plain data, no bpy): one Markdown row per asset, budget and
light over the records ``routes.run_budget`` returns, and issue 50's targets checked against
them."""

from __future__ import annotations

import numpy as np

COLUMNS = ("asset", "budget", "light", "truth again (noise ceiling)", "baseline: own material",
           "Blender bake", "diffrec", "diffrec - bake dB", "triangles start / diffrec",
           "bake s", "diffrec s (bake + fit)", "commit (of the fit)")
CELL = "PSNR / SSIM / IoU"

# issue 50's targets: diffrec's PSNR minus the bake's, mean over the assets under the fitted
# light, per budget (dB); diffrec's whole route at most this many times the bake's time
FITTED_GAIN = {0.01: 1.5, 0.05: 1.0}
TIME_RATIO_MAX = 3.0


def _cell(scores: dict | None) -> str:
    if scores is None:
        return "-"
    return f"{scores['psnr_mean']:.2f} / {scores['ssim_mean']:.3f} / {scores['iou_mean']:.4f}"


def _light_label(light: dict) -> str:
    return f"{light['name']} ({light['role']})"


def _scores(record: dict, route: str, light: str) -> dict | None:
    routes = record.get("routes", {})
    return routes[route]["lights"][light] if route in routes else None


def _commit(revision: str) -> str:
    """A commit as the table shows it: 9 hex digits, ``+dirty`` kept."""
    return revision[:9] + ("+dirty" if revision.endswith("+dirty") else "")


def rows(record: dict) -> list[list[str]]:
    """One row per judging light of ``record``."""
    budget = f"{100 * record['fraction']:g} % ({record['budget']:,})"
    routes = record.get("routes", {})
    triangles = " / ".join(f"{routes[r]['triangles']:,}" if r in routes else "-"
                           for r in ("bake", "diffrec"))
    seconds = record["time_s"]
    out = []
    for light in record["lights"]:
        name = light["name"]
        bake, fit = _scores(record, "bake", name), _scores(record, "diffrec", name)
        gain = f"{fit['psnr_mean'] - bake['psnr_mean']:+.2f}" if bake and fit else "-"
        out.append([record["asset"], budget, _light_label(light), _cell(record["ceiling"][name]),
                    _cell(_scores(record, "baseline", name)), _cell(bake), _cell(fit), gain,
                    triangles, f"{seconds['blender_route']:.0f}",
                    f"{seconds['diffrec_route']:.0f}" if fit else "failed",
                    _commit(record.get("commit_at_fit", record["commit"]))])
    return out


def markdown(records: list[dict]) -> str:
    lines = [f"Cells: {CELL} (held-out views, Cycles, whole image over black).", "",
             "| " + " | ".join(COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
    lines += ["| " + " | ".join(row) + " |" for record in records if "lights" in record
              for row in rows(record)]
    return "\n".join(lines)


def albedo_markdown(records: list[dict]) -> str:
    """Each run's base colour against the reference's (``relight``'s albedo error: RMSE after
    the best per-channel scale, and relative), per route."""
    routes = ("baseline", "bake", "diffrec")
    lines = ["| asset | budget | " + " | ".join(f"{r}: RMSE / rel." for r in routes) + " |",
             "|" + " --- |" * (2 + len(routes))]
    for record in records:
        if "routes" not in record:
            continue
        cells = [f"{record['routes'][r]['albedo']['rmse']:.4f} / "
                 f"{record['routes'][r]['albedo']['relative']:.3f}"
                 if r in record["routes"] else "-" for r in routes]
        lines.append(f"| {record['asset']} | {100 * record['fraction']:g} % | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines)


def summary(records: list[dict]) -> dict:
    """Per budget: diffrec's PSNR gain over the bake, mean over assets under the fitted light,
    the worst under any light, IoU at or above the bake's everywhere, the worst ratio of
    route times; each checked against issue 50's target."""
    out = {}
    done = [r for r in records if "diffrec" in r.get("routes", {})]
    for fraction in sorted({r["fraction"] for r in done}):
        runs = [r for r in done if r["fraction"] == fraction]

        def gains(roles, runs=runs):
            return [_scores(r, "diffrec", light["name"])["psnr_mean"]
                    - _scores(r, "bake", light["name"])["psnr_mean"]
                    for r in runs for light in r["lights"] if light["role"] in roles]

        fitted, anywhere = gains(("fitted",)), gains(("fitted", "other", "sun"))
        iou = [_scores(r, "diffrec", light["name"])["iou_mean"]
               - _scores(r, "bake", light["name"])["iou_mean"]
               for r in runs for light in r["lights"]]
        ratio = max(r["time_s"]["diffrec_route"] / r["time_s"]["blender_route"] for r in runs)
        stats = {"runs": len(runs), "fitted_gain_mean": float(np.mean(fitted)) if fitted else None,
                 "gain_min": float(min(anywhere)), "iou_gain_min": float(min(iou)),
                 "time_ratio_max": float(ratio)}
        stats["targets"] = {
            "fitted_gain_mean": {"target": FITTED_GAIN.get(fraction, 0.0),
                                 "met": fitted != [] and stats["fitted_gain_mean"]
                                 >= FITTED_GAIN.get(fraction, 0.0)},
            "gain_min": {"target": 0.0, "met": stats["gain_min"] >= 0.0},
            "iou_gain_min": {"target": 0.0, "met": stats["iou_gain_min"] >= 0.0},
            "time_ratio_max": {"target": TIME_RATIO_MAX, "met": ratio <= TIME_RATIO_MAX}}
        out[f"{100 * fraction:g} %"] = stats
    return out


def summary_lines(stats: dict) -> list[str]:
    lines = []
    for budget, values in stats.items():
        fitted = values["fitted_gain_mean"]
        lines.append(
            f"budget {budget} ({values['runs']} assets): diffrec - bake "
            f"{'-' if fitted is None else f'{fitted:+.2f}'} dB mean under the fitted light, "
            f"{values['gain_min']:+.2f} dB at worst under any light; IoU diffrec - bake "
            f"{values['iou_gain_min']:+.4f} at worst; diffrec's route at most "
            f"{values['time_ratio_max']:.1f}x the bake's time")
        for key, target in values["targets"].items():
            lines.append(f"   target {key} {target['target']:g}: "
                         f"{'met' if target['met'] else 'MISSED'}")
    return lines
