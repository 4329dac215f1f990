package crashtest

import (
	"os"
	"testing"

	"github.com/drover-run/drover/internal/testutil"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.RemoveDroverBinary()
	removePreviousBinary()
	os.Exit(code)
}
