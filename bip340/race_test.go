//go:build race

package bip340

const raceEnabled = true
