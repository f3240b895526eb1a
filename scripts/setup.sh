#!/usr/bin/env bash
# Installs what cdc-sql needs on a fresh Debian machine, idempotently:
# Debian's mariadb-server (for the demo and the tests), a C compiler and Python's headers (for
# the compiled row decoder), a Python 3.11 venv in .venv with cdc-sql installed into it, and the
# Delta Lake jars for JVM Spark (Java and Maven from Debian if missing).
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
apt_install() {
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "$@" >/dev/null
}

PYTHON="${PYTHON:-}"
if [ -z "$PYTHON" ]; then
  for candidate in python3.11 python3; do
    if command -v "$candidate" >/dev/null 2>&1 && \
       "$candidate" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
      PYTHON="$candidate"; break
    fi
  done
fi
[ -n "$PYTHON" ] || { echo "setup: Python 3.11 is required" >&2; exit 1; }

# Debian's packages are fetched and installed while pip fills the venv (both mostly wait on
# downloads on a fresh machine); the compiled row decoder is built once both are done.
debian_packages() {
  if ! command -v mariadbd >/dev/null 2>&1 && [ ! -x /usr/sbin/mariadbd ]; then
    echo "setup: installing mariadb-server (Debian package)" >&2
    apt_install mariadb-server mariadb-client
    # The packaged service is not needed: the demo and tests start private servers.
    $SUDO service mariadb stop >/dev/null 2>&1 || true
  fi
  local headers
  headers="$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')/Python.h"
  if ! command -v cc >/dev/null 2>&1 || [ ! -f "$headers" ]; then
    echo "setup: installing gcc and the Python headers (the compiled row decoder)" >&2
    apt_install gcc python3-dev || echo "setup: could not install a compiler; the pure-Python" \
      "row decoder will be used (about 10x slower capture)" >&2
  fi
  if [ ! -x .venv/azurite/node_modules/.bin/azurite-blob ] && ! command -v npm >/dev/null 2>&1
  then
    echo "setup: installing Node.js and npm (Debian packages) for Azurite" >&2
    apt_install nodejs npm
  fi
}
debian_packages & debian=$!

stamp=".venv/.cdc-sql-installed"
wanted="$(cat pyproject.toml setup.py cdc_sql/_rowdecode.c cdc_sql/_resultrows.c cdc_sql/_buffers.h | sha256sum | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$wanted" ]; then
  echo "setup: creating .venv and installing cdc-sql with its test tools" >&2
  rm -f cdc_sql/_rowdecode.*.so cdc_sql/_resultrows.*.so  # built below, from this tree's source
  "$PYTHON" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  .venv/bin/python -m pip install -q -e '.[sail,test]'
fi
wait "$debian" || { echo "setup: installing Debian's packages failed" >&2; exit 1; }
if ! .venv/bin/python -c 'import cdc_sql._rowdecode, cdc_sql._resultrows' 2>/dev/null; then
  .venv/bin/python setup.py -q build_ext --inplace >/dev/null 2>&1 || true
fi
echo "$wanted" > "$stamp"

# Object-store endpoints for the tests (tests/objstores.py): moto's S3 server comes with the
# test extra above; Azurite (Azure Blob / ADLS) is an npm package, kept beside the venv.
AZURITE_VERSION=3.35.0  # the newest for Node 18-20 (3.36 asks for 21+)
if [ ! -x .venv/azurite/node_modules/.bin/azurite-blob ]; then
  echo "setup: installing Azurite $AZURITE_VERSION (npm) for the Azure Blob / ADLS tests" >&2
  npm install --prefix .venv/azurite --no-audit --no-fund --silent \
    "azurite@$AZURITE_VERSION" >/dev/null
fi

.venv/bin/python -c 'import cdc_sql._rowdecode' 2>/dev/null || \
  echo "setup: the compiled row decoder is not built; capture uses the pure-Python one" >&2

# -- JVM Spark: the Delta Lake jars for a venv's pyspark (cdc_sql/jars.py), fetched once --------
# Into <venv>/share/cdc-sql/spark-jars, by `mvn dependency:copy-dependencies` on
# conf/spark-jars/pom.xml; fetched again when pyspark's line or the pom changes.
install_jars() {
  local venv="$1" dir wanted
  dir="$("$venv/bin/python" -c 'from cdc_sql.jars import folder; print(folder())')"
  wanted="$("$venv/bin/python" -m cdc_sql.jars wanted) $(sha256sum conf/spark-jars/pom.xml | cut -d' ' -f1)"
  [ "$(cat "$dir/.wanted" 2>/dev/null)" != "$wanted" ] || return 0
  if ! command -v java >/dev/null 2>&1 || ! command -v mvn >/dev/null 2>&1; then
    echo "setup: installing Java 17 and Maven (Debian packages) for JVM Spark" >&2
    apt_install openjdk-17-jre-headless maven
  fi
  echo "setup: fetching ${wanted% *} and their dependencies (Maven) into $dir" >&2
  rm -rf "$dir"
  # shellcheck disable=SC2046 - the properties are words
  mvn -q -B -Dstyle.color=never -f conf/spark-jars/pom.xml dependency:copy-dependencies \
    -DincludeScope=runtime $("$venv/bin/python" -m cdc_sql.jars maven) >&2
  "$venv/bin/python" -m cdc_sql.jars prune >/dev/null
  echo "$wanted" > "$dir/.wanted"
}
install_jars .venv

# -- `setup.sh spark-4.0`: for the tests, the wheel in a clean venv on the previous Spark line --
# cdc-sql's wheel, built from this tree, installed with its `spark` extra beside pyspark 4.0
# (as where a user's Spark already is), the test tools, and Delta 4.0's jars.
if [ "${1:-}" = "spark-4.0" ]; then
  venv=".venv-spark-4.0"
  wheel_wanted="$(cat pyproject.toml setup.py udfs/*.py $(git ls-files cdc_sql 2>/dev/null || \
    find cdc_sql -type f -name '*.py') | sha256sum | cut -d' ' -f1) pyspark-4.0"
  if [ "$(cat "$venv/.cdc-sql-installed" 2>/dev/null)" != "$wheel_wanted" ]; then
    echo "setup: building cdc-sql's wheel into $venv (a clean venv, pyspark 4.0)" >&2
    rm -rf "$venv" build/wheel
    "$PYTHON" -m venv "$venv"
    "$venv/bin/python" -m pip install -q --upgrade pip >/dev/null
    .venv/bin/python -m pip wheel -q --no-deps -w build/wheel . >/dev/null
    "$venv/bin/python" -m pip install -q "$(ls build/wheel/cdc_sql-*.whl)[spark,test]" \
      'pyspark[connect]==4.0.*'
    echo "$wheel_wanted" > "$venv/.cdc-sql-installed"
  fi
  install_jars "$venv"
fi
