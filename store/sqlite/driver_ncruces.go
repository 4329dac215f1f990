//go:build sqlite_ncruces && !sqlite_mattn

package sqlite

import (
	"errors"

	"github.com/ncruces/go-sqlite3"
	_ "github.com/ncruces/go-sqlite3/driver" // registers "sqlite3"
)

// DriverName is the database/sql driver name of the SQLite library this
// build links, for opening other handles on a drover database.
const DriverName = "sqlite3"

// DriverModule is the Go module of the SQLite library this build links.
const DriverModule = "github.com/ncruces/go-sqlite3"

// dsn is ncruces/go-sqlite3's DSN for c.
func dsn(path string, c connConfig) string { return pragmaDSN(path, c) }

// sqliteError reads the result code and message of a SQLite error. The
// library returns a bare ExtendedErrorCode for an error without a message,
// and an *Error converts to one.
func sqliteError(err error) (code int, msg string, ok bool) {
	var c sqlite3.ExtendedErrorCode
	if !errors.As(err, &c) {
		return 0, "", false
	}
	return int(c), err.Error(), true
}

// LibraryVersion is the version of the SQLite library compiled into the
// driver, such as "3.50.4".
func LibraryVersion() string {
	c, err := sqlite3.Open(":memory:")
	if err != nil {
		return "unknown"
	}
	defer c.Close()
	s, _, err := c.Prepare("SELECT sqlite_version()")
	if err != nil || !s.Step() {
		return "unknown"
	}
	defer s.Close()
	return s.ColumnText(0)
}
