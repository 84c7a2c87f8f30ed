"""A private RabbitMQ node for fault tests: started as a subprocess on free loopback ports with its own
data directory, so a test can really stop and restart a broker without touching the shared one.

The node reads none of the machine's RabbitMQ configuration (it gets its own config, env file, plugin
list and Erlang cookie in a temporary directory) and starts no plugins, which keeps its start short.
Stopping it is a real stop: SIGTERM, which the Erlang VM turns into an orderly shutdown, so persistent
messages in durable queues are on disk and come back when the node starts again on the same port.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

from tests.support import free_port

# The Debian package's /usr/sbin/rabbitmq-server re-runs itself as the rabbitmq user, which would drop
# our environment and data directory; the script it wraps runs as whoever starts it.
_PACKAGED_SCRIPT = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")


def _server_script() -> str:
    if _PACKAGED_SCRIPT.exists():
        return str(_PACKAGED_SCRIPT)
    found = shutil.which("rabbitmq-server")
    if found is None:
        raise RuntimeError("rabbitmq-server is not installed (apt-get install -y rabbitmq-server)")
    return found


class RabbitNode:
    """One private broker node. `start()` / `stop()` may be repeated; `cleanup()` removes everything."""

    def __init__(self, *, start_timeout_s: float = 60.0, config: str = "") -> None:
        """`config`: lines added to the node's rabbitmq.conf, such as `max_message_size = 4096`."""
        self.extra_config = config
        self.name = f"cairn-test-{uuid.uuid4().hex[:8]}@localhost"
        self.port = free_port()
        self.dist_port = free_port()
        self.start_timeout_s = start_timeout_s
        self.base = Path(tempfile.mkdtemp(prefix="cairn-rabbit-"))
        self._process: subprocess.Popen | None = None
        self._write_config()

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/"

    def _write_config(self) -> None:
        (self.base / "rabbitmq.conf").write_text(
            f"listeners.tcp.1 = 127.0.0.1:{self.port}\n"
            "disk_free_limit.absolute = 50MB\n"
            + self.extra_config
        )
        (self.base / "rabbitmq-env.conf").write_text("")
        (self.base / "enabled_plugins").write_text("[].\n")

    def _env(self) -> dict[str, str]:
        base = str(self.base)
        return {
            **{k: v for k, v in os.environ.items() if not k.startswith(("RABBITMQ_", "ERL_"))},
            "HOME": base,  # the Erlang cookie is created here, not in the user's home
            "RABBITMQ_NODENAME": self.name,
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_CONFIG_FILE": f"{base}/rabbitmq.conf",
            "RABBITMQ_CONF_ENV_FILE": f"{base}/rabbitmq-env.conf",
            "RABBITMQ_ENABLED_PLUGINS_FILE": f"{base}/enabled_plugins",
            "RABBITMQ_MNESIA_BASE": f"{base}/mnesia",
            "RABBITMQ_LOG_BASE": f"{base}/log",
            "RABBITMQ_PID_FILE": f"{base}/node.pid",
            "ERL_EPMD_ADDRESS": "127.0.0.1",
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
        }

    def answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                return True
        except OSError:
            return False

    def start(self) -> None:
        if self.running:
            return
        log = open(self.base / "console.log", "ab")
        self._process = subprocess.Popen(
            [_server_script()], env=self._env(), cwd=self.base, stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + self.start_timeout_s
        while not self.answers():  # the node answers pings before its AMQP port opens: wait on the port
            if self._process.poll() is not None:
                raise RuntimeError(f"private RabbitMQ node exited with {self._process.returncode}:\n{self.console()}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"private RabbitMQ node did not open port {self.port} in time:\n{self.console()}")
            time.sleep(0.2)

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def stop(self, timeout_s: float = 30.0) -> None:
        """An orderly stop, waited for; SIGKILL only if the node does not stop in time."""
        if self._process is None:
            return
        if self._process.poll() is None:
            os.killpg(self._process.pid, signal.SIGTERM)
            try:
                self._process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(self._process.pid, signal.SIGKILL)
                self._process.wait()
        self._reap_group()
        self._process = None

    def _reap_group(self) -> None:
        """Helpers the VM started (erl_child_setup, inet_gethost) go with it."""
        try:
            os.killpg(self._process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def console(self) -> str:
        path = self.base / "console.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-40:]) if path.exists() else ""

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.base, ignore_errors=True)
