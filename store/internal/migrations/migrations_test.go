package migrations

import (
	"testing"
	"testing/fstest"
)

func TestLoad(t *testing.T) {
	t.Parallel()
	ms, err := Load(fstest.MapFS{
		"m/0002_b.sql": {Data: []byte("B")},
		"m/0001_a.sql": {Data: []byte("A")},
		"m/0010_c.sql": {Data: []byte("C")},
	}, "m")
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 3 || ms[0].Version != 1 || ms[1].Version != 2 || ms[2].Version != 10 || ms[0].SQL != "A" || ms[2].Name != "0010_c.sql" {
		t.Fatalf("Load = %+v", ms)
	}
	for name, fsys := range map[string]fstest.MapFS{
		"no number":     {"m/init.sql": {}},
		"zero":          {"m/0000_x.sql": {}},
		"duplicate":     {"m/0001_a.sql": {}, "m/01_b.sql": {}},
		"empty dir":     {"other/0001_a.sql": {}},
		"no underscore": {"m/0001.sql": {}},
	} {
		if _, err := Load(fsys, "m"); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
