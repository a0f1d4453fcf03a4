# Shared helpers for scripts/*: installs what the project needs, idempotently.
# shellcheck shell=bash

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${MCP_ACCESS_VENV:-$ROOT/.venv}
TOOLS=${MCP_ACCESS_TOOLS:-$ROOT/.tools}
WASM_OPT_VERSION=0.116.1

ensure_rust_target() {
  if ! rustup target list --installed | grep -qx wasm32-wasip1; then
    rustup target add wasm32-wasip1 >&2
  fi
}

# Prints the path of a wasm-opt (Binaryen) recent enough for Rust's wasm output.
ensure_wasm_opt() {
  if [ -x "$TOOLS/bin/wasm-opt" ]; then
    echo "$TOOLS/bin/wasm-opt"
    return
  fi
  echo "installing wasm-opt $WASM_OPT_VERSION (the wasm-opt crate builds Binaryen; takes a few minutes once)" >&2
  cargo install --locked --quiet wasm-opt --version "$WASM_OPT_VERSION" --root "$TOOLS" >&2
  echo "$TOOLS/bin/wasm-opt"
}

# A Python venv with Envoy, the MCP SDK and the test tools (integration/requirements.txt).
ensure_venv() {
  local req="$ROOT/integration/requirements.txt" stamp="$VENV/.requirements"
  if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV" >&2
  fi
  if ! cmp -s "$req" "$stamp"; then
    "$VENV/bin/pip" install --quiet --disable-pip-version-check -r "$req" >&2
    cp "$req" "$stamp"
  fi
}
