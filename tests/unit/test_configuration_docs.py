"""docs/configuration.md against the code: every variable a service or the `cairn` command reads is in the
table under "Environment variables", every variable in the table is read by one of them, and the default
the table gives is the one the code has."""
from __future__ import annotations

import os
import re
import typing
from pathlib import Path

import pytest
from pydantic import SecretStr
from pydantic_settings import BaseSettings

from cairn.settings import SERVICES, CliSettings
from services.analytics.settings import Settings as AnalyticsSettings
from services.chat.settings import OFFLINE_MODEL
from services.chat.settings import Settings as ChatSettings
from services.gateway.settings import Settings as GatewaySettings
from services.retrieval.settings import Settings as RetrievalSettings
from shared.settings import PLACEHOLDER_SERVICE_TOKEN
from shared.tracing import ENDPOINT_VARIABLES

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "configuration.md"
SETTINGS: dict[str, type[BaseSettings]] = {
    "gateway": GatewaySettings,
    "chat": ChatSettings,
    "retrieval": RetrievalSettings,
    "analytics": AnalyticsSettings,
    "cairn": CliSettings,
}
# Fields with no variable of their own (pydantic-settings reads them only as CAIRN_FIELD_<NAME>, a prefix
# kept out of the way on purpose): the command inherits host and port from CommonSettings and uses neither.
UNNAMED_FIELDS = {("cairn", "host"), ("cairn", "port")}

# Default cells in words, and what each means in the code's terms (None: unset or empty).
WORDED_DEFAULTS: dict[str, str | None] = {
    "unset": None,
    "empty": None,
    "placeholder": PLACEHOLDER_SERVICE_TOKEN,
    "random": None,  # CAIRN_DEMO_PASSWORD: unset, so `cairn up` makes one
    "one of each": None,  # CAIRN_REPLICAS
    "packaged all-MiniLM-L6-v2": None,  # EMBEDDING_MODEL_PATH
    "`CAIRN_DATA_DIR/outbox/<service>.sqlite3`": None,  # OUTBOX_PATH: derived from CAIRN_DATA_DIR
    "`CAIRN_DATA_DIR/models`": None,  # MODELS_DIR
    "SQLite under `CAIRN_DATA_DIR`": None,  # ANALYTICS_DB_URL
    "`LLM_MODEL` only": OFFLINE_MODEL,  # CHAT_MODELS: LLM_MODEL's own default
}
# Where one service's default differs from the documented one, and why that is right.
DIFFERENT_DEFAULTS = {
    # Retrieval uses the model only for contextual chunking, which needs LLM_BASE_URL (and so a model) set.
    ("retrieval", "LLM_MODEL"),
}
UNITS = {"KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}
OLDER_NAME = ""  # the default cell of a variable that is the older name of another


def documented() -> dict[str, str]:
    """Each variable of the table with its default cell, as written."""
    section = DOC.read_text().split("\n## Environment variables\n", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, str] = {}
    for line in section.splitlines():
        if not line.startswith("| `"):
            continue
        name_cell, default_cell = (cell.strip() for cell in line.split("|")[1:3])
        assert re.fullmatch(r"`[A-Z][A-Z0-9_]*`( / `[A-Z][A-Z0-9_]*`)*", name_cell), line
        names = re.findall(r"`([A-Z0-9_]+)`", name_cell)
        defaults = default_cell.split(" / ") if len(names) > 1 else [default_cell]
        assert len(defaults) == len(names), f"one default per variable: {line}"
        for name, default in zip(names, defaults):
            assert name not in rows, f"{name} is documented twice"
            rows[name] = default
    return rows


def variables(settings: type[BaseSettings]) -> dict[str, str]:
    """Each environment variable the class reads, with the field it sets."""
    names = {}
    for field_name, field in settings.model_fields.items():
        for choice in getattr(field.validation_alias, "choices", []):
            names[str(choice)] = field_name
    return names


def unnamed_fields() -> set[tuple[str, str]]:
    return {
        (service, name)
        for service, settings in SETTINGS.items()
        for name, field in settings.model_fields.items()
        if not getattr(field.validation_alias, "choices", None)
    }


def read_directly() -> set[str]:
    """Variables the code reads from os.environ itself, outside the settings classes."""
    found = set(ENDPOINT_VARIABLES)
    for package in ("cairn", "shared", "services"):
        for source in (ROOT / package).rglob("*.py"):
            found |= set(re.findall(r'environ(?:\.get\(|\[)\s*"([A-Z][A-Z0-9_]*)"', source.read_text()))
    return found


def read_by_code() -> set[str]:
    return set().union(*(variables(settings) for settings in SETTINGS.values())) | read_directly()


def older_names() -> set[str]:
    """Variables that are a field's second or later name, such as CHAT_URL beside CHAT_URLS."""
    return {
        str(choice)
        for settings in SETTINGS.values()
        for field in settings.model_fields.values()
        for choice in getattr(field.validation_alias, "choices", [])[1:]
    }


def meaning(cell: str) -> str | None:
    """The default cell as the text of a variable's value; None for unset or empty."""
    if cell in WORDED_DEFAULTS:
        return WORDED_DEFAULTS[cell]
    literal = re.fullmatch(r"`([^`]*)`(?: \((\d+) (KiB|MiB|GiB)\))?", cell)
    assert literal, f"default {cell!r} is neither `a value` nor one of WORDED_DEFAULTS"
    value, size, unit = literal.groups()
    if size:
        assert int(value) == int(size) * UNITS[unit], f"{cell}: the size in brackets is not the value"
    return value


def same(text: str | None, value: object) -> bool:
    """Whether the documented default `text` is the code's default `value`."""
    if isinstance(value, SecretStr):
        value = value.get_secret_value()
    if value is None or value in ("", (), [], {}):
        return text is None
    if text is None:
        return False
    if isinstance(value, bool):
        return text.lower() == str(value).lower()
    if isinstance(value, (int, float)):
        return float(text) == float(value)
    if isinstance(value, Path):
        return Path(text) == value
    if isinstance(value, (list, tuple)):
        return [part.strip() for part in text.split(",")] == [str(item) for item in value]
    return text == str(value)


@pytest.fixture
def defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, dict[str, object]]:
    """Each settings class's values with none of its variables set: its defaults after its validators."""
    for name in read_by_code() | {name for name in os.environ if name.startswith("CAIRN_FIELD_")}:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)  # the relative default data folder, checked by some services at start
    values: dict[str, dict[str, object]] = {}
    for service, settings_class in SETTINGS.items():
        settings = settings_class()
        values[service] = {variable: getattr(settings, field) for variable, field in variables(settings_class).items()}
    # Unset, the command finds a service on 127.0.0.1 at its port, which is what the table says.
    cli = values["cairn"]
    for service in SERVICES:
        if f"{service.upper()}_URL" in cli:
            cli[f"{service.upper()}_URL"] = CliSettings().url_of(service)
    return values


