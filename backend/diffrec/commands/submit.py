"""``diffrec submit``: send a job to a server.

The source is what ``diffrec optimize`` reads, made into an ``optimize`` job
(docs/protocol.md, section 8): a dataset folder in any layout ``diffrec optimize --dataset``
reads (NeRF-style, a capture tool's ``transforms.json``, LLFF, COLMAP) or a settings file
(``--config``, with its ``dataset`` or ``ref_mesh`` rendered under ``envmap``, its
``base_mesh`` and ``envmap``), loaded here into the task's arrays, plus the settings flags
``diffrec optimize`` shares. Or it is a job file of ready arrays: ``FOLDER/job.json`` or a
JSON file with a top-level ``spec`` object.
"""

from __future__ import annotations

import logging
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import numpy as np

from diffrec.errors import UserError
from diffrec.pipeline.config import RunConfig
from diffrec.protocol import ProtocolError, ServerError, ServerUnavailable
from diffrec.protocol.captures import CaptureError, clipped, inside
from diffrec.protocol.file_checks import FileCheckError, load_npy, read_json
from diffrec.protocol.settings import FIELDS

from ._connection import add_server_arguments, check_server, connect, refused
from .optimize import add_settings_arguments, missing_files, settings_flags
from .status import print_event, print_link

log = logging.getLogger(__name__)

NAME = "submit"
HELP = ("submit a job to a server: a dataset FOLDER or a settings CONFIG, read as "
        "`diffrec optimize` reads them, is sent as an optimize job (the server holds out some "
        "of the views for validation); FOLDER/job.json, or a JSON file with a 'spec', sends "
        "that job and its .npy inputs")


def add_arguments(parser) -> None:
    parser.add_argument("source", metavar="FOLDER|CONFIG", type=Path,
                        help="a dataset folder (transforms_train.json or transforms.json + "
                             "images, poses_bounds.npy, a COLMAP model), or a .toml "
                             "/ .json settings file as `diffrec optimize --config` reads it "
                             "(its dataset, or ref_mesh rendered under envmap, are the targets); "
                             'or a job file {"spec": {"task": ...}, "inputs": {"images": '
                             '"images.npy"}} (input paths relative to it), or a folder holding '
                             "one as job.json")
    settings = parser.add_argument_group(
        "optimize settings", "for a dataset FOLDER or a CONFIG, overriding its values; they "
        "mean what they mean for `diffrec optimize`")
    add_settings_arguments(settings)
    parser.add_argument("--start-renders", dest="start_renders", metavar="FOLDER",
                        help="sent with the targets in materials and refine: the base mesh "
                             "rendered by the targets' renderer from the target cameras, as "
                             "for `diffrec optimize --start-renders`")
    parser.add_argument("--job", default=None, help="job id (default: a new random id)")
    parser.add_argument("--wait", action="store_true", help="follow the job to its end")
    add_server_arguments(parser)


def load_job(path: Path) -> tuple[dict, dict[str, np.ndarray]]:
    """(spec, {name: array}) from a job file (or ``FOLDER/job.json``)."""
    if path.is_dir():
        path = path / "job.json"
    try:
        config = read_json(path, f"the job file {path}")
    except FileCheckError as exc:
        raise UserError(str(exc)) from None
    if not isinstance(config, dict) or not isinstance(config.get("spec"), dict):
        raise UserError(f"{path} must be a JSON object with a 'spec' object")
    inputs = config.get("inputs", {})
    if not isinstance(inputs, dict) or not all(isinstance(v, str) for v in inputs.values()):
        raise UserError(f"{path}: 'inputs' must map input names to .npy paths relative to it")
    arrays = {}
    for name, relative in inputs.items():
        where = f"{path}, input {name!r}"
        try:
            arrays[name] = load_npy(inside(path.parent, relative, where),
                                    f"{clipped(relative)} (input {name!r} of {path})")
        except (CaptureError, FileCheckError) as exc:
            raise UserError(str(exc)) from None
    return config["spec"], arrays


