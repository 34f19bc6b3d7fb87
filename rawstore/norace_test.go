//go:build !race

package rawstore_test

const raceEnabled = false
