# Sourced by scripts/bootstrap and scripts/docker-setup: the Python the project's own processes run on.
# $AIRFLOW_MPI_PYTHON, else the distribution's /usr/bin/python3 (3.10 to 3.13), else the interpreter behind the first
# python3 on PATH (its real executable, never a version manager's shim). Debian builds its Python with profile-guided
# and link-time optimisation; a version manager's build on PATH (pyenv's 3.11.7 here) ran the same pure-Python loop
# about 30 % slower (3.1-3.2 s against 2.3-2.5), and a shim runs about 20 shell processes before each start.
supported_python() { "$1" -c 'import sys; sys.exit(not (3, 10) <= sys.version_info[:2] <= (3, 13))' 2>/dev/null; }
project_python() {  # prints the interpreter's path; fails, saying why, when none is supported
  local py=${AIRFLOW_MPI_PYTHON:-}
  if [ -z "$py" ]; then
    if [ -x /usr/bin/python3 ] && supported_python /usr/bin/python3; then py=/usr/bin/python3
    else py=$(python3 -c 'import sys; print(sys.executable)'); fi
  fi
  supported_python "$py" || { echo "${0##*/}: $py is not Python 3.10-3.13 (set AIRFLOW_MPI_PYTHON)" >&2; return 1; }
  echo "$py"
}
