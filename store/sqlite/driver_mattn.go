//go:build cgo && !sqlite_purego

package sqlite

import (
	"net/url"

	"github.com/mattn/go-sqlite3"
)

// DriverName is the database/sql driver name of the SQLite library this
// build links, for opening other handles on a drover database.
const DriverName = "sqlite3"

// DriverModule is the Go module of the SQLite library this build links.
const DriverModule = "github.com/mattn/go-sqlite3"

// dsn is mattn/go-sqlite3's DSN for c: each pragma is its _name key.
func dsn(path string, c connConfig) string {
	return uriDSN(path, c, func(q url.Values, p pragma) { q.Set("_"+p.name, p.value) })
}

// sqliteError reads the result code and message of a SQLite error.
func sqliteError(err error) (code int, msg string, ok bool) {
	se, ok := errAs[sqlite3.Error](err)
	if !ok {
		return 0, "", false
	}
	return int(se.Code), se.Error(), true
}

// LibraryVersion is the version of the SQLite library compiled into the
// driver, such as "3.50.4".
func LibraryVersion() string {
	v, _, _ := sqlite3.Version()
	return v
}
