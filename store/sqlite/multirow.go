package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// maxRowsPerStmt caps the rows of one multi-row statement. One prepared
// statement exists per row count 1..maxRowsPerStmt, so a batch of any size
// runs as a few prepared statements with bound parameters: far fewer cgo
// and database/sql round trips than a statement per row.
const maxRowsPerStmt = 64

// multiRow is a statement whose middle repeats once per row:
// head + row + "," + row ... + tail. Its texts for every row count are built
// once (they are also the prepared statements' keys).
type multiRow struct {
	head, row, tail string
	texts           *[maxRowsPerStmt]string
}

func newMultiRow(head, row, tail string) multiRow {
	m := multiRow{head: head, row: row, tail: tail, texts: new([maxRowsPerStmt]string)}
	for n := 1; n <= maxRowsPerStmt; n++ {
		m.texts[n-1] = m.build(n)
	}
	return m
}

func (m multiRow) sql(n int) string { return m.texts[n-1] }

func (m multiRow) build(n int) string {
	var b strings.Builder
	b.WriteString(m.head)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(m.row)
	}
	b.WriteString(m.tail)
	return b.String()
}

// allSizes lists the statement text for every row count (hotQueries).
func (m multiRow) allSizes() []string {
	return m.texts[:]
}

// execRows runs m over rows in chunks. each, if set, sees every chunk's
// result with the index of its first row and its row count.
func (e *executor) execRows(ctx context.Context, what string, m multiRow, rows [][]any, each func(res sql.Result, first, n int) error) error {
	var args []any
	for first := 0; first < len(rows); first += maxRowsPerStmt {
		n := min(maxRowsPerStmt, len(rows)-first)
		args = args[:0]
		for _, r := range rows[first : first+n] {
			args = append(args, r...)
		}
		res, err := e.exec(ctx, m.sql(n), args...)
		if err != nil {
			return fmt.Errorf("sqlite: %s: %w", what, err)
		}
		if each != nil {
			if err := each(res, first, n); err != nil {
				return err
			}
		}
	}
	return nil
}

// queryRows is execRows for statements that return rows (RETURNING).
func (e *executor) queryRows(ctx context.Context, what string, m multiRow, rows [][]any, scan func(*sql.Rows) error) error {
	var args []any
	for first := 0; first < len(rows); first += maxRowsPerStmt {
		n := min(maxRowsPerStmt, len(rows)-first)
		args = args[:0]
		for _, r := range rows[first : first+n] {
			args = append(args, r...)
		}
		res, err := e.query(ctx, m.sql(n), args...)
		if err != nil {
			return fmt.Errorf("sqlite: %s: %w", what, err)
		}
		for res.Next() {
			if err := scan(res); err != nil {
				res.Close()
				return translate(err)
			}
		}
		res.Close()
		if err := res.Err(); err != nil {
			return fmt.Errorf("sqlite: %s: %w", what, translate(err))
		}
	}
	return nil
}
