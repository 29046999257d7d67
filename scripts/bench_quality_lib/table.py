"""The benchmark's summary: one Markdown table over the scenes' records (as ``run.run_scene``
returns them), the means, and issue 12's targets checked against them."""

from __future__ import annotations

import numpy as np

COLUMNS = ("scene", "mode", "PSNR dB", "object PSNR dB", "SSIM", "IoU", "Chamfer-L1 %",
           "normal cons.", "pieces / genus (true)", "triangles", "optimize s", "CPU s",
           "peak MiB")

# issue 12's targets, on the preview preset (judged by Cycles, whole image over black)
TARGETS = {
    "reconstruct": {"psnr_mean": 26.0, "psnr_min": 23.0, "iou_min": 0.97, "chamfer_max": 0.01,
                    "seconds_max": 300.0},
    "materials": {"psnr_mean": 30.0, "seconds_max": 120.0},
}


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
            f"{geometry['triangles']:,}", f"{record['optimize']['wall_s']:.0f}",
            f"{record['optimize']['cpu_s']:.0f}", f"{record['optimize']['peak_mib']:.0f}"]


def markdown(records: list[dict]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
    lines += ["| " + " | ".join(row(record)) + " |" for record in records]
    return "\n".join(lines)


def summary(records: list[dict]) -> dict:
    """Per mode: scene count, failures, mean / min PSNR, min IoU, max Chamfer-L1, max optimize
    seconds, scenes whose topology differs from the truth, and each target of ``TARGETS``
    as {target, value, met}."""
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
            stats["targets"] = {
                key: {"target": target, "value": stats[key],
                      "met": stats[key] <= target if key.endswith("_max") else
                      stats[key] >= target}
                for key, target in TARGETS.get(mode, {}).items()}
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
        for key, target in values["targets"].items():
            verdict = "met" if target["met"] else "MISSED"
            value, goal = target["value"], target["target"]
            if key == "chamfer_max":
                value, goal = f"{100 * value:.3f} %", f"{100 * goal:.1f} %"
            else:
                value, goal = f"{value:.3f}", f"{goal:g}"
            lines.append(f"   target {key}: {value} against {goal}: {verdict}")
    return lines
