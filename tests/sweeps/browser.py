"""Headless Chromium for the browser tests: where it is, and the flags it runs with.

Debian's ``chromium``, installed by the set-up step ``make system-packages``; a test without it
is skipped with the reason (a test never installs system packages itself)."""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    "--hide-scrollbars",
    # The parallel-coordinates chart draws with WebGL; with --disable-gpu that is SwiftShader,
    # which Chromium now only uses when asked (trusted local content here).
    "--enable-unsafe-swiftshader",
)


def chromium_path() -> str:
    """The browser's path; the calling test is skipped, with how to install it, when absent."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        pytest.skip(
            "Chromium is not installed; install it with `make system-packages` (as "
            "root, with Debian's package manager) or your system's package manager"
        )
    return found


class DevTools:
    """A headless Chromium driven over its DevTools protocol on a pipe
    (``--remote-debugging-pipe``: commands as JSON on fd 3, answers and events on fd 4, each
    ended by NUL), for a page that must stay open while the test changes what it shows
    (``--dump-dom`` prints a page once, at its load)."""

    def __init__(self, chromium: str, profile: Path) -> None:
        to_browser, self._write = os.pipe()
        self._read, from_browser = os.pipe()

        def fds() -> None:  # in the child: the pipe's ends where Chromium looks for them
            os.dup2(to_browser, 3)
            os.dup2(from_browser, 4)

        self.proc = subprocess.Popen(
            [
                chromium,
                *CHROMIUM_FLAGS,
                f"--user-data-dir={profile}",
                "--remote-debugging-pipe",
                "about:blank",
            ],
            preexec_fn=fds,
            close_fds=False,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "HOME": str(profile)},
        )
        os.close(to_browser)
        os.close(from_browser)
        self._next, self._buffer = 0, b""
        page = next(t for t in self.call("Target.getTargets")["targetInfos"] if t["type"] == "page")
        self.session = self.call("Target.attachToTarget", targetId=page["targetId"], flatten=True)[
            "sessionId"
        ]

    def call(self, method: str, session: str | None = None, **params: Any) -> dict[str, Any]:
        """Send one command and return its result (events in between are skipped)."""
        self._next += 1
        message: dict[str, Any] = {"id": self._next, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self._write, json.dumps(message).encode() + b"\0")
        while True:
            answer = self._message()
            if answer.get("id") == self._next:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                return answer.get("result", {})

    def _message(self) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            ready, _, _ = select.select([self._read], [], [], 120)
            chunk = os.read(self._read, 1 << 20) if ready else b""
            if not chunk:
                raise RuntimeError("Chromium stopped answering on its DevTools pipe")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def open(self, url: str) -> None:
        self.call("Page.navigate", self.session, url=url)

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the open page."""
        result = self.call(
            "Runtime.evaluate", self.session, expression=expression, returnByValue=True
        )
        return result.get("result", {}).get("value")

    def close(self) -> None:
        with contextlib.suppress(OSError, RuntimeError):
            self.call("Browser.close")
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=30)
        for fd in (self._read, self._write):
            with contextlib.suppress(OSError):
                os.close(fd)
