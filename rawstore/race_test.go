//go:build race

package rawstore

const raceEnabled = true
