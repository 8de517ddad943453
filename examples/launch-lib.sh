# Sourced by the scripts that run one job under every launcher present
# (examples/launchers.sh, examples/opentime/control.sh), from the
# repository root, with $tmp a scratch directory the caller removes.
#
# find_launchers: sets launchers to ddrun, then MPICH's mpiexec.mpich when
# on PATH, then srun when a Slurm answers; with no Slurm running (SLURM_CONF
# unset or dead) it starts, as root, a one-machine one for the run
# (examples/slurm/local-slurm.sh) and installs an EXIT trap that stops it
# and removes $tmp.
find_launchers() {
  launchers=(ddrun)
  command -v mpiexec.mpich >/dev/null && launchers+=(mpiexec)
  if command -v srun >/dev/null; then
    if ! timeout 20 srun -n 1 true >/dev/null 2>&1 && [[ $(id -u) == 0 ]] &&
      examples/slurm/local-slurm.sh start "$tmp/slurm" >/dev/null; then
      export SLURM_CONF=$tmp/slurm/slurm.conf
      trap 'examples/slurm/local-slurm.sh stop "$tmp/slurm"; rm -rf "$tmp"' EXIT
    fi
    timeout 20 srun -n 1 true >/dev/null 2>&1 && launchers+=(srun)
  fi
}

# launch L N CMD...: run CMD as N ranks under launcher L; ddrun is
# ${BIN:-bin}/ddrun. SRUN_ARGS adds flags to srun (e.g. --mpi=pmi2).
launch() {
  local l=$1 n=$2
  shift 2
  case $l in
    ddrun) "${BIN:-bin}/ddrun" -n "$n" "$@" ;;
    mpiexec) mpiexec.mpich -n "$n" "$@" ;;
    srun) srun ${SRUN_ARGS:-} -n "$n" "$@" ;;
  esac
}
