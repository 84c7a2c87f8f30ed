from __future__ import annotations

from argon2 import PasswordHasher, extract_parameters
from argon2.exceptions import InvalidHashError, VerificationError

_hasher = PasswordHasher()
# Verified against when the username is unknown, so a login takes as long either way.
_DUMMY_HASH = _hasher.hash("cairn-no-such-user")


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
        return _hasher.verify(password_hash or _DUMMY_HASH, password) and bool(password_hash)
    except (VerificationError, InvalidHashError):
        return False
