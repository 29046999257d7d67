"""``diffrec poses``: find the cameras of a folder of photos that has none (COLMAP through
pycolmap), written as a COLMAP model that ``diffrec optimize --dataset`` then reads."""

from __future__ import annotations

from pathlib import Path

NAME = "poses"
HELP = ("find the cameras of the photos in FOLDER/images/ with COLMAP (pycolmap) and write them "
        "to FOLDER/sparse/0/, so that FOLDER can be given to optimize --dataset")


def add_arguments(parser) -> None:
    from diffrec.pipeline.find_poses import EXHAUSTIVE_LIMIT, MATCHERS

    parser.add_argument("folder", type=Path, help="the folder whose images/ holds the photos")
    parser.add_argument("--max-image-size", type=int, default=1600, metavar="PX",
                        help="read the photos at most this large (longer side) for features "
                             "(default: 1600)")
    parser.add_argument("--max-features", type=int, default=8192, metavar="N",
                        help="SIFT features per photo (default: 8192)")
    parser.add_argument("--matcher", choices=MATCHERS, default="auto",
                        help="exhaustive: every pair of photos; sequential: each photo with its "
                             "next ones in name order (for many photos taken in order); auto: "
                             f"exhaustive up to {EXHAUSTIVE_LIMIT} photos (default)")
    parser.add_argument("--seed", type=int, default=0, help="COLMAP's random seed (default: 0)")
    parser.add_argument("--matching-threads", type=int, default=-1, metavar="N",
                        help="COLMAP's matching threads (default: -1, every core); 1: the same "
                             "photos give the same cameras every run, matching takes longer")


def run(args) -> int:
    from diffrec.pipeline.find_poses import find_poses

    found = find_poses(args.folder, max_image_size=args.max_image_size,
                       max_features=args.max_features, matcher=args.matcher, seed=args.seed,
                       matching_threads=args.matching_threads)
    print(f"{found.model}: poses for {found.registered} of {found.photos} photos, "
          f"{found.points} points, mean reprojection error {found.reprojection_px:.2f} px")
    if found.unregistered:
        print(f"left out (no pose): {', '.join(found.unregistered)}")
    print(f"next: diffrec optimize --mode reconstruct --dataset {args.folder}")
    return 0
