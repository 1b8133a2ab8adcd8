"""The gate of heavy computations: slots, arrival order, what a waiting caller is told, the bound, giving up."""
import threading


from core.serve.gate import Gate, GateFull
from tests.polling import wait_until


def test_no_more_than_slots_run_at_once_and_everyone_gets_through():
    gate, lock = Gate(slots=2), threading.Lock()
    now, most, done = [0], [0], []
    release = threading.Event()

    def work(i):
        with gate.enter():
            with lock:
                now[0] += 1
                most[0] = max(most[0], now[0])
            release.wait(10)
            with lock:
                now[0] -= 1
                done.append(i)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(7)]
    for t in threads:
        t.start()
    wait_until(lambda: gate.waiting == 5 and gate.running == 2)
    assert most[0] == 2
    release.set()
    for t in threads:
        t.join(10)
    assert sorted(done) == list(range(7)) and most[0] == 2 and gate.running == 0 and gate.waiting == 0


def test_waiting_callers_start_in_arrival_order_and_are_told_how_many_are_ahead():
    gate = Gate(slots=1)
    order, told = [], {i: [] for i in range(4)}
    with gate.enter():  # the slot is taken: everyone queues
        threads = []
        for i in range(4):
            def work(i=i):
                with gate.enter(on_wait=told[i].append) as ahead:
                    order.append((i, ahead))
            threads.append(threading.Thread(target=work))
            threads[-1].start()
            wait_until(lambda: gate.waiting == i + 1)  # caller i is in line before caller i+1 arrives
    for t in threads:
        t.join(10)
    assert order == [(0, 0), (1, 1), (2, 2), (3, 3)]
    assert told[0] == [0] and told[3][0] == 3  # told on arrival
    for i in range(4):  # then only when the line has moved: fewer ahead each time
        assert told[i] == sorted(set(told[i]), reverse=True)


def test_the_line_is_bounded():
    gate = Gate(slots=1, max_waiting=2)
    go = threading.Event()
    with gate.enter():
        threads = [threading.Thread(target=lambda: gate.enter(on_wait=lambda n: None).__enter__() or go.wait(10))
                   for _ in range(2)]
        for t in threads:
            t.daemon = True
            t.start()
        wait_until(lambda: gate.waiting == 2)
        raised = []

        def third():  # another thread: this one holds a slot, and entering again would not wait
            try:
                with gate.enter():
                    pass
            except GateFull as e:
                raised.append(e)

        t = threading.Thread(target=third)
        t.start()
        t.join(10)
        assert raised and gate.waiting == 2
    go.set()


def test_a_caller_that_gives_up_while_waiting_leaves_the_line():
    gate = Gate(slots=1)

    class Rerun(Exception):
        pass

    def give_up(n):
        raise Rerun  # what Streamlit raises in a script thread when the user types again

    raised = []

    def impatient():  # another thread: this one holds the slot, and entering again would not wait
        try:
            with gate.enter(on_wait=give_up):
                pass
        except Rerun as e:
            raised.append(e)

    with gate.enter():
        t = threading.Thread(target=impatient)
        t.start()
        t.join(10)
        assert raised and gate.waiting == 0
    with gate.enter() as ahead:  # and the line is free again
        assert ahead == 0 and gate.running == 1


def test_a_gated_section_inside_another_does_not_wait_for_itself():
    gate = Gate(slots=1)
    with gate.enter():
        with gate.enter():
            assert gate.running == 1
        assert gate.running == 1
    assert gate.running == 0


def test_a_slot_whose_thread_ended_without_giving_it_back_is_taken_back():
    gate = Gate(slots=1)
    t = threading.Thread(target=gate.acquire)  # takes the slot and ends, never releasing it
    t.start()
    t.join(10)
    assert gate._running == 1 and gate.running == 0  # counted as taken until looked at: its thread is gone
    assert gate.acquire() == 0 and gate.running == 1  # the dead thread's slot went to this caller at once
    gate.release()


def test_acquire_and_release_hold_a_slot_across_calls():
    gate = Gate(slots=1)
    assert gate.acquire() == 0 and gate.held() and gate.running == 1
    assert gate.acquire() == 0 and gate.running == 1  # already held: nothing more taken
    assert gate.release() and not gate.held() and gate.running == 0
    assert not gate.release()  # nothing left to give back
