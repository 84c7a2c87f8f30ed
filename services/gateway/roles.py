"""Roles build on each other: an analyst may do all a user may, an admin all an analyst may."""
from __future__ import annotations

ROLES = ("user", "analyst", "admin")
_RANK = {role: rank for rank, role in enumerate(ROLES)}


def validate_roles(roles: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    unknown = [r for r in roles if r not in _RANK]
    if unknown or not roles:
        raise ValueError(f"roles must be a non-empty subset of {', '.join(ROLES)}; got {', '.join(roles) or 'none'}")
    return tuple(sorted(set(roles), key=_RANK.__getitem__))


def grants(roles: tuple[str, ...], required: str) -> bool:
    return any(_RANK.get(role, -1) >= _RANK[required] for role in roles)
