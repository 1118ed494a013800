"""examples/train_mlp.py runs as written: the loss it prints falls and the classifier it trains
(plain numpy, irc.jit + irc.value_and_grad) separates the data."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_train_mlp_example_trains():
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "train_mlp.py")], capture_output=True,
                          text=True, timeout=120, check=True)
    losses = [float(x) for x in re.findall(r"loss (\d+\.\d+)", proc.stdout)]
    assert len(losses) >= 7 and losses[-2] < losses[0] / 5 and losses[-2] <= losses[1], proc.stdout
    accuracy = float(re.search(r"test accuracy (\d\.\d+)", proc.stdout).group(1))
    assert accuracy > 0.9, proc.stdout
