#!/bin/sh
# Build the pgmem API image of one git commit: deploy/build-image.sh COMMIT [--base IMAGE] [--tag NAME]
#
# COMMIT must be a full 40-hex commit of this checkout (tags and branches move; a commit names one tree).
# The build context is `git archive COMMIT` (plus .pgmem-revision, which the Dockerfile checks), so the image
# holds exactly that tree, whatever the working tree holds. The Dockerfile is the commit's own deploy/Dockerfile.
# Prints the image name, pgmem-api:COMMIT by default (the name deploy/compose.yaml runs).
#
#   --base IMAGE  the base image (default: the Dockerfile's pinned python image; deploy/make-debian-base.sh
#                 makes one from Debian's packages)
#   --tag NAME    the image name instead of pgmem-api:COMMIT
#   --ca-bundle FILE  CA certificates pip must trust (a TLS-inspecting proxy), a build secret (in no layer);
#                 default $PIP_CERT, else the cert of /etc/pip.conf, when set
# PGMEM_BUILDER picks the builder (podman or docker; default the first found). With podman on a host that
# cannot run containers, set BUILDAH_ISOLATION=chroot.
set -eu
die() { echo "build-image.sh: $*" >&2; exit 1; }
rev=${1:-}
[ $# -gt 0 ] && shift
base= tag= ca=${PIP_CERT:-}
# pip's own setting on this host, when the environment names none (a TLS-inspecting proxy's CA is often there)
[ -z "$ca" ] && ca=$(sed -n 's/^[[:space:]]*cert[[:space:]]*=[[:space:]]*//p' /etc/pip.conf 2>/dev/null | head -n 1)
while [ $# -gt 0 ]; do
  case $1 in
    --base) [ $# -ge 2 ] || die "--base needs an image"; base=$2; shift 2 ;;
    --tag) [ $# -ge 2 ] || die "--tag needs a name"; tag=$2; shift 2 ;;
    --ca-bundle) [ $# -ge 2 ] || die "--ca-bundle needs a file"; ca=$2; shift 2 ;;
    *) die "unknown option $1 (usage: build-image.sh COMMIT [--base IMAGE] [--tag NAME])" ;;
  esac
done
printf '%s\n' "$rev" | grep -Eq '^[0-9a-f]{40}$' \
  || die "the revision must be a full 40-hex git commit (git rev-parse HEAD), got '$rev'"
repo=$(cd "$(dirname "$0")/.." && pwd)
git -C "$repo" cat-file -e "$rev^{commit}" 2>/dev/null || die "$rev is not a commit of $repo (git fetch it first)"
builder=${PGMEM_BUILDER:-$(command -v podman || command -v docker || true)}
[ -n "$builder" ] || die "neither podman nor docker is installed"
tag=${tag:-pgmem-api:$rev}
ctx=$(mktemp -d "${TMPDIR:-/tmp}/pgmem-build.XXXXXX")
trap 'rm -rf "$ctx"' EXIT INT TERM
git -C "$repo" archive --format=tar "$rev" | tar -x -C "$ctx"
[ -f "$ctx/deploy/Dockerfile" ] || die "commit $rev has no deploy/Dockerfile"
printf '%s\n' "$rev" > "$ctx/.pgmem-revision"
set -- build --file "$ctx/deploy/Dockerfile" --build-arg "PGMEM_REVISION=$rev" --tag "$tag"
[ -n "$base" ] && set -- "$@" --build-arg "BASE=$base"
if [ -n "$ca" ]; then
  [ -r "$ca" ] || die "the CA bundle $ca cannot be read"
  set -- "$@" --secret "id=pip_cert,src=$ca"
fi
[ -n "${PIP_INDEX_URL:-}" ] && set -- "$@" --build-arg "PIP_INDEX_URL=$PIP_INDEX_URL"
"$builder" "$@" "$ctx" >&2
echo "$tag"
