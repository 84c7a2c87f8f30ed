"""`cairn eval`: BEIR datasets through Cairn's own ingestion and search, scored with ir-measures."""
