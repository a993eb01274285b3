# shellcheck shell=bash
# Shared helpers for dev-broker and kafka-class. Sourced, not executed.
#
# Everything is derived from this file's own location: no machine-specific paths.

KAFKA_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
CACHE_DIR="$KAFKA_DIR/.cache"
LIB_DIR="$CACHE_DIR/lib"
LIB_STAMP="$CACHE_DIR/lib.stamp"
# shellcheck disable=SC2034  # used by dev-broker
RUN_ROOT="$KAFKA_DIR/.run"

log() { printf '%s\n' "dev-kafka: $*" >&2; }
die() { log "error: $*"; exit 1; }

# --- Java ------------------------------------------------------------------------------

# Sets JAVA_BIN to a Java 17+ executable: $KAFKA_DEV_JAVA, else $JAVA_HOME/bin/java, else PATH.
find_java() {
  if [[ -n "${KAFKA_DEV_JAVA:-}" ]]; then
    JAVA_BIN="$KAFKA_DEV_JAVA"
  elif [[ -n "${JAVA_HOME:-}" && -x "$JAVA_HOME/bin/java" ]]; then
    JAVA_BIN="$JAVA_HOME/bin/java"
  else
    JAVA_BIN="$(command -v java || true)"
  fi
  [[ -n "$JAVA_BIN" ]] || die "no java found (need Java 17+; set JAVA_HOME or KAFKA_DEV_JAVA)"
  local ver major
  ver="$("$JAVA_BIN" -version 2>&1 | sed -n 's/.*version "\([^"]*\)".*/\1/p' | head -n1)"
  major="${ver%%.*}"
  [[ "$major" =~ ^[0-9]+$ ]] || die "cannot tell the version of $JAVA_BIN ('$ver')"
  ((major >= 17)) || die "$JAVA_BIN is Java $ver; Kafka 4.x brokers need Java 17+"
}

# --- Jars from Maven Central -----------------------------------------------------------

pom_hash() { sha256sum "$KAFKA_DIR/pom.xml" | cut -d' ' -f1; }

# Makes sure $LIB_DIR holds the jars that pom.xml resolves to. Runs Maven only when the
# stamp (the hash of pom.xml) is missing or stale; serialised with flock so that two
# brokers started at once do not both download into the same folder.
ensure_jars() {
  local want
  want="$(pom_hash)"
  if [[ -f "$LIB_STAMP" && "$(cat "$LIB_STAMP")" == "$want" && -d "$LIB_DIR" ]]; then
    return 0
  fi
  mkdir -p "$CACHE_DIR"
  (
    flock 8
    # Another process may have finished the job while we waited for the lock.
    if [[ -f "$LIB_STAMP" && "$(cat "$LIB_STAMP")" == "$want" && -d "$LIB_DIR" ]]; then
      exit 0
    fi
    command -v mvn >/dev/null || die "mvn not found: Maven is needed once to fetch the Kafka jars"
    log "resolving Kafka jars from Maven Central (first use; about 55 MB) ..."
    local tmp="$CACHE_DIR/lib.tmp.$$" t0=$SECONDS
    rm -rf "$tmp"
    if ! mvn -q -B -f "$KAFKA_DIR/pom.xml" dependency:copy-dependencies \
        -DincludeScope=runtime -DoutputDirectory="$tmp" >"$CACHE_DIR/mvn.log" 2>&1; then
      tail -n 30 "$CACHE_DIR/mvn.log" >&2
      rm -rf "$tmp"
      die "Maven could not resolve the jars (full log: $CACHE_DIR/mvn.log)"
    fi
    ls "$tmp"/kafka_2.13-*.jar >/dev/null 2>&1 || die "Maven ran but no kafka_2.13 jar came out"
    rm -rf "$LIB_DIR"
    mv "$tmp" "$LIB_DIR"
    printf '%s\n' "$want" >"$LIB_STAMP"
    local jars=("$LIB_DIR"/*.jar)
    log "jars ready in $((SECONDS - t0))s: ${#jars[@]} jars in $LIB_DIR"
  ) 8>"$CACHE_DIR/.lock" || exit 1
}

kafka_version() {
  local jars=("$LIB_DIR"/kafka_2.13-*.jar) j
  j="${jars[0]##*/kafka_2.13-}"
  printf '%s\n' "${j%.jar}"
}

classpath() { printf '%s\n' "$LIB_DIR/*"; }
