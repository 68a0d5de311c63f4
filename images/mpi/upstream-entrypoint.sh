#!/bin/bash
# ENTRYPOINT of the mpich-upstream and intel-upstream images (images/mpi/Dockerfile). Written for this project to do
# what the entrypoint of the Kubeflow mpi-operator's MPICH and Intel MPI base images does (v0.8.2,
# build/base/entrypoint.sh), so that upstream's example manifests, which put the launcher's mpirun in `args`, run
# here unchanged:
#   1. load Intel oneAPI's environment when the image has it (/opt/intel/oneapi/setvars.sh; our Intel MPI comes
#      from PyPI and has no such script: its programs are on PATH and its libraries known to ld.so already);
#   2. on the launcher only (K_MPI_JOB_ROLE=launcher, set by the mpi-operator), wait until its own host name and
#      every host of the hostfile answer a DNS query: Hydra's proxies, started on the workers over SSH, call the
#      launcher back by name, and SSH needs the workers' names; their records come from the job's headless
#      Service and may lag behind the pods. Each name gets a bounded number of tries with a doubling pause
#      (0.1 s, 0.2 s, ... 51.2 s: at most about 102 s per name); a name that never resolves is reported and the
#      command runs anyway, as upstream's does;
#   3. replace itself with the container's command (`exec "$@"`).

oneapi_env=/opt/intel/oneapi/setvars.sh
if [[ -f $oneapi_env ]]; then
  # sourced without our arguments (bash would hand it the container's command line otherwise)
  command_line=("$@")
  set --
  # shellcheck disable=SC1090
  . "$oneapi_env"
  set -- "${command_line[@]}"
fi

# wait_for_dns NAME: true once `nslookup NAME` succeeds, or after the last try (with a message either way)
wait_for_dns() {
  local name=$1 pause=0.1 attempt=0 attempts=10
  while ! nslookup "$name" >/dev/null 2>&1; do
    if ((attempt >= attempts)); then
      echo "entrypoint: $name did not resolve after $attempts retries; going on"
      return 0
    fi
    sleep "$pause"
    attempt=$((attempt + 1))
    echo "entrypoint: $name does not resolve yet (retry $attempt of $attempts)"
    pause=$(awk -v p="$pause" 'BEGIN { print 2 * p }')
  done
  echo "entrypoint: $name resolves"
}

hostfile=/etc/mpi/hostfile
if [[ ${K_MPI_JOB_ROLE:-} == launcher ]]; then
  wait_for_dns "$HOSTNAME"
  if [[ -r $hostfile ]]; then
    # one host a line: "<name>:<slots>" (MPICH, Intel MPI) or "<name> slots=<n>" (Open MPI)
    while read -r entry _; do
      host=${entry%%:*}
      [[ -z $host || $host == \#* ]] || wait_for_dns "$host"
    done <"$hostfile"
  fi
fi

exec "$@"
