package crashtest

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/internal/orders"
	"github.com/drover-run/drover/internal/testutil"
	"github.com/drover-run/drover/store"
	"github.com/drover-run/drover/store/postgres"
	"github.com/drover-run/drover/store/sqlite"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql for the PostgreSQL store's tables
)

// previousRelease is the commit of the release before the newest schema
// change (migration 23, event rows): its binary keeps the history as
// stores held it before the upgrade. Move it on when a migration lands.
const (
	previousRelease       = "4369b0722fb016d29d90ff0428dba719f68004a4"
	previousSchemaVersion = 22
)

var previousBinary struct {
	once      sync.Once
	dir, path string
	err       error
}

// removePreviousBinary removes what buildPrevious built, if anything.
func removePreviousBinary() {
	if previousBinary.dir != "" {
		_ = os.RemoveAll(previousBinary.dir)
	}
}

// buildPrevious builds cmd/drover of previousRelease from the repository's
// git history, once per package run.
func buildPrevious(t *testing.T) string {
	t.Helper()
	b := &previousBinary
	b.once.Do(func() {
		root, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
		if err != nil {
			b.err = fmt.Errorf("find the repository: %w", err)
			return
		}
		if b.dir, b.err = os.MkdirTemp("", "drover-previous-"); b.err != nil {
			return
		}
		src := filepath.Join(b.dir, "src")
		if b.err = os.Mkdir(src, 0o755); b.err != nil {
			return
		}
		repo := strings.TrimSpace(string(root))
		if exec.Command("git", "-C", repo, "cat-file", "-e", previousRelease+"^{commit}").Run() != nil {
			// A shallow clone lacks it: fetch the rest of the history from
			// where the clone came from.
			if out, err := exec.Command("git", "-C", repo, "fetch", "--quiet", "--unshallow").CombinedOutput(); err != nil {
				b.err = fmt.Errorf("the previous release %s is not in this clone's history, and fetching the rest of it failed: %w\n%s",
					previousRelease, err, out)
				return
			}
		}
		tarball := filepath.Join(b.dir, "src.tar")
		for _, cmd := range []*exec.Cmd{
			exec.Command("git", "-C", repo, "archive", "--format=tar", "-o", tarball, previousRelease),
			exec.Command("tar", "-x", "-f", tarball, "-C", src),
		} {
			if out, err := cmd.CombinedOutput(); err != nil {
				b.err = fmt.Errorf("check out the previous release %s: %s: %w\n%s", previousRelease, strings.Join(cmd.Args, " "), err, out)
				return
			}
		}
		b.path = filepath.Join(b.dir, "drover")
		args := []string{"build", "-o", b.path}
		if sqlite.DriverModule == "modernc.org/sqlite" {
			args = append(args, "-tags=sqlite_purego")
		}
		build := exec.Command("go", append(args, "./cmd/drover")...)
		build.Dir = src
		if out, err := build.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("build the previous release %s: %w\n%s", previousRelease, err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// TestUpgradeWithWorkInFlight runs the previous release's server with
// orders in flight, kills it, and starts this release's server on the same
// store: it migrates the store and finishes every order, with no duplicate
// effect at the remote service, each step attempt started by one holder,
// and the history written by both releases read as one, in ID order.
func TestUpgradeWithWorkInFlight(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the previous release and kills real processes; skipped with -short")
	}
	old := buildPrevious(t)
	bin := buildDrover(t)
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) { testUpgradeWithWorkInFlight(t, driver, old, bin) })
	}
}

