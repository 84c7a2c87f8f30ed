"""`cairn ingest PATH...`: upload .md/.txt/.html/.pdf files (folders recursively) to the retrieval service.

Each file becomes one document whose doc_id and source are its path relative to the current
directory (or a given base), so ingesting the same tree again is a no-op and a changed file replaces
its old version. Files go up as multipart uploads, so the service parses every format the same way
whichever client sends it.
"""
from __future__ import annotations

import math
import mimetypes
import os
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from tqdm import tqdm

from cairn.retry_after import retry_after_s
from shared.doc_ids import MAX_SOURCE_CHARS, within_doc_id_limit

# The types the retrieval service reads (services.retrieval.parsing.SUPPORTED_SUFFIXES; a test keeps them equal).
SUFFIXES = frozenset({".md", ".markdown", ".txt", ".html", ".htm", ".pdf"})
SERVICE_TOKEN_HEADER = "X-Service-Token"
# A file whose connection drops is sent once more after this pause: a restarting replica behind a load
# balancer, or a proxy between replicas, is often back by then. Resending is safe: the service recognises
# content it already holds.
RETRY_AFTER_S = 1.0
# A 503 (or a proxy's 502/504) may say in its Retry-After when to come back; a longer wait than this is not
# worth holding the run for: the file is sent again after this long, and fails if retrieval is still away.
MAX_RETRY_WAIT_S = 30.0
UNAVAILABLE_STATUSES = (502, 503, 504)  # a proxy with no replica behind it, or retrieval without its store
# Retrieval answers once the whole file is embedded: about 3,000 chunks for 2 MB of Markdown (217 s on a busy
# two-core machine), ~32,000 for a 20 MiB text file, up to ~40 minutes busy. As long as the gateway waits
# (INGEST_UPSTREAM_TIMEOUT_S); connecting gets a short wait of its own, since no work has started then.
READ_TIMEOUT_S = 3600.0
CONNECT_TIMEOUT_S = 10.0
NO_ANSWER_IN_TIME = (
    "retrieval did not answer within {timeout_s:.0f} s; it may still be adding the file: "
    "run the same command again later, and it is reported unchanged once it is in"
)


class IngestError(Exception):
    """The retrieval service cannot take documents at all (unreachable, wrong token)."""


class RetrievalUnreachable(IngestError):
    """No connection to the retrieval service could be made for the first file: it is not running there."""


class NotRetrieval(IngestError):
    """POST /documents is not a route there (404, 405): the address is another service's, or a proxy's."""


class RetrievalGone(Exception):
    """The connection to retrieval failed, or it answered that it cannot work: no later file can go in either."""

    def __init__(self, reason: str, *, retry_after_s: float | None = None) -> None:
        super().__init__(reason)
        self.retry_after_s = retry_after_s  # when the answer's Retry-After said to come back


@dataclass
class IngestSummary:
    added: int = 0
    unchanged: int = 0
    replaced: int = 0
    failures: list[tuple[str, str]] = field(default_factory=list)  # (name, reason)
    skipped: list[str] = field(default_factory=list)  # files of other types found in folders
    interrupted: bool = False  # Ctrl-C stopped the run
    interrupted_at: str | None = None  # the file being sent then, if one was
    not_sent: int = 0  # files Ctrl-C kept from being sent
    unavailable_at: str | None = None  # the file being sent when retrieval went away

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
        if self.unavailable_at is not None:
            lines.append(f"retrieval became unavailable while sending {self.unavailable_at} (it may or may not have "
                         "been added); the files after it were not sent: run the same command again once it is back")
        if self.interrupted_at is not None:
            lines.append(f"interrupted while sending {self.interrupted_at} (it may or may not have been added); "
                         "the files after it were not sent: run the same command again to finish")
        elif self.interrupted and self.not_sent:
            lines.append("interrupted: the files not counted above were not sent: run the same command again to finish")
        elif self.interrupted:  # as the run closed its progress bar and connections: nothing is left to send
            lines.append("interrupted after the last file: every file is counted above")
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
            for found in _walk(path):
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
                refused.append((source_name(path, base), _unsupported(path)))
        elif path.is_symlink():
            refused.append((_link_name(path, base), "broken symbolic link"))
        else:
            refused.append((source_name(path, base), "no such file or folder"))
    by_name: dict[str, Path] = {}  # one upload per document: `dir/../dir/a.md` and `a.md` are one file
    for file in files:
        by_name.setdefault(source_name(file, base), file)
    return list(by_name.values()), refused, skipped


