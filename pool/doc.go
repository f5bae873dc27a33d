// Package pool reads the other vigils' /status so pages, diagnose and the
// recovery guard see the whole pool, tolerating peers that are slow, down
// or speaking garbage.
package pool
