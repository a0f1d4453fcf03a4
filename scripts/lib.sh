# Shared helpers for scripts/*: installs what the project needs, idempotently.
# shellcheck shell=bash

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${MCP_ACCESS_VENV:-$ROOT/.venv}
TOOLS=${MCP_ACCESS_TOOLS:-$ROOT/.tools}
BINARYEN_VERSION=132.0.0

# A step's heading, with the seconds since the calling script began, so a log shows where time goes.
step() { echo "== [$SECONDS s] $*"; }

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

# A Python venv with Envoy, the MCP SDK and the test tools (integration/requirements.txt), and the
# harness package of this checkout installed editable (integration/pyproject.toml: `harness`,
# `bench`), which the tests, the demo and the benchmark import.
# Two pinned packages write the same file, cel/__init__.py: common-expression-language (the CEL
# evaluator of test_manifests.py) and xds-protos (Envoy's API messages, whose empty cel/__init__.py
# only makes its cel.expr messages a package). pip installs in dependency order, not file order, so
# which one wins depends on the machine; the CEL package is therefore reinstalled last, alone
# (--no-deps --force-reinstall), which keeps xds-protos's cel/expr/ beside it. venv_check then
# imports both and fails naming the package that is broken.
# The venv is brought up to date when the requirements or pyproject.toml changed since the last
# install (the stamp holds both), or when a check fails: a new venv, or one without the harness.
ensure_venv() {
  local req="$ROOT/integration/requirements.txt" project="$ROOT/integration/pyproject.toml"
  local stamp="$VENV/.requirements" cel_pin
  if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV" >&2 || return 1
  fi
  cel_pin=$(grep -E '^common-expression-language==' "$req") || {
    echo "integration/requirements.txt: no pinned common-expression-language==<version> line" >&2; return 1; }
  if ! cat "$req" "$project" | cmp -s - "$stamp" || ! venv_check 2>/dev/null || ! harness_check 2>/dev/null; then
    echo "installing integration/requirements.txt and the harness (pip install -e integration) into $VENV" \
      "(about a minute the first time)" >&2
    "$VENV/bin/pip" install --quiet --disable-pip-version-check -r "$req" -e "$ROOT/integration" >&2 || return 1
    "$VENV/bin/pip" install --quiet --disable-pip-version-check --no-deps --force-reinstall "$cel_pin" >&2 || return 1
    venv_check || return 1
    harness_check || return 1
    cat "$req" "$project" > "$stamp"
  fi
}

# Fails unless the venv imports `harness` and `bench` from this checkout's integration/ (an
# editable install of another checkout would test that one's harness). -I: not from the current
# directory, only as installed.
harness_check() {
  "$VENV/bin/python" -I - "$ROOT/integration" <<'PY'
import sys
from pathlib import Path
try:
    import bench
    import harness
except ImportError as e:
    sys.exit(f"harness check: the harness package is not installed ({e}): run scripts/setup")
want = Path(sys.argv[1]).resolve()
for module in (harness, bench):
    have = Path(module.__file__).resolve().parents[1]
    if have != want:
        sys.exit(f"harness check: {module.__name__} is installed from {have}, not {want}: run scripts/setup")
PY
}

# Fails, saying which, unless the venv's CEL evaluator (cel.evaluate) and the Envoy API messages the
# gRPC authorizer tests use (xds-protos, including its cel.expr messages) both import.
venv_check() {
  "$VENV/bin/python" - <<'PY'
import sys
try:
    from cel import Context, evaluate
    assert evaluate("1 + 1 == 2", Context()) is True
except Exception as e:
    sys.exit(f"venv check: cel.evaluate (PyPI common-expression-language) is not usable ({e!r}); "
             "an empty cel/__init__.py of xds-protos probably replaced it: run scripts/setup")
try:
    from envoy.service.auth.v3 import external_auth_pb2, attribute_context_pb2  # noqa: F401
    from envoy.config.core.v3 import base_pb2, address_pb2  # noqa: F401
    from envoy.type.v3 import http_status_pb2  # noqa: F401
    from cel.expr import checked_pb2  # noqa: F401
    import grpc  # noqa: F401
except Exception as e:
    sys.exit(f"venv check: the Envoy API messages (PyPI xds-protos) or grpcio do not import ({e!r}): run scripts/setup")
PY
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

# The RateLimitService of the demo and the tests (envoy-demo/ratelimit, its own Cargo workspace,
# built into target/ratelimit; docs/ratelimit-service.md). limitador's Redis storage compiles only
# with its RocksDB storage, so librocksdb-sys links Debian's librocksdb (ROCKSDB_LIB_DIR) instead of
# compiling RocksDB from source (~45 min); the service never opens a RocksDB (the linker drops it).
# Needs Debian's redis-server, librocksdb-dev and libclang-dev (bindgen): scripts/setup.
RATELIMIT_BIN=$ROOT/target/ratelimit/release/ratelimit-service
ensure_ratelimit_service() {
  local start=$SECONDS
  if [ ! -x "$RATELIMIT_BIN" ]; then
    echo "building the RateLimitService (envoy-demo/ratelimit; 3 to 10 min the first time, docs/ratelimit-service.md)" >&2
  fi
  ratelimit_cargo build -q >&2 || return 1
  [ $((SECONDS - start)) -lt 5 ] || echo "RateLimitService built in $((SECONDS - start)) s" >&2
}

# `cargo SUBCOMMAND ARGS...` (release, locked) on envoy-demo/ratelimit, linking Debian's librocksdb.
ratelimit_cargo() {
  local lib
  lib=$(dpkg -L librocksdb-dev 2>/dev/null | grep '/librocksdb\.so$' | head -1) || true
  [ -n "$lib" ] || { echo "librocksdb-dev is not installed: run scripts/setup" >&2; return 1; }
  ROCKSDB_LIB_DIR=$(dirname "$lib") SNAPPY_LIB_DIR=$(dirname "$lib") cargo "$1" --release --locked \
    --manifest-path "$ROOT/envoy-demo/ratelimit/Cargo.toml" --target-dir "$ROOT/target/ratelimit" "${@:2}"
}
