package drovertype_test

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	dt "github.com/drover-run/drover/drovertype"
)

func TestNameProblem(t *testing.T) {
	for _, c := range []struct {
		in, want string // want: a part of the problem, "" for none
	}{
		{"order-42", ""},
		{"ordre-é-日本", ""},
		{strings.Repeat("a", dt.MaxNameBytes), ""},
		{"", "is empty"},
		{strings.Repeat("a", dt.MaxNameBytes+1), "201 bytes, the limit is 200"},
		{"\xff\xfe", "not valid UTF-8"},
		{"a\x00b", "control character U+0000"},
		{"a\tb", "control character U+0009"},
		{"a b", "space"},
		{"a\u00a0b", "space (U+00A0)"},
		{"a/b", `"/"`},
		{"a\u200bb", "unprintable character U+200B"},
	} {
		if got := dt.NameProblem(c.in); (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("NameProblem(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	if p := dt.NewTaskIDProblem("-x"); !strings.Contains(p, `starts with "-"`) {
		t.Errorf(`NewTaskIDProblem("-x") = %q, want it refused`, p)
	}
	if p := dt.NameProblem("-x"); p != "" {
		t.Errorf(`NameProblem("-x") = %q: an existing ID starting with "-" must stay usable`, p)
	}
	if p := dt.NewTaskIDProblem("a/b"); !strings.Contains(p, `"/"`) {
		t.Errorf(`NewTaskIDProblem("a/b") = %q, want the name rules too`, p)
	}
}

func TestKeyAndTextProblem(t *testing.T) {
	for _, c := range []struct {
		in, want string
	}{
		{"cust 4/eu", ""},
		{"", "is empty"},
		{"a\nb", "control character U+000A"},
		{"a\x00", "control character U+0000"},
		{"a\xff", "not valid UTF-8"},
		{strings.Repeat("k", 11), "11 bytes, the limit is 10"},
	} {
		if got := dt.KeyProblem(c.in, 10); (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("KeyProblem(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	for _, c := range []struct {
		in, want string
	}{
		{"", ""},
		{"l1\nl2\tt", ""},
		{"x\x00y", "NUL character"},
		{"x\xffy", "not valid UTF-8"},
		{strings.Repeat("r", 11), "11 bytes, the limit is 10"},
	} {
		if got := dt.TextProblem(c.in, 10); (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("TextProblem(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestFieldError(t *testing.T) {
	sentinel := errors.New("invalid task ID")
	err := dt.CheckName(sentinel, "task ID", "\xff\xfe")
	if err == nil || err.Error() != `task ID "\xff\xfe": is not valid UTF-8` {
		t.Fatalf("CheckName = %v", err)
	}
	var fe *dt.FieldError
	if !errors.Is(err, sentinel) || !errors.As(err, &fe) || fe.Field != "task ID" {
		t.Errorf("CheckName's error %#v: want a *FieldError wrapping the sentinel", err)
	}
	long := dt.CheckText(sentinel, "reason", strings.Repeat("é", 100)+"\x00", 0).Error()
	if !strings.Contains(long, "…") || len(long) > 400 {
		t.Errorf("a long value is not shortened: %q", long)
	}
	if dt.CheckKey(sentinel, "ordering key", "k", 10) != nil || dt.CheckText(sentinel, "reason", "", 10) != nil {
		t.Error("a good value was refused")
	}
}

func TestStorable(t *testing.T) {
	if s := "fine é\n"; dt.Storable(s) != s {
		t.Errorf("Storable changed a storable text: %q", dt.Storable(s))
	}
	for _, c := range []struct{ in, prefix, note string }{
		{"x\x00y\xff", "x\uFFFDy\uFFFD", "1 NUL character and 1 byte of invalid UTF-8"},
		{"\x00\x00", "\uFFFD\uFFFD", "2 NUL characters"},
		{"é\xc3", "é\uFFFD", "1 byte of invalid UTF-8"},
	} {
		got := dt.Storable(c.in)
		if !strings.HasPrefix(got, c.prefix) || !strings.Contains(got, "[drover replaced "+c.note+" with U+FFFD]") ||
			!utf8.ValidString(got) || strings.ContainsRune(got, 0) || dt.TextProblem(got, 0) != "" {
			t.Errorf("Storable(%q) = %q, want %q… noting %q", c.in, got, c.prefix, c.note)
		}
	}
}
