#!/bin/bash
# Remote-launch agent of the test bed for Open MPI (plm_rsh_agent) and
# MPICH (Hydra's rsh launcher): "ns_agent.sh HOST CMD..."
# runs CMD in the bed namespace that owns HOST's management address, in an
# IPC namespace of its own: a host of its own to UCX's shared-memory
# transports (which take processes of one boot and IPC namespace for local).
host=$1
shift
bed=$(dirname "$0")/../bed.sh
for side in a b; do
    if [ "$host" = "$("$bed" addr "$side" m)" ]; then
        exec "$bed" exec "$side" unshare --ipc /bin/sh -c "$*"
    fi
done
echo "ns_agent.sh: unknown host $host" >&2
exit 1
