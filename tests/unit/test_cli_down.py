"""`cairn down` without a state file: it says which file it looked for, and when Cairn's services answer at
their ports anyway (a `cairn up` run with another CAIRN_DATA_DIR, such as the default ./data of another
folder), it does not claim that Cairn is not running."""
from __future__ import annotations

from pathlib import Path

import pytest

from cairn import commands
from cairn.run_state import state_file
from cairn.settings import SERVICES, CliSettings
from shared.web import create_service_app
from tests.support import free_port, serve_in_thread

pytestmark = pytest.mark.unit


def settings(data_dir: Path, **ports: int) -> CliSettings:
    free = {f"{name}_port": free_port() for name in SERVICES}
    return CliSettings(data_dir=data_dir, replicas="", chroma_server=False, chroma_url=None, **(free | ports))


def test_with_nothing_running_it_names_the_state_file_it_looked_for(tmp_path, capsys):
    cairn = settings(tmp_path / "data")
    assert commands.down(cairn) == 0
    assert capsys.readouterr().out == f"Cairn is not running (no state file {state_file(cairn)}).\n"


def test_services_answering_without_a_state_file_are_not_called_stopped(tmp_path, capsys):
    port = free_port()
    with serve_in_thread(create_service_app(service="gateway", title="gateway"), port=port):
        cairn = settings(tmp_path / "elsewhere", gateway_port=port)
        assert commands.down(cairn) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(
        f"error: no state file {state_file(cairn)}, but Cairn's gateway answers at http://127.0.0.1:{port}: "
    )
    assert "CAIRN_DATA_DIR" in err and len(err.splitlines()) == 1
