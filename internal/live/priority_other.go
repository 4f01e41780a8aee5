//go:build !linux

package live

// lowerPriority does nothing outside Linux, where setpriority(2) takes a
// process, not a thread: encoders run at the process's priority.
func lowerPriority() error { return nil }
