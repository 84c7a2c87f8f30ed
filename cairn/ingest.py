"""`cairn ingest PATH...`: upload .md/.txt/.html/.pdf files (folders recursively) to the retrieval service.

Each file becomes one document whose doc_id and source are its path relative to the current
directory (or a given base), so ingesting the same tree again is a no-op and a changed file replaces
its old version. Files go up as multipart uploads, so the service parses every format the same way
whichever client sends it.
"""
from __future__ import annotations

import mimetypes
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from tqdm import tqdm

# The types the retrieval service reads (services.retrieval.parsing.SUPPORTED_SUFFIXES; a test keeps them equal).
SUFFIXES = frozenset({".md", ".markdown", ".txt", ".html", ".htm", ".pdf"})
SERVICE_TOKEN_HEADER = "X-Service-Token"


class IngestError(Exception):
    """The retrieval service cannot take documents at all (unreachable, wrong token)."""


@dataclass
class IngestSummary:
    added: int = 0
    unchanged: int = 0
    replaced: int = 0
    failures: list[tuple[str, str]] = field(default_factory=list)  # (name, reason)
    skipped: list[str] = field(default_factory=list)  # files of other types found in folders
    interrupted_at: str | None = None  # the file being sent when Ctrl-C stopped the run

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
        if self.skipped:
            line += f" ({len(self.skipped)} files of other types skipped)"
        lines = [line, *(f"  failed: {name}: {reason}" for name, reason in self.failures)]
        if self.interrupted_at is not None:
            lines.append(f"interrupted while sending {self.interrupted_at} (it may or may not have been added); "
                         "the files after it were not sent: run the same command again to finish")
        return "\n".join(lines)


def source_name(path: Path, base: Path | None = None) -> str:
    """The path relative to `base` (default: the current directory) when inside it, else absolute; posix separators.

    A symbolic link is named by the file it leads to when that lies inside `base` (a file and a link to it
    are one document), else by its own path: a link out of `base`, or a linked folder, keeps a relative name
    instead of the absolute path of its target.
    """
    root = base or Path.cwd()
    resolved = path.resolve()
    name = _relative(resolved, root.resolve()) or _relative(Path(os.path.abspath(path)), Path(os.path.abspath(root)))
    name = name or resolved.as_posix()
    # A name that is not UTF-8 (Python keeps its bytes as surrogates) becomes text with U+FFFD in their place.
    return os.fsencode(name).decode("utf-8", "replace")


def _relative(path: Path, root: Path) -> str | None:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return None


def _link_name(link: Path, base: Path | None) -> str:
    """A broken link's own name (it resolves to nothing, or forever)."""
    return (Path(source_name(link.parent, base)) / link.name).as_posix()


def collect_files(
    paths: Iterable[Path], base: Path | None = None
) -> tuple[list[Path], list[tuple[str, str]], list[str]]:
    """Files to ingest (folders walked recursively, hidden entries skipped), paths refused up front,
    and the names of files of other types found in folders (skipped, not failed)."""
    files: list[Path] = []
    refused: list[tuple[str, str]] = []
    skipped: list[str] = []
    for path in paths:
        if path.is_dir():
            for found in sorted(path.rglob("*")):
                if any(part.startswith(".") for part in found.relative_to(path).parts):
                    continue
                if found.is_symlink() and not found.exists():  # dangling, or a loop
                    refused.append((_link_name(found, base), "broken symbolic link"))
                    continue
                if not found.is_file():
                    continue
                if found.suffix.lower() in SUFFIXES:
                    files.append(found)
                else:
                    skipped.append(source_name(found, base))
        elif path.is_file():
            if path.suffix.lower() in SUFFIXES:
                files.append(path)
            else:
                supported = ", ".join(sorted(SUFFIXES))
                refused.append((source_name(path, base), f"unsupported file type {path.suffix or '(none)'}; use {supported}"))
        elif path.is_symlink():
            refused.append((_link_name(path, base), "broken symbolic link"))
        else:
            refused.append((source_name(path, base), "no such file or folder"))
    by_name: dict[str, Path] = {}  # one upload per document: `dir/../dir/a.md` and `a.md` are one file
    for file in files:
        by_name.setdefault(source_name(file, base), file)
    return list(by_name.values()), refused, skipped


def ingest_paths(
    paths: list[Path],
    *,
    retrieval_url: str,
    service_token: str,
    progress: bool = True,
    base: Path | None = None,
    timeout_s: float = 300.0,
) -> IngestSummary:
    """Upload every file under `paths` to retrieval's /documents; a bad file is counted and skipped.

    doc_id and source are each file's path relative to `base` (default: the current directory).

    Raises IngestError when the service is unreachable or refuses the token, since then no file can succeed.
    """
    files, refused, skipped = collect_files(paths, base)
    summary = IngestSummary(failures=list(refused), skipped=skipped)
    headers = {SERVICE_TOKEN_HEADER: service_token}
    with (
        httpx.Client(base_url=retrieval_url.rstrip("/"), headers=headers, timeout=timeout_s) as client,
        tqdm(total=len(files), unit="file", desc="ingest", disable=not progress) as bar,
    ):
        for path in files:
            name = source_name(path, base)
            bar.set_postfix_str(name[-40:], refresh=False)
            try:
                status = _send(client, name=name, data=_read(path))
                setattr(summary, status, getattr(summary, status) + 1)
            except ValueError as exc:
                summary.failures.append((name, str(exc)))
                bar.write(f"failed: {name}: {exc}", file=sys.stderr)  # beside the bar; the summary goes to stdout
            except KeyboardInterrupt:  # what went in so far is worth knowing: the summary says it
                summary.interrupted_at = name
                break
            bar.update(1)
    return summary


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ValueError(exc.strerror or "unreadable") from None


def _reason(response: httpx.Response, name: str) -> str:
    try:
        message = str(response.json().get("message") or response.text)
    except ValueError:
        message = response.text
    if response.status_code in (415, 422):
        # The service names the file first; the summary already does.
        return message.removeprefix(f"{name}: ")[:300]
    return f"HTTP {response.status_code}: {message[:200]}"


def _send(client: httpx.Client, *, name: str, data: bytes) -> str:
    media_type = mimetypes.guess_type(name)[0] or "application/octet-stream"
    try:
        response = client.post(
            "/documents", files={"file": (name, data, media_type)}, data={"doc_id": name, "source": name}
        )
    except httpx.TimeoutException:
        raise ValueError("retrieval did not answer in time") from None
    except httpx.TransportError as exc:
        raise IngestError(f"retrieval service not reachable at {client.base_url}: {exc}") from exc
    if response.status_code == 401:
        raise IngestError("retrieval refused the service token (check CAIRN_SERVICE_TOKEN)")
    if response.status_code != 200:
        raise ValueError(_reason(response, name))
    status = response.json()["status"]
    if status not in ("added", "unchanged", "replaced"):
        raise ValueError(f"unexpected status {status!r}")
    return status
