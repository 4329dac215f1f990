package workflowdef

import (
	"fmt"
	"sort"
	"strings"
)

// Problem is one thing wrong with a workflow file.
type Problem struct {
	File  string // the file's path as given to Parse or Load
	Line  int    // 1-based; 0 when the problem concerns the whole file
	Field string // path of the field, such as steps[1].timeout; "" for the file
	Msg   string
}

// String formats the problem as "file:line: field: message".
func (p Problem) String() string {
	var b strings.Builder
	b.WriteString(p.File)
	if p.Line > 0 {
		fmt.Fprintf(&b, ":%d", p.Line)
	}
	b.WriteString(": ")
	if p.Field != "" {
		b.WriteString(p.Field)
		b.WriteString(": ")
	}
	b.WriteString(p.Msg)
	return b.String()
}

// Error lists every problem found in one or more workflow files.
type Error struct {
	Problems []Problem
}

// Error returns one problem per line.
func (e *Error) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}

// Files returns how many distinct files have problems.
func (e *Error) Files() int {
	seen := map[string]bool{}
	for _, p := range e.Problems {
		seen[p.File] = true
	}
	return len(seen)
}

// sortProblems orders problems by file, then line; problems on one line keep
// the order they were found in.
func sortProblems(ps []Problem) {
	sort.SliceStable(ps, func(i, j int) bool {
		if ps[i].File != ps[j].File {
			return ps[i].File < ps[j].File
		}
		return ps[i].Line < ps[j].Line
	})
}
