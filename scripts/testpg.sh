# Sourced by scripts/test: makes DROVER_TEST_DATABASE_URL point at a
# PostgreSQL the tests can use, or fails with a clear message. Never skips.
#
#   1. DROVER_TEST_DATABASE_URL already set: use it.
#   2. A local server answering as user postgres (TCP 127.0.0.1:5432 or the
#      Unix socket): use it. Tests isolate themselves in a schema each.
#   3. Otherwise start a private throwaway cluster from the installed
#      PostgreSQL binaries (installing Debian's postgresql package first when
#      running as root with apt-get and none is installed), on a free port,
#      removed when the tests end.
# DROVER_TEST_PG=throwaway skips step 2 (to test step 3).

pg_log() { echo "scripts/test: $*" >&2; }

pg_try() { # URL → 0 if it answers
	command -v psql >/dev/null 2>&1 || return 1
	PGCONNECT_TIMEOUT=3 psql "$1" -XtAc 'select 1' >/dev/null 2>&1
}

pg_bindir() {
	local d
	for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
		if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then
			echo "$d"
			return 0
		fi
	done
	return 1
}

pg_free_port() {
	local p
	for p in $(seq 55432 55532); do
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return 0
		fi
	done
	return 1
}

pg_throwaway() {
	local bin dir port as=()
	if ! bin=$(pg_bindir); then
		if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
			pg_log "no PostgreSQL found; installing Debian's postgresql package"
			apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null ||
				{ pg_log "apt-get install postgresql failed"; return 1; }
			bin=$(pg_bindir) || { pg_log "postgresql installed but no initdb found"; return 1; }
		else
			pg_log "no PostgreSQL server reachable and no PostgreSQL binaries installed;"
			pg_log "set DROVER_TEST_DATABASE_URL, or install PostgreSQL (Debian: apt-get install postgresql)"
			return 1
		fi
	fi
	dir=$(mktemp -d /tmp/drover-testpg.XXXXXX)
	port=$(pg_free_port) || { pg_log "no free port for a throwaway PostgreSQL"; return 1; }
	if [ "$(id -u)" = 0 ]; then
		# initdb refuses to run as root.
		id postgres >/dev/null 2>&1 || useradd --system --home-dir "$dir" postgres
		chown postgres "$dir"
		as=(runuser -u postgres --)
	fi
	"${as[@]}" "$bin/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 >"$dir/initdb.log" 2>&1 ||
		{ pg_log "initdb failed: $(tail -3 "$dir/initdb.log")"; return 1; }
	"${as[@]}" "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
		-o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=300" start >/dev/null ||
		{ pg_log "throwaway PostgreSQL did not start: $(tail -5 "$dir/server.log")"; return 1; }
	DROVER_TEST_PG_CLEANUP="${as[*]} $bin/pg_ctl -D $dir/data -m immediate stop; rm -rf $dir"
	trap 'eval "$DROVER_TEST_PG_CLEANUP" >/dev/null 2>&1' EXIT
	export DROVER_TEST_DATABASE_URL="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
	pg_log "started a throwaway PostgreSQL ($("$bin/postgres" --version | awk '{print $3}')) on port $port"
}

pg_provide() {
	if [ -n "${DROVER_TEST_DATABASE_URL:-}" ]; then
		pg_log "PostgreSQL from DROVER_TEST_DATABASE_URL"
		return 0
	fi
	if [ "${DROVER_TEST_PG:-}" != throwaway ]; then
		local url
		for url in "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable" \
			"postgresql:///postgres?host=/var/run/postgresql&user=postgres"; do
			if pg_try "$url"; then
				export DROVER_TEST_DATABASE_URL="$url"
				pg_log "using the local PostgreSQL at $url"
				return 0
			fi
		done
	fi
	pg_throwaway
}

# pg_tidy vacuums the system catalogs of a shared server whose autovacuum is
# off, best effort: each test schema created and dropped leaves dead catalog
# rows (about 650 in pg_attribute alone), which on such a server pile up
# and slow every later run. The conformance cases share a few schemas
# (testutil.SchemaPool), but the other tests still make about a hundred of
# their own per run. VACUUM changes no data; a throwaway cluster is removed
# anyway.
pg_tidy() {
	[ -z "${DROVER_TEST_PG_CLEANUP:-}" ] && command -v psql >/dev/null 2>&1 || return 0
	[ "$(PGCONNECT_TIMEOUT=3 psql "$DROVER_TEST_DATABASE_URL" -XtAc 'show autovacuum' 2>/dev/null)" = off ] || return 0
	pg_log "autovacuum is off on this server: vacuuming the system catalogs the tests churned"
	PGCONNECT_TIMEOUT=3 psql "$DROVER_TEST_DATABASE_URL" -XqAc 'VACUUM pg_catalog.pg_attribute, pg_catalog.pg_class,
		pg_catalog.pg_depend, pg_catalog.pg_type, pg_catalog.pg_constraint, pg_catalog.pg_index,
		pg_catalog.pg_attrdef, pg_catalog.pg_namespace, pg_catalog.pg_sequence, pg_catalog.pg_trigger' >/dev/null 2>&1 ||
		pg_log "vacuuming the catalogs failed (not a superuser?); ignored"
	return 0
}
