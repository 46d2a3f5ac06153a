"""The documentation site: `mkdocs build --strict` builds it (no warning, no
broken link or anchor), its API reference documents every public name, and a
real browser (headless Chromium, over http as readers get it) renders the home
page, a layer's API page and the search with no console error, keeping a
screenshot of each under build/docs-screenshots/.

mkdocs comes with the `docs` extra (in `dev`), Chromium from Debian's packages
(`make docs` installs it when run as root, as CI is). Without them these tests
skip with the reason, except in CI (`CI` set), where they fail.
"""

import contextlib
import importlib
import importlib.util
import inspect
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import keras_attention
from tests.chromium import Chromium, find_chromium

ROOT = Path(__file__).resolve().parents[1]
SCREENSHOTS = ROOT / "build" / "docs-screenshots"
# The modules with an API page (docs/api/NAME.md), each documenting its __all__.
API_MODULES = (
    "layers", "cells", "decoders", "decoding", "export", "models", "losses", "ops",
    "text", "batching", "training", "generated", "evaluation", "plot", "tfa_import", "keras_hub_import",
)  # fmt: skip


def _unavailable(what):
    if os.environ.get("CI"):
        pytest.fail(f"{what} (CI must have it: `make docs` installs it)")
    pytest.skip(what)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The site built as `make docs` builds it, into a temporary folder."""
    if importlib.util.find_spec("mkdocs") is None:
        _unavailable("mkdocs is not installed (the `docs` extra)")
    out = tmp_path_factory.mktemp("site")
    completed = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
    )
    assert completed.returncode == 0, completed.stderr[-4000:]
    return out


def _anchors(site):
    return {anchor for page in site.rglob("*.html") for anchor in re.findall(r'id="([^"]+)"', page.read_text())}


def _documented(anchors, module, name):
    """Documented: the name's entry on its module's page, or, for a function or
    class that a submodule of the same name shadows, on the page at its home."""
    obj = getattr(module, name)
    home = f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', '')}"
    return f"{module.__name__}.{name}" in anchors or home in anchors


def test_every_public_name_is_in_the_api_reference(site):
    anchors = _anchors(site)
    missing = []
    for short in API_MODULES:
        module = importlib.import_module(f"keras_attention.{short}")
        missing += [f"{module.__name__}.{n}" for n in module.__all__ if not _documented(anchors, module, n)]
    for name in keras_attention.__all__:
        obj = getattr(keras_attention, name)
        if inspect.ismodule(obj):
            assert (site / "api" / name.split(".")[-1] / "index.html").exists(), f"no API page for {name}"
            continue
        home = importlib.import_module(".".join(obj.__module__.split(".")[:2]))  # the subpackage
        if not _documented(anchors, home, name):
            missing.append(f"keras_attention.{name}")
    assert not missing, f"not in docs/api/: {missing}"
    # The top-level index names every top-level name.
    index = (ROOT / "docs" / "api" / "index.md").read_text()
    assert [n for n in keras_attention.__all__ if f"`ka.{n}`" not in index] == []


def _html_of(site, page):
    """The built file of a docs/ page given relative to docs/, without `.md`."""
    return site / (page[: -len("index")] if page.endswith("index") else page + "/") / "index.html"


def _broken_links(site, text, base):
    """Links `](PATH.md#anchor)` of `text` (PATH relative to `base` inside docs/)
    whose page or anchor the built site lacks."""
    broken = []
    for path, anchor in re.findall(r"\]\(([\w/.-]+)\.md(?:#([\w.-]+))?\)", text):
        page = os.path.normpath(os.path.join(base, path))
        html = _html_of(site, page)
        if not html.exists() or (anchor and f'id="{anchor}"' not in html.read_text()):
            broken.append(f"{path}.md" + (f"#{anchor}" if anchor else ""))
    return broken


def test_the_readme_links_reach_pages_and_anchors_of_the_site(site):
    """mkdocs --strict checks the links inside docs/, anchors included; the
    README's links into docs/ are checked here against the same site."""
    readme = (ROOT / "README.md").read_text()
    assert len(re.findall(r"\]\(docs/", readme)) > 20
    assert _broken_links(site, readme.replace("](docs/", "]("), "") == []


@contextlib.contextmanager
def _served(folder):
    """`python -m http.server` on a free port of 127.0.0.1 (search needs http)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(folder)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            assert time.monotonic() < deadline and server.poll() is None, "http.server did not start"
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=10)


@pytest.fixture(scope="module")
def browser(site):
    executable = find_chromium()
    if executable is None:
        _unavailable("chromium is not installed (`apt-get install chromium`, which `make docs` runs as root)")
    chromium = Chromium(executable)
    with _served(site) as url:
        chromium.url = url
        yield chromium
    chromium.close()


# (page, screenshot name, JavaScript that is true once the page has rendered what it must)
PAGES = [
    ("/", "home", "document.querySelector('h1').textContent.includes('keras-attention')"
     " && document.querySelector('.md-nav--primary').textContent.includes('API reference')"),
    ("/api/layers/", "api_layers", "document.getElementById('keras_attention.layers.AdditiveAttention')"
     " && document.body.textContent.includes('arXiv:1409.0473')"),
    ("/?q=attention", "search", "document.querySelectorAll('.md-search-result__item').length > 0"),
]  # fmt: skip


@pytest.mark.parametrize("path, name, ready", PAGES, ids=[name for _, name, _ in PAGES])
def test_the_page_renders_without_console_errors(browser, path, name, ready):
    browser.open(browser.url + path, ready)
    browser.screenshot(SCREENSHOTS / f"{name}.png")
    assert browser.errors == []
    assert (SCREENSHOTS / f"{name}.png").stat().st_size > 10_000  # a rendered page, not a blank one


def test_search_finds_the_layers(browser):
    browser.open(browser.url + "/?q=AdditiveAttention", "document.querySelectorAll('.md-search-result__item').length")
    titles = browser.evaluate("[...document.querySelectorAll('.md-search-result__item')].map(e => e.textContent)")
    assert any("AdditiveAttention" in title for title in titles)


def test_the_browser_reports_console_errors(browser):
    """The check above can fail: a page's own error reaches `errors`."""
    browser.open(browser.url + "/", "document.querySelector('h1')")
    browser.evaluate("console.error('a deliberate error')")
    browser.evaluate("0")
    assert "console.error: a deliberate error" in browser.errors
