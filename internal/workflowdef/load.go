package workflowdef

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/drover-run/drover/internal/egress"
)

// IsWorkflowFile reports whether a directory entry's name is loaded as a
// workflow: *.yaml, *.yml or *.json, not hidden.
func IsWorkflowFile(name string) bool {
	if strings.HasPrefix(name, ".") {
		return false
	}
	switch strings.ToLower(filepath.Ext(name)) {
	case ".yaml", ".yml", ".json":
		return true
	}
	return false
}

// sourceFile is one workflow file's bytes.
type sourceFile struct {
	path   string
	src    []byte
	digest string
	err    error // reading it failed
}

// readDir reads every workflow file of dir, in name order.
func readDir(dir string) ([]sourceFile, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("workflows directory: %w", err)
	}
	var out []sourceFile
	for _, e := range entries {
		if !IsWorkflowFile(e.Name()) {
			continue
		}
		path := filepath.Join(dir, e.Name())
		// Follow symbolic links (as in a Kubernetes ConfigMap mount), but
		// only to regular files.
		info, err := os.Stat(path)
		if err != nil {
			out = append(out, sourceFile{path: path, err: err})
			continue
		}
		if !info.Mode().IsRegular() {
			continue
		}
		if info.Size() > MaxFileBytes {
			out = append(out, sourceFile{path: path, err: fmt.Errorf("the file is %d bytes; the limit is %d", info.Size(), MaxFileBytes)})
			continue
		}
		src, err := os.ReadFile(path)
		if err != nil {
			out = append(out, sourceFile{path: path, err: err})
			continue
		}
		out = append(out, sourceFile{path: path, src: src, digest: Digest(src)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].path < out[j].path })
	return out, nil
}

// parseFiles parses every file and checks names across files: a name
// defined in two files is kept by the file in holders (the one that holds it
// now), or else by the first in name order; the others are invalid, as are
// files taking a reserved name. It returns the valid definitions and the
// problems of the invalid files, by path.
//
// With a server policy, a URL whose literal host the policy (with the
// file's egress.allow) refuses makes the file invalid too: such a call
// could never be made.
func parseFiles(files []sourceFile, reserved []string, holders map[string]string, server *egress.Policy) ([]*Definition, map[string][]Problem) {
	bad := map[string][]Problem{}
	var defs []*Definition
	for _, f := range files {
		if f.err != nil {
			bad[f.path] = []Problem{{File: f.path, Msg: "cannot read: " + f.err.Error()}}
			continue
		}
		d, probs := parse(f.path, f.src)
		if len(probs) == 0 && server != nil {
			probs = refusedURLs(d, server)
		}
		if len(probs) > 0 {
			sortProblems(probs)
			bad[f.path] = probs
			continue
		}
		defs = append(defs, d)
	}
	byName := map[string][]*Definition{}
	for _, d := range defs {
		byName[d.Name] = append(byName[d.Name], d)
	}
	var ok []*Definition
	for _, d := range defs {
		if contains(reserved, d.Name) {
			bad[d.File] = append(bad[d.File], Problem{File: d.File, Line: d.nameLine, Field: "name",
				Msg: fmt.Sprintf("%q is a built-in workflow; choose another name", d.Name)})
			continue
		}
		same := byName[d.Name]
		if len(same) > 1 {
			keeper := same[0]
			for _, o := range same {
				if holders[d.Name] == o.File {
					keeper = o
				}
			}
			if keeper != d {
				bad[d.File] = append(bad[d.File], Problem{File: d.File, Line: d.nameLine, Field: "name",
					Msg: fmt.Sprintf("workflow %q is also defined in %s", d.Name, keeper.File)})
				continue
			}
		}
		ok = append(ok, d)
	}
	return ok, bad
}

// Load reads and validates every workflow file (*.yaml, *.yml, *.json) of
// dir. It returns the definitions, in file name order, only when every file
// is valid; otherwise an *Error with the problems of every invalid file.
// With a server policy, literal URL hosts it refuses are problems too
// (see parseFiles). reserved names workflows defined in code, which no
// file may take.
func Load(dir string, server *egress.Policy, reserved ...string) ([]*Definition, error) {
	files, err := readDir(dir)
	if err != nil {
		return nil, err
	}
	defs, bad := parseFiles(files, reserved, nil, server)
	if len(bad) > 0 {
		var all []Problem
		for _, ps := range bad {
			all = append(all, ps...)
		}
		sortProblems(all)
		return nil, &Error{Problems: all}
	}
	return defs, nil
}

// refusedURLs reports every HTTP call of d whose literal host the server's
// policy, with d's egress.allow, refuses.
func refusedURLs(d *Definition, server *egress.Policy) []Problem {
	pol := d.EgressPolicy(server)
	var probs []Problem
	for _, s := range d.Steps {
		for _, a := range []*Action{&s.Do, s.Compensate} {
			if a == nil || a.HTTP == nil || a.HTTP.origin == nil {
				continue
			}
			if err := pol.CheckURL(a.HTTP.origin); err != nil {
				probs = append(probs, Problem{File: d.File, Line: a.HTTP.urlLine, Field: a.HTTP.urlField,
					Msg: err.Error() + " (drover server --egress-allow, or egress.allow in this file)"})
			}
		}
	}
	return probs
}
