package clicore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// OpenScratch opens the store of a benchmark or demo: a temporary SQLite file
// unless explicit is set; on PostgreSQL without an explicit schema a
// temporary schema (tempSchema). The returned cleanup closes the store and
// removes what was temporary.
func (e *Env) OpenScratch(ctx context.Context, explicit *DBTarget, tempSchema bool, synchronous, prefix string) (*Database, func(), error) {
	o := OpenOpts{Create: true, Migrate: true, Target: explicit, Synchronous: synchronous}
	var dir string
	if explicit == nil {
		var err error
		if dir, err = os.MkdirTemp("", "drover-"+prefix+"-"); err != nil {
			return nil, nil, fmt.Errorf("create a temporary database: %w", err)
		}
		o.Target = &DBTarget{Path: filepath.Join(dir, prefix+".db")}
	} else if tempSchema {
		t := *explicit
		t.Schema = "drover_bench_" + RandomHex(6)
		o.Target = &t
	}
	drv, err := e.OpenStore(ctx, o)
	if err != nil {
		if dir != "" {
			os.RemoveAll(dir)
		}
		return nil, nil, err
	}
	cleanup := func() {
		if tempSchema {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			if err := DropSchema(dctx, drv); err != nil {
				fmt.Fprintf(e.Stderr, "drover: warning: drop the temporary schema %s: %v\n", drv.Target.Schema, err)
			}
			cancel()
		}
		drv.Close()
		if dir != "" {
			os.RemoveAll(dir)
		}
	}
	return drv, cleanup, nil
}

// RandomHex returns n random bytes in hex, for unique names.
func RandomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
