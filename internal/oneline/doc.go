// Package oneline folds multi-line messages onto one line, for the CLI's
// "drover: MESSAGE" lines and for log values.
package oneline
