"""Finite-difference verdicts for the rows where the torch engine and nvdiffrast disagree
(issue 28, item 3): each engine's gradient is checked against central differences of its own
forward pass, on the same inputs, so the table says which engine is right rather than only
that they differ.

- **antialias, position gradient.** A welded UV sphere in two poses, 128 px, nvdiffrast's
  rasterization held fixed, a constant colour per triangle and a random weight per pixel:
  ``L = sum(antialias(color, rast, pos, tri) * weight)``. Every clip-space coordinate that
  either engine gives a gradient (the silhouette vertices, up to ``--coordinates`` of them) is
  moved by a thousandth of a pixel each way; each pixel pair's blend moves with it, and the
  difference of the two images (taken before summing, so float32 rounding of the sum does not
  swamp it) gives ``dL/dpos``. A coordinate whose difference changes by more than 5 % when the
  step is doubled sits on a jump of that engine's forward pass (a blend that switches pixel
  pairs): it is counted as such and left out of the comparison. The torch engine is checked
  twice: as the optimiser runs it (walking across front-facing neighbours to the silhouette
  edge) and with the walk off (nvdiffrast's rule: the inside pixel's own triangle only).
- **antialias, against a box filter.** A vertical silhouette edge and one slanted by half a
  pixel per row, for which box-filter coverage is known exactly (``edge_rows``): each
  engine's forward slope and gradient.
- **texture, texel gradient.** ``linear-mipmap-linear`` lookups with the parity test's inputs,
  boundary ``zero`` and ``cube`` (``wrap`` as a control), and ``linear-mipmap-nearest`` with
  ``zero``. A lookup is linear in the texels,
  so ``<grad_out, f(tex + e_i) - f(tex)>`` with a unit step is the exact ``dL/dtex_i`` up to
  rounding; checked on every texel where the engines' gradients disagree and on a random
  sample of the others.
- **texture, values** (``cube``): where the engines' float32 values disagree, which of them
  the torch engine's float64 evaluation of the same lookup agrees with.

Prints one markdown table (the relative L2 error of each gradient against the differences
over the checked elements, the share within 5 %, and the median ratio gradient / difference,
which names a convention that differs by a scale); ``--json`` appends the rows as JSON lines.
Without nvdiffrast (or without CUDA, ``--device cpu``) only the torch engine's rows are made.

    scripts/gpu_fd_verdict.py [--device cuda] [--coordinates 400] [--json FILE] [--dump FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import math
import sys
from pathlib import Path

import torch

from diffrec import raster
from diffrec.mesh.primitives import uv_sphere

torch_antialias = importlib.import_module("diffrec.raster._torch.antialias")
STEP_PIXELS = 0.001  # the antialias difference step, in pixels (float32 inputs)
TEXTURE_TOLERANCE = 1e-3  # |a - b| <= tol * (1 + max |b|): the parity test's texel rule


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--coordinates", type=int, default=400,
                        help="antialias: clip-space coordinates checked (default 400)")
    parser.add_argument("--texels", type=int, default=200,
                        help="texture: agreeing texels sampled beside the disagreeing ones")
    parser.add_argument("--json", type=Path, help="append the rows here as JSON lines")
    parser.add_argument("--dump", type=Path, help="write the antialias figures (coordinates, "
                                                  "gradients, differences, images) to this .npz")
    return parser.parse_args(argv)


def engines(device: str) -> list[str]:
    """The engines to check: the torch engine always, nvdiffrast where it runs."""
    names = ["torch"]
    if device.startswith("cuda") and raster.RASTER.module() is not None:
        names.append("nvdiffrast")
    return names


@contextlib.contextmanager
def walk_steps(steps: int):
    """The torch antialias's walk across front-facing neighbours, set to ``steps``."""
    saved = torch_antialias.WALK_STEPS
    torch_antialias.WALK_STEPS = steps
    try:
        yield
    finally:
        torch_antialias.WALK_STEPS = saved


def verdict(check: str, engine: str, gradient: torch.Tensor, differences: torch.Tensor) -> dict:
    """One row: ``gradient`` against ``differences`` over the same elements (float64)."""
    gradient, differences = gradient.double().cpu(), differences.double().cpu()
    scale = differences.abs().max().clamp_min(1e-12)
    error = (gradient - differences).abs()
    significant = differences.abs() > 1e-3 * scale
    ratios = gradient[significant] / differences[significant]
    return {"check": check, "engine": engine, "elements": int(differences.numel()),
            "relative_l2": float((gradient - differences).norm() / differences.norm()
                                 .clamp_min(1e-12)),
            "within_5pct": float((error <= 0.05 * differences.abs() + 1e-3 * scale)
                                 .double().mean()),
            "median_ratio": float(ratios.median()) if ratios.numel() else math.nan}


