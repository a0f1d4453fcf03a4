#!/usr/bin/env bash
# Writes the seed certificates of the x509_sans fuzz target (DER) into seeds/x509_sans/:
# real certificates made by openssl with the SAN shapes the filter meets (one SPIFFE URI, two
# URIs, every GeneralName kind, no SAN, a critical SAN, a v1 certificate, a CA, RSA and Ed25519
# keys). Keys are random, so each run writes different bytes; the committed seeds are one run.
set -euo pipefail
out="$(cd "$(dirname "$0")" && pwd)/x509_sans"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
mkdir -p "$out"

openssl ecparam -name prime256v1 -genkey -noout -out ca.key
openssl req -x509 -new -key ca.key -subj "/O=mcp-access test/CN=test CA" -days 3650 -out ca.pem \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
openssl x509 -in ca.pem -outform DER -out "$out/ca.der"

# leaf NAME KEYSPEC [EXTENSION LINES...]: a certificate signed by the CA (no lines: v1).
leaf() {
  local name=$1 keyspec=$2
  shift 2
  case "$keyspec" in
    ec) openssl ecparam -name prime256v1 -genkey -noout -out "$name.key" ;;
    rsa) openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$name.key" 2>/dev/null ;;
    ed25519) openssl genpkey -algorithm ED25519 -out "$name.key" ;;
  esac
  openssl req -new -key "$name.key" -subj "/O=example/CN=$name" -out "$name.csr"
  local ext=()
  if [ $# -gt 0 ]; then
    printf '%s\n' "$@" >"$name.ext"
    ext=(-extfile "$name.ext")
  fi
  openssl x509 -req -in "$name.csr" -CA ca.pem -CAkey ca.key -set_serial "0x$(openssl rand -hex 8)" \
    -days 365 "${ext[@]}" -outform DER -out "$out/$name.der" 2>/dev/null
}

svid=(
  "basicConstraints=critical,CA:FALSE"
  "keyUsage=critical,digitalSignature"
  "extendedKeyUsage=clientAuth"
  "subjectKeyIdentifier=hash"
  "authorityKeyIdentifier=keyid"
)
leaf spiffe ec "subjectAltName=URI:spiffe://example.org/ns/agents/sa/alpha" "${svid[@]}"
leaf two-uris ec "subjectAltName=DNS:a.example,URI:spiffe://example.org/ns/a/sa/x,URI:spiffe://example.org/ns/a/sa/y" "${svid[@]}"
leaf all-names ec \
  "subjectAltName=email:a@example.org,DNS:a.example,URI:spiffe://example.org/x,IP:127.0.0.1,IP:::1,RID:1.2.3.4,otherName:1.3.6.1.4.1.311.20.2.3;UTF8:a@example.org,dirName:dir" \
  "[dir]" "CN=directory name" "O=example"
leaf critical-san rsa "subjectAltName=critical,URI:spiffe://example.org/ns/agents/sa/beta" "keyUsage=critical,digitalSignature"
leaf no-san ec "${svid[@]}"
leaf ed25519 ed25519 "subjectAltName=URI:spiffe://example.org/ns/agents/sa/ed"
leaf v1 ec
ls -l "$out"
