"""Every shell line of README.md and docs/guide.md works as written (issue 31): each fenced
shell block's commands are extracted; ``diffrec`` commands are parsed by the real command-line
parser (an unknown flag or subcommand fails here), the cheap ones are run, the scripts they
name exist and are executable, and the examples agree on one port with what ``keys init``
prints, ``serve`` binds and the add-on connects to."""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from diffrec.cli import build_parser
from diffrec.commands._connection import DEFAULT_PORT

REPO = Path(__file__).resolve().parents[1]
DOCS = ("README.md", "docs/guide.md")
SHELL_LANGUAGES = {"", "bash", "sh", "shell"}
# what a shell line may start with besides diffrec and the repository's scripts: setting up an
# environment, other tools the guide names (their own documentation covers them)
OTHER_TOOLS = {"python3.11", "source", "ray", "ssh", "torchrun", "blender"}
PIP = re.compile(r"(^|/)pip3?$")
VENV_PYTHON = re.compile(r"^\.venv/bin/python$")  # a script run by the checkout's own Python
DIFFREC = re.compile(r"(^|/)diffrec$")  # diffrec, .venv/bin/diffrec, ~/diffrec-venv/bin/diffrec


def fenced_blocks(text: str):
    """(language, body) of each fenced block, indented ones included."""
    for match in re.finditer(r"^( *)```(\w*)\n(.*?)^\1```", text, re.S | re.M):
        yield match[2], match[3]


def commands(doc: str) -> list[list[str]]:
    """The commands of ``doc``'s shell blocks as argument lists: continuation lines joined,
    comments dropped, ``a && b`` split, ``VAR=value`` lines skipped; a block whose first word
    is no command (a folder layout, sample output) is not read."""
    found = []
    for language, body in fenced_blocks((REPO / doc).read_text()):
        first = body.split(maxsplit=1)[:1]
        if language not in SHELL_LANGUAGES or not first or not (
                is_command(first[0]) or re.fullmatch(r"[A-Z_]+=.*", first[0])):
            continue
        for line in body.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if not words or re.fullmatch(r"[A-Z_]+=.*", words[0]):
                continue
            while "&&" in words:
                cut = words.index("&&")
                found.append(words[:cut])
                words = words[cut + 1:]
            found.append(words)
    return found


def is_command(word: str) -> bool:
    return (bool(DIFFREC.search(word)) or word.startswith("scripts/")
            or word in OTHER_TOOLS or bool(PIP.search(word)) or bool(VENV_PYTHON.search(word)))


def diffrec_arguments(words: list[str]) -> list[str] | None:
    """The arguments ``diffrec`` gets from this command (``diffrec ...``, ``python -m
    diffrec ...``, ``torchrun ... -m diffrec ...``), "..." (elided) dropped; None if it runs no
    diffrec."""
    if DIFFREC.search(words[0]):
        rest = words[1:]
    elif "-m" in words and words[words.index("-m") + 1:][:1] == ["diffrec"]:
        rest = words[words.index("-m") + 2:]
    else:
        return None
    return [word for word in rest if word != "..."]


ALL = [(doc, words) for doc in DOCS for words in commands(doc)]


def test_the_documents_have_commands_to_check():
    assert sum(diffrec_arguments(words) is not None for _, words in ALL) >= 15
    assert {"scripts/demo", "scripts/test"} <= {words[0] for _, words in ALL}


@pytest.mark.parametrize(("doc", "words"), ALL, ids=[" ".join(w)[:60] for _, w in ALL])
def test_each_command_exists_and_parses(doc, words):
    if words[0].startswith("scripts/"):
        script = REPO / words[0]
        assert script.is_file() and os.access(script, os.X_OK), f"{doc}: {words[0]}"
        return
    if VENV_PYTHON.search(words[0]) and words[1].startswith("scripts/"):
        assert (REPO / words[1]).is_file(), f"{doc}: {words[1]}"
        return
    arguments = diffrec_arguments(words)
    if arguments is None:
        assert words[0] in OTHER_TOOLS or PIP.search(words[0]), f"{doc}: {words}"
        return
    with contextlib.redirect_stderr(io.StringIO()) as errors:
        try:
            build_parser().parse_args(arguments)
        except SystemExit:
            pytest.fail(f"{doc}: `{shlex.join(words)}` is refused: {errors.getvalue()}")


def test_a_diffrec_command_outside_the_venv_is_not_on_the_path_in_the_readme():
    """The README's commands run from a fresh clone, where only ``.venv/bin/diffrec`` exists
    (the guide installs into an environment it activates)."""
    bare = [words for words in commands("README.md") if words[0] == "diffrec"]
    assert bare == []


def test_one_port_in_examples_pairing_strings_serve_and_the_addon(tmp_path):
    from addon.core import connection  # no bpy needed

    text = "\n".join((REPO / doc).read_text() for doc in DOCS)
    ports = {int(port) for port in re.findall(r"(?:tcp|diffrec)://[\w.*-]+:(\d+)", text)}
    ports |= {int(port) for port in re.findall(r"ssh -L (\d+):", text)}
    env = {**os.environ, "DIFFREC_DATA": str(tmp_path)}
    init = subprocess.run([sys.executable, "-m", "diffrec", "keys", "init", "--host", "gpubox"],
                          capture_output=True, text=True, env=env, check=True).stdout
    pairing = re.search(r"diffrec://gpubox:(\d+)\?key=", init)
    serve_help = build_parser().parse_args(["serve"]).bind
    assert pairing, init
    assert ports == {DEFAULT_PORT} == {int(pairing[1])}
    assert serve_help.endswith(f":{DEFAULT_PORT}")
    assert connection.LOCAL_ADDRESS.endswith(f":{DEFAULT_PORT}")


def test_the_readme_python_example_runs():
    (code,) = [body for language, body in fenced_blocks((REPO / "README.md").read_text())
               if language == "python"]
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)
    assert scope["color"].shape == (1, 64, 64, 3) and scope["color"].abs().sum() > 0