def source_kind(path: Path) -> str:
    """"job" (a job file, or a folder with job.json), "dataset" (a NeRF-style folder, a
    capture tool's transforms.json, an LLFF capture or a COLMAP model) or "config" (a
    settings file)."""
    from diffrec.pipeline.captures import capture_layout

    if path.is_dir():
        if (path / "job.json").is_file():
            return "job"
        if capture_layout(path) or any(path.glob("transforms*.json")):
            return "dataset"
        raise UserError(f"{path} holds neither job.json (a job file) nor transforms_train.json "
                        "(a NeRF-style dataset) nor transforms.json (nerfstudio, instant-ngp) "
                        "nor poses_bounds.npy (an LLFF capture) nor a COLMAP model (sparse/0/): "
                        "give a folder with one of them, or a settings file")
    if not path.is_file():
        raise UserError(f"{path} does not exist: give a dataset folder, a settings file (.toml "
                        "or .json) or a job file")
    suffix = path.suffix.lower()
    if suffix == ".toml":
        return "config"
    if suffix != ".json":
        raise UserError(f"{path} is neither a folder nor a .toml or .json file: give a dataset "
                        "folder, a settings file or a job file")
    try:
        data = read_json(path)
    except FileCheckError:
        return "config"  # read_config_file reports what is wrong with it
    return "job" if isinstance(data, dict) and isinstance(data.get("spec"), dict) else "config"


def load_submission(source: Path, flags: dict | None = None) -> tuple[dict, dict[str, np.ndarray]]:
    """(spec, {name: array}) for ``source``: a job file as it stands, or an ``optimize`` job
    from a dataset folder or a settings file with the settings ``flags`` (None: not given)."""
    return checked_submission(source, flags)()


def checked_submission(source: Path, flags: dict | None = None
                       ) -> Callable[[], tuple[dict, dict[str, np.ndarray]]]:
    """``source`` and the settings ``flags`` checked as far as they can be without decoding
    images or rendering (a job file is read whole: reading it is its check); then the call
    that loads them, ``load_submission``'s answer."""
    from diffrec.pipeline.config import build_config, read_config_file

    flags = {key: value for key, value in (flags or {}).items() if value is not None}
    kind = source_kind(source)
    if kind == "job":
        if flags:
            given = ", ".join("--" + key.replace("_", "-") for key in flags)
            raise UserError(f"{given}: settings flags apply to a dataset folder or a settings "
                            f"file, not to the job file {source}, whose spec holds its settings")
        job = load_job(source)
        return lambda: job
    file_values = ({"dataset": str(source)} if kind == "dataset"
                   else read_config_file(source, flags.get("preset")))
    values = {**file_values, **flags}
    config = build_config(values)
    check_optimize_job(config, str(source))
    return lambda: optimize_job(config, values)


def check_optimize_job(config: RunConfig, origin: str) -> None:
    """UserError where ``config`` (from ``origin``, for messages) cannot make an ``optimize``
    job: no targets, no start mesh where its mode needs one, no envmap for a fixed light, a
    file or folder it names that is not there (``optimize.missing_files``), a dataset or
    start renders folder whose capture cannot be read (their files read, no image)."""
    from diffrec.pipeline.captures import read_any_capture
    from diffrec.pipeline.inputs import target_folder

    settings, sources = config.settings, config.sources
    if not (sources.dataset or sources.ref_mesh):
        raise UserError(f"{origin} names no target images: set dataset (a NeRF-style folder "
                        "or an LLFF capture) or ref_mesh (a mesh to render under envmap) in it")
    mode = settings.run.mode
    if mode != "reconstruct" and not sources.base_mesh:
        raise UserError(f"mode {mode!r} needs a starting mesh: pass --base-mesh MESH (or "
                        "set base_mesh in a settings file), or use --mode reconstruct")
    if settings.light.mode != "learn" and not sources.envmap:
        raise UserError(f"light {settings.light.mode!r} needs an envmap: pass --envmap HDRI "
                        "(or set envmap in a settings file)")
    if missing := missing_files(config):
        raise UserError("; ".join(missing))
    for folder in (target_folder(sources), sources.start_renders):
        if folder:
            try:
                read_any_capture(folder)
            except CaptureError as error:
                raise UserError(str(error)) from None


