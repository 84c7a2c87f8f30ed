"""What the `cairn` command needs to know: where each service listens, where Redis and RabbitMQ are."""
from __future__ import annotations

from typing import Annotated

from pydantic import BeforeValidator, Field
from pydantic_settings import NoDecode

from shared.settings import CommonSettings, aliases
from shared.urls import FirstListedHttpUrl, OptionalHttpUrl, RedisUrl

SERVICES = ("retrieval", "analytics", "chat", "gateway")  # start order: dependencies first
SCALABLE = ("chat", "retrieval")  # the services `cairn up --replicas` can run several of
MAX_REPLICAS = 16


def parse_replicas(spec: object) -> object:
    """`chat=2,retrieval=2` -> {"chat": 2, "retrieval": 2}; an empty spec means one of each."""
    if not isinstance(spec, str):
        return spec
    counts: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        service, equals, count = (s.strip() for s in part.partition("="))
        if not equals or not count.isdigit():
            raise ValueError(f"{part!r} is not SERVICE=COUNT, as in chat=2,retrieval=2")
        if service not in SCALABLE:
            raise ValueError(f"cannot run several {service!r}: only {' and '.join(SCALABLE)} take replicas")
        if service in counts:
            raise ValueError(f"{service} is named twice")
        if not 1 <= int(count) <= MAX_REPLICAS:
            raise ValueError(f"{service}={count}: the count must be between 1 and {MAX_REPLICAS}")
        counts[service] = int(count)
    return counts


ReplicaCounts = Annotated[dict[str, int], NoDecode, BeforeValidator(parse_replicas)]


class CliSettings(CommonSettings):
    gateway_port: int = Field(8000, validation_alias=aliases("GATEWAY_PORT"))
    chat_port: int = Field(8001, validation_alias=aliases("CHAT_PORT"))
    retrieval_port: int = Field(8002, validation_alias=aliases("RETRIEVAL_PORT"))
    analytics_port: int = Field(8003, validation_alias=aliases("ANALYTICS_PORT"))
    redis_url: RedisUrl = Field("redis://127.0.0.1:6379/0", validation_alias=aliases("REDIS_URL"))
    redis_prefix: str = Field("cairn", validation_alias=aliases("REDIS_PREFIX"))
    demo_password: str | None = Field(None, validation_alias=aliases("CAIRN_DEMO_PASSWORD"))
    start_timeout_s: float = Field(180.0, gt=0, validation_alias=aliases("CAIRN_START_TIMEOUT_S"))
    replicas: ReplicaCounts = Field(
        default_factory=dict,
        validation_alias=aliases("CAIRN_REPLICAS"),
        description="Processes per service under `cairn up`, as chat=2,retrieval=2; unnamed services run one.",
    )
    replica_port_step: int = Field(
        10,
        ge=1,
        validation_alias=aliases("CAIRN_REPLICA_PORT_STEP"),
        description="Replica n (from 2) of a service listens on the service's port + (n-1) x this step.",
    )
    chroma_server: bool = Field(
        False,
        validation_alias=aliases("CAIRN_CHROMA_SERVER"),
        description="Run a Chroma server for retrieval even with one replica (always with several).",
    )
    chroma_port: int = Field(8004, validation_alias=aliases("CHROMA_PORT"))
    chroma_url: OptionalHttpUrl = Field(
        None,
        validation_alias=aliases("CHROMA_URL"),
        description="A Chroma server of your own: retrieval uses it and `cairn up` starts none.",
    )

    def port_of(self, service: str) -> int:
        return getattr(self, f"{service}_port")

    def replicas_of(self, service: str) -> int:
        return self.replicas.get(service, 1)

    def replica_port(self, service: str, n: int) -> int:
        """Replica n (1-based) of `service`: the first keeps the service's port."""
        return self.port_of(service) + (n - 1) * self.replica_port_step

    @property
    def runs_chroma_server(self) -> bool:
        return self.chroma_url is None and (self.chroma_server or self.replicas_of("retrieval") > 1)

    # A Cairn elsewhere; the services read these too, as lists of replicas: the command uses the first.
    gateway_url: FirstListedHttpUrl = Field(None, validation_alias=aliases("GATEWAY_URL"))
    chat_url: FirstListedHttpUrl = Field(None, validation_alias=aliases("CHAT_URL"))
    retrieval_url: FirstListedHttpUrl = Field(None, validation_alias=aliases("RETRIEVAL_URL"))
    analytics_url: FirstListedHttpUrl = Field(None, validation_alias=aliases("ANALYTICS_URL"))

    def url_of(self, service: str) -> str:
        """`<SERVICE>_URL` when set (the first URL of a list), else the local port `cairn up` uses."""
        return getattr(self, f"{service}_url") or f"http://127.0.0.1:{self.port_of(service)}"

    def local_url_of(self, service: str) -> str:
        return f"http://127.0.0.1:{self.port_of(service)}"

    @property
    def run_dir(self):
        return self.data_dir / "run"

    @property
    def log_dir(self):
        return self.data_dir / "logs"

    @property
    def chroma_server_dir(self):
        return self.data_dir / "chroma-server"
