"""Concrete adapters for the Protocols in services.retrieval.ports."""
