#!/usr/bin/env bash
# Builds wasp's container image without docker or a registry into target/image/wasp.tar (an image tar that
# `ctr images import` and `docker load` read), with the Dockerfile's contents: the host built as the Dockerfile
# builds it, at /usr/local/bin/wasp, run as distroless' non-root user 65532, beside the C libraries it loads
# (distroless/cc's glibc and libgcc, here taken from this machine) and the CA bundle. tests/real_node.rs checks
# that the two stay equal.
#
#   scripts/build-image.sh [--binary PATH] [--out FILE] [--tag NAME]
#
# --binary: a wasp binary already built (the tests use their own build); by default, the release build.
set -euo pipefail
cd "$(dirname "$0")/.."
binary="" out=target/image/wasp.tar tag=wasp:dev
while [ $# -gt 0 ]; do
  case "$1" in
    --binary) binary="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --tag) tag="$2"; shift 2 ;;
    *) echo "build-image.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
controlplane=target/controlplane/wasp-controlplane
[ -x "$controlplane" ] || { echo "build-image.sh: $controlplane is missing (scripts/build-controlplane.sh)" >&2; exit 1; }
if [ -z "$binary" ]; then
  # The Dockerfile's build command.
  cargo build --release --locked -p wasp --no-default-features --features jemalloc
  binary=target/release/wasp
fi
mkdir -p "$(dirname "$out")"
# Without its symbols (a test build carries line tables): the image holds the program, not its debug data.
stripped="$(dirname "$out")/wasp.stripped"
strip -o "$stripped" "$binary"
"$controlplane" image --tag "$tag" --out "$out" --entrypoint /usr/local/bin/wasp --user 65532 --libraries \
  --file /usr/local/bin/wasp="$stripped" \
  --file /etc/ssl/certs/ca-certificates.crt=/etc/ssl/certs/ca-certificates.crt \
  --env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
rm -f "$stripped"
echo "$out: $tag, $(du -h "$out" | cut -f1)"
