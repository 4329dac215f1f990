package workflowdef

import (
	"errors"
	"os"
	"testing"
)

// FuzzParse: any input either parses to a definition that compiles to a
// valid drover.Workflow, or gives an *Error with at least one problem;
// never a panic.
func FuzzParse(f *testing.F) {
	if src, err := os.ReadFile("testdata/trip.yaml"); err == nil {
		f.Add(src)
	}
	f.Add([]byte(renderSrc))
	f.Add([]byte(`{"name": "j", "steps": [{"name": "a", "agent": "x", "input": {"n": "${input.n}"}}]}`))
	f.Add([]byte("name: w\nsteps:\n  - &s {name: s, agent: a}\n  - *s\n"))
	f.Add([]byte("name: w\nsteps: [{name: s, http: {method: GET, url: \"http://h/${steps.s.output[0][\\\"k\\\"]}\"}}]\n"))
	f.Fuzz(func(t *testing.T, src []byte) {
		d, err := Parse("f.yaml", src)
		if err != nil {
			var pe *Error
			if !errors.As(err, &pe) || len(pe.Problems) == 0 {
				t.Fatalf("error %v is not an *Error with problems", err)
			}
			return
		}
		if err := d.Workflow().Validate(); err != nil {
			t.Fatalf("parsed definition does not validate: %v", err)
		}
	})
}
