"""Headless Chromium for the tests that open pages as a reader meets them, with no network.

Needs Debian's `chromium` and `chromium-driver` (`make setup` installs them when run as root)
and the `selenium` package (requirements.txt); without them the tests that use it are skipped,
saying so.
"""
from __future__ import annotations

import importlib.util
import shutil

import pytest

CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")

#: the marks of a test module that opens a browser, checked before any fixture is built
NEEDS_BROWSER = [
    pytest.mark.skipif(not (CHROMIUM and CHROMEDRIVER), reason="the browser test needs Debian's chromium and "
                       "chromium-driver: run `make setup` as root, or apt-get install chromium chromium-driver"),
    pytest.mark.skipif(importlib.util.find_spec("selenium") is None,
                       reason="the browser test needs selenium: pip install -r requirements.txt"),
]


def headless_chromium(log_requests: bool = False):
    """A started Chromium driver (quit it when done) that reaches nothing but 127.0.0.1 and files;
    with ``log_requests`` its console and every request it makes are logged, for the test to read."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ["--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                # No network: all but the loopback goes to a proxy on a closed port, and names do not resolve.
                "--proxy-server=127.0.0.1:9", "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1"]:
        options.add_argument(arg)
    if log_requests:
        options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    driver.set_script_timeout(60)
    return driver
