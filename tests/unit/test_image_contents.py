"""Each image holds only what its Dockerfile copies into /app: every module of the service (and, in the
gateway's image, the `cairn` command for `cairn user`) must import from a folder laid out as the final
stage lays out /app, with the rest of the repository out of reach. A module that starts importing code
from a folder its Dockerfile does not copy fails here rather than at the start of a container."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
# The packages each image must be able to import; the gateway's carries `cairn` for `cairn user`.
IMPORTED = {
    "gateway": ["services.gateway", "cairn"],
    "chat": ["services.chat"],
    "retrieval": ["services.retrieval"],
    "analytics": ["services.analytics"],
}
# Modules that are not imported in the image: `cairn eval` loads retrieval's code and runs where retrieval is
# installed, and alembic runs the migrations' env.py inside its own context.
NOT_IMPORTED = {"cairn.eval", "services.analytics.migrations.env"}

# Run in the laid-out folder. The editable install of this checkout would otherwise answer for any package
# the folder lacks, so its finder and the checkout's own path are removed first. A `__main__` module starts
# its service when imported: only the modules it imports are imported.
PROBE = r"""
import ast, importlib, pkgutil, sys
from pathlib import Path
app, root, skipped, packages = sys.argv[1], sys.argv[2], set(sys.argv[3].split(",")), sys.argv[4:]
sys.meta_path[:] = [f for f in sys.meta_path if "__editable__" not in getattr(f, "__module__", "")]
sys.path[:] = [p for p in sys.path if p not in ("", root)]
failures = []

def load(name):
    try:
        importlib.import_module(name)
    except Exception as exc:
        failures.append(f"{name}: {exc!r}")

for package in packages:
    load(package)
    if package not in sys.modules:
        continue
    for module in pkgutil.walk_packages(sys.modules[package].__path__, package + "."):
        if module.name in skipped:
            continue
        if module.name.rsplit(".", 1)[-1] != "__main__":
            load(module.name)
            continue
        source = Path(module.module_finder.path, "__main__.py").read_text()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                load(node.module)
for name, module in list(sys.modules.items()):
    location = getattr(module, "__file__", None) or ""
    if name.split(".")[0] in ("cairn", "services", "shared") and location and not location.startswith(app):
        failures.append(f"{name}: loaded from {location}, outside the image's /app")
print("\n".join(failures))
"""


def final_stage_copies(dockerfile: str) -> list[tuple[list[str], str]]:
    """(sources, destination under /app) of each COPY from the build context in the final stage."""
    final_stage = re.split(r"^FROM ", dockerfile, flags=re.MULTILINE)[-1]
    assert re.search(r"^WORKDIR /app$", final_stage, re.MULTILINE), "the code is expected under /app"
    copies = []
    for line in re.findall(r"^COPY (?!--from)(.+)$", final_stage, re.MULTILINE):
        *sources, destination = line.split()
        copies.append((sources, destination))
    return copies


def lay_out(dockerfile: str, app: Path) -> None:
    """Copy into `app` what the Dockerfile's final stage copies into /app."""
    for sources, destination in final_stage_copies(dockerfile):
        target = app / destination
        for source in sources:
            path = ROOT / source
            into = target / path.name if destination.endswith("/") or len(sources) > 1 else target
            if path.is_dir():
                shutil.copytree(path, into, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            else:
                into.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, into)


def import_failures(dockerfile: str, packages: list[str], app: Path) -> list[str]:
    lay_out(dockerfile, app)
    environ = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {
        "PYTHONPATH": str(app), "PYTHONDONTWRITEBYTECODE": "1",
    }
    result = subprocess.run(
        [sys.executable, "-c", PROBE, str(app), str(ROOT), ",".join(sorted(NOT_IMPORTED)), *packages],
        cwd=app, env=environ, capture_output=True, text=True, timeout=240,
    )
    assert result.returncode == 0, result.stderr
    return [line for line in result.stdout.splitlines() if line]


@pytest.mark.parametrize("name", sorted(IMPORTED))
def test_every_module_of_the_image_imports_from_what_its_dockerfile_copies(name: str, tmp_path: Path) -> None:
    dockerfile = (ROOT / "services" / name / "Dockerfile").read_text()
    assert import_failures(dockerfile, IMPORTED[name], tmp_path / "app") == []


def test_the_check_notices_a_folder_the_dockerfile_leaves_out(tmp_path: Path) -> None:
    dockerfile = (ROOT / "services" / "gateway" / "Dockerfile").read_text()
    without_cli = dockerfile.replace("COPY cairn ./cairn\n", "")
    assert without_cli != dockerfile
    failures = import_failures(without_cli, IMPORTED["gateway"], tmp_path / "app")
    assert any(line.startswith("cairn: ModuleNotFoundError") for line in failures), failures
