"""A small sample of the CLI fuzzer (irc/testing/cli_fuzz.py) in every test run: a few seconds.

The full campaign is ``python -m irc.testing.cli_fuzz --n 10000``; see docs/reliability.md.
"""

from irc.testing import cli_fuzz


def test_cli_fuzz_sample(capsys):
    code = cli_fuzz.main(["--n", "12", "--seed", "0", "--timeout", "60"])
    out = capsys.readouterr().out
    assert code == 0, out


def test_cli_fuzz_covers_the_special_targets(tmp_path):
    """The generator reaches devices (as root), FIFOs, symlinks, the input itself and closed stdin."""
    seen = set()
    for seed in range(300):
        d = tmp_path / str(seed)
        d.mkdir()
        seen.update(cli_fuzz.build(seed, d).notes[0].split())
    for kind in ("input=fifo", "input=dev_zero", "input=device", "input=binary", "input=stdin", "output=fifo",
                 "output=device", "output=symlink", "output=input", "output=stdout"):
        assert kind in seen, kind
