"""A service started with invalid settings says what is wrong in one line per problem, naming the variable,
and exits with code 2: no traceback, and no value of any setting (the input of a cross-field check is every
setting, secrets included)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]


def start(module: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", module],
        env={**os.environ, **env}, cwd=REPO, capture_output=True, text=True, timeout=120,
    )


NOT_AN_INTEGER = "Input should be a valid integer, unable to parse string as an integer"


@pytest.mark.parametrize(
    ("module", "variable", "value", "line"),
    [
        ("services.gateway", "GATEWAY_PORT", "eighty", f"gateway: cannot start: GATEWAY_PORT: {NOT_AN_INTEGER}"),
        ("services.chat", "QUERY_REFORMULATION", "sometimes",
         "chat: cannot start: QUERY_REFORMULATION: Input should be 'off', 'followups' or 'always'"),
        ("services.retrieval", "EMBEDDING_BACKEND", "onnx",
         "retrieval: cannot start: EMBEDDING_BACKEND: Input should be 'torch' or 'onnx-int8'"),
        ("services.analytics", "ANALYTICS_PREFETCH", "0",
         "analytics: cannot start: ANALYTICS_PREFETCH: Input should be greater than or equal to 1"),
        ("services.chat.offline_llm", "OFFLINE_LLM_PORT", "x",
         f"offline-llm: cannot start: OFFLINE_LLM_PORT: {NOT_AN_INTEGER}"),
    ],
)
def test_each_service_names_the_invalid_variable_in_one_line_and_exits_2(module, variable, value, line):
    result = start(module, **{variable: value})
    assert (result.returncode, result.stderr) == (2, line + "\n")


def test_every_invalid_setting_gets_its_own_line():
    result = start("services.retrieval", EMBEDDING_BACKEND="onnx", TORCH_THREADS="0")
    assert result.returncode == 2
    assert sorted(result.stderr.splitlines()) == [
        "retrieval: cannot start: EMBEDDING_BACKEND: Input should be 'torch' or 'onnx-int8'",
        "retrieval: cannot start: TORCH_THREADS: Input should be greater than or equal to 1",
    ]


def test_a_cross_field_check_prints_its_own_message_and_no_setting_value():
    secret = "sk-unit-test-secret-value"
    result = start("services.chat", LLM_BASE_URL="http://llm.invalid/v1", LLM_MODEL="", LLM_API_KEY=secret,
                   CAIRN_SERVICE_TOKEN="another-secret-token")
    assert (result.returncode, result.stderr) == (2, "chat: cannot start: LLM_MODEL is required when LLM_BASE_URL is set\n")
    printed = result.stdout + result.stderr
    assert secret not in printed and "another-secret-token" not in printed


def test_analytics_refuses_an_export_limit_that_would_leave_the_reports_no_connection(tmp_path: Path):
    result = start("services.analytics", CAIRN_DATA_DIR=str(tmp_path), ANALYTICS_DB_POOL_SIZE="3",
                   ANALYTICS_DB_MAX_OVERFLOW="1", ANALYTICS_MAX_EXPORTS="4")
    assert (result.returncode, result.stderr) == (
        2,
        "analytics: cannot start: ANALYTICS_MAX_EXPORTS (4) must be below ANALYTICS_DB_POOL_SIZE + "
        "ANALYTICS_DB_MAX_OVERFLOW (4): exports would leave the reports no connection\n",
    )


@pytest.fixture
def a_file(tmp_path: Path) -> Path:
    path = tmp_path / "a-file"
    path.write_text("not a folder")
    return path


@pytest.mark.parametrize(
    ("module", "env", "line"),
    [
        ("services.retrieval", {"CAIRN_DATA_DIR": "{file}/data"},
         "retrieval: cannot start: CAIRN_DATA_DIR: a part of the path is a file"),
        ("services.retrieval", {"EMBEDDING_BACKEND": "onnx-int8", "MODELS_DIR": "{file}"},
         "retrieval: cannot start: MODELS_DIR: a file stands where a folder is needed"),
        ("services.analytics", {"CAIRN_DATA_DIR": "{file}/data"},
         "analytics: cannot start: CAIRN_DATA_DIR: a part of the path is a file"),
        ("services.analytics", {"ANALYTICS_DB_URL": "sqlite:///{file}/analytics.db"},
         "analytics: cannot start: ANALYTICS_DB_URL: a file stands where a folder is needed"),
    ],
)
def test_a_folder_the_service_cannot_write_is_named_at_start(module, env, line, a_file):
    """Not a traceback from the model export or the database, nor an embedded Chroma retried forever."""
    result = start(module, **{name: value.format(file=a_file) for name, value in env.items()})
    assert (result.returncode, result.stderr) == (2, line + "\n")


def test_only_the_folders_a_configuration_writes_are_checked(a_file):
    from services.analytics.settings import Settings as AnalyticsSettings
    from services.retrieval.settings import Settings as RetrievalSettings

    unused = a_file / "data"
    # Chroma on a server and the torch backend: nothing is written under the data folder.
    RetrievalSettings(CHROMA_URL="http://chroma.internal:8000", CAIRN_DATA_DIR=unused)
    AnalyticsSettings(ANALYTICS_DB_URL="postgresql+psycopg://analytics@db.internal/analytics", CAIRN_DATA_DIR=unused)
