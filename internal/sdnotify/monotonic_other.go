//go:build !linux

package sdnotify

// monotonicUsec is unknown off Linux, where systemd does not run anyway.
func monotonicUsec() uint64 { return 0 }
