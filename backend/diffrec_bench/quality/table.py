"""The benchmark's summary: one Markdown table over the scenes' records (as ``run.run_scene``
returns them), the means, and issue 12's targets checked against them; with relit records
(``--relight``), a second table and issue 25's relighting targets."""

from __future__ import annotations

import numpy as np

from .light_level import RELATIVE_ERROR

COLUMNS = ("scene", "mode", "PSNR dB", "object PSNR dB", "SSIM", "IoU", "Chamfer-L1 %",
           "normal cons.", "pieces / genus (true)", "triangles", "optimize s", "CPU s",
           "peak MiB", "albedo RMSE / rel.")

# issue 12's targets, on the preview preset (judged by Cycles, whole image over black)
TARGETS = {
    "reconstruct": {"psnr_mean": 26.0, "psnr_min": 23.0, "iou_min": 0.97, "chamfer_max": 0.01,
                    "seconds_max": 300.0},
    "materials": {"psnr_mean": 30.0, "seconds_max": 120.0},
}

# issue 25's relighting targets: mean over the two other HDRIs, no scene's HDRI mean more than
# this far below its fitted-light PSNR, mean under the sun (dB, whole image over black)
RELIT_TARGETS = {"relit_hdri_psnr_mean": 28.0, "relit_drop_max": 3.0,
                 "relit_sun_psnr_mean": 25.0}
RELIT_COLUMNS = ("scene", "mode", "fitted PSNR dB", "relit 1: PSNR / SSIM",
                 "relit 2: PSNR / SSIM", "sun: PSNR / SSIM", "HDRI drop dB",
                 "drop beyond light level dB",
                 "albedo RMSE raw / fitted", "albedo rel. / at shading scale",
                 "albedo scale R G B")


def relit_figures(record: dict) -> dict:
    """A relit record's headline: mean PSNR over its HDRIs, ``drop`` = fitted-light PSNR
    minus that, mean PSNR under its sun(s), and (records that carry ``expected_drop``,
    ``light_level.expected_drop``) ``beyond_light`` = the drop less what the lights'
    brightness alone gives; else None."""
    relit = record["relit"]
    lights = relit["lights"].values()
    hdri = [light["psnr_mean"] for light in lights if light["light"]["kind"] == "hdri"]
    sun = [light["psnr_mean"] for light in lights if light["light"]["kind"] == "sun"]
    drop = record["cycles"]["psnr_mean"] - float(np.mean(hdri))
    expected = relit.get("expected_drop")
    return {"hdri_psnr": float(np.mean(hdri)), "sun_psnr": float(np.mean(sun)), "drop": drop,
            "beyond_light": None if expected is None else drop - expected}


def _topology(geometry: dict) -> str:
    result, truth = geometry["result_topology"], geometry["true_topology"]

    def text(topology):
        genus = "open" if topology["genus"] is None else topology["genus"]
        return f"{topology['components']} / {genus}"

    return f"{text(result)} ({text(truth)})"


def row(record: dict) -> list[str]:
    if "error" in record:
        return [record["scene"], record["mode"], "failed", *[""] * (len(COLUMNS) - 3)]
    cycles, geometry = record["cycles"], record["geometry"]
    return [record["scene"], record["mode"], f"{cycles['psnr_mean']:.2f}",
            f"{cycles['psnr_object_mean']:.2f}", f"{cycles['ssim_mean']:.3f}",
            f"{cycles['iou_mean']:.3f}", f"{100 * geometry['chamfer_l1']:.3f}",
            f"{geometry['normal_consistency']:.3f}", _topology(geometry),
            f"{geometry['triangles']:,}",
            *(_figure(record["optimize"], key) for key in ("wall_s", "cpu_s", "peak_mib")),
            _albedo(record)]


def _figure(figures: dict, key: str) -> str:
    """A whole-number figure, or "-" where it was not measured (a fit run elsewhere)."""
    return f"{figures[key]:.0f}" if key in figures else "-"


def _albedo(record: dict) -> str:
    """The base-colour error (``--albedo`` or ``--relight``): fitted RMSE / relative."""
    if "albedo" not in record:
        return "-"
    return f"{record['albedo']['rmse']:.4f} / {record['albedo']['relative']:.3f}"


