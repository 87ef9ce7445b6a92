"""`show stat`'s backend sessions and the stored entries a reload's handover waits for
(`nodeagent/haproxy/parse.py`)."""

from __future__ import annotations

from nodeagent.haproxy.parse import parse_backend_sessions, stored_entries

STAT = (
    "# pxname,svname,qcur,qmax,scur,smax,slim,stot,bin,bout\n"
    "be,BACKEND,0,0,2,5,,40,100,200\n"
    "other,BACKEND,0,0,0,1,,7,0,0\n"
    "be,SRV_1,0,0,2,5,,40,100,200\n"
    "\n"
)


def test_backend_rows_give_current_and_total_sessions_by_name() -> None:
    assert parse_backend_sessions(STAT) == {"be": (2, 40), "other": (0, 7)}


def test_no_header_no_sessions() -> None:
    assert parse_backend_sessions("Unknown command\n") == {}


def test_a_header_without_the_session_columns_gives_no_sessions() -> None:
    """Read before every reload: a column it lacks must not fail the reload (a
    ValueError), only leave the count whole."""
    assert parse_backend_sessions("# pxname,svname,qcur\nbe,BACKEND,0\n") == {}


def test_stored_entries_leave_out_the_streams_in_flight_and_those_started_meanwhile() -> None:
    used = {"be": 13, "other": 4, "lone": 9}
    before = {"be": (2, 40), "other": (0, 7)}
    after = {"be": (1, 41), "other": (0, 7)}  # one ended, one started while reading
    # be: 2 current + 1 started may each hold one; other: none in flight; lone: no backend
    assert stored_entries(used, before, after) == {"be": 10, "other": 4, "lone": 9}


def test_stored_entries_never_go_below_zero() -> None:
    assert stored_entries({"be": 1}, {"be": (5, 10)}, {"be": (5, 10)}) == {"be": 0}
