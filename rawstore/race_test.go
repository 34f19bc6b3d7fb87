//go:build race

package rawstore_test

const raceEnabled = true
