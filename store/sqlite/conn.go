package sqlite

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/drover-run/drover/store"
)

// connConfig is what every connection of one of the driver's two pools
// sets. Each SQLite library's file (driver_*.go) turns it into its DSN, so
// the settings are the same whichever library the build links.
type connConfig struct {
	busyTimeout time.Duration
	synchronous string // FULL or NORMAL; write pool only
	create      bool   // the write pool may create the file
	write       bool
}

// pragma is one setting of a connection, as PRAGMA name = value.
type pragma struct{ name, value string }

// pragmas are the settings of c's connections, in the order they are
// applied: the busy timeout first, so the others wait for a lock too.
// Foreign keys are off, as SQLite's default (some libraries are built with
// them on; the schema declares none).
func (c connConfig) pragmas() []pragma {
	ps := []pragma{{"busy_timeout", strconv.Itoa(int(c.busyTimeout / time.Millisecond))}, {"foreign_keys", "0"}}
	if c.write {
		return append(ps, pragma{"journal_mode", "WAL"}, pragma{"synchronous", c.synchronous}, pragma{"cache_size", "-32000"})
	}
	return append(ps, pragma{"query_only", "1"})
}

// mode is SQLite's URI open mode: the read pool never creates the file.
func (c connConfig) mode() string {
	if c.write && c.create {
		return "rwc"
	}
	return "rw"
}

// uriDSN is the file: URI of c's connections: SQLite's open mode, BEGIN
// IMMEDIATE for the write pool's transactions, and each pragma as the
// library takes it (add).
func uriDSN(path string, c connConfig, add func(url.Values, pragma)) string {
	q := url.Values{}
	q.Set("mode", c.mode())
	if c.write {
		q.Set("_txlock", "immediate")
	}
	for _, p := range c.pragmas() {
		add(q, p)
	}
	return "file:" + escapePath(path) + "?" + q.Encode()
}

func escapePath(p string) string {
	// The DSN is a URI: escape what would end the path early.
	r := strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23")
	return r.Replace(p)
}

// SQLite's primary result codes that translate maps
// (https://sqlite.org/rescode.html).
const (
	codeError   = 1
	codeBusy    = 5
	codeLocked  = 6
	codeCorrupt = 11
	codeTooBig  = 18
	codeNotADB  = 26
)

// translate maps SQLite errors to the store's sentinels, keeping the
// original. sqliteError (of the linked library) reads the result code, so
// every library's errors map the same.
func translate(err error) error {
	if err == nil {
		return nil
	}
	code, msg, ok := sqliteError(err)
	if !ok {
		return err
	}
	switch code & 0xff {
	case codeBusy, codeLocked:
		return fmt.Errorf("%w: %w", store.ErrLocked, err)
	case codeNotADB, codeCorrupt:
		return fmt.Errorf("%w: %w", store.ErrCorrupt, err)
	case codeTooBig:
		return fmt.Errorf("%w: %w", store.ErrBadData, err)
	case codeError:
		if strings.Contains(msg, "no such table") {
			return fmt.Errorf("%w (run `drover migrate`): %w", store.ErrNotMigrated, err)
		}
	}
	return err
}

// errAs is errors.As for the libraries' error types.
func errAs[E error](err error) (E, bool) {
	var e E
	ok := errors.As(err, &e)
	return e, ok
}
