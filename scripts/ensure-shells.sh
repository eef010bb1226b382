#!/bin/sh
# zsh and fish for the completion tests (tests/integration/test_completion.py; bash is always there).
# As root on Debian, install Debian's packages when missing. Otherwise never fail: without a shell its
# test is skipped with a message saying how to get it.
set -eu

missing=""
for shell in zsh fish; do
  command -v "$shell" >/dev/null 2>&1 || missing="$missing $shell"
done
[ -z "$missing" ] && exit 0

if [ "$(id -u)" = 0 ] && [ -f /etc/debian_version ]; then
  echo "ensure-shells: installing$missing (for the shell completion tests)" >&2
  # shellcheck disable=SC2086
  if apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null; then
    exit 0
  fi
  echo "ensure-shells: could not install$missing; their completion tests will be skipped" >&2
  exit 0
fi
echo "ensure-shells:$missing not found; their completion tests will be skipped (install Debian's packages)" >&2
exit 0
