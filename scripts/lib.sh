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
    echo "installing the Python packages of integration/requirements.txt into $VENV (about a minute the first time)" >&2
    "$VENV/bin/pip" install --quiet --disable-pip-version-check -r "$req" >&2 || return 1
    cp "$req" "$stamp"
  fi
}

# The MCP clients nobody here wrote that integration/tests/test_clients.py drives: the official
# TypeScript SDK and the MCP Inspector (npm ci in integration/clients/node, pinned by its
# package-lock.json; the Inspector's 1.x line declares Node >= 22.7.5 but its CLI mode runs on
# Node 20, hence --engine-strict=false), and a client program on the Rust SDK rmcp
# (integration/clients/rmcp-client, its own Cargo workspace: not part of the filter's build).
ensure_node_clients() {
  local dir="$ROOT/integration/clients/node" stamp="$ROOT/integration/clients/node/node_modules/.mcp-access-lock"
  if ! cmp -s "$dir/package-lock.json" "$stamp"; then
    command -v npm >/dev/null || { echo "npm not found: run scripts/setup" >&2; return 1; }
    echo "installing the MCP Inspector and the TypeScript SDK (npm ci in integration/clients/node, ~15 s)" >&2
    npm ci --prefix "$dir" --silent --no-audit --no-fund --engine-strict=false >&2 || return 1
    cp "$dir/package-lock.json" "$stamp"
  fi
}

ensure_rmcp_client() {
  local manifest="$ROOT/integration/clients/rmcp-client/Cargo.toml" start=$SECONDS
  local target=${MCP_ACCESS_RMCP_TARGET:-$ROOT/integration/clients/rmcp-client/target}
  if [ ! -x "$target/debug/mcp-access-rmcp-client" ]; then
    echo "building the rmcp test client (integration/clients/rmcp-client; about 1.5 min the first time)" >&2
  fi
  cargo build -q --locked --manifest-path "$manifest" --target-dir "$target" >&2 || return 1
  [ $((SECONDS - start)) -lt 5 ] || echo "rmcp test client built in $((SECONDS - start)) s" >&2
}