def _unsupported(path: Path) -> str:
    return f"unsupported file type {path.suffix or '(none)'}; use {', '.join(sorted(SUFFIXES))}"


def _walk(folder: Path) -> Iterable[Path]:
    """Everything under `folder` in name order, hidden entries and what lies under them left out."""
    for found in sorted(folder.rglob("*")):
        if not any(part.startswith(".") for part in found.relative_to(folder).parts):
            yield found


def named_path_problems(paths: Iterable[Path]) -> list[str]:
    """What is wrong with paths named on the command line, one line each: a path that is not there, a file
    of a type the service does not read, a folder without one file it does. Any of these is a mistake in
    the command, so it is refused before anything is sent."""
    problems = []
    for path in paths:
        try:
            if path.is_dir():
                if not os.access(path, os.R_OK | os.X_OK):
                    problems.append(f"{path}: permission denied")
                elif not any(found.suffix.lower() in SUFFIXES and found.is_file() for found in _walk(path)):
                    problems.append(f"{path}: no {'/'.join(sorted(SUFFIXES))} files in this folder")
            elif path.is_file():
                if path.suffix.lower() not in SUFFIXES:
                    problems.append(f"{path}: {_unsupported(path)}")
            elif path.is_symlink():
                problems.append(f"{path}: broken symbolic link")
            elif path.exists():
                problems.append(f"{path}: not a file or folder")
            else:
                problems.append(f"{path}: no such file or folder")
        except OSError as exc:  # a name too long for the file system, say
            problems.append(f"{path}: {exc.strerror or exc}")
    return problems


def ingest_paths(
    paths: list[Path],
    *,
    retrieval_url: str,
    service_token: str,
    progress: bool = True,
    base: Path | None = None,
    timeout_s: float = READ_TIMEOUT_S,
) -> IngestSummary:
    """Upload every file under `paths` to retrieval's /documents; a bad file is counted and skipped.

    doc_id and source are each file's path relative to `base` (default: the current directory).
    A file whose connection fails is sent once more after RETRY_AFTER_S, or after the wait retrieval's
    Retry-After asks for (at most MAX_RETRY_WAIT_S) when it answers that it cannot work; when it is still gone, that
    file and every one after it are counted failed, and the summary says so. Ctrl-C ends the run with a summary.
    The progress bar (`progress`) is drawn only on a terminal: in a file or a pipe, its redraws would pile up.

    Raises IngestError when the service refuses the token, is not the retrieval service (NotRetrieval), or
    cannot be reached before any file went in, since then no file can succeed.
    """
    files, refused, skipped = collect_files(paths, base)
    summary = IngestSummary(failures=list(refused), skipped=skipped)
    headers = {SERVICE_TOKEN_HEADER: service_token}
    uploads = 0  # when the first upload cannot reach retrieval, one error line says it all
    sending: str | None = None
    counted = 0  # files whose outcome the summary holds
    # Around the whole run, the closing of the progress bar (its last redraw) and of the connections too: Ctrl-C
    # anywhere in it keeps the summary, also once the last file is in.
    try:
        with (
            httpx.Client(
                base_url=retrieval_url.rstrip("/"),
                headers=headers,
                timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, CONNECT_TIMEOUT_S)),
            ) as client,
            tqdm(total=len(files), unit="file", desc="ingest", disable=None if progress else True) as bar,
        ):
            for index, path in enumerate(files):
                sending = name = source_name(path, base)
                bar.set_postfix_str(name[-40:])  # drawn now: the file may take minutes
                try:
                    data = _read(path)
                    uploads += 1
                    status = _send_retrying(client, name=name, data=data)
                    setattr(summary, status, getattr(summary, status) + 1)
                except ValueError as exc:
                    summary.failures.append((name, str(exc)))
                    bar.write(f"failed: {name}: {exc}", file=sys.stderr)  # beside the bar; the summary goes to stdout
                except RetrievalGone as exc:
                    if uploads == 1:
                        no_connection = isinstance(exc.__cause__, httpx.TransportError)  # not an answer such as 503
                        if no_connection:
                            message = f"retrieval service not reachable at {client.base_url}: {exc}"
                            raise RetrievalUnreachable(message) from None
                        # It answered, naming what it lacks (such as Chroma): the operator should look there.
                        message = f"retrieval service at {client.base_url} cannot take documents: {exc}"
                        raise IngestError(message) from None
                    summary.unavailable_at = name
                    summary.failures.append((name, f"retrieval unavailable: {exc}"))
                    not_sent = [source_name(rest, base) for rest in files[index + 1:]]
                    summary.failures += [(rest, "not sent: retrieval unavailable") for rest in not_sent]
                    bar.write(f"failed: {name}: retrieval unavailable: {exc}", file=sys.stderr)
                    sending, counted = None, len(files)
                    break
                sending, counted = None, index + 1
                bar.update(1)
    except KeyboardInterrupt:  # what went in so far is worth knowing: the summary says it
        summary.interrupted, summary.interrupted_at = True, sending
        summary.not_sent = len(files) - counted - (sending is not None)
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


