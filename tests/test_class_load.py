"""bench.class_load, small: real websocket students on two replicas of the Class page sharing one SQLite store, one
replica killed mid-round and restarted: every recorded vote is in the store's tallies exactly once."""
import json

import pytest

pytestmark = pytest.mark.slow


def test_a_small_class_across_two_replicas_with_one_killed_loses_no_vote(capsys):
    from bench import class_load

    assert class_load.main(["--students", "6", "--rounds", "2", "--think", "0.2", "0.6", "--kill", "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["lost_or_double"] == 0 and result["errors"] == 0
    assert result["votes_recorded"] >= 6 * 2 * 2 and result["reconnects"] >= 1  # the kill was felt, and survived