# --- antialias -----------------------------------------------------------------------------


def sphere_scene(device: str, size: int = 128):
    """Clip positions ``[2, V, 4]`` of a welded UV sphere in two poses, its triangles, and
    nvdiffrast's (else the torch engine's) rasterization at ``size`` px."""
    mesh = uv_sphere(segments=48, rings=24)
    poses = []
    for angle in (0.3, 1.2):
        ca, sa = math.cos(angle), math.sin(angle)
        cb, sb = math.cos(0.7 * angle), math.sin(0.7 * angle)
        turn = (torch.tensor([[1, 0, 0], [0, cb, -sb], [0, sb, cb]], dtype=torch.float64)
                @ torch.tensor([[ca, 0, sa], [0, 1, 0], [-sa, 0, ca]], dtype=torch.float64))
        p = mesh.positions.double() @ turn.T
        depth = 3.0 - p[:, 2]
        near, far = 0.5, 10.0
        z = depth * (far + near) / (far - near) - 2 * far * near / (far - near)
        poses.append(torch.stack((2 * p[:, 0], 2 * p[:, 1], z, depth), -1))
    pos = torch.stack(poses).float().to(device).contiguous()
    tri = mesh.triangles.to(device=device, dtype=torch.int32).contiguous()
    ctx = raster.RasterContext(device, impl=engines(device)[-1])
    rast, _ = raster.rasterize(ctx, pos, tri, (size, size))
    return pos, tri, rast, size


def antialias_rows(device: str, coordinates: int, dump: Path | None = None) -> list[dict]:
    """The antialias rows; with nvdiffrast also each torch variant's gradient against
    nvdiffrast's differences (where the two engines' forward passes differ in their slope,
    both can be right and still disagree). ``dump``: an .npz of every figure behind them."""
    pos, tri, rast, size = sphere_scene(device)
    gen = torch.Generator().manual_seed(3)
    table = torch.rand(len(tri) + 1, 3, generator=gen)
    table[0] = 0
    color = table.to(device)[rast[..., 3].long()]
    weight = torch.rand(color.shape, generator=gen).to(device)
    variants = {"torch (walk, as optimised)": ("torch", torch_antialias.WALK_STEPS),
                "torch (walk off)": ("torch", 0)}
    if "nvdiffrast" in engines(device):
        variants["nvdiffrast"] = ("nvdiffrast", 0)

    def forward(name, p):
        engine, steps = variants[name]
        with walk_steps(steps):
            return raster.antialias(color, rast, p, tri,
                                    ctx=raster.RasterContext(device, impl=engine))

    gradients = {}
    for name in variants:
        p = pos.clone().requires_grad_(True)
        (forward(name, p) * weight).sum().backward()
        gradients[name] = p.grad
    touched = torch.stack([g.abs() > 0 for g in gradients.values()]).any(0)
    touched[..., 2] = False  # depth plays no part in antialiasing
    chosen = touched.nonzero()
    chosen = chosen[torch.randperm(len(chosen), generator=gen)[:coordinates]]
    pixel = 2 * pos[..., 3] / size  # a pixel's width in clip units, per vertex
    rows = []

    def differences(name, pixels):
        """Central differences of ``name``'s loss at each chosen coordinate, step ``pixels``."""
        result = []
        for b, v, c in chosen.tolist():
            step = pixels * pixel[b, v].item()
            plus, minus = pos.clone(), pos.clone()
            plus[b, v, c] += step
            minus[b, v, c] -= step
            change = (forward(name, plus) - forward(name, minus)).double() * weight
            result.append(change.sum().item() / (2 * step))
        return torch.tensor(result, dtype=torch.float64)

    fine, smooth, arrays = {}, {}, {"chosen": chosen.cpu().numpy()}
    for name, gradient in gradients.items():
        fine[name], coarse = differences(name, STEP_PIXELS), differences(name, 2 * STEP_PIXELS)
        # a coordinate whose two differences disagree sits on a jump of the forward pass
        smooth[name] = ((fine[name] - coarse).abs()
                        <= 0.05 * fine[name].abs() + 1e-3 * fine[name].abs().max())
        row = verdict("antialias d/dpos", name,
                      gradient[tuple(chosen.T)][smooth[name].to(device)], fine[name][smooth[name]])
        row["forward_jumps"] = int((~smooth[name]).sum())
        rows.append(row)
        arrays.update({f"{name}: gradient": gradient[tuple(chosen.T)].cpu().numpy(),
                       f"{name}: differences": fine[name].numpy(),
                       f"{name}: image": forward(name, pos).cpu().numpy()})
    if "nvdiffrast" in variants:
        for name in gradients:
            if name == "nvdiffrast":
                continue
            both = smooth[name] & smooth["nvdiffrast"]
            rows.append(verdict("antialias d/dpos against nvdiffrast's differences", name,
                                gradients[name][tuple(chosen.T)][both.to(device)],
                                fine["nvdiffrast"][both]))
    if dump:
        import numpy as np

        np.savez_compressed(dump, rast=rast.cpu().numpy(), pos=pos.cpu().numpy(),
                            weight=weight.cpu().numpy(), **arrays)
    return rows


