package postgres

import (
	"bytes"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// The driver's array encoders send exactly the bytes pgx's generic path
// sends, for every slice type they take, with and without NULLs, and empty
// or nil slices.
func TestArrayEncodersMatchPgx(t *testing.T) {
	s := func(v string) *string { return &v }
	i4 := func(v int32) *int32 { return &v }
	i8 := func(v int64) *int64 { return &v }
	at := func(v time.Time) *time.Time { return &v }
	t1 := time.Date(2031, 1, 2, 3, 4, 5, 678901000, time.UTC)
	t2 := time.Date(1999, 12, 31, 23, 59, 59, 1000, time.FixedZone("x", -3600))
	cases := []struct {
		oid   uint32
		value any
	}{
		{pgtype.TextArrayOID, []string{"a", "", "ünï"}},
		{pgtype.TextArrayOID, []string{}},
		{pgtype.TextArrayOID, []string(nil)},
		{pgtype.TextArrayOID, []*string{s("a"), nil, s("")}},
		{pgtype.TextArrayOID, []*string{s("x")}},
		{pgtype.Int4ArrayOID, []int32{0, -1, 1 << 30}},
		{pgtype.Int4ArrayOID, []*int32{nil, i4(-7)}},
		{pgtype.Int8ArrayOID, []int64{0, -1, 1 << 62}},
		{pgtype.Int8ArrayOID, []*int64{i8(5), nil}},
		{pgtype.BoolArrayOID, []bool{true, false}},
		{pgtype.TimestamptzArrayOID, []time.Time{t1, t2, {}}},
		{pgtype.TimestamptzArrayOID, []*time.Time{nil, at(t1)}},
		{pgtype.ByteaArrayOID, [][]byte{[]byte("ab"), nil, {}}},
	}
	fast, plain := pgtype.NewMap(), pgtype.NewMap()
	RegisterArrayEncoders(fast)
	RegisterArrayEncoders(fast) // twice: no double wrapping
	for _, c := range cases {
		if arrayPlan(c.oid, c.value) == nil {
			t.Errorf("%T: no fast plan", c.value)
			continue
		}
		want, err := plain.Encode(c.oid, pgtype.BinaryFormatCode, c.value, nil)
		if err != nil {
			t.Fatalf("%T: pgx: %v", c.value, err)
		}
		got, err := fast.Encode(c.oid, pgtype.BinaryFormatCode, c.value, nil)
		if err != nil {
			t.Fatalf("%T: %v", c.value, err)
		}
		if !bytes.Equal(got, want) || (got == nil) != (want == nil) {
			t.Errorf("%T %v:\n got %x\nwant %x", c.value, c.value, got, want)
		}
	}
	// A nil slice is NULL (pgx does not reach a plan for it).
	if got, err := arrayPlan(pgtype.TextArrayOID, []string(nil)).Encode([]string(nil), nil); err != nil || got != nil {
		t.Errorf("nil slice: %x, %v; want NULL", got, err)
	}
	// Anything else still goes through pgx.
	if _, err := fast.Encode(pgtype.TextArrayOID, pgtype.BinaryFormatCode, []any{"a"}, nil); err != nil {
		t.Errorf("other types: %v", err)
	}
}
