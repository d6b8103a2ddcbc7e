"""Red team: a fleet DSN on a port of this machine sends nothing to another user's program.

libpq connects by itself and sends the user name at once, and the password in clear to a
server that asks for it so (AuthenticationCleartextPassword; libpq 15 has no `require_auth`
to refuse it). A second local user who binds 127.0.0.1:5432 while the person's PostgreSQL is
stopped would get the database password, which writes every machine's routine state. The
real second user (scripts/second-user.sh) listens; the connection is refused before libpq
opens it, naming the port and the uid, and the listener received nothing. A real
PostgreSQL of this user (the other fleet tests) still connects."""

from __future__ import annotations

import pytest

from routines.ledger.model import LedgerUnavailable
from routines.ledger.postgres_open import PgConnection
from tests.dashboard.squatkit import SecondUser


def test_a_dsn_on_another_users_port_is_never_connected() -> None:
    squat = SecondUser.from_env().listen()
    try:
        for host in ("127.0.0.1", "localhost"):
            dsn = f"postgresql://fleet:hunter2-fleet@{host}:{squat.port}/vinos"
            with pytest.raises(LedgerUnavailable) as info:
                PgConnection(dsn)
            said = str(info.value)
            assert f"port {squat.port} is held by another user's program (uid {squat.uid})" in (
                said
            )
            assert "hunter2" not in said
        assert squat.received() == []
    finally:
        squat.close()


def test_a_postgresql_of_this_user_still_connects(pg_dsn: str) -> None:
    conn = PgConnection(pg_dsn)
    try:
        assert conn.ping()
    finally:
        conn.close()
