//go:build !linux

package decode

// canNice is false: only Linux sets nice values per thread.
const canNice = false

func setThreadNice(int) error { return nil }
