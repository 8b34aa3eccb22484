#!/bin/sh
# cuslice-entrypoint.sh: run a container's command as a cuslice tenant.
#
#   cuslice-entrypoint.sh CMD [ARGS...]
#
# Appends the cuslice hook to LD_PRELOAD, keeping what the image already preloads, then
# exec's CMD, so that CMD keeps the container's pid, signals and exit status. Running it twice
# (an image whose entrypoint is already wrapped) adds the hook once.
#
#   CUSLICE_HOOK_PATH  the hook inside the container (default /opt/cuslice/lib/libcuslice.so,
#                      where `cuslice cdi generate` and deploy/kubernetes mount it)
#
# Exit status: 1 if the hook cannot be used, 2 without a command, otherwise CMD's (127 if
# CMD is not found, 126 if it cannot be executed, as sh reports them).
#
# POSIX sh only: container images may have nothing but busybox or dash.
set -eu
set -f  # LD_PRELOAD is split on spaces and colons below; its entries are not patterns

me=cuslice-entrypoint
hook=${CUSLICE_HOOK_PATH:-/opt/cuslice/lib/libcuslice.so}

if [ "$#" -eq 0 ]; then
    echo "$me: no command given" >&2
    echo "  usage: $me CMD [ARGS...]" >&2
    exit 2
fi

# Refuse to start unconfined: a tenant running without its quota is worse than one that
# does not start, because the other tenants on the GPU pay for it.
if [ ! -f "$hook" ] || [ ! -r "$hook" ]; then
    echo "$me: cannot use the cuslice hook $hook: not a readable file" >&2
    echo "  mount libcuslice.so there, or set CUSLICE_HOOK_PATH to where it is mounted" >&2
    exit 1
fi
case $hook in
    *[:\ ]*)
        echo "$me: cannot preload $hook: LD_PRELOAD cannot hold a path with a space or colon" >&2
        exit 1
        ;;
esac

# ld.so reads LD_PRELOAD as entries separated by spaces or colons. Any libcuslice.so already
# there counts: two copies of the interposer would count allocations twice.
has_hook=no
old_ifs=$IFS
IFS=' :'
for entry in ${LD_PRELOAD-}; do
    case ${entry##*/} in
        libcuslice.so) has_hook=yes ;;
    esac
done
IFS=$old_ifs

if [ "$has_hook" = no ]; then
    case ${LD_PRELOAD-} in
        "" | *[:\ ]) LD_PRELOAD=${LD_PRELOAD-}$hook ;;
        *) LD_PRELOAD=$LD_PRELOAD:$hook ;;
    esac
    export LD_PRELOAD
fi

exec "$@"
