"""Headless Chromium driven over the DevTools protocol on a pipe.

`--remote-debugging-pipe` makes Chromium read commands from its file
descriptor 3 and write answers and events to 4, each a JSON message ended by
a NUL byte: no websocket client and no browser download, only Debian's
`chromium`. Used by tests/test_docs_site.py to open the built site as a
reader would and to collect what its console reports.
"""

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import time


def find_chromium():
    """The Chromium executable on PATH, or None."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Chromium:
    """One headless browser with one page. `open(url, ready)` loads a page and
    waits until the JavaScript expression `ready` is true; `errors` then holds
    the page's console errors, uncaught exceptions and failed loads."""

    def __init__(self, executable, width=1280, height=900, timeout=60.0):
        self.timeout = timeout
        to_browser_read, self._to_browser = os.pipe()
        self._from_browser, from_browser_write = os.pipe()
        arguments = [
            "--headless",
            "--remote-debugging-pipe",
            "--disable-gpu",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-dev-shm-usage",  # containers often have a small /dev/shm
            f"--window-size={width},{height}",
        ]
        if os.geteuid() == 0:  # CI runs as root, where Chromium's sandbox refuses to start
            arguments.append("--no-sandbox")
        # The child gets the pipes as its descriptors 3 and 4; copies numbered
        # 10 and up first, so that neither copy lands on the other's target.
        high = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in (to_browser_read, from_browser_write)]

        def wire():
            os.dup2(high[0], 3)  # dup2's copies outlive exec; everything else of ours closes
            os.dup2(high[1], 4)

        self.process = subprocess.Popen(
            [executable, *arguments, "about:blank"],
            preexec_fn=wire,
            close_fds=False,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for descriptor in (to_browser_read, from_browser_write, *high):
            os.close(descriptor)
        self._buffer = b""
        self._next_id = 0
        self._session = None
        self.errors = []
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        self._session = self.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.send(f"{domain}.enable")

    def send(self, method, **params):
        """Send one command and return its result, recording events meanwhile."""
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params}
        if self._session and not method.startswith("Target."):
            message["sessionId"] = self._session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._receive(self.timeout)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]
            self._record(reply)

    def _receive(self, timeout):
        deadline = time.monotonic() + timeout
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_browser], [], [], left)[0]:
                raise TimeoutError("Chromium did not answer in time")
            chunk = os.read(self._from_browser, 1 << 16)
            if not chunk:
                raise RuntimeError("Chromium closed the pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def _record(self, event):
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.consoleAPICalled" and params["type"] in ("error", "assert"):
            text = " ".join(str(arg.get("value", arg.get("description", ""))) for arg in params["args"])
            self.errors.append(f"console.{params['type']}: {text}")
        elif method == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            self.errors.append(f"exception: {details.get('exception', {}).get('description', details['text'])}")
        elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
            entry = params["entry"]
            self.errors.append(f"{entry['source']}: {entry['text']} {entry.get('url', '')}".strip())

    def evaluate(self, expression):
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']['text']}")
        return result["result"].get("value")

    def open(self, url, ready, settle=0.5):
        """Load `url`, wait for `ready` (a JavaScript expression) to be true,
        then `settle` seconds more for late console messages."""
        self.errors = []
        self.send("Page.navigate", url=url)
        deadline = time.monotonic() + self.timeout
        while not self.evaluate(f"document.readyState === 'complete' && Boolean({ready})"):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url}: {ready} never became true")
            time.sleep(0.1)
        time.sleep(settle)
        self.evaluate("0")  # drains the events that arrived meanwhile

    def screenshot(self, path):
        data = self.send("Page.captureScreenshot", format="png")["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))

    def close(self):
        try:
            self.send("Browser.close")
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)
