//go:build !race

package convoy_test

const raceEnabled = false
