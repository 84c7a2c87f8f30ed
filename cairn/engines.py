"""Make sure Redis and RabbitMQ answer before the services start, starting local ones when installed."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from urllib.parse import urlparse


@dataclass(frozen=True)
class Engine:
    name: str
    url: str
    default_port: int
    binary: str
    apt_package: str
    setting: str  # the variable that gives `url`

    @property
    def where(self) -> str:
        """host:port and the setting to check; never the URL itself, which may carry a password."""
        host, port = self.address
        return f"{host}:{port} ({self.setting})"

    @property
    def address(self) -> tuple[str, int]:
        parsed = urlparse(self.url)
        return parsed.hostname or "127.0.0.1", parsed.port or self.default_port

    def answers(self) -> bool:
        try:
            with socket.create_connection(self.address, timeout=1):
                return True
        except OSError:
            return False


class EngineMissing(RuntimeError):
    pass


def _is_local(engine: Engine) -> bool:
    return engine.address[0] in ("127.0.0.1", "localhost", "::1")


def _start(engine: Engine) -> None:
    port = str(engine.address[1])
    if engine.binary == "redis-server":
        command = ["redis-server", "--daemonize", "yes", "--bind", "127.0.0.1", "--port", port, "--save", "", "--appendonly", "no"]
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    else:
        # Keep a broker we start on loopback only (see ENVIRONMENT notes on epmd and distribution).
        env = {
            **os.environ,
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": port,
            "ERL_EPMD_ADDRESS": "127.0.0.1",
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
        }
        subprocess.run(["rabbitmq-server", "-detached"], check=True, env=env, stdout=subprocess.DEVNULL)


def ensure(engine: Engine, *, timeout_s: float = 60.0, say=print) -> bool:
    """True when we had to start it. Raises EngineMissing with the install command when we cannot."""
    if engine.answers():
        return False
    if not _is_local(engine) or shutil.which(engine.binary) is None:
        hint = f"install it with: sudo apt-get install -y {engine.apt_package}" if _is_local(engine) else "start it"
        raise EngineMissing(f"{engine.name} does not answer at {engine.where}; {hint}")
    say(f"starting {engine.name} ({engine.binary}) ...")
    _start(engine)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:  # rabbitmq answers pings before its port opens: wait on the port
        if engine.answers():
            return True
        time.sleep(0.5)
    raise EngineMissing(f"{engine.name} was started but did not open {engine.where} within {timeout_s:.0f}s")


def engines_for(*, redis_url: str, amqp_url: str) -> list[Engine]:
    return [
        Engine("Redis", redis_url, 6379, "redis-server", "redis-server", "REDIS_URL"),
        Engine("RabbitMQ", amqp_url, 5672, "rabbitmq-server", "rabbitmq-server", "AMQP_URL"),
    ]
