"""The tests' ports: each pytest-xdist worker's own, below the kernel's ephemeral range, never handed out twice,
so that no service of one test can bind a port meant for a service of another that is still loading."""
from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from tests.support import free_port

pytestmark = pytest.mark.unit


def test_each_port_is_new_free_and_in_this_workers_block():
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")) % 12
    ports = [free_port() for _ in range(50)]
    assert len(set(ports)) == len(ports)
    assert all(20_000 + worker * 1_000 <= port < 21_000 + worker * 1_000 for port in ports), ports
    ephemeral_first = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    assert max(ports) < ephemeral_first


def test_a_port_something_listens_on_is_skipped():
    taken = free_port()
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", taken + 1))
        listener.listen()
        assert free_port() not in (taken, taken + 1)
