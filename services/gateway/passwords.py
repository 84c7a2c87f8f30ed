from __future__ import annotations

from functools import cache

from argon2 import PasswordHasher, extract_parameters
from argon2.exceptions import InvalidHashError, VerificationError

_hasher = PasswordHasher()


@cache
def _dummy_hash() -> str:
    """Verified against when the username is unknown, so a login takes as long either way. Made on first use, not
    at import: a hash costs a third of a second and 64 MiB, which every `cairn` command would pay at start."""
    return _hasher.hash("cairn-no-such-user")


def prepare() -> None:
    """Make the stand-in hash now (a server calls this at start), so that no login pays for it: the first one
    for an unknown username would otherwise take twice as long as the others."""
    _dummy_hash()


def hash_password(password: str) -> str:
    return _hasher.hash(password)


def is_password_hash(stored: str) -> bool:
    """Whether `stored` is a hash a password can be checked against (not blank, nor a password typed in)."""
    try:
        extract_parameters(stored)
    except InvalidHashError:
        return False
    return True


def verify_password(password_hash: str | None, password: str) -> bool:
    """Whether `password` opens `password_hash`; a missing or blank hash opens to none (checked all the same)."""
    try:
        return _hasher.verify(password_hash or _dummy_hash(), password) and bool(password_hash)
    except (VerificationError, InvalidHashError):
        return False
