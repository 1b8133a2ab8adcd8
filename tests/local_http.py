"""A local HTTP server for the download tests: it serves a body the test built, well or badly. Nothing here
reaches the network; the real corpus is never served."""
from __future__ import annotations

import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# path -> how the body is served
MODES = {
    "/good.txt": "good",            # Content-Length and the whole body
    "/truncated.txt": "truncated",  # Content-Length larger than the body, then the connection closes
    "/slow.txt": "slow",            # headers and a little of the body, then nothing until the test ends
    "/trickle.txt": "trickle",      # a byte now and then, each within the socket timeout, never finishing
    "/unsized.txt": "unsized",      # no Content-Length: the body ends when the connection closes
}


class Server:
    def __init__(self, body: bytes):
        self.body = body
        self.release = threading.Event()  # ends the slow handlers when the test is over
        self.requests: list[str] = []
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.httpd.daemon_threads = True
        self.httpd.block_on_close = False

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}{path}"

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_GET(self):
                server.requests.append(self.path)
                mode, body = MODES.get(self.path), server.body
                if mode is None:
                    self.send_error(404, "Not Found")
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                if mode != "unsized":
                    self.send_header("Content-Length", str(len(body) + (1000 if mode == "truncated" else 0)))
                self.end_headers()
                if mode in ("good", "truncated", "unsized"):
                    self.wfile.write(body)
                elif mode == "slow":
                    self.wfile.write(body[:10])
                    self.wfile.flush()
                    server.release.wait(30)
                else:  # trickle
                    for byte in body:
                        self.wfile.write(bytes([byte]))
                        self.wfile.flush()
                        if server.release.wait(0.1):
                            break

        return Handler


@contextmanager
def serve(body: bytes):
    """A running Server on 127.0.0.1 for the length of the block."""
    server = Server(body)
    thread = threading.Thread(target=server.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.release.set()
        server.httpd.shutdown()
        server.httpd.server_close()


def closed_port_url(path: str = "/good.txt") -> str:
    """An address where nothing listens: a port that was bound a moment ago and then closed."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}{path}"
