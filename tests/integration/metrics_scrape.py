"""Read a service's /metrics with prometheus_client's own parser, and compare two scrapes."""
from __future__ import annotations

from dataclasses import dataclass

import httpx
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample


@dataclass(frozen=True)
class Scrape:
    samples: list[Sample]

    @classmethod
    def parse(cls, text: str) -> Scrape:
        return cls([sample for family in text_string_to_metric_families(text) for sample in family.samples])

    def value(self, name: str, **labels: str) -> float:
        """The sum of the samples named `name` whose labels include `labels` (0 when there are none)."""
        return sum(s.value for s in self.matching(name, **labels))

    def matching(self, name: str, **labels: str) -> list[Sample]:
        return [s for s in self.samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]


def scrape(base_url: str) -> Scrape:
    response = httpx.get(f"{base_url}/metrics", timeout=10)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    return Scrape.parse(response.text)


def moved(before: Scrape, after: Scrape, name: str, **labels: str) -> float:
    """How far a counter (or a histogram's _count/_sum) moved between two scrapes."""
    return after.value(name, **labels) - before.value(name, **labels)
