"""The CPU target: translation to LLVM IR (translate), LLVM and the JIT (engine),
and Python callables over compiled code (callconv)."""
