package docstest

import (
	"bytes"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// shellLangs are the info strings of the fenced blocks that hold commands.
var shellLangs = map[string]bool{"sh": true, "bash": true, "shell": true, "console": true, "zsh": true}

// block is one fenced shell block of a document.
type block struct {
	line int    // of the opening fence, 1-based
	lang string // the fence's info string
	skip string // the reason of a docs-test skip marker; "" runs it
	cmds []command
}

// command is one complete shell command of a block: a line, or several
// joined by a continuation, an open quote or a here-document.
type command struct {
	line int // of its first line in the document
	text string
}

var (
	fenceRe  = regexp.MustCompile("^( *)(```+|~~~+)[ \t]*([^ \t`]*)")
	markerRe = regexp.MustCompile(`^<!--\s*docs-test:\s*(.*?)\s*-->$`)
)

// parseDoc returns the shell blocks of a Markdown document, with their
// commands split as bash would read them.
func parseDoc(src string) ([]block, error) {
	lines := strings.Split(src, "\n")
	var (
		out      []block
		lastText string // the last non-blank line outside blocks
		lastLine int
	)
	for i := 0; i < len(lines); i++ {
		m := fenceRe.FindStringSubmatch(lines[i])
		if m == nil {
			if t := strings.TrimSpace(lines[i]); t != "" {
				lastText, lastLine = t, i+1
				if markerRe.MatchString(t) && (i+1 == len(lines) || !fenceRe.MatchString(lines[i+1])) {
					return nil, fmt.Errorf("line %d: a docs-test marker must be on the line right before a block's fence", i+1)
				}
			}
			continue
		}
		indent, fence, lang := len(m[1]), m[2], strings.ToLower(m[3])
		start := i
		var body []string
		for i++; i < len(lines); i++ {
			l := lines[i]
			if t := strings.TrimLeft(l, " "); strings.HasPrefix(t, fence) && strings.TrimSpace(strings.TrimLeft(t, fence[:1])) == "" {
				break
			}
			// Drop the fence's indentation, as Markdown does.
			for n := 0; n < indent && strings.HasPrefix(l, " "); n++ {
				l = l[1:]
			}
			body = append(body, l)
		}
		if i == len(lines) {
			return nil, fmt.Errorf("line %d: the block opened here is not closed", start+1)
		}
		marker := ""
		if mm := markerRe.FindStringSubmatch(lastText); mm != nil && lastLine == start {
			marker = mm[1]
		}
		lastText, lastLine = "", 0
		if !shellLangs[lang] {
			if marker != "" {
				return nil, fmt.Errorf("line %d: a docs-test marker before a %q block, which is not run", start, lang)
			}
			continue
		}
		b := block{line: start + 1, lang: lang}
		if marker != "" {
			reason, ok := strings.CutPrefix(marker, "skip,")
			if !ok || strings.TrimSpace(reason) == "" {
				return nil, fmt.Errorf("line %d: docs-test marker %q: want \"docs-test: skip, REASON\"", start, marker)
			}
			b.skip = strings.TrimSpace(reason)
		}
		if lang == "console" {
			body = consoleCommands(body)
		}
		cmds, err := splitCommands(body, start+2)
		if err != nil {
			return nil, err
		}
		b.cmds = cmds
		out = append(out, b)
	}
	return out, nil
}

// consoleCommands keeps the commands of a console block: the lines after a
// "$ " prompt and their "> " continuations; the other lines are output
// (blanked, to keep line numbers).
func consoleCommands(body []string) []string {
	out := make([]string, len(body))
	in := false
	for i, l := range body {
		switch {
		case strings.HasPrefix(l, "$ "):
			out[i], in = l[2:], true
		case in && strings.HasPrefix(l, "> "):
			out[i] = l[2:]
		default:
			in = false
		}
	}
	return out
}

// splitCommands splits a block's lines into commands, asking bash whether
// the lines so far form complete commands (bash -n). Lines of comments
// only are dropped. first is the document line of body[0].
func splitCommands(body []string, first int) ([]command, error) {
	var (
		out   []command
		cur   []string
		start int
	)
	for i, l := range body {
		if len(cur) == 0 {
			if t := strings.TrimSpace(l); t == "" || strings.HasPrefix(t, "#") {
				continue
			}
			start = first + i
		}
		cur = append(cur, l)
		text := strings.Join(cur, "\n")
		if complete, err := bashComplete(text); err != nil {
			return nil, err
		} else if complete {
			out = append(out, command{line: start, text: text})
			cur = nil
		}
	}
	if len(cur) > 0 {
		return nil, fmt.Errorf("line %d: the block ends inside this command: %s", start, strings.Join(cur, "\n"))
	}
	return out, nil
}

// bashComplete reports whether text is a complete shell command for bash:
// no open quote, substitution, compound command or here-document, and no
// continuation at its end. A syntax error of another kind counts as
// complete: running it shows the error.
func bashComplete(text string) (bool, error) {
	if strings.HasSuffix(strings.TrimRight(text, " \t"), "\\") {
		return false, nil
	}
	cmd := exec.Command("bash", "-n", "-c", text)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	err := cmd.Run()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		return false, fmt.Errorf("bash -n: %w", err)
	}
	msg := errb.String()
	for _, open := range []string{"unexpected EOF while looking for matching", "syntax error: unexpected end of file", "here-document at line"} {
		if strings.Contains(msg, open) {
			return false, nil
		}
	}
	return true, nil
}

