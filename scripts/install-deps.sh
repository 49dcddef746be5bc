#!/usr/bin/env bash
# Installs the Debian packages dyad needs to build and test (run as root, or with sudo).
# Build: a C compiler, CMake, Ninja, pkg-config. Libraries: PCRE2 (tokenizer pre-splitting
# regexes), xxHash (KV block hashes), libmicrohttpd (HTTP server), jansson (JSON), libcurl
# (the load generator's HTTP client), cmocka (unit tests), UCX (KV transfer between hosts,
# --kv-transfer ucx; the build goes on without it), the NATS C client libnats-dev (cluster
# mode's registry and messages, docs/cluster.md; the build goes on without it) and Debian's
# nats-server, which the cluster tests start with JetStream on. Tests also use xz-utils (one
# reference model is stored compressed), and clang with its sanitizer and libFuzzer runtimes
# (libclang-rt-dev, only recommended by clang) for the fuzz smoke (scripts/fuzz-smoke.sh).
set -euo pipefail
pkgs=(build-essential cmake ninja-build pkg-config libpcre2-dev libxxhash-dev libcmocka-dev
      libmicrohttpd-dev libjansson-dev libcurl4-openssl-dev libucx-dev libnats-dev nats-server
      xz-utils clang libclang-rt-dev)
# Tests: Python 3 (server tests: the standard library, and jsonschema to validate structured
# outputs); Node.js + npm (the OpenAI SDK test), unless a Node.js is already installed.
pkgs+=(python3 python3-jsonschema)
# The operator's view (issue 17): a real Prometheus (and promtool) scrapes /metrics, and
# headless Chromium loads /dashboard (a font so its screenshot has text).
pkgs+=(prometheus chromium fonts-dejavu-core)
command -v node >/dev/null && command -v npm >/dev/null || pkgs+=(nodejs npm)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
