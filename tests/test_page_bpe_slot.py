"""Learning a BPE on the Training page waits in the compute line like the other pages' heavy work."""
import threading

from tests.polling import wait_until
from tests.test_page_queue import long_lane, slot_taken_elsewhere  # noqa: F401  (long_lane: a fixture)


def test_learning_a_bpe_waits_for_a_slot(open_page, tmp_path, long_lane):
    at = open_page("pages/training.py", models_dir=tmp_path / "models")
    at.radio(key="train_corpus").set_value("pydoc").run()
    at.radio(key="train_tokenizer").set_value("bpe").run()
    assert not at.exception and long_lane.running == 0  # the BPE of the default size was learned, the slot given back
    with slot_taken_elsewhere(long_lane):
        at.number_input(key="train_bpe_vocab").set_value(272)  # a size no run has learned yet
        run = threading.Thread(target=at.run)
        run.start()
        wait_until(lambda: long_lane.waiting == 1)  # in line behind the other student's work
    run.join(120)
    assert not run.is_alive() and not at.exception
    assert {m.label: m.value for m in at.metric}["Vocabulary m"] == "272"
    wait_until(lambda: long_lane.waiting == 0 and long_lane.running == 0)


def test_a_bpe_already_learned_skips_the_line(open_page, tmp_path, long_lane):
    """The same text and size again (a rerun, another student on the same corpus) reads the cached BPE without
    queueing, even while the only slot is taken: a key registry that recorded nothing once the work had finished
    made every rerun of the page wait."""
    at = open_page("pages/training.py", models_dir=tmp_path / "models")
    at.radio(key="train_corpus").set_value("pydoc").run()
    at.radio(key="train_tokenizer").set_value("bpe").run()
    assert not at.exception and long_lane.running == 0
    with slot_taken_elsewhere(long_lane):
        run = threading.Thread(target=at.run)
        run.start()
        run.join(60)
        assert not run.is_alive() and long_lane.waiting == 0
    assert not at.exception
