package postgres

import (
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// Batch statements send their rows as array parameters (see doc.go), so a
// burn-down encodes a few million array elements. pgx encodes a Go slice
// into a PostgreSQL array generically, boxing every element in an interface
// and finding its plan through reflection: a fifth of the client's CPU in a
// burn-down. The encoders below write the binary array format straight from
// the slice types the driver passes, and leave everything else (other Go
// types, scans, decoding) to pgx's own codec.

// RegisterArrayEncoders makes m encode the driver's array parameters
// ([]string, []*string, []int32, []*int32, []int64, []*int64, []bool,
// []time.Time, []*time.Time and [][]byte into text[], int4[], int8[],
// bool[], timestamptz[] and bytea[]) without pgx's generic array path. Open
// calls it for every connection of its pool; an application passing its own
// pool to New may call it from the pool's AfterConnect. The bytes sent are
// the same either way. They apply where pgx sends binary parameters (its
// default statement-cache and describe modes, not exec or simple_protocol).
// One difference outside drover: pgx's CopyFrom recognizes an array column
// by its codec's type, so on such a connection it no longer parses a
// string such as "{{1,2},{3,4}}" into a multi-dimensional array.
func RegisterArrayEncoders(m *pgtype.Map) {
	for _, oid := range []uint32{pgtype.TextArrayOID, pgtype.Int4ArrayOID, pgtype.Int8ArrayOID,
		pgtype.BoolArrayOID, pgtype.TimestamptzArrayOID, pgtype.ByteaArrayOID} {
		t, ok := m.TypeForOID(oid)
		if !ok {
			continue
		}
		if _, done := t.Codec.(arrayCodec); done {
			continue
		}
		m.RegisterType(&pgtype.Type{Name: t.Name, OID: t.OID, Codec: arrayCodec{Codec: t.Codec}})
	}
}

// arrayCodec is pgx's codec for an array type, with fast encode plans for
// the driver's slice types in the binary format.
type arrayCodec struct{ pgtype.Codec }

func (c arrayCodec) PlanEncode(m *pgtype.Map, oid uint32, format int16, value any) pgtype.EncodePlan {
	if format == pgtype.BinaryFormatCode {
		if p := arrayPlan(oid, value); p != nil {
			return p
		}
	}
	return c.Codec.PlanEncode(m, oid, format, value)
}

// arrayPlan returns the encode plan of a slice of the element type the
// array type oid holds, or nil. A slice of pointers (or of byte slices)
// sends nil as NULL.
func arrayPlan(oid uint32, value any) pgtype.EncodePlan {
	switch oid {
	case pgtype.TextArrayOID:
		switch value.(type) {
		case []string:
			return values(pgtype.TextOID, textLen, putText)
		case []*string:
			return pointers(pgtype.TextOID, textLen, putText)
		}
	case pgtype.Int4ArrayOID:
		switch value.(type) {
		case []int32:
			return values(pgtype.Int4OID, fixed[int32](4), putInt4)
		case []*int32:
			return pointers(pgtype.Int4OID, fixed[int32](4), putInt4)
		}
	case pgtype.Int8ArrayOID:
		switch value.(type) {
		case []int64:
			return values(pgtype.Int8OID, fixed[int64](8), putInt8)
		case []*int64:
			return pointers(pgtype.Int8OID, fixed[int64](8), putInt8)
		}
	case pgtype.BoolArrayOID:
		if _, ok := value.([]bool); ok {
			return values(pgtype.BoolOID, fixed[bool](1), putBool)
		}
	case pgtype.TimestamptzArrayOID:
		switch value.(type) {
		case []time.Time:
			return values(pgtype.TimestamptzOID, fixed[time.Time](8), putTimestamptz)
		case []*time.Time:
			return pointers(pgtype.TimestamptzOID, fixed[time.Time](8), putTimestamptz)
		}
	case pgtype.ByteaArrayOID:
		if _, ok := value.([][]byte); ok {
			return arrayEncoder[[]byte]{elemOID: pgtype.ByteaOID, size: bytesLen,
				elem: func(e []byte, buf []byte) ([]byte, bool) { return append(buf, e...), e != nil }}
		}
	}
	return nil
}

// values encodes a slice of E with put; size is an element's length.
func values[E any](elemOID uint32, size func(E) int, put func([]byte, E) []byte) pgtype.EncodePlan {
	return arrayEncoder[E]{elemOID: elemOID, size: size,
		elem: func(e E, buf []byte) ([]byte, bool) { return put(buf, e), true }}
}

// pointers encodes a slice of *E with put, nil as NULL.
func pointers[E any](elemOID uint32, size func(E) int, put func([]byte, E) []byte) pgtype.EncodePlan {
	return arrayEncoder[*E]{elemOID: elemOID,
		size: func(e *E) int {
			if e == nil {
				return 0
			}
			return size(*e)
		},
		elem: func(e *E, buf []byte) ([]byte, bool) {
			if e == nil {
				return buf, false
			}
			return put(buf, *e), true
		}}
}

func putText(buf []byte, e string) []byte { return append(buf, e...) }

func putInt4(buf []byte, e int32) []byte { return binary.BigEndian.AppendUint32(buf, uint32(e)) }

func putInt8(buf []byte, e int64) []byte { return binary.BigEndian.AppendUint64(buf, uint64(e)) }

func putBool(buf []byte, e bool) []byte {
	if e {
		return append(buf, 1)
	}
	return append(buf, 0)
}

// microsecFromUnixEpochToY2K: timestamptz counts microseconds from
// 2000-01-01 00:00 UTC.
const microsecFromUnixEpochToY2K = 946684800 * 1000000

func putTimestamptz(buf []byte, t time.Time) []byte {
	us := t.Unix()*1000000 + int64(t.Nanosecond())/1000
	return binary.BigEndian.AppendUint64(buf, uint64(us-microsecFromUnixEpochToY2K))
}

// arrayEncoder writes a one-dimensional array of elements of type E in
// PostgreSQL's binary format (what array_recv reads): dimensions, a
// has-nulls flag, the element type, then each element as a length (-1 for
// NULL) and its bytes, written by elem (which reports false for NULL).
// size is an element's length in bytes or more, so that the buffer grows
// once per array.
type arrayEncoder[E any] struct {
	elemOID uint32
	size    func(e E) int
	elem    func(e E, buf []byte) ([]byte, bool)
}

func fixed[E any](n int) func(E) int { return func(E) int { return n } }

func textLen(e string) int { return len(e) }

func bytesLen(e []byte) int { return len(e) }

func (a arrayEncoder[E]) Encode(value any, buf []byte) ([]byte, error) {
	v, ok := value.([]E)
	if !ok {
		return nil, fmt.Errorf("postgres: array encoder for []%T got %T", *new(E), value)
	}
	if v == nil {
		return nil, nil // NULL, as pgx sends a nil slice
	}
	need := 20 + 4*len(v)
	for _, e := range v {
		need += a.size(e)
	}
	buf = slices.Grow(buf, need)
	buf = binary.BigEndian.AppendUint32(buf, 1) // dimensions (pgx sends 1 for an empty slice too)
	flags := len(buf)
	buf = binary.BigEndian.AppendUint32(buf, 0)
	buf = binary.BigEndian.AppendUint32(buf, a.elemOID)
	buf = binary.BigEndian.AppendUint32(buf, uint32(len(v)))
	buf = binary.BigEndian.AppendUint32(buf, 1) // lower bound
	hasNull := false
	for _, e := range v {
		at := len(buf)
		buf = append(buf, 0, 0, 0, 0)
		var present bool
		if buf, present = a.elem(e, buf); !present {
			hasNull = true
			binary.BigEndian.PutUint32(buf[at:], 0xFFFFFFFF)
			continue
		}
		binary.BigEndian.PutUint32(buf[at:], uint32(len(buf)-at-4))
	}
	if hasNull {
		binary.BigEndian.PutUint32(buf[flags:], 1)
	}
	return buf, nil
}
