//go:build !cgo || sqlite_purego

package sqlite

import (
	"net/url"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// DriverName is the database/sql driver name of the SQLite library this
// build links, for opening other handles on a drover database.
const DriverName = "sqlite"

// DriverModule is the Go module of the SQLite library this build links.
const DriverModule = "modernc.org/sqlite"

// dsn is modernc.org/sqlite's DSN for c: each pragma is a
// _pragma=name(value).
func dsn(path string, c connConfig) string {
	return uriDSN(path, c, func(q url.Values, p pragma) { q.Add("_pragma", p.name+"("+p.value+")") })
}

// sqliteError reads the result code and message of a SQLite error.
func sqliteError(err error) (code int, msg string, ok bool) {
	se, ok := errAs[*sqlite.Error](err)
	if !ok {
		return 0, "", false
	}
	return se.Code(), se.Error(), true
}

// LibraryVersion is the version of the SQLite library compiled into the
// driver, such as "3.50.4".
func LibraryVersion() string { return sqlite3.SQLITE_VERSION }
