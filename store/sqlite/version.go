package sqlite

import sqlite3 "github.com/mattn/go-sqlite3"

// LatestSchemaVersion is the version of the newest migration this driver
// embeds: the schema version "drover migrate" brings a database to.
func LatestSchemaVersion() (int, error) {
	ms, err := migrations()
	if err != nil {
		return 0, err
	}
	return ms[len(ms)-1].Version, nil
}

// LibraryVersion is the version of the SQLite library compiled into the
// driver, such as "3.50.4".
func LibraryVersion() string {
	v, _, _ := sqlite3.Version()
	return v
}