def markdown(records: list[dict]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
    lines += ["| " + " | ".join(row(record)) + " |" for record in records]
    return "\n".join(lines)


def relit_row(record: dict) -> list[str]:
    if "relit" not in record:
        return [record["scene"], record["mode"], "-", *[""] * (len(RELIT_COLUMNS) - 3)]
    lights, albedo = record["relit"]["lights"].values(), record["relit"]["albedo"]
    cells = [f"{light['light']['name']} {light['psnr_mean']:.2f} / {light['ssim_mean']:.3f}"
             for light in lights]
    figures = relit_figures(record)
    beyond = "-" if figures["beyond_light"] is None else f"{figures['beyond_light']:.2f}"
    return [record["scene"], record["mode"], f"{record['cycles']['psnr_mean']:.2f}", *cells,
            f"{figures['drop']:.2f}", beyond,
            f"{albedo['rmse_raw']:.4f} / {albedo['rmse']:.4f}", _relative(albedo),
            " ".join(f"{value:.2f}" for value in albedo["scale"])]


def _relative(albedo: dict) -> str:
    """Relative base-colour error, then at the scale of shading (records from before it was
    measured: "-")."""
    shading = albedo.get("relative_shading")
    return f"{albedo['relative']:.3f} / " + ("-" if shading is None else f"{shading:.3f}")


def relit_markdown(records: list[dict]) -> str:
    lines = ["| " + " | ".join(RELIT_COLUMNS) + " |", "|" + " --- |" * len(RELIT_COLUMNS)]
    lines += ["| " + " | ".join(relit_row(record)) + " |" for record in records
              if "error" not in record]
    return "\n".join(lines)


def _relit_stats(done: list[dict]) -> dict:
    figures = [relit_figures(record) for record in done if "relit" in record]
    if not figures:
        return {}
    beyond = [f["beyond_light"] for f in figures if f["beyond_light"] is not None]
    return {"relit_hdri_psnr_mean": float(np.mean([f["hdri_psnr"] for f in figures])),
            "relit_drop_max": float(max(f["drop"] for f in figures)),
            **({"relit_drop_beyond_light_max": float(max(beyond))} if beyond else {}),
            "relit_sun_psnr_mean": float(np.mean([f["sun_psnr"] for f in figures])),
            "albedo_relative_mean": float(np.mean([r["relit"]["albedo"]["relative"]
                                                   for r in done if "relit" in r]))}


def summary(records: list[dict]) -> dict:
    """Per mode: scene count, failures, mean / min PSNR, min IoU, max Chamfer-L1, max optimize
    seconds, scenes whose topology differs from the truth, with relit records the relit
    means (``_relit_stats``), and each target of ``TARGETS`` (and ``RELIT_TARGETS``) as
    {target, value, met}."""
    out = {}
    for mode in dict.fromkeys(record["mode"] for record in records):
        done = [r for r in records if r["mode"] == mode and "error" not in r]
        stats = {"scenes": sum(r["mode"] == mode for r in records),
                 "failed": [r["scene"] for r in records if r["mode"] == mode and "error" in r]}
        if done:
            psnr = [r["cycles"]["psnr_mean"] for r in done]
            stats.update(
                psnr_mean=float(np.mean(psnr)), psnr_min=float(np.min(psnr)),
                psnr_object_mean=float(np.mean([r["cycles"]["psnr_object_mean"] for r in done])),
                iou_min=float(min(r["cycles"]["iou_mean"] for r in done)),
                chamfer_max=float(max(r["geometry"]["chamfer_l1"] for r in done)),
                seconds_max=float(max(r["optimize"]["wall_s"] for r in done)),
                topology_differs=[r["scene"] for r in done if r["geometry"]["result_topology"]
                                  != r["geometry"]["true_topology"]])
            relit = _relit_stats(done)
            stats.update(relit)
            targets = {**TARGETS.get(mode, {}), **(RELIT_TARGETS if relit else {})}
            stats["targets"] = {
                key: {"target": target, "value": stats[key],
                      "met": stats[key] <= target if key.endswith("_max") else
                      stats[key] >= target}
                for key, target in targets.items()}
        out[mode] = stats
    return out


def summary_lines(stats: dict) -> list[str]:
    lines = []
    for mode, values in stats.items():
        if "psnr_mean" not in values:
            lines.append(f"{mode}: every scene failed ({', '.join(values['failed'])})")
            continue
        lines.append(
            f"{mode}: {values['scenes']} scenes, mean PSNR {values['psnr_mean']:.2f} dB (min "
            f"{values['psnr_min']:.2f}, object pixels {values['psnr_object_mean']:.2f}), min IoU "
            f"{values['iou_min']:.3f}, max Chamfer-L1 {100 * values['chamfer_max']:.3f} %, max "
            f"optimize {values['seconds_max']:.0f} s; topology differs: "
            f"{', '.join(values['topology_differs']) or 'none'}; failed: "
            f"{', '.join(values['failed']) or 'none'}")
        if "relit_drop_beyond_light_max" in values:
            lines.append(f"   relit drop beyond the light level (the drop a uniform "
                         f"{100 * RELATIVE_ERROR:.0f} % colour error shows taken off): max "
                         f"{values['relit_drop_beyond_light_max']:.2f} dB")
        for key, target in values["targets"].items():
            verdict = "met" if target["met"] else "MISSED"
            value, goal = target["value"], target["target"]
            if key == "chamfer_max":
                value, goal = f"{100 * value:.3f} %", f"{100 * goal:.1f} %"
            else:
                value, goal = f"{value:.3f}", f"{goal:g}"
            lines.append(f"   target {key}: {value} against {goal}: {verdict}")
    return lines
