#!/usr/bin/env bash
# Install everything codegym needs: Debian packages (as root) and .venv/ in the repo root.
# Idempotent and quick when nothing changed.
set -euo pipefail
cd "$(dirname "$0")/.."

need_pkgs=()
command -v bwrap >/dev/null || need_pkgs+=(bubblewrap)
command -v runsc >/dev/null || need_pkgs+=(runsc)
[ -x /usr/bin/python3 ] || need_pkgs+=(python3)
# images build their environments with the system Python's venv and ensurepip
/usr/bin/python3 -c 'import ensurepip, venv' 2>/dev/null || need_pkgs+=(python3-venv)
command -v git >/dev/null || need_pkgs+=(git)  # git sources of images; diffs in tests
command -v gcc >/dev/null || need_pkgs+=(gcc)
command -v node >/dev/null || need_pkgs+=(nodejs)
command -v chromium >/dev/null || need_pkgs+=(chromium)  # renders HTML reports in tests
command -v promtool >/dev/null || need_pkgs+=(prometheus)  # rules/alerts checked, dashboard queried live in tests
[ -e /usr/lib/x86_64-linux-gnu/libseccomp.so.2 ] || [ -e /usr/lib/aarch64-linux-gnu/libseccomp.so.2 ] || need_pkgs+=(libseccomp2)
if [ ${#need_pkgs[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "setup: installing Debian packages: ${need_pkgs[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
  else
    echo "setup: missing Debian packages: ${need_pkgs[*]}" >&2
    echo "setup: install them as root: sudo apt-get install -y ${need_pkgs[*]}" >&2
    echo "setup: (the 'jail' tier needs bubblewrap; 'gvisor' needs runsc)" >&2
  fi
fi

PY=${PYTHON:-}
if [ -z "$PY" ]; then
  for cand in python3.11 python3; do
    if command -v "$cand" >/dev/null && "$cand" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
      PY=$cand; break
    fi
  done
fi
[ -n "$PY" ] || { echo "setup: Python 3.11 is required" >&2; exit 1; }

stamp_src=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -d' ' -f1)
if ! { [ -x .venv/bin/codegym ] && [ -f .venv/.setup-stamp ] && [ "$(cat .venv/.setup-stamp)" = "$stamp_src" ]; }; then
  [ -x .venv/bin/python ] || "$PY" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  .venv/bin/python -m pip install -q -e '.[dev]'
  echo "$stamp_src" > .venv/.setup-stamp
  echo "setup: .venv ready"
fi

# The shipped repository tasks (swe-offline) start from images of 13 PyPI packages: their
# sdists and test environments are fetched here, checked by sha256, never at run time.
# Quick when they are built already; needs bubblewrap (images build in the jail).
if command -v bwrap >/dev/null; then
  .venv/bin/codegym tasks prepare swe-offline --images-only >/dev/null \
    || { echo "setup: building the images of swe-offline failed (see above)" >&2; exit 1; }
  # the environments suites' tests run in (codegym.tasks.environments): numpy, for
  # EvalPlus's original-layout files; its wheel is checked by sha256
  for spec in src/codegym/tasks/images/*.toml; do
    .venv/bin/codegym image build "$spec" >/dev/null \
      || { echo "setup: building the environment $spec failed (see above)" >&2; exit 1; }
  done
fi
