"""Device-independent passes.  Importing this package registers every pass.

    irc.passes.run(module, "canonicalize,dce")
"""

from irc.passmanager import (
    PASSES,
    Pass,
    PassManager,
    PipelineError,
    Statistics,
    parse_pipeline,
    run,
)

from . import canonicalize, dce, scf_to_cf  # noqa: F401 - each module registers its pass

__all__ = ["PASSES", "Pass", "PassManager", "PipelineError", "Statistics", "parse_pipeline", "run"]
