"""Random tensor graphs through every stage of the tensor pipeline and the compiled code.

The interpreter on the original graph is the oracle (irc.testing.tensor_programs);
``python -m irc.testing.tensor_programs --n N --seed S`` runs the same check at scale.
"""

from __future__ import annotations

import pytest

from irc.testing.tensor_programs import check_tensor_program, random_tensor_program


@pytest.mark.parametrize("seed", range(24))
def test_random_tensor_graph_agrees_everywhere(seed):
    program = random_tensor_program(seed, 12)
    assert check_tensor_program(program) == [], program.text


def test_generator_is_reproducible_and_varied():
    assert random_tensor_program(5).text == random_tensor_program(5).text
    texts = {random_tensor_program(s).text for s in range(20)}
    assert len(texts) == 20
    ops = {line.split("=")[1].split()[0] for t in texts for line in t.splitlines() if " = " in line}
    assert {"graph.matmul", "graph.broadcast", "graph.transpose", "graph.softmax"} <= ops
    assert any(op.startswith("graph.reduce_") for op in ops)
