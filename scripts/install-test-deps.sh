#!/usr/bin/env bash
# Installs the system programs the test suite starts for itself: PostgreSQL server binaries
# (a throwaway cluster per test session), Chromium (dashboard tests) and Slurm with munge
# (tests/slurm starts a real two-node Slurm: scripts/slurm/local-cluster.sh), with PMIx for
# srun --mpi=pmix, and Java (default-jre-headless) for Spark and Flink. Redis and MPI come from the
# virtualenv. Only what is missing is
# installed, so a second run takes no time.
set -euo pipefail

need=()
pg_bindir() {
  for d in "$(pg_config --bindir 2>/dev/null || true)" /usr/lib/postgresql/*/bin; do
    [ -n "$d" ] && [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ] && { echo "$d"; return 0; }
  done
  return 1
}
pg_bindir >/dev/null || need+=(postgresql)
command -v chromium >/dev/null || [ -x /usr/bin/chromium ] || need+=(chromium)
for prog in slurmctld slurmd sbatch; do
  command -v "$prog" >/dev/null || [ -x "/usr/sbin/$prog" ] || { need+=(slurm-wlm); break; }
done
command -v munged >/dev/null || [ -x /usr/sbin/munged ] || need+=(munge)
# srun --mpi=pmix (the Slurm driver's srun launcher): Slurm's mpi/pmix plugin dlopens
# pmix2/lib/libpmix.so, the unversioned name that only libpmix-dev ships (libpmix2 has .so.2).
compgen -G "/usr/lib/*/pmix2/lib/libpmix.so" >/dev/null || need+=(libpmix-dev)
command -v dockerd >/dev/null || [ -x /usr/sbin/dockerd ] || need+=(docker.io)
command -v debootstrap >/dev/null || [ -x /usr/sbin/debootstrap ] || need+=(debootstrap)
command -v openssl >/dev/null || need+=(openssl)
# Java for the spark and flink implementations' JVMs (pyspark and .venv-flink's PyFlink
# come from `make test-deps`).
command -v java >/dev/null || need+=(default-jre-headless)

if [ ${#need[@]} -gt 0 ]; then
  bash "$(dirname "$0")/apt-install.sh" "${need[@]}"
fi
echo "test dependencies ready: java $(java -version 2>&1 | head -1), postgres in $(pg_bindir), chromium at $(command -v chromium || echo /usr/bin/chromium), slurm $(slurmctld -V 2>/dev/null || /usr/sbin/slurmctld -V), $(/usr/sbin/dockerd --version 2>/dev/null || dockerd --version)"
