"""lit configuration for irc's FileCheck tests.

Each ``.ir`` file here starts with ``// RUN:`` lines that pipe a program through
``irc`` and check the output with ``filecheck`` (the Python port of LLVM's
FileCheck).  ``irc`` is run as ``python -m irc.cli`` with the interpreter that
runs lit, so the tests use the checkout being tested whether or not the console
script is on PATH.  ``not`` is lit's built-in (it inverts the exit status).
"""

import os
import shlex
import shutil
import sys

import lit.formats

config.name = "irc"  # noqa: F821 - ``config`` is provided by lit
config.test_format = lit.formats.ShTest(execute_external=False)  # noqa: F821
config.suffixes = [".ir"]  # noqa: F821
config.excludes = ["lit.cfg.py", "Output"]  # noqa: F821
config.test_source_root = os.path.dirname(__file__)  # noqa: F821

_python = shlex.quote(sys.executable)
_filecheck = shutil.which("filecheck") or shutil.which("FileCheck")

config.substitutions.append(("%irc", f"{_python} -m irc.cli"))  # noqa: F821
# A bare 'irc opt|run|passes' command runs the checkout too (lookarounds: lit's
# substitutions escape backslashes in the replacement, so no backreferences).
config.substitutions.append(  # noqa: F821
    (r"(?<![\w/.%-])irc(?=\s+(opt|run|passes)\b)", f"{_python} -m irc.cli"))
config.substitutions.append(  # noqa: F821
    (r"(?<![\w/.-])filecheck(?![\w/.-])", shlex.quote(_filecheck) if _filecheck else f"{_python} -m filecheck"))

for var in ("HOME", "TMPDIR", "PATH", "PYTHONPATH", "VIRTUAL_ENV"):
    if var in os.environ:
        config.environment[var] = os.environ[var]  # noqa: F821
