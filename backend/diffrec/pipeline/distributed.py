"""One job over several processes: data-parallel training with ``torch.distributed``.

Each rank (one process, one device) holds the whole model and every view, and renders its
share of each batch: ``ViewSampler`` gives every rank the same permutation of the views and
rank ``r`` the rows ``[r B/R, (r+1) B/R)`` of the batch a single process would draw. After
backward and before the optimizer step the gradients are averaged over the ranks
(``World.average_gradients``); each rank weights its image losses (``World.batch_weight``)
so that this average is the single-process gradient of the whole batch, and adds the
view-independent regularisers whole, which the average then counts once. Every rank takes
the same Adam step from the same gradients, so the parameters stay equal without being sent.

Why an explicit all-reduce and not ``DistributedDataParallel``: what trains lives in
several containers (geometry, material, light; the light's base is a bare tensor with a
gradient hook) that change from pass to pass, and DDP wants one module whose ``forward`` is
the whole step; its bucketed backward hooks buy an overlap of communication with compute
that a step whose gradients are small next to its renders does not need. One flat
all-reduce per step, which also carries the step's losses for the progress report, gives
the same average in a dozen lines.

Only rank 0 talks to the world (``main_only``): its reporter hears progress and previews, it
alone keeps checkpoints and writes outputs; the other ranks get a silent ``Reporter``.
Decisions that must agree are rank 0's, shared with every rank: stopping (``main_says``),
the checkpoint a pass resumes from and the unwrapped mesh (``from_main``).

Backends: NCCL on CUDA (rank ``r`` on ``cuda:LOCAL_RANK``), gloo on CPU. ``spawn`` starts the
ranks on this machine (rendezvous on a free port of 127.0.0.1); ``from_environment`` joins a
world that a launcher such as ``torchrun`` set up (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``MASTER_ADDR``, ``MASTER_PORT``). A single process is ``SINGLE`` (``World()``): every
collective is then the identity and ``torch.distributed`` is never touched.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, NoReturn, TypeVar

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from diffrec.pipeline.reporter import Reporter

__all__ = ["SINGLE", "World", "free_port", "from_environment", "init", "main_only", "spawn",
           "teardown"]

T = TypeVar("T")
DEVICE_TYPES = ("cpu", "cuda")


@dataclass(frozen=True)
class World:
    """This process's place in a job: ``rank`` of ``size`` ranks, ``local_rank`` among those
    on this machine, its ``device_type`` ("cpu": gloo; "cuda": NCCL on ``cuda:local_rank``).
    ``World()`` is a single process; the collectives below are the identity there. Every
    rank must call the same collectives in the same order.

    Tensors are reduced on the device (NCCL queues the reduction behind the step's kernels);
    the decisions and objects the host needs (``main_says``, ``from_main``, which parameters
    have gradients) go through ``control``, a gloo group of the same ranks on the CPU, so
    that no collective makes the host wait for the device."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0
    device_type: str = "cpu"
    control: Any = field(default=None, compare=False, repr=False)

    @property
    def is_main(self) -> bool:
        """Rank 0: the one that reports, checkpoints and writes outputs."""
        return self.rank == 0

    @property
    def device(self) -> torch.device:
        """The device this rank trains on: ``cuda:local_rank`` or the CPU."""
        return torch.device("cuda", self.local_rank) if self.device_type == "cuda" else (
            torch.device("cpu"))

    def main_says(self, flag: bool) -> bool:
        """Rank 0's ``flag`` on every rank (a stop asked of rank 0's reporter)."""
        if self.size == 1:
            return flag
        value = torch.tensor([1 if flag else 0])
        dist.broadcast(value, src=0, group=self.control)
        return bool(value.item())

    def from_main(self, make: Callable[[], T]) -> T:
        """Rank 0 calls ``make()``; every rank returns its value (pickled: tensors in it must
        be on the CPU, move them to ``device`` after)."""
        if self.size == 1:
            return make()
        box = [make() if self.is_main else None]
        dist.broadcast_object_list(box, src=0, group=self.control)
        return box[0]

    def batch_weight(self, covered: torch.Tensor) -> torch.Tensor | float:
        """The factor for a rank's loss that is a mean over its ``covered`` elements (a count,
        a scalar tensor, no gradient) so that the ranks' averaged gradient is the gradient of
        the mean over every rank's elements: ``size * covered / max(total covered, 1)``.
        (A loss that is a plain mean over equal shares of the batch needs no weight.)"""
        if self.size == 1:
            return 1.0
        total = covered.detach().to(self.device, torch.float32).clone()
        dist.all_reduce(total)
        return self.size * covered.to(total) / total.clamp(min=1.0)

    def average_gradients(self, parameters: Iterable[torch.Tensor],
                          values: torch.Tensor | None = None) -> torch.Tensor | None:
        """Replace each parameter's ``.grad`` by its mean over the ranks (one all-reduce of
        one flat float32 buffer); a parameter with a gradient on no rank keeps none, as a
        single process would leave it (Adam then skips it), one with a gradient on some rank
        gets the mean with zeros for the others. ``values`` (any float tensor, e.g. the
        step's losses) ride along in the same all-reduce and come back averaged."""
        if self.size == 1:
            return values
        parameters = list(parameters)
        present = torch.tensor([p.grad is not None for p in parameters], dtype=torch.uint8)
        dist.all_reduce(present, op=dist.ReduceOp.MAX, group=self.control)
        trained = [p for p, seen in zip(parameters, present.tolist(), strict=True) if seen]
        extra = [] if values is None else [values.detach().reshape(-1).float()]
        flat = torch.cat([*(torch.zeros(p.numel(), device=p.device) if p.grad is None
                            else p.grad.reshape(-1).float() for p in trained), *extra])
        dist.all_reduce(flat)
        flat /= self.size
        offset = 0
        for parameter in trained:
            chunk = flat[offset : offset + parameter.numel()]
            parameter.grad = chunk.view_as(parameter).to(parameter.dtype).clone()
            offset += parameter.numel()
        return None if values is None else flat[offset:].view_as(values).to(values.dtype)


SINGLE = World()
"""The world of a process that trains alone."""


def main_only(world: World, reporter: Reporter) -> Reporter:
    """``reporter`` on rank 0, a silent ``Reporter`` (no reports, never stops) on every other
    rank."""
    return reporter if world.is_main else Reporter()


def init(rank: int, size: int, local_rank: int, device_type: str,
         init_method: str = "env://") -> World:
    """Join a world of ``size`` ranks as ``rank`` (NCCL for "cuda": this process's CUDA
    device becomes ``cuda:local_rank``; gloo for "cpu": torch's threads become the
    machine's cores shared out among the ranks on it). ``init_method``: torch's rendezvous
    ("env://": MASTER_ADDR and MASTER_PORT; "tcp://HOST:PORT"). A size of 1 joins nothing."""
    if device_type not in DEVICE_TYPES:
        raise ValueError(f"device_type must be one of {DEVICE_TYPES}, got {device_type!r}")
    if size == 1:
        return World(rank, size, local_rank, device_type)
    if device_type == "cuda":
        torch.cuda.set_device(torch.device("cuda", local_rank))
    else:
        local_ranks = int(os.environ.get("LOCAL_WORLD_SIZE", size))
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // local_ranks))
    dist.init_process_group("nccl" if device_type == "cuda" else "gloo",
                            init_method=init_method, rank=rank, world_size=size)
    control = dist.new_group(backend="gloo") if device_type == "cuda" else dist.group.WORLD
    return World(rank, size, local_rank, device_type, control)


def teardown(world: World) -> None:
    """Leave the process group ``init`` joined (nothing for a single process)."""
    if world.size > 1 and dist.is_initialized():
        dist.destroy_process_group()


def from_environment(device_type: str) -> World | None:
    """The world a launcher (``torchrun``) set up in the environment, joined; None when this
    process was not started as one of several ranks (no ``WORLD_SIZE``, or 1)."""
    size = int(os.environ.get("WORLD_SIZE", "1"))
    if size == 1:
        return None
    return init(int(os.environ["RANK"]), size, int(os.environ.get("LOCAL_RANK", "0")),
                device_type)


def free_port() -> int:
    """A TCP port on 127.0.0.1 free at the moment of asking (for a local rendezvous)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _rank_main(index: int, fn: Callable, size: int, device_type: str, port: int,
               args: tuple) -> None:
    world = init(index, size, index, device_type, f"tcp://127.0.0.1:{port}")
    try:
        fn(world, *args)
    finally:
        teardown(world)
    _end_finished_rank()


def _end_finished_rank() -> NoReturn:
    """End a rank whose work is done as ``multiprocessing`` ends a forked child: streams
    flushed, then ``os._exit(0)``, without the interpreter's finalization. There the C++
    destructors of what the process group leaves behind (gloo's threads, the rendezvous store
    that rank 0 hosts) run in no set order, and once aborted a rank whose job had finished
    (SIGABRT, "terminate called without an active exception"; seen in CI). A rank that raised
    does not come here: torch's spawn wrapper reports its traceback."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def spawn(fn: Callable[..., None], size: int, device_type: str, args: tuple = (),
          timeout_s: float | None = None) -> None:
    """Run ``fn(world, *args)`` in ``size`` new processes on this machine, one per rank (rank
    ``r`` on ``cuda:r`` for "cuda"), and wait for all of them. ``fn`` and ``args`` must be
    picklable (``fn`` a module-level function); tensors in ``args`` travel through shared
    memory. When a rank fails, the others are ended and torch's ``ProcessRaisedException``
    (the rank's traceback) or ``ProcessExitedException`` (its exit status) is raised; past
    ``timeout_s`` seconds every rank is ended and ``TimeoutError`` raised."""
    context = mp.start_processes(_rank_main, args=(fn, size, device_type, free_port(), args),
                                 nprocs=size, join=False, start_method="spawn")
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while not context.join(timeout=1.0):
        if deadline is not None and time.monotonic() > deadline:
            for process in context.processes:
                if process.is_alive():
                    process.kill()
                process.join()
            raise TimeoutError(f"{size} ranks did not finish within {timeout_s:g} s")