func testUpgradeWithWorkInFlight(t *testing.T, driver, old, bin string) {
	const nOrders = 60
	ctx := context.Background()
	dir := t.TempDir()
	var (
		dbArgs []string
		open   func() (store.Driver, error)
		raw    func() (*sql.DB, string, error) // a connection to the store's tables, and their schema's prefix
	)
	switch driver {
	case "sqlite":
		path := filepath.Join(dir, "drover.db")
		dbArgs = []string{"--db", "sqlite:" + path}
		open = func() (store.Driver, error) { return sqlite.Open(ctx, path, sqlite.Options{}) }
		raw = func() (*sql.DB, string, error) {
			d, err := sqlite.Open(ctx, path, sqlite.Options{})
			if err != nil {
				return nil, "", err
			}
			t.Cleanup(func() { d.Close() })
			return d.DB(), "", nil
		}
	default:
		url, schema := testutil.PostgresURL(t), testutil.FreshSchema(t)
		dbArgs = []string{"--db", url, "--schema", schema}
		open = func() (store.Driver, error) { return postgres.Open(ctx, url, postgres.Options{Schema: schema}) }
		raw = func() (*sql.DB, string, error) {
			db, err := sql.Open("pgx", url)
			if err != nil {
				return nil, "", err
			}
			t.Cleanup(func() { db.Close() })
			return db, `"` + schema + `".`, nil
		}
	}

	// Calls slow enough that orders are in flight when the old server dies.
	sim, remote, logDir, logw := crashRig(t, 11, 60*time.Millisecond)

	// The previous release makes the store, takes the orders (its own
	// submit command, four at a time) and runs them.
	srv := startServer(t, old, dbArgs, remote, "node-old", logw)
	defer func() { srv.kill() }()
	var (
		wg      sync.WaitGroup
		errs    = make(chan error, nOrders)
		pending = make(chan int, nOrders)
	)
	for i := 1; i <= nOrders; i++ {
		pending <- i
	}
	close(pending)
	defer wg.Wait() // also when the test fails before the kill below
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range pending {
				args := append([]string{"submit", orders.WorkflowName, fmt.Sprintf(`{"order_id":"o-%d","amount":%d}`, i, 100+i),
					"--id", fmt.Sprintf("order-%d", i)}, dbArgs...)
				if out, err := exec.Command(old, args...).CombinedOutput(); err != nil {
					errs <- fmt.Errorf("previous release: submit order-%d: %w\n%s", i, err, out)
				}
			}
		}()
	}

	db, prefix, err := raw()
	if err != nil {
		t.Fatal(err)
	}
	progress := func() (held, final int) {
		t.Helper()
		err := db.QueryRowContext(ctx, `SELECT
 coalesce(sum(CASE WHEN locked_by IS NOT NULL THEN 1 ELSE 0 END), 0),
 coalesce(sum(CASE WHEN process_state IN ('Processed','Error','Compensated') THEN 1 ELSE 0 END), 0)
 FROM `+prefix+`tasks`).Scan(&held, &final)
		if err != nil {
			t.Fatal(err)
		}
		return held, final
	}
	// Kill it once some orders are final (their whole history in the old
	// rows) while others are held mid-step. Submissions may go on after it:
	// they need no server.
	deadline := time.Now().Add(time.Minute)
	for {
		held, final := progress()
		if held > 0 && final >= nOrders/4 {
			break
		}
		if final == nOrders || time.Now().After(deadline) {
			t.Fatalf("no moment with orders both final and in flight (held %d, final %d of %d)", held, final, nOrders)
		}
		time.Sleep(10 * time.Millisecond)
	}
	srv.kill()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	heldAtKill, finalAtKill := progress()
	if heldAtKill == 0 {
		t.Fatalf("no order held when the previous release was killed (%d final)", finalAtKill)
	}
	var version int
	if err := db.QueryRowContext(ctx, `SELECT max(version) FROM `+prefix+`drover_migrations`).Scan(&version); err != nil {
		t.Fatal(err)
	}
	if version != previousSchemaVersion {
		t.Fatalf("the previous release left the store at schema version %d, want %d", version, previousSchemaVersion)
	}

	// This release migrates the store as it starts, and finishes the rest.
	srv = startServer(t, bin, dbArgs, remote, "node-new", logw)
	drv, err := open()
	if err != nil {
		t.Fatal(err)
	}
	defer drv.Close()
	client, err := drover.New(drover.Config{Store: drv})
	if err != nil {
		t.Fatal(err)
	}
	waitAllFinal(t, client, 3*time.Minute, "after the upgrade", logDir)

	evs := readAllEvents(t, client)
	checkOrderEffects(t, client, sim, evs, nOrders)
	if st := sim.Stats(); st.DuplicateEffects != 0 {
		t.Errorf("remote service saw %d duplicate effects, want 0 (stats %+v)", st.DuplicateEffects, st)
	}
	reportViolations(t, "step holders", stepHolderViolations(evs))
	// One history: IDs increase, every order's begins with its submission
	// and ends in its final state, and both releases wrote part of it.
	first, last := map[string]drover.EventType{}, map[string]drover.EventType{}
	for i, e := range evs {
		if i > 0 && e.ID <= evs[i-1].ID {
			t.Fatalf("event IDs not increasing: %d after %d", e.ID, evs[i-1].ID)
		}
		if _, ok := first[e.TaskID]; !ok {
			first[e.TaskID] = e.Type
		}
		last[e.TaskID] = e.Type
	}
	for task, typ := range first {
		if typ != drover.EventSubmitted {
			t.Errorf("%s: history begins with %s", task, typ)
		}
		switch last[task] {
		case drover.EventProcessed, drover.EventError, drover.EventCompensated:
		default:
			t.Errorf("%s: history ends with %s", task, last[task])
		}
	}
	// Some order's history has events of both releases: work in flight
	// across the upgrade.
	actors := map[string]map[string]bool{}
	for _, e := range evs {
		if i := strings.Index(e.Actor, "/"); i > 0 {
			if actors[e.TaskID] == nil {
				actors[e.TaskID] = map[string]bool{}
			}
			actors[e.TaskID][e.Actor[:i]] = true
		}
	}
	crossed := 0
	for _, by := range actors {
		if by["node-old"] && by["node-new"] {
			crossed++
		}
	}
	if crossed == 0 {
		t.Errorf("no order has events of both releases: nothing was in flight across the upgrade")
	}
	var oldRows, newRows int
	if err := db.QueryRowContext(ctx, `SELECT
 coalesce(sum(CASE WHEN actor LIKE 'node-old%' THEN 1 ELSE 0 END), 0),
 coalesce(sum(CASE WHEN more IS NOT NULL THEN 1 ELSE 0 END), 0) FROM `+prefix+`events`).Scan(&oldRows, &newRows); err != nil {
		t.Fatal(err)
	}
	if oldRows == 0 || newRows == 0 {
		t.Errorf("events written by the previous release: %d rows; rows of several events written after the upgrade: %d; want both", oldRows, newRows)
	}
	t.Logf("%s: at the kill %d orders held, %d final; %d orders run by both releases; %d events, %d rows from the previous release, %d of several after; remote %+v",
		driver, heldAtKill, finalAtKill, crossed, len(evs), oldRows, newRows, sim.Stats())
}
