"""A minimal Streamlit client: one browser tab as far as the server can tell, speaking Streamlit's websocket
protocol (the protobuf messages the browser sends and receives). deploy.warm opens pages with it before a class
arrives; bench.load drives a classroom of them."""
from __future__ import annotations

import threading
import time
import uuid

from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.Common_pb2 import FileUploaderState
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from websockets.sync.client import connect

FINISHED = ForwardMsg.ScriptFinishedStatus.FINISHED_SUCCESSFULLY


class Session:
    """One browser tab, as far as the server can tell.

    cookie: the Cookie header a browser would send with the handshake (a balancer's stickiness cookie included);
    xsrf: Streamlit's XSRF token (its cookie's value), sent as the browser does, in the subprotocol list;
    existing_session: the id of a session to reconnect to (the browser's reconnect after a dropped socket)."""

    def __init__(self, url: str, timeout: float = 600, cookie: str = "", xsrf: str = "", existing_session: str = ""):
        host = url.split("//", 1)[1]
        protocols = ["streamlit"]
        if xsrf or existing_session:
            protocols += [xsrf or "PLACEHOLDER_AUTH_TOKEN"] + ([existing_session] if existing_session else [])
        self.ws = connect(f"ws://{host}/_stcore/stream", subprotocols=protocols, open_timeout=60,
                          max_size=None, origin=url,
                          additional_headers={"Cookie": cookie} if cookie else None).__enter__()
        self.served_by = self.ws.response.headers.get("X-Served-By", "")  # set by the balancer (deploy/haproxy)
        self.session_id = ""
        self.timeout = timeout
        self.page_hash, self.page = "", ""  # the page last run: its name, and the hash the server gave it
        self.elements: list = []
        self.exceptions: list[str] = []

    def run(self, page: str, widgets: dict | None = None, edit=None, query: str = "") -> float:
        """Ask for a rerun of ``page`` with these widget values; wait until it has finished. Seconds. ``edit``: a
        function of the message's bytes that gives the bytes sent instead (tests: what a browser's encoder sends).
        ``query``: the URL's query string, as the browser sends it ("class=K7M2QX9P")."""
        msg = BackMsg()
        cs = msg.rerun_script
        cs.page_name = page
        cs.query_string = query
        cs.page_script_hash = self.page_hash if page == self.page else ""  # another page: named, not hashed
        self.page = page
        for wid, value in (widgets or {}).items():
            w = cs.widget_states.widgets.add()
            w.id = wid
            if isinstance(value, FileUploaderState):
                w.file_uploader_state_value.CopyFrom(value)
            elif value is True:
                w.trigger_value = True
            elif isinstance(value, str):
                w.string_value = value
            elif isinstance(value, (int, float)):
                w.double_value = float(value)
        self.elements = []
        t0 = time.perf_counter()
        raw = msg.SerializeToString()
        self.ws.send(edit(raw) if edit else raw)
        while True:
            fm = ForwardMsg()
            fm.ParseFromString(self.ws.recv(timeout=self.timeout))
            kind = fm.WhichOneof("type")
            if kind == "new_session":
                self.page_hash = fm.new_session.page_script_hash or self.page_hash
                self.session_id = fm.new_session.initialize.session_id or self.session_id
            elif kind == "page_info_changed" or kind == "navigation":
                if kind == "navigation" and fm.navigation.page_script_hash:
                    self.page_hash = fm.navigation.page_script_hash
            elif kind == "delta" and fm.delta.WhichOneof("type") == "new_element":
                el = fm.delta.new_element
                self.elements.append(el)
                if el.WhichOneof("type") == "exception":
                    self.exceptions.append(el.exception.message)
            elif kind == "script_finished" and fm.script_finished == FINISHED:
                return time.perf_counter() - t0

    def widget_id(self, kind: str, label: str) -> str:
        for el in self.elements:
            if el.WhichOneof("type") == kind and getattr(el, kind).label == label:
                return getattr(el, kind).id
        raise LookupError(f"no {kind} labelled {label!r} on the page")

    def file_urls(self, name: str):
        """Ask the server where to upload a file, as the browser's uploader does first: its FileURLs."""
        msg = BackMsg()
        req = msg.file_urls_request
        req.request_id, req.session_id = uuid.uuid4().hex, self.session_id
        req.file_names.append(name)
        self.ws.send(msg.SerializeToString())
        while True:
            fm = ForwardMsg()
            fm.ParseFromString(self.ws.recv(timeout=self.timeout))
            if fm.WhichOneof("type") == "file_urls_response" and fm.file_urls_response.response_id == req.request_id:
                if fm.file_urls_response.error_msg:
                    raise RuntimeError(f"file_urls_request: {fm.file_urls_response.error_msg}")
                return fm.file_urls_response.file_urls[0]

    def metric(self, label: str) -> str:
        for el in self.elements:
            if el.WhichOneof("type") == "metric" and el.metric.label == label:
                return el.metric.body
        raise LookupError(f"no metric labelled {label!r} on the page")

    def charts(self) -> list[str]:
        return [el.plotly_chart.spec for el in self.elements if el.WhichOneof("type") == "plotly_chart"]

    def drain(self, stop: threading.Event):
        """Keep reading (a training page's live view keeps sending) until told to stop."""
        while not stop.is_set():
            try:
                self.ws.recv(timeout=1)
            except TimeoutError:
                pass
            except Exception:
                return

    def close(self):
        self.ws.close()
