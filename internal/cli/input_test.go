package cli

import (
	"testing"
)

// TestHostileTaskIDs: a task ID that is not valid UTF-8, empty or taken
// for a flag gets the same answer from every command, on SQLite, on
// PostgreSQL and through --server, before anything is stored: no "not
// found" from one command while another finds the task, no raw SQL
// error, no silent U+FFFD.
func TestHostileTaskIDs(t *testing.T) {
	t.Parallel()
	sqliteDB, _ := migratedDB(t)
	pgURL, schema := pgSchema(t)
	mustRun(t, "migrate", "--db", pgURL, "--schema", schema)
	remote := newRemoteEnv(t)
	for name, flags := range map[string][]string{
		"sqlite":   {"--db", sqliteDB},
		"postgres": {"--db", pgURL, "--schema", schema},
		"server":   {"--server", remote.url, "--token", remoteOperatorTok},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			with := func(args ...string) []string { return append(args, flags...) }
			for _, c := range []struct {
				name string
				args []string
				want string
			}{
				{"submit --id invalid UTF-8", with("submit", "orders", order1, "--id", "\xff\xfe"), `--id: task ID "\xff\xfe": is not valid UTF-8`},
				{"submit --id empty", with("submit", "orders", order1, "--id", ""), "--id is empty"},
				{"submit --id=-x", with("submit", "orders", order1, "--id=-x"), `task ID "-x": starts with "-"`},
				{"submit --ordering-key invalid UTF-8", with("submit", "orders", order1, "--ordering-key", "k\xff"), `--ordering-key: ordering key "k\xff": is not valid UTF-8`},
				{"status invalid UTF-8", with("status", "\xff\xfe"), `task ID "\xff\xfe": is not valid UTF-8`},
				{"cancel invalid UTF-8", with("cancel", "\xff\xfe"), `task ID "\xff\xfe": is not valid UTF-8`},
				{"resubmit invalid UTF-8", with("resubmit", "\xff\xfe"), `task ID "\xff\xfe": is not valid UTF-8`},
				{"events --task invalid UTF-8", with("events", "--task", "\xff\xfe"), `--task: task ID "\xff\xfe"`},
				{"list --after invalid UTF-8", with("list", "--after", "\xff"), `--after: task ID "\xff"`},
				{"cancel --reason invalid UTF-8", with("cancel", "o-1", "--reason", "gone \xff"), `--reason: reason "gone \xff": is not valid UTF-8`},
			} {
				wantFailure(t, run(t, "", c.args...), 2, c.want)
			}
			if out := mustRun(t, with("list", "--json")...); out != "{\"tasks\":[]}\n" {
				t.Errorf("refused commands stored something: %s", out)
			}
			// An ID starting with "-" (stored by an older drover) is named
			// after "--": looked up, not taken for a flag.
			wantFailure(t, run(t, "", append(append([]string{"status"}, flags...), "--", "-old")...), 1, `"-old"`)
		})
	}
}
