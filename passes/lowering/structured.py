"""Loops for the structured tensor ops: matmul, transpose, slices, concat, pad, conv2d..."""
