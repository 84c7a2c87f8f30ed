"""`cairn ingest PATH...`: send .md/.txt files (folders recursively) to the retrieval service.

Each file becomes one document whose doc_id and source are its path relative to the current
directory, so ingesting the same tree again is a no-op and a changed file replaces its old version.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from tqdm import tqdm

SUFFIXES = frozenset({".md", ".markdown", ".txt"})
SERVICE_TOKEN_HEADER = "X-Service-Token"


class IngestError(Exception):
    """The retrieval service cannot take documents at all (unreachable, wrong token)."""


@dataclass
class IngestSummary:
    added: int = 0
    unchanged: int = 0
    replaced: int = 0
    failures: list[tuple[str, str]] = field(default_factory=list)  # (name, reason)

    @property
    def failed(self) -> int:
        return len(self.failures)

    @property
    def failed_names(self) -> list[str]:
        return [name for name, _ in self.failures]

    @property
    def total(self) -> int:
        return self.added + self.unchanged + self.replaced + self.failed

    def describe(self) -> str:
        """One line for the terminal, then one per failed file."""
        line = f"{self.added} added, {self.replaced} replaced, {self.unchanged} unchanged, {self.failed} failed"
        return "\n".join([line, *(f"  failed: {name}: {reason}" for name, reason in self.failures)])


def source_name(path: Path, base: Path | None = None) -> str:
    """The path relative to `base` (default: the current directory) when inside it, else absolute; posix separators."""
    resolved = path.resolve()
    try:
        return resolved.relative_to((base or Path.cwd()).resolve()).as_posix()
    except ValueError:
        return resolved.as_posix()


def collect_files(paths: Iterable[Path], base: Path | None = None) -> tuple[list[Path], list[tuple[str, str]]]:
    """Files to ingest (folders walked recursively, hidden entries skipped) and paths refused up front."""
    files: list[Path] = []
    refused: list[tuple[str, str]] = []
    for path in paths:
        if path.is_dir():
            files += sorted(
                p
                for p in path.rglob("*")
                if p.is_file() and p.suffix.lower() in SUFFIXES and not any(part.startswith(".") for part in p.relative_to(path).parts)
            )
        elif path.is_file():
            if path.suffix.lower() in SUFFIXES:
                files.append(path)
            else:
                refused.append((source_name(path, base), f"unsupported file type {path.suffix or '(none)'}; use .md or .txt"))
        else:
            refused.append((source_name(path, base), "no such file or folder"))
    return list(dict.fromkeys(files)), refused


def _read(path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ValueError("not UTF-8 text") from None
    except OSError as exc:
        raise ValueError(exc.strerror or "unreadable") from None
    if not text.strip():
        raise ValueError("empty file")
    return text


def ingest_paths(
    paths: list[Path],
    *,
    retrieval_url: str,
    service_token: str,
    progress: bool = True,
    base: Path | None = None,
    timeout_s: float = 300.0,
) -> IngestSummary:
    """POST every file under `paths` to retrieval's /documents; a bad file is counted and skipped.

    doc_id and source are each file's path relative to `base` (default: the current directory).

    Raises IngestError when the service is unreachable or refuses the token, since then no file can succeed.
    """
    files, refused = collect_files(paths, base)
    summary = IngestSummary(failures=list(refused))
    headers = {SERVICE_TOKEN_HEADER: service_token}
    with (
        httpx.Client(base_url=retrieval_url.rstrip("/"), headers=headers, timeout=timeout_s) as client,
        tqdm(total=len(files), unit="file", desc="ingest", disable=not progress) as bar,
    ):
        for path in files:
            name = source_name(path, base)
            bar.set_postfix_str(name[-40:], refresh=False)
            try:
                status = _send(client, name=name, text=_read(path))
                setattr(summary, status, getattr(summary, status) + 1)
            except ValueError as exc:
                summary.failures.append((name, str(exc)))
                bar.write(f"failed: {name}: {exc}")
            bar.update(1)
    return summary


def _send(client: httpx.Client, *, name: str, text: str) -> str:
    try:
        response = client.post("/documents", json={"doc_id": name, "source": name, "text": text})
    except httpx.TimeoutException:
        raise ValueError("retrieval did not answer in time") from None
    except httpx.TransportError as exc:
        raise IngestError(f"retrieval service not reachable at {client.base_url}: {exc}") from exc
    if response.status_code == 401:
        raise IngestError("retrieval refused the service token (check CAIRN_SERVICE_TOKEN)")
    if response.status_code != 200:
        try:
            reason = response.json().get("message") or response.text
        except ValueError:
            reason = response.text
        raise ValueError(f"HTTP {response.status_code}: {reason[:200]}")
    status = response.json()["status"]
    if status not in ("added", "unchanged", "replaced"):
        raise ValueError(f"unexpected status {status!r}")
    return status
