"""The command line answers fast: ``diffrec --help`` and every subcommand's ``--help`` parse
without importing torch (issue 31; torch takes seconds to import on a busy machine)."""

import subprocess
import sys

PARSE_EVERY_HELP = """
import contextlib, io, sys
from diffrec.cli import build_parser

parser = build_parser()
commands = parser._subparsers._group_actions[0].choices
helps = [["--help"]] + [[name, "--help"] for name in commands]
helps += [["keys", action, "--help"] for action in
          commands["keys"]._subparsers._group_actions[0].choices]
for argv in helps:
    with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.suppress(SystemExit):
        parser.parse_args(argv)
    assert "usage:" in out.getvalue(), argv
print(len(helps), sorted(name for name in sys.modules if name.split(".")[0] == "torch")[:3])
"""


def test_every_help_parses_without_importing_torch():
    out = subprocess.run([sys.executable, "-c", PARSE_EVERY_HELP], capture_output=True,
                         text=True, check=True).stdout.split(maxsplit=1)
    assert int(out[0]) >= 8  # diffrec, its seven commands, keys' actions
    assert out[1].strip() == "[]"


FREEZE_AT_EXIT = """
import atexit, contextlib, gc
freezes, freeze = [], gc.freeze
gc.freeze = lambda: freezes.append(1) or freeze()
atexit.register(lambda: print(len(freezes), gc.get_freeze_count(), flush=True))  # runs last
from diffrec.cli import main
for _ in range(3):
    with contextlib.suppress(SystemExit):
        main(["--version"])
print(gc.get_freeze_count(), flush=True)
"""


def test_what_is_alive_at_exit_is_frozen_once():
    """The command line freezes what is alive when it exits (the interpreter's last garbage
    collections then skip torch's objects: 0.35 s of every command), not before, and once
    however often ``main`` runs in a process."""
    out = subprocess.run([sys.executable, "-c", FREEZE_AT_EXIT], capture_output=True,
                         text=True, check=True).stdout.split()
    before_exit, freezes, at_exit = (int(word) for word in out[-3:])
    assert before_exit == 0 and freezes == 1 and at_exit > 1000
