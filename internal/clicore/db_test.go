package clicore

import (
	"strings"
	"testing"
)

func TestDBURL(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"sqlite:./drover.db":    "./drover.db",
		"sqlite:/tmp/x.db":      "/tmp/x.db",
		"sqlite:///tmp/x.db":    "/tmp/x.db",
		"sqlite://rel/x.db":     "rel/x.db",
		"file:/tmp/x.db":        "/tmp/x.db",
		"file:///tmp/x.db":      "/tmp/x.db",
		"file:x.db":             "x.db",
		"/var/lib/drover.db":    "/var/lib/drover.db",
		"data.db":               "data.db",
		"./dir.with.dots/a://b": "./dir.with.dots/a://b",
	}
	for in, want := range cases {
		got, err := dbPath(in)
		if err != nil || got != want {
			t.Errorf("dbPath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "sqlite:", "postgres://x/y", "postgresql://x", "mysql://h/db", "sqlite:x.db?mode=ro"} {
		if _, err := dbPath(bad); err == nil {
			t.Errorf("dbPath(%q) succeeded", bad)
		}
	}
}

func TestParseDB(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]DBTarget{
		"postgres://u@h/db":                           {Postgres: true, URL: "postgres://u@h/db", Schema: DefaultSchema},
		"postgresql://u:pw@h:5433/db?sslmode=disable": {Postgres: true, URL: "postgresql://u:pw@h:5433/db?sslmode=disable", Schema: DefaultSchema},
		"POSTGRES://u@h/db":                           {Postgres: true, URL: "postgres://u@h/db", Schema: DefaultSchema},
		"sqlite:x.db":                                 {Path: "x.db"},
	} {
		got, err := ParseDB(in, "")
		if err != nil || got != want {
			t.Errorf("parseDB(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	if got, err := ParseDB("postgres://u@h/db", "tenant_7"); err != nil || got.Schema != "tenant_7" {
		t.Errorf("schema: %+v, %v", got, err)
	}
	for _, bad := range []struct{ url, schema string }{
		{"postgres:u@h/db", ""}, {"postgresql:x", ""}, {"postgres://u@h/db", "Upper"}, {"postgres://u@h/db", "1st"},
		{"postgres://u@h/db", "a-b"}, {"postgres://u@h/db", "x;drop"}, {"postgres://u@h/db", strings.Repeat("a", 64)},
		{"postgres://u@h:notaport/db", ""},
	} {
		if _, err := ParseDB(bad.url, bad.schema); err == nil {
			t.Errorf("parseDB(%q, %q) succeeded", bad.url, bad.schema)
		}
	}
	if got := RedactURL("postgres://u:secret@h:5432/db?password=secret2&sslmode=disable"); got != "postgres://u@h:5432/db" {
		t.Errorf("redactURL = %q", got)
	}
}
