#!/usr/bin/env bash
# The whole konverge test suite, on a fresh machine: installs what the tests need (a real etcd
# for the etcd backend, protoc to build its client), then checks formatting, lints, and runs
# every test of every crate with every feature.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v etcd >/dev/null 2>&1 || missing+=(etcd-server)
command -v protoc >/dev/null 2>&1 || missing+=(protobuf-compiler)
if ((${#missing[@]})); then
  echo "== installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# A one-off build gains nothing from incremental caches; they would double the disk it needs.
if [ -n "${CI:-}" ]; then
  export CARGO_INCREMENTAL=0
fi

echo "== cargo fmt --check"
cargo fmt --all -- --check

echo "== cargo clippy"
cargo clippy --workspace --all-targets --all-features --locked -- -D warnings

echo "== cargo test"
cargo test --workspace --all-features --locked
