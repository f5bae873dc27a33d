package sdnotify

import (
	"syscall"
	"unsafe"
)

// monotonicUsec reads CLOCK_MONOTONIC, the clock systemd compares
// MONOTONIC_USEC against. Go's time package does not expose its monotonic
// reading, and x/sys is not a direct dependency, so this is the raw call.
func monotonicUsec() uint64 {
	const clockMonotonic = 1
	var ts syscall.Timespec
	_, _, errno := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockMonotonic, uintptr(unsafe.Pointer(&ts)), 0)
	if errno != 0 {
		return 0
	}
	return uint64(ts.Sec)*1e6 + uint64(ts.Nsec)/1e3
}
