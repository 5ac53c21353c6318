#!/usr/bin/env bash
# Install pinned agent CLIs into .tools/ for the real-CLI integration tests and benchmarks,
# and headless Chromium (Debian's package) for the HTML report's browser test.
#
# Each CLI gets its own npm prefix (.tools/<name>/) so their dependency trees never clash, and a
# symlink in .tools/bin/. Re-running is quick: a CLI whose pinned version is already installed is
# skipped without touching the network. Nothing here ever fails the build: when npm or a package
# is unavailable the script says why and the real-CLI tests skip with that reason.
set -u
cd "$(dirname "$0")/.."

# name  npm package  pinned version  (checked with `npm view <pkg> version` on 2026-11-25)
PINS=(
  "codex    @openai/codex              0.169.0"
  "claude   @anthropic-ai/claude-code  2.1.332"
  "copilot  @github/copilot            1.0.102"
)

TOOLS_DIR="${SKILLOPT_TOOLS_DIR:-$PWD/.tools}"
mkdir -p "$TOOLS_DIR/bin" || { echo "tools: cannot create $TOOLS_DIR; skipping"; exit 0; }

# Headless Chromium from the system packages (the browser test opens the report from disk).
install_chromium() {
  local have
  for have in chromium chromium-browser google-chrome; do
    if command -v "$have" >/dev/null 2>&1; then
      echo "tools: $have ready ($(command -v "$have"))"
      return 0
    fi
  done
  if [ "${SKILLOPT_NO_APT:-}" = "1" ]; then
    echo "tools: SKILLOPT_NO_APT=1; chromium not installed, the browser test will be skipped"
    return 0
  fi
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "tools: apt-get not found; install Chromium yourself or the browser test will be skipped"
    return 0
  fi
  local sudo=""
  if [ "$(id -u)" != "0" ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true >/dev/null 2>&1; then
      sudo="sudo -n"
    else
      echo "tools: not root and no passwordless sudo; chromium not installed, browser test skipped"
      return 0
    fi
  fi
  local log="$TOOLS_DIR/chromium-install.log"
  echo "tools: installing chromium with apt-get (log: $log)"
  if ! DEBIAN_FRONTEND=noninteractive timeout 900 $sudo apt-get install -y \
        --no-install-recommends chromium >"$log" 2>&1; then
    DEBIAN_FRONTEND=noninteractive timeout 900 $sudo apt-get update >>"$log" 2>&1
    if ! DEBIAN_FRONTEND=noninteractive timeout 900 $sudo apt-get install -y \
          --no-install-recommends chromium >>"$log" 2>&1; then
      echo "tools: apt-get could not install chromium (see $log); the browser test will be skipped"
      return 0
    fi
  fi
  echo "tools: chromium ready ($(command -v chromium))"
}
install_chromium

if ! command -v npm >/dev/null 2>&1; then
  echo "tools: npm not found; real-CLI tests will be skipped"
  exit 0
fi
if ! command -v node >/dev/null 2>&1; then
  echo "tools: node not found; real-CLI tests will be skipped"
  exit 0
fi

installed_version() {
  # $1 prefix dir, $2 package name -> prints the installed version or nothing
  local manifest="$1/node_modules/$2/package.json"
  [ -f "$manifest" ] || return 0
  node -e 'try{process.stdout.write(require(process.argv[1]).version||"")}catch(e){}' "$manifest"
}

for line in "${PINS[@]}"; do
  read -r name pkg version <<<"$line"
  prefix="$TOOLS_DIR/$name"
  have="$(installed_version "$prefix" "$pkg")"
  if [ "$have" != "$version" ]; then
    echo "tools: installing $pkg@$version into $prefix"
    mkdir -p "$prefix"
    [ -f "$prefix/package.json" ] || echo '{"name":"skillopt-tools-'"$name"'","private":true}' >"$prefix/package.json"
    if ! (cd "$prefix" && timeout 900 npm install --no-audit --no-fund --loglevel=error \
          --save-exact "$pkg@$version" >"$prefix/install.log" 2>&1); then
      echo "tools: npm install of $pkg@$version failed (see $prefix/install.log); $name tests will skip"
      continue
    fi
  fi
  bin="$prefix/node_modules/.bin/$name"
  if [ -x "$bin" ]; then
    ln -sfn "$bin" "$TOOLS_DIR/bin/$name"
    echo "tools: $name $version ready ($TOOLS_DIR/bin/$name)"
  else
    echo "tools: $pkg@$version installed but $bin is missing; $name tests will skip"
  fi
done
exit 0
