"""The password check: hashes open to their password only, a missing hash to none, and the stand-in hash an
unknown username is checked against is made once, when a server starts, not when the module is imported."""
import subprocess
import sys
from pathlib import Path

import pytest
from argon2 import Type, extract_parameters

from services.gateway import passwords

pytestmark = pytest.mark.unit
REPO = Path(__file__).resolve().parents[3]


@pytest.mark.production_password_cost
def test_passwords_are_hashed_with_argon2id_at_the_recommended_cost():
    """RFC 9106's second recommended option, argon2-cffi's default: what an attacker with the hashes must pay
    for every guess. Other tests hash at the lowest cost (tests/conftest.py)."""
    cost = extract_parameters(passwords.hash_password("correct horse"))
    assert (cost.type, cost.time_cost, cost.memory_cost, cost.parallelism) == (Type.ID, 3, 64 * 1024, 4)
    assert extract_parameters(passwords._dummy_hash()) == cost, "an unknown username costs a login as much"


def test_a_hash_opens_to_its_password_only():
    stored = passwords.hash_password("correct horse")
    assert passwords.verify_password(stored, "correct horse")
    assert not passwords.verify_password(stored, "wrong horse")


@pytest.mark.parametrize("stored", [None, "", "not an argon2 hash"])
def test_a_missing_or_unreadable_hash_opens_to_no_password(stored):
    assert not passwords.verify_password(stored, "cairn-no-such-user")  # not even the stand-in hash's own password
    assert not passwords.verify_password(stored, "")


def test_importing_makes_no_hash_and_prepare_makes_the_one_logins_use():
    probe = (
        "from services.gateway import passwords as p; before = p._dummy_hash.cache_info().currsize; p.prepare(); "
        "p.verify_password(None, 'x'); info = p._dummy_hash.cache_info(); print(before, info.currsize, info.misses)"
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["0", "1", "1"]  # none at import; one made by prepare, and the login reused it
