#!/bin/sh
# Headless chromium for the report screenshot test (tests/integration/test_report_browser.py).
# As root on Debian, install Debian's chromium when it is missing. Otherwise never fail:
# without chromium that test is skipped with a message saying how to get it.
set -eu

if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then
  exit 0
fi

if [ "$(id -u)" = 0 ] && [ -f /etc/debian_version ]; then
  echo "ensure-chromium: installing chromium (for the report.html browser test)" >&2
  if apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; then
    exit 0
  fi
  echo "ensure-chromium: could not install chromium; the browser test will be skipped" >&2
  exit 0
fi

echo "ensure-chromium: chromium not found; the report.html browser test will be skipped" \
  "(install Debian's chromium package, or run make test as root on Debian)" >&2
exit 0
