// Package migrations loads a driver's embedded, versioned schema migrations.
// Each driver applies them its own way (transactions, locks); the files'
// naming rule and order are the same for all.
package migrations

import (
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
)

// Migration is one schema version: the file NNNN_name.sql.
type Migration struct {
	Version int
	Name    string // file name
	SQL     string
}

// Load reads every file of dir in fsys, in version order. A file whose name
// does not start with a number and "_" is an error, as is a version used twice.
func Load(fsys fs.FS, dir string) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, err
	}
	var ms []Migration
	seen := map[int]string{}
	for _, e := range entries {
		num, _, ok := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration file %s: name must start with a positive version number and '_'", e.Name())
		}
		if other, dup := seen[v]; dup {
			return nil, fmt.Errorf("migration files %s and %s share version %d", other, e.Name(), v)
		}
		seen[v] = e.Name()
		b, err := fs.ReadFile(fsys, path.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		ms = append(ms, Migration{Version: v, Name: e.Name(), SQL: string(b)})
	}
	if len(ms) == 0 {
		return nil, fmt.Errorf("no migrations in %s", dir)
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Version < ms[j].Version })
	return ms, nil
}