def _send_retrying(client: httpx.Client, *, name: str, data: bytes) -> str:
    try:
        return _send(client, name=name, data=data)
    except RetrievalGone as exc:
        if exc.retry_after_s is None:
            time.sleep(RETRY_AFTER_S)
        else:
            wait_s = min(exc.retry_after_s, MAX_RETRY_WAIT_S)
            tqdm.write(f"retrieval unavailable: {exc}; sending {name} again in {math.ceil(wait_s)} s", file=sys.stderr)
            time.sleep(wait_s)
    return _send(client, name=name, data=data)


def _send(client: httpx.Client, *, name: str, data: bytes) -> str:
    media_type = mimetypes.guess_type(name)[0] or "application/octet-stream"
    fields = {"doc_id": within_doc_id_limit(name), "source": name}  # as retrieval shortens a file name
    if len(name) > MAX_SOURCE_CHARS:  # refused as a field; the file name is the source all the same
        del fields["source"]
    try:
        response = client.post("/documents", files={"file": (name, data, media_type)}, data=fields)
    except httpx.ConnectTimeout as exc:  # nothing was sent: as if the connection were refused
        raise RetrievalGone(str(exc) or type(exc).__name__) from exc
    except httpx.TimeoutException:  # retrieval goes on with the file it has
        raise ValueError(NO_ANSWER_IN_TIME.format(timeout_s=client.timeout.read)) from None
    except httpx.TransportError as exc:
        raise RetrievalGone(str(exc) or type(exc).__name__) from exc
    if response.status_code == 401:
        raise IngestError("retrieval refused the service token (check CAIRN_SERVICE_TOKEN)")
    if response.status_code in (404, 405):  # retrieval answers every upload otherwise: no file would go in
        raise NotRetrieval(f"no retrieval service at {client.base_url}: POST /documents answered {response.status_code}")
    if response.status_code in UNAVAILABLE_STATUSES:
        raise RetrievalGone(_reason(response, name), retry_after_s=retry_after_s(response))
    if response.status_code != 200:
        raise ValueError(_reason(response, name))
    status = response.json()["status"]
    if status not in ("added", "unchanged", "replaced"):
        raise ValueError(f"unexpected status {status!r}")
    return status