def test_the_table_parses_and_every_worded_default_is_in_use() -> None:
    rows = documented()
    assert len(rows) > 50 and rows["MAX_UPLOAD_BYTES"].startswith("`20971520`")
    assert set(WORDED_DEFAULTS) <= set(rows.values()), "drop the worded defaults the table no longer uses"


def test_every_field_has_a_variable_unless_listed() -> None:
    assert unnamed_fields() == UNNAMED_FIELDS


def test_every_variable_the_code_reads_is_documented() -> None:
    missing = read_by_code() - set(documented())
    assert missing == set(), f"read by the code but not in docs/configuration.md: {sorted(missing)}"


def test_every_documented_variable_is_read_by_the_code() -> None:
    unread = set(documented()) - read_by_code()
    assert unread == set(), f"in docs/configuration.md but read by nothing (misspelt or gone?): {sorted(unread)}"


def test_only_older_names_leave_their_default_cell_empty() -> None:
    empty = {name for name, cell in documented().items() if cell == OLDER_NAME}
    assert empty <= older_names(), f"give these a default: {sorted(empty - older_names())}"


def test_every_documented_default_is_the_codes(defaults: dict[str, dict[str, object]]) -> None:
    wrong = []
    for name, cell in documented().items():
        if cell == OLDER_NAME:
            continue
        text = meaning(cell)
        for service, values in defaults.items():
            if name in values and (service, name) not in DIFFERENT_DEFAULTS and not same(text, values[name]):
                wrong.append(f"{name}: documented {cell}, {service} has {values[name]!r}")
    assert wrong == [], "\n".join(wrong)


def table_rows() -> dict[str, str]:
    """Each variable of the table with its whole row."""
    section = DOC.read_text().split("\n## Environment variables\n", 1)[1].split("\n## ", 1)[0]
    return {
        name: line
        for line in section.splitlines() if line.startswith("| `")
        for name in re.findall(r"`([A-Z0-9_]+)`", line.split("|")[1])
    }


def choices(annotation: object) -> list[object]:
    """The values a setting typed with Literal[...] (possibly inside Annotated or Optional) accepts."""
    if typing.get_origin(annotation) is typing.Literal:
        return list(typing.get_args(annotation))
    return [choice for inner in typing.get_args(annotation) for choice in choices(inner)]


def test_every_value_a_setting_accepts_from_a_fixed_set_is_named_in_its_row() -> None:
    rows, unnamed = table_rows(), []
    for settings in SETTINGS.values():
        for field in settings.model_fields.values():
            for variable in getattr(field.validation_alias, "choices", []):
                unnamed += [f"{variable}: `{c}`" for c in choices(field.annotation) if f"`{c}`" not in rows[variable]]
    assert sorted(set(unnamed)) == [], "values the code accepts but docs/configuration.md does not name"
