# Shared helpers for scripts/*: installs what the project needs, idempotently.
# shellcheck shell=bash

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${MCP_ACCESS_VENV:-$ROOT/.venv}
TOOLS=${MCP_ACCESS_TOOLS:-$ROOT/.tools}
BINARYEN_VERSION=132.0.0

ensure_rust_target() {
  if ! rustup target list --installed | grep -qx wasm32-wasip1; then
    rustup target add wasm32-wasip1 >&2
  fi
}

# Prints the path of a current wasm-opt (Binaryen). Binaryen's own npm release (pinned) installs
# in seconds; Debian's binaryen is too old for today's Rust output.
ensure_wasm_opt() {
  local bin="$TOOLS/npm/node_modules/binaryen/bin/wasm-opt"
  if [ ! -x "$bin" ]; then
    command -v npm >/dev/null || { echo "npm not found (wasm-opt is installed with it): run scripts/setup" >&2; return 1; }
    echo "installing binaryen $BINARYEN_VERSION (wasm-opt) into $TOOLS/npm" >&2
    mkdir -p "$TOOLS/npm"
    npm install --prefix "$TOOLS/npm" --silent --no-audit --no-fund "binaryen@$BINARYEN_VERSION" >&2 || return 1
  fi
  [ -x "$bin" ] || { echo "wasm-opt not found at $bin" >&2; return 1; }
  echo "$bin"
}

# A Python venv with Envoy, the MCP SDK and the test tools (integration/requirements.txt).
ensure_venv() {
  local req="$ROOT/integration/requirements.txt" stamp="$VENV/.requirements"
  if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV" >&2 || return 1
  fi
  if ! cmp -s "$req" "$stamp"; then
    "$VENV/bin/pip" install --quiet --disable-pip-version-check -r "$req" >&2 || return 1
    cp "$req" "$stamp"
  fi
}
