package oneline

import "strings"

// Fold folds a multi-line message (errors.Join, pgx's per-address connect
// errors) onto one line, dropping blank and repeated lines: lines are
// joined with "; ", or with a space after a line ending in ":".
func Fold(s string) string {
	var b strings.Builder
	prev := ""
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l == "" || l == prev {
			continue
		}
		switch {
		case b.Len() == 0:
		case strings.HasSuffix(prev, ":"):
			b.WriteString(" ")
		default:
			b.WriteString("; ")
		}
		b.WriteString(l)
		prev = l
	}
	return b.String()
}
