"""Running the pipeline in tests as ``diffrec optimize`` does: checkpoints and outputs in the
config's ``out_dir``."""

from pathlib import Path

from diffrec.commands.optimize import TerminalReporter, checkpoint_store
from diffrec.pipeline.config import RunConfig
from diffrec.pipeline.inputs import Inputs
from diffrec.pipeline.outputs import write_result
from diffrec.pipeline.run import optimize


def optimize_into(config: RunConfig, inputs: Inputs, reporter=None) -> dict:
    """Optimise ``inputs`` with ``config``'s settings on its device, write the result into
    ``config.out_dir``; return the metrics. ``reporter``: a silent ``TerminalReporter`` of
    ``out_dir`` unless given."""
    reporter = reporter or TerminalReporter(config.out_dir, stream=None)
    result = optimize(config.settings, inputs, reporter,
                      checkpoints=checkpoint_store(config.out_dir), device=config.device)
    write_result(Path(config.out_dir), result, export_obj=config.settings.export_obj)
    return result.metrics