func TestParseDoc(t *testing.T) {
	doc := strings.Join([]string{
		"# Title",                         // 1
		"",                                // 2
		"```sh",                           // 3
		"# a comment, dropped",            // 4
		"./drover migrate   # creates it", // 5
		"curl -s http://x \\",             // 6
		"  -d '{\"a\":1,",                 // 7
		"       \"b\":2}'",                // 8
		"cat > tokens <<EOT",              // 9
		"$(openssl rand -hex 24) agent",   // 10
		"EOT",                             // 11
		"```",                             // 12
		"```",                             // 13: output, not run
		"$ not a command",                 // 14
		"```",                             // 15
		"<!-- docs-test: skip, needs a PostgreSQL server at db:5432 -->", // 16
		"```bash",                        // 17
		"drover migrate --schema drover", // 18
		"```",                            // 19
		"1. A list item:",                // 20
		"   ```console",                  // 21
		"   $ echo one \\",               // 22
		"   > two",                       // 23
		"   one two",                     // 24
		"   ```",                         // 25
		"```go",                          // 26
		"x := 1",                         // 27
		"```",                            // 28
	}, "\n")
	got, err := parseDoc(doc)
	if err != nil {
		t.Fatal(err)
	}
	want := []block{
		{line: 3, lang: "sh", cmds: []command{
			{5, "./drover migrate   # creates it"},
			{6, "curl -s http://x \\\n  -d '{\"a\":1,\n       \"b\":2}'"},
			{9, "cat > tokens <<EOT\n$(openssl rand -hex 24) agent\nEOT"},
		}},
		{line: 17, lang: "bash", skip: "needs a PostgreSQL server at db:5432", cmds: []command{{18, "drover migrate --schema drover"}}},
		{line: 21, lang: "console", cmds: []command{{22, "echo one \\\ntwo"}}},
	}
	if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
		t.Fatalf("parseDoc:\n got %+v\nwant %+v", got, want)
	}

	for _, bad := range []struct{ doc, want string }{
		{"```sh\necho 'open\n```\n", "line 2: the block ends inside this command"},
		{"```sh\necho\n", "line 1: the block opened here is not closed"},
		{"<!-- docs-test: skip -->\n```sh\necho\n```\n", `want "docs-test: skip, REASON"`},
		{"<!-- docs-test: skip,  -->\n```sh\necho\n```\n", `want "docs-test: skip, REASON"`},
		{"<!-- docs-test: skip, why -->\n```go\nx\n```\n", "which is not run"},
		{"<!-- docs-test: skip, why -->\n\n```sh\nx\n```\n", "line 1: a docs-test marker must be on the line right before"},
	} {
		if _, err := parseDoc(bad.doc); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("parseDoc(%q): %v, want an error containing %q", bad.doc, err, bad.want)
		}
	}
}