EDGE_PX = 20.3  # the edge of ``edge_rows`` at the image's middle row, pixels from the left
EDGE_SLANTS = {"vertical edge": 0.0, "edge slanted 1 px in 2 rows": 0.5}  # x pixels per row


def edge_rows(device: str, size: int = 32) -> list[dict]:
    """The independent answer: a triangle whose right edge crosses the middle row at x =
    EDGE_PX (pixels), vertical or slanted (``EDGE_SLANTS``), covering everything left of it. A
    box filter gives each row's covered area, summed over the row, as the edge's x on that row,
    so moving the edge sideways by d pixels moves every row's sum by d: slope 1, whatever the
    slant. Each engine's forward slope (central differences of 0.01 pixel, rasterization held
    fixed) and its gradient are checked against it on the 16 rows away from the vertices."""
    rows = []
    for name, slant in EDGE_SLANTS.items():
        rows += _edge_rows(device, size, name, slant)
    return rows


def _edge_rows(device: str, size: int, name: str, slant: float) -> list[dict]:
    w = torch.tensor([1.0, 2.0, 1.5], dtype=torch.float64)

    def clip(shift_px: float) -> torch.Tensor:
        ends = []
        for y in (-3.0, 3.0):  # the edge's ends, in clip space far above and below the image
            x_px = EDGE_PX + shift_px + slant * (y + 1) / 2 * size - slant * size / 2
            ends.append([2 * x_px / size - 1, y])
        xy = torch.tensor([*ends, [-3.0, 0.1]], dtype=torch.float64)
        return torch.cat([xy * w[:, None], 0.5 * w[:, None], w[:, None]], -1)[None].float() \
            .to(device).contiguous()

    tri = torch.tensor([[0, 1, 2]], dtype=torch.int32, device=device)
    rast, _ = raster.rasterize(raster.RasterContext(device, impl=engines(device)[-1]), clip(0),
                               tri, (size, size))
    color = (rast[..., 3:] > 0).float().contiguous()
    ones = torch.ones(16, dtype=torch.float64)
    rows = []
    for engine in engines(device):
        with walk_steps(0):
            def row_sums(pos, engine=engine):
                out = raster.antialias(color, rast, pos, tri,
                                       ctx=raster.RasterContext(device, impl=engine))
                return out[0, 8:24, :, 0].double().sum(-1)

            step = 0.01
            slopes = (row_sums(clip(step)) - row_sums(clip(-step))) / (2 * step)
            pos = clip(0).requires_grad_(True)
            (grad,) = torch.autograd.grad(row_sums(pos).sum(), pos)
        # d(clip x of the edge's two vertices)/d(shift in pixels) = 2 w / size
        analytic = (grad[0, :2, 0].double().cpu() * 2 * w[:2] / size).sum() / 16
        rows.append(verdict(f"antialias {name}: forward slope per row (box filter 1)",
                            engine, slopes.cpu(), ones))
        rows.append(verdict(f"antialias {name}: gradient per row (box filter 1)", engine,
                            analytic * ones, ones))
    return rows


# --- texture -------------------------------------------------------------------------------


def texture_inputs(boundary: str, device: str, dtype=torch.float32):
    """The parity test's inputs (seed 1): texture, lookups, derivatives, bias, output weight."""
    gen = torch.Generator().manual_seed(1)
    if boundary == "cube":
        tex = torch.rand(2, 6, 32, 32, 3, generator=gen)
        uv = torch.randn(2, 48, 40, 3, generator=gen)
        uv_da = torch.randn(2, 48, 40, 6, generator=gen) * 0.05
    else:
        tex = torch.rand(2, 64, 32, 3, generator=gen)
        uv = torch.rand(2, 48, 40, 2, generator=gen) * 1.6 - 0.3
        uv_da = torch.randn(2, 48, 40, 4, generator=gen) * 0.04
    bias = torch.randn(2, 48, 40, generator=gen) * 0.5
    grad_out = torch.randn(2, 48, 40, 3, generator=gen)
    return [t.to(device=device, dtype=dtype) for t in (tex, uv, uv_da, bias, grad_out)]


