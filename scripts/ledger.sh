# Sourced by scripts/bootstrap and scripts/docker-setup: their lines of scripts/test's build ledger
# (localcluster/build_ledger.py; nothing is written when AIRFLOW_MPI_BUILDS is unset).
note() {  # note WHAT BUILT(0/1) SECONDS
  if [ -n "${AIRFLOW_MPI_BUILDS:-}" ]; then
    printf '%s\t%s\t%s\n' "$1" "$([ "$2" = 1 ] && echo 'built now' || echo cached)" "$3" >> "$AIRFLOW_MPI_BUILDS"
  fi
}
