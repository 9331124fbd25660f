"""Passwords never shown: with any character SQLAlchemy accepts in them, in ``mask_url``, in a
connection error from ``sweeps status`` and in its ``--debug`` traceback."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from lm.errors import SweepsError
from sweeps import storage as st
from tests.sweeps.cli import assert_user_error, sweeps

#: One password per awkward character; each is what SQLAlchemy (and so the driver) reads as the
#: password, except "@" (a literal "@" leaves the rest of the password in the host).
PASSWORDS = [
    "Hunter2/Leak",
    "Hunter2#Leak",
    "Hunter2?Leak",
    "Hunter2@Leak",
    "Hunter2:Leak",
    "Hunter2%Leak",
    "Hunter2%40Leak",
]


def secret_parts(password: str) -> list[str]:
    """What must not appear: each side of the awkward character (both are secret)."""
    for sep in ("%40", "/", "#", "?", "@", ":", "%"):
        if sep in password:
            return password.split(sep)
    return [password]


@pytest.mark.parametrize("password", PASSWORDS)
@pytest.mark.parametrize(
    "url",
    [
        "postgresql://postgres:{pw}@127.0.0.1/x",
        "postgresql+psycopg://postgres:{pw}@db.example:5432/sweeps?sslmode=require",
        "postgresql://postgres:{pw}@127.0.0.1:notaport/x",  # SQLAlchemy cannot parse this one
    ],
)
def test_mask_url_hides_every_password(password: str, url: str) -> None:
    masked = st.mask_url(url.format(pw=password))
    for part in secret_parts(password):
        assert part not in masked, masked
    assert "***@" in masked


def test_mask_url_keeps_the_rest() -> None:
    assert (
        st.mask_url("postgresql://u:a/b#c@h:5432/db?sslmode=require")
        == "postgresql://u:***@h:5432/db?sslmode=require"
    )
    assert st.mask_url("postgresql://u:p@ss@127.0.0.1/x") == "postgresql://u:***@127.0.0.1/x"
    assert (
        st.mask_url("postgresql://h/db?user=u&password=a/b&x=1")
        == "postgresql://h/db?user=u&password=***&x=1"
    )
    assert st.mask_url("sqlite:////tmp/my db#1.db") == "sqlite:////tmp/my db#1.db"
    assert st.mask_url("sqlite://") == "sqlite://"
    assert st.mask_url("not a url") == "not a url"


@pytest.mark.parametrize("password", PASSWORDS)
def test_connection_error_hides_the_password(password: str) -> None:
    with pytest.raises(SweepsError) as err:
        st.open_storage(f"postgresql://postgres:{password}@127.0.0.1:1/x")
    for part in secret_parts(password):
        assert part not in str(err.value), str(err.value)
    assert err.value.__cause__ is None and err.value.__suppress_context__


def test_a_port_that_is_not_a_number_is_a_user_error() -> None:
    with pytest.raises(SweepsError, match="not a database URL") as err:
        st.normalize_url("postgresql://u:Hunter2/Leak@h:notaport/x")
    assert "Hunter2" not in str(err.value) and "Leak" not in str(err.value)


def test_an_at_in_the_password_gets_a_hint() -> None:
    with pytest.raises(SweepsError, match="%40") as err:
        st.open_storage("postgresql://postgres:Hunter2@Leak@127.0.0.1:1/x")
    assert "Leak" not in str(err.value) and "Hunter2" not in str(err.value)


@pytest.mark.parametrize("password", PASSWORDS)
def test_status_never_prints_the_password(password: str) -> None:
    url = f"postgresql://postgres:{password}@127.0.0.1:1/x"  # port 1: refused at once
    plain = sweeps("status", "--storage", url, timeout=120)
    assert_user_error(plain, "cannot open storage", "***@127.0.0.1:1/x")
    debug = sweeps("--debug", "status", "--storage", url, timeout=120)
    assert debug.returncode != 0 and "SweepsError" in debug.stderr, debug.stderr
    for proc in (plain, debug):
        for part in secret_parts(password):
            assert part not in proc.stdout + proc.stderr, proc.stderr


def test_masked_url_is_still_the_same_database() -> None:
    """The masked form is SQLAlchemy's rendering: host, port, database and query survive."""
    url = "postgresql://u:x/y@h:5433/db?sslmode=require"
    shown = sa.engine.make_url(st.mask_url(url))
    original = sa.engine.make_url(url)
    assert (shown.host, shown.port, shown.database, dict(shown.query)) == (
        original.host,
        original.port,
        original.database,
        dict(original.query),
    )