def lookup(engine: str, tex, uv, uv_da, bias, boundary: str,
           mode: str = "linear-mipmap-linear") -> torch.Tensor:
    return raster.texture(tex, uv, uv_da, bias, filter_mode=mode, boundary_mode=boundary,
                          ctx=raster.RasterContext(tex.device, impl=engine))


def texel_rows(mode: str, boundary: str, device: str, texels: int) -> list[dict]:
    tex, uv, uv_da, bias, grad_out = texture_inputs(boundary, device)
    gradients = {}
    for engine in engines(device):
        t = tex.clone().requires_grad_(True)
        lookup(engine, t, uv, uv_da, bias, boundary, mode).backward(grad_out)
        gradients[engine] = t.grad
    flat = {engine: g.reshape(-1) for engine, g in gradients.items()}
    if len(flat) == 2:
        scale = 1 + flat["nvdiffrast"].abs().max()
        disagree = ((flat["torch"] - flat["nvdiffrast"]).abs() > TEXTURE_TOLERANCE * scale)
    else:
        disagree = torch.zeros_like(flat["torch"], dtype=torch.bool)
    gen = torch.Generator().manual_seed(5)
    others = (~disagree).nonzero().squeeze(1).cpu()
    chosen = torch.cat([disagree.nonzero().squeeze(1).cpu(),
                        others[torch.randperm(len(others), generator=gen)[:texels]]])
    rows = []
    for engine, gradient in flat.items():
        base = lookup(engine, tex, uv, uv_da, bias, boundary, mode)
        differences = torch.empty(len(chosen), dtype=torch.float64)
        for k, index in enumerate(chosen.tolist()):
            moved = tex.clone().reshape(-1)
            moved[index] += 1.0
            change = lookup(engine, moved.reshape(tex.shape), uv, uv_da, bias, boundary,
                            mode) - base
            differences[k] = (change.double() * grad_out.double()).sum().item()
        row = verdict(f"texture {mode} {boundary} d/dtex", engine,
                      gradient[chosen.to(device)], differences)
        row["disagreeing_texels"] = int(disagree.sum())
        rows.append(row)
    return rows


def cube_value_row(device: str) -> dict | None:
    """Where the two engines' float32 cube lookups disagree: which of them agrees with the
    torch engine's float64 evaluation (None without nvdiffrast)."""
    if "nvdiffrast" not in engines(device):
        return None
    inputs = texture_inputs("cube", device)[:4]
    values = {engine: lookup(engine, *inputs, "cube") for engine in ("torch", "nvdiffrast")}
    exact = lookup("torch", *[t.double() for t in inputs], "cube").float()
    disagree = ((values["torch"] - values["nvdiffrast"]).abs() > 2e-4).any(-1)

    def agrees(engine):
        return int(((values[engine] - exact).abs() <= 2e-4).all(-1)[disagree].sum())

    return {"check": "texture cube values", "engine": "both", "elements": int(disagree.numel()),
            "disagreeing_lookups": int(disagree.sum()), "torch_matches_float64": agrees("torch"),
            "nvdiffrast_matches_float64": agrees("nvdiffrast")}


def markdown(rows: list[dict]) -> str:
    lines = ["| check | engine | elements (left out: forward jumps) | rel. L2 vs FD | within 5 % "
             "| median grad / FD |", "| --- | --- | --- | --- | --- | --- |"]
    for row in rows:
        if "relative_l2" in row:
            jumps = f" ({row['forward_jumps']})" if "forward_jumps" in row else ""
            lines.append(f"| {row['check']} | {row['engine']} | {row['elements']}{jumps} | "
                         f"{row['relative_l2']:.4f} | {100 * row['within_5pct']:.1f} % | "
                         f"{row['median_ratio']:.3f} |")
        else:
            lines.append(f"| {row['check']} | lookups disagreeing: "
                         f"{row['disagreeing_lookups']} of {row['elements']} | torch = float64 on "
                         f"{row['torch_matches_float64']}, nvdiffrast on "
                         f"{row['nvdiffrast_matches_float64']} | | | |")
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    print(f"gpu_fd_verdict: engines {', '.join(engines(args.device))} on {args.device}",
          flush=True)
    rows = edge_rows(args.device) + antialias_rows(args.device, args.coordinates, args.dump)
    for mode, boundary in (("linear-mipmap-linear", "zero"), ("linear-mipmap-linear", "cube"),
                           ("linear-mipmap-linear", "wrap"), ("linear-mipmap-nearest", "zero")):
        rows += texel_rows(mode, boundary, args.device, args.texels)
    value_row = cube_value_row(args.device)
    if value_row:
        rows.append(value_row)
    print(markdown(rows), flush=True)
    if args.json:
        with args.json.open("a") as out:
            for row in rows:
                out.write(json.dumps({"bench": "fd_verdict", "device": args.device, **row}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
