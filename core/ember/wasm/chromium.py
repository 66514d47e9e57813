"""A static folder served on 127.0.0.1 and opened in headless Chromium: how ember's browser
checks reach a page (the browser tests, ``benchmarks/browser.py``, ``ember onnx test --backend
webgpu``).

Chromium is Debian's (``apt-get install chromium``), driven by Playwright for Python with
``executable_path`` (never ``playwright install``). ``--enable-unsafe-webgpu`` gives WebGPU even
without a GPU: SwiftShader's CPU adapter.

>>> with Served(".") as server:
...     server.url.startswith("http://127.0.0.1:")
True
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import shutil
import threading

CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
WEBGPU_FLAGS = ["--enable-unsafe-webgpu"]


def find_chromium() -> str | None:
    """The Chromium executable on PATH, or None."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Served:
    """A static file server for ``directory`` on 127.0.0.1 (a free port), as a context manager."""

    def __init__(self, directory):
        handler = functools.partial(_QuietHandler, directory=str(directory))
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/"

    def __enter__(self):
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@contextlib.contextmanager
def browser(executable=None, webgpu=False):
    """A headless Chromium (Playwright's ``Browser``), closed on exit."""
    from playwright.sync_api import sync_playwright

    executable = executable or find_chromium()
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=executable, args=CHROMIUM_FLAGS + (WEBGPU_FLAGS if webgpu else []))
        try:
            yield b
        finally:
            b.close()


def new_page(b, timeout_s=180, viewport=None):
    """A page of browser ``b`` whose console messages and errors collect in ``page.ember_log``."""
    page = b.new_page(viewport=viewport or {"width": 820, "height": 640})
    page.set_default_timeout(timeout_s * 1000)
    log = page.ember_log = []
    page.on("console", lambda m: log.append(f"console {m.type}: {m.text}"))
    page.on("pageerror", lambda e: log.append(f"page error: {e}"))
    return page
