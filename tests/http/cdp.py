"""cdp.py: headless Chromium driven over the DevTools protocol, for the
browser tests (test_explorer.py).  Chromium from Debian (/usr/bin/chromium,
`make test` installs it as root) is started with --remote-debugging-pipe:
it reads protocol messages, JSON each ended by a NUL byte, from fd 3 and
writes its own to fd 4, so no port, websocket or npm package is involved.

    with Browser() as b:
        page = b.new_page()
        page.goto(url)
        page.evaluate("document.title")
        page.wait_for("document.body.dataset.ready", timeout=60)
        png = page.screenshot()
        page.problems      # console errors, exceptions, failed loads, CSP

Every call has a timeout; the browser is killed when the block ends.
"""

import base64
import fcntl
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time

CHROMIUM = "/usr/bin/chromium"
# As root Chromium needs --no-sandbox; the rest keeps it from reaching the
# network on its own and from leaving state behind (a fresh profile).
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-extensions", "--disable-default-apps", "--mute-audio",
         "--hide-scrollbars", "--remote-debugging-pipe"]


class CDPError(Exception):
    pass


class Browser:
    def __init__(self, binary=CHROMIUM, timeout=60.0):
        self.timeout = timeout
        self.profile = tempfile.mkdtemp(prefix="attnbias-chromium-")
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()

        def wire():
            # fds 3 and 4 as Chromium expects them, through fds above both
            # so that neither dup2 overwrites the other's source.
            a = fcntl.fcntl(to_child_r, fcntl.F_DUPFD, 10)
            b = fcntl.fcntl(from_child_w, fcntl.F_DUPFD, 10)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen(
            [binary] + FLAGS + ["--user-data-dir=" + self.profile, "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            pass_fds=(3, 4), preexec_fn=wire)
        os.close(to_child_r)
        os.close(from_child_w)
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._replies = {}
        self._events = []
        self._next = 0
        self._closed = False
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    # -- transport -------------------------------------------------------
    def _read(self):
        buf = b""
        while True:
            try:
                chunk = os.read(self._from_child, 65536)
            except OSError:
                chunk = b""
            if not chunk:
                break
            buf += chunk
            while b"\0" in buf:
                msg, buf = buf.split(b"\0", 1)
                obj = json.loads(msg)
                with self._cond:
                    if "id" in obj:
                        self._replies[obj["id"]] = obj
                    else:
                        self._events.append(obj)
                    self._cond.notify_all()
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def send(self, method, params=None, session=None, timeout=None):
        with self._lock:
            self._next += 1
            mid = self._next
        msg = {"id": mid, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._to_child, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + (timeout or self.timeout)
        with self._cond:
            while mid not in self._replies:
                left = deadline - time.monotonic()
                if self._closed or left <= 0:
                    raise CDPError("%s: no answer (%s)" % (
                        method, "browser gone" if self._closed else "timeout"))
                self._cond.wait(left)
            reply = self._replies.pop(mid)
        if "error" in reply:
            raise CDPError("%s: %s" % (method, reply["error"]))
        return reply.get("result", {})

    def events(self, session):
        """Events of a session seen so far (not consumed)."""
        with self._lock:
            return [e for e in self._events if e.get("sessionId") == session]

    def wait_event(self, session, method, timeout=None, after=0):
        deadline = time.monotonic() + (timeout or self.timeout)
        with self._cond:
            while True:
                found = [e for e in self._events[after:]
                         if e.get("sessionId") == session and e["method"] == method]
                if found:
                    return found[0]
                left = deadline - time.monotonic()
                if self._closed or left <= 0:
                    raise CDPError("no %s event" % method)
                self._cond.wait(left)

    def event_count(self):
        with self._lock:
            return len(self._events)

    # -- pages -----------------------------------------------------------
    def new_page(self, width=1400, height=1000):
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})[
            "sessionId"]
        page = Page(self, session)
        for m in ("Page.enable", "Runtime.enable", "Log.enable", "Network.enable"):
            self.send(m, session=session)
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
                  session=session)
        return page

    def close(self):
        try:
            if self.proc.poll() is None:
                try:
                    self.send("Browser.close", timeout=10)
                except CDPError:
                    pass
                try:
                    self.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    pass
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            for fd in (self._to_child, self._from_child):
                try:
                    os.close(fd)
                except OSError:
                    pass
            shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Page:
    def __init__(self, browser, session):
        self.b = browser
        self.session = session

    def send(self, method, params=None, timeout=None):
        return self.b.send(method, params, self.session, timeout)

    def goto(self, url, timeout=None):
        mark = self.b.event_count()
        self.send("Page.navigate", {"url": url})
        self.b.wait_event(self.session, "Page.loadEventFired", timeout, after=mark)

    def evaluate(self, expr, timeout=None):
        """The value of a JavaScript expression (promises awaited)."""
        r = self.send("Runtime.evaluate", {"expression": expr, "returnByValue": True,
                                           "awaitPromise": True}, timeout)
        if "exceptionDetails" in r:
            raise CDPError("%s: %s" % (expr, r["exceptionDetails"]))
        return r["result"].get("value")

    def wait_for(self, expr, timeout=60.0, poll=0.1):
        """Wait until a JavaScript expression is truthy; its value."""
        deadline = time.monotonic() + timeout
        while True:
            v = self.evaluate(expr)
            if v:
                return v
            if time.monotonic() > deadline:
                raise CDPError("timed out waiting for %s (last %r)" % (expr, v))
            time.sleep(poll)

    def screenshot(self):
        return base64.b64decode(self.send("Page.captureScreenshot",
                                          {"format": "png", "captureBeyondViewport": True})[
            "data"])

    @property
    def problems(self):
        """What a page must not produce: console errors, uncaught
        exceptions, log entries of level error (failed loads, CSP
        violations), requests that failed."""
        out = []
        for e in self.b.events(self.session):
            m, p = e["method"], e.get("params", {})
            if m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append("console.%s: %s" % (p["type"], " ".join(
                    str(a.get("value", a.get("description", ""))) for a in p.get("args", []))))
            elif m == "Runtime.exceptionThrown":
                d = p.get("exceptionDetails", {})
                out.append("exception: %s" % d.get("exception", {}).get("description", d.get("text")))
            elif m == "Log.entryAdded" and p["entry"].get("level") == "error":
                out.append("log: %s %s" % (p["entry"].get("text"), p["entry"].get("url", "")))
            elif m == "Network.loadingFailed" and not p.get("canceled"):
                out.append("load failed: %s" % p.get("errorText"))
        return out

    def requests(self):
        """(method, url) of every request the page sent."""
        return [(e["params"]["request"]["method"], e["params"]["request"]["url"])
                for e in self.b.events(self.session) if e["method"] == "Network.requestWillBeSent"]
