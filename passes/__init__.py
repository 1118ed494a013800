"""Device-independent passes.  Importing this package registers every pass.

    irc.passes.run(module, "canonicalize,dce")

Each pass lives in its own module, named after its pipeline token, and
registers itself by defining a ``Pass`` subclass; every module of this package
is imported here, so adding a pass is adding a file.
"""

import importlib
import pkgutil

from irc.passmanager import (
    PASSES,
    Pass,
    PassManager,
    PipelineError,
    Statistics,
    parse_pipeline,
    run,
)

for _info in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_info.name}")

__all__ = ["PASSES", "Pass", "PassManager", "PipelineError", "Statistics", "parse_pipeline", "run"]
