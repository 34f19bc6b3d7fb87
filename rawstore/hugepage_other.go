//go:build !linux

package rawstore

func adviseHuge([]byte) {}
