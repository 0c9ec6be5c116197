#!/usr/bin/env bash
# Assembles a base image for deploy/Dockerfile without pulling from any image registry: Debian 12 from Debian's
# mirror (debootstrap), with this machine's Node.js (node, npm and node's headers) laid out where the official
# node images have them (/usr/local). For machines that reach Debian's mirror and the npm registry but no image
# registry. Needs root, debootstrap and buildah, and node 24 or later on PATH (the Dockerfile's default base is
# node:24-bookworm-slim).
#
#   deploy/local-base-image.sh [image]      # default localhost/node24-bookworm:local
#   buildah bud --build-arg NODE_IMAGE=localhost/node24-bookworm:local -f deploy/Dockerfile …
#
# The machine's extra certificate authorities (/usr/local/share/ca-certificates/*.crt, e.g. a TLS-inspecting
# proxy's) are added to the image's trust store, and npm is told to use it, so apt and npm inside the build
# reach what this machine reaches.
set -euo pipefail

IMAGE="${1:-localhost/node24-bookworm:local}"
NODE_MAJOR=24
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"

node_bin="$(readlink -f "$(command -v node)")"
node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= Number(process.argv[1]) ? 0 : 1)' "$NODE_MAJOR" ||
  { echo "node $(node --version) is older than $NODE_MAJOR" >&2; exit 2; }
node_prefix="$(dirname "$(dirname "$node_bin")")"
npm_dir="$(npm root -g)/npm"
headers="$node_prefix/include/node"
[ -f "$headers/node.h" ] || { echo "node's headers are not in $headers" >&2; exit 2; }

rootfs="$(mktemp -d)"
ctr=""
cleanup() {
  [ -n "$ctr" ] && buildah rm "$ctr" >/dev/null 2>&1 || true
  rm -rf "$rootfs"
}
trap cleanup EXIT

debootstrap --variant=minbase --include=ca-certificates bookworm "$rootfs" "$MIRROR" >/dev/null
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*

install -D -m 0755 "$node_bin" "$rootfs/usr/local/bin/node"
mkdir -p "$rootfs/usr/local/lib/node_modules" "$rootfs/usr/local/include" "$rootfs/usr/local/etc"
cp -a "$npm_dir" "$rootfs/usr/local/lib/node_modules/npm"
cp -a "$headers" "$rootfs/usr/local/include/node"
ln -s ../lib/node_modules/npm/bin/npm-cli.js "$rootfs/usr/local/bin/npm"
ln -s ../lib/node_modules/npm/bin/npx-cli.js "$rootfs/usr/local/bin/npx"
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
  cp /usr/local/share/ca-certificates/*.crt "$rootfs/usr/local/share/ca-certificates/"
  chroot "$rootfs" update-ca-certificates >/dev/null
fi
printf 'cafile=/etc/ssl/certs/ca-certificates.crt\n' >"$rootfs/usr/local/etc/npmrc"
chroot "$rootfs" /usr/local/bin/node --version >/dev/null

ctr="$(buildah from scratch)"
mnt="$(buildah mount "$ctr")"
cp -a "$rootfs/." "$mnt/"
buildah umount "$ctr" >/dev/null
buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --cmd node "$ctr"
buildah commit --quiet "$ctr" "$IMAGE" >/dev/null
echo "$IMAGE: Debian 12 with node $(node --version)"
