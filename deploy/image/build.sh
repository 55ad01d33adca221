#!/usr/bin/env bash
# Builds the `quantykube` container image FROM scratch out of a binary built on this
# machine: the binary, exactly the shared libraries `ldd` reports for it (at the same
# paths) and the dynamic loader, /etc/passwd and /etc/group lines for the nonroot user
# 65532, an empty /tmp and the data directory owned by 65532. No base image is pulled.
# The result has the same user, volume, environment, ports and entrypoint as the
# runtime stage of deploy/Dockerfile (tests/docker/image.rs checks that they agree).
#
#   deploy/image/build.sh            # the debug binary (what the tests run)
#   deploy/image/build.sh release    # the optimised binary (deploy/bench/build-release.sh)
#
# IMAGE names the tag (default quantykube:dev); BIN uses a binary already built
# elsewhere instead of building one. Prints the image's tag on stdout.
set -euo pipefail
cd "$(dirname "$0")/../.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/var/tmp/quantykube-target}
IMAGE=${IMAGE:-quantykube:dev}
profile=${1:-debug}

if [ -n "${BIN:-}" ]; then
  bin=$BIN
else
  case $profile in
    debug)
      cargo build --bin quantykube >&2
      bin=$CARGO_TARGET_DIR/debug/quantykube
      ;;
    release)
      bin=$(deploy/bench/build-release.sh)
      ;;
    *)
      echo "usage: $0 [debug|release]" >&2
      exit 2
      ;;
  esac
fi

# The binary must run here before it is put in an image.
if ! version=$("$bin" --version); then
  echo "build.sh: $bin --version failed" >&2
  exit 1
fi

stage=$(mktemp -d "${TMPDIR:-/tmp}/quantykube-image.XXXXXX")
trap 'rm -rf "$stage"' EXIT
root=$stage/rootfs
mkdir -p "$root"
cp "$bin" "$root/quantykube"
chmod 0755 "$root/quantykube"

# Every library the loader resolves ("name => /path (addr)"), and the loader itself (the
# line with an absolute path and no arrow). Copied with -L so that symlinks become files at
# the path the binary asks for.
ldd "$bin" | awk '
  $2 == "=>" && $3 ~ /^\// { print $3 }
  $1 ~ /^\// { print $1 }
' | sort -u | while read -r lib; do
  mkdir -p "$root$(dirname "$lib")"
  cp -L "$lib" "$root$lib"
done
interp=$(readelf -l "$bin" | sed -n 's/.*Requesting program interpreter: \(.*\)]$/\1/p')
if [ -n "$interp" ] && [ ! -e "$root$interp" ]; then
  echo "build.sh: the loader $interp of $bin is not in the image" >&2
  exit 1
fi

mkdir -p "$root/etc" "$root/tmp" "$root/var/lib/quantykube"
chmod 1777 "$root/tmp"
cat >"$root/etc/passwd" <<'PASSWD'
root:x:0:0:root:/root:/sbin/nologin
nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
PASSWD
cat >"$root/etc/group" <<'GROUP'
root:x:0:
nonroot:x:65532:
GROUP
# Host names through /etc/hosts, then DNS (Docker's embedded resolver for peer names).
echo 'hosts: files dns' >"$root/etc/nsswitch.conf"

# The data directory belongs to 65532 so that a new named volume, which Docker fills
# from the image, is writable by the member.
cat >"$stage/Dockerfile" <<'DOCKERFILE'
FROM scratch
COPY rootfs/ /
COPY --chown=65532:65532 rootfs/var/lib/ /var/lib/
USER 65532:65532
ENV ETCD_DATA_DIR=/var/lib/quantykube
VOLUME /var/lib/quantykube
EXPOSE 2379 2380 2381
ENTRYPOINT ["/quantykube"]
DOCKERFILE

old_id=$(docker image inspect --format '{{.Id}}' "$IMAGE" 2>/dev/null || true)
sha=$(sha256sum "$bin" | cut -d' ' -f1)
echo "building $IMAGE from $bin ($(echo "$version" | head -n1))" >&2
DOCKER_BUILDKIT=${DOCKER_BUILDKIT:-0} docker build --quiet \
  --label "org.quantykube.binary-sha256=$sha" \
  --label "org.quantykube.profile=$profile" \
  -t "$IMAGE" "$stage" >&2
# The image this tag named before is left untagged: remove it unless a container uses it.
new_id=$(docker image inspect --format '{{.Id}}' "$IMAGE")
if [ -n "$old_id" ] && [ "$old_id" != "$new_id" ]; then
  docker image rm "$old_id" >/dev/null 2>&1 || true
fi
echo "$IMAGE"
