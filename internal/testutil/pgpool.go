package testutil

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/drover-run/drover/store/postgres"
)

// SchemaPool hands out migrated PostgreSQL schemas to tests, one test at a
// time each. A test takes a schema that no running test holds; when the
// test ends the schema is emptied and kept for the next one. A test then
// costs a few DELETEs instead of creating, migrating and dropping a schema
// (about 13 ms against 240 ms on a 2-core machine), and the server's
// system catalogs do not fill with the dead rows that every dropped schema
// leaves (on a server with autovacuum off nothing would remove them).
//
// A schema given back holds what a newly migrated one holds: every
// table's rows are deleted (drover_migrations' aside), the rows the
// migrations inserted are inserted again, and every sequence starts
// again. A schema whose structure the test changed (a relation, column,
// default, index, constraint, trigger, function, privilege or applied
// migration added, changed or removed) is dropped instead, and so is one
// that cannot be emptied. Tests that change the structure on purpose, or
// migrate themselves, use a FreshSchema.
//
// A package that uses a pool closes it in its TestMain, which drops the
// pool's schemas after the tests ran.
type SchemaPool struct {
	mu     sync.Mutex
	admin  *pgxpool.Pool
	free   []*pooledSchema
	all    map[string]bool // every schema created and not yet dropped
	closed bool
}

type pooledSchema struct {
	name  string
	shape string // fingerprint of the structure right after migrating
	reset string // the statements that empty it
}

// NewSchemaPool returns an empty pool; schemas are created as tests need
// them.
func NewSchemaPool() *SchemaPool { return &SchemaPool{all: map[string]bool{}} }

// Take returns a migrated schema of the test server that no other test
// holds, given back when t ends. Close the drivers and pools the test opens
// on it in cleanups of t registered after Take: cleanups run last
// registered first, so they are closed before the schema is emptied.
func (p *SchemaPool) Take(t testing.TB) string {
	t.Helper()
	url := PostgresURL(t)
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		t.Fatal("testutil.SchemaPool: Take after Close")
	}
	var s *pooledSchema
	if n := len(p.free); n > 0 {
		s, p.free = p.free[n-1], p.free[:n-1]
	}
	p.mu.Unlock()
	if s == nil {
		var err error
		if s, err = p.create(url); err != nil {
			t.Fatalf("testutil.SchemaPool: %v", err)
		}
	}
	t.Cleanup(func() {
		if err := p.giveBack(s); err != nil {
			t.Errorf("testutil.SchemaPool: %v", err)
		}
	})
	return s.name
}

// Close drops every schema of the pool.
func (p *SchemaPool) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	if p.admin == nil {
		return nil
	}
	defer p.admin.Close()
	var errs []error
	for name := range p.all {
		if err := dropSchema(p.admin, name); err != nil {
			errs = append(errs, err)
		}
	}
	p.all, p.free = nil, nil
	return errors.Join(errs...)
}

// create makes and migrates a new schema and records its structure.
func (p *SchemaPool) create(url string) (*pooledSchema, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p.mu.Lock()
	if p.admin == nil {
		admin, err := pgxpool.New(ctx, url)
		if err != nil {
			p.mu.Unlock()
			return nil, err
		}
		p.admin = admin
	}
	admin := p.admin
	s := &pooledSchema{name: schemaName()}
	p.all[s.name] = true // dropped by Close even if what follows fails
	p.mu.Unlock()
	d, err := postgres.New(admin, postgres.Options{Schema: s.name})
	if err != nil {
		return nil, err
	}
	defer d.Close() // leaves admin open
	if err := d.Migrate(ctx); err != nil {
		return nil, fmt.Errorf("migrate schema %s: %w", s.name, err)
	}
	if s.shape, err = shape(ctx, admin, s.name); err != nil {
		return nil, err
	}
	if s.reset, err = resetSQL(ctx, admin, s.name); err != nil {
		return nil, err
	}
	return s, nil
}

// giveBack empties s for the next test, or drops it if its structure
// changed or it cannot be emptied.
func (p *SchemaPool) giveBack(s *pooledSchema) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p.mu.Lock()
	admin := p.admin
	p.mu.Unlock()
	now, err := shape(ctx, admin, s.name)
	if err == nil && now == s.shape {
		if _, err = admin.Exec(ctx, s.reset); err == nil {
			p.mu.Lock()
			defer p.mu.Unlock()
			if !p.closed {
				p.free = append(p.free, s)
			}
			return nil
		}
		err = fmt.Errorf("empty schema %s: %w", s.name, err)
	}
	derr := dropSchema(admin, s.name)
	p.mu.Lock()
	delete(p.all, s.name)
	p.mu.Unlock()
	return errors.Join(err, derr) // a changed structure is no error
}

