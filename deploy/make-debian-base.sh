#!/bin/sh
# A local base image for deploy/Dockerfile made from Debian's own packages, for machines that reach Debian's
# mirror but no image registry (the image test, tests/deploy/test_image.py; an air-gapped build host).
#
#   deploy/make-debian-base.sh [TAG]        # default TAG: localhost/pgmem-base:debian-bookworm
#   podman build --build-arg BASE=localhost/pgmem-base:debian-bookworm ...   (deploy/build-image.sh --base)
#
# mmdebstrap writes a minimal bookworm root filesystem (Debian's python3 3.11 with venv, CA certificates,
# useradd) from the apt sources this machine already uses, and `podman import` makes it an image. Nothing is
# downloaded but Debian packages, verified by apt against the archive keyring. The default base of the
# Dockerfile stays the pinned public python image.
set -eu
tag=${1:-localhost/pgmem-base:debian-bookworm}
suite=${PGMEM_BASE_SUITE:-bookworm}
mirror=${PGMEM_BASE_MIRROR:-}   # empty: this machine's apt sources
command -v mmdebstrap >/dev/null || { echo "make-debian-base.sh: mmdebstrap is not installed (apt-get install mmdebstrap)" >&2; exit 1; }
command -v podman >/dev/null || { echo "make-debian-base.sh: podman is not installed (apt-get install podman)" >&2; exit 1; }
# shellcheck disable=SC2086  # $mirror is empty or one URL
mmdebstrap --quiet --variant=minbase --include=python3,python3-venv,ca-certificates,passwd \
    --aptopt='Acquire::Languages "none"' --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
    "$suite" - $mirror \
  | podman import --quiet --change 'CMD ["/bin/sh"]' --change 'ENV LANG=C.UTF-8' - "$tag" >/dev/null
echo "$tag"
