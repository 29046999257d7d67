"""What one run of the peer benchmark does (plain data, no bpy)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..quality.judging import JUDGE_SEED
from .lights import ROLES, judging_lights


@dataclass(frozen=True)
class PeerJob:
    """One asset at one budget. ``size``: pixels of every image (targets, training,
    judging); ``views`` / ``holdout``: training and held-out cameras; ``samples``: Cycles
    samples of the training targets (and of the start rendered for diffrec);
    ``judge_samples``: of the held-out truth, its noise ceiling and the judging renders (a
    judge's noise ceiling rises about 6 dB per four times the samples: at 16 a bake sits at
    it, and gains over the bake do not show); ``judge_seed``: Cycles' seed of the judging
    renders alone (the bake, the truth and its ceiling keep theirs: runs that differ in it
    alone measure the judge's own spread); ``texture_res``: both routes' textures;
    ``bake_samples``: Cycles samples per bake; ``preset`` / ``iterations`` (None: the
    preset's) / ``mode`` / ``settings`` (more ``optimize`` settings, (name, value) pairs):
    diffrec's; ``roles``: the judging lights (``lights.ROLES``); ``threads``: the
    optimize child's torch threads (None: torch's default); ``commit``: the checkout's;
    ``start_renders``: diffrec is given the start rendered by Cycles from the training
    cameras (``diffrec optimize --start-renders``)."""

    asset: str
    fraction: float
    out: Path
    cache: Path
    size: int = 128
    views: int = 24
    holdout: int = 8
    samples: int = 16
    judge_samples: int = 64
    judge_seed: int = JUDGE_SEED
    texture_res: int = 512
    bake_samples: int = 16
    preset: str = "preview"
    iterations: int | None = None
    roles: tuple[str, ...] = ROLES
    threads: int | None = None
    device: str | None = None
    commit: str = ""
    mode: str = "refine"
    settings: tuple[tuple[str, object], ...] = ()
    start_renders: bool = True

    def lights(self) -> list[dict]:
        return judging_lights(self.asset, self.roles)

    @property
    def label(self) -> str:
        """``<asset>-<percent>pc``, e.g. ``sculpt-1pc``: the run's folder name."""
        return f"{self.asset}-{100 * self.fraction:g}pc"


def checkout_commit(repo: Path) -> str:
    """``repo``'s HEAD commit, with ``+dirty`` when tracked files differ from it (other work
    in the tree: what a child process started now runs is not exactly that commit)."""
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                          cwd=repo).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True, cwd=repo).stdout.strip()
    return head + ("+dirty" if dirty else "")
