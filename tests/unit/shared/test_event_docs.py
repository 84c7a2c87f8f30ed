"""docs/events.md is what the generator makes of the event models, so it cannot go stale."""
from __future__ import annotations

from pathlib import Path

import pytest

from shared.event_docs import EVENT_TYPES, render
from shared.events import ROUTING_KEYS, SCHEMA_VERSION

pytestmark = pytest.mark.unit

DOC = Path(__file__).resolve().parents[3] / "docs" / "events.md"


def test_the_committed_event_docs_are_current() -> None:
    assert DOC.read_text() == render(), "docs/events.md is stale: run `make docs-events`"


def test_every_event_type_its_routing_key_and_every_field_is_documented() -> None:
    text = render()
    assert {e.__name__ for e in EVENT_TYPES} == set(ROUTING_KEYS)
    for event in EVENT_TYPES:
        assert f"## {event.__name__}" in text and f"`{ROUTING_KEYS[event.__name__]}`" in text
        for name, field in event.model_fields["data"].annotation.model_fields.items():
            assert field.description, f"{event.__name__}.data.{name} has no description"
            assert f"- `{name}` (" in text
    assert f"The current schema version is {SCHEMA_VERSION}" in text
