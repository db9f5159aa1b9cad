#!/usr/bin/env bash
# apt-get install the named Debian packages (with sudo when not root); used by the Makefile
# for the few system programs mlbench needs and a fresh machine may lack.
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: $0 PACKAGE..." >&2; exit 2; }
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
echo "installing system packages: $*"
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "$@" >/dev/null
