"""support.py: what the package's tests share -- the server under test
(``ATTNBIAS_URL``, and ``ATTNBIAS_API_KEY`` when it has one) and a scripted
stand-in server for what a real one cannot be made to do on cue (a full
queue, a silent peer, TLS with a throwaway certificate).

Run the tests against a server (``make run``, or ``build/attnbiasd --port 0``):

    ATTNBIAS_URL=http://127.0.0.1:8080 .venv/bin/python -m unittest discover -s api/python/tests

tests/http/test_python_package.py does that with the package installed in
a fresh virtualenv.
"""

import http.server
import json
import os
import ssl
import threading
import unittest
from typing import Any, Dict, List, Optional, Tuple

import attnbias

URL = os.environ.get("ATTNBIAS_URL")
API_KEY = os.environ.get("ATTNBIAS_API_KEY") or None


def server_client(case: unittest.TestCase, **kw: Any) -> attnbias.Client:
    """A Client of the server under test (the test is skipped without one)."""
    if not URL:
        case.skipTest("ATTNBIAS_URL is not set: no server to test against")
    return attnbias.Client(URL, api_key=API_KEY, **kw)


# One scripted answer: (status, headers, body).
Answer = Tuple[int, Dict[str, str], bytes]


def json_answer(obj: Any, status: int = 200, **headers: str) -> Answer:
    hdrs = {"Content-Type": "application/json"}
    hdrs.update({k.replace("_", "-"): v for k, v in headers.items()})
    return status, hdrs, json.dumps(obj).encode()


class FakeServer:
    """An HTTP(S) server on 127.0.0.1 that answers from a script, in order,
    and records each request as (method, path, headers, body).  A ``None``
    in the script means: read the request and never answer (until stop)."""

    def __init__(self, script: List[Optional[Answer]],
                 tls: Optional[Tuple[str, str]] = None) -> None:
        self.script = list(script)
        self.requests: List[Tuple[str, str, Dict[str, str], bytes]] = []
        self._release = threading.Event()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _serve(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                outer.requests.append((self.command, self.path,
                                       {k.lower(): v for k, v in self.headers.items()}, body))
                answer = outer.script.pop(0) if outer.script else json_answer({})
                if answer is None:
                    outer._release.wait(30)
                    self.close_connection = True
                    return
                status, headers, data = answer
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _serve

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        scheme = "http"
        if tls:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(*tls)
            self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
            scheme = "https"
        self.url = "%s://127.0.0.1:%d" % (scheme, self.httpd.server_address[1])
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> "FakeServer":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._release.set()
        self.httpd.shutdown()
        self.httpd.server_close()
