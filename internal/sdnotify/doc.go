// Package sdnotify tells systemd about vigil's life (ready, alive,
// reloading, stopping) over $NOTIFY_SOCKET, without a dependency; with no
// socket every call is a no-op, so vigil runs the same outside systemd.
package sdnotify
