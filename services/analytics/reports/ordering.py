"""Text ordered by code point on every backend, as SQLite's default collation and Python's sorted() order it.

PostgreSQL orders text by its database's collation, which is often a language's (en_US.UTF-8 on many
installations): there "doc_b" comes before "Doc-a", and a report cut by its limit among ties would list other
items on PostgreSQL than on SQLite.
"""
from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.visitors import InternalTraversal


def by_code_point(column: ColumnElement[Any]) -> ColumnElement[Any]:
    """`column`, compared by code point where it is ordered."""
    return _CodePointOrder(column)


class _CodePointOrder(ColumnElement[Any]):
    inherit_cache = True
    _traverse_internals = [("column", InternalTraversal.dp_clauseelement)]

    def __init__(self, column: ColumnElement[Any]) -> None:
        self.column = column
        self.type = column.type


@compiles(_CodePointOrder)
def _as_it_is(element: _CodePointOrder, compiler, **kw) -> str:
    return compiler.process(element.column, **kw)


@compiles(_CodePointOrder, "postgresql")
def _in_the_c_collation(element: _CodePointOrder, compiler, **kw) -> str:
    return f'{compiler.process(element.column, **kw)} COLLATE "C"'