func dropSchema(admin *pgxpool.Pool, schema string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := admin.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`); err != nil {
		return fmt.Errorf("drop schema %s: %w", schema, err)
	}
	return nil
}

// shape is a fingerprint of a schema's structure: its relations with their
// kinds, options and privileges, columns with types and defaults, indexes,
// constraints, triggers, functions, the schema's privileges and the
// migrations recorded as applied.
func shape(ctx context.Context, admin *pgxpool.Pool, schema string) (string, error) {
	var fp, applied string
	err := admin.QueryRow(ctx, `
WITH n AS (SELECT $1::text::regnamespace AS oid)
SELECT coalesce(md5(string_agg(x, E'\n' ORDER BY x)), '') FROM (
  SELECT format('rel %s %s %s %s', c.relname, c.relkind, c.reloptions, c.relacl) AS x
    FROM pg_catalog.pg_class c, n WHERE c.relnamespace = n.oid
  UNION ALL
  SELECT format('col %s %s %s %s %s %s %s', c.relname, a.attnum, a.attname, format_type(a.atttypid, a.atttypmod),
         a.attnotnull, a.attisdropped, pg_get_expr(ad.adbin, ad.adrelid))
    FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
    LEFT JOIN pg_catalog.pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum, n
    WHERE c.relnamespace = n.oid AND a.attnum > 0
  UNION ALL
  SELECT format('idx %s', pg_get_indexdef(i.indexrelid))
    FROM pg_catalog.pg_index i JOIN pg_catalog.pg_class c ON c.oid = i.indexrelid, n WHERE c.relnamespace = n.oid
  UNION ALL
  SELECT format('con %s %s', co.conname, pg_get_constraintdef(co.oid))
    FROM pg_catalog.pg_constraint co, n WHERE co.connamespace = n.oid
  UNION ALL
  SELECT format('trg %s %s', tg.tgname, pg_get_triggerdef(tg.oid))
    FROM pg_catalog.pg_trigger tg JOIN pg_catalog.pg_class c ON c.oid = tg.tgrelid, n WHERE c.relnamespace = n.oid
  UNION ALL
  SELECT format('fn %s %s', pr.oid::regprocedure, md5(pr.prosrc))
    FROM pg_catalog.pg_proc pr, n WHERE pr.pronamespace = n.oid
  UNION ALL
  SELECT format('nsp %s', ns.nspacl) FROM pg_catalog.pg_namespace ns, n WHERE ns.oid = n.oid
) AS parts`, schema).Scan(&fp)
	if err != nil {
		return "", fmt.Errorf("read the structure of schema %s: %w", schema, err)
	}
	if err := admin.QueryRow(ctx, `SELECT coalesce(string_agg(version::text || ' ' || name, ',' ORDER BY version), '') FROM `+
		pgx.Identifier{schema, "drover_migrations"}.Sanitize()).Scan(&applied); err != nil {
		return "", fmt.Errorf("read the migrations of schema %s: %w", schema, err)
	}
	return fp + " " + applied, nil
}

// resetSQL returns one transaction that brings schema back to its state
// now (just migrated): it deletes every table's rows (drover_migrations'
// aside), inserts again the rows there are now (those the migrations
// inserted) and sets every sequence back to its start. DELETE, not
// TRUNCATE: TRUNCATE gives every table and index a new file, which
// rewrites their pg_class rows, and dead catalog rows are what the pool
// exists to avoid. (The deleted rows' dead versions stay in the schema's
// own tables, which are dropped with it.)
func resetSQL(ctx context.Context, admin *pgxpool.Pool, schema string) (string, error) {
	rows, err := admin.Query(ctx, `SELECT c.relname, c.relkind = 'S', coalesce(s.start_value, 0)
  FROM pg_catalog.pg_class c LEFT JOIN pg_catalog.pg_sequences s ON s.schemaname = $1 AND s.sequencename = c.relname
 WHERE c.relnamespace = $1::text::regnamespace AND c.relkind IN ('r', 'S') ORDER BY c.relname`, schema)
	if err != nil {
		return "", err
	}
	type rel struct {
		Name  string
		IsSeq bool
		Start int64
	}
	rels, err := pgx.CollectRows(rows, pgx.RowToStructByPos[rel])
	if err != nil {
		return "", fmt.Errorf("relations of schema %s: %w", schema, err)
	}
	var sql strings.Builder
	sql.WriteString("BEGIN;\nSET LOCAL lock_timeout = '10s';\n")
	for _, r := range rels {
		id := pgx.Identifier{schema, r.Name}.Sanitize()
		switch {
		case r.IsSeq:
			fmt.Fprintf(&sql, "SELECT setval(%s, %d, false);\n", quote(id), r.Start)
		case r.Name != "drover_migrations":
			var seed *string
			if err := admin.QueryRow(ctx, `SELECT json_agg(t)::text FROM `+id+` AS t`).Scan(&seed); err != nil {
				return "", fmt.Errorf("rows of %s: %w", id, err)
			}
			fmt.Fprintf(&sql, "DELETE FROM %s;\n", id)
			if seed != nil {
				fmt.Fprintf(&sql, "INSERT INTO %s SELECT * FROM json_populate_recordset(NULL::%s, %s);\n", id, id, quote(*seed))
			}
		}
	}
	sql.WriteString("COMMIT;")
	return sql.String(), nil
}

// quote is s as an SQL string literal.
func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
