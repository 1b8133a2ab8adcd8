"""Issue 55: a forecast run that finished without a result row is let go and said, not polled for ever."""
from types import SimpleNamespace

import ui.forecast as fcui


class FakeSt:
    def __init__(self):
        self.session_state, self.warnings = {}, []

    def warning(self, msg, icon=None):
        self.warnings.append(msg)

    def rerun(self):
        raise AssertionError("no rerun: there is nothing to settle")


def test_a_run_finished_with_no_row_is_let_go_and_said_once(monkeypatch):
    fake = FakeSt()
    monkeypatch.setattr(fcui, "st", fake)
    status = SimpleNamespace(state="finished", rows=[], problem="runs.csv cannot be read")
    fake.session_state.update(scal_fc_job=SimpleNamespace(status=lambda: status), scal_fc_pending={"round": 1})
    assert fcui.poll() == (None, None)
    assert "scal_fc_job" not in fake.session_state and "scal_fc_pending" not in fake.session_state
    fcui.show_lost()
    fcui.show_lost()
    assert fake.warnings == ["The run finished but left no result: runs.csv cannot be read; train it again."]
    assert fcui.poll() == (None, None)  # nothing left to poll
