#!/bin/sh
# Write the secret files deploy/compose.yaml mounts, with random passwords: deploy/make-secrets.sh [DIR]
# (default deploy/secrets, next to compose.yaml). Each file is mode 0600 and owned by the uid of the container
# that reads it, because Compose bind-mounts a file secret with its host owner and mode (uid/gid/mode in a
# service's secrets are ignored outside swarm) and libpq ignores a password file that others may read:
#
#   db_superuser_password, db_owner_password, db_service_password   uid 999 (postgres in the db image):
#       the superuser's password and the two logins' passwords, read once by deploy/initdb/10-roles.sh
#   pgpass_owner   uid 10001 (pgmem in the pgmem image): db:5432:pgmem:pgmem_owner:<password>  (migrate)
#   pgpass_api     uid 10001: db:5432:pgmem:pgmem_service:<password>  (api)
#
# Passwords are 256 random bits in hex (no ':' or '\', which a pgpass line would need escaped). An existing
# file is never overwritten: the database keeps the passwords it was initialised with, so rotating one is
# ALTER ROLE ... PASSWORD in the database, then a new file. PGMEM_DB_UID and PGMEM_APP_UID change the owners;
# PGMEM_SECRETS_CHOWN is the command that sets them (default: chown as root, `podman unshare chown` for rootless
# podman; `none` leaves the files yours).
set -eu
die() { echo "make-secrets.sh: $*" >&2; exit 1; }
dir=${1:-$(cd "$(dirname "$0")" && pwd)/secrets}
db_uid=${PGMEM_DB_UID:-999}
app_uid=${PGMEM_APP_UID:-10001}
if [ -z "${PGMEM_SECRETS_CHOWN:-}" ]; then
  if [ "$(id -u)" = 0 ]; then PGMEM_SECRETS_CHOWN=chown
  elif command -v podman >/dev/null; then PGMEM_SECRETS_CHOWN="podman unshare chown"
  else die "not root and no podman: set PGMEM_SECRETS_CHOWN to a command that can chown (or none)"; fi
fi
files="db_superuser_password db_owner_password db_service_password pgpass_owner pgpass_api"
umask 077
mkdir -p "$dir"
for f in $files; do
  [ ! -e "$dir/$f" ] || die "$dir/$f exists; not overwritten (the database keeps its passwords: rotate with ALTER ROLE, then replace the file)"
done
random() { od -An -N32 -tx1 /dev/urandom | tr -d ' \n'; }
super=$(random) owner=$(random) service=$(random)
[ ${#super} -eq 64 ] && [ ${#owner} -eq 64 ] && [ ${#service} -eq 64 ] || die "could not read /dev/urandom"
write() {  # write NAME UID CONTENT: a new file, 0600, then given to UID
  printf '%s\n' "$3" > "$dir/$1.tmp"
  chmod 600 "$dir/$1.tmp"
  # shellcheck disable=SC2086  # the command may be two words
  [ "$PGMEM_SECRETS_CHOWN" = none ] || $PGMEM_SECRETS_CHOWN "$2:$2" "$dir/$1.tmp"
  mv "$dir/$1.tmp" "$dir/$1"
}
write db_superuser_password "$db_uid" "$super"
write db_owner_password "$db_uid" "$owner"
write db_service_password "$db_uid" "$service"
write pgpass_owner "$app_uid" "db:5432:pgmem:pgmem_owner:$owner"
write pgpass_api "$app_uid" "db:5432:pgmem:pgmem_service:$service"
echo "make-secrets.sh: wrote $files into $dir"
