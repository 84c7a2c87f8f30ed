"""Reading POST /documents bodies for api.py: a size cap enforced while reading, JSON or multipart.

HTTP-layer code (it knows Starlette's request), kept out of the route so the route stays thin.
"""
from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass

from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser
from starlette.requests import Request

from services.retrieval import ingestion, parsing
from services.retrieval.errors import PayloadTooLarge, UnsupportedMediaType
from services.retrieval.models import DocumentIn, UploadFields, names_similar_documents
from shared import json_body
from shared.errors import BadRequest


MAX_PARTS = 20  # of files, and of form fields, in one multipart body


@dataclass(frozen=True)
class Upload:
    filename: str
    media_type: str | None
    data: bytes
    fields: UploadFields


def media_type(request: Request) -> str:
    return request.headers.get("content-type", "").split(";")[0].strip().lower()


async def read_body(request: Request, *, limit: int) -> bytes:
    """The whole body, refusing (413) one over `limit` bytes without reading past the limit."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"the body is {int(declared)} bytes; the limit is {limit} (MAX_UPLOAD_BYTES)")
    parts, size = [], 0
    async for part in request.stream():
        size += len(part)
        if size > limit:
            raise PayloadTooLarge(f"the body is over the limit of {limit} bytes (MAX_UPLOAD_BYTES)")
        parts.append(part)
    return b"".join(parts)


def _validated(model, data):
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        # The same 422 (invalid field) answer as for a body FastAPI validates itself.
        raise RequestValidationError(exc.errors(include_url=False)) from None


def json_document(body: bytes) -> DocumentIn:
    """The JSON body's document, read as every route reads JSON (I-JSON: 400 for malformed JSON)."""
    try:
        value = json_body.loads(body)
    except json.JSONDecodeError as exc:
        raise json_body.refusal_of_unreadable(exc) from None
    if not isinstance(value, dict):  # said as pydantic says it of JSON, not naming the model's class
        raise RequestValidationError([{"loc": (), "msg": "Input should be an object", "type": "model_type"}])
    return _validated(DocumentIn, value)


async def _once(body: bytes) -> AsyncIterator[bytes]:
    yield body


async def multipart_upload(request: Request, body: bytes) -> Upload:
    """The `file` part and its form fields; 400 for a broken multipart body, 422 without a file part."""
    # More than one file is read, to be refused as such (422), not as an unreadable body (400).
    parser = MultiPartParser(
        request.headers, _once(body), max_files=MAX_PARTS, max_fields=MAX_PARTS, max_part_size=64 * 1024
    )
    try:
        form = await parser.parse()
    except MultiPartException as exc:
        raise BadRequest(f"unreadable multipart body: {exc.message}") from None
    try:
        files = [value for _, value in form.multi_items() if isinstance(value, UploadFile)]
        if len(files) > 1:
            names = ", ".join(f.filename or "(no name)" for f in files)
            message = f"send one file per request; this body holds {len(files)} ({names})"
            raise RequestValidationError([{"loc": ("file",), "msg": message, "type": "value_error"}])
        upload = form.get("file")
        if isinstance(upload, str):
            message = "the 'file' part has no file name; send it as a file (curl: -F file=@PATH)"
            raise RequestValidationError([{"loc": ("file",), "msg": message, "type": "value_error"}])
        if upload is None:
            raise RequestValidationError([{"loc": ("file",), "msg": "a 'file' part is required", "type": "missing"}])
        fields = _validated(UploadFields, {k: v for k, v in form.items() if k != "file" and isinstance(v, str) and v != ""})
        filename = (upload.filename or "").strip()
        if not filename:
            raise RequestValidationError([{"loc": ("file",), "msg": "the file part needs a filename", "type": "missing"}])
        return Upload(filename=filename, media_type=upload.content_type, data=await upload.read(), fields=fields)
    finally:
        await form.close()


def refuse_content_type(kind: str) -> UnsupportedMediaType:
    # Naming no route: users reach this one through the gateway, at another path.
    return UnsupportedMediaType(
        "send a document as application/json, or as multipart/form-data with a 'file' part; "
        f"not {kind or 'no content type'}"
    )


def doc_id_of_upload(upload: Upload) -> str | None:
    """The doc_id given, else the one the file name gives; 422 for a file name giving one no URL can name."""
    if upload.fields.doc_id:
        return upload.fields.doc_id
    derived = ingestion.doc_id_of_path(upload.filename)
    if names_similar_documents(derived):
        message = (
            f"the file name {upload.filename!r} gives the doc_id {derived!r}, which must not end in '/similar': a URL "
            "ending so asks for the documents similar to another one; send a doc_id field"
        )
        raise RequestValidationError([{"loc": ("file",), "msg": message, "type": "value_error"}])
    return derived or None


async def document_from_request(request: Request, *, limit: int) -> ingestion.NewDocument:
    """The document in a POST /documents body: JSON fields, or an uploaded file parsed by its type.

    An upload's doc_id and source default to its file name (the doc_id made of its path's names, as ingestion
    derives one from a source).
    """
    kind = media_type(request)
    if kind not in ("", "application/json", "multipart/form-data"):
        raise refuse_content_type(kind)
    body = await read_body(request, limit=limit)
    if kind == "multipart/form-data":
        upload = await multipart_upload(request, body)
        doc_id = doc_id_of_upload(upload)
        parsed = await asyncio.to_thread(parsing.parse, upload.filename, upload.data, media_type=upload.media_type)
        fields = upload.fields.model_dump()
        fields["doc_id"] = doc_id
        fields["source"] = fields["source"] or upload.filename
        fields["metadata"] = fields["metadata"] or {}
        return ingestion.from_parsed(parsed, **fields)
    document = json_document(body).model_dump()
    document["metadata"] = document["metadata"] or {}
    return await asyncio.to_thread(lambda: ingestion.from_text(**document))


def _form_schema() -> dict:
    schema = UploadFields.model_json_schema()
    for name, field in schema["properties"].items():
        # A form field is a string (metadata: a JSON object, see OPENAPI_BODY's encoding), never null; an
        # unfilled one ("") counts as absent, so the default applies.
        text = next(choice for choice in field.pop("anyOf") if choice["type"] in ("string", "object"))
        text.pop("minLength", None)
        field.pop("default", None)
        schema["properties"][name] = {**text, **field}
    suffixes = ", ".join(sorted(parsing.SUPPORTED_SUFFIXES))
    file = {
        "type": "string",
        "format": "binary",
        "description": f"The document; its type is read from the file name's suffix ({suffixes}), or from the "
        "part's Content-Type for a name without one. A type Cairn cannot read is 415; a corrupt or empty file 422.",
    }
    schema["properties"] = {"file": file, **schema["properties"]}
    schema["required"] = ["file"]
    return schema


OPENAPI_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {"schema": DocumentIn.model_json_schema()},
            "multipart/form-data": {
                "schema": _form_schema(),
                "encoding": {
                    "file": {"contentType": ", ".join(parsing.SUPPORTED_MEDIA_TYPES)},
                    "metadata": {"contentType": "application/json"},
                },
            },
        },
    }
}
