"""deploy.warm opens every page of a fresh server once, so a class never pays for the imports, the model load
and the default prompts. The client must really switch pages (a rerun request naming one page but carrying
another page's hash runs the other page: that happened), and every page must draw without an exception.
Nothing here is timed: bench.load reports first-visit times with and without warming (--cold)."""
import tempfile

import pytest

from bench.load import start_server
from deploy.client import Session
from deploy.warm import page_names, warm

pytestmark = pytest.mark.slow


def test_warm_opens_every_page_of_the_router_and_the_client_switches_pages():
    names = page_names()
    assert len(names) == 16 and names[:2] == ["lesson", "home"] and {"attention", "generation", "training"} <= set(names)
    proc, url = start_server(tempfile.mkdtemp(prefix="te-warm-"), warm=False)
    try:
        times = warm(url)
        assert list(times) == names
        s = Session(url)
        try:
            titles = {}
            for page in names + ["attention"]:
                s.run(page)
                assert not s.exceptions, (page, s.exceptions[:1])
                titles.setdefault(page, [el.heading.body for el in s.elements
                                         if el.WhichOneof("type") == "heading"][0])
            assert len(set(titles.values())) == len(names), titles  # nine pages, nine different titles
            assert titles["generation"] == "Generation" and titles["home"] == "Transformer Explorer"
        finally:
            s.close()
    finally:
        proc.terminate()
        proc.wait(15)
