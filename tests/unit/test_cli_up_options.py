"""`cairn up --replicas` given a mistake: refused as argparse refuses any bad option, naming `--replicas`
(not the settings field behind it), with the usage line and exit status 2, before anything starts."""
from __future__ import annotations

import pytest

from cairn import cli, commands

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("spec", "reason"),
    [("gateway=2", "cannot run several 'gateway': only chat and retrieval take replicas"),
     ("chat=2x", "'chat=2x' is not SERVICE=COUNT, as in chat=2,retrieval=2"),
     ("chat=0", "chat=0: the count must be between 1 and 16")],
    ids=["not-scalable", "not-a-count", "out-of-range"],
)
def test_a_bad_replicas_option_is_named_as_the_option(spec, reason, monkeypatch, capsys):
    monkeypatch.setattr(commands, "up", lambda *args, **kwargs: pytest.fail("cairn up started"))
    with pytest.raises(SystemExit) as exited:
        cli.main(["up", "--replicas", spec])
    err = capsys.readouterr().err
    assert exited.value.code == 2
    assert err.startswith("usage: cairn up ")
    assert err.splitlines()[-1] == f"cairn up: error: argument --replicas: {reason}"


def test_a_good_replicas_option_reaches_cairn_up(monkeypatch):
    seen = {}
    monkeypatch.setattr(commands, "up", lambda settings, **kwargs: seen.setdefault("replicas", settings.replicas) and 0)
    cli.main(["up", "--replicas", "chat=2, retrieval=3"])
    assert seen["replicas"] == {"chat": 2, "retrieval": 3}