def optimize_job(config: RunConfig, values: dict) -> tuple[dict, dict[str, np.ndarray]]:
    """The ``optimize`` job for ``config`` (checked by ``check_optimize_job``), made from the
    settings ``values`` (a config file's, then the flags): the targets, base mesh and envmap
    loaded as ``diffrec optimize`` loads them, as arrays; the settings without those the
    server chooses itself."""
    from diffrec import raster
    from diffrec.devices import resolve_device
    from diffrec.pipeline.inputs import load_inputs
    from diffrec.pipeline.job_arrays import to_job_arrays

    settings = config.settings
    mode = settings.run.mode
    local = sorted(key for key in ("out_dir", "device") if key in values)
    if local:
        log.info("not sending %s: the server chooses %s", ", ".join(local),
                 "it" if len(local) == 1 else "them")
    ctx = raster.RasterContext(resolve_device("auto"))  # renders a ref_mesh's targets
    inputs = load_inputs(config, ctx, hold_out=False)
    base = inputs.base_mesh if mode != "reconstruct" else None  # reconstruct ignores it
    envmap = inputs.envmap if settings.light.mode != "learn" else None  # a learnt light starts grey
    # the base mesh's material goes as start textures where the run would start from it
    # and keep the UVs it covers (the server refuses them on a mesh it must decimate)
    material = (inputs.base_material if base is not None and base.uvs is not None
                and settings.material.init_textures == "base_mesh" and not (
                    0 < settings.surface.target_triangles < base.num_triangles)
                else None)
    start_renders = inputs.start_renders if base is not None else None  # a given start's
    arrays = to_job_arrays(inputs.train, base, envmap, material, start_renders)
    views = inputs.train
    log.info("sending %d views of %dx%d%s%s%s%s", len(views), views.cameras.width,
             views.cameras.height, ", the base mesh" if base is not None else "",
             ", its material" if material is not None else "",
             ", the envmap" if envmap is not None else "",
             ", the start renders" if start_renders is not None else "")
    chosen = settings.to_dict()
    sent = {key: chosen[key] for key in values if key in FIELDS}  # the preset does the rest
    if settings.schedule.refine_poses == "auto" and inputs.poses_found:
        sent["refine_poses"] = "on"  # the server sees arrays, not where their poses came from
    return {"task": "optimize", "settings": sent}, arrays


ALREADY = (" (already submitted: the first submission's inputs and settings stand; give "
           "another --job to submit new ones)")
"""Said after the state of a job that an earlier submit with its id created."""


def run(args) -> int:
    """The source is checked first, without a server (``checked_submission``: a job file is
    read whole then, its arrays with it); a dataset's or settings file's images are loaded
    (decoded, or a reference rendered) only once the server has answered and, for ``--job``,
    said that it does not hold the job already."""
    check_server(args)
    flags = settings_flags(args, ("start_renders",))
    load = checked_submission(args.source, flags)
    job_id = args.job or uuid.uuid4().hex
    with connect(args) as client:
        try:
            state = existing_state(client, job_id) if args.job else None
            if state is None:
                spec, arrays = load()
                reply = client.submit(job_id, spec, arrays)
                state = reply["state"] + (ALREADY if reply["existing"] else "")
            print(f"job {job_id}: {state}")
            if args.wait:
                try:
                    final = client.wait(job_id, on_event=print_event, on_link=print_link)
                except KeyboardInterrupt:
                    print(f"stopped following job {job_id}; it goes on on the server: "
                          f"diffrec status {job_id}, diffrec fetch {job_id} (with the same "
                          "--server)", file=sys.stderr)
                    raise
                except ServerUnavailable as exc:
                    raise UserError(f"{exc}; job {job_id} may still be running there: "
                                    f"diffrec status {job_id} (with the same --server) once it "
                                    "answers") from None
                return 0 if final["kind"] == "done" else 1
        except (ProtocolError, ServerUnavailable) as exc:
            raise refused(exc) from None
    return 0


def existing_state(client, job_id: str) -> str | None:
    """None for a job id new to the server, else the state of the job already submitted with
    it and ALREADY (asked before any upload)."""
    try:
        state = client.status(job_id)["state"]
    except ServerError as exc:
        if exc.code == "not_found":
            return None
        raise
    return state + ALREADY
