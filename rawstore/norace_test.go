//go:build !race

package rawstore

const raceEnabled = false
